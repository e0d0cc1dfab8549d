//! Packet capture: every datagram a device sends or receives, written to a
//! pcap file with Ethernet, IPv4 (or IPv6) and UDP headers around it, so
//! Wireshark and tshark decode it as RoCEv2 (InfiniBand over UDP port 4791).
//!
//! Turned on per process by `URDMA_PCAP=FILE` (a `%p` in FILE becomes the
//! process id, so several processes can capture at once); all devices of the
//! process write to that file. The file stops growing at
//! `URDMA_PCAP_LIMIT` bytes (default [`crate::config::DEFAULT_PCAP_LIMIT`]); the packets after
//! that are not written and the stop is logged once. Off, a capture point
//! costs one test of a value read once per process.
//!
//! The headers are rebuilt, not read off the wire: MAC addresses are
//! locally administered ones made from the IP address, TTL is 64 and the
//! UDP checksum is computed. A sent packet carries DF with identification
//! 0, as urdma's sockets send it; a received one carries the
//! identification and DF flag its ICRC was computed over (recovered from
//! the ICRC; 0 with DF if it does not check), so tools that check the ICRC
//! against the IP header find it valid. The source address and port are
//! those the socket reported.

use etherparse::{IpHeaders, IpNumber, Ipv4Header, PacketBuilder};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};
use urdma_wire::Ipv4Ident;

/// A pcap file being written.
pub struct Capture {
    inner: Mutex<Inner>,
    limit: u64,
}

struct Inner {
    writer: Option<BufWriter<File>>,
    written: u64,
}

/// Bytes a record takes in the file besides the frame: the record header.
const RECORD_HEADER: u64 = 16;
/// Largest frame recorded whole (the file header's snapshot length).
const SNAPLEN: u32 = 65535;
/// pcap link type of Ethernet frames.
const LINKTYPE_ETHERNET: u32 = 1;

/// The pcap file header: microsecond timestamps, version 2.4, Ethernet.
fn file_header() -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&0xA1B2_C3D4u32.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
    h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
    h
}

/// A record header: the time and the frame's length.
fn record_header(ts: std::time::Duration, len: usize) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&(ts.as_secs() as u32).to_le_bytes());
    h[4..8].copy_from_slice(&ts.subsec_micros().to_le_bytes());
    h[8..12].copy_from_slice(&(len as u32).to_le_bytes());
    h[12..16].copy_from_slice(&(len as u32).to_le_bytes());
    h
}

impl Capture {
    /// Create (truncate) `path` and write the pcap file header; the file
    /// holds at most `limit` bytes.
    pub fn create(path: &std::path::Path, limit: u64) -> std::io::Result<Capture> {
        Self::to_file(File::create(path)?, limit)
    }

    /// Write a capture to an open, empty `file` (one a driver opened and
    /// passed to the NIC agent); the file holds at most `limit` bytes.
    pub fn to_file(file: File, limit: u64) -> std::io::Result<Capture> {
        let mut writer = BufWriter::new(file);
        writer.write_all(&file_header())?;
        Ok(Capture {
            inner: Mutex::new(Inner {
                writer: Some(writer),
                written: 24,
            }),
            limit,
        })
    }

    /// Record one UDP datagram from `src` to `dst` (the UDP payload, BTH
    /// through ICRC).
    pub fn record(&self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
        self.record_with(src, dst, payload, Ipv4Ident::SENT)
    }

    /// Record a datagram received from `src`, with the IPv4 identification
    /// and DF flag its ICRC covers.
    pub fn record_received(&self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
        let ctx = urdma_wire::IcrcContext::new(src, dst);
        let ident = urdma_wire::check_icrc_any_ident(payload, &ctx)
            .ok()
            .flatten()
            .unwrap_or(Ipv4Ident::SENT);
        self.record_with(src, dst, payload, ident)
    }

    /// Record a datagram between devices of this NIC (internal
    /// loopback), which may carry no ICRC: it is written with the ICRC it
    /// would have on a link, for urdma's identification (0, DF).
    pub fn record_internal(&self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
        let mut sealed = payload.to_vec();
        let ctx = urdma_wire::IcrcContext::new(src, dst);
        if urdma_wire::reseal(&mut sealed, &ctx).is_err() {
            return self.record(src, dst, payload);
        }
        self.record_with(src, dst, &sealed, Ipv4Ident::SENT)
    }

    fn record_with(&self, src: SocketAddr, dst: SocketAddr, payload: &[u8], ident: Ipv4Ident) {
        let Some(frame) = frame(src, dst, payload, ident) else {
            return;
        };
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let size = RECORD_HEADER + frame.len() as u64;
        let full = g.written + size > self.limit;
        let Some(w) = g.writer.as_mut() else {
            return;
        };
        let result = if full {
            tracing::warn!(
                limit = self.limit,
                "packet capture full: later packets not written"
            );
            w.flush().and(Err(std::io::ErrorKind::FileTooLarge.into()))
        } else {
            w.write_all(&record_header(ts, frame.len()))
                .and_then(|()| w.write_all(&frame))
        };
        match result {
            Ok(()) => g.written += size,
            Err(e) => {
                if !full {
                    tracing::warn!(error = %e, "packet capture stopped");
                }
                g.writer = None;
            }
        }
    }

    /// Write buffered records to the file.
    pub fn flush(&self) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = g.writer.as_mut() {
            let _ = w.flush();
        }
    }
}

/// A locally administered MAC address made from an IP address.
fn mac_of(ip: IpAddr) -> [u8; 6] {
    let b = match ip {
        IpAddr::V4(v4) => v4.octets(),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    [0x02, 0x00, b[0], b[1], b[2], b[3]]
}

/// An Ethernet frame carrying `payload` in UDP from `src` to `dst`, with
/// IPv4 identification and DF from `ident` (IPv6 has neither); None
/// when the addresses are of different families or the payload cannot be
/// carried in one IP packet.
pub fn frame(
    src: SocketAddr,
    dst: SocketAddr,
    payload: &[u8],
    ident: Ipv4Ident,
) -> Option<Vec<u8>> {
    let eth = PacketBuilder::ethernet2(mac_of(src.ip()), mac_of(dst.ip()));
    let ip = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut h = Ipv4Header::new(0, 64, IpNumber::UDP, s.octets(), d.octets()).ok()?;
            h.identification = ident.identification;
            h.dont_fragment = ident.dont_fragment;
            eth.ip(IpHeaders::Ipv4(h, Default::default()))
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => eth.ipv6(s.octets(), d.octets(), 64),
        _ => return None,
    };
    let udp = ip.udp(src.port(), dst.port());
    let mut out = Vec::with_capacity(udp.size(payload.len()));
    udp.write(&mut out, payload).ok()?;
    Some(out)
}

/// The captures a device's traffic goes to: the process's own
/// (`URDMA_PCAP`, [`global`]) and those attached to the device (by the
/// shared NIC's drivers, [`crate::proto::Request::Capture`]).
#[derive(Default)]
pub struct Captures(Mutex<Vec<Arc<Capture>>>);

impl Captures {
    /// Run `f` on every capture.
    pub fn each(&self, f: impl Fn(&Capture)) {
        if let Some(cap) = global() {
            f(cap);
        }
        for cap in self.0.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            f(cap);
        }
    }

    /// Capture into `cap` too, until detached.
    pub fn attach(&self, cap: Arc<Capture>) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(cap);
    }

    /// Stop capturing into `cap` (flushing it).
    pub fn detach(&self, cap: &Arc<Capture>) {
        cap.flush();
        (self.0.lock().unwrap_or_else(|e| e.into_inner())).retain(|c| !Arc::ptr_eq(c, cap));
    }
}

/// The capture of the NICs inside this process, opened on first use from
/// `URDMA_PCAP`. (A program on the shared NIC asks the agent instead:
/// see [`crate::proto::Request::Capture`].)
pub fn global() -> Option<&'static Capture> {
    static CAPTURE: OnceLock<Option<Capture>> = OnceLock::new();
    CAPTURE
        .get_or_init(|| {
            let (path, limit) = crate::config::pcap_requested()?;
            match Capture::create(path.as_ref(), limit) {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!(%path, error = %e, "cannot create the packet capture");
                    None
                }
            }
        })
        .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcap::PcapReader;

    #[test]
    fn frames_are_ethernet_ipv4_udp_with_df_and_checksums() {
        let src: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let f = frame(src, dst, &[0xAB; 30], Ipv4Ident::SENT).unwrap();
        assert_eq!(f.len(), 14 + 20 + 8 + 30);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        let ip = &f[14..34];
        assert_eq!(ip[0], 0x45);
        assert_eq!(&ip[4..8], &[0, 0, 0x40, 0], "identification 0, DF");
        assert_eq!(ip[9], 17);
        assert_eq!(
            urdma_wire::ipv4_header_sum(ip.try_into().unwrap()),
            0xFFFF,
            "valid header checksum"
        );
        assert_eq!(&f[34..36], &4791u16.to_be_bytes());
        assert_eq!(&f[38..40], &38u16.to_be_bytes());
        assert!(frame(src, "[::1]:4791".parse().unwrap(), &[], Ipv4Ident::SENT).is_none());
        let g = frame(
            src,
            dst,
            &[0; 8],
            Ipv4Ident {
                identification: 0xf8de,
                dont_fragment: false,
            },
        )
        .unwrap();
        assert_eq!(
            &g[18..22],
            &[0xf8, 0xde, 0, 0],
            "the sender's identification, no DF"
        );
    }

    #[test]
    fn capture_file_reads_back_and_stops_at_its_limit() {
        let path = std::env::temp_dir().join(format!("urdma-cap-{}.pcap", std::process::id()));
        let frame_len = 14 + 20 + 8 + 100;
        // Room for the file header and exactly two records.
        let limit = 24 + 2 * (16 + frame_len as u64);
        let cap = Capture::create(&path, limit).unwrap();
        let (a, b): (SocketAddr, SocketAddr) = (
            "169.254.1.1:4791".parse().unwrap(),
            "169.254.1.2:4791".parse().unwrap(),
        );
        for i in 0..5u8 {
            cap.record(a, b, &[i; 100]);
        }
        cap.flush();
        let mut r = PcapReader::new(File::open(&path).unwrap()).unwrap();
        let mut n = 0;
        while let Some(p) = r.next_packet() {
            let p = p.unwrap();
            assert_eq!(p.data.len(), frame_len);
            assert_eq!(p.data[frame_len - 1], n);
            n += 1;
        }
        assert_eq!(n, 2);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), limit);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn internal_packets_are_written_with_their_icrc() {
        use urdma_wire::{Bth, Opcode, PacketRepr};
        let path = std::env::temp_dir().join(format!("urdma-cap-int-{}.pcap", std::process::id()));
        let cap = Capture::create(&path, 1 << 20).unwrap();
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:4791".parse().unwrap(),
            "127.0.0.2:4791".parse().unwrap(),
        );
        let repr = PacketRepr::new(Bth::new(Opcode::RcSendOnly, 0x12, 7));
        let mut unsealed = Vec::new();
        urdma_wire::emit_headers(&repr, 5, &mut unsealed).unwrap();
        unsealed.extend_from_slice(b"hello");
        urdma_wire::close_unsealed(&mut unsealed).unwrap();
        let ctx = urdma_wire::IcrcContext::new(a, b);
        assert!(
            urdma_wire::check_icrc(&unsealed, &ctx).is_err(),
            "no ICRC yet"
        );
        cap.record_internal(a, b, &unsealed);
        cap.flush();
        let mut r = PcapReader::new(File::open(&path).unwrap()).unwrap();
        let p = r.next_packet().unwrap().unwrap();
        let datagram = &p.data[14 + 20 + 8..];
        assert_eq!(datagram.len(), unsealed.len());
        assert!(
            urdma_wire::check_icrc(datagram, &ctx).is_ok(),
            "the ICRC a link would carry"
        );
        assert!(r.next_packet().is_none());
        std::fs::remove_file(&path).unwrap();
    }
}

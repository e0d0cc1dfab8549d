//! Datagram I/O with few system calls: `recvmmsg` with UDP GRO (the
//! kernel hands over runs of same-size datagrams from one sender as one
//! buffer) and `sendmmsg` with UDP GSO (one buffer of same-size datagrams
//! for one destination, cut by the kernel).

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};

/// Datagrams (or GRO runs of datagrams) taken per call.
pub const BATCH: usize = 32;
/// Buffer per receive: a GRO run of up to 64 KiB. A single datagram
/// longer than this is reported truncated and dropped.
pub const SLOT: usize = 65536;
/// Control buffer per receive: room for the `UDP_GRO` message.
const CONTROL: usize = 64;

/// Buffers and headers for one `recvmmsg` call.
pub struct RecvBatch {
    bufs: Vec<u8>,
    controls: Vec<u64>,
    addrs: Vec<libc::sockaddr_storage>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    count: usize,
}

// SAFETY: the raw pointers inside iovs/hdrs point into this struct's own
// heap buffers and are only used by the thread that owns the batch.
unsafe impl Send for RecvBatch {}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::new()
    }
}

/// The ECN bits of the IPv4 TOS byte or IPv6 traffic class.
const ECN_MASK: u8 = 0x03;
/// ECN "ECN-capable transport" codepoint ECT(0).
pub const ECN_ECT0: u8 = 0x02;
/// ECN "congestion experienced" codepoint.
const ECN_CE: u8 = 0x03;

/// Set an integer socket option.
pub fn set_int_option(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: setsockopt reads sizeof(c_int) bytes from &v, a live local.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Ask the kernel to coalesce received datagrams (`UDP_GRO`). Returns
/// whether it agreed.
pub fn enable_gro(fd: RawFd) -> bool {
    set_int_option(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok()
}

/// Send every datagram ECN-capable (ECT(0)), so that a congested router
/// may mark it instead of dropping it, and report the marks of received
/// ones. Returns whether the kernel took both.
pub fn enable_ecn(fd: RawFd, ipv6: bool) -> bool {
    let ect = libc::c_int::from(ECN_ECT0);
    if ipv6 {
        set_int_option(fd, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, ect)
            .and_then(|()| set_int_option(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1))
            .is_ok()
    } else {
        set_int_option(fd, libc::IPPROTO_IP, libc::IP_TOS, ect)
            .and_then(|()| set_int_option(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1))
            .is_ok()
    }
}

impl RecvBatch {
    /// Allocate the buffers.
    pub fn new() -> Self {
        // SAFETY: sockaddr_storage and mmsghdr are plain C structs for
        // which all-zero bytes are a valid value.
        let zero_addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let zero_hdr: libc::mmsghdr = unsafe { std::mem::zeroed() };
        RecvBatch {
            bufs: vec![0u8; BATCH * SLOT],
            controls: vec![0u64; BATCH * CONTROL / 8],
            addrs: vec![zero_addr; BATCH],
            iovs: vec![
                libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0
                };
                BATCH
            ],
            hdrs: vec![zero_hdr; BATCH],
            count: 0,
        }
    }

    /// Receive up to [`BATCH`] datagrams (or GRO runs) from `fd` without
    /// blocking.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        self.count = 0;
        let base = self.bufs.as_mut_ptr();
        let control = self.controls.as_mut_ptr().cast::<u8>();
        for i in 0..BATCH {
            // SAFETY: i * SLOT + SLOT <= bufs.len(), so the slot is in bounds.
            self.iovs[i].iov_base = unsafe { base.add(i * SLOT) }.cast();
            self.iovs[i].iov_len = SLOT;
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            // SAFETY: i * CONTROL + CONTROL <= controls' byte length.
            h.msg_control = unsafe { control.add(i * CONTROL) }.cast();
            h.msg_controllen = CONTROL as _;
            h.msg_flags = 0;
            self.hdrs[i].msg_len = 0;
        }
        // SAFETY: every header points at live buffers of this struct sized
        // as declared; the kernel writes at most that much into each.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        self.count = n as usize;
        Ok(self.count)
    }

    /// What the control messages of receive `i` say: the segment size of
    /// a GRO run, if the kernel coalesced one, and whether the IP header
    /// carried the ECN "congestion experienced" mark.
    fn control(&self, i: usize) -> (Option<usize>, bool) {
        let h = &self.hdrs[i].msg_hdr;
        let (mut gro, mut ce) = (None, false);
        // SAFETY: the kernel filled msg_control with msg_controllen bytes
        // of well-formed control messages; the CMSG macros stay inside
        // them, and each read is of the type its message holds (a c_int
        // for UDP_GRO and IPV6_TCLASS, a byte for IP_TOS).
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                let data = libc::CMSG_DATA(c);
                match ((*c).cmsg_level, (*c).cmsg_type) {
                    (libc::SOL_UDP, libc::UDP_GRO) => {
                        let v = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                        gro = usize::try_from(v).ok().filter(|&v| v > 0);
                    }
                    (libc::IPPROTO_IP, libc::IP_TOS) => ce = *data & ECN_MASK == ECN_CE,
                    (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                        let v = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                        ce = v & libc::c_int::from(ECN_MASK) == libc::c_int::from(ECN_CE);
                    }
                    _ => {}
                }
                c = libc::CMSG_NXTHDR(h, c);
            }
        }
        (gro, ce)
    }

    /// The datagrams of the last call, a GRO run cut back into the
    /// datagrams it was made of: source, bytes and whether they came
    /// marked "congestion experienced". Truncated datagrams come back with
    /// `None` as their bytes.
    pub fn iter(&self) -> impl Iterator<Item = (Option<SocketAddr>, Option<&[u8]>, bool)> + '_ {
        (0..self.count).flat_map(move |i| {
            let h = &self.hdrs[i];
            let len = (h.msg_len as usize).min(SLOT);
            let data = if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                None
            } else {
                self.bufs.get(i * SLOT..i * SLOT + len)
            };
            // SAFETY: the kernel filled addrs[i] with msg_namelen valid bytes.
            let addr = unsafe { socket2::SockAddr::new(self.addrs[i], h.msg_hdr.msg_namelen) };
            let src = addr.as_socket();
            let (gro, ce) = self.control(i);
            let step = gro.unwrap_or(SLOT).max(1);
            let (run, single) = match data {
                Some(d) if !d.is_empty() => (Some(d.chunks(step)), None),
                other => (None, Some(other)),
            };
            run.into_iter()
                .flatten()
                .map(Some)
                .chain(single)
                .map(move |p| (src, p, ce))
        })
    }
}

/// Wait until `fd` is readable or `timeout` passes (None: forever), with
/// nanosecond resolution. Returns whether it is readable.
pub fn wait_readable(fd: RawFd, timeout: Option<std::time::Duration>) -> io::Result<bool> {
    Ok(wait_any(&[fd], timeout)? != 0)
}

/// Wait until one of `fds` (at most 32) is readable or `timeout` passes
/// (None: forever): bit i of the answer is set when `fds[i]` is readable;
/// 0 when the time ran out or a signal came.
pub fn wait_any(fds: &[RawFd], timeout: Option<std::time::Duration>) -> io::Result<u32> {
    const MAX: usize = 32;
    if fds.len() > MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "at most 32 descriptors",
        ));
    }
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; MAX];
    for (p, &fd) in pfds.iter_mut().zip(fds) {
        p.fd = fd;
        p.events = libc::POLLIN;
    }
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: pfds and the timespec live across the call, which reads and
    // writes only the first fds.len() entries.
    let n = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(pfds[..fds.len()]
        .iter()
        .enumerate()
        .filter(|(_, p)| p.revents != 0)
        .fold(0, |m, (i, _)| m | 1 << i))
}

/// Messages sent per `sendmmsg` call.
pub const SEND_BATCH: usize = 64;
/// Datagrams per GSO send at most (the kernel's `UDP_MAX_SEGMENTS`).
const MAX_SEGMENTS: usize = 64;
/// Bytes per GSO send at most: one IP packet's worth of payload.
const MAX_GSO_BYTES: usize = 65000;

/// Whether sends use UDP GSO: as `URDMA_GSO` says (on unless `0`), and
/// off for good once the kernel refuses it.
static GSO: AtomicBool = AtomicBool::new(true);

/// Whether sends use UDP GSO now.
fn gso_on() -> bool {
    static CONFIGURED: std::sync::Once = std::sync::Once::new();
    CONFIGURED.call_once(|| {
        if std::env::var("URDMA_GSO").is_ok_and(|v| v == "0") {
            GSO.store(false, Ordering::Relaxed);
        }
    });
    GSO.load(Ordering::Relaxed)
}

/// A run of datagrams sent as one message: `items[start..start + count]`,
/// cut by the kernel every `segment` bytes when `count > 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    start: usize,
    count: usize,
    segment: usize,
}

/// Runs of consecutive datagrams to one destination, all of the first
/// one's size but the last, which may be shorter: what one GSO send
/// carries.
fn runs(items: &[crate::engine::Transmit], gso: bool) -> Vec<Run> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < items.len() {
        let (dst, segment) = (items[i].dst, items[i].data.len());
        let (mut count, mut total) = (1, segment);
        while gso && segment > 0 && count < MAX_SEGMENTS {
            let Some(t) = items.get(i + count) else {
                break;
            };
            let len = t.data.len();
            if t.dst != dst || len == 0 || len > segment || total + len > MAX_GSO_BYTES {
                break;
            }
            total += len;
            count += 1;
            if len < segment {
                break;
            }
        }
        out.push(Run {
            start: i,
            count,
            segment,
        });
        i += count;
    }
    out
}

/// Give the datagrams of an IPv4 run the ICRCs their segments need: the
/// kernel gives the segments of one GSO send consecutive identifications
/// from 0 (DF, unconnected socket), which the ICRC covers. Applied twice,
/// it undoes itself.
fn identify_segments(items: &mut [crate::engine::Transmit], run: Run) {
    if run.count < 2 || !items[run.start].dst.is_ipv4() {
        return;
    }
    for k in 1..run.count {
        let ident = urdma_wire::Ipv4Ident {
            identification: k as u16,
            dont_fragment: true,
        };
        // Every datagram the engine built holds a BTH and an ICRC.
        let _ = urdma_wire::set_ipv4_ident(&mut items[run.start + k].data, ident);
    }
}

/// Send datagrams with as few system calls as possible (`sendmmsg`, and
/// UDP GSO for runs of same-size datagrams to one destination). Returns
/// how many could not be sent.
pub fn send_all(fd: RawFd, items: &mut [crate::engine::Transmit]) -> usize {
    let all = runs(items, gso_on());
    for &r in &all {
        identify_segments(items, r);
    }
    let mut failed = 0;
    let mut refused = Vec::new();
    for chunk in all.chunks(SEND_BATCH) {
        let (f, r) = send_runs(fd, items, chunk);
        failed += f;
        refused.extend(r);
    }
    // Runs the kernel would not segment: their datagrams leave one by one
    // with the ICRCs of unsegmented sends. If those go, the kernel refused
    // GSO itself (not the destination): it goes off for good.
    for r in refused {
        identify_segments(items, r);
        let singles: Vec<Run> = (r.start..r.start + r.count)
            .map(|i| Run {
                start: i,
                count: 1,
                segment: items[i].data.len(),
            })
            .collect();
        let mut singles_failed = 0;
        for chunk in singles.chunks(SEND_BATCH) {
            singles_failed += send_runs(fd, items, chunk).0;
        }
        failed += singles_failed;
        if singles_failed == 0 && GSO.swap(false, Ordering::Relaxed) {
            tracing::warn!("UDP GSO refused by the kernel; sending datagrams one by one");
        }
    }
    failed
}

/// One `sendmmsg` pass over `runs` (each a message). Returns the datagrams
/// that failed and the GSO runs the kernel refused as such.
fn send_runs(fd: RawFd, items: &[crate::engine::Transmit], runs: &[Run]) -> (usize, Vec<Run>) {
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as usize;
    let addrs: Vec<socket2::SockAddr> = runs
        .iter()
        .map(|r| socket2::SockAddr::from(items[r.start].dst))
        .collect();
    let mut iovs: Vec<libc::iovec> = runs
        .iter()
        .flat_map(|r| &items[r.start..r.start + r.count])
        .map(|t| libc::iovec {
            iov_base: t.data.as_ptr() as *mut libc::c_void,
            iov_len: t.data.len(),
        })
        .collect();
    let mut controls = vec![0u64; runs.len() * space.div_ceil(8)];
    // SAFETY: mmsghdr is a plain C struct; all-zero is a valid value.
    let mut hdrs: Vec<libc::mmsghdr> = (0..runs.len())
        .map(|_| unsafe { std::mem::zeroed() })
        .collect();
    let mut iov_at = 0;
    for (i, (h, r)) in hdrs.iter_mut().zip(runs).enumerate() {
        let m = &mut h.msg_hdr;
        m.msg_name = addrs[i].as_ptr() as *mut libc::c_void;
        m.msg_namelen = addrs[i].len();
        m.msg_iov = &mut iovs[iov_at];
        m.msg_iovlen = r.count as _;
        iov_at += r.count;
        if r.count > 1 {
            // SAFETY: the control area of message i is `space` bytes of
            // `controls`, room for one cmsghdr with a u16; CMSG_FIRSTHDR
            // returns its start and CMSG_DATA the data within it.
            unsafe {
                m.msg_control = controls
                    .as_mut_ptr()
                    .cast::<u8>()
                    .add(i * space.div_ceil(8) * 8)
                    .cast();
                m.msg_controllen = space as _;
                let c = libc::CMSG_FIRSTHDR(m);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = libc::UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), r.segment as u16);
            }
        }
    }
    let (mut failed, mut refused) = (0, Vec::new());
    let mut sent = 0;
    while sent < hdrs.len() {
        // SAFETY: the headers point at addrs, iovs, controls and the
        // callers' datagrams, all alive for this call; the kernel only
        // reads them.
        let n = unsafe {
            libc::sendmmsg(
                fd,
                hdrs[sent..].as_mut_ptr(),
                (hdrs.len() - sent) as libc::c_uint,
                0,
            )
        };
        if n > 0 {
            sent += n as usize;
            continue;
        }
        // Skip the message that failed (e.g. no buffer space) and go on.
        let err = io::Error::last_os_error().raw_os_error();
        let r = runs[sent];
        let gso_refused = matches!(
            err,
            Some(libc::EIO) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP)
        );
        if r.count > 1 && gso_refused {
            refused.push(r);
        } else {
            failed += r.count;
        }
        sent += 1;
    }
    (failed, refused)
}

/// Feed `items` to `handle` in parts of at most `part` items (at least
/// one part, empty if there are no items), passing `state` through
/// `between` after each part that more items follow: a receive thread
/// handles a batch a part at a time and sends what each part called for
/// before it goes on.
pub fn in_parts<I: Iterator, S>(
    mut state: S,
    items: I,
    part: usize,
    mut handle: impl FnMut(&mut S, std::iter::Take<&mut std::iter::Peekable<I>>),
    mut between: impl FnMut(S) -> S,
) -> S {
    let mut items = items.peekable();
    loop {
        handle(&mut state, items.by_ref().take(part.max(1)));
        if items.peek().is_none() {
            return state;
        }
        state = between(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Transmit;

    fn t(dst: &str, len: usize) -> Transmit {
        Transmit::new(dst.parse().unwrap(), vec![0; len])
    }

    #[test]
    fn runs_group_same_size_datagrams_to_one_destination() {
        let a = "127.0.0.2:4791";
        let b = "127.0.0.3:4791";
        let items = vec![
            t(a, 100),
            t(a, 100),
            t(a, 60),
            t(a, 100),
            t(b, 100),
            t(b, 120),
        ];
        let r = runs(&items, true);
        let seen: Vec<(usize, usize, usize)> =
            r.iter().map(|r| (r.start, r.count, r.segment)).collect();
        assert_eq!(
            seen,
            vec![(0, 3, 100), (3, 1, 100), (4, 1, 100), (5, 1, 120)]
        );
        assert!(runs(&items, false).iter().all(|r| r.count == 1));
    }

    /// A datagram of `len` bytes with the ICRC of an unsegmented send.
    fn roce(src: SocketAddr, dst: SocketAddr, len: usize, seed: u8) -> Transmit {
        let mut data: Vec<u8> = (0..len - 4).map(|i| (i as u8).wrapping_mul(seed)).collect();
        let ctx = urdma_wire::IcrcContext::new(src, dst);
        let icrc = urdma_wire::compute_icrc(&data, &ctx).unwrap();
        data.extend_from_slice(&icrc.to_le_bytes());
        Transmit::new(dst, data)
    }

    fn socket(addr: &str, gro: bool) -> std::net::UdpSocket {
        let s = std::net::UdpSocket::bind(addr).unwrap();
        if gro {
            use std::os::fd::AsRawFd;
            assert!(enable_gro(s.as_raw_fd()));
        }
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        s
    }

    /// What a receiver of `n` same-size datagrams sent as one run sees:
    /// each datagram's identification as its ICRC tells.
    fn send_run_and_receive(n: usize, gro: bool) -> Vec<Option<urdma_wire::Ipv4Ident>> {
        use std::os::fd::AsRawFd;
        let rx = socket("127.0.0.1:0", gro);
        let tx = socket("127.0.0.1:0", false);
        let (src, dst) = (tx.local_addr().unwrap(), rx.local_addr().unwrap());
        let mut items: Vec<Transmit> = (0..n).map(|i| roce(src, dst, 1024, i as u8 + 3)).collect();
        assert_eq!(send_all(tx.as_raw_fd(), &mut items), 0);
        let mut batch = RecvBatch::new();
        let mut got = Vec::new();
        let ctx = urdma_wire::IcrcContext::new(src, dst);
        while got.len() < n {
            assert!(
                wait_readable(rx.as_raw_fd(), Some(std::time::Duration::from_secs(5))).unwrap()
            );
            batch.recv(rx.as_raw_fd()).unwrap();
            for (from, data, ce) in batch.iter() {
                assert_eq!(from, Some(src));
                assert!(!ce, "no router marks loopback traffic");
                let data = data.expect("not truncated");
                assert_eq!(data.len(), 1024);
                got.push(urdma_wire::check_icrc_any_ident(data, &ctx).ok().flatten());
            }
        }
        got
    }

    #[test]
    fn gso_segments_carry_consecutive_identifications() {
        // Cut by the kernel for a receiver without GRO, and handed whole to
        // one with GRO: either way each datagram's ICRC holds with the
        // identification the kernel gave its segment.
        for gro in [false, true] {
            let idents = send_run_and_receive(5, gro);
            let want: Vec<_> = (0..5u16)
                .map(|k| {
                    Some(urdma_wire::Ipv4Ident {
                        identification: k,
                        dont_fragment: true,
                    })
                })
                .collect();
            assert_eq!(idents, want, "gro {gro}");
        }
    }

    #[test]
    fn runs_stay_within_the_kernel_limits() {
        let items: Vec<Transmit> = (0..200).map(|_| t("127.0.0.2:4791", 1000)).collect();
        let r = runs(&items, true);
        assert!(r
            .iter()
            .all(|r| r.count <= MAX_SEGMENTS && r.count * 1000 <= MAX_GSO_BYTES));
        assert_eq!(r.iter().map(|r| r.count).sum::<usize>(), 200);
    }

    #[test]
    fn a_batch_is_handled_in_parts_with_a_step_between_each_two() {
        let (parts, steps) = in_parts(
            (Vec::new(), 0),
            0..10,
            4,
            |(parts, _), part| parts.push(part.collect::<Vec<_>>()),
            |(parts, steps)| (parts, steps + 1),
        );
        assert_eq!(parts, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]);
        assert_eq!(steps, 2);
        let (parts, steps) = in_parts(
            (Vec::new(), 0),
            0..8,
            4,
            |(parts, _), part| parts.push(part.collect::<Vec<_>>()),
            |(parts, steps)| (parts, steps + 1),
        );
        assert_eq!(parts.len(), 2);
        assert_eq!(steps, 1);
        let (parts, steps) = in_parts(
            (Vec::new(), 0),
            std::iter::empty::<u8>(),
            4,
            |(parts, _), part| parts.push(part.collect::<Vec<_>>()),
            |(parts, steps)| (parts, steps + 1),
        );
        assert_eq!(parts, vec![Vec::<u8>::new()]);
        assert_eq!(steps, 0);
    }
}

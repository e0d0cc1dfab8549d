//! The kernel driver's channel: a NIC file (`/dev/urdma`) attached to the
//! kernel device bound to the device's network interface
//! (`URDMA_IOC_ATTACH`, see `kernel/urdma_abi.h`). Through it the NIC
//! serves the kernel's own QPs: the kernel writes their work requests as
//! messages, the NIC carries them out and writes back completions and the
//! datagrams it received for them.
//!
//! QP 1 (the GSI QP of the kernel's MAD layer and connection manager) is
//! served here: [`crate::engine::Engine::send_gsi`] sends its datagrams,
//! and datagrams for QP 1 that the device's own CM does not claim come to
//! it ([`crate::engine::Engine::set_kernel_gsi`]). The kernel's RC QPs and
//! MRs are served by [`kernel_rc`].

pub use super::kernel_msg::BadMessage;
use super::kernel_msg::{gid_at, header, put, u16_at, u32_at, u64_at};
use super::kernel_rc::{self, KernelQps, KernelRc, RcMessage};
use crate::engine::{GsiDatagram, GsiSend};
use crate::fabric::udp::UdpDriver;
use crate::types::WcStatus;
use crate::verbs::Gid;
use std::fs::File;
use std::io::{self, Read, Write};
use std::mem::{offset_of, size_of};
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;
use urdma_abi as abi;
use urdma_abi::{urdma_msg_hdr, urdma_msg_send_done, urdma_msg_ud_recv, urdma_msg_ud_send};

/// Message types (`enum urdma_msg_type`).
const MSG_UD_SEND: u16 = abi::URDMA_MSG_UD_SEND as u16;
const MSG_SEND_DONE: u16 = abi::URDMA_MSG_SEND_DONE as u16;
const MSG_UD_RECV: u16 = abi::URDMA_MSG_UD_RECV as u16;
/// Lengths of the fixed parts (`struct urdma_msg_*`).
const HDR_LEN: usize = size_of::<urdma_msg_hdr>();
const UD_SEND_LEN: usize = size_of::<urdma_msg_ud_send>();
const SEND_DONE_LEN: usize = size_of::<urdma_msg_send_done>();
const UD_RECV_LEN: usize = size_of::<urdma_msg_ud_recv>();
/// Datagram flags (`URDMA_MSG_F_*`).
const F_IMM: u16 = abi::URDMA_MSG_F_IMM as u16;
const F_SOLICITED: u16 = abi::URDMA_MSG_F_SOLICITED as u16;
/// The largest payload of a datagram.
const MAX_PAYLOAD: usize = abi::URDMA_MSG_MAX_PAYLOAD as usize;
/// `enum rdma_network_type`.
const RDMA_NETWORK_IPV4: u32 = 2;
const RDMA_NETWORK_IPV6: u32 = 3;
/// Bytes read at once: the kernel's largest write is far below.
const READ_BUF: usize = 256 << 10;
/// How often the reader looks at its stop flag.
const STOP_POLL: Duration = Duration::from_millis(200);

nix::ioctl_readwrite_bad!(ioc_attach, abi::URDMA_IOC_ATTACH, abi::urdma_attach);

/// A message of the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelMessage {
    /// A UD SEND of QP 1.
    UdSend(UdSend),
    /// About kernel RC QPs or MRs.
    Rc(RcMessage),
}

/// A kernel QP's UD SEND (`struct urdma_msg_ud_send`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdSend {
    /// The sending kernel QP.
    pub qpn: u32,
    /// The kernel's tag, answered in the completion.
    pub handle: u64,
    /// Source GID.
    pub sgid: Gid,
    /// Destination GID.
    pub dgid: Gid,
    /// Destination QP.
    pub dest_qpn: u32,
    /// Q_Key.
    pub qkey: u32,
    /// Immediate data.
    pub imm: Option<u32>,
    /// The solicited event bit.
    pub solicited: bool,
    /// The payload.
    pub payload: Vec<u8>,
}

/// Parse what one read returned: whole messages.
pub fn parse_messages(buf: &[u8]) -> Result<Vec<KernelMessage>, BadMessage> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let bad = |why| BadMessage::new(at, why);
        let m = &buf[at..];
        if m.len() < HDR_LEN {
            return Err(bad("truncated header"));
        }
        let kind = u16_at(m, offset_of!(urdma_msg_hdr, type_));
        let len = usize::from(u16_at(m, offset_of!(urdma_msg_hdr, len)));
        if len < HDR_LEN || len % 8 != 0 || len > m.len() {
            return Err(bad("bad length"));
        }
        if kind != MSG_UD_SEND {
            out.push(KernelMessage::Rc(kernel_rc::parse(kind, &m[..len], at)?));
            at += len;
            continue;
        }
        if len < UD_SEND_LEN {
            return Err(bad("short UD send"));
        }
        let plen = u32_at(m, offset_of!(urdma_msg_ud_send, length)) as usize;
        if plen > MAX_PAYLOAD || UD_SEND_LEN + plen > len {
            return Err(bad("bad payload length"));
        }
        let flags = u16_at(m, offset_of!(urdma_msg_ud_send, flags));
        // The kernel keeps immediate data in network order.
        let imm = u32::from_be(u32_at(m, offset_of!(urdma_msg_ud_send, imm)));
        out.push(KernelMessage::UdSend(UdSend {
            qpn: u32_at(m, offset_of!(urdma_msg_hdr, qpn)),
            handle: u64_at(m, offset_of!(urdma_msg_ud_send, handle)),
            sgid: gid_at(m, offset_of!(urdma_msg_ud_send, sgid)),
            dgid: gid_at(m, offset_of!(urdma_msg_ud_send, dgid)),
            dest_qpn: u32_at(m, offset_of!(urdma_msg_ud_send, dest_qpn)),
            qkey: u32_at(m, offset_of!(urdma_msg_ud_send, qkey)),
            imm: (flags & F_IMM != 0).then_some(imm),
            solicited: flags & F_SOLICITED != 0,
            payload: m[UD_SEND_LEN..UD_SEND_LEN + plen].to_vec(),
        }));
        at += len;
    }
    Ok(out)
}

/// `struct urdma_msg_send_done`: the sends of `qpn` up to `handle` are
/// done, `handle`'s with `status`.
pub fn send_done(qpn: u32, handle: u64, status: WcStatus) -> Vec<u8> {
    type M = urdma_msg_send_done;
    let mut m = header(MSG_SEND_DONE, SEND_DONE_LEN, qpn);
    put(&mut m, offset_of!(M, handle), &handle.to_ne_bytes());
    let status = status as u32;
    put(&mut m, offset_of!(M, status), &status.to_ne_bytes());
    m
}

/// `struct urdma_msg_ud_recv`: `d` for kernel QP `qpn`.
pub fn ud_recv(qpn: u32, d: &GsiDatagram) -> Vec<u8> {
    type M = urdma_msg_ud_recv;
    let len = (UD_RECV_LEN + d.payload.len()).next_multiple_of(8);
    let mut m = header(MSG_UD_RECV, len, qpn);
    put(&mut m, offset_of!(M, grh), &d.grh);
    put(&mut m, offset_of!(M, src_qpn), &d.src_qpn.to_ne_bytes());
    let net = if d.ipv6 {
        RDMA_NETWORK_IPV6
    } else {
        RDMA_NETWORK_IPV4
    };
    put(&mut m, offset_of!(M, network_hdr_type), &net.to_ne_bytes());
    let flags = if d.imm.is_some() { F_IMM } else { 0 } | if d.solicited { F_SOLICITED } else { 0 };
    put(&mut m, offset_of!(M, flags), &flags.to_ne_bytes());
    put(
        &mut m,
        offset_of!(M, imm),
        &d.imm.unwrap_or(0).to_be_bytes(),
    );
    let plen = d.payload.len() as u32;
    put(&mut m, offset_of!(M, length), &plen.to_ne_bytes());
    put(&mut m, offset_of!(M, qkey), &d.qkey.to_ne_bytes());
    put(&mut m, UD_RECV_LEN, &d.payload);
    m
}

/// The index of the network interface that holds `addr`, if any.
fn ifindex_of(addr: IpAddr) -> Option<u32> {
    if_addrs::get_if_addrs()
        .ok()?
        .into_iter()
        .find(|itf| itf.ip() == addr)
        .and_then(|itf| itf.index)
}

/// An attached channel; dropping it detaches (the kernel's QP 1 then has
/// no NIC: its sends fail).
pub struct KernelChannel {
    ibdev: String,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
    driver: Weak<UdpDriver>,
}

impl std::fmt::Debug for KernelChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelChannel")
            .field("ibdev", &self.ibdev)
            .finish()
    }
}

impl KernelChannel {
    /// Attach `driver`'s device to the kernel device on the interface
    /// that holds its address. `Ok(None)`: there is none to attach to (no
    /// module, no access, no urdma device on that interface, or another
    /// NIC serves it). The events of the kernel's QPs go through `events`.
    pub fn attach(
        driver: &Arc<UdpDriver>,
        events: Arc<KernelQps>,
    ) -> io::Result<Option<KernelChannel>> {
        let addr = driver.local().ip();
        let Some(ifindex) = ifindex_of(addr) else {
            return Ok(None);
        };
        let file = match File::options()
            .read(true)
            .write(true)
            .open(super::kernel::PATH)
        {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!(error = %e, "no kernel channel");
                return Ok(None);
            }
        };
        let mut cmd = abi::urdma_attach {
            ifindex,
            ..Default::default()
        };
        // SAFETY: the command is a live, fully initialised struct of the
        // layout the ioctl number encodes; the kernel reads and writes it.
        match unsafe { ioc_attach(file.as_raw_fd(), &mut cmd) } {
            Ok(_) => {}
            Err(nix::errno::Errno::ENODEV) => return Ok(None),
            Err(nix::errno::Errno::EBUSY) => {
                tracing::warn!(%addr, "the kernel device has another NIC");
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        }
        let name: Vec<u8> = cmd
            .ibdev
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        let ibdev = String::from_utf8_lossy(&name).into_owned();
        let file = Arc::new(file);
        let writer = file.clone();
        driver.set_kernel_gsi_sink(Some(Box::new(move |datagrams| {
            tracing::debug!(n = datagrams.len(), "datagrams for the kernel's QP 1");
            let msgs: Vec<u8> = datagrams
                .iter()
                .filter(|d| d.payload.len() <= MAX_PAYLOAD)
                .flat_map(|d| ud_recv(1, d))
                .collect();
            if let Err(e) = (&*writer).write_all(&msgs) {
                tracing::debug!(error = %e, "datagrams for the kernel's QP 1 lost");
            }
        })));
        driver.with_engine(|e, _| e.set_kernel_gsi(true));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (stop, driver) = (stop.clone(), Arc::downgrade(driver));
            std::thread::Builder::new()
                .name(format!("urdma-k-{ibdev}"))
                .spawn(move || {
                    serve(&file, &driver, &stop, events);
                    // Whatever ended the service, the channel closes
                    // (with the sink's handle): the kernel then fails the
                    // sends it had queued and takes the port down.
                    if let Some(d) = driver.upgrade() {
                        detach(&d);
                    }
                })?
        };
        tracing::info!(%addr, ibdev, "kernel device attached");
        Ok(Some(KernelChannel {
            ibdev,
            stop,
            reader: Some(reader),
            driver: Arc::downgrade(driver),
        }))
    }
}

impl Drop for KernelChannel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        if let Some(d) = self.driver.upgrade() {
            detach(&d);
        }
    }
}

/// Stop handing datagrams to the kernel (dropping the sink's handle).
fn detach(driver: &UdpDriver) {
    driver.set_kernel_gsi_sink(None);
    driver.with_engine(|e, _| e.set_kernel_gsi(false));
}

/// The reader: carry out what the kernel asks, and forward the
/// completions of its QPs, until told to stop or the kernel device goes
/// away. The kernel's QPs and MRs end with it.
fn serve(file: &Arc<File>, driver: &Weak<UdpDriver>, stop: &AtomicBool, events: Arc<KernelQps>) {
    let Ok((bell, ring)) = UnixDatagram::pair() else {
        tracing::warn!("no wake-up for kernel completions");
        return;
    };
    let _ = ring.set_nonblocking(true);
    let _ = bell.set_nonblocking(true);
    let wake: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        let _ = ring.send(&[1]);
    });
    let mut rc = KernelRc::new(file.clone(), wake, events);
    serve_with(file, driver, stop, &bell, &mut rc);
    if let Some(d) = driver.upgrade() {
        rc.close(&d);
    }
}

fn serve_with(
    file: &File,
    driver: &Weak<UdpDriver>,
    stop: &AtomicBool,
    bell: &UnixDatagram,
    rc: &mut KernelRc,
) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut buf = vec![0u8; READ_BUF];
    let timeout = PollTimeout::from(STOP_POLL.as_millis() as u16);
    while !stop.load(Ordering::Acquire) {
        let mut fds = [
            PollFd::new(file.as_fd(), PollFlags::POLLIN),
            PollFd::new(bell.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, timeout) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "kernel channel poll failed");
                return;
            }
        }
        let readable = fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP));
        while bell.recv(&mut [0u8; 64]).is_ok() {}
        let Some(driver) = driver.upgrade() else {
            return;
        };
        let mut out = Vec::new();
        if readable {
            let n = match (&*file).read(&mut buf) {
                Ok(0) => {
                    tracing::info!("the kernel device is gone");
                    return;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                Err(e) => {
                    tracing::warn!(error = %e, "kernel channel read failed");
                    return;
                }
            };
            let msgs = match parse_messages(&buf[..n]) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "kernel channel out of step");
                    return;
                }
            };
            for msg in msgs {
                match msg {
                    KernelMessage::UdSend(s) => {
                        out.extend(send_done(s.qpn, s.handle, carry_out(&driver, &s)))
                    }
                    KernelMessage::Rc(m) => out.extend(rc.handle(&driver, m)),
                }
            }
        }
        out.extend(rc.completions());
        if out.is_empty() {
            continue;
        }
        if let Err(e) = (&*file).write_all(&out) {
            tracing::warn!(error = %e, "kernel channel write failed");
            return;
        }
    }
}

/// Carry out one send: the status of its completion.
fn carry_out(driver: &UdpDriver, s: &UdSend) -> WcStatus {
    if s.qpn != 1 {
        return WcStatus::LocQpOpErr;
    }
    let send = GsiSend {
        src: s.sgid.to_ip(),
        dst: s.dgid.to_ip(),
        dest_qpn: s.dest_qpn,
        qkey: s.qkey,
        imm: s.imm,
        solicited: s.solicited,
        payload: &s.payload,
    };
    let status = match driver.with_engine(|e, now| e.send_gsi(now, &send)) {
        Ok(()) => WcStatus::Success,
        Err(status) => status,
    };
    tracing::debug!(to = %send.dst, qpn = s.dest_qpn, len = s.payload.len(), ?status, "kernel QP 1 send");
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ud_send_bytes(handle: u64, payload: &[u8], flags: u16) -> Vec<u8> {
        type M = urdma_msg_ud_send;
        let len = (UD_SEND_LEN + payload.len()).next_multiple_of(8);
        let mut m = header(MSG_UD_SEND, len, 1);
        let sgid = Gid::from_ip("169.254.0.1".parse().unwrap());
        let dgid = Gid::from_ip("169.254.0.2".parse().unwrap());
        put(&mut m, offset_of!(M, handle), &handle.to_ne_bytes());
        put(&mut m, offset_of!(M, sgid), &sgid.0);
        put(&mut m, offset_of!(M, dgid), &dgid.0);
        put(&mut m, offset_of!(M, dest_qpn), &1u32.to_ne_bytes());
        put(&mut m, offset_of!(M, qkey), &0x8001_0000u32.to_ne_bytes());
        m[offset_of!(M, hop_limit)] = 64;
        put(&mut m, offset_of!(M, flags), &flags.to_ne_bytes());
        put(&mut m, offset_of!(M, imm), &0xdead_beefu32.to_be_bytes());
        let plen = payload.len() as u32;
        put(&mut m, offset_of!(M, length), &plen.to_ne_bytes());
        put(&mut m, UD_SEND_LEN, payload);
        m
    }

    #[test]
    fn sends_done_have_the_module_layout() {
        let m = send_done(1, 7, WcStatus::GeneralErr);
        assert_eq!(m.len(), SEND_DONE_LEN);
        assert_eq!(u16_at(&m, 0), MSG_SEND_DONE);
        assert_eq!(u64_at(&m, offset_of!(urdma_msg_send_done, handle)), 7);
        let status = u32_at(&m, offset_of!(urdma_msg_send_done, status));
        assert_eq!(status, WcStatus::GeneralErr as u32);
    }

    #[test]
    fn ud_sends_parse_field_by_field() {
        let mut buf = ud_send_bytes(5, &[1, 2, 3], 0);
        buf.extend(ud_send_bytes(6, &[9; 256], F_IMM | F_SOLICITED));
        let s: Vec<UdSend> = parse_messages(&buf)
            .unwrap()
            .into_iter()
            .map(|m| match m {
                KernelMessage::UdSend(s) => s,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].qpn, s[0].handle, s[0].dest_qpn), (1, 5, 1));
        assert_eq!(s[0].qkey, 0x8001_0000);
        assert_eq!(s[0].sgid.to_ip(), "169.254.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(s[0].dgid.to_ip(), "169.254.0.2".parse::<IpAddr>().unwrap());
        assert_eq!((s[0].imm, s[0].solicited), (None, false));
        assert_eq!(s[0].payload, [1, 2, 3]);
        assert_eq!((s[1].imm, s[1].solicited), (Some(0xdead_beef), true));
        assert_eq!(s[1].payload.len(), 256);
    }

    #[test]
    fn malformed_messages_are_refused() {
        let good = ud_send_bytes(5, &[1, 2, 3], 0);
        assert!(parse_messages(&good[..good.len() - 8]).is_err());
        let mut bad_len = good.clone();
        bad_len[offset_of!(urdma_msg_hdr, len)] = 13;
        assert!(parse_messages(&bad_len).is_err());
        let mut bad_type = good.clone();
        bad_type[offset_of!(urdma_msg_hdr, type_)] = 9;
        assert!(parse_messages(&bad_type).is_err());
        let mut long_payload = good.clone();
        let length = offset_of!(urdma_msg_ud_send, length);
        put(&mut long_payload, length, &5000u32.to_ne_bytes());
        assert!(parse_messages(&long_payload).is_err());
        assert!(parse_messages(&good[..4]).is_err());
        assert_eq!(parse_messages(&[]).unwrap(), []);
    }

    #[test]
    fn datagrams_for_the_kernel_carry_their_grh() {
        let d = GsiDatagram {
            grh: [7; 40],
            ipv6: false,
            src_qpn: 1,
            qkey: 0x8001_0000,
            imm: None,
            solicited: false,
            payload: vec![0xaa; 256],
        };
        let m = ud_recv(1, &d);
        assert_eq!(m.len(), UD_RECV_LEN + 256);
        assert_eq!(u16_at(&m, 0), MSG_UD_RECV);
        assert_eq!(usize::from(u16_at(&m, 2)), m.len());
        type M = urdma_msg_ud_recv;
        assert_eq!(&m[offset_of!(M, grh)..][..40], &[7; 40]);
        assert_eq!(u32_at(&m, offset_of!(M, src_qpn)), 1);
        assert_eq!(
            u32_at(&m, offset_of!(M, network_hdr_type)),
            RDMA_NETWORK_IPV4
        );
        assert_eq!(u32_at(&m, offset_of!(M, length)), 256);
        assert_eq!(u32_at(&m, offset_of!(M, qkey)), 0x8001_0000);
        assert_eq!(&m[UD_RECV_LEN..], &[0xaa; 256]);
        let odd = ud_recv(
            1,
            &GsiDatagram {
                payload: vec![1; 3],
                ..d
            },
        );
        assert_eq!(odd.len(), 80);
    }
}

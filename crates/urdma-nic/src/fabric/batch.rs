//! Datagram I/O with few system calls: `recvmmsg` with UDP GRO (the
//! kernel hands over runs of same-size datagrams from one sender as one
//! buffer), socket options and readiness waits; the sending half
//! (`sendmmsg` with UDP GSO) is in `send`.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

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
            // A link-local source carries its scope, which a GID does not.
            let src = addr.as_socket().map(urdma_abi::netif::unscoped);
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

mod send;

pub use send::{in_parts, send_all, SEND_BATCH};

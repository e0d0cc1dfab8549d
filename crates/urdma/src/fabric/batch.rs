//! Receiving many datagrams with one system call (`recvmmsg`).

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

/// Datagrams taken per call.
pub const BATCH: usize = 32;
/// Buffer per datagram: the largest RoCE packet (4 KiB payload and
/// headers) fits; longer datagrams are reported truncated and dropped.
pub const SLOT: usize = 9216;

/// Buffers and headers for one `recvmmsg` call.
pub struct RecvBatch {
    bufs: Vec<u8>,
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

    /// Receive up to [`BATCH`] datagrams from `fd` without blocking.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        self.count = 0;
        let base = self.bufs.as_mut_ptr();
        for i in 0..BATCH {
            // SAFETY: i * SLOT + SLOT <= bufs.len(), so the slot is in bounds.
            self.iovs[i].iov_base = unsafe { base.add(i * SLOT) }.cast();
            self.iovs[i].iov_len = SLOT;
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
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

    /// The datagrams of the last call: source and bytes. Truncated
    /// datagrams come back with `None` as their bytes.
    pub fn iter(&self) -> impl Iterator<Item = (Option<SocketAddr>, Option<&[u8]>)> + '_ {
        (0..self.count).map(move |i| {
            let h = &self.hdrs[i];
            let len = (h.msg_len as usize).min(SLOT);
            let data = if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                None
            } else {
                self.bufs.get(i * SLOT..i * SLOT + len)
            };
            // SAFETY: the kernel filled addrs[i] with msg_namelen valid bytes.
            let addr = unsafe { socket2::SockAddr::new(self.addrs[i], h.msg_hdr.msg_namelen) };
            (addr.as_socket(), data)
        })
    }
}

/// Wait until `fd` is readable or `timeout` passes (None: forever), with
/// nanosecond resolution. Returns whether it is readable.
pub fn wait_readable(fd: RawFd, timeout: Option<std::time::Duration>) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: pfd and the timespec live across the call; one entry.
    let n = unsafe { libc::ppoll(&mut pfd, 1, tsp, std::ptr::null()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(n > 0)
}

/// Datagrams sent per `sendmmsg` call.
pub const SEND_BATCH: usize = 64;

/// Send datagrams with as few system calls as possible (`sendmmsg`).
/// Returns how many could not be sent.
pub fn send_all(fd: RawFd, items: &[(SocketAddr, &[u8])]) -> usize {
    let mut failed = 0;
    for chunk in items.chunks(SEND_BATCH) {
        let addrs: Vec<socket2::SockAddr> = chunk
            .iter()
            .map(|(a, _)| socket2::SockAddr::from(*a))
            .collect();
        let mut iovs: Vec<libc::iovec> = chunk
            .iter()
            .map(|(_, d)| libc::iovec {
                iov_base: d.as_ptr() as *mut libc::c_void,
                iov_len: d.len(),
            })
            .collect();
        // SAFETY: mmsghdr is a plain C struct; all-zero is a valid value.
        let mut hdrs: Vec<libc::mmsghdr> = (0..chunk.len())
            .map(|_| unsafe { std::mem::zeroed() })
            .collect();
        for (i, h) in hdrs.iter_mut().enumerate() {
            h.msg_hdr.msg_name = addrs[i].as_ptr() as *mut libc::c_void;
            h.msg_hdr.msg_namelen = addrs[i].len();
            h.msg_hdr.msg_iov = &mut iovs[i];
            h.msg_hdr.msg_iovlen = 1;
        }
        let mut sent = 0;
        while sent < hdrs.len() {
            // SAFETY: the headers point at addrs, iovs and the callers'
            // datagrams, all alive for this call; the kernel only reads them.
            let n = unsafe {
                libc::sendmmsg(
                    fd,
                    hdrs[sent..].as_mut_ptr(),
                    (hdrs.len() - sent) as libc::c_uint,
                    0,
                )
            };
            if n <= 0 {
                // Skip the datagram that failed (e.g. no buffer space) and go on.
                failed += 1;
                sent += 1;
            } else {
                sent += n as usize;
            }
        }
    }
    failed
}

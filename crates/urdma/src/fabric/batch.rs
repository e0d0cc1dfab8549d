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

    /// Receive up to [`BATCH`] datagrams from `fd`, waiting (subject to the
    /// socket's receive timeout) for the first one only.
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
                libc::MSG_WAITFORONE,
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

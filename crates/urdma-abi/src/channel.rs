//! The Unix sockets between drivers and the NIC agent: the agent's
//! address, message send and receive with passed file descriptors, and
//! the peer's credentials. The one module of the NIC channel that wraps
//! raw descriptors.

use nix::sys::socket::{
    self, sockopt, AddressFamily, Backlog, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag,
    SockType, UnixAddr,
};
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Descriptors one message may carry.
pub const MAX_FDS: usize = 4;

fn io(e: nix::Error) -> std::io::Error {
    std::io::Error::from_raw_os_error(e as i32)
}

fn seqpacket() -> std::io::Result<OwnedFd> {
    socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(io)
}

/// Listen on the abstract socket `name` (fails with `EADDRINUSE` when an
/// agent already listens there).
pub fn listen(name: &str) -> std::io::Result<OwnedFd> {
    let fd = seqpacket()?;
    let addr = UnixAddr::new_abstract(name.as_bytes()).map_err(io)?;
    socket::bind(fd.as_raw_fd(), &addr).map_err(io)?;
    socket::listen(&fd, Backlog::new(128).map_err(io)?).map_err(io)?;
    Ok(fd)
}

/// Listen on a socket file at `path` (which must not exist).
pub fn listen_path(path: &std::path::Path) -> std::io::Result<OwnedFd> {
    let fd = seqpacket()?;
    let addr = UnixAddr::new(path).map_err(io)?;
    socket::bind(fd.as_raw_fd(), &addr).map_err(io)?;
    socket::listen(&fd, Backlog::new(128).map_err(io)?).map_err(io)?;
    Ok(fd)
}

/// Connect to the socket file at `path`.
pub fn connect_path(path: &std::path::Path) -> std::io::Result<OwnedFd> {
    let fd = seqpacket()?;
    let addr = UnixAddr::new(path).map_err(io)?;
    socket::connect(fd.as_raw_fd(), &addr).map_err(io)?;
    Ok(fd)
}

/// Accept one connection.
pub fn accept(listener: &OwnedFd) -> std::io::Result<OwnedFd> {
    let raw = socket::accept4(listener.as_raw_fd(), SockFlag::SOCK_CLOEXEC).map_err(io)?;
    // SAFETY: accept4 returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Connect to the abstract socket `name`.
pub fn connect(name: &str) -> std::io::Result<OwnedFd> {
    let fd = seqpacket()?;
    let addr = UnixAddr::new_abstract(name.as_bytes()).map_err(io)?;
    socket::connect(fd.as_raw_fd(), &addr).map_err(io)?;
    Ok(fd)
}

/// A connected pair of message sockets.
pub fn pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    socket::socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(io)
}

/// True if `fd` is a file of the proc filesystem (a process's memory
/// file), which answers at once: never a file of a FUSE server or a
/// pipe a client could leave the agent waiting on.
pub fn is_proc_file(fd: &impl AsFd) -> bool {
    use nix::sys::statfs::{fstatfs, PROC_SUPER_MAGIC};
    fstatfs(fd).is_ok_and(|s| s.filesystem_type() == PROC_SUPER_MAGIC)
}

/// True if `fd` is a regular file on a local filesystem (not FUSE or NFS,
/// whose writes can wait on another process or the network).
pub fn is_local_file(fd: &impl AsFd) -> bool {
    use nix::sys::statfs::{fstatfs, FUSE_SUPER_MAGIC, NFS_SUPER_MAGIC};
    let regular = nix::sys::stat::fstat(fd.as_fd().as_raw_fd())
        .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG);
    let local = fstatfs(fd).is_ok_and(|s| {
        let t = s.filesystem_type();
        t != FUSE_SUPER_MAGIC && t != NFS_SUPER_MAGIC
    });
    regular && local
}

/// Raise this process's limit of open descriptors to the hard limit
/// (each CQ ring and shared MR of a client holds one in the agent).
pub fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}

/// Keep up to 4 MiB of freed memory in the allocator instead of giving
/// it back after every burst: the receive threads build and free many
/// packets at a time, and a heap shrunk after each burst costs page faults
/// on the next. [`release_free_memory`] still returns it when a session
/// ends.
pub fn keep_free_memory() {
    // SAFETY: mallopt only changes a tuning parameter of the C allocator.
    unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, 4 << 20) };
}

/// Give the memory the allocator keeps free back to the system (a
/// session's thread leaves its buffers in an arena of its own).
pub fn release_free_memory() {
    // SAFETY: malloc_trim has no preconditions; it only returns free
    // memory of the C allocator to the kernel.
    unsafe { libc::malloc_trim(0) };
}

/// Ask for a send buffer of `bytes` on `fd` (the kernel may grant less):
/// room for many small messages to a peer that reads them late.
pub fn grow_send_buffer(fd: &impl AsFd, bytes: usize) {
    let _ = socket::setsockopt(fd, sockopt::SndBuf, &bytes);
}

/// Process id and user id of the process at the other end.
pub fn peer(fd: &impl AsFd) -> std::io::Result<(u32, u32)> {
    let c = socket::getsockopt(fd, sockopt::PeerCredentials).map_err(io)?;
    Ok((c.pid() as u32, c.uid()))
}

/// Send one message with `fds` attached.
pub fn send(fd: &impl AsRawFd, msg: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    send_flags(fd, msg, fds, MsgFlags::MSG_NOSIGNAL)
}

/// Send one message unless the socket is full (then `WouldBlock`).
pub fn try_send(fd: &impl AsRawFd, msg: &[u8]) -> std::io::Result<()> {
    send_flags(
        fd,
        msg,
        &[],
        MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
    )
}

fn send_flags(
    fd: &impl AsRawFd,
    msg: &[u8],
    fds: &[RawFd],
    flags: MsgFlags,
) -> std::io::Result<()> {
    let iov = [IoSlice::new(msg)];
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
    loop {
        match socket::sendmsg::<()>(fd.as_raw_fd(), &iov, cmsgs, flags, None) {
            Ok(_) => return Ok(()),
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(io(e)),
        }
    }
}

/// A buffer for one received message, allocated (and zeroed) once.
#[derive(Debug, Default)]
pub struct MsgBuf {
    data: Vec<u8>,
    len: usize,
    /// Largest message taken (None: [`super::proto::MAX_MESSAGE`]); a
    /// longer one fails as truncated.
    limit: Option<usize>,
}

impl MsgBuf {
    /// A buffer for messages of at most `limit` bytes.
    pub fn with_limit(limit: usize) -> Self {
        MsgBuf {
            data: Vec::new(),
            len: 0,
            limit: Some(limit),
        }
    }

    /// The last message received.
    pub fn bytes(&self) -> &[u8] {
        &self.data[..self.len]
    }
}

/// Receive one message into `buf`, taking the descriptors it carries into
/// `fds`. Ok(false): the peer closed.
pub fn recv(fd: &impl AsRawFd, buf: &mut MsgBuf, fds: &mut Vec<OwnedFd>) -> std::io::Result<bool> {
    recv_flags(fd, buf, fds, MsgFlags::MSG_CMSG_CLOEXEC)
}

/// As [`recv`], but only a message already waiting (else `WouldBlock`).
pub fn try_recv(
    fd: &impl AsRawFd,
    buf: &mut MsgBuf,
    fds: &mut Vec<OwnedFd>,
) -> std::io::Result<bool> {
    recv_flags(
        fd,
        buf,
        fds,
        MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT,
    )
}

/// As [`recv`], but first poll without sleeping for as long as `spin`
/// (called each round, free to do other polling work) answers
/// `Some(look)`, looking for a message in the rounds where `look` is true,
/// so that a message that comes soon is taken without a wake-up.
pub fn recv_polling(
    fd: &impl AsRawFd,
    buf: &mut MsgBuf,
    fds: &mut Vec<OwnedFd>,
    mut spin: impl FnMut() -> Option<bool>,
) -> std::io::Result<bool> {
    while let Some(look) = spin() {
        if look {
            match try_recv(fd, buf, fds) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                r => return r,
            }
        }
        std::thread::yield_now();
    }
    recv(fd, buf, fds)
}

fn recv_flags(
    fd: &impl AsRawFd,
    msg_buf: &mut MsgBuf,
    fds: &mut Vec<OwnedFd>,
    flags: MsgFlags,
) -> std::io::Result<bool> {
    msg_buf.len = 0;
    let room = msg_buf.limit.unwrap_or(super::proto::MAX_MESSAGE) + 1;
    if msg_buf.data.len() < room {
        msg_buf.data.resize(room, 0);
    }
    let buf = &mut msg_buf.data;
    let mut cmsg = nix::cmsg_space!([RawFd; MAX_FDS]);
    loop {
        let mut iov = [IoSliceMut::new(buf)];
        let r = socket::recvmsg::<()>(fd.as_raw_fd(), &mut iov, Some(&mut cmsg), flags);
        let msg = match r {
            Ok(m) => m,
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(io(e)),
        };
        let n = msg.bytes;
        let truncated = msg
            .flags
            .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    for r in raw {
                        // SAFETY: the kernel installed these descriptors in
                        // this process for this message; nothing else owns them.
                        fds.push(unsafe { OwnedFd::from_raw_fd(r) });
                    }
                }
            }
        }
        if truncated {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "message or descriptors truncated",
            ));
        }
        if n == 0 {
            // A zero-length message is never sent: the peer closed.
            return Ok(false);
        }
        msg_buf.len = n;
        return Ok(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_descriptors() {
        let (a, b) = pair().unwrap();
        let (x, _y) = pair().unwrap();
        send(&a, b"hello", &[x.as_raw_fd()]).unwrap();
        let mut buf = MsgBuf::default();
        let mut fds = Vec::new();
        assert!(recv(&b, &mut buf, &mut fds).unwrap());
        assert_eq!(buf.bytes(), b"hello");
        assert_eq!(fds.len(), 1);
        let (pid, uid) = peer(&b).unwrap();
        assert_eq!(pid, std::process::id());
        assert_eq!(uid, nix::unistd::getuid().as_raw());
        drop(a);
        assert!(!recv(&b, &mut buf, &mut fds).unwrap());
    }

    #[test]
    fn abstract_listener_accepts() {
        let name = format!("urdma-test-{}", std::process::id());
        let l = listen(&name).unwrap();
        assert!(listen(&name).is_err());
        let c = connect(&name).unwrap();
        let s = accept(&l).unwrap();
        send(&c, b"x", &[]).unwrap();
        let mut buf = MsgBuf::default();
        assert!(recv(&s, &mut buf, &mut Vec::new()).unwrap());
        assert_eq!(buf.bytes(), b"x");
    }
}

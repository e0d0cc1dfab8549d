//! Socket options and descriptor flags of an rsocket, as rdma-core's
//! rsockets answer them: buffer and queue sizes before connecting, the
//! TCP and socket flags kept for `rgetsockopt`, `SO_ERROR`, `TCP_INFO`.

use super::{set_fd_nonblock, st, Rs};

/// `SOL_RDMA` and its options (`rsocket.h`).
pub const SOL_RDMA: i32 = 0x10000;
const RDMA_SQSIZE: i32 = 0;
const RDMA_RQSIZE: i32 = 1;
const RDMA_INLINE: i32 = 2;
const RDMA_IOMAPSIZE: i32 = 3;
const RDMA_ROUTE: i32 = 4;
const QP_MAX: u32 = 0xFFFE;

fn flag(bits: &mut u64, name: i32, on: bool) {
    if (0..64).contains(&name) {
        match on {
            true => *bits |= 1 << name,
            false => *bits &= !(1 << name),
        }
    }
}

fn has(bits: u64, name: i32) -> i32 {
    i32::from((0..64).contains(&name) && bits & (1 << name) != 0)
}

/// `rsetsockopt`: `val` holds `len` bytes.
pub fn set(rs: &mut Rs, level: i32, name: i32, val: &[u8]) -> Result<(), i32> {
    let int = || -> Result<i32, i32> {
        let b: [u8; 4] = val
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .ok_or(libc::EINVAL)?;
        Ok(i32::from_ne_bytes(b))
    };
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => {
            let v = int()?;
            flag(&mut rs.o.so, name, v != 0);
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
            let v = int()?.max(0) as u32;
            if rs.c.is_none() {
                rs.p.rbuf_size = v.saturating_mul(2).clamp(4096, 1 << 28);
            }
        }
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
            let v = int()?.max(0) as u32;
            if rs.c.is_none() {
                rs.p.sbuf_size = v.saturating_mul(2).clamp(4096, 1 << 28);
            }
        }
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            if val.len() < std::mem::size_of::<libc::linger>() {
                return Err(libc::EINVAL);
            }
            // Kept inverted, as rdma-core does: the default is on.
            flag(&mut rs.o.so, name, int()? == 0);
        }
        (libc::IPPROTO_IP, libc::IP_TOS) => {
            let v = int()?;
            rs.o.tos = v;
            let mut b = v as u8;
            // SAFETY: the live ID; b is one readable byte.
            unsafe {
                crate::rdma_set_option(rs.id, 0, 0, (&mut b as *mut u8).cast(), 1);
            }
        }
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => {
            let v = int()?;
            flag(&mut rs.o.tcp, name, v != 0);
        }
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => match int()? {
            v if v > 0 => rs.o.keepalive_time = v as u32,
            _ => return Err(libc::EINVAL),
        },
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL | libc::TCP_MAXSEG) => {
            int()?;
        }
        (libc::IPPROTO_TCP, libc::TCP_CONGESTION) => {}
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
            let v = int()?;
            flag(&mut rs.o.ipv6, name, v != 0);
        }
        (SOL_RDMA, _) => {
            if rs.state & st::OPENING != 0 || rs.c.is_some() {
                return Err(libc::EINVAL);
            }
            let v = (int()?.max(0) as u32).min(QP_MAX);
            match name {
                RDMA_SQSIZE => rs.p.sq_size = v,
                RDMA_RQSIZE => rs.p.rq_size = v,
                RDMA_INLINE => rs.p.sq_inline = v,
                RDMA_IOMAPSIZE => {
                    use super::wire::{scale_to_value, value_to_scale};
                    rs.p.iomap_size = scale_to_value(value_to_scale(v, 8) & 0xFF, 8);
                }
                RDMA_ROUTE => return Err(libc::EOPNOTSUPP),
                _ => return Err(libc::ENOPROTOOPT),
            }
        }
        _ => return Err(libc::ENOPROTOOPT),
    }
    Ok(())
}

/// `rgetsockopt`: the value's bytes.
pub fn get(rs: &mut Rs, level: i32, name: i32) -> Result<Vec<u8>, i32> {
    let int = |v: i32| Ok(v.to_ne_bytes().to_vec());
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => {
            int(has(rs.o.so, name))
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => int(rs.p.rbuf_size as i32),
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => int(rs.p.sbuf_size as i32),
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            let on = 1 - has(rs.o.so, name);
            let mut v = on.to_ne_bytes().to_vec();
            v.extend_from_slice(&0i32.to_ne_bytes());
            Ok(v)
        }
        (libc::SOL_SOCKET, libc::SO_ERROR) => {
            let e = std::mem::take(&mut rs.err);
            int(e)
        }
        (libc::SOL_SOCKET, libc::SO_TYPE) => int(libc::SOCK_STREAM),
        (libc::IPPROTO_IP, libc::IP_TOS) => int(rs.o.tos),
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => int(has(rs.o.tcp, name)),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => int(rs.o.keepalive_time as i32),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => int(1),
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => int(mss(rs)),
        (libc::IPPROTO_TCP, libc::TCP_INFO) => {
            // SAFETY: tcp_info is plain C data; zero is valid.
            let mut t: libc::tcp_info = unsafe { std::mem::zeroed() };
            t.tcpi_state = match rs.state & st::CONNECTED != 0 {
                true => 1,  // TCP_ESTABLISHED
                false => 7, // TCP_CLOSE
            };
            t.tcpi_snd_cwnd = rs.p.sq_size;
            t.tcpi_snd_mss = mss(rs) as u32;
            // SAFETY: t is a live tcp_info viewed as its bytes.
            let b = unsafe {
                std::slice::from_raw_parts(
                    (&t as *const libc::tcp_info).cast::<u8>(),
                    std::mem::size_of::<libc::tcp_info>(),
                )
            };
            Ok(b.to_vec())
        }
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => int(has(rs.o.ipv6, name)),
        (SOL_RDMA, RDMA_SQSIZE) => int(rs.p.sq_size as i32),
        (SOL_RDMA, RDMA_RQSIZE) => int(rs.p.rq_size as i32),
        (SOL_RDMA, RDMA_INLINE) => {
            int(rs.c.as_ref().map_or(rs.p.sq_inline, |c| c.p.sq_inline) as i32)
        }
        (SOL_RDMA, RDMA_IOMAPSIZE) => int(rs.p.iomap_size as i32),
        _ => Err(libc::ENOPROTOOPT),
    }
}

/// The path MTU's payload (the ID's route), else 2048.
fn mss(rs: &Rs) -> i32 {
    // SAFETY: the live ID; path_rec is null or num_paths records.
    unsafe {
        let r = &(*rs.id).route;
        match r.num_paths > 0 && !r.path_rec.is_null() {
            true => 1 << (7 + u32::from((*r.path_rec).mtu).clamp(1, 5)),
            false => 2048,
        }
    }
}

/// `rfcntl`: `F_GETFL`/`F_SETFL` (`O_NONBLOCK`), `F_GETFD`/`F_SETFD`.
pub fn fcntl(rs: &mut Rs, cmd: i32, arg: usize) -> Result<i32, i32> {
    match cmd {
        libc::F_GETFL => Ok(rs.fs_flags | libc::O_RDWR),
        libc::F_SETFL => {
            let v = arg as i32;
            let on = v & libc::O_NONBLOCK != 0;
            set_fd_nonblock(rs.fd, on);
            rs.fs_flags = v & !libc::O_ACCMODE;
            Ok(0)
        }
        libc::F_GETFD => Ok(rs.fd_flags),
        libc::F_SETFD => {
            rs.fd_flags = arg as i32 & libc::FD_CLOEXEC;
            Ok(0)
        }
        _ => Err(libc::EOPNOTSUPP),
    }
}

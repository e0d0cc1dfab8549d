//! The sending half of batched datagram I/O: `sendmmsg` with UDP GSO
//! (one buffer of same-size datagrams for one destination, cut by the
//! kernel), and `in_parts` for handling a batch a part at a time.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};

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
        if !crate::config::get().gso.value {
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
mod tests;

//! `rpoll` and `rselect` over rsockets and ordinary descriptors: each
//! rsocket is asked for its readiness (processing its completions), and
//! waited for on a real descriptor — its CQ's completion channel once
//! connected, its event channel before.

use super::data;
use super::{lock, lookup, st, Rs};
use std::time::{Duration, Instant};

/// How long to check readiness before sleeping.
const SPIN: Duration = Duration::from_micros(20);
/// The longest sleep between checks (an event of another thread's
/// taking is then noticed).
const MAX_SLEEP_MS: i32 = 500;

/// The events an rsocket has of `events`.
fn revents(rs: &mut Rs, events: i16) -> i16 {
    if rs.state & st::OPENING != 0 {
        match super::conn::finish_connect(rs) {
            Err(libc::EINPROGRESS) => return 0,
            _ => return revents(rs, events),
        }
    }
    let connected = rs.state & (st::CONNECTED | st::DISCONNECTED | st::ERROR) != 0;
    if connected && rs.c.is_some() {
        let _ = data::progress(rs);
        let mut r = 0;
        if events & libc::POLLIN != 0 && data::test_recv(rs) {
            r |= libc::POLLIN;
        }
        if events & libc::POLLOUT != 0
            && rs.state & st::WRITABLE != 0
            && rs.c.as_ref().is_some_and(data::can_send)
        {
            r |= libc::POLLOUT;
        }
        // A peer's close that arrived just behind its last data is
        // reported once that data is read: readable data is POLLIN alone
        // (as TCP gives POLLIN, not POLLHUP, for data before a FIN), so a
        // program that takes POLLHUP for a failed read loses nothing.
        if rs.state & st::CONNECTED == 0 && (r & libc::POLLIN == 0 || rs.state != st::DISCONNECTED)
        {
            r |= match rs.state {
                st::DISCONNECTED => libc::POLLHUP,
                _ => libc::POLLERR,
            };
        }
        return r;
    }
    match rs.state {
        st::LISTENING => {
            let mut p = libc::pollfd {
                fd: rs.chan_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live pollfd, no wait.
            unsafe { libc::poll(&mut p, 1, 0) };
            p.revents & events
        }
        st::CONNECT_ERROR => (events & (libc::POLLIN | libc::POLLOUT)) | libc::POLLERR,
        _ => 0,
    }
}

/// Fill every entry's `revents`; the number with any.
fn check(fds: &mut [libc::pollfd]) -> i32 {
    let mut n = 0;
    for f in fds.iter_mut() {
        f.revents = match lookup(f.fd) {
            Ok(s) => revents(&mut lock(&s), f.events),
            Err(_) => {
                let mut p = libc::pollfd {
                    fd: f.fd,
                    events: f.events,
                    revents: 0,
                };
                // SAFETY: one live pollfd, no wait.
                unsafe { libc::poll(&mut p, 1, 0) };
                p.revents
            }
        };
        if f.revents != 0 {
            n += 1;
        }
    }
    n
}

/// The descriptor to sleep on for an rsocket (arming its CQ), or `None`
/// if it turned ready while arming.
fn arm(rs: &mut Rs, events: i16) -> Option<i32> {
    let fd = match rs.c.as_mut() {
        Some(c) if rs.state & st::OPENING == 0 => {
            if !c.armed {
                c.cq.arm();
                c.armed = true;
            }
            c.cq.fd()
        }
        _ => rs.chan_fd(),
    };
    match revents(rs, events) {
        0 => Some(fd),
        _ => None,
    }
}

/// `rpoll`.
pub fn rpoll(fds: &mut [libc::pollfd], timeout: i32) -> Result<i32, i32> {
    let start = Instant::now();
    loop {
        let n = check(fds);
        if n > 0 || timeout == 0 {
            return Ok(n);
        }
        if start.elapsed() >= SPIN {
            break;
        }
    }
    let mut rfds = vec![
        libc::pollfd {
            fd: -1,
            events: 0,
            revents: 0
        };
        fds.len()
    ];
    loop {
        let mut ready = false;
        let mut socks = Vec::new();
        for (i, f) in fds.iter().enumerate() {
            rfds[i] = match lookup(f.fd) {
                Ok(s) => {
                    let fd = arm(&mut lock(&s), f.events);
                    ready |= fd.is_none();
                    socks.push((i, s));
                    libc::pollfd {
                        fd: fd.unwrap_or(-1),
                        events: libc::POLLIN,
                        revents: 0,
                    }
                }
                Err(_) => libc::pollfd {
                    fd: f.fd,
                    events: f.events,
                    revents: 0,
                },
            };
        }
        if ready {
            return Ok(check(fds));
        }
        let sleep = match timeout {
            t if t < 0 => MAX_SLEEP_MS,
            t => {
                let left = i64::from(t) - start.elapsed().as_millis() as i64;
                if left <= 0 {
                    return Ok(check(fds));
                }
                left.min(i64::from(MAX_SLEEP_MS)) as i32
            }
        };
        // SAFETY: rfds is fds.len() live pollfds.
        let r = unsafe { libc::poll(rfds.as_mut_ptr(), rfds.len() as libc::nfds_t, sleep) };
        if r < 0 {
            return Err(crate::errno());
        }
        for (i, s) in &socks {
            if rfds[*i].revents != 0 {
                let mut g = lock(s);
                let opening = g.state & st::OPENING != 0;
                if let Some(c) = g.c.as_mut() {
                    if !opening && c.cq.take_event() {
                        c.armed = false;
                    }
                }
            }
        }
        let n = check(fds);
        if n > 0 {
            return Ok(n);
        }
    }
}

/// `rselect`: the sets as poll entries, then back.
///
/// # Safety
/// Each set is null or a live `fd_set`.
pub unsafe fn rselect(
    nfds: i32,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout_ms: i32,
) -> Result<i32, i32> {
    if !(0..=libc::FD_SETSIZE as i32).contains(&nfds) {
        return Err(libc::EINVAL);
    }
    // SAFETY: each set is null or live (the caller's contract).
    let isset =
        |set: *mut libc::fd_set, fd: i32| !set.is_null() && unsafe { libc::FD_ISSET(fd, set) };
    let mut fds = Vec::new();
    for fd in 0..nfds {
        let mut ev = 0;
        if isset(r, fd) {
            ev |= libc::POLLIN;
        }
        if isset(w, fd) {
            ev |= libc::POLLOUT;
        }
        if isset(e, fd) {
            ev |= libc::POLLPRI;
        }
        if ev != 0 {
            fds.push(libc::pollfd {
                fd,
                events: ev,
                revents: 0,
            });
        }
    }
    let n = rpoll(&mut fds, timeout_ms)?;
    for set in [r, w, e] {
        if !set.is_null() {
            // SAFETY: a live set (the caller's contract).
            unsafe { libc::FD_ZERO(set) };
        }
    }
    let mut count = 0;
    let rd = libc::POLLIN | libc::POLLHUP | libc::POLLERR;
    let sets = [
        (r, libc::POLLIN, rd),
        (w, libc::POLLOUT, libc::POLLOUT | libc::POLLERR),
        (e, libc::POLLPRI, libc::POLLPRI),
    ];
    for f in fds.iter().take(if n > 0 { fds.len() } else { 0 }) {
        for (set, want, got) in sets {
            if !set.is_null() && f.events & want != 0 && f.revents & got != 0 {
                // SAFETY: fd < nfds <= FD_SETSIZE; a live set.
                unsafe { libc::FD_SET(f.fd, set) };
                count += 1;
            }
        }
    }
    Ok(count)
}

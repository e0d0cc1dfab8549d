//! The library's answers that need no device: address parsing, event
//! channels and IDs, bad handles and arguments.

use crate::state::{event, lock};
use crate::*;
use std::ffi::CStr;
use std::ptr::null_mut;

fn errno_now() -> i32 {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

#[test]
fn channel_is_pollable_and_nonblocking_gives_eagain() {
    let ch = rdma_create_event_channel();
    assert!(!ch.is_null());
    // SAFETY: ch is live; fcntl on its descriptor.
    let fd = unsafe { (*ch).fd };
    unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) };
    let mut ev: *mut rdma_cm_event = null_mut();
    // SAFETY: a live channel and a writable out-pointer.
    assert_eq!(unsafe { rdma_get_cm_event(ch, &mut ev) }, -1);
    assert_eq!(errno_now(), libc::EAGAIN);

    // An event queued for an ID makes the descriptor readable; reading it
    // counts it against the ID until acknowledged.
    let mut id: *mut rdma_cm_id = null_mut();
    // SAFETY: a live channel, a writable out-pointer.
    assert_eq!(
        unsafe { rdma_create_id(ch, &mut id, null_mut(), RDMA_PS_TCP) },
        0
    );
    lock().push(
        id as usize,
        event(id as usize, RDMA_CM_EVENT_ADDR_RESOLVED, 0),
    );
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd.
    assert_eq!(unsafe { libc::poll(&mut pfd, 1, 1000) }, 1);
    // SAFETY: as above.
    assert_eq!(unsafe { rdma_get_cm_event(ch, &mut ev) }, 0);
    // SAFETY: the event just taken.
    assert_eq!(unsafe { (*ev).event }, RDMA_CM_EVENT_ADDR_RESOLVED);
    assert_eq!(unsafe { (*ev).id }, id);
    assert_eq!(lock().id(id).unwrap().outstanding, 1);
    // A channel with IDs is not destroyed; a second ack is refused.
    rdma_destroy_event_channel(ch);
    assert!(lock().chans.contains_key(&(ch as usize)));
    // SAFETY: live handles, then stale ones (refused, not followed).
    unsafe {
        assert_eq!(rdma_ack_cm_event(ev), 0);
        assert_eq!(rdma_ack_cm_event(ev), -1);
        assert_eq!(errno_now(), libc::EINVAL);
        assert_eq!(rdma_destroy_id(id), 0);
        assert_eq!(rdma_destroy_id(id), -1);
        assert_eq!(errno_now(), libc::EINVAL);
    }
    rdma_destroy_event_channel(ch);
    assert!(!lock().chans.contains_key(&(ch as usize)));
}

#[test]
fn ids_refuse_bad_port_spaces_and_calls_out_of_order() {
    let mut id: *mut rdma_cm_id = null_mut();
    // SAFETY: writable out-pointers; the ID is live until destroyed.
    unsafe {
        assert_eq!(rdma_create_id(null_mut(), &mut id, null_mut(), 0x4242), -1);
        assert_eq!(errno_now(), libc::EINVAL);
        assert_eq!(
            rdma_create_id(null_mut(), &mut id, null_mut(), RDMA_PS_TCP),
            0
        );
        // Not resolved: no connect, listen, accept or QP.
        assert_eq!(rdma_connect(id, null_mut()), -1);
        assert_eq!(errno_now(), libc::EINVAL);
        // Listening binds an unbound ID to the wildcard; here no device
        // takes it.
        assert_eq!(rdma_listen(id, 1), -1);
        assert_eq!(errno_now(), libc::ENODEV);
        assert_eq!(rdma_accept(id, null_mut()), -1);
        assert_eq!(errno_now(), libc::EINVAL);
        assert_eq!(rdma_disconnect(id), -1);
        assert_eq!(errno_now(), libc::EINVAL);
        // INIT attributes exist before a connection; RTR's do not.
        let mut a: ibv_qp_attr = std::mem::zeroed();
        let mut mask = 0;
        a.qp_state = IBV_QPS_INIT;
        assert_eq!(rdma_init_qp_attr(id, &mut a, &mut mask), 0);
        assert_eq!(a.port_num, 1);
        assert_eq!(a.qp_access_flags, 0);
        a.qp_state = IBV_QPS_RTR;
        assert_eq!(rdma_init_qp_attr(id, &mut a, &mut mask), -1);
        // Options: the right sizes only; IB path records not offered.
        let mut tos = 32u8;
        let mut set = |level: u32, name: u32, len: usize| {
            rdma_set_option(
                id,
                level as i32,
                name as i32,
                (&mut tos as *mut u8).cast(),
                len,
            )
        };
        assert_eq!(set(RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, 1), 0);
        assert_eq!(set(RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, 4), -1);
        assert_eq!(errno_now(), libc::EINVAL);
        assert_eq!(set(RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, 1), -1);
        assert_eq!(errno_now(), libc::ENOSYS);
        assert_eq!(rdma_destroy_id(id), 0);
        // A pointer this library never made.
        let mut fake: rdma_cm_id = std::mem::zeroed();
        assert_eq!(rdma_destroy_id(&mut fake), -1);
        assert_eq!(errno_now(), libc::EINVAL);
    }
}

#[test]
fn event_names_are_librdmacm_s() {
    // SAFETY: rdma_event_str returns static NUL-terminated strings.
    let name = |e| {
        unsafe { CStr::from_ptr(rdma_event_str(e)) }
            .to_str()
            .unwrap()
    };
    assert_eq!(name(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED");
    assert_eq!(
        name(RDMA_CM_EVENT_TIMEWAIT_EXIT),
        "RDMA_CM_EVENT_TIMEWAIT_EXIT"
    );
    assert_eq!(name(99), "UNKNOWN EVENT");
}

#[test]
fn multicast_says_so_and_rsockets_refuse_bad_calls() {
    use crate::rsocket::api;
    // SAFETY: calls that touch none of their arguments.
    unsafe {
        assert_eq!(rdma_join_multicast(null_mut(), null_mut(), null_mut()), -1);
        assert_eq!(errno_now(), libc::ENOSYS);
    }
    assert_eq!(api::rsocket(libc::AF_UNIX, libc::SOCK_STREAM, 0), -1);
    assert_eq!(errno_now(), libc::EAFNOSUPPORT);
    assert_eq!(api::rsocket(libc::AF_INET, libc::SOCK_DGRAM, 0), -1);
    assert_eq!(errno_now(), libc::EOPNOTSUPP);
    assert_eq!(
        api::rsocket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_UDP),
        -1
    );
    assert_eq!(errno_now(), libc::EPROTONOSUPPORT);
    let mut b = [0u8; 8];
    // SAFETY: a descriptor that is no rsocket; the buffer is live.
    unsafe {
        assert_eq!(api::rrecv(12345, b.as_mut_ptr().cast(), 8, 0), -1);
        assert_eq!(errno_now(), libc::EBADF);
        assert_eq!(api::rsend(-1, b.as_ptr().cast(), 8, 0), -1);
        assert_eq!(errno_now(), libc::EBADF);
        assert_eq!(api::rfcntl(7777, libc::F_GETFL, 0), -1);
        assert_eq!(errno_now(), libc::EBADF);
    }
    // rpoll serves ordinary descriptors: a pipe's write end is writable.
    let mut p = [0i32; 2];
    // SAFETY: a pipe of two live ints; one live pollfd.
    unsafe {
        assert_eq!(libc::pipe(p.as_mut_ptr()), 0);
        let mut f = libc::pollfd {
            fd: p[1],
            events: libc::POLLOUT,
            revents: 0,
        };
        assert_eq!(api::rpoll(&mut f, 1, 100), 1);
        assert_eq!(f.revents, libc::POLLOUT);
        let mut f = libc::pollfd {
            fd: p[0],
            events: libc::POLLIN,
            revents: 0,
        };
        assert_eq!(api::rpoll(&mut f, 1, 10), 0);
        libc::close(p[0]);
        libc::close(p[1]);
    }
}

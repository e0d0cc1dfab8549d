//! Work queue capacity: a full send or receive queue answers
//! `Error::Exhausted` (ENOMEM at the verbs API) and changes nothing; its
//! room returns as soon as the completions that free it can be polled.
//! A CQ resized with completions waiting keeps them.

use crate::harness::{expect_ok, sge, wait_wc, Fixture, ALL};
use crate::proto::{Cmd, ConnOpts, WrSpec};
use urdma::{Error, QpCap, QpInitAttr, RecvWr, SendWr, WcOpcode, WcStatus};

const DEPTH: u32 = 4;

fn small_queues(f: &mut Fixture, opts: &ConnOpts) -> crate::harness::Link {
    let cq = f.cq.clone();
    let init = QpInitAttr {
        cap: QpCap {
            max_send_wr: DEPTH,
            max_recv_wr: DEPTH,
            ..QpCap::default()
        },
        ..QpInitAttr::rc(&cq, &cq)
    };
    let pcq = f.pcq;
    f.connect_with(&init, pcq, opts, &ConnOpts::default())
}

/// A send queue whose WRs cannot complete (the peer QP is gone) takes
/// exactly `max_send_wr` of them; once they complete in error, the queue
/// takes new ones again.
pub fn send_queue_full() {
    let mut f = Fixture::new();
    let opts = ConnOpts {
        timeout: Some(8),
        retry_cnt: Some(1),
        ..ConnOpts::default()
    };
    let l = small_queues(&mut f, &opts);
    f.peer.ok::<()>(&Cmd::DestroyQp { qp: l.pqp });
    let buf = f.mr(64, ALL);
    let target = f.peer_mr(64, ALL);
    let wr = |id| SendWr::write(id, &[buf.slice(0, 8).unwrap()], target.addr, target.rkey);
    for id in 0..u64::from(DEPTH) {
        l.qp.post_send(wr(id)).expect("room in the send queue");
    }
    let r = l.qp.post_send(wr(99));
    assert!(matches!(r, Err(Error::Exhausted(_))), "5th post: {r:?}");
    let first = wait_wc(&f.cq);
    assert_eq!(first.wr_id, 0);
    assert_eq!(first.status, WcStatus::RetryExcErr);
    for id in 1..u64::from(DEPTH) {
        let wc = wait_wc(&f.cq);
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::WrFlushErr));
    }
    // In ERR: a new post is taken and flushed.
    l.qp.post_send(wr(7)).expect("room after the completions");
    let wc = wait_wc(&f.cq);
    assert_eq!((wc.wr_id, wc.status), (7, WcStatus::WrFlushErr));
}

/// A receive queue takes `max_recv_wr` requests; each SEND that consumes
/// one makes room for one more, and nothing refused is ever delivered.
pub fn recv_queue_full() {
    let mut f = Fixture::new();
    let l = small_queues(&mut f, &ConnOpts::default());
    let buf = f.mr(64 * 16, ALL);
    let slot = |i: u64| [buf.slice(64 * (i as usize % 16), 64).unwrap()];
    for id in 0..u64::from(DEPTH) {
        l.qp.post_recv(RecvWr::new(id, &slot(id)))
            .expect("room in the receive queue");
    }
    let r = l.qp.post_recv(RecvWr::new(99, &slot(99)));
    assert!(matches!(r, Err(Error::Exhausted(_))), "5th post: {r:?}");
    let src = f.peer_mr(64, ALL);
    for round in 0..3 * u64::from(DEPTH) {
        f.peer.post_send(
            l.pqp,
            round,
            WrSpec::Send {
                sges: vec![sge(&src, 0, 8)],
            },
        );
        let wc = wait_wc(&f.cq);
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (round, WcStatus::Success, WcOpcode::Recv)
        );
        // The consumed request's room is free.
        let next = round + u64::from(DEPTH);
        l.qp.post_recv(RecvWr::new(next, &slot(next)))
            .expect("room after a receive completed");
    }
}

/// Filling the send queue, polling every completion and filling it
/// again never finds it full: the room of a completed WR is free by the
/// time its completion is seen.
pub fn send_queue_refills() {
    let mut f = Fixture::new();
    let l = small_queues(&mut f, &ConnOpts::default());
    let buf = f.mr(64, ALL);
    let target = f.peer_mr(64, ALL);
    let mut id = 0;
    for _ in 0..200 {
        for _ in 0..DEPTH {
            let wr = SendWr::write(id, &[buf.slice(0, 8).unwrap()], target.addr, target.rkey);
            l.qp.post_send(wr)
                .expect("room after every completion was polled");
            id += 1;
        }
        for done in id - u64::from(DEPTH)..id {
            assert_eq!(expect_ok(&f.cq, done, WcOpcode::RdmaWrite).wr_id, done);
        }
    }
}

/// A receive request whose buffer was deregistered after it was posted:
/// the SEND that needs it completes it with LOC_PROT_ERR, the sender gets
/// a remote operational error NAK, the receiving QP goes to ERR and flushes
/// the request behind it; nothing lands in a later buffer.
pub fn recv_buffer_deregistered() {
    let mut f = Fixture::new();
    let l = f.connect(&ConnOpts::default());
    let gone = f.mr(64, ALL);
    let kept = f.mr(64, ALL);
    l.qp.post_recv(RecvWr::new(1, &[gone.slice(0, 64).unwrap()]))
        .unwrap();
    l.qp.post_recv(RecvWr::new(2, &[kept.slice(0, 64).unwrap()]))
        .unwrap();
    drop(gone);
    let src = f.peer_mr(64, ALL);
    f.peer.fill(src.id, 0, 64, 0x51);
    f.peer.post_send(
        l.pqp,
        9,
        WrSpec::Send {
            sges: vec![sge(&src, 0, 64)],
        },
    );
    let first = wait_wc(&f.cq);
    assert_eq!(
        (first.wr_id, first.status, first.opcode),
        (1, WcStatus::LocProtErr, WcOpcode::Recv)
    );
    let second = wait_wc(&f.cq);
    assert_eq!((second.wr_id, second.status), (2, WcStatus::WrFlushErr));
    assert_eq!(l.qp.query().unwrap().qp_state, urdma::QpState::Err);
    let theirs = f.peer.poll(f.pcq, 1);
    assert_eq!((theirs[0].wr_id, theirs[0].status), (9, WcStatus::RemOpErr));
    let mut placed = [0u8; 64];
    kept.read_at(0, &mut placed).unwrap();
    assert_eq!(placed, [0u8; 64], "nothing placed");
}

/// A CQ resized while completions wait keeps them in order; one too
/// small for them is refused and changes nothing; completions after a
/// resize land in the new ring.
pub fn cq_resize_keeps_waiting_completions() {
    let mut f = Fixture::new();
    let l = f.connect(&ConnOpts::default());
    let buf = f.mr(64, ALL);
    let target = f.peer_mr(64, ALL);
    let wr = |id| SendWr::write(id, &[buf.slice(0, 8).unwrap()], target.addr, target.rkey);
    for id in 0..4 {
        l.qp.post_send(wr(id)).expect("room in the send queue");
    }
    let start = std::time::Instant::now();
    while f.cq.shared().len() < 4 {
        assert!(start.elapsed().as_secs() < 10, "4 completions never came");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let r = f.cq.resize(1);
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    assert_eq!(f.cq.shared().len(), 4, "the refused resize changed nothing");
    let cap = f.cq.resize(200).expect("a larger CQ");
    assert!(cap >= 200, "capacity {cap}");
    for id in 4..8 {
        l.qp.post_send(wr(id)).expect("room in the send queue");
    }
    for id in 0..8 {
        expect_ok(&f.cq, id, WcOpcode::RdmaWrite);
    }
    let cap = f.cq.resize(3).expect("a smaller, empty CQ");
    assert!((3..200).contains(&cap), "capacity {cap}");
}

//! Ordering in the send queue: a memory window bind waits for the
//! requests before it and holds the ones after it; a fenced request waits
//! for the READs before it.

use super::{opts, wc_summary, Pair, A, B};
use crate::engine::command::{AllocMw, ModifyQp};
use crate::engine::mw::{BindMw, MwType};
use crate::engine::SendOp;
use crate::types::{QpAttrMask, QpState, QpType, WcOpcode, WcStatus};
use crate::verbs::QpAttr;

/// A bind of a new type 2 window of A's region (its first 64 bytes).
fn window(p: &mut Pair) -> BindMw {
    let pd = p.n[A].mr.pd;
    let rkey = p.n[A]
        .eng
        .call(
            0,
            AllocMw {
                pd,
                kind: MwType::Type2,
            },
        )
        .expect("alloc_mw");
    BindMw {
        mw_rkey: rkey,
        new_rkey: rkey ^ 1,
        lkey: p.n[A].mr.lkey,
        addr: p.n[A].va(0),
        len: 64,
        access: crate::types::AccessFlags::REMOTE_WRITE.bits(),
    }
}

/// A posts a WRITE (1), a bind (2), then another WRITE (3).
fn write_bind_write(p: &mut Pair) {
    let b = window(p);
    let to = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post(0, 1, SendOp::Write, (0, 16), to);
    p.n[A].post(0, 2, SendOp::BindMw(b), (0, 0), (0, 0));
    p.n[A].post(0, 3, SendOp::Write, (0, 16), to);
}

/// The completions of [`write_bind_write`], in posting order.
const IN_ORDER: [(u64, WcStatus, WcOpcode); 3] = [
    (1, WcStatus::Success, WcOpcode::RdmaWrite),
    (2, WcStatus::Success, WcOpcode::BindMw),
    (3, WcStatus::Success, WcOpcode::RdmaWrite),
];

/// Rule (IBTA 10.6.7.2.2 and o10-39): a bind is executed in order with
/// the work requests of its send queue: it waits until the WRITE before
/// it has completed, and the WRITE after it is not transmitted before it.
#[test]
fn a_bind_waits_for_the_work_before_it_and_holds_the_work_after_it() {
    let mut p = Pair::new(0x100, &opts(), 0x200, &opts());
    write_bind_write(&mut p);
    let sent = p.deliver_all(A);
    assert_eq!(sent.len(), 1, "only the WRITE before the bind leaves");
    assert!(p.n[A].send_wcs().is_empty());
    p.deliver_all(B);
    assert_eq!(p.deliver_all(A).len(), 1, "the WRITE after the bind leaves");
    p.deliver_all(B);
    assert_eq!(wc_summary(&p.n[A].send_wcs()), IN_ORDER);
}

/// On UC nothing acknowledges: a bind behind a WRITE runs once the WRITE
/// is sent (and so complete), with no ACK or timer to wait for.
#[test]
fn a_uc_bind_behind_a_write_runs_once_the_write_is_sent() {
    let mut p = Pair::of_type(QpType::Uc, (0x100, &opts()), (0x200, &opts()));
    write_bind_write(&mut p);
    assert_eq!(p.deliver_all(A).len(), 2, "both WRITEs leave");
    assert_eq!(wc_summary(&p.n[A].send_wcs()), IN_ORDER);
}

/// SQD starts no new work: a bind posted while the QP drains waits for
/// RTS; an error flushes what is held.
#[test]
fn a_bind_waits_out_sqd_and_is_flushed_by_an_error() {
    let mut p = Pair::new(0x100, &opts(), 0x200, &opts());
    let b = window(&mut p);
    let qpn = p.n[A].qpn;
    let to_state = |p: &mut Pair, s: QpState| {
        let attr = QpAttr {
            qp_state: s,
            ..QpAttr::default()
        };
        let mask = QpAttrMask::STATE;
        p.n[A]
            .eng
            .call(0, ModifyQp { qpn, attr, mask })
            .expect("modify");
    };
    to_state(&mut p, QpState::Sqd);
    p.n[A].post(0, 1, SendOp::BindMw(b), (0, 0), (0, 0));
    assert!(p.n[A].send_wcs().is_empty(), "no bind in SQD");
    to_state(&mut p, QpState::Rts);
    assert_eq!(
        wc_summary(&p.n[A].send_wcs()),
        [(1, WcStatus::Success, WcOpcode::BindMw)]
    );

    let to = (p.n[B].va(0), p.n[B].mr.rkey);
    p.n[A].post(0, 2, SendOp::Write, (0, 16), to);
    p.n[A].post(0, 3, SendOp::LocalInv(b.new_rkey), (0, 0), (0, 0));
    p.n[A].post(0, 4, SendOp::Write, (0, 16), to);
    to_state(&mut p, QpState::Err);
    assert_eq!(
        wc_summary(&p.n[A].send_wcs()),
        [
            (2, WcStatus::WrFlushErr, WcOpcode::RdmaWrite),
            (3, WcStatus::WrFlushErr, WcOpcode::LocalInv),
            (4, WcStatus::WrFlushErr, WcOpcode::RdmaWrite),
        ]
    );
}

/// Rule (IBTA 10.8.3.3, fence indicator): a fenced request is not started
/// before the RDMA READs posted before it have completed; an unfenced one
/// goes out at once.
#[test]
fn a_fenced_write_waits_for_the_read_before_it() {
    use crate::engine::command::PostSend;
    use crate::engine::{SendData, SendRequest};
    let mut p = Pair::new(0x100, &opts(), 0x200, &opts());
    let to = (p.n[B].va(0), p.n[B].mr.rkey);
    let write = |p: &Pair, wr_id, fence| SendRequest {
        wr_id,
        op: SendOp::Write,
        data: SendData::Sges(vec![p.n[A].sge(64, 16)]),
        remote_va: to.0,
        rkey: to.1,
        signaled: true,
        solicited: false,
        ud: None,
        fence,
    };
    let post = |p: &mut Pair, wr: SendRequest| {
        let qpn = p.n[A].qpn;
        p.n[A].eng.call(0, PostSend { qpn, wr }).expect("post_send");
        p.n[A].collect();
    };
    p.n[A].post(0, 1, SendOp::Read, (0, 16), to);
    let wr = write(&p, 2, false);
    post(&mut p, wr);
    assert_eq!(p.deliver_all(A).len(), 2, "an unfenced WRITE goes at once");
    p.deliver_all(B);
    p.deliver_all(A);
    assert_eq!(p.n[A].send_wcs().len(), 2);

    p.n[A].post(0, 3, SendOp::Read, (0, 16), to);
    let wr = write(&p, 4, true);
    post(&mut p, wr);
    assert_eq!(p.deliver_all(A).len(), 1, "the fenced WRITE waits");
    p.deliver_all(B);
    assert_eq!(
        p.deliver_all(A).len(),
        1,
        "the READ completed: the WRITE goes"
    );
    p.deliver_all(B);
    assert_eq!(
        wc_summary(&p.n[A].send_wcs()),
        [
            (3, WcStatus::Success, WcOpcode::RdmaRead),
            (4, WcStatus::Success, WcOpcode::RdmaWrite),
        ]
    );
}

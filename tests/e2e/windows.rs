//! Memory windows: a peer reaches a region through a bound window's
//! R_Key only within the window and its rights, and only while it is
//! bound.

use crate::harness::{assert_wc, check, sge, wait_wc, Fixture, ALL};
use crate::proto::{ConnOpts, WrSpec};
use urdma::engine::mw::{BindMw, MwType};
use urdma::{AccessFlags, Mr, Qp, SendWr, WcOpcode, WcStatus};

/// Where the window starts in the region.
const WIN_OFF: usize = 1024;
/// The window's length.
const WIN_LEN: usize = 1024;

fn region(f: &Fixture) -> Mr {
    f.mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND)
}

/// The bind of window `rkey` (taking `rkey + 1`) to the window of `mr`.
fn bind_of(mr: &Mr, rkey: u32, access: AccessFlags) -> BindMw {
    BindMw {
        mw_rkey: rkey,
        new_rkey: (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff),
        lkey: mr.lkey(),
        addr: mr.addr() + WIN_OFF as u64,
        len: WIN_LEN as u64,
        access: access.bits(),
    }
}

/// A new window of `kind` bound (work request 1 on `qp`) to the window
/// of `mr` with `access`: its bind.
fn bound(f: &Fixture, qp: &Qp, mr: &Mr, kind: MwType, access: AccessFlags) -> BindMw {
    let rkey = f.pd.alloc_mw(kind).expect("alloc_mw");
    let bind = bind_of(mr, rkey, access);
    qp.post_send(SendWr::bind_mw(1, bind)).expect("bind");
    assert_wc(&wait_wc(&f.cq), 1, WcStatus::Success, WcOpcode::BindMw);
    bind
}

/// The peer's RDMA WRITE of 64 bytes (pattern 7) at `off` of the region
/// under `rkey`: its completion status.
fn peer_write(f: &mut Fixture, pqp: u32, mr: &Mr, off: usize, rkey: u32) -> WcStatus {
    let src = f.peer_mr(64, ALL);
    f.peer.fill(src.id, 0, 64, 7);
    let wr = WrSpec::Write {
        sges: vec![sge(&src, 0, 64)],
        raddr: mr.addr() + off as u64,
        rkey,
    };
    f.peer.post_send(pqp, 9, wr);
    let pcq = f.pcq;
    f.peer.poll(pcq, 1)[0].status
}

/// A type 2 window bound through a QP carries the peer's WRITE into the
/// region; the region's own key grants nothing remote; a local
/// invalidation takes the window back.
pub fn type2_window_grants_then_is_taken_back() {
    let mut f = Fixture::new();
    let l = f.connect(&ConnOpts::default());
    let mr = region(&f);
    let bind = bound(&f, &l.qp, &mr, MwType::Type2, AccessFlags::REMOTE_WRITE);
    let at = WIN_OFF + 64;
    assert_eq!(
        peer_write(&mut f, l.pqp, &mr, at, bind.new_rkey),
        WcStatus::Success
    );
    assert_eq!(check(&mr, at, 64, 7, 0), None, "the peer's bytes landed");
    l.qp.post_send(SendWr::local_inv(2, bind.new_rkey))
        .expect("local invalidate");
    assert_wc(&wait_wc(&f.cq), 2, WcStatus::Success, WcOpcode::LocalInv);
    let status = peer_write(&mut f, l.pqp, &mr, at, bind.new_rkey);
    assert_eq!(
        status,
        WcStatus::RemAccessErr,
        "a taken-back window refuses"
    );
}

/// A window grants only its rights and its range; a bind the region
/// does not allow fails with MW_BIND_ERR.
pub fn window_bounds_rights_and_bad_binds() {
    let mut f = Fixture::new();
    let l = f.connect(&ConnOpts::default());
    let mr = region(&f);
    let bind = bound(&f, &l.qp, &mr, MwType::Type2, AccessFlags::REMOTE_READ);
    let status = peer_write(&mut f, l.pqp, &mr, WIN_OFF, bind.new_rkey);
    assert_eq!(
        status,
        WcStatus::RemAccessErr,
        "WRITE through a READ window"
    );

    let l = f.connect(&ConnOpts::default());
    let bind = bound(&f, &l.qp, &mr, MwType::Type1, AccessFlags::REMOTE_WRITE);
    let past = WIN_OFF + WIN_LEN - 32;
    let status = peer_write(&mut f, l.pqp, &mr, past, bind.new_rkey);
    assert_eq!(
        status,
        WcStatus::RemAccessErr,
        "a WRITE past the window's end"
    );

    // A region registered without MW_BIND: the bind fails, the QP with it.
    let l = f.connect(&ConnOpts::default());
    let plain = f.mr(4096, AccessFlags::LOCAL_WRITE);
    let rkey = f.pd.alloc_mw(MwType::Type2).expect("alloc_mw");
    l.qp.post_send(SendWr::bind_mw(
        3,
        bind_of(&plain, rkey, AccessFlags::REMOTE_WRITE),
    ))
    .expect("post");
    assert_wc(&wait_wc(&f.cq), 3, WcStatus::MwBindErr, WcOpcode::BindMw);
}

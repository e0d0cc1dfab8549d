//! Regions that end under a live key: SEND with invalidate (the
//! requester's IETH opcodes, the responder ending the region the R_Key
//! names) and re-registration.

use super::{opts, pattern, psn_ops, wc_summary, Pair, A, B};
use crate::engine::SendOp;
use crate::memory::VecMemory;
use crate::types::{AccessFlags, QpState, WcFlags, WcOpcode, WcStatus};
use urdma_wire::Opcode;

/// A kernel-style region of B that a SEND with invalidate may end.
const KEY: u32 = 0xfe00_0107;

fn with_fast_region(p: &mut Pair) -> u64 {
    let pd = p.n[B].mr.pd;
    let iova = 0x7700_0000;
    let mem = VecMemory::new(4096);
    p.n[B]
        .eng
        .insert_kernel_mr(KEY, pd, AccessFlags::all(), iova, Box::new(mem), true)
        .expect("kernel MR");
    iova
}

/// Rule (IBTA 9.2.4, o9-1): the last packet of a SEND with invalidate
/// carries the R_Key in an IETH; the responder ends that region once the
/// message is placed and reports it in the receive completion, and a
/// later access with the R_Key fails with a remote access error.
#[test]
fn send_with_invalidate_ends_the_named_region() {
    let mut p = Pair::new(0x100, &opts(), 0x200, &opts());
    let iova = with_fast_region(&mut p);
    p.n[A].write(0, &pattern(2000, 3));
    p.n[B].post_recv(0, 7, 0x1000, 4096);
    p.n[A].post(0, 1, SendOp::SendInv(KEY), (0, 2000), (0, 0));
    let req = p.deliver_all(A);
    assert_eq!(
        psn_ops(&req),
        [(0x100, Opcode::RcSendFirst), (0x101, Opcode::RcSendLastInv)]
    );
    assert_eq!(req[1].repr.ieth, Some(KEY));
    p.deliver_all(B);
    let wcs = p.n[B].recv_wcs();
    assert_eq!(wc_summary(&wcs), [(7, WcStatus::Success, WcOpcode::Recv)]);
    assert!(wcs[0].wc_flags.contains(WcFlags::WITH_INV));
    assert_eq!((wcs[0].invalidated_rkey, wcs[0].byte_len), (KEY, 2000));
    assert_eq!(p.n[B].read(0x1000, 2000), pattern(2000, 3));

    p.n[A].post(0, 2, SendOp::Write, (0, 8), (iova, KEY));
    p.deliver_all(A);
    p.deliver_all(B);
    let s = p.n[A].send_wcs();
    assert_eq!(s.last().map(|w| w.status), Some(WcStatus::RemAccessErr));
}

/// Rule (IBTA 10.6.3.1): an R_Key that names no region the requester may
/// end (here an ordinary region) fails the receive with a remote invalid
/// request error and moves the responder's QP to the error state; the
/// region stays usable.
#[test]
fn send_with_invalidate_of_an_ordinary_region_fails_the_receive() {
    let mut p = Pair::new(0x100, &opts(), 0x200, &opts());
    let rkey = p.n[B].mr.rkey;
    p.n[B].post_recv(0, 7, 0x1000, 64);
    p.n[A].post(0, 1, SendOp::SendInv(rkey), (0, 16), (0, 0));
    let req = p.deliver_all(A);
    assert_eq!(psn_ops(&req), [(0x100, Opcode::RcSendOnlyInv)]);
    p.deliver_all(B);
    let wcs = p.n[B].recv_wcs();
    assert_eq!(
        wc_summary(&wcs),
        [(7, WcStatus::RemInvReqErr, WcOpcode::Recv)]
    );
    assert_eq!(p.n[B].state(), QpState::Err);
    assert_eq!(p.n[B].read(0, 4).len(), 4, "the region is still there");
}

/// Kernel regions take keys of the kernel's key space only.
#[test]
fn kernel_regions_take_kernel_keys_only() {
    let mut p = Pair::new(0x100, &opts(), 0x200, &opts());
    let pd = p.n[B].mr.pd;
    let mem = VecMemory::new(64);
    let r =
        p.n[B]
            .eng
            .insert_kernel_mr(0x1234_5600, pd, AccessFlags::all(), 0, Box::new(mem), true);
    assert!(r.is_err());
    assert!(!crate::engine::is_kernel_key(p.n[B].mr.rkey));
}

/// Rule (`ibv_rereg_mr`): a re-registered region keeps its keys; the old
/// memory is out of reach at once and a peer's access with the same R_Key
/// reaches the new memory.
#[test]
fn reregistration_keeps_the_key_and_ends_the_old_memory() {
    use crate::engine::command::RegMr;
    let mut p = Pair::new(0x100, &opts(), 0x200, &opts());
    let old = p.n[B].mr.clone();
    let (pd, rkey, iova) = (old.pd, old.rkey, old.iova);
    let fresh = VecMemory::new(4096);
    let reg = RegMr {
        pd,
        access: AccessFlags::all(),
        iova,
        mem: Box::new(fresh),
        rekey: Some(rkey),
    };
    let entry = p.n[B].eng.call(0, reg).expect("rereg");
    assert_eq!((entry.lkey, entry.rkey), (rkey, rkey));
    assert!(
        old.mem.read(0, &mut [0u8; 4]).is_err(),
        "the old memory is out of reach"
    );
    p.n[A].write(0, &pattern(64, 9));
    p.n[A].post(0, 1, SendOp::Write, (0, 64), (iova, rkey));
    p.deliver_all(A);
    p.deliver_all(B);
    assert_eq!(
        p.n[A].send_wcs().last().map(|w| w.status),
        Some(WcStatus::Success)
    );
    let mut got = vec![0u8; 64];
    entry.mem.read(0, &mut got).expect("read");
    assert_eq!(got, pattern(64, 9));
    let bad = RegMr {
        pd,
        access: AccessFlags::all(),
        iova,
        mem: Box::new(VecMemory::new(64)),
        rekey: Some(0x1234),
    };
    assert!(p.n[B].eng.call(0, bad).is_err(), "no MR of that key");
}

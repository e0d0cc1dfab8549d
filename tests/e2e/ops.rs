//! One trial per operation between the two processes: SEND, SEND with
//! immediate, RDMA WRITE (with immediate), RDMA READ, the atomics and
//! inline sends, with every completion field checked.

use crate::harness::{assert_wc, expect_ok, fill, sge, Fixture, Link, ALL};
use crate::proto::{ConnOpts, WrSpec};
use std::time::Duration;
use urdma::{RecvWr, SendWr, WcFlags, WcOpcode, WcStatus, WorkCompletion};

/// Background pattern seed of receive buffers (guard bytes).
pub const BG: u64 = 0xB6;

/// A fixture with one connected QP pair (default options).
pub fn setup() -> (Fixture, Link) {
    let mut f = Fixture::new();
    let l = f.connect(&ConnOpts::default());
    (f, l)
}

/// Check a receive completion: ids, status, length, QP numbers, flags, imm.
pub fn assert_recv(
    wc: &WorkCompletion,
    wr_id: u64,
    opcode: WcOpcode,
    byte_len: usize,
    qps: (u32, u32),
    imm: Option<u32>,
) {
    assert_wc(wc, wr_id, WcStatus::Success, opcode);
    assert_eq!(wc.byte_len as usize, byte_len, "byte_len of {wc:?}");
    assert_eq!((wc.qp_num, wc.src_qp), qps, "qp_num/src_qp of {wc:?}");
    match imm {
        Some(v) => {
            assert!(wc.wc_flags.contains(WcFlags::WITH_IMM), "{wc:?}");
            assert_eq!(wc.imm_data, v, "imm_data of {wc:?}");
        }
        None => assert!(!wc.wc_flags.contains(WcFlags::WITH_IMM), "{wc:?}"),
    }
}

/// Check that a peer MR holds pattern `seed` at `[off, off+len)` and the
/// background pattern [`BG`] everywhere else.
pub fn check_peer_region(
    f: &mut Fixture,
    mr: u32,
    total: usize,
    off: usize,
    len: usize,
    seed: u64,
) {
    assert_eq!(
        f.peer.check(mr, off, len, seed, 0),
        None,
        "payload at {off}+{len}"
    );
    assert_eq!(f.peer.check(mr, 0, off, BG, 0), None, "guard before {off}");
    let end = off + len;
    assert_eq!(
        f.peer.check(mr, end, total - end, BG, end as u64),
        None,
        "guard after {end}"
    );
}

/// Same as [`check_peer_region`] for a local MR.
pub fn check_local_region(mr: &urdma::Mr, off: usize, len: usize, seed: u64) {
    use crate::harness::check;
    assert_eq!(check(mr, off, len, seed, 0), None, "payload at {off}+{len}");
    assert_eq!(check(mr, 0, off, BG, 0), None, "guard before {off}");
    let end = off + len;
    assert_eq!(
        check(mr, end, mr.len() - end, BG, end as u64),
        None,
        "guard after"
    );
}

/// Assert that the peer CQ holds no completion (the peer stayed passive).
pub fn assert_peer_cq_empty(f: &mut Fixture) {
    let p = f.peer.poll_for(f.pcq, 1, Duration::from_millis(50));
    assert!(
        p.wcs.is_empty() && !p.overrun,
        "unexpected peer completions {p:?}"
    );
}

/// SEND (optionally with immediate) in both directions.
fn send_both_ways(imm: Option<u32>) {
    let (mut f, l) = setup();
    let me = l.qp.qpn();
    // Local -> peer: 1000 bytes into a receive buffer at offset 10.
    let src = f.mr(4096, ALL);
    fill(&src, 3, 1000, 1);
    let dst = f.peer_mr(4096, ALL);
    f.peer.fill(dst.id, 0, 4096, BG);
    f.peer.post_recv(l.pqp, 77, &[sge(&dst, 10, 2000)]);
    let s = [src.slice(3, 1000).unwrap()];
    let wr = match imm {
        Some(v) => SendWr::send_imm(5, &s, v),
        None => SendWr::send(5, &s),
    };
    l.qp.post_send(wr).unwrap();
    let wc = expect_ok(&f.cq, 5, WcOpcode::Send);
    assert_eq!(wc.qp_num, me);
    let wcs = f.peer.poll(f.pcq, 1);
    assert_recv(&wcs[0], 77, WcOpcode::Recv, 1000, (l.pqpn, me), imm);
    check_peer_region(&mut f, dst.id, 4096, 10, 1000, 1);

    // Peer -> local: 3000 bytes into a local buffer at offset 7.
    let rbuf = f.mr(8192, ALL);
    fill(&rbuf, 0, 8192, BG);
    l.qp.post_recv(RecvWr::new(8, &[rbuf.slice(7, 5000).unwrap()]))
        .unwrap();
    let psrc = f.peer_mr(4096, ALL);
    f.peer.fill(psrc.id, 1, 3000, 2);
    let sges = vec![sge(&psrc, 1, 3000)];
    let wr = match imm {
        Some(v) => WrSpec::SendImm { sges, imm: v },
        None => WrSpec::Send { sges },
    };
    f.peer.post_send(l.pqp, 9, wr);
    let wc = crate::harness::wait_wc(&f.cq);
    assert_recv(&wc, 8, WcOpcode::Recv, 3000, (me, l.pqpn), imm);
    let wcs = f.peer.poll(f.pcq, 1);
    assert_wc(&wcs[0], 9, WcStatus::Success, WcOpcode::Send);
    assert_eq!(wcs[0].qp_num, l.pqpn);
    check_local_region(&rbuf, 7, 3000, 2);
}

/// SEND both ways.
pub fn send() {
    send_both_ways(None);
}

/// SEND_WITH_IMM both ways.
pub fn send_with_imm() {
    send_both_ways(Some(0xDEAD_BEEF));
}

/// RDMA WRITE into the passive peer.
pub fn rdma_write() {
    let (mut f, l) = setup();
    let src = f.mr(1 << 16, ALL);
    fill(&src, 100, 40_000, 3);
    let dst = f.peer_mr(1 << 16, ALL);
    f.peer.fill(dst.id, 0, 1 << 16, BG);
    let s = [src.slice(100, 40_000).unwrap()];
    l.qp.post_send(SendWr::write(1, &s, dst.addr + 333, dst.rkey))
        .unwrap();
    let wc = expect_ok(&f.cq, 1, WcOpcode::RdmaWrite);
    assert_eq!(wc.qp_num, l.qp.qpn());
    check_peer_region(&mut f, dst.id, 1 << 16, 333, 40_000, 3);
    assert_peer_cq_empty(&mut f);
}

/// RDMA WRITE with immediate: the peer gets RECV_RDMA_WITH_IMM.
pub fn rdma_write_with_imm() {
    let (mut f, l) = setup();
    let src = f.mr(1 << 14, ALL);
    fill(&src, 0, 10_000, 4);
    let dst = f.peer_mr(1 << 14, ALL);
    f.peer.fill(dst.id, 0, 1 << 14, BG);
    let rq = f.peer_mr(64, ALL);
    f.peer.post_recv(l.pqp, 41, &[sge(&rq, 0, 64)]);
    let s = [src.slice(0, 10_000).unwrap()];
    let wr = SendWr::write_imm(2, &s, dst.addr + 17, dst.rkey, 0x1234_5678);
    l.qp.post_send(wr).unwrap();
    expect_ok(&f.cq, 2, WcOpcode::RdmaWrite);
    let wcs = f.peer.poll(f.pcq, 1);
    let qps = (l.pqpn, l.qp.qpn());
    assert_recv(
        &wcs[0],
        41,
        WcOpcode::RecvRdmaWithImm,
        10_000,
        qps,
        Some(0x1234_5678),
    );
    check_peer_region(&mut f, dst.id, 1 << 14, 17, 10_000, 4);
}

/// RDMA READ from the passive peer.
pub fn rdma_read() {
    let (mut f, l) = setup();
    let src = f.peer_mr(1 << 16, ALL);
    f.peer.fill(src.id, 0, 1 << 16, 5);
    let dst = f.mr(1 << 16, ALL);
    fill(&dst, 0, 1 << 16, BG);
    let s = [dst.slice(9, 50_001).unwrap()];
    l.qp.post_send(SendWr::read(3, &s, src.addr, src.rkey))
        .unwrap();
    let wc = expect_ok(&f.cq, 3, WcOpcode::RdmaRead);
    assert_eq!((wc.byte_len, wc.qp_num), (50_001, l.qp.qpn()));
    check_local_region(&dst, 9, 50_001, 5);
    assert_peer_cq_empty(&mut f);
}

/// Read the u64 at `off` of a local MR.
pub fn local_u64(mr: &urdma::Mr, off: usize) -> u64 {
    let mut b = [0u8; 8];
    mr.read_at(off, &mut b).unwrap();
    u64::from_ne_bytes(b)
}

/// Read the u64 at `off` of a peer MR.
pub fn peer_u64(f: &mut Fixture, mr: u32, off: usize) -> u64 {
    u64::from_ne_bytes(f.peer.peek(mr, off, 8).try_into().unwrap())
}

/// ATOMIC_CMP_AND_SWP, succeeding then failing the comparison.
pub fn atomic_cmp_swap() {
    let (mut f, l) = setup();
    let target = f.peer_mr(64, ALL);
    let v0 = 0x1111_2222_3333_4444u64;
    f.peer.ok::<()>(&crate::proto::Cmd::Poke {
        mr: target.id,
        off: 8,
        data: v0.to_ne_bytes().to_vec(),
    });
    let res = f.mr(64, ALL);
    let r = res.slice(16, 8).unwrap();
    let va = target.addr + 8;
    l.qp.post_send(SendWr::compare_swap(1, &r, va, target.rkey, v0, 7))
        .unwrap();
    let wc = expect_ok(&f.cq, 1, WcOpcode::CompSwap);
    assert_eq!((wc.byte_len, wc.qp_num), (8, l.qp.qpn()));
    assert_eq!(local_u64(&res, 16), v0);
    assert_eq!(peer_u64(&mut f, target.id, 8), 7, "swap happened");
    // Compare fails: the original comes back and the target is unchanged.
    l.qp.post_send(SendWr::compare_swap(2, &r, va, target.rkey, v0, 9))
        .unwrap();
    expect_ok(&f.cq, 2, WcOpcode::CompSwap);
    assert_eq!(local_u64(&res, 16), 7);
    assert_eq!(peer_u64(&mut f, target.id, 8), 7, "no swap on mismatch");
    assert_eq!(f.peer.peek(target.id, 0, 8), vec![0; 8], "neighbour intact");
    assert_peer_cq_empty(&mut f);
}

/// ATOMIC_FETCH_AND_ADD, including wrap-around.
pub fn atomic_fetch_add() {
    let (mut f, l) = setup();
    let target = f.peer_mr(64, ALL);
    let res = f.mr(64, ALL);
    let r = res.slice(0, 8).unwrap();
    f.peer.ok::<()>(&crate::proto::Cmd::Poke {
        mr: target.id,
        off: 32,
        data: 40u64.to_ne_bytes().to_vec(),
    });
    let va = target.addr + 32;
    l.qp.post_send(SendWr::fetch_add(1, &r, va, target.rkey, 2))
        .unwrap();
    let wc = expect_ok(&f.cq, 1, WcOpcode::FetchAdd);
    assert_eq!(wc.byte_len, 8);
    assert_eq!(local_u64(&res, 0), 40);
    assert_eq!(peer_u64(&mut f, target.id, 32), 42);
    l.qp.post_send(SendWr::fetch_add(2, &r, va, target.rkey, u64::MAX))
        .unwrap();
    expect_ok(&f.cq, 2, WcOpcode::FetchAdd);
    assert_eq!(local_u64(&res, 0), 42);
    assert_eq!(peer_u64(&mut f, target.id, 32), 41, "wrapping add");
}

/// Inline SEND and inline RDMA WRITE.
pub fn inline_ops() {
    let (mut f, l) = setup();
    let dst = f.peer_mr(4096, ALL);
    f.peer.fill(dst.id, 0, 4096, BG);
    f.peer.post_recv(l.pqp, 1, &[sge(&dst, 100, 200)]);
    let data = crate::pattern::pattern(6, 0, 50);
    l.qp.post_send(SendWr::send_inline(10, &data)).unwrap();
    expect_ok(&f.cq, 10, WcOpcode::Send);
    let wcs = f.peer.poll(f.pcq, 1);
    assert_recv(&wcs[0], 1, WcOpcode::Recv, 50, (l.pqpn, l.qp.qpn()), None);
    assert_eq!(f.peer.check(dst.id, 100, 50, 6, 0), None);
    // Inline WRITE of 64 bytes (the default max_inline_data).
    let data = crate::pattern::pattern(7, 0, 64);
    let wr = SendWr::write_inline(11, &data, dst.addr + 1001, dst.rkey);
    l.qp.post_send(wr).unwrap();
    expect_ok(&f.cq, 11, WcOpcode::RdmaWrite);
    assert_eq!(f.peer.check(dst.id, 1001, 64, 7, 0), None);
    assert_eq!(f.peer.check(dst.id, 1065, 4096 - 1065, BG, 1065), None);
    assert_eq!(f.peer.check(dst.id, 150, 1001 - 150, BG, 150), None);
    // Too much inline data is refused at post time.
    let big = vec![0u8; 65];
    assert!(l.qp.post_send(SendWr::send_inline(12, &big)).is_err());
}

//! Transfers: scatter/gather lists, unsignaled WRs, completion order,
//! several QPs at once, the peer as requester, and multi-packet messages
//! at every path MTU with unaligned lengths and offsets.

use crate::harness::{
    assert_wc, check, expect_ok, fill, packet_payload, sge, wait_wc, Fixture, ALL,
};
use crate::ops::{assert_peer_cq_empty, assert_recv, check_local_region, check_peer_region, BG};
use crate::proto::{ConnOpts, WrSpec};
use std::time::Duration;
use urdma::{Counter, Mtu, SendWr, WcOpcode, WcStatus};

/// SEND of 3 SGEs into a receive of 2 SGEs of other sizes; WRITE from
/// 3 SGEs; READ into 3 SGEs.
pub fn scatter_gather() {
    let mut f = Fixture::new();
    let l = f.connect(&ConnOpts::default());
    let (a, b) = (f.mr(8192, ALL), f.mr(8192, ALL));
    // The message: 100 bytes of a@5, 1 byte of b@4000, 4000 bytes of a@3000.
    let parts = [(&a, 5, 100), (&b, 4000, 1), (&a, 3000, 4000)];
    let mut base = 0u64;
    let mut sgl = Vec::new();
    for (mr, off, len) in parts {
        let v = crate::pattern::pattern(8, base, len);
        mr.write_at(off, &v).unwrap();
        sgl.push(mr.slice(off, len).unwrap());
        base += len as u64;
    }
    let total = base as usize;
    let (r1, r2) = (f.peer_mr(4096, ALL), f.peer_mr(4096, ALL));
    f.peer.fill(r1.id, 0, 4096, BG);
    f.peer.fill(r2.id, 0, 4096, BG);
    f.peer
        .post_recv(l.pqp, 3, &[sge(&r1, 96, 3000), sge(&r2, 11, 2000)]);
    l.qp.post_send(SendWr::send(1, &sgl)).unwrap();
    expect_ok(&f.cq, 1, WcOpcode::Send);
    let wcs = f.peer.poll(f.pcq, 1);
    assert_recv(
        &wcs[0],
        3,
        WcOpcode::Recv,
        total,
        (l.pqpn, l.qp.qpn()),
        None,
    );
    assert_eq!(f.peer.check(r1.id, 96, 3000, 8, 0), None);
    assert_eq!(f.peer.check(r2.id, 11, total - 3000, 8, 3000), None);
    assert_eq!(
        f.peer
            .check(r2.id, 11 + total - 3000, 10, BG, (11 + total - 3000) as u64),
        None
    );

    // WRITE the same gather list, then READ it back into 3 other SGEs.
    let t = f.peer_mr(8192, ALL);
    l.qp.post_send(SendWr::write(2, &sgl, t.addr + 1, t.rkey))
        .unwrap();
    expect_ok(&f.cq, 2, WcOpcode::RdmaWrite);
    assert_eq!(f.peer.check(t.id, 1, total, 8, 0), None);
    let c = f.mr(8192, ALL);
    let back = [
        c.slice(1, 2000).unwrap(),
        c.slice(4000, 7).unwrap(),
        b.slice(0, 2094).unwrap(),
    ];
    l.qp.post_send(SendWr::read(4, &back, t.addr + 1, t.rkey))
        .unwrap();
    let wc = expect_ok(&f.cq, 4, WcOpcode::RdmaRead);
    assert_eq!(wc.byte_len as usize, total);
    assert_eq!(check(&c, 1, 2000, 8, 0), None);
    assert_eq!(check(&c, 4000, 7, 8, 2000), None);
    assert_eq!(check(&b, 0, 2094, 8, 2007), None);
}

/// Unsignaled WRs complete silently; only the signaled one reports.
pub fn unsignaled() {
    let mut f = Fixture::new();
    let l = f.connect(&ConnOpts::default());
    let src = f.mr(1 << 16, ALL);
    let dst = f.peer_mr(1 << 16, ALL);
    for i in 0..5u64 {
        fill(&src, i as usize * 4096, 4096, 20 + i);
    }
    let rq = f.peer_mr(8192, ALL);
    f.peer.post_recv(l.pqp, 50, &[sge(&rq, 0, 8192)]);
    for i in 0..4u64 {
        let s = [src.slice(i as usize * 4096, 4096).unwrap()];
        let wr = SendWr::write(i, &s, dst.addr + i * 8192, dst.rkey).unsignaled();
        l.qp.post_send(wr).unwrap();
    }
    let s = [src.slice(4 * 4096, 4096).unwrap()];
    l.qp.post_send(SendWr::send(99, &s).unsignaled()).unwrap();
    let s = [src.slice(0, 100).unwrap()];
    l.qp.post_send(SendWr::write(100, &s, dst.addr + 60_000, dst.rkey))
        .unwrap();
    expect_ok(&f.cq, 100, WcOpcode::RdmaWrite);
    assert!(f.cq.poll(8).unwrap().is_empty(), "unsignaled WRs completed");
    std::thread::sleep(Duration::from_millis(50));
    assert!(f.cq.poll(8).unwrap().is_empty(), "unsignaled WRs completed");
    for i in 0..4u64 {
        assert_eq!(
            f.peer.check(dst.id, i as usize * 8192, 4096, 20 + i, 0),
            None
        );
    }
    let wcs = f.peer.poll(f.pcq, 1);
    assert_recv(
        &wcs[0],
        50,
        WcOpcode::Recv,
        4096,
        (l.pqpn, l.qp.qpn()),
        None,
    );
    assert_eq!(f.peer.check(rq.id, 0, 4096, 24, 0), None);
}

/// A mix of 30 signaled WRs completes in posting order.
pub fn completion_order() {
    let mut f = Fixture::new();
    let l = f.connect(&ConnOpts::default());
    let src = f.mr(1 << 20, ALL);
    fill(&src, 0, 1 << 20, 30);
    let dst = f.peer_mr(1 << 20, ALL);
    f.peer.fill(dst.id, 0, 1 << 20, 31);
    for i in 0..12 {
        f.peer.post_recv(
            l.pqp,
            1000 + i,
            &[sge(&dst, 900_000 + i as usize * 10_000, 10_000)],
        );
    }
    let mut expect = Vec::new();
    for i in 0..30u64 {
        let off = i as usize * 20_000;
        let len = 1 + (i as usize * 7919) % 19_000;
        let s = [src.slice(off, len).unwrap()];
        let a = dst.addr + off as u64;
        let (wr, op) = match i % 5 {
            0 => (SendWr::write(i, &s, a, dst.rkey), WcOpcode::RdmaWrite),
            1 => (
                SendWr::send(i, &[src.slice(off, len.min(10_000)).unwrap()]),
                WcOpcode::Send,
            ),
            2 => (SendWr::read(i, &s, a, dst.rkey), WcOpcode::RdmaRead),
            3 => (
                SendWr::fetch_add(i, &src.slice(off, 8).unwrap(), a, dst.rkey, 1),
                WcOpcode::FetchAdd,
            ),
            _ => (
                SendWr::write_imm(i, &s, a, dst.rkey, i as u32),
                WcOpcode::RdmaWrite,
            ),
        };
        l.qp.post_send(wr).unwrap();
        expect.push((i, op));
    }
    for (i, op) in expect {
        assert_wc(&wait_wc(&f.cq), i, WcStatus::Success, op);
    }
    // 6 SENDs and 6 WRITE_WITH_IMMs consumed receives, in order.
    let wcs = f.peer.poll(f.pcq, 12);
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (1000..1012).collect::<Vec<_>>());
    let ops: Vec<WcOpcode> = wcs.iter().map(|w| w.opcode).collect();
    let mut want = Vec::new();
    for i in 0..30 {
        match i % 5 {
            1 => want.push(WcOpcode::Recv),
            4 => want.push(WcOpcode::RecvRdmaWithImm),
            _ => {}
        }
    }
    assert_eq!(ops, want);
}

/// Four QP pairs between the same two processes, used concurrently.
pub fn multi_qp() {
    let mut f = Fixture::new();
    let links: Vec<_> = (0..4).map(|_| f.connect(&ConnOpts::default())).collect();
    let src = f.mr(1 << 20, ALL);
    fill(&src, 0, 1 << 20, 40);
    let dst = f.peer_mr(4 << 20, ALL);
    for (q, l) in links.iter().enumerate() {
        f.peer
            .post_recv(l.pqp, q as u64, &[sge(&dst, (3 << 20) + q * 65536, 65536)]);
    }
    for round in 0..8u64 {
        for (q, l) in links.iter().enumerate() {
            let off = (q * 8 + round as usize) * 32768;
            let s = [src.slice(off % (1 << 20), 32768).unwrap()];
            let wr = SendWr::write(round, &s, dst.addr + off as u64, dst.rkey);
            l.qp.post_send(wr).unwrap();
        }
    }
    for (q, l) in links.iter().enumerate() {
        l.qp.post_send(SendWr::send(8, &[src.slice(q * 1000, 5000).unwrap()]))
            .unwrap();
    }
    let mut next = [0u64; 4];
    for _ in 0..36 {
        let wc = wait_wc(&f.cq);
        let q = links
            .iter()
            .position(|l| l.qp.qpn() == wc.qp_num)
            .expect("known qp_num");
        assert_eq!(
            (wc.wr_id, wc.status),
            (next[q], WcStatus::Success),
            "QP {q}: {wc:?}"
        );
        next[q] += 1;
    }
    let wcs = f.peer.poll(f.pcq, 4);
    for wc in &wcs {
        let q = wc.wr_id as usize;
        assert_recv(
            wc,
            q as u64,
            WcOpcode::Recv,
            5000,
            (links[q].pqpn, links[q].qp.qpn()),
            None,
        );
        assert_eq!(
            f.peer
                .check(dst.id, (3 << 20) + q * 65536, 5000, 40, (q * 1000) as u64),
            None
        );
    }
    for q in 0..4 {
        for round in 0..8 {
            let off = (q * 8 + round) * 32768;
            let base = (off % (1 << 20)) as u64;
            assert_eq!(
                f.peer.check(dst.id, off, 32768, 40, base),
                None,
                "QP {q} round {round}"
            );
        }
    }
}

/// The peer as requester: WRITE, READ and atomics into this process,
/// which does nothing while they run.
pub fn peer_requester() {
    let mut f = Fixture::new();
    let l = f.connect(&ConnOpts::default());
    let mine = f.mr(1 << 16, ALL);
    fill(&mine, 0, 1 << 16, BG);
    let theirs = f.peer_mr(1 << 16, ALL);
    f.peer.fill(theirs.id, 0, 30_000, 50);
    let (addr, rkey) = (mine.addr(), mine.rkey());
    let sges = vec![sge(&theirs, 0, 30_000)];
    f.peer.post_send(
        l.pqp,
        1,
        WrSpec::Write {
            sges,
            raddr: addr + 5,
            rkey,
        },
    );
    let sges = vec![sge(&theirs, 40_001, 20_000)];
    f.peer.post_send(
        l.pqp,
        2,
        WrSpec::Read {
            sges,
            raddr: addr + 5,
            rkey,
        },
    );
    let s = sge(&theirs, 64_000, 8);
    f.peer.post_send(
        l.pqp,
        3,
        WrSpec::FetchAdd {
            sge: s,
            raddr: addr + 65_000,
            rkey,
            add: 5,
        },
    );
    let wcs = f.peer.poll(f.pcq, 3);
    let ops = [WcOpcode::RdmaWrite, WcOpcode::RdmaRead, WcOpcode::FetchAdd];
    for (i, wc) in wcs.iter().enumerate() {
        assert_wc(wc, i as u64 + 1, WcStatus::Success, ops[i]);
        assert_eq!(wc.qp_num, l.pqpn);
    }
    assert!(
        f.cq.poll(4).unwrap().is_empty(),
        "passive side got completions"
    );
    assert_eq!(check(&mine, 5, 30_000, 50, 0), None);
    assert_eq!(f.peer.check(theirs.id, 40_001, 20_000, 50, 0), None);
    let old = crate::pattern::pattern(BG, 65_000, 8);
    assert_eq!(f.peer.peek(theirs.id, 64_000, 8), old);
    let new = u64::from_ne_bytes(old.try_into().unwrap()).wrapping_add(5);
    assert_eq!(crate::ops::local_u64(&mine, 65_000), new);
}

/// Lengths exercised at every MTU.
const LENS: [usize; 6] = [1, 255, 257, 4097, 65537, (1 << 20) + 3];

/// SEND, WRITE and READ of every length in [`LENS`] at path MTU `mtu`,
/// with odd offsets on both sides.
pub fn mtu(mtu: usize) {
    let mut f = Fixture::new();
    let l = f.connect(&ConnOpts::mtu(mtu));
    assert_eq!(
        l.qp.query().unwrap().path_mtu,
        Mtu::from_bytes(mtu).unwrap()
    );
    let size = (1 << 20) + 64;
    let local = f.mr(size, ALL);
    let remote = f.peer_mr(size, ALL);
    for (k, &len) in LENS.iter().enumerate() {
        let seed = 100 + k as u64 * 3;
        let (lo, ro) = (3 + k % 5, 5 + k * 7 % 11);
        // SEND local -> peer.
        fill(&local, 0, size, BG);
        fill(&local, lo, len, seed);
        f.peer.fill(remote.id, 0, size, BG);
        f.peer
            .post_recv(l.pqp, k as u64, &[sge(&remote, ro, len + 13)]);
        l.qp.post_send(SendWr::send(
            10 * k as u64,
            &[local.slice(lo, len).unwrap()],
        ))
        .unwrap();
        expect_ok(&f.cq, 10 * k as u64, WcOpcode::Send);
        let wcs = f.peer.poll(f.pcq, 1);
        assert_recv(
            &wcs[0],
            k as u64,
            WcOpcode::Recv,
            len,
            (l.pqpn, l.qp.qpn()),
            None,
        );
        check_peer_region(&mut f, remote.id, size, ro, len, seed);
        // WRITE local -> peer at another offset.
        f.peer.fill(remote.id, 0, size, BG);
        let s = [local.slice(lo, len).unwrap()];
        let wr = SendWr::write(
            10 * k as u64 + 1,
            &s,
            remote.addr + ro as u64 + 2,
            remote.rkey,
        );
        l.qp.post_send(wr).unwrap();
        expect_ok(&f.cq, 10 * k as u64 + 1, WcOpcode::RdmaWrite);
        check_peer_region(&mut f, remote.id, size, ro + 2, len, seed);
        // READ peer -> local.
        f.peer.fill(remote.id, ro + 1, len, seed + 1);
        fill(&local, 0, size, BG);
        let s = [local.slice(lo + 4, len).unwrap()];
        let wr = SendWr::read(
            10 * k as u64 + 2,
            &s,
            remote.addr + ro as u64 + 1,
            remote.rkey,
        );
        l.qp.post_send(wr).unwrap();
        let wc = expect_ok(&f.cq, 10 * k as u64 + 2, WcOpcode::RdmaRead);
        assert_eq!(wc.byte_len as usize, len);
        check_local_region(&local, lo + 4, len, seed + 1);
    }
    assert_peer_cq_empty(&mut f);
    let pkts = f.dev.counters()[Counter::TxPackets] as usize;
    let unit = packet_payload(mtu);
    assert!(
        pkts >= 2 * ((1 << 20) / unit),
        "not segmented by {unit} bytes: {pkts} packets"
    );
}

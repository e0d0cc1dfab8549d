//! Remote access errors (unknown rkey, out of bounds, missing access
//! rights, foreign PD), flushing after an error, and the synchronous
//! errors of post_send and modify_qp.

use crate::harness::{assert_wc, wait_wc, Fixture, Link, ALL};
use crate::proto::{Cmd, ConnOpts, MrInfo};
use urdma::{
    AccessFlags, AddressVector, Device, DeviceConfig, Error, Mr, QpAttr, QpAttrMask as M,
    QpInitAttr, QpState, SendWr, WcOpcode, WcStatus,
};

/// A remote operation aimed at a peer region.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    /// RDMA WRITE of 64 bytes.
    Write,
    /// RDMA READ of 64 bytes.
    Read,
    /// Compare and swap.
    CompSwap,
    /// Fetch and add.
    FetchAdd,
}

/// Every remote operation.
pub const OPS: [Op; 4] = [Op::Write, Op::Read, Op::CompSwap, Op::FetchAdd];

impl Op {
    /// The work request (wr_id 1) for `va`/`rkey`, using `buf` locally.
    fn wr(self, buf: &Mr, va: u64, rkey: u32) -> (SendWr, WcOpcode) {
        let s = buf.slice(0, 64).unwrap();
        let r = buf.slice(64, 8).unwrap();
        match self {
            Op::Write => (SendWr::write(1, &[s], va, rkey), WcOpcode::RdmaWrite),
            Op::Read => (SendWr::read(1, &[s], va, rkey), WcOpcode::RdmaRead),
            Op::CompSwap => (
                SendWr::compare_swap(1, &r, va, rkey, 0, 1),
                WcOpcode::CompSwap,
            ),
            Op::FetchAdd => (SendWr::fetch_add(1, &r, va, rkey, 1), WcOpcode::FetchAdd),
        }
    }
}

/// Post `op` on a fresh QP pair at `va`/`rkey` and check: the requester
/// gets REM_ACCESS_ERR, the peer region `mr` and the local buffer are
/// unchanged, both QPs are in ERR, and WRs posted behind and after the
/// failed one complete with WR_FLUSH_ERR.
pub fn expect_access_error(f: &mut Fixture, op: Op, mr: &MrInfo, va: u64, rkey: u32) {
    let l: Link = f.connect(&ConnOpts::default());
    let buf = f.mr(4096, ALL);
    crate::harness::fill(&buf, 0, 4096, 0x77);
    f.peer.fill(mr.id, 0, mr.len, 0x66);
    let before = f.peer.digest(mr.id, 0, mr.len);
    // A receive on the responder, flushed when its QP enters ERR.
    let rq = f.peer_mr(64, ALL);
    f.peer
        .post_recv(l.pqp, 900, &[crate::harness::sge(&rq, 0, 64)]);
    let (wr, opcode) = op.wr(&buf, va, rkey);
    l.qp.post_send(wr).unwrap();
    // A valid WRITE queued behind the failing WR.
    let ok_target = f.peer_mr(64, ALL);
    let s = [buf.slice(128, 16).unwrap()];
    l.qp.post_send(SendWr::write(2, &s, ok_target.addr, ok_target.rkey))
        .unwrap();
    let wc = wait_wc(&f.cq);
    assert_wc(&wc, 1, WcStatus::RemAccessErr, opcode);
    assert_eq!(wc.qp_num, l.qp.qpn());
    assert_wc(
        &wait_wc(&f.cq),
        2,
        WcStatus::WrFlushErr,
        WcOpcode::RdmaWrite,
    );
    assert_eq!(
        f.peer.digest(mr.id, 0, mr.len),
        before,
        "{op:?}: peer memory changed"
    );
    assert_eq!(
        crate::harness::check(&buf, 0, 4096, 0x77, 0),
        None,
        "local buffer changed"
    );
    assert_eq!(l.qp.query().unwrap().qp_state, QpState::Err);
    assert_eq!(
        f.peer.query(l.pqp).qp_state,
        QpState::Err,
        "responder QP state"
    );
    let wcs = f.peer.poll(f.pcq, 1);
    assert_wc(&wcs[0], 900, WcStatus::WrFlushErr, WcOpcode::Recv);
    // A WR posted in ERR is flushed.
    l.qp.post_send(SendWr::send(3, &[buf.slice(0, 1).unwrap()]))
        .unwrap();
    assert_wc(&wait_wc(&f.cq), 3, WcStatus::WrFlushErr, WcOpcode::Send);
    assert!(f.cq.poll(4).unwrap().is_empty());
}

/// An rkey that names no region of the peer.
pub fn unknown_rkey() {
    let mut f = Fixture::new();
    let mr = f.peer_mr(4096, ALL);
    for op in OPS {
        expect_access_error(&mut f, op, &mr, mr.addr, mr.rkey ^ 0x00A5_5A00);
    }
}

/// Addresses and lengths outside the region.
pub fn out_of_bounds() {
    let mut f = Fixture::new();
    let mr = f.peer_mr(4096, ALL);
    let end = mr.addr + mr.len as u64;
    for op in OPS {
        if matches!(op, Op::Write | Op::Read) {
            // A 64-byte access straddling the end.
            expect_access_error(&mut f, op, &mr, end - 8, mr.rkey);
        }
        expect_access_error(&mut f, op, &mr, end, mr.rkey);
        expect_access_error(&mut f, op, &mr, mr.addr - 8, mr.rkey);
    }
}

/// A region without REMOTE_WRITE refuses WRITE.
pub fn no_remote_write() {
    let mut f = Fixture::new();
    let acc = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let mr = f.peer_mr(4096, acc);
    expect_access_error(&mut f, Op::Write, &mr, mr.addr, mr.rkey);
}

/// A region without REMOTE_READ refuses READ.
pub fn no_remote_read() {
    let mut f = Fixture::new();
    let acc = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
    let mr = f.peer_mr(4096, acc);
    expect_access_error(&mut f, Op::Read, &mr, mr.addr, mr.rkey);
}

/// A region without REMOTE_ATOMIC refuses both atomics.
pub fn no_remote_atomic() {
    let mut f = Fixture::new();
    let acc = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = f.peer_mr(4096, acc);
    expect_access_error(&mut f, Op::CompSwap, &mr, mr.addr, mr.rkey);
    expect_access_error(&mut f, Op::FetchAdd, &mr, mr.addr, mr.rkey);
}

/// An rkey of another PD of the peer is refused.
pub fn other_pd_rkey() {
    let mut f = Fixture::new();
    let pd2: u32 = f.peer.ok(&Cmd::AllocPd);
    let mr = f.peer.reg_mr(pd2, 4096, ALL);
    for op in OPS {
        expect_access_error(&mut f, op, &mr, mr.addr, mr.rkey);
    }
}

/// A single-process device on a fresh loopback address.
fn lone_device() -> Device {
    Device::open(DeviceConfig::new(crate::harness::address_pair().0)).expect("open device")
}

/// post_send in RESET, INIT and RTR fails with WrongState.
pub fn post_send_wrong_state() {
    let dev = lone_device();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).unwrap();
    let mr = pd.reg_mr(64, ALL).unwrap();
    let post = |want: QpState| {
        let r = qp.post_send(SendWr::send(1, &[mr.slice(0, 8).unwrap()]));
        assert!(
            matches!(r, Err(Error::WrongState(s)) if s == want),
            "{want:?}: {r:?}"
        );
    };
    post(QpState::Reset);
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: ALL,
        ..QpAttr::default()
    };
    qp.modify(&a, M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS)
        .unwrap();
    post(QpState::Init);
    a.qp_state = QpState::Rtr;
    a.dest_qp_num = 0x123;
    a.ah_attr = AddressVector {
        dgid: dev.gid(0).unwrap(),
        ..AddressVector::default()
    };
    let rtr = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
    qp.modify(&a, rtr | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER)
        .unwrap();
    post(QpState::Rtr);
    assert!(cq.poll(4).unwrap().is_empty());
}

/// modify_qp refuses missing and extra mask bits, invalid values and
/// forbidden transitions, leaving the QP state unchanged.
pub fn modify_qp_bad_attrs() {
    let dev = lone_device();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(16).unwrap();
    let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).unwrap();
    let refuse = |a: &QpAttr, m: M, why: &str| {
        let before = qp.query().unwrap().qp_state;
        assert!(qp.modify(a, m).is_err(), "accepted: {why}");
        assert_eq!(
            qp.query().unwrap().qp_state,
            before,
            "state changed by: {why}"
        );
    };
    let init_mask = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: ALL,
        ..QpAttr::default()
    };
    refuse(
        &a,
        init_mask - M::ACCESS_FLAGS,
        "RESET->INIT without ACCESS_FLAGS",
    );
    refuse(&a, init_mask | M::SQ_PSN, "RESET->INIT with SQ_PSN");
    refuse(&QpAttr { port_num: 2, ..a }, init_mask, "port 2");
    refuse(&QpAttr { pkey_index: 1, ..a }, init_mask, "pkey index 1");
    refuse(
        &QpAttr {
            qp_state: QpState::Rts,
            ..a
        },
        M::STATE,
        "RESET->RTS",
    );
    refuse(
        &QpAttr {
            qp_state: QpState::Rtr,
            ..a
        },
        M::STATE,
        "RESET->RTR",
    );
    let claim = QpAttr {
        cur_qp_state: QpState::Rts,
        ..a
    };
    refuse(&claim, init_mask | M::CUR_STATE, "wrong cur_qp_state");
    qp.modify(&a, init_mask).unwrap();
    assert_eq!(qp.query().unwrap().qp_state, QpState::Init);

    a.qp_state = QpState::Rtr;
    a.dest_qp_num = 0x456;
    a.ah_attr = AddressVector {
        dgid: dev.gid(0).unwrap(),
        ..AddressVector::default()
    };
    let rtr = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC;
    refuse(&a, rtr, "INIT->RTR without MIN_RNR_TIMER");
    let rtr = rtr | M::MIN_RNR_TIMER;
    refuse(
        &QpAttr {
            rq_psn: 1 << 24,
            ..a
        },
        rtr,
        "rq_psn 2^24",
    );
    refuse(
        &QpAttr {
            dest_qp_num: 1 << 24,
            ..a
        },
        rtr,
        "dest_qp_num 2^24",
    );
    refuse(
        &QpAttr {
            min_rnr_timer: 32,
            ..a
        },
        rtr,
        "min_rnr_timer 32",
    );
    refuse(
        &QpAttr {
            max_dest_rd_atomic: 255,
            ..a
        },
        rtr,
        "max_dest_rd_atomic 255",
    );
    refuse(&a, rtr | M::SQ_PSN, "INIT->RTR with SQ_PSN");
    let no_gid = QpAttr {
        ah_attr: AddressVector::default(),
        ..a
    };
    refuse(&no_gid, rtr, "AV without a GID");
    qp.modify(&a, rtr).unwrap();

    a.qp_state = QpState::Rts;
    let rts = M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
    refuse(&a, rts - M::SQ_PSN, "RTR->RTS without SQ_PSN");
    refuse(&QpAttr { timeout: 32, ..a }, rts, "timeout 32");
    refuse(&QpAttr { retry_cnt: 8, ..a }, rts, "retry_cnt 8");
    refuse(&QpAttr { rnr_retry: 8, ..a }, rts, "rnr_retry 8");
    refuse(
        &QpAttr {
            sq_psn: 1 << 24,
            ..a
        },
        rts,
        "sq_psn 2^24",
    );
    refuse(
        &QpAttr {
            max_rd_atomic: 255,
            ..a
        },
        rts,
        "max_rd_atomic 255",
    );
    refuse(&a, rts | M::DEST_QPN, "RTR->RTS with DEST_QPN");
    qp.modify(&a, rts).unwrap();
    assert_eq!(qp.query().unwrap().qp_state, QpState::Rts);
    refuse(
        &QpAttr {
            qp_state: QpState::Rtr,
            ..a
        },
        M::STATE,
        "RTS->RTR",
    );
    refuse(
        &QpAttr {
            qp_state: QpState::Init,
            ..a
        },
        M::STATE,
        "RTS->INIT",
    );
}

/// A peer QP whose access flags allow no remote operation refuses
/// WRITE, READ and atomics (REM_ACCESS_ERR or REM_INV_REQ_ERR) and
/// leaves memory unchanged.
pub fn qp_access_flags() {
    let mut f = Fixture::new();
    let mr = f.peer_mr(4096, ALL);
    f.peer.fill(mr.id, 0, 4096, 0x31);
    let buf = f.mr(4096, ALL);
    let theirs = ConnOpts {
        access: Some(AccessFlags::LOCAL_WRITE),
        ..ConnOpts::default()
    };
    for op in OPS {
        let (cq, pcq) = (f.cq.clone(), f.pcq);
        let l = f.connect_on(&cq, pcq, &ConnOpts::default(), &theirs);
        let (wr, opcode) = op.wr(&buf, mr.addr, mr.rkey);
        l.qp.post_send(wr).unwrap();
        let wc = wait_wc(&f.cq);
        assert_eq!((wc.wr_id, wc.opcode), (1, opcode), "{op:?}");
        assert!(
            matches!(wc.status, WcStatus::RemAccessErr | WcStatus::RemInvReqErr),
            "{op:?}: {wc:?}"
        );
        assert_eq!(f.peer.check(mr.id, 0, 4096, 0x31, 0), None, "{op:?}");
        assert_eq!(l.qp.query().unwrap().qp_state, QpState::Err);
    }
}

/// Local protection errors: a READ into a region without LOCAL_WRITE and
/// a SEND from a region of another PD complete with LOC_PROT_ERR, send
/// nothing, and move the QP to ERR.
pub fn local_protection() {
    let mut f = Fixture::new();
    let target = f.peer_mr(4096, ALL);
    f.peer.fill(target.id, 0, 4096, 0x32);
    let rq = f.peer_mr(4096, ALL);
    let read_only = f.mr(4096, AccessFlags::REMOTE_READ);
    let pd2 = f.dev.alloc_pd().unwrap();
    let foreign = pd2.reg_mr(4096, ALL).unwrap();
    let cases = [
        (
            SendWr::read(
                1,
                &[read_only.slice(0, 64).unwrap()],
                target.addr,
                target.rkey,
            ),
            WcOpcode::RdmaRead,
        ),
        (
            SendWr::write(
                1,
                &[foreign.slice(0, 64).unwrap()],
                target.addr,
                target.rkey,
            ),
            WcOpcode::RdmaWrite,
        ),
    ];
    for (wr, opcode) in cases {
        let l = f.connect(&ConnOpts::default());
        f.peer
            .post_recv(l.pqp, 3, &[crate::harness::sge(&rq, 0, 64)]);
        l.qp.post_send(wr).unwrap();
        assert_wc(&wait_wc(&f.cq), 1, WcStatus::LocProtErr, opcode);
        assert_eq!(l.qp.query().unwrap().qp_state, QpState::Err);
        assert_eq!(f.peer.check(target.id, 0, 4096, 0x32, 0), None);
        assert_eq!(
            f.peer.query(l.pqp).qp_state,
            QpState::Rts,
            "peer saw nothing"
        );
    }
}

//! Fuzz the engine with arbitrary packets (given a valid ICRC, so they get
//! past the parser) from the connected peer, against a registered region
//! with guard bytes on both sides: the engine must never panic and never
//! write outside the region.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::SocketAddr;
use std::sync::Arc;
use urdma::cq::CqShared;
use urdma::engine::command::{AllocPd, CreateQp, ModifyQp, RegMr};
use urdma::engine::Engine;
use urdma::mem::MemRegion;
use urdma::verbs::{AddressVector, DeviceAttr, Gid, QpAttr, QpCap};
use urdma::{AccessFlags, Mtu, QpAttrMask as M, QpState, QpType};
use urdma_wire::{compute_icrc, IcrcContext};

const GUARD: usize = 64;
const REGION: usize = 8192;

fuzz_target!(|data: &[u8]| {
    let local: SocketAddr = "127.0.0.1:4791".parse().unwrap();
    let peer: SocketAddr = "127.0.0.2:4791".parse().unwrap();
    let mut buf = vec![0xAAu8; REGION + 2 * GUARD];
    let mut eng = Engine::new(local, DeviceAttr::default(), Some(1));
    let pd = eng.call(0, AllocPd {}).unwrap();
    // SAFETY: buf outlives the engine, which is dropped at the end of this closure.
    let mem = unsafe { MemRegion::from_raw(buf.as_mut_ptr().add(GUARD), REGION) }.unwrap();
    let all = AccessFlags::all();
    let mr = eng
        .call(
            0,
            RegMr {
                pd,
                access: all,
                iova: 0x10000,
                mem: Box::new(mem),
                rekey: None,
            },
        )
        .unwrap();
    let cq = Arc::new(CqShared::new(1, 64));
    let create = CreateQp {
        pd,
        qp_type: QpType::Rc,
        cap: QpCap::default(),
        sq_sig_all: true,
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        srq: None,
    };
    let qpn = eng.call(0, create).unwrap();
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: all,
        ..QpAttr::default()
    };
    let mask = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
    eng.call(0, ModifyQp { qpn, attr: a, mask }).unwrap();
    a.qp_state = QpState::Rtr;
    a.path_mtu = Mtu::Mtu256;
    a.dest_qp_num = 0x11;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 4;
    a.ah_attr = AddressVector {
        dgid: Gid::from_ip(peer.ip()),
        ..AddressVector::default()
    };
    let m = M::STATE
        | M::AV
        | M::PATH_MTU
        | M::DEST_QPN
        | M::RQ_PSN
        | M::MAX_DEST_RD_ATOMIC
        | M::MIN_RNR_TIMER;
    eng.call(
        0,
        ModifyQp {
            qpn,
            attr: a,
            mask: m,
        },
    )
    .unwrap();
    let ctx = IcrcContext {
        src: peer,
        dst: local,
    };
    // The input is a sequence of packets, each prefixed by a one-byte length
    // in 4-byte units; the QPN of each is forced to the QP's so that the
    // responder is reached. The key of the region is patched in where the
    // input asks for it (0xFFFFFFFF), so that valid accesses are explored.
    let mut rest = data;
    let mut now = 0u64;
    while let Some((&n, tail)) = rest.split_first() {
        let len = (usize::from(n) * 4).min(tail.len());
        let mut pkt = tail[..len].to_vec();
        rest = &tail[len..];
        if pkt.len() >= 12 {
            pkt[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        }
        for w in pkt.chunks_exact_mut(4) {
            if w == [0xFF; 4] {
                w.copy_from_slice(&mr.rkey.to_be_bytes());
            }
        }
        if let Ok(icrc) = compute_icrc(&pkt, &ctx) {
            pkt.extend_from_slice(&icrc.to_le_bytes());
        }
        // Odd length bytes deliver the packet in a batch, marked
        // "congestion experienced" (the QP answers with a CNP; a CNP
        // input, opcode 0x81, paces the QP); even ones alone.
        if n & 1 == 1 {
            eng.handle_batch_ecn(now, [(peer, pkt.as_slice(), true)]);
        } else {
            eng.handle_datagram(now, peer, &pkt);
        }
        now += 1_000_000;
        eng.handle_timeouts(now);
        eng.drain_tx().for_each(drop);
    }
    drop(eng);
    drop(mr);
    assert!(
        buf[..GUARD].iter().all(|&b| b == 0xAA),
        "write below the region"
    );
    assert!(
        buf[GUARD + REGION..].iter().all(|&b| b == 0xAA),
        "write above the region"
    );
});

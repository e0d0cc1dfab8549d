//! Unit tests of the requester's packet building: opcodes, headers and
//! segments of each operation and transport.

use super::*;
use crate::engine::wqe::UdDest;

fn wqe(op: SendOp, len: usize, npsn: u32) -> SendWqe {
    SendWqe {
        wr_id: 1,
        op,
        payload: Payload::Inline(vec![7; len]),
        len,
        remote_va: 0x1000,
        rkey: 0x42,
        signaled: true,
        solicited: true,
        ud: None,
        first_psn: 0,
        npsn,
        local_error: None,
        fence: false,
    }
}

fn repr(t: Transport, w: &SendWqe, k: u32, mtu: usize) -> PacketRepr {
    let seg = segment(w, k, mtu);
    request_repr(t, w, seg, Bth::new(Opcode::RcAck, 9, k), 3).expect("an opcode")
}

#[test]
fn opcodes_and_headers_follow_the_table() {
    let w = wqe(SendOp::WriteImm(5), 2500, 3);
    let first = repr(Transport::Rc, &w, 0, 1024);
    assert_eq!(first.bth.opcode, Opcode::RcWriteFirst);
    assert_eq!(first.reth.map(|r| r.dma_len), Some(2500));
    assert_eq!(first.immdt, None);
    let mid = repr(Transport::Rc, &w, 1, 1024);
    assert_eq!((mid.bth.opcode, mid.reth), (Opcode::RcWriteMiddle, None));
    let last = repr(Transport::Rc, &w, 2, 1024);
    assert_eq!(last.bth.opcode, Opcode::RcWriteLastImm);
    assert_eq!(last.immdt, Some(5));
    assert!(last.bth.solicited && !first.bth.solicited);

    let s = wqe(SendOp::Send, 10, 1);
    assert_eq!(
        repr(Transport::Uc, &s, 0, 1024).bth.opcode,
        Opcode::UcSendOnly
    );
    let s = wqe(SendOp::SendImm(1), 10, 1);
    let r = repr(Transport::Rc, &s, 0, 1024);
    assert_eq!((r.bth.opcode, r.immdt), (Opcode::RcSendOnlyImm, Some(1)));
}

#[test]
fn read_requests_cover_chunks_of_the_original_ranges() {
    let mtu = 256;
    let n = READ_CHUNK + 4;
    let w = wqe(SendOp::Read, n as usize * mtu - 10, n);
    let seg = segment(&w, 1, mtu);
    assert_eq!(seg.psns, READ_CHUNK - 1);
    let r = repr(Transport::Rc, &w, 1, mtu);
    assert_eq!(r.bth.opcode, Opcode::RcReadRequest);
    let reth = r.reth.unwrap();
    assert_eq!(reth.va, 0x1000 + mtu as u64);
    assert_eq!(reth.dma_len as usize, (READ_CHUNK as usize - 1) * mtu);
    let tail = segment(&w, READ_CHUNK, mtu);
    assert_eq!(tail.psns, 4);
    assert_eq!(tail.len, 4 * mtu - 10);
    assert!(!r.bth.solicited);
}

#[test]
fn atomics_and_ud_carry_their_extension_headers() {
    let w = wqe(
        SendOp::CompSwap {
            compare: 1,
            swap: 2,
        },
        8,
        1,
    );
    let r = repr(Transport::Rc, &w, 0, 1024);
    assert_eq!(r.bth.opcode, Opcode::RcCompareSwap);
    let a = r.atomic_eth.unwrap();
    assert_eq!((a.compare, a.swap_add, a.rkey), (1, 2, 0x42));

    let mut u = wqe(SendOp::SendImm(9), 10, 1);
    u.ud = Some(UdDest {
        addr: "127.0.0.1:4791".parse().unwrap(),
        qpn: 5,
        qkey: 0x1111,
    });
    let r = repr(Transport::Ud, &u, 0, 1024);
    assert_eq!(r.bth.opcode, Opcode::UdSendOnlyImm);
    assert_eq!(r.deth.map(|d| (d.qkey, d.src_qp)), Some((0x1111, 3)));
    assert_eq!(r.immdt, Some(9));
}

#[test]
fn operations_a_transport_lacks_have_no_opcode() {
    let w = wqe(SendOp::Read, 8, 1);
    let seg = segment(&w, 0, 1024);
    let bth = Bth::new(Opcode::RcAck, 1, 0);
    assert!(request_repr(Transport::Uc, &w, seg, bth, 1).is_none());
    assert!(request_repr(Transport::Ud, &w, seg, bth, 1).is_none());
}

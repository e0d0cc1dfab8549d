//! Unit tests of the kernel RC messages: parsing and layouts.

use super::*;
use crate::engine::SgEntry;
use crate::nic::kernel_msg::{header, put, u16_at, u32_at};
use crate::verbs::Gid;
use std::mem::offset_of;
use urdma_abi::{urdma_msg_post, urdma_msg_reply, urdma_msg_request, urdma_msg_sge, urdma_msg_wc};

fn post_bytes(seq: u32, flags: u16, opcode: u8, sges: &[(u64, u32, u32)]) -> Vec<u8> {
    type M = urdma_msg_post;
    type S = urdma_msg_sge;
    let mut m = header(MSG_POST, POST_LEN + sges.len() * SGE_LEN, 0x123);
    put(&mut m, offset_of!(M, seq), &seq.to_ne_bytes());
    put(&mut m, offset_of!(M, flags), &flags.to_ne_bytes());
    m[offset_of!(M, opcode)] = opcode;
    m[offset_of!(M, num_sge)] = sges.len() as u8;
    put(&mut m, offset_of!(M, remote_addr), &0x1000u64.to_ne_bytes());
    put(&mut m, offset_of!(M, rkey), &0xfe00_0105u32.to_ne_bytes());
    put(&mut m, offset_of!(M, ex), &7u32.to_ne_bytes());
    for (i, &(a, l, k)) in sges.iter().enumerate() {
        let at = offset_of!(M, sge) + i * SGE_LEN;
        put(&mut m, at + offset_of!(S, addr), &a.to_ne_bytes());
        put(&mut m, at + offset_of!(S, length), &l.to_ne_bytes());
        put(&mut m, at + offset_of!(S, lkey), &k.to_ne_bytes());
    }
    m
}

#[test]
fn work_requests_parse_field_by_field() {
    let m = post_bytes(
        9,
        POST_SOLICITED,
        OP_SEND_INV,
        &[(0xffff_8880_0000_1000, 64, 0xfe00_0100)],
    );
    let RcMessage::Post(p) = parse(MSG_POST, &m, 0).unwrap() else {
        panic!("not a post")
    };
    assert_eq!((p.qpn, p.seq, p.recv, p.solicited), (0x123, 9, false, true));
    assert_eq!(
        (p.opcode, p.remote_addr, p.rkey, p.ex),
        (OP_SEND_INV, 0x1000, 0xfe00_0105, 7)
    );
    assert_eq!(
        p.sges,
        [SgEntry {
            addr: 0xffff_8880_0000_1000,
            length: 64,
            lkey: 0xfe00_0100
        }]
    );
}

#[test]
fn malformed_kernel_messages_are_refused() {
    let mut m = post_bytes(1, POST_RECV, 0, &[(0, 1, 2)]);
    let num_sge = offset_of!(urdma_msg_post, num_sge);
    m[num_sge] = 2;
    assert!(parse(MSG_POST, &m, 0).is_err());
    m[num_sge] = 200;
    assert!(parse(MSG_POST, &m, 0).is_err());
    assert!(parse(MSG_REQUEST, &m[..40], 0).is_err());
    assert!(parse(MSG_MR, &m[..16], 0).is_err());
    assert!(parse(99, &m, 0).is_err());
}

#[test]
fn requests_carry_the_path_and_the_attributes() {
    type M = urdma_msg_request;
    let mut m = header(MSG_REQUEST, REQUEST_LEN.next_multiple_of(8), 0x55);
    put(&mut m, offset_of!(M, seq), &3u32.to_ne_bytes());
    put(&mut m, offset_of!(M, op), &REQ_MODIFY_QP.to_ne_bytes());
    put(&mut m, offset_of!(M, qp_state), &2u32.to_ne_bytes());
    put(&mut m, offset_of!(M, path_mtu), &5u32.to_ne_bytes());
    put(&mut m, offset_of!(M, dest_qp_num), &0x77u32.to_ne_bytes());
    m[offset_of!(M, max_rd_atomic)] = 4;
    let gid = Gid::from_ip("169.254.0.9".parse().unwrap());
    put(&mut m, offset_of!(M, dgid), &gid.0);
    let RcMessage::Request(r) = parse(MSG_REQUEST, &m, 0).unwrap() else {
        panic!("not a request")
    };
    assert_eq!((r.qpn, r.seq, r.op), (0x55, 3, REQ_MODIFY_QP));
    assert_eq!(r.attr.qp_state, QpState::Rtr);
    assert_eq!(r.attr.path_mtu, Mtu::Mtu4096);
    assert_eq!((r.attr.dest_qp_num, r.attr.max_rd_atomic), (0x77, 4));
    assert_eq!(
        r.attr.ah_attr.dgid.to_ip(),
        "169.254.0.9".parse::<std::net::IpAddr>().unwrap()
    );
}

#[test]
fn completions_and_replies_have_the_module_layout() {
    let w = wc_message(
        5,
        6,
        true,
        WcStatus::Success,
        WcOpcode::Recv,
        100,
        0,
        9,
        WC_INV,
    );
    assert_eq!(w.len(), WC_LEN);
    type W = urdma_msg_wc;
    assert_eq!(
        (
            u16_at(&w, 0),
            u32_at(&w, offset_of!(W, seq)),
            u32_at(&w, offset_of!(W, recv))
        ),
        (MSG_WC, 6, 1)
    );
    assert_eq!(
        (
            u32_at(&w, offset_of!(W, opcode)),
            u32_at(&w, offset_of!(W, byte_len)),
            u32_at(&w, offset_of!(W, ex))
        ),
        (128, 100, 9)
    );
    let r = reply(5, 6, libc::EINVAL, 0);
    assert_eq!(r.len(), REPLY_LEN);
    assert_eq!(
        (
            u16_at(&r, 0),
            u32_at(&r, offset_of!(urdma_msg_reply, status))
        ),
        (MSG_REPLY, libc::EINVAL as u32)
    );
}

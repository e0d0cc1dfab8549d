//! The device window ([`crate::engine::device_window`]) in virtual time.

use super::{opts, peer::Solo};
use crate::engine::SendOp;
use urdma_wire::Opcode;

/// A READ request asks for no ACK (IBTA 9.7.2: its responses answer it):
/// a QP whose newest packet is one waits for them, like a QP whose newest
/// packet asked for an ACK, once the device window is full.
#[test]
fn a_read_request_holds_its_qp_at_a_full_device_window() {
    let mut s = Solo::new(&opts());
    let window = crate::engine::device_window::MIN_DEVICE_WINDOW;
    s.node.eng.set_device_window(window);
    // As many response PSNs as the window holds, at MTU 1024.
    let len = window as usize * super::MTU;
    s.node.post(0, 1, SendOp::Read, (0, len), (0x2000, 5));
    s.node.post(0, 2, SendOp::Write, (len, 8), (0x1000, 5));
    let sent = s.recv_all();
    let ops: Vec<Opcode> = sent.iter().map(|p| p.opcode()).collect();
    assert_eq!(ops, [Opcode::RcReadRequest], "the WRITE waits");
}

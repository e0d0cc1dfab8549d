//! A QP whose owner is gone: its peer is told, then the QP is destroyed.
//!
//! When a program dies, its NIC destroys its QPs. A peer that is sending
//! learns of it through its own transport: its requests meet no QP and
//! go unanswered, and its retry count runs out. A peer that only waits
//! (its requests all acknowledged, a receive WQE posted for the message
//! the dead program was about to send) would wait forever: RC has no
//! message that ends a connection. So before destroying a connected RC
//! QP (one that reached RTS, perhaps ERR since) whose owner is gone, the NIC sends its peer a request that every
//! RC responder refuses as an invalid request: a SEND_MIDDLE with no
//! payload, at the PSN the peer expects. Outside a message a MIDDLE
//! packet breaks the opcode sequence; inside one (a SEND cut off by the
//! death) an empty MIDDLE breaks the length rule. Either way the peer
//! NAKs it (the NAK meets no QP) and moves its QP to ERR, which completes
//! its posted work with errors: urdma's responder does so, and rxe's.
//!
//! The PSN the peer expects is the first one never sent if everything
//! sent arrived, else one from the oldest one not acknowledged on: the
//! request goes at each of those PSNs in order (at most
//! [`MAX_FAREWELLS`], the latest), those before the expected one being
//! duplicates there, answered and ignored, those after it finding the QP
//! in ERR.

use super::{psn, tx, Engine};
use crate::error::Result;
use crate::types::{QpState, QpType};
use urdma_wire::{Bth, Opcode, PacketRepr};

/// Most requests sent to the peer of an abandoned QP: the latest PSNs the
/// peer may expect.
const MAX_FAREWELLS: u32 = 128;

impl Engine {
    /// Destroy QP `qpn`, whose owner is gone: first tell a connected RC
    /// peer (see the module's comment). Its queued work is dropped without
    /// completions.
    pub(crate) fn abandon_qp(&mut self, now: u64, qpn: u32) -> Result<()> {
        if let Ok((qp, mut cx)) = self.qp_and_ctx(now, qpn) {
            // ERR too: a QP that failed on its own (its dead owner's
            // memory gone under a request) tells its peer no more than a
            // destroyed one.
            let live = matches!(
                qp.state(),
                QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err
            );
            if let (QpType::Rc, true, Some(dst)) = (qp.qp_type, live, qp.remote) {
                let (una, next) = (qp.req.una, qp.req.high_psn);
                let span = (psn::diff(next, una).max(0) as u32).min(MAX_FAREWELLS - 1);
                let first = psn::add(next, (1 << 24) - span);
                let peer = qp.attr.dest_qp_num;
                tracing::debug!(qpn, peer, first, next, "owner gone: telling the peer");
                for k in 0..=span {
                    let p = psn::add(first, k);
                    let mut repr = PacketRepr::new(Bth::new(Opcode::RcSendMiddle, peer, p));
                    repr.bth.ack_req = true;
                    let icrc = tx::Icrc::for_peer(qp.internal, None);
                    let payload = tx::PayloadSrc::Empty;
                    let _ = tx::send(&mut cx, &mut qp.counters, dst, &repr, payload, icrc);
                }
            }
        }
        self.destroy_qp(qpn)
    }
}

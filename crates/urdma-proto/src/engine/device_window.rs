//! The device's send window: a bound on the packets all of a device's RC
//! QPs together have sent and not yet seen acknowledged.
//!
//! Each QP's own window (at most `super::requester::WINDOW` packets,
//! less after congestion) bounds what one connection puts on the path.
//! A thousand QPs to one peer would together put a thousand windows
//! there: more than the peer's socket can queue, and the queueing delay
//! alone outlasts the ACK timeout, so that every QP resends packets that
//! were never lost. Past [`DEVICE_WINDOW`] packets in flight, a QP sends
//! a new packet only while fewer than [`FAIR_SHARE`] of its own are
//! unacknowledged: every QP keeps moving (it always has a share, and the
//! ACKs of its share bring it back to send more), and the total stays
//! near the larger of the device window and a share per busy QP.
//!
//! The total is kept as the sum of what each QP last reported
//! (`sync`); a QP's report is brought up to date whenever the requester
//! runs for it, so a missed change corrects itself at the QP's next
//! input, and destroying a QP takes its part away. QPs whose peer is a
//! device of the same NIC ([`super::INTERNAL_UNIT`]) put nothing on a
//! socket and are not counted.

use super::psn;
use super::qp::QpCtx;
use crate::types::{QpState, QpType};

/// Packets in flight on a device, beyond which QPs are held to their
/// fair share: 1,024 packets of 4 KiB (4 MiB) queue for a few
/// milliseconds at the receiver, far below any ACK timeout. A device
/// whose socket got a smaller receive buffer has a smaller window
/// ([`for_receive_buffer`]).
pub const DEVICE_WINDOW: u64 = 1024;

/// The smallest device window, whatever the buffer.
pub const MIN_DEVICE_WINDOW: u64 = 16;

/// Bytes of receive buffer a packet of a full 4 KiB MTU takes in the
/// kernel's accounting (its payload, headers and allocation overhead).
const BUFFER_PER_PACKET: usize = 8192;

/// The device window for a socket whose receive buffer is `bytes` (as
/// `SO_RCVBUF` reports it): what the buffer holds of full packets, so
/// that the peer's socket, sized alike, is not overrun by this device's
/// QPs together (a user without `CAP_NET_ADMIN` gets at most
/// `net.core.rmem_max`, 208 KiB by default).
pub fn for_receive_buffer(bytes: usize) -> u64 {
    ((bytes / BUFFER_PER_PACKET) as u64).clamp(MIN_DEVICE_WINDOW, DEVICE_WINDOW)
}

/// Unacknowledged packets a QP may always have, however full the device
/// window is.
pub const FAIR_SHARE: u32 = 2;

/// Whether `qp`'s packets count toward the device window: an RC QP
/// that sends to the network.
fn counted(qp: &QpCtx) -> bool {
    qp.qp_type == QpType::Rc && !qp.internal
}

/// The packets of `qp` that count toward the device window: the PSNs it
/// sent and that are not acknowledged (a READ counts the responses it
/// asked for, as the QP's own window does), for an RC QP that sends to
/// the network.
fn in_flight(qp: &QpCtx) -> u32 {
    let sending = matches!(qp.state(), QpState::Rts | QpState::Sqd);
    if !counted(qp) || !sending {
        return 0;
    }
    psn::diff(qp.req.high_psn, qp.req.una).max(0) as u32
}

/// Bring `qp`'s part of the device total `total` up to date.
pub(crate) fn sync(qp: &mut QpCtx, total: &mut u64) {
    let now = in_flight(qp);
    *total = total.saturating_sub(u64::from(qp.window_counted)) + u64::from(now);
    qp.window_counted = now;
}

/// Take a destroyed QP's part out of the device total.
pub(crate) fn forget(qp: &QpCtx, total: &mut u64) {
    *total = total.saturating_sub(u64::from(qp.window_counted));
}

/// Whether `qp` must hold back the new packet `psn` because the device
/// window (`window` packets) is full with `total` and the QP already has
/// its fair share in flight. Retransmissions (below `high_psn`) are never
/// held, nor is a QP whose newest packet asked for no ACK (it went out
/// before the window filled) and is no READ or atomic request: a peer
/// need not acknowledge such packets, so the QP sends one more, which
/// asks ([`asks_ack`]), rather than wait for its retransmission timer,
/// or forever if it has none. A resend that asks for an ACK moves the
/// answered PSN below the newest, so one more new packet, asking, leaves
/// after it: after a loss, that ACK comes sooner than a timeout (with
/// 1,024 QPs, holding such QPs instead cost hundreds of ACK timeouts a
/// run).
pub(crate) fn holds_back(qp: &QpCtx, psn: u32, total: u64, window: u64) -> bool {
    counted(qp)
        && total >= window
        && psn::diff(psn, qp.req.high_psn) >= 0
        && psn::diff(psn, qp.req.una) >= FAIR_SHARE as i32
        && qp.req.answered_psn == psn::prev(qp.req.high_psn)
}

/// Whether the packet `psn` that `qp` sends now must ask for an ACK
/// because the device window would hold back the next one: the ACK it
/// waits for must not wait for a timeout.
pub(crate) fn asks_ack(qp: &QpCtx, psn: u32, total: u64, window: u64) -> bool {
    counted(qp)
        && total + 1 >= window
        && psn::diff(psn::add(psn, 1), qp.req.una) >= FAIR_SHARE as i32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::LocalCq;
    use crate::verbs::QpCap;
    use std::sync::Arc;

    fn rc_qp(una: u32, high: u32) -> QpCtx {
        let cq = Arc::new(LocalCq::new(1, 16));
        let mut qp = QpCtx::new(
            0x100,
            QpType::Rc,
            1,
            QpCap::default(),
            false,
            cq.clone(),
            cq,
        );
        qp.attr.qp_state = QpState::Rts;
        qp.req.una = una;
        qp.req.high_psn = high;
        // Its newest packet asked for an ACK.
        qp.req.answered_psn = psn::prev(high);
        qp
    }

    #[test]
    fn the_total_follows_each_qps_unacknowledged_packets() {
        let mut total = 0;
        let mut a = rc_qp(10, 15);
        let mut b = rc_qp(0, 3);
        sync(&mut a, &mut total);
        sync(&mut b, &mut total);
        assert_eq!(total, 8);
        a.req.una = 14;
        sync(&mut a, &mut total);
        assert_eq!(total, 4);
        // Twice in a row changes nothing.
        sync(&mut a, &mut total);
        assert_eq!(total, 4);
        // PSNs that wrap around.
        b.req.una = 0xff_fffe;
        b.req.high_psn = 2;
        sync(&mut b, &mut total);
        assert_eq!(total, 5);
        b.attr.qp_state = QpState::Err;
        sync(&mut b, &mut total);
        assert_eq!(total, 1);
        forget(&a, &mut total);
        assert_eq!(total, 0);
    }

    const W: u64 = DEVICE_WINDOW;

    #[test]
    fn the_window_fits_the_receive_buffer() {
        // Debian's default limit, doubled by the kernel as it reports it.
        assert_eq!(for_receive_buffer(2 * 212_992), 52);
        assert_eq!(for_receive_buffer(32 << 20), DEVICE_WINDOW);
        assert_eq!(for_receive_buffer(0), MIN_DEVICE_WINDOW);
    }

    #[test]
    fn a_full_window_holds_new_packets_beyond_the_fair_share_only() {
        let qp = rc_qp(100, 110);
        assert!(!holds_back(&qp, 110, W - 1, W));
        assert!(holds_back(&qp, 110, W, W));
        // A resend is never held.
        assert!(!holds_back(&qp, 105, W, W));
        // Within its share, a QP sends.
        assert!(!holds_back(&rc_qp(110, 110), 110, W * 2, W));
        assert!(!holds_back(&rc_qp(110, 111), 111, W * 2, W));
        assert!(holds_back(&rc_qp(110, 112), 112, W * 2, W));
        // Internal QPs and UC QPs are not counted nor held.
        let mut internal = rc_qp(100, 110);
        internal.internal = true;
        assert!(!holds_back(&internal, 110, W, W));
        assert_eq!(in_flight(&internal), 0);
    }

    #[test]
    fn a_qp_whose_newest_packet_asked_no_ack_sends_one_that_does() {
        // Packets 100..110 left before the window filled; the newest, 109,
        // asked for no ACK, which a peer then need not send.
        let mut qp = rc_qp(100, 110);
        qp.req.answered_psn = 105;
        assert!(!holds_back(&qp, 110, W, W));
        assert!(asks_ack(&qp, 110, W, W));
        // Once 110 has left asking for one, the QP waits for it.
        qp.req.high_psn = 111;
        qp.req.answered_psn = 110;
        assert!(holds_back(&qp, 111, W, W));
    }

    #[test]
    fn the_last_packet_before_a_hold_asks_for_an_ack() {
        // Nothing outstanding: the first packet leaves one, the second
        // would be held after it.
        let qp = rc_qp(110, 110);
        assert!(!asks_ack(&qp, 110, W - 1, W));
        assert!(asks_ack(&qp, 111, W - 1, W));
        assert!(!asks_ack(&qp, 111, W - 2, W));
        let mut internal = rc_qp(110, 110);
        internal.internal = true;
        assert!(!asks_ack(&internal, 111, W, W));
    }
}

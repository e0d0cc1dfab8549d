//! QP 1, the general services interface: CM MADs in UD SENDs with the
//! Q_Key 0x80010000 and the default P_Key, to and from the device's
//! communication manager ([`crate::cm::Cm`]).

use super::counters::{Counter, Counters};
use super::tx::{self, PayloadSrc};
use super::Engine;
use crate::cm::{Cm, CmEvent};
use std::net::SocketAddr;
use urdma_wire::cm::{CmMad, GSI_QKEY, GSI_QPN, MAD_LEN};
use urdma_wire::{Bth, Deth, Opcode, Packet, PacketRepr, DEFAULT_PKEY};

/// Why a packet for QP 1 was not taken.
fn refuse(pkt: &Packet<'_>) -> Option<&'static str> {
    let repr = &pkt.repr;
    if repr.bth.opcode != Opcode::UdSendOnly {
        return Some("not a UD SEND_ONLY");
    }
    if repr.bth.pkey != DEFAULT_PKEY {
        return Some("P_Key is not the default");
    }
    match repr.deth {
        Some(d) if d.qkey == GSI_QKEY => None,
        _ => Some("Q_Key is not QP 1's"),
    }
}

impl Engine {
    /// A datagram for QP 1: hand its MAD to the CM.
    pub(super) fn on_gsi_packet(&mut self, now: u64, src: SocketAddr, pkt: &Packet<'_>) {
        if let Some(why) = refuse(pkt) {
            self.counters.add(Counter::Dropped, 1);
            tracing::debug!(%src, why, "QP 1 packet dropped");
            return;
        }
        let mad = match CmMad::parse(pkt.payload) {
            Ok(m) => m,
            Err(e) => {
                self.counters.add(Counter::Dropped, 1);
                tracing::debug!(%src, error = %e, "MAD dropped");
                return;
            }
        };
        tracing::debug!(%src, ?mad.msg, "CM MAD received");
        // A CM answers at the peer's RoCE port, whatever the source port.
        let peer = SocketAddr::new(src.ip(), self.local.port());
        self.cm.handle(now, peer, &mad);
        self.flush_cm(now);
    }

    /// Run `f` on the device's CM at `now`, then queue the MADs it
    /// produced.
    pub fn cm_call<T>(&mut self, now: u64, f: impl FnOnce(&mut Cm) -> T) -> T {
        let out = f(&mut self.cm);
        self.flush_cm(now);
        out
    }

    /// Take the CM's events.
    pub fn take_cm_events(&mut self) -> Vec<CmEvent> {
        self.cm.take_events().collect()
    }

    /// Queue the CM's MADs as UD packets from QP 1 to QP 1.
    pub(super) fn flush_cm(&mut self, now: u64) {
        let out: Vec<_> = self.cm.drain_tx().collect();
        for o in out {
            let psn = self.gsi_psn;
            self.gsi_psn = urdma_wire::PSN_MASK & psn.wrapping_add(1);
            let mut repr = PacketRepr::new(Bth::new(Opcode::UdSendOnly, GSI_QPN, psn));
            repr.deth = Some(Deth {
                qkey: GSI_QKEY,
                src_qp: GSI_QPN,
            });
            let payload: [u8; MAD_LEN] = o.mad.emit();
            // QP 1 keeps no counters of its own: the device's count it.
            let mut qp1 = Counters::default();
            let (_, mut cx) = self.split(now);
            if tx::send(&mut cx, &mut qp1, o.to, &repr, PayloadSrc::Bytes(&payload)).is_err() {
                tracing::warn!(to = %o.to, "CM MAD not sent");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::{AcceptParams, ConnectParams};
    use crate::engine::Transmit;
    use crate::verbs::DeviceAttr;
    use urdma_wire::IcrcContext;

    fn engine(addr: &str) -> Engine {
        Engine::new(addr.parse().unwrap(), DeviceAttr::default(), Some(7))
    }

    fn pass(now: u64, from: &mut Engine, to: &mut Engine) -> usize {
        let src = from.local();
        let out: Vec<Transmit> = from.drain_tx().collect();
        for t in &out {
            assert_eq!(t.dst, to.local());
            to.handle_datagram(now, src, &t.data);
        }
        out.len()
    }

    #[test]
    fn two_engines_connect_through_qp1() {
        let mut a = engine("169.254.0.1:4791");
        let mut b = engine("169.254.0.2:4791");
        b.cm_call(0, |cm| cm.listen(0x0106_0001)).unwrap();
        let p = ConnectParams::rc(b.local(), 0x0106_0001, 0x123, 1);
        let ida = a.cm_call(0, |cm| cm.connect(0, &p)).unwrap();
        // One UD packet to QP 1, 256 bytes of MAD.
        let req = a.tx.front().unwrap().data.clone();
        let pkt = urdma_wire::parse_unchecked(&req).unwrap();
        assert_eq!(pkt.repr.bth.dest_qp, 1);
        assert_eq!(
            pkt.repr.deth.map(|d| (d.qkey, d.src_qp)),
            Some((GSI_QKEY, 1))
        );
        assert_eq!(pkt.payload.len(), MAD_LEN);
        assert_eq!(pass(0, &mut a, &mut b), 1);
        let ev = b.take_cm_events();
        let [CmEvent::ConnectRequest { id, .. }] = ev[..] else {
            panic!("no request: {ev:?}");
        };
        b.cm_call(0, |cm| cm.accept(0, id, &AcceptParams::default()))
            .unwrap();
        pass(0, &mut b, &mut a);
        assert!(matches!(
            a.take_cm_events()[..],
            [CmEvent::ConnectResponse { id, .. }] if id == ida
        ));
        assert!(a.counters()[Counter::RxPackets] >= 1);
    }

    #[test]
    fn qp1_packets_that_are_not_cm_mads_are_dropped() {
        let mut a = engine("169.254.0.1:4791");
        let mut b = engine("169.254.0.2:4791");
        let before = b.counters()[Counter::Dropped];
        // A UD SEND to QP 1 with the wrong Q_Key.
        let mut repr = PacketRepr::new(Bth::new(Opcode::UdSendOnly, GSI_QPN, 0));
        repr.deth = Some(Deth {
            qkey: 0x1234,
            src_qp: 1,
        });
        let ctx = IcrcContext {
            src: a.local(),
            dst: b.local(),
        };
        let bad = urdma_wire::build(&repr, &[0u8; MAD_LEN], &ctx).unwrap();
        b.handle_datagram(0, a.local(), &bad);
        // The right Q_Key but a MAD of another class.
        repr.deth = Some(Deth {
            qkey: GSI_QKEY,
            src_qp: 1,
        });
        let junk = urdma_wire::build(&repr, &[1u8; MAD_LEN], &ctx).unwrap();
        b.handle_datagram(0, a.local(), &junk);
        assert_eq!(b.counters()[Counter::Dropped], before + 2);
        assert!(b.take_cm_events().is_empty());
        assert_eq!(b.drain_tx().count(), 0);
        let _ = a.drain_tx();
    }
}

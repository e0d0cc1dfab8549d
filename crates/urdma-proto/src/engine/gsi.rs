//! QP 1, the general services interface: CM MADs in UD SENDs with the
//! Q_Key 0x80010000 and the default P_Key, to and from the device's
//! communication manager ([`crate::cm::Cm`]).
//!
//! When the kernel has a QP 1 on the device (the kernel driver's GSI QP,
//! see the NIC's kernel channel), the datagrams for QP 1 that this CM
//! does not claim go to the kernel, and the kernel's sends leave from
//! QP 1 here.

use super::counters::{Counter, Counters};
use super::tx::{self, PayloadSrc};
use super::Engine;
use crate::cm::{Cm, CmEvent};
use crate::types::WcStatus;
use std::net::{IpAddr, SocketAddr};
use urdma_wire::cm::{CmMad, GSI_QKEY, GSI_QPN, MAD_LEN};
use urdma_wire::{Bth, Deth, Opcode, Packet, PacketRepr, DEFAULT_PKEY};

/// The largest UD payload (the largest RoCE MTU).
const MAX_UD_PAYLOAD: usize = 4096;

/// A datagram received for the kernel's QP 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GsiDatagram {
    /// The GRH area of a UD receive buffer (the IP header it came with).
    pub grh: [u8; urdma_wire::GRH_LEN],
    /// Whether `grh` holds an IPv6 header (else IPv4).
    pub ipv6: bool,
    /// The sending QP.
    pub src_qpn: u32,
    /// The Q_Key the datagram carried.
    pub qkey: u32,
    /// Immediate data, if any.
    pub imm: Option<u32>,
    /// The solicited event bit.
    pub solicited: bool,
    /// The payload (a MAD).
    pub payload: Vec<u8>,
}

/// A UD SEND of the kernel's QP 1.
#[derive(Debug, Clone, Copy)]
pub struct GsiSend<'a> {
    /// The source address (must be this device's).
    pub src: IpAddr,
    /// The destination address.
    pub dst: IpAddr,
    /// The destination QP.
    pub dest_qpn: u32,
    /// The Q_Key to send.
    pub qkey: u32,
    /// Immediate data, if any.
    pub imm: Option<u32>,
    /// The solicited event bit.
    pub solicited: bool,
    /// The payload.
    pub payload: &'a [u8],
}

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
        let parsed = CmMad::parse(pkt.payload);
        if self.kernel_gsi.is_some() && !parsed.as_ref().is_ok_and(|m| self.cm.claims(m)) {
            return self.queue_for_kernel_gsi(src, pkt);
        }
        let mad = match parsed {
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
        let refused = self.cm.refused();
        self.cm.handle(now, peer, &mad);
        // Another peer's connection named, or a request beyond the bounds.
        self.counters
            .add(Counter::Dropped, self.cm.refused().saturating_sub(refused));
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
            let payload: [u8; MAD_LEN] = o.mad.emit();
            if self
                .send_from_qp1(now, o.to, GSI_QPN, GSI_QKEY, None, false, &payload)
                .is_err()
            {
                tracing::warn!(to = %o.to, "CM MAD not sent");
            }
        }
    }

    /// Queue a UD SEND from QP 1.
    #[allow(clippy::too_many_arguments)]
    fn send_from_qp1(
        &mut self,
        now: u64,
        to: SocketAddr,
        dest_qpn: u32,
        qkey: u32,
        imm: Option<u32>,
        solicited: bool,
        payload: &[u8],
    ) -> Result<(), tx::PayloadError> {
        let psn = self.gsi_psn;
        self.gsi_psn = urdma_wire::PSN_MASK & psn.wrapping_add(1);
        let op = match imm {
            Some(_) => Opcode::UdSendOnlyImm,
            None => Opcode::UdSendOnly,
        };
        let mut repr = PacketRepr::new(Bth::new(op, dest_qpn, psn));
        repr.bth.solicited = solicited;
        repr.deth = Some(Deth {
            qkey,
            src_qp: GSI_QPN,
        });
        repr.immdt = imm;
        // QP 1 keeps no counters of its own: the device's count it.
        let mut qp1 = Counters::default();
        let (_, mut cx) = self.split(now);
        tx::send(
            &mut cx,
            &mut qp1,
            to,
            &repr,
            PayloadSrc::Bytes(payload),
            tx::Icrc::Sealed,
        )
        .map(drop)
    }

    /// Whether the kernel has a QP 1 on this device (the kernel driver's
    /// channel is attached): datagrams the CM does not claim go there.
    pub fn set_kernel_gsi(&mut self, attached: bool) {
        self.kernel_gsi = attached.then(Vec::new);
    }

    /// Take the datagrams received for the kernel's QP 1.
    pub fn take_kernel_gsi(&mut self) -> Vec<GsiDatagram> {
        self.kernel_gsi
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn queue_for_kernel_gsi(&mut self, src: SocketAddr, pkt: &Packet<'_>) {
        let dst = self.local_for(src);
        let Some(queue) = self.kernel_gsi.as_mut() else {
            return;
        };
        // QP 1 carries MADs: a larger datagram fits no buffer of the
        // kernel's MAD layer.
        if pkt.payload.len() > MAD_LEN {
            self.counters.add(Counter::Dropped, 1);
            tracing::debug!(%src, len = pkt.payload.len(), "datagram too large for QP 1 dropped");
            return;
        }
        let grh = super::responder::received_grh(src, dst, pkt);
        queue.push(GsiDatagram {
            grh,
            // An IPv4 area starts with 20 zero bytes.
            ipv6: grh[0] >> 4 == 6,
            src_qpn: pkt.repr.deth.map_or(0, |d| d.src_qp),
            qkey: pkt.repr.deth.map_or(0, |d| d.qkey),
            imm: pkt.repr.immdt,
            solicited: pkt.repr.bth.solicited,
            payload: pkt.payload.to_vec(),
        });
    }

    /// Carry out a UD SEND of the kernel's QP 1 at `now`; the error is the
    /// status of its completion.
    pub fn send_gsi(&mut self, now: u64, s: &GsiSend<'_>) -> Result<(), WcStatus> {
        if !self.gids.iter().any(|g| g.ip() == s.src) || s.dest_qpn > urdma_wire::QPN_MASK {
            return Err(WcStatus::LocQpOpErr);
        }
        if s.payload.len() > MAX_UD_PAYLOAD {
            return Err(WcStatus::LocLenErr);
        }
        let to = SocketAddr::new(s.dst, self.local.port());
        self.send_from_qp1(now, to, s.dest_qpn, s.qkey, s.imm, s.solicited, s.payload)
            .map_err(|e| {
                tracing::debug!(%to, error = ?e, "kernel QP 1 send failed");
                WcStatus::GeneralErr
            })
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
    fn the_kernel_gets_what_the_cm_does_not_claim() {
        let mut a = engine("169.254.0.1:4791");
        let mut b = engine("169.254.0.2:4791");
        b.set_kernel_gsi(true);
        b.cm_call(0, |cm| cm.listen(0x0106_0001)).unwrap();
        // A REQ for a service the CM listens on is the CM's.
        let p = ConnectParams::rc(b.local(), 0x0106_0001, 0x123, 1);
        a.cm_call(0, |cm| cm.connect(0, &p)).unwrap();
        pass(0, &mut a, &mut b);
        assert!(b.take_kernel_gsi().is_empty());
        assert_eq!(b.take_cm_events().len(), 1);
        // One for another service is the kernel's, with the sender's
        // address in the GRH area and its QP and Q_Key.
        let p = ConnectParams::rc(b.local(), 0x0106_0002, 0x124, 1);
        a.cm_call(0, |cm| cm.connect(0, &p)).unwrap();
        pass(0, &mut a, &mut b);
        let got = b.take_kernel_gsi();
        assert_eq!(got.len(), 1);
        let g = &got[0];
        assert_eq!((g.src_qpn, g.qkey, g.ipv6), (1, GSI_QKEY, false));
        assert_eq!(g.payload.len(), MAD_LEN);
        assert_eq!(&g.grh[32..36], &[169, 254, 0, 1]);
        assert_eq!(&g.grh[36..40], &[169, 254, 0, 2]);
        assert!(b.take_cm_events().is_empty());
        assert_eq!(b.drain_tx().count(), 0, "the CM did not answer it");
        // The kernel's sends leave from QP 1 to the QP it names.
        let payload = [5u8; MAD_LEN];
        let send = GsiSend {
            src: b.local().ip(),
            dst: a.local().ip(),
            dest_qpn: 1,
            qkey: GSI_QKEY,
            imm: None,
            solicited: false,
            payload: &payload,
        };
        b.send_gsi(0, &send).unwrap();
        let out = b.tx.front().unwrap().data.clone();
        let pkt = urdma_wire::parse_unchecked(&out).unwrap();
        assert_eq!(
            pkt.repr.deth.map(|d| (d.qkey, d.src_qp)),
            Some((GSI_QKEY, 1))
        );
        assert_eq!(pkt.payload, payload);
        // From another address, or to a QP number too large: refused.
        let other = GsiSend {
            src: a.local().ip(),
            ..send
        };
        assert_eq!(b.send_gsi(0, &other), Err(WcStatus::LocQpOpErr));
        let big = GsiSend {
            dest_qpn: 1 << 24,
            ..send
        };
        assert_eq!(b.send_gsi(0, &big), Err(WcStatus::LocQpOpErr));
        // Detached: the CM sees QP 1 alone again.
        b.set_kernel_gsi(false);
        a.cm_call(0, |cm| cm.connect(0, &p)).unwrap();
        let _ = b.drain_tx();
        pass(0, &mut a, &mut b);
        assert!(b.take_kernel_gsi().is_empty());
        assert!(b.drain_tx().count() >= 1, "the CM rejects the REQ");
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

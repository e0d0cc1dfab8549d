//! Ingress: the engine's handling of received datagrams, one at a time
//! or in batches (ACKs coalesced), from the wire (ICRC checked) or from
//! a device of this NIC (internal loopback, payload perhaps by reference),
//! each parsed and dispatched to its QP's responder or completer.

use super::{completer, congestion, dma, drop_packet, requester, responder, Counter, Engine};
use std::net::SocketAddr;
use urdma_wire::{IcrcContext, OpKind, WireError};

impl Engine {
    /// Process several datagrams received together; ACKs they call for are
    /// coalesced into one per QP, sent when the batch ends.
    pub fn handle_batch<'d>(
        &mut self,
        now: u64,
        batch: impl IntoIterator<Item = (SocketAddr, &'d [u8])>,
    ) {
        self.handle_batch_checked(now, batch.into_iter().map(|(s, d)| (s, d, false)), true);
    }

    /// As [`Engine::handle_batch`], with each datagram's ECN mark: true
    /// when its IP header said "congestion experienced", which the engine
    /// answers with a congestion notification to the sending QP.
    pub fn handle_batch_ecn<'d>(
        &mut self,
        now: u64,
        batch: impl IntoIterator<Item = (SocketAddr, &'d [u8], bool)>,
    ) {
        self.handle_batch_checked(now, batch, true);
    }

    /// As [`Engine::handle_batch`], for datagrams that another engine of
    /// this NIC built and handed over internally (internal loopback): no
    /// wire could corrupt them, and those of RC and UC QPs between its
    /// devices carry no ICRC (`tx::Icrc::Internal`), so it is not checked.
    /// A datagram may leave its payload in the sender's region (`dma`).
    pub fn handle_internal_batch<'d>(
        &mut self,
        now: u64,
        batch: impl IntoIterator<Item = dma::Delivered<'d>>,
    ) {
        self.batching = true;
        for d in batch {
            match (d.source, d.sink) {
                (Some(source), _) => self.handle_by_reference(now, d.src, d.data, source),
                (None, sink) => self.handle_one(now, d.src, d.data, false, false, sink),
            }
        }
        self.end_batch(now);
    }

    fn handle_batch_checked<'d>(
        &mut self,
        now: u64,
        batch: impl IntoIterator<Item = (SocketAddr, &'d [u8], bool)>,
        check_icrc: bool,
    ) {
        self.batching = true;
        for (src, data, ce) in batch {
            self.handle_one(now, src, data, check_icrc, ce, None);
        }
        self.end_batch(now);
    }

    /// A batch ended: send the ACKs held back during it.
    fn end_batch(&mut self, now: u64) {
        self.batching = false;
        let due = std::mem::take(&mut self.deferred_acks);
        let (qps, mut cx) = self.split(now);
        for qpn in due {
            if let Some(qp) = qps.get_mut(&qpn) {
                responder::flush_ack(qp, &mut cx);
            }
        }
    }

    /// Handle a datagram of internal loopback whose payload `source` left
    /// in its sender's region: an RC SEND or WRITE has it copied straight
    /// into its target; anything else is handled whole.
    fn handle_by_reference(
        &mut self,
        now: u64,
        src: SocketAddr,
        data: &[u8],
        source: &dma::DmaSource,
    ) {
        if !source.is_readable() {
            // Deregistered since it was sent: lost, as on a link.
            self.counters.add(Counter::Dropped, 1);
            tracing::debug!(%src, "payload of an internal packet no longer readable");
            return;
        }
        let by_reference = urdma_wire::parse_unchecked(data).ok().filter(|p| {
            let info = p.repr.bth.opcode.info();
            info.transport == urdma_wire::Transport::Rc && info.has_payload && p.payload.is_empty()
        });
        match by_reference.zip(source.stand_in()) {
            Some((mut pkt, stand_in)) => {
                pkt.payload = stand_in;
                self.handle_packet(
                    now,
                    src,
                    &pkt,
                    data.len() + source.len(),
                    false,
                    (Some(source), None),
                );
            }
            None => match source.assemble(data) {
                Ok(whole) => {
                    self.handle_one(now, src, &whole, false, false, None);
                    crate::bufpool::give(whole);
                }
                Err(_) => self.counters.add(Counter::Dropped, 1),
            },
        }
    }

    /// Process one received datagram from `src`.
    pub fn handle_datagram(&mut self, now: u64, src: SocketAddr, data: &[u8]) {
        self.handle_one(now, src, data, true, false, None);
    }

    /// Handle one datagram from `src`, its ICRC checked if `check_icrc`,
    /// congestion experienced if `ce`; `sink` is the requester's buffer of
    /// an RC READ request from a device of this NIC (`dma`).
    fn handle_one(
        &mut self,
        now: u64,
        src: SocketAddr,
        data: &[u8],
        check_icrc: bool,
        ce: bool,
        sink: Option<&dma::DmaSource>,
    ) {
        let ctx = IcrcContext {
            src,
            dst: self.local_for(src),
        };
        if urdma_wire::cnp::is_cnp(data) {
            return self.on_cnp(now, src, data, &ctx, check_icrc);
        }
        // Any sender: rxe and RNICs put a non-zero IPv4 identification,
        // which the ICRC covers and the socket does not show.
        let checked = if !check_icrc {
            urdma_wire::parse_unchecked(data)
        } else {
            self.check_icrc(data, &ctx, src)
        };
        let pkt = match checked {
            Ok(p) => p,
            Err(e) => return self.count_malformed(&e, src, "packet"),
        };
        self.handle_packet(now, src, &pkt, data.len(), ce, (None, sink));
    }

    /// Handle a parsed packet of `len` bytes from `src`, whose payload
    /// stayed in its sender's region if `refs.0` names it, and whose
    /// requester's READ buffer is `refs.1` (`dma`).
    fn handle_packet(
        &mut self,
        now: u64,
        src: SocketAddr,
        pkt: &urdma_wire::Packet<'_>,
        len: usize,
        ce: bool,
        refs: (Option<&dma::DmaSource>, Option<&dma::DmaSource>),
    ) {
        tracing::trace!(%src, packet = %pkt, "received");
        self.counters.add(Counter::RxPackets, 1);
        self.counters.add(Counter::RxBytes, len as u64);
        let qpn = pkt.repr.bth.dest_qp;
        if qpn == urdma_wire::cm::GSI_QPN {
            return self.on_gsi_packet(now, src, pkt);
        }
        let (qps, mut cx) = self.split_from(now, src);
        (cx.dma, cx.sink) = refs;
        let Some(qp) = qps.get_mut(&qpn) else {
            cx.counters.add(Counter::Dropped, 1);
            tracing::debug!(qpn, "packet for unknown QP dropped");
            return;
        };
        qp.counters.add(Counter::RxPackets, 1);
        qp.counters.add(Counter::RxBytes, len as u64);
        let info = pkt.repr.bth.opcode.info();
        let transport_ok = matches!(
            (info.transport, qp.qp_type),
            (urdma_wire::Transport::Rc, crate::types::QpType::Rc)
                | (urdma_wire::Transport::Uc, crate::types::QpType::Uc)
                | (urdma_wire::Transport::Ud, crate::types::QpType::Ud)
        );
        if !transport_ok {
            drop_packet(qp, &mut cx, "transport does not match the QP");
            return;
        }
        // The peer is known by its address: RoCEv2 senders pick the UDP
        // source port freely (per QP or per flow, for ECMP entropy).
        if qp.qp_type != crate::types::QpType::Ud && qp.remote.map(|r| r.ip()) != Some(src.ip()) {
            drop_packet(qp, &mut cx, "packet not from the connected peer");
            return;
        }
        if ce {
            congestion::notify(qp, &mut cx);
        }
        match info.kind {
            OpKind::ReadResponse | OpKind::Ack | OpKind::AtomicAck => {
                completer::on_response(qp, &mut cx, pkt)
            }
            _ => responder::on_request(qp, &mut cx, pkt),
        }
        requester::pump(qp, &mut cx);
    }
}

impl Engine {
    /// Check a received datagram's ICRC and parse it.
    fn check_icrc<'d>(
        &mut self,
        data: &'d [u8],
        ctx: &IcrcContext,
        src: SocketAddr,
    ) -> Result<urdma_wire::Packet<'d>, WireError> {
        self.accept_icrc(data, ctx, src)
            .and_then(|()| urdma_wire::parse_unchecked(data))
    }

    /// Check a received datagram's ICRC, for whatever IPv4 identification
    /// its sender used, as far as that sender's habits allow
    /// ([`ident::SenderIdents`]).
    pub(super) fn accept_icrc(
        &mut self,
        data: &[u8],
        ctx: &IcrcContext,
        src: SocketAddr,
    ) -> Result<(), WireError> {
        urdma_wire::check_icrc_any_ident(data, ctx).and_then(|ident| {
            let fixed = ident.is_none_or(urdma_wire::Ipv4Ident::is_urdma);
            if self.idents.accept(src.ip(), fixed) {
                Ok(())
            } else {
                Err(WireError::BadIcrc)
            }
        })
    }

    /// Count and log a datagram dropped for `e` (`what` it claimed to be).
    pub(super) fn count_malformed(&mut self, e: &WireError, src: SocketAddr, what: &str) {
        match e {
            WireError::BadIcrc => self.counters.add(Counter::IcrcErrors, 1),
            _ => self.counters.add(Counter::HeaderErrors, 1),
        }
        tracing::debug!(%src, error = %e, what, "dropped malformed datagram");
    }
}

//! RoCEv2 congestion notification, both ends: a QP that receives a packet
//! marked "congestion experienced" sends its peer QP a CNP, at most one per
//! [`CNP_INTERVAL_NS`] (the notification point); a QP that receives a CNP
//! lowers its sending rate ([`super::rate`], the reaction point).

use super::counters::Counter;
use super::qp::QpCtx;
use super::{Ctx, Engine, Transmit};
use crate::types::QpType;
use std::net::SocketAddr;
use urdma_wire::IcrcContext;

/// Shortest time between two CNPs a QP sends (DCQCN's N, 50 us).
pub(super) const CNP_INTERVAL_NS: u64 = 50_000;

/// Partition key of the CNPs sent (the default partition).
const PKEY: u16 = 0xffff;

/// A packet for `qp` came marked: tell its peer, unless told recently.
pub(crate) fn notify(qp: &mut QpCtx, cx: &mut Ctx<'_>) {
    cx.count(&mut qp.counters, Counter::EcnMarked);
    if qp.qp_type == QpType::Ud {
        return;
    }
    let Some(dst) = qp.remote else { return };
    if qp
        .req
        .last_cnp_at
        .is_some_and(|t| cx.now.saturating_sub(t) < CNP_INTERVAL_NS)
    {
        return;
    }
    let ctx = IcrcContext {
        src: cx.local_for(dst),
        dst,
    };
    let Ok(data) = urdma_wire::cnp::build_cnp(qp.attr.dest_qp_num, PKEY, &ctx) else {
        return;
    };
    qp.req.last_cnp_at = Some(cx.now);
    cx.count(&mut qp.counters, Counter::CnpSent);
    cx.tx.push_back(Transmit::new(dst, data));
}

impl Engine {
    /// A CNP arrived from `src`: slow down the QP it names.
    pub(super) fn on_cnp(
        &mut self,
        now: u64,
        src: SocketAddr,
        data: &[u8],
        ctx: &IcrcContext,
        check_icrc: bool,
    ) {
        let checked = if check_icrc {
            self.accept_icrc(data, ctx, src)
        } else {
            Ok(())
        };
        let qpn = match checked.and_then(|()| urdma_wire::cnp::parse_cnp(data)) {
            Ok(q) => q,
            Err(e) => return self.count_malformed(&e, src, "CNP"),
        };
        self.counters.add(Counter::RxPackets, 1);
        self.counters.add(Counter::RxBytes, data.len() as u64);
        let (qps, mut cx) = self.split_from(now, src);
        let Some(qp) = qps.get_mut(&qpn) else {
            cx.counters.add(Counter::Dropped, 1);
            return;
        };
        if qp.qp_type == QpType::Ud || qp.remote.map(|r| r.ip()) != Some(src.ip()) {
            super::drop_packet(qp, &mut cx, "CNP not from the connected peer");
            return;
        }
        cx.count(&mut qp.counters, Counter::CnpReceived);
        let srtt = qp.req.rtt.srtt();
        qp.req.rate.on_cnp(now, srtt);
    }
}

//! Duplicate requests (RC, PSN before the expected one): answered again
//! without being executed again. A SEND or WRITE is acknowledged up to the
//! last executed PSN, a READ is answered again from the region (once for
//! copies of it that arrive in one batch; responses of its request still
//! waiting restart at its PSN, [`super::outbound`]), an atomic gets the original
//! value it returned the first time. What cannot be answered is dropped,
//! never NAKed.

use super::check::{dma_len, remote_range};
use super::outbound::{read_span, ReadRun};
use super::reply;
use crate::engine::qp::{QpCtx, RdAtomicRecord};
use crate::engine::{drop_packet, psn, Counter, Ctx};
use crate::types::AccessFlags;
use urdma_wire::{OpKind, Packet};

/// Count and answer a duplicate request.
pub(super) fn answer(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) {
    cx.count(&mut qp.counters, Counter::Duplicates);
    if let Err(why) = replay(qp, cx, pkt) {
        drop_packet(qp, cx, why);
    }
}

/// The latest READ or atomic request remembered that `matches`.
fn remembered(qp: &QpCtx, matches: impl Fn(&RdAtomicRecord) -> bool) -> Option<RdAtomicRecord> {
    qp.resp.history.iter().rev().find(|r| matches(r)).copied()
}

/// Answer a duplicate again, or say why it cannot be.
fn replay(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) -> Result<(), &'static str> {
    let p = pkt.repr.bth.psn;
    match pkt.repr.bth.opcode.info().kind {
        OpKind::Send | OpKind::Write => {
            if pkt.repr.bth.ack_req {
                let last = psn::prev(qp.resp.epsn);
                reply::ack(qp, cx, last);
            }
            Ok(())
        }
        OpKind::ReadRequest => read(qp, cx, pkt),
        OpKind::CompareSwap | OpKind::FetchAdd => {
            let orig = remembered(qp, |r| r.first_psn == p)
                .and_then(|r| r.atomic_orig)
                .ok_or("duplicate atomic no longer remembered")?;
            reply::atomic_ack(qp, cx, p, orig);
            Ok(())
        }
        _ => Err("not a request"),
    }
}

/// Answer a duplicate READ again, from the region as it is now, if it lies
/// within a READ still remembered.
fn read(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) -> Result<(), &'static str> {
    let p = pkt.repr.bth.psn;
    if qp.resp.dup_read_answered == Some((p, cx.now)) {
        return Err("duplicate READ answered already in this batch");
    }
    let rec = remembered(qp, |r| {
        r.atomic_orig.is_none() && psn::le(r.first_psn, p) && psn::le(p, r.last_psn)
    })
    .ok_or("duplicate READ no longer remembered")?;
    let Some(reth) = pkt.repr.reth else {
        return Ok(());
    };
    let len = dma_len(&reth).map_err(|_| "duplicate READ longer than any message")?;
    if psn::lt(rec.last_psn, psn::add(p, read_span(qp, len) - 1)) {
        return Err("duplicate READ larger than the original");
    }
    let mrs = cx.mrs;
    let range = remote_range(
        qp,
        (mrs, &*cx.mws),
        reth.rkey,
        reth.va,
        len,
        AccessFlags::REMOTE_READ,
    )
    .map_err(|_| "duplicate READ no longer valid")?;
    let run = ReadRun {
        range,
        rkey: reth.rkey,
        va: reth.va,
        len,
        first: p,
        request: rec.first_psn,
    };
    reply::flush_ack(qp, cx);
    super::outbound::repeat_read(qp, cx, run);
    qp.resp.dup_read_answered = Some((p, cx.now));
    Ok(())
}

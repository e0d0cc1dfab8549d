//! Building and queueing outgoing packets.

use super::counters::{self, Counter, Counters};
use super::Ctx;
use super::Transmit;
use crate::mr::{gather, LocalSge};
use std::net::SocketAddr;
use urdma_wire::{IcrcContext, PacketRepr};

/// Where a packet's payload comes from.
pub enum PayloadSrc<'a> {
    /// No payload.
    Empty,
    /// These bytes.
    Bytes(&'a [u8]),
    /// `len` bytes at message offset `offset` of a gather list.
    Gather(&'a [LocalSge], usize, usize),
    /// `len` bytes at `offset` of one region.
    Region(&'a crate::mr::MrEntry, usize, usize),
}

/// The payload could not be read (region deregistered or too short).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadError;

/// Build a packet and queue it for `dst`.
pub fn send(
    cx: &mut Ctx<'_>,
    qp_counters: &mut Counters,
    dst: SocketAddr,
    repr: &PacketRepr,
    payload: PayloadSrc<'_>,
) -> Result<(), PayloadError> {
    let plen = match payload {
        PayloadSrc::Empty => 0,
        PayloadSrc::Bytes(b) => b.len(),
        PayloadSrc::Gather(_, _, n) | PayloadSrc::Region(_, _, n) => n,
    };
    let mut out = Vec::with_capacity(repr.header_len() + plen + 8);
    if urdma_wire::emit_headers(repr, plen, &mut out).is_err() {
        tracing::error!(?repr, "engine built an inconsistent header");
        return Err(PayloadError);
    }
    match payload {
        PayloadSrc::Empty => {}
        PayloadSrc::Bytes(b) => out.extend_from_slice(b),
        PayloadSrc::Gather(sges, off, n) => {
            gather(sges, off, n, &mut out).map_err(|_| PayloadError)?
        }
        PayloadSrc::Region(mr, off, n) => mr
            .mem
            .read_into(off, n, &mut out)
            .map_err(|_| PayloadError)?,
    }
    let ctx = IcrcContext { src: cx.local, dst };
    if urdma_wire::seal(&mut out, &ctx).is_err() {
        tracing::error!(%dst, "cannot seal packet (address family mismatch)");
        return Err(PayloadError);
    }
    let n = out.len() as u64;
    counters::count_both(qp_counters, cx.counters, Counter::TxPackets, 1);
    counters::count_both(qp_counters, cx.counters, Counter::TxBytes, n);
    cx.tx.push_back(Transmit { dst, data: out });
    Ok(())
}

//! Building and queueing outgoing packets.

use super::counters::{self, Counter, Counters};
use super::dma::{DmaSource, Liveness};
use super::Ctx;
use super::Transmit;
use crate::mr::{gather, LocalSge};
use std::net::SocketAddr;
use urdma_wire::{IcrcContext, PacketRepr};

/// Where a packet's payload comes from.
pub(super) enum PayloadSrc<'a> {
    /// No payload.
    Empty,
    /// These bytes.
    Bytes(&'a [u8]),
    /// `len` bytes at message offset `offset` of a gather list.
    Gather(&'a [LocalSge], usize, usize),
    /// `len` bytes at `offset` of one region.
    Region(&'a crate::mr::MrEntry, usize, usize),
    /// Bytes left in a region for a device of this NIC, by reference
    /// ([`super::dma`]); read into the packet for anything else.
    Reference(DmaSource),
}

/// Bytes read ahead of the packets that carry them: `data` holds those
/// from offset `at` (of a message, or of a region).
#[derive(Debug, Default)]
pub(super) struct ReadAhead {
    at: usize,
    data: Vec<u8>,
}

impl ReadAhead {
    /// The `len` bytes at `off`, if held.
    pub(super) fn get(&self, off: usize, len: usize) -> Option<&[u8]> {
        let from = off.checked_sub(self.at)?;
        self.data.get(from..from.checked_add(len)?)
    }

    /// The `len` bytes at `off`: held ones, or read by `read(off, out)`,
    /// which appends what follows `off` (at least `len` bytes) to `out`.
    pub(super) fn get_or_read<E>(
        &mut self,
        off: usize,
        len: usize,
        read: impl FnOnce(usize, &mut Vec<u8>) -> Result<(), E>,
    ) -> Result<Option<&[u8]>, E> {
        if self.get(off, len).is_none() {
            self.data.clear();
            read(off, &mut self.data).inspect_err(|_| self.data.clear())?;
            self.at = off;
        }
        Ok(self.get(off, len))
    }
}

/// The payload could not be read (region deregistered or too short).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PayloadError;

/// Whether a packet gets its ICRC.
#[derive(Debug, Clone, Copy)]
pub(super) enum Icrc<'a> {
    /// Computed, as every packet that may cross a link needs.
    Sealed,
    /// Left zero: the packet is for a device of this NIC (a QP whose peer
    /// was internal when it moved to RTR), whose receiver does not check
    /// it; a capture fills it in ([`urdma_wire::reseal`]).
    Internal,
    /// As [`Icrc::Internal`], and a payload in one region may stay there
    /// for the receiving device to copy ([`super::dma`]) while the QP's
    /// requests stand: an RC request, whose requester completes nothing
    /// before the responder answered.
    InternalByReference(&'a Liveness),
}

impl<'a> Icrc<'a> {
    /// What a connected QP's packets get: none between devices of this
    /// NIC, whose payloads may travel by reference when `by_reference`
    /// names the QP's [`Liveness`].
    pub(super) fn for_peer(internal: bool, by_reference: Option<&'a Liveness>) -> Self {
        match (internal, by_reference) {
            (false, _) => Icrc::Sealed,
            (true, None) => Icrc::Internal,
            (true, Some(live)) => Icrc::InternalByReference(live),
        }
    }
}

/// The payload `payload` as a reference into its region, when `icrc`
/// allows one and it lies in one region that lets it travel so.
fn by_reference(payload: &PayloadSrc<'_>, icrc: Icrc<'_>) -> Option<DmaSource> {
    let live = match icrc {
        Icrc::Sealed => return None,
        Icrc::Internal => None,
        Icrc::InternalByReference(live) => Some(live),
    };
    match *payload {
        PayloadSrc::Gather(sges, off, n) => {
            let (sge, at) = crate::mr::within_one(sges, off, n)?;
            DmaSource::new(&sge.mr, at, n, live?)
        }
        PayloadSrc::Reference(ref src) => Some(src.clone()),
        PayloadSrc::Region(..) | PayloadSrc::Empty | PayloadSrc::Bytes(_) => None,
    }
}

/// Build a packet and queue it for `dst`.
pub(super) fn send(
    cx: &mut Ctx<'_>,
    qp_counters: &mut Counters,
    dst: SocketAddr,
    repr: &PacketRepr,
    payload: PayloadSrc<'_>,
    icrc: Icrc,
) -> Result<(), PayloadError> {
    let plen = match payload {
        PayloadSrc::Empty => 0,
        PayloadSrc::Bytes(b) => b.len(),
        PayloadSrc::Gather(_, _, n) | PayloadSrc::Region(_, _, n) => n,
        PayloadSrc::Reference(ref src) => src.len(),
    };
    let source = by_reference(&payload, icrc);
    let carried = if source.is_some() { 0 } else { plen };
    let mut out = crate::bufpool::take(repr.header_len() + carried + 8);
    if urdma_wire::emit_headers(repr, plen, &mut out).is_err() {
        tracing::error!(?repr, "engine built an inconsistent header");
        return Err(PayloadError);
    }
    match payload {
        _ if source.is_some() => {}
        PayloadSrc::Empty => {}
        PayloadSrc::Bytes(b) => out.extend_from_slice(b),
        PayloadSrc::Gather(sges, off, n) => {
            gather(sges, off, n, &mut out).map_err(|_| PayloadError)?
        }
        PayloadSrc::Region(mr, off, n) => mr
            .mem
            .read_into(off, n, &mut out)
            .map_err(|_| PayloadError)?,
        PayloadSrc::Reference(src) => src.append_to(&mut out).map_err(|_| PayloadError)?,
    }
    let closed = match icrc {
        Icrc::Sealed => urdma_wire::seal(
            &mut out,
            &IcrcContext {
                src: cx.local_for(dst),
                dst,
            },
        ),
        Icrc::Internal | Icrc::InternalByReference(_) => urdma_wire::close_unsealed(&mut out),
    };
    if let Err(e) = closed {
        tracing::error!(%dst, error = %e, "cannot close packet");
        return Err(PayloadError);
    }
    let n = (out.len() + plen - carried) as u64;
    counters::count_both(qp_counters, cx.counters, Counter::TxPackets, 1);
    counters::count_both(qp_counters, cx.counters, Counter::TxBytes, n);
    cx.tx.push_back(Transmit {
        dst,
        data: out,
        source,
        sink: None,
    });
    Ok(())
}

//! Building and queueing outgoing packets.

use super::counters::{self, Counter, Counters};
use super::dma::DmaSource;
use super::Ctx;
use super::Transmit;
use crate::mr::{gather, LocalSge};
use std::net::SocketAddr;
use std::sync::Arc;
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
    Region(&'a Arc<crate::mr::MrEntry>, usize, usize),
}

/// Bytes read ahead of the packets that carry them: `data` holds those
/// from offset `at` (of a message, or of a region).
#[derive(Debug, Default)]
pub struct ReadAhead {
    at: usize,
    data: Vec<u8>,
}

impl ReadAhead {
    /// The `len` bytes at `off`, if held.
    pub fn get(&self, off: usize, len: usize) -> Option<&[u8]> {
        let from = off.checked_sub(self.at)?;
        self.data.get(from..from.checked_add(len)?)
    }

    /// The `len` bytes at `off`: held ones, or read by `read(off, out)`,
    /// which appends what follows `off` (at least `len` bytes) to `out`.
    pub fn get_or_read<E>(
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
pub struct PayloadError;

/// Whether a packet gets its ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icrc {
    /// Computed, as every packet that may cross a link needs.
    Sealed,
    /// Left zero: the packet is for a device of this NIC (a QP whose peer
    /// was internal when it moved to RTR), whose receiver does not check
    /// it; a capture fills it in ([`urdma_wire::reseal`]).
    Internal,
    /// As [`Icrc::Internal`], for an RC QP: a payload in one region may
    /// stay there for the receiving device to copy ([`super::dma`]).
    InternalRc,
}

impl Icrc {
    /// What a connected QP's packets get: none between devices of this
    /// NIC.
    pub fn for_peer(internal: bool, rc: bool) -> Self {
        match (internal, rc) {
            (false, _) => Icrc::Sealed,
            (true, false) => Icrc::Internal,
            (true, true) => Icrc::InternalRc,
        }
    }
}

/// The payload `payload` as a reference into its region, when `icrc`
/// allows one and it lies in one region that lets it travel so.
fn by_reference(payload: &PayloadSrc<'_>, icrc: Icrc) -> Option<DmaSource> {
    if icrc != Icrc::InternalRc {
        return None;
    }
    match *payload {
        PayloadSrc::Gather(sges, off, n) => {
            let mut skip = off;
            let sge = sges.iter().find(|s| {
                let here = skip < s.len;
                if !here {
                    skip -= s.len;
                }
                here
            })?;
            (skip + n <= sge.len)
                .then(|| DmaSource::new(&sge.mr, sge.offset + skip, n))
                .flatten()
        }
        PayloadSrc::Region(mr, off, n) => DmaSource::new(mr, off, n),
        PayloadSrc::Empty | PayloadSrc::Bytes(_) => None,
    }
}

/// Build a packet and queue it for `dst`.
pub fn send(
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
    }
    let closed = match icrc {
        Icrc::Sealed => urdma_wire::seal(&mut out, &IcrcContext { src: cx.local, dst }),
        Icrc::Internal | Icrc::InternalRc => urdma_wire::close_unsealed(&mut out),
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
    });
    Ok(())
}

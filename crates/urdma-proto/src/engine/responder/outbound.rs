//! Responses waiting their turn (RC). A READ is answered within a window
//! of response packets per pass, not all at once, and any response that
//! follows a READ still being answered (an ACK, a NAK, an atomic ACK)
//! waits behind it: responses leave in PSN order.
//!
//! Executing a READ records it here ([`PendingRead`]: the R_Key, the
//! address and length still to send, the PSNs) and sends its first window
//! at once; the device sends the next windows by itself, in a pass over
//! its QPs with responses pending that runs as a timer [`PACE_NS`] after
//! the last ([`Responding`]), with no packet from the requester needed.
//! A READ in progress holds no bytes: its range is looked up again (R_Key,
//! PD, rights, bounds) for every window, so that a region deregistered or
//! invalidated, or a window unbound, meanwhile ends the READ with a NAK
//! remote access error instead of a read of memory no longer registered.
//! The bytes of a window are read when it is sent: a WRITE, SEND or
//! atomic that follows the READ on the QP may be executed before the
//! READ's later windows read the region, as IBTA's relaxed ordering of
//! RDMA READ allows (a requester that needs the order fences the later
//! request).
//!
//! What a device's responders queue between two drains of its transmit
//! queue is bounded: at most [`DEVICE_READ_BYTES`] bytes of READ response
//! payloads (payloads by reference count none); past that the pass stops
//! and resumes once the driver has taken the datagrams (back-pressure).
//! The queue of a QP holds at most [`MAX_QUEUED`] entries, each without
//! payload bytes.

use super::check::{remote_range, Range};
use super::state::{PendingRead, Queued};
use crate::engine::dma::DmaSource;
use crate::engine::qp::QpCtx;
use crate::engine::requester::STAGE_BYTES;
use crate::engine::tx::{self, PayloadError, PayloadSrc};
use crate::engine::{drop_packet, psn, Ctx};
use crate::types::AccessFlags;
use std::collections::BTreeSet;
use urdma_wire::{AckSyndrome, Aeth, Bth, Opcode, PacketRepr};

/// Response packets a QP's READs send per pass: as many as the largest
/// READ request this NIC's requesters send
/// ([`crate::engine::requester::READ_CHUNK`]), which is thus answered at
/// once when it executes.
pub(crate) const READ_WINDOW: u32 = crate::engine::requester::READ_CHUNK;

/// Most bytes of READ response payloads a device queues for sending
/// between two drains of its transmit queue (4 MiB).
pub(crate) const DEVICE_READ_BYTES: usize = 4 << 20;

/// Time between two passes over the QPs with responses pending (ns).
pub(crate) const PACE_NS: u64 = 1_000;

/// Most responses a QP keeps waiting; one more is dropped, as a link
/// loses a packet (the requester asks again).
pub(super) const MAX_QUEUED: usize = 512;

/// The ACK credit field value meaning "no end-to-end credits in use".
const NO_CREDITS: u8 = 31;

/// The QPs of a device with responses pending, the next pass over them,
/// and what the device may still queue before its transmit queue is
/// drained.
#[derive(Debug)]
pub(crate) struct Responding {
    qps: BTreeSet<u32>,
    due: u64,
    cursor: u32,
    budget: usize,
}

impl Default for Responding {
    fn default() -> Self {
        Responding {
            qps: BTreeSet::new(),
            due: 0,
            cursor: 0,
            budget: DEVICE_READ_BYTES,
        }
    }
}

impl Responding {
    /// QP `qpn` has responses pending at `now`.
    fn insert(&mut self, qpn: u32, now: u64) {
        if self.qps.is_empty() {
            self.due = now + PACE_NS;
        }
        self.qps.insert(qpn);
    }

    /// When the next pass is due, if any QP waits.
    pub(crate) fn deadline(&self) -> Option<u64> {
        (!self.qps.is_empty()).then_some(self.due)
    }

    /// The transmit queue was drained: the device may queue again.
    pub(crate) fn drained(&mut self) {
        self.budget = DEVICE_READ_BYTES;
    }

    /// Bytes of READ payloads the device may still queue.
    #[cfg(test)]
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// The QPs to visit in a pass due at `now` (none before it), starting
    /// after the one the last pass reached; they leave the set, and
    /// [`advance`] puts back those still waiting.
    pub(crate) fn take_due(&mut self, now: u64) -> Vec<u32> {
        if self.due > now {
            return Vec::new();
        }
        let c = self.cursor;
        let qps = std::mem::take(&mut self.qps);
        let (after, upto): (Vec<u32>, Vec<u32>) = qps.into_iter().partition(|&q| q > c);
        after.into_iter().chain(upto).collect()
    }

    /// A pass reached QP `qpn` with bytes left to queue.
    pub(crate) fn reached(&mut self, qpn: u32) {
        if self.budget > 0 {
            self.cursor = qpn;
        }
    }
}

/// Queue `repr` (no payload) for the peer behind the responses waiting,
/// or send it now if none does; `rd_atomic` for an atomic ACK. A plain
/// ACK after a plain ACK replaces it.
pub(super) fn respond(qp: &mut QpCtx, cx: &mut Ctx<'_>, repr: PacketRepr, rd_atomic: bool) {
    if qp.resp.out.is_empty() {
        let _ = send_now(qp, cx, &repr, PayloadSrc::Empty);
        return;
    }
    if plain_ack(&repr) {
        if let Some(Queued::Packet(last, false)) = qp.resp.out.queue.back_mut() {
            if plain_ack(last) {
                *last = repr;
                return;
            }
        }
    }
    if qp.resp.out.queue.len() >= MAX_QUEUED {
        drop_packet(qp, cx, "responses waiting at their limit");
        return;
    }
    qp.resp.out.queue.push_back(Queued::Packet(repr, rd_atomic));
}

/// An ACK that is not a NAK.
fn plain_ack(repr: &PacketRepr) -> bool {
    repr.bth.opcode == Opcode::RcAck
        && matches!(
            repr.aeth,
            Some(Aeth {
                syndrome: AckSyndrome::Ack { .. },
                ..
            })
        )
}

/// Send a response now.
fn send_now(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    repr: &PacketRepr,
    payload: PayloadSrc<'_>,
) -> Result<(), PayloadError> {
    let Some(dst) = qp.remote else { return Ok(()) };
    let icrc = tx::Icrc::for_peer(qp.internal, None);
    tx::send(cx, &mut qp.counters, dst, repr, payload, icrc)
}

/// Number of PSNs (responses) of a READ of `len` bytes.
pub(super) fn read_span(qp: &QpCtx, len: usize) -> u32 {
    len.div_ceil(qp.mtu()).max(1) as u32
}

/// The requester's buffer of the READ being handled, filled with the
/// `len` bytes of `range` now, in the READ's turn (IBTA orders it before
/// the requests that follow it on the QP), when a device of this NIC
/// named one. The copy goes into memory the requester registered and is
/// as long as that buffer ([`DmaSource::fill_from`] refuses any other
/// length): no allocation, and no more than the requester asked for.
fn place(qp: &QpCtx, cx: &Ctx<'_>, range: Option<Range<'_>>, len: usize) -> Option<DmaSource> {
    match (cx.sink, range) {
        (Some(buf), Some((mr, off))) if qp.internal && len > 0 => buf
            .fill_from(&*mr.mem, off, len)
            .is_ok()
            .then(|| buf.clone()),
        _ => None,
    }
}

/// A READ to answer: `len` bytes at `va` under `rkey` (found at `range`
/// now), from PSN `first`, for the request of PSN `request`.
pub(super) struct ReadRun<'m> {
    /// The region and offset the bytes were found at.
    pub range: Option<Range<'m>>,
    /// The R_Key.
    pub rkey: u32,
    /// Address of the first byte.
    pub va: u64,
    /// Bytes.
    pub len: usize,
    /// PSN of the first response.
    pub first: u32,
    /// First PSN of the request answered.
    pub request: u32,
}

impl ReadRun<'_> {
    fn pending(&self, qp: &QpCtx, cx: &Ctx<'_>) -> PendingRead {
        PendingRead {
            rkey: self.rkey,
            va: self.va,
            len: self.len,
            first: self.first,
            n: read_span(qp, self.len),
            sent: 0,
            msn: qp.resp.msn,
            request: self.request,
            placed: place(qp, cx, self.range, self.len),
        }
    }
}

/// Answer a READ just executed: its responses go after those waiting, the
/// first window now.
pub(super) fn start_read(qp: &mut QpCtx, cx: &mut Ctx<'_>, run: ReadRun<'_>) {
    let r = run.pending(qp, cx);
    qp.resp.out.queue.push_back(Queued::Read(r));
    advance(qp, cx);
}

/// Answer a duplicate READ again from its PSN: the responses of its
/// request still waiting restart there; else they are sent again, in PSN
/// order among those waiting.
pub(super) fn repeat_read(qp: &mut QpCtx, cx: &mut Ctx<'_>, run: ReadRun<'_>) {
    let r = run.pending(qp, cx);
    let q = &mut qp.resp.out.queue;
    let same = |e: &Queued| matches!(e, Queued::Read(w) if w.request == r.request);
    if let Some(at) = q.iter().position(same) {
        q[at] = Queued::Read(r);
    } else if q.len() >= MAX_QUEUED {
        drop_packet(qp, cx, "responses waiting at their limit");
        return;
    } else {
        let at = q.iter().position(|e| psn::lt(r.first, e.psn()));
        q.insert(at.unwrap_or(q.len()), Queued::Read(r));
    }
    advance(qp, cx);
}

/// Send what waits, up to [`READ_WINDOW`] READ responses and the device's
/// budget; the QP stays among those responding while anything is left.
pub(super) fn advance(qp: &mut QpCtx, cx: &mut Ctx<'_>) {
    if super::check::qp_state(qp).is_err() {
        qp.resp.out.clear();
        return;
    }
    let mut window = READ_WINDOW;
    while let Some(item) = qp.resp.out.queue.pop_front() {
        match item {
            Queued::Packet(repr, _) => {
                let _ = send_now(qp, cx, &repr, PayloadSrc::Empty);
            }
            Queued::Read(mut r) => match send_window(qp, cx, &mut r, &mut window) {
                Ok(true) => {}
                Ok(false) => {
                    qp.resp.out.queue.push_front(Queued::Read(r));
                    break;
                }
                Err(PayloadError) => {
                    // The region went away under the READ.
                    let p = psn::add(r.first, r.sent);
                    let code = urdma_wire::NakCode::RemoteAccessError;
                    super::error::nak_error(qp, cx, p, code);
                    return;
                }
            },
        }
    }
    if !qp.resp.out.is_empty() {
        cx.responding.insert(qp.qpn, cx.now);
    }
}

/// The opcode of response `i` of `n`.
fn read_opcode(i: u32, n: u32) -> Opcode {
    match (i, n) {
        (_, 1) => Opcode::RcReadResponseOnly,
        (0, _) => Opcode::RcReadResponseFirst,
        (i, n) if i + 1 == n => Opcode::RcReadResponseLast,
        _ => Opcode::RcReadResponseMiddle,
    }
}

/// Send the next responses of `r`, up to `window` of them and what the
/// device may queue; true once all are sent. An error: the bytes are no
/// longer readable under the READ's R_Key.
fn send_window(
    qp: &mut QpCtx,
    cx: &mut Ctx<'_>,
    r: &mut PendingRead,
    window: &mut u32,
) -> Result<bool, PayloadError> {
    let mtu = qp.mtu();
    let from = r.sent as usize * mtu;
    let upto = ((r.sent + *window).min(r.n) as usize * mtu).min(r.len);
    // Looked up again: the region may have gone since the last window
    // (responses that name the requester's buffer filled already need
    // it only for pieces too small to travel by reference).
    let va = r.va.checked_add(from as u64).ok_or(PayloadError)?;
    let mrs = cx.mrs;
    let need = AccessFlags::REMOTE_READ;
    let range = match remote_range(qp, (mrs, &*cx.mws), r.rkey, va, upto - from, need) {
        Ok(range) => range,
        Err(_) if r.placed.is_some() => None,
        Err(_) => return Err(PayloadError),
    };
    // The region's bytes, read up to STAGE_BYTES at once where that pays.
    let mut ahead = tx::ReadAhead::default();
    let read_ahead = r.n > 1 && range.is_some_and(|(mr, _)| mr.mem.prefers_large_reads(mtu));
    while r.sent < r.n && *window > 0 {
        let start = r.sent as usize * mtu;
        let plen = mtu.min(r.len - start.min(r.len));
        let in_place = (r.placed.as_ref())
            .filter(|_| plen > 0)
            .and_then(|b| b.piece(start, plen));
        let carried = if in_place.is_some() { 0 } else { plen };
        if carried > cx.responding.budget {
            return Ok(false);
        }
        let opcode = read_opcode(r.sent, r.n);
        let p = psn::add(r.first, r.sent);
        let mut repr = PacketRepr::new(Bth::new(opcode, qp.attr.dest_qp_num, p));
        if opcode.info().has_aeth {
            repr.aeth = Some(Aeth {
                syndrome: AckSyndrome::Ack {
                    credits: NO_CREDITS,
                },
                msn: r.msn,
            });
        }
        let src = match (in_place, range) {
            (Some(piece), _) => PayloadSrc::Reference(piece),
            (None, Some((mr, off))) if plen > 0 && read_ahead => {
                let want = (upto - start).min(STAGE_BYTES).max(plen);
                let at_region = |at: usize| off + (at - from);
                match ahead.get_or_read(start, plen, |at, out| {
                    mr.mem.read_into(at_region(at), want, out)
                }) {
                    Ok(Some(b)) => PayloadSrc::Bytes(b),
                    // Read packet by packet, which reports the error.
                    _ => PayloadSrc::Region(mr, at_region(start), plen),
                }
            }
            (None, Some((mr, off))) if plen > 0 => {
                PayloadSrc::Region(mr, off + (start - from), plen)
            }
            _ => PayloadSrc::Empty,
        };
        send_now(qp, cx, &repr, src)?;
        cx.responding.budget -= carried;
        r.sent += 1;
        *window -= 1;
    }
    Ok(r.sent == r.n)
}

impl crate::engine::Engine {
    /// The pass over the QPs with responses waiting, when due: each sends
    /// its next window ([`advance`]), starting after the QP the
    /// last pass reached, as far as the device may queue.
    pub(in crate::engine) fn send_responses(&mut self, now: u64) {
        let due = self.responding.take_due(now);
        let (qps, mut cx) = self.split(now);
        for qpn in due {
            if let Some(qp) = qps.get_mut(&qpn) {
                cx.responding.reached(qpn);
                advance(qp, &mut cx);
            }
        }
    }
}

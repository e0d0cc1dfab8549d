//! Payload carried by reference between devices of one NIC.
//!
//! An RC request for a device of the same NIC (an internal ICRC by reference)
//! need not carry its payload's bytes: the datagram holds its headers and
//! ICRC field, and a [`DmaSource`] names the range of the sender's
//! registered region the payload is in. The receiving device copies that
//! range once, straight into the memory the packet's request targets, as
//! an RNIC's DMA engine moves memory to memory on its loopback path
//! (instead of a copy into a packet and another out of it).
//!
//! Only RC requests travel so: an RC requester completes nothing before
//! the responder has answered, so the bytes stay as they were when the
//! packet was built until its receiver has taken them. READ data moves
//! the other way: an RC READ request names the requester's buffer for it
//! (`Transmit::sink`, when that is one range of memory this process
//! maps), and the responding device copies the data straight into that
//! buffer when it executes the READ, before the requests that follow it
//! on the QP, as IBTA orders them; its responses then name the bytes
//! already in place, which the requester's copy finds where they are
//! ([`crate::memory::copy_between`] of a range onto itself does nothing).
//! Whatever cannot take a payload by reference (the network, a capture,
//! a packet that is not an RC payload in order) gets the whole datagram
//! from [`DmaSource::assemble`].
//!
//! The receiving device checks that the request still stands and its
//! region is still registered before it takes a packet; a packet that
//! fails the check is lost, as on a link. A region deregistered by
//! another thread in the moment between that check and the copy fails
//! the copy as the target's would: the responder then refuses the
//! request (a remote access or operational error), as it does for a
//! target it cannot write.

use crate::memory::{MemError, Memory};
use crate::mr::{scatter_from, LocalSge, MrEntry};
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Payloads shorter than this are copied into their packet: for them a
/// reference costs as much as the copy it saves.
pub const MIN_BY_REFERENCE: usize = 1024;

/// Zeros that stand in for a payload held by reference while the packet
/// passes the responder's checks, which look at its length only; the
/// steps that place a payload take the bytes from the [`DmaSource`]
/// ([`Ctx::body`](super::Ctx::body)).
static STAND_IN: [u8; super::INTERNAL_UNIT] = [0; super::INTERNAL_UNIT];

/// Whether a payload of `len` bytes may travel by reference: long enough
/// to be worth it, no longer than the stand-in, a multiple of 4 bytes (no
/// pad).
fn payload_len_ok(len: usize) -> bool {
    (MIN_BY_REFERENCE..=STAND_IN.len()).contains(&len) && len.is_multiple_of(4)
}

/// A datagram whole, for a capture: `data` itself, or a copy with the
/// payload `source` holds put in (None if its region is gone).
pub fn whole<'a>(data: &'a [u8], source: Option<&DmaSource>) -> Option<Cow<'a, [u8]>> {
    match source {
        None => Some(Cow::Borrowed(data)),
        Some(src) => src.assemble(data).ok().map(Cow::Owned),
    }
}

/// Whether the requests a QP has sent still stand: true until its send
/// queue is flushed (ERR), reset or destroyed, when the work requests that
/// sent them have ended and their buffers are the program's again. A
/// payload left by reference for such a request is not taken (the packet
/// is lost, as on a link), so that what the receiver gets is never bytes
/// the program wrote after the request ended.
#[derive(Debug)]
pub struct Liveness(Arc<AtomicBool>);

impl Default for Liveness {
    fn default() -> Self {
        Liveness(Arc::new(AtomicBool::new(true)))
    }
}

impl Drop for Liveness {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// `len` bytes at `offset` of a registered region: a packet's payload,
/// left where it is, for as long as the request that sent it stands.
#[derive(Clone)]
pub struct DmaSource {
    mr: Arc<MrEntry>,
    offset: usize,
    len: usize,
    live: Arc<AtomicBool>,
}

impl std::fmt::Debug for DmaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaSource")
            .field("lkey", &self.mr.lkey)
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

impl PartialEq for DmaSource {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.mr, &other.mr) && self.offset == other.offset && self.len == other.len
    }
}

impl Eq for DmaSource {}

impl DmaSource {
    /// The payload `len` bytes at `offset` of `mr` may travel by
    /// reference: long enough to be worth it, no longer than the stand-in,
    /// a multiple of 4 bytes (no pad) and in memory this process maps.
    pub fn new(mr: &Arc<MrEntry>, offset: usize, len: usize, live: &Liveness) -> Option<Self> {
        Self::read_buffer(mr, offset, len, live).filter(|_| payload_len_ok(len))
    }

    /// The requester's buffer for the data of a READ request:
    /// `len` bytes at `offset` of `mr`, any length, in memory this
    /// process maps (see [`DmaSource::piece`]).
    pub fn read_buffer(
        mr: &Arc<MrEntry>,
        offset: usize,
        len: usize,
        live: &Liveness,
    ) -> Option<Self> {
        let fits = offset.checked_add(len).is_some_and(|e| e <= mr.mem.len());
        (fits && mr.mem.is_mapped()).then(|| DmaSource {
            mr: mr.clone(),
            offset,
            len,
            live: live.0.clone(),
        })
    }

    /// Bytes `[at, at + len)` of this range, as a payload by reference
    /// (within the limits of [`DmaSource::new`]).
    pub fn piece(&self, at: usize, len: usize) -> Option<Self> {
        let offset = self.offset.checked_add(at)?;
        (at.checked_add(len)? <= self.len && payload_len_ok(len)).then(|| DmaSource {
            mr: self.mr.clone(),
            offset,
            len,
            live: self.live.clone(),
        })
    }

    /// Fill this range (a READ's buffer at the requester) with `len` bytes
    /// at `offset` of `src`, when the request still stands and the
    /// lengths agree.
    pub fn fill_from(&self, src: &dyn Memory, offset: usize, len: usize) -> Result<(), MemError> {
        if !self.live.load(Ordering::Acquire) || len != self.len {
            return Err(MemError::Invalid);
        }
        crate::memory::copy_between(src, offset, &*self.mr.mem, self.offset, len)
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Length of the payload.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the request that sent it still stands and the region is
    /// still registered (its bounds were checked when it was made).
    pub fn is_readable(&self) -> bool {
        self.live.load(Ordering::Acquire) && self.mr.mem.is_valid()
    }

    /// Zeros as long as the payload, for the checks that look at its
    /// length only; None for a range longer than any payload.
    pub fn stand_in(&self) -> Option<&'static [u8]> {
        STAND_IN.get(..self.len)
    }

    /// Whether `payload` is this source's stand-in.
    pub fn stands_for(&self, payload: &[u8]) -> bool {
        self.stand_in().is_some_and(|s| std::ptr::eq(payload, s))
    }

    /// Copy the payload to `offset` of `dst`.
    pub fn copy_to(&self, dst: &dyn Memory, offset: usize) -> Result<(), MemError> {
        crate::memory::copy_between(&*self.mr.mem, self.offset, dst, offset, self.len)
    }

    /// Copy the payload to message offset `msg_off` of a scatter list.
    pub fn scatter_to(&self, sges: &[LocalSge], msg_off: usize) -> Result<(), MemError> {
        scatter_from(sges, msg_off, &*self.mr.mem, self.offset, self.len)
    }

    /// The whole datagram: `headers` (a datagram built without its
    /// payload: headers, then the ICRC field) with the payload's bytes
    /// put before the ICRC field.
    pub fn assemble(&self, headers: &[u8]) -> Result<Vec<u8>, MemError> {
        let icrc_at = headers.len().saturating_sub(urdma_wire::ICRC_LEN);
        let mut out = crate::bufpool::take(headers.len() + self.len);
        out.extend_from_slice(&headers[..icrc_at]);
        self.append_to(&mut out)?;
        out.extend_from_slice(&headers[icrc_at..]);
        Ok(out)
    }

    /// Append the payload's bytes to `out`.
    pub fn append_to(&self, out: &mut Vec<u8>) -> Result<(), MemError> {
        self.mr.mem.read_into(self.offset, self.len, out)
    }
}

/// A datagram one device of this NIC hands another: its source, its
/// bytes (without the payload when `source` holds it), and the requester's
/// buffer of an RC READ request.
#[derive(Debug, Clone, Copy)]
pub struct Delivered<'d> {
    /// The sending device's address.
    pub src: std::net::SocketAddr,
    /// The datagram.
    pub data: &'d [u8],
    /// Its payload, left in the sender's region.
    pub source: Option<&'d DmaSource>,
    /// The READ request's buffer at the requester.
    pub sink: Option<&'d DmaSource>,
}

/// A received packet's payload: its bytes, or the region range a device
/// of this NIC left them in.
#[derive(Debug, Clone, Copy)]
pub enum Body<'a> {
    /// The bytes.
    Bytes(&'a [u8]),
    /// Where the bytes are.
    Source(&'a DmaSource),
}

impl Body<'_> {
    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Body::Bytes(b) => b.len(),
            Body::Source(s) => s.len(),
        }
    }

    /// Copy the payload to `offset` of `dst`.
    pub fn write_to(&self, dst: &dyn Memory, offset: usize) -> Result<(), MemError> {
        match self {
            Body::Bytes(b) => dst.write(offset, b),
            Body::Source(s) => s.copy_to(dst, offset),
        }
    }

    /// Copy the payload to message offset `msg_off` of a scatter list.
    pub fn scatter_to(&self, sges: &[LocalSge], msg_off: usize) -> Result<(), MemError> {
        match self {
            Body::Bytes(b) => crate::mr::scatter(sges, msg_off, b),
            Body::Source(s) => s.scatter_to(sges, msg_off),
        }
    }

    /// The payload's bytes, in a buffer of their own.
    pub fn to_boxed(self) -> Result<Box<[u8]>, MemError> {
        match self {
            Body::Bytes(b) => Ok((*b).into()),
            Body::Source(s) => {
                let mut v = Vec::with_capacity(s.len);
                s.append_to(&mut v)?;
                Ok(v.into_boxed_slice())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::VecMemory;
    use crate::types::AccessFlags;

    fn region(len: usize) -> Arc<MrEntry> {
        let mem = VecMemory::new(len);
        Arc::new(MrEntry::new(9, 1, AccessFlags::LOCAL_WRITE, 0, mem))
    }

    #[test]
    fn only_long_aligned_payloads_in_bounds_go_by_reference() {
        let mr = region(64 * 1024);
        let live = Liveness::default();
        assert!(DmaSource::new(&mr, 0, 4096, &live).is_some());
        assert!(DmaSource::new(&mr, 0, 2, &live).is_none());
        assert!(DmaSource::new(&mr, 0, 4098, &live).is_none());
        assert!(DmaSource::new(&mr, 0, super::super::INTERNAL_UNIT + 4, &live).is_none());
        assert!(DmaSource::new(&mr, 62 * 1024, 4096, &live).is_none());
        assert!(DmaSource::new(&mr, usize::MAX, 4096, &live).is_none());
    }

    #[test]
    fn a_read_buffer_is_filled_and_cut_into_pieces() {
        let mr = region(3 * 4096);
        let live = Liveness::default();
        let buf = DmaSource::read_buffer(&mr, 4096, 8192, &live).unwrap();
        assert!(DmaSource::read_buffer(&mr, 8192, 8192, &live).is_none());
        let src = VecMemory::new(8192);
        src.write(0, &[7; 8192]).unwrap();
        assert!(buf.fill_from(&src, 0, 4096).is_err(), "lengths differ");
        buf.fill_from(&src, 0, 8192).unwrap();
        let mut got = vec![0u8; 8192];
        mr.mem.read(4096, &mut got).unwrap();
        assert_eq!(got, vec![7; 8192]);
        let second = buf.piece(4096, 4096).unwrap();
        assert_eq!((second.offset, second.len), (8192, 4096));
        assert!(buf.piece(4096, 8192).is_none());
        assert!(buf.piece(0, 6).is_none());
        drop(live);
        assert!(buf.fill_from(&src, 0, 8192).is_err());
    }

    #[test]
    fn a_payload_of_an_ended_request_is_not_taken() {
        let mr = region(8192);
        let live = Liveness::default();
        let src = DmaSource::new(&mr, 0, 4096, &live).unwrap();
        assert!(src.is_readable());
        drop(live);
        assert!(!src.is_readable());
    }

    #[test]
    fn assembles_the_datagram_and_copies_the_payload() {
        let mr = region(8192);
        let data: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
        mr.mem.write(1024, &data).unwrap();
        let live = Liveness::default();
        let src = DmaSource::new(&mr, 1024, 4096, &live).unwrap();
        assert!(src.stands_for(src.stand_in().unwrap()));
        assert!(!src.stands_for(&data));
        let whole = src.assemble(&[1, 2, 3, 9, 9, 9, 9]).unwrap();
        assert_eq!(&whole[..3], &[1, 2, 3]);
        assert_eq!(&whole[3..4099], &data[..]);
        assert_eq!(&whole[4099..], &[9, 9, 9, 9]);
        let dst = VecMemory::new(8192);
        src.copy_to(&dst, 100).unwrap();
        let mut back = vec![0u8; 4096];
        dst.read(100, &mut back).unwrap();
        assert_eq!(back, data);
        assert!(src.copy_to(&dst, 8000).is_err());
        mr.mem.invalidate();
        assert!(!src.is_readable());
        assert!(src.assemble(&[0; 4]).is_err());
    }
}

//! Whole packets: the BTH, the extended headers its opcode calls for, the
//! payload, the pad and the ICRC.
//!
//! Headers follow the BTH in this order: DETH, RETH or AtomicETH, AETH,
//! AtomicAckETH, ImmDt or IETH. The payload comes next, then `pad_count`
//! pad bytes that make payload and pad a multiple of 4 bytes, then the ICRC
//! (see [`icrc`](crate::icrc)).

use crate::field::{Reader, Writer};
use crate::icrc::{check_icrc, compute_icrc, IcrcContext};
use crate::{
    Aeth, AtomicAckEth, AtomicEth, Bth, Deth, Reth, WireError, AETH_LEN, ATOMIC_ACK_ETH_LEN,
    ATOMIC_ETH_LEN, BTH_LEN, DETH_LEN, ICRC_LEN, IETH_LEN, IMMDT_LEN, RETH_LEN,
};

/// Payload and pad together are a multiple of this many bytes.
const PAD_ALIGN: usize = 4;

/// All transport headers of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketRepr {
    /// Base transport header.
    pub bth: Bth,
    /// Datagram extended transport header (UD).
    pub deth: Option<Deth>,
    /// RDMA extended transport header (write first/only, read request).
    pub reth: Option<Reth>,
    /// Atomic extended transport header (compare-swap, fetch-add).
    pub atomic_eth: Option<AtomicEth>,
    /// ACK extended transport header (acknowledgements, read responses).
    pub aeth: Option<Aeth>,
    /// Atomic acknowledge extended transport header.
    pub atomic_ack_eth: Option<AtomicAckEth>,
    /// Immediate data (big-endian on the wire).
    pub immdt: Option<u32>,
    /// R_Key to invalidate (IETH, big-endian on the wire).
    pub ieth: Option<u32>,
}

impl PacketRepr {
    /// Headers for `bth` with every extended header absent.
    pub fn new(bth: Bth) -> Self {
        PacketRepr {
            bth,
            deth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
        }
    }

    /// Total length of the headers present, BTH included. For a repr that
    /// passes [`validate`](Self::validate) this equals the opcode's
    /// [`header_len`](crate::OpcodeInfo::header_len).
    pub fn header_len(&self) -> usize {
        let opt = |present: bool, len: usize| if present { len } else { 0 };
        BTH_LEN
            + opt(self.deth.is_some(), DETH_LEN)
            + opt(self.reth.is_some(), RETH_LEN)
            + opt(self.atomic_eth.is_some(), ATOMIC_ETH_LEN)
            + opt(self.aeth.is_some(), AETH_LEN)
            + opt(self.atomic_ack_eth.is_some(), ATOMIC_ACK_ETH_LEN)
            + opt(self.immdt.is_some(), IMMDT_LEN)
            + opt(self.ieth.is_some(), IETH_LEN)
    }

    /// Checks that exactly the extended headers the opcode requires are
    /// present; fails with [`WireError::HeaderMismatch`] otherwise.
    pub fn validate(&self) -> Result<(), WireError> {
        let info = self.bth.opcode.info();
        let present = [
            self.deth.is_some(),
            self.reth.is_some(),
            self.atomic_eth.is_some(),
            self.aeth.is_some(),
            self.atomic_ack_eth.is_some(),
            self.immdt.is_some(),
            self.ieth.is_some(),
        ];
        let required = [
            info.has_deth,
            info.has_reth,
            info.has_atomic_eth,
            info.has_aeth,
            info.has_atomic_ack_eth,
            info.has_immdt,
            info.has_ieth,
        ];
        if present == required {
            Ok(())
        } else {
            Err(WireError::HeaderMismatch)
        }
    }
}

/// A parsed, checked packet borrowing its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The headers, exactly those the opcode calls for.
    pub repr: PacketRepr,
    /// The payload, without pad and ICRC (empty for opcodes without one).
    pub payload: &'a [u8],
}

/// Number of pad bytes that follow a payload of `payload_len` bytes.
pub fn pad_len(payload_len: usize) -> usize {
    (PAD_ALIGN - payload_len % PAD_ALIGN) % PAD_ALIGN
}

/// Parse a datagram (BTH .. ICRC): checks the ICRC (with ctx), tver == 0, known opcode, presence of exactly the headers the opcode table says, length fits, pad count; payload excludes pad and ICRC.
///
/// The ICRC is checked first, so a corrupted packet is reported as
/// [`WireError::BadIcrc`] rather than as whatever the corruption looks like.
/// A datagram whose payload and pad are not a multiple of 4 bytes, or whose
/// pad count exceeds them, fails with [`WireError::BadPad`]; bytes after the
/// headers of an opcode that carries no payload fail with
/// [`WireError::HeaderMismatch`]. Pad bytes are not required to be zero.
pub fn parse<'a>(datagram: &'a [u8], ctx: &IcrcContext) -> Result<Packet<'a>, WireError> {
    check_icrc(datagram, ctx)?;
    parse_unchecked(datagram)
}

/// Parse a datagram received from a UDP socket, from any RoCEv2 sender:
/// as [`parse`], but the ICRC is accepted for whatever IPv4 identification
/// and DF flag the sender put in the IP header the socket does not show
/// (see [`crate::check_icrc_any_ident`] for the integrity this leaves).
pub fn parse_received<'a>(datagram: &'a [u8], ctx: &IcrcContext) -> Result<Packet<'a>, WireError> {
    crate::check_icrc_any_ident(datagram, ctx)?;
    parse_unchecked(datagram)
}

/// Same without ICRC verification (for tools and fuzzing).
///
/// The last [`ICRC_LEN`] bytes are still taken to be the ICRC and are not
/// part of the payload.
pub fn parse_unchecked(datagram: &[u8]) -> Result<Packet<'_>, WireError> {
    let len = datagram.len();
    let truncated = WireError::Truncated(len);
    let bth = Bth::parse(datagram)?;
    if bth.tver != 0 {
        return Err(WireError::BadVersion(bth.tver));
    }
    let info = bth.opcode.info();
    let body_len = len
        .checked_sub(ICRC_LEN)
        .filter(|&body| body >= info.header_len)
        .ok_or(truncated)?;
    let body = datagram.get(..body_len).ok_or(truncated)?;

    let mut repr = PacketRepr::new(bth);
    let mut off = BTH_LEN;
    // Takes the header of `hlen` bytes at `off` if `present`.
    let mut next = |present: bool, hlen: usize| -> Result<Option<&[u8]>, WireError> {
        if !present {
            return Ok(None);
        }
        let at = off;
        off += hlen;
        body.get(at..).map(Some).ok_or(truncated)
    };
    if let Some(b) = next(info.has_deth, DETH_LEN)? {
        repr.deth = Some(Deth::parse(b)?);
    }
    if let Some(b) = next(info.has_reth, RETH_LEN)? {
        repr.reth = Some(Reth::parse(b)?);
    }
    if let Some(b) = next(info.has_atomic_eth, ATOMIC_ETH_LEN)? {
        repr.atomic_eth = Some(AtomicEth::parse(b)?);
    }
    if let Some(b) = next(info.has_aeth, AETH_LEN)? {
        repr.aeth = Some(Aeth::parse(b)?);
    }
    if let Some(b) = next(info.has_atomic_ack_eth, ATOMIC_ACK_ETH_LEN)? {
        repr.atomic_ack_eth = Some(AtomicAckEth::parse(b)?);
    }
    if let Some(b) = next(info.has_immdt, IMMDT_LEN)? {
        repr.immdt = Some(Reader::new(b).u32()?);
    }
    if let Some(b) = next(info.has_ieth, IETH_LEN)? {
        repr.ieth = Some(Reader::new(b).u32()?);
    }

    let padded = body.get(info.header_len..).ok_or(truncated)?;
    if !info.has_payload && !padded.is_empty() {
        return Err(WireError::HeaderMismatch);
    }
    let payload_len = padded
        .len()
        .checked_sub(usize::from(bth.pad_count))
        .ok_or(WireError::BadPad)?;
    if padded.len() % PAD_ALIGN != 0 {
        return Err(WireError::BadPad);
    }
    let payload = padded.get(..payload_len).ok_or(WireError::BadPad)?;
    Ok(Packet { repr, payload })
}

/// Append headers to `out` (which the caller cleared), setting bth.pad_count from payload_len; checks that repr has exactly the headers its opcode requires (Err otherwise).
///
/// Fails with [`WireError::HeaderMismatch`] (leaving `out` untouched) if the
/// headers do not match the opcode or if `payload_len` is not 0 for an
/// opcode without payload. The BTH is emitted as given otherwise (its
/// `pad_count` replaced).
pub fn emit_headers(
    repr: &PacketRepr,
    payload_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    repr.validate()?;
    let info = repr.bth.opcode.info();
    if !info.has_payload && payload_len != 0 {
        return Err(WireError::HeaderMismatch);
    }
    let mut bth = repr.bth;
    // pad_len is below 4, so the cast cannot truncate.
    bth.pad_count = pad_len(payload_len) as u8;

    let start = out.len();
    out.resize(start + info.header_len, 0);
    let result = emit_into(repr, &bth, out.get_mut(start..).unwrap_or_default());
    if result.is_err() {
        out.truncate(start);
    }
    result
}

/// Writes `bth` and the extended headers of `repr` into `buf`, in order.
fn emit_into(repr: &PacketRepr, bth: &Bth, buf: &mut [u8]) -> Result<(), WireError> {
    // The part of `buf` from `off` on; each header writes its first bytes.
    fn at(buf: &mut [u8], off: usize) -> Result<&mut [u8], WireError> {
        buf.get_mut(off..).ok_or(WireError::BufferTooSmall)
    }
    bth.emit(at(buf, 0)?)?;
    let mut off = BTH_LEN;
    if let Some(h) = &repr.deth {
        h.emit(at(buf, off)?)?;
        off += DETH_LEN;
    }
    if let Some(h) = &repr.reth {
        h.emit(at(buf, off)?)?;
        off += RETH_LEN;
    }
    if let Some(h) = &repr.atomic_eth {
        h.emit(at(buf, off)?)?;
        off += ATOMIC_ETH_LEN;
    }
    if let Some(h) = &repr.aeth {
        h.emit(at(buf, off)?)?;
        off += AETH_LEN;
    }
    if let Some(h) = &repr.atomic_ack_eth {
        h.emit(at(buf, off)?)?;
        off += ATOMIC_ACK_ETH_LEN;
    }
    if let Some(v) = repr.immdt {
        Writer::new(at(buf, off)?).u32(v)?;
        off += IMMDT_LEN;
    }
    if let Some(v) = repr.ieth {
        Writer::new(at(buf, off)?).u32(v)?;
    }
    Ok(())
}

/// After the caller appended the payload: append pad bytes (zeros) and the ICRC.
///
/// `out` must hold exactly one datagram so far: the headers written by
/// [`emit_headers`] followed by the payload. The number of pad bytes is read
/// from the BTH; if the payload length does not agree with it
/// ([`WireError::BadPad`]), or the ICRC cannot be computed, `out` is left as
/// it was.
pub fn seal(out: &mut Vec<u8>, ctx: &IcrcContext) -> Result<(), WireError> {
    let start = pad(out)?;
    match compute_icrc(out, ctx) {
        Ok(icrc) => {
            out.extend_from_slice(&icrc.to_le_bytes());
            Ok(())
        }
        Err(e) => {
            out.truncate(start);
            Err(e)
        }
    }
}

/// Close a packet built by [`emit_headers`] and its payload without an
/// ICRC: the pad bytes and a zero ICRC field. For a packet that never
/// crosses a link (a NIC's internal loopback, whose receiver parses it
/// with [`parse_unchecked`]); [`crate::reseal`] gives it its ICRC where
/// one is needed (a capture).
pub fn close_unsealed(out: &mut Vec<u8>) -> Result<(), WireError> {
    pad(out)?;
    out.resize(out.len() + ICRC_LEN, 0);
    Ok(())
}

/// Append the pad bytes the BTH of `out` announces; the length before
/// them, or [`WireError::BadPad`] (nothing appended) if the payload does
/// not end where they would align it.
fn pad(out: &mut Vec<u8>) -> Result<usize, WireError> {
    let bth = Bth::parse(out)?;
    let pad = usize::from(bth.pad_count);
    let start = out.len();
    if !(start + pad).is_multiple_of(PAD_ALIGN) {
        return Err(WireError::BadPad);
    }
    out.resize(start + pad, 0);
    Ok(start)
}

/// Convenience: emit_headers + payload + seal into a new Vec.
pub fn build(repr: &PacketRepr, payload: &[u8], ctx: &IcrcContext) -> Result<Vec<u8>, WireError> {
    let capacity = repr.header_len() + payload.len() + pad_len(payload.len()) + ICRC_LEN;
    let mut out = Vec::with_capacity(capacity);
    emit_headers(repr, payload.len(), &mut out)?;
    out.extend_from_slice(payload);
    seal(&mut out, ctx)?;
    Ok(out)
}

#[cfg(test)]
mod tests;

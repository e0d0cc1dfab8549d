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
    let bth = Bth::parse(out)?;
    let pad = usize::from(bth.pad_count);
    let start = out.len();
    if !(start + pad).is_multiple_of(PAD_ALIGN) {
        return Err(WireError::BadPad);
    }
    out.resize(start + pad, 0);
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
mod tests {
    use super::*;
    use crate::opcode::TABLE;
    use crate::{AckSyndrome, NakCode, Opcode};
    use std::net::SocketAddr;

    fn ctx() -> IcrcContext {
        let src: SocketAddr = ([192, 168, 7, 1], 49152).into();
        let dst: SocketAddr = ([192, 168, 7, 2], crate::ROCEV2_UDP_PORT).into();
        IcrcContext::new(src, dst)
    }

    /// A repr for `op` with exactly the headers it needs.
    fn sample(op: Opcode) -> PacketRepr {
        let info = op.info();
        let mut bth = Bth::new(op, 0x00AB_CDEF, 0x0012_3456);
        bth.ack_req = true;
        let mut repr = PacketRepr::new(bth);
        if info.has_deth {
            repr.deth = Some(Deth {
                qkey: 0x1111_2222,
                src_qp: 0x33,
            });
        }
        if info.has_reth {
            repr.reth = Some(Reth {
                va: 0x0000_7F00_1234_5678,
                rkey: 0xCAFE,
                dma_len: 4096,
            });
        }
        if info.has_atomic_eth {
            repr.atomic_eth = Some(AtomicEth {
                va: 0x1000,
                rkey: 7,
                swap_add: 5,
                compare: 6,
            });
        }
        if info.has_aeth {
            repr.aeth = Some(Aeth {
                syndrome: AckSyndrome::Ack { credits: 31 },
                msn: 9,
            });
        }
        if info.has_atomic_ack_eth {
            repr.atomic_ack_eth = Some(AtomicAckEth { orig: 0xDEAD_BEEF });
        }
        if info.has_immdt {
            repr.immdt = Some(0x0102_0304);
        }
        if info.has_ieth {
            repr.ieth = Some(0x0506_0708);
        }
        repr
    }

    fn payload_for(op: Opcode) -> Vec<u8> {
        if op.info().has_payload {
            (0u8..13).collect()
        } else {
            Vec::new()
        }
    }

    #[test]
    fn every_opcode_round_trips_with_exactly_its_headers() {
        for info in &TABLE {
            let repr = sample(info.opcode);
            assert_eq!(repr.header_len(), info.header_len, "{}", info.name);
            assert_eq!(repr.validate(), Ok(()));
            let payload = payload_for(info.opcode);
            let wire = build(&repr, &payload, &ctx());
            let Ok(wire) = wire else {
                panic!("{}: {wire:?}", info.name)
            };
            let pad = pad_len(payload.len());
            assert_eq!(wire.len(), info.header_len + payload.len() + pad + ICRC_LEN);
            let mut expected = repr;
            expected.bth.pad_count = pad as u8;
            let parsed = parse(&wire, &ctx());
            assert_eq!(
                parsed,
                Ok(Packet {
                    repr: expected,
                    payload: &payload
                }),
                "{}",
                info.name
            );
            assert_eq!(parse_unchecked(&wire), parsed);
        }
    }

    #[test]
    fn headers_follow_in_the_specified_order() {
        let mut repr = sample(Opcode::UdSendOnlyImm);
        repr.immdt = Some(0xA1A2_A3A4);
        let mut out = Vec::new();
        assert_eq!(emit_headers(&repr, 0, &mut out), Ok(()));
        assert_eq!(out.len(), BTH_LEN + DETH_LEN + IMMDT_LEN);
        assert_eq!(out.get(12..16), Some(&[0x11, 0x11, 0x22, 0x22][..]));
        assert_eq!(out.get(20..24), Some(&[0xA1, 0xA2, 0xA3, 0xA4][..]));

        let repr = sample(Opcode::RcAtomicAck);
        out.clear();
        assert_eq!(emit_headers(&repr, 0, &mut out), Ok(()));
        assert_eq!(out.get(12), Some(&0x1F));
        assert_eq!(
            out.get(16..24),
            Some(&[0, 0, 0, 0, 0xDE, 0xAD, 0xBE, 0xEF][..])
        );

        let repr = sample(Opcode::RcWriteOnlyImm);
        out.clear();
        assert_eq!(emit_headers(&repr, 4, &mut out), Ok(()));
        assert_eq!(out.get(24..28), Some(&[0, 0, 0x10, 0][..]));
        assert_eq!(out.get(28..32), Some(&[1, 2, 3, 4][..]));
    }

    #[test]
    fn wrong_header_sets_are_refused() {
        for info in &TABLE {
            let good = sample(info.opcode);
            let mut variants = Vec::new();
            let mut r = good;
            r.deth = if r.deth.is_some() {
                None
            } else {
                Some(Deth { qkey: 0, src_qp: 0 })
            };
            variants.push(r);
            let mut r = good;
            r.reth = if r.reth.is_some() {
                None
            } else {
                Some(Reth {
                    va: 0,
                    rkey: 0,
                    dma_len: 0,
                })
            };
            variants.push(r);
            let mut r = good;
            r.aeth = if r.aeth.is_some() {
                None
            } else {
                Some(Aeth {
                    syndrome: AckSyndrome::Ack { credits: 0 },
                    msn: 0,
                })
            };
            variants.push(r);
            let mut r = good;
            r.immdt = if r.immdt.is_some() { None } else { Some(0) };
            variants.push(r);
            let mut r = good;
            r.ieth = if r.ieth.is_some() { None } else { Some(0) };
            variants.push(r);
            let mut r = good;
            r.atomic_eth = if r.atomic_eth.is_some() {
                None
            } else {
                Some(AtomicEth {
                    va: 0,
                    rkey: 0,
                    swap_add: 0,
                    compare: 0,
                })
            };
            variants.push(r);
            let mut r = good;
            r.atomic_ack_eth = if r.atomic_ack_eth.is_some() {
                None
            } else {
                Some(AtomicAckEth { orig: 0 })
            };
            variants.push(r);
            for bad in variants {
                let mut out = vec![0xAA];
                assert_eq!(
                    emit_headers(&bad, 0, &mut out),
                    Err(WireError::HeaderMismatch),
                    "{}",
                    info.name
                );
                assert_eq!(out, [0xAA]);
            }
        }
    }

    #[test]
    fn payload_on_opcode_without_payload_is_refused() {
        for info in TABLE.iter().filter(|i| !i.has_payload) {
            let mut out = Vec::new();
            assert_eq!(
                emit_headers(&sample(info.opcode), 1, &mut out),
                Err(WireError::HeaderMismatch)
            );
            assert!(out.is_empty());
        }
    }

    #[test]
    fn pad_follows_payload_length() {
        for len in 0..12usize {
            let payload = vec![0x77u8; len];
            let repr = sample(Opcode::RcSendOnly);
            let Ok(wire) = build(&repr, &payload, &ctx()) else {
                panic!("build failed")
            };
            let pad = (4 - len % 4) % 4;
            assert_eq!(pad_len(len), pad);
            assert_eq!(wire.len() % 4, 0);
            assert_eq!(wire.get(1).map(|b| (b >> 4) & 3), Some(pad as u8));
            let pad_bytes = wire.get(BTH_LEN + len..BTH_LEN + len + pad);
            assert_eq!(pad_bytes, Some(&vec![0u8; pad][..]));
            let parsed = parse(&wire, &ctx()).map(|p| p.payload.len());
            assert_eq!(parsed, Ok(len));
        }
    }

    #[test]
    fn emit_headers_appends_and_ignores_given_pad_count() {
        let mut repr = sample(Opcode::RcSendFirst);
        repr.bth.pad_count = 3;
        let mut out = Vec::new();
        assert_eq!(emit_headers(&repr, 8, &mut out), Ok(()));
        assert_eq!(out.get(1), Some(&0x00));
        out.extend_from_slice(&[1; 8]);
        assert_eq!(seal(&mut out, &ctx()), Ok(()));
        assert_eq!(out.len(), BTH_LEN + 8 + ICRC_LEN);
    }

    #[test]
    fn seal_checks_payload_against_pad_count() {
        let repr = sample(Opcode::RcSendOnly);
        let mut out = Vec::new();
        assert_eq!(emit_headers(&repr, 5, &mut out), Ok(()));
        out.extend_from_slice(&[9; 4]);
        let before = out.clone();
        assert_eq!(seal(&mut out, &ctx()), Err(WireError::BadPad));
        assert_eq!(out, before);
        let mut empty = Vec::new();
        assert_eq!(seal(&mut empty, &ctx()), Err(WireError::Truncated(0)));
        let mixed = IcrcContext::new(ctx().src, "[::1]:4791".parse().unwrap_or(ctx().dst));
        out.push(9);
        assert_eq!(seal(&mut out, &mixed), Err(WireError::AddressFamily));
        assert_eq!(out.len(), before.len() + 1);
    }

    #[test]
    fn parse_rejects_bad_structure() {
        let c = ctx();
        let reseal = |mut body: Vec<u8>| {
            if let Ok(icrc) = compute_icrc(&body, &c) {
                body.extend_from_slice(&icrc.to_le_bytes());
            }
            body
        };
        let Ok(ack) = build(&sample(Opcode::RcAck), &[], &c) else {
            panic!("build failed")
        };
        let body = ack.get(..ack.len() - ICRC_LEN).unwrap_or_default().to_vec();

        // Version.
        let mut v = body.clone();
        v[1] |= 0x01;
        assert_eq!(parse(&reseal(v), &c), Err(WireError::BadVersion(1)));
        // Unknown opcode.
        for op in [0x15u8, 0x18, 0x1F, 0x40, 0x81, 0xFF] {
            let mut v = body.clone();
            v[0] = op;
            assert_eq!(parse(&reseal(v), &c), Err(WireError::UnknownOpcode(op)));
        }
        // Payload after an ACK.
        let mut v = body.clone();
        v.extend_from_slice(&[0; 4]);
        assert_eq!(parse(&reseal(v), &c), Err(WireError::HeaderMismatch));
        // Pad count without room for the pad.
        let mut v = body.clone();
        v[1] |= 0x20;
        assert_eq!(parse(&reseal(v), &c), Err(WireError::BadPad));
        // Reserved syndrome.
        let mut v = body.clone();
        v[BTH_LEN] = 0x40;
        assert_eq!(parse(&reseal(v), &c), Err(WireError::BadSyndrome(0x40)));
        // Every shorter datagram.
        for len in 0..ack.len() {
            let short = ack.get(..len).unwrap_or_default();
            assert_eq!(parse_unchecked(short), Err(WireError::Truncated(len)));
            assert!(parse(short, &c).is_err());
        }
        // Wrong addresses.
        assert_eq!(parse(&ack, &c.reversed()), Err(WireError::BadIcrc));
        assert_eq!(
            parse(&ack, &c),
            Ok(Packet {
                repr: sample(Opcode::RcAck),
                payload: &[]
            })
        );
    }

    #[test]
    fn parse_rejects_misaligned_payload() {
        let c = ctx();
        let Ok(wire) = build(&sample(Opcode::RcSendOnly), &[1, 2, 3, 4], &c) else {
            panic!("build failed")
        };
        let mut body = wire
            .get(..wire.len() - ICRC_LEN)
            .unwrap_or_default()
            .to_vec();
        body.push(5);
        let Ok(icrc) = compute_icrc(&body, &c) else {
            panic!("icrc failed")
        };
        body.extend_from_slice(&icrc.to_le_bytes());
        assert_eq!(parse(&body, &c), Err(WireError::BadPad));
    }

    #[test]
    fn nak_and_rnr_survive_the_trip() {
        let c = ctx();
        for syndrome in [
            AckSyndrome::Nak(NakCode::RemoteAccessError),
            AckSyndrome::RnrNak { timer: 18 },
        ] {
            let mut repr = sample(Opcode::RcAck);
            repr.aeth = Some(Aeth {
                syndrome,
                msn: 0x00FF_FFFF,
            });
            let parsed = build(&repr, &[], &c).and_then(|w| parse(&w, &c).map(|p| p.repr));
            assert_eq!(parsed, Ok(repr));
        }
    }
}

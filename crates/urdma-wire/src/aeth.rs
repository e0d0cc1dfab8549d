//! ACK Extended Transport Header (IBTA Vol 1, 9.3.5).
//!
//! ```text
//!  byte 0     syndrome
//!  byte 1-3   MSN (24 bits)
//! ```
//!
//! Syndrome bit 7 is always 0. Bits 6-5 select the kind and bits 4-0 carry
//! its value: `00` ACK (credit count), `01` RNR NAK (RNR timer code),
//! `11` NAK (NAK code), `10` reserved.

use crate::field::{need, room, Reader, Writer};
use crate::{WireError, AETH_LEN};

/// Width mask of the credit count, RNR timer and NAK code fields.
const VALUE_MASK: u8 = 0x1F;
const KIND_ACK: u8 = 0x00;
const KIND_RNR_NAK: u8 = 0x20;
const KIND_NAK: u8 = 0x60;
const KIND_MASK: u8 = 0x60;
const RESERVED_BIT: u8 = 0x80;
const MSN_MASK: u32 = 0x00FF_FFFF;

/// Credit count code meaning "no credit information": the requester may
/// send without end-to-end flow control.
pub const UNLIMITED_CREDITS: u8 = 31;

/// Why a request was negatively acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NakCode {
    /// The PSN was out of sequence (a packet was lost).
    PsnSequenceError = 0,
    /// The request was malformed or not supported.
    InvalidRequest = 1,
    /// The R_Key, address or access rights did not allow the access.
    RemoteAccessError = 2,
    /// The responder could not complete the request.
    RemoteOperationalError = 3,
    /// Invalid RD request (RD only; urdma never sends it).
    InvalidRdRequest = 4,
}

impl NakCode {
    /// The NAK code with value `v` (0..=4), or `None` for reserved values.
    pub fn from_u8(v: u8) -> Option<NakCode> {
        match v {
            0 => Some(NakCode::PsnSequenceError),
            1 => Some(NakCode::InvalidRequest),
            2 => Some(NakCode::RemoteAccessError),
            3 => Some(NakCode::RemoteOperationalError),
            4 => Some(NakCode::InvalidRdRequest),
            _ => None,
        }
    }
}

/// The decoded AETH syndrome byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckSyndrome {
    /// Positive acknowledgement with a credit count code (0..=31; 31 is
    /// [`UNLIMITED_CREDITS`]).
    Ack {
        /// Credit count code; only the low 5 bits are emitted.
        credits: u8,
    },
    /// Receiver not ready: retry after the time given by the RNR timer code
    /// (see [`rnr_timer_micros`]).
    RnrNak {
        /// RNR timer code; only the low 5 bits are emitted.
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
}

impl AckSyndrome {
    /// The syndrome byte. Credit counts and timer codes are masked to
    /// 5 bits.
    pub fn to_u8(self) -> u8 {
        match self {
            AckSyndrome::Ack { credits } => KIND_ACK | (credits & VALUE_MASK),
            AckSyndrome::RnrNak { timer } => KIND_RNR_NAK | (timer & VALUE_MASK),
            AckSyndrome::Nak(code) => KIND_NAK | code as u8,
        }
    }

    /// Decodes a syndrome byte; fails with [`WireError::BadSyndrome`] if
    /// bit 7 is set, on the reserved kind `10` and on reserved NAK codes.
    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        if v & RESERVED_BIT != 0 {
            return Err(WireError::BadSyndrome(v));
        }
        let value = v & VALUE_MASK;
        match v & KIND_MASK {
            KIND_ACK => Ok(AckSyndrome::Ack { credits: value }),
            KIND_RNR_NAK => Ok(AckSyndrome::RnrNak { timer: value }),
            KIND_NAK => NakCode::from_u8(value)
                .map(AckSyndrome::Nak)
                .ok_or(WireError::BadSyndrome(v)),
            // The reserved kind `10`.
            _ => Err(WireError::BadSyndrome(v)),
        }
    }

    /// Whether this is a positive acknowledgement.
    pub fn is_ack(self) -> bool {
        matches!(self, AckSyndrome::Ack { .. })
    }
}

/// The AETH of acknowledgements and of read responses that carry one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aeth {
    /// What is being acknowledged and how.
    pub syndrome: AckSyndrome,
    /// Message sequence number (24 bits; higher bits are not emitted).
    pub msn: u32,
}

impl Aeth {
    /// Parses the first [`AETH_LEN`] bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Aeth, WireError> {
        need(buf, AETH_LEN)?;
        let mut r = Reader::new(buf);
        let syndrome = AckSyndrome::from_u8(r.u8()?)?;
        let msn = r.u24()?;
        Ok(Aeth { syndrome, msn })
    }

    /// Writes this header into the first [`AETH_LEN`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        room(buf, AETH_LEN)?;
        let mut w = Writer::new(buf);
        w.u8(self.syndrome.to_u8())?;
        w.u24(self.msn & MSN_MASK)
    }
}

/// Duration in microseconds of each RNR timer code (IBTA Vol 1,
/// table 45 "Encoding for RNR NAK Timer Field").
const RNR_TIMER_MICROS: [u64; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// RNR timer code (0..=31) to its duration in microseconds per IBTA table
/// (0 => 655360 us, 1 => 10, 2 => 20, 3 => 30, 4 => 40, 5 => 60, 6 => 80,
/// 7 => 120, 8 => 160, 9 => 240, 10 => 320, 11 => 480, 12 => 640,
/// 13 => 960, 14 => 1280, 15 => 1920, 16 => 2560, 17 => 3840, 18 => 5120,
/// 19 => 7680, 20 => 10240, 21 => 15360, 22 => 20480, 23 => 30720,
/// 24 => 40960, 25 => 61440, 26 => 81920, 27 => 122880, 28 => 163840,
/// 29 => 245760, 30 => 327680, 31 => 491520).
///
/// Only the low 5 bits of `code` are used.
pub fn rnr_timer_micros(code: u8) -> u64 {
    let mut micros = 0;
    if let Some(&m) = RNR_TIMER_MICROS.get(usize::from(code & VALUE_MASK)) {
        micros = m;
    }
    micros
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndrome_encodings() {
        assert_eq!(AckSyndrome::Ack { credits: 0 }.to_u8(), 0x00);
        assert_eq!(
            AckSyndrome::Ack {
                credits: UNLIMITED_CREDITS
            }
            .to_u8(),
            0x1F
        );
        assert_eq!(AckSyndrome::RnrNak { timer: 0 }.to_u8(), 0x20);
        assert_eq!(AckSyndrome::RnrNak { timer: 14 }.to_u8(), 0x2E);
        assert_eq!(AckSyndrome::Nak(NakCode::PsnSequenceError).to_u8(), 0x60);
        assert_eq!(AckSyndrome::Nak(NakCode::InvalidRequest).to_u8(), 0x61);
        assert_eq!(AckSyndrome::Nak(NakCode::RemoteAccessError).to_u8(), 0x62);
        assert_eq!(
            AckSyndrome::Nak(NakCode::RemoteOperationalError).to_u8(),
            0x63
        );
        assert_eq!(AckSyndrome::Nak(NakCode::InvalidRdRequest).to_u8(), 0x64);
        assert_eq!(AckSyndrome::Ack { credits: 0xFF }.to_u8(), 0x1F);
        assert_eq!(AckSyndrome::RnrNak { timer: 0xE1 }.to_u8(), 0x21);
    }

    #[test]
    fn every_syndrome_byte_decodes_or_is_rejected() {
        for v in 0..=255u8 {
            let decoded = AckSyndrome::from_u8(v);
            let valid = v < 0x40 || (0x60..=0x64).contains(&v);
            match decoded {
                Ok(s) => {
                    assert!(valid, "{v:#04x} accepted");
                    assert_eq!(s.to_u8(), v);
                }
                Err(e) => {
                    assert!(!valid, "{v:#04x} rejected");
                    assert_eq!(e, WireError::BadSyndrome(v));
                }
            }
        }
        assert!(AckSyndrome::from_u8(0x05).is_ok_and(AckSyndrome::is_ack));
        assert!(AckSyndrome::from_u8(0x25).is_ok_and(|s| !s.is_ack()));
    }

    #[test]
    fn aeth_round_trip_and_layout() {
        let aeth = Aeth {
            syndrome: AckSyndrome::RnrNak { timer: 0x12 },
            msn: 0x00AB_CDEF,
        };
        let mut buf = [0u8; AETH_LEN];
        assert_eq!(aeth.emit(&mut buf), Ok(()));
        assert_eq!(buf, [0x32, 0xAB, 0xCD, 0xEF]);
        assert_eq!(Aeth::parse(&buf), Ok(aeth));

        let wide = Aeth {
            syndrome: AckSyndrome::Ack { credits: 31 },
            msn: 0x7F00_0001,
        };
        assert_eq!(wide.emit(&mut buf), Ok(()));
        assert_eq!(buf, [0x1F, 0, 0, 1]);
    }

    #[test]
    fn aeth_rejects_reserved_syndromes_and_short_input() {
        assert_eq!(
            Aeth::parse(&[0x40, 0, 0, 0]),
            Err(WireError::BadSyndrome(0x40))
        );
        assert_eq!(
            Aeth::parse(&[0x80, 0, 0, 0]),
            Err(WireError::BadSyndrome(0x80))
        );
        assert_eq!(
            Aeth::parse(&[0x65, 0, 0, 0]),
            Err(WireError::BadSyndrome(0x65))
        );
        for len in 0..AETH_LEN {
            let buf = [0u8; AETH_LEN];
            assert_eq!(
                Aeth::parse(buf.get(..len).unwrap_or_default()),
                Err(WireError::Truncated(len))
            );
        }
        let aeth = Aeth {
            syndrome: AckSyndrome::Ack { credits: 0 },
            msn: 0,
        };
        assert_eq!(aeth.emit(&mut [0u8; 3]), Err(WireError::BufferTooSmall));
    }

    #[test]
    fn rnr_timer_table() {
        assert_eq!(rnr_timer_micros(0), 655_360);
        assert_eq!(rnr_timer_micros(1), 10);
        assert_eq!(rnr_timer_micros(5), 60);
        assert_eq!(rnr_timer_micros(12), 640);
        assert_eq!(rnr_timer_micros(18), 5_120);
        assert_eq!(rnr_timer_micros(31), 491_520);
        assert_eq!(rnr_timer_micros(32), rnr_timer_micros(0));
        // From code 1 on, the durations grow strictly.
        for code in 2..32u8 {
            assert!(rnr_timer_micros(code) > rnr_timer_micros(code - 1));
        }
    }
}

//! Congestion Notification Packets (RoCEv2, IBTA Vol 1 Annex A17.9).
//!
//! A receiver that gets a packet whose IP header carries the ECN
//! "congestion experienced" mark tells the sender with a CNP: a BTH with
//! opcode `0x81`, the BECN bit set, the destination QP of the flow that was
//! marked (the sender's QP), PSN 0, then 16 reserved bytes and the ICRC.
//! The sender lowers that QP's sending rate.

use crate::icrc::{compute_icrc, IcrcContext};
use crate::{WireError, BTH_LEN, ICRC_LEN};

/// The CNP opcode byte (transport prefix `0x80`, operation 1).
pub const CNP_OPCODE: u8 = 0x81;
/// Reserved bytes after the BTH.
const RESERVED_LEN: usize = 16;
/// Length of a CNP datagram (UDP payload).
pub const CNP_LEN: usize = BTH_LEN + RESERVED_LEN + ICRC_LEN;
/// The BECN bit in BTH byte 4.
const BECN: u8 = 0x40;

/// A CNP for QP `dest_qp` with partition key `pkey`, with the ICRC a
/// sender at `ctx.src` sending to `ctx.dst` computes.
pub fn build_cnp(dest_qp: u32, pkey: u16, ctx: &IcrcContext) -> Result<Vec<u8>, WireError> {
    let mut d = vec![0u8; CNP_LEN - ICRC_LEN];
    d[0] = CNP_OPCODE;
    d[2..4].copy_from_slice(&pkey.to_be_bytes());
    d[4] = BECN;
    d[5..8].copy_from_slice(&dest_qp.to_be_bytes()[1..]);
    let icrc = compute_icrc(&d, ctx)?;
    d.extend_from_slice(&icrc.to_le_bytes());
    Ok(d)
}

/// Whether `datagram` is a CNP (by its opcode byte).
pub fn is_cnp(datagram: &[u8]) -> bool {
    datagram.first() == Some(&CNP_OPCODE)
}

/// The destination QP of a CNP, or an error if `datagram` is not one of
/// the right length. The ICRC is not checked here.
pub fn parse_cnp(datagram: &[u8]) -> Result<u32, WireError> {
    if datagram.len() < CNP_LEN {
        return Err(WireError::Truncated(datagram.len()));
    }
    if !is_cnp(datagram) {
        return Err(WireError::UnknownOpcode(datagram[0]));
    }
    Ok(u32::from_be_bytes([
        0,
        datagram[5],
        datagram[6],
        datagram[7],
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::icrc::check_icrc;

    fn ctx() -> IcrcContext {
        IcrcContext::new(
            "169.254.1.2:4791".parse().unwrap(),
            "169.254.1.1:4791".parse().unwrap(),
        )
    }

    #[test]
    fn a_cnp_round_trips() {
        let d = build_cnp(0x12_3456, 0xffff, &ctx()).unwrap();
        assert_eq!(d.len(), CNP_LEN);
        assert_eq!(d[0], 0x81);
        assert_eq!(d[4], 0x40, "BECN set");
        assert_eq!(&d[8..BTH_LEN], &[0, 0, 0, 0], "PSN 0, no ACK request");
        assert!(d[BTH_LEN..BTH_LEN + RESERVED_LEN].iter().all(|&b| b == 0));
        assert_eq!(check_icrc(&d, &ctx()), Ok(()));
        assert!(is_cnp(&d));
        assert_eq!(parse_cnp(&d), Ok(0x12_3456));
    }

    #[test]
    fn other_datagrams_are_not_cnps() {
        assert!(parse_cnp(&[0x81; 8]).is_err());
        let mut d = build_cnp(5, 0xffff, &ctx()).unwrap();
        d[0] = 0x04;
        assert!(!is_cnp(&d));
        assert_eq!(parse_cnp(&d), Err(WireError::UnknownOpcode(0x04)));
        assert!(!is_cnp(&[]));
    }
}

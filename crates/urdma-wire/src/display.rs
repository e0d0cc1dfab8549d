//! One-line text forms of packets and headers, like the info column of a
//! packet analyser.
//!
//! A [`Packet`] prints as its opcode name, destination QP, PSN, the BTH
//! flags that are set, the extended headers in wire order and the payload
//! length:
//!
//! ```text
//! RC RDMA_WRITE_ONLY qp=0x12 psn=100 AckReq RETH(va=0x1000 rkey=0x7 len=5) len=5
//! RC ACKNOWLEDGE qp=0x34 psn=7 AETH(NAK remote access error msn=3) len=0
//! ```

use core::fmt;

use crate::{
    AckSyndrome, Aeth, AtomicAckEth, AtomicEth, Bth, Deth, NakCode, Packet, PacketRepr, Reth,
    DEFAULT_PKEY,
};

impl fmt::Display for NakCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NakCode::PsnSequenceError => "PSN sequence error",
            NakCode::InvalidRequest => "invalid request",
            NakCode::RemoteAccessError => "remote access error",
            NakCode::RemoteOperationalError => "remote operational error",
            NakCode::InvalidRdRequest => "invalid RD request",
        })
    }
}

impl fmt::Display for AckSyndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AckSyndrome::Ack { credits } => write!(f, "ACK credits={credits}"),
            AckSyndrome::RnrNak { timer } => write!(f, "RNR NAK timer={timer}"),
            AckSyndrome::Nak(code) => write!(f, "NAK {code}"),
        }
    }
}

impl fmt::Display for Aeth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AETH({} msn={})", self.syndrome, self.msn)
    }
}

impl fmt::Display for Reth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RETH(va={:#x} rkey={:#x} len={})",
            self.va, self.rkey, self.dma_len
        )
    }
}

impl fmt::Display for AtomicEth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "AtomicETH(va={:#x} rkey={:#x} swap_add={:#x} compare={:#x})",
            self.va, self.rkey, self.swap_add, self.compare
        )
    }
}

impl fmt::Display for AtomicAckEth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AtomicAckETH(orig={:#x})", self.orig)
    }
}

impl fmt::Display for Deth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DETH(qkey={:#x} src_qp={:#x})", self.qkey, self.src_qp)
    }
}

impl fmt::Display for Bth {
    /// Opcode, destination QP, PSN, then whatever is not the default: the
    /// flags that are set, a partition key other than
    /// [`DEFAULT_PKEY`], a non-zero version. The pad count is left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} qp={:#x} psn={}", self.opcode, self.dest_qp, self.psn)?;
        let flags = [
            (self.ack_req, "AckReq"),
            (self.solicited, "SE"),
            (self.migreq, "MigReq"),
            (self.fecn, "FECN"),
            (self.becn, "BECN"),
            (self.selective, "Selective"),
        ];
        for (_, name) in flags.iter().filter(|(set, _)| *set) {
            write!(f, " {name}")?;
        }
        if self.pkey != DEFAULT_PKEY {
            write!(f, " pkey={:#06x}", self.pkey)?;
        }
        if self.tver != 0 {
            write!(f, " tver={}", self.tver)?;
        }
        Ok(())
    }
}

impl fmt::Display for PacketRepr {
    /// The BTH, then each extended header present, in wire order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bth)?;
        if let Some(h) = &self.deth {
            write!(f, " {h}")?;
        }
        if let Some(h) = &self.reth {
            write!(f, " {h}")?;
        }
        if let Some(h) = &self.atomic_eth {
            write!(f, " {h}")?;
        }
        if let Some(h) = &self.aeth {
            write!(f, " {h}")?;
        }
        if let Some(h) = &self.atomic_ack_eth {
            write!(f, " {h}")?;
        }
        if let Some(imm) = self.immdt {
            write!(f, " ImmDt={imm:#010x}")?;
        }
        if let Some(rkey) = self.ieth {
            write!(f, " IETH(rkey={rkey:#x})")?;
        }
        Ok(())
    }
}

impl fmt::Display for Packet<'_> {
    /// The headers, then the payload length (pad excluded).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} len={}", self.repr, self.payload.len())
    }
}

#[cfg(test)]
mod tests {
    use crate::{
        AckSyndrome, Aeth, AtomicAckEth, AtomicEth, Bth, Deth, NakCode, Opcode, Packet, PacketRepr,
        Reth,
    };

    fn packet(repr: PacketRepr, payload: &[u8]) -> String {
        Packet { repr, payload }.to_string()
    }

    #[test]
    fn write_with_flags_and_reth() {
        let mut bth = Bth::new(Opcode::RcWriteOnly, 0x12, 100);
        bth.ack_req = true;
        bth.solicited = true;
        let mut repr = PacketRepr::new(bth);
        repr.reth = Some(Reth {
            va: 0x1000,
            rkey: 7,
            dma_len: 5,
        });
        assert_eq!(
            packet(repr, b"hello"),
            "RC RDMA_WRITE_ONLY qp=0x12 psn=100 AckReq SE RETH(va=0x1000 rkey=0x7 len=5) len=5"
        );
    }

    #[test]
    fn acknowledgements() {
        let mut repr = PacketRepr::new(Bth::new(Opcode::RcAck, 0x34, 7));
        let mut show = |syndrome| {
            repr.aeth = Some(Aeth { syndrome, msn: 3 });
            packet(repr, &[])
        };
        assert_eq!(
            show(AckSyndrome::Nak(NakCode::RemoteAccessError)),
            "RC ACKNOWLEDGE qp=0x34 psn=7 AETH(NAK remote access error msn=3) len=0"
        );
        assert_eq!(
            show(AckSyndrome::Ack { credits: 31 }),
            "RC ACKNOWLEDGE qp=0x34 psn=7 AETH(ACK credits=31 msn=3) len=0"
        );
        assert_eq!(
            show(AckSyndrome::RnrNak { timer: 18 }),
            "RC ACKNOWLEDGE qp=0x34 psn=7 AETH(RNR NAK timer=18 msn=3) len=0"
        );
        let mut atomic_ack = PacketRepr::new(Bth::new(Opcode::RcAtomicAck, 1, 2));
        atomic_ack.aeth = Some(Aeth {
            syndrome: AckSyndrome::Ack { credits: 0 },
            msn: 9,
        });
        atomic_ack.atomic_ack_eth = Some(AtomicAckEth { orig: 0xBEEF });
        assert_eq!(
            atomic_ack.to_string(),
            "RC ATOMIC_ACKNOWLEDGE qp=0x1 psn=2 AETH(ACK credits=0 msn=9) AtomicAckETH(orig=0xbeef)"
        );
    }

    #[test]
    fn atomics_immediates_and_invalidates() {
        let mut cs = PacketRepr::new(Bth::new(Opcode::RcCompareSwap, 5, 6));
        cs.atomic_eth = Some(AtomicEth {
            va: 0x2000,
            rkey: 0x99,
            swap_add: 1,
            compare: 0x10,
        });
        assert_eq!(
            packet(cs, &[]),
            "RC COMPARE_SWAP qp=0x5 psn=6 AtomicETH(va=0x2000 rkey=0x99 swap_add=0x1 compare=0x10) len=0"
        );
        let mut imm = PacketRepr::new(Bth::new(Opcode::UcSendLastImm, 5, 6));
        imm.immdt = Some(0xA1B2);
        assert_eq!(
            packet(imm, &[0; 3]),
            "UC SEND_LAST_WITH_IMMEDIATE qp=0x5 psn=6 ImmDt=0x0000a1b2 len=3"
        );
        let mut inv = PacketRepr::new(Bth::new(Opcode::RcSendOnlyInv, 5, 6));
        inv.ieth = Some(0x77);
        assert_eq!(
            packet(inv, &[0; 8]),
            "RC SEND_ONLY_WITH_INVALIDATE qp=0x5 psn=6 IETH(rkey=0x77) len=8"
        );
    }

    #[test]
    fn ud_send_and_unusual_bth_fields() {
        let mut bth = Bth::new(Opcode::UdSendOnlyImm, 0xABCDEF, 0xFFFFFF);
        bth.migreq = true;
        bth.fecn = true;
        bth.becn = true;
        bth.pkey = 0x8001;
        bth.tver = 2;
        bth.pad_count = 3;
        let mut repr = PacketRepr::new(bth);
        repr.deth = Some(Deth {
            qkey: 0x1111_2222,
            src_qp: 0x33,
        });
        repr.immdt = Some(1);
        assert_eq!(
            packet(repr, &[1]),
            "UD SEND_ONLY_WITH_IMMEDIATE qp=0xabcdef psn=16777215 MigReq FECN BECN \
             pkey=0x8001 tver=2 DETH(qkey=0x11112222 src_qp=0x33) ImmDt=0x00000001 len=1"
        );
    }
}

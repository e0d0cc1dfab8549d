//! Linux Soft-RoCE (rdma_rxe) on the wire, against this crate.
//!
//! `tests/data/rxe-golden.pcap` holds the RoCEv2 packets rxe (169.254.70.1)
//! and urdma (169.254.70.2) exchanged across a veth pair while
//! `tests/verbs/remote` ran its `golden` and `access` cases with each end
//! as requester in turn (see `tests/data/README.md` for how it was made):
//! SEND and RDMA WRITE with and without immediate, single- and
//! multi-packet, RDMA READ, CMP_AND_SWP and FETCH_ADD, ACKs, RNR NAKs, a
//! packet dropped on the way in for a sequence NAK, remote access NAKs and
//! UD SENDs. Both ends ran the same program, so each packet one sends has
//! its counterpart from the other, in the same role.
//!
//! Checked here: every packet's ICRC over the IPv4 header it really came
//! with; that this crate parses every packet and emits rxe's packets byte
//! for byte from what it parsed; the fields the specification fixes; and
//! that urdma's packets equal rxe's for the same operation except where
//! the specification leaves the choice to the sender.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use pcap_file::pcap::PcapReader;
use pcap_file::DataLink;
use urdma_wire::packet::pad_len;
use urdma_wire::{
    build, check_icrc_any_ident, compute_icrc, compute_icrc_with, parse, parse_received,
    AckSyndrome, IcrcContext, Ipv4Ident, NakCode, OpKind, Opcode, Packet, PacketRepr, Transport,
    WireError, DEFAULT_PKEY, ICRC_LEN, ROCEV2_UDP_PORT,
};

const PCAP: &[u8] = include_bytes!("data/rxe-golden.pcap");

/// rxe's address (the root namespace end of the veth pair).
const RXE: Ipv4Addr = Ipv4Addr::new(169, 254, 70, 1);
/// urdma's address (`urdma run --addr`, in its own namespace).
const URDMA: Ipv4Addr = Ipv4Addr::new(169, 254, 70, 2);

/// The Q_Key of the program's UD QPs.
const UD_QKEY: u32 = 0x1111_1111;
/// The RNR timer code the program gives its responders (20.48 ms).
const MIN_RNR_TIMER: u8 = 22;

const ETH_HEADER_LEN: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const IPV4_DF: u16 = 0x4000;
const IPV4_MF_AND_OFFSET: u16 = 0x3FFF;
const UDP_HEADER_LEN: usize = 8;

/// One captured RoCEv2 packet: its addresses, the IPv4 fields the ICRC
/// covers and the UDP payload (BTH to ICRC).
struct Captured {
    frame: usize,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    ident: Ipv4Ident,
    datagram: Vec<u8>,
}

impl Captured {
    fn ctx(&self) -> IcrcContext {
        IcrcContext::new(SocketAddr::V4(self.src), SocketAddr::V4(self.dst))
    }

    fn sent_by_rxe(&self) -> bool {
        *self.src.ip() == RXE
    }

    fn sender(&self) -> &'static str {
        if self.sent_by_rxe() {
            "rxe"
        } else {
            "urdma"
        }
    }

    /// The packet's headers and payload. The ICRC is checked for the
    /// identification and DF its IP header carried, in
    /// [`every_icrc_covers_the_real_ipv4_header`].
    fn packet(&self) -> Packet<'_> {
        parse_received(&self.datagram, &self.ctx())
            .unwrap_or_else(|e| panic!("frame {}: {e:?}", self.frame))
    }

    fn body(&self) -> &[u8] {
        &self.datagram[..self.datagram.len() - ICRC_LEN]
    }

    fn icrc(&self) -> u32 {
        let tail = &self.datagram[self.datagram.len() - ICRC_LEN..];
        u32::from_le_bytes(tail.try_into().unwrap())
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn ipv4(b: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3])
}

/// Every packet of the capture, each checked to be Ethernet, IPv4 without
/// fragmentation, UDP to the RoCEv2 port, captured whole.
fn capture() -> Vec<Captured> {
    let mut reader = PcapReader::new(PCAP).expect("a classic pcap file");
    assert_eq!(reader.header().datalink, DataLink::ETHERNET);
    let mut out = Vec::new();
    while let Some(pkt) = reader.next_packet() {
        let pkt = pkt.expect("a whole pcap record");
        let frame = out.len() + 1;
        let d = &pkt.data[..];
        assert_eq!(pkt.orig_len as usize, d.len(), "frame {frame} truncated");
        assert_eq!(be16(d, 12), ETHERTYPE_IPV4, "frame {frame}");
        let ip = &d[ETH_HEADER_LEN..];
        assert_eq!(ip[0], 0x45, "frame {frame}: IPv4 without options");
        let total = usize::from(be16(ip, 2));
        let flags = be16(ip, 6);
        assert_eq!(flags & IPV4_MF_AND_OFFSET, 0, "frame {frame}: fragment");
        assert_eq!(ip[9], 17, "frame {frame}: UDP");
        let udp = &ip[20..total];
        let udp_len = usize::from(be16(udp, 4));
        assert_eq!(udp_len, udp.len(), "frame {frame}: UDP length");
        assert_eq!(be16(udp, 2), ROCEV2_UDP_PORT, "frame {frame}");
        out.push(Captured {
            frame,
            src: SocketAddrV4::new(ipv4(ip, 12), be16(udp, 0)),
            dst: SocketAddrV4::new(ipv4(ip, 16), be16(udp, 2)),
            ident: Ipv4Ident {
                identification: be16(ip, 4),
                dont_fragment: flags & IPV4_DF != 0,
            },
            datagram: udp[UDP_HEADER_LEN..].to_vec(),
        });
    }
    for c in &out {
        let ends = [*c.src.ip(), *c.dst.ip()];
        assert!(
            ends == [RXE, URDMA] || ends == [URDMA, RXE],
            "frame {}: {ends:?}",
            c.frame
        );
    }
    out
}

#[test]
fn the_capture_is_small_and_has_both_senders() {
    let all = capture();
    assert!(PCAP.len() < 200 * 1024);
    assert!((100..=500).contains(&all.len()), "{} packets", all.len());
    let sent_by_rxe = all.iter().filter(|c| c.sent_by_rxe()).count();
    assert!(sent_by_rxe > 40 && all.len() - sent_by_rxe > 40);
}

/// The ICRC of every packet is the one computed over the identification
/// and DF flag of the IPv4 header it came with; the recovering check finds
/// exactly those. urdma sends identification 0 with DF, which the full
/// 32-bit check of `parse` assumes; rxe counts identifications up, so
/// `parse` refuses its packets.
#[test]
fn every_icrc_covers_the_real_ipv4_header() {
    let mut rxe_idents = Vec::new();
    for c in capture() {
        let ctx = c.ctx();
        let f = c.frame;
        assert_eq!(
            compute_icrc_with(c.body(), &ctx, c.ident),
            Ok(c.icrc()),
            "frame {f} ({})",
            c.sender()
        );
        assert_eq!(check_icrc_any_ident(&c.datagram, &ctx), Ok(Some(c.ident)));
        assert!(parse_received(&c.datagram, &ctx).is_ok(), "frame {f}");
        if c.sent_by_rxe() {
            assert!(c.ident.dont_fragment, "frame {f}: rxe sets DF");
            rxe_idents.push(c.ident.identification);
            if c.ident != Ipv4Ident::SENT {
                assert_eq!(parse(&c.datagram, &ctx), Err(WireError::BadIcrc));
            }
        } else {
            assert_eq!(c.ident, Ipv4Ident::SENT, "frame {f}: urdma sends id 0, DF");
            assert_eq!(compute_icrc(c.body(), &ctx), Ok(c.icrc()));
            assert!(parse(&c.datagram, &ctx).is_ok(), "frame {f}");
        }
    }
    // rxe's identifications are not all the same, so the check above tells
    // something about the field.
    rxe_idents.sort_unstable();
    rxe_idents.dedup();
    assert!(rxe_idents.len() > 10);
}

/// What `build` makes of the headers and payload parsed from each packet
/// is the packet itself: every field in the same place with the same
/// encoding, the same pad, zero pad bytes, zero reserved bits (but for
/// urdma's selective mark). For rxe's
/// packets the ICRC is then computed over rxe's identification.
#[test]
fn this_crate_emits_every_captured_packet_byte_for_byte() {
    for c in capture() {
        let p = c.packet();
        let ctx = c.ctx();
        let built = build(&p.repr, p.payload, &ctx).expect("build");
        let body = &built[..built.len() - ICRC_LEN];
        assert_eq!(body, c.body(), "frame {} ({}): {p}", c.frame, c.sender());
        assert_eq!(compute_icrc_with(body, &ctx, c.ident), Ok(c.icrc()));
        if !c.sent_by_rxe() {
            assert_eq!(built, c.datagram, "frame {}", c.frame);
        }
    }
}

/// Tells whether a packet is of an operation.
type Matcher = Box<dyn Fn(&Packet<'_>) -> bool>;

/// The operations the capture must hold, each from both senders.
fn operations() -> Vec<(&'static str, Matcher)> {
    fn op(o: Opcode) -> Matcher {
        Box::new(move |p| p.repr.bth.opcode == o)
    }
    fn aeth(want: fn(AckSyndrome) -> bool) -> Matcher {
        Box::new(move |p| p.repr.bth.opcode == Opcode::RcAck && want(p.repr.aeth.unwrap().syndrome))
    }
    use Opcode::*;
    vec![
        ("SEND only", op(RcSendOnly)),
        ("SEND only with immediate", op(RcSendOnlyImm)),
        ("SEND first", op(RcSendFirst)),
        ("SEND middle", op(RcSendMiddle)),
        ("SEND last", op(RcSendLast)),
        ("SEND last with immediate", op(RcSendLastImm)),
        ("RDMA WRITE only", op(RcWriteOnly)),
        ("RDMA WRITE first", op(RcWriteFirst)),
        ("RDMA WRITE middle", op(RcWriteMiddle)),
        ("RDMA WRITE last", op(RcWriteLast)),
        ("RDMA WRITE only with immediate", op(RcWriteOnlyImm)),
        ("RDMA WRITE last with immediate", op(RcWriteLastImm)),
        ("RDMA READ request", op(RcReadRequest)),
        ("RDMA READ response only", op(RcReadResponseOnly)),
        ("RDMA READ response first", op(RcReadResponseFirst)),
        ("RDMA READ response middle", op(RcReadResponseMiddle)),
        ("RDMA READ response last", op(RcReadResponseLast)),
        ("CMP_AND_SWP", op(RcCompareSwap)),
        ("FETCH_ADD", op(RcFetchAdd)),
        ("atomic ACK", op(RcAtomicAck)),
        ("ACK", aeth(|s| s.is_ack())),
        (
            "sequence NAK",
            aeth(|s| s == AckSyndrome::Nak(NakCode::PsnSequenceError)),
        ),
        (
            "remote access NAK",
            aeth(|s| s == AckSyndrome::Nak(NakCode::RemoteAccessError)),
        ),
        ("RNR NAK", aeth(|s| matches!(s, AckSyndrome::RnrNak { .. }))),
        ("UD SEND only", op(UdSendOnly)),
        ("UD SEND only with immediate", op(UdSendOnlyImm)),
    ]
}

#[test]
fn every_operation_occurs_from_both_senders() {
    let all = capture();
    for (name, is) in operations() {
        for rxe in [true, false] {
            let n = all
                .iter()
                .filter(|c| c.sent_by_rxe() == rxe && is(&c.packet()))
                .count();
            let who = if rxe { "rxe" } else { "urdma" };
            assert!(n > 0, "no {name} from {who}");
        }
    }
}

/// The fields the specification fixes, in every packet of either sender:
/// BTH version 0, the default P_Key, no migration request or congestion
/// bits, the pad count that makes payload and pad a multiple of 4,
/// AckReq on the packet that ends an RC SEND or RDMA WRITE, the AETH
/// syndrome encodings (ACK with the "no credits" code, NAK codes, the RNR
/// NAK with the responder's timer), the Q_Key on UD.
#[test]
fn fixed_fields_are_as_the_specification_says() {
    for c in capture() {
        let p = c.packet();
        let f = c.frame;
        let bth = p.repr.bth;
        let info = bth.opcode.info();
        assert_eq!(bth.tver, 0, "frame {f}");
        assert_eq!(bth.pkey, DEFAULT_PKEY, "frame {f}");
        assert!(!bth.migreq && !bth.fecn && !bth.becn, "frame {f}");
        assert_eq!(usize::from(bth.pad_count), pad_len(p.payload.len()));
        // Reserved bits: byte 4 (besides FECN and BECN) and byte 8
        // (besides AckReq and urdma's selective mark, 0x40, which urdma's
        // RC requests carry).
        assert_eq!(c.datagram[4], 0, "frame {f}");
        assert_eq!(c.datagram[8] & 0x3F, 0, "frame {f}");
        if info.transport == Transport::Rc
            && matches!(info.kind, OpKind::Send | OpKind::Write)
            && info.position.ends_message()
        {
            assert!(bth.ack_req, "frame {f}: {p}");
        }
        if let Some(aeth) = p.repr.aeth {
            let syndrome = c.datagram[12];
            match aeth.syndrome {
                AckSyndrome::Ack { .. } => assert_eq!(syndrome, 0x1F, "frame {f}"),
                AckSyndrome::RnrNak { .. } => {
                    assert_eq!(syndrome, 0x20 | MIN_RNR_TIMER, "frame {f}")
                }
                AckSyndrome::Nak(NakCode::PsnSequenceError) => assert_eq!(syndrome, 0x60),
                AckSyndrome::Nak(NakCode::RemoteAccessError) => assert_eq!(syndrome, 0x62),
                other => panic!("frame {f}: unexpected {other}"),
            }
        }
        if info.transport == Transport::Ud {
            let deth = p.repr.deth.unwrap();
            assert_eq!(deth.qkey, UD_QKEY, "frame {f}");
            assert_eq!(c.datagram[12 + 4], 0, "frame {f}: DETH reserved byte");
            assert!(!bth.ack_req, "frame {f}");
        }
    }
}

/// Headers and payload of a packet, as [`normalized`] leaves them.
type Normalized = (PacketRepr, Vec<u8>);

/// The fields that differ between two correct senders of the same
/// operation: QP numbers, addresses and R_Keys, and the AckReq bit of
/// RDMA READ and atomic requests, which always get a response whatever
/// it says (rxe sets it, urdma does not). Zeroed for the comparison.
fn normalized(p: &Packet<'_>) -> Normalized {
    let mut r = p.repr;
    r.bth.dest_qp = 0;
    if let Some(reth) = r.reth.as_mut() {
        reth.va = 0;
        reth.rkey = 0;
    }
    if let Some(a) = r.atomic_eth.as_mut() {
        a.va = 0;
        a.rkey = 0;
    }
    if let Some(d) = r.deth.as_mut() {
        d.src_qp = 0;
    }
    if matches!(
        r.bth.opcode.info().kind,
        OpKind::ReadRequest | OpKind::CompareSwap | OpKind::FetchAdd
    ) {
        r.bth.ack_req = false;
    }
    (r, p.payload.to_vec())
}

/// Each end ran the same program as requester and as responder, with the
/// same PSNs, so a packet of one sender (a SEND, an ACK of PSN n, a READ
/// response...) has its counterpart from the other: same opcode and PSN.
/// Where both sent such packets, one of the other's must equal it in every
/// field but those [`normalized`] clears: MSN, syndrome, lengths, pad,
/// immediate data, Q_Key, atomic operands and results, payload.
#[test]
fn urdma_and_rxe_send_the_same_packets_for_the_same_operations() {
    let all = capture();
    // (sent by rxe, opcode, PSN) -> (frame, normalized packet)
    let mut by_key: BTreeMap<(bool, u8, u32), Vec<(usize, Normalized)>> = BTreeMap::new();
    for c in &all {
        let p = c.packet();
        let key = (c.sent_by_rxe(), p.repr.bth.opcode.as_u8(), p.repr.bth.psn);
        by_key
            .entry(key)
            .or_default()
            .push((c.frame, normalized(&p)));
    }
    let mut compared: BTreeMap<u8, usize> = BTreeMap::new();
    for ((rxe, opcode, psn), mine) in &by_key {
        let Some(theirs) = by_key.get(&(!rxe, *opcode, *psn)) else {
            continue;
        };
        for (frame, n) in mine {
            let matched = theirs.iter().any(|(_, t)| t == n);
            assert!(
                matched,
                "frame {frame} ({}) has no equal among frames {:?}: {:?}\n  others: {:?}",
                if *rxe { "rxe" } else { "urdma" },
                theirs.iter().map(|(f, _)| f).collect::<Vec<_>>(),
                n.0,
                theirs.iter().map(|(_, t)| t.0).collect::<Vec<_>>()
            );
            *compared.entry(*opcode).or_default() += 1;
        }
    }
    // Every operation took part in the comparison.
    for (name, is) in operations() {
        let op = all
            .iter()
            .map(|c| c.packet())
            .find(|p| is(p))
            .map(|p| p.repr.bth.opcode.as_u8());
        assert!(
            op.is_some_and(|o| compared.get(&o).copied().unwrap_or(0) >= 2),
            "{name} not compared"
        );
    }
}

/// Losses and retries as the capture shows them: the sequence NAK names
/// the first PSN missing, the requester sends that PSN again after it;
/// each RNR NAK is followed by the same request again.
#[test]
fn sequence_and_rnr_naks_are_answered_by_resending() {
    let all = capture();
    let mut seq_naks = 0;
    let mut rnr_naks = 0;
    for (i, c) in all.iter().enumerate() {
        let p = c.packet();
        let Some(aeth) = p.repr.aeth else { continue };
        if p.repr.bth.opcode != Opcode::RcAck || aeth.syndrome.is_ack() {
            continue;
        }
        let psn = p.repr.bth.psn;
        let request_with_psn = |d: &Captured| {
            let q = d.packet();
            d.src.ip() == c.dst.ip()
                && q.repr.bth.psn == psn
                && q.repr.bth.opcode.info().kind != OpKind::Ack
        };
        let before = all[..i].iter().filter(|d| request_with_psn(d)).count();
        let after = all[i + 1..].iter().filter(|d| request_with_psn(d)).count();
        match aeth.syndrome {
            AckSyndrome::Nak(NakCode::PsnSequenceError) => {
                seq_naks += 1;
                // The packet named left the requester (the capture is
                // taken before the filter that dropped it on the way in),
                // the next one reached the responder and made the NAK,
                // the named one came again after it.
                assert!(before >= 1, "frame {}: PSN {psn} never sent", c.frame);
                assert!(after >= 1, "frame {}: PSN {psn} not resent", c.frame);
                let next = (psn + 1) & 0xFF_FFFF;
                let next_sent = all[..i]
                    .iter()
                    .any(|d| d.src.ip() == c.dst.ip() && d.packet().repr.bth.psn == next);
                assert!(next_sent, "frame {}: PSN {next} not sent", c.frame);
            }
            AckSyndrome::RnrNak { .. } => {
                rnr_naks += 1;
                assert!(before >= 1 && after >= 1, "frame {}", c.frame);
            }
            _ => {}
        }
    }
    assert_eq!(seq_naks, 2, "one sequence NAK from each responder");
    assert!(rnr_naks >= 4);
}

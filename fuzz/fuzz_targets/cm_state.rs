//! Fuzz the communication manager's state machine: any sequence of
//! arriving MADs (well-formed ones built from the input, so that they
//! name live connections and SIDR requests), consumer calls and timer runs is taken without
//! a panic, every MAD the CM sends parses back to itself, and a
//! connection whose consumer went away (a destroy) reports nothing more.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::SocketAddr;
use urdma::cm::{AcceptParams, Cm, CmEvent, CmOp, ConnectParams, ResolveParams};
use urdma_wire::cm::{CmMad, CmMessage, Drep, Dreq, Mra, Rej, Rep, Req, Rtu, SidrRep, SidrReq};

/// A cursor over the fuzzer's bytes.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes([
            self.u8()?,
            self.u8()?,
            self.u8()?,
            self.u8()?,
        ]))
    }
}

fn params(peer: SocketAddr, service_id: u64, qpn: u32) -> ConnectParams {
    ConnectParams {
        response_timeout: 8,
        max_retries: 3,
        ..ConnectParams::rc(peer, service_id, qpn, qpn)
    }
}

fuzz_target!(|data: &[u8]| {
    let peer: SocketAddr = "169.254.0.2:4791".parse().unwrap();
    let mut cm = Cm::new("169.254.0.1".parse().unwrap(), 1, 7);
    let mut input = Input(data);
    let mut now = 0u64;
    // Connection IDs the CM handed out or reported, to aim at.
    let mut ids: Vec<u32> = vec![0];
    // Connections destroyed: they must report no event.
    let mut gone: std::collections::HashSet<u32> = Default::default();
    while let Some(tag) = input.u8() {
        // Events so far, before this step can destroy their connection.
        for ev in cm.take_events() {
            assert!(!gone.contains(&ev.id()), "{ev:?} after a destroy");
            if let CmEvent::ConnectRequest { id, .. } | CmEvent::ServiceRequest { id, .. } = ev {
                ids.push(id);
            }
        }
        let pick = |i: Option<u8>, ids: &[u32]| ids[i.unwrap_or(0) as usize % ids.len()];
        let id = pick(input.u8(), &ids);
        let other = input.u32().unwrap_or(0);
        let service = u64::from(other % 4);
        let msg = match tag % 20 {
            0 => CmMessage::Req(Req {
                local_comm_id: other,
                service_id: service,
                local_ca_guid: u64::from(other >> 8),
                local_qpn: other & 0xFF,
                ..Req::default()
            }),
            1 => CmMessage::Rep(Rep {
                local_comm_id: other,
                remote_comm_id: id,
                local_qpn: other & 0xFF,
                ..Rep::default()
            }),
            2 => CmMessage::Rtu(Rtu {
                local_comm_id: other,
                remote_comm_id: id,
                ..Rtu::default()
            }),
            3 => CmMessage::Rej(Rej {
                local_comm_id: other,
                remote_comm_id: id,
                reason: (other % 40) as u16,
                ..Rej::default()
            }),
            4 => CmMessage::Mra(Mra {
                local_comm_id: other,
                remote_comm_id: id,
                message_mraed: (other % 3) as u8,
                service_timeout: (other % 32) as u8,
                ..Mra::default()
            }),
            5 => CmMessage::Dreq(Dreq {
                local_comm_id: other,
                remote_comm_id: id,
                remote_qpn: other & 0xFF,
                ..Dreq::default()
            }),
            6 => CmMessage::Drep(Drep {
                local_comm_id: other,
                remote_comm_id: id,
                ..Drep::default()
            }),
            17 => CmMessage::SidrReq(SidrReq {
                request_id: other,
                service_id: service,
                ..SidrReq::default()
            }),
            18 => CmMessage::SidrRep(SidrRep {
                request_id: id,
                status: (other % 4) as u8,
                qpn: other & 0xFF,
                ..SidrRep::default()
            }),
            t => {
                let op = match t {
                    7 => CmOp::Listen {
                        service_id: service,
                    },
                    8 => CmOp::Connect(params(peer, service, other & 0xFF)),
                    9 => CmOp::Accept {
                        id,
                        params: AcceptParams {
                            qpn: other & 0xFF,
                            ..AcceptParams::default()
                        },
                    },
                    10 => CmOp::Reject {
                        id,
                        reason: 28,
                        private_data: vec![0; (other % 200) as usize],
                    },
                    11 => CmOp::ReadyToUse {
                        id,
                        private_data: vec![],
                    },
                    12 => CmOp::Established { id },
                    13 => CmOp::Disconnect {
                        id,
                        private_data: vec![],
                    },
                    14 => CmOp::Destroy { id },
                    15 => CmOp::Resolve(ResolveParams {
                        response_timeout: 8,
                        max_retries: 3,
                        ..ResolveParams::new(peer, service)
                    }),
                    16 => CmOp::AnswerResolve {
                        id,
                        qpn: other & 0xFF,
                        qkey: other,
                        private_data: vec![0; (other % 200) as usize],
                    },
                    _ => {
                        now += u64::from(other) << 8;
                        cm.on_timer(now);
                        continue;
                    }
                };
                let destroyed = match op {
                    CmOp::Destroy { id } => Some(id),
                    _ => None,
                };
                match cm.apply(now, op) {
                    Ok(Some(new)) => ids.push(new),
                    Ok(None) => gone.extend(destroyed),
                    Err(_) => {}
                }
                continue;
            }
        };
        let mad = CmMad {
            tid: u64::from(other),
            msg,
        };
        cm.handle(now, peer, &mad);
        for o in cm.drain_tx() {
            let bytes = o.mad.emit();
            assert_eq!(CmMad::parse(&bytes).as_ref(), Ok(&o.mad));
        }
    }
});

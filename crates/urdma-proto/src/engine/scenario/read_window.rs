//! READ responses sent a window at a time by the responder itself, and
//! the bound on READ and atomic requests not yet answered.

use super::{opts, pattern, Pkt, Solo, MTU};
use crate::engine::command::{DeregMr, DestroyQp, ModifyQp, RegMr};
use crate::engine::responder::{DEVICE_READ_BYTES, PACE_NS, READ_WINDOW};
use crate::engine::Counter;
use crate::memory::VecMemory;
use crate::types::{AccessFlags, QpAttrMask, QpState};
use crate::verbs::ConnectOptions;
use crate::verbs::QpAttr;
use urdma_wire::{AckSyndrome, AtomicEth, NakCode, Opcode, Reth};

/// The largest READ IBTA allows (2 GiB).
const TWO_GIB: usize = 1 << 31;
/// Address of the large regions registered here.
const BIG_VA: u64 = 0x4000_0000_0000;

/// Register a region of `len` zeroed bytes on the engine of `s`: an
/// anonymous shared mapping, whose pages cost memory only once touched
/// (a READ of 2 GiB reads the pages of the windows it sends). Its R_Key
/// and entry.
fn big_region(s: &mut Solo, len: usize) -> (u32, std::sync::Arc<crate::mr::MrEntry>) {
    let reg = RegMr {
        pd: s.node.mr.pd,
        access: AccessFlags::all(),
        iova: BIG_VA,
        mem: Box::new(VecMemory::new(len)),
        rekey: None,
    };
    let mr = s.node.eng.call(0, reg).expect("mr");
    (mr.rkey, mr)
}

/// The peer sends a READ request of `len` bytes at `va` under `rkey`, PSN `p`.
fn read_request(s: &mut Solo, p: u32, va: u64, rkey: u32, len: usize) {
    let mut req = s.bth(Opcode::RcReadRequest, p);
    req.reth = Some(Reth {
        va,
        rkey,
        dma_len: len as u32,
    });
    s.send(&req, &[]);
}

/// Run the engine's next pass (its deadline, a pace after the last).
fn next_pass(s: &mut Solo) -> Vec<Pkt> {
    let before = s.now;
    let t = s.fire();
    assert!(t <= before + PACE_NS, "the next pass comes a pace later");
    s.recv_all()
}

/// The opcode response `i` of a READ of `n` responses carries.
fn opcode(i: u32, n: u32) -> Opcode {
    match i {
        0 => Opcode::RcReadResponseFirst,
        i if i + 1 == n => Opcode::RcReadResponseLast,
        _ => Opcode::RcReadResponseMiddle,
    }
}

/// Rule: executing a READ of 2 GiB queues no more than one window of
/// responses (READ_WINDOW packets of one MTU); the next windows follow,
/// in PSN order, from the responder's own passes, each a window again,
/// without any packet from the requester.
#[test]
fn a_read_of_two_gib_is_answered_a_window_at_a_time() {
    let mut s = Solo::new(&opts());
    let (rkey, _mr) = big_region(&mut s, TWO_GIB);
    read_request(&mut s, 0, BIG_VA, rkey, TWO_GIB);
    let first = s.recv_all();
    assert_eq!(first.len(), READ_WINDOW as usize);
    let bytes: usize = first.iter().map(|p| p.data.len()).sum();
    assert!(bytes <= READ_WINDOW as usize * (MTU + 64), "{bytes} bytes");
    let n = (TWO_GIB / MTU) as u32;
    assert_eq!(s.node.rq_psn(), n, "the READ spans its PSNs at once");
    let mut next = 0u32;
    let mut check = |pkts: &[Pkt]| {
        for p in pkts {
            assert_eq!(p.psn(), next);
            assert_eq!(p.opcode(), opcode(next, n));
            assert_eq!(p.payload.len(), MTU);
            next += 1;
        }
    };
    check(&first);
    for _ in 0..20 {
        let w = next_pass(&mut s);
        assert_eq!(w.len(), READ_WINDOW as usize, "one window per pass");
        check(&w);
    }
    assert_eq!(next, 21 * READ_WINDOW);
    assert!(s.node.eng.next_deadline().is_some(), "more to come");
}

/// Rule: a READ longer than a window completes: every response goes out
/// once, in PSN order, with the region's bytes, FIRST to LAST, and the
/// responder has nothing left to do after.
#[test]
fn a_long_read_completes_in_order_with_its_bytes() {
    let len = 300 * MTU + 17;
    let mut s = Solo::new(&opts());
    let (rkey, mr) = big_region(&mut s, len);
    let data = pattern(len, 5);
    mr.mem.write(0, &data).expect("write");
    read_request(&mut s, 0, BIG_VA, rkey, len);
    let mut got = s.recv_all();
    assert_eq!(got.len(), READ_WINDOW as usize);
    while s.node.eng.next_deadline().is_some() {
        let w = next_pass(&mut s);
        assert!(w.len() <= READ_WINDOW as usize);
        got.extend(w);
    }
    let n = len.div_ceil(MTU) as u32;
    assert_eq!(got.len(), n as usize);
    let mut bytes = Vec::new();
    for (i, p) in got.iter().enumerate() {
        assert_eq!((p.psn(), p.opcode()), (i as u32, opcode(i as u32, n)));
        bytes.extend_from_slice(&p.payload);
    }
    assert_eq!(bytes, data);
    assert_eq!(got[n as usize - 1].syndrome().map(|_| ()), Some(()));
}

/// Rule (IBTA 9.5: responses in PSN order): the ACK of a WRITE that
/// follows a READ still being answered goes out after the READ's last
/// response, not before.
#[test]
fn an_ack_waits_behind_the_read_responses() {
    let len = 200 * MTU;
    let mut s = Solo::new(&opts());
    let (rkey, _mr) = big_region(&mut s, len);
    read_request(&mut s, 0, BIG_VA, rkey, len);
    let mut w = s.bth(Opcode::RcWriteOnly, 200);
    w.reth = Some(Reth {
        va: s.node.va(0),
        rkey: s.node.mr.rkey,
        dma_len: 8,
    });
    w.bth.ack_req = true;
    s.send(&w, &[7; 8]);
    let mut got = s.recv_all();
    while s.node.eng.next_deadline().is_some() {
        got.extend(next_pass(&mut s));
    }
    assert_eq!(got.len(), 201);
    assert!(got[..200].iter().all(|p| p.opcode() != Opcode::RcAck));
    let last = &got[200];
    assert_eq!((last.opcode(), last.psn()), (Opcode::RcAck, 200));
    assert_eq!(s.node.read(0, 8), [7; 8]);
}

/// Rule: a device queues at most DEVICE_READ_BYTES of READ response
/// payloads until its transmit queue is drained: passes that find it
/// full send nothing more (back-pressure), and sending goes on once the
/// datagrams were taken.
#[test]
fn undrained_responses_hold_the_device_back() {
    let mut s = Solo::new(&opts());
    let (rkey, _mr) = big_region(&mut s, TWO_GIB);
    read_request(&mut s, 0, BIG_VA, rkey, TWO_GIB);
    let mut sent = s.recv_all().len();
    // Passes whose output stays in the engine's queue.
    for _ in 0..(DEVICE_READ_BYTES / (READ_WINDOW as usize * MTU) + 10) {
        let t = s.node.eng.next_deadline().expect("a pass is due");
        s.now = t;
        s.node.eng.handle_timeouts(t);
    }
    let queued = s.node.eng.tx.len();
    assert_eq!(queued * MTU, DEVICE_READ_BYTES, "held at the bound");
    assert_eq!(s.node.eng.responding.budget(), 0);
    s.node.collect();
    sent += s.recv_all().len();
    assert_eq!(next_pass(&mut s).len(), READ_WINDOW as usize, "going on");
    assert_eq!(sent, READ_WINDOW as usize + DEVICE_READ_BYTES / MTU);
}

/// Rule: a region deregistered while a READ of it is being answered is
/// read no more: the READ ends with a NAK remote access error at the
/// next response's PSN and the QP enters ERR.
#[test]
fn a_region_deregistered_mid_read_ends_it_with_a_nak() {
    let mut s = Solo::new(&opts());
    let (rkey, mr) = big_region(&mut s, TWO_GIB);
    read_request(&mut s, 0, BIG_VA, rkey, TWO_GIB);
    assert_eq!(s.recv_all().len(), READ_WINDOW as usize);
    s.node
        .eng
        .call(s.now, DeregMr { key: mr.rkey })
        .expect("dereg");
    let out = next_pass(&mut s);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].opcode(), Opcode::RcAck);
    assert_eq!(out[0].psn(), READ_WINDOW);
    assert_eq!(
        out[0].syndrome(),
        Some(AckSyndrome::Nak(NakCode::RemoteAccessError))
    );
    assert_eq!(s.node.state(), QpState::Err);
    assert_eq!(s.node.eng.next_deadline(), None, "nothing left to send");
}

/// Rule: a duplicate READ restarts the responses still to send at its
/// PSN (a requester that lost one asks again from there).
#[test]
fn a_duplicate_read_restarts_the_waiting_responses() {
    let len = 200 * MTU;
    let mut s = Solo::new(&opts());
    let (rkey, _mr) = big_region(&mut s, len);
    read_request(&mut s, 0, BIG_VA, rkey, len);
    assert_eq!(s.recv_all().len(), READ_WINDOW as usize);
    s.now += 1_000;
    let at = 10u32;
    let off = at as usize * MTU;
    read_request(&mut s, at, BIG_VA + off as u64, rkey, len - off);
    assert_eq!(s.node.count(Counter::Duplicates), 1);
    let mut got = s.recv_all();
    while s.node.eng.next_deadline().is_some() {
        got.extend(next_pass(&mut s));
    }
    assert_eq!(got.len(), 190, "PSNs 10 to 199, once");
    for (i, p) in got.iter().enumerate() {
        assert_eq!(p.psn(), at + i as u32);
    }
    assert_eq!(got[0].opcode(), Opcode::RcReadResponseFirst);
    assert_eq!(got[189].opcode(), Opcode::RcReadResponseLast);
}

/// Rule (IBTA 9.7.5.2: too many outstanding READ/atomic requests): with
/// max_dest_rd_atomic 1, a second READ while the first is still being
/// answered is NAKed invalid request, counted, and the QP enters ERR.
#[test]
fn a_read_beyond_max_dest_rd_atomic_is_an_invalid_request() {
    let o = ConnectOptions {
        max_dest_rd_atomic: 1,
        ..opts()
    };
    let mut s = Solo::new(&o);
    let (rkey, _mr) = big_region(&mut s, TWO_GIB);
    read_request(&mut s, 0, BIG_VA, rkey, TWO_GIB);
    assert_eq!(s.recv_all().len(), READ_WINDOW as usize);
    let second = (TWO_GIB / MTU) as u32;
    read_request(&mut s, second, BIG_VA, rkey, 8);
    let nak = s.must_recv();
    assert_eq!((nak.opcode(), nak.psn()), (Opcode::RcAck, second));
    assert_eq!(
        nak.syndrome(),
        Some(AckSyndrome::Nak(NakCode::InvalidRequest))
    );
    assert_eq!(s.node.count(Counter::RdAtomicRefused), 1);
    assert_eq!(s.node.state(), QpState::Err);
}

/// Rule: with max_dest_rd_atomic 1, READs answered in full when they
/// execute leave room for the next one: only those still being answered
/// count.
#[test]
fn answered_reads_leave_room_under_max_dest_rd_atomic() {
    let o = ConnectOptions {
        max_dest_rd_atomic: 1,
        ..opts()
    };
    let mut s = Solo::new(&o);
    s.node.write(0x1000, &pattern(2000, 1));
    let (va, rkey) = (s.node.va(0x1000), s.node.mr.rkey);
    read_request(&mut s, 0, va, rkey, 2000);
    read_request(&mut s, 2, va, rkey, 2000);
    let got = s.recv_all();
    assert_eq!(got.len(), 4);
    assert!(got.iter().all(|p| p.opcode() != Opcode::RcAck));
    assert_eq!(s.node.count(Counter::RdAtomicRefused), 0);
}

/// The peer sends a fetch-and-add of `add` on the 8 bytes at `va`, PSN `p`.
fn fetch_add(s: &mut Solo, p: u32, va: u64, add: u64) {
    let mut req = s.bth(Opcode::RcFetchAdd, p);
    req.atomic_eth = Some(AtomicEth {
        va,
        rkey: s.node.mr.rkey,
        swap_add: add,
        compare: 0,
    });
    s.send(&req, &[]);
}

/// Rule: an atomic that follows a READ still being answered executes in
/// its turn, but its ACK waits behind the READ's responses and counts as
/// not yet answered: with max_dest_rd_atomic 2, a READ after both is an
/// invalid request.
#[test]
fn an_atomic_ack_waits_behind_a_read_and_counts_as_outstanding() {
    let o = ConnectOptions {
        max_dest_rd_atomic: 2,
        ..opts()
    };
    let mut s = Solo::new(&o);
    let len = 100 * MTU;
    let (rkey, _mr) = big_region(&mut s, len);
    read_request(&mut s, 0, BIG_VA, rkey, len);
    assert_eq!(s.recv_all().len(), READ_WINDOW as usize);
    s.node.write(0x100, &5u64.to_ne_bytes());
    let counter = s.node.va(0x100);
    fetch_add(&mut s, 100, counter, 3);
    assert!(s.recv_all().is_empty(), "the atomic ACK waits");
    assert_eq!(s.node.read(0x100, 8), 8u64.to_ne_bytes(), "executed");
    let rest = next_pass(&mut s);
    assert_eq!(rest.len(), 100 - READ_WINDOW as usize + 1);
    let ack = rest.last().expect("the atomic ACK");
    assert_eq!((ack.opcode(), ack.psn()), (Opcode::RcAtomicAck, 100));
    assert_eq!(ack.repr.atomic_ack_eth.map(|a| a.orig), Some(5));

    let (va, rk) = (BIG_VA, rkey);
    read_request(&mut s, 101, va, rk, len);
    fetch_add(&mut s, 201, counter, 1);
    read_request(&mut s, 202, va, rk, 8);
    let out = s.recv_all();
    let nak = out.last().expect("a NAK");
    assert_eq!((nak.opcode(), nak.psn()), (Opcode::RcAck, 202));
    assert_eq!(
        nak.syndrome(),
        Some(AckSyndrome::Nak(NakCode::InvalidRequest))
    );
    assert_eq!(s.node.count(Counter::RdAtomicRefused), 1);
}

/// Rule: a QP moved to RESET, or destroyed, while a READ is being
/// answered sends none of its remaining responses.
#[test]
fn reset_and_destroy_drop_the_responses_waiting() {
    for destroy in [false, true] {
        let mut s = Solo::new(&opts());
        let (rkey, _mr) = big_region(&mut s, TWO_GIB);
        read_request(&mut s, 0, BIG_VA, rkey, TWO_GIB);
        assert_eq!(s.recv_all().len(), READ_WINDOW as usize);
        let qpn = s.node.qpn;
        if destroy {
            s.node.eng.call(s.now, DestroyQp { qpn }).expect("destroy");
        } else {
            let attr = QpAttr {
                qp_state: QpState::Reset,
                ..QpAttr::default()
            };
            let mask = QpAttrMask::STATE;
            let modify = ModifyQp { qpn, attr, mask };
            s.node.eng.call(s.now, modify).expect("reset");
        }
        if s.node.eng.next_deadline().is_some() {
            s.fire();
        }
        s.node.collect();
        assert!(s.node.out.is_empty(), "nothing more sent");
        assert_eq!(s.node.eng.next_deadline(), None);
    }
}

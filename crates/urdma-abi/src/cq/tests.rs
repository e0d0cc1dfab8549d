use super::slot::{OPCODES, STATUSES};
use super::*;
use crate::types::{WcFlags, WcOpcode};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

fn wc(id: u64) -> WorkCompletion {
    WorkCompletion::new(id, WcStatus::Success, WcOpcode::Send, 1)
}

fn counter(cq: &CqShared) -> Arc<AtomicUsize> {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    cq.set_notifier(Some(Box::new(move || {
        h.fetch_add(1, SeqCst);
    })));
    hits
}

#[test]
fn full_cq_reports_overrun_after_remaining_entries() {
    let cq = CqShared::new(1, 2);
    cq.push(wc(1), false).unwrap();
    cq.push(wc(2), false).unwrap();
    assert_eq!(cq.push(wc(3), false), Err(CqFull));
    let mut out = Vec::new();
    assert_eq!(cq.poll(10, &mut out).unwrap(), 2);
    assert_eq!(out.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2]);
    assert!(matches!(cq.poll(10, &mut out), Err(Error::CqOverrun)));
    assert_eq!(cq.push(wc(4), false), Err(CqFull));
}

#[test]
fn notifier_fires_once_per_arm() {
    let cq = CqShared::new(1, 8);
    let hits = counter(&cq);
    cq.push(wc(1), false).unwrap();
    assert_eq!(hits.load(SeqCst), 0);
    cq.req_notify(true);
    cq.push(wc(2), false).unwrap();
    assert_eq!(hits.load(SeqCst), 0);
    cq.push(wc(3), true).unwrap();
    assert_eq!(hits.load(SeqCst), 1);
    cq.push(wc(4), true).unwrap();
    assert_eq!(hits.load(SeqCst), 1);
}

#[test]
fn wait_times_out_and_wakes() {
    let cq = Arc::new(CqShared::new(1, 8));
    let mut out = Vec::new();
    assert!(matches!(
        cq.wait(1, Some(Duration::from_millis(5)), &mut out),
        Err(Error::Timeout)
    ));
    let c = cq.clone();
    let t = std::thread::spawn(move || c.push(wc(9), false));
    assert_eq!(
        cq.wait(4, Some(Duration::from_secs(10)), &mut out).unwrap(),
        1
    );
    assert_eq!(out[0].wr_id, 9);
    t.join().unwrap().unwrap();
}

#[test]
fn ring_wraps_many_times_in_order() {
    let cq = CqShared::new_shared(1, 3).unwrap();
    let (mut next_in, mut next_out, mut out) = (0u64, 0u64, Vec::new());
    for round in 0..1000usize {
        for _ in 0..round % 3 + 1 {
            cq.push(wc(next_in), false).unwrap();
            next_in += 1;
        }
        assert_eq!(cq.len() as u64, next_in - next_out);
        assert_eq!(cq.poll(0, &mut out).unwrap(), 0);
        while cq.poll(round % 2 + 1, &mut out).unwrap() > 0 {}
        for w in out.drain(..) {
            assert_eq!(w.wr_id, next_out);
            next_out += 1;
        }
        assert_eq!(next_out, next_in);
    }
}

#[test]
fn overrun_persists_and_wakes_a_waiter_in_another_mapping() {
    let a = CqShared::new_shared(1, 2).unwrap();
    let b = Arc::new(CqShared::from_fd(1, 2, a.fd().unwrap().unwrap()).unwrap());
    let b2 = b.clone();
    // Push only once the waiter sleeps, so the futex wake is exercised.
    let t = std::thread::spawn(move || {
        while b2.ring().hdr().waiters.load(SeqCst) == 0 {
            std::thread::yield_now();
        }
        b2.push(wc(1), false).unwrap();
    });
    let mut out = Vec::new();
    let long = Some(Duration::from_secs(30));
    assert_eq!(a.wait(8, long, &mut out).unwrap(), 1);
    t.join().unwrap();
    assert_eq!(a.ring().hdr().waiters.load(SeqCst), 0);
    b.push(wc(2), false).unwrap();
    b.push(wc(3), false).unwrap();
    assert_eq!(b.push(wc(4), false), Err(CqFull));
    assert_eq!(a.len(), 2);
    // The entries still held come first, then the overrun, for good.
    assert_eq!(a.wait(1, long, &mut out).unwrap(), 1);
    assert_eq!(a.poll(8, &mut out).unwrap(), 1);
    assert_eq!(out.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2, 3]);
    assert!(matches!(a.wait(1, long, &mut out), Err(Error::CqOverrun)));
    assert!(matches!(a.poll(1, &mut out), Err(Error::CqOverrun)));
    assert_eq!(b.push(wc(5), false), Err(CqFull));
    assert!(a.is_empty());
    let z = CqShared::new(1, 0);
    assert_eq!(z.push(wc(1), false), Err(CqFull));
    assert!(matches!(z.poll(1, &mut out), Err(Error::CqOverrun)));
}

#[test]
fn waits_across_mappings_lose_no_wakeup() {
    const N: u64 = 20_000;
    let a = CqShared::new_shared(1, 4).unwrap();
    let b = CqShared::from_fd(1, 4, a.fd().unwrap().unwrap()).unwrap();
    let t = std::thread::spawn(move || {
        for i in 0..N {
            while b.len() == b.capacity() {
                std::thread::yield_now();
            }
            b.push(wc(i), false).unwrap();
        }
    });
    let (mut out, long) = (Vec::new(), Some(Duration::from_secs(30)));
    while (out.len() as u64) < N {
        a.wait(3, long, &mut out).unwrap();
    }
    assert!(out.iter().zip(0..).all(|(w, i)| w.wr_id == i));
    t.join().unwrap();
}

#[test]
fn from_fd_refuses_unsealed_or_small_files() {
    let fd = crate::shm::unsealed_memfd(ring_len(4).unwrap());
    let e = CqShared::from_fd(1, 4, fd).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let a = CqShared::new_shared(1, 4).unwrap();
    let e = CqShared::from_fd(1, 5, a.fd().unwrap().unwrap()).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let b = CqShared::from_fd(1, 4, a.fd().unwrap().unwrap()).unwrap();
    b.push(wc(7), false).unwrap();
    let mut out = Vec::new();
    assert_eq!(a.poll(4, &mut out).unwrap(), 1);
    assert_eq!(out[0].wr_id, 7);
}

#[test]
fn notifier_fires_once_per_arm_across_mappings() {
    let a = CqShared::new_shared(1, 8).unwrap();
    let b = CqShared::from_fd(1, 8, a.fd().unwrap().unwrap()).unwrap();
    let (hits_a, hits_b) = (counter(&a), counter(&b));
    a.req_notify(false);
    b.push(wc(1), false).unwrap();
    b.push(wc(2), false).unwrap();
    assert_eq!(hits_b.load(SeqCst), 1);
    a.req_notify(true);
    a.req_notify(true);
    b.push(wc(3), false).unwrap();
    assert_eq!(hits_b.load(SeqCst), 1);
    let err = WorkCompletion::new(4, WcStatus::RemOpErr, WcOpcode::Send, 1);
    b.push(err, false).unwrap();
    b.push(err, true).unwrap();
    assert_eq!(hits_b.load(SeqCst), 2);
    a.req_notify(true);
    a.req_notify(false);
    b.push(wc(5), false).unwrap();
    assert_eq!(hits_b.load(SeqCst), 3);
    assert_eq!(hits_a.load(SeqCst), 0);
    a.notify_now();
    assert_eq!(hits_a.load(SeqCst), 1);
}

#[test]
fn codec_roundtrips_and_survives_garbage() {
    let mut w = WorkCompletion::new(u64::MAX - 3, WcStatus::Success, WcOpcode::Recv, 9);
    (w.vendor_err, w.byte_len, w.imm_data, w.invalidated_rkey) = (1, 2, 3, 4);
    (w.src_qp, w.wc_flags, w.pkey_index, w.slid) = (5, WcFlags::all(), 6, 7);
    (w.sl, w.dlid_path_bits) = (8, 9);
    for (s, o) in STATUSES.into_iter().zip(OPCODES.into_iter().cycle()) {
        (w.status, w.opcode) = (s, o);
        assert_eq!(decode(&encode(&w)), w);
    }
    let mut b = encode(&w);
    b[8..12].copy_from_slice(&3u32.to_le_bytes());
    assert_eq!(decode(&b).status, WcStatus::GeneralErr);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..1000 {
        for byte in b.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *byte = x as u8;
        }
        let d = decode(&b);
        assert!(OPCODES.contains(&d.opcode) && STATUSES.contains(&d.status));
    }
}

#[test]
fn hostile_indices_and_slots_stay_in_bounds() {
    let cap = 5usize;
    let len = ring_len(cap).unwrap();
    // A larger file than the ring needs, with a guard area after it.
    let raw = SharedMapping::create(c"t", len + 4096).unwrap();
    raw.write_bytes(len, &[0xa5; 4096]).unwrap();
    raw.write_bytes(HEADER_LEN, &vec![0xff; cap * SLOT_LEN])
        .unwrap();
    let cq = CqShared::from_fd(1, cap, raw.fd().unwrap().try_clone_to_owned().unwrap()).unwrap();
    let big = u64::MAX;
    let pairs = [
        (0, big),
        (big, 0),
        (big - 1, big),
        (3, 2),
        (big - 4, 0),
        (1 << 63, 7),
    ];
    let mut out = Vec::new();
    for (head, tail) in pairs {
        Header::of(&raw).head.store(head, SeqCst);
        Header::of(&raw).tail.store(tail, SeqCst);
        Header::of(&raw).overrun.store(0, SeqCst);
        Header::of(&raw).armed.store(0xdead, SeqCst);
        let pushed = cq.push(wc(head), true).is_ok();
        assert_eq!(pushed, tail.wrapping_sub(head) < cap as u64);
        let _ = cq.len();
        let _ = cq.poll(usize::MAX, &mut out);
        let _ = cq.wait(1, Some(Duration::ZERO), &mut out);
    }
    assert!(out.iter().any(|w| w.wr_id == big - 1));
    let mut guard = [0u8; 4096];
    raw.read_bytes(len, &mut guard).unwrap();
    assert!(guard.iter().all(|&b| b == 0xa5));
}

#[test]
fn a_qp_moved_to_reset_leaves_no_completion_behind() {
    let cq = CqShared::new(1, 4);
    let of = |id: u64, qpn: u32| WorkCompletion::new(id, WcStatus::Success, WcOpcode::Send, qpn);
    // Wrap the ring once first, so the kept entries move across its end.
    for id in 0..3 {
        cq.push(of(id, 9), false).unwrap();
    }
    let mut out = Vec::new();
    cq.poll(3, &mut out).unwrap();
    for (id, qpn) in [(10, 1), (11, 2), (12, 1), (13, 3)] {
        cq.push(of(id, qpn), false).unwrap();
    }
    assert_eq!(cq.discard_qp(1), 2);
    assert_eq!(cq.discard_qp(7), 0);
    out.clear();
    cq.poll(8, &mut out).unwrap();
    let ids: Vec<u64> = out.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [11, 13]);
    for id in 20..24 {
        cq.push(of(id, 2), false).unwrap();
    }
    out.clear();
    cq.poll(8, &mut out).unwrap();
    assert_eq!(out.len(), 4, "the freed slots are usable again");
}

fn ids(cq: &CqShared) -> Vec<u64> {
    let mut out = Vec::new();
    cq.poll(100, &mut out).unwrap();
    out.iter().map(|w| w.wr_id).collect()
}

#[test]
fn a_replaced_ring_keeps_the_waiting_completions_in_order() {
    let cq = CqShared::new(1, 4);
    for i in 1..=3 {
        cq.push(wc(i), false).unwrap();
    }
    let mut first = Vec::new();
    cq.poll(1, &mut first).unwrap();
    assert_eq!(first[0].wr_id, 1);
    // Head and tail now sit mid-ring; the two left move to a bigger ring.
    cq.push(wc(4), false).unwrap();
    cq.replace_ring(Ring::new(16, false).unwrap(), false)
        .unwrap();
    assert_eq!(cq.capacity(), 16);
    for i in 5..=14 {
        cq.push(wc(i), false).unwrap();
    }
    assert_eq!(ids(&cq), (2..=14).collect::<Vec<_>>());
}

#[test]
fn a_ring_too_small_for_the_waiting_completions_is_refused_and_changes_nothing() {
    let cq = CqShared::new(1, 8);
    for i in 1..=3 {
        cq.push(wc(i), false).unwrap();
    }
    let e = cq.replace_ring(Ring::new(2, false).unwrap(), false);
    assert!(matches!(e, Err(Error::InvalidArgument(_))), "{e:?}");
    assert_eq!(cq.capacity(), 8);
    cq.replace_ring(Ring::new(3, false).unwrap(), false)
        .unwrap();
    assert_eq!(ids(&cq), [1, 2, 3]);
}

#[test]
fn a_replacement_across_processes_moves_the_arming_and_wakes_sleepers() {
    // a: the consumer's view; b: the producer's, mapping the same memory.
    let a = Arc::new(CqShared::new_shared(1, 4).unwrap());
    let b = Arc::new(CqShared::from_fd(1, 4, a.fd().unwrap().unwrap()).unwrap());
    let hits = counter(&b);
    b.push(wc(1), false).unwrap();
    a.req_notify(false);
    let sleeper = {
        let a = a.clone();
        std::thread::spawn(move || {
            let mut out = Vec::new();
            // Takes 1 at once, then sleeps for the next.
            a.wait(1, Some(Duration::from_secs(5)), &mut out).unwrap();
            a.wait(1, Some(Duration::from_secs(5)), &mut out).unwrap();
            out.iter().map(|w| w.wr_id).collect::<Vec<_>>()
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let new = Ring::new(8, true).unwrap();
    let theirs = Ring::from_fd(8, new.fd().unwrap().unwrap()).unwrap();
    {
        let _paused = a.consumer_pause();
        b.replace_ring(theirs, false).unwrap();
        a.replace_ring(new, true).unwrap();
    }
    assert_eq!((a.capacity(), b.capacity()), (8, 8));
    b.push(wc(2), false).unwrap();
    assert_eq!(hits.load(SeqCst), 1, "the arming moved with the ring");
    assert_eq!(sleeper.join().unwrap(), [1, 2]);
}

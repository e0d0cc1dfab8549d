//! A 1 GiB RDMA WRITE and a 1 GiB RDMA READ between the two processes,
//! checked with digests of both buffers (no byte dumps through the pipe).

use crate::harness::{fill, mr_digest, Fixture, ALL};
use crate::proto::ConnOpts;
use std::time::{Duration, Instant};
use urdma::{SendWr, WcOpcode};

/// Size of both transfers.
const GIB: usize = 1 << 30;

/// Wait for a completion of up to 10 minutes (a 1 GiB transfer).
fn wait_long(f: &Fixture, wr_id: u64, op: WcOpcode) {
    let wc =
        f.cq.wait_one(Some(Duration::from_secs(600)))
            .unwrap_or_else(|e| panic!("no completion for the 1 GiB transfer: {e}"));
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (wr_id, urdma::WcStatus::Success, op)
    );
    if op == WcOpcode::RdmaRead {
        assert_eq!(wc.byte_len as usize, GIB);
    }
}

/// 1 GiB WRITE to the passive peer, then 1 GiB READ back from it.
pub fn write_and_read_1gib() {
    let mut f = Fixture::new();
    let l = f.connect(&ConnOpts::default());
    let local = f.mr(GIB, ALL);
    let remote = f.peer_mr(GIB, ALL);
    fill(&local, 0, GIB, 0x1A);
    let want = mr_digest(&local, 0, GIB);

    let t = Instant::now();
    let s = [local.slice(0, GIB).unwrap()];
    l.qp.post_send(SendWr::write(1, &s, remote.addr, remote.rkey))
        .unwrap();
    wait_long(&f, 1, WcOpcode::RdmaWrite);
    let write_time = t.elapsed();
    let got = f.peer.digest(remote.id, 0, GIB);
    assert_eq!(got, want, "1 GiB WRITE: digests differ");
    assert_eq!(f.peer.check(remote.id, 0, GIB, 0x1A, 0), None);

    f.peer.fill(remote.id, 0, GIB, 0x1B);
    let want = f.peer.digest(remote.id, 0, GIB);
    let t = Instant::now();
    l.qp.post_send(SendWr::read(2, &s, remote.addr, remote.rkey))
        .unwrap();
    wait_long(&f, 2, WcOpcode::RdmaRead);
    let read_time = t.elapsed();
    assert_eq!(
        mr_digest(&local, 0, GIB),
        want,
        "1 GiB READ: digests differ"
    );
    let mib = |d: Duration| GIB as f64 / (1 << 20) as f64 / d.as_secs_f64();
    eprintln!(
        "large: 1 GiB WRITE {:.2?} ({:.0} MiB/s), READ {:.2?} ({:.0} MiB/s); counters {:?}",
        write_time,
        mib(write_time),
        read_time,
        mib(read_time),
        f.dev.counters()
    );
}

//! Memory layout and work request ids.
//!
//! Server: the shared counter, then per QP the per-QP counter and CAS
//! word, the two WRITE targets, the READ area and the receive buffers.
//! Client: per QP the atomic results, the three sources and the three
//! destinations.

use super::pattern::SLOT;

/// Receive buffers the server keeps per QP.
pub(super) const RECV_SLOTS: usize = 4;

const S_HEAD: usize = 64;
const S_QP: usize = 64 + (3 + RECV_SLOTS) * SLOT;
const C_QP: usize = 64 + 6 * SLOT;
/// Offset of a receive inside its slot (unaligned).
pub(super) const RECV_SKEW: usize = 3;

/// Size of the server's buffer for `qps` QPs.
pub(super) fn server_len(qps: usize) -> usize {
    S_HEAD + qps * S_QP
}
/// Start of the server's area of QP `q`.
pub(super) fn s_base(q: usize) -> usize {
    S_HEAD + q * S_QP
}
/// The per-QP FETCH_ADD counter of QP `q`.
pub(super) fn s_counter(q: usize) -> usize {
    s_base(q)
}
/// The CMP_AND_SWP word of QP `q`.
pub(super) fn s_cas(q: usize) -> usize {
    s_base(q) + 8
}
/// Target slot of the RDMA WRITEs of QP `q`.
pub(super) fn s_write(q: usize) -> usize {
    s_base(q) + 64
}
/// Target slot of the RDMA WRITEs with immediate of QP `q`.
pub(super) fn s_write_imm(q: usize) -> usize {
    s_write(q) + SLOT
}
/// The area QP `q` reads from, filled with a known pattern.
pub(super) fn s_read(q: usize) -> usize {
    s_write(q) + 2 * SLOT
}
/// Receive buffer `i` of QP `q` (unaligned).
pub(super) fn s_recv(q: usize, i: usize) -> usize {
    s_write(q) + (3 + i) * SLOT + RECV_SKEW
}

/// Size of the client's buffer for `qps` QPs.
pub(super) fn client_len(qps: usize) -> usize {
    qps * C_QP
}
/// Start of the client's area of QP `q`.
pub(super) fn c_base(q: usize) -> usize {
    q * C_QP
}
/// Result word `k` of QP `q` (8 bytes each, 64 bytes in all).
pub(super) fn c_word(q: usize, k: usize) -> usize {
    c_base(q) + 8 * k
}
/// Slot `k` of QP `q`: 0-2 the sources, 3-5 the destinations.
pub(super) fn c_slot(q: usize, k: usize) -> usize {
    c_base(q) + 64 + k * SLOT
}

// Work request ids of the client: round << 8 | kind.

pub(super) const K_WRITE: u64 = 0;
pub(super) const K_READ_BACK: u64 = 1;
pub(super) const K_WRITE_IMM: u64 = 2;
pub(super) const K_SEND: u64 = 3;
pub(super) const K_READ: u64 = 4;
pub(super) const K_ADD: u64 = 5;
pub(super) const K_SHARED_ADD: u64 = 6;
pub(super) const K_CAS_FAIL: u64 = 7;
pub(super) const K_CAS: u64 = 8;
pub(super) const K_ECHO: u64 = 9;
pub(super) const K_FINAL: u64 = 10;
pub(super) const K_PROBE: u64 = 11;

/// What a client work request of kind `k` is, for messages.
pub(super) fn kind_name(k: u64) -> &'static str {
    match k {
        K_WRITE => "RDMA WRITE",
        K_READ_BACK => "RDMA READ (of the WRITE)",
        K_WRITE_IMM => "RDMA WRITE with immediate",
        K_SEND => "SEND",
        K_READ => "RDMA READ",
        K_ADD => "FETCH_ADD",
        K_SHARED_ADD => "FETCH_ADD (shared counter)",
        K_CAS_FAIL => "CMP_AND_SWP (failing)",
        K_CAS => "CMP_AND_SWP",
        K_ECHO => "RECV (echo)",
        K_FINAL => "RDMA READ (final counters)",
        K_PROBE => "RDMA READ (keep-alive)",
        _ => "work request",
    }
}

/// Server work request ids: receive slot `i` is `S_RECV | i`, its echo `S_ECHO | i`.
pub(super) const S_RECV: u64 = 0x100;
pub(super) const S_ECHO: u64 = 0x200;

#[cfg(test)]
mod tests {
    use super::super::pattern::MAX_MSG;
    use super::*;

    #[test]
    fn layout_does_not_overlap() {
        assert!(s_cas(0) + 8 <= s_write(0));
        assert!(s_recv(0, RECV_SLOTS - 1) + MAX_MSG <= s_base(1));
        assert!(c_word(0, 7) + 8 <= c_slot(0, 0));
        assert!(c_slot(0, 5) + RECV_SKEW + MAX_MSG <= c_base(1));
        assert_eq!(s_counter(0) % 8, 0);
        assert_eq!(s_cas(1) % 8, 0);
    }
}

//! End-to-end tests of urdma between two processes over UDP loopback.
//!
//! The test binary is its own peer: with `URDMA_E2E_PEER` set it runs the
//! verbs agent of [`peer`] (driven by JSON lines on stdin); otherwise it
//! runs the trials below with libtest-mimic, each trial spawning one peer
//! process and using its own pair of 127.x.y.z addresses.

mod cm;
mod config;
mod edge;
mod errors;
mod faults;
mod harness;
mod internal;
mod large;
mod ops;
mod pattern;
mod peer;
mod proto;
mod queues;
mod raw;
mod transfer;
mod windows;

use libtest_mimic::{Arguments, Trial};

/// A trial running `f` (a panic fails it).
fn trial(name: &str, f: fn()) -> Trial {
    Trial::test(name, move || {
        f();
        Ok(())
    })
}

/// Every trial of the suite.
fn trials() -> Vec<Trial> {
    let mut v = vec![
        trial("pattern_selfcheck", pattern::selfcheck),
        trial("config_mismatch_is_reported", config::mismatch_is_reported),
        trial(
            "config_started_agent_has_the_programs_settings",
            config::started_agent_has_the_programs_settings,
        ),
        trial("cm_connect_send_disconnect", cm::connect_send_disconnect),
        trial("cm_no_listener_rejects", cm::no_listener_rejects),
        trial("op_send", ops::send),
        trial("op_send_with_imm", ops::send_with_imm),
        trial("op_rdma_write", ops::rdma_write),
        trial("op_rdma_write_with_imm", ops::rdma_write_with_imm),
        trial("op_rdma_read", ops::rdma_read),
        trial("op_atomic_cmp_swap", ops::atomic_cmp_swap),
        trial("op_atomic_fetch_add", ops::atomic_fetch_add),
        trial("op_inline", ops::inline_ops),
        trial("xfer_scatter_gather", transfer::scatter_gather),
        trial("xfer_unsignaled", transfer::unsignaled),
        trial("xfer_completion_order", transfer::completion_order),
        trial("xfer_multi_qp", transfer::multi_qp),
        trial("xfer_peer_requester", transfer::peer_requester),
        trial("edge_zero_length", edge::zero_length),
        trial("edge_mtu_multiples", edge::mtu_multiples),
        trial("edge_psn_wraparound", edge::psn_wraparound),
        trial("edge_psn_wraparound_read", edge::psn_wraparound_read),
        trial("edge_small_rd_atomic_credit", edge::small_rd_atomic_credit),
        trial("edge_rnr_with_queued_work", edge::rnr_with_queued_work),
        trial("edge_rnr_write_imm", edge::rnr_write_imm),
        trial("err_unknown_rkey", errors::unknown_rkey),
        trial("err_out_of_bounds", errors::out_of_bounds),
        trial("err_no_remote_write", errors::no_remote_write),
        trial("err_no_remote_read", errors::no_remote_read),
        trial("err_no_remote_atomic", errors::no_remote_atomic),
        trial("err_other_pd_rkey", errors::other_pd_rkey),
        trial("err_qp_access_flags", errors::qp_access_flags),
        trial("err_local_protection", errors::local_protection),
        trial("err_post_send_wrong_state", errors::post_send_wrong_state),
        trial("err_modify_qp_bad_attrs", errors::modify_qp_bad_attrs),
        trial("queue_send_full", queues::send_queue_full),
        trial("queue_recv_full", queues::recv_queue_full),
        trial("queue_send_refills", queues::send_queue_refills),
        trial(
            "cq_resize_keeps_waiting_completions",
            queues::cq_resize_keeps_waiting_completions,
        ),
        trial(
            "mw_type2_grants_then_is_taken_back",
            windows::type2_window_grants_then_is_taken_back,
        ),
        trial(
            "mw_bounds_rights_and_bad_binds",
            windows::window_bounds_rights_and_bad_binds,
        ),
        trial(
            "queue_recv_buffer_deregistered",
            queues::recv_buffer_deregistered,
        ),
        trial("err_cq_overrun", faults::cq_overrun),
        trial("err_send_too_long", faults::send_too_long),
        trial("err_malformed_packets", faults::malformed_packets),
        trial("rnr_retry_exceeded", faults::rnr_retry_exceeded),
        trial("rnr_retry_success", faults::rnr_retry_success),
        trial("raw_duplicate_send", raw::duplicate_send),
        trial("raw_duplicate_atomic", raw::duplicate_atomic),
        trial("raw_duplicate_read", raw::duplicate_read),
        trial("raw_psn_gap", raw::psn_gap),
        trial("raw_ack_msn", raw::ack_msn),
        trial("raw_invalid_requests", raw::invalid_requests),
        trial("raw_long_read", raw::long_read),
        trial(
            "internal_peer_stopped_packets_sealed",
            internal::packets_to_a_stopped_internal_peer_are_sealed,
        ),
        trial(
            "internal_peer_stopped_payload_whole",
            internal::payload_by_reference_reaches_the_network_whole,
        ),
        trial("large_1gib_write_read", large::write_and_read_1gib),
    ];
    for mtu in [256, 512, 1024, 2048, 4096] {
        v.push(Trial::test(format!("mtu_{mtu}"), move || {
            transfer::mtu(mtu);
            Ok(())
        }));
    }
    v
}

fn main() {
    // Devices are opened on the shared NIC; the first one starts the
    // agent, which is this build's `urdma`.
    if std::env::var_os("URDMA_AGENT_BIN").is_none() {
        std::env::set_var("URDMA_AGENT_BIN", env!("CARGO_BIN_EXE_urdma"));
    }
    if std::env::var_os(harness::PEER_ENV).is_some() {
        peer::run();
        return;
    }
    let args = Arguments::from_args();
    libtest_mimic::run(&args, trials()).exit();
}

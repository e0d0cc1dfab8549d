//! The verbs structures and constants, generated at build time by bindgen
//! from the installed `<infiniband/verbs.h>` (see `build.rs`), plus the few
//! values the public header does not carry.
//!
//! bindgen's layout assertions (a compile-time check of the size,
//! alignment and every field offset of each structure) are part of the
//! generated code, so building this crate — including `cargo test` —
//! checks the layouts against the installed header.

#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    missing_docs,
    dead_code,
    clippy::all,
    clippy::pedantic
)]

include!(concat!(env!("OUT_DIR"), "/verbs_sys.rs"));

/// `ibv_context::abi_compat` of a context laid out inside a `verbs_context`.
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

/// GID types as `ibv_query_gid_type` reports them (the provider header's
/// `enum ibv_gid_type_sysfs`).
pub const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: u32 = 0;
/// RoCE v2 GID, as `ibv_query_gid_type` reports it.
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: u32 = 1;

/// Size of the 1.1-ABI `struct _compat_ibv_port_attr` that the exported
/// `ibv_query_port` fills: `struct ibv_port_attr` up to and including
/// `flags`.
pub const COMPAT_PORT_ATTR_LEN: usize = core::mem::offset_of!(ibv_port_attr, port_cap_flags2);

// The CQ structures share their head; the C ABI converts between them by
// pointer cast (ibv_cq_ex_to_cq), so the shared fields must line up.
const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(ibv_cq, context) == offset_of!(ibv_cq_ex, context));
    assert!(offset_of!(ibv_cq, channel) == offset_of!(ibv_cq_ex, channel));
    assert!(offset_of!(ibv_cq, cq_context) == offset_of!(ibv_cq_ex, cq_context));
    assert!(offset_of!(ibv_cq, cqe) == offset_of!(ibv_cq_ex, cqe));
    assert!(offset_of!(ibv_cq, mutex) == offset_of!(ibv_cq_ex, mutex));
    assert!(offset_of!(ibv_cq, cond) == offset_of!(ibv_cq_ex, cond));
    assert!(
        offset_of!(ibv_cq, comp_events_completed) == offset_of!(ibv_cq_ex, comp_events_completed)
    );
    assert!(
        offset_of!(ibv_cq, async_events_completed) == offset_of!(ibv_cq_ex, async_events_completed)
    );
    assert!(offset_of!(ibv_qp_ex, qp_base) == 0);
    // ibv_create_qp_ex with only IBV_QP_INIT_ATTR_PD is turned into
    // ibv_create_qp by a cast in verbs.h.
    assert!(offset_of!(ibv_qp_init_attr, cap) == offset_of!(ibv_qp_init_attr_ex, cap));
    assert!(offset_of!(ibv_qp_init_attr, qp_type) == offset_of!(ibv_qp_init_attr_ex, qp_type));
    assert!(
        offset_of!(ibv_qp_init_attr, sq_sig_all) == offset_of!(ibv_qp_init_attr_ex, sq_sig_all)
    );
    assert!(COMPAT_PORT_ATTR_LEN <= core::mem::size_of::<ibv_port_attr>());
};

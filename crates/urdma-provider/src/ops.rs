//! The provider's operation table: the entry points of the C-ABI layer
//! [`urdma_verbs`], with adapters where the provider interface passes
//! different arguments than the public verbs.

use crate::driver::{verbs_context_ops, verbs_mr};
use std::os::raw::{c_int, c_void};
use urdma_verbs as v;
use urdma_verbs::sys::*;

/// `rereg_mr`
unsafe extern "C" fn rereg_mr(
    mr: *mut verbs_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    // SAFETY: ibv_mr is the first field of verbs_mr.
    unsafe { v::pd::rereg_mr(mr.cast(), flags, pd, addr, length, access) }
}

/// `query_port`: the library passes a full `struct ibv_port_attr`.
unsafe extern "C" fn query_port(
    context: *mut ibv_context,
    port_num: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: the library's buffer is a whole ibv_port_attr.
    unsafe {
        v::query::query_port(
            context,
            port_num,
            attr,
            std::mem::size_of::<ibv_port_attr>(),
        )
    }
}

/// The operations handed to `verbs_set_ops`. Those left out (memory
/// windows, XRC, flow steering, device memory, counters, work queues,
/// importing objects, ...) get the library's EOPNOTSUPP defaults.
pub static CONTEXT_OPS: verbs_context_ops = verbs_context_ops {
    alloc_pd: Some(crate::kernel_objects::alloc_pd),
    attach_mcast: Some(v::misc::attach_mcast),
    create_ah: Some(v::ah::create_ah),
    create_cq: Some(crate::kernel_cq::create_cq),
    create_cq_ex: Some(v::cq::create_cq_ex),
    create_qp: Some(crate::kernel_objects::create_qp),
    create_qp_ex: Some(v::qp::create_qp_ex),
    create_srq: Some(crate::kernel_objects::create_srq),
    create_srq_ex: Some(v::srq::create_srq_ex),
    dealloc_pd: Some(crate::kernel_objects::dealloc_pd),
    dereg_mr: Some(crate::kernel_objects::dereg_mr),
    destroy_ah: Some(v::ah::destroy_ah),
    destroy_cq: Some(crate::kernel_cq::destroy_cq),
    destroy_qp: Some(crate::kernel_objects::destroy_qp),
    destroy_srq: Some(crate::kernel_objects::destroy_srq),
    detach_mcast: Some(v::misc::detach_mcast),
    free_context: Some(crate::free_context),
    modify_qp: Some(crate::kernel_objects::modify_qp),
    modify_srq: Some(v::srq::modify_srq),
    poll_cq: Some(v::cq::poll_cq),
    post_recv: Some(v::post::post_recv),
    post_send: Some(v::post::post_send),
    post_srq_recv: Some(v::post::post_srq_recv),
    query_device_ex: Some(v::query::query_device_ex),
    query_ece: Some(v::misc::query_ece),
    query_port: Some(query_port),
    query_qp: Some(v::qp::query_qp),
    query_qp_data_in_order: Some(v::misc::query_qp_data_in_order),
    query_srq: Some(v::srq::query_srq),
    reg_mr: Some(crate::kernel_objects::reg_mr),
    req_notify_cq: Some(v::cq::req_notify_cq),
    rereg_mr: Some(rereg_mr),
    resize_cq: Some(v::cq::resize_cq),
    set_ece: Some(v::misc::set_ece),
    ..NONE
};

const NONE: verbs_context_ops = verbs_context_ops {
    advise_mr: None,
    alloc_dm: None,
    alloc_mw: None,
    alloc_null_mr: None,
    alloc_parent_domain: None,
    alloc_pd: None,
    alloc_td: None,
    async_event: None,
    attach_counters_point_flow: None,
    attach_mcast: None,
    bind_mw: None,
    close_xrcd: None,
    cq_event: None,
    create_ah: None,
    create_counters: None,
    create_cq: None,
    create_cq_ex: None,
    create_flow: None,
    create_flow_action_esp: None,
    create_qp: None,
    create_qp_ex: None,
    create_rwq_ind_table: None,
    create_srq: None,
    create_srq_ex: None,
    create_wq: None,
    dealloc_mw: None,
    dealloc_pd: None,
    dealloc_td: None,
    dereg_mr: None,
    destroy_ah: None,
    destroy_counters: None,
    destroy_cq: None,
    destroy_flow: None,
    destroy_flow_action: None,
    destroy_qp: None,
    destroy_rwq_ind_table: None,
    destroy_srq: None,
    destroy_wq: None,
    detach_mcast: None,
    free_context: None,
    free_dm: None,
    get_srq_num: None,
    import_dm: None,
    import_mr: None,
    import_pd: None,
    modify_cq: None,
    modify_flow_action_esp: None,
    modify_qp: None,
    modify_qp_rate_limit: None,
    modify_srq: None,
    modify_wq: None,
    open_qp: None,
    open_xrcd: None,
    poll_cq: None,
    post_recv: None,
    post_send: None,
    post_srq_ops: None,
    post_srq_recv: None,
    query_device_ex: None,
    query_ece: None,
    query_port: None,
    query_qp: None,
    query_qp_data_in_order: None,
    query_rt_values: None,
    query_srq: None,
    read_counters: None,
    reg_dm_mr: None,
    reg_dmabuf_mr: None,
    reg_mr: None,
    req_notify_cq: None,
    rereg_mr: None,
    resize_cq: None,
    set_ece: None,
    unimport_dm: None,
    unimport_mr: None,
    unimport_pd: None,
};

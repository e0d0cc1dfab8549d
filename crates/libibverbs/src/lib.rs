//! `libibverbs.so.1` backed by urdma: unmodified verbs programs (linked
//! against Debian's libibverbs, rdma-core 44) run on urdma devices, with
//! no kernel module and no provider library.
//!
//! Every entry point is defined here under its libibverbs name, as a thin
//! call into the C-ABI layer [`urdma_verbs`], with its symbol version
//! (`.symver name, name@@@NODE`, next to the definition so the assembler
//! binds it). The IBVERBS_1.0 compatibility symbols and the variadic
//! provider helpers live in the C shim `src/compat.c`; `build.rs` sets
//! the soname and the version nodes.

#![allow(clippy::missing_safety_doc)]

use std::os::raw::{c_char, c_int, c_uint, c_void};
use urdma_verbs as v;
use urdma_verbs::sys::*;

/// Define each exported function as a call into `urdma_verbs`, bound to
/// its default version.
macro_rules! exports {
    ($($ver:literal fn $name:ident($($a:ident: $t:ty),* $(,)?) $(-> $r:ty)? = $imp:path;)*) => {
        $(
            #[doc = concat!("`", stringify!($name), "` (", $ver, ").")]
            #[no_mangle]
            #[allow(unused_unsafe)]
            pub unsafe extern "C" fn $name($($a: $t),*) $(-> $r)? {
                // SAFETY: the caller's contract is the implementation's
                // (the libibverbs documentation; see urdma_verbs).
                unsafe { $imp($($a),*) }
            }
            std::arch::global_asm!(concat!(
                ".symver ", stringify!($name), ", ", stringify!($name), "@@@", $ver
            ));
        )*
    };
}

exports! {
    // The device's CM, for urdma's drop-in librdmacm.so.1 only.
    "URDMA_PRIVATE_1" fn urdma_cm_call(context: *mut ibv_context, op: *const u8, len: usize, id: *mut u32) -> c_int = v::cm::cm_call;
    "URDMA_PRIVATE_1" fn urdma_cm_next_event(context: *mut ibv_context, timeout_ms: c_int, buf: *mut u8, cap: usize) -> isize = v::cm::cm_next_event;
    "URDMA_PRIVATE_1" fn urdma_cm_local_addr(context: *mut ibv_context, buf: *mut u8, cap: usize) -> isize = v::cm::cm_local_addr;

    // Devices and contexts.
    "IBVERBS_1.1" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device = v::device::get_device_list;
    "IBVERBS_1.1" fn ibv_free_device_list(list: *mut *mut ibv_device) = v::device::free_device_list;
    "IBVERBS_1.1" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char = v::device::get_device_name;
    "IBVERBS_1.1" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 = v::device::get_device_guid;
    "IBVERBS_1.9" fn ibv_get_device_index(device: *mut ibv_device) -> c_int = v::device::get_device_index;
    "IBVERBS_1.1" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context = v::context::open_device;
    "IBVERBS_1.1" fn ibv_close_device(context: *mut ibv_context) -> c_int = v::context::close_device;
    "IBVERBS_1.1" fn ibv_get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int = v::context::get_async_event;
    "IBVERBS_1.1" fn ibv_ack_async_event(event: *mut ibv_async_event) = v::context::ack_async_event;

    // Queries.
    "IBVERBS_1.1" fn ibv_query_device(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int = v::query::query_device;
    "IBVERBS_1.1" fn ibv_query_port(context: *mut ibv_context, port: u8, attr: *mut _compat_ibv_port_attr) -> c_int = v::query::query_port_compat;
    "IBVERBS_1.1" fn ibv_query_gid(context: *mut ibv_context, port: u8, index: c_int, gid: *mut ibv_gid) -> c_int = v::query::query_gid;
    "IBVERBS_1.11" fn _ibv_query_gid_ex(context: *mut ibv_context, port: u32, index: u32, entry: *mut ibv_gid_entry, flags: u32, entry_size: usize) -> c_int = v::query::query_gid_ex;
    "IBVERBS_1.11" fn _ibv_query_gid_table(context: *mut ibv_context, entries: *mut ibv_gid_entry, max_entries: usize, flags: u32, entry_size: usize) -> isize = v::query::query_gid_table;
    "IBVERBS_PRIVATE_34" fn ibv_query_gid_type(context: *mut ibv_context, port: u8, index: c_uint, gid_type: *mut u32) -> c_int = v::query::query_gid_type;
    "IBVERBS_1.1" fn ibv_query_pkey(context: *mut ibv_context, port: u8, index: c_int, pkey: *mut u16) -> c_int = v::query::query_pkey;
    "IBVERBS_1.5" fn ibv_get_pkey_index(context: *mut ibv_context, port: u8, pkey: u16) -> c_int = v::query::get_pkey_index;

    // Protection domains and memory regions.
    "IBVERBS_1.1" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd = v::pd::alloc_pd;
    "IBVERBS_1.1" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int = v::pd::dealloc_pd;
    "IBVERBS_1.1" fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr = v::pd::reg_mr;
    "IBVERBS_1.7" fn ibv_reg_mr_iova(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_int) -> *mut ibv_mr = v::pd::reg_mr_iova;
    "IBVERBS_1.8" fn ibv_reg_mr_iova2(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_uint) -> *mut ibv_mr = v::pd::reg_mr_iova2;
    "IBVERBS_1.1" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int = v::pd::dereg_mr;
    "IBVERBS_1.1" fn ibv_rereg_mr(mr: *mut ibv_mr, flags: c_int, pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> c_int = v::pd::rereg_mr;
    "IBVERBS_1.12" fn ibv_reg_dmabuf_mr(pd: *mut ibv_pd, offset: u64, length: usize, iova: u64, fd: c_int, access: c_int) -> *mut ibv_mr = v::misc::reg_dmabuf_mr;

    // Completion queues and channels.
    "IBVERBS_1.0" fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel = v::channel::create_comp_channel;
    "IBVERBS_1.0" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int = v::channel::destroy_comp_channel;
    "IBVERBS_1.1" fn ibv_create_cq(context: *mut ibv_context, cqe: c_int, cq_context: *mut c_void, channel: *mut ibv_comp_channel, comp_vector: c_int) -> *mut ibv_cq = v::cq::create_cq;
    "IBVERBS_1.1" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int = v::cq::resize_cq;
    "IBVERBS_1.1" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int = v::cq::destroy_cq;
    "IBVERBS_1.1" fn ibv_get_cq_event(channel: *mut ibv_comp_channel, cq: *mut *mut ibv_cq, cq_context: *mut *mut c_void) -> c_int = v::channel::get_cq_event;
    "IBVERBS_1.1" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) = v::channel::ack_cq_events;

    // Shared receive queues.
    "IBVERBS_1.1" fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq = v::srq::create_srq;
    "IBVERBS_1.1" fn ibv_modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int = v::srq::modify_srq;
    "IBVERBS_1.1" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int = v::srq::query_srq;
    "IBVERBS_1.1" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int = v::srq::destroy_srq;

    // Queue pairs.
    "IBVERBS_1.1" fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp = v::qp::create_qp;
    "IBVERBS_1.6" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex = v::qp::qp_to_qp_ex;
    "IBVERBS_1.1" fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int = v::qp::modify_qp;
    "IBVERBS_1.1" fn ibv_query_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int, init_attr: *mut ibv_qp_init_attr) -> c_int = v::qp::query_qp;
    "IBVERBS_1.1" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int = v::qp::destroy_qp;
    "IBVERBS_1.14" fn ibv_query_qp_data_in_order(qp: *mut ibv_qp, op: ibv_wr_opcode, flags: u32) -> c_int = v::misc::query_qp_data_in_order;
    "IBVERBS_1.10" fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int = v::misc::query_ece;
    "IBVERBS_1.10" fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int = v::misc::set_ece;
    "IBVERBS_1.1" fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int = v::misc::attach_mcast;
    "IBVERBS_1.1" fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int = v::misc::detach_mcast;

    // Address handles.
    "IBVERBS_1.1" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah = v::ah::create_ah;
    "IBVERBS_1.1" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int = v::ah::destroy_ah;
    "IBVERBS_1.1" fn ibv_init_ah_from_wc(context: *mut ibv_context, port: u8, wc: *mut ibv_wc, grh: *mut ibv_grh, attr: *mut ibv_ah_attr) -> c_int = v::ah::init_ah_from_wc;
    "IBVERBS_1.1" fn ibv_create_ah_from_wc(pd: *mut ibv_pd, wc: *mut ibv_wc, grh: *mut ibv_grh, port: u8) -> *mut ibv_ah = v::ah::create_ah_from_wc;
    "IBVERBS_1.1" fn ibv_resolve_eth_l2_from_gid(context: *mut ibv_context, attr: *mut ibv_ah_attr, eth_mac: *mut u8, vid: *mut u16) -> c_int = v::misc::resolve_eth_l2_from_gid;

    // Names, rates, fork, sysfs, kernel ABI conversions.
    "IBVERBS_1.1" fn ibv_wc_status_str(status: ibv_wc_status) -> *const c_char = v::strings::wc_status_str;
    "IBVERBS_1.1" fn ibv_event_type_str(event: ibv_event_type) -> *const c_char = v::strings::event_type_str;
    "IBVERBS_1.1" fn ibv_node_type_str(node_type: ibv_node_type) -> *const c_char = v::strings::node_type_str;
    "IBVERBS_1.1" fn ibv_port_state_str(port_state: ibv_port_state) -> *const c_char = v::strings::port_state_str;
    "IBVERBS_1.0" fn ibv_rate_to_mult(rate: ibv_rate) -> c_int = v::strings::rate_to_mult;
    "IBVERBS_1.0" fn mult_to_ibv_rate(mult: c_int) -> ibv_rate = v::strings::mult_to_rate;
    "IBVERBS_1.1" fn ibv_rate_to_mbps(rate: ibv_rate) -> c_int = v::strings::rate_to_mbps;
    "IBVERBS_1.1" fn mbps_to_ibv_rate(mbps: c_int) -> ibv_rate = v::strings::mbps_to_rate;
    "IBVERBS_1.1" fn ibv_fork_init() -> c_int = v::misc::fork_init;
    "IBVERBS_1.13" fn ibv_is_fork_initialized() -> ibv_fork_status = v::misc::is_fork_initialized;
    "IBVERBS_1.1" fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int = v::misc::dontfork_range;
    "IBVERBS_1.1" fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int = v::misc::dofork_range;
    "IBVERBS_1.0" fn ibv_get_sysfs_path() -> *const c_char = v::misc::get_sysfs_path;
    "IBVERBS_1.0" fn ibv_read_sysfs_file(dir: *const c_char, file: *const c_char, buf: *mut c_char, size: usize) -> c_int = v::misc::read_sysfs_file;
    "IBVERBS_1.1" fn ibv_copy_ah_attr_from_kern(dst: *mut ibv_ah_attr, src: *mut ib_uverbs_ah_attr) = v::misc::copy_ah_attr_from_kern;
    "IBVERBS_1.0" fn ibv_copy_qp_attr_from_kern(dst: *mut ibv_qp_attr, src: *mut ib_uverbs_qp_attr) = v::misc::copy_qp_attr_from_kern;
    "IBVERBS_1.0" fn ibv_copy_path_rec_from_kern(dst: *mut ibv_sa_path_rec, src: *mut ib_user_path_rec) = v::misc::copy_path_rec_from_kern;
    "IBVERBS_1.0" fn ibv_copy_path_rec_to_kern(dst: *mut ib_user_path_rec, src: *mut ibv_sa_path_rec) = v::misc::copy_path_rec_to_kern;

    // Sharing objects across processes: not possible on urdma.
    "IBVERBS_1.10" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context = v::misc::import_device;
    "IBVERBS_1.10" fn ibv_import_pd(context: *mut ibv_context, handle: u32) -> *mut ibv_pd = v::misc::import_pd;
    "IBVERBS_1.10" fn ibv_import_mr(pd: *mut ibv_pd, handle: u32) -> *mut ibv_mr = v::misc::import_mr;
    "IBVERBS_1.13" fn ibv_import_dm(context: *mut ibv_context, handle: u32) -> *mut ibv_dm = v::misc::import_dm;
    "IBVERBS_1.10" fn ibv_unimport_pd(pd: *mut ibv_pd) = v::misc::unimport_pd;
    "IBVERBS_1.10" fn ibv_unimport_mr(mr: *mut ibv_mr) = v::misc::unimport_mr;
    "IBVERBS_1.13" fn ibv_unimport_dm(dm: *mut ibv_dm) = v::misc::unimport_dm;

    // The provider interface: no kernel driver, no providers.
    "IBVERBS_PRIVATE_34" fn verbs_register_driver_34(ops: *const c_void) = v::stubs::register_driver;
    "IBVERBS_PRIVATE_34" fn _verbs_init_and_alloc_context(device: *mut c_void, cmd_fd: c_int, size: usize, offset: *mut c_void, driver_id: u32) -> *mut c_void = v::stubs::init_and_alloc_context;
    "IBVERBS_PRIVATE_34" fn verbs_open_device(device: *mut c_void, private_data: *mut c_void) -> *mut c_void = v::stubs::open_provider_device;
    "IBVERBS_PRIVATE_34" fn verbs_init_cq(cq: *mut c_void, context: *mut c_void, channel: *mut c_void, cq_context: *mut c_void) = v::stubs::provider_noop;
    "IBVERBS_PRIVATE_34" fn verbs_set_ops(vctx: *mut c_void, ops: *mut c_void, unused1: *mut c_void, unused2: *mut c_void) = v::stubs::provider_noop;
    "IBVERBS_PRIVATE_34" fn verbs_uninit_context(vctx: *mut c_void, unused1: *mut c_void, unused2: *mut c_void, unused3: *mut c_void) = v::stubs::provider_noop;
    "IBVERBS_PRIVATE_34" fn __ioctl_final_num_attrs(num_attrs: c_uint, link: *mut c_void) -> c_uint = v::stubs::ioctl_final_num_attrs;
    "IBVERBS_PRIVATE_34" fn execute_ioctl() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_advise_mr() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_alloc_dm() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_alloc_mw() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_alloc_pd() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_attach_mcast() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_close_xrcd() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_create_ah() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_create_counters() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_create_cq() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_create_cq_ex() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_create_flow() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_create_flow_action_esp() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_create_qp() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_create_qp_ex() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_create_qp_ex2() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_create_rwq_ind_table() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_create_srq() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_create_srq_ex() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_create_wq() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_dealloc_mw() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_dealloc_pd() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_dereg_mr() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_destroy_ah() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_destroy_counters() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_destroy_cq() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_destroy_flow() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_destroy_flow_action() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_destroy_qp() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_destroy_rwq_ind_table() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_destroy_srq() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_destroy_wq() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_detach_mcast() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_free_dm() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_get_context() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_modify_cq() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_modify_flow_action_esp() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_modify_qp() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_modify_qp_ex() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_modify_srq() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_modify_wq() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_open_qp() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_open_xrcd() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_poll_cq() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_post_recv() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_post_send() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_post_srq_recv() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_query_context() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_query_device_any() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_query_mr() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_query_port() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_query_qp() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_query_srq() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_read_counters() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_reg_dm_mr() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_reg_dmabuf_mr() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_reg_mr() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_req_notify_cq() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_rereg_mr() -> c_int = v::stubs::cmd_unsupported;
    "IBVERBS_PRIVATE_34" fn ibv_cmd_resize_cq() -> c_int = v::stubs::cmd_unsupported;
}

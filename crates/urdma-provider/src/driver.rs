//! The provider interface of the system libibverbs (rdma-core 44,
//! `IBVERBS_PRIVATE_34`), which no installed header declares: the
//! structures a provider shares with the library, declared here by hand
//! and pinned by the size and offset tests below, and the library
//! functions the provider calls.
//!
//! The library's private ABI changes its symbol version whenever these
//! structures change, so linking `verbs_register_driver_34` ties this
//! provider to the layouts below.

#![allow(non_camel_case_types, missing_docs)]

use std::os::raw::{c_char, c_int, c_uint, c_void};
use urdma_abi::{urdma_create_qp_cmd, urdma_create_resp, urdma_reg_mr_cmd};
use urdma_verbs::sys::*;

/// Length of the name fields of `verbs_sysfs_dev`.
pub const SYSFS_NAME_MAX: usize = 64;
/// Length of the path fields of `verbs_sysfs_dev`.
pub const SYSFS_PATH_MAX: usize = 256;

/// `verbs_match_ent::kind`: end of the match table.
pub const VERBS_MATCH_SENTINEL: u8 = 0;
/// `verbs_match_ent::kind`: `u.modalias` is an fnmatch pattern matched
/// against the device's modalias, and against `rdma_device:N<name>`.
pub const VERBS_MATCH_MODALIAS: u8 = 2;

/// An intrusive list link of the library's lists.
#[repr(C)]
pub struct list_node {
    pub next: *mut list_node,
    pub prev: *mut list_node,
}

/// One entry of a provider's match table.
#[repr(C)]
pub struct verbs_match_ent {
    pub driver_data: *mut c_void,
    /// `u.modalias` (a C string) or `u.driver_id`, by `kind`.
    pub u: u64,
    pub vendor: u16,
    pub device: u16,
    pub kind: u8,
}

/// An RDMA device the library found in sysfs (only read here).
#[repr(C)]
pub struct verbs_sysfs_dev {
    pub entry: list_node,
    pub provider_data: *mut c_void,
    pub match_: *const verbs_match_ent,
    pub flags: c_uint,
    pub sysfs_name: [c_char; SYSFS_NAME_MAX],
    pub sysfs_cdev: libc::dev_t,
    pub ibdev_name: [c_char; SYSFS_NAME_MAX],
    pub ibdev_path: [c_char; SYSFS_PATH_MAX],
    pub modalias: [c_char; 512],
    pub node_guid: u64,
    pub driver_id: u32,
    pub node_type: ibv_node_type,
    pub ibdev_idx: c_int,
    pub num_ports: u32,
    pub abi_ver: u32,
    pub time_created: libc::timespec,
}

/// What a provider registers: its name, kernel ABI range, how its devices
/// are recognised and how devices and contexts are made.
#[repr(C)]
pub struct verbs_device_ops {
    pub name: *const c_char,
    pub match_min_abi_version: u32,
    pub match_max_abi_version: u32,
    pub match_table: *const verbs_match_ent,
    pub static_providers: *const *const verbs_device_ops,
    pub match_device: Option<unsafe extern "C" fn(*mut verbs_sysfs_dev) -> bool>,
    pub alloc_context:
        Option<unsafe extern "C" fn(*mut ibv_device, c_int, *mut c_void) -> *mut verbs_context>,
    pub import_context: Option<unsafe extern "C" fn(*mut ibv_device, c_int) -> *mut verbs_context>,
    pub alloc_device: Option<unsafe extern "C" fn(*mut verbs_sysfs_dev) -> *mut verbs_device>,
    pub uninit_device: Option<unsafe extern "C" fn(*mut verbs_device)>,
}

/// A device as the library holds it; the provider allocates it (zeroed)
/// and the library fills it.
#[repr(C)]
pub struct verbs_device {
    pub device: ibv_device,
    pub ops: *const verbs_device_ops,
    pub refcount: c_int,
    pub entry: list_node,
    pub sysfs: *mut verbs_sysfs_dev,
    pub core_support: u64,
}

/// A memory region as the library's `ibv_dereg_mr`/`ibv_rereg_mr` pass it
/// to the provider: `struct ibv_mr` first.
#[repr(C)]
pub struct verbs_mr {
    pub ibv_mr: ibv_mr,
    pub mr_type: c_int,
    pub access: c_int,
}

/// The provider's operations, in the library's order. Operations left
/// `None` get the library's default (EOPNOTSUPP). Those this provider
/// does not implement are typed as bare function pointers.
#[repr(C)]
#[derive(Default)]
pub struct verbs_context_ops {
    pub advise_mr: Option<unsafe extern "C" fn()>,
    pub alloc_dm: Option<unsafe extern "C" fn()>,
    pub alloc_mw: Option<unsafe extern "C" fn()>,
    pub alloc_null_mr: Option<unsafe extern "C" fn()>,
    pub alloc_parent_domain: Option<unsafe extern "C" fn()>,
    pub alloc_pd: Option<unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd>,
    pub alloc_td: Option<unsafe extern "C" fn()>,
    pub async_event: Option<unsafe extern "C" fn()>,
    pub attach_counters_point_flow: Option<unsafe extern "C" fn()>,
    pub attach_mcast: Option<unsafe extern "C" fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int>,
    pub bind_mw: Option<unsafe extern "C" fn()>,
    pub close_xrcd: Option<unsafe extern "C" fn()>,
    pub cq_event: Option<unsafe extern "C" fn()>,
    pub create_ah: Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah>,
    pub create_counters: Option<unsafe extern "C" fn()>,
    pub create_cq: Option<
        unsafe extern "C" fn(*mut ibv_context, c_int, *mut ibv_comp_channel, c_int) -> *mut ibv_cq,
    >,
    pub create_cq_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex>,
    pub create_flow: Option<unsafe extern "C" fn()>,
    pub create_flow_action_esp: Option<unsafe extern "C" fn()>,
    pub create_qp: Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp>,
    pub create_qp_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp>,
    pub create_rwq_ind_table: Option<unsafe extern "C" fn()>,
    pub create_srq:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq>,
    pub create_srq_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq>,
    pub create_wq: Option<unsafe extern "C" fn()>,
    pub dealloc_mw: Option<unsafe extern "C" fn()>,
    pub dealloc_pd: Option<unsafe extern "C" fn(*mut ibv_pd) -> c_int>,
    pub dealloc_td: Option<unsafe extern "C" fn()>,
    pub dereg_mr: Option<unsafe extern "C" fn(*mut verbs_mr) -> c_int>,
    pub destroy_ah: Option<unsafe extern "C" fn(*mut ibv_ah) -> c_int>,
    pub destroy_counters: Option<unsafe extern "C" fn()>,
    pub destroy_cq: Option<unsafe extern "C" fn(*mut ibv_cq) -> c_int>,
    pub destroy_flow: Option<unsafe extern "C" fn()>,
    pub destroy_flow_action: Option<unsafe extern "C" fn()>,
    pub destroy_qp: Option<unsafe extern "C" fn(*mut ibv_qp) -> c_int>,
    pub destroy_rwq_ind_table: Option<unsafe extern "C" fn()>,
    pub destroy_srq: Option<unsafe extern "C" fn(*mut ibv_srq) -> c_int>,
    pub destroy_wq: Option<unsafe extern "C" fn()>,
    pub detach_mcast: Option<unsafe extern "C" fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int>,
    pub free_context: Option<unsafe extern "C" fn(*mut ibv_context)>,
    pub free_dm: Option<unsafe extern "C" fn()>,
    pub get_srq_num: Option<unsafe extern "C" fn()>,
    pub import_dm: Option<unsafe extern "C" fn()>,
    pub import_mr: Option<unsafe extern "C" fn()>,
    pub import_pd: Option<unsafe extern "C" fn()>,
    pub modify_cq: Option<unsafe extern "C" fn()>,
    pub modify_flow_action_esp: Option<unsafe extern "C" fn()>,
    pub modify_qp: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int>,
    pub modify_qp_rate_limit: Option<unsafe extern "C" fn()>,
    pub modify_srq: Option<unsafe extern "C" fn(*mut ibv_srq, *mut ibv_srq_attr, c_int) -> c_int>,
    pub modify_wq: Option<unsafe extern "C" fn()>,
    pub open_qp: Option<unsafe extern "C" fn()>,
    pub open_xrcd: Option<unsafe extern "C" fn()>,
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    pub post_recv:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    pub post_send:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
    pub post_srq_ops: Option<unsafe extern "C" fn()>,
    pub post_srq_recv: Option<
        unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int,
    >,
    pub query_device_ex: Option<
        unsafe extern "C" fn(
            *mut ibv_context,
            *const ibv_query_device_ex_input,
            *mut ibv_device_attr_ex,
            usize,
        ) -> c_int,
    >,
    pub query_ece: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_ece) -> c_int>,
    pub query_port: Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int>,
    pub query_qp: Option<
        unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int,
    >,
    pub query_qp_data_in_order:
        Option<unsafe extern "C" fn(*mut ibv_qp, ibv_wr_opcode, u32) -> c_int>,
    pub query_rt_values: Option<unsafe extern "C" fn()>,
    pub query_srq: Option<unsafe extern "C" fn(*mut ibv_srq, *mut ibv_srq_attr) -> c_int>,
    pub read_counters: Option<unsafe extern "C" fn()>,
    pub reg_dm_mr: Option<unsafe extern "C" fn()>,
    pub reg_dmabuf_mr: Option<unsafe extern "C" fn()>,
    pub reg_mr:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, u64, c_int) -> *mut ibv_mr>,
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    pub rereg_mr: Option<
        unsafe extern "C" fn(*mut verbs_mr, c_int, *mut ibv_pd, *mut c_void, usize, c_int) -> c_int,
    >,
    pub resize_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    pub set_ece: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_ece) -> c_int>,
    pub unimport_dm: Option<unsafe extern "C" fn()>,
    pub unimport_mr: Option<unsafe extern "C" fn()>,
    pub unimport_pd: Option<unsafe extern "C" fn()>,
}

/// A command of the write interface that carries only its header and
/// response pointer (no core payload, no driver data): `struct
/// ibv_get_context` and `struct ibv_alloc_pd`.
#[repr(C)]
#[derive(Default)]
pub struct HeaderOnlyCmd {
    pub command: u32,
    pub in_words: u16,
    pub out_words: u16,
    pub response: u64,
}

/// `struct ibv_get_context`.
pub type ibv_get_context = HeaderOnlyCmd;

/// `struct ibv_alloc_pd`.
pub type ibv_alloc_pd = HeaderOnlyCmd;

/// `struct ib_uverbs_get_context_resp`, with no driver data.
#[repr(C)]
#[derive(Default)]
pub struct ib_uverbs_get_context_resp {
    pub async_fd: u32,
    pub num_comp_vectors: u32,
}

/// `struct ibv_create_cq`: the CREATE_CQ command of the write interface
/// (header and core payload), with no driver data.
#[repr(C)]
pub struct ibv_create_cq {
    pub command: u32,
    pub in_words: u16,
    pub out_words: u16,
    pub user_handle: u64,
    pub cqe: u32,
    pub comp_vector: u32,
    pub comp_channel: i32,
    pub reserved: u32,
}

/// `struct ib_uverbs_create_cq_resp` followed by urdma.ko's driver data
/// (the CQ's number).
#[repr(C)]
#[derive(Default)]
pub struct CreateCqResp {
    pub cq_handle: u32,
    pub cqe: u32,
    pub drv: urdma_create_resp,
}

/// `struct ib_uverbs_alloc_pd_resp`.
#[repr(C)]
#[derive(Default)]
pub struct ib_uverbs_alloc_pd_resp {
    pub pd_handle: u32,
}

/// `struct ibv_create_qp` (header and the 56-byte core payload, which
/// the library fills) followed by urdma.ko's driver data (the NIC's QP
/// number).
#[repr(C)]
#[derive(Default)]
pub struct CreateQpCmd {
    pub base: [u64; 8],
    pub drv: urdma_create_qp_cmd,
}

/// `struct ibv_reg_mr` (header and the 40-byte core payload, which the
/// library fills) followed by urdma.ko's driver data (the NIC's keys of
/// the region).
#[repr(C)]
#[derive(Default)]
pub struct RegMrCmd {
    pub base: [u64; 6],
    pub drv: urdma_reg_mr_cmd,
}

/// `struct ib_uverbs_reg_mr_resp`, with no driver data.
#[repr(C)]
#[derive(Default)]
pub struct ib_uverbs_reg_mr_resp {
    pub mr_handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ib_uverbs_create_qp_resp` (32 bytes, which the library reads)
/// followed by urdma.ko's driver data (the QP's number).
#[repr(C)]
#[derive(Default)]
pub struct CreateQpResp {
    pub base: [u32; 8],
    pub drv: urdma_create_resp,
}

/// `struct ibv_modify_qp`: header and the 112-byte core payload, which
/// the library fills; no driver data.
#[repr(C)]
#[derive(Default)]
pub struct ibv_modify_qp {
    pub base: [u64; 15],
}

/// `struct ibv_create_srq`: header and the 32-byte core payload; no
/// driver data.
#[repr(C)]
#[derive(Default)]
pub struct ibv_create_srq {
    pub base: [u64; 5],
}

/// `struct ib_uverbs_create_srq_resp` followed by urdma.ko's driver data
/// (the SRQ's number).
#[repr(C)]
#[derive(Default)]
pub struct CreateSrqResp {
    pub srq_handle: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    pub srqn: u32,
    pub drv: urdma_create_resp,
}

#[link(name = "ibverbs")]
extern "C" {
    /// Register a provider (called from its ELF constructor).
    pub fn verbs_register_driver_34(ops: *const verbs_device_ops);
    /// Allocate `alloc_size` zeroed bytes and initialise the
    /// `verbs_context` at byte offset `context_offset` (passed as a
    /// pointer value) in them. Takes `cmd_fd`: on failure closes it and
    /// returns NULL. The memory is freed with `free()`.
    pub fn _verbs_init_and_alloc_context(
        device: *mut ibv_device,
        cmd_fd: c_int,
        alloc_size: usize,
        context_offset: *mut verbs_context,
        driver_id: u32,
    ) -> *mut c_void;
    /// Undo `verbs_init_context` (closes the command and async files).
    pub fn verbs_uninit_context(context: *mut verbs_context);
    /// Install the provider's operations.
    pub fn verbs_set_ops(context: *mut verbs_context, ops: *const verbs_context_ops);
    /// Create the kernel's user context on `cmd_fd`.
    pub fn ibv_cmd_get_context(
        context: *mut verbs_context,
        cmd: *mut ibv_get_context,
        cmd_size: usize,
        resp: *mut ib_uverbs_get_context_resp,
        resp_size: usize,
    ) -> c_int;
    /// Create the kernel's CQ for `cq` (sets its context, handle and cqe),
    /// with `channel` (the library's, or NULL) for its completion events.
    /// Returns 0 or an errno.
    pub fn ibv_cmd_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
        cq: *mut ibv_cq,
        cmd: *mut ibv_create_cq,
        cmd_size: usize,
        resp: *mut CreateCqResp,
        resp_size: usize,
    ) -> c_int;
    /// Destroy the kernel's CQ of `cq`, waiting until every completion
    /// and asynchronous event it reported was acknowledged.
    pub fn ibv_cmd_destroy_cq(cq: *mut ibv_cq) -> c_int;
    /// Allocate the kernel's PD for `pd` (sets its context and handle).
    pub fn ibv_cmd_alloc_pd(
        context: *mut ibv_context,
        pd: *mut ibv_pd,
        cmd: *mut ibv_alloc_pd,
        cmd_size: usize,
        resp: *mut ib_uverbs_alloc_pd_resp,
        resp_size: usize,
    ) -> c_int;
    /// Free the kernel's PD of `pd`.
    pub fn ibv_cmd_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    /// Create the kernel's QP for `qp` (sets its handle, number, state,
    /// and `attr->cap` from the kernel's answer).
    pub fn ibv_cmd_create_qp(
        pd: *mut ibv_pd,
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_init_attr,
        cmd: *mut CreateQpCmd,
        cmd_size: usize,
        resp: *mut CreateQpResp,
        resp_size: usize,
    ) -> c_int;
    /// Modify the kernel's QP of `qp`.
    pub fn ibv_cmd_modify_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        cmd: *mut ibv_modify_qp,
        cmd_size: usize,
    ) -> c_int;
    /// Destroy the kernel's QP of `qp`, waiting until every asynchronous
    /// event it reported was acknowledged.
    pub fn ibv_cmd_destroy_qp(qp: *mut ibv_qp) -> c_int;
    /// Create the kernel's SRQ for `srq`.
    pub fn ibv_cmd_create_srq(
        pd: *mut ibv_pd,
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_init_attr,
        cmd: *mut ibv_create_srq,
        cmd_size: usize,
        resp: *mut CreateSrqResp,
        resp_size: usize,
    ) -> c_int;
    /// Destroy the kernel's SRQ of `srq`.
    pub fn ibv_cmd_destroy_srq(srq: *mut ibv_srq) -> c_int;
    /// Register `vmr` in the kernel too.
    pub fn ibv_cmd_reg_mr(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        hca_va: u64,
        access: c_int,
        vmr: *mut verbs_mr,
        cmd: *mut RegMrCmd,
        cmd_size: usize,
        resp: *mut ib_uverbs_reg_mr_resp,
        resp_size: usize,
    ) -> c_int;
    /// Deregister the kernel's MR of `vmr`.
    pub fn ibv_cmd_dereg_mr(vmr: *mut verbs_mr) -> c_int;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn match_ent_layout() {
        assert_eq!(size_of::<verbs_match_ent>(), 24);
        assert_eq!(offset_of!(verbs_match_ent, u), 8);
        assert_eq!(offset_of!(verbs_match_ent, vendor), 16);
        assert_eq!(offset_of!(verbs_match_ent, device), 18);
        assert_eq!(offset_of!(verbs_match_ent, kind), 20);
    }

    #[test]
    fn sysfs_dev_layout() {
        assert_eq!(offset_of!(verbs_sysfs_dev, provider_data), 16);
        assert_eq!(offset_of!(verbs_sysfs_dev, match_), 24);
        assert_eq!(offset_of!(verbs_sysfs_dev, flags), 32);
        assert_eq!(offset_of!(verbs_sysfs_dev, sysfs_name), 36);
        assert_eq!(offset_of!(verbs_sysfs_dev, sysfs_cdev), 104);
        assert_eq!(offset_of!(verbs_sysfs_dev, ibdev_name), 112);
        assert_eq!(offset_of!(verbs_sysfs_dev, ibdev_path), 176);
        assert_eq!(offset_of!(verbs_sysfs_dev, modalias), 432);
        assert_eq!(offset_of!(verbs_sysfs_dev, node_guid), 944);
        assert_eq!(offset_of!(verbs_sysfs_dev, driver_id), 952);
        assert_eq!(offset_of!(verbs_sysfs_dev, node_type), 956);
        assert_eq!(offset_of!(verbs_sysfs_dev, ibdev_idx), 960);
        assert_eq!(offset_of!(verbs_sysfs_dev, num_ports), 964);
        assert_eq!(offset_of!(verbs_sysfs_dev, abi_ver), 968);
        assert_eq!(offset_of!(verbs_sysfs_dev, time_created), 976);
        assert_eq!(size_of::<verbs_sysfs_dev>(), 992);
    }

    #[test]
    fn device_ops_layout() {
        assert_eq!(offset_of!(verbs_device_ops, match_min_abi_version), 8);
        assert_eq!(offset_of!(verbs_device_ops, match_max_abi_version), 12);
        assert_eq!(offset_of!(verbs_device_ops, match_table), 16);
        assert_eq!(offset_of!(verbs_device_ops, static_providers), 24);
        assert_eq!(offset_of!(verbs_device_ops, match_device), 32);
        assert_eq!(offset_of!(verbs_device_ops, alloc_context), 40);
        assert_eq!(offset_of!(verbs_device_ops, import_context), 48);
        assert_eq!(offset_of!(verbs_device_ops, alloc_device), 56);
        assert_eq!(offset_of!(verbs_device_ops, uninit_device), 64);
        assert_eq!(size_of::<verbs_device_ops>(), 72);
    }

    #[test]
    fn device_layout() {
        assert_eq!(size_of::<ibv_device>(), 664);
        assert_eq!(offset_of!(verbs_device, ops), 664);
        assert_eq!(offset_of!(verbs_device, refcount), 672);
        assert_eq!(offset_of!(verbs_device, entry), 680);
        assert_eq!(offset_of!(verbs_device, sysfs), 696);
        assert_eq!(offset_of!(verbs_device, core_support), 704);
        assert_eq!(size_of::<verbs_device>(), 712);
    }

    #[test]
    fn mr_layout() {
        assert_eq!(offset_of!(verbs_mr, ibv_mr), 0);
        assert_eq!(offset_of!(verbs_mr, mr_type), size_of::<ibv_mr>());
        assert_eq!(size_of::<verbs_mr>(), 56);
    }

    #[test]
    fn context_ops_layout() {
        // 76 operations, every one a function pointer.
        assert_eq!(size_of::<verbs_context_ops>(), 76 * 8);
        assert_eq!(offset_of!(verbs_context_ops, advise_mr), 0);
        assert_eq!(offset_of!(verbs_context_ops, alloc_pd), 5 * 8);
        assert_eq!(offset_of!(verbs_context_ops, create_ah), 13 * 8);
        assert_eq!(offset_of!(verbs_context_ops, create_cq), 15 * 8);
        assert_eq!(offset_of!(verbs_context_ops, create_qp), 19 * 8);
        assert_eq!(offset_of!(verbs_context_ops, dealloc_pd), 26 * 8);
        assert_eq!(offset_of!(verbs_context_ops, dereg_mr), 28 * 8);
        assert_eq!(offset_of!(verbs_context_ops, destroy_qp), 34 * 8);
        assert_eq!(offset_of!(verbs_context_ops, free_context), 39 * 8);
        assert_eq!(offset_of!(verbs_context_ops, modify_qp), 47 * 8);
        assert_eq!(offset_of!(verbs_context_ops, poll_cq), 53 * 8);
        assert_eq!(offset_of!(verbs_context_ops, post_send), 55 * 8);
        assert_eq!(offset_of!(verbs_context_ops, query_device_ex), 58 * 8);
        assert_eq!(offset_of!(verbs_context_ops, query_port), 60 * 8);
        assert_eq!(offset_of!(verbs_context_ops, reg_mr), 68 * 8);
        assert_eq!(offset_of!(verbs_context_ops, req_notify_cq), 69 * 8);
        assert_eq!(offset_of!(verbs_context_ops, unimport_pd), 75 * 8);
    }

    #[test]
    fn create_cq_layout() {
        assert_eq!(size_of::<ibv_create_cq>(), 32);
        assert_eq!(offset_of!(ibv_create_cq, user_handle), 8);
        assert_eq!(offset_of!(ibv_create_cq, comp_channel), 24);
        assert_eq!(offset_of!(CreateCqResp, drv), 8);
    }

    #[test]
    fn object_command_layouts() {
        // sizeof(struct ibv_x) = 8-byte header + the kernel's core payload
        // (<rdma/ib_user_verbs.h>: alloc_pd 8, create_qp 56, modify_qp
        // 112, create_srq 32; responses: alloc_pd 4, create_qp 32,
        // create_srq 16).
        assert_eq!(size_of::<ibv_alloc_pd>(), 16);
        assert_eq!(size_of::<ib_uverbs_alloc_pd_resp>(), 4);
        assert_eq!(offset_of!(CreateQpCmd, drv), 64);
        assert_eq!(offset_of!(RegMrCmd, drv), 48);
        assert_eq!(size_of::<ib_uverbs_reg_mr_resp>(), 12);
        assert_eq!(offset_of!(CreateQpResp, drv), 32);
        assert_eq!(size_of::<ibv_modify_qp>(), 120);
        assert_eq!(size_of::<ibv_create_srq>(), 40);
        assert_eq!(offset_of!(CreateSrqResp, drv), 16);
    }

    #[test]
    fn get_context_layout() {
        assert_eq!(size_of::<ibv_get_context>(), 16);
        assert_eq!(size_of::<ib_uverbs_get_context_resp>(), 8);
    }
}

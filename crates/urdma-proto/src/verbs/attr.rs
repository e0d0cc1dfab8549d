//! Attribute structures of devices, ports and QPs, shaped like their
//! verbs.h counterparts.

use super::gid::Gid;
use crate::types::{AccessFlags, Mtu, QpState};
use serde::{Deserialize, Serialize};

/// Capacities of a QP's work queues (`ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send WR.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive WR.
    pub max_recv_sge: u32,
    /// Largest inline send.
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        }
    }
}

/// Address vector (`ibv_ah_attr` with its GRH): where a QP's packets go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddressVector {
    /// Destination GID (the peer's IP address on RoCE v2).
    pub dgid: Gid,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label.
    pub flow_label: u32,
    /// Service level.
    pub sl: u8,
    /// Port number (1).
    pub port_num: u8,
    /// UDP port of the peer device (4791 unless the peer was configured otherwise).
    pub udp_port: u16,
}

impl Default for AddressVector {
    fn default() -> Self {
        AddressVector {
            dgid: Gid::default(),
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
            port_num: 1,
            udp_port: urdma_wire::ROCEV2_UDP_PORT,
        }
    }
}

/// QP attributes (`ibv_qp_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpAttr {
    /// Target (modify) or current (query) state.
    pub qp_state: QpState,
    /// Current state as the caller believes it (checked with CUR_STATE).
    pub cur_qp_state: QpState,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Expected receive PSN.
    pub rq_psn: u32,
    /// Next send PSN.
    pub sq_psn: u32,
    /// Remote QP number.
    pub dest_qp_num: u32,
    /// Remote access allowed on this QP.
    pub qp_access_flags: AccessFlags,
    /// Queue capacities.
    pub cap: QpCap,
    /// Primary path.
    pub ah_attr: AddressVector,
    /// P_Key index.
    pub pkey_index: u16,
    /// Ask for an SQ drained event.
    pub en_sqd_async_notify: bool,
    /// SQ draining (query only).
    pub sq_draining: bool,
    /// Outstanding READ/atomic requests this QP may issue.
    pub max_rd_atomic: u8,
    /// Incoming READ/atomic requests this QP may hold.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code this QP's responder sends.
    pub min_rnr_timer: u8,
    /// Port number (1).
    pub port_num: u8,
    /// Local ACK timeout code: 4.096 us * 2^timeout (0 = infinite).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::Mtu1024,
            qkey: 0,
            rq_psn: 0,
            sq_psn: 0,
            dest_qp_num: 0,
            qp_access_flags: AccessFlags::empty(),
            cap: QpCap::default(),
            ah_attr: AddressVector::default(),
            pkey_index: 0,
            en_sqd_async_notify: false,
            sq_draining: false,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            port_num: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
        }
    }
}

/// Device attributes and limits (`ibv_device_attr`), the limits the
/// engine enforces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID (derived from the device address).
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// Largest MR.
    pub max_mr_size: u64,
    /// Supported page sizes.
    pub page_size_cap: u64,
    /// Vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// QPs per device.
    pub max_qp: u32,
    /// WRs per queue.
    pub max_qp_wr: u32,
    /// SGEs per WR.
    pub max_sge: u32,
    /// CQs per device.
    pub max_cq: u32,
    /// Entries per CQ.
    pub max_cqe: u32,
    /// MRs per device.
    pub max_mr: u32,
    /// Memory windows per device.
    pub max_mw: u32,
    /// PDs per device.
    pub max_pd: u32,
    /// Incoming READ/atomic per QP.
    pub max_qp_rd_atom: u32,
    /// Outgoing READ/atomic per QP.
    pub max_qp_init_rd_atom: u32,
    /// Largest inline send.
    pub max_inline_data: u32,
    /// Physical ports.
    pub phys_port_cnt: u8,
    /// Active MTU of port 1: what the interface of the device's address
    /// carries (see [`crate::types::Mtu::for_netdev`]). A QP's path MTU may not
    /// exceed it; UD QPs use it.
    pub port_mtu: Mtu,
}

impl Default for DeviceAttr {
    fn default() -> Self {
        DeviceAttr {
            fw_ver: concat!("urdma ", env!("CARGO_PKG_VERSION")).to_string(),
            node_guid: 0,
            sys_image_guid: 0,
            max_mr_size: 1 << 40,
            page_size_cap: 0xffff_f000,
            vendor_id: 0xffffff,
            vendor_part_id: 0,
            hw_ver: 0,
            max_qp: 16384,
            max_qp_wr: 16384,
            max_sge: 32,
            max_cq: 16384,
            max_cqe: 1 << 20,
            max_mr: 1 << 20,
            max_mw: 1 << 16,
            max_pd: 1 << 16,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            max_inline_data: 512,
            phys_port_cnt: 1,
            port_mtu: Mtu::Mtu4096,
        }
    }
}

/// The largest message a urdma port carries (`ibv_port_attr::max_msg_sz`).
pub const MAX_MSG_SZ: u32 = 1 << 31;

/// Port attributes (`ibv_port_attr`) of a RoCE v2 port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortAttr {
    /// Port state (4 = ACTIVE).
    pub state: u8,
    /// Largest path MTU.
    pub max_mtu: Mtu,
    /// Active MTU.
    pub active_mtu: Mtu,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// Largest message.
    pub max_msg_sz: u32,
    /// Physical state (5 = LINK_UP).
    pub phys_state: u8,
    /// Link layer: Ethernet.
    pub link_layer_ethernet: bool,
}

//! Checking and applying the attributes of a QP modification.

use super::QpCtx;
use crate::error::{Error, Result};
use crate::types::{AccessFlags, QpAttrMask as M};
use crate::verbs::{DeviceAttr, QpAttr};
use std::net::SocketAddr;
use urdma_wire::{PSN_MASK, QPN_MASK};

/// Check the values `mask` selects in `a` against IB ranges, the device
/// limits `dev` and the device's GID table `gids` (the source GID index
/// must name an entry of the destination's address family).
pub(super) fn validate_values(
    a: &QpAttr,
    mask: M,
    dev: &DeviceAttr,
    gids: &[SocketAddr],
) -> Result<()> {
    if mask.contains(M::PORT) && a.port_num != 1 {
        return Err(Error::inval(format!("port {} does not exist", a.port_num)));
    }
    if mask.contains(M::PKEY_INDEX) && a.pkey_index != 0 {
        return Err(Error::inval(format!(
            "pkey index {} out of range",
            a.pkey_index
        )));
    }
    if mask.contains(M::RQ_PSN) && a.rq_psn > PSN_MASK {
        return Err(Error::inval("rq_psn wider than 24 bits"));
    }
    if mask.contains(M::SQ_PSN) && a.sq_psn > PSN_MASK {
        return Err(Error::inval("sq_psn wider than 24 bits"));
    }
    if mask.contains(M::DEST_QPN) && a.dest_qp_num > QPN_MASK {
        return Err(Error::inval("dest_qp_num wider than 24 bits"));
    }
    if mask.contains(M::TIMEOUT) && a.timeout > 31 {
        return Err(Error::inval("timeout above 31"));
    }
    if mask.contains(M::RETRY_CNT) && a.retry_cnt > 7 {
        return Err(Error::inval("retry_cnt above 7"));
    }
    if mask.contains(M::RNR_RETRY) && a.rnr_retry > 7 {
        return Err(Error::inval("rnr_retry above 7"));
    }
    if mask.contains(M::MIN_RNR_TIMER) && a.min_rnr_timer > 31 {
        return Err(Error::inval("min_rnr_timer above 31"));
    }
    if mask.contains(M::MAX_QP_RD_ATOMIC) && u32::from(a.max_rd_atomic) > dev.max_qp_init_rd_atom {
        return Err(Error::inval(format!(
            "max_rd_atomic above {}",
            dev.max_qp_init_rd_atom
        )));
    }
    if mask.contains(M::MAX_DEST_RD_ATOMIC) && u32::from(a.max_dest_rd_atomic) > dev.max_qp_rd_atom
    {
        return Err(Error::inval(format!(
            "max_dest_rd_atomic above {}",
            dev.max_qp_rd_atom
        )));
    }
    if mask.contains(M::PATH_MTU) && a.path_mtu > dev.port_mtu {
        return Err(Error::inval(format!(
            "path MTU {} above the port's active MTU {}",
            a.path_mtu.bytes(),
            dev.port_mtu.bytes()
        )));
    }
    if mask.contains(M::ACCESS_FLAGS) && !AccessFlags::all().contains(a.qp_access_flags) {
        return Err(Error::inval("unknown access flags"));
    }
    if mask.contains(M::AV) {
        let av = &a.ah_attr;
        if av.dgid.is_zero() {
            return Err(Error::inval("address vector without a destination GID"));
        }
        // Packets leave from the device's address of the destination's
        // family; the index names it in the device's own table, but a
        // kernel device's index is the kernel's table's, laid out by the
        // kernel, so only a device with no address of that family refuses.
        let v4 = av.dgid.to_ip().is_ipv4();
        if !gids.iter().any(|g| g.is_ipv4() == v4) {
            return Err(Error::inval(format!(
                "destination GID {} of an address family the device has no GID of (sgid index {})",
                av.dgid, av.sgid_index
            )));
        }
        if av.udp_port == 0 {
            return Err(Error::inval("UDP port 0"));
        }
    }
    Ok(())
}

/// Copy the values `mask` selects from `a` into the QP.
pub(super) fn apply(qp: &mut QpCtx, a: &QpAttr, mask: M) {
    let t = &mut qp.attr;
    if mask.contains(M::ACCESS_FLAGS) {
        t.qp_access_flags = a.qp_access_flags;
    }
    if mask.contains(M::PKEY_INDEX) {
        t.pkey_index = a.pkey_index;
    }
    if mask.contains(M::PORT) {
        t.port_num = a.port_num;
    }
    if mask.contains(M::QKEY) {
        t.qkey = a.qkey;
    }
    if mask.contains(M::AV) {
        t.ah_attr = a.ah_attr;
        qp.remote = Some(SocketAddr::new(a.ah_attr.dgid.to_ip(), a.ah_attr.udp_port));
    }
    if mask.contains(M::PATH_MTU) {
        t.path_mtu = a.path_mtu;
    }
    if mask.contains(M::TIMEOUT) {
        t.timeout = a.timeout;
    }
    if mask.contains(M::RETRY_CNT) {
        t.retry_cnt = a.retry_cnt;
    }
    if mask.contains(M::RNR_RETRY) {
        t.rnr_retry = a.rnr_retry;
    }
    if mask.contains(M::RQ_PSN) {
        t.rq_psn = a.rq_psn;
    }
    if mask.contains(M::SQ_PSN) {
        t.sq_psn = a.sq_psn;
    }
    if mask.contains(M::MAX_QP_RD_ATOMIC) {
        t.max_rd_atomic = a.max_rd_atomic;
    }
    if mask.contains(M::MAX_DEST_RD_ATOMIC) {
        t.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if mask.contains(M::MIN_RNR_TIMER) {
        t.min_rnr_timer = a.min_rnr_timer;
    }
    if mask.contains(M::DEST_QPN) {
        t.dest_qp_num = a.dest_qp_num;
    }
    if mask.contains(M::EN_SQD_ASYNC_NOTIFY) {
        t.en_sqd_async_notify = a.en_sqd_async_notify;
    }
}

//! The device's limits and capability flags beyond [`DeviceAttr`], and the
//! C header that gives the kernel module (`kernel/urdma_limits.h`) the
//! same values, so that a urdma device reports the same attributes through
//! the kernel (`ibv_devinfo` with the provider, `rdma dev`) as through the
//! drop-in library. A test regenerates the header and compares.

use crate::sys::*;
use std::fmt::Write as _;
use urdma::verbs::MAX_MSG_SZ;
use urdma::DeviceAttr;

/// Address handles per device.
pub const MAX_AH: u32 = 1 << 16;
/// Shared receive queues per device.
pub const MAX_SRQ: u32 = 1 << 14;
/// `local_ca_ack_delay` reported (4.096 us * 2^15, as common HCAs report).
pub const LOCAL_CA_ACK_DELAY: u8 = 15;
/// P_Keys per port: the default one.
pub const MAX_PKEYS: u16 = 1;

/// The device capability flags, as (libibverbs value, kernel name), shared
/// with the kernel module. SRQ resize is not among them: the module's
/// devices do not resize kernel SRQs (the drop-in library adds it).
pub const DEVICE_CAP_FLAGS: &[(u32, &str)] = &[
    (IBV_DEVICE_RC_RNR_NAK_GEN, "IB_DEVICE_RC_RNR_NAK_GEN"),
    (IBV_DEVICE_SYS_IMAGE_GUID, "IB_DEVICE_SYS_IMAGE_GUID"),
    (IBV_DEVICE_CURR_QP_STATE_MOD, "IB_DEVICE_CURR_QP_STATE_MOD"),
];

/// `ibv_device_attr::device_cap_flags`.
pub fn device_cap_flags() -> u32 {
    DEVICE_CAP_FLAGS.iter().fold(0, |f, (v, _)| f | v)
}

/// The text of `kernel/urdma_limits.h` for the default device attributes.
pub fn kernel_header() -> String {
    let a = DeviceAttr::default();
    let defines: &[(&str, String)] = &[
        ("URDMA_VENDOR_ID", format!("{:#x}", a.vendor_id)),
        ("URDMA_MAX_MR_SIZE", format!("{:#x}ULL", a.max_mr_size)),
        ("URDMA_PAGE_SIZE_CAP", format!("{:#x}ULL", a.page_size_cap)),
        ("URDMA_MAX_QP", a.max_qp.to_string()),
        ("URDMA_MAX_QP_WR", a.max_qp_wr.to_string()),
        ("URDMA_MAX_SGE", a.max_sge.to_string()),
        ("URDMA_MAX_CQ", a.max_cq.to_string()),
        ("URDMA_MAX_CQE", a.max_cqe.to_string()),
        ("URDMA_MAX_MR", a.max_mr.to_string()),
        ("URDMA_MAX_PD", a.max_pd.to_string()),
        ("URDMA_MAX_QP_RD_ATOM", a.max_qp_rd_atom.to_string()),
        (
            "URDMA_MAX_QP_INIT_RD_ATOM",
            a.max_qp_init_rd_atom.to_string(),
        ),
        ("URDMA_MAX_AH", MAX_AH.to_string()),
        ("URDMA_MAX_SRQ", MAX_SRQ.to_string()),
        ("URDMA_MAX_PKEYS", MAX_PKEYS.to_string()),
        ("URDMA_LOCAL_CA_ACK_DELAY", LOCAL_CA_ACK_DELAY.to_string()),
        ("URDMA_MAX_MSG_SIZE", format!("{MAX_MSG_SZ:#x}u")),
    ];
    let mut h = String::from(
        "/* SPDX-License-Identifier: GPL-2.0 OR MIT */\n\
         /*\n \
         * Limits and capability flags of a urdma device, the same values the\n \
         * userspace verbs report. Generated from crates/urdma-verbs/src/limits.rs:\n \
         * do not edit; `URDMA_BLESS=1 cargo test -p urdma-verbs kernel_header`\n \
         * writes it again.\n \
         */\n\
         #ifndef URDMA_LIMITS_H\n\
         #define URDMA_LIMITS_H\n\n",
    );
    for (name, value) in defines {
        let _ = writeln!(h, "#define {name:<27} {value}");
    }
    let flags: Vec<&str> = DEVICE_CAP_FLAGS.iter().map(|(_, k)| *k).collect();
    let _ = writeln!(
        h,
        "#define {:<27} ({})",
        "URDMA_DEVICE_CAP_FLAGS",
        flags.join(" | \\\n\t\t\t\t     ")
    );
    h.push_str("\n#endif /* URDMA_LIMITS_H */\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel module's header holds exactly the userspace values.
    #[test]
    fn kernel_header_matches_userspace_limits() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../kernel/urdma_limits.h");
        let want = kernel_header();
        if std::env::var_os("URDMA_BLESS").is_some() {
            std::fs::write(path, &want).expect("write kernel/urdma_limits.h");
        }
        let have = std::fs::read_to_string(path).expect("read kernel/urdma_limits.h");
        assert!(
            have == want,
            "kernel/urdma_limits.h differs from the userspace limits; \
             run `URDMA_BLESS=1 cargo test -p urdma-verbs kernel_header`. Expected:\n{want}"
        );
    }

    #[test]
    fn srq_resize_is_not_shared_with_the_kernel_module() {
        assert_eq!(device_cap_flags() & IBV_DEVICE_SRQ_RESIZE, 0);
    }
}

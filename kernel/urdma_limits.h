/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Limits and capability flags of a urdma device, the same values the
 * userspace verbs report. Generated from crates/urdma-verbs/src/limits.rs:
 * do not edit; `URDMA_BLESS=1 cargo test -p urdma-verbs kernel_header`
 * writes it again.
 */
#ifndef URDMA_LIMITS_H
#define URDMA_LIMITS_H

#define URDMA_VENDOR_ID             0xffffff
#define URDMA_MAX_MR_SIZE           0x10000000000ULL
#define URDMA_PAGE_SIZE_CAP         0xfffff000ULL
#define URDMA_MAX_QP                16384
#define URDMA_MAX_QP_WR             16384
#define URDMA_MAX_SGE               32
#define URDMA_MAX_CQ                16384
#define URDMA_MAX_CQE               1048576
#define URDMA_MAX_MR                1048576
#define URDMA_MAX_PD                65536
#define URDMA_MAX_QP_RD_ATOM        128
#define URDMA_MAX_QP_INIT_RD_ATOM   128
#define URDMA_MAX_AH                65536
#define URDMA_MAX_SRQ               16384
#define URDMA_MAX_PKEYS             1
#define URDMA_LOCAL_CA_ACK_DELAY    15
#define URDMA_MAX_MSG_SIZE          0x80000000u
#define URDMA_DEVICE_CAP_FLAGS      (IB_DEVICE_RC_RNR_NAK_GEN | \
				     IB_DEVICE_SYS_IMAGE_GUID | \
				     IB_DEVICE_CURR_QP_STATE_MOD)

#endif /* URDMA_LIMITS_H */

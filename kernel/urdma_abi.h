/* SPDX-License-Identifier: (GPL-2.0 OR MIT) WITH Linux-syscall-note */
/*
 * What urdma.ko shares with user space: the NIC file's commands
 * (/dev/urdma, opened by the NIC agent) and the driver data of the
 * uverbs commands the provider issues.
 */
#ifndef URDMA_ABI_H
#define URDMA_ABI_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define URDMA_IBDEV_NAME_LEN	64

/*
 * URDMA_IOC_CQ_EVENT: a completion event of the user CQ @cq of device
 * @ibdev, raised by the NIC on behalf of process @pid (the CQ's owner,
 * as the NIC agent's PID namespace sees it). The kernel hands it to the
 * CQ's completion channel. Errors: ENODEV (no such device), ENOENT (no
 * such CQ of that process).
 */
struct urdma_cq_event {
	char ibdev[URDMA_IBDEV_NAME_LEN];
	__u32 cq;
	__u32 pid;
};

/*
 * URDMA_IOC_EVENT: an asynchronous event @type (enum ib_event_type) of
 * the user QP @obj (QP events), CQ @obj (IB_EVENT_CQ_ERR) or SRQ @obj
 * (IB_EVENT_SRQ_ERR, IB_EVENT_SRQ_LIMIT_REACHED) of device
 * @ibdev, owned by process @pid. The kernel hands it to the object's
 * event handler (the process's async event file). Errors: ENODEV, ENOENT
 * as above, EINVAL for a type that names no QP, CQ or SRQ event or a
 * non-zero @reserved.
 */
struct urdma_event {
	char ibdev[URDMA_IBDEV_NAME_LEN];
	__u32 type;
	__u32 obj;
	__u32 pid;
	__u32 reserved;
};

/*
 * URDMA_IOC_ATTACH: make this open NIC file the channel between the
 * kernel and the NIC of the urdma device bound to the network interface
 * @ifindex (in the caller's network namespace). The kernel writes the
 * device's name into @ibdev. One channel per device; it ends when the file
 * is closed. Errors: ENODEV (no urdma device on that interface), EBUSY
 * (the device has a channel, or this file is one), EINVAL.
 *
 * On an attached file, read() returns whole messages for the NIC (work
 * requests of kernel-owned QPs), at least one, blocking unless the file
 * is non-blocking, and 0 once the device is gone; write() takes whole
 * messages from the NIC (completions, received datagrams). poll() reports
 * readability.
 */
struct urdma_attach {
	__u32 ifindex;
	__u32 reserved;
	char ibdev[URDMA_IBDEV_NAME_LEN];
};

#define URDMA_IOC_MAGIC		0xb5
#define URDMA_IOC_CQ_EVENT	_IOW(URDMA_IOC_MAGIC, 1, struct urdma_cq_event)
#define URDMA_IOC_EVENT		_IOW(URDMA_IOC_MAGIC, 2, struct urdma_event)
#define URDMA_IOC_ATTACH	_IOWR(URDMA_IOC_MAGIC, 3, struct urdma_attach)
#define URDMA_IOC_DMA		_IOW(URDMA_IOC_MAGIC, 4, struct urdma_dma)

/*
 * URDMA_IOC_DMA, on an attached NIC file: the NIC reads (@write 0) or
 * writes (@write 1) @len bytes of the kernel MR @key at its address @iova,
 * from or into the NIC's buffer @buf. The kernel checks the range against
 * the MR as it is now (a DMA MR: kernel memory of the linear map; a
 * fast-registration MR: its registered pages while valid; a write only
 * to an MR with local or remote write access). Errors: ENOTCONN (not
 * attached), ENODEV (its device is gone), ENOENT (no such key), EACCES (an
 * MR not valid now, or a write it does not allow), EFAULT (outside the MR,
 * or a bad @buf), EINVAL (@len above URDMA_DMA_MAX or a non-zero
 * @reserved).
 */
struct urdma_dma {
	__u64 iova;
	__u64 buf;
	__u32 len;
	__u32 key;
	__u32 write;
	__u32 reserved;
};

#define URDMA_DMA_MAX		(1 << 20)

/*
 * Keys of kernel MRs: this top byte, then an index (16 bits), then the
 * consumer's variable byte. The NIC never gives its own MRs such keys.
 */
#define URDMA_KERNEL_KEY_TAG	0xfe

/*
 * Every message starts with this header: its type, its whole length in
 * bytes (a multiple of 8, header and payload included) and the kernel QP
 * it concerns.
 */
struct urdma_msg_hdr {
	__u16 type;
	__u16 len;
	__u32 qpn;
};

enum urdma_msg_type {
	URDMA_MSG_UD_SEND = 1,	/* kernel to NIC: struct urdma_msg_ud_send */
	URDMA_MSG_SEND_DONE = 2,	/* NIC to kernel: struct urdma_msg_send_done */
	URDMA_MSG_UD_RECV = 3,	/* NIC to kernel: struct urdma_msg_ud_recv */
	URDMA_MSG_REQUEST = 4,	/* kernel to NIC: struct urdma_msg_request */
	URDMA_MSG_REPLY = 5,	/* NIC to kernel: struct urdma_msg_reply */
	URDMA_MSG_POST = 6,	/* kernel to NIC: struct urdma_msg_post */
	URDMA_MSG_WC = 7,	/* NIC to kernel: struct urdma_msg_wc */
	URDMA_MSG_MR = 8,	/* kernel to NIC: struct urdma_msg_mr */
	URDMA_MSG_QP_EVENT = 9,	/* NIC to kernel: struct urdma_msg_qp_event */
};

/* Flags of a datagram. */
#define URDMA_MSG_F_IMM		(1 << 0)	/* @imm is carried */
#define URDMA_MSG_F_SOLICITED	(1 << 1)	/* the solicited event bit */

/* The largest payload of a datagram message (the largest RoCE MTU). */
#define URDMA_MSG_MAX_PAYLOAD	4096

/*
 * A UD SEND of kernel QP @hdr.qpn, from the GID @sgid to QP @dest_qpn at
 * @dgid, with @length bytes of payload after this struct. The NIC answers
 * with a URDMA_MSG_SEND_DONE naming @handle; handles of a QP grow.
 */
struct urdma_msg_ud_send {
	struct urdma_msg_hdr hdr;
	__u64 handle;
	__u8 sgid[16];
	__u8 dgid[16];
	__u32 dest_qpn;
	__u32 qkey;
	__u32 flow_label;
	__u8 hop_limit;
	__u8 traffic_class;
	__u16 flags;
	__be32 imm;
	__u32 length;
};

/*
 * The NIC carried out every send of QP @hdr.qpn up to @handle; @status
 * (enum ib_wc_status) is that of the send @handle.
 */
struct urdma_msg_send_done {
	struct urdma_msg_hdr hdr;
	__u64 handle;
	__u32 status;
	__u32 reserved;
};

/*
 * A UD SEND received for kernel QP @hdr.qpn from QP @src_qpn, with the
 * Q_Key @qkey and @length bytes of payload after this struct. @grh holds
 * the network header as a UD receive buffer starts with it: an IPv6
 * header, or 20 zero bytes then an IPv4 header, as @network_hdr_type
 * (enum rdma_network_type) says.
 */
struct urdma_msg_ud_recv {
	struct urdma_msg_hdr hdr;
	__u8 grh[40];
	__u32 src_qpn;
	__u32 network_hdr_type;
	__u16 flags;
	__u16 reserved;
	__be32 imm;
	__u32 length;
	__u32 qkey;
};

/* Commands of a URDMA_MSG_REQUEST. */
enum urdma_request_op {
	URDMA_REQ_CREATE_QP = 1,
	URDMA_REQ_MODIFY_QP = 2,
	URDMA_REQ_DESTROY_QP = 3,
};

/*
 * A command about a kernel RC QP, answered by a URDMA_MSG_REPLY with the
 * same @seq (a @seq of 0 wants no answer). CREATE_QP: a QP in the kernel PD @pd with the capacities
 * given (@hdr.qpn is 0; the reply's @value is the QP's number). MODIFY_QP:
 * the QP @hdr.qpn takes the attributes @mask (enum ib_qp_attr_mask) names,
 * with the values of enum ib_qp_state, ib_mtu and ib_access_flags, and the
 * path to @dgid. DESTROY_QP: the QP @hdr.qpn ends.
 */
struct urdma_msg_request {
	struct urdma_msg_hdr hdr;
	__u32 seq;
	__u32 op;
	__u32 pd;
	__u32 max_send_wr;
	__u32 max_recv_wr;
	__u32 max_send_sge;
	__u32 max_recv_sge;
	__u32 mask;
	__u32 qp_state;
	__u32 cur_qp_state;
	__u32 path_mtu;
	__u32 qkey;
	__u32 rq_psn;
	__u32 sq_psn;
	__u32 dest_qp_num;
	__u32 access;
	__u32 flow_label;
	__u8 max_rd_atomic;
	__u8 max_dest_rd_atomic;
	__u8 min_rnr_timer;
	__u8 timeout;
	__u8 retry_cnt;
	__u8 rnr_retry;
	__u8 hop_limit;
	__u8 traffic_class;
	__u8 dgid[16];
};

/* The answer to request @seq: 0 or a positive errno, and a value. */
struct urdma_msg_reply {
	struct urdma_msg_hdr hdr;
	__u32 seq;
	__u32 status;
	__u32 value;
	__u32 reserved;
};

/* Operations of a URDMA_MSG_POST send. */
enum urdma_post_op {
	URDMA_OP_SEND = 0,
	URDMA_OP_SEND_IMM = 1,
	URDMA_OP_SEND_INV = 2,
	URDMA_OP_WRITE = 3,
	URDMA_OP_WRITE_IMM = 4,
	URDMA_OP_READ = 5,
};

#define URDMA_POST_RECV		(1 << 0)	/* a receive, else a send */
#define URDMA_POST_SOLICITED	(1 << 1)

/* A buffer of a work request: a kernel MR's key and a range of it. */
struct urdma_msg_sge {
	__u64 addr;
	__u32 length;
	__u32 lkey;
};

/*
 * A work request of kernel RC QP @hdr.qpn: @seq is the kernel's running
 * number of the QP's sends (or receives), which the NIC echoes in the
 * completion. @ex is the immediate data (host order) or the R_Key to
 * invalidate. @num_sge buffers follow.
 */
struct urdma_msg_post {
	struct urdma_msg_hdr hdr;
	__u32 seq;
	__u16 flags;
	__u8 opcode;
	__u8 num_sge;
	__u64 remote_addr;
	__u32 rkey;
	__u32 ex;
	struct urdma_msg_sge sge[];
};

#define URDMA_WC_IMM		(1 << 0)	/* @ex is immediate data */
#define URDMA_WC_INV		(1 << 1)	/* @ex is the invalidated R_Key */

/*
 * The completion of work request @seq (a receive if @recv) of kernel QP
 * @hdr.qpn. @status and @opcode are enum ib_wc_status and ib_wc_opcode.
 * Every work request of a kernel RC QP completes, in order per queue.
 */
struct urdma_msg_wc {
	struct urdma_msg_hdr hdr;
	__u32 seq;
	__u32 recv;
	__u32 status;
	__u32 opcode;
	__u32 byte_len;
	__u32 vendor_err;
	__u32 ex;
	__u32 flags;
};

/* What a URDMA_MSG_MR says of a kernel MR. */
enum urdma_mr_op {
	URDMA_MR_DMA = 1,	/* a DMA MR exists: all of kernel memory */
	URDMA_MR_FAST = 2,	/* a fast-registration MR exists, not valid */
	URDMA_MR_REGISTER = 3,	/* it is valid: @key, @iova, @length, @access */
	URDMA_MR_INVALIDATE = 4,	/* it is not valid any more */
	URDMA_MR_REMOVE = 5,	/* it is gone */
};

/*
 * A kernel MR's life: @op on the MR whose key is @key (for REGISTER, the
 * key it has from now on; the index bits stay) in the kernel PD @pd.
 * Registration and invalidation take effect when posted, ahead of work
 * requests posted before them that the NIC has not carried out yet.
 */
struct urdma_msg_mr {
	struct urdma_msg_hdr hdr;
	__u32 op;
	__u32 key;
	__u32 pd;
	__u32 access;
	__u64 iova;
	__u64 length;
};

/* An asynchronous event @event (enum ib_event_type) of kernel QP @hdr.qpn. */
struct urdma_msg_qp_event {
	struct urdma_msg_hdr hdr;
	__u32 event;
	__u32 reserved;
};

/*
 * The version of the uverbs driver data below (the abi_version of a urdma
 * device's uverbs node), which the provider matches.
 */
#define URDMA_UVERBS_ABI_VERSION	1

/*
 * Driver data of a user create_qp: the QP number the NIC gave the QP
 * (the kernel reports it as the QP's number).
 */
struct urdma_create_qp_cmd {
	__u32 qpn;
	__u32 reserved;
};

/*
 * Driver data of a user reg_mr: the keys the NIC gave the region (the
 * kernel reports them as the MR's).
 */
struct urdma_reg_mr_cmd {
	__u32 lkey;
	__u32 rkey;
};

/*
 * Driver data of the response to a user create_cq, create_qp or
 * create_srq: the object's number here, which the NIC's events name.
 */
struct urdma_create_resp {
	__u32 id;
	__u32 reserved;
};

#endif /* URDMA_ABI_H */

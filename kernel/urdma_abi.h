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

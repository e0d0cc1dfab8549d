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
 * as above, EINVAL for a type that names no QP, CQ or SRQ event.
 */
struct urdma_event {
	char ibdev[URDMA_IBDEV_NAME_LEN];
	__u32 type;
	__u32 obj;
	__u32 pid;
	__u32 reserved;
};

#define URDMA_IOC_MAGIC		0xb5
#define URDMA_IOC_CQ_EVENT	_IOW(URDMA_IOC_MAGIC, 1, struct urdma_cq_event)
#define URDMA_IOC_EVENT		_IOW(URDMA_IOC_MAGIC, 2, struct urdma_event)

/*
 * Driver data of a user create_qp: the QP number the NIC gave the QP
 * (the kernel reports it as the QP's number).
 */
struct urdma_create_qp_cmd {
	__u32 qpn;
	__u32 reserved;
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

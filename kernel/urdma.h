/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * urdma: a software RoCE v2 device. The kernel side registers the device
 * with the RDMA core (discovery, netdev binding, GIDs, port state); the
 * data path runs in userspace through the urdma provider.
 */
#ifndef URDMA_H
#define URDMA_H

#include <linux/list.h>
#include <linux/netdevice.h>
#include <linux/xarray.h>
#include <rdma/ib_verbs.h>
#include "urdma_limits.h"

#define URDMA_UVERBS_ABI_VERSION	1
#define URDMA_GID_TABLE_LEN		32

struct urdma_dev {
	struct ib_device ibdev;
	struct net_device *ndev;	/* held from creation to dealloc */
	struct list_head list;		/* on urdma_devices while registered */
	struct xarray cqs;		/* user CQs by number, for the NIC's events */
	struct xarray qps;		/* user QPs by number, for the NIC's events */
	struct xarray srqs;		/* user SRQs by number, for the NIC's events */
	u32 next_cq;			/* numbers are handed out cyclically, */
	u32 next_qp;			/* so a freed one is not reused at once */
	u32 next_srq;
};

static inline struct urdma_dev *to_urdma(struct ib_device *ibdev)
{
	return container_of(ibdev, struct urdma_dev, ibdev);
}

struct urdma_ucontext {
	struct ib_ucontext ibuc;
};

struct urdma_pd {
	struct ib_pd ibpd;
};

struct urdma_cq {
	struct ib_cq ibcq;
	u32 id;				/* in urdma_dev.cqs (0: none) */
};

static inline struct urdma_cq *to_urdma_cq(struct ib_cq *ibcq)
{
	return container_of(ibcq, struct urdma_cq, ibcq);
}

struct urdma_qp {
	struct ib_qp ibqp;
	u32 id;				/* in urdma_dev.qps (0: none) */
	spinlock_t lock;		/* guards attr */
	struct ib_qp_attr attr;		/* as the last modify_qp left it */
	struct ib_qp_cap cap;
	enum ib_sig_type sq_sig_type;
};

static inline struct urdma_qp *to_urdma_qp(struct ib_qp *ibqp)
{
	return container_of(ibqp, struct urdma_qp, ibqp);
}

struct urdma_ah {
	struct ib_ah ibah;
};

struct urdma_srq {
	struct ib_srq ibsrq;
	u32 id;				/* in urdma_dev.srqs (0: none) */
};

static inline struct urdma_srq *to_urdma_srq(struct ib_srq *ibsrq)
{
	return container_of(ibsrq, struct urdma_srq, ibsrq);
}

extern const struct ib_device_ops urdma_dev_ops;

void urdma_forget_device(struct urdma_dev *dev);
struct urdma_dev *urdma_get_by_name(const char *name);
int urdma_nic_register(void);
void urdma_nic_unregister(void);

#endif /* URDMA_H */

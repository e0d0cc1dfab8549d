/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * urdma: a software RoCE v2 device. The kernel side registers the device
 * with the RDMA core (discovery, netdev binding, GIDs, port state); the
 * data path runs in userspace through the urdma provider.
 */
#ifndef URDMA_H
#define URDMA_H

#include <linux/list.h>
#include <linux/poll.h>
#include <linux/netdevice.h>
#include <linux/xarray.h>
#include <rdma/ib_verbs.h>
#include "urdma_limits.h"

#define URDMA_GID_TABLE_LEN		32
#define URDMA_KQP_MAX_SGE		4	/* per work request of the GSI QP */
#define URDMA_MAX_FAST_REG_PAGES	512	/* pages of a fast-registration MR */

struct urdma_chan;
struct urdma_kcq;
struct urdma_kqp;
struct urdma_krc;

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
	spinlock_t kernel_lock;		/* guards chan and gsi */
	struct urdma_chan *chan;	/* the NIC's channel, or NULL: then
					 * the port is DOWN */
	struct urdma_qp *gsi;		/* the kernel's QP 1, or NULL */
	struct xarray kmrs;		/* kernel MRs by key index */
	u32 next_kmr;
	atomic64_t next_handle;		/* of kernel sends, never reused */
	struct xarray kqps;		/* kernel RC QPs by number; changes
					 * under the channel lock */
	struct list_head requests;	/* waiting for the NIC's answer,
					 * under kernel_lock */
	u32 next_request;
	atomic_t next_pd;		/* kernel PD numbers */
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
	u32 id;				/* a kernel PD's number for the NIC */
};

static inline struct urdma_pd *to_urdma_pd(struct ib_pd *ibpd)
{
	return container_of(ibpd, struct urdma_pd, ibpd);
}

struct urdma_cq {
	struct ib_cq ibcq;
	u32 id;				/* in urdma_dev.cqs (0: none) */
	struct urdma_kcq *k;		/* a kernel CQ's queue, else NULL */
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
	struct urdma_kqp *k;		/* the GSI QP's queues, else NULL */
	struct urdma_krc *rc;		/* a kernel RC QP's queues, else NULL */
};

static inline struct urdma_qp *to_urdma_qp(struct ib_qp *ibqp)
{
	return container_of(ibqp, struct urdma_qp, ibqp);
}

/* An address handle: the path of a kernel UD send. */
struct urdma_ah {
	struct ib_ah ibah;
	u8 sgid[16];
	u8 dgid[16];
	u32 flow_label;
	u8 hop_limit;
	u8 traffic_class;
};

static inline struct urdma_ah *to_urdma_ah(struct ib_ah *ibah)
{
	return container_of(ibah, struct urdma_ah, ibah);
}

/*
 * An MR: a kernel DMA MR (kernel virtual addresses), a kernel
 * fast-registration MR (@fast), or the kernel's record of a user MR that
 * the NIC registered (@user).
 */
struct urdma_mr {
	struct ib_mr ibmr;
	struct rcu_head rcu;
	bool user;
	bool fast;
	spinlock_t lock;		/* guards what follows and the keys */
	bool valid;			/* a DMA MR, or a registered fast one */
	u32 access;
	u64 iova, length;		/* the registered range */
	u32 page_shift;			/* of the registered pages */
	u32 reg_pages;			/* pages registered */
	u32 npages, max_pages;		/* pages mapped, room for pages */
	u64 *pages;			/* kernel addresses of the pages */
};

static inline struct urdma_mr *to_urdma_mr(struct ib_mr *ibmr)
{
	return container_of(ibmr, struct urdma_mr, ibmr);
}

struct urdma_srq {
	struct ib_srq ibsrq;
	u32 id;				/* in urdma_dev.srqs (0: none) */
};

static inline struct urdma_srq *to_urdma_srq(struct ib_srq *ibsrq)
{
	return container_of(ibsrq, struct urdma_srq, ibsrq);
}

/*
 * Post each work request of the list @wr to @qp with @one (a function of
 * the QP and one request); stops at the first refused, which *@bad_wr
 * then names. Evaluates to 0 or that refusal's errno.
 */
#define urdma_post_each(one, qp, wr, bad_wr) ({			\
	int __err = 0;							\
									\
	for (; (wr); (wr) = (wr)->next) {				\
		__err = one(qp, wr);					\
		if (__err) {						\
			*(bad_wr) = (wr);				\
			break;						\
		}							\
	}								\
	__err;								\
})

/* A message for the NIC, queued on its channel. */
struct urdma_kmsg {
	struct list_head list;
	u32 len;			/* of data, a multiple of 8 */
	u8 data[] __aligned(8);		/* the message, header first */
};

extern const struct ib_device_ops urdma_dev_ops;

void urdma_forget_device(struct urdma_dev *dev);
struct urdma_dev *urdma_get_by_name(const char *name);
struct urdma_dev *urdma_get_by_netdev(struct net_device *ndev);
bool urdma_port_up(struct urdma_dev *dev);
bool urdma_qp_event_type(u32 type);
void urdma_port_changed(struct urdma_dev *dev);
int urdma_nic_register(void);
void urdma_nic_unregister(void);

/* urdma_chan.c: the channel between the kernel verbs and the NIC. */
struct urdma_chan *urdma_chan_open(void);
void urdma_chan_release(struct urdma_chan *chan);
long urdma_chan_attach(struct urdma_chan *chan, void __user *arg);
ssize_t urdma_chan_read(struct urdma_chan *chan, bool nonblock,
			char __user *buf, size_t count);
ssize_t urdma_chan_write(struct urdma_chan *chan, const char __user *buf,
			 size_t count);
__poll_t urdma_chan_poll(struct urdma_chan *chan, struct file *file,
			 poll_table *wait);
int urdma_chan_queue(struct urdma_dev *dev, struct urdma_kmsg *m);
int urdma_chan_queue_always(struct urdma_dev *dev, struct urdma_kmsg *m);
void urdma_chan_kick(struct urdma_dev *dev);
struct urdma_kmsg *urdma_kmsg_alloc(u32 len, gfp_t gfp);
long urdma_chan_dma(struct urdma_chan *chan, void __user *arg);
void urdma_chan_device_gone(struct urdma_dev *dev);
void urdma_chan_lock(void);
void urdma_chan_unlock(void);

/* urdma_kcq.c, urdma_kverbs.c: kernel CQs, the GSI QP and its AHs. */
int urdma_create_kcq(struct urdma_cq *cq, const struct ib_cq_init_attr *attr);
bool urdma_kcq_add(struct urdma_cq *cq, const struct ib_wc *wc, bool solicited);
void urdma_kcq_fire(struct urdma_cq *cq);
void urdma_kcq_push(struct urdma_cq *cq, const struct ib_wc *wc,
		    bool solicited);
void urdma_destroy_kcq(struct urdma_cq *cq);
int urdma_poll_kcq(struct urdma_cq *cq, int n, struct ib_wc *wc);
int urdma_notify_kcq(struct urdma_cq *cq, enum ib_cq_notify_flags flags);
int urdma_kqp_init_ok(const struct ib_qp_init_attr *init, u32 max_sge);
int urdma_create_kqp(struct urdma_dev *dev, struct urdma_qp *qp,
		     struct ib_qp_init_attr *init);
void urdma_destroy_kqp(struct urdma_dev *dev, struct urdma_qp *qp);
void urdma_kqp_state_changed(struct urdma_qp *qp, enum ib_qp_state state);
int urdma_post_ksend(struct urdma_qp *qp, const struct ib_send_wr *wr,
		     const struct ib_send_wr **bad_wr);
int urdma_post_krecv(struct urdma_qp *qp, const struct ib_recv_wr *wr,
		     const struct ib_recv_wr **bad_wr);
int urdma_kqp_deliver(struct urdma_dev *dev, const void *msg, u32 len);
void urdma_kqp_nic_gone(struct urdma_dev *dev);
int urdma_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init,
		    struct ib_udata *udata);
int urdma_destroy_ah(struct ib_ah *ibah, u32 flags);

/* urdma_krc*.c: kernel RC QPs, held by the NIC. */

/* A work request of a kernel RC QP, by its number in its queue. */
struct urdma_kwr {
	u64 wr_id;
	u32 byte_len;
	u32 ex;			/* immediate data or invalidated R_Key */
	u32 vendor_err;
	u8 opcode;		/* enum ib_wc_opcode */
	u8 status;		/* enum ib_wc_status, once done */
	u8 wc_flags;		/* URDMA_WC_* */
	bool signaled;
	bool done;
};

/*
 * A queue of work requests: numbers head..tail-1 are outstanding, at most
 * @size of them; the ring has a power of two of slots, so that numbers
 * keep their slots when they wrap.
 */
struct urdma_kwq {
	struct urdma_kwr *wr;
	u32 size, slots, head, tail;
};

struct urdma_krc {
	spinlock_t lock;		/* guards the queues and lost */
	struct urdma_kwq sq, rq;
	bool lost;			/* the NIC that held the QP left */
	struct urdma_kmsg *destroy;	/* the DESTROY_QP request, made early */
};

static inline struct urdma_kwr *urdma_kwq_at(struct urdma_kwq *q, u32 seq)
{
	return &q->wr[seq & (q->slots - 1)];
}

int urdma_create_krc(struct urdma_dev *dev, struct urdma_qp *qp,
		     struct ib_qp_init_attr *init);
void urdma_destroy_krc(struct urdma_dev *dev, struct urdma_qp *qp);
int urdma_modify_krc(struct urdma_qp *qp, struct ib_qp_attr *attr, int mask);
int urdma_post_krc_send(struct urdma_qp *qp, const struct ib_send_wr *wr,
			const struct ib_send_wr **bad_wr);
int urdma_post_krc_recv(struct urdma_qp *qp, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr);
int urdma_krc_deliver(struct urdma_dev *dev, const void *msg, u32 len);
void urdma_krc_nic_gone(struct urdma_dev *dev);
void urdma_answer(struct urdma_dev *dev, u32 seq, int status, u32 value);
struct urdma_kmsg *urdma_request_alloc(u32 op, u32 qpn, gfp_t gfp);
void urdma_krc_complete(struct urdma_qp *qp);

/* urdma_kmr.c: kernel MRs, the NIC's access to them, user MR records. */
struct ib_mr *urdma_get_dma_mr(struct ib_pd *pd, int access);
struct ib_mr *urdma_alloc_mr(struct ib_pd *pd, enum ib_mr_type type,
			     u32 max_num_sg);
int urdma_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int n,
		    unsigned int *sg_offset);
int urdma_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata);
enum ib_wc_status urdma_kmr_register(struct urdma_qp *qp,
				     const struct ib_reg_wr *reg);
enum ib_wc_status urdma_kmr_invalidate(struct urdma_qp *qp, u32 key);
void urdma_kmr_invalidated(struct urdma_qp *qp, u32 key);
void urdma_kmr_replay(struct urdma_dev *dev);
long urdma_kmr_dma(struct urdma_dev *dev, void __user *arg, u8 *buf);
struct ib_mr *urdma_reg_user_mr(struct ib_pd *pd, u64 start, u64 length,
				u64 iova, int access, struct ib_udata *udata);

#endif /* URDMA_H */

// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Kernel RC QPs of urdma: QPs that kernel consumers (the kernel's
 * connection manager users: NVMe over Fabrics, ...) create. The NIC holds
 * them: creating, modifying and destroying one is a request on the
 * device's channel that the NIC answers; each work request goes to the
 * NIC as a message naming its buffers by kernel MR key and address, and
 * the NIC moves the data itself (URDMA_IOC_DMA, urdma_kmr.c). The NIC
 * completes every work request, in order per queue; the kernel keeps the
 * consumer's identifiers and reports only what the consumer asked for.
 *
 * This file holds the QPs' lifetime: the requests to the NIC that create,
 * modify and destroy them, and the NIC's answers to those requests. Work
 * requests are posted and completed in urdma_krc_post.c; the NIC's other
 * messages about the QPs are carried out in urdma_krc_nic.c.
 */
#include <linux/slab.h>
#include <linux/completion.h>
#include <rdma/ib_verbs.h>
#include "urdma.h"
#include "urdma_abi.h"

/* How long a request waits for the NIC's answer. */
#define URDMA_REQUEST_TIMEOUT	(10 * HZ)

/* A request waiting for the NIC's answer. */
struct urdma_kreq {
	struct list_head list;
	u32 seq;
	int status;
	u32 value;
	struct completion done;
};

static int urdma_kwq_init(struct urdma_kwq *q, u32 size)
{
	q->size = size;
	q->slots = roundup_pow_of_two(size);
	q->wr = kvcalloc(q->slots, sizeof(*q->wr), GFP_KERNEL);
	return q->wr ? 0 : -ENOMEM;
}

/*
 * Send @m (a request) to the NIC of @dev and wait for the answer. The
 * request is freed by the channel. Returns the NIC's status (a negative
 * errno), -ENOTCONN without a NIC, -ETIMEDOUT without an answer.
 */
static int urdma_request(struct urdma_dev *dev, struct urdma_kmsg *km,
			 u32 *value)
{
	struct urdma_msg_request *m = (struct urdma_msg_request *)km->data;
	struct urdma_kreq req = {};
	int err;

	might_sleep();
	init_completion(&req.done);
	spin_lock_irq(&dev->kernel_lock);
	/* 0 names a request that wants no answer. */
	req.seq = ++dev->next_request ?: ++dev->next_request;
	list_add_tail(&req.list, &dev->requests);
	spin_unlock_irq(&dev->kernel_lock);
	m->seq = req.seq;

	/* Requests are few and bounded: the queue's limit does not apply. */
	err = urdma_chan_queue_always(dev, km);
	if (err)
		kfree(km);
	else
		wait_for_completion_timeout(&req.done, URDMA_REQUEST_TIMEOUT);
	/*
	 * Answered requests are off the list (urdma_answer takes them); one
	 * that was never queued (no NIC) or never answered is taken off here,
	 * before its frame goes.
	 */
	spin_lock_irq(&dev->kernel_lock);
	if (!list_empty(&req.list)) {
		list_del_init(&req.list);
		if (!err)
			err = -ETIMEDOUT;
	}
	spin_unlock_irq(&dev->kernel_lock);
	if (!err)
		err = req.status;
	if (!err && value)
		*value = req.value;
	return err;
}

/* The answer to a request; or, with @seq 0, every request fails. */
void urdma_answer(struct urdma_dev *dev, u32 seq, int status, u32 value)
{
	struct urdma_kreq *req, *next;
	unsigned long flags;

	spin_lock_irqsave(&dev->kernel_lock, flags);
	list_for_each_entry_safe(req, next, &dev->requests, list) {
		if (seq && req->seq != seq)
			continue;
		list_del_init(&req->list);
		req->status = status;
		req->value = value;
		complete(&req->done);
	}
	spin_unlock_irqrestore(&dev->kernel_lock, flags);
}

struct urdma_kmsg *urdma_request_alloc(u32 op, u32 qpn, gfp_t gfp)
{
	struct urdma_msg_request *m;
	struct urdma_kmsg *km;

	km = urdma_kmsg_alloc(sizeof(*m), gfp);
	if (!km)
		return NULL;
	m = (struct urdma_msg_request *)km->data;
	m->hdr.type = URDMA_MSG_REQUEST;
	m->hdr.len = km->len;
	m->hdr.qpn = qpn;
	m->op = op;
	return km;
}

/*
 * The NIC destroys the QP of @rc (its request made when the QP was). A NIC
 * that does not confirm might still reach the QP's buffers afterwards:
 * it is let go of, as if it had left.
 */
static void urdma_krc_forget(struct urdma_dev *dev, struct urdma_krc *rc)
{
	struct urdma_kmsg *km = rc->destroy;
	int err;

	rc->destroy = NULL;
	err = urdma_request(dev, km, NULL);
	if (err && err != -ENOTCONN && err != -ENOENT) {
		pr_warn("urdma: %s: the NIC did not destroy a QP (%d): letting it go\n",
			dev_name(&dev->ibdev.dev), err);
		urdma_chan_kick(dev);
	}
}

int urdma_create_krc(struct urdma_dev *dev, struct urdma_qp *qp,
		     struct ib_qp_init_attr *init)
{
	struct ib_qp_cap *cap = &init->cap;
	struct urdma_msg_request *m;
	struct urdma_kmsg *km;
	struct urdma_krc *rc;
	u32 qpn;
	int err;

	err = urdma_kqp_init_ok(init, URDMA_MAX_SGE);
	if (err)
		return err;

	rc = kzalloc(sizeof(*rc), GFP_KERNEL);
	if (!rc)
		return -ENOMEM;
	spin_lock_init(&rc->lock);
	err = urdma_kwq_init(&rc->sq, cap->max_send_wr);
	if (!err)
		err = urdma_kwq_init(&rc->rq, cap->max_recv_wr);
	if (err)
		goto err_free;

	err = -ENOMEM;
	rc->destroy = urdma_request_alloc(URDMA_REQ_DESTROY_QP, 0, GFP_KERNEL);
	km = urdma_request_alloc(URDMA_REQ_CREATE_QP, 0, GFP_KERNEL);
	if (!km || !rc->destroy) {
		kfree(km);
		goto err_free;
	}
	m = (struct urdma_msg_request *)km->data;
	m->pd = to_urdma_pd(qp->ibqp.pd)->id;
	m->max_send_wr = cap->max_send_wr;
	m->max_recv_wr = cap->max_recv_wr;
	m->max_send_sge = cap->max_send_sge;
	m->max_recv_sge = cap->max_recv_sge;
	err = urdma_request(dev, km, &qpn);
	if (err)
		goto err_free;
	((struct urdma_msg_request *)rc->destroy->data)->hdr.qpn = qpn;
	if (qpn < 2 || qpn > 0xffffff) {
		err = -EIO;
		goto err_destroy;
	}

	spin_lock_init(&qp->lock);
	qp->attr.qp_state = IB_QPS_RESET;
	qp->cap = *cap;
	qp->sq_sig_type = init->sq_sig_type;
	qp->ibqp.qp_num = qpn;
	qp->rc = rc;
	urdma_chan_lock();
	err = xa_insert(&dev->kqps, qpn, qp, GFP_KERNEL);
	urdma_chan_unlock();
	if (!err)
		return 0;
	qp->rc = NULL;
err_destroy:
	urdma_krc_forget(dev, rc);
err_free:
	kfree(rc->destroy);
	kvfree(rc->sq.wr);
	kvfree(rc->rq.wr);
	kfree(rc);
	return err;
}

void urdma_destroy_krc(struct urdma_dev *dev, struct urdma_qp *qp)
{
	struct urdma_krc *rc = qp->rc;

	if (!READ_ONCE(rc->lost))
		urdma_krc_forget(dev, rc);
	/* Deliveries run under the channel lock: none is under way after. */
	urdma_chan_lock();
	xa_erase(&dev->kqps, qp->ibqp.qp_num);
	urdma_chan_unlock();
	qp->rc = NULL;
	kfree(rc->destroy);
	kvfree(rc->sq.wr);
	kvfree(rc->rq.wr);
	kfree(rc);
}

/*
 * Modify a kernel RC QP at the NIC (sleeps). Only the attributes the NIC
 * keeps are sent; the caller keeps its own copy once this succeeds.
 */
int urdma_modify_krc(struct urdma_qp *qp, struct ib_qp_attr *attr, int mask)
{
	struct urdma_dev *dev = to_urdma(qp->ibqp.device);
	struct urdma_krc *rc = qp->rc;
	struct urdma_msg_request *m;
	struct urdma_kmsg *km;
	int err;

	if (READ_ONCE(rc->lost)) {
		/* Only a way out (to ERR or RESET) is left. */
		if ((mask & IB_QP_STATE) && (attr->qp_state == IB_QPS_ERR ||
					     attr->qp_state == IB_QPS_RESET))
			return 0;
		return -ENOTCONN;
	}
	km = urdma_request_alloc(URDMA_REQ_MODIFY_QP, qp->ibqp.qp_num, GFP_KERNEL);
	if (!km)
		return -ENOMEM;
	m = (struct urdma_msg_request *)km->data;
	m->mask = mask & ~IB_QP_CAP;
	m->qp_state = attr->qp_state;
	m->cur_qp_state = attr->cur_qp_state;
	m->path_mtu = attr->path_mtu;
	m->qkey = attr->qkey;
	m->rq_psn = attr->rq_psn;
	m->sq_psn = attr->sq_psn;
	m->dest_qp_num = attr->dest_qp_num;
	m->access = attr->qp_access_flags;
	m->max_rd_atomic = attr->max_rd_atomic;
	m->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	m->min_rnr_timer = attr->min_rnr_timer;
	m->timeout = attr->timeout;
	m->retry_cnt = attr->retry_cnt;
	m->rnr_retry = attr->rnr_retry;
	if (mask & IB_QP_AV) {
		const struct ib_global_route *grh;

		if (!(rdma_ah_get_ah_flags(&attr->ah_attr) & IB_AH_GRH)) {
			kfree(km);
			return -EINVAL;
		}
		grh = rdma_ah_read_grh(&attr->ah_attr);
		memcpy(m->dgid, grh->dgid.raw, sizeof(m->dgid));
		m->flow_label = grh->flow_label;
		m->hop_limit = grh->hop_limit;
		m->traffic_class = grh->traffic_class;
	}
	err = urdma_request(dev, km, NULL);
	if (!err && (mask & IB_QP_STATE) && attr->qp_state == IB_QPS_RESET) {
		/* The NIC forgot the QP's work: so does the kernel. */
		spin_lock_irq(&rc->lock);
		rc->sq.head = rc->sq.tail;
		rc->rq.head = rc->rq.tail;
		spin_unlock_irq(&rc->lock);
	}
	return err;
}

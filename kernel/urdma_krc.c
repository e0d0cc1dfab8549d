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
 * Memory registration (IB_WR_REG_MR) and local invalidation are carried
 * out here when posted and reach the NIC as MR messages ahead of the work
 * requests posted after them; they complete in order with the others.
 */
#include <linux/slab.h>
#include <linux/completion.h>
#include <rdma/ib_verbs.h>
#include "urdma.h"
#include "urdma_abi.h"

/* How long a request waits for the NIC's answer. */
#define URDMA_REQUEST_TIMEOUT	(10 * HZ)
/* Completions handed to CQs at once. */
#define URDMA_KRC_BATCH		16

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

static struct urdma_kwr *urdma_kwq_at(struct urdma_kwq *q, u32 seq)
{
	return &q->wr[seq & (q->slots - 1)];
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
static void urdma_answer(struct urdma_dev *dev, u32 seq, int status,
			 u32 value)
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

static struct urdma_kmsg *urdma_request_alloc(u32 op, u32 qpn, gfp_t gfp)
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

/* A completed work request, for its CQ. */
struct urdma_kdone {
	struct ib_wc wc;
	bool recv;
};

/*
 * Take the completions at the head of @q that are done, at most @max,
 * into @out (the ones the consumer did not ask for are dropped). Lock held.
 */
static int urdma_kwq_reap(struct urdma_qp *qp, struct urdma_kwq *q, bool recv,
			  struct urdma_kdone *out, int max)
{
	int n = 0;

	while (n < max && q->head != q->tail) {
		struct urdma_kwr *w = urdma_kwq_at(q, q->head);
		struct ib_wc *wc = &out[n].wc;

		if (!w->done)
			break;
		q->head++;
		if (!w->signaled && w->status == IB_WC_SUCCESS)
			continue;
		memset(wc, 0, sizeof(*wc));
		wc->wr_id = w->wr_id;
		wc->status = w->status;
		wc->opcode = w->opcode;
		wc->vendor_err = w->vendor_err;
		wc->byte_len = w->byte_len;
		wc->qp = &qp->ibqp;
		wc->src_qp = qp->attr.dest_qp_num;
		wc->port_num = 1;
		if (w->wc_flags & URDMA_WC_IMM) {
			wc->wc_flags |= IB_WC_WITH_IMM;
			wc->ex.imm_data = cpu_to_be32(w->ex);
		} else if (w->wc_flags & URDMA_WC_INV) {
			wc->wc_flags |= IB_WC_WITH_INVALIDATE;
			wc->ex.invalidate_rkey = w->ex;
		}
		out[n++].recv = recv;
	}
	return n;
}

/*
 * Hand what is done at the heads of @qp's queues to its CQs, in order.
 * Completions are queued under the QP's lock (so they keep their order)
 * and the CQs' handlers run after it is dropped.
 */
static void urdma_krc_complete(struct urdma_qp *qp)
{
	struct urdma_cq *scq = to_urdma_cq(qp->ibqp.send_cq);
	struct urdma_cq *rcq = to_urdma_cq(qp->ibqp.recv_cq);
	struct urdma_kdone done[URDMA_KRC_BATCH];
	struct urdma_krc *rc = qp->rc;
	bool fire_s = false, fire_r = false;
	unsigned long flags;
	int n, i;

	do {
		spin_lock_irqsave(&rc->lock, flags);
		n = urdma_kwq_reap(qp, &rc->sq, false, done, URDMA_KRC_BATCH);
		n += urdma_kwq_reap(qp, &rc->rq, true, done + n,
				    URDMA_KRC_BATCH - n);
		for (i = 0; i < n; i++) {
			if (done[i].recv)
				fire_r |= urdma_kcq_add(rcq, &done[i].wc, false);
			else
				fire_s |= urdma_kcq_add(scq, &done[i].wc, false);
		}
		spin_unlock_irqrestore(&rc->lock, flags);
	} while (n == URDMA_KRC_BATCH);
	if (fire_s)
		urdma_kcq_fire(scq);
	if (fire_r && rcq != scq)
		urdma_kcq_fire(rcq);
	else if (fire_r)
		urdma_kcq_fire(scq);
}

/*
 * A work request failed here: the QP moves to ERR, at the NIC too (a
 * request that wants no answer), so that what follows is flushed.
 */
static void urdma_krc_fail(struct urdma_qp *qp)
{
	struct urdma_msg_request *m;
	struct urdma_kmsg *km;

	WRITE_ONCE(qp->attr.qp_state, IB_QPS_ERR);
	km = urdma_request_alloc(URDMA_REQ_MODIFY_QP, qp->ibqp.qp_num,
				 GFP_ATOMIC);
	if (!km)
		return;
	m = (struct urdma_msg_request *)km->data;
	m->mask = IB_QP_STATE;
	m->qp_state = IB_QPS_ERR;
	if (urdma_chan_queue_always(to_urdma(qp->ibqp.device), km))
		kfree(km);
}

/* Total length of @n buffers, or -EINVAL past 2^31 bytes. */
static s64 urdma_sge_total(const struct ib_sge *sge, int n)
{
	u64 total = 0;
	int i;

	for (i = 0; i < n; i++)
		total += sge[i].length;
	return total > URDMA_MAX_MSG_SIZE ? -EINVAL : (s64)total;
}

static struct urdma_kmsg *urdma_post_msg(struct urdma_qp *qp,
					 const struct ib_sge *sge, int n)
{
	struct urdma_msg_post *m;
	struct urdma_kmsg *km;
	int i;

	km = urdma_kmsg_alloc(sizeof(*m) + n * sizeof(m->sge[0]), GFP_ATOMIC);
	if (!km)
		return NULL;
	m = (struct urdma_msg_post *)km->data;
	m->hdr.type = URDMA_MSG_POST;
	m->hdr.len = km->len;
	m->hdr.qpn = qp->ibqp.qp_num;
	m->num_sge = n;
	for (i = 0; i < n; i++) {
		m->sge[i].addr = sge[i].addr;
		m->sge[i].length = sge[i].length;
		m->sge[i].lkey = sge[i].lkey;
	}
	return km;
}

/*
 * Under @rc's lock: hand @m (in *@km) to the NIC as work request @seq of
 * its queue, unless the QP is in ERR or lost. False if it completes now,
 * with *@status; on success the channel owns the message (*@km is NULL).
 */
static bool urdma_krc_hand_over(struct urdma_qp *qp, struct urdma_kmsg **km,
				struct urdma_msg_post *m, u32 seq,
				enum ib_wc_status *status)
{
	if (READ_ONCE(qp->attr.qp_state) == IB_QPS_ERR || qp->rc->lost) {
		*status = IB_WC_WR_FLUSH_ERR;
		return false;
	}
	m->seq = seq;
	if (urdma_chan_queue(to_urdma(qp->ibqp.device), *km)) {
		*status = IB_WC_GENERAL_ERR;
		return false;
	}
	*km = NULL;
	return true;
}

/*
 * After a work request of @qp was recorded (and @rc's lock dropped): free
 * its message if the NIC did not take it (@km), move the QP to ERR, here
 * and at the NIC, on a local failure, and complete it if it is @done.
 */
static void urdma_krc_posted(struct urdma_qp *qp, struct urdma_kmsg *km,
			     bool done, enum ib_wc_status status)
{
	kfree(km);
	if (status != IB_WC_SUCCESS && status != IB_WC_WR_FLUSH_ERR)
		urdma_krc_fail(qp);
	if (done)
		urdma_krc_complete(qp);
}

/* Record work request @wr_id as the next of @q (lock held). */
static void urdma_kwq_push(struct urdma_kwq *q, u64 wr_id, u8 opcode,
			   u32 byte_len, bool signaled, bool done,
			   enum ib_wc_status status)
{
	struct urdma_kwr *w = urdma_kwq_at(q, q->tail++);

	memset(w, 0, sizeof(*w));
	w->wr_id = wr_id;
	w->opcode = opcode;
	w->byte_len = byte_len;
	w->signaled = signaled;
	w->done = done;
	w->status = status;
}

/* The NIC's operation and the completion opcode of a send work request. */
static int urdma_send_op(const struct ib_send_wr *wr, u8 *op, u8 *wc_op)
{
	switch (wr->opcode) {
	case IB_WR_SEND:
		*op = URDMA_OP_SEND;
		break;
	case IB_WR_SEND_WITH_IMM:
		*op = URDMA_OP_SEND_IMM;
		break;
	case IB_WR_SEND_WITH_INV:
		*op = URDMA_OP_SEND_INV;
		break;
	case IB_WR_RDMA_WRITE:
		*op = URDMA_OP_WRITE;
		*wc_op = IB_WC_RDMA_WRITE;
		return 0;
	case IB_WR_RDMA_WRITE_WITH_IMM:
		*op = URDMA_OP_WRITE_IMM;
		*wc_op = IB_WC_RDMA_WRITE;
		return 0;
	case IB_WR_RDMA_READ:
		*op = URDMA_OP_READ;
		*wc_op = IB_WC_RDMA_READ;
		return 0;
	default:
		return -EINVAL;
	}
	*wc_op = IB_WC_SEND;
	return 0;
}

/*
 * Post one send work request. Registration and invalidation are done
 * here; the rest goes to the NIC. In the ERR state, or without a NIC,
 * the request is flushed in order.
 */
static int urdma_krc_send_one(struct urdma_qp *qp, const struct ib_send_wr *wr)
{
	enum ib_qp_state state = READ_ONCE(qp->attr.qp_state);
	enum ib_wc_status status = IB_WC_SUCCESS;
	struct urdma_krc *rc = qp->rc;
	struct urdma_msg_post *m = NULL;
	struct urdma_kmsg *km = NULL;
	unsigned long flags;
	u8 op = 0, wc_op;
	bool done;
	s64 len = 0;

	if (state == IB_QPS_RESET || state == IB_QPS_INIT ||
	    state == IB_QPS_RTR)
		return -EINVAL;
	if (wr->num_sge < 0 || wr->num_sge > qp->cap.max_send_sge ||
	    (wr->send_flags & IB_SEND_INLINE))
		return -EINVAL;
	if (wr->opcode == IB_WR_REG_MR) {
		wc_op = IB_WC_REG_MR;
	} else if (wr->opcode == IB_WR_LOCAL_INV) {
		wc_op = IB_WC_LOCAL_INV;
	} else {
		if (urdma_send_op(wr, &op, &wc_op))
			return -EINVAL;
		len = urdma_sge_total(wr->sg_list, wr->num_sge);
		if (len < 0)
			return -EINVAL;
		km = urdma_post_msg(qp, wr->sg_list, wr->num_sge);
		if (!km)
			return -ENOMEM;
		m = (struct urdma_msg_post *)km->data;
		m->opcode = op;
		if (wr->send_flags & IB_SEND_SOLICITED)
			m->flags |= URDMA_POST_SOLICITED;
		if (wr->opcode == IB_WR_SEND_WITH_IMM ||
		    wr->opcode == IB_WR_RDMA_WRITE_WITH_IMM)
			m->ex = be32_to_cpu(wr->ex.imm_data);
		else if (wr->opcode == IB_WR_SEND_WITH_INV)
			m->ex = wr->ex.invalidate_rkey;
		if (op >= URDMA_OP_WRITE) {
			m->remote_addr = rdma_wr(wr)->remote_addr;
			m->rkey = rdma_wr(wr)->rkey;
		}
	}

	spin_lock_irqsave(&rc->lock, flags);
	if (rc->sq.tail - rc->sq.head == rc->sq.size) {
		spin_unlock_irqrestore(&rc->lock, flags);
		kfree(km);
		return -ENOMEM;
	}
	/*
	 * Checked again under the lock that the move to ERR and the NIC's
	 * departure flush under: a request is flushed there or here.
	 */
	done = true;
	if (READ_ONCE(qp->attr.qp_state) == IB_QPS_ERR || rc->lost)
		status = IB_WC_WR_FLUSH_ERR;
	else if (wr->opcode == IB_WR_REG_MR)
		status = urdma_kmr_register(qp, reg_wr(wr));
	else if (wr->opcode == IB_WR_LOCAL_INV)
		status = urdma_kmr_invalidate(qp, wr->ex.invalidate_rkey);
	else
		done = !urdma_krc_hand_over(qp, &km, m, rc->sq.tail, &status);
	urdma_kwq_push(&rc->sq, wr->wr_id, wc_op, len,
		       qp->sq_sig_type == IB_SIGNAL_ALL_WR ||
		       (wr->send_flags & IB_SEND_SIGNALED), done, status);
	spin_unlock_irqrestore(&rc->lock, flags);
	urdma_krc_posted(qp, km, done, status);
	return 0;
}

int urdma_post_krc_send(struct urdma_qp *qp, const struct ib_send_wr *wr,
			const struct ib_send_wr **bad_wr)
{
	return urdma_post_each(urdma_krc_send_one, qp, wr, bad_wr);
}

static int urdma_krc_recv_one(struct urdma_qp *qp, const struct ib_recv_wr *wr)
{
	enum ib_wc_status status = IB_WC_SUCCESS;
	struct urdma_krc *rc = qp->rc;
	struct urdma_msg_post *m;
	struct urdma_kmsg *km;
	unsigned long flags;
	bool done;
	s64 room;

	if (READ_ONCE(qp->attr.qp_state) == IB_QPS_RESET)
		return -EINVAL;
	if (wr->num_sge < 0 || wr->num_sge > qp->cap.max_recv_sge)
		return -EINVAL;
	room = urdma_sge_total(wr->sg_list, wr->num_sge);
	if (room < 0)
		return -EINVAL;
	km = urdma_post_msg(qp, wr->sg_list, wr->num_sge);
	if (!km)
		return -ENOMEM;
	m = (struct urdma_msg_post *)km->data;
	m->flags = URDMA_POST_RECV;

	spin_lock_irqsave(&rc->lock, flags);
	if (rc->rq.tail - rc->rq.head == rc->rq.size) {
		spin_unlock_irqrestore(&rc->lock, flags);
		kfree(km);
		return -ENOMEM;
	}
	done = !urdma_krc_hand_over(qp, &km, m, rc->rq.tail, &status);
	/* The length is the buffers' until the NIC says what arrived. */
	urdma_kwq_push(&rc->rq, wr->wr_id, IB_WC_RECV, room, true, done,
		       status);
	spin_unlock_irqrestore(&rc->lock, flags);
	urdma_krc_posted(qp, km, done, status);
	return 0;
}

int urdma_post_krc_recv(struct urdma_qp *qp, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr)
{
	return urdma_post_each(urdma_krc_recv_one, qp, wr, bad_wr);
}

/* The NIC completed work request @m->seq of @qp. */
static void urdma_krc_wc(struct urdma_qp *qp, const struct urdma_msg_wc *m)
{
	struct urdma_krc *rc = qp->rc;
	struct urdma_kwq *q = m->recv ? &rc->rq : &rc->sq;
	struct urdma_kwr *w;
	unsigned long flags;
	bool ok = false;

	spin_lock_irqsave(&rc->lock, flags);
	/* A number outside the outstanding ones is stale (after RESET). */
	if (m->seq - q->head < q->tail - q->head) {
		w = urdma_kwq_at(q, m->seq);
		if (!w->done) {
			w->done = true;
			w->status = m->status;
			w->vendor_err = m->vendor_err;
			/* More than the buffers hold is the NIC's error. */
			if (m->recv && m->byte_len > w->byte_len)
				w->status = IB_WC_GENERAL_ERR;
			if (m->recv) {
				w->opcode = m->opcode == IB_WC_RECV_RDMA_WITH_IMM ?
					    IB_WC_RECV_RDMA_WITH_IMM : IB_WC_RECV;
				w->byte_len = m->byte_len;
				w->wc_flags = m->flags & (URDMA_WC_IMM | URDMA_WC_INV);
				w->ex = m->ex;
			} else if (w->opcode == IB_WC_RDMA_READ) {
				w->byte_len = m->byte_len;
			}
			ok = true;
		}
	}
	spin_unlock_irqrestore(&rc->lock, flags);
	if (!ok)
		return;
	if (m->recv && m->status == IB_WC_SUCCESS && (m->flags & URDMA_WC_INV))
		urdma_kmr_invalidated(qp, m->ex);
	if (m->status != IB_WC_SUCCESS && m->status != IB_WC_WR_FLUSH_ERR)
		WRITE_ONCE(qp->attr.qp_state, IB_QPS_ERR);
	urdma_krc_complete(qp);
}

static void urdma_krc_event(struct urdma_qp *qp, enum ib_event_type type)
{
	struct ib_event ev = {
		.device = qp->ibqp.device,
		.event = type,
		.element.qp = &qp->ibqp,
	};

	if (type == IB_EVENT_QP_FATAL || type == IB_EVENT_QP_ACCESS_ERR ||
	    type == IB_EVENT_QP_REQ_ERR)
		WRITE_ONCE(qp->attr.qp_state, IB_QPS_ERR);
	if (qp->ibqp.event_handler)
		qp->ibqp.event_handler(&ev, qp->ibqp.qp_context);
}

/*
 * A message from the NIC about kernel RC QPs (channel lock held): checked,
 * then carried out. One for a QP that is gone is dropped.
 */
int urdma_krc_deliver(struct urdma_dev *dev, const void *msg, u32 len)
{
	const struct urdma_msg_hdr *hdr = msg;
	struct urdma_qp *qp;

	switch (hdr->type) {
	case URDMA_MSG_REPLY: {
		const struct urdma_msg_reply *r = msg;

		if (len < sizeof(*r) || r->status > MAX_ERRNO || !r->seq)
			return -EINVAL;
		urdma_answer(dev, r->seq, -(int)r->status, r->value);
		return 0;
	}
	case URDMA_MSG_WC: {
		const struct urdma_msg_wc *w = msg;

		if (len < sizeof(*w) || w->status > IB_WC_GENERAL_ERR ||
		    w->recv > 1)
			return -EINVAL;
		qp = xa_load(&dev->kqps, hdr->qpn);
		if (qp)
			urdma_krc_wc(qp, w);
		return 0;
	}
	case URDMA_MSG_QP_EVENT: {
		const struct urdma_msg_qp_event *e = msg;

		if (len < sizeof(*e) || !urdma_qp_event_type(e->event))
			return -EINVAL;
		qp = xa_load(&dev->kqps, hdr->qpn);
		if (qp)
			urdma_krc_event(qp, e->event);
		return 0;
	}
	default:
		return -EINVAL;
	}
}

/*
 * The NIC left (channel lock held): the QPs it held are lost. Their
 * outstanding work is flushed, requests waiting for an answer fail, and
 * each QP reports a fatal error.
 */
void urdma_krc_nic_gone(struct urdma_dev *dev)
{
	struct urdma_qp *qp;
	unsigned long idx;
	u32 seq;

	urdma_answer(dev, 0, -ENOTCONN, 0);
	xa_for_each(&dev->kqps, idx, qp) {
		struct urdma_krc *rc = qp->rc;

		spin_lock_irq(&rc->lock);
		rc->lost = true;
		for (seq = rc->sq.head; seq != rc->sq.tail; seq++) {
			struct urdma_kwr *w = urdma_kwq_at(&rc->sq, seq);

			if (!w->done) {
				w->done = true;
				w->status = IB_WC_WR_FLUSH_ERR;
			}
		}
		for (seq = rc->rq.head; seq != rc->rq.tail; seq++) {
			struct urdma_kwr *w = urdma_kwq_at(&rc->rq, seq);

			if (!w->done) {
				w->done = true;
				w->status = IB_WC_WR_FLUSH_ERR;
			}
		}
		spin_unlock_irq(&rc->lock);
		urdma_krc_complete(qp);
		urdma_krc_event(qp, IB_EVENT_QP_FATAL);
	}
}

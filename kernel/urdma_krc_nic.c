// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * The NIC's messages about urdma's kernel RC QPs (urdma_krc.c): answers to
 * requests, completions of work requests and QP events, checked and then
 * carried out; and what becomes of the QPs when the NIC leaves.
 */
#include <linux/slab.h>
#include <linux/completion.h>
#include <rdma/ib_verbs.h>
#include "urdma.h"
#include "urdma_abi.h"

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

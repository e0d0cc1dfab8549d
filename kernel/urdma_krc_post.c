// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Work requests of urdma's kernel RC QPs (urdma_krc.c): posting them to
 * the NIC, each as a message naming its buffers by kernel MR key and
 * address, and handing the completed ones to the QPs' CQs in order.
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

/* Completions handed to CQs at once. */
#define URDMA_KRC_BATCH		16

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
void urdma_krc_complete(struct urdma_qp *qp)
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

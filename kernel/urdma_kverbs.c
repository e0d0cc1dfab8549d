// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Kernel verbs of urdma: the GSI QP that kernel consumers own and the
 * address handles of its sends. Kernel CQs are in urdma_kcq.c, kernel MRs
 * in urdma_kmr.c.
 *
 * A kernel QP's send goes to the NIC as a message on the device's channel
 * (urdma_chan.c), its payload copied from the consumer's buffers; the NIC
 * answers with a completion message. A datagram the NIC received for the
 * QP comes as a message too and lands in the next posted receive buffer.
 * Completions wait in the CQ's ring until the consumer polls them.
 *
 * The kernel QP served is the GSI QP (QP 1), which the RDMA core's MAD
 * layer creates on each port and the kernel's connection manager speaks
 * through. Buffers are addressed as the device's DMA mapping makes them:
 * a device without a DMA device maps to kernel virtual addresses.
 */
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/if_vlan.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_mad.h>
#include "urdma.h"
#include "urdma_abi.h"

/* A send the NIC has not completed yet. */
struct urdma_ksend {
	u64 wr_id;
	u64 handle;
	u32 byte_len;
	bool signaled;
};

/* A posted receive buffer. */
struct urdma_krecv {
	u64 wr_id;
	u32 num_sge;
	struct ib_sge sge[URDMA_KQP_MAX_SGE];
};

/* A kernel QP's queues, rings in posting order. */
struct urdma_kqp {
	spinlock_t lock;
	struct urdma_ksend *sq;
	u32 sq_size, sq_head, sq_count;
	struct urdma_krecv *rq;
	u32 rq_size, rq_head, rq_count;
};

/*
 * Whether a kernel QP can be made as @init asks: no flags or SRQ (-EOPNOTSUPP),
 * kernel CQs, and queues within the device's limits with at most @max_sge
 * buffers per request and no inline data (-EINVAL).
 */
int urdma_kqp_init_ok(const struct ib_qp_init_attr *init, u32 max_sge)
{
	const struct ib_qp_cap *cap = &init->cap;

	if (init->create_flags || init->srq || init->port_num > 1)
		return -EOPNOTSUPP;
	if (!to_urdma_cq(init->send_cq)->k || !to_urdma_cq(init->recv_cq)->k)
		return -EINVAL;
	if (!cap->max_send_wr || cap->max_send_wr > URDMA_MAX_QP_WR ||
	    !cap->max_recv_wr || cap->max_recv_wr > URDMA_MAX_QP_WR ||
	    cap->max_send_sge > max_sge || cap->max_recv_sge > max_sge ||
	    cap->max_inline_data)
		return -EINVAL;
	return 0;
}

int urdma_create_kqp(struct urdma_dev *dev, struct urdma_qp *qp,
		     struct ib_qp_init_attr *init)
{
	struct ib_qp_cap *cap = &init->cap;
	struct urdma_kqp *k;
	int err = 0;

	if (init->qp_type != IB_QPT_GSI || init->port_num != 1)
		return -EOPNOTSUPP;
	err = urdma_kqp_init_ok(init, URDMA_KQP_MAX_SGE);
	if (err)
		return err;

	k = kzalloc(sizeof(*k), GFP_KERNEL);
	if (!k)
		return -ENOMEM;
	spin_lock_init(&k->lock);
	k->sq_size = cap->max_send_wr;
	k->rq_size = cap->max_recv_wr;
	k->sq = kvcalloc(k->sq_size, sizeof(*k->sq), GFP_KERNEL);
	k->rq = kvcalloc(k->rq_size, sizeof(*k->rq), GFP_KERNEL);
	if (!k->sq || !k->rq) {
		err = -ENOMEM;
		goto err_free;
	}

	spin_lock_init(&qp->lock);
	qp->attr.qp_state = IB_QPS_RESET;
	qp->cap = *cap;
	qp->sq_sig_type = init->sq_sig_type;
	qp->ibqp.qp_num = 1;
	qp->k = k;

	spin_lock_irq(&dev->kernel_lock);
	if (dev->gsi)
		err = -EBUSY;
	else
		dev->gsi = qp;
	spin_unlock_irq(&dev->kernel_lock);
	if (!err)
		return 0;
	qp->k = NULL;
err_free:
	kvfree(k->sq);
	kvfree(k->rq);
	kfree(k);
	return err;
}

/*
 * Messages from the NIC reach a kernel QP under the channel lock: taking
 * it here waits for any delivery to the QP to end.
 */
void urdma_destroy_kqp(struct urdma_dev *dev, struct urdma_qp *qp)
{
	struct urdma_kqp *k = qp->k;

	urdma_chan_lock();
	spin_lock_irq(&dev->kernel_lock);
	if (dev->gsi == qp)
		dev->gsi = NULL;
	spin_unlock_irq(&dev->kernel_lock);
	urdma_chan_unlock();

	qp->k = NULL;
	kvfree(k->sq);
	kvfree(k->rq);
	kfree(k);
}

/* Report the send @s of @qp (an error always, a success if signaled). */
static void urdma_kqp_send_wc(struct urdma_qp *qp, const struct urdma_ksend *s,
			      enum ib_wc_status status)
{
	struct ib_wc wc = {};

	if (!s->signaled && status == IB_WC_SUCCESS)
		return;
	wc.wr_id = s->wr_id;
	wc.status = status;
	wc.opcode = IB_WC_SEND;
	wc.byte_len = s->byte_len;
	wc.qp = &qp->ibqp;
	wc.port_num = 1;
	urdma_kcq_push(to_urdma_cq(qp->ibqp.send_cq), &wc, false);
}

/*
 * Complete the oldest send of @qp if its handle is at most @upto: with
 * @status if it is the send @handle (or @handle is 0), else successfully.
 * False if there is none.
 */
static bool urdma_kqp_complete_send(struct urdma_qp *qp, u64 upto,
				    u64 handle, enum ib_wc_status status)
{
	struct urdma_kqp *k = qp->k;
	struct urdma_ksend s;
	unsigned long flags;

	spin_lock_irqsave(&k->lock, flags);
	if (!k->sq_count || k->sq[k->sq_head].handle > upto) {
		spin_unlock_irqrestore(&k->lock, flags);
		return false;
	}
	s = k->sq[k->sq_head];
	k->sq_head = (k->sq_head + 1) % k->sq_size;
	k->sq_count--;
	spin_unlock_irqrestore(&k->lock, flags);

	if (handle && s.handle != handle)
		status = IB_WC_SUCCESS;
	urdma_kqp_send_wc(qp, &s, status);
	return true;
}

/* The NIC carried out the sends of @qp up to @handle. */
static void urdma_kqp_send_done(struct urdma_qp *qp, u64 handle, u32 status)
{
	if (status > IB_WC_GENERAL_ERR)
		status = IB_WC_GENERAL_ERR;
	while (urdma_kqp_complete_send(qp, handle, handle, status))
		;
}

/* Complete every outstanding send of @qp with @status. */
static void urdma_kqp_fail_sends(struct urdma_qp *qp, enum ib_wc_status status)
{
	while (urdma_kqp_complete_send(qp, U64_MAX, 0, status))
		;
}

/* Return every posted receive buffer of @qp with @status. */
static void urdma_kqp_flush_recvs(struct urdma_qp *qp, enum ib_wc_status status)
{
	struct urdma_kqp *k = qp->k;
	struct ib_wc wc = {};
	unsigned long flags;

	for (;;) {
		spin_lock_irqsave(&k->lock, flags);
		if (!k->rq_count) {
			spin_unlock_irqrestore(&k->lock, flags);
			return;
		}
		wc.wr_id = k->rq[k->rq_head].wr_id;
		k->rq_head = (k->rq_head + 1) % k->rq_size;
		k->rq_count--;
		spin_unlock_irqrestore(&k->lock, flags);

		wc.status = status;
		wc.opcode = IB_WC_RECV;
		wc.qp = &qp->ibqp;
		wc.port_num = 1;
		urdma_kcq_push(to_urdma_cq(qp->ibqp.recv_cq), &wc, false);
	}
}

/*
 * After a modify_qp: a QP in the error state flushes its work requests;
 * a reset QP forgets them.
 */
void urdma_kqp_state_changed(struct urdma_qp *qp, enum ib_qp_state state)
{
	struct urdma_kqp *k = qp->k;
	unsigned long flags;

	if (state == IB_QPS_ERR) {
		urdma_kqp_fail_sends(qp, IB_WC_WR_FLUSH_ERR);
		urdma_kqp_flush_recvs(qp, IB_WC_WR_FLUSH_ERR);
	} else if (state == IB_QPS_RESET) {
		spin_lock_irqsave(&k->lock, flags);
		k->sq_head = k->sq_count = 0;
		k->rq_head = k->rq_count = 0;
		spin_unlock_irqrestore(&k->lock, flags);
	}
}

/* True if @lkey is a DMA MR of @qp's protection domain. */
static bool urdma_lkey_ok(struct urdma_qp *qp, u32 lkey)
{
	struct urdma_dev *dev = to_urdma(qp->ibqp.device);
	struct urdma_mr *mr;
	bool ok;

	if (lkey >> 24 != URDMA_KERNEL_KEY_TAG)
		return false;
	rcu_read_lock();
	mr = xa_load(&dev->kmrs, (lkey >> 8) & 0xffff);
	ok = mr && !mr->fast && mr->ibmr.lkey == lkey &&
	     mr->ibmr.pd == qp->ibqp.pd;
	rcu_read_unlock();
	return ok;
}

struct urdma_kmsg *urdma_kmsg_alloc(u32 len, gfp_t gfp)
{
	struct urdma_kmsg *m;

	len = ALIGN(len, 8);
	m = kzalloc(sizeof(*m) + len, gfp);
	if (m)
		m->len = len;
	return m;
}

/* Post one UD send of @qp: hand it to the NIC. */
static int urdma_ksend_one(struct urdma_qp *qp, const struct ib_send_wr *wr)
{
	struct urdma_dev *dev = to_urdma(qp->ibqp.device);
	const struct ib_ud_wr *ud = ud_wr(wr);
	struct urdma_kqp *k = qp->k;
	struct urdma_msg_ud_send *m;
	struct urdma_ksend send;
	struct urdma_kmsg *km;
	struct urdma_ah *ah;
	unsigned long flags;
	u32 len = 0, i;
	u8 *p;
	int err;

	if (wr->opcode != IB_WR_SEND && wr->opcode != IB_WR_SEND_WITH_IMM)
		return -EINVAL;
	if (wr->num_sge < 0 || wr->num_sge > qp->cap.max_send_sge || !ud->ah)
		return -EINVAL;
	if (READ_ONCE(qp->attr.qp_state) != IB_QPS_RTS)
		return -EINVAL;
	for (i = 0; i < wr->num_sge; i++) {
		if (!urdma_lkey_ok(qp, wr->sg_list[i].lkey))
			return -EINVAL;
		if (wr->sg_list[i].length > URDMA_MSG_MAX_PAYLOAD - len)
			return -EMSGSIZE;
		len += wr->sg_list[i].length;
	}

	km = urdma_kmsg_alloc(sizeof(*m) + len, GFP_ATOMIC);
	if (!km)
		return -ENOMEM;
	ah = to_urdma_ah(ud->ah);
	m = (struct urdma_msg_ud_send *)km->data;
	m->hdr.type = URDMA_MSG_UD_SEND;
	m->hdr.len = km->len;
	m->hdr.qpn = qp->ibqp.qp_num;
	memcpy(m->sgid, ah->sgid, sizeof(m->sgid));
	memcpy(m->dgid, ah->dgid, sizeof(m->dgid));
	m->dest_qpn = ud->remote_qpn;
	/* A Q_Key with the high bit set means the QP's own (IBTA 10.2.5). */
	m->qkey = (ud->remote_qkey & 0x80000000) ? READ_ONCE(qp->attr.qkey) :
						    ud->remote_qkey;
	m->flow_label = ah->flow_label;
	m->hop_limit = ah->hop_limit;
	m->traffic_class = ah->traffic_class;
	if (wr->opcode == IB_WR_SEND_WITH_IMM) {
		m->flags |= URDMA_MSG_F_IMM;
		m->imm = wr->ex.imm_data;
	}
	if (wr->send_flags & IB_SEND_SOLICITED)
		m->flags |= URDMA_MSG_F_SOLICITED;
	m->length = len;
	p = (u8 *)(m + 1);
	for (i = 0; i < wr->num_sge; i++) {
		memcpy(p, (void *)(uintptr_t)wr->sg_list[i].addr,
		       wr->sg_list[i].length);
		p += wr->sg_list[i].length;
	}

	send.wr_id = wr->wr_id;
	send.byte_len = len;
	send.signaled = qp->sq_sig_type == IB_SIGNAL_ALL_WR ||
			(wr->send_flags & IB_SEND_SIGNALED);
	spin_lock_irqsave(&k->lock, flags);
	/*
	 * Checked again under the lock that a move to ERR flushes under: a
	 * send is either refused here or flushed there.
	 */
	if (READ_ONCE(qp->attr.qp_state) != IB_QPS_RTS) {
		spin_unlock_irqrestore(&k->lock, flags);
		kfree(km);
		return -EINVAL;
	}
	if (k->sq_count == k->sq_size) {
		spin_unlock_irqrestore(&k->lock, flags);
		kfree(km);
		return -ENOMEM;
	}
	send.handle = atomic64_inc_return(&dev->next_handle);
	m->handle = send.handle;
	/* Queued under the QP's lock: the NIC sees sends in handle order. */
	err = urdma_chan_queue(dev, km);
	if (!err) {
		k->sq[(k->sq_head + k->sq_count) % k->sq_size] = send;
		k->sq_count++;
	}
	spin_unlock_irqrestore(&k->lock, flags);
	if (err) {
		/* No NIC serves the device (or it is far behind): it fails. */
		kfree(km);
		urdma_kqp_send_wc(qp, &send, IB_WC_GENERAL_ERR);
	}
	return 0;
}

int urdma_post_ksend(struct urdma_qp *qp, const struct ib_send_wr *wr,
		     const struct ib_send_wr **bad_wr)
{
	return urdma_post_each(urdma_ksend_one, qp, wr, bad_wr);
}

static int urdma_krecv_one(struct urdma_qp *qp, const struct ib_recv_wr *wr)
{
	struct urdma_kqp *k = qp->k;
	struct urdma_krecv *r;
	enum ib_qp_state state = READ_ONCE(qp->attr.qp_state);
	unsigned long flags;
	int i;

	if (wr->num_sge < 0 || wr->num_sge > qp->cap.max_recv_sge)
		return -EINVAL;
	if (state == IB_QPS_RESET)
		return -EINVAL;
	for (i = 0; i < wr->num_sge; i++)
		if (!urdma_lkey_ok(qp, wr->sg_list[i].lkey))
			return -EINVAL;

	spin_lock_irqsave(&k->lock, flags);
	if (k->rq_count == k->rq_size) {
		spin_unlock_irqrestore(&k->lock, flags);
		return -ENOMEM;
	}
	r = &k->rq[(k->rq_head + k->rq_count) % k->rq_size];
	r->wr_id = wr->wr_id;
	r->num_sge = wr->num_sge;
	memcpy(r->sge, wr->sg_list, wr->num_sge * sizeof(r->sge[0]));
	k->rq_count++;
	/* As for sends: a QP that moved to ERR meanwhile flushes it too. */
	state = READ_ONCE(qp->attr.qp_state);
	spin_unlock_irqrestore(&k->lock, flags);

	if (state == IB_QPS_ERR)
		urdma_kqp_flush_recvs(qp, IB_WC_WR_FLUSH_ERR);
	return 0;
}

int urdma_post_krecv(struct urdma_qp *qp, const struct ib_recv_wr *wr,
		     const struct ib_recv_wr **bad_wr)
{
	return urdma_post_each(urdma_krecv_one, qp, wr, bad_wr);
}

/* Copy @len bytes of @src into the buffers of @sge from byte @off on. */
static void urdma_copy_to_sges(const struct ib_sge *sge, u32 n, u32 off,
			       const u8 *src, u32 len)
{
	u32 i, c;

	for (i = 0; i < n && len; i++) {
		if (off >= sge[i].length) {
			off -= sge[i].length;
			continue;
		}
		c = min(sge[i].length - off, len);
		memcpy((void *)(uintptr_t)(sge[i].addr + off), src, c);
		src += c;
		len -= c;
		off = 0;
	}
}

/* A datagram for @qp: into its next receive buffer, else dropped. */
static void urdma_kqp_recv(struct urdma_qp *qp,
			   const struct urdma_msg_ud_recv *m)
{
	enum ib_qp_state state = READ_ONCE(qp->attr.qp_state);
	struct urdma_kqp *k = qp->k;
	struct net_device *ndev;
	struct ib_wc wc = {};
	struct urdma_krecv r;
	unsigned long flags;
	u64 room = 0;
	u32 i, total;

	if (state != IB_QPS_RTR && state != IB_QPS_RTS)
		return;
	if (m->qkey != IB_QP1_QKEY)
		return;
	total = sizeof(m->grh) + m->length;
	spin_lock_irqsave(&k->lock, flags);
	if (!k->rq_count) {
		spin_unlock_irqrestore(&k->lock, flags);
		return;
	}
	r = k->rq[k->rq_head];
	for (i = 0; i < r.num_sge; i++)
		room += r.sge[i].length;
	/*
	 * A datagram larger than the next buffer is dropped and the buffer
	 * kept: the MAD layer does not repost a buffer returned in error.
	 */
	if (room < total) {
		spin_unlock_irqrestore(&k->lock, flags);
		return;
	}
	k->rq_head = (k->rq_head + 1) % k->rq_size;
	k->rq_count--;
	spin_unlock_irqrestore(&k->lock, flags);

	urdma_copy_to_sges(r.sge, r.num_sge, 0, m->grh, sizeof(m->grh));
	urdma_copy_to_sges(r.sge, r.num_sge, sizeof(m->grh),
			   (const u8 *)(m + 1), m->length);
	wc.status = IB_WC_SUCCESS;
	wc.wr_id = r.wr_id;
	wc.opcode = IB_WC_RECV;
	wc.byte_len = total;
	wc.qp = &qp->ibqp;
	wc.src_qp = m->src_qpn & 0xffffff;
	wc.wc_flags = IB_WC_GRH | IB_WC_WITH_NETWORK_HDR_TYPE;
	wc.network_hdr_type = m->network_hdr_type;
	if (m->flags & URDMA_MSG_F_IMM) {
		wc.wc_flags |= IB_WC_WITH_IMM;
		wc.ex.imm_data = m->imm;
	}
	ndev = to_urdma(qp->ibqp.device)->ndev;
	if (ndev && is_vlan_dev(ndev)) {
		wc.wc_flags |= IB_WC_WITH_VLAN;
		wc.vlan_id = vlan_dev_vlan_id(ndev);
	}
	wc.pkey_index = 0;
	wc.port_num = 1;
	urdma_kcq_push(to_urdma_cq(qp->ibqp.recv_cq), &wc,
		       m->flags & URDMA_MSG_F_SOLICITED);
}

/*
 * A message from the NIC: checked, then handed to its kernel QP. A
 * message for a QP that is gone is dropped. Runs under the channel lock.
 */
int urdma_kqp_deliver(struct urdma_dev *dev, const void *msg, u32 len)
{
	const struct urdma_msg_hdr *hdr = msg;
	struct urdma_qp *qp;

	switch (hdr->type) {
	case URDMA_MSG_SEND_DONE:
		if (len < sizeof(struct urdma_msg_send_done))
			return -EINVAL;
		break;
	case URDMA_MSG_UD_RECV: {
		const struct urdma_msg_ud_recv *m = msg;

		if (len < sizeof(*m) || m->length > URDMA_MSG_MAX_PAYLOAD ||
		    m->length > len - sizeof(*m))
			return -EINVAL;
		if (m->network_hdr_type != RDMA_NETWORK_IPV4 &&
		    m->network_hdr_type != RDMA_NETWORK_IPV6)
			return -EINVAL;
		break;
	}
	default:
		return urdma_krc_deliver(dev, msg, len);
	}

	spin_lock_irq(&dev->kernel_lock);
	qp = hdr->qpn == 1 ? dev->gsi : NULL;
	spin_unlock_irq(&dev->kernel_lock);
	if (!qp)
		return 0;
	if (hdr->type == URDMA_MSG_SEND_DONE) {
		const struct urdma_msg_send_done *d = msg;

		urdma_kqp_send_done(qp, d->handle, d->status);
	} else {
		urdma_kqp_recv(qp, msg);
	}
	return 0;
}

/* The NIC left: the sends it had not completed fail. Channel lock held. */
void urdma_kqp_nic_gone(struct urdma_dev *dev)
{
	struct urdma_qp *qp;

	spin_lock_irq(&dev->kernel_lock);
	qp = dev->gsi;
	spin_unlock_irq(&dev->kernel_lock);
	if (qp)
		urdma_kqp_fail_sends(qp, IB_WC_GENERAL_ERR);
}

/* Only RoCE v2 paths (a GRH with a RoCE v2 source GID) are served. */
int urdma_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init,
		    struct ib_udata *udata)
{
	const struct rdma_ah_attr *attr = init->ah_attr;
	struct urdma_ah *ah = to_urdma_ah(ibah);
	const struct ib_global_route *grh;

	if (!(rdma_ah_get_ah_flags(attr) & IB_AH_GRH))
		return -EINVAL;
	grh = rdma_ah_read_grh(attr);
	if (!grh->sgid_attr ||
	    grh->sgid_attr->gid_type != IB_GID_TYPE_ROCE_UDP_ENCAP)
		return -EINVAL;
	memcpy(ah->sgid, grh->sgid_attr->gid.raw, sizeof(ah->sgid));
	memcpy(ah->dgid, grh->dgid.raw, sizeof(ah->dgid));
	ah->flow_label = grh->flow_label;
	ah->hop_limit = grh->hop_limit;
	ah->traffic_class = grh->traffic_class;
	return 0;
}

int urdma_destroy_ah(struct ib_ah *ibah, u32 flags)
{
	return 0;
}

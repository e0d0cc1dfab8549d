// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Kernel CQs of urdma: the rings of work completions that kernel consumers
 * poll. The kernel QPs (urdma_kverbs.c, urdma_krc_post.c) queue their
 * completions here; a CQ armed for the next completion runs its handler.
 */
#include <linux/slab.h>
#include <linux/mm.h>
#include <rdma/ib_verbs.h>
#include "urdma.h"

/* A kernel CQ: a ring of work completions. */
struct urdma_kcq {
	spinlock_t lock;
	struct ib_wc *wc;
	u32 size;		/* entries of wc */
	u32 head;		/* the oldest completion */
	u32 count;		/* completions held */
	u8 notify;		/* armed: IB_CQ_NEXT_COMP, IB_CQ_SOLICITED or 0 */
	bool overflowed;
	bool fire_pending;	/* the handler is due */
	bool overflow_pending;	/* an overflow is to be reported */
};

int urdma_create_kcq(struct urdma_cq *cq, const struct ib_cq_init_attr *attr)
{
	struct urdma_kcq *k;

	k = kzalloc(sizeof(*k), GFP_KERNEL);
	if (!k)
		return -ENOMEM;
	k->wc = kvcalloc(attr->cqe, sizeof(*k->wc), GFP_KERNEL);
	if (!k->wc) {
		kfree(k);
		return -ENOMEM;
	}
	spin_lock_init(&k->lock);
	k->size = attr->cqe;
	cq->k = k;
	return 0;
}

void urdma_destroy_kcq(struct urdma_cq *cq)
{
	kvfree(cq->k->wc);
	kfree(cq->k);
	cq->k = NULL;
}

/*
 * Queue @wc on @cq (any context, other locks may be held). True if the
 * CQ's handler is due: the caller then runs urdma_kcq_fire() with no lock
 * held. An overflow is remembered for urdma_kcq_fire() to report.
 */
bool urdma_kcq_add(struct urdma_cq *cq, const struct ib_wc *wc, bool solicited)
{
	struct urdma_kcq *k = cq->k;
	unsigned long flags;
	bool fire = false;

	if (!k)
		return false;
	spin_lock_irqsave(&k->lock, flags);
	if (k->count == k->size) {
		if (!k->overflowed)
			k->overflow_pending = true;
		k->overflowed = true;
		fire = true;
	} else {
		k->wc[(k->head + k->count) % k->size] = *wc;
		k->count++;
		if (k->notify == IB_CQ_NEXT_COMP ||
		    (k->notify == IB_CQ_SOLICITED &&
		     (solicited || wc->status != IB_WC_SUCCESS))) {
			k->notify = 0;
			k->fire_pending = true;
			fire = true;
		}
	}
	spin_unlock_irqrestore(&k->lock, flags);
	return fire;
}

/* Run @cq's completion handler, or report its overflow, as due. */
void urdma_kcq_fire(struct urdma_cq *cq)
{
	struct urdma_kcq *k = cq->k;
	bool fire, overflow;
	unsigned long flags;

	if (!k)
		return;
	spin_lock_irqsave(&k->lock, flags);
	fire = k->fire_pending;
	overflow = k->overflow_pending;
	k->fire_pending = false;
	k->overflow_pending = false;
	spin_unlock_irqrestore(&k->lock, flags);

	if (fire && cq->ibcq.comp_handler)
		cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
	if (overflow && cq->ibcq.event_handler) {
		struct ib_event ev = {
			.device = cq->ibcq.device,
			.event = IB_EVENT_CQ_ERR,
			.element.cq = &cq->ibcq,
		};

		cq->ibcq.event_handler(&ev, cq->ibcq.cq_context);
	}
}

/* Queue @wc on @cq, then run its completion handler if it was armed. */
void urdma_kcq_push(struct urdma_cq *cq, const struct ib_wc *wc,
		    bool solicited)
{
	if (urdma_kcq_add(cq, wc, solicited))
		urdma_kcq_fire(cq);
}

int urdma_poll_kcq(struct urdma_cq *cq, int n, struct ib_wc *wc)
{
	struct urdma_kcq *k = cq->k;
	unsigned long flags;
	int i = 0;

	spin_lock_irqsave(&k->lock, flags);
	while (i < n && k->count) {
		wc[i++] = k->wc[k->head];
		k->head = (k->head + 1) % k->size;
		k->count--;
	}
	/* Room again: a later overflow is reported again. */
	if (i)
		k->overflowed = false;
	spin_unlock_irqrestore(&k->lock, flags);
	return i;
}

int urdma_notify_kcq(struct urdma_cq *cq, enum ib_cq_notify_flags flags)
{
	struct urdma_kcq *k = cq->k;
	unsigned long irq;
	int missed = 0;

	spin_lock_irqsave(&k->lock, irq);
	/* Armed for every completion stays so when asked for solicited. */
	if (k->notify != IB_CQ_NEXT_COMP)
		k->notify = flags & IB_CQ_SOLICITED_MASK;
	if ((flags & IB_CQ_REPORT_MISSED_EVENTS) && k->count)
		missed = 1;
	spin_unlock_irqrestore(&k->lock, irq);
	return missed;
}

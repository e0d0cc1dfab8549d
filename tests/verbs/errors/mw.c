// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * Memory windows: allocation, type 1 binds through ibv_bind_mw (the
 * R_Key moves on, the completion says BIND_MW), type 2 binds through
 * IBV_WR_BIND_MW, and the errors libibverbs and the provider give for
 * bad kinds, a region of another PD, rights a window cannot carry, a
 * region or PD still in use, and an invalidation of a key that names no
 * type 2 window (the completion fails and the QP with it).
 */

#include "errors.h"

/* The one completion the CQ holds within a second. */
static int one_wc(struct ibv_cq *cq, struct ibv_wc *wc)
{
	int i;

	for (i = 0; i < 1000; i++) {
		if (ibv_poll_cq(cq, 1, wc) == 1)
			return 1;
		usleep(1000);
	}
	return 0;
}

void memory_windows(void)
{
	static char buf[8192];
	struct ibv_mw_bind b = { .wr_id = 7, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr wr = { .wr_id = 8, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;
	struct ibv_mw *mw1, *mw2;
	struct ibv_pd *pd2;
	struct ibv_mr *mr, *mr2;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_wc wc;
	uint32_t rkey;

	NULL_ERRNO(ibv_alloc_mw(pd, 3), EINVAL);
	mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw1 && mw2 && mw1->rkey != mw2->rkey);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	qp = cq ? rc_qp(cq, NULL) : NULL;
	mr = ibv_reg_mr(pd, buf, sizeof(buf),
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	pd2 = ibv_alloc_pd(ctx);
	mr2 = pd2 ? ibv_reg_mr(pd2, buf, 4096, IBV_ACCESS_MW_BIND) : NULL;
	CHECK(cq && qp && mr && mr2 && connect_qp(qp, qp->qp_num) == 0);
	if (!mw1 || !mw2 || !cq || !qp || !mr || !mr2)
		return;

	/* A type 2 window is not bound by ibv_bind_mw; a region of another
	 * PD is refused by libibverbs. */
	b.bind_info = (struct ibv_mw_bind_info){ mr, (uintptr_t)buf, 4096,
						 IBV_ACCESS_REMOTE_WRITE };
	RET_ERRNO(ibv_bind_mw(qp, mw2, &b), EINVAL);
	b.bind_info.mr = mr2;
	RET_ERRNO(ibv_bind_mw(qp, mw1, &b), EPERM);
	/* Rights a window cannot carry. */
	b.bind_info.mr = mr;
	b.bind_info.mw_access_flags = IBV_ACCESS_MW_BIND;
	RET_ERRNO(ibv_bind_mw(qp, mw1, &b), EINVAL);

	b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	rkey = mw1->rkey;
	CHECK(ibv_bind_mw(qp, mw1, &b) == 0);
	CHECK(mw1->rkey != rkey && (mw1->rkey >> 8) == (rkey >> 8));
	CHECK(one_wc(cq, &wc) && wc.wr_id == 7 &&
	      wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW);
	RET_ERRNO(ibv_dereg_mr(mr), EBUSY);
	RET_ERRNO(ibv_dealloc_pd(pd2), EBUSY);

	/* A type 1 window in a BIND_MW work request: refused at post. */
	wr.opcode = IBV_WR_BIND_MW;
	wr.bind_mw.mw = mw1;
	wr.bind_mw.rkey = ibv_inc_rkey(mw1->rkey);
	wr.bind_mw.bind_info = b.bind_info;
	CHECK(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr);
	/* Type 2 through the work request. */
	wr.bind_mw.mw = mw2;
	wr.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
	CHECK(ibv_post_send(qp, &wr, &bad) == 0);
	CHECK(one_wc(cq, &wc) && wc.wr_id == 8 &&
	      wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW);
	wr.opcode = IBV_WR_LOCAL_INV;
	wr.invalidate_rkey = wr.bind_mw.rkey;
	CHECK(ibv_post_send(qp, &wr, &bad) == 0);
	CHECK(one_wc(cq, &wc) && wc.status == IBV_WC_SUCCESS &&
	      wc.opcode == IBV_WC_LOCAL_INV);

	/* A zero-length bind takes the type 1 window back. */
	b.bind_info = (struct ibv_mw_bind_info){ NULL, 0, 0, 0 };
	CHECK(ibv_bind_mw(qp, mw1, &b) == 0);
	CHECK(one_wc(cq, &wc) && wc.status == IBV_WC_SUCCESS);
	CHECK(ibv_dereg_mr(mr) == 0);

	/* An invalidation of a key that names no type 2 window fails, and
	 * the QP with it. */
	wr.invalidate_rkey = mw1->rkey;
	CHECK(ibv_post_send(qp, &wr, &bad) == 0);
	CHECK(one_wc(cq, &wc) && wc.status == IBV_WC_LOC_QP_OP_ERR &&
	      wc.opcode == IBV_WC_LOCAL_INV);

	RET_ERRNO(ibv_dealloc_pd(pd), EBUSY);
	CHECK(ibv_dealloc_mw(mw1) == 0 && ibv_dealloc_mw(mw2) == 0);
	CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0);
	CHECK(ibv_dereg_mr(mr2) == 0 && ibv_dealloc_pd(pd2) == 0);
}

// SPDX-License-Identifier: MIT OR Apache-2.0
/* QP error paths: wrong states, bad attributes and out-of-range values. */

#include "errors.h"

struct ibv_qp *rc_qp(struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq,
		.recv_cq = cq,
		.srq = srq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16,
			 .max_send_sge = 2, .max_recv_sge = 2,
			 .max_inline_data = 64 },
		.qp_type = IBV_QPT_RC,
	};

	return ibv_create_qp(pd, &a);
}

static int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = ACCESS,
	};

	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			     IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static struct ibv_qp_attr rtr_attr(uint32_t dest)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = dest,
		.max_dest_rd_atomic = 4,
		.min_rnr_timer = 1,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = gid, .hop_limit = 64 } },
	};

	return a;
}

#define RTR_MASK (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |		\
		  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |			\
		  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define RTS_MASK (IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |	\
		  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)

int connect_qp(struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr a = rtr_attr(dest);
	int r = to_init(qp);

	if (r)
		return r;
	r = ibv_modify_qp(qp, &a, RTR_MASK);
	if (r)
		return r;
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	return ibv_modify_qp(qp, &a, RTS_MASK);
}

void qp_errors(void)
{
	static char buf[4096];
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr bad = { .send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1,
			 .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), ACCESS);
	struct ibv_sge sge = { (uintptr_t)buf, 16, mr ? mr->lkey : 0 };
	struct ibv_send_wr swr = { .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_SEND }, *bad_s = NULL;
	struct ibv_recv_wr rwr = { .sg_list = &sge, .num_sge = 1 },
			   *bad_r = NULL;
	struct ibv_qp_attr a, q;
	struct ibv_qp_init_attr init;
	struct ibv_qp *qp;

	NULL_ERRNO(ibv_create_qp(pd, NULL), EINVAL);
	NULL_ERRNO(ibv_create_qp(NULL, &bad), EINVAL);
	bad.qp_type = 77;
	NULL_ERRNO(ibv_create_qp(pd, &bad), EINVAL);
	bad.qp_type = IBV_QPT_XRC_SEND;
	NULL_ERRNO(ibv_create_qp(pd, &bad), EOPNOTSUPP);
	bad.qp_type = IBV_QPT_RC;
	bad.send_cq = NULL;
	NULL_ERRNO(ibv_create_qp(pd, &bad), EINVAL);
	bad.send_cq = cq;
	bad.cap.max_send_wr = 1 << 30;
	NULL_ERRNO(ibv_create_qp(pd, &bad), EINVAL);

	qp = rc_qp(cq, NULL);
	CHECK(qp && qp->state == IBV_QPS_RESET);
	if (!qp || !mr)
		return;
	CHECK(ibv_qp_to_qp_ex(qp) == NULL);
	RET_ERRNO(ibv_destroy_cq(cq), EBUSY);

	/* Posting before the QP can send or receive. */
	RET_ERRNO(ibv_post_send(qp, &swr, &bad_s), EINVAL);
	CHECK(bad_s == &swr);
	RET_ERRNO(ibv_post_recv(qp, &rwr, &bad_r), EINVAL);
	CHECK(bad_r == &rwr);

	/* Transitions and attributes. */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	RET_ERRNO(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
	RET_ERRNO(ibv_modify_qp(qp, NULL, IBV_QP_STATE), EINVAL);
	RET_ERRNO(ibv_modify_qp(NULL, &a, IBV_QP_STATE), EINVAL);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	RET_ERRNO(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT), EINVAL);
	a.port_num = 2;
	RET_ERRNO(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), EINVAL);
	a.port_num = 1;
	a.pkey_index = 1;
	RET_ERRNO(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), EINVAL);
	RET_ERRNO(ibv_modify_qp(qp, &a, IBV_QP_STATE | (1 << 22)), EINVAL);
	CHECK(to_init(qp) == 0 && qp->state == IBV_QPS_INIT);

	a = rtr_attr(qp->qp_num);
	a.ah_attr.is_global = 0;
	RET_ERRNO(ibv_modify_qp(qp, &a, RTR_MASK), EINVAL);
	a = rtr_attr(qp->qp_num);
	a.ah_attr.grh.sgid_index = 3;
	RET_ERRNO(ibv_modify_qp(qp, &a, RTR_MASK), EINVAL);
	a = rtr_attr(1 << 24);
	RET_ERRNO(ibv_modify_qp(qp, &a, RTR_MASK), EINVAL);
	a = rtr_attr(qp->qp_num);
	a.path_mtu = 9;
	RET_ERRNO(ibv_modify_qp(qp, &a, RTR_MASK), EINVAL);
	a = rtr_attr(qp->qp_num);
	RET_ERRNO(ibv_modify_qp(qp, &a, RTR_MASK | IBV_QP_ALT_PATH),
		  EOPNOTSUPP);
	RET_ERRNO(ibv_modify_qp(qp, &a, RTR_MASK & ~IBV_QP_AV), EINVAL);
	CHECK(ibv_modify_qp(qp, &a, RTR_MASK) == 0);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 40;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	RET_ERRNO(ibv_modify_qp(qp, &a, RTS_MASK), EINVAL);
	a.timeout = 14;
	a.retry_cnt = 8;
	RET_ERRNO(ibv_modify_qp(qp, &a, RTS_MASK), EINVAL);
	a.retry_cnt = 7;
	a.max_rd_atomic = 255;
	RET_ERRNO(ibv_modify_qp(qp, &a, RTS_MASK), EINVAL);
	a.max_rd_atomic = 1;
	CHECK(ibv_modify_qp(qp, &a, RTS_MASK) == 0);
	CHECK(ibv_query_qp(qp, &q, IBV_QP_STATE, &init) == 0 &&
	      q.qp_state == IBV_QPS_RTS && q.path_mtu == IBV_MTU_1024 &&
	      q.dest_qp_num == qp->qp_num && init.cap.max_inline_data == 64 &&
	      init.send_cq == cq);
	/* The mask of a query is a hint: any bits are taken (pyverbs asks
	 * with 0x1ffffff), and every attribute comes back.
	 */
	memset(&q, 0, sizeof(q));
	memset(&init, 0, sizeof(init));
	CHECK(ibv_query_qp(qp, &q, 0x1ffffff, &init) == 0 &&
	      q.qp_state == IBV_QPS_RTS && q.path_mtu == IBV_MTU_1024 &&
	      q.dest_qp_num == qp->qp_num && init.cap.max_inline_data == 64 &&
	      init.send_cq == cq);

	/* Bad work requests. */
	swr.opcode = 99;
	RET_ERRNO(ibv_post_send(qp, &swr, &bad_s), EINVAL);
	swr.opcode = IBV_WR_TSO;
	RET_ERRNO(ibv_post_send(qp, &swr, &bad_s), EOPNOTSUPP);
	/* A bind that names no window. */
	swr.opcode = IBV_WR_BIND_MW;
	RET_ERRNO(ibv_post_send(qp, &swr, &bad_s), EINVAL);
	swr.opcode = IBV_WR_SEND;
	swr.num_sge = 3;
	RET_ERRNO(ibv_post_send(qp, &swr, &bad_s), EINVAL);
	swr.num_sge = 1;
	swr.send_flags = IBV_SEND_INLINE;
	sge.length = 1000;
	RET_ERRNO(ibv_post_send(qp, &swr, &bad_s), EINVAL);
	swr.send_flags = 1 << 20;
	RET_ERRNO(ibv_post_send(qp, &swr, &bad_s), EINVAL);

	CHECK(ibv_destroy_qp(qp) == 0);
	RET_ERRNO(ibv_destroy_qp(qp), EINVAL);
	RET_ERRNO(ibv_destroy_qp(NULL), EINVAL);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_destroy_cq(cq) == 0);
}

/* Poll CQ until it has N completions (at most 5 s); the number seen. */
static int wait_completions(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int got = 0, i;

	for (i = 0; i < 5000 && got < n; i++) {
		int r = ibv_poll_cq(cq, n - got, wc + got);

		if (r < 0)
			return r;
		got += r;
		if (got < n)
			usleep(1000);
	}
	return got;
}

/*
 * A destroyed QP leaves none of its completions in the CQ it shared, as
 * hardware drivers clean their CQs of it: receives flushed by ERR wait
 * in the CQ until the QP is destroyed, then are gone, and another QP's
 * completions stay.
 */
void destroyed_qp_completions(void)
{
	static char buf[64];
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), ACCESS);
	struct ibv_sge sge = { (uintptr_t)buf, 16, mr ? mr->lkey : 0 };
	struct ibv_recv_wr rwr = { .sg_list = &sge, .num_sge = 1 },
			   *bad_r = NULL;
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	struct ibv_qp *qp[2] = { NULL, NULL };
	struct ibv_wc wc[8];
	int i;

	CHECK(cq && mr);
	if (!cq || !mr)
		return;
	for (i = 0; i < 2; i++) {
		qp[i] = rc_qp(cq, NULL);
		CHECK(qp[i] && to_init(qp[i]) == 0);
		if (!qp[i])
			return;
		rwr.wr_id = i;
		CHECK(ibv_post_recv(qp[i], &rwr, &bad_r) == 0);
		CHECK(ibv_post_recv(qp[i], &rwr, &bad_r) == 0);
		CHECK(ibv_modify_qp(qp[i], &err, IBV_QP_STATE) == 0);
	}
	/* Both QPs' flushed receives are in the CQ (ERR flushes at once;
	 * the pause covers a busy machine); the first QP goes.
	 */
	usleep(100000);
	CHECK(ibv_destroy_qp(qp[0]) == 0);
	CHECK(wait_completions(cq, 2, wc) == 2);
	for (i = 0; i < 2; i++)
		CHECK(wc[i].wr_id == 1 && wc[i].status == IBV_WC_WR_FLUSH_ERR &&
		      wc[i].qp_num == qp[1]->qp_num);
	/* Nothing of the destroyed QP is left behind them. */
	usleep(50000);
	CHECK(ibv_poll_cq(cq, 8, wc) == 0);
	CHECK(ibv_destroy_qp(qp[1]) == 0);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_destroy_cq(cq) == 0);
}

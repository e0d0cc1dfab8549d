// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * Error paths of the verbs API on urdma, as a C program sees them: bad
 * handles, bad attributes, wrong QP states and out-of-range values must
 * fail with the errno libibverbs documents, never crash. A few positive
 * paths that only events can show are checked too: completion events on
 * a channel fd and asynchronous events on the context's async_fd, both
 * through poll(2), with two RC QPs of one device connected to each other.
 *
 * The data-path verbs (ibv_post_send, ibv_post_recv, ibv_poll_cq,
 * ibv_req_notify_cq) are inline functions of verbs.h that dereference
 * their handle in the application before reaching the library, so only
 * live handles are passed to them here.
 *
 * Built against the installed <infiniband/verbs.h>, linked -libverbs and
 * run under `urdma run --addr 127.0.0.1`. Prints one line per failed
 * check and ends with "N passed, N failed".
 */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int passed, failed;

#define CHECK(cond)							\
	do {								\
		if (cond) {						\
			passed++;					\
		} else {						\
			failed++;					\
			printf("FAIL line %d: %s (errno %d)\n",		\
			       __LINE__, #cond, errno);			\
		}							\
	} while (0)

/* A call returning NULL must set errno to err. */
#define NULL_ERRNO(expr, err)						\
	do {								\
		errno = 0;						\
		void *p_ = (void *)(expr);				\
		CHECK(!p_ && errno == (err));				\
	} while (0)

/* A call returning an errno value must return err. */
#define RET_ERRNO(expr, err)						\
	do {								\
		int r_ = (expr);					\
		if (r_ != (err))					\
			printf("  got %d, want %d\n", r_, (err));	\
		CHECK(r_ == (err));					\
	} while (0)

/* A call returning -1 must set errno to err. */
#define NEG_ERRNO(expr, err)						\
	do {								\
		errno = 0;						\
		int r_ = (expr);					\
		CHECK(r_ == -1 && errno == (err));			\
	} while (0)

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |	\
		IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;

static void queries(void)
{
	struct ibv_device_attr dattr;
	struct ibv_device_attr_ex xattr;
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	struct ibv_port_attr pattr;
	struct ibv_gid_entry entry;
	union ibv_gid g;
	__be16 pkey;

	RET_ERRNO(ibv_query_device(NULL, &dattr), EINVAL);
	RET_ERRNO(ibv_query_device(ctx, NULL), EINVAL);
	CHECK(ibv_query_device(ctx, &dattr) == 0 && dattr.phys_port_cnt == 1);
	CHECK(ibv_query_device_ex(ctx, NULL, &xattr) == 0 &&
	      xattr.orig_attr.max_qp_wr == dattr.max_qp_wr);
	RET_ERRNO(ibv_query_device_ex(ctx, &in, &xattr), EINVAL);
	RET_ERRNO(ibv_query_port(ctx, 2, &pattr), EINVAL);
	RET_ERRNO(ibv_query_port(ctx, 0, &pattr), EINVAL);
	CHECK(ibv_query_port(ctx, 1, &pattr) == 0 &&
	      pattr.state == IBV_PORT_ACTIVE &&
	      pattr.link_layer == IBV_LINK_LAYER_ETHERNET &&
	      pattr.active_mtu == IBV_MTU_4096 && pattr.gid_tbl_len == 1);
	NEG_ERRNO(ibv_query_gid(ctx, 1, 1, &g), EINVAL);
	NEG_ERRNO(ibv_query_gid(ctx, 1, -1, &g), EINVAL);
	NEG_ERRNO(ibv_query_gid(ctx, 3, 0, &g), EINVAL);
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0 &&
	      gid.raw[10] == 0xff && gid.raw[11] == 0xff &&
	      gid.raw[12] == 127 && gid.raw[15] == 1);
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &entry, 0) == 0 &&
	      entry.gid_type == IBV_GID_TYPE_ROCE_V2 &&
	      !memcmp(&entry.gid, &gid, sizeof(gid)));
	RET_ERRNO(ibv_query_gid_ex(ctx, 1, 4, &entry, 0), EINVAL);
	RET_ERRNO(ibv_query_gid_ex(ctx, 1, 0, &entry, 1), EINVAL);
	CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == 0xffff);
	NEG_ERRNO(ibv_query_pkey(ctx, 1, 1, &pkey), EINVAL);
	CHECK(ibv_get_pkey_index(ctx, 1, htons(0xffff)) == 0);
	CHECK(ibv_get_pkey_index(ctx, 1, htons(0x1234)) < 0);
}

static void memory(void)
{
	static char buf[8192];
	struct ibv_mr *mr;
	void *gone;

	NULL_ERRNO(ibv_alloc_pd(NULL), EINVAL);
	RET_ERRNO(ibv_dealloc_pd(NULL), EINVAL);
	NULL_ERRNO(ibv_reg_mr(NULL, buf, sizeof(buf), ACCESS), EINVAL);
	NULL_ERRNO(ibv_reg_mr(pd, NULL, 4096, ACCESS), EFAULT);
	NULL_ERRNO(ibv_reg_mr(pd, buf, 0, ACCESS), EINVAL);
	/* Remote write needs local write. */
	NULL_ERRNO(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE),
		   EINVAL);
	NULL_ERRNO(ibv_reg_mr(pd, buf, sizeof(buf), 1 << 12), EINVAL);
	NULL_ERRNO(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_ON_DEMAND),
		   EOPNOTSUPP);
	gone = mmap(NULL, 8192, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(gone, 8192);
	NULL_ERRNO(ibv_reg_mr(pd, gone, 8192, ACCESS), EFAULT);

	mr = ibv_reg_mr(pd, buf, sizeof(buf), ACCESS);
	CHECK(mr && mr->lkey && mr->addr == buf && mr->length == sizeof(buf));
	RET_ERRNO(ibv_dealloc_pd(pd), EBUSY);
	RET_ERRNO(ibv_dereg_mr(NULL), EINVAL);
	CHECK(ibv_dereg_mr(mr) == 0);
	RET_ERRNO(ibv_dereg_mr(mr), EINVAL);
	mr = ibv_reg_mr_iova2(pd, buf, 4096, 0x10000, ACCESS);
	CHECK(mr && mr->lkey);
	if (mr)
		CHECK(ibv_dereg_mr(mr) == 0);
	NULL_ERRNO(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 3, ACCESS), EOPNOTSUPP);
}

static void queues(void)
{
	struct ibv_device_attr dattr;
	struct ibv_comp_channel *ch;
	struct ibv_cq_init_attr_ex cqx = {
		.cqe = 4,
		.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
	};
	struct ibv_cq *cq, *dummy;
	void *cq_ctx;
	struct ibv_wc wc;

	ibv_query_device(ctx, &dattr);
	NULL_ERRNO(ibv_create_cq(NULL, 4, NULL, NULL, 0), EINVAL);
	NULL_ERRNO(ibv_create_cq(ctx, 0, NULL, NULL, 0), EINVAL);
	NULL_ERRNO(ibv_create_cq(ctx, -1, NULL, NULL, 0), EINVAL);
	NULL_ERRNO(ibv_create_cq(ctx, dattr.max_cqe + 1, NULL, NULL, 0),
		   EINVAL);
	NULL_ERRNO(ibv_create_cq(ctx, 4, NULL, NULL, 1), EINVAL);
	NULL_ERRNO(ibv_create_cq(ctx, 4, NULL, (void *)&dattr, 0), EINVAL);
	NULL_ERRNO(ibv_create_cq_ex(ctx, &cqx), EOPNOTSUPP);
	RET_ERRNO(ibv_destroy_cq(NULL), EINVAL);
	NULL_ERRNO(ibv_create_comp_channel(NULL), EINVAL);
	RET_ERRNO(ibv_destroy_comp_channel(NULL), EINVAL);

	ch = ibv_create_comp_channel(ctx);
	CHECK(ch && ch->fd >= 0);
	cq = ibv_create_cq(ctx, 8, NULL, ch, 0);
	CHECK(cq && cq->cqe >= 8);
	RET_ERRNO(ibv_destroy_comp_channel(ch), EBUSY);
	RET_ERRNO(ibv_resize_cq(cq, 1 << 20), EOPNOTSUPP);
	CHECK(ibv_poll_cq(cq, 1, &wc) == 0);
	/* Nothing armed, nothing waiting: a non-blocking channel says so. */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	NEG_ERRNO(ibv_get_cq_event(ch, &dummy, &cq_ctx), EAGAIN);
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_destroy_comp_channel(ch) == 0);
}

static struct ibv_qp *rc_qp(struct ibv_cq *cq, struct ibv_srq *srq)
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

static int connect_qp(struct ibv_qp *qp, uint32_t dest)
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

static void qp_errors(void)
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

	/* Bad work requests. */
	swr.opcode = 99;
	RET_ERRNO(ibv_post_send(qp, &swr, &bad_s), EINVAL);
	swr.opcode = IBV_WR_BIND_MW;
	RET_ERRNO(ibv_post_send(qp, &swr, &bad_s), EOPNOTSUPP);
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

static void address_handles(void)
{
	struct ibv_ah_attr a = { .is_global = 1, .port_num = 1,
				 .grh = { .dgid = gid, .hop_limit = 64 } };
	struct ibv_ah *ah;

	NULL_ERRNO(ibv_create_ah(NULL, &a), EINVAL);
	NULL_ERRNO(ibv_create_ah(pd, NULL), EINVAL);
	a.is_global = 0;
	NULL_ERRNO(ibv_create_ah(pd, &a), EINVAL);
	a.is_global = 1;
	a.port_num = 2;
	NULL_ERRNO(ibv_create_ah(pd, &a), EINVAL);
	a.port_num = 1;
	memset(&a.grh.dgid, 0, sizeof(a.grh.dgid));
	NULL_ERRNO(ibv_create_ah(pd, &a), EINVAL);
	a.grh.dgid = gid;
	ah = ibv_create_ah(pd, &a);
	CHECK(ah != NULL);
	RET_ERRNO(ibv_dealloc_pd(pd), EBUSY);
	CHECK(ah && ibv_destroy_ah(ah) == 0);
	RET_ERRNO(ibv_destroy_ah(NULL), EINVAL);
}

/* Wait for fd to become readable. */
static int readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 5000) == 1 && (p.revents & POLLIN);
}

/*
 * Two RC QPs of this device connected to each other; b takes its receives
 * from an SRQ. Completion events on a channel fd, the SRQ limit event,
 * and the events of a remote access violation on the async fd.
 */
static void events(void)
{
	static char buf[4096] __attribute__((aligned(64)));
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ch ? ibv_create_cq(ctx, 64, (void *)0x5a, ch, 0) :
				 NULL;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8,
						  .max_sge = 1 } };
	struct ibv_srq_attr sattr;
	struct ibv_srq *srq;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), ACCESS);
	struct ibv_sge sge = { (uintptr_t)buf, 64, mr ? mr->lkey : 0 };
	struct ibv_recv_wr rwr = { .sg_list = &sge, .num_sge = 1 }, *bad_r;
	struct ibv_send_wr swr = { .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED }, *bad_s;
	struct ibv_async_event ev;
	struct ibv_cq *ev_cq;
	struct ibv_wc wc[8];
	struct ibv_qp *a, *b;
	void *ev_ctx;
	int i, n, got = 0;

	CHECK(cq && mr);
	if (!cq || !mr)
		return;
	sa.attr.max_wr = 0;
	NULL_ERRNO(ibv_create_srq(pd, &sa), EINVAL);
	sa.attr.max_wr = 1 << 30;
	NULL_ERRNO(ibv_create_srq(pd, &sa), EINVAL);
	sa.attr.max_wr = 8;
	srq = ibv_create_srq(pd, &sa);
	CHECK(srq && sa.attr.max_wr >= 8);
	if (!srq)
		return;
	a = rc_qp(cq, NULL);
	b = rc_qp(cq, srq);
	CHECK(a && b);
	if (!a || !b)
		return;
	RET_ERRNO(ibv_destroy_srq(srq), EBUSY);
	CHECK(connect_qp(a, b->qp_num) == 0 && connect_qp(b, a->qp_num) == 0);
	RET_ERRNO(ibv_post_recv(b, &rwr, &bad_r), EINVAL);
	for (i = 0; i < 4; i++)
		CHECK(ibv_post_srq_recv(srq, &rwr, &bad_r) == 0);
	sattr.srq_limit = 100;
	RET_ERRNO(ibv_modify_srq(srq, &sattr, IBV_SRQ_LIMIT), EINVAL);
	sattr.max_wr = 64;
	RET_ERRNO(ibv_modify_srq(srq, &sattr, IBV_SRQ_MAX_WR), EOPNOTSUPP);
	sattr.srq_limit = 3;
	CHECK(ibv_modify_srq(srq, &sattr, IBV_SRQ_LIMIT) == 0);
	CHECK(ibv_query_srq(srq, &sattr) == 0 && sattr.srq_limit == 3);

	/* Two SENDs a -> b; the CQ is armed, so the channel fd wakes. */
	CHECK(ibv_req_notify_cq(cq, 0) == 0);
	strcpy(buf, "urdma");
	CHECK(ibv_post_send(a, &swr, &bad_s) == 0);
	CHECK(ibv_post_send(a, &swr, &bad_s) == 0);
	CHECK(readable(ch->fd));
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq &&
	      ev_ctx == (void *)0x5a);
	ibv_ack_cq_events(cq, 1);
	for (i = 0; i < 100 && got < 4; i++) {
		n = ibv_poll_cq(cq, 8, wc);
		CHECK(n >= 0);
		while (n-- > 0) {
			CHECK(wc[n].status == IBV_WC_SUCCESS);
			got++;
		}
		if (got < 4)
			usleep(10000);
	}
	CHECK(got == 4);

	/* The SRQ fell below its limit of 3 (2 left). */
	CHECK(readable(ctx->async_fd));
	CHECK(ibv_get_async_event(ctx, &ev) == 0 &&
	      ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED &&
	      ev.element.srq == srq);
	ibv_ack_async_event(&ev);

	/* An RDMA WRITE with a bad rkey: b reports the access violation. */
	swr.opcode = IBV_WR_RDMA_WRITE;
	swr.wr.rdma.remote_addr = (uintptr_t)buf;
	swr.wr.rdma.rkey = mr->rkey ^ 0x5555;
	CHECK(ibv_post_send(a, &swr, &bad_s) == 0);
	for (i = 0, n = 0; i < 500 && n == 0; i++) {
		n = ibv_poll_cq(cq, 1, wc);
		if (!n)
			usleep(10000);
	}
	CHECK(n == 1 && wc[0].status == IBV_WC_REM_ACCESS_ERR &&
	      wc[0].opcode == IBV_WC_RDMA_WRITE);
	CHECK(readable(ctx->async_fd));
	CHECK(ibv_get_async_event(ctx, &ev) == 0 &&
	      ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == b);
	ibv_ack_async_event(&ev);
	/* b is in error with an SRQ: its last WQE is reached. */
	CHECK(readable(ctx->async_fd));
	CHECK(ibv_get_async_event(ctx, &ev) == 0 &&
	      ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED &&
	      ev.element.qp == b);
	ibv_ack_async_event(&ev);
	/* Nothing else waits: a non-blocking async fd says so. */
	fcntl(ctx->async_fd, F_SETFL,
	      fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	NEG_ERRNO(ibv_get_async_event(ctx, &ev), EAGAIN);

	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0);
	CHECK(ibv_destroy_srq(srq) == 0);
	while (ibv_poll_cq(cq, 8, wc) > 0)
		;
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_destroy_comp_channel(ch) == 0);
	CHECK(ibv_dereg_mr(mr) == 0);
}

static void strings_and_misc(struct ibv_device *dev)
{
	CHECK(!strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success"));
	CHECK(!strcmp(ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR),
		      "remote access error"));
	CHECK(!strcmp(ibv_wc_status_str(1000), "unknown"));
	CHECK(!strcmp(ibv_event_type_str(IBV_EVENT_SRQ_LIMIT_REACHED),
		      "SRQ limit reached"));
	CHECK(!strcmp(ibv_node_type_str(IBV_NODE_CA),
		      "InfiniBand channel adapter"));
	CHECK(!strcmp(ibv_port_state_str(IBV_PORT_ACTIVE), "active"));
	CHECK(ibv_fork_init() == 0);
	CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED);
	CHECK(ibv_get_device_guid(dev) != 0);
	CHECK(ibv_get_device_guid(NULL) == 0);
	CHECK(ibv_get_device_name(NULL) == NULL);
	CHECK(ibv_rate_to_mbps(IBV_RATE_100_GBPS) == 103125);
	NULL_ERRNO(ibv_open_device(NULL), EINVAL);
	RET_ERRNO(ibv_close_device(NULL), EINVAL);
}

/* A second context on the same device shares it; objects do not mix. */
static void second_context(struct ibv_device *dev)
{
	struct ibv_context *c2 = ibv_open_device(dev);
	struct ibv_pd *pd2 = c2 ? ibv_alloc_pd(c2) : NULL;
	struct ibv_cq *cq2 = c2 ? ibv_create_cq(c2, 4, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr a = { .send_cq = cq2, .recv_cq = cq2,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC };
	struct ibv_qp *qp;

	CHECK(c2 && c2 != ctx && pd2 && cq2);
	if (!pd2 || !cq2)
		return;
	/* A CQ of the second context with a PD of the first. */
	NULL_ERRNO(ibv_create_qp(pd, &a), EINVAL);
	qp = ibv_create_qp(pd2, &a);
	CHECK(qp != NULL);
	CHECK(qp && ibv_destroy_qp(qp) == 0);
	CHECK(ibv_destroy_cq(cq2) == 0);
	CHECK(ibv_dealloc_pd(pd2) == 0);
	CHECK(ibv_close_device(c2) == 0);
	RET_ERRNO(ibv_close_device(c2), EINVAL);
}

int main(void)
{
	struct ibv_device **list;
	int n = -1;

	list = ibv_get_device_list(&n);
	CHECK(list && n == 1 && list[0] && !list[1]);
	if (!list || n < 1) {
		printf("%d passed, %d failed\n", passed, failed + 1);
		return 1;
	}
	CHECK(!strcmp(ibv_get_device_name(list[0]), "urdma0"));
	ctx = ibv_open_device(list[0]);
	CHECK(ctx != NULL);
	if (!ctx)
		return 1;
	pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL);

	second_context(list[0]);
	queries();
	memory();
	queues();
	qp_errors();
	address_handles();
	events();
	strings_and_misc(list[0]);

	CHECK(ibv_dealloc_pd(pd) == 0);
	RET_ERRNO(ibv_dealloc_pd(pd), EINVAL);
	CHECK(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);

	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}

// SPDX-License-Identifier: MIT OR Apache-2.0
/* Completion events and asynchronous events seen through poll(2). */

#include "errors.h"

#include <signal.h>
#include <sys/time.h>

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
void events(void)
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
	/* Four requests wait: the SRQ cannot shrink below them; it grows,
	 * and the receives below come from what waited in the old ring. */
	sattr.max_wr = 2;
	RET_ERRNO(ibv_modify_srq(srq, &sattr, IBV_SRQ_MAX_WR), EINVAL);
	sattr.max_wr = 64;
	CHECK(ibv_modify_srq(srq, &sattr, IBV_SRQ_MAX_WR) == 0);
	CHECK(ibv_query_srq(srq, &sattr) == 0 && sattr.max_wr >= 64);
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

static void on_alarm(int sig)
{
	(void)sig;
}

/*
 * A signal whose handler does not ask for restarts ends a blocking
 * ibv_get_cq_event with EINTR, as it ends the read of a verbs event file:
 * programs (qperf) stop waiting for a completion that way.
 */
void interrupted_wait(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ch ? ibv_create_cq(ctx, 4, NULL, ch, 0) : NULL;
	struct sigaction sa = { .sa_handler = on_alarm }, old;
	struct itimerval t = { .it_value = { .tv_usec = 200000 } };
	struct ibv_cq *ev_cq;
	void *ev_ctx;

	CHECK(cq != NULL);
	if (!cq)
		return;
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGALRM, &sa, &old) == 0);
	CHECK(ibv_req_notify_cq(cq, 0) == 0);
	CHECK(setitimer(ITIMER_REAL, &t, NULL) == 0);
	NEG_ERRNO(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), EINTR);
	sigaction(SIGALRM, &old, NULL);
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_destroy_comp_channel(ch) == 0);
}

// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * The cases of `remote`. Each runs on both ends: E.requester tells which
 * half this process plays. Offsets are into each end's registered buffer:
 *
 *   0x0000-0x1fff  receive slots of 1 KiB (responder), send sources
 *                  (requester)
 *   0x2000-0x2fff  RDMA WRITE targets (responder), sources (requester)
 *   0x3000-0x3fff  RDMA READ sources (responder), targets (requester)
 *   0x4000         the atomic target (responder), results (requester)
 *   0x6000         scratch space
 *   0x7000         UD receive slots of GRH + 256 bytes
 */

#include <poll.h>

#include "remote.h"

#define SLOT(i) ((uint32_t)(i) * 1024)
#define WRITE_AT 0x2000u
#define READ_AT 0x3000u
#define ATOMIC_AT 0x4000u
#define SCRATCH_AT 0x6000u
#define UD_AT 0x7000u
#define UD_SLOT (GRH + 256)
#define ATOMIC_START 0x1122334455667788ull
#define ATOMIC_SWAP 0x0101010101010101ull
#define ATOMIC_ADD 5ull

static uint64_t remote(uint32_t off)
{
	return E.peer.addr + off;
}

/* A receive completion on `qpn` of `len` bytes, with immediate `imm` when
 * `with_imm`. */
static void expect_recv(uint64_t wr_id, enum ibv_wc_opcode op, uint32_t qpn,
			uint32_t len, int with_imm, uint32_t imm)
{
	struct ibv_wc wc;

	expect_wc(E.rcq, wr_id, IBV_WC_SUCCESS, &wc);
	if (wc.status != IBV_WC_SUCCESS)
		return;
	CHECK(wc.opcode == op);
	CHECK(wc.qp_num == qpn);
	CHECK(wc.byte_len == len);
	CHECK(!!(wc.wc_flags & IBV_WC_WITH_IMM) == !!with_imm);
	if (with_imm)
		CHECK(ntohl(wc.imm_data) == imm);
}

/*
 * RNR: the responder has no receive when the SEND arrives and posts one
 * 200 ms later; the SEND must complete after that, not fail.
 */
static void rnr_step(int step, uint32_t slot_off, uint8_t seed)
{
	const uint32_t len = 100;

	sync_peer(step);
	if (E.requester) {
		struct ibv_wc wc;
		double t0 = now_ms(), waited;

		fill(slot_off, len, seed);
		post_op(E.rc[0], IBV_WR_SEND, 0x500, slot_off, len, 0, 0, 0);
		sync_peer(step + 1);
		expect_wc(E.scq, 0x500, IBV_WC_SUCCESS, &wc);
		waited = now_ms() - t0;
		printf("# RNR: the SEND completed after %.0f ms\n", waited);
		CHECK(waited >= 200);
	} else {
		sync_peer(step + 1);
		sleep_ms(200);
		post_recv(E.rc[0], 0x501, slot_off, 1024);
		expect_recv(0x501, IBV_WC_RECV, E.rc[0]->qp_num, len, 0, 0);
		CHECK(same(slot_off, len, seed));
	}
	sync_peer(step + 2);
}

void case_rnr(void)
{
	rnr_step(1, SLOT(0), 1);
}

static const char *state_name(enum ibv_qp_state s)
{
	static const char *names[] = { "RESET", "INIT", "RTR", "RTS", "SQD",
				       "SQE", "ERR" };

	return (unsigned)s < 7 ? names[s] : "unknown";
}

/*
 * The responder's QP `i` after refusing a request: in ERR, the receive
 * posted before flushed (as rxe does). Asynchronous events are shown, not
 * checked: urdma raises the local access violation event, rxe none.
 */
static void responder_after_error(int i)
{
	struct ibv_qp *qp = E.rc[i];
	enum ibv_qp_state s = qp_state(qp);
	struct pollfd p = { .fd = E.ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev;
	struct ibv_wc wc;
	int flushed = 0;

	printf("# responder QP %d after the error: %s\n", i, state_name(s));
	CHECK(s == IBV_QPS_ERR);
	while (wait_wc(E.rcq, &wc, 300)) {
		printf("# responder QP %d: receive %#llx completed: %s\n", i,
		       (unsigned long long)wc.wr_id,
		       ibv_wc_status_str(wc.status));
		flushed += wc.wr_id == 0x600u + i &&
			   wc.status == IBV_WC_WR_FLUSH_ERR;
	}
	CHECK(flushed == 1);
	while (poll(&p, 1, 100) == 1 && ibv_get_async_event(E.ctx, &ev) == 0) {
		printf("# responder: async event %s\n",
		       ibv_event_type_str(ev.event_type));
		ibv_ack_async_event(&ev);
	}
}

/*
 * Remote access errors: RDMA WRITE with a bad R_Key on QP 1, RDMA READ
 * past the end of the MR on QP 2. The WR after each is flushed; QP 0
 * still works.
 */
void case_access(void)
{
	if (!E.requester) {
		post_recv(E.rc[1], 0x601, SLOT(1), 1024);
		post_recv(E.rc[2], 0x602, SLOT(2), 1024);
		fill(READ_AT, 64, 3);
	}
	sync_peer(1);
	if (E.requester) {
		fill(WRITE_AT, 64, 1);
		post_op(E.rc[1], IBV_WR_RDMA_WRITE, 0x101, WRITE_AT, 64,
			remote(WRITE_AT), ~E.peer.rkey, 0);
		post_op(E.rc[1], IBV_WR_SEND, 0x102, WRITE_AT, 8, 0, 0, 0);
		expect_wc(E.scq, 0x101, IBV_WC_REM_ACCESS_ERR, NULL);
		expect_wc(E.scq, 0x102, IBV_WC_WR_FLUSH_ERR, NULL);
		CHECK(qp_state(E.rc[1]) == IBV_QPS_ERR);
	}
	sync_peer(2);
	if (!E.requester) {
		responder_after_error(1);
		/* Nothing of the refused WRITE reached memory. */
		int untouched = 1;

		for (int i = 0; i < 64; i++)
			untouched &= E.buf[WRITE_AT + i] == 0;
		CHECK(untouched);
	}
	sync_peer(3);
	if (E.requester) {
		post_op(E.rc[2], IBV_WR_RDMA_READ, 0x201, READ_AT, 64,
			remote(BUF_LEN - 32), E.peer.rkey, 0);
		post_op(E.rc[2], IBV_WR_RDMA_READ, 0x202, READ_AT, 8,
			remote(READ_AT), E.peer.rkey, 0);
		expect_wc(E.scq, 0x201, IBV_WC_REM_ACCESS_ERR, NULL);
		expect_wc(E.scq, 0x202, IBV_WC_WR_FLUSH_ERR, NULL);
		CHECK(qp_state(E.rc[2]) == IBV_QPS_ERR);
		/* A good request on another QP still succeeds. */
		post_op(E.rc[0], IBV_WR_RDMA_READ, 0x203, READ_AT, 64,
			remote(READ_AT), E.peer.rkey, 0);
		expect_wc(E.scq, 0x203, IBV_WC_SUCCESS, NULL);
		CHECK(same(READ_AT, 64, 3));
		CHECK(qp_state(E.rc[0]) == IBV_QPS_RTS);
	}
	sync_peer(4);
	if (!E.requester) {
		responder_after_error(2);
		CHECK(qp_state(E.rc[0]) == IBV_QPS_RTS);
	}
}

/* SEND and SEND with immediate, one packet and several. */
static void golden_sends(void)
{
	static const struct { uint32_t len; int imm; } m[] = {
		{ 13, 0 }, { 6, 1 }, { 600, 0 }, { 520, 1 },
	};
	int i;

	if (!E.requester)
		for (i = 0; i < 4; i++)
			post_recv(E.rc[0], 0x10 + i, SLOT(i), 1024);
	sync_peer(1);
	for (i = 0; i < 4; i++) {
		uint32_t imm = 0xa0b0c000 + i;

		if (E.requester) {
			fill(SLOT(i), m[i].len, 10 + i);
			post_op(E.rc[0], m[i].imm ? IBV_WR_SEND_WITH_IMM :
				IBV_WR_SEND, 0x10 + i, SLOT(i), m[i].len, 0, 0,
				imm);
			expect_wc(E.scq, 0x10 + i, IBV_WC_SUCCESS, NULL);
		} else {
			expect_recv(0x10 + i, IBV_WC_RECV, E.rc[0]->qp_num,
				    m[i].len, m[i].imm, imm);
			CHECK(same(SLOT(i), m[i].len, 10 + i));
		}
	}
	sync_peer(2);
}

/* RDMA WRITE and WRITE with immediate, one packet and several. */
static void golden_writes(void)
{
	static const struct { uint32_t off, len; int imm; } m[] = {
		{ 0, 13, 0 }, { 0x100, 600, 0 }, { 0x400, 5, 1 },
		{ 0x500, 700, 1 },
	};
	int i;

	if (!E.requester)
		for (i = 0; i < 2; i++)
			post_recv(E.rc[0], 0x22 + i, SLOT(4 + i), 1024);
	sync_peer(3);
	for (i = 0; i < 4; i++) {
		uint32_t off = WRITE_AT + m[i].off, imm = 0xc0d0e000 + i;

		if (E.requester) {
			fill(off, m[i].len, 20 + i);
			post_op(E.rc[0], m[i].imm ? IBV_WR_RDMA_WRITE_WITH_IMM :
				IBV_WR_RDMA_WRITE, 0x20 + i, off, m[i].len,
				remote(off), E.peer.rkey, imm);
			expect_wc(E.scq, 0x20 + i, IBV_WC_SUCCESS, NULL);
		} else if (m[i].imm) {
			/* The receive consumed says the length written. */
			expect_recv(0x20 + i, IBV_WC_RECV_RDMA_WITH_IMM,
				    E.rc[0]->qp_num, m[i].len, 1, imm);
		}
	}
	sync_peer(4);
	if (!E.requester)
		for (i = 0; i < 4; i++)
			CHECK(same(WRITE_AT + m[i].off, m[i].len, 20 + i));
}

/* RDMA READ of one response packet and of several. */
static void golden_reads(void)
{
	static const struct { uint32_t off, len; } m[] = {
		{ 0, 13 }, { 0x100, 600 },
	};
	int i;

	if (!E.requester)
		for (i = 0; i < 2; i++)
			fill(READ_AT + m[i].off, m[i].len, 30 + i);
	sync_peer(5);
	if (E.requester)
		for (i = 0; i < 2; i++) {
			uint32_t off = READ_AT + m[i].off;

			post_op(E.rc[0], IBV_WR_RDMA_READ, 0x30 + i, off,
				m[i].len, remote(off), E.peer.rkey, 0);
			expect_wc(E.scq, 0x30 + i, IBV_WC_SUCCESS, NULL);
			CHECK(same(off, m[i].len, 30 + i));
		}
	sync_peer(6);
}

static void post_atomic(enum ibv_wr_opcode op, uint64_t wr_id, uint32_t off,
			uint64_t compare_add, uint64_t swap)
{
	struct ibv_sge sge = { (uintptr_t)E.buf + off, 8, E.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge,
				  .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED };

	wr.wr.atomic.remote_addr = remote(ATOMIC_AT);
	wr.wr.atomic.rkey = E.peer.rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	post_send(E.rc[0], &wr);
}

/* CMP_AND_SWP that swaps, then FETCH_ADD. */
static void golden_atomics(void)
{
	uint64_t *target = (uint64_t *)(E.buf + ATOMIC_AT);

	if (!E.requester)
		*target = ATOMIC_START;
	sync_peer(7);
	if (E.requester) {
		post_atomic(IBV_WR_ATOMIC_CMP_AND_SWP, 0x40, ATOMIC_AT,
			    ATOMIC_START, ATOMIC_SWAP);
		expect_wc(E.scq, 0x40, IBV_WC_SUCCESS, NULL);
		post_atomic(IBV_WR_ATOMIC_FETCH_AND_ADD, 0x41, ATOMIC_AT + 8,
			    ATOMIC_ADD, 0);
		expect_wc(E.scq, 0x41, IBV_WC_SUCCESS, NULL);
		CHECK(target[0] == ATOMIC_START);
		CHECK(target[1] == ATOMIC_SWAP);
	}
	sync_peer(8);
	if (!E.requester)
		CHECK(*target == ATOMIC_SWAP + ATOMIC_ADD);
}

/*
 * A SEND of three packets (at MTU 256) whose second packet's payload
 * starts with DE AD BE EF: a filter that drops that packet once makes
 * the responder NAK the PSN sequence error and the requester resend.
 */
static void golden_loss(void)
{
	static const uint8_t magic[4] = { 0xde, 0xad, 0xbe, 0xef };
	const uint32_t len = 600, off = SLOT(7);

	if (!E.requester)
		post_recv(E.rc[0], 0x70, off, 1024);
	sync_peer(20);
	if (E.requester) {
		fill(off, len, 70);
		memcpy(E.buf + off + 256, magic, 4);
		post_op(E.rc[0], IBV_WR_SEND, 0x70, off, len, 0, 0, 0);
		expect_wc(E.scq, 0x70, IBV_WC_SUCCESS, NULL);
	} else {
		expect_recv(0x70, IBV_WC_RECV, E.rc[0]->qp_num, len, 0, 0);
		/* What was sent, built in scratch space. */
		fill(SCRATCH_AT, len, 70);
		memcpy(E.buf + SCRATCH_AT + 256, magic, 4);
		CHECK(!memcmp(E.buf + off, E.buf + SCRATCH_AT, len));
	}
	sync_peer(21);
}

/* UD SEND with and without immediate; the receiver gets the GRH area. */
static void golden_ud(void)
{
	static const struct { uint32_t len; int imm; } m[] = {
		{ 20, 0 }, { 9, 1 },
	};
	int i;

	if (!E.requester)
		for (i = 0; i < 2; i++)
			post_recv(E.ud, 0x80 + i, UD_AT + i * UD_SLOT, UD_SLOT);
	sync_peer(30);
	for (i = 0; i < 2; i++) {
		uint32_t off = UD_AT + i * UD_SLOT, imm = 0xe0f00000 + i;
		struct ibv_wc wc;

		if (E.requester) {
			struct ibv_sge sge = { (uintptr_t)E.buf + off + GRH,
					       m[i].len, E.mr->lkey };
			struct ibv_send_wr wr = {
				.wr_id = 0x80 + i, .sg_list = &sge,
				.num_sge = 1,
				.opcode = m[i].imm ? IBV_WR_SEND_WITH_IMM :
						     IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED,
				.imm_data = htonl(imm),
			};

			wr.wr.ud.ah = E.ah;
			wr.wr.ud.remote_qpn = E.peer.ud_qpn;
			wr.wr.ud.remote_qkey = UD_QKEY;
			fill(off + GRH, m[i].len, 80 + i);
			post_send(E.ud, &wr);
			expect_wc(E.scq, 0x80 + i, IBV_WC_SUCCESS, NULL);
			continue;
		}
		expect_wc(E.rcq, 0x80 + i, IBV_WC_SUCCESS, &wc);
		if (wc.status != IBV_WC_SUCCESS)
			continue;
		CHECK(wc.opcode == IBV_WC_RECV);
		CHECK(wc.byte_len == GRH + m[i].len);
		CHECK(wc.src_qp == E.peer.ud_qpn);
		CHECK(wc.wc_flags & IBV_WC_GRH);
		CHECK(!!(wc.wc_flags & IBV_WC_WITH_IMM) == m[i].imm);
		if (m[i].imm)
			CHECK(ntohl(wc.imm_data) == imm);
		CHECK(same(off + GRH, m[i].len, 80 + i));
		/* RoCE v2 over IPv4: the IPv4 header in the GRH's last 20
		 * bytes, from the peer's address to this end's. */
		CHECK(E.buf[off + 20] == 0x45);
		CHECK(E.buf[off + 29] == IPPROTO_UDP);
		CHECK(!memcmp(E.buf + off + 32, E.peer.gid.raw + 12, 4));
		CHECK(!memcmp(E.buf + off + 36, E.me.gid.raw + 12, 4));
	}
	sync_peer(31);
}

void case_golden(void)
{
	golden_sends();
	golden_writes();
	golden_reads();
	golden_atomics();
	rnr_step(10, SLOT(6), 60);
	golden_loss();
	golden_ud();
}

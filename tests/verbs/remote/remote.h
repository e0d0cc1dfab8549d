/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Shared by the parts of the two-process program `remote`: the check
 * macros, the state of one end (device, queues, memory, the peer's
 * numbers) and the helpers the cases use.
 */
#ifndef URDMA_VERBS_REMOTE_H
#define URDMA_VERBS_REMOTE_H

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"

/* RC QPs of each end: 0 carries the traffic, 1 and 2 the access errors. */
#define NRC 3
/* Registered memory of each end. */
#define BUF_LEN 65536
/* Every message is Q_Key'd with this on the UD QPs. */
#define UD_QKEY 0x11111111u
/* Space for the GRH in front of a UD receive. */
#define GRH 40

/* What one end tells the other over TCP. */
struct peer_info {
	uint32_t rc_qpn[NRC];
	uint32_t ud_qpn;
	uint32_t psn;
	uint32_t rkey;
	uint64_t addr;
	union ibv_gid gid;
};

/* This end. */
struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *rc[NRC], *ud;
	struct ibv_ah *ah;
	struct ibv_mr *mr;
	uint8_t *buf;
	int gid_index;
	enum ibv_mtu mtu;
	int requester;
	int sock;
	struct peer_info me, peer;
};

extern struct end E;

/* main.c */
void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
void sync_peer(int step);
double now_ms(void);
void sleep_ms(int ms);
void fill(uint32_t off, uint32_t len, uint8_t seed);
int same(uint32_t off, uint32_t len, uint8_t seed);
void post_recv(struct ibv_qp *qp, uint64_t wr_id, uint32_t off, uint32_t len);
void post_send(struct ibv_qp *qp, struct ibv_send_wr *wr);
void post_op(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id,
	     uint32_t off, uint32_t len, uint64_t raddr, uint32_t rkey,
	     uint32_t imm);
int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int ms);
void expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status status,
	       struct ibv_wc *out);
enum ibv_qp_state qp_state(struct ibv_qp *qp);

/* cases.c */
void case_rnr(void);
void case_access(void);
void case_golden(void);

#endif

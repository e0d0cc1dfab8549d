/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Shared by the parts of the verbs error-path program: the check macros,
 * the device context and PD every part uses, and the parts' entry points.
 */
#ifndef URDMA_VERBS_ERRORS_H
#define URDMA_VERBS_ERRORS_H

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

#include "../check.h"

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

extern struct ibv_context *ctx;
extern struct ibv_pd *pd;
extern union ibv_gid gid;

/* qp.c */
struct ibv_qp *rc_qp(struct ibv_cq *cq, struct ibv_srq *srq);
int connect_qp(struct ibv_qp *qp, uint32_t dest);
void qp_errors(void);
void destroyed_qp_completions(void);

/* mw.c */
void memory_windows(void);

/* events.c */
void events(void);
void interrupted_wait(void);

#endif

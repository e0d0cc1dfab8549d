/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The check counters and macro of the verbs test programs
 * (tests/verbs/errors, tests/verbs/remote).
 */
#ifndef URDMA_VERBS_CHECK_H
#define URDMA_VERBS_CHECK_H

#include <errno.h>
#include <stdio.h>

extern int passed, failed;

/* Count one check; a failed one is printed with its place and errno. */
#define CHECK(cond)							\
	do {								\
		if (cond) {						\
			passed++;					\
		} else {						\
			failed++;					\
			printf("FAIL %s:%d: %s (errno %d)\n",		\
			       __FILE__, __LINE__, #cond, errno);	\
		}							\
	} while (0)

#endif /* URDMA_VERBS_CHECK_H */

// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * remote: what two RoCE devices in two processes do to each other that
 * Debian's verbs programs never provoke, checked from both ends. One
 * process is the server and responder, the other the client and
 * requester; they exchange QP numbers, PSN, GID, R_Key and address over
 * TCP (as ibv_rc_pingpong does) and keep in step over that connection.
 *
 *   remote CASE [-d DEV] [-g GID_INDEX] [-p PORT] [-m MTU] [SERVER]
 *
 * Without SERVER the process listens on PORT (default 18515) and is the
 * responder; with it, it connects and is the requester. CASE:
 *
 *   rnr     a SEND reaches the responder before its receive: RNR NAKs,
 *           retried (rnr_retry 7), complete once the receive is posted
 *           200 ms later; data compared.
 *   access  an RDMA WRITE with a bad R_Key and an RDMA READ past the end
 *           of the MR: IBV_WC_REM_ACCESS_ERR, the next WR flushed, the
 *           QP in ERR on both ends; the target memory untouched.
 *   golden  one of every operation, small messages (path MTU 256):
 *           SEND and RDMA WRITE with and without immediate, single- and
 *           multi-packet, RDMA READ single- and multi-packet, CMP_AND_SWP
 *           and FETCH_ADD, a SEND met by RNR NAKs, a multi-packet SEND
 *           whose second packet starts with DE AD BE EF (for a filter to
 *           drop), UD SEND with and without immediate received with the
 *           GRH; every byte and result compared.
 *
 * Built against the installed <infiniband/verbs.h>, linked -libverbs; on
 * urdma it runs under `urdma run`. Prints one line per failed check and
 * ends with "remote CASE ROLE: N passed, N failed"; exit status 0 if
 * nothing failed.
 */

#include <getopt.h>
#include <netdb.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "remote.h"

int passed, failed;
struct end E;

void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	printf("FAIL ");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	printf("remote %s: %d passed, %d failed\n",
	       E.requester ? "requester" : "responder", passed, failed + 1);
	exit(1);
}

double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

void sleep_ms(int ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&t, NULL);
}

/* Both ends reach step `step` before either goes on. */
void sync_peer(int step)
{
	unsigned char out = step, in = 0;

	if (write(E.sock, &out, 1) != 1 || read(E.sock, &in, 1) != 1)
		die("the peer left before step %d", step);
	if (in != out)
		die("the peer is at step %d, not %d", in, step);
}

static uint8_t pattern(uint8_t seed, uint32_t i)
{
	return (uint8_t)(seed * 29 + i * 7 + 1);
}

void fill(uint32_t off, uint32_t len, uint8_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		E.buf[off + i] = pattern(seed, i);
}

int same(uint32_t off, uint32_t len, uint8_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		if (E.buf[off + i] != pattern(seed, i))
			return 0;
	return 1;
}

void post_recv(struct ibv_qp *qp, uint64_t wr_id, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)E.buf + off, len, E.mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge,
				  .num_sge = 1 }, *bad;

	if (ibv_post_recv(qp, &wr, &bad))
		die("ibv_post_recv: %s", strerror(errno));
}

void post_send(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	int r = ibv_post_send(qp, wr, &bad);

	if (r)
		die("ibv_post_send: %s", strerror(r));
}

/* A signaled WR of `len` bytes at `off` of this end's buffer. */
void post_op(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id,
	     uint32_t off, uint32_t len, uint64_t raddr, uint32_t rkey,
	     uint32_t imm)
{
	struct ibv_sge sge = { (uintptr_t)E.buf + off, len, E.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge,
				  .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED,
				  .imm_data = htonl(imm) };

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	post_send(qp, &wr);
}

/* 1 with a completion in *wc, 0 if none came within `ms`. */
int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	double end = now_ms() + ms;

	do {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n < 0)
			die("ibv_poll_cq: %d", n);
		if (n == 1)
			return 1;
		sleep_ms(0);
		usleep(100);
	} while (now_ms() < end);
	return 0;
}

/* The next completion of `cq` must be wr_id's, with `status`. */
void expect_wc(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status status,
	       struct ibv_wc *out)
{
	struct ibv_wc wc;

	if (!wait_wc(cq, &wc, 10000))
		die("no completion of WR %#llx within 10 s",
		    (unsigned long long)wr_id);
	if (wc.wr_id != wr_id || wc.status != status)
		printf("  WR %#llx: %s, want WR %#llx: %s\n",
		       (unsigned long long)wc.wr_id,
		       ibv_wc_status_str(wc.status),
		       (unsigned long long)wr_id, ibv_wc_status_str(status));
	CHECK(wc.wr_id == wr_id && wc.status == status);
	if (out)
		*out = wc;
}

enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr init;

	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &init))
		return (enum ibv_qp_state)-1;
	return a.qp_state;
}

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |	\
		IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static struct ibv_qp *create_qp(enum ibv_qp_type type)
{
	struct ibv_qp_init_attr a = {
		.send_cq = E.scq,
		.recv_cq = E.rcq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = type,
	};
	struct ibv_qp *qp = ibv_create_qp(E.pd, &a);

	if (!qp)
		die("ibv_create_qp: %s", strerror(errno));
	return qp;
}

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask,
		   const char *what)
{
	int r = ibv_modify_qp(qp, a, mask);

	if (r)
		die("ibv_modify_qp to %s: %s", what, strerror(r));
}

static struct ibv_ah_attr peer_ah(void)
{
	struct ibv_ah_attr ah = {
		.is_global = 1,
		.port_num = 1,
		.grh = { .dgid = E.peer.gid, .sgid_index = E.gid_index,
			 .hop_limit = 64 },
	};

	return ah;
}

static void connect_rc(int i, uint8_t min_rnr_timer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
	};

	modify(E.rc[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
	       IBV_QP_ACCESS_FLAGS, "INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = E.mtu;
	a.dest_qp_num = E.peer.rc_qpn[i];
	a.rq_psn = E.peer.psn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = min_rnr_timer;
	a.ah_attr = peer_ah();
	modify(E.rc[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
	       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
	       IBV_QP_MIN_RNR_TIMER, "RTR");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = E.me.psn;
	a.max_rd_atomic = 4;
	modify(E.rc[i], &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
	       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
	       "RTS");
}

static void connect_ud(void)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qkey = UD_QKEY,
	};
	struct ibv_ah_attr ah = peer_ah();

	modify(E.ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
	       IBV_QP_QKEY, "INIT");
	a.qp_state = IBV_QPS_RTR;
	modify(E.ud, &a, IBV_QP_STATE, "RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = E.me.psn;
	modify(E.ud, &a, IBV_QP_STATE | IBV_QP_SQ_PSN, "RTS");
	E.ah = ibv_create_ah(E.pd, &ah);
	if (!E.ah)
		die("ibv_create_ah: %s", strerror(errno));
}

static void open_device(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_port_attr port;
	int i;

	if (!list)
		die("ibv_get_device_list: %s", strerror(errno));
	for (i = 0; list[i]; i++)
		if (!name || !strcmp(ibv_get_device_name(list[i]), name))
			break;
	if (!list[i])
		die("no device %s", name ? name : "at all");
	E.ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!E.ctx)
		die("ibv_open_device: %s", strerror(errno));
	if (ibv_query_port(E.ctx, 1, &port))
		die("ibv_query_port failed");
	if (port.active_mtu < E.mtu)
		E.mtu = port.active_mtu;
	if (ibv_query_gid(E.ctx, 1, E.gid_index, &E.me.gid))
		die("ibv_query_gid %d failed", E.gid_index);
	E.pd = ibv_alloc_pd(E.ctx);
	E.scq = ibv_create_cq(E.ctx, 64, NULL, NULL, 0);
	E.rcq = ibv_create_cq(E.ctx, 64, NULL, NULL, 0);
	if (posix_memalign((void **)&E.buf, 4096, BUF_LEN))
		die("no memory");
	memset(E.buf, 0, BUF_LEN);
	E.mr = E.pd ? ibv_reg_mr(E.pd, E.buf, BUF_LEN, ACCESS) : NULL;
	if (!E.pd || !E.scq || !E.rcq || !E.mr)
		die("PD, CQ or MR: %s", strerror(errno));
	for (i = 0; i < NRC; i++) {
		E.rc[i] = create_qp(IBV_QPT_RC);
		E.me.rc_qpn[i] = E.rc[i]->qp_num;
	}
	E.ud = create_qp(IBV_QPT_UD);
	E.me.ud_qpn = E.ud->qp_num;
	/* Fixed PSNs, different on each end, near the top of the range. */
	E.me.psn = E.requester ? 0xfffff0 : 0x00a000;
	E.me.rkey = E.mr->rkey;
	E.me.addr = (uintptr_t)E.buf;
}

/* The TCP connection to the peer: accept one on `port`, or connect. */
static int tcp(const char *server, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = server ? 0 : AI_PASSIVE };
	struct addrinfo *res;
	int s, c, one = 1;

	if (getaddrinfo(server, port, &hints, &res))
		die("getaddrinfo %s:%s", server ? server : "*", port);
	s = socket(res->ai_family, res->ai_socktype, 0);
	if (s < 0)
		die("socket: %s", strerror(errno));
	if (server) {
		for (int i = 0; connect(s, res->ai_addr, res->ai_addrlen); i++) {
			if (i == 100)
				die("connect to %s:%s: %s", server, port,
				    strerror(errno));
			sleep_ms(100);
		}
		freeaddrinfo(res);
		return s;
	}
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(s, res->ai_addr, res->ai_addrlen) || listen(s, 1))
		die("listen on %s: %s", port, strerror(errno));
	freeaddrinfo(res);
	c = accept(s, NULL, NULL);
	if (c < 0)
		die("accept: %s", strerror(errno));
	close(s);
	return c;
}

static void put_line(const struct peer_info *p)
{
	char line[256], gid[33];
	int n;

	for (int i = 0; i < 16; i++)
		sprintf(gid + 2 * i, "%02x", p->gid.raw[i]);
	n = snprintf(line, sizeof(line), "%06x %06x %06x %06x %06x %08x %016llx %s\n",
		     p->rc_qpn[0], p->rc_qpn[1], p->rc_qpn[2], p->ud_qpn,
		     p->psn, p->rkey, (unsigned long long)p->addr, gid);
	if (write(E.sock, line, n) != n)
		die("cannot send this end's numbers");
}

static void get_line(struct peer_info *p)
{
	char line[256], gid[33];
	unsigned long long addr;
	size_t n = 0;

	while (n < sizeof(line) - 1) {
		if (read(E.sock, line + n, 1) != 1)
			die("the peer sent no numbers");
		if (line[n++] == '\n')
			break;
	}
	line[n] = 0;
	if (sscanf(line, "%x %x %x %x %x %x %llx %32s", &p->rc_qpn[0],
		   &p->rc_qpn[1], &p->rc_qpn[2], &p->ud_qpn, &p->psn, &p->rkey,
		   &addr, gid) != 8 || strlen(gid) != 32)
		die("bad numbers from the peer: %s", line);
	p->addr = addr;
	for (int i = 0; i < 16; i++)
		sscanf(gid + 2 * i, "%2hhx", &p->gid.raw[i]);
}

static void usage(void)
{
	fprintf(stderr, "usage: remote rnr|access|golden [-d DEV] [-g GID_INDEX]"
		" [-p PORT] [-m 256|512|1024|2048|4096] [SERVER]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *dev = NULL, *port = "18515", *server = NULL, *name;
	int mtu = 0, opt;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "d:g:p:m:")) != -1) {
		switch (opt) {
		case 'd': dev = optarg; break;
		case 'g': E.gid_index = atoi(optarg); break;
		case 'p': port = optarg; break;
		case 'm': mtu = atoi(optarg); break;
		default: usage();
		}
	}
	if (optind >= argc || argc - optind > 2)
		usage();
	name = argv[optind];
	if (argc - optind == 2)
		server = argv[optind + 1];
	E.requester = server != NULL;
	if (strcmp(name, "rnr") && strcmp(name, "access") &&
	    strcmp(name, "golden"))
		usage();
	/* Small packets for the golden traffic, MTU 1024 otherwise. */
	if (!mtu)
		mtu = strcmp(name, "golden") ? 1024 : 256;
	switch (mtu) {
	case 256: E.mtu = IBV_MTU_256; break;
	case 512: E.mtu = IBV_MTU_512; break;
	case 1024: E.mtu = IBV_MTU_1024; break;
	case 2048: E.mtu = IBV_MTU_2048; break;
	case 4096: E.mtu = IBV_MTU_4096; break;
	default: usage();
	}

	open_device(dev);
	E.sock = tcp(server, port);
	if (E.requester) {
		put_line(&E.me);
		get_line(&E.peer);
	} else {
		get_line(&E.peer);
		put_line(&E.me);
	}
	/* The responder's RNR timer: 20.48 ms (code 22), a few NAKs per
	 * 200 ms. */
	for (int i = 0; i < NRC; i++)
		connect_rc(i, 22);
	connect_ud();
	sync_peer(0);

	if (!strcmp(name, "rnr"))
		case_rnr();
	else if (!strcmp(name, "access"))
		case_access();
	else
		case_golden();

	sync_peer(99);
	printf("remote %s %s: %d passed, %d failed\n", name,
	       E.requester ? "requester" : "responder", passed, failed);
	return failed != 0;
}

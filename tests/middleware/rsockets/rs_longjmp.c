/*
 * rsocket calls left by a signal handler's siglongjmp: the calls after
 * it on the same rsockets must still work (nothing left locked).
 *
 *   rs_longjmp server ADDR PORT   listens on PORT (never accepts) and on
 *                                 PORT+1 (accepts one connection, reads
 *                                 nothing for 3 s, then reads to the end)
 *   rs_longjmp client ADDR PORT   a connect to PORT left by the handler,
 *                                 then sends to PORT+1 until it waits for
 *                                 credits, is left by the handler, and
 *                                 goes on sending; then, for a second,
 *                                 non-blocking calls under a timer whose
 *                                 handler jumps out every 200 us, landing
 *                                 anywhere in them
 *
 * Each side prints "rs_longjmp: <side> ok <bytes>"; exits 1 on failure.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static sigjmp_buf env;
static volatile sig_atomic_t jumps;

static void on_alarm(int sig)
{
	(void)sig;
	jumps++;
	siglongjmp(env, 1);
}

static void die(const char *what)
{
	fprintf(stderr, "rs_longjmp: %s: %s\n", what, strerror(errno));
	exit(1);
}

static struct sockaddr_in addr_of(const char *ip, int port)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
		fprintf(stderr, "rs_longjmp: bad address %s\n", ip);
		exit(2);
	}
	return a;
}

static int listener(const char *ip, int port)
{
	struct sockaddr_in a = addr_of(ip, port);
	int one = 1, s = rsocket(AF_INET, SOCK_STREAM, 0);

	if (s < 0)
		die("rsocket");
	rsetsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (rbind(s, (struct sockaddr *)&a, sizeof(a)) || rlisten(s, 4))
		{ fprintf(stderr, "port %d: ", port); die("rbind/rlisten"); }
	return s;
}

static int server(const char *ip, int port)
{
	static char buf[1 << 16];
	int idle = listener(ip, port), l = listener(ip, port + 1), d;
	long long total = 0;
	ssize_t n;

	d = raccept(l, NULL, NULL);
	if (d < 0)
		die("raccept");
	sleep(3);
	while ((n = rrecv(d, buf, sizeof(buf), 0)) > 0)
		total += n;
	if (n < 0)
		die("rrecv");
	printf("rs_longjmp: server ok %lld\n", total);
	rclose(d);
	rclose(l);
	rclose(idle);
	return 0;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Non-blocking calls on s for a second, left by a jump every 200 us. */
static void storm(int s, char *buf, size_t len)
{
	struct itimerval it = { { 0, 200 }, { 0, 200 } }, off = { { 0, 0 }, { 0, 0 } };
	volatile double end = now() + 1.0;
	volatile long calls = 0;
	struct pollfd p;
	int err;
	socklen_t elen;

	setitimer(ITIMER_REAL, &it, NULL);
	sigsetjmp(env, 1);
	while (now() < end) {
		p.fd = s;
		p.events = POLLIN | POLLOUT;
		rpoll(&p, 1, 0);
		rsend(s, buf, len, MSG_DONTWAIT);
		rrecv(s, buf, len, MSG_DONTWAIT);
		elen = sizeof(err);
		rgetsockopt(s, SOL_SOCKET, SO_ERROR, &err, &elen);
		calls++;
	}
	setitimer(ITIMER_REAL, &off, NULL);
	printf("rs_longjmp: %ld rounds of calls, %d jumps\n", (long)calls, (int)jumps);
}

static int client(const char *ip, int port)
{
	static char buf[1 << 16];
	struct sockaddr_in idle = addr_of(ip, port), data = addr_of(ip, port + 1);
	struct sigaction sa;
	long long total = 0;
	int s, err = 0;
	socklen_t len = sizeof(err);
	ssize_t n;
	struct pollfd p;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);

	/* A connect nobody answers, left by the handler. */
	s = rsocket(AF_INET, SOCK_STREAM, 0);
	if (s < 0)
		die("rsocket");
	alarm(1);
	if (!sigsetjmp(env, 1)) {
		rconnect(s, (struct sockaddr *)&idle, sizeof(idle));
		alarm(0);
		fprintf(stderr, "rs_longjmp: the connect returned: %s\n", strerror(errno));
		return 1;
	}
	if (rgetsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len))
		die("rgetsockopt after the jump");
	if (rclose(s))
		die("rclose after the jump");

	/* A send waiting for credits (the server reads nothing yet). */
	s = rsocket(AF_INET, SOCK_STREAM, 0);
	if (s < 0)
		die("rsocket");
	if (rconnect(s, (struct sockaddr *)&data, sizeof(data)))
		die("rconnect");
	memset(buf, 'r', sizeof(buf));
	alarm(1);
	if (!sigsetjmp(env, 1)) {
		for (;;) {
			n = rsend(s, buf, sizeof(buf), 0);
			if (n < 0)
				die("rsend");
			total += n;
			if (total > (1LL << 30)) {
				fprintf(stderr, "rs_longjmp: 1 GiB sent to a reader reading nothing\n");
				return 1;
			}
		}
	}
	n = rsend(s, buf, sizeof(buf), MSG_DONTWAIT);
	if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
		fprintf(stderr, "rs_longjmp: note: a non-blocking send gave %zd\n", n);
	p.fd = s;
	p.events = POLLOUT;
	if (rpoll(&p, 1, 100) < 0)
		die("rpoll after the jump");
	storm(s, buf, sizeof(buf));
	for (int i = 0; i < 64; i++) {
		n = rsend(s, buf, sizeof(buf), 0);
		if (n < 0)
			die("rsend after the jump");
	}
	if (rshutdown(s, SHUT_WR) || rclose(s))
		die("rshutdown/rclose after the jump");
	printf("rs_longjmp: client ok %d jumps\n", (int)jumps);
	return jumps > 2 ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: rs_longjmp server|client ADDR PORT\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[1], "server"))
		return server(argv[2], atoi(argv[3]));
	if (!strcmp(argv[1], "client"))
		return client(argv[2], atoi(argv[3]));
	return 2;
}

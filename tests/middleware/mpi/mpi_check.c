// SPDX-License-Identifier: MIT
/*
 * An MPI job that checks what it moves: rank 0 and the rank half-way
 * round (on the other host when the ranks are placed in blocks) time a
 * ping-pong of 8 bytes and a stream of 1 MiB messages; then every rank
 * exchanges patterned blocks with every other (MPI_Alltoall), receives a
 * broadcast and takes part in a sum (MPI_Allreduce), each checked.
 *
 * Prints "mpi_check: N ranks, latency L us, bandwidth B MB/s, verified V
 * bytes" on rank 0 and exits non-zero on any mismatch.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LAT_ITERS 2000
#define BW_SIZE (1 << 20)
#define BW_ITERS 64
#define A2A_BLOCK (64 * 1024)
#define BCAST_SIZE (4 << 20)

static uint8_t pattern(int from, int to, size_t i)
{
	return (uint8_t)(from * 31 + to * 7 + i * 13 + (i >> 9));
}

static int fail(int rank, const char *what, size_t at)
{
	fprintf(stderr, "mpi_check: rank %d: %s differs at byte %zu\n", rank,
		what, at);
	MPI_Abort(MPI_COMM_WORLD, 2);
	return 2;
}

/* Half round trip of 8-byte messages between ranks 0 and peer, in us. */
static double ping_pong(int rank, int peer, uint8_t *buf)
{
	double t0 = 0;
	int i;

	for (i = -100; i < LAT_ITERS; i++) {
		if (i == 0)
			t0 = MPI_Wtime();
		if (rank == 0) {
			MPI_Send(buf, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
			MPI_Recv(buf, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD,
				 MPI_STATUS_IGNORE);
		} else {
			MPI_Recv(buf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD,
				 MPI_STATUS_IGNORE);
			MPI_Send(buf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
		}
	}
	return (MPI_Wtime() - t0) * 1e6 / LAT_ITERS / 2;
}

/* 1 MiB messages from rank 0 to peer, checked on arrival; MB/s. */
static double stream(int rank, int peer, uint8_t *buf, size_t *verified)
{
	double t0 = MPI_Wtime();
	size_t j;
	int i;

	for (i = 0; i < BW_ITERS; i++) {
		if (rank == 0) {
			for (j = 0; j < BW_SIZE; j += 4096)
				buf[j] = pattern(i, 0, j);
			MPI_Send(buf, BW_SIZE, MPI_BYTE, peer, 2,
				 MPI_COMM_WORLD);
		} else {
			MPI_Recv(buf, BW_SIZE, MPI_BYTE, 0, 2, MPI_COMM_WORLD,
				 MPI_STATUS_IGNORE);
			for (j = 0; j < BW_SIZE; j += 4096)
				if (buf[j] != pattern(i, 0, j))
					return fail(rank, "stream", j);
			*verified += BW_SIZE;
		}
	}
	/* The last message is in once the peer says so. */
	MPI_Sendrecv(buf, 1, MPI_BYTE, rank == 0 ? peer : 0, 3, buf + 1, 1,
		     MPI_BYTE, rank == 0 ? peer : 0, 3, MPI_COMM_WORLD,
		     MPI_STATUS_IGNORE);
	return (double)BW_SIZE * BW_ITERS / (MPI_Wtime() - t0) / 1e6;
}

int main(int argc, char **argv)
{
	int rank, size, peer, r;
	size_t i, verified = 0, total = 0;
	double lat = 0, bw = 0;
	uint8_t *buf, *out, *in;
	long sum, want;
	MPI_Request idle;
	int done;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	peer = size / 2;
	buf = malloc(BCAST_SIZE);
	out = malloc((size_t)A2A_BLOCK * size);
	in = malloc((size_t)A2A_BLOCK * size);
	if (!buf || !out || !in || size < 2)
		MPI_Abort(MPI_COMM_WORLD, 1);
	memset(buf, 0, BCAST_SIZE);

	/*
	 * The other ranks wait without spinning, so that the timed pair has
	 * the CPUs where there are fewer than ranks.
	 */
	if (rank == 0 || rank == peer) {
		lat = ping_pong(rank, peer, buf);
		bw = stream(rank, peer, buf, &verified);
	}
	MPI_Ibarrier(MPI_COMM_WORLD, &idle);
	for (done = 0; !done; usleep(rank == 0 || rank == peer ? 0 : 1000))
		MPI_Test(&idle, &done, MPI_STATUS_IGNORE);

	for (r = 0; r < size; r++)
		for (i = 0; i < A2A_BLOCK; i++)
			out[(size_t)r * A2A_BLOCK + i] = pattern(rank, r, i);
	MPI_Alltoall(out, A2A_BLOCK, MPI_BYTE, in, A2A_BLOCK, MPI_BYTE,
		     MPI_COMM_WORLD);
	for (r = 0; r < size; r++)
		for (i = 0; i < A2A_BLOCK; i++)
			if (in[(size_t)r * A2A_BLOCK + i] != pattern(r, rank, i))
				return fail(rank, "alltoall", i);
	verified += (size_t)A2A_BLOCK * size;

	if (rank == 0)
		for (i = 0; i < BCAST_SIZE; i++)
			buf[i] = pattern(size, 0, i);
	MPI_Bcast(buf, BCAST_SIZE, MPI_BYTE, 0, MPI_COMM_WORLD);
	for (i = 0; i < BCAST_SIZE; i++)
		if (buf[i] != pattern(size, 0, i))
			return fail(rank, "bcast", i);
	verified += BCAST_SIZE;

	sum = rank + 1;
	MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_LONG, MPI_SUM,
		      MPI_COMM_WORLD);
	want = (long)size * (size + 1) / 2;
	if (sum != want) {
		fprintf(stderr, "mpi_check: rank %d: sum %ld, not %ld\n", rank,
			sum, want);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}

	MPI_Reduce(&verified, &total, 1, MPI_UNSIGNED_LONG, MPI_SUM, 0,
		   MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpi_check: %d ranks, latency %.2f us, bandwidth %.1f MB/s, verified %zu bytes\n",
		       size, lat, bw, total);
	free(buf);
	free(out);
	free(in);
	MPI_Finalize();
	return 0;
}

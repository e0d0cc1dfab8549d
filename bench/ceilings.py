#!/usr/bin/python3
"""What this machine's primitives allow, beside a TCP stream on the same path.

A benchmark, not a test: it prints figures and exits 0. Each line is one
primitive that urdma's data path is made of, measured alone, in MiB/s,
with its ratio to one TCP stream of 1 MiB writes from 127.0.0.1 to
127.0.0.2 measured in the same run:

- memcpy of 1 MiB within one process (the buffers stay in cache), the
  cost of a copy between two memories one thread can both address;
- reads and writes of 1 MiB through /proc/PID/mem, how the NIC agent
  reaches the memory a program registered through the drop-in
  libibverbs.so.1, and a read followed by a write (memory to memory
  through a buffer, what one RDMA WRITE between two programs costs the
  agent at least);
- a UDP stream from 127.0.0.1 to 127.0.0.2 of 4,112-byte datagrams (a
  RoCEv2 packet carrying 4 KiB) sent with UDP GSO and received with UDP
  GRO, 61 KiB per system call each way: the kernel's datagram path with
  no RDMA work at all, the most the UDP path can carry.

Usage: bench/ceilings.py [SECONDS]   (per figure, default 2)
"""

import ctypes
import multiprocessing
import os
import socket
import sys
import time

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
MIB = 1 << 20
SEGMENT = 4112
SEGMENTS = 15
UDP_SEGMENT = 103
UDP_GRO = 104
PORT = 47931


def rate(nbytes, seconds):
    return nbytes / seconds / MIB


def timed(step, nbytes):
    """MiB/s of `step` (moving `nbytes` per call) run for SECONDS."""
    n = 0
    start = time.perf_counter()
    while True:
        step()
        n += 1
        spent = time.perf_counter() - start
        if spent >= SECONDS:
            return rate(n * nbytes, spent)


def memcpy():
    a = ctypes.create_string_buffer(b"\x01" * MIB, MIB)
    b = ctypes.create_string_buffer(MIB)
    return timed(lambda: ctypes.memmove(b, a, MIB), MIB)


def proc_mem():
    """Read, write, and read then write 1 MiB through /proc/self/mem."""
    src = ctypes.create_string_buffer(b"\x02" * MIB, MIB)
    dst = ctypes.create_string_buffer(MIB)
    staging = bytearray(MIB)
    view = memoryview(staging)
    fd = os.open("/proc/self/mem", os.O_RDWR)
    try:
        sa, da = ctypes.addressof(src), ctypes.addressof(dst)

        def read():
            if os.preadv(fd, [view], sa) != MIB:
                raise OSError("short read through /proc/self/mem")

        def write():
            if os.pwritev(fd, [view], da) != MIB:
                raise OSError("short write through /proc/self/mem")

        def both():
            read()
            write()

        return timed(read, MIB), timed(write, MIB), timed(both, MIB)
    finally:
        os.close(fd)


def tcp_sink(ready, result):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.2", PORT))
    ls.listen(1)
    ready.set()
    c, _ = ls.accept()
    buf = bytearray(MIB)
    n, start = 0, None
    while True:
        k = c.recv_into(buf)
        if k == 0:
            break
        if start is None:
            start = time.perf_counter()
        n += k
    result.put(rate(n, time.perf_counter() - start))


def tcp():
    ready, result = multiprocessing.Event(), multiprocessing.Queue()
    p = multiprocessing.Process(target=tcp_sink, args=(ready, result))
    p.start()
    ready.wait()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.connect(("127.0.0.2", PORT))
    data = b"\xa5" * MIB
    end = time.perf_counter() + SECONDS
    while time.perf_counter() < end:
        s.sendall(data)
    s.close()
    v = result.get()
    p.join()
    return v


def udp_sink(ready, result):
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * MIB)
    r.setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
    r.bind(("127.0.0.2", PORT + 1))
    r.settimeout(0.5)
    ready.set()
    buf = bytearray(65536)
    n, start, last = 0, None, None
    while True:
        try:
            k = r.recv_into(buf)
        except socket.timeout:
            break
        last = time.perf_counter()
        if start is None:
            start = last
        n += k
    result.put(rate(n, last - start) if start and last > start else 0.0)


def udp_gso_gro():
    ready, result = multiprocessing.Event(), multiprocessing.Queue()
    p = multiprocessing.Process(target=udp_sink, args=(ready, result))
    p.start()
    ready.wait()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * MIB)
    s.setsockopt(socket.IPPROTO_UDP, UDP_SEGMENT, SEGMENT)
    s.bind(("127.0.0.1", 0))
    data = b"\x07" * (SEGMENT * SEGMENTS)
    end = time.perf_counter() + SECONDS
    while time.perf_counter() < end:
        try:
            s.sendto(data, ("127.0.0.2", PORT + 1))
        except BlockingIOError:
            pass
    v = result.get()
    p.join()
    return v


def main():
    t = tcp()
    rows = [("TCP stream, 1 MiB writes, 127.0.0.1 -> 127.0.0.2", t)]
    rows.append(("memcpy 1 MiB (one process, in cache)", memcpy()))
    r, w, rw = proc_mem()
    rows.append(("read 1 MiB through /proc/PID/mem", r))
    rows.append(("write 1 MiB through /proc/PID/mem", w))
    rows.append(("read then write 1 MiB through /proc/PID/mem", rw))
    rows.append((f"UDP GSO/GRO stream, {SEGMENT}-byte datagrams (no RDMA work)", udp_gso_gro()))
    print(f"{'primitive':<64} {'MiB/s':>8} {'/TCP':>6}")
    for name, v in rows:
        print(f"{name:<64} {v:8.0f} {v / t:6.2f}")


if __name__ == "__main__":
    main()

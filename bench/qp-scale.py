#!/usr/bin/python3
"""Create and connect many RC QPs on one urdma device, and report the time
it takes and the memory they cost the NIC agent and this process.

Run it on urdma with the drop-in library (bench/run does):
    urdma run --addr 127.0.0.1 -- /usr/bin/python3 bench/qp-scale.py 10000

QPs are connected in pairs to each other (QP 2k to QP 2k+1 on the same
address), through INIT, RTR and RTS, as rdma_cm or perftest connect them.
Memory is the resident set (VmRSS) of the agent (`urdma agent`) and of this
process, before and after; per QP is the difference over the count.
"""

import os
import subprocess
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def agent_pid():
    """The NIC agent serving this program: an `urdma agent` process of this
    network namespace whose socket name (URDMA_NIC_SOCKET in its
    environment, `urdma-nic` when unset) is this program's; the only
    candidate if environments cannot be read."""
    name = os.environ.get("URDMA_NIC_SOCKET") or "urdma-nic"
    out = subprocess.run(["pgrep", "-f", "urdma agent"], capture_output=True, text=True).stdout
    try:
        my_ns = os.readlink("/proc/self/ns/net")
    except OSError:
        my_ns = None
    candidates = []
    for pid in (int(p) for p in out.split()):
        try:
            if my_ns and os.readlink(f"/proc/{pid}/ns/net") != my_ns:
                continue
        except OSError:
            continue
        candidates.append(pid)
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        except OSError:
            continue
        if (env.get(b"URDMA_NIC_SOCKET") or b"urdma-nic") == name.encode():
            return pid
    return candidates[0] if len(candidates) == 1 else None


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    n -= n % 2
    ctx = Context(name="urdma0")
    pd = PD(ctx)
    cq = CQ(ctx, 4096)
    gid = ctx.query_gid(1, 0)
    agent = agent_pid()
    if agent is None:
        print("qp-scale: the NIC agent was not found; its memory is not reported")
    a0, s0 = rss_kib(agent) if agent else 0, rss_kib("self")
    cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
    t0 = time.monotonic()
    qps = [QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)) for _ in range(n)]
    t1 = time.monotonic()
    for i, qp in enumerate(qps):
        peer = qps[i ^ 1]
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=1)
        attr.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
        qp.to_init(attr)
        attr = QPAttr(qp_state=e.IBV_QPS_RTR, path_mtu=e.IBV_MTU_1024)
        attr.dest_qp_num = peer.qp_num
        attr.rq_psn = 0
        attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer = 12
        attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=gid, sgid_index=0))
        qp.to_rtr(attr)
        attr = QPAttr(qp_state=e.IBV_QPS_RTS)
        attr.sq_psn = 0
        attr.timeout = 14
        attr.retry_cnt = 7
        attr.rnr_retry = 7
        attr.max_rd_atomic = 1
        qp.to_rts(attr)
    t2 = time.monotonic()
    a1, s1 = rss_kib(agent) if agent else 0, rss_kib("self")
    print(f"qp-scale: {n} RC QPs created in {t1 - t0:.2f} s "
          f"({(t1 - t0) / n * 1e6:.0f} us each), connected in {t2 - t1:.2f} s "
          f"({(t2 - t1) / n * 1e6:.0f} us each)")
    agent_part = (f"agent {(a1 - a0) / n:.2f} KiB ({a0} -> {a1} KiB), "
                  if agent else "")
    print(f"qp-scale: memory per idle QP: {agent_part}"
          f"this process {(s1 - s0) / n:.2f} KiB ({s0} -> {s1} KiB)")
    for qp in qps:
        qp.close()


if __name__ == "__main__":
    main()

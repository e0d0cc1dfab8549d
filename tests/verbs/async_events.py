#!/usr/bin/python3
"""Asynchronous events of one device, through pyverbs: two RC QPs a and b
connected to each other, b taking its receives from an SRQ with a limit.
Two SENDs from a bring the SRQ below its limit (IBV_EVENT_SRQ_LIMIT_REACHED);
an RDMA WRITE from a with a wrong R_Key completes with
IBV_WC_REM_ACCESS_ERR and b reports IBV_EVENT_QP_ACCESS_ERR, then, being
in ERR with an SRQ, IBV_EVENT_QP_LAST_WQE_REACHED. The events come from
the context's asynchronous event file (the kernel's, for a device of the
urdma kernel module). Prints "ok" or what went wrong.
Usage: async_events.py DEVICE GID_INDEX"""
import signal
import sys

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE


def endpoint(ctx, pd, srq=None):
    cq = CQ(ctx, 16)
    cap = QPCap(max_send_wr=4, max_recv_wr=0 if srq else 4)
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap, srq=srq)
    return cq, QP(pd, init)


def connect(ctx, qp, remote, gid_index):
    gr = GlobalRoute(dgid=ctx.query_gid(1, gid_index), sgid_index=gid_index)
    attr = QPAttr(port_num=1)
    attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr)
    attr.dest_qp_num = remote.qp_num
    attr.path_mtu = e.IBV_MTU_1024
    attr.qp_access_flags = ACCESS
    attr.max_rd_atomic = 1
    attr.max_dest_rd_atomic = 1
    attr.timeout = 14
    attr.retry_cnt = 3
    attr.rnr_retry = 3
    attr.min_rnr_timer = 12
    qp.to_rts(attr)


def completions(cq, n):
    got = []
    while len(got) < n:
        k, wcs = cq.poll(n - len(got))
        got += wcs[:k]
    return got


def expect_event(ctx, kind, name):
    ev = ctx.get_async_event()
    got = ev.event_type
    ev.ack()
    if got != kind:
        raise SystemExit(f"async event {got}, not {name}")


def main():
    dev, gid_index = sys.argv[1], int(sys.argv[2])
    signal.alarm(60)
    ctx = Context(name=dev)
    pd = PD(ctx)
    mr = MR(pd, 4096, ACCESS)
    srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=8, max_sge=1)))
    cq_a, qp_a = endpoint(ctx, pd)
    cq_b, qp_b = endpoint(ctx, pd, srq)
    connect(ctx, qp_a, qp_b, gid_index)
    connect(ctx, qp_b, qp_a, gid_index)
    sge = SGE(mr.buf, 64, mr.lkey)
    for i in range(4):
        srq.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[sge]))
    srq.modify(SrqAttr(srq_limit=3), e.IBV_SRQ_LIMIT)

    for i in range(2):
        qp_a.post_send(SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge]))
    for wc in completions(cq_a, 2) + completions(cq_b, 2):
        if wc.status != e.IBV_WC_SUCCESS:
            raise SystemExit(f"SEND completion status {wc.status}")
    expect_event(ctx, e.IBV_EVENT_SRQ_LIMIT_REACHED, "IBV_EVENT_SRQ_LIMIT_REACHED")

    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[sge])
    wr.set_wr_rdma(mr.rkey ^ 0x5a5a00, mr.buf)
    qp_a.post_send(wr)
    wc = completions(cq_a, 1)[0]
    if wc.status != e.IBV_WC_REM_ACCESS_ERR:
        raise SystemExit(f"writer's completion status {wc.status}, not REM_ACCESS_ERR")
    expect_event(ctx, e.IBV_EVENT_QP_ACCESS_ERR, "IBV_EVENT_QP_ACCESS_ERR")
    expect_event(ctx, e.IBV_EVENT_QP_LAST_WQE_REACHED, "IBV_EVENT_QP_LAST_WQE_REACHED")
    print("ok")


if __name__ == "__main__":
    main()

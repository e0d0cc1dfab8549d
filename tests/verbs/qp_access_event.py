#!/usr/bin/python3
"""An RDMA WRITE with a wrong R_Key between two RC QPs of one device: the
writer's completion is IBV_WC_REM_ACCESS_ERR, and the target QP reports
IBV_EVENT_QP_ACCESS_ERR on its context's asynchronous event file (the
kernel's, for a device of the urdma kernel module). Prints "ok" or why
not. Usage: qp_access_event.py DEVICE GID_INDEX"""
import signal
import sys

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR

ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE


def endpoint(ctx, pd):
    cq = CQ(ctx, 16)
    cap = QPCap(max_send_wr=4, max_recv_wr=4)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    return cq, qp


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


def main():
    dev, gid_index = sys.argv[1], int(sys.argv[2])
    signal.alarm(60)
    ctx = Context(name=dev)
    pd = PD(ctx)
    mr = MR(pd, 4096, ACCESS)
    cq_a, qp_a = endpoint(ctx, pd)
    _, qp_b = endpoint(ctx, pd)
    connect(ctx, qp_a, qp_b, gid_index)
    connect(ctx, qp_b, qp_a, gid_index)
    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(mr.buf, 64, mr.lkey)])
    wr.set_wr_rdma(mr.rkey ^ 0x5a5a00, mr.buf)
    qp_a.post_send(wr)
    while True:
        n, wcs = cq_a.poll()
        if n:
            break
    if wcs[0].status != e.IBV_WC_REM_ACCESS_ERR:
        print(f"writer's completion status {wcs[0].status}, not REM_ACCESS_ERR")
        return 1
    ev = ctx.get_async_event()
    kind = ev.event_type
    ev.ack()
    if kind != e.IBV_EVENT_QP_ACCESS_ERR:
        print(f"async event {kind}, not IBV_EVENT_QP_ACCESS_ERR")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

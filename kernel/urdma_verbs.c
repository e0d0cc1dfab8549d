// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Device operations of urdma. Device, port and GID queries are answered
 * here; queues, memory registration and the data path live in the NIC
 * (the userspace engine). User PDs, CQs, QPs and SRQs exist here too,
 * so that the kernel tracks them and the NIC can raise their completion
 * events on the kernel's completion channels (see urdma_nic.c); a user
 * QP records what modify_qp set, for query_qp. CQs and QPs of kernel
 * consumers have their queues here (urdma_kcq.c, urdma_kverbs.c and
 * urdma_krc*.c).
 */
#include <linux/etherdevice.h>
#include <rdma/ib_mad.h>
#include <rdma/ib_verbs.h>
#include "urdma.h"
#include "urdma_abi.h"

static int urdma_query_device(struct ib_device *ibdev,
			      struct ib_device_attr *attr,
			      struct ib_udata *udata)
{
	if (udata && (udata->inlen || udata->outlen))
		return -EINVAL;

	memset(attr, 0, sizeof(*attr));
	attr->fw_ver = 1;
	attr->sys_image_guid = ibdev->node_guid;
	attr->max_mr_size = URDMA_MAX_MR_SIZE;
	attr->page_size_cap = URDMA_PAGE_SIZE_CAP;
	attr->vendor_id = URDMA_VENDOR_ID;
	attr->vendor_part_id = 0;
	attr->hw_ver = 0;
	attr->max_qp = URDMA_MAX_QP;
	attr->max_qp_wr = URDMA_MAX_QP_WR;
	/* Kernel consumers also get fast registration (the provider reports
	 * the user verbs' capabilities itself).
	 */
	attr->device_cap_flags = URDMA_DEVICE_CAP_FLAGS |
				 IB_DEVICE_MEM_MGT_EXTENSIONS;
	attr->kernel_cap_flags = IBK_ALLOW_USER_UNREG;
	attr->max_fast_reg_page_list_len = URDMA_MAX_FAST_REG_PAGES;
	attr->max_send_sge = URDMA_MAX_SGE;
	attr->max_recv_sge = URDMA_MAX_SGE;
	attr->max_sge_rd = URDMA_MAX_SGE;
	attr->max_cq = URDMA_MAX_CQ;
	attr->max_cqe = URDMA_MAX_CQE;
	attr->max_mr = URDMA_MAX_MR;
	attr->max_pd = URDMA_MAX_PD;
	attr->max_qp_rd_atom = URDMA_MAX_QP_RD_ATOM;
	attr->max_qp_init_rd_atom = URDMA_MAX_QP_INIT_RD_ATOM;
	attr->max_res_rd_atom = URDMA_MAX_QP_RD_ATOM * URDMA_MAX_QP;
	attr->atomic_cap = IB_ATOMIC_HCA;
	attr->max_srq = URDMA_MAX_SRQ;
	attr->max_srq_wr = URDMA_MAX_QP_WR;
	attr->max_srq_sge = URDMA_MAX_SGE;
	attr->max_pkeys = URDMA_MAX_PKEYS;
	attr->max_ah = URDMA_MAX_AH;
	attr->local_ca_ack_delay = URDMA_LOCAL_CA_ACK_DELAY;
	return 0;
}

static int urdma_query_port(struct ib_device *ibdev, u32 port_num,
			    struct ib_port_attr *attr)
{
	struct net_device *ndev = to_urdma(ibdev)->ndev;
	bool up;

	/* The core zeroes *attr before calling. */
	attr->max_mtu = IB_MTU_4096;
	attr->active_mtu = IB_MTU_4096;
	attr->gid_tbl_len = URDMA_GID_TABLE_LEN;
	attr->port_cap_flags = IB_PORT_CM_SUP;
	attr->max_msg_sz = URDMA_MAX_MSG_SIZE;
	attr->pkey_tbl_len = 1;
	attr->ip_gids = true;

	if (!ndev) {
		attr->state = IB_PORT_DOWN;
		attr->phys_state = IB_PORT_PHYS_STATE_DISABLED;
		return 0;
	}
	attr->active_mtu = ib_mtu_int_to_enum(ndev->mtu);
	up = netif_running(ndev) && netif_carrier_ok(ndev);
	/* The link may be up while no NIC serves the device. */
	attr->state = urdma_port_up(to_urdma(ibdev)) ? IB_PORT_ACTIVE :
						       IB_PORT_DOWN;
	attr->phys_state = up ? IB_PORT_PHYS_STATE_LINK_UP :
				IB_PORT_PHYS_STATE_DISABLED;

	return ib_get_eth_speed(ibdev, port_num, &attr->active_speed,
				&attr->active_width);
}

static int urdma_get_port_immutable(struct ib_device *ibdev, u32 port_num,
				    struct ib_port_immutable *immutable)
{
	immutable->core_cap_flags = RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
	immutable->pkey_tbl_len = 1;
	immutable->gid_tbl_len = URDMA_GID_TABLE_LEN;
	immutable->max_mad_size = IB_MGMT_MAD_SIZE;
	return 0;
}

static enum rdma_link_layer urdma_get_link_layer(struct ib_device *ibdev,
						 u32 port_num)
{
	return IB_LINK_LAYER_ETHERNET;
}

static int urdma_query_pkey(struct ib_device *ibdev, u32 port_num, u16 index,
			    u16 *pkey)
{
	if (index > 0)
		return -EINVAL;
	*pkey = 0xffff;
	return 0;
}

static int urdma_alloc_ucontext(struct ib_ucontext *uctx,
				struct ib_udata *udata)
{
	return 0;
}

static void urdma_dealloc_ucontext(struct ib_ucontext *uctx)
{
}

static int urdma_alloc_pd(struct ib_pd *pd, struct ib_udata *udata)
{
	struct urdma_dev *dev = to_urdma(pd->device);

	/* A kernel PD's number names it to the NIC; 0 is no kernel PD. */
	if (!udata) {
		do
			to_urdma_pd(pd)->id = atomic_inc_return(&dev->next_pd);
		while (!to_urdma_pd(pd)->id);
	}
	return 0;
}

static int urdma_dealloc_pd(struct ib_pd *pd, struct ib_udata *udata)
{
	return 0;
}

/*
 * Number a user object in @xa (cyclically from *@next, so that a freed
 * number is not reused at once) and return the number in @udata.
 */
static int urdma_number_object(struct xarray *xa, u32 *id, void *obj,
			       u32 *next, struct ib_udata *udata)
{
	struct urdma_create_resp resp = {};
	int err;

	err = xa_alloc_cyclic(xa, id, obj, xa_limit_31b, next, GFP_KERNEL);
	if (err < 0)
		return err;
	resp.id = *id;
	err = ib_copy_to_udata(udata, &resp, sizeof(resp));
	if (err) {
		xa_erase(xa, *id);
		*id = 0;
	}
	return err;
}

/* Forget a user object's number: no NIC event reaches it afterwards. */
static void urdma_forget_number(struct xarray *xa, u32 id)
{
	if (id)
		xa_erase(xa, id);
}

static int urdma_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
			   struct ib_udata *udata)
{
	struct urdma_dev *dev = to_urdma(ibcq->device);
	struct urdma_cq *cq = to_urdma_cq(ibcq);

	if (attr->flags)
		return -EOPNOTSUPP;
	if (attr->cqe < 1 || attr->cqe > URDMA_MAX_CQE)
		return -EINVAL;
	if (!udata) {
		ibcq->cqe = attr->cqe;
		return urdma_create_kcq(cq, attr);
	}
	if (udata->outlen < sizeof(struct urdma_create_resp))
		return -EINVAL;

	ibcq->cqe = attr->cqe;
	return urdma_number_object(&dev->cqs, &cq->id, cq, &dev->next_cq,
				   udata);
}

static int urdma_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	struct urdma_cq *cq = to_urdma_cq(ibcq);

	if (cq->k)
		urdma_destroy_kcq(cq);
	urdma_forget_number(&to_urdma(ibcq->device)->cqs, cq->id);
	return 0;
}

/* A user CQ's completions are in its shared memory, not here. */
static int urdma_poll_cq(struct ib_cq *ibcq, int num_entries, struct ib_wc *wc)
{
	struct urdma_cq *cq = to_urdma_cq(ibcq);

	return cq->k ? urdma_poll_kcq(cq, num_entries, wc) : 0;
}

/* User CQs are armed at the NIC, through the CQ's shared memory. */
static int urdma_req_notify_cq(struct ib_cq *ibcq,
			       enum ib_cq_notify_flags flags)
{
	struct urdma_cq *cq = to_urdma_cq(ibcq);

	return cq->k ? urdma_notify_kcq(cq, flags) : -EOPNOTSUPP;
}

static int urdma_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init,
			   struct ib_udata *udata)
{
	struct urdma_dev *dev = to_urdma(ibqp->device);
	struct urdma_qp *qp = to_urdma_qp(ibqp);
	struct urdma_create_qp_cmd cmd;
	int err;

	if (!udata && init->qp_type == IB_QPT_RC)
		return urdma_create_krc(dev, qp, init);
	if (!udata)
		return urdma_create_kqp(dev, qp, init);
	switch (init->qp_type) {
	case IB_QPT_RC:
	case IB_QPT_UC:
	case IB_QPT_UD:
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (init->create_flags)
		return -EOPNOTSUPP;
	if (udata->inlen < sizeof(cmd) ||
	    udata->outlen < sizeof(struct urdma_create_resp))
		return -EINVAL;
	err = ib_copy_from_udata(&cmd, udata, sizeof(cmd));
	if (err)
		return err;
	/* QP numbers 0 and 1 are the special QPs. */
	if (cmd.qpn < 2 || cmd.qpn > 0xffffff || cmd.reserved)
		return -EINVAL;

	spin_lock_init(&qp->lock);
	qp->attr.qp_state = IB_QPS_RESET;
	qp->cap = init->cap;
	qp->sq_sig_type = init->sq_sig_type;
	ibqp->qp_num = cmd.qpn;
	return urdma_number_object(&dev->qps, &qp->id, qp, &dev->next_qp,
				   udata);
}

/*
 * The provider modifies the kernel's QP first, then the NIC's. The
 * transition is checked here as IBTA (and the RDMA core's table) has it,
 * so that a modification the NIC would refuse for its state or mask is
 * refused here first; the kernel's copy of the attributes is kept for
 * query_qp and the resource tracker. The address vector, the alternate
 * path, the path migration state and the capabilities are accepted and
 * not kept: query_qp reports the path as migrated.
 */
static int urdma_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr,
			   int mask, struct ib_udata *udata)
{
	struct urdma_qp *qp = to_urdma_qp(ibqp);
	struct ib_qp_attr *a = &qp->attr;
	enum ib_qp_state cur, next;
	unsigned long flags;
	int err;

	spin_lock_irqsave(&qp->lock, flags);
	cur = (mask & IB_QP_CUR_STATE) ? attr->cur_qp_state : a->qp_state;
	next = (mask & IB_QP_STATE) ? attr->qp_state : cur;
	if (!ib_modify_qp_is_ok(cur, next, ibqp->qp_type, mask)) {
		spin_unlock_irqrestore(&qp->lock, flags);
		return -EINVAL;
	}
	if (qp->rc) {
		/* A kernel RC QP is the NIC's: it changes there first. */
		spin_unlock_irqrestore(&qp->lock, flags);
		err = urdma_modify_krc(qp, attr, mask);
		if (err)
			return err;
		spin_lock_irqsave(&qp->lock, flags);
	}
	if (mask & IB_QP_STATE)
		WRITE_ONCE(a->qp_state, attr->qp_state);
	if (mask & IB_QP_ACCESS_FLAGS)
		a->qp_access_flags = attr->qp_access_flags;
	if (mask & IB_QP_PKEY_INDEX)
		a->pkey_index = attr->pkey_index;
	if (mask & IB_QP_PORT)
		a->port_num = attr->port_num;
	if (mask & IB_QP_QKEY)
		a->qkey = attr->qkey;
	if (mask & IB_QP_PATH_MTU)
		a->path_mtu = attr->path_mtu;
	if (mask & IB_QP_TIMEOUT)
		a->timeout = attr->timeout;
	if (mask & IB_QP_RETRY_CNT)
		a->retry_cnt = attr->retry_cnt;
	if (mask & IB_QP_RNR_RETRY)
		a->rnr_retry = attr->rnr_retry;
	if (mask & IB_QP_RQ_PSN)
		a->rq_psn = attr->rq_psn;
	if (mask & IB_QP_MAX_QP_RD_ATOMIC)
		a->max_rd_atomic = attr->max_rd_atomic;
	if (mask & IB_QP_MIN_RNR_TIMER)
		a->min_rnr_timer = attr->min_rnr_timer;
	if (mask & IB_QP_SQ_PSN)
		a->sq_psn = attr->sq_psn;
	if (mask & IB_QP_MAX_DEST_RD_ATOMIC)
		a->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IB_QP_DEST_QPN)
		a->dest_qp_num = attr->dest_qp_num;
	spin_unlock_irqrestore(&qp->lock, flags);
	if (qp->k && (mask & IB_QP_STATE))
		urdma_kqp_state_changed(qp, next);
	return 0;
}

static int urdma_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr,
			  int mask, struct ib_qp_init_attr *init)
{
	struct urdma_qp *qp = to_urdma_qp(ibqp);
	unsigned long flags;

	spin_lock_irqsave(&qp->lock, flags);
	*attr = qp->attr;
	spin_unlock_irqrestore(&qp->lock, flags);
	attr->cur_qp_state = attr->qp_state;
	attr->path_mig_state = IB_MIG_MIGRATED;
	attr->cap = qp->cap;

	memset(init, 0, sizeof(*init));
	init->qp_type = ibqp->qp_type;
	init->send_cq = ibqp->send_cq;
	init->recv_cq = ibqp->recv_cq;
	init->srq = ibqp->srq;
	init->cap = qp->cap;
	init->sq_sig_type = qp->sq_sig_type;
	return 0;
}

static int urdma_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	struct urdma_qp *qp = to_urdma_qp(ibqp);

	if (qp->k)
		urdma_destroy_kqp(to_urdma(ibqp->device), qp);
	if (qp->rc)
		urdma_destroy_krc(to_urdma(ibqp->device), qp);
	urdma_forget_number(&to_urdma(ibqp->device)->qps, qp->id);
	return 0;
}

static int urdma_create_srq(struct ib_srq *ibsrq,
			    struct ib_srq_init_attr *init,
			    struct ib_udata *udata)
{
	struct urdma_dev *dev = to_urdma(ibsrq->device);
	struct urdma_srq *srq = to_urdma_srq(ibsrq);

	if (!udata)
		return -EOPNOTSUPP;
	if (init->srq_type != IB_SRQT_BASIC)
		return -EOPNOTSUPP;
	/* A provider that wants the SRQ's events asks for its number. */
	if (udata->outlen < sizeof(struct urdma_create_resp))
		return 0;
	return urdma_number_object(&dev->srqs, &srq->id, srq, &dev->next_srq,
				   udata);
}

static int urdma_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata)
{
	urdma_forget_number(&to_urdma(ibsrq->device)->srqs,
			    to_urdma_srq(ibsrq)->id);
	return 0;
}

/* A user QP's work requests go to the NIC through shared memory. */
static int urdma_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
			   const struct ib_send_wr **bad_wr)
{
	struct urdma_qp *qp = to_urdma_qp(ibqp);

	if (qp->rc)
		return urdma_post_krc_send(qp, wr, bad_wr);
	if (qp->k)
		return urdma_post_ksend(qp, wr, bad_wr);
	*bad_wr = wr;
	return -EOPNOTSUPP;
}

static int urdma_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
			   const struct ib_recv_wr **bad_wr)
{
	struct urdma_qp *qp = to_urdma_qp(ibqp);

	if (qp->rc)
		return urdma_post_krc_recv(qp, wr, bad_wr);
	if (qp->k)
		return urdma_post_krecv(qp, wr, bad_wr);
	*bad_wr = wr;
	return -EOPNOTSUPP;
}

static void urdma_dealloc_driver(struct ib_device *ibdev)
{
	struct urdma_dev *dev = to_urdma(ibdev);

	urdma_chan_device_gone(dev);
	urdma_forget_device(dev);
	xa_destroy(&dev->kmrs);
	xa_destroy(&dev->kqps);
	xa_destroy(&dev->cqs);
	xa_destroy(&dev->qps);
	xa_destroy(&dev->srqs);
}

const struct ib_device_ops urdma_dev_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.uverbs_abi_ver = URDMA_UVERBS_ABI_VERSION,

	.alloc_mr = urdma_alloc_mr,
	.alloc_pd = urdma_alloc_pd,
	.alloc_ucontext = urdma_alloc_ucontext,
	.create_ah = urdma_create_ah,
	.create_cq = urdma_create_cq,
	.create_qp = urdma_create_qp,
	.create_srq = urdma_create_srq,
	.dealloc_driver = urdma_dealloc_driver,
	.dealloc_pd = urdma_dealloc_pd,
	.dealloc_ucontext = urdma_dealloc_ucontext,
	.dereg_mr = urdma_dereg_mr,
	.destroy_ah = urdma_destroy_ah,
	.destroy_cq = urdma_destroy_cq,
	.destroy_qp = urdma_destroy_qp,
	.destroy_srq = urdma_destroy_srq,
	.get_dma_mr = urdma_get_dma_mr,
	.get_link_layer = urdma_get_link_layer,
	.get_port_immutable = urdma_get_port_immutable,
	.map_mr_sg = urdma_map_mr_sg,
	.modify_qp = urdma_modify_qp,
	.poll_cq = urdma_poll_cq,
	.post_recv = urdma_post_recv,
	.post_send = urdma_post_send,
	.query_device = urdma_query_device,
	.query_pkey = urdma_query_pkey,
	.query_port = urdma_query_port,
	.query_qp = urdma_query_qp,
	.reg_user_mr = urdma_reg_user_mr,
	.req_notify_cq = urdma_req_notify_cq,

	INIT_RDMA_OBJ_SIZE(ib_ah, urdma_ah, ibah),
	INIT_RDMA_OBJ_SIZE(ib_cq, urdma_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_pd, urdma_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_qp, urdma_qp, ibqp),
	INIT_RDMA_OBJ_SIZE(ib_srq, urdma_srq, ibsrq),
	INIT_RDMA_OBJ_SIZE(ib_ucontext, urdma_ucontext, ibuc),
};

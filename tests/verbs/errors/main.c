// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * Error paths of the verbs API on urdma, as a C program sees them: bad
 * handles, bad attributes, wrong QP states and out-of-range values must
 * fail with the errno libibverbs documents, never crash. A few positive
 * paths that only events can show are checked too: completion events on
 * a channel fd and asynchronous events on the context's async_fd, both
 * through poll(2), with two RC QPs of one device connected to each other.
 *
 * The data-path verbs (ibv_post_send, ibv_post_recv, ibv_poll_cq,
 * ibv_req_notify_cq) are inline functions of verbs.h that dereference
 * their handle in the application before reaching the library, so only
 * live handles are passed to them here.
 *
 * Built against the installed <infiniband/verbs.h>, linked -libverbs and
 * run under `urdma run --addr 127.0.0.1`. Prints one line per failed
 * check and ends with "N passed, N failed".
 */

#include "errors.h"

int passed, failed;
struct ibv_context *ctx;
struct ibv_pd *pd;
union ibv_gid gid;

static void queries(void)
{
	struct ibv_device_attr dattr;
	struct ibv_device_attr_ex xattr;
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	struct ibv_port_attr pattr;
	struct ibv_gid_entry entry;
	union ibv_gid g;
	__be16 pkey;

	RET_ERRNO(ibv_query_device(NULL, &dattr), EINVAL);
	RET_ERRNO(ibv_query_device(ctx, NULL), EINVAL);
	CHECK(ibv_query_device(ctx, &dattr) == 0 && dattr.phys_port_cnt == 1);
	CHECK(ibv_query_device_ex(ctx, NULL, &xattr) == 0 &&
	      xattr.orig_attr.max_qp_wr == dattr.max_qp_wr);
	RET_ERRNO(ibv_query_device_ex(ctx, &in, &xattr), EINVAL);
	RET_ERRNO(ibv_query_port(ctx, 2, &pattr), EINVAL);
	RET_ERRNO(ibv_query_port(ctx, 0, &pattr), EINVAL);
	CHECK(ibv_query_port(ctx, 1, &pattr) == 0 &&
	      pattr.state == IBV_PORT_ACTIVE &&
	      pattr.link_layer == IBV_LINK_LAYER_ETHERNET &&
	      pattr.active_mtu == IBV_MTU_4096 && pattr.gid_tbl_len == 16);
	/* Entry 0 is the device's address; the others are empty. */
	memset(&g, 0xa5, sizeof(g));
	CHECK(ibv_query_gid(ctx, 1, 1, &g) == 0 && !g.global.subnet_prefix &&
	      !g.global.interface_id);
	NEG_ERRNO(ibv_query_gid(ctx, 1, 16, &g), EINVAL);
	NEG_ERRNO(ibv_query_gid(ctx, 1, -1, &g), EINVAL);
	NEG_ERRNO(ibv_query_gid(ctx, 3, 0, &g), EINVAL);
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0 &&
	      gid.raw[10] == 0xff && gid.raw[11] == 0xff &&
	      gid.raw[12] == 127 && gid.raw[15] == 1);
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &entry, 0) == 0 &&
	      entry.gid_type == IBV_GID_TYPE_ROCE_V2 &&
	      !memcmp(&entry.gid, &gid, sizeof(gid)));
	RET_ERRNO(ibv_query_gid_ex(ctx, 1, 4, &entry, 0), ENODATA);
	RET_ERRNO(ibv_query_gid_ex(ctx, 1, 16, &entry, 0), EINVAL);
	RET_ERRNO(ibv_query_gid_ex(ctx, 1, 0, &entry, 1), EINVAL);
	CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == 0xffff);
	NEG_ERRNO(ibv_query_pkey(ctx, 1, 1, &pkey), EINVAL);
	CHECK(ibv_get_pkey_index(ctx, 1, htons(0xffff)) == 0);
	CHECK(ibv_get_pkey_index(ctx, 1, htons(0x1234)) < 0);
}

static void memory(void)
{
	static char buf[8192];
	struct ibv_mr *mr;
	void *gone;

	NULL_ERRNO(ibv_alloc_pd(NULL), EINVAL);
	RET_ERRNO(ibv_dealloc_pd(NULL), EINVAL);
	NULL_ERRNO(ibv_reg_mr(NULL, buf, sizeof(buf), ACCESS), EINVAL);
	NULL_ERRNO(ibv_reg_mr(pd, NULL, 4096, ACCESS), EFAULT);
	NULL_ERRNO(ibv_reg_mr(pd, buf, 0, ACCESS), EINVAL);
	/* Remote write needs local write. */
	NULL_ERRNO(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE),
		   EINVAL);
	NULL_ERRNO(ibv_reg_mr(pd, buf, sizeof(buf), 1 << 12), EINVAL);
	NULL_ERRNO(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_ON_DEMAND),
		   EOPNOTSUPP);
	gone = mmap(NULL, 8192, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(gone, 8192);
	NULL_ERRNO(ibv_reg_mr(pd, gone, 8192, ACCESS), EFAULT);

	mr = ibv_reg_mr(pd, buf, sizeof(buf), ACCESS);
	CHECK(mr && mr->lkey && mr->addr == buf && mr->length == sizeof(buf));
	RET_ERRNO(ibv_dealloc_pd(pd), EBUSY);
	RET_ERRNO(ibv_dereg_mr(NULL), EINVAL);
	CHECK(ibv_dereg_mr(mr) == 0);
	RET_ERRNO(ibv_dereg_mr(mr), EINVAL);
	mr = ibv_reg_mr_iova2(pd, buf, 4096, 0x10000, ACCESS);
	CHECK(mr && mr->lkey);
	if (mr)
		CHECK(ibv_dereg_mr(mr) == 0);

	/* Re-registration keeps the keys; bad input changes nothing. */
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr != NULL);
	if (mr) {
		uint32_t lkey = mr->lkey, rkey = mr->rkey;

		errno = 0;
		CHECK(ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0) ==
		      IBV_REREG_MR_ERR_INPUT && errno == EINVAL);
		errno = 0;
		CHECK(ibv_rereg_mr(mr, 1 << 7, NULL, NULL, 0, 0) ==
		      IBV_REREG_MR_ERR_INPUT && errno == EINVAL);
		RET_ERRNO(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION,
				       NULL, NULL, 4096, 0), EFAULT);
		RET_ERRNO(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL,
				       NULL, 0, IBV_ACCESS_REMOTE_WRITE), EINVAL);
		CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL,
				   0, ACCESS) == 0 &&
		      mr->lkey == lkey && mr->rkey == rkey);
		CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
				   buf, 4096, 0) == 0 &&
		      mr->addr == buf && mr->length == 4096 && mr->lkey == lkey);
		CHECK(ibv_dereg_mr(mr) == 0);
	}
	NULL_ERRNO(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 3, ACCESS), EOPNOTSUPP);

	/* A parent domain stands for its PD: objects made in it are in the
	 * PD, which stays while the parent domain does. */
	{
		struct ibv_parent_domain_init_attr pa = { .pd = pd };
		struct ibv_pd *par;

		NULL_ERRNO(ibv_alloc_parent_domain(ctx, NULL), EINVAL);
		pa.comp_mask = 1 << 5;
		NULL_ERRNO(ibv_alloc_parent_domain(ctx, &pa), EINVAL);
		pa.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
		pa.td = (struct ibv_td *)&pa;
		NULL_ERRNO(ibv_alloc_parent_domain(ctx, &pa), EOPNOTSUPP);
		pa.td = NULL;
		par = ibv_alloc_parent_domain(ctx, &pa);
		CHECK(par != NULL);
		if (par) {
			pa.pd = par;
			NULL_ERRNO(ibv_alloc_parent_domain(ctx, &pa), EINVAL);
			RET_ERRNO(ibv_dealloc_pd(pd), EBUSY);
			mr = ibv_reg_mr(par, buf, sizeof(buf), ACCESS);
			CHECK(mr != NULL);
			/* Not freed under the MR made in it. */
			RET_ERRNO(ibv_dealloc_pd(par), EBUSY);
			if (mr)
				CHECK(ibv_dereg_mr(mr) == 0);
			CHECK(ibv_dealloc_pd(par) == 0);
		}
	}
}

static void queues(void)
{
	struct ibv_device_attr dattr;
	struct ibv_comp_channel *ch;
	struct ibv_cq_init_attr_ex cqx = {
		.cqe = 4,
		.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
	};
	struct ibv_cq *cq, *dummy;
	void *cq_ctx;
	struct ibv_wc wc;

	ibv_query_device(ctx, &dattr);
	NULL_ERRNO(ibv_create_cq(NULL, 4, NULL, NULL, 0), EINVAL);
	NULL_ERRNO(ibv_create_cq(ctx, 0, NULL, NULL, 0), EINVAL);
	NULL_ERRNO(ibv_create_cq(ctx, -1, NULL, NULL, 0), EINVAL);
	NULL_ERRNO(ibv_create_cq(ctx, dattr.max_cqe + 1, NULL, NULL, 0),
		   EINVAL);
	NULL_ERRNO(ibv_create_cq(ctx, 4, NULL, NULL, 1), EINVAL);
	NULL_ERRNO(ibv_create_cq(ctx, 4, NULL, (void *)&dattr, 0), EINVAL);
	NULL_ERRNO(ibv_create_cq_ex(ctx, &cqx), EOPNOTSUPP);
	RET_ERRNO(ibv_destroy_cq(NULL), EINVAL);
	NULL_ERRNO(ibv_create_comp_channel(NULL), EINVAL);
	RET_ERRNO(ibv_destroy_comp_channel(NULL), EINVAL);

	ch = ibv_create_comp_channel(ctx);
	CHECK(ch && ch->fd >= 0);
	cq = ibv_create_cq(ctx, 8, NULL, ch, 0);
	CHECK(cq && cq->cqe >= 8);
	RET_ERRNO(ibv_destroy_comp_channel(ch), EBUSY);
	RET_ERRNO(ibv_resize_cq(cq, dattr.max_cqe + 1), EINVAL);
	RET_ERRNO(ibv_resize_cq(cq, 0), EINVAL);
	CHECK(cq->cqe >= 8);
	CHECK(ibv_resize_cq(cq, 100) == 0 && cq->cqe >= 100);
	CHECK(ibv_resize_cq(cq, 2) == 0 && cq->cqe >= 2 && cq->cqe < 100);
	CHECK(ibv_poll_cq(cq, 1, &wc) == 0);
	/* Nothing armed, nothing waiting: a non-blocking channel says so. */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	NEG_ERRNO(ibv_get_cq_event(ch, &dummy, &cq_ctx), EAGAIN);
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_destroy_comp_channel(ch) == 0);
}

static void address_handles(void)
{
	struct ibv_ah_attr a = { .is_global = 1, .port_num = 1,
				 .grh = { .dgid = gid, .hop_limit = 64 } };
	struct ibv_ah *ah;

	NULL_ERRNO(ibv_create_ah(NULL, &a), EINVAL);
	NULL_ERRNO(ibv_create_ah(pd, NULL), EINVAL);
	a.is_global = 0;
	NULL_ERRNO(ibv_create_ah(pd, &a), EINVAL);
	a.is_global = 1;
	a.port_num = 2;
	NULL_ERRNO(ibv_create_ah(pd, &a), EINVAL);
	a.port_num = 1;
	memset(&a.grh.dgid, 0, sizeof(a.grh.dgid));
	NULL_ERRNO(ibv_create_ah(pd, &a), EINVAL);
	a.grh.dgid = gid;
	ah = ibv_create_ah(pd, &a);
	CHECK(ah != NULL);
	RET_ERRNO(ibv_dealloc_pd(pd), EBUSY);
	CHECK(ah && ibv_destroy_ah(ah) == 0);
	RET_ERRNO(ibv_destroy_ah(NULL), EINVAL);
}

/* Wait for fd to become readable. */
static void strings_and_misc(struct ibv_device *dev)
{
	CHECK(!strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success"));
	CHECK(!strcmp(ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR),
		      "remote access error"));
	CHECK(!strcmp(ibv_wc_status_str(1000), "unknown"));
	CHECK(!strcmp(ibv_event_type_str(IBV_EVENT_SRQ_LIMIT_REACHED),
		      "SRQ limit reached"));
	CHECK(!strcmp(ibv_node_type_str(IBV_NODE_CA),
		      "InfiniBand channel adapter"));
	CHECK(!strcmp(ibv_port_state_str(IBV_PORT_ACTIVE), "active"));
	CHECK(ibv_fork_init() == 0);
	CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED);
	CHECK(ibv_get_device_guid(dev) != 0);
	CHECK(ibv_get_device_guid(NULL) == 0);
	CHECK(ibv_get_device_name(NULL) == NULL);
	CHECK(ibv_rate_to_mbps(IBV_RATE_100_GBPS) == 103125);
	NULL_ERRNO(ibv_open_device(NULL), EINVAL);
	RET_ERRNO(ibv_close_device(NULL), EINVAL);
}

/* A second context on the same device shares it; objects do not mix. */
static void second_context(struct ibv_device *dev)
{
	struct ibv_context *c2 = ibv_open_device(dev);
	struct ibv_pd *pd2 = c2 ? ibv_alloc_pd(c2) : NULL;
	struct ibv_cq *cq2 = c2 ? ibv_create_cq(c2, 4, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr a = { .send_cq = cq2, .recv_cq = cq2,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC };
	struct ibv_qp *qp;

	CHECK(c2 && c2 != ctx && pd2 && cq2);
	if (!pd2 || !cq2)
		return;
	/* A CQ of the second context with a PD of the first. */
	NULL_ERRNO(ibv_create_qp(pd, &a), EINVAL);
	qp = ibv_create_qp(pd2, &a);
	CHECK(qp != NULL);
	CHECK(qp && ibv_destroy_qp(qp) == 0);
	CHECK(ibv_destroy_cq(cq2) == 0);
	CHECK(ibv_dealloc_pd(pd2) == 0);
	CHECK(ibv_close_device(c2) == 0);
	RET_ERRNO(ibv_close_device(c2), EINVAL);
}

int main(void)
{
	struct ibv_device **list;
	int n = -1;

	list = ibv_get_device_list(&n);
	CHECK(list && n == 1 && list[0] && !list[1]);
	if (!list || n < 1) {
		printf("%d passed, %d failed\n", passed, failed + 1);
		return 1;
	}
	CHECK(!strcmp(ibv_get_device_name(list[0]), "urdma0"));
	ctx = ibv_open_device(list[0]);
	CHECK(ctx != NULL);
	if (!ctx)
		return 1;
	pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL);

	second_context(list[0]);
	queries();
	memory();
	memory_windows();
	queues();
	qp_errors();
	destroyed_qp_completions();
	address_handles();
	events();
	interrupted_wait();
	strings_and_misc(list[0]);

	CHECK(ibv_dealloc_pd(pd) == 0);
	RET_ERRNO(ibv_dealloc_pd(pd), EINVAL);
	CHECK(ibv_close_device(ctx) == 0);
	ibv_free_device_list(list);

	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}

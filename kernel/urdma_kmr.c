// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Kernel MRs of urdma and the NIC's access to them.
 *
 * A DMA MR names kernel memory by virtual address (the device maps DMA to
 * kernel virtual addresses); a fast-registration MR names the pages that
 * ib_map_mr_sg() gave it, once an IB_WR_REG_MR made it valid and until
 * a local or remote invalidation. Both have keys of the kernel's key space
 * (URDMA_KERNEL_KEY_TAG, an index, the consumer's variable byte); the NIC
 * learns of each through MR messages on the device's channel, and reaches
 * their memory only through URDMA_IOC_DMA, which checks every access
 * against the MR as it is at that moment.
 *
 * MRs are created and destroyed under the channel lock, so that the
 * account a newly attached NIC is given (urdma_kmr_replay) and the
 * messages of later changes come in order.
 *
 * The kernel's records of user MRs, which the NIC registered, are made
 * here too.
 */
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/uaccess.h>
#include <rdma/ib_verbs.h>
#include "urdma.h"
#include "urdma_abi.h"

#define URDMA_KEY_INDEX_MAX	0xffff

static u32 urdma_kmr_index(u32 key)
{
	return (key >> 8) & URDMA_KEY_INDEX_MAX;
}

static bool urdma_is_kernel_key(u32 key)
{
	return key >> 24 == URDMA_KERNEL_KEY_TAG;
}

/*
 * Tell the NIC of @dev @op on @mr, whose key, access and range are given
 * (any context). -ENOTCONN without a NIC, -ENOMEM.
 */
static int urdma_kmr_tell(struct urdma_dev *dev, struct urdma_mr *mr, u32 op,
			  u32 key, u32 access, u64 iova, u64 length)
{
	struct urdma_msg_mr *m;
	struct urdma_kmsg *km;

	km = urdma_kmsg_alloc(sizeof(*m), GFP_ATOMIC);
	if (!km)
		return -ENOMEM;
	m = (struct urdma_msg_mr *)km->data;
	m->hdr.type = URDMA_MSG_MR;
	m->hdr.len = km->len;
	m->op = op;
	m->key = key;
	m->pd = to_urdma_pd(mr->ibmr.pd)->id;
	m->access = access;
	m->iova = iova;
	m->length = length;
	/* MR messages are few (one per MR change): no queue limit. */
	if (urdma_chan_queue_always(dev, km)) {
		kfree(km);
		return -ENOTCONN;
	}
	return 0;
}

/* Tell the NIC (if any) @op on @mr as it is now. */
static void urdma_kmr_announce(struct urdma_dev *dev, struct urdma_mr *mr,
			       u32 op)
{
	urdma_kmr_tell(dev, mr, op, mr->ibmr.lkey, mr->access, mr->iova,
		       mr->length);
}

/* Give @mr a key and make it known (channel lock held). */
static int urdma_kmr_add(struct urdma_dev *dev, struct ib_pd *pd,
			 struct urdma_mr *mr)
{
	u32 id;
	int err;

	mr->ibmr.pd = pd;
	err = xa_alloc_cyclic(&dev->kmrs, &id, mr,
			      XA_LIMIT(1, URDMA_KEY_INDEX_MAX), &dev->next_kmr,
			      GFP_KERNEL);
	if (err < 0)
		return err;
	mr->ibmr.lkey = URDMA_KERNEL_KEY_TAG << 24 | id << 8;
	mr->ibmr.rkey = mr->ibmr.lkey;
	urdma_kmr_announce(dev, mr, mr->fast ? URDMA_MR_FAST : URDMA_MR_DMA);
	return 0;
}

/*
 * A DMA MR: all of kernel memory by virtual address. The RDMA core asks
 * for remote access only for a PD created with IB_PD_UNSAFE_GLOBAL_RKEY.
 */
struct ib_mr *urdma_get_dma_mr(struct ib_pd *pd, int access)
{
	struct urdma_dev *dev = to_urdma(pd->device);
	struct urdma_mr *mr;
	int err;

	if (access & ~(IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_READ |
		       IB_ACCESS_REMOTE_WRITE))
		return ERR_PTR(-EOPNOTSUPP);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	spin_lock_init(&mr->lock);
	mr->access = access;
	mr->length = U64_MAX;
	mr->valid = true;
	urdma_chan_lock();
	err = urdma_kmr_add(dev, pd, mr);
	urdma_chan_unlock();
	if (err) {
		kfree(mr);
		return ERR_PTR(err);
	}
	return &mr->ibmr;
}

struct ib_mr *urdma_alloc_mr(struct ib_pd *pd, enum ib_mr_type type,
			     u32 max_num_sg)
{
	struct urdma_dev *dev = to_urdma(pd->device);
	struct urdma_mr *mr;
	int err = -ENOMEM;

	if (type != IB_MR_TYPE_MEM_REG)
		return ERR_PTR(-EOPNOTSUPP);
	if (!max_num_sg || max_num_sg > URDMA_MAX_FAST_REG_PAGES)
		return ERR_PTR(-EINVAL);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->pages = kcalloc(max_num_sg, sizeof(*mr->pages), GFP_KERNEL);
	if (!mr->pages)
		goto err_free;
	spin_lock_init(&mr->lock);
	mr->fast = true;
	mr->max_pages = max_num_sg;
	urdma_chan_lock();
	err = urdma_kmr_add(dev, pd, mr);
	urdma_chan_unlock();
	if (err)
		goto err_free;
	return &mr->ibmr;
err_free:
	kfree(mr->pages);
	kfree(mr);
	return ERR_PTR(err);
}

static int urdma_set_page(struct ib_mr *ibmr, u64 addr)
{
	struct urdma_mr *mr = to_urdma_mr(ibmr);

	if (mr->npages == mr->max_pages)
		return -ENOMEM;
	mr->pages[mr->npages++] = addr;
	return 0;
}

/* Called while the MR is not valid: the NIC does not read the pages. */
int urdma_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int n,
		    unsigned int *sg_offset)
{
	struct urdma_mr *mr = to_urdma_mr(ibmr);

	mr->npages = 0;
	return ib_sg_to_pages(ibmr, sg, n, sg_offset, urdma_set_page);
}

static void urdma_mr_free(struct rcu_head *head)
{
	struct urdma_mr *mr = container_of(head, struct urdma_mr, rcu);

	kfree(mr->pages);
	kfree(mr);
}

int urdma_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct urdma_dev *dev = to_urdma(ibmr->device);
	struct urdma_mr *mr = to_urdma_mr(ibmr);

	if (!mr->user) {
		urdma_chan_lock();
		xa_erase(&dev->kmrs, urdma_kmr_index(ibmr->lkey));
		urdma_kmr_announce(dev, mr, URDMA_MR_REMOVE);
		urdma_chan_unlock();
	}
	/* An access of the NIC that found the MR ends before it is freed. */
	call_rcu(&mr->rcu, urdma_mr_free);
	return 0;
}

/* IB_WR_REG_MR posted on @qp: the MR is valid from now on. QP lock held. */
enum ib_wc_status urdma_kmr_register(struct urdma_qp *qp,
				     const struct ib_reg_wr *reg)
{
	struct urdma_mr *mr = to_urdma_mr(reg->mr);
	unsigned long flags;

	/* Pages of at least PAGE_SIZE: a page-sized copy stays in one. */
	if (reg->mr->device != qp->ibqp.device || !mr->fast ||
	    reg->mr->pd != qp->ibqp.pd ||
	    urdma_kmr_index(reg->key) != urdma_kmr_index(mr->ibmr.lkey) ||
	    !urdma_is_kernel_key(reg->key) || !mr->npages ||
	    !is_power_of_2(reg->mr->page_size) ||
	    reg->mr->page_size < PAGE_SIZE)
		return IB_WC_LOC_PROT_ERR;
	/* The NIC learns of it first: a registration it missed fails. */
	if (urdma_kmr_tell(to_urdma(qp->ibqp.device), mr, URDMA_MR_REGISTER,
			   reg->key, reg->access, reg->mr->iova,
			   reg->mr->length))
		return IB_WC_GENERAL_ERR;
	spin_lock_irqsave(&mr->lock, flags);
	mr->valid = true;
	mr->access = reg->access;
	mr->iova = mr->ibmr.iova;
	mr->length = mr->ibmr.length;
	mr->page_shift = ilog2(mr->ibmr.page_size);
	mr->reg_pages = mr->npages;
	mr->ibmr.lkey = reg->key;
	mr->ibmr.rkey = reg->key;
	spin_unlock_irqrestore(&mr->lock, flags);
	return IB_WC_SUCCESS;
}

/* The fast-registration MR @key of @dev, or NULL. RCU read lock held. */
static struct urdma_mr *urdma_kmr_find(struct urdma_dev *dev, u32 key)
{
	struct urdma_mr *mr;

	if (!urdma_is_kernel_key(key))
		return NULL;
	mr = xa_load(&dev->kmrs, urdma_kmr_index(key));
	return mr && READ_ONCE(mr->ibmr.lkey) == key ? mr : NULL;
}

/* Make @mr not valid; false if it is not a fast-registration MR. */
static bool urdma_kmr_end(struct urdma_mr *mr)
{
	unsigned long flags;

	if (!mr || !mr->fast)
		return false;
	spin_lock_irqsave(&mr->lock, flags);
	mr->valid = false;
	spin_unlock_irqrestore(&mr->lock, flags);
	return true;
}

/* IB_WR_LOCAL_INV posted on @qp for @key. QP lock held. */
enum ib_wc_status urdma_kmr_invalidate(struct urdma_qp *qp, u32 key)
{
	struct urdma_dev *dev = to_urdma(qp->ibqp.device);
	struct urdma_mr *mr;
	bool ok;

	enum ib_wc_status status = IB_WC_LOC_PROT_ERR;

	rcu_read_lock();
	mr = urdma_kmr_find(dev, key);
	ok = mr && mr->ibmr.pd == qp->ibqp.pd && urdma_kmr_end(mr);
	/*
	 * Not valid here from now on, so the NIC reaches it no more even if
	 * it missed the message.
	 */
	if (ok)
		status = urdma_kmr_tell(dev, mr, URDMA_MR_INVALIDATE, key, 0,
					0, 0) ? IB_WC_GENERAL_ERR :
						IB_WC_SUCCESS;
	rcu_read_unlock();
	return status;
}

/* A peer's SEND with invalidate to @qp ended @key (the NIC did it too). */
void urdma_kmr_invalidated(struct urdma_qp *qp, u32 key)
{
	struct urdma_mr *mr;

	rcu_read_lock();
	mr = urdma_kmr_find(to_urdma(qp->ibqp.device), key);
	if (mr && mr->ibmr.pd == qp->ibqp.pd)
		urdma_kmr_end(mr);
	rcu_read_unlock();
}

/* A NIC attached: tell it of every kernel MR (channel lock held). */
void urdma_kmr_replay(struct urdma_dev *dev)
{
	struct urdma_mr *mr;
	unsigned long idx;

	xa_for_each(&dev->kmrs, idx, mr) {
		urdma_kmr_announce(dev, mr, mr->fast ? URDMA_MR_FAST :
						       URDMA_MR_DMA);
		if (mr->fast && READ_ONCE(mr->valid))
			urdma_kmr_announce(dev, mr, URDMA_MR_REGISTER);
	}
}

/*
 * The kernel address of @len bytes at @iova of the MR @key, if the MR
 * covers them now (they lie within one page of it). RCU read lock held;
 * on success the MR's lock is held too, until the caller's copy is done.
 */
static void *urdma_kmr_map(struct urdma_dev *dev, u32 key, u64 iova, u32 len,
			   bool write, struct urdma_mr **held,
			   unsigned long *flags, int *err)
{
	struct urdma_mr *mr;
	u64 idx, kaddr;

	*err = -ENOENT;
	if (!urdma_is_kernel_key(key))
		return NULL;
	mr = xa_load(&dev->kmrs, urdma_kmr_index(key));
	if (!mr || mr->user)
		return NULL;
	spin_lock_irqsave(&mr->lock, *flags);
	*err = -EACCES;
	if (mr->ibmr.lkey != key || !mr->valid)
		goto fail;
	if (write &&
	    !(mr->access & (IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE)))
		goto fail;
	*err = -EFAULT;
	if (mr->fast) {
		if (iova < mr->iova || iova + len > mr->iova + mr->length)
			goto fail;
		idx = (iova >> mr->page_shift) - (mr->iova >> mr->page_shift);
		if (idx >= mr->reg_pages)
			goto fail;
		kaddr = mr->pages[idx] + (iova & ((1ULL << mr->page_shift) - 1));
	} else {
		kaddr = iova;
	}
	/*
	 * Memory of the linear map only (a copy stays in one page); writes
	 * only to pages the page allocator gave out (not reserved memory,
	 * such as the kernel image's or the zero page, which may be read).
	 */
	if (kaddr < PAGE_OFFSET || kaddr + len < kaddr ||
	    kaddr + len > (u64)(uintptr_t)high_memory ||
	    !virt_addr_valid((void *)(uintptr_t)kaddr) ||
	    !virt_addr_valid((void *)(uintptr_t)(kaddr + len - 1)) ||
	    (write && PageReserved(virt_to_page((void *)(uintptr_t)kaddr))))
		goto fail;
	*held = mr;
	return (void *)(uintptr_t)kaddr;
fail:
	spin_unlock_irqrestore(&mr->lock, *flags);
	return NULL;
}

/*
 * URDMA_IOC_DMA: the NIC of @dev reads or writes a kernel MR, a page at
 * a time through a buffer here, each page checked as it is copied.
 */
long urdma_kmr_dma(struct urdma_dev *dev, void __user *arg, u8 *buf)
{
	struct urdma_mr *mr;
	struct urdma_dma d;
	unsigned long flags;
	u32 done, n;
	int err = 0;
	void *kaddr;
	u8 probe[1];

	if (copy_from_user(&d, arg, sizeof(d)))
		return -EFAULT;
	if (d.reserved || d.write > 1 || d.len > URDMA_DMA_MAX)
		return -EINVAL;
	if (d.iova + d.len < d.iova)
		return -EFAULT;
	for (done = 0; done < d.len && !err; done += n) {
		u64 at = d.iova + done;
		void __user *ubuf = u64_to_user_ptr(d.buf + done);

		n = min_t(u64, d.len - done, PAGE_SIZE - (at & ~PAGE_MASK));
		if (d.write && copy_from_user(buf, ubuf, n)) {
			err = -EFAULT;
			break;
		}
		rcu_read_lock();
		kaddr = urdma_kmr_map(dev, d.key, at, n, d.write, &mr, &flags,
				      &err);
		if (kaddr) {
			/*
			 * A page not mapped (debug_pagealloc, secret memory)
			 * faults in the read, harmlessly; a write reads first.
			 */
			err = copy_from_kernel_nofault(d.write ? probe : buf,
						       kaddr, d.write ? 1 : n);
			if (!err && d.write)
				memcpy(kaddr, buf, n);
			spin_unlock_irqrestore(&mr->lock, flags);
		}
		rcu_read_unlock();
		if (!err && !d.write && copy_to_user(ubuf, buf, n))
			err = -EFAULT;
	}
	return err;
}

/*
 * A user MR: the NIC registered it (and reaches its memory through the
 * process); the kernel keeps a record of it under the NIC's keys, so
 * that it is tracked with its process.
 */
struct ib_mr *urdma_reg_user_mr(struct ib_pd *pd, u64 start, u64 length,
				u64 iova, int access, struct ib_udata *udata)
{
	struct urdma_reg_mr_cmd cmd;
	struct urdma_mr *mr;
	int err;

	if (!udata || udata->inlen < sizeof(cmd))
		return ERR_PTR(-EINVAL);
	if (length > URDMA_MAX_MR_SIZE)
		return ERR_PTR(-EINVAL);
	err = ib_copy_from_udata(&cmd, udata, sizeof(cmd));
	if (err)
		return ERR_PTR(err);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->user = true;
	mr->ibmr.lkey = cmd.lkey;
	mr->ibmr.rkey = cmd.rkey;
	return &mr->ibmr;
}

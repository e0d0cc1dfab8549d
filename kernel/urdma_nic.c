// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * The NIC file, /dev/urdma: how the urdma NIC (the userspace agent that
 * runs the engine) raises events on objects the kernel knows, and, once
 * attached to a device, the channel that carries the work of the device's
 * kernel QPs (urdma_chan.c). Only root opens it (mode 0600): a process
 * with it can signal any user CQ, QP or SRQ.
 *
 * An event names the device, the object's number (which the provider
 * got from create_cq, create_qp or create_srq and gave the NIC) and the
 * process the NIC serves; the object must belong to that process. The event is
 * raised under the object table's lock, which the destroy verbs take to
 * remove the object, so no event reaches an object being
 * destroyed.
 */
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/pid.h>
#include <linux/sched.h>
#include <linux/uaccess.h>
#include <rdma/restrack.h>
#include "urdma.h"
#include "urdma_abi.h"

/* True if the object tracked by @res was created by process @pid. */
static bool urdma_owned_by(struct rdma_restrack_entry *res, u32 pid)
{
	return res->task && task_tgid_vnr(res->task) == pid;
}

static int urdma_nic_cq_event(struct urdma_dev *dev, u32 id, u32 pid)
{
	struct urdma_cq *cq;
	int err = -ENOENT;

	xa_lock(&dev->cqs);
	cq = xa_load(&dev->cqs, id);
	if (cq && urdma_owned_by(&cq->ibcq.res, pid)) {
		if (cq->ibcq.comp_handler)
			cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
		err = 0;
	}
	xa_unlock(&dev->cqs);
	return err;
}

/* True if @type is an asynchronous event of a QP. */
bool urdma_qp_event_type(u32 type)
{
	switch (type) {
	case IB_EVENT_QP_FATAL:
	case IB_EVENT_QP_REQ_ERR:
	case IB_EVENT_QP_ACCESS_ERR:
	case IB_EVENT_COMM_EST:
	case IB_EVENT_SQ_DRAINED:
	case IB_EVENT_PATH_MIG:
	case IB_EVENT_PATH_MIG_ERR:
	case IB_EVENT_QP_LAST_WQE_REACHED:
		return true;
	default:
		return false;
	}
}

static int urdma_nic_qp_event(struct urdma_dev *dev, u32 id, u32 pid,
			      u32 type)
{
	struct ib_event ev = { .device = &dev->ibdev, .event = type };
	struct urdma_qp *qp;
	int err = -ENOENT;

	xa_lock(&dev->qps);
	qp = xa_load(&dev->qps, id);
	if (qp && urdma_owned_by(&qp->ibqp.res, pid)) {
		/* The NIC moved the QP to ERR: so does the kernel's copy. */
		if (type == IB_EVENT_QP_FATAL || type == IB_EVENT_QP_REQ_ERR ||
		    type == IB_EVENT_QP_ACCESS_ERR) {
			spin_lock(&qp->lock);
			qp->attr.qp_state = IB_QPS_ERR;
			spin_unlock(&qp->lock);
		}
		ev.element.qp = &qp->ibqp;
		if (qp->ibqp.event_handler)
			qp->ibqp.event_handler(&ev, qp->ibqp.qp_context);
		err = 0;
	}
	xa_unlock(&dev->qps);
	return err;
}

static int urdma_nic_cq_err(struct urdma_dev *dev, u32 id, u32 pid)
{
	struct ib_event ev = { .device = &dev->ibdev, .event = IB_EVENT_CQ_ERR };
	struct urdma_cq *cq;
	int err = -ENOENT;

	xa_lock(&dev->cqs);
	cq = xa_load(&dev->cqs, id);
	if (cq && urdma_owned_by(&cq->ibcq.res, pid)) {
		ev.element.cq = &cq->ibcq;
		if (cq->ibcq.event_handler)
			cq->ibcq.event_handler(&ev, cq->ibcq.cq_context);
		err = 0;
	}
	xa_unlock(&dev->cqs);
	return err;
}

static int urdma_nic_srq_event(struct urdma_dev *dev, u32 id, u32 pid,
			       u32 type)
{
	struct ib_event ev = { .device = &dev->ibdev, .event = type };
	struct urdma_srq *srq;
	int err = -ENOENT;

	xa_lock(&dev->srqs);
	srq = xa_load(&dev->srqs, id);
	if (srq && urdma_owned_by(&srq->ibsrq.res, pid)) {
		ev.element.srq = &srq->ibsrq;
		if (srq->ibsrq.event_handler)
			srq->ibsrq.event_handler(&ev, srq->ibsrq.srq_context);
		err = 0;
	}
	xa_unlock(&dev->srqs);
	return err;
}

static long urdma_nic_event(void __user *arg)
{
	struct urdma_event ev;
	struct urdma_dev *dev;
	long err;

	if (copy_from_user(&ev, arg, sizeof(ev)))
		return -EFAULT;
	ev.ibdev[sizeof(ev.ibdev) - 1] = '\0';
	if (ev.reserved)
		return -EINVAL;
	if (ev.type != IB_EVENT_CQ_ERR && ev.type != IB_EVENT_SRQ_ERR &&
	    ev.type != IB_EVENT_SRQ_LIMIT_REACHED && !urdma_qp_event_type(ev.type))
		return -EINVAL;

	dev = urdma_get_by_name(ev.ibdev);
	if (!dev)
		return -ENODEV;
	if (ev.type == IB_EVENT_CQ_ERR)
		err = urdma_nic_cq_err(dev, ev.obj, ev.pid);
	else if (ev.type == IB_EVENT_SRQ_ERR ||
		 ev.type == IB_EVENT_SRQ_LIMIT_REACHED)
		err = urdma_nic_srq_event(dev, ev.obj, ev.pid, ev.type);
	else
		err = urdma_nic_qp_event(dev, ev.obj, ev.pid, ev.type);
	ib_device_put(&dev->ibdev);
	return err;
}

static long urdma_nic_cq_event_cmd(void __user *arg)
{
	struct urdma_cq_event ev;
	struct urdma_dev *dev;
	long err;

	if (copy_from_user(&ev, arg, sizeof(ev)))
		return -EFAULT;
	ev.ibdev[sizeof(ev.ibdev) - 1] = '\0';

	dev = urdma_get_by_name(ev.ibdev);
	if (!dev)
		return -ENODEV;
	err = urdma_nic_cq_event(dev, ev.cq, ev.pid);
	ib_device_put(&dev->ibdev);
	return err;
}

static long urdma_nic_ioctl(struct file *file, unsigned int cmd,
			    unsigned long arg)
{
	switch (cmd) {
	case URDMA_IOC_CQ_EVENT:
		return urdma_nic_cq_event_cmd((void __user *)arg);
	case URDMA_IOC_EVENT:
		return urdma_nic_event((void __user *)arg);
	case URDMA_IOC_ATTACH:
		return urdma_chan_attach(file->private_data, (void __user *)arg);
	case URDMA_IOC_DMA:
		return urdma_chan_dma(file->private_data, (void __user *)arg);
	default:
		return -ENOTTY;
	}
}

static int urdma_nic_open(struct inode *inode, struct file *file)
{
	struct urdma_chan *chan = urdma_chan_open();

	if (!chan)
		return -ENOMEM;
	file->private_data = chan;
	return stream_open(inode, file);
}

static int urdma_nic_release(struct inode *inode, struct file *file)
{
	urdma_chan_release(file->private_data);
	return 0;
}

static ssize_t urdma_nic_read(struct file *file, char __user *buf,
			      size_t count, loff_t *pos)
{
	return urdma_chan_read(file->private_data,
			       file->f_flags & O_NONBLOCK, buf, count);
}

static ssize_t urdma_nic_write(struct file *file, const char __user *buf,
			       size_t count, loff_t *pos)
{
	return urdma_chan_write(file->private_data, buf, count);
}

static __poll_t urdma_nic_poll(struct file *file, poll_table *wait)
{
	return urdma_chan_poll(file->private_data, file, wait);
}

static const struct file_operations urdma_nic_fops = {
	.owner = THIS_MODULE,
	.open = urdma_nic_open,
	.release = urdma_nic_release,
	.read = urdma_nic_read,
	.write = urdma_nic_write,
	.poll = urdma_nic_poll,
	.unlocked_ioctl = urdma_nic_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = no_llseek,
};

static struct miscdevice urdma_nic_dev = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "urdma",
	.fops = &urdma_nic_fops,
	.mode = 0600,
};

int urdma_nic_register(void)
{
	return misc_register(&urdma_nic_dev);
}

void urdma_nic_unregister(void)
{
	misc_deregister(&urdma_nic_dev);
}

// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * The NIC file, /dev/urdma: how the urdma NIC (the userspace agent that
 * runs the engine) raises events on objects the kernel knows. Only root
 * opens it (mode 0600): a process with it can signal any user CQ.
 *
 * A completion event names the device, the CQ's number (which the
 * provider got from create_cq and gave the NIC) and the process the NIC
 * serves; the CQ must belong to that process. The event is raised under
 * the CQ table's lock, which destroy_cq takes to remove the CQ, so no
 * event reaches a CQ being destroyed.
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

static long urdma_nic_ioctl(struct file *file, unsigned int cmd,
			    unsigned long arg)
{
	struct urdma_cq_event ev;
	struct urdma_dev *dev;
	long err;

	if (cmd != URDMA_IOC_CQ_EVENT)
		return -ENOTTY;
	if (copy_from_user(&ev, (void __user *)arg, sizeof(ev)))
		return -EFAULT;
	ev.ibdev[sizeof(ev.ibdev) - 1] = '\0';

	dev = urdma_get_by_name(ev.ibdev);
	if (!dev)
		return -ENODEV;
	err = urdma_nic_cq_event(dev, ev.cq, ev.pid);
	ib_device_put(&dev->ibdev);
	return err;
}

static const struct file_operations urdma_nic_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = urdma_nic_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = noop_llseek,
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

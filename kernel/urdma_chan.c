// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * The channel between urdma's kernel verbs and the NIC: an open NIC file
 * (/dev/urdma) that the NIC agent attached to one device. Work requests
 * of kernel-owned QPs wait on the channel as messages until the agent
 * reads them; the agent writes back completions and received datagrams.
 *
 * Locking: urdma_chan_mutex guards who is attached to whom (chan->dev and
 * dev->chan change under it) and is held while the NIC's messages are
 * delivered, so that neither the device nor a kernel QP goes away under
 * a delivery. dev->kernel_lock (a spinlock) guards dev->chan for posters
 * in atomic context; chan->lock guards the queue.
 */
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/netdevice.h>
#include <linux/nsproxy.h>
#include <linux/sched.h>
#include <net/net_namespace.h>
#include "urdma.h"
#include "urdma_abi.h"

/* Bytes of messages a channel holds for the NIC at most. */
#define URDMA_CHAN_MAX_QUEUED	(4U << 20)
/* Bytes one write() takes at most. */
#define URDMA_CHAN_MAX_WRITE	(256U << 10)

struct urdma_chan {
	spinlock_t lock;		/* guards msgs, queued, gone */
	struct list_head msgs;		/* for the NIC, oldest first */
	size_t queued;			/* bytes in msgs */
	bool gone;			/* the device went away */
	wait_queue_head_t wait;		/* readers */
	struct urdma_dev *dev;		/* attached device, or NULL */
	bool attached;			/* was attached once */
	u8 *bounce;			/* a page for URDMA_IOC_DMA, under
					 * urdma_chan_mutex */
};

static DEFINE_MUTEX(urdma_chan_mutex);

void urdma_chan_lock(void)
{
	mutex_lock(&urdma_chan_mutex);
}

void urdma_chan_unlock(void)
{
	mutex_unlock(&urdma_chan_mutex);
}

struct urdma_chan *urdma_chan_open(void)
{
	struct urdma_chan *chan = kzalloc(sizeof(*chan), GFP_KERNEL);

	if (!chan)
		return NULL;
	chan->bounce = kmalloc(PAGE_SIZE, GFP_KERNEL);
	if (!chan->bounce) {
		kfree(chan);
		return NULL;
	}
	spin_lock_init(&chan->lock);
	INIT_LIST_HEAD(&chan->msgs);
	init_waitqueue_head(&chan->wait);
	return chan;
}

static void urdma_chan_free_msgs(struct list_head *msgs)
{
	struct urdma_kmsg *m, *next;

	list_for_each_entry_safe(m, next, msgs, list) {
		list_del(&m->list);
		kfree(m);
	}
}

/* Undo an attachment (channel lock held). */
static void urdma_chan_detach(struct urdma_chan *chan, struct urdma_dev *dev)
{
	spin_lock_irq(&dev->kernel_lock);
	dev->chan = NULL;
	spin_unlock_irq(&dev->kernel_lock);
	chan->dev = NULL;
}

void urdma_chan_release(struct urdma_chan *chan)
{
	struct urdma_dev *dev, *held = NULL;

	mutex_lock(&urdma_chan_mutex);
	dev = chan->dev;
	if (dev) {
		urdma_chan_detach(chan, dev);
		urdma_kqp_nic_gone(dev);
		urdma_krc_nic_gone(dev);
		pr_info("urdma: %s: the NIC left\n", dev_name(&dev->ibdev.dev));
		if (ib_device_try_get(&dev->ibdev))
			held = dev;
	}
	mutex_unlock(&urdma_chan_mutex);
	/* The port goes down: consumers see IB_EVENT_PORT_ERR. */
	if (held) {
		urdma_port_changed(held);
		ib_device_put(&held->ibdev);
	}
	urdma_chan_free_msgs(&chan->msgs);
	kfree(chan->bounce);
	kfree(chan);
}

/* Detach @dev's channel, which then reads end of file (lock held). */
static struct urdma_chan *urdma_chan_end(struct urdma_dev *dev)
{
	struct urdma_chan *chan = dev->chan;

	if (chan) {
		urdma_chan_detach(chan, dev);
		spin_lock_irq(&chan->lock);
		chan->gone = true;
		spin_unlock_irq(&chan->lock);
		wake_up_interruptible(&chan->wait);
	}
	return chan;
}

/* The device is being freed: its channel, if any, reads end of file. */
void urdma_chan_device_gone(struct urdma_dev *dev)
{
	mutex_lock(&urdma_chan_mutex);
	urdma_chan_end(dev);
	mutex_unlock(&urdma_chan_mutex);
}

/*
 * Let go of a NIC that no longer answers: its channel reads end of file,
 * its kernel QPs are lost as when it leaves, and it reaches no kernel
 * memory any more.
 */
void urdma_chan_kick(struct urdma_dev *dev)
{
	bool was;

	mutex_lock(&urdma_chan_mutex);
	was = urdma_chan_end(dev);
	if (was) {
		urdma_kqp_nic_gone(dev);
		urdma_krc_nic_gone(dev);
	}
	mutex_unlock(&urdma_chan_mutex);
	if (was)
		urdma_port_changed(dev);
}

long urdma_chan_attach(struct urdma_chan *chan, void __user *arg)
{
	struct urdma_attach a;
	struct net_device *ndev;
	struct urdma_dev *dev;
	long err = 0;

	if (copy_from_user(&a, arg, sizeof(a)))
		return -EFAULT;
	if (a.reserved)
		return -EINVAL;
	ndev = dev_get_by_index(current->nsproxy->net_ns, a.ifindex);
	if (!ndev)
		return -ENODEV;
	dev = urdma_get_by_netdev(ndev);
	dev_put(ndev);
	if (!dev)
		return -ENODEV;

	mutex_lock(&urdma_chan_mutex);
	if (chan->attached) {
		err = -EBUSY;
	} else {
		spin_lock_irq(&dev->kernel_lock);
		if (dev->chan)
			err = -EBUSY;
		else
			dev->chan = chan;
		spin_unlock_irq(&dev->kernel_lock);
	}
	if (!err) {
		chan->dev = dev;
		chan->attached = true;
		/* The NIC learns of the kernel MRs before anything else. */
		urdma_kmr_replay(dev);
		memset(a.ibdev, 0, sizeof(a.ibdev));
		strscpy(a.ibdev, dev_name(&dev->ibdev.dev), sizeof(a.ibdev));
		pr_info("urdma: %s: a NIC attached\n", a.ibdev);
	}
	mutex_unlock(&urdma_chan_mutex);
	if (!err)
		urdma_port_changed(dev);
	ib_device_put(&dev->ibdev);
	if (!err && copy_to_user(arg, &a, sizeof(a)))
		err = -EFAULT;
	return err;
}

/*
 * Queue @m for the NIC of @dev (any context). On success the channel owns
 * @m. Fails with -ENOTCONN when no NIC is attached, -ENOBUFS when the
 * NIC is too far behind.
 */
static int urdma_chan_queue_limit(struct urdma_dev *dev, struct urdma_kmsg *m,
				  size_t limit)
{
	struct urdma_chan *chan;
	unsigned long flags;
	int err = -ENOTCONN;

	spin_lock_irqsave(&dev->kernel_lock, flags);
	chan = dev->chan;
	if (chan) {
		spin_lock(&chan->lock);
		if (chan->queued + m->len > limit) {
			err = -ENOBUFS;
		} else {
			list_add_tail(&m->list, &chan->msgs);
			chan->queued += m->len;
			err = 0;
		}
		spin_unlock(&chan->lock);
		if (!err)
			wake_up_interruptible(&chan->wait);
	}
	spin_unlock_irqrestore(&dev->kernel_lock, flags);
	return err;
}

int urdma_chan_queue(struct urdma_dev *dev, struct urdma_kmsg *m)
{
	return urdma_chan_queue_limit(dev, m, URDMA_CHAN_MAX_QUEUED);
}

/* As urdma_chan_queue(), past the queue's limit too (bounded messages). */
int urdma_chan_queue_always(struct urdma_dev *dev, struct urdma_kmsg *m)
{
	return urdma_chan_queue_limit(dev, m, SIZE_MAX);
}

/* URDMA_IOC_DMA: the attached NIC reaches a kernel MR. */
long urdma_chan_dma(struct urdma_chan *chan, void __user *arg)
{
	long err;

	mutex_lock(&urdma_chan_mutex);
	if (chan->dev)
		err = urdma_kmr_dma(chan->dev, arg, chan->bounce);
	else
		err = chan->attached ? -ENODEV : -ENOTCONN;
	mutex_unlock(&urdma_chan_mutex);
	return err;
}

static bool urdma_chan_readable(struct urdma_chan *chan)
{
	bool r;

	spin_lock_irq(&chan->lock);
	r = !list_empty(&chan->msgs) || chan->gone;
	spin_unlock_irq(&chan->lock);
	return r;
}

ssize_t urdma_chan_read(struct urdma_chan *chan, bool nonblock,
			char __user *buf, size_t count)
{
	struct urdma_kmsg *m, *next;
	LIST_HEAD(batch);
	size_t total = 0;
	int err;

	if (!READ_ONCE(chan->attached))
		return -ENOTCONN;
	for (;;) {
		spin_lock_irq(&chan->lock);
		if (!list_empty(&chan->msgs))
			break;
		if (chan->gone) {
			spin_unlock_irq(&chan->lock);
			return 0;
		}
		spin_unlock_irq(&chan->lock);
		if (nonblock)
			return -EAGAIN;
		err = wait_event_interruptible(chan->wait,
					       urdma_chan_readable(chan));
		if (err)
			return err;
	}
	list_for_each_entry_safe(m, next, &chan->msgs, list) {
		if (m->len > count - total)
			break;
		list_move_tail(&m->list, &batch);
		total += m->len;
		chan->queued -= m->len;
	}
	spin_unlock_irq(&chan->lock);
	if (!total)
		return -EINVAL;	/* the buffer holds no whole message */

	total = 0;
	list_for_each_entry_safe(m, next, &batch, list) {
		if (copy_to_user(buf + total, m->data, m->len))
			break;
		total += m->len;
		list_del(&m->list);
		kfree(m);
	}
	if (list_empty(&batch))
		return total;
	/* A faulting buffer: what was not copied waits for the next read. */
	spin_lock_irq(&chan->lock);
	list_for_each_entry(m, &batch, list)
		chan->queued += m->len;
	list_splice(&batch, &chan->msgs);
	spin_unlock_irq(&chan->lock);
	return total ? total : -EFAULT;
}

ssize_t urdma_chan_write(struct urdma_chan *chan, const char __user *buf,
			 size_t count)
{
	const struct urdma_msg_hdr *hdr;
	struct urdma_dev *dev;
	size_t off = 0;
	int err = 0;
	u8 *data;

	count = min_t(size_t, count, URDMA_CHAN_MAX_WRITE);
	if (count < sizeof(*hdr))
		return -EINVAL;
	data = kvmalloc(count, GFP_KERNEL);
	if (!data)
		return -ENOMEM;
	if (copy_from_user(data, buf, count)) {
		kvfree(data);
		return -EFAULT;
	}

	mutex_lock(&urdma_chan_mutex);
	dev = chan->dev;
	if (!dev)
		err = chan->attached ? -ENODEV : -ENOTCONN;
	while (!err && count - off >= sizeof(*hdr)) {
		hdr = (const struct urdma_msg_hdr *)(data + off);
		if (hdr->len < sizeof(*hdr) || hdr->len % 8 ||
		    hdr->len > count - off) {
			err = -EINVAL;
			break;
		}
		err = urdma_kqp_deliver(dev, hdr, hdr->len);
		if (!err)
			off += hdr->len;
	}
	mutex_unlock(&urdma_chan_mutex);
	kvfree(data);
	if (off)
		return off;
	return err ? err : -EINVAL;
}

__poll_t urdma_chan_poll(struct urdma_chan *chan, struct file *file,
			 poll_table *wait)
{
	poll_wait(file, &chan->wait, wait);
	return (urdma_chan_readable(chan) ? EPOLLIN | EPOLLRDNORM : 0) |
	       EPOLLOUT | EPOLLWRNORM;
}

// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * urdma module: `rdma link add NAME type urdma netdev IFACE` creates a
 * RoCE v2 device bound to IFACE; `rdma link delete NAME` or the removal
 * of IFACE removes it. The port is ACTIVE while the netdev is up and a
 * NIC (the agent) serves the device.
 */
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/delay.h>
#include <linux/etherdevice.h>
#include <net/addrconf.h>
#include <rdma/rdma_netlink.h>
#include "urdma.h"

static LIST_HEAD(urdma_devices);
static DEFINE_MUTEX(urdma_devices_lock);

/* Called by the core when a device is freed (the device's last step). */
void urdma_forget_device(struct urdma_dev *dev)
{
	mutex_lock(&urdma_devices_lock);
	list_del_init(&dev->list);
	mutex_unlock(&urdma_devices_lock);
	if (dev->ndev) {
		dev_put(dev->ndev);
		dev->ndev = NULL;
	}
}

/*
 * Find our device named @name, with a reference, or NULL. The RDMA core
 * looks the name up under its own lock (a device may be renamed).
 */
struct urdma_dev *urdma_get_by_name(const char *name)
{
	struct ib_device *ibdev;

	ibdev = ib_device_get_by_name(name, RDMA_DRIVER_UNKNOWN);
	if (!ibdev)
		return NULL;
	if (ibdev->ops.owner != THIS_MODULE) {
		ib_device_put(ibdev);
		return NULL;
	}
	return to_urdma(ibdev);
}

/* Find our device bound to @ndev, with a reference, or NULL. */
struct urdma_dev *urdma_get_by_netdev(struct net_device *ndev)
{
	struct urdma_dev *dev, *found = NULL;

	mutex_lock(&urdma_devices_lock);
	list_for_each_entry(dev, &urdma_devices, list) {
		if (dev->ndev == ndev && ib_device_try_get(&dev->ibdev)) {
			found = dev;
			break;
		}
	}
	mutex_unlock(&urdma_devices_lock);
	return found;
}

static int urdma_newlink(const char *ibdev_name, struct net_device *ndev)
{
	struct urdma_dev *dev;
	struct urdma_dev *other;
	int err;

	other = urdma_get_by_netdev(ndev);
	if (other) {
		ib_device_put(&other->ibdev);
		return -EEXIST;
	}

	dev = ib_alloc_device(urdma_dev, ibdev);
	if (!dev)
		return -ENOMEM;

	INIT_LIST_HEAD(&dev->list);
	xa_init_flags(&dev->cqs, XA_FLAGS_ALLOC1);
	xa_init_flags(&dev->qps, XA_FLAGS_ALLOC1);
	xa_init_flags(&dev->srqs, XA_FLAGS_ALLOC1);
	xa_init_flags(&dev->kmrs, XA_FLAGS_ALLOC1);
	xa_init(&dev->kqps);
	INIT_LIST_HEAD(&dev->requests);
	spin_lock_init(&dev->kernel_lock);
	dev_hold(ndev);
	dev->ndev = ndev;

	dev->ibdev.node_type = RDMA_NODE_IB_CA;
	dev->ibdev.phys_port_cnt = 1;
	dev->ibdev.num_comp_vectors = 1;
	dev->ibdev.local_dma_lkey = 0;
	strscpy(dev->ibdev.node_desc, "urdma", sizeof(dev->ibdev.node_desc));
	addrconf_addr_eui48((unsigned char *)&dev->ibdev.node_guid,
			    ndev->dev_addr);
	ib_set_device_ops(&dev->ibdev, &urdma_dev_ops);
	/*
	 * Under the NIC's device in sysfs, as an RNIC is: programs find the
	 * network interface through /sys/class/infiniband/NAME/device/net.
	 */
	dev->ibdev.dev.parent = ndev->dev.parent;

	err = ib_device_set_netdev(&dev->ibdev, ndev, 1);
	if (err)
		goto err_free;

	mutex_lock(&urdma_devices_lock);
	list_add_tail(&dev->list, &urdma_devices);
	mutex_unlock(&urdma_devices_lock);

	err = ib_register_device(&dev->ibdev, ibdev_name, NULL);
	if (err) {
		mutex_lock(&urdma_devices_lock);
		list_del_init(&dev->list);
		mutex_unlock(&urdma_devices_lock);
		goto err_free;
	}
	pr_info("urdma: %s bound to %s\n", dev_name(&dev->ibdev.dev),
		netdev_name(ndev));
	return 0;

err_free:
	dev_put(ndev);
	dev->ndev = NULL;
	ib_dealloc_device(&dev->ibdev);
	return err;
}

static struct rdma_link_ops urdma_link_ops = {
	.type = "urdma",
	.newlink = urdma_newlink,
};

/* True if the port is up: its netdev is up and a NIC serves the device. */
bool urdma_port_up(struct urdma_dev *dev)
{
	struct net_device *ndev = dev->ndev;

	return ndev && netif_running(ndev) && netif_carrier_ok(ndev) &&
	       READ_ONCE(dev->chan);
}

/* Tell the kernel's consumers the port's state (after a change). */
void urdma_port_changed(struct urdma_dev *dev)
{
	struct ib_event ev = {
		.device = &dev->ibdev,
		.element.port_num = 1,
		.event = urdma_port_up(dev) ? IB_EVENT_PORT_ACTIVE :
					      IB_EVENT_PORT_ERR,
	};

	ib_dispatch_event(&ev);
}

static int urdma_netdev_event(struct notifier_block *nb, unsigned long event,
			      void *ptr)
{
	struct net_device *ndev = netdev_notifier_info_to_dev(ptr);
	struct urdma_dev *dev = urdma_get_by_netdev(ndev);

	if (!dev)
		return NOTIFY_DONE;

	switch (event) {
	case NETDEV_UNREGISTER:
		ib_unregister_device_queued(&dev->ibdev);
		break;
	case NETDEV_UP:
	case NETDEV_DOWN:
	case NETDEV_CHANGE:
		urdma_port_changed(dev);
		break;
	default:
		break;
	}
	ib_device_put(&dev->ibdev);
	return NOTIFY_OK;
}

static struct notifier_block urdma_netdev_notifier = {
	.notifier_call = urdma_netdev_event,
};

static int __init urdma_init(void)
{
	int err;

	err = register_netdevice_notifier(&urdma_netdev_notifier);
	if (err)
		return err;
	err = urdma_nic_register();
	if (err) {
		unregister_netdevice_notifier(&urdma_netdev_notifier);
		return err;
	}
	rdma_link_register(&urdma_link_ops);
	return 0;
}

static void __exit urdma_exit(void)
{
	struct urdma_dev *dev;
	bool got;

	rdma_link_unregister(&urdma_link_ops);
	urdma_nic_unregister();
	unregister_netdevice_notifier(&urdma_netdev_notifier);

	/*
	 * Unregister what is left. A device whose reference cannot be taken
	 * is being unregistered by someone else; wait until it is gone.
	 */
	for (;;) {
		mutex_lock(&urdma_devices_lock);
		dev = list_first_entry_or_null(&urdma_devices, struct urdma_dev,
					       list);
		got = dev && ib_device_try_get(&dev->ibdev);
		mutex_unlock(&urdma_devices_lock);
		if (!dev)
			break;
		if (got)
			ib_unregister_device_and_put(&dev->ibdev);
		else
			msleep(10);
	}
	/* MRs are freed after a grace period, by code of this module. */
	rcu_barrier();
}

module_init(urdma_init);
module_exit(urdma_exit);

MODULE_AUTHOR("urdma developers");
MODULE_DESCRIPTION("urdma: software RoCE v2 device with a userspace data path");
MODULE_LICENSE("Dual MIT/GPL");
MODULE_ALIAS_RDMA_LINK("urdma");

// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * The entry points of libibverbs.so.1 that Rust cannot define:
 *
 * - the IBVERBS_1.0 versions of the symbols that also have a default
 *   (IBVERBS_1.1) version. They belong to the 2006 ABI, whose structures
 *   differ from today's; no current program binds to them. Each fails
 *   cleanly: NULL or an error with errno set to EOPNOTSUPP.
 * - ibv_register_driver@IBVERBS_1.1, the old provider registration.
 * - the variadic provider helpers of IBVERBS_PRIVATE_34, and the
 *   verbs_allow_disassociate_destroy flag providers read.
 *
 * Symbol versions are set with .symver; the version nodes themselves come
 * from the version script build.rs writes.
 */

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SYMVER(impl, name, node) \
	__asm__(".symver " #impl ", " #name "@" node)
#define SYMVER_DEFAULT(impl, name, node) \
	__asm__(".symver " #impl ", " #name "@@@" node)

/* Returns a pointer: NULL. */
#define COMPAT_PTR(name)						\
	void *urdma_compat_##name(void);				\
	void *urdma_compat_##name(void)				\
	{								\
		errno = EOPNOTSUPP;					\
		return NULL;						\
	}								\
	SYMVER(urdma_compat_##name, name, "IBVERBS_1.0")

/* Returns an errno value. */
#define COMPAT_ERR(name)						\
	int urdma_compat_##name(void);					\
	int urdma_compat_##name(void)					\
	{								\
		errno = EOPNOTSUPP;					\
		return EOPNOTSUPP;					\
	}								\
	SYMVER(urdma_compat_##name, name, "IBVERBS_1.0")

/* Returns -1 with errno set. */
#define COMPAT_NEG(name)						\
	int urdma_compat_##name(void);					\
	int urdma_compat_##name(void)					\
	{								\
		errno = EOPNOTSUPP;					\
		return -1;						\
	}								\
	SYMVER(urdma_compat_##name, name, "IBVERBS_1.0")

/* Returns nothing. */
#define COMPAT_VOID(name)						\
	void urdma_compat_##name(void);					\
	void urdma_compat_##name(void)					\
	{								\
		errno = EOPNOTSUPP;					\
	}								\
	SYMVER(urdma_compat_##name, name, "IBVERBS_1.0")

COMPAT_PTR(ibv_get_device_list);
COMPAT_VOID(ibv_free_device_list);
COMPAT_PTR(ibv_get_device_name);
COMPAT_PTR(ibv_open_device);
COMPAT_ERR(ibv_close_device);
COMPAT_NEG(ibv_get_async_event);
COMPAT_VOID(ibv_ack_async_event);
COMPAT_ERR(ibv_query_device);
COMPAT_ERR(ibv_query_port);
COMPAT_NEG(ibv_query_gid);
COMPAT_NEG(ibv_query_pkey);
COMPAT_PTR(ibv_alloc_pd);
COMPAT_ERR(ibv_dealloc_pd);
COMPAT_PTR(ibv_reg_mr);
COMPAT_ERR(ibv_dereg_mr);
COMPAT_PTR(ibv_create_cq);
COMPAT_ERR(ibv_resize_cq);
COMPAT_ERR(ibv_destroy_cq);
COMPAT_NEG(ibv_get_cq_event);
COMPAT_VOID(ibv_ack_cq_events);
COMPAT_PTR(ibv_create_srq);
COMPAT_ERR(ibv_modify_srq);
COMPAT_ERR(ibv_query_srq);
COMPAT_ERR(ibv_destroy_srq);
COMPAT_PTR(ibv_create_qp);
COMPAT_ERR(ibv_query_qp);
COMPAT_ERR(ibv_modify_qp);
COMPAT_ERR(ibv_destroy_qp);
COMPAT_PTR(ibv_create_ah);
COMPAT_ERR(ibv_destroy_ah);
COMPAT_ERR(ibv_attach_mcast);
COMPAT_ERR(ibv_detach_mcast);

/* The node GUID of a 1.0-ABI device: there are none. */
uint64_t urdma_compat_ibv_get_device_guid(void);
uint64_t urdma_compat_ibv_get_device_guid(void)
{
	errno = EOPNOTSUPP;
	return 0;
}
SYMVER(urdma_compat_ibv_get_device_guid, ibv_get_device_guid, "IBVERBS_1.0");

/* Old-style provider registration: urdma loads no providers. */
void urdma_compat_ibv_register_driver(const char *name, void *init_func);
void urdma_compat_ibv_register_driver(const char *name, void *init_func)
{
	(void)name;
	(void)init_func;
}
SYMVER(urdma_compat_ibv_register_driver, ibv_register_driver, "IBVERBS_1.1");

/* Provider logging: no provider runs here, so nothing to log. */
void urdma_verbs_log(void *ctx, uint32_t level, const char *fmt, ...);
void urdma_verbs_log(void *ctx, uint32_t level, const char *fmt, ...)
{
	(void)ctx;
	(void)level;
	(void)fmt;
}
SYMVER_DEFAULT(urdma_verbs_log, __verbs_log, "IBVERBS_PRIVATE_34");

/* A provider device's sysfs attribute: urdma devices have no sysfs node. */
int urdma_read_ibdev_sysfs_file(char *buf, size_t size, void *sysfs_dev,
				const char *fnfmt, ...);
int urdma_read_ibdev_sysfs_file(char *buf, size_t size, void *sysfs_dev,
				const char *fnfmt, ...)
{
	(void)sysfs_dev;
	(void)fnfmt;
	if (buf && size)
		buf[0] = '\0';
	errno = ENODEV;
	return -1;
}
SYMVER_DEFAULT(urdma_read_ibdev_sysfs_file, ibv_read_ibdev_sysfs_file,
	       "IBVERBS_PRIVATE_34");

/* Whether destroying objects of a disassociated device may succeed. */
bool urdma_allow_disassociate_destroy;
SYMVER_DEFAULT(urdma_allow_disassociate_destroy,
	       verbs_allow_disassociate_destroy, "IBVERBS_PRIVATE_34");

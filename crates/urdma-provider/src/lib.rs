//! `liburdma-rdmav34.so`: the rdma-core provider for urdma kernel devices.
//!
//! With `urdma.ko` loaded, `rdma link add urdma0 type urdma netdev IF`
//! registers an RDMA device (RoCE v2, GIDs from IF's addresses) whose data
//! path stays in user space. The system libibverbs finds this provider
//! through `/etc/libibverbs.d/urdma.driver`, loads it, and the ELF
//! constructor below registers it. The library then matches the kernel's
//! urdma devices to it by name, and each `ibv_open_device` opens the
//! kernel device (a uverbs user context) and, through this provider, an
//! urdma engine device on the IPv4 address of the port's first RoCE v2
//! GID (UDP port 4791).
//!
//! The verbs themselves are the C-ABI layer of the drop-in library,
//! [`urdma_verbs`]: the operation table handed to the library
//! ([`ops::CONTEXT_OPS`]) is built from its entry points, with thin
//! adapters where the provider interface's signature differs. GID indexes
//! are the kernel table's (the library reads GIDs from the kernel): an
//! index whose GID is the engine's address means the engine's source,
//! others are refused with `EINVAL`.
//!
//! Completion channels and asynchronous events of the system library use
//! the kernel's event files. PDs, CQs, QPs and SRQs made with the plain
//! verbs exist in the kernel module too ([`kernel_cq`],
//! [`kernel_objects`]), and the NIC raises their completion and
//! asynchronous events there (this needs a NIC that can open
//! `/dev/urdma`: one started by root, or run as root). Objects made with
//! the `_ex` verbs stay out of the kernel: a CQ made with
//! `ibv_create_cq_ex` and a channel is refused.

#![allow(clippy::missing_safety_doc)]

pub mod driver;
pub mod kernel_cq;
pub mod kernel_objects;
pub mod ops;

use driver::*;
use std::ffi::CStr;
use std::mem::offset_of;
use std::net::IpAddr;
use std::os::raw::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use urdma::{DeviceConfig, Gid};
use urdma_verbs::context::{self, Context};
use urdma_verbs::device::open_shared_with;
use urdma_verbs::gid::{first_roce_v2_ipv4, SysfsGids};
use urdma_verbs::sys::*;
use urdma_verbs::util::{errno, guard, set_errno, VResult};

/// Kernel ABI version of urdma devices (`abi_version` of their uverbs
/// node): `URDMA_UVERBS_ABI_VERSION`.
pub const ABI_VERSION: u32 = urdma_abi::URDMA_UVERBS_ABI_VERSION;

/// The library's name pattern for urdma devices.
pub const NAME_PATTERN: &CStr = c"rdma_device:*Nurdma*";

/// The registered operations and match table, built once by the
/// constructor (they hold pointers, which statics cannot compute).
#[cfg_attr(test, allow(dead_code))]
static mut DEVICE_OPS: Option<(verbs_device_ops, [verbs_match_ent; 2])> = None;

/// The provider's name.
pub const PROVIDER_NAME: &CStr = c"urdma";

fn build_ops() -> (verbs_device_ops, [verbs_match_ent; 2]) {
    // Devices named `urdma*`: they have no parent device, hence no
    // modalias; the library matches names as `rdma_device:N<name>`.
    let table = [
        verbs_match_ent {
            driver_data: std::ptr::null_mut(),
            u: NAME_PATTERN.as_ptr() as u64,
            vendor: 0,
            device: 0,
            kind: VERBS_MATCH_MODALIAS,
        },
        verbs_match_ent {
            driver_data: std::ptr::null_mut(),
            u: 0,
            vendor: 0,
            device: 0,
            kind: VERBS_MATCH_SENTINEL,
        },
    ];
    let ops = verbs_device_ops {
        name: PROVIDER_NAME.as_ptr(),
        match_min_abi_version: ABI_VERSION,
        match_max_abi_version: ABI_VERSION,
        match_table: std::ptr::null(),
        static_providers: std::ptr::null(),
        match_device: None,
        alloc_context: Some(alloc_context),
        import_context: None,
        alloc_device: Some(alloc_device),
        uninit_device: Some(uninit_device),
    };
    (ops, table)
}

/// Register the provider with the library that loaded it.
#[cfg_attr(test, allow(dead_code))]
extern "C" fn register() {
    // SAFETY: runs once, from the ELF constructor, before anything else in
    // this library; the registered pointers stay valid for the process.
    unsafe {
        let slot = &mut *std::ptr::addr_of_mut!(DEVICE_OPS);
        let (ops, table) = slot.insert(build_ops());
        ops.match_table = table.as_ptr();
        verbs_register_driver_34(ops);
    }
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static REGISTER: extern "C" fn() = register;

/// `alloc_device`: a zeroed `verbs_device` the library fills.
unsafe extern "C" fn alloc_device(_sysfs: *mut verbs_sysfs_dev) -> *mut verbs_device {
    guard(std::ptr::null_mut(), || {
        // SAFETY: verbs_device is plain C data; all-zero is valid.
        Box::into_raw(Box::new(unsafe { std::mem::zeroed::<verbs_device>() }))
    })
}

/// `uninit_device`: free what `alloc_device` made.
unsafe extern "C" fn uninit_device(device: *mut verbs_device) {
    if !device.is_null() {
        // SAFETY: the library hands back the Box alloc_device leaked.
        drop(unsafe { Box::from_raw(device) });
    }
}

/// A C string in a fixed-size array, up to its first NUL.
pub fn c_string(s: &[c_char]) -> String {
    let bytes: Vec<u8> = s
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The kernel device name of `context`.
///
/// # Safety
/// `context` is a live context of the library (its device is live).
pub unsafe fn ibdev_name(context: *const ibv_context) -> String {
    // SAFETY: the caller's contract.
    c_string(unsafe { &(*(*context).device).name })
}

/// The sysfs directory of port 1 of the kernel device `device`.
fn port_dir(device: &ibv_device) -> PathBuf {
    let path = c_string(&device.ibdev_path);
    let base = if path.is_empty() {
        Path::new("/sys/class/infiniband").join(c_string(&device.name))
    } else {
        PathBuf::from(path)
    };
    base.join("ports").join("1")
}

/// The engine device for a kernel device: its name, on the address of the
/// port's first RoCE v2 IPv4 GID.
pub fn engine_config(name: &str, port_dir: &Path) -> VResult<DeviceConfig> {
    let (_, addr) = first_roce_v2_ipv4(port_dir).ok_or_else(|| {
        eprintln!(
            "urdma: {name}: no RoCE v2 IPv4 GID in {} (does its netdev have an IPv4 address?)",
            port_dir.display()
        );
        libc::ENODEV
    })?;
    let mut c = DeviceConfig::new(IpAddr::V4(addr));
    c.name = name.to_string();
    Ok(c)
}

fn close_fd(fd: c_int) {
    if fd >= 0 {
        // SAFETY: the library passed ownership of cmd_fd to alloc_context.
        unsafe { libc::close(fd) };
    }
}

fn open_context(device: *mut ibv_device, cmd_fd: c_int) -> VResult<*mut verbs_context> {
    if device.is_null() {
        close_fd(cmd_fd);
        return Err(libc::EINVAL);
    }
    // SAFETY: the library passes its live device.
    let d = unsafe { &*device };
    let name = c_string(&d.name);
    let port = port_dir(d);
    let opened = engine_config(&name, &port).and_then(|cfg| {
        let source = Gid::from_ip(cfg.addr);
        open_shared_with(&cfg, |_| Box::new(SysfsGids::new(port, source)))
    });
    let dev = match opened {
        Ok(d) => d,
        Err(e) => {
            close_fd(cmd_fd);
            return Err(e);
        }
    };
    // SAFETY: the library allocates a zeroed Context (calloc) and
    // initialises its verbs_context, the first field (offset 0), in place;
    // this fills the rest before publishing it.
    unsafe {
        let ctx = _verbs_init_and_alloc_context(
            device,
            cmd_fd,
            std::mem::size_of::<Context>(),
            std::ptr::null_mut::<verbs_context>().wrapping_byte_add(offset_of!(Context, vctx)),
            0,
        ) as *mut Context;
        if ctx.is_null() {
            let e = errno();
            return Err(if e == 0 { libc::ENOMEM } else { e });
        }
        let v = std::ptr::addr_of_mut!((*ctx).vctx);
        if let Err(e) = context::init_fields(ctx, dev, None) {
            verbs_uninit_context(v);
            libc::free(ctx.cast());
            return Err(e);
        }
        let mut cmd = ibv_get_context::default();
        let mut resp = ib_uverbs_get_context_resp::default();
        let rc = ibv_cmd_get_context(
            v,
            &mut cmd,
            std::mem::size_of_val(&cmd),
            &mut resp,
            std::mem::size_of_val(&resp),
        );
        if rc != 0 {
            context::drop_fields(ctx);
            verbs_uninit_context(v);
            libc::free(ctx.cast());
            return Err(rc);
        }
        verbs_set_ops(v, &ops::CONTEXT_OPS);
        context::publish(ctx);
        Ok(v)
    }
}

/// `alloc_context`: open the kernel device's user context on `cmd_fd`
/// and the engine device behind it.
unsafe extern "C" fn alloc_context(
    device: *mut ibv_device,
    cmd_fd: c_int,
    _private_data: *mut c_void,
) -> *mut verbs_context {
    guard(std::ptr::null_mut(), || {
        match open_context(device, cmd_fd) {
            Ok(v) => v,
            Err(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        }
    })
}

/// `free_context` (`ibv_close_device`).
pub unsafe extern "C" fn free_context(ibctx: *mut ibv_context) {
    guard((), || {
        if let Ok(ctx) = context::unpublish(ibctx) {
            // SAFETY: ctx was made by open_context and is no longer
            // reachable from C; its verbs_context was initialised there.
            unsafe {
                context::drop_fields(ctx);
                verbs_uninit_context(std::ptr::addr_of_mut!((*ctx).vctx));
                libc::free(ctx.cast());
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn match_table_names_urdma_devices() {
        let (ops, table) = build_ops();
        assert_eq!(ops.match_min_abi_version, 1);
        assert_eq!(ops.match_max_abi_version, 1);
        assert_eq!(table[0].kind, VERBS_MATCH_MODALIAS);
        // SAFETY: u holds the pattern's address.
        let pat = unsafe { CStr::from_ptr(table[0].u as *const c_char) };
        assert_eq!(pat, NAME_PATTERN);
        assert_eq!(table[1].kind, VERBS_MATCH_SENTINEL);
    }

    #[test]
    fn engine_address_from_sysfs() {
        let dir = std::env::temp_dir().join(format!("urdma-prov-{}", std::process::id()));
        let port = dir.join("ports/1");
        std::fs::create_dir_all(port.join("gids")).unwrap();
        std::fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
        std::fs::write(
            port.join("gids/0"),
            "fe80:0000:0000:0000:0000:0000:0000:0001\n",
        )
        .unwrap();
        std::fs::write(port.join("gid_attrs/types/0"), "RoCE v2\n").unwrap();
        assert_eq!(engine_config("urdma0", &port).err(), Some(libc::ENODEV));
        std::fs::write(
            port.join("gids/1"),
            "0000:0000:0000:0000:0000:ffff:7f00:0001\n",
        )
        .unwrap();
        std::fs::write(port.join("gid_attrs/types/1"), "RoCE v2\n").unwrap();
        let c = engine_config("urdma0", &port).unwrap();
        assert_eq!(c.addr, "127.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(c.port, 4791);
        assert_eq!(c.name, "urdma0");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Device, port, GID and P_Key queries.

use crate::context::Context;
use crate::device::{device_attr, port_attr};
use crate::sys::*;
use crate::util::{ensure, guard, ret_errno, ret_minus1, VResult};
use std::os::raw::{c_int, c_void};

/// The one port.
const PORT: u32 = 1;
/// The P_Key of the one P_Key table entry (the default full-member key).
const DEFAULT_PKEY: u16 = 0xffff;

fn check_port(port: u32) -> VResult<()> {
    ensure(port == PORT, libc::EINVAL)
}

/// Copy `len` bytes of `src` to `dst` (zero-filling past `src`).
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes.
unsafe fn copy_out<T>(src: &T, dst: *mut c_void, len: usize) {
    let n = len.min(std::mem::size_of::<T>());
    // SAFETY: src is a live T of at least n bytes; the caller guarantees dst.
    unsafe {
        std::ptr::copy_nonoverlapping((src as *const T).cast::<u8>(), dst.cast::<u8>(), n);
        if len > n {
            std::ptr::write_bytes(dst.cast::<u8>().add(n), 0, len - n);
        }
    }
}

/// `ibv_query_device`
pub unsafe extern "C" fn query_device(
    context: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let c = Context::from_ptr(context)?;
            ensure(!attr.is_null(), libc::EINVAL)?;
            // SAFETY: non-NULL pointer to the caller's struct.
            unsafe { *attr = device_attr(&c.dev.attr) };
            Ok(())
        })())
    })
}

/// `verbs_context::query_device_ex` (the inline `ibv_query_device_ex`).
pub unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let c = Context::from_ptr(context)?;
            ensure(!attr.is_null(), libc::EINVAL)?;
            // SAFETY: a non-NULL input points to the caller's struct.
            ensure(
                input.is_null() || unsafe { (*input).comp_mask } == 0,
                libc::EINVAL,
            )?;
            ensure(
                attr_size >= std::mem::size_of::<ibv_device_attr>(),
                libc::EINVAL,
            )?;
            // SAFETY: plain C data; zero is valid.
            let mut x: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
            x.orig_attr = device_attr(&c.dev.attr);
            x.phys_port_cnt_ex = u32::from(c.dev.attr.phys_port_cnt);
            // SAFETY: the caller's buffer holds attr_size bytes.
            unsafe { copy_out(&x, attr.cast(), attr_size) };
            Ok(())
        })())
    })
}

/// `verbs_context::query_port` (the inline `ibv_query_port`).
pub unsafe extern "C" fn query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr_out: *mut ibv_port_attr,
    port_attr_len: usize,
) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let c = Context::from_ptr(context)?;
            check_port(u32::from(port_num))?;
            ensure(!port_attr_out.is_null(), libc::EINVAL)?;
            let a = port_attr(&c.dev.port_attr());
            // SAFETY: the caller's buffer holds port_attr_len bytes.
            unsafe { copy_out(&a, port_attr_out.cast(), port_attr_len) };
            Ok(())
        })())
    })
}

/// The exported `ibv_query_port`, which fills the 1.1-ABI port attribute
/// structure (`struct ibv_port_attr` up to `flags`).
pub unsafe extern "C" fn query_port_compat(
    context: *mut ibv_context,
    port_num: u8,
    port_attr_out: *mut _compat_ibv_port_attr,
) -> c_int {
    // SAFETY: same contract, with the compat structure's length.
    unsafe {
        query_port(
            context,
            port_num,
            port_attr_out.cast(),
            COMPAT_PORT_ATTR_LEN,
        )
    }
}

fn gid_entry(c: &Context, port: u32, index: u32) -> VResult<ibv_gid_entry> {
    check_port(port)?;
    ensure(index < c.dev.gids.len(), libc::EINVAL)?;
    let gid = c.dev.gid(index as usize).ok_or(libc::ENODATA)?;
    // SAFETY: plain C data; zero is valid.
    let mut e: ibv_gid_entry = unsafe { std::mem::zeroed() };
    e.gid.raw = gid.0;
    e.gid_index = index;
    e.port_num = port;
    e.gid_type = IBV_GID_TYPE_ROCE_V2;
    e.ndev_ifindex = c.dev.ifindex;
    Ok(e)
}

/// `ibv_query_gid`
pub unsafe extern "C" fn query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    guard(-1, || {
        ret_minus1((|| {
            let c = Context::from_ptr(context)?;
            ensure(!gid.is_null() && index >= 0, libc::EINVAL)?;
            let raw = match gid_entry(c, u32::from(port_num), index as u32) {
                Ok(e) => e.gid.raw,
                Err(libc::ENODATA) => [0; 16],
                Err(e) => return Err(e),
            };
            // SAFETY: non-NULL pointer to the caller's GID.
            unsafe { (*gid).raw = raw };
            Ok(())
        })())
    })
}

/// `_ibv_query_gid_ex` (behind the inline `ibv_query_gid_ex`): 0 or an errno.
pub unsafe extern "C" fn query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            let c = Context::from_ptr(context)?;
            ensure(!entry.is_null(), libc::EINVAL)?;
            ensure(flags == 0, libc::EINVAL)?;
            ensure(
                entry_size >= std::mem::size_of::<ibv_gid_entry>(),
                libc::EINVAL,
            )?;
            let e = gid_entry(c, port_num, gid_index)?;
            // SAFETY: the caller's entry holds entry_size bytes.
            unsafe { copy_out(&e, entry.cast(), entry_size) };
            Ok(())
        })())
    })
}

/// `_ibv_query_gid_table`: the number of entries, or a negative errno.
pub unsafe extern "C" fn query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let r = guard(Err(libc::EIO), || -> VResult<isize> {
        let c = Context::from_ptr(context)?;
        ensure(flags == 0, libc::EINVAL)?;
        ensure(
            entry_size >= std::mem::size_of::<ibv_gid_entry>(),
            libc::EINVAL,
        )?;
        let mut n = 0usize;
        for i in 0..c.dev.gids.len() {
            let e = match gid_entry(c, PORT, i) {
                Ok(e) => e,
                Err(libc::ENODATA) => continue,
                Err(e) => return Err(e),
            };
            ensure(n < max_entries && !entries.is_null(), libc::EINVAL)?;
            // SAFETY: the caller's array holds max_entries entries of
            // entry_size bytes, and n < max_entries.
            unsafe {
                copy_out(
                    &e,
                    entries.cast::<u8>().add(n * entry_size).cast(),
                    entry_size,
                )
            };
            n += 1;
        }
        Ok(n as isize)
    });
    match r {
        Ok(n) => n,
        Err(e) => {
            crate::util::set_errno(e);
            -(e as isize)
        }
    }
}

/// `ibv_query_gid_type`
pub unsafe extern "C" fn query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: u32,
    gid_type: *mut u32,
) -> c_int {
    guard(-1, || {
        ret_minus1((|| {
            let c = Context::from_ptr(context)?;
            ensure(!gid_type.is_null(), libc::EINVAL)?;
            let t = match gid_entry(c, u32::from(port_num), index) {
                Ok(_) => IBV_GID_TYPE_SYSFS_ROCE_V2,
                Err(libc::ENODATA) => IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
                Err(e) => return Err(e),
            };
            // SAFETY: non-NULL pointer to the caller's enum.
            unsafe { *gid_type = t };
            Ok(())
        })())
    })
}

/// `ibv_query_pkey`: the P_Key in network byte order.
pub unsafe extern "C" fn query_pkey(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    guard(-1, || {
        ret_minus1((|| {
            let c = Context::from_ptr(context)?;
            check_port(u32::from(port_num))?;
            ensure(!pkey.is_null(), libc::EINVAL)?;
            ensure(
                index >= 0 && (index as u32) < u32::from(c.dev.port.pkey_tbl_len),
                libc::EINVAL,
            )?;
            // SAFETY: non-NULL pointer to the caller's value.
            unsafe { *pkey = DEFAULT_PKEY.to_be() };
            Ok(())
        })())
    })
}

/// `ibv_get_pkey_index`: the index of `pkey` (network order), or -1.
pub unsafe extern "C" fn get_pkey_index(
    context: *mut ibv_context,
    port_num: u8,
    pkey: u16,
) -> c_int {
    guard(-1, || {
        let r = (|| {
            Context::from_ptr(context)?;
            check_port(u32::from(port_num))?;
            ensure(u16::from_be(pkey) == DEFAULT_PKEY, libc::ENOENT)?;
            Ok(())
        })();
        match r {
            Ok(()) => 0,
            Err(e) => {
                crate::util::set_errno(e);
                -1
            }
        }
    })
}

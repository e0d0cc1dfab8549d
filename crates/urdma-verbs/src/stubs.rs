//! The provider-facing interface of libibverbs (IBVERBS_PRIVATE_34):
//! kernel command wrappers (`ibv_cmd_*`, `execute_ioctl`) and provider
//! registration. urdma has no kernel driver and loads no providers, so
//! these exist only so that libraries linked against them (libmlx5,
//! libefa, ...) load; every one that could do work fails with EOPNOTSUPP.
//!
//! The arguments of the `ibv_cmd_*` calls are never looked at, so they
//! are declared as none (the C calling convention lets a callee ignore
//! arguments its caller passes).

use crate::util::set_errno;
use std::os::raw::{c_int, c_uint, c_void};

/// An `ibv_cmd_*` or `execute_ioctl` call: no kernel to send it to.
pub extern "C" fn cmd_unsupported() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// `verbs_register_driver_34`: called by provider libraries' constructors
/// when they are loaded. urdma is the only device source, so providers
/// are not recorded.
pub extern "C" fn register_driver(_ops: *const c_void) {}

/// `_verbs_init_and_alloc_context`: only providers call it, from a
/// context allocation that cannot happen here.
pub extern "C" fn init_and_alloc_context(
    _device: *mut c_void,
    _cmd_fd: c_int,
    _alloc_size: usize,
    _context_offset: *mut c_void,
    _driver_id: u32,
) -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// `verbs_open_device`: provider devices do not exist here.
pub extern "C" fn open_provider_device(_device: *mut c_void, _private: *mut c_void) -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// `verbs_init_cq`, `verbs_set_ops`, `verbs_uninit_context`: provider
/// bookkeeping on objects that cannot exist here; nothing to do.
pub extern "C" fn provider_noop(
    _a: *mut c_void,
    _b: *mut c_void,
    _c: *mut c_void,
    _d: *mut c_void,
) {
}

/// `__ioctl_final_num_attrs`: the attribute count of a command buffer
/// chain. urdma builds no command buffers; a chain handed in is not
/// walked (its layout is private to libibverbs) and the count given is
/// returned.
pub extern "C" fn ioctl_final_num_attrs(num_attrs: c_uint, _link: *mut c_void) -> c_uint {
    num_attrs
}

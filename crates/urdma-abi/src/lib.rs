//! What urdma's drivers (the Rust API, the drop-in libibverbs, the
//! provider) and its NIC (the agent, or a NIC inside the program) share:
//!
//! - the shared-memory rings: completion queues ([`cq`]), send and
//!   receive work rings ([`wq`]), and the mappings under them ([`shm`]);
//! - the command protocol between a driver and the agent ([`proto`]),
//!   its socket and descriptor passing ([`channel`]), where the agent
//!   listens ([`addr`]) and how a root agent trusts a user namespace
//!   ([`vouch`]);
//! - registered memory as the NIC reaches it ([`mem`], [`procmem`]);
//! - asynchronous event queues ([`events`]) and the in-process NIC
//!   interface ([`local_nic`]);
//! - one configuration for drivers and NIC ([`config`]), the devices it
//!   names ([`device`]), the network interfaces they sit on ([`netif`]) and
//!   the run directory ([`rundir`]); signal
//!   handling of helper threads ([`sig`]);
//! - the ABI urdma.ko shares with user space, generated at build time
//!   from `kernel/urdma_abi.h` (see `build.rs`; nothing is copied by
//!   hand), and the NIC file's uses of it ([`kernel`]).
//!
//! The generated ABI, at the crate's root:
//! - The NIC file's commands (`/dev/urdma`): the argument structures
//!   ([`urdma_cq_event`], [`urdma_event`], [`urdma_attach`],
//!   [`urdma_dma`]) and their request numbers ([`URDMA_IOC_CQ_EVENT`],
//!   [`URDMA_IOC_EVENT`], [`URDMA_IOC_ATTACH`], [`URDMA_IOC_DMA`]),
//!   computed from each structure's generated size as the header's
//!   `_IOW`/`_IOWR` would ([`ioc`]).
//! - The messages of an attached NIC file: [`urdma_msg_hdr`], the
//!   `urdma_msg_*` structures, their types (`URDMA_MSG_*`) and the
//!   constants of their fields (`URDMA_REQ_*`, `URDMA_OP_*`, `URDMA_MR_*`,
//!   `URDMA_POST_*`, `URDMA_WC_*`, `URDMA_MSG_F_*`).
//! - The driver data of the uverbs commands a provider issues
//!   ([`urdma_create_qp_cmd`], [`urdma_reg_mr_cmd`],
//!   [`urdma_create_resp`]) and its version
//!   ([`URDMA_UVERBS_ABI_VERSION`]).
//! - The limits and tags both sides hold to ([`URDMA_IBDEV_NAME_LEN`],
//!   [`URDMA_DMA_MAX`], [`URDMA_MSG_MAX_PAYLOAD`],
//!   [`URDMA_KERNEL_KEY_TAG`]).
//!
//! Every structure has `Debug` and `Default` (all zeroes), and but for
//! [`urdma_msg_post`], which ends in a flexible array, `Copy` and `Eq`. bindgen's layout
//! assertions, part of the generated code, pin each size and offset
//! against clang's view of the header; the assertions below pin what the
//! NIC's message code relies on besides.

#![deny(missing_docs)]

pub mod addr;
pub mod channel;
pub mod config;
pub mod cq;
pub mod device;
pub mod events;
pub mod kernel;
pub mod local_nic;
pub mod mem;
pub mod netif;
pub mod procmem;
pub mod proto;
pub mod rundir;
pub mod shm;
pub mod sig;
pub mod vouch;
pub mod wq;

use urdma_proto::error::{Error, Result};
use urdma_proto::{cm, engine, error, types, verbs};

/// The bindgen output: the header's structures, enums and constants, and
/// the request encoding of `<linux/ioctl.h>` (`_IOC_*`), under the
/// header's names. Everything is also re-exported at the crate's root.
#[allow(
    missing_docs,
    non_camel_case_types,
    non_upper_case_globals,
    dead_code,
    clippy::all
)]
pub mod sys {
    include!(concat!(env!("OUT_DIR"), "/urdma_abi.rs"));
}

pub use sys::*;

use core::mem::{offset_of, size_of};

/// The request number `_IOC(dir, ty, nr, size)` of `<linux/ioctl.h>`,
/// with the target's encoding (`_IOC_*SHIFT`, from its headers). A size
/// too large for the size field fails the build, as the C macros'
/// `_IOC_TYPECHECK` does.
pub const fn ioc(dir: u32, ty: u32, nr: u32, size: usize) -> u32 {
    assert!(size < 1 << _IOC_SIZEBITS, "an ioctl argument too large");
    assert!(ty <= _IOC_TYPEMASK && nr <= _IOC_NRMASK);
    (dir << _IOC_DIRSHIFT)
        | (ty << _IOC_TYPESHIFT)
        | (nr << _IOC_NRSHIFT)
        | ((size as u32) << _IOC_SIZESHIFT)
}

// The header's `URDMA_IOC_*` requests (read from its text by `build.rs`),
// and `IOCTLS`, all of them by name.
include!(concat!(env!("OUT_DIR"), "/ioctls.rs"));

/// Whether a message of `size` bytes has a length the NIC file takes:
/// a multiple of 8 that the header's 16 bits hold.
const fn whole(size: usize) -> bool {
    size.is_multiple_of(8) && size <= u16::MAX as usize
}

// Every message starts with its header, which the NIC reads first.
const _: () = {
    assert!(offset_of!(urdma_msg_ud_send, hdr) == 0);
    assert!(offset_of!(urdma_msg_send_done, hdr) == 0);
    assert!(offset_of!(urdma_msg_ud_recv, hdr) == 0);
    assert!(offset_of!(urdma_msg_request, hdr) == 0);
    assert!(offset_of!(urdma_msg_reply, hdr) == 0);
    assert!(offset_of!(urdma_msg_post, hdr) == 0);
    assert!(offset_of!(urdma_msg_wc, hdr) == 0);
    assert!(offset_of!(urdma_msg_mr, hdr) == 0);
    assert!(offset_of!(urdma_msg_qp_event, hdr) == 0);
};
// The NIC writes these whole, their length the structure's size.
const _: () = {
    assert!(whole(size_of::<urdma_msg_send_done>()));
    assert!(whole(size_of::<urdma_msg_reply>()));
    assert!(whole(size_of::<urdma_msg_wc>()));
    assert!(whole(size_of::<urdma_msg_qp_event>()));
};
// A datagram's payload follows its fixed part, and the largest fits the
// header's length; a work request's buffers follow its fixed part.
const _: () = {
    assert!(whole(size_of::<urdma_msg_ud_recv>()));
    assert!(whole(size_of::<urdma_msg_ud_send>()));
    assert!(size_of::<urdma_msg_ud_recv>() + URDMA_MSG_MAX_PAYLOAD as usize <= u16::MAX as usize);
    assert!(offset_of!(urdma_msg_post, sge) == size_of::<urdma_msg_post>());
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_their_number_and_size() {
        let nr = |req: u32| (req >> _IOC_NRSHIFT) & _IOC_NRMASK;
        let size = |req: u32| ((req >> _IOC_SIZESHIFT) & _IOC_SIZEMASK) as usize;
        assert_eq!(nr(URDMA_IOC_ATTACH), 3);
        assert_eq!(size(URDMA_IOC_ATTACH), size_of::<urdma_attach>());
        assert_eq!(size(URDMA_IOC_DMA), size_of::<urdma_dma>());
        assert_eq!(IOCTLS.len(), 4);
        assert!(IOCTLS
            .iter()
            .all(|&(_, r)| (r >> _IOC_TYPESHIFT) & _IOC_TYPEMASK == URDMA_IOC_MAGIC));
    }
}

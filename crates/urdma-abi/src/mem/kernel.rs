//! Memory of kernel MRs, reached through the kernel channel's
//! `URDMA_IOC_DMA` ioctl.

use super::MemError;
use crate as abi;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// Memory of a kernel MR, reached through the kernel channel's
/// `URDMA_IOC_DMA`: the kernel checks every access against the MR.
#[derive(Debug)]
pub(super) struct KernelMem {
    pub(super) chan: Arc<File>,
    pub(super) key: u32,
    /// I/O address of the first byte.
    pub(super) iova: u64,
}

nix::ioctl_write_ptr_bad!(ioc_dma, abi::URDMA_IOC_DMA, abi::urdma_dma);

/// Most bytes one `URDMA_IOC_DMA` moves.
const DMA_MAX: usize = abi::URDMA_DMA_MAX as usize;

impl KernelMem {
    /// Move `len` bytes at `offset` between the MR and `buf`.
    pub(super) fn access(
        &self,
        offset: usize,
        buf: *mut u8,
        len: usize,
        write: bool,
    ) -> Result<(), MemError> {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(DMA_MAX);
            let cmd = abi::urdma_dma {
                iova: self.iova.wrapping_add((offset + done) as u64),
                buf: buf as u64 + done as u64,
                len: n as u32,
                key: self.key,
                write: u32::from(write),
                reserved: 0,
            };
            // SAFETY: the command is a live struct of the layout the
            // ioctl number encodes; the kernel copies `n` bytes from or
            // into `buf + done`, which the caller's slice covers.
            unsafe { ioc_dma(self.chan.as_raw_fd(), &cmd) }.map_err(|_| MemError::Unreachable)?;
            done += n;
        }
        Ok(())
    }
}

//! Protection domains and memory regions.

use super::device::Device;
use crate::engine::command::{AllocPd, DeallocPd, DeregMr, RegMr};
use crate::engine::SgEntry;
use crate::error::{Error, Result};
use crate::mem::MemRegion;
use crate::mr::MrEntry;
use crate::types::AccessFlags;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The device's protection domains.
impl Device {
    /// Allocate a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd> {
        let pdn = self.call(AllocPd {})?;
        Ok(Pd::new(self.clone(), pdn))
    }
}

struct PdInner {
    dev: Device,
    pdn: u32,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let pdn = self.pdn;
        if let Err(e) = self.dev.call(DeallocPd { pd: pdn }) {
            tracing::warn!(pdn, error = %e, "protection domain not freed");
        }
    }
}

/// A protection domain. MRs and QPs made in it keep it alive.
#[derive(Clone)]
pub struct Pd {
    inner: Arc<PdInner>,
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pd({})", self.inner.pdn)
    }
}

impl Pd {
    pub(crate) fn new(dev: Device, pdn: u32) -> Self {
        Pd {
            inner: Arc::new(PdInner { dev, pdn }),
        }
    }

    /// PD number.
    pub fn pdn(&self) -> u32 {
        self.inner.pdn
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// Allocate a memory window of `kind` in this PD; answers its R_Key
    /// (bind it with [`crate::SendWr::bind_mw`]).
    pub fn alloc_mw(&self, kind: crate::engine::mw::MwType) -> Result<u32> {
        let pd = self.inner.pdn;
        self.inner
            .dev
            .call(crate::engine::command::AllocMw { pd, kind })
    }

    /// Free the memory window of `rkey` (any R_Key it took).
    pub fn dealloc_mw(&self, rkey: u32) -> Result<()> {
        self.inner
            .dev
            .call(crate::engine::command::DeallocMw { rkey })
    }

    /// Allocate and register `len` zeroed bytes with `access` rights.
    pub fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<Mr> {
        // On the shared NIC the region is shared memory the agent maps.
        let mem = if self.inner.dev.is_shared() {
            MemRegion::allocate_shared(len)?
        } else {
            MemRegion::allocate(len)?
        };
        let iova = mem.addr() as u64;
        let pdn = self.inner.pdn;
        let entry = self.inner.dev.call(RegMr {
            pd: pdn,
            access,
            iova,
            mem: Box::new(mem),
            rekey: None,
        })?;
        Ok(Mr {
            inner: Arc::new(MrInner {
                pd: self.clone(),
                entry,
            }),
        })
    }
}

struct MrInner {
    pd: Pd,
    entry: Arc<MrEntry>,
}

impl Drop for MrInner {
    fn drop(&mut self) {
        let key = self.entry.lkey;
        let _ = self.pd.inner.dev.call(DeregMr { key });
    }
}

/// A registered memory region owning its memory. Cloning shares it.
///
/// The remote side may write it at any time (if access allows); read and
/// write it locally with [`Mr::read_at`] and [`Mr::write_at`].
#[derive(Clone)]
pub struct Mr {
    inner: Arc<MrInner>,
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("lkey", &self.lkey())
            .field("addr", &self.addr())
            .field("len", &self.len())
            .finish()
    }
}

/// What a peer needs to access a region: address, key and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteBuf {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length in bytes.
    pub len: u64,
}

impl Mr {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.inner.entry.lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.inner.entry.rkey
    }

    /// Virtual address of the first byte (what peers use in RDMA requests).
    pub fn addr(&self) -> u64 {
        self.inner.entry.iova
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.entry.len()
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Access rights.
    pub fn access(&self) -> AccessFlags {
        self.inner.entry.access
    }

    /// The PD it belongs to.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    /// Address, key and length for a peer.
    pub fn remote(&self) -> RemoteBuf {
        RemoteBuf {
            addr: self.addr(),
            rkey: self.rkey(),
            len: self.len() as u64,
        }
    }

    fn check_idle(&self, offset: usize, len: usize) -> Result<()> {
        if self.inner.entry.is_busy(offset, len) {
            return Err(Error::Busy(format!("bytes {offset}..+{len} are in flight")));
        }
        Ok(())
    }

    /// Copy bytes out of the region. Fails with [`Error::Busy`] if a
    /// posted work request still uses the range as a local buffer.
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.check_idle(offset, buf.len())?;
        self.inner
            .entry
            .mem
            .read(offset, buf)
            .map_err(|e| Error::inval(e.to_string()))
    }

    /// Copy bytes into the region (same rule as [`Mr::read_at`]).
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check_idle(offset, data.len())?;
        self.inner
            .entry
            .mem
            .write(offset, data)
            .map_err(|e| Error::inval(e.to_string()))
    }

    /// The whole region as a vector.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut v = vec![0; self.len()];
        self.read_at(0, &mut v)?;
        Ok(v)
    }

    /// `len` bytes at `offset`, for use in a work request.
    pub fn slice(&self, offset: usize, len: usize) -> Result<MrSlice> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(MrSlice {
                mr: self.clone(),
                offset,
                len,
            }),
            _ => Err(Error::inval(format!(
                "slice {offset}+{len} outside region of {}",
                self.len()
            ))),
        }
    }

    /// The whole region, for use in a work request.
    pub fn all(&self) -> MrSlice {
        MrSlice {
            mr: self.clone(),
            offset: 0,
            len: self.len(),
        }
    }
}

/// A byte range of a registered region, used as a scatter/gather element.
#[derive(Clone, Debug)]
pub struct MrSlice {
    mr: Mr,
    offset: usize,
    len: usize,
}

impl MrSlice {
    /// The region.
    pub fn mr(&self) -> &Mr {
        &self.mr
    }

    /// Offset in the region.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn sge(&self) -> SgEntry {
        SgEntry {
            addr: self.mr.addr() + self.offset as u64,
            length: self.len as u32,
            lkey: self.mr.lkey(),
        }
    }
}

//! Memory regions: keys, protection domain, access rights and bounds.
//! Every memory access of the engine goes through [`MrEntry`] after the
//! checks here.

use crate::memory::{MemError, Memory};
use crate::types::AccessFlags;
use rustc_hash::FxHashMap as HashMap;
use std::sync::{Arc, Mutex};

/// Top byte of the keys of kernel MRs (`URDMA_KERNEL_KEY_TAG`): the
/// engine never gives its own regions such keys.
pub const KERNEL_KEY_TAG: u32 = 0xfe;

/// True for a key of the kernel's key space.
pub fn is_kernel_key(key: u32) -> bool {
    key >> 24 == KERNEL_KEY_TAG
}

/// Registered regions by key (L_Key and R_Key are equal).
pub type MrTable = HashMap<u32, Arc<MrEntry>>;

/// A registered memory region as the engine sees it.
#[derive(Debug)]
pub struct MrEntry {
    /// Local key (equal to the remote key).
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// Protection domain number.
    pub pd: u32,
    /// Access rights.
    pub access: AccessFlags,
    /// I/O virtual address of the first byte (what remote peers use as VA).
    pub iova: u64,
    /// The memory.
    pub mem: Box<dyn Memory>,
    /// A peer's SEND with invalidate may end the region (a kernel
    /// fast-registration MR); other regions refuse it.
    pub invalidatable: bool,
    /// Byte ranges handed to the engine as local buffers of posted work
    /// requests, still in flight: (start, end) and how many times. Kept
    /// for owned memory only (allocated in the engine's own process, where
    /// the safe API's reads and writes check it: [`MrEntry::is_busy`]).
    inflight: Mutex<std::collections::HashMap<(usize, usize), usize>>,
}

/// Why an MR check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MrCheckError {
    /// No region is registered under the key.
    #[error("unknown key")]
    UnknownKey,
    /// Region belongs to another protection domain.
    #[error("protection domain mismatch")]
    WrongPd,
    /// Required access right missing.
    #[error("access right missing")]
    NoAccess,
    /// Range outside the region.
    #[error("range outside the region")]
    OutOfBounds,
}

impl MrEntry {
    /// Create an entry for `mem`, visible at `iova`.
    pub fn new(key: u32, pd: u32, access: AccessFlags, iova: u64, mem: impl Memory) -> Self {
        Self::from_boxed(key, pd, access, iova, Box::new(mem))
    }

    /// Create an entry for `mem`, visible at `iova`.
    pub fn from_boxed(
        key: u32,
        pd: u32,
        access: AccessFlags,
        iova: u64,
        mem: Box<dyn Memory>,
    ) -> Self {
        MrEntry {
            lkey: key,
            rkey: key,
            pd,
            access,
            iova,
            mem,
            invalidatable: false,
            inflight: Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }

    /// Check `[va, va+len)` against the region, the PD and the access
    /// rights; returns the byte offset of `va` in the region.
    pub fn check(
        &self,
        pd: u32,
        va: u64,
        len: usize,
        need: AccessFlags,
    ) -> Result<usize, MrCheckError> {
        if self.pd != pd {
            return Err(MrCheckError::WrongPd);
        }
        if !self.access.contains(need) {
            return Err(MrCheckError::NoAccess);
        }
        let off = va.checked_sub(self.iova).ok_or(MrCheckError::OutOfBounds)?;
        let off = usize::try_from(off).map_err(|_| MrCheckError::OutOfBounds)?;
        match off.checked_add(len) {
            Some(end) if end <= self.len() => Ok(off),
            _ => Err(MrCheckError::OutOfBounds),
        }
    }

    /// Record a local in-flight range.
    pub(crate) fn hold(&self, start: usize, len: usize) {
        if !self.mem.is_owned() {
            return;
        }
        let mut v = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        *v.entry((start, start.saturating_add(len))).or_default() += 1;
    }

    /// Release one in-flight range recorded with [`MrEntry::hold`].
    pub(crate) fn release(&self, start: usize, len: usize) {
        if !self.mem.is_owned() {
            return;
        }
        let mut v = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        let key = (start, start.saturating_add(len));
        if let Some(n) = v.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                v.remove(&key);
            }
        }
    }

    /// True if `[start, start+len)` overlaps a range in flight (always
    /// false for memory that is not owned: no one tracks it).
    pub fn is_busy(&self, start: usize, len: usize) -> bool {
        let end = start.saturating_add(len);
        let v = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        v.keys()
            .any(|&(s, e)| s < end.max(start + 1) && start < e.max(s + 1))
    }
}

/// Find the region registered under `key` and check `[va, va+len)`
/// against it, the protection domain `pd` and the rights `need`: the one
/// lookup behind every access by key, local (L_Key of an SGE) or remote
/// (R_Key of a request). Returns the region and the offset of `va` in it.
pub fn lookup(
    mrs: &MrTable,
    key: u32,
    pd: u32,
    va: u64,
    len: usize,
    need: AccessFlags,
) -> Result<(&Arc<MrEntry>, usize), MrCheckError> {
    let mr = mrs.get(&key).ok_or(MrCheckError::UnknownKey)?;
    let off = mr.check(pd, va, len, need)?;
    Ok((mr, off))
}

/// The resolved scatter/gather list of one work request: most have one
/// or two elements, which stay inline (no allocation per request).
pub type SgeList = smallvec::SmallVec<[LocalSge; 2]>;

/// A scatter/gather element resolved to a registered region: the region is
/// kept alive and its range marked in flight for as long as this lives.
#[derive(Debug)]
pub struct LocalSge {
    /// The region.
    pub mr: Arc<MrEntry>,
    /// Offset of the first byte in the region.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

impl LocalSge {
    /// Resolve and hold a range of `mr`.
    pub fn new(mr: Arc<MrEntry>, offset: usize, len: usize) -> Self {
        mr.hold(offset, len);
        LocalSge { mr, offset, len }
    }
}

impl Drop for LocalSge {
    fn drop(&mut self) {
        self.mr.release(self.offset, self.len);
    }
}

/// Run `f(sge, offset in its region, offset in the range, n)` over each
/// piece of the `len` bytes at message offset `msg_off` of a
/// scatter/gather list, in order; fails when the list is shorter.
fn each_piece(
    sges: &[LocalSge],
    msg_off: usize,
    len: usize,
    mut f: impl FnMut(&LocalSge, usize, usize, usize) -> Result<(), MemError>,
) -> Result<(), MemError> {
    let mut skip = msg_off;
    let mut done = 0;
    for s in sges {
        if done == len {
            break;
        }
        if skip >= s.len {
            skip -= s.len;
            continue;
        }
        let n = (s.len - skip).min(len - done);
        f(s, s.offset + skip, done, n)?;
        done += n;
        skip = 0;
    }
    if done != len {
        return Err(MemError::OutOfBounds {
            offset: msg_off,
            len,
            size: total_len(sges),
        });
    }
    Ok(())
}

/// The element that holds all `len` bytes at message offset `msg_off` of
/// a scatter/gather list, with their offset in its region; None when they
/// span elements or run past the list.
pub fn within_one(sges: &[LocalSge], msg_off: usize, len: usize) -> Option<(&LocalSge, usize)> {
    let mut skip = msg_off;
    let sge = sges.iter().find(|s| {
        let here = skip < s.len;
        if !here {
            skip -= s.len;
        }
        here
    })?;
    (skip.checked_add(len)? <= sge.len).then_some((sge, sge.offset + skip))
}

/// Copy `len` bytes from message offset `msg_off` of a gather list into `out`.
pub fn gather(
    sges: &[LocalSge],
    msg_off: usize,
    len: usize,
    out: &mut Vec<u8>,
) -> Result<(), MemError> {
    each_piece(sges, msg_off, len, |s, off, _, n| {
        s.mr.mem.read_into(off, n, out)
    })
}

/// Copy `data` to message offset `msg_off` of a scatter list.
pub fn scatter(sges: &[LocalSge], msg_off: usize, data: &[u8]) -> Result<(), MemError> {
    each_piece(sges, msg_off, data.len(), |s, off, at, n| {
        s.mr.mem.write(off, &data[at..at + n])
    })
}

/// Copy `len` bytes at `src_off` of region `src` to message offset
/// `msg_off` of a scatter list, region to region (see
/// [`crate::memory::copy_between`]).
pub fn scatter_from(
    sges: &[LocalSge],
    msg_off: usize,
    src: &dyn Memory,
    src_off: usize,
    len: usize,
) -> Result<(), MemError> {
    each_piece(sges, msg_off, len, |s, off, at, n| {
        crate::memory::copy_between(src, src_off.saturating_add(at), &*s.mr.mem, off, n)
    })
}

/// Total length of a scatter/gather list.
pub fn total_len(sges: &[LocalSge]) -> usize {
    sges.iter().map(|s| s.len).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(len: usize, access: AccessFlags) -> Arc<MrEntry> {
        Arc::new(MrEntry::new(
            7,
            1,
            access,
            0x1000,
            crate::memory::VecMemory::new(len),
        ))
    }

    #[test]
    fn check_bounds_pd_access() {
        let m = entry(100, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
        assert_eq!(m.check(1, 0x1000, 100, AccessFlags::REMOTE_WRITE), Ok(0));
        assert_eq!(m.check(1, 0x1010, 10, AccessFlags::empty()), Ok(0x10));
        assert_eq!(
            m.check(1, 0x1000, 101, AccessFlags::empty()),
            Err(MrCheckError::OutOfBounds)
        );
        assert_eq!(
            m.check(1, 0xfff, 1, AccessFlags::empty()),
            Err(MrCheckError::OutOfBounds)
        );
        assert_eq!(
            m.check(1, u64::MAX, 2, AccessFlags::empty()),
            Err(MrCheckError::OutOfBounds)
        );
        assert_eq!(
            m.check(2, 0x1000, 1, AccessFlags::empty()),
            Err(MrCheckError::WrongPd)
        );
        assert_eq!(
            m.check(1, 0x1000, 1, AccessFlags::REMOTE_READ),
            Err(MrCheckError::NoAccess)
        );
    }

    #[test]
    fn lookup_by_key() {
        let m = entry(100, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ);
        let mrs = MrTable::from_iter([(7, m.clone())]);
        let (found, off) = lookup(&mrs, 7, 1, 0x1008, 8, AccessFlags::REMOTE_READ).unwrap();
        assert!(Arc::ptr_eq(found, &m));
        assert_eq!(off, 8);
        assert_eq!(
            lookup(&mrs, 8, 1, 0x1000, 1, AccessFlags::empty()).map(|(_, o)| o),
            Err(MrCheckError::UnknownKey)
        );
        assert_eq!(
            lookup(&mrs, 7, 1, 0x1000, 1, AccessFlags::REMOTE_WRITE).map(|(_, o)| o),
            Err(MrCheckError::NoAccess)
        );
    }

    #[test]
    fn scatter_gather_across_elements() {
        let a = entry(8, AccessFlags::LOCAL_WRITE);
        let b = entry(8, AccessFlags::LOCAL_WRITE);
        let sges = vec![
            LocalSge::new(a.clone(), 4, 4),
            LocalSge::new(b.clone(), 0, 6),
        ];
        scatter(&sges, 2, b"abcdef").unwrap();
        let mut out = Vec::new();
        gather(&sges, 0, 10, &mut out).unwrap();
        assert_eq!(&out[2..8], b"abcdef");
        assert!(scatter(&sges, 8, b"xyz").is_err());
        assert!(a.is_busy(5, 1));
        assert!(!a.is_busy(0, 4));
        drop(sges);
        assert!(!a.is_busy(5, 1));
    }
}

//! Memory windows (IBTA Vol 1, 10.6.7): remote access to part of a
//! region, granted and taken back by the consumer without registering
//! memory again.
//!
//! A window is allocated in a PD with an R_Key whose upper 24 bits name
//! it for its life; a bind (a work request in the send queue, executed in
//! order) gives it a range of a region that allows binding, remote access
//! rights, and an R_Key that differs only in its low 8 bits. Type 1
//! windows are bound by `ibv_bind_mw` and unbound by a zero-length bind;
//! type 2 windows are bound through one QP, are reached only through that
//! QP, and are unbound by a local invalidate or a peer's SEND with
//! invalidate. A remote access by a window's R_Key is checked against the
//! window (PD, rights, bounds, QP) and then reaches the region's memory.
//! Windows are reached remotely only: their keys are no L_Keys.

use crate::error::{Error, Result};
use crate::mr::{MrCheckError, MrEntry, MrTable};
use crate::types::{AccessFlags, WcStatus};
use rustc_hash::FxHashMap as HashMap;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Windows by the upper 24 bits of their R_Key.
pub type MwTable = HashMap<u32, Mw>;

/// The index a key names a window by.
pub fn index_of(key: u32) -> u32 {
    key >> 8
}

/// The kind of a window (`ibv_mw_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MwType {
    /// Bound by `ibv_bind_mw`, reached through any QP of its PD.
    Type1,
    /// Bound by a BIND_MW work request, reached through that QP only.
    Type2,
}

/// What a window is bound to.
#[derive(Debug, Clone)]
pub struct Binding {
    /// The region's key (a region with windows bound can be neither
    /// deregistered nor registered again).
    pub lkey: u32,
    /// First address of the window (in the region's address space).
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Remote rights.
    pub access: AccessFlags,
    /// The QP a type 2 window was bound through.
    pub qpn: Option<u32>,
}

/// A memory window.
#[derive(Debug, Clone)]
pub struct Mw {
    /// Protection domain.
    pub pd: u32,
    /// Kind.
    pub kind: MwType,
    /// Current R_Key.
    pub rkey: u32,
    /// The binding, while bound.
    pub bound: Option<Binding>,
}

/// A bind work request (type 1 through `ibv_bind_mw`, type 2 through
/// `IBV_WR_BIND_MW`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindMw {
    /// The window's current R_Key.
    pub mw_rkey: u32,
    /// The R_Key it takes (same upper 24 bits).
    pub new_rkey: u32,
    /// The region's L_Key.
    pub lkey: u32,
    /// First address of the window.
    pub addr: u64,
    /// Length in bytes (0 unbinds a type 1 window).
    pub len: u64,
    /// Remote rights ([`AccessFlags`] bits).
    pub access: u32,
}

/// Rights a window may grant.
const WINDOW_RIGHTS: AccessFlags = AccessFlags::REMOTE_READ
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC);

/// Bind a window for QP `qpn` of PD `pd`: the error status of the bind's
/// completion if refused (nothing changes then).
pub fn bind(
    mws: &mut MwTable,
    mrs: &MrTable,
    qpn: u32,
    pd: u32,
    b: &BindMw,
) -> std::result::Result<(), WcStatus> {
    let refuse = |why: &str| {
        tracing::debug!(qpn, mw = b.mw_rkey, why, "memory window bind refused");
        WcStatus::MwBindErr
    };
    let mw = mws
        .get(&index_of(b.mw_rkey))
        .filter(|m| m.rkey == b.mw_rkey)
        .ok_or_else(|| refuse("no such window"))?;
    if index_of(b.new_rkey) != index_of(b.mw_rkey) {
        return Err(refuse("the new key names another window"));
    }
    let access = AccessFlags::from_bits(b.access)
        .filter(|a| WINDOW_RIGHTS.contains(*a))
        .ok_or_else(|| refuse("rights a window cannot grant"))?;
    // The QP, the window and the region share one PD.
    if mw.pd != pd {
        return Err(refuse("a window of another PD"));
    }
    if mw.kind == MwType::Type2 && mw.bound.is_some() {
        return Err(refuse("a type 2 window still bound"));
    }
    if b.len == 0 && b.lkey == 0 {
        // A zero-length bind naming no region: it takes a type 1 window
        // back; a type 2 window is bound to nothing (no access at all)
        // until invalidated.
        let kind = mw.kind;
        let mw = mws
            .get_mut(&index_of(b.mw_rkey))
            .ok_or(WcStatus::MwBindErr)?;
        mw.bound = (kind == MwType::Type2).then_some(Binding {
            lkey: 0,
            addr: b.addr,
            len: 0,
            access,
            qpn: Some(qpn),
        });
        mw.rkey = b.new_rkey;
        return Ok(());
    }
    let mr = mrs
        .get(&b.lkey)
        .filter(|m| m.lkey == b.lkey)
        .ok_or_else(|| refuse("no such region"))?;
    if mr.pd != mw.pd {
        return Err(refuse("the region is of another PD"));
    }
    if !mr.access.contains(AccessFlags::MW_BIND) {
        return Err(refuse("the region does not allow binding"));
    }
    if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
        && !mr.access.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(refuse(
            "remote write or atomic rights need a locally writable region",
        ));
    }
    let len = usize::try_from(b.len).map_err(|_| refuse("window too long"))?;
    if mr.check(mr.pd, b.addr, len, AccessFlags::empty()).is_err() {
        return Err(refuse("the window is not inside the region"));
    }
    let binding = Binding {
        lkey: mr.lkey,
        addr: b.addr,
        len: b.len,
        access,
        qpn: (mw.kind == MwType::Type2).then_some(qpn),
    };
    let mw = mws
        .get_mut(&index_of(b.mw_rkey))
        .ok_or(WcStatus::MwBindErr)?;
    mw.bound = Some(binding);
    mw.rkey = b.new_rkey;
    Ok(())
}

/// Take back the type 2 window `rkey` names, for QP `qpn` of PD `pd`.
/// `remote`: a peer's SEND with invalidate, which must find the window
/// bound through that QP; a local invalidation of a window already taken
/// back (a peer's invalidation came first) succeeds. False if `rkey`
/// names no such window.
pub fn invalidate(mws: &mut MwTable, qpn: u32, pd: u32, rkey: u32, remote: bool) -> bool {
    let Some(mw) = mws.get_mut(&index_of(rkey)) else {
        return false;
    };
    if mw.rkey != rkey || mw.kind != MwType::Type2 || mw.pd != pd {
        return false;
    }
    let ok = match &mw.bound {
        Some(b) => !remote || b.qpn == Some(qpn),
        None => !remote,
    };
    if ok {
        mw.bound = None;
    }
    ok
}

/// Take back the type 2 windows bound through QP `qpn` (it is destroyed).
pub fn forget_qp(mws: &mut MwTable, qpn: u32) {
    for mw in mws.values_mut() {
        if mw.bound.as_ref().is_some_and(|b| b.qpn == Some(qpn)) {
            mw.bound = None;
        }
    }
}

/// Whether `rkey` names a window (bound or not).
pub fn is_window_key(mws: &MwTable, rkey: u32) -> bool {
    mws.get(&index_of(rkey)).is_some_and(|m| m.rkey == rkey)
}

/// A remote access by `rkey` through QP `qpn` of PD `pd` to `[va, va+len)`
/// with rights `need`, if `rkey` is a window's: the region (from `mrs`)
/// and the offset of `va` in it, or why not.
pub fn lookup<'m>(
    mws: &MwTable,
    mrs: &'m MrTable,
    rkey: u32,
    (qpn, pd): (u32, u32),
    va: u64,
    len: usize,
    need: AccessFlags,
) -> Option<std::result::Result<(&'m Arc<MrEntry>, usize), MrCheckError>> {
    let mw = mws.get(&index_of(rkey)).filter(|m| m.rkey == rkey)?;
    let Some(b) = &mw.bound else {
        return Some(Err(MrCheckError::UnknownKey));
    };
    if mw.pd != pd || b.qpn.is_some_and(|q| q != qpn) {
        return Some(Err(MrCheckError::WrongPd));
    }
    if !b.access.contains(need) {
        return Some(Err(MrCheckError::NoAccess));
    }
    let inside = va
        .checked_sub(b.addr)
        .and_then(|off| off.checked_add(len as u64))
        .is_some_and(|end| end <= b.len);
    if !inside {
        return Some(Err(MrCheckError::OutOfBounds));
    }
    let Some(mr) = mrs.get(&b.lkey) else {
        return Some(Err(MrCheckError::UnknownKey));
    };
    Some(
        mr.check(mr.pd, va, len, AccessFlags::empty())
            .map(|off| (mr, off)),
    )
}

impl super::Engine {
    /// Allocate a window of `kind` in `pd`; answers its R_Key.
    pub(crate) fn alloc_mw(&mut self, pd: u32, kind: MwType) -> Result<u32> {
        use rand::Rng;
        if !self.pds.contains(&pd) {
            return Err(Error::NotFound(format!("pd {pd}")));
        }
        if self.mws.len() >= self.attr.max_mw as usize {
            return Err(Error::Exhausted("memory windows".into()));
        }
        // An index no key of a region shares, so that every key the
        // window may take is free.
        let index = loop {
            let i: u32 = self.rng.gen::<u32>() >> 8;
            let taken = i == 0
                || self.mws.contains_key(&i)
                || crate::mr::is_kernel_key(i << 8)
                || (0..=0xffu32).any(|low| self.mrs.contains_key(&((i << 8) | low)));
            if !taken {
                break i;
            }
        };
        let rkey = (index << 8) | u32::from(self.rng.gen::<u8>());
        self.mws.insert(
            index,
            Mw {
                pd,
                kind,
                rkey,
                bound: None,
            },
        );
        Ok(rkey)
    }

    /// Free a window (named by any key it took): a bound one is taken
    /// back at once.
    pub(crate) fn dealloc_mw(&mut self, rkey: u32) -> Result<()> {
        match self.mws.remove(&index_of(rkey)) {
            Some(_) => Ok(()),
            None => Err(Error::NotFound(format!("memory window {rkey:#x}"))),
        }
    }

    /// Whether a window is bound to the region of `key`.
    pub(crate) fn mr_has_windows(&self, key: u32) -> bool {
        self.mws
            .values()
            .any(|m| m.bound.as_ref().is_some_and(|b| b.lkey == key))
    }
}

#[cfg(test)]
mod tests;

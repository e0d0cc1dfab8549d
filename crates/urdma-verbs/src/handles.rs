//! The registry of live objects handed to C.
//!
//! Every object this layer gives out (device, context, PD, MR, CQ, QP,
//! SRQ, AH, completion channel, device list) is registered by address and
//! kind while it lives. Entry points look a pointer up before using it,
//! so NULL, a pointer of the wrong kind, or one already destroyed is
//! refused with an error instead of being dereferenced.

use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};

/// The kinds of object handed to C.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `ibv_device`
    Device,
    /// The array `ibv_get_device_list` returns.
    DeviceList,
    /// `ibv_context`
    Context,
    /// `ibv_pd`
    Pd,
    /// `ibv_mr`
    Mr,
    /// `ibv_cq` / `ibv_cq_ex`
    Cq,
    /// `ibv_qp` / `ibv_qp_ex`
    Qp,
    /// `ibv_srq`
    Srq,
    /// `ibv_ah`
    Ah,
    /// `ibv_comp_channel`
    Channel,
    /// `ibv_mw`
    Mw,
}

static LIVE: LazyLock<RwLock<HashMap<usize, Kind>>> = LazyLock::new(Default::default);

/// Record a live object.
pub fn register<T>(p: *const T, kind: Kind) {
    LIVE.write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(p as usize, kind);
}

/// Forget an object about to be freed. Returns false if it was not live
/// as `kind` (then nothing changes).
pub fn unregister<T>(p: *const T, kind: Kind) -> bool {
    let mut m = LIVE.write().unwrap_or_else(|e| e.into_inner());
    if m.get(&(p as usize)) == Some(&kind) {
        m.remove(&(p as usize));
        true
    } else {
        false
    }
}

/// True if `p` is a live object of `kind`.
pub fn is_live<T>(p: *const T, kind: Kind) -> bool {
    !p.is_null()
        && LIVE
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(p as usize))
            == Some(&kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_told_apart() {
        let x = 5u64;
        let p = &x as *const u64;
        assert!(!is_live(p, Kind::Pd));
        register(p, Kind::Pd);
        assert!(is_live(p, Kind::Pd));
        assert!(!is_live(p, Kind::Qp));
        assert!(!unregister(p, Kind::Qp));
        assert!(unregister(p, Kind::Pd));
        assert!(!is_live(p, Kind::Pd));
        assert!(!is_live(std::ptr::null::<u64>(), Kind::Pd));
    }
}

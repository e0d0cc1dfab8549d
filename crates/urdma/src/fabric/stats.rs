//! Publishing counters so that `urdma stat` in another process can read
//! them: each open device writes a small JSON file, refreshed at most once
//! a second while it is busy, and removes it when it closes.

use crate::engine::{Counters, Engine};
use crate::types::QpState;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How often a busy device rewrites its file, in ns.
pub const PUBLISH_INTERVAL_NS: u64 = 1_000_000_000;

/// Counters of one QP.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpStats {
    /// QP number.
    pub qpn: u32,
    /// Current state.
    pub state: QpState,
    /// Counters.
    pub counters: Counters,
}

/// Counters of one device of one process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceStats {
    /// Process that opened the device.
    pub pid: u32,
    /// Device name.
    pub device: String,
    /// Device address and UDP port.
    pub addr: String,
    /// Device counters.
    pub counters: Counters,
    /// Per-QP counters.
    pub qps: Vec<QpStats>,
}

/// Folder of the published files: `URDMA_STATS_DIR`, else
/// `$XDG_RUNTIME_DIR/urdma`, else `/tmp/urdma-UID`.
pub fn stats_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("URDMA_STATS_DIR") {
        return d.into();
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(d).join("urdma");
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(format!("/tmp/urdma-{uid}"))
}

/// Snapshot an engine's counters.
pub fn snapshot(name: &str, eng: &Engine) -> DeviceStats {
    DeviceStats {
        pid: std::process::id(),
        device: name.to_string(),
        addr: eng.local().to_string(),
        counters: eng.counters(),
        qps: eng
            .qp_numbers()
            .into_iter()
            .filter_map(|qpn| {
                Some(QpStats {
                    qpn,
                    state: eng.query_qp(qpn).ok()?.qp_state,
                    counters: eng.qp_counters(qpn)?,
                })
            })
            .collect(),
    }
}

/// The file a device of this process publishes to.
pub fn stats_file(name: &str) -> PathBuf {
    stats_dir().join(format!("{}-{name}.json", std::process::id()))
}

/// Write a snapshot (atomically, through a temporary file).
pub fn publish(s: &DeviceStats) -> std::io::Result<()> {
    let dir = stats_dir();
    std::fs::create_dir_all(&dir)?;
    let path = stats_file(&s.device);
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(s).map_err(std::io::Error::other)?)?;
    std::fs::rename(tmp, path)
}

/// Remove this process's file for `name`.
pub fn unpublish(name: &str) {
    let _ = std::fs::remove_file(stats_file(name));
}

/// Read every published snapshot of live processes (stale files of dead
/// processes are skipped).
pub fn read_all() -> Vec<DeviceStats> {
    let Ok(rd) = std::fs::read_dir(stats_dir()) else {
        return Vec::new();
    };
    let mut v: Vec<DeviceStats> = rd
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice::<DeviceStats>(&b).ok())
        .filter(|s| std::path::Path::new(&format!("/proc/{}", s.pid)).exists())
        .collect();
    v.sort_by(|a, b| (a.pid, &a.device).cmp(&(b.pid, &b.device)));
    v
}

//! Publishing counters so that `urdma stat` in another process can read
//! them: each open device writes a small JSON file, refreshed at most once
//! a second while it is busy. When the device closes, its file keeps the
//! final counters, marked with the time it closed, as `rdma statistic`
//! keeps a kernel device's counters; only the newest such record of each
//! device name and address is kept. A process that dies without closing
//! leaves its last published counters, which read back as ended too.

use crate::engine::{Counters, Engine};
use crate::types::QpState;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

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
    /// Process that holds the QP, on the shared NIC.
    #[serde(default)]
    pub pid: Option<u32>,
}

/// What one process holds on a device of the shared NIC.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStats {
    /// Process id.
    pub pid: u32,
    /// Its command name.
    pub command: String,
    /// Protection domains.
    pub pds: usize,
    /// Memory regions.
    pub mrs: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Shared receive queues.
    pub srqs: usize,
    /// Its QPs.
    pub qps: Vec<u32>,
    /// The CM service IDs it listens on, in order.
    #[serde(default)]
    pub cm_listeners: Vec<u64>,
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
    /// Processes using the device through the shared NIC (empty for a
    /// NIC inside a program).
    #[serde(default)]
    pub processes: Vec<ProcessStats>,
    /// When the device was closed (seconds since the Unix epoch): these
    /// are its final counters. None while it is open.
    #[serde(default)]
    pub closed_at: Option<u64>,
    /// The network namespace the device is in (the inode of
    /// `/proc/self/ns/net`): one address may be a device in several.
    #[serde(default)]
    pub netns: Option<u64>,
}

/// A published snapshot as `urdma stat` sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Published {
    /// The snapshot.
    #[serde(flatten)]
    pub stats: DeviceStats,
    /// The device is open in a running process: the counters are live
    /// (refreshed at most once a second). False: the process closed the
    /// device (`closed_at` is set) or ended without closing it, and these
    /// are the last counters it published.
    pub live: bool,
}

/// Folder this process publishes its files in (see [`crate::rundir`]).
pub fn stats_dir() -> PathBuf {
    crate::rundir::own_dir()
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
                    pid: None,
                })
            })
            .collect(),
        processes: Vec::new(),
        closed_at: None,
        netns: own_netns(),
    }
}

/// This process's network namespace: the inode of `/proc/self/ns/net`.
pub fn own_netns() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    static NETNS: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *NETNS.get_or_init(|| std::fs::metadata("/proc/self/ns/net").ok().map(|m| m.ino()))
}

impl DeviceStats {
    /// Add who holds what, and mark each QP with its process.
    pub fn with_processes(mut self, processes: Vec<ProcessStats>) -> Self {
        for q in &mut self.qps {
            q.pid = processes
                .iter()
                .find(|p| p.qps.contains(&q.qpn))
                .map(|p| p.pid);
        }
        self.processes = processes;
        self
    }
}

/// The name of the file the device of `s` publishes to. One agent may
/// hold several devices of one name (each program names its own devices,
/// so two programs' `urdma0` may be two addresses): the address is part
/// of the name, its `:` written `_`, its `%` written `-` and the brackets
/// of an IPv6 address left out, so that no two addresses share a name.
fn stats_name(s: &DeviceStats) -> String {
    let addr: String = s
        .addr
        .chars()
        .filter_map(|c| match c {
            '[' | ']' => None,
            ':' => Some('_'),
            '%' => Some('-'),
            c if c.is_ascii_alphanumeric() || c == '.' => Some(c),
            _ => Some('_'),
        })
        .collect();
    format!("{}-{}-{addr}.json", s.pid, s.device)
}

/// The file in `dir` the device of `s` publishes to.
fn stats_file(dir: &Path, s: &DeviceStats) -> PathBuf {
    dir.join(stats_name(s))
}

/// Write a snapshot (atomically, through a temporary file).
pub fn publish(s: &DeviceStats) -> std::io::Result<()> {
    let r = publish_in(&stats_dir(), s);
    if let Err(e) = &r {
        // A folder another user made or can write: said once, loudly.
        static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if e.kind() == std::io::ErrorKind::PermissionDenied
            && !SAID.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(error = %e, "counters are not published");
        }
    }
    r
}

fn publish_in(dir: &Path, s: &DeviceStats) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(s).map_err(std::io::Error::other)?;
    crate::rundir::write_atomically(dir, &stats_name(s), &bytes)
}

/// Mark this process's file for the device `s` as its final counters,
/// and remove older final records of the same device name and address.
pub fn publish_final(s: DeviceStats) {
    publish_final_in(&stats_dir(), s)
}

fn publish_final_in(dir: &Path, mut s: DeviceStats) {
    s.closed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs());
    let mine = stats_file(dir, &s);
    for (path, o, _) in read_files(dir, crate::rundir::euid()) {
        if path != mine
            && o.device == s.device
            && o.addr == s.addr
            && o.netns == s.netns
            && !process_alive(o.pid)
        {
            let _ = std::fs::remove_file(path);
        }
    }
    if let Err(e) = publish_in(dir, &s) {
        tracing::debug!(error = %e, "cannot publish final counters");
    }
}

fn process_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Every readable snapshot file with its path and when it was written,
/// in `dir` if it passes [`crate::rundir::check_dir`] for `owner`.
fn read_files(dir: &Path, owner: u32) -> Vec<(PathBuf, DeviceStats, std::time::SystemTime)> {
    if let Err(e) = crate::rundir::check_dir(dir, owner) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(error = %e, "counters not read");
        }
        return Vec::new();
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| {
            let s = serde_json::from_slice::<DeviceStats>(&std::fs::read(&p).ok()?).ok()?;
            let written = std::fs::metadata(&p).and_then(|m| m.modified()).ok()?;
            Some((p, s, written))
        })
        .collect()
}

/// Every published snapshot: devices open in running processes (live),
/// then the last counters of devices whose process closed them or ended,
/// newest first; of ended ones, only the newest per device name and
/// address.
/// This process's folder is read, and the NIC service's (root's) too.
pub fn read_all() -> Vec<Published> {
    let own = stats_dir();
    let mut dirs = vec![(own.clone(), crate::rundir::euid())];
    let service = PathBuf::from(crate::rundir::SERVICE_DIR);
    if own != service {
        dirs.push((service, 0));
    }
    read_all_of(&dirs)
}

#[cfg(test)]
fn read_all_in(dir: &Path) -> Vec<Published> {
    read_all_of(&[(dir.to_path_buf(), crate::rundir::euid())])
}

fn read_all_of(dirs: &[(PathBuf, u32)]) -> Vec<Published> {
    // Newest first by when each file was last written: a closed record
    // at its close, a dead process's at its last publish.
    let mut v: Vec<(Published, std::time::SystemTime)> = dirs
        .iter()
        .flat_map(|(dir, owner)| read_files(dir, *owner))
        .map(|(_, stats, written)| {
            let live = stats.closed_at.is_none() && process_alive(stats.pid);
            (Published { live, stats }, written)
        })
        .collect();
    v.sort_by(|(a, at), (b, bt)| {
        (!a.live, std::cmp::Reverse(at), a.stats.pid, &a.stats.device).cmp(&(
            !b.live,
            std::cmp::Reverse(bt),
            b.stats.pid,
            &b.stats.device,
        ))
    });
    let mut v: Vec<Published> = v.into_iter().map(|(p, _)| p).collect();
    let mut seen = std::collections::HashSet::new();
    v.retain(|p| {
        p.live || seen.insert((p.stats.device.clone(), p.stats.addr.clone(), p.stats.netns))
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(pid: u32, device: &str, closed_at: Option<u64>) -> DeviceStats {
        DeviceStats {
            pid,
            device: device.into(),
            addr: "127.0.0.1:4791".into(),
            counters: Counters::default(),
            qps: Vec::new(),
            processes: Vec::new(),
            closed_at,
            netns: own_netns(),
        }
    }

    #[test]
    fn processes_mark_their_qps() {
        let mut s = stats(1, "urdma0", None);
        for qpn in [17, 18] {
            s.qps.push(QpStats {
                qpn,
                state: QpState::Rts,
                counters: Counters::default(),
                pid: None,
            });
        }
        let p = ProcessStats {
            pid: 42,
            command: "ib_write_bw".into(),
            qps: vec![18],
            ..Default::default()
        };
        let s = s.with_processes(vec![p]);
        assert_eq!(s.qps[0].pid, None);
        assert_eq!(s.qps[1].pid, Some(42));
        let back: DeviceStats = serde_json::from_slice(&serde_json::to_vec(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn ended_devices_keep_their_newest_record_only() {
        let dir = std::env::temp_dir().join(format!("urdma-stats-test-{}", std::process::id()));
        crate::rundir::ensure_dir(&dir).unwrap();
        let me = std::process::id();
        // A dead process's records (pid beyond pid_max), closed or not.
        let dead = 4_194_304 + 10;
        for (age, pid, dev, closed) in [
            (30, dead, "urdma0", Some(100)),
            (10, dead + 1, "urdma0", Some(200)),
            (20, dead + 2, "urdma1", None),
        ] {
            write_aged(&dir, age, &stats(pid, dev, closed));
        }
        publish_in(&dir, &stats(me, "urdma0", None)).unwrap();
        let all = read_all_in(&dir);
        let seen: Vec<(u32, bool)> = all.iter().map(|p| (p.stats.pid, p.live)).collect();
        assert_eq!(seen, [(me, true), (dead + 1, false), (dead + 2, false)]);
        // Closing keeps this process's final record and drops the older
        // dead ones of the same device.
        publish_final_in(&dir, stats(me, "urdma0", None));
        let all = read_all_in(&dir);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].stats.pid, me);
        assert!(!all[0].live && all[0].stats.closed_at.is_some());
        assert_eq!(all[1].stats.pid, dead + 2);
        assert!(!stats_file(&dir, &stats(dead, "urdma0", Some(1))).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Write `s` to its file in `dir`, last modified `age` seconds ago.
    fn write_aged(dir: &Path, age: u64, s: &DeviceStats) {
        let path = stats_file(dir, s);
        std::fs::write(&path, serde_json::to_vec(s).unwrap()).unwrap();
        let at = std::time::SystemTime::now() - std::time::Duration::from_secs(age);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(at))
            .unwrap();
    }

    #[test]
    fn devices_of_one_name_keep_a_record_per_address() {
        let dir = std::env::temp_dir().join(format!("urdma-stats-names-{}", std::process::id()));
        crate::rundir::ensure_dir(&dir).unwrap();
        let me = std::process::id();
        let mut scoped = stats(me, "urdma0", None);
        scoped.addr = "[fe80::1%2]:4791".into();
        let mut unscoped = stats(me, "urdma0", None);
        unscoped.addr = "[fe80::1:2]:4791".into();
        publish_final_in(&dir, stats(me, "urdma0", None));
        publish_final_in(&dir, scoped);
        publish_final_in(&dir, unscoped);
        let mut addrs: Vec<String> = read_all_in(&dir)
            .into_iter()
            .map(|p| p.stats.addr)
            .collect();
        addrs.sort();
        assert_eq!(
            addrs,
            ["127.0.0.1:4791", "[fe80::1%2]:4791", "[fe80::1:2]:4791"]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_newer_crash_record_wins_over_an_older_close() {
        let dir = std::env::temp_dir().join(format!("urdma-stats-crash-{}", std::process::id()));
        crate::rundir::ensure_dir(&dir).unwrap();
        let dead = 4_194_304 + 20;
        write_aged(&dir, 60, &stats(dead, "urdma0", Some(1)));
        write_aged(&dir, 5, &stats(dead + 1, "urdma0", None));
        let all = read_all_in(&dir);
        let seen: Vec<(u32, bool)> = all.iter().map(|p| (p.stats.pid, p.live)).collect();
        assert_eq!(seen, [(dead + 1, false)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

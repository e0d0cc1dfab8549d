//! The check a driver's memory file passes before the agent uses it.
//!
//! A driver hands the agent a descriptor of its own `/proc/self/mem` at
//! Hello; every RDMA access to the driver's regions then goes through it,
//! with the agent's privileges. A descriptor of any other file would let a
//! driver read what the agent may read (another process's `stat`, say) or
//! write where the agent may write (`oom_score_adj`, a root-owned file).
//! So the descriptor is taken only if it is, provably, the memory file of
//! the very process at the other end of the connection:
//! - it is on procfs, a regular file of mode 0600 (as every memory file);
//! - it is the same file (device and inode) as `/proc/PID/mem`, where PID
//!   is the connection's peer as the kernel reports it (`SO_PEERCRED`);
//!   procfs keeps one inode per open entry, so no other file matches;
//! - the driver's sentinel (random bytes it names at Hello) reads back
//!   through it from the address it named.

use crate::procmem::{Sentinel, SENTINEL_LEN};
use std::fs::File;
use std::io::{Error, ErrorKind};
use std::os::unix::fs::{FileExt, MetadataExt};

/// Mode bits of every process's memory file.
const MEM_MODE: u32 = 0o600;

/// Take `file` as the memory of process `pid` only if it is that
/// process's memory file and holds the driver's `sentinel`; otherwise a
/// clear error and nothing else happens.
pub fn verify(file: &File, pid: u32, sentinel: Option<&Sentinel>) -> std::io::Result<()> {
    let refuse = |why: &str| {
        Err(Error::new(
            ErrorKind::PermissionDenied,
            format!("the memory descriptor is refused: {why}"),
        ))
    };
    if !super::channel::is_proc_file(file) {
        return refuse("not on procfs");
    }
    let got = file.metadata()?;
    if !got.file_type().is_file() || got.mode() & 0o7777 != MEM_MODE {
        return refuse("not a process's memory file");
    }
    let want = match std::fs::metadata(format!("/proc/{pid}/mem")) {
        Ok(m) => m,
        Err(_) => return refuse("the connecting process has no memory file here"),
    };
    if (got.dev(), got.ino()) != (want.dev(), want.ino()) {
        return refuse("not the connecting process's own /proc/self/mem");
    }
    let Some(s) = sentinel else {
        return refuse("the driver named no sentinel");
    };
    let mut back = [0u8; SENTINEL_LEN];
    match file.read_exact_at(&mut back, s.addr) {
        Ok(()) if back == s.token => Ok(()),
        _ => refuse("the sentinel does not read back through it"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &str, write: bool) -> File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .open(path)
            .unwrap()
    }

    fn me() -> u32 {
        std::process::id()
    }

    #[test]
    fn own_memory_file_with_its_sentinel_passes() {
        let s = Sentinel::of_this_process().unwrap();
        verify(&open("/proc/self/mem", true), me(), Some(&s)).unwrap();
    }

    #[test]
    fn other_procfs_files_are_refused() {
        let s = Sentinel::of_this_process().unwrap();
        for path in [
            "/proc/self/stat",
            "/proc/self/oom_score_adj",
            "/proc/1/stat",
        ] {
            let e = verify(&open(path, false), me(), Some(&s)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{path}");
        }
        let e = verify(&open("/dev/null", false), me(), Some(&s)).unwrap_err();
        assert!(e.to_string().contains("procfs"), "{e}");
    }

    #[test]
    fn another_process_memory_file_is_refused() {
        // A child's memory file named as if it were this process's own.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let theirs = std::fs::OpenOptions::new()
            .read(true)
            .open(format!("/proc/{}/mem", child.id()));
        let s = Sentinel::of_this_process().unwrap();
        if let Ok(f) = theirs {
            let e = verify(&f, me(), Some(&s)).unwrap_err();
            assert!(e.to_string().contains("own"), "{e}");
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_sentinel_that_does_not_read_back_is_refused() {
        let mut s = Sentinel::of_this_process().unwrap();
        s.token[0] ^= 0xff;
        let e = verify(&open("/proc/self/mem", true), me(), Some(&s)).unwrap_err();
        assert!(e.to_string().contains("sentinel"), "{e}");
        let e = verify(&open("/proc/self/mem", true), me(), None).unwrap_err();
        assert!(e.to_string().contains("sentinel"), "{e}");
    }
}

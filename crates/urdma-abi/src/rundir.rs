//! Folders for runtime files (published counters), made and checked so
//! that no other user can redirect what this process writes.
//!
//! A NIC agent may run as root beside untrusted users. A folder in a
//! place everyone can write (`/tmp`) could be made first by another user,
//! with a link inside it that turns the agent's next write into a write
//! over any file. So a runtime folder is used only if it is a real
//! directory (not a link), owned by this process's effective user and
//! writable by no one else; files in it are created exclusively and never
//! through a link.
//!
//! Where: `URDMA_STATS_DIR` if set; else `/run/urdma` for root (a folder
//! only root can make, readable by all so that `urdma stat` shows the
//! service's devices to every user); else `$XDG_RUNTIME_DIR/urdma`; else
//! `/tmp/urdma-UID`.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{Error, ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The folder of the NIC service (an agent run as root).
pub const SERVICE_DIR: &str = "/run/urdma";

/// This process's effective user.
pub fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// The folder this process publishes its runtime files in.
pub fn own_dir() -> PathBuf {
    if let Some(d) = crate::config::get().stats_dir.value.clone() {
        return d;
    }
    let uid = euid();
    if uid == 0 {
        return SERVICE_DIR.into();
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(d).join("urdma");
    }
    PathBuf::from(format!("/tmp/urdma-{uid}"))
}

/// Check that `dir` is a directory (not a link) owned by `owner` and
/// writable by nobody else.
pub fn check_dir(dir: &Path, owner: u32) -> std::io::Result<()> {
    let m = std::fs::symlink_metadata(dir)?;
    let refuse = |why: String| {
        Err(Error::new(
            ErrorKind::PermissionDenied,
            format!("runtime folder {} refused: {why}", dir.display()),
        ))
    };
    if !m.file_type().is_dir() {
        return refuse("not a directory".into());
    }
    if m.uid() != owner {
        return refuse(format!("owned by user {}, not {owner}", m.uid()));
    }
    if m.mode() & 0o022 != 0 {
        return refuse(format!("writable by others (mode {:o})", m.mode() & 0o7777));
    }
    Ok(())
}

/// Make `dir` if it is missing (mode 0755 for root's shared folder, else
/// 0700), then check it as [`check_dir`] does for this process's user.
pub fn ensure_dir(dir: &Path) -> std::io::Result<()> {
    let uid = euid();
    let mode = if uid == 0 { 0o755 } else { 0o700 };
    match DirBuilder::new().mode(mode).create(dir) {
        Err(e) if e.kind() != ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    check_dir(dir, uid)
}

/// Write `bytes` as the file `name` in the checked folder `dir`,
/// atomically: into a new file created exclusively (never through a
/// link), then renamed over `name`.
pub fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    ensure_dir(dir)?;
    let tmp = dir.join(format!("{name}.tmp"));
    let create = || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
    };
    let mut f: File = match create() {
        // Left by a process that ended mid-write (its ID reused).
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            std::fs::remove_file(&tmp)?;
            create()?
        }
        r => r?,
    };
    f.write_all(bytes)?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("urdma-rundir-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_new_folder_is_private_and_takes_files() {
        let d = scratch("new");
        write_atomically(&d, "a.json", b"{}").unwrap();
        assert_eq!(std::fs::read(d.join("a.json")).unwrap(), b"{}");
        let mode = std::fs::metadata(&d).unwrap().mode() & 0o777;
        assert_eq!(mode & 0o022, 0, "{mode:o}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_folder_others_can_write_is_refused() {
        let d = scratch("open");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let e = write_atomically(&d, "a.json", b"{}").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied);
        assert!(!d.join("a.json").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_link_in_place_of_the_folder_or_the_file_is_not_followed() {
        let d = scratch("link");
        let target = scratch("target");
        std::fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, &d).unwrap();
        assert!(write_atomically(&d, "a.json", b"{}").is_err());
        assert!(!target.join("a.json").exists());
        std::fs::remove_file(&d).unwrap();
        // A link where the temporary file goes: replaced, not followed.
        std::fs::create_dir(&d).unwrap();
        let victim = target.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, d.join("a.json.tmp")).unwrap();
        write_atomically(&d, "a.json", b"{}").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(d.join("a.json")).unwrap(), b"{}");
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_dir_all(&target).unwrap();
    }

    #[test]
    fn another_owner_is_refused() {
        // The root directory belongs to root: refused for any other owner.
        let e = check_dir(Path::new("/"), 12345).unwrap_err();
        assert!(e.to_string().contains("owned by user 0"), "{e}");
    }
}

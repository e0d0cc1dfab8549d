//! The private mount namespace `urdma run` gives a program, and the
//! device view in it: a tmpfs over `/sys/class` and one over `/dev`,
//! each entry of the originals bound back in place, and the urdma
//! devices' files beside them (see docs/urdma-run.md, "The device
//! view"). Nothing here changes the host's mounts: the namespace's root
//! is made private before anything is mounted.

use super::view;
use anyhow::{bail, Context, Result};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

const NONE: Option<&str> = None;

/// Why the program runs without the view.
pub enum Refused {
    /// No namespace could be made (user namespaces disabled, a seccomp
    /// filter, no privilege): nothing changed.
    NoNamespace(String),
    /// A mount of the view failed; what was mounted is undone.
    Mount(anyhow::Error),
}

/// Enter a new mount namespace: as root (with the privilege) a mount
/// namespace alone; otherwise a user namespace too, where this user and
/// group map to themselves, so the program keeps its identity and loses
/// its capabilities in the namespace at exec.
fn unshare_mounts() -> Result<(), Refused> {
    let uid = nix::unistd::geteuid();
    let gid = nix::unistd::getegid();
    if uid.is_root() && unshare(CloneFlags::CLONE_NEWNS).is_ok() {
        return Ok(());
    }
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS)
        .map_err(|e| Refused::NoNamespace(format!("cannot create a user namespace: {e}")))?;
    // From here on the process is in the new namespace: a failure is
    // fatal (its identity would be the overflow user's).
    let write = |f: &str, v: String| {
        std::fs::write(format!("/proc/self/{f}"), v)
            .with_context(|| format!("cannot write /proc/self/{f} of the user namespace"))
    };
    let maps = write("setgroups", "deny".into())
        .and_then(|()| write("uid_map", format!("{uid} {uid} 1")))
        .and_then(|()| write("gid_map", format!("{gid} {gid} 1")));
    if let Err(e) = maps {
        eprintln!("urdma: {e:#}");
        std::process::exit(126);
    }
    Ok(())
}

/// The entries of `dir` (name and kind), read before a tmpfs covers it.
fn entries(dir: &Path) -> Result<Vec<(std::ffi::OsString, std::fs::FileType)>> {
    std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .map(|e| {
            let e = e?;
            Ok((e.file_name(), e.file_type()?))
        })
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("cannot list {}", dir.display()))
}

/// Bind mount `src` on `dst`, with the mounts under it.
fn bind(src: &Path, dst: &Path) -> Result<()> {
    mount(
        Some(src),
        dst,
        NONE,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        NONE,
    )
    .with_context(|| format!("cannot bind {} on {}", src.display(), dst.display()))
}

/// Re-create the entry `name` of the covered folder `old` (an `O_PATH`
/// descriptor of it) in `dir`: a symbolic link copied, anything else
/// bound from the original.
fn rebind(old: &File, dir: &Path, name: &std::ffi::OsStr, kind: std::fs::FileType) -> Result<()> {
    let src = Path::new(&format!("/proc/self/fd/{}", old.as_raw_fd())).join(name);
    let dst = dir.join(name);
    if kind.is_symlink() {
        let target =
            std::fs::read_link(&src).with_context(|| format!("cannot read {}", dst.display()))?;
        return std::os::unix::fs::symlink(target, &dst)
            .with_context(|| format!("cannot copy the link {}", dst.display()));
    }
    if kind.is_dir() {
        std::fs::create_dir(&dst)
    } else {
        File::create(&dst).map(drop)
    }
    .with_context(|| format!("cannot create {}", dst.display()))?;
    bind(&src, &dst)
}

/// Cover `dir` with a tmpfs that holds every entry it held (bound back
/// from the original) that `keep` accepts; on failure the tmpfs is gone
/// again.
fn overlay(dir: &Path, keep: fn(&std::fs::FileType) -> bool) -> Result<()> {
    let mut list = entries(dir)?;
    list.retain(|(_, kind)| keep(kind));
    let old = File::options()
        .read(true)
        .custom_flags(nix::libc::O_PATH | nix::libc::O_DIRECTORY)
        .open(dir)
        .with_context(|| format!("cannot open {}", dir.display()))?;
    mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID,
        Some("mode=755"),
    )
    .with_context(|| format!("cannot mount a tmpfs over {}", dir.display()))?;
    let filled = list
        .iter()
        .try_for_each(|(name, kind)| rebind(&old, dir, name, *kind));
    if filled.is_err() {
        let _ = umount2(dir, MntFlags::MNT_DETACH);
    }
    filled
}

/// Every entry.
fn all(_: &std::fs::FileType) -> bool {
    true
}

/// The kernel's entries of a device class: its devices are symbolic
/// links (to `/sys/devices`); a folder is a urdma device of the view of
/// an enclosing `urdma run`, described anew here.
fn kernel_entries(kind: &std::fs::FileType) -> bool {
    !kind.is_dir()
}

/// Make `dir` a folder of the view: a new one, or the covered original's
/// entries that `keep` accepts on a tmpfs of its own when it exists (the
/// kernel's devices stay beside urdma's). True when a tmpfs was mounted.
fn own_folder(dir: &Path, keep: fn(&std::fs::FileType) -> bool) -> Result<bool> {
    if dir.is_dir() {
        overlay(dir, keep)?;
        return Ok(true);
    }
    std::fs::create_dir(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(false)
}

/// Write a file of the view; an entry the kernel already has wins.
fn add_file(root: &Path, rel: &Path, text: &str) -> Result<()> {
    let path = root.join(rel);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    match File::options().write(true).create_new(true).open(&path) {
        Ok(mut f) => std::io::Write::write_all(&mut f, format!("{text}\n").as_bytes())
            .with_context(|| format!("cannot write {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot create {}", path.display())),
    }
}

/// Make a mounted tmpfs read-only, as sysfs is to programs.
fn read_only(dir: &Path) -> Result<()> {
    let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID;
    mount(NONE, dir, NONE, flags, NONE)
        .with_context(|| format!("cannot make {} read-only", dir.display()))
}

/// `/sys/class` with the devices' files; `mounted` gets the tmpfs once it
/// covers `/sys/class`.
fn sysfs(devices: &[view::Device], mounted: &mut Vec<&'static str>) -> Result<()> {
    let class = Path::new("/sys/class");
    overlay(class, all)?;
    mounted.push("/sys/class");
    let mut tmpfs = vec![class.to_path_buf()];
    for sub in ["infiniband", "infiniband_verbs"] {
        let d = class.join(sub);
        if own_folder(&d, kernel_entries)? {
            tmpfs.push(d);
        }
    }
    for d in devices {
        let taken = class.join("infiniband").join(&d.name).exists()
            || class.join("infiniband_verbs").join(&d.uverbs).exists();
        if taken {
            eprintln!(
                "urdma: a kernel device is named {} or {}: the view keeps it, not urdma's",
                d.name, d.uverbs
            );
            continue;
        }
        for (rel, text) in &d.files {
            add_file(class, rel, text)?;
        }
    }
    tmpfs.iter().try_for_each(|d| read_only(d))
}

/// `/dev` with `infiniband/uverbsN` for each device: a bind of
/// `/dev/null`, a placeholder for programs (UCX) that look for the node
/// before they use the device; urdma's libibverbs never opens it.
/// `mounted` gets the tmpfs once it covers `/dev`.
fn dev(devices: &[view::Device], mounted: &mut Vec<&'static str>) -> Result<()> {
    let dev = Path::new("/dev");
    overlay(dev, all)?;
    mounted.push("/dev");
    let ib = dev.join("infiniband");
    own_folder(&ib, all)?;
    for d in devices {
        let node = ib.join(&d.uverbs);
        if node.exists() {
            continue;
        }
        File::create(&node).with_context(|| format!("cannot create {}", node.display()))?;
        bind(Path::new("/dev/null"), &node)?;
    }
    Ok(())
}

/// `MAJOR:MINOR` of the placeholder node (`/dev/null`).
pub fn placeholder_numbers() -> Result<String> {
    let m = std::fs::metadata("/dev/null").context("cannot stat /dev/null")?;
    let rdev = m.rdev();
    if rdev == 0 {
        bail!("/dev/null is not a device");
    }
    Ok(format!(
        "{}:{}",
        nix::sys::stat::major(rdev),
        nix::sys::stat::minor(rdev)
    ))
}

/// Put this process (and the program it becomes) in a mount namespace of
/// its own with the device view of `devices`. On a refusal the process
/// is as before (no namespace) or in the namespace without the view
/// (what was mounted is undone).
pub fn enter(devices: &[view::Device]) -> Result<(), Refused> {
    unshare_mounts()?;
    // Nothing mounted from here on reaches the host's namespace.
    mount(NONE, "/", NONE, MsFlags::MS_REC | MsFlags::MS_PRIVATE, NONE)
        .context("cannot make / private in the new mount namespace")
        .map_err(Refused::Mount)?;
    let mut mounted = Vec::new();
    let built = sysfs(devices, &mut mounted).and_then(|()| dev(devices, &mut mounted));
    if let Err(e) = built {
        // A view with a part missing would mislead: none at all. A lazy
        // unmount takes the mounts under each tmpfs with it.
        for m in mounted.iter().rev() {
            let _ = umount2(*m, MntFlags::MNT_DETACH);
        }
        return Err(Refused::Mount(e));
    }
    Ok(())
}

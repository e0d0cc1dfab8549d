//! Where the NIC agent listens, and where drivers look for it.
//!
//! With `URDMA_NIC_SOCKET` set, the agent and its drivers meet at that
//! abstract socket name, which belongs to the network namespace. Without
//! it, an agent run by root (the service) listens on a socket file in
//! [`SERVICE_DIR`], one per network namespace; only root can create,
//! replace or remove a file there, so no other user can pose as the
//! service or take its place. An agent of any other user listens on the
//! abstract name `urdma-nic-UID`, and serves that user only. A driver
//! tries the service first, then its own user's agent, and starts the
//! latter when neither answers.

use super::channel;
use std::fmt;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The root-owned folder of the service's sockets.
pub const SERVICE_DIR: &str = "/run/urdma";

/// Where an agent listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentAddr {
    /// An abstract socket name (of the network namespace).
    Abstract(String),
    /// A socket file in [`SERVICE_DIR`].
    Path(PathBuf),
}

impl fmt::Display for AgentAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentAddr::Abstract(n) => write!(f, "@{n}"),
            AgentAddr::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

/// The abstract name `URDMA_NIC_SOCKET` asks for, if any.
fn configured() -> Option<String> {
    crate::config::get().nic_socket.value.clone()
}

/// The service's socket of this network namespace:
/// `/run/urdma/nic-INODE.sock`, INODE that of the namespace.
pub fn service() -> AgentAddr {
    let ns = std::fs::metadata("/proc/self/ns/net")
        .map(|m| m.ino().to_string())
        .unwrap_or_else(|_| "host".to_string());
    AgentAddr::Path(Path::new(SERVICE_DIR).join(format!("nic-{ns}.sock")))
}

/// Where an agent of this process's user listens: `URDMA_NIC_SOCKET` if
/// set; else the service's socket for root, `urdma-nic-UID` for any
/// other user.
pub fn own() -> AgentAddr {
    if let Some(n) = configured() {
        return AgentAddr::Abstract(n);
    }
    match nix::unistd::getuid().as_raw() {
        0 => service(),
        uid => AgentAddr::Abstract(format!("urdma-nic-{uid}")),
    }
}

/// Where a driver looks for its NIC, in order: `URDMA_NIC_SOCKET` alone
/// if set; else the service, then its own user's agent.
pub fn candidates() -> Vec<AgentAddr> {
    let own = own();
    match own {
        AgentAddr::Abstract(_) if configured().is_none() => vec![service(), own],
        _ => vec![own],
    }
}

fn unsafe_file(path: &Path, why: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        format!("{} is not used: {why}", path.display()),
    )
}

/// Check that only root can have made or replaced the file at `path`:
/// each folder from `/` down to it is a folder (not a symbolic link)
/// of root that neither its group nor others may write to.
fn check_folders(path: &Path) -> std::io::Result<()> {
    for dir in path.ancestors().skip(1) {
        if dir.as_os_str().is_empty() {
            continue;
        }
        let m = std::fs::symlink_metadata(dir)?;
        if !m.is_dir() || m.uid() != 0 || m.mode() & 0o022 != 0 {
            return Err(unsafe_file(
                path,
                &format!(
                    "{} is not a folder of root that only root may write to",
                    dir.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Check that the socket file at `path` can only be root's: see
/// `check_folders`, and the file itself is a socket of root.
pub fn check_service_file(path: &Path) -> std::io::Result<()> {
    check_folders(path)?;
    let m = std::fs::symlink_metadata(path)?;
    if !m.file_type().is_socket() || m.uid() != 0 {
        return Err(unsafe_file(path, "it is not a socket of root"));
    }
    Ok(())
}

/// Connect to the first of [`candidates`] that answers, as a driver looks
/// for its NIC (without the check of who runs it, nor starting one).
pub fn connect_first() -> std::io::Result<OwnedFd> {
    let mut last = Err(std::io::ErrorKind::NotFound.into());
    for a in candidates() {
        match connect(&a) {
            Ok(fd) => return Ok(fd),
            Err(e) => last = Err(e),
        }
    }
    last
}

/// Connect to the agent at `addr` (a socket file only once checked).
pub fn connect(addr: &AgentAddr) -> std::io::Result<OwnedFd> {
    match addr {
        AgentAddr::Abstract(n) => channel::connect(n),
        AgentAddr::Path(p) => {
            check_service_file(p)?;
            channel::connect_path(p)
        }
    }
}

/// The socket file of a listening agent, removed when dropped (while the
/// lock that makes it this agent's is still held).
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Listen at `addr`; `AddrInUse` when an agent already listens there. A
/// socket file comes with its guard.
pub fn listen(addr: &AgentAddr) -> std::io::Result<(OwnedFd, Option<SocketFile>)> {
    match addr {
        AgentAddr::Abstract(n) => Ok((channel::listen(n)?, None)),
        AgentAddr::Path(p) => {
            if let Some(dir) = p.parent() {
                match std::fs::DirBuilder::new().mode(0o755).create(dir) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
                    _ => {}
                }
            }
            check_folders(p)?;
            let (fd, file) = listen_file(p)?;
            Ok((fd, Some(file)))
        }
    }
}

/// Listen on a socket file at `path`, in a folder only root may write
/// to. The agent holds a lock on `PATH.lock` for its life: one that finds
/// it taken answers `AddrInUse`; one that takes it removes the file a
/// dead agent left and binds anew.
fn listen_file(path: &Path) -> std::io::Result<(OwnedFd, SocketFile)> {
    use nix::fcntl::{Flock, FlockArg};
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&lock_path)?;
    let lock = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err((_, nix::Error::EWOULDBLOCK)) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("an agent already listens on {}", path.display()),
            ))
        }
        Err((_, e)) => return Err(std::io::Error::from_raw_os_error(e as i32)),
    };
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let fd = channel::listen_path(path)?;
    let file = SocketFile {
        path: path.to_path_buf(),
        _lock: lock,
    };
    // Every user's drivers connect (which takes write permission).
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok((fd, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_file_is_one_agent_s_and_goes_with_it() {
        let dir = std::env::temp_dir().join(format!("urdma-addr-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nic.sock");
        let (fd, file) = listen_file(&path).unwrap();
        let err = listen_file(&path).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        let c = channel::connect_path(&path).unwrap();
        assert!(channel::peer(&c).is_ok());
        drop((c, fd, file));
        assert!(!path.exists());
        // A file a dead agent left is replaced.
        let stale = channel::listen_path(&path).unwrap();
        drop(stale);
        let (_fd, _file) = listen_file(&path).unwrap();
        assert!(channel::connect_path(&path).is_ok());
        drop((_fd, _file));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn files_others_may_write_near_are_refused() {
        // The temporary folder is writable by every user.
        let dir = std::env::temp_dir().join(format!("urdma-addr-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nic.sock");
        let _l = channel::listen_path(&path).unwrap();
        let e = check_service_file(&path).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(connect(&AgentAddr::Path(path)).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_service_socket_is_per_namespace_in_the_service_folder() {
        let AgentAddr::Path(p) = service() else {
            panic!("the service listens on a file");
        };
        assert_eq!(p.parent(), Some(Path::new(SERVICE_DIR)));
        let ns = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
        assert!(p.to_string_lossy().contains(&ns.to_string()));
    }
}

//! `urdma run [--addr IP] -- CMD ARGS`: run an unmodified verbs or
//! rdma_cm program on urdma, with urdma's libibverbs.so.1 and
//! librdmacm.so.1 in front of the system's, and the devices it will see
//! in a view of `/sys/class` and `/dev` of its own ([`ns`], [`view`]).

mod ns;
mod view;

use anyhow::{bail, Context, Result};
use clap::Args;
use std::ffi::OsString;
use std::net::IpAddr;
use std::os::unix::fs::{symlink, DirBuilderExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// The library file a verbs program loads.
const SONAME: &str = "libibverbs.so.1";
/// The file cargo builds.
const BUILT: &str = "libibverbs.so";
/// The connection manager's library: (the file programs load, the file
/// cargo builds), put beside the verbs library.
const RDMACM: (&str, &str) = ("librdmacm.so.1", "librdmacm.so");

/// Arguments of `urdma run`.
#[derive(Args)]
pub struct RunArgs {
    /// Address of the one device the program sees (sets URDMA_ADDR);
    /// without it, the usual device discovery applies.
    #[arg(long)]
    addr: Option<IpAddr>,
    /// Capture every packet of the program's devices into this pcap file
    /// (sets URDMA_PCAP; `%p` in the name becomes the process id).
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Run the program without the device view: no private mount
    /// namespace, the host's own /sys and /dev (where urdma devices have
    /// no entries).
    #[arg(long)]
    no_sysfs: bool,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, num_args = 1..)]
    command: Vec<OsString>,
}

/// Where urdma's libibverbs may be, in order: `URDMA_LIB_DIR`; beside
/// this executable (an installed layout); the `deps` folder beside it,
/// where cargo leaves the library when it builds the `urdma` command.
fn lib_dirs() -> Result<Vec<PathBuf>> {
    if let Some(d) = urdma::config::get().lib_dir.value.clone() {
        return Ok(vec![d]);
    }
    let exe = std::env::current_exe().context("cannot locate the urdma executable")?;
    let dir = exe
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    Ok(vec![dir.clone(), dir.join("deps")])
}

/// A private directory of this user under the temporary directory.
fn private_dir(lib: &Path) -> Result<PathBuf> {
    // The owner of /proc/self is this process's user.
    let uid = std::fs::metadata("/proc/self")
        .context("cannot read /proc/self")?
        .uid();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in lib.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
    }
    let dir = std::env::temp_dir().join(format!("urdma-{uid}-{h:016x}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
    }
    let m = std::fs::symlink_metadata(&dir)?;
    if !m.is_dir() || m.uid() != uid || m.mode() & 0o022 != 0 {
        bail!("{} is not a private directory of this user", dir.display());
    }
    Ok(dir)
}

/// When the library in `dir` was last built (None: there is none).
fn built_at(dir: &Path) -> Option<std::time::SystemTime> {
    [BUILT, SONAME]
        .iter()
        .filter_map(|f| {
            std::fs::metadata(dir.join(f))
                .and_then(|m| m.modified())
                .ok()
        })
        .max()
}

/// A directory holding a `libibverbs.so.1` that is urdma's library: of
/// the places it may be, the one built last (cargo leaves an older copy
/// beside the executable when the library was once built on its own).
fn soname_dir() -> Result<PathBuf> {
    let newest = lib_dirs()?
        .into_iter()
        .filter_map(|d| built_at(&d).map(|t| (t, d)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, d)| d);
    if let Some(d) = newest.as_ref().filter(|d| d.join(SONAME).exists()) {
        return Ok(d.clone());
    }
    let Some(dir) = newest else {
        bail!(
            "no {SONAME} or {BUILT} beside the urdma executable (build urdma with \
             `cargo build --release`, which builds the library too, or set URDMA_LIB_DIR)"
        );
    };
    let built = dir.join(BUILT);
    // Next to the library if the directory is writable (and holds no
    // other libraries: not cargo's `deps`), else in a private directory of
    // this user.
    if !dir.ends_with("deps") && symlink(BUILT, dir.join(SONAME)).is_ok() {
        return Ok(dir);
    }
    let built = built.canonicalize()?;
    let priv_dir = private_dir(&built)?;
    relink(&built, &priv_dir.join(SONAME))?;
    Ok(priv_dir)
}

/// Make `link` a symbolic link to `target` (unless it is one already).
fn relink(target: &Path, link: &Path) -> Result<()> {
    if std::fs::read_link(link).ok().as_deref() != Some(target) {
        let _ = std::fs::remove_file(link);
        symlink(target, link).with_context(|| format!("cannot create {}", link.display()))?;
    }
    Ok(())
}

/// Make `dir` (which holds urdma's libibverbs.so.1) hold urdma's
/// librdmacm.so.1 too: the one built beside the verbs library, else the
/// newest of the places urdma's libraries may be. Without one, rdma_cm
/// programs get the system's library (and no urdma device): said, not
/// refused, as verbs programs need none.
fn link_rdmacm(dir: &Path) -> Result<()> {
    let (soname, built) = RDMACM;
    if dir.join(soname).exists() && !dir.join(BUILT).exists() {
        return Ok(());
    }
    let beside = dir
        .join(SONAME)
        .canonicalize()
        .ok()
        .and_then(|v| v.parent().map(|p| p.join(built)));
    let newest = || {
        lib_dirs()
            .ok()?
            .into_iter()
            .map(|d| d.join(built))
            .filter_map(|f| Some((f.metadata().ok()?.modified().ok()?, f)))
            .max_by_key(|(t, _)| *t)
            .map(|(_, f)| f)
    };
    match beside.filter(|f| f.exists()).or_else(newest) {
        Some(from) => {
            let from = from.canonicalize()?;
            // Beside it, by name: the link holds wherever the directory
            // is seen from (moved, or shared read-only into a container).
            let same_dir = dir.canonicalize().ok().as_deref() == from.parent();
            let target = if same_dir { Path::new(built) } else { &from };
            relink(target, &dir.join(soname))
        }
        None => {
            eprintln!("urdma: no {built} was built: rdma_cm programs will not see urdma devices");
            Ok(())
        }
    }
}

/// Exec the command with urdma's library first on the library path; on
/// success this does not return, and the command's exit status is urdma's.
pub fn run(a: &RunArgs) -> Result<()> {
    let dir = soname_dir()?;
    link_rdmacm(&dir)?;
    let mut path = OsString::from(dir.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let mut cmd = std::process::Command::new(&a.command[0]);
    cmd.args(&a.command[1..]).env("LD_LIBRARY_PATH", path);
    if let Some(ip) = a.addr {
        cmd.env("URDMA_ADDR", ip.to_string());
    }
    if let Some(f) = &a.pcap {
        cmd.env("URDMA_PCAP", f);
    }
    // The program's library starts the NIC agent with this very program
    // when none runs.
    if urdma::config::get().agent_bin.value.is_none() {
        if let Ok(exe) = std::env::current_exe() {
            cmd.env("URDMA_AGENT_BIN", exe);
        }
    }
    if !a.no_sysfs {
        device_view(a.addr, &mut cmd);
    }
    let err = cmd.exec();
    let code = match err.kind() {
        std::io::ErrorKind::NotFound => 127,
        _ => 126,
    };
    eprintln!(
        "urdma: cannot run {}: {err}",
        a.command[0].to_string_lossy()
    );
    std::process::exit(code);
}

/// Give the program the device view (see docs/urdma-run.md, "The device
/// view"): describe the devices it will see, make sure the NIC agent runs
/// outside the namespace, then enter the namespace. Where that cannot be
/// done the program runs without the view, and says so once.
fn device_view(addr: Option<IpAddr>, cmd: &mut std::process::Command) {
    // The devices the program's library will list, in its order.
    if let Some(ip) = addr {
        if let Err(e) = urdma::config::set("addr", &ip.to_string()) {
            eprintln!("urdma: {e}");
        }
    }
    let configs = match urdma::config::discover_for_programs() {
        Ok(c) if !c.is_empty() => c,
        // The library says why it has no devices.
        _ => return,
    };
    let node = match ns::placeholder_numbers() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("urdma: the program runs without the device view: {e:#}");
            return;
        }
    };
    let devices: Vec<view::Device> = configs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let netdev = urdma_verbs::device::netdev_of(c.addr).map(|(_, n)| n);
            let loc = view::locality(netdev.as_deref());
            view::device(c, i, netdev.as_deref(), &loc, &node)
        })
        .collect();
    // A shared agent lives outside the namespace: started inside, it
    // would keep the program's mounts for its whole life and, in a user
    // namespace, see every other user as the overflow user.
    if !urdma::nic::embedded_by_default() {
        // Quietly: the program's library reports its own failure to
        // reach an agent.
        let found =
            tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::new(), || {
                urdma::nic::spawn::connect_or_start()
            });
        if let Err(e) = found {
            tracing::debug!(error = %e, "no NIC agent before the program starts");
        }
        if !nix::unistd::geteuid().is_root() {
            if let Some(t) = urdma::nic::vouch::for_user_namespace() {
                cmd.env(urdma::nic::vouch::VOUCH_ENV, t);
            }
        }
    }
    match ns::enter(&devices) {
        Ok(()) => {}
        Err(ns::Refused::NoNamespace(why)) => eprintln!(
            "urdma: the program runs without the device view (/sys/class/infiniband, \
             /dev/infiniband): {why}"
        ),
        Err(ns::Refused::Mount(e)) => eprintln!(
            "urdma: the program runs without the device view (/sys/class/infiniband, \
             /dev/infiniband): {e:#}"
        ),
    }
}

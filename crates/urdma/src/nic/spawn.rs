//! Finding the NIC agent, and starting it when none runs: the service
//! first, else this user's agent (see [`super::addr`]); the first driver
//! that finds neither starts `urdma agent`, which outlives it and exits
//! on its own once no driver has used it for a while.

use super::addr::{self, AgentAddr};
use super::channel;
use super::vouch;
use crate::error::{Error, Result};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a driver waits for an agent it started to listen.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Who holds a socket name: "process PID (COMMAND) of user UID (NAME)".
pub fn describe_holder(pid: u32, uid: u32) -> String {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| format!(" ({})", c.trim_end()))
        .unwrap_or_default();
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| format!(" ({})", u.name))
        .unwrap_or_default();
    format!("process {pid}{comm} of user {uid}{user}")
}

/// The process and user that listen at `addr`.
pub fn holder(addr: &AgentAddr) -> std::io::Result<(u32, u32)> {
    channel::peer(&addr::connect(addr)?)
}

/// True when no agent listens at `addr` (none ever did, or it died).
fn nobody_at(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
    )
}

/// An agent could not listen at `addr`, which is taken: true if an agent
/// of this user or of root holds it, false if nobody listens there any
/// more, an error naming the holder if another user's process does (no
/// program of the other users could use it).
pub fn name_held(addr: &AgentAddr) -> std::io::Result<bool> {
    let me = nix::unistd::getuid().as_raw();
    match holder(addr) {
        Ok((_, uid)) if uid == me || uid == 0 => {
            tracing::info!(%addr, "an agent already serves this namespace");
            Ok(true)
        }
        Ok((pid, uid)) => Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!(
                "the NIC agent's socket name {addr} is held by {}, not by root or \
                 this user ({me}): the programs of other users cannot use it. Stop \
                 process {pid} and start the agent again, or serve another name \
                 (URDMA_NIC_SOCKET)",
                describe_holder(pid, uid)
            ),
        )),
        Err(e) if nobody_at(&e) => Ok(false),
        Err(e) => Err(std::io::Error::new(
            e.kind(),
            format!("the socket name {addr} is taken and its holder unknown: {e}"),
        )),
    }
}

/// Connect to the agent at `addr` and check that it runs as root (the
/// only user a socket file of the service can be of) or, at an abstract
/// name, as this user, so that no other user's process can pose as the
/// NIC and receive this process's memory.
///
/// In a user namespace `urdma run` made, root reads as the overflow user:
/// the root agent [`vouch`] names passes instead.
fn connect_checked(addr: &AgentAddr) -> std::io::Result<OwnedFd> {
    let fd = match addr::connect(addr) {
        Ok(fd) => fd,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return vouch::connect_service(addr).unwrap_or(Err(e));
        }
        Err(e) => return Err(e),
    };
    let (pid, uid) = channel::peer(&fd)?;
    let me = nix::unistd::getuid().as_raw();
    let service = matches!(addr, AgentAddr::Path(_));
    if uid != 0 && (service || uid != me) && !vouch::vouched(pid, uid) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "the urdma NIC agent's socket name {addr} is held by {}, not by root \
                 or by you (user {me}), so this program cannot use it: ask root to stop \
                 process {pid} (then start the urdma-agent service, or let a program \
                 start an agent of yours), or set URDMA_NIC_SOCKET to another name \
                 for an agent of your own",
                describe_holder(pid, uid)
            ),
        ));
    }
    Ok(fd)
}

/// The `urdma` program that runs the agent: `URDMA_AGENT_BIN`, this
/// program if it is `urdma`, `urdma` beside it or one folder up (a test
/// program in cargo's `deps`), or `urdma` on the PATH.
pub fn agent_binary() -> Option<PathBuf> {
    if let Some(p) = crate::config::get().agent_bin.value.clone() {
        return Some(p);
    }
    let exe = std::env::current_exe().ok();
    if let Some(exe) = &exe {
        if exe.file_name().is_some_and(|n| n == "urdma") {
            return Some(exe.clone());
        }
        let beside = exe.parent();
        let up = beside.and_then(|d| d.parent());
        if let Some(p) = [beside, up]
            .into_iter()
            .flatten()
            .map(|d| d.join("urdma"))
            .find(|p| p.is_file())
        {
            return Some(p);
        }
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("urdma"))
        .find(|p| p.is_file())
}

/// A connection to the agent, starting it first if none listens.
pub fn connect_or_start() -> Result<OwnedFd> {
    let own = addr::own();
    for a in addr::candidates() {
        match connect_checked(&a) {
            Ok(fd) => return Ok(fd),
            Err(e) if nobody_at(&e) => {}
            // A service socket that fails its checks is not the service.
            Err(e) if a != own => tracing::warn!(addr = %a, error = %e, "agent not used"),
            Err(e) => return Err(e.into()),
        }
    }
    let bin = agent_binary().ok_or_else(|| {
        Error::Io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no urdma NIC agent runs and no `urdma` program was found to start one \
             (set URDMA_AGENT_BIN, or URDMA_NIC=embedded for a NIC inside this process)",
        ))
    })?;
    tracing::debug!(bin = %bin.display(), %own, "starting the NIC agent");
    let status = agent_command(&bin, &crate::config::get())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()?;
    if !status.success() {
        tracing::debug!(%status, "agent start reported failure");
    }
    let start = Instant::now();
    loop {
        match connect_checked(&own) {
            Ok(fd) => return Ok(fd),
            Err(e) if nobody_at(&e) => {}
            Err(e) => return Err(e.into()),
        }
        if start.elapsed() > START_TIMEOUT {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the NIC agent ({}) did not start", bin.display()),
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The command that starts an agent with this process's settings of the
/// agent (`urdma agent --detach --set KEY=VALUE ...`: the address it
/// serves at, its devices, its NIC's settings), and none of the urdma
/// settings of the environment, so that it runs as configured here
/// whatever this process's environment. (Programs ask the agent for
/// their own captures.)
fn agent_command(bin: &std::path::Path, s: &crate::config::Settings) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(["agent", "--detach"])
        .args(crate::config::settings::agent_args(s));
    for k in crate::config::KNOBS {
        cmd.env_remove(k.env);
    }
    // The `urdma` command reads its log filter before its arguments.
    if let Some(log) = &s.log.value {
        cmd.env("URDMA_LOG", log);
    }
    cmd
}

/// Run `bin agent ARGS` in a session of its own, detached from this
/// process and its terminal, with no descriptor of this process but
/// stdio, and return at once (the parent of `urdma agent --detach`).
pub fn detach(bin: &std::path::Path, args: &[String]) -> std::io::Result<()> {
    let log = crate::config::get()
        .agent_log
        .value
        .clone()
        .map(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
        })
        .transpose()?;
    let stderr = match log {
        Some(f) => Stdio::from(f),
        None => Stdio::null(),
    };
    let mut cmd = Command::new(bin);
    cmd.arg("agent")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    // SAFETY: the closure runs in the child between fork and exec and
    // calls only setsid and close_range, both async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            // Descriptors the starting program left inheritable (its
            // sockets, files) must not stay open in the agent.
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            Ok(())
        });
    }
    cmd.spawn().map(|_| ())
}

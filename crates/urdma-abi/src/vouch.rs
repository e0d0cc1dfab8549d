//! Root's NIC agent seen from inside a user namespace.
//!
//! A program that `urdma run` puts in a user namespace of its own (see
//! docs/urdma-run.md, "The device view") sees every user but its own as
//! the overflow user (`nobody`): the peer credentials of root's agent and
//! the owner of the service's socket file both read as that user, so the
//! checks of `urdma::nic::spawn` would refuse the agent. `urdma run` checks
//! the agent from outside the namespace first, and when it is root's,
//! names that very process (its id and start time, which no later
//! process shares) in [`VOUCH_ENV`]; a driver inside then accepts an
//! agent whose user reads as the overflow user only if it is that
//! process. Only the program's own user sets the variable, so it can
//! vouch for no one but to itself.

use super::addr::{self, AgentAddr};
use super::channel;
use std::os::fd::OwnedFd;

/// The variable naming the root agent vouched for: `PID:STARTTIME`.
pub const VOUCH_ENV: &str = "URDMA_NIC_VOUCHED";

/// The start time of process `pid` (field 22 of `/proc/PID/stat`, in
/// clock ticks since boot), if it runs.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command (field 2) is in parentheses and may hold anything.
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields from 3 on; the start time is field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The user id that stands for the users a user namespace does not map.
fn overflow_uid() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/overflowuid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(65534)
}

/// The [`VOUCH_ENV`] value for process `pid` (None: it does not run).
pub fn token(pid: u32) -> Option<String> {
    Some(format!("{pid}:{}", start_time(pid)?))
}

/// What [`VOUCH_ENV`] says for a program that will enter a user
/// namespace: the agent that serves it now (the first of the places a
/// driver looks, [`addr::candidates`], that answers and passes the
/// driver's checks) if that agent is root's. None when no agent answers
/// or the agent is this user's own (which the namespace maps).
pub fn for_user_namespace() -> Option<String> {
    for a in addr::candidates() {
        let Ok(fd) = addr::connect(&a) else { continue };
        let Ok((pid, uid)) = channel::peer(&fd) else {
            continue;
        };
        return (uid == 0).then(|| token(pid)).flatten();
    }
    None
}

/// True when `pid`, whose user reads as `uid`, is the root agent
/// [`VOUCH_ENV`] names: the variable is set, `uid` is the overflow user
/// and the process still has the start time recorded.
pub fn vouched(pid: u32, uid: u32) -> bool {
    let Ok(v) = std::env::var(VOUCH_ENV) else {
        return false;
    };
    uid == overflow_uid() && token(pid).as_deref() == Some(v.as_str())
}

/// Connect to the service's socket file at `addr` when its checks fail
/// only because this process is in a user namespace: the file's folders
/// and the file then read as the overflow user's, and the process that
/// holds it must be the one vouched for. None when nothing is vouched
/// for (the caller keeps its error).
pub fn connect_service(addr: &AgentAddr) -> Option<std::io::Result<OwnedFd>> {
    let AgentAddr::Path(p) = addr else {
        return None;
    };
    std::env::var_os(VOUCH_ENV)?;
    let fd = match channel::connect_path(p) {
        Ok(fd) => fd,
        Err(e) => return Some(Err(e)),
    };
    Some(match channel::peer(&fd) {
        Ok((pid, uid)) if vouched(pid, uid) => Ok(fd),
        Ok((pid, uid)) => Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} is held by process {pid} (user {uid} here), not by the root agent \
                 {VOUCH_ENV} names",
                p.display()
            ),
        )),
        Err(e) => Err(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_process_has_a_token_and_a_gone_one_none() {
        let me = std::process::id();
        let t = token(me).unwrap();
        assert!(t.starts_with(&format!("{me}:")));
        assert_eq!(token(me), Some(t));
        // Beyond pid_max: no such process.
        assert_eq!(token(u32::MAX), None);
    }

    #[test]
    fn only_the_overflow_user_can_be_vouched_for() {
        // This process is no agent and its user is not the overflow
        // user: without the variable, nothing is vouched for.
        if std::env::var_os(VOUCH_ENV).is_none() {
            assert!(!vouched(std::process::id(), overflow_uid()));
        }
        assert!(!vouched(std::process::id(), 0));
    }
}

//! `urdma agent`: run the NIC agent of this network namespace.

use clap::Args;
use std::time::Duration;
use urdma::nic::spawn;
use urdma_nic::nic::agent::{self, AgentOptions};

/// Options of `urdma agent`.
#[derive(Args)]
pub struct AgentArgs {
    /// Return at once, leaving the agent running in a session of its own.
    #[arg(long)]
    detach: bool,
    /// Exit after this many seconds with no program using the NIC.
    #[arg(long, default_value_t = 5.0, conflicts_with = "persist")]
    linger: f64,
    /// Never exit on idleness (as a system service).
    #[arg(long)]
    persist: bool,
    /// Open every device at start (those `urdma devices` lists), so that
    /// each answers connection requests before a program uses it, as an
    /// RDMA NIC's connection manager does.
    #[arg(long)]
    open_all: bool,
    /// Sessions (open devices of programs) one user may have at once;
    /// beyond, opening a device fails with a message saying so.
    #[arg(long, default_value_t = agent::AgentOptions::default().limits.max_sessions_per_user)]
    max_sessions_per_user: usize,
    /// A setting of the agent, over its configuration file and its
    /// environment: `--set ecn=0` as `URDMA_ECN=0` (see
    /// docs/configuration.md). A program that starts an agent passes
    /// its own settings this way.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

/// Run (or detach) the agent. An agent of this user or of root already
/// serving the namespace is not an error: it is the NIC the caller
/// wanted. A name held by any other user's process is.
pub fn run(a: &AgentArgs) -> anyhow::Result<()> {
    for kv in &a.set {
        let Some((key, value)) = kv.split_once('=') else {
            anyhow::bail!("--set {kv}: not KEY=VALUE");
        };
        urdma::config::set(key, value)?;
    }
    if a.detach {
        let exe = std::env::current_exe()?;
        let mut args = Vec::new();
        if a.persist {
            args.push("--persist".to_string());
        } else {
            args.push(format!("--linger={}", a.linger));
        }
        if a.open_all {
            args.push("--open-all".to_string());
        }
        args.push(format!(
            "--max-sessions-per-user={}",
            a.max_sessions_per_user
        ));
        args.extend(a.set.iter().map(|kv| format!("--set={kv}")));
        urdma::nic::spawn::detach(&exe, &args)?;
        return Ok(());
    }
    if !a.linger.is_finite() || a.linger < 0.0 {
        anyhow::bail!("--linger must be a number of seconds >= 0");
    }
    let open = match a.open_all {
        true => urdma::config::discover()?,
        false => Vec::new(),
    };
    let mut opts = AgentOptions {
        linger: (!a.persist).then(|| Duration::from_secs_f64(a.linger)),
        open,
        ..AgentOptions::default()
    };
    opts.limits.max_sessions_per_user = a.max_sessions_per_user;
    // A holder that exits between the bind and the probe frees the name.
    for _ in 0..3 {
        match agent::run(&opts) {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                if spawn::name_held(&opts.addr)? {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            r => return Ok(r?),
        }
    }
    anyhow::bail!("the socket name {} stays taken", opts.addr)
}

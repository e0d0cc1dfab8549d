//! `urdma stat`: counters of the urdma devices open in running processes,
//! and the last counters of devices whose process has closed them or
//! ended, in the manner of `rdma statistic`.

use anyhow::Result;
use clap::Args;
use std::fmt::Write as _;
use urdma_nic::fabric::stats::{read_all, stats_dir, Published};
use urdma_wire::cm::CmaHeader;

/// Arguments of `urdma stat`.
#[derive(Args)]
pub struct StatArgs {
    /// Also print per-QP counters.
    #[arg(long)]
    qp: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Print counters that are zero too.
    #[arg(short, long)]
    all: bool,
}

fn fields(c: &urdma::engine::Counters, all: bool) -> String {
    c.fields()
        .iter()
        .filter(|(_, v)| all || *v != 0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// How an ended device's record is marked.
fn ended_mark(p: &Published) -> String {
    match p.stats.closed_at {
        Some(t) => {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t);
            format!(
                "[closed {}: final counters]",
                humantime::format_rfc3339_seconds(at)
            )
        }
        None => "[process ended without closing: counters as last published]".into(),
    }
}

fn print(out: &mut String, p: &Published, a: &StatArgs) {
    let d = &p.stats;
    let mark = if p.live {
        String::new()
    } else {
        format!(" {}", ended_mark(p))
    };
    let _ = writeln!(
        out,
        "link {}/1 pid {} addr {}{mark} {}",
        d.device,
        d.pid,
        d.addr,
        fields(&d.counters, a.all)
    );
    for p in &d.processes {
        let _ = writeln!(
            out,
            "  process {} ({}): {} PD, {} MR, {} CQ, {} QP, {} SRQ{}",
            p.pid,
            p.command,
            p.pds,
            p.mrs,
            p.cqs,
            p.qps.len(),
            p.srqs,
            listening(&p.cm_listeners)
        );
    }
    if a.qp {
        for q in &d.qps {
            let owner = q.pid.map(|p| format!(" pid {p}")).unwrap_or_default();
            let _ = writeln!(
                out,
                "  qp {}{owner} state {:?} {}",
                q.qpn,
                q.state,
                fields(&q.counters, a.all)
            );
        }
    }
}

/// What a process listens on, as the end of its line: ", listens on
/// rdma_cm TCP port 7471" (service IDs outside rdma_cm's port spaces in
/// hex); nothing when it does not listen.
fn listening(services: &[u64]) -> String {
    if services.is_empty() {
        return String::new();
    }
    let names: Vec<String> = services
        .iter()
        .map(|&s| match CmaHeader::port_of(s) {
            Some((space, port)) => format!("rdma_cm {space} port {port}"),
            None => format!("service {s:#x}"),
        })
        .collect();
    format!(", listens on {}", names.join(", "))
}

/// Write the report; a reader that stopped reading (`urdma stat | head`)
/// is not an error.
fn emit(text: &str) -> Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// Run `urdma stat`.
pub fn run(a: &StatArgs) -> Result<()> {
    let devs = read_all();
    if a.json {
        return emit(&(serde_json::to_string_pretty(&devs)? + "\n"));
    }
    let mut out = String::new();
    let (live, ended): (Vec<&Published>, Vec<&Published>) = devs.iter().partition(|p| p.live);
    if live.is_empty() {
        let _ = writeln!(
            out,
            "no urdma device is open in any process (open devices publish their counters in {})",
            stats_dir().display()
        );
    }
    for p in &live {
        print(&mut out, p, a);
    }
    if !ended.is_empty() {
        if !live.is_empty() {
            out.push('\n');
        }
        out.push_str("last counters of devices no longer open:\n");
        for p in &ended {
            print(&mut out, p, a);
        }
    }
    emit(&out)
}

#[cfg(test)]
mod tests {
    use super::listening;

    #[test]
    fn listeners_are_named_by_rdma_cm_port() {
        assert_eq!(listening(&[]), "");
        assert_eq!(
            listening(&[0x0106_1d2f, 0x0111_1c06, 0x42]),
            ", listens on rdma_cm TCP port 7471, rdma_cm UDP port 7174, service 0x42"
        );
    }
}

//! `urdma stat`: counters of the urdma devices open in running processes,
//! in the manner of `rdma statistic`.

use anyhow::Result;
use clap::Args;
use urdma::fabric::stats::{read_all, stats_dir};

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

/// Run `urdma stat`.
pub fn run(a: &StatArgs) -> Result<()> {
    let devs = read_all();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&devs)?);
        return Ok(());
    }
    if devs.is_empty() {
        println!(
            "no open urdma devices (counters are published in {})",
            stats_dir().display()
        );
        return Ok(());
    }
    for d in &devs {
        println!(
            "link {}/1 pid {} addr {} {}",
            d.device,
            d.pid,
            d.addr,
            fields(&d.counters, a.all)
        );
        if a.qp {
            for q in &d.qps {
                println!(
                    "  qp {} state {:?} {}",
                    q.qpn,
                    q.state,
                    fields(&q.counters, a.all)
                );
            }
        }
    }
    Ok(())
}

//! `urdma`: list devices and benchmark RDMA over urdma.

mod agent;
mod bench;
mod check;
mod cm_echo;
mod devices;
mod peer;
mod run;
mod stat;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// urdma: a software RDMA NIC (RoCEv2 over UDP).
#[derive(Parser)]
#[command(name = "urdma", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List urdma devices and their attributes, as ibv_devinfo does.
    Devices(devices::DevicesArgs),
    /// Measure bandwidth and latency of RDMA WRITE, READ and SEND.
    Bench(bench::BenchArgs),
    /// Run a mixed RDMA workload between two processes and verify every byte.
    Check(check::CheckArgs),
    /// Counters of the urdma devices open in running processes.
    Stat(stat::StatArgs),
    /// Run an unmodified verbs program (ibv_*, perftest, ...) on urdma.
    Run(run::RunArgs),
    /// Exchange a 16-byte message over a connection the CM sets up, as
    /// rdma-core's rdma_client and rdma_server do (and with them).
    CmEcho(cm_echo::CmEchoArgs),
    /// Run the NIC agent (started on demand by the first program that
    /// opens a device; run it yourself only as a service).
    Agent(agent::AgentArgs),
}

fn main() -> ExitCode {
    let filter = urdma::config::get().log.value.clone();
    tracing_subscriber::fmt()
        .with_env_filter(
            filter
                .and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok())
                .unwrap_or_else(|| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Devices(a) => {
            urdma::sig::default_sigpipe();
            devices::run(&a)
        }
        Command::Bench(a) => bench::run(&a),
        Command::Check(a) => check::run(&a),
        Command::Stat(a) => {
            urdma::sig::default_sigpipe();
            stat::run(&a)
        }
        Command::Run(a) => run::run(&a),
        Command::Agent(a) => agent::run(&a),
        Command::CmEcho(a) => cm_echo::run(&a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("urdma: {e:#}");
            ExitCode::FAILURE
        }
    }
}

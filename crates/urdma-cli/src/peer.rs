//! Where the two sides of `urdma bench` and `urdma check` run: their
//! common arguments, the server's control listener, the client's control
//! connection and the local server process the client starts when no
//! host is given.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use urdma::Mtu;

/// Control (TCP) port, as perftest's default.
const DEFAULT_CTRL_PORT: u16 = 18515;
/// Address of the local server process.
const LOCAL_SERVER: [u8; 4] = [127, 0, 0, 2];
/// Address of the client of a local server.
const LOCAL_CLIENT: [u8; 4] = [127, 0, 0, 1];
/// How long a client retries reaching a server given by address.
const REMOTE_PATIENCE: Duration = Duration::from_secs(10);
/// How long a client retries reaching the local server while it starts.
const LOCAL_PATIENCE: Duration = Duration::from_secs(20);

/// Where the server and the client of `urdma bench` and `urdma check` run.
#[derive(Args, Debug, Clone)]
pub(crate) struct PeerArgs {
    /// Server to connect to. Without it (and without --server), a server
    /// process on 127.0.0.2 and a client on 127.0.0.1 run on this host.
    pub(crate) host: Option<IpAddr>,
    /// Run the server side.
    #[arg(long)]
    pub(crate) server: bool,
    /// Local address to use (server: listen address; client: source address).
    #[arg(long)]
    pub(crate) bind: Option<IpAddr>,
    /// TCP port of the control connection.
    #[arg(long, default_value_t = DEFAULT_CTRL_PORT)]
    pub(crate) ctrl_port: u16,
    /// UDP port of the urdma devices.
    #[arg(long, default_value_t = urdma_wire_port())]
    pub(crate) udp_port: u16,
    /// Capture this side's packets into a pcap file (see URDMA_PCAP); the
    /// local server process, if one is started, captures into FILE with
    /// `.server` before its extension.
    #[arg(long, value_name = "FILE")]
    pub(crate) pcap: Option<std::path::PathBuf>,
}

impl PeerArgs {
    /// Turn on this process's packet capture if `--pcap` asks for it. Call
    /// before any device opens.
    pub(crate) fn start_capture(&self) {
        if let Some(f) = &self.pcap {
            if let Err(e) = urdma::config::set("pcap", &f.to_string_lossy()) {
                eprintln!("urdma: {e}");
            }
        }
    }
}

/// The capture file of the local server for a client capturing into `f`.
fn server_capture(f: &std::path::Path) -> std::path::PathBuf {
    let stem = f.file_stem().unwrap_or_default().to_string_lossy();
    let name = match f.extension() {
        Some(ext) => format!("{stem}.server.{}", ext.to_string_lossy()),
        None => format!("{stem}.server"),
    };
    f.with_file_name(name)
}

/// The RoCEv2 UDP port, the default of the devices' `--udp-port`.
pub(crate) const fn urdma_wire_port() -> u16 {
    4791
}

/// The path MTU of `--mtu` (in bytes).
pub(crate) fn path_mtu(bytes: usize) -> Result<Mtu> {
    match Mtu::from_bytes(bytes) {
        Some(mtu) => Ok(mtu),
        None => bail!("--mtu must be 256, 512, 1024, 2048 or 4096"),
    }
}

impl PeerArgs {
    /// Server: listen on the control port of `--bind` (default: every
    /// address) and say so, as `urdma <command>`.
    pub(crate) fn listen(&self, command: &str) -> Result<TcpListener> {
        let ip = self.bind.unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let l = TcpListener::bind((ip, self.ctrl_port))
            .with_context(|| format!("cannot listen on {ip}:{}", self.ctrl_port))?;
        eprintln!("urdma {command}: server listening on {}", l.local_addr()?);
        Ok(l)
    }

    /// Client: a control connection to the server on `host`, from
    /// `--bind`, retrying for a while.
    pub(crate) fn dial(&self, host: IpAddr) -> Result<TcpStream> {
        dial(
            SocketAddr::new(host, self.ctrl_port),
            self.bind,
            REMOTE_PATIENCE,
        )
    }
}

/// Connect to the server's control port, retrying while it starts.
fn dial(server: SocketAddr, bind: Option<IpAddr>, patience: Duration) -> Result<TcpStream> {
    let deadline = Instant::now() + patience;
    loop {
        let r = match bind {
            Some(ip) => {
                let s = socket2::Socket::new(
                    socket2::Domain::for_address(server),
                    socket2::Type::STREAM,
                    None,
                )?;
                s.bind(&SocketAddr::new(ip, 0).into())?;
                s.connect(&server.into()).map(|_| s.into())
            }
            None => TcpStream::connect(server),
        };
        match r {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(error = %e, "server not ready yet");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                return Err(e).with_context(|| format!("cannot reach the server at {server}"))
            }
        }
    }
}

/// How the client waits for the local server process once its run is over.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ServerExit {
    /// Kill the server at once if the run failed; otherwise wait for it.
    KillOnError,
    /// Either way, give the server this long to exit, then kill it.
    Grace(Duration),
}

/// A server process on 127.0.0.2: this program re-executed as
/// `urdma <command> --server --once`, for a client here on 127.0.0.1.
pub(crate) struct LocalServer {
    child: Child,
    ctrl: SocketAddr,
}

impl LocalServer {
    /// Start the server of `urdma <command>` with the control and UDP
    /// ports of `peer` and the further arguments `extra`, run `client`
    /// against it, then wait for the server as `exit` says. The client's
    /// error comes first, then a failed or stuck server's.
    pub(crate) fn run(
        command: &str,
        peer: &PeerArgs,
        extra: &[&str],
        exit: ServerExit,
        client: impl FnOnce(&LocalServer) -> Result<()>,
    ) -> Result<()> {
        let server = LocalServer::start(command, peer, extra)?;
        let r = client(&server);
        server.finish(r, exit)
    }

    fn start(command: &str, peer: &PeerArgs, extra: &[&str]) -> Result<LocalServer> {
        let ip = IpAddr::from(LOCAL_SERVER);
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.args([command, "--server", "--once", "--bind", &ip.to_string()])
            .args(["--ctrl-port", &peer.ctrl_port.to_string()])
            .args(["--udp-port", &peer.udp_port.to_string()])
            .args(extra);
        if let Some(f) = &peer.pcap {
            // Its own file, not the client's.
            cmd.env_remove("URDMA_PCAP")
                .arg("--pcap")
                .arg(server_capture(f));
        }
        let child = cmd.spawn().context("cannot start the server process")?;
        Ok(LocalServer {
            child,
            ctrl: SocketAddr::new(ip, peer.ctrl_port),
        })
    }

    /// A control connection from 127.0.0.1, retrying until the server is
    /// ready.
    pub(crate) fn dial(&self) -> Result<TcpStream> {
        dial(self.ctrl, Some(LOCAL_CLIENT.into()), LOCAL_PATIENCE)
    }

    fn finish(mut self, r: Result<()>, exit: ServerExit) -> Result<()> {
        let status = match exit {
            ServerExit::KillOnError => {
                if r.is_err() {
                    let _ = self.child.kill();
                }
                Some(self.child.wait()?)
            }
            ServerExit::Grace(grace) => {
                let deadline = Instant::now() + grace;
                loop {
                    match self.child.try_wait()? {
                        Some(s) => break Some(s),
                        None if Instant::now() >= deadline => {
                            let _ = self.child.kill();
                            let _ = self.child.wait();
                            break None;
                        }
                        None => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            }
        };
        r?;
        match status {
            Some(s) if s.success() => Ok(()),
            Some(s) => bail!("server process failed: {s}"),
            None => bail!("server process did not exit"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::server_capture;
    use std::path::Path;

    #[test]
    fn the_local_server_captures_beside_the_client() {
        assert_eq!(
            server_capture(Path::new("/tmp/run.pcap")),
            Path::new("/tmp/run.server.pcap")
        );
        assert_eq!(server_capture(Path::new("cap")), Path::new("cap.server"));
    }
}

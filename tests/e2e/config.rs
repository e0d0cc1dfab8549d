//! Settings between programs and the NIC agent: an agent a program starts
//! runs with that program's settings, passed as its arguments, and a
//! program whose settings of the NIC differ from the running agent's is
//! told which ones, on stderr.

use crate::harness::{self, PEER_ENV, PORT, WAIT};
use crate::proto::Cmd;
use std::io::Write;
use std::process::{Child, Command, Output, Stdio};
use std::time::Instant;
use urdma::nic::addr::AgentAddr;

/// A command with none of urdma's settings of this process's
/// environment, meeting its agent at the socket name `socket`, plus `env`.
fn clean(mut cmd: Command, socket: &str, env: &[(&str, &str)]) -> Command {
    for k in urdma::config::KNOBS {
        cmd.env_remove(k.env);
    }
    cmd.env("URDMA_NIC_SOCKET", socket);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Run the peer with `env` until it has opened a device on the agent at
/// `socket`; its output once it exited.
fn open_device(socket: &str, env: &[(&str, &str)]) -> Output {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = clean(Command::new(exe), socket, env);
    let mut child = cmd
        .env(PEER_ENV, "1")
        .env("URDMA_AGENT_BIN", env!("CARGO_BIN_EXE_urdma"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the peer");
    let (addr, _) = harness::address_pair();
    let open = serde_json::to_string(&Cmd::Open { addr, port: PORT }).expect("command");
    let mut stdin = child.stdin.take().expect("peer stdin");
    writeln!(stdin, "{open}").expect("send the command");
    drop(stdin);
    let out = child.wait_with_output().expect("the peer's output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("{\"Ok\""), "open failed: {stdout}");
    out
}

/// The process of the agent at abstract name `socket`, waiting for it.
fn agent_pid(socket: &str) -> u32 {
    let addr = AgentAddr::Abstract(socket.to_string());
    let start = Instant::now();
    loop {
        if let Ok((pid, _)) = urdma::nic::spawn::holder(&addr) {
            return pid;
        }
        assert!(start.elapsed() < WAIT, "no agent at {addr}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Stops an agent when dropped.
struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A program asking for another busy-polling window than the running
/// agent's is told it is ignored, and how to apply it; one asking for
/// the agent's is told nothing.
pub fn mismatch_is_reported() {
    let socket = format!("urdma-e2e-config-{}", std::process::id());
    let cmd = Command::new(env!("CARGO_BIN_EXE_urdma"));
    let mut cmd = clean(cmd, &socket, &[("URDMA_BUSY_POLL_US", "0")]);
    let agent = Agent(
        cmd.args(["agent", "--linger=30"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the agent"),
    );
    let pid = agent_pid(&socket);
    assert_eq!(pid, agent.0.id());
    let out = open_device(&socket, &[("URDMA_BUSY_POLL_US", "20")]);
    let text = stderr(&out);
    let want = format!(
        "urdma: URDMA_BUSY_POLL_US=20 is ignored: the running NIC agent (pid {pid}) has \
         busy_poll_us=0; stop it (kill {pid}; it also exits by itself 30 s after its last \
         program closes) and start the program again to apply it"
    );
    assert!(text.contains(&want), "stderr: {text}");
    // Once per setting, and only the one that differs.
    assert_eq!(text.matches("is ignored").count(), 1, "stderr: {text}");
    let out = open_device(&socket, &[("URDMA_BUSY_POLL_US", "0")]);
    assert!(!stderr(&out).contains("is ignored"), "{}", stderr(&out));
}

/// The agent a program starts has that program's settings as its
/// arguments, not its environment; a later program with other settings
/// is told so.
pub fn started_agent_has_the_programs_settings() {
    let socket = format!("urdma-e2e-config-start-{}", std::process::id());
    let out = open_device(&socket, &[("URDMA_ECN", "0")]);
    assert!(!stderr(&out).contains("is ignored"), "{}", stderr(&out));
    let pid = agent_pid(&socket);
    let _stop = Stopper(pid);
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("agent command line");
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert!(args.contains(&"--set=ecn=0".to_string()), "{args:?}");
    assert!(
        args.contains(&format!("--set=nic_socket={socket}")),
        "{args:?}"
    );
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("agent environment");
    let environ = String::from_utf8_lossy(&environ);
    assert!(!environ.contains("URDMA_ECN="), "{environ}");
    let out = open_device(&socket, &[]);
    let want = format!("the default ecn=1 is ignored: the running NIC agent (pid {pid}) has ecn=0");
    assert!(stderr(&out).contains(&want), "{}", stderr(&out));
}

/// Kills a process when dropped.
struct Stopper(u32);

impl Drop for Stopper {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.to_string()).status();
    }
}

//! A driver that misuses the NIC agent's command protocol, for the
//! security tests (`tests/security/run`).
//!
//! `hostile_client memfile PATH`: say Hello with the file at PATH in
//! place of this process's `/proc/self/mem`.
//! `hostile_client open ADDR PORT`: say Hello properly, then ask the agent
//! to open a device on ADDR:PORT.
//!
//! The agent is the one `URDMA_NIC_SOCKET` names (else the default). Exit
//! status: 0 if the agent refused, 1 if it took the request, 2 if it
//! could not be asked. The agent's answer is printed.

use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use urdma::nic::proto::{self, Request, Response};
use urdma::nic::{addr, channel};
use urdma::procmem::Sentinel;

fn usage() -> ExitCode {
    eprintln!("usage: hostile_client memfile PATH | open ADDR PORT");
    ExitCode::from(2)
}

/// Send `req` with `fds` and return the agent's answer.
fn ask(fd: &impl AsRawFd, req: &Request, fds: &[i32]) -> std::io::Result<Response> {
    channel::send(fd, &proto::encode(req)?, fds)?;
    let mut buf = channel::MsgBuf::default();
    let mut got = Vec::new();
    if !channel::recv(fd, &mut buf, &mut got)? {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    proto::decode(buf.bytes())
}

/// Say Hello with `mem` as the memory file; the answer.
fn hello(fd: &impl AsRawFd, mem: &std::fs::File) -> std::io::Result<Response> {
    let (_mine, theirs) = channel::pair()?;
    let req = Request::Hello {
        version: proto::VERSION,
        sentinel: Sentinel::of_this_process(),
    };
    ask(fd, &req, &[mem.as_raw_fd(), theirs.as_raw_fd()])
}

fn verdict(what: &str, r: std::io::Result<Response>) -> ExitCode {
    match r {
        Ok(Ok(v)) => {
            println!("{what}: taken ({v:?})");
            ExitCode::from(1)
        }
        Ok(Err(e)) => {
            println!("{what}: refused ({e:?})");
            ExitCode::SUCCESS
        }
        // The agent closed the connection: refused too.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            println!("{what}: refused (connection closed)");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{what}: cannot ask the agent: {e}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let fd = match addr::connect_first() {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("cannot reach the agent: {e}");
            return ExitCode::from(2);
        }
    };
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["memfile", path] => {
            // Writable where this user may write it, else read-only.
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .or_else(|_| std::fs::File::open(path));
            match file {
                Ok(f) => verdict(&format!("memory file {path}"), hello(&fd, &f)),
                Err(e) => {
                    eprintln!("{path}: {e}");
                    ExitCode::from(2)
                }
            }
        }
        ["open", addr, port] => {
            let (Ok(addr), Ok(port)) = (addr.parse::<IpAddr>(), port.parse::<u16>()) else {
                return usage();
            };
            let mem = match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/proc/self/mem")
            {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("/proc/self/mem: {e}");
                    return ExitCode::from(2);
                }
            };
            match hello(&fd, &mem) {
                Ok(Ok(_)) => {}
                r => return verdict("hello", r),
            }
            let req = Request::OpenDevice {
                name: "urdma0".into(),
                addr,
                port,
            };
            verdict(&format!("device on {addr}:{port}"), ask(&fd, &req, &[]))
        }
        _ => usage(),
    }
}

//! The kinds of values settings take, as text (the file and the
//! environment write them alike) and back.

use std::fmt;
use std::path::PathBuf;

/// Default busy-polling window (as Linux's `net.core.busy_poll` advice).
pub const DEFAULT_BUSY_POLL_US: u64 = 50;

/// Longest busy-polling window accepted.
pub const MAX_BUSY_POLL_US: u64 = 10_000;

/// How datagrams between devices of one NIC travel (`URDMA_LOOPBACK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loopback {
    /// From engine to engine inside the NIC.
    Internal,
    /// Through the UDP sockets, as between hosts.
    Udp,
}

impl fmt::Display for Loopback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Loopback::Internal => "internal",
            Loopback::Udp => "udp",
        })
    }
}

/// Which NIC a program's devices use (`URDMA_NIC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NicMode {
    /// The shared NIC agent.
    Agent,
    /// An engine inside the program.
    Embedded,
}

impl fmt::Display for NicMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NicMode::Agent => "agent",
            NicMode::Embedded => "embedded",
        })
    }
}

/// An on/off switch: `1` or `0`.
pub fn switch(t: &str) -> Result<bool, String> {
    match t.trim() {
        "1" => Ok(true),
        "0" => Ok(false),
        _ => Err("not 0 or 1".into()),
    }
}

/// A switch as text.
pub fn show_switch(b: &bool) -> String {
    if *b { "1" } else { "0" }.into()
}

/// A switch that may be left to urdma: `1`, `0` or `auto` (None).
pub fn auto_switch(t: &str) -> Result<Option<bool>, String> {
    match t.trim() {
        "" | "auto" => Ok(None),
        other => switch(other)
            .map(Some)
            .map_err(|_| "not 0, 1 or auto".into()),
    }
}

/// An automatic switch as text.
pub fn show_auto_switch(b: &Option<bool>) -> String {
    b.as_ref().map_or_else(|| "auto".into(), show_switch)
}

/// A UDP port other than 0.
pub fn port(t: &str) -> Result<u16, String> {
    t.trim()
        .parse()
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| "not a UDP port".into())
}

/// A busy-polling window in microseconds, up to [`MAX_BUSY_POLL_US`].
pub fn busy_poll_us(t: &str) -> Result<u64, String> {
    t.trim()
        .parse::<u64>()
        .ok()
        .filter(|&us| us <= MAX_BUSY_POLL_US)
        .ok_or_else(|| format!("not a number of microseconds from 0 to {MAX_BUSY_POLL_US}"))
}

/// A number of bytes.
pub fn bytes(t: &str) -> Result<u64, String> {
    t.trim().parse().map_err(|_| "not a byte count".into())
}

/// `internal` (or empty) or `udp`.
pub fn loopback(t: &str) -> Result<Loopback, String> {
    match t.trim() {
        "" | "internal" => Ok(Loopback::Internal),
        "udp" => Ok(Loopback::Udp),
        _ => Err("not `internal` or `udp`".into()),
    }
}

/// `agent` (or empty) or `embedded`.
pub fn nic(t: &str) -> Result<NicMode, String> {
    match t.trim() {
        "" | "agent" => Ok(NicMode::Agent),
        "embedded" => Ok(NicMode::Embedded),
        _ => Err("not `agent` or `embedded`".into()),
    }
}

/// Any text; empty is none.
pub fn text(t: &str) -> Result<Option<String>, String> {
    Ok(Some(t.to_string()).filter(|t| !t.is_empty()))
}

/// Text that may be none, as text (empty: none).
pub fn show_text(t: &Option<String>) -> String {
    t.clone().unwrap_or_default()
}

/// A file or folder; empty is none.
pub fn path(t: &str) -> Result<Option<PathBuf>, String> {
    Ok(Some(PathBuf::from(t)).filter(|p| !p.as_os_str().is_empty()))
}

/// A path that may be none, as text (empty: none).
pub fn show_path(p: &Option<PathBuf>) -> String {
    p.as_ref()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_and_show_back() {
        assert_eq!(switch(" 0 "), Ok(false));
        assert!(switch("yes").is_err());
        assert_eq!(auto_switch("auto"), Ok(None));
        assert_eq!(auto_switch("1"), Ok(Some(true)));
        assert_eq!(show_auto_switch(&None), "auto");
        assert!(port("0").is_err() && port("65536").is_err());
        assert_eq!(port("5000"), Ok(5000));
        assert_eq!(busy_poll_us("10000"), Ok(10_000));
        assert!(busy_poll_us("10001").is_err() && busy_poll_us("-1").is_err());
        assert_eq!(loopback("udp"), Ok(Loopback::Udp));
        assert!(loopback("tcp").is_err());
        assert_eq!(nic("embedded"), Ok(NicMode::Embedded));
        assert_eq!(text(""), Ok(None));
        assert_eq!(show_path(&path("/x").unwrap()), "/x");
    }
}

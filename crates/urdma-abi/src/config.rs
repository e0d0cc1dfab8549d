//! urdma's settings ([`Settings`], see [`settings`]), and which devices
//! exist: from the environment, a configuration file, or the host's
//! interfaces.
//!
//! In order of precedence:
//! 1. `URDMA_ADDR=IP` (with optional `URDMA_PORT`): exactly one device,
//!    `urdma0`, on that address.
//! 2. `URDMA_CONFIG=FILE`, else `/etc/urdma.toml` if it exists: a TOML file
//!    with `[[device]]` tables (`name`, `addr`, optional `port`).
//! 3. One device per IPv4 address of the host's up interfaces, loopback
//!    included, named `urdma0`, `urdma1`, ... in interface order, all on
//!    `URDMA_PORT` or 4791.

use crate::device::DeviceConfig;
use crate::error::{Error, Result};
use crate::netif::interface_index;
use serde::Deserialize;
use std::net::IpAddr;

mod agent_check;
pub mod settings;
pub mod values;

pub use agent_check::{agent_info, check_agent, differences};
pub use settings::{get, knob, set, Knob, Reader, Setting, Settings, Source, KNOBS};
pub use values::{Loopback, NicMode, DEFAULT_BUSY_POLL_US, MAX_BUSY_POLL_US};

/// Default configuration file.
pub const DEFAULT_CONFIG_FILE: &str = "/etc/urdma.toml";

#[derive(Deserialize)]
struct FileConfig {
    #[serde(default)]
    device: Vec<FileDevice>,
}

#[derive(Deserialize)]
struct FileDevice {
    name: Option<String>,
    addr: IpAddr,
    port: Option<u16>,
}

/// The UDP port of devices: `URDMA_PORT`, else 4791.
pub fn default_port() -> Result<u16> {
    let s = get();
    match s.problem("port") {
        Some(p) => Err(Error::inval(p.to_string())),
        None => Ok(s.port.value),
    }
}

/// Parse a configuration file's text.
pub fn parse_config(text: &str, default_port: u16) -> Result<Vec<DeviceConfig>> {
    let f: FileConfig =
        toml::from_str(text).map_err(|e| Error::inval(format!("configuration: {e}")))?;
    let mut out = Vec::new();
    for (i, d) in f.device.into_iter().enumerate() {
        out.push(DeviceConfig {
            name: d.name.unwrap_or_else(|| format!("urdma{i}")),
            addr: d.addr,
            port: d.port.unwrap_or(default_port),
        });
    }
    check_unique(&out)?;
    Ok(out)
}

fn check_unique(devs: &[DeviceConfig]) -> Result<()> {
    for (i, a) in devs.iter().enumerate() {
        for b in &devs[i + 1..] {
            if a.name == b.name {
                return Err(Error::inval(format!("device name {} used twice", a.name)));
            }
            if a.addr == b.addr && a.port == b.port {
                return Err(Error::inval(format!(
                    "address {}:{} used twice",
                    a.addr, a.port
                )));
            }
        }
    }
    Ok(())
}

/// Whether the NIC reads a message's payload from another process's
/// memory up to 64 KiB at a time rather than packet by packet
/// (`URDMA_STAGE`: `1` or `0`). Each access to `/proc/PID/mem` makes the
/// kernel allocate a page, which kernels built to fill every page they
/// allocate (`init_on_alloc`, Debian's and Ubuntu's default) zero first:
/// there, one access per 64 KiB costs less than the copy it adds. By
/// default it is on where the kernel does that.
pub fn stage_reads() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let build = std::fs::read_to_string(format!("/boot/config-{}", release.trim())).ok();
        get()
            .stage
            .value
            .unwrap_or_else(|| zeroes_allocated_pages(&cmdline, build.as_deref()))
    })
}

/// Whether a kernel with command line `cmdline` and build configuration
/// `build` (if known) fills the pages it allocates: `init_on_alloc=` on
/// the command line, else `CONFIG_INIT_ON_ALLOC_DEFAULT_ON`.
fn zeroes_allocated_pages(cmdline: &str, build: Option<&str>) -> bool {
    let given = cmdline
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("init_on_alloc="))
        .next_back();
    match given {
        // The kernel's own reading of a boolean (kstrtobool).
        Some(v) => {
            matches!(v.as_bytes().first(), Some(b'1' | b'y' | b'Y' | b't' | b'T'))
                || v.eq_ignore_ascii_case("on")
        }
        None => build.is_some_and(|b| b.lines().any(|l| l == "CONFIG_INIT_ON_ALLOC_DEFAULT_ON=y")),
    }
}

/// Whether devices send ECN-capable packets and answer congestion marks
/// (`URDMA_ECN`: `1`, the default, or `0`).
pub fn ecn() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| get().ecn.value)
}

/// Whether RC QPs offer selective retransmission to their peers
/// (`URDMA_SELECTIVE`: `1`, the default, or `0` for go-back-N only).
pub fn selective() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| get().selective.value)
}

/// Parse a busy-polling window in microseconds.
pub fn parse_busy_poll(text: &str) -> Result<std::time::Duration> {
    values::busy_poll_us(text)
        .map(std::time::Duration::from_micros)
        .map_err(|why| Error::inval(format!("URDMA_BUSY_POLL_US={text}: {why}")))
}

/// How long the NIC's threads keep polling for more work after some came
/// (`URDMA_BUSY_POLL_US`, default [`DEFAULT_BUSY_POLL_US`], 0 to always
/// sleep at once). Work that comes within the window is taken without the
/// cost of waking a sleeping thread; the threads yield the CPU while they
/// poll. A bad value is reported once and the default used.
pub fn busy_poll() -> std::time::Duration {
    static WINDOW: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *WINDOW.get_or_init(|| std::time::Duration::from_micros(get().busy_poll_us.value))
}

/// Parse a device address: an IP address, an IPv6 one with an optional
/// `%INTERFACE` zone (the name or index of the interface that must hold
/// it, as for `fe80::1%eth0`).
pub fn parse_addr(text: &str) -> Result<IpAddr> {
    let bad = || Error::inval(format!("{text} is not an IP address"));
    let (ip, zone) = match text.split_once('%') {
        Some((ip, zone)) => (ip, Some(zone)),
        None => (text, None),
    };
    let addr: IpAddr = ip.parse().map_err(|_| bad())?;
    if let Some(zone) = zone {
        if !addr.is_ipv6() || zone.is_empty() {
            return Err(bad());
        }
        let index = zone
            .parse::<u32>()
            .ok()
            .or_else(|| nix::net::if_::if_nametoindex(zone).ok());
        let Some(index) = index else {
            return Err(Error::inval(format!("{text}: no interface {zone}")));
        };
        if interface_index(addr) != index {
            return Err(Error::inval(format!(
                "{text}: interface {zone} does not hold {addr}"
            )));
        }
    }
    Ok(addr)
}

/// One device per IPv4 address of the up interfaces, those of loopback
/// interfaces last (so that leaving them out renames no other).
pub fn from_interfaces(port: u16) -> Result<Vec<DeviceConfig>> {
    let mut ifs = if_addrs::get_if_addrs()?;
    ifs.sort_by_key(|itf| itf.is_loopback());
    let mut out: Vec<DeviceConfig> = Vec::new();
    for itf in ifs {
        let ip = itf.ip();
        if !ip.is_ipv4() || out.iter().any(|d| d.addr == ip) {
            continue;
        }
        out.push(DeviceConfig {
            name: format!("urdma{}", out.len()),
            addr: ip,
            port,
        });
    }
    Ok(out)
}

/// The devices a program sees: [`discover`]'s, except that from the
/// interfaces, loopback addresses count only on a host with no other.
/// RDMA devices sit on a host's Ethernet ports: a program that takes the
/// first device (most do) then reaches other hosts, and one that uses
/// every device (UCX, libfabric, MPI) gets none whose peer on another
/// host would be that host's own loopback device. The NIC itself still
/// serves devices on loopback addresses (the kernel's on `lo`, `--addr`).
pub fn discover_for_programs() -> Result<Vec<DeviceConfig>> {
    let all = discover()?;
    let s = get();
    if s.addr.value.is_some()
        || s.config.value.is_some()
        || std::path::Path::new(DEFAULT_CONFIG_FILE).exists()
    {
        return Ok(all);
    }
    Ok(without_lone_loopback(all))
}

/// `devs` without those on loopback addresses, if any other is left.
fn without_lone_loopback(devs: Vec<DeviceConfig>) -> Vec<DeviceConfig> {
    if devs.iter().any(|d| !d.addr.is_loopback()) {
        devs.into_iter().filter(|d| !d.addr.is_loopback()).collect()
    } else {
        devs
    }
}

/// The devices this process should see.
pub fn discover() -> Result<Vec<DeviceConfig>> {
    let port = default_port()?;
    let s = get();
    if let Some(a) = &s.addr.value {
        let given = knob("addr").map_or_else(
            || format!("URDMA_ADDR={a}"),
            |k| settings::origin(k, a, &s.addr.source),
        );
        let addr = parse_addr(a).map_err(|e| Error::inval(format!("{given}: {e}")))?;
        return Ok(vec![DeviceConfig {
            name: "urdma0".into(),
            addr,
            port,
        }]);
    }
    let file = s.config.value.as_deref();
    let path = file.unwrap_or(std::path::Path::new(DEFAULT_CONFIG_FILE));
    if file.is_some() || path.exists() {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::inval(format!("{}: {e}", path.display())))?;
        return parse_config(&text, port);
    }
    from_interfaces(port)
}

/// Whether the NIC agent, running as user `agent_uid`, opens the device
/// `name` on `addr:port` for a driver of user `uid`, and under which
/// name. No one opens a device on an address that names no single host
/// (unspecified, multicast, broadcast). Root and the agent's own user open
/// any other; any other user only one of the devices this agent would
/// see itself ([`discover`]: its configuration file or its host's
/// interfaces), by its address and port, under its configured name: a
/// shared agent binds for others only what its administrator set up.
pub fn permit_device(
    name: &str,
    addr: IpAddr,
    port: u16,
    uid: u32,
    agent_uid: u32,
) -> Result<String> {
    let no_host = match addr {
        IpAddr::V4(a) => a.is_unspecified() || a.is_multicast() || a.is_broadcast(),
        IpAddr::V6(a) => a.is_unspecified() || a.is_multicast(),
    };
    if no_host || port == 0 {
        return Err(Error::inval(format!(
            "{addr}:{port} is not an address a device can have"
        )));
    }
    if uid == 0 || uid == agent_uid {
        return Ok(name.to_string());
    }
    let known = discover()?;
    match known.into_iter().find(|d| d.addr == addr && d.port == port) {
        Some(d) => Ok(d.name),
        None => Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{addr}:{port} is not a device of this NIC (user {uid} may open only \
                 the devices its agent is configured with)"
            ),
        ))),
    }
}

/// Largest capture file unless `URDMA_PCAP_LIMIT` says otherwise.
pub const DEFAULT_PCAP_LIMIT: u64 = 256 << 20;

/// Where `URDMA_PCAP` asks this process to capture (`%p` replaced by the
/// process id) and the size limit from `URDMA_PCAP_LIMIT`.
pub fn pcap_requested() -> Option<(String, u64)> {
    let s = get();
    let path = s.pcap.value.as_ref()?;
    let path = path.replace("%p", &std::process::id().to_string());
    Some((path, s.pcap_limit.value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_zeroing_from_the_command_line_then_the_build() {
        let on = Some("CONFIG_X=y\nCONFIG_INIT_ON_ALLOC_DEFAULT_ON=y\n");
        let off = Some("# CONFIG_INIT_ON_ALLOC_DEFAULT_ON is not set\n");
        assert!(zeroes_allocated_pages("quiet", on));
        assert!(!zeroes_allocated_pages("quiet", off));
        assert!(!zeroes_allocated_pages("quiet", None));
        assert!(!zeroes_allocated_pages("init_on_alloc=0 quiet", on));
        assert!(zeroes_allocated_pages("ro init_on_alloc=1", None));
    }

    #[test]
    fn busy_poll_window_parses() {
        assert_eq!(parse_busy_poll("0").unwrap(), std::time::Duration::ZERO);
        assert_eq!(
            parse_busy_poll(" 50 ").unwrap(),
            std::time::Duration::from_micros(50)
        );
        assert!(parse_busy_poll("-1").is_err());
        assert!(parse_busy_poll("fast").is_err());
        assert!(parse_busy_poll("10001").is_err());
    }

    #[test]
    fn config_file_devices() {
        let t = "[[device]]\naddr = \"127.0.0.1\"\n[[device]]\nname = \"x\"\naddr = \"::1\"\nport = 5000\n";
        let d = parse_config(t, 4791).unwrap();
        assert_eq!(d[0].name, "urdma0");
        assert_eq!(d[0].port, 4791);
        assert_eq!(d[1].name, "x");
        assert_eq!(d[1].port, 5000);
    }

    #[test]
    fn config_errors_are_reported() {
        assert!(parse_config("[[device]]\naddr = \"nope\"\n", 4791).is_err());
        let dup = "[[device]]\naddr = \"127.0.0.1\"\n[[device]]\naddr = \"127.0.0.1\"\n";
        assert!(parse_config(dup, 4791).is_err());
    }

    #[test]
    fn scoped_addresses_parse() {
        assert_eq!(
            parse_addr("127.0.0.1").unwrap(),
            "127.0.0.1".parse::<IpAddr>().unwrap()
        );
        assert!(parse_addr("127.0.0.1%lo").is_err());
        assert!(parse_addr("fe80::1%").is_err());
        assert!(parse_addr("fe80::1%no-such-interface").is_err());
        // lo does not hold fe80::1.
        assert!(parse_addr("fe80::1%lo").is_err());
        assert!(parse_addr("::1%lo").is_ok());
        assert!(crate::netif::link_local_for("127.0.0.1".parse().unwrap()).is_none());
    }

    #[test]
    fn loopback_devices_only_without_a_real_link() {
        let d = from_interfaces(4791).unwrap();
        assert!(d.iter().any(|c| c.addr.is_loopback()), "{d:?}");
        let last_real = d.iter().rposition(|c| !c.addr.is_loopback());
        let first_lo = d.iter().position(|c| c.addr.is_loopback());
        assert!(last_real.is_none_or(|r| first_lo.is_some_and(|l| r < l)));
        let dev = |a: &str| DeviceConfig {
            name: "x".into(),
            addr: a.parse().unwrap(),
            port: 4791,
        };
        let both = vec![dev("10.0.0.1"), dev("127.0.0.1")];
        assert_eq!(without_lone_loopback(both), vec![dev("10.0.0.1")]);
        let lo = vec![dev("127.0.0.1")];
        assert_eq!(without_lone_loopback(lo.clone()), lo);
    }

    #[test]
    fn devices_for_other_users_are_the_configured_ones() {
        use std::net::Ipv4Addr;
        let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        assert!(permit_device("x", any, 22, 0, 0).is_err());
        let mcast = IpAddr::V4(Ipv4Addr::new(224, 0, 0, 1));
        assert!(permit_device("x", mcast, 4791, 0, 0).is_err());
        let odd = IpAddr::V4(Ipv4Addr::new(127, 0, 9, 9));
        // Root and the agent's own user choose.
        assert_eq!(permit_device("x", odd, 53, 0, 1000).unwrap(), "x");
        assert_eq!(permit_device("x", odd, 53, 1000, 1000).unwrap(), "x");
        // Another user: not an address of this host's configuration.
        let e = permit_device("x", odd, 53, 1001, 0).unwrap_err();
        assert!(e.to_string().contains("not a device of this NIC"), "{e}");
    }
}

//! CM requests to addresses of this host: some NIC must answer there, as
//! a host's kernel CM answers for its devices.

use crate::cm::CmOp;

/// Before a CM request goes to a peer on this host (a loopback address or
/// one of the host's interfaces), make sure some NIC answers there: the
/// device of that address and port is opened in this NIC if nobody holds
/// it (its CM then refuses a service nobody listens on, as a host's
/// kernel CM answers for its devices). An address some NIC already
/// serves is left alone. A device opened here stays open for the agent's
/// life, as `--open-all` keeps its devices. For a request of user `uid`,
/// only a device that user may open ([`crate::config::permit_device`]).
pub(crate) fn answer_for_local_peer(nic: &super::devices::Nic, op: &CmOp, uid: u32) {
    let peer = match op {
        CmOp::Connect(p) => p.peer,
        CmOp::Resolve(p) => p.peer,
        _ => return,
    };
    // Nobody holds the address if a socket can bind it (a device of this
    // NIC or of another holds its socket; so does a kernel's RoCE device).
    if !is_host_address(peer.ip()) || std::net::UdpSocket::bind(peer).is_err() {
        return;
    }
    let name = crate::config::discover()
        .ok()
        .and_then(|d| d.into_iter().find(|c| c.addr == peer.ip()))
        .map_or_else(|| "urdma-local".to_string(), |c| c.name);
    let agent_uid = nix::unistd::geteuid().as_raw();
    let Ok(name) = crate::config::permit_device(&name, peer.ip(), peer.port(), uid, agent_uid)
    else {
        return;
    };
    match nic.open_device(&name, peer.ip(), peer.port()) {
        // Held by the NIC's table from now on.
        Ok(dev) => drop(dev),
        Err(e) => tracing::debug!(%peer, error = %e, "peer's device not opened here"),
    }
}

/// Whether `ip` is an address of this host.
fn is_host_address(ip: std::net::IpAddr) -> bool {
    ip.is_loopback() || if_addrs::get_if_addrs().is_ok_and(|ifs| ifs.iter().any(|i| i.ip() == ip))
}

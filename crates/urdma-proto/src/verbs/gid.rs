//! GIDs: 128-bit port addresses; on RoCE v2 the IP address of the port.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// A 16-byte GID. On RoCE v2 an IPv4 address `a.b.c.d` appears as the
/// IPv4-mapped IPv6 address `::ffff:a.b.c.d`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The RoCE v2 GID of an IP address.
    pub fn from_ip(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    /// The IP address this GID stands for (IPv4 for mapped addresses).
    pub fn to_ip(self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }

    /// True for the all-zero GID.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl fmt::Display for Gid {
    /// Colon-separated 16-bit groups, as `ibv_devinfo` prints GIDs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_gid_is_mapped() {
        let g = Gid::from_ip("127.0.0.2".parse().unwrap());
        assert_eq!(g.to_string(), "0000:0000:0000:0000:0000:ffff:7f00:0002");
        assert_eq!(g.to_ip(), "127.0.0.2".parse::<IpAddr>().unwrap());
        let g6 = Gid::from_ip("fe80::1".parse().unwrap());
        assert_eq!(g6.to_ip(), "fe80::1".parse::<IpAddr>().unwrap());
        assert!(Gid::default().is_zero());
    }
}

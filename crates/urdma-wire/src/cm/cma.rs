//! The header the RDMA connection manager (rdma_cm) puts at the start of
//! the private data of a REQ or SIDR_REQ it sends for an IP address: the
//! addresses the connection is between, so that the listener can match
//! its bound address and report the peer's.
//!
//! ```text
//!  byte 0      version (0)
//!  byte 1      IP version in the high nibble (4 or 6)
//!  byte 2-3    the requester's port
//!  byte 4-19   source IP (IPv4: in the last 4 bytes, 12 zero bytes first)
//!  byte 20-35  destination IP (likewise)
//!  byte 36-    the consumer's private data
//! ```

use crate::WireError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Length of the header.
pub const CMA_HEADER_LEN: usize = 36;
/// The only header version.
pub const CMA_VERSION: u8 = 0;

/// rdma_cm's address header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaHeader {
    /// The requester's port.
    pub src_port: u16,
    /// The requester's address.
    pub src: IpAddr,
    /// The address the requester connects to.
    pub dst: IpAddr,
}

impl CmaHeader {
    /// The rdma_cm service ID of `port` in port space `ps` (TCP 0x0106,
    /// UDP 0x0111, IB 0x013F).
    pub fn service_id(ps: u16, port: u16) -> u64 {
        (u64::from(ps) << 16) | u64::from(port)
    }

    /// The port space and port of an rdma_cm service ID: ("TCP", 7471) for
    /// 0x0106_1d2f. None for a service ID outside rdma_cm's port spaces.
    pub fn port_of(service_id: u64) -> Option<(&'static str, u16)> {
        let space = match service_id >> 16 {
            0x0106 => "TCP",
            0x0111 => "UDP",
            0x013F => "IB",
            0x0002 => "IPoIB",
            _ => return None,
        };
        Some((space, service_id as u16))
    }

    /// Reads the header at the start of `private_data`.
    pub fn parse(private_data: &[u8]) -> Result<CmaHeader, WireError> {
        let h = private_data
            .get(..CMA_HEADER_LEN)
            .ok_or(WireError::Truncated(private_data.len()))?;
        let field = |at: usize| -> [u8; 16] {
            let mut a = [0; 16];
            if let Some(s) = h.get(at..at + 16) {
                a.copy_from_slice(s);
            }
            a
        };
        let version = h.first().copied().unwrap_or(0);
        if version != CMA_VERSION {
            return Err(WireError::BadCmaHeader(version));
        }
        let ip_version = h.get(1).copied().unwrap_or(0) >> 4;
        let src_port = u16::from_be_bytes([
            h.get(2).copied().unwrap_or(0),
            h.get(3).copied().unwrap_or(0),
        ]);
        let (src, dst) = match ip_version {
            4 => (ipv4(field(4)), ipv4(field(20))),
            6 => (
                IpAddr::V6(Ipv6Addr::from(field(4))),
                IpAddr::V6(Ipv6Addr::from(field(20))),
            ),
            v => return Err(WireError::BadCmaHeader(v)),
        };
        Ok(CmaHeader { src_port, src, dst })
    }

    /// Writes the header into the first [`CMA_HEADER_LEN`] bytes of
    /// `private_data`. Both addresses must be of one family.
    pub fn emit(&self, private_data: &mut [u8]) -> Result<(), WireError> {
        let out = private_data
            .get_mut(..CMA_HEADER_LEN)
            .ok_or(WireError::BufferTooSmall)?;
        let (ver, src, dst) = match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => (4u8, mapped(s), mapped(d)),
            (IpAddr::V6(s), IpAddr::V6(d)) => (6u8, s.octets(), d.octets()),
            _ => return Err(WireError::AddressFamily),
        };
        let mut h = [0u8; CMA_HEADER_LEN];
        h[0] = CMA_VERSION;
        h[1] = ver << 4;
        h[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        h[4..20].copy_from_slice(&src);
        h[20..36].copy_from_slice(&dst);
        out.copy_from_slice(&h);
        Ok(())
    }
}

fn ipv4(a: [u8; 16]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))
}

/// An IPv4 address as the header carries it: 12 zero bytes, then the
/// address.
fn mapped(a: Ipv4Addr) -> [u8; 16] {
    let mut out = [0; 16];
    out[12..].copy_from_slice(&a.octets());
    out
}

//! GID tables: which table the verbs' GID indexes (`sgid_index` in
//! `ibv_ah_attr`, `ibv_query_gid`) refer to, and how an index maps to the
//! engine's source address.
//!
//! The engine has one source GID (index 0: the RoCE v2 GID of its
//! address). In the drop-in library the verbs see exactly that table
//! ([`EngineGids`]). A provider for a kernel device reports the kernel's
//! table (the library reads it from the kernel), so an index names a
//! kernel entry; [`SysfsGids`] reads that table from sysfs and maps the
//! entry holding the engine's address to the engine's source, refusing
//! every other entry.

use crate::util::VResult;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use urdma::Gid;

/// The GID table of port 1 as the verbs see it.
pub trait GidTable: Send + Sync {
    /// Number of entries (`ibv_port_attr::gid_tbl_len`).
    fn len(&self) -> u32;
    /// True if the table has no entries.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The GID at `index`, if that entry is set.
    fn gid(&self, index: u32) -> Option<Gid>;
    /// The engine's source GID index for the table's `index`; `EINVAL`
    /// for an entry the engine cannot send from.
    fn engine_index(&self, index: u8) -> VResult<u8>;
    /// The table index of the engine's source GID index `engine`.
    fn table_index(&self, engine: u8) -> u8;
}

/// The engine's own table: indexes are the engine's.
pub struct EngineGids {
    gids: Vec<Option<Gid>>,
}

impl EngineGids {
    /// The table of an open engine device.
    pub fn new(device: &urdma::Device) -> Self {
        let n = device.port_attr().gid_tbl_len as usize;
        EngineGids {
            gids: (0..n).map(|i| device.gid(i)).collect(),
        }
    }
}

impl GidTable for EngineGids {
    fn len(&self) -> u32 {
        self.gids.len() as u32
    }
    fn gid(&self, index: u32) -> Option<Gid> {
        self.gids.get(index as usize).copied().flatten()
    }
    fn engine_index(&self, index: u8) -> VResult<u8> {
        match self.gid(u32::from(index)) {
            Some(_) => Ok(index),
            None => Err(libc::EINVAL),
        }
    }
    fn table_index(&self, engine: u8) -> u8 {
        engine
    }
}

/// Parse a GID as sysfs prints it (`0000:0000:0000:0000:0000:ffff:7f00:0001`).
pub fn parse_sysfs_gid(text: &str) -> Option<Gid> {
    let groups: Vec<&str> = text.trim().split(':').collect();
    if groups.len() != 8 {
        return None;
    }
    let mut raw = [0u8; 16];
    for (i, g) in groups.iter().enumerate() {
        if g.len() != 4 {
            return None;
        }
        let v = u16::from_str_radix(g, 16).ok()?;
        raw[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
    }
    Some(Gid(raw))
}

/// The IPv4 address of a RoCE v2 GID (`::ffff:a.b.c.d`), if it is one.
pub fn ipv4_of(gid: Gid) -> Option<Ipv4Addr> {
    match gid.to_ip() {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(_) => None,
    }
}

/// A kernel device's port table in sysfs (`.../ports/N`, holding `gids/`
/// and `gid_attrs/types/`).
pub struct SysfsGids {
    port_dir: PathBuf,
    source: Gid,
}

impl SysfsGids {
    /// The table under `port_dir`, whose entries equal to `source` (the
    /// engine's GID) map to the engine's source.
    pub fn new(port_dir: impl Into<PathBuf>, source: Gid) -> Self {
        SysfsGids {
            port_dir: port_dir.into(),
            source,
        }
    }

    /// The GID entry `index` with its type string (`RoCE v2`, ...).
    fn entry(&self, index: u32) -> Option<(Gid, String)> {
        entry(&self.port_dir, index)
    }

    fn usable(&self, index: u32) -> bool {
        matches!(self.entry(index), Some((g, t)) if g == self.source && t == "RoCE v2")
    }
}

fn entry(port_dir: &Path, index: u32) -> Option<(Gid, String)> {
    let gid = std::fs::read_to_string(port_dir.join("gids").join(index.to_string())).ok()?;
    let gid = parse_sysfs_gid(&gid)?;
    if gid.is_zero() {
        return None;
    }
    let ty = std::fs::read_to_string(
        port_dir
            .join("gid_attrs")
            .join("types")
            .join(index.to_string()),
    )
    .unwrap_or_default();
    Some((gid, ty.trim().to_string()))
}

/// Number of entries of a sysfs GID table.
fn sysfs_len(port_dir: &Path) -> u32 {
    std::fs::read_dir(port_dir.join("gids"))
        .map(|d| d.count() as u32)
        .unwrap_or(0)
}

/// The first RoCE v2 GID of the table under `port_dir` that carries an
/// IPv4 address: its index and address.
pub fn first_roce_v2_ipv4(port_dir: &Path) -> Option<(u32, Ipv4Addr)> {
    (0..sysfs_len(port_dir)).find_map(|i| {
        let (g, t) = entry(port_dir, i)?;
        (t == "RoCE v2").then_some(())?;
        ipv4_of(g).map(|a| (i, a))
    })
}

impl GidTable for SysfsGids {
    fn len(&self) -> u32 {
        sysfs_len(&self.port_dir)
    }
    fn gid(&self, index: u32) -> Option<Gid> {
        self.entry(index).map(|(g, _)| g)
    }
    fn engine_index(&self, index: u8) -> VResult<u8> {
        if self.usable(u32::from(index)) {
            Ok(0)
        } else {
            Err(libc::EINVAL)
        }
    }
    fn table_index(&self, _engine: u8) -> u8 {
        (0..self.len())
            .find(|&i| self.usable(i))
            .and_then(|i| u8::try_from(i).ok())
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_gids_parse() {
        let g = parse_sysfs_gid("0000:0000:0000:0000:0000:ffff:7f00:0001\n").unwrap();
        assert_eq!(ipv4_of(g), Some(Ipv4Addr::new(127, 0, 0, 1)));
        let g = parse_sysfs_gid("fe80:0000:0000:0000:0000:00ff:fe00:0000").unwrap();
        assert_eq!(ipv4_of(g), None);
        assert!(parse_sysfs_gid("fe80::1").is_none());
        assert!(parse_sysfs_gid("").is_none());
    }

    #[test]
    fn sysfs_table_maps_only_the_engine_address() {
        let dir = std::env::temp_dir().join(format!("urdma-gids-{}", std::process::id()));
        let port = dir.join("ports/1");
        std::fs::create_dir_all(port.join("gids")).unwrap();
        std::fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
        let put = |i: u32, gid: &str, ty: &str| {
            std::fs::write(port.join("gids").join(i.to_string()), gid).unwrap();
            std::fs::write(port.join("gid_attrs/types").join(i.to_string()), ty).unwrap();
        };
        put(0, "fe80:0000:0000:0000:0000:00ff:fe00:0001\n", "RoCE v2\n");
        put(1, "0000:0000:0000:0000:0000:ffff:a9fe:3d01\n", "RoCE v2\n");
        put(2, "0000:0000:0000:0000:0000:0000:0000:0000\n", "\n");
        assert_eq!(
            first_roce_v2_ipv4(&port),
            Some((1, Ipv4Addr::new(169, 254, 61, 1)))
        );
        let src = Gid::from_ip(IpAddr::V4(Ipv4Addr::new(169, 254, 61, 1)));
        let t = SysfsGids::new(&port, src);
        assert_eq!(t.len(), 3);
        assert_eq!(t.engine_index(1), Ok(0));
        assert_eq!(t.engine_index(0), Err(libc::EINVAL));
        assert_eq!(t.engine_index(2), Err(libc::EINVAL));
        assert_eq!(t.engine_index(7), Err(libc::EINVAL));
        assert_eq!(t.table_index(0), 1);
        assert!(t.gid(2).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! What `urdma run`'s device view holds: for each urdma device the
//! program will see, the files a kernel RDMA device has under
//! `/sys/class/infiniband/<dev>` and `/sys/class/infiniband_verbs/uverbsN`,
//! with the values the drop-in library reports for it (the same code
//! computes them), and the name of its `/dev/infiniband` node. See
//! docs/urdma-run.md, "The device view".

use std::path::PathBuf;
use urdma::DeviceConfig;
use urdma_verbs::sys::{ibv_port_attr, IBV_LINK_LAYER_ETHERNET, IBV_PORT_ACTIVE};

/// `/sys/class/infiniband_verbs/abi_version`: the uverbs ABI of Linux.
const UVERBS_ABI: &str = "6";
/// `.../uverbsN/abi_version`: the ABI of the device's driver.
const DRIVER_ABI: &str = "1";

/// One device of the view.
pub struct Device {
    /// Its name (`urdma0`): `/sys/class/infiniband/<name>`.
    pub name: String,
    /// Its uverbs name (`uverbs0`): `/dev/infiniband/<uverbs>`.
    pub uverbs: String,
    /// Every file of the device, relative to `/sys/class`, with its text.
    pub files: Vec<(PathBuf, String)>,
}

/// Where the view's values for a device's netdev come from: the files of
/// `/sys/class/net/<if>/device` when the interface has a device.
pub struct Locality {
    /// `numa_node` (`-1`: none).
    pub numa_node: String,
    /// `local_cpus`, a CPU mask as sysfs prints it.
    pub local_cpus: String,
}

/// A CPU mask as sysfs prints it (32-bit hex words, highest first, joined
/// by commas) of the CPUs `0..n`.
fn cpu_mask(n: usize) -> String {
    let words = n.div_ceil(32).max(1);
    (0..words)
        .rev()
        .map(|w| {
            let bits = n.saturating_sub(w * 32).min(32);
            let v: u32 = if bits == 32 {
                u32::MAX
            } else {
                (1 << bits) - 1
            };
            format!("{v:08x}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The number of CPUs the kernel may bring up (from a list such as
/// `0-3,8`, as `/sys/devices/system/cpu/possible` gives it): one past
/// the highest.
fn cpus_in(list: &str) -> Option<usize> {
    list.trim()
        .split(',')
        .filter_map(|r| r.rsplit('-').next()?.parse::<usize>().ok())
        .max()
        .map(|m| m + 1)
}

/// The locality of interface `netdev`: its device's, else no NUMA node
/// and every CPU.
pub fn locality(netdev: Option<&str>) -> Locality {
    let read = |f: &str| {
        let d = netdev?;
        let t = std::fs::read_to_string(format!("/sys/class/net/{d}/device/{f}")).ok()?;
        Some(t.trim().to_string())
    };
    let all = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|l| cpus_in(&l))
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1);
    Locality {
        numa_node: read("numa_node").unwrap_or_else(|| "-1".into()),
        local_cpus: read("local_cpus").unwrap_or_else(|| cpu_mask(all)),
    }
}

/// A GUID as sysfs prints it: four groups of four hex digits.
fn guid_text(g: u64) -> String {
    let b = g.to_be_bytes();
    b.chunks(2)
        .map(|p| format!("{:02x}{:02x}", p[0], p[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// `ports/N/rate` of a port: lanes times lane speed, as Linux prints it.
fn rate_text(p: &ibv_port_attr) -> String {
    let (gbps, speed) = match p.active_speed {
        1 => (2.5, "SDR"),
        2 => (5.0, "DDR"),
        4 => (10.0, "QDR"),
        8 => (10.0, "FDR10"),
        16 => (14.0, "FDR"),
        32 => (25.0, "EDR"),
        64 => (50.0, "HDR"),
        _ => (100.0, "NDR"),
    };
    let lanes = match p.active_width {
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 1,
    };
    format!("{} Gb/sec ({lanes}X {speed})", gbps * f64::from(lanes))
}

/// `ports/N/state` and `phys_state` texts.
fn state_texts(p: &ibv_port_attr) -> (String, String) {
    let state = match p.state {
        IBV_PORT_ACTIVE => "4: ACTIVE",
        _ => "1: DOWN",
    };
    let phys = match p.phys_state {
        5 => "5: LinkUp",
        3 => "3: Disabled",
        _ => "2: Polling",
    };
    (state.into(), phys.into())
}

/// The view of the device `config`, at `index` of the program's device
/// table, whose address is on `netdev` with `locality`; `node` is what
/// the device's `dev` file says (the placeholder node's `MAJOR:MINOR`).
pub fn device(
    config: &DeviceConfig,
    index: usize,
    netdev: Option<&str>,
    locality: &Locality,
    node: &str,
) -> Device {
    let attr = urdma::api::device_attr_for(config);
    let port = urdma_verbs::device::port_attr(&urdma::api::port_attr_for(&attr));
    let uverbs = urdma_verbs::device::uverbs_name(index);
    let dev = PathBuf::from("infiniband").join(&config.name);
    let p1 = dev.join("ports/1");
    let mut files: Vec<(PathBuf, String)> = vec![
        (dev.join("node_type"), "1: CA".into()),
        (dev.join("node_guid"), guid_text(attr.node_guid)),
        (dev.join("sys_image_guid"), guid_text(attr.sys_image_guid)),
        (dev.join("fw_ver"), attr.fw_ver.clone()),
        (dev.join("hca_type"), "urdma".into()),
        (dev.join("node_desc"), format!("urdma {}", config.addr)),
        (dev.join("device/numa_node"), locality.numa_node.clone()),
        (dev.join("device/local_cpus"), locality.local_cpus.clone()),
    ];
    let (state, phys) = state_texts(&port);
    let link_layer = if u32::from(port.link_layer) == IBV_LINK_LAYER_ETHERNET {
        "Ethernet"
    } else {
        "InfiniBand"
    };
    files.extend([
        (p1.join("state"), state),
        (p1.join("phys_state"), phys),
        (p1.join("link_layer"), link_layer.into()),
        (p1.join("rate"), rate_text(&port)),
        (p1.join("lid"), format!("0x{:x}", port.lid)),
        (p1.join("sm_lid"), format!("0x{:x}", port.sm_lid)),
        (p1.join("sm_sl"), port.sm_sl.to_string()),
        (p1.join("lid_mask_count"), port.lmc.to_string()),
        (
            p1.join("cap_mask"),
            format!("0x{:08x}", port.port_cap_flags),
        ),
        (p1.join("pkeys/0"), "0xffff".into()),
    ]);
    for i in 0..urdma::GID_TABLE_LEN as usize {
        let gid = urdma::api::gid_for(config, i);
        let text = gid.unwrap_or(urdma::Gid([0; 16])).to_string();
        files.push((p1.join(format!("gids/{i}")), text));
        // Linux refuses to read the attributes of an empty entry; here
        // they are absent.
        if gid.is_some() {
            files.push((p1.join(format!("gid_attrs/types/{i}")), "RoCE v2".into()));
            if let Some(nd) = netdev {
                files.push((p1.join(format!("gid_attrs/ndevs/{i}")), nd.to_string()));
            }
        }
    }
    let verbs = PathBuf::from("infiniband_verbs").join(&uverbs);
    files.extend([
        (verbs.join("ibdev"), config.name.clone()),
        (verbs.join("abi_version"), DRIVER_ABI.into()),
        (verbs.join("dev"), node.to_string()),
        (
            PathBuf::from("infiniband_verbs/abi_version"),
            UVERBS_ABI.into(),
        ),
    ]);
    Device {
        name: config.name.clone(),
        uverbs,
        files,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text<'a>(d: &'a Device, path: &str) -> Option<&'a str> {
        d.files
            .iter()
            .find(|(p, _)| p == std::path::Path::new(path))
            .map(|(_, t)| t.as_str())
    }

    #[test]
    fn a_device_reads_as_a_roce_v2_port_on_its_interface() {
        let cfg = DeviceConfig::new("127.0.0.2".parse().unwrap());
        let loc = Locality {
            numa_node: "-1".into(),
            local_cpus: cpu_mask(2),
        };
        let d = device(&cfg, 1, Some("lo"), &loc, "1:3");
        assert_eq!(d.uverbs, "uverbs1");
        let p = "infiniband/urdma0/ports/1/";
        assert_eq!(text(&d, &format!("{p}state")), Some("4: ACTIVE"));
        assert_eq!(text(&d, &format!("{p}phys_state")), Some("5: LinkUp"));
        assert_eq!(text(&d, &format!("{p}link_layer")), Some("Ethernet"));
        assert_eq!(text(&d, &format!("{p}rate")), Some("25 Gb/sec (1X EDR)"));
        assert_eq!(
            text(&d, &format!("{p}gids/0")),
            Some("0000:0000:0000:0000:0000:ffff:7f00:0002")
        );
        assert_eq!(
            text(&d, &format!("{p}gids/1")),
            Some("0000:0000:0000:0000:0000:0000:0000:0000")
        );
        assert_eq!(text(&d, &format!("{p}gid_attrs/types/0")), Some("RoCE v2"));
        assert_eq!(text(&d, &format!("{p}gid_attrs/ndevs/0")), Some("lo"));
        assert_eq!(text(&d, &format!("{p}gid_attrs/types/1")), None);
        assert_eq!(text(&d, "infiniband_verbs/uverbs1/ibdev"), Some("urdma0"));
        assert_eq!(text(&d, "infiniband_verbs/uverbs1/dev"), Some("1:3"));
        assert_eq!(text(&d, "infiniband/urdma0/device/numa_node"), Some("-1"));
        // The node GUID is the drop-in library's, as sysfs prints it.
        let guid = urdma::api::device_attr_for(&cfg).node_guid;
        let g = text(&d, "infiniband/urdma0/node_guid").unwrap();
        assert_eq!(u64::from_str_radix(&g.replace(':', ""), 16), Ok(guid));
        assert_eq!(g.len(), 19);
    }

    #[test]
    fn cpu_masks_are_sysfs_words() {
        assert_eq!(cpu_mask(2), "00000003");
        assert_eq!(cpu_mask(32), "ffffffff");
        assert_eq!(cpu_mask(40), "000000ff,ffffffff");
        assert_eq!(cpus_in("0-3\n"), Some(4));
        assert_eq!(cpus_in("0-3,8"), Some(9));
        assert_eq!(cpus_in("0"), Some(1));
        assert_eq!(cpus_in("garbage"), None);
    }
}

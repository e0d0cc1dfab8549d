//! Devices: discovery (`ibv_get_device_list`), the per-process shared
//! open device, and the attributes `ibv_query_device`/`ibv_query_port`
//! report.

use crate::events::{self, Routes};
use crate::gid::{EngineGids, GidTable};
use crate::handles::{self, Kind};
use crate::sys::*;
use crate::util::{copy_cstr, guard, ret_ptr, set_errno, VResult};
use std::collections::HashMap;
use std::net::IpAddr;
use std::os::raw::c_int;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use urdma::{DeviceAttr, DeviceConfig, PortAttr};

/// `ibv_port_attr::active_width`: 1X.
const WIDTH_1X: u8 = 1;
/// `ibv_port_attr::active_speed`: EDR (25 Gb/s per lane).
const SPEED_EDR: u8 = 32;
/// `ibv_port_attr::phys_state`: LinkUp.
const PHYS_STATE_LINK_UP: u8 = 5;
use crate::limits::{device_cap_flags, LOCAL_CA_ACK_DELAY, MAX_PKEYS};
pub use crate::limits::{MAX_AH, MAX_SRQ};

/// A device as `ibv_get_device_list` hands it out. Devices live for the
/// whole process, as libibverbs' do.
#[repr(C)]
pub struct Device {
    /// The C view; must stay the first field.
    pub ibv: ibv_device,
    /// Where the device lives.
    pub config: DeviceConfig,
    /// Position in the process's device table.
    pub index: c_int,
    /// Node GUID, host order.
    pub guid: u64,
}

// SAFETY: the C view holds only plain data (names, numbers) set once at
// creation; nothing mutates a Device after it is published.
unsafe impl Send for Device {}
// SAFETY: as above, read-only after creation.
unsafe impl Sync for Device {}

/// Every device this process has seen, never freed.
static DEVICES: LazyLock<Mutex<Vec<&'static Device>>> = LazyLock::new(Default::default);

/// Devices opened in this process, shared by every context on them.
static OPEN: LazyLock<Mutex<HashMap<String, Weak<DevShared>>>> = LazyLock::new(Default::default);

/// An open device shared by the contexts on it.
pub struct DevShared {
    /// The engine and its UDP socket.
    pub device: urdma::Device,
    /// Device attributes (limits the engine enforces).
    pub attr: DeviceAttr,
    /// Port 1.
    pub port: PortAttr,
    /// Index of the network interface carrying the address (0 if none).
    pub ifindex: u32,
    /// Event routing.
    pub routes: Arc<Routes>,
    /// Address handles alive.
    pub ahs: std::sync::atomic::AtomicU32,
    /// SRQs alive.
    pub srqs: std::sync::atomic::AtomicU32,
    /// The GID table the verbs' GID indexes refer to.
    pub gids: Box<dyn GidTable>,
}

impl Drop for DevShared {
    fn drop(&mut self) {
        self.device.link().on_events(None);
    }
}

impl DevShared {
    /// The GID at `index` of port 1's table (as the verbs see it).
    pub fn gid(&self, index: usize) -> Option<urdma::Gid> {
        self.gids.gid(u32::try_from(index).ok()?)
    }

    /// Port 1's attributes as the verbs see them (the GID table's length
    /// is the table's).
    pub fn port_attr(&self) -> PortAttr {
        let mut p = self.port.clone();
        p.gid_tbl_len = self.gids.len();
        p
    }

    /// UDP port of the device (and, by convention, of its peers).
    pub fn udp_port(&self) -> u16 {
        self.device.local_addr().port()
    }
}

fn key(c: &DeviceConfig) -> String {
    format!("{}@{}:{}", c.name, c.addr, c.port)
}

/// The network interface holding `addr` (its index, 0 if unknown, and
/// its name without an alias label); for a loopback address without its
/// own interface entry, the loopback interface.
pub fn netdev_of(addr: IpAddr) -> Option<(u32, String)> {
    let ifs = if_addrs::get_if_addrs().ok()?;
    let i = ifs.iter().find(|i| i.ip() == addr).or_else(|| {
        addr.is_loopback()
            .then(|| ifs.iter().find(|i| i.is_loopback()))
            .flatten()
    })?;
    let name = i.name.split(':').next().unwrap_or(&i.name).to_string();
    Some((i.index.unwrap_or(0), name))
}

/// Interface index of the interface holding `addr` ([`netdev_of`]; 0 if none).
fn ifindex_of(addr: IpAddr) -> u32 {
    netdev_of(addr).map_or(0, |(i, _)| i)
}

/// The name of the uverbs device node the device at `index` of the
/// process's device table gives (`ibv_device::dev_name`); UCX and
/// rdma-core look for `/dev/infiniband/` followed by it.
pub fn uverbs_name(index: usize) -> String {
    format!("uverbs{index}")
}

/// Open `config`'s device, or share the one already open in this process;
/// GID indexes are the engine's.
pub fn open_shared(config: &DeviceConfig) -> VResult<Arc<DevShared>> {
    open_shared_with(config, |d| Box::new(EngineGids::new(d)))
}

/// As [`open_shared`], with the GID table `gids` makes for the opened
/// engine device (used only when the device is not open yet).
pub fn open_shared_with(
    config: &DeviceConfig,
    gids: impl FnOnce(&urdma::Device) -> Box<dyn GidTable>,
) -> VResult<Arc<DevShared>> {
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    let k = key(config);
    if let Some(d) = open.get(&k).and_then(Weak::upgrade) {
        return Ok(d);
    }
    let device = urdma::Device::open(config.clone()).map_err(|e| e.errno())?;
    let routes = Arc::new(Routes::default());
    events::install(device.link(), routes.clone());
    let gids = gids(&device);
    let shared = Arc::new(DevShared {
        gids,
        attr: device.attr().clone(),
        port: device.port_attr(),
        ifindex: ifindex_of(config.addr),
        device,
        routes,
        ahs: Default::default(),
        srqs: Default::default(),
    });
    open.retain(|_, w| w.strong_count() > 0);
    open.insert(k, Arc::downgrade(&shared));
    Ok(shared)
}

fn make_device(config: DeviceConfig, index: usize) -> &'static Device {
    // SAFETY: ibv_device is plain C data; all-zero is a valid value.
    let mut ibv: ibv_device = unsafe { std::mem::zeroed() };
    ibv.node_type = IBV_NODE_CA;
    ibv.transport_type = IBV_TRANSPORT_IB;
    copy_cstr(&mut ibv.name, &config.name);
    let uverbs = uverbs_name(index);
    copy_cstr(&mut ibv.dev_name, &uverbs);
    copy_cstr(&mut ibv.dev_path, &format!("/dev/infiniband/{uverbs}"));
    copy_cstr(
        &mut ibv.ibdev_path,
        &format!("/sys/class/infiniband/{}", config.name),
    );
    // The GUID alone: the full attributes would also look up the
    // interface's MTU for every device listed.
    let guid = urdma::api::node_guid(&std::net::SocketAddr::new(config.addr, config.port));
    let d: &'static Device = Box::leak(Box::new(Device {
        ibv,
        config,
        index: index as c_int,
        guid,
    }));
    handles::register(&d.ibv as *const ibv_device, Kind::Device);
    d
}

/// The devices of this process now (`urdma::config::discover_for_programs`).
fn current_devices() -> VResult<Vec<&'static Device>> {
    let configs = urdma::config::discover_for_programs().map_err(|e| {
        eprintln!("urdma: no devices: {e}");
        e.errno()
    })?;
    let mut all = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = Vec::new();
    for c in configs {
        let d = match all.iter().find(|d| d.config == c) {
            Some(d) => *d,
            None => {
                let d = make_device(c, all.len());
                all.push(d);
                d
            }
        };
        out.push(d);
    }
    Ok(out)
}

/// Look up a live device handle.
pub fn device_ref<'a>(p: *const ibv_device) -> VResult<&'a Device> {
    if !handles::is_live(p, Kind::Device) {
        return Err(libc::EINVAL);
    }
    // SAFETY: registered devices are leaked Boxes, live forever, with
    // `ibv` as the first field of a repr(C) struct.
    Ok(unsafe { &*(p as *const Device) })
}

/// `ibv_get_device_list`
pub unsafe extern "C" fn get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    guard(std::ptr::null_mut(), || {
        ret_ptr((|| {
            let devs = current_devices()?;
            let mut list: Vec<*mut ibv_device> = devs
                .iter()
                .map(|d| &d.ibv as *const ibv_device as *mut ibv_device)
                .collect();
            let n = list.len();
            list.push(std::ptr::null_mut());
            let raw = Box::into_raw(list.into_boxed_slice()) as *mut *mut ibv_device;
            handles::register(raw, Kind::DeviceList);
            if !num_devices.is_null() {
                // SAFETY: the caller passes a pointer to an int or NULL.
                unsafe { *num_devices = n as c_int };
            }
            Ok(raw)
        })())
    })
}

/// `ibv_free_device_list`
pub unsafe extern "C" fn free_device_list(list: *mut *mut ibv_device) {
    guard((), || {
        if !handles::unregister(list, Kind::DeviceList) {
            set_errno(libc::EINVAL);
            return;
        }
        let mut n = 0;
        // SAFETY: a registered list is a leaked boxed slice ending in NULL.
        while !unsafe { *list.add(n) }.is_null() {
            n += 1;
        }
        // SAFETY: rebuilds the boxed slice of n + 1 entries leaked above.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n + 1)) });
    })
}

/// `ibv_get_device_name`
pub unsafe extern "C" fn get_device_name(device: *mut ibv_device) -> *const libc::c_char {
    guard(std::ptr::null(), || match device_ref(device) {
        Ok(d) => d.ibv.name.as_ptr(),
        Err(e) => {
            set_errno(e);
            std::ptr::null()
        }
    })
}

/// `ibv_get_device_guid`: the node GUID in network byte order.
pub unsafe extern "C" fn get_device_guid(device: *mut ibv_device) -> u64 {
    guard(0, || match device_ref(device) {
        Ok(d) => d.guid.to_be(),
        Err(e) => {
            set_errno(e);
            0
        }
    })
}

/// `ibv_get_device_index`
pub unsafe extern "C" fn get_device_index(device: *mut ibv_device) -> c_int {
    guard(-1, || match device_ref(device) {
        Ok(d) => d.index,
        Err(e) => {
            set_errno(e);
            -1
        }
    })
}

/// `struct ibv_device_attr` of a device.
pub fn device_attr(a: &DeviceAttr) -> ibv_device_attr {
    // SAFETY: plain C data; all-zero is valid.
    let mut d: ibv_device_attr = unsafe { std::mem::zeroed() };
    copy_cstr(&mut d.fw_ver, &a.fw_ver);
    d.node_guid = a.node_guid.to_be();
    d.sys_image_guid = a.sys_image_guid.to_be();
    d.max_mr_size = a.max_mr_size;
    d.page_size_cap = a.page_size_cap;
    d.vendor_id = a.vendor_id;
    d.vendor_part_id = a.vendor_part_id;
    d.hw_ver = a.hw_ver;
    let i = |v: u32| v.min(i32::MAX as u32) as c_int;
    d.max_qp = i(a.max_qp);
    d.max_qp_wr = i(a.max_qp_wr);
    // Memory windows and SRQ resizing are the drop-in library's (the
    // kernel module's devices have neither for kernel consumers), so they
    // are not in the flags shared with the module.
    d.device_cap_flags = device_cap_flags()
        | IBV_DEVICE_MEM_WINDOW
        | IBV_DEVICE_MEM_WINDOW_TYPE_2B
        | IBV_DEVICE_SRQ_RESIZE;
    d.max_sge = i(a.max_sge);
    d.max_sge_rd = i(a.max_sge);
    d.max_cq = i(a.max_cq);
    d.max_cqe = i(a.max_cqe);
    d.max_mr = i(a.max_mr);
    d.max_mw = i(a.max_mw);
    d.max_pd = i(a.max_pd);
    d.max_qp_rd_atom = i(a.max_qp_rd_atom);
    d.max_res_rd_atom = i(a.max_qp_rd_atom.saturating_mul(a.max_qp));
    d.max_qp_init_rd_atom = i(a.max_qp_init_rd_atom);
    d.atomic_cap = IBV_ATOMIC_HCA;
    d.max_ah = i(MAX_AH);
    d.max_srq = i(MAX_SRQ);
    d.max_srq_wr = i(a.max_qp_wr);
    d.max_srq_sge = i(a.max_sge);
    d.max_pkeys = MAX_PKEYS;
    d.local_ca_ack_delay = LOCAL_CA_ACK_DELAY;
    d.phys_port_cnt = a.phys_port_cnt;
    d
}

/// `struct ibv_port_attr` of port 1.
pub fn port_attr(p: &PortAttr) -> ibv_port_attr {
    // SAFETY: plain C data; all-zero is valid.
    let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
    a.state = if p.state == 4 {
        IBV_PORT_ACTIVE
    } else {
        IBV_PORT_DOWN
    };
    a.max_mtu = p.max_mtu as ibv_mtu;
    a.active_mtu = p.active_mtu as ibv_mtu;
    a.gid_tbl_len = p.gid_tbl_len as c_int;
    a.port_cap_flags = IBV_PORT_IP_BASED_GIDS;
    a.max_msg_sz = p.max_msg_sz;
    a.pkey_tbl_len = p.pkey_tbl_len;
    a.max_vl_num = 1;
    a.active_width = WIDTH_1X;
    a.active_speed = SPEED_EDR;
    a.phys_state = if p.state == 4 {
        PHYS_STATE_LINK_UP
    } else {
        p.phys_state
    };
    a.link_layer = if p.link_layer_ethernet {
        IBV_LINK_LAYER_ETHERNET as u8
    } else {
        IBV_LINK_LAYER_INFINIBAND as u8
    };
    a.flags = IB_UVERBS_QPF_GRH_REQUIRED as u8;
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_consistent() {
        let cfg = DeviceConfig::new("127.0.0.1".parse().unwrap());
        let a = urdma::api::device_attr_for(&cfg);
        let d = device_attr(&a);
        assert_eq!(u64::from_be(d.node_guid), a.node_guid);
        assert_eq!(d.max_qp_wr as u32, a.max_qp_wr);
        assert_eq!(d.max_srq_wr, d.max_qp_wr);
        assert_eq!(d.phys_port_cnt, 1);
        assert!(d.max_res_rd_atom >= d.max_qp_rd_atom);
        let p = PortAttr {
            state: 4,
            max_mtu: urdma::Mtu::Mtu4096,
            active_mtu: urdma::Mtu::Mtu4096,
            gid_tbl_len: 1,
            pkey_tbl_len: 1,
            max_msg_sz: 1 << 31,
            phys_state: 5,
            link_layer_ethernet: true,
        };
        let pa = port_attr(&p);
        assert_eq!(pa.state, IBV_PORT_ACTIVE);
        assert_eq!(pa.active_mtu, IBV_MTU_4096);
        assert_eq!(pa.link_layer as u32, IBV_LINK_LAYER_ETHERNET);
    }

    #[test]
    fn loopback_addresses_map_to_the_loopback_interface() {
        let a = ifindex_of("127.0.0.1".parse().unwrap());
        assert!(a > 0);
        assert_eq!(ifindex_of("127.0.0.9".parse().unwrap()), a);
    }
}

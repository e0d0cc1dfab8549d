//! The rest of the public API: fork support, sysfs helpers, the kernel
//! ABI converters, L2 address resolution, ECE, data ordering, and the
//! calls urdma has nothing behind (multicast, imports, dma-buf, rereg).

use crate::context::Context;
use crate::qp::Qp;
use crate::sys::*;
use crate::util::{ensure, guard, ret_errno, ret_minus1, set_errno, VResult};
use std::ffi::{CStr, CString};
use std::net::IpAddr;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::LazyLock;
use urdma::{Gid, QpType};

/// `ibv_fork_init`: urdma reaches registered memory with CPU copies from
/// its own threads, never by DMA to pinned pages, so forking is safe
/// without any preparation.
pub extern "C" fn fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: fork support is not needed.
pub extern "C" fn is_fork_initialized() -> ibv_fork_status {
    IBV_FORK_UNNEEDED
}

/// `ibv_dontfork_range` (nothing to do, see [`fork_init`]).
pub extern "C" fn dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `ibv_dofork_range` (nothing to do, see [`fork_init`]).
pub extern "C" fn dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

static SYSFS: LazyLock<CString> = LazyLock::new(|| {
    let p = std::env::var("SYSFS_PATH").unwrap_or_else(|_| "/sys".into());
    CString::new(p.trim_end_matches('/')).unwrap_or_else(|_| c"/sys".to_owned())
});

/// `ibv_get_sysfs_path`
pub extern "C" fn get_sysfs_path() -> *const c_char {
    SYSFS.as_ptr()
}

/// `ibv_read_sysfs_file`: read `dir/file` into `buf` (NUL-terminated,
/// trailing newline removed); the length, or -1 with errno.
pub unsafe extern "C" fn read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    guard(-1, || {
        let r = (|| -> VResult<c_int> {
            ensure(
                !dir.is_null() && !file.is_null() && !buf.is_null(),
                libc::EINVAL,
            )?;
            ensure(size > 0, libc::EINVAL)?;
            // SAFETY: the caller passes NUL-terminated strings.
            let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
            use std::os::unix::ffi::OsStrExt;
            let path = std::path::Path::new(std::ffi::OsStr::from_bytes(d.to_bytes()))
                .join(std::ffi::OsStr::from_bytes(f.to_bytes()));
            let data = std::fs::read(path).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
            let mut n = data.len().min(size - 1);
            if n > 0 && data[n - 1] == b'\n' {
                n -= 1;
            }
            // SAFETY: buf holds size bytes and n < size.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
            Ok(n as c_int)
        })();
        r.unwrap_or_else(|e| {
            set_errno(e);
            -1
        })
    })
}

/// `ibv_copy_ah_attr_from_kern`
pub unsafe extern "C" fn copy_ah_attr_from_kern(
    dst: *mut ibv_ah_attr,
    src: *mut ib_uverbs_ah_attr,
) {
    guard((), || {
        if dst.is_null() || src.is_null() {
            return set_errno(libc::EINVAL);
        }
        // SAFETY: both non-NULL pointers to the caller's structs.
        let (d, s) = unsafe { (&mut *dst, &*src) };
        ah_from_kern(d, s);
    })
}

fn ah_from_kern(d: &mut ibv_ah_attr, s: &ib_uverbs_ah_attr) {
    d.grh.dgid.raw = s.grh.dgid;
    d.grh.flow_label = s.grh.flow_label;
    d.grh.sgid_index = s.grh.sgid_index;
    d.grh.hop_limit = s.grh.hop_limit;
    d.grh.traffic_class = s.grh.traffic_class;
    d.dlid = s.dlid;
    d.sl = s.sl;
    d.src_path_bits = s.src_path_bits;
    d.static_rate = s.static_rate;
    d.is_global = s.is_global;
    d.port_num = s.port_num;
}

/// `ibv_copy_qp_attr_from_kern` (the state itself is not copied, as in
/// libibverbs).
pub unsafe extern "C" fn copy_qp_attr_from_kern(
    dst: *mut ibv_qp_attr,
    src: *mut ib_uverbs_qp_attr,
) {
    guard((), || {
        if dst.is_null() || src.is_null() {
            return set_errno(libc::EINVAL);
        }
        // SAFETY: both non-NULL pointers to the caller's structs.
        let (d, s) = unsafe { (&mut *dst, &*src) };
        d.cur_qp_state = s.cur_qp_state;
        d.path_mtu = s.path_mtu;
        d.path_mig_state = s.path_mig_state;
        d.qkey = s.qkey;
        d.rq_psn = s.rq_psn;
        d.sq_psn = s.sq_psn;
        d.dest_qp_num = s.dest_qp_num;
        d.qp_access_flags = s.qp_access_flags;
        d.cap.max_send_wr = s.max_send_wr;
        d.cap.max_recv_wr = s.max_recv_wr;
        d.cap.max_send_sge = s.max_send_sge;
        d.cap.max_recv_sge = s.max_recv_sge;
        d.cap.max_inline_data = s.max_inline_data;
        ah_from_kern(&mut d.ah_attr, &s.ah_attr);
        ah_from_kern(&mut d.alt_ah_attr, &s.alt_ah_attr);
        d.pkey_index = s.pkey_index;
        d.alt_pkey_index = s.alt_pkey_index;
        d.en_sqd_async_notify = s.en_sqd_async_notify;
        d.sq_draining = s.sq_draining;
        d.max_rd_atomic = s.max_rd_atomic;
        d.max_dest_rd_atomic = s.max_dest_rd_atomic;
        d.min_rnr_timer = s.min_rnr_timer;
        d.port_num = s.port_num;
        d.timeout = s.timeout;
        d.retry_cnt = s.retry_cnt;
        d.rnr_retry = s.rnr_retry;
        d.alt_port_num = s.alt_port_num;
        d.alt_timeout = s.alt_timeout;
    })
}

macro_rules! copy_path_rec {
    ($d:expr, $s:expr, $dgid:expr, $sgid:expr) => {{
        $dgid;
        $sgid;
        $d.dlid = $s.dlid;
        $d.slid = $s.slid;
        $d.raw_traffic = $s.raw_traffic as _;
        $d.flow_label = $s.flow_label;
        $d.hop_limit = $s.hop_limit;
        $d.traffic_class = $s.traffic_class;
        $d.reversible = $s.reversible as _;
        $d.numb_path = $s.numb_path;
        $d.pkey = $s.pkey;
        $d.sl = $s.sl;
        $d.mtu_selector = $s.mtu_selector;
        $d.mtu = $s.mtu as _;
        $d.rate_selector = $s.rate_selector;
        $d.rate = $s.rate;
        $d.packet_life_time = $s.packet_life_time;
        $d.preference = $s.preference;
        $d.packet_life_time_selector = $s.packet_life_time_selector;
    }};
}

/// `ibv_copy_path_rec_from_kern`
pub unsafe extern "C" fn copy_path_rec_from_kern(
    dst: *mut ibv_sa_path_rec,
    src: *mut ib_user_path_rec,
) {
    guard((), || {
        if dst.is_null() || src.is_null() {
            return set_errno(libc::EINVAL);
        }
        // SAFETY: both non-NULL pointers to the caller's structs.
        let (d, s) = unsafe { (&mut *dst, &*src) };
        copy_path_rec!(d, s, d.dgid.raw = s.dgid, d.sgid.raw = s.sgid);
    })
}

/// `ibv_copy_path_rec_to_kern`
pub unsafe extern "C" fn copy_path_rec_to_kern(
    dst: *mut ib_user_path_rec,
    src: *mut ibv_sa_path_rec,
) {
    guard((), || {
        if dst.is_null() || src.is_null() {
            return set_errno(libc::EINVAL);
        }
        // SAFETY: both non-NULL pointers to the caller's structs; every
        // bit pattern of a GID union is a valid byte array.
        let (d, s) = unsafe { (&mut *dst, &*src) };
        // SAFETY: as above.
        let (dg, sg) = unsafe { (s.dgid.raw, s.sgid.raw) };
        copy_path_rec!(d, s, d.dgid = dg, d.sgid = sg);
    })
}

/// The MAC address of the interface holding `ip` (all zero for loopback).
fn local_mac(ip: IpAddr) -> Option<[u8; 6]> {
    let ifs = if_addrs::get_if_addrs().ok()?;
    let itf = ifs
        .iter()
        .find(|i| i.ip() == ip)
        .or_else(|| ifs.iter().find(|i| ip.is_loopback() && i.is_loopback()))?;
    if itf.is_loopback() {
        return Some([0; 6]);
    }
    let text = std::fs::read_to_string(format!("/sys/class/net/{}/address", itf.name)).ok()?;
    parse_mac(text.trim())
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut m {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

/// The MAC address an IPv6 link-local address made from one (its
/// interface ID an EUI-64: `ff:fe` in the middle, the universal/local bit
/// inverted) stands for.
fn eui64_mac(ip: IpAddr) -> Option<[u8; 6]> {
    let IpAddr::V6(v6) = ip else { return None };
    let o = v6.octets();
    let link_local = o[0] == 0xfe && o[1] & 0xc0 == 0x80;
    (link_local && o[11] == 0xff && o[12] == 0xfe)
        .then(|| [o[8] ^ 0x02, o[9], o[10], o[13], o[14], o[15]])
}

/// The MAC address the kernel's ARP table holds for `ip`, or that an
/// IPv6 link-local address names.
fn neighbour_mac(ip: IpAddr) -> Option<[u8; 6]> {
    if let Some(mac) = eui64_mac(ip) {
        return Some(mac);
    }
    let IpAddr::V4(v4) = ip else { return None };
    let text = std::fs::read_to_string("/proc/net/arp").ok()?;
    text.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.first()? == &v4.to_string()).then(|| parse_mac(f.get(3)?))?
    })
}

fn resolve_l2(c: &Context, attr: &ibv_ah_attr) -> VResult<([u8; 6], u16)> {
    ensure(attr.port_num == 1, libc::EINVAL)?;
    c.dev
        .gid(usize::from(attr.grh.sgid_index))
        .ok_or(libc::EINVAL)?;
    // SAFETY: every bit pattern of the GID union is a valid byte array.
    let ip = Gid(unsafe { attr.grh.dgid.raw }).to_ip();
    let mac = local_mac(ip)
        .or_else(|| neighbour_mac(ip))
        .ok_or(libc::EHOSTUNREACH)?;
    Ok((mac, 0xffff))
}

/// `ibv_resolve_eth_l2_from_gid`: the Ethernet address of the GID's IP
/// (local interface, or the kernel's neighbour table); no VLAN (0xffff).
/// 0, or a negative errno.
pub unsafe extern "C" fn resolve_eth_l2_from_gid(
    context: *mut ibv_context,
    attr: *mut ibv_ah_attr,
    eth_mac: *mut u8,
    vid: *mut u16,
) -> c_int {
    guard(-libc::EIO, || {
        let r = (|| {
            let c = Context::from_ptr(context)?;
            ensure(!attr.is_null() && !eth_mac.is_null(), libc::EINVAL)?;
            // SAFETY: non-NULL pointer to the caller's attributes.
            let (mac, v) = resolve_l2(c, unsafe { &*attr })?;
            // SAFETY: eth_mac holds 6 bytes; vid is NULL or the caller's.
            unsafe {
                std::ptr::copy_nonoverlapping(mac.as_ptr(), eth_mac, 6);
                if !vid.is_null() {
                    *vid = v;
                }
            }
            Ok(())
        })();
        match r {
            Ok(()) => 0,
            Err(e) => {
                set_errno(e);
                -e
            }
        }
    })
}

/// `ibv_query_ece`: urdma has no enhanced connection establishment.
pub unsafe extern "C" fn query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            Qp::from_ptr(qp)?;
            ensure(!ece.is_null(), libc::EINVAL)?;
            Err(libc::EOPNOTSUPP)
        })())
    })
}

/// `ibv_set_ece`: see [`query_ece`].
pub unsafe extern "C" fn set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
    // SAFETY: same contract.
    unsafe { query_ece(qp, ece) }
}

/// `ibv_query_qp_data_in_order`: 1 when the data of a whole message is
/// known to land in order. The responder places each message's packets
/// strictly in PSN order, so it does on RC and UC QPs for SEND and RDMA
/// WRITE.
pub unsafe extern "C" fn query_qp_data_in_order(
    qp: *mut ibv_qp,
    op: ibv_wr_opcode,
    _flags: u32,
) -> c_int {
    guard(0, || {
        let Ok(q) = Qp::from_ptr(qp) else {
            set_errno(libc::EINVAL);
            return 0;
        };
        let op_ok = matches!(
            op,
            IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM
        );
        c_int::from(q.qp_type != QpType::Ud && op_ok)
    })
}

/// `ibv_attach_mcast`: urdma has no multicast.
pub unsafe extern "C" fn attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, _lid: u16) -> c_int {
    guard(libc::EIO, || {
        ret_errno((|| {
            Qp::from_ptr(qp)?;
            ensure(!gid.is_null(), libc::EINVAL)?;
            Err(libc::EOPNOTSUPP)
        })())
    })
}

/// `ibv_detach_mcast`: see [`attach_mcast`].
pub unsafe extern "C" fn detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: same contract.
    unsafe { attach_mcast(qp, gid, lid) }
}

/// `ibv_reg_dmabuf_mr`: urdma cannot reach device memory.
pub unsafe extern "C" fn reg_dmabuf_mr(
    pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    guard(std::ptr::null_mut(), || {
        let e = crate::pd::Pd::from_ptr(pd).map_or(libc::EINVAL, |_| libc::EOPNOTSUPP);
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// `ibv_import_device`: urdma contexts are not backed by a command fd.
pub extern "C" fn import_device(_cmd_fd: c_int) -> *mut ibv_context {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// `ibv_import_pd`: objects cannot be shared across processes.
pub extern "C" fn import_pd(_context: *mut ibv_context, _handle: u32) -> *mut ibv_pd {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// `ibv_import_mr`: see [`import_pd`].
pub extern "C" fn import_mr(_pd: *mut ibv_pd, _handle: u32) -> *mut ibv_mr {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// `ibv_import_dm`: urdma has no device memory.
pub extern "C" fn import_dm(_context: *mut ibv_context, _handle: u32) -> *mut ibv_dm {
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// `ibv_unimport_pd`: nothing can have been imported.
pub extern "C" fn unimport_pd(_pd: *mut ibv_pd) {}

/// `ibv_unimport_mr`: nothing can have been imported.
pub extern "C" fn unimport_mr(_mr: *mut ibv_mr) {}

/// `ibv_unimport_dm`: nothing can have been imported.
pub extern "C" fn unimport_dm(_dm: *mut ibv_dm) {}

/// Used by the C shim's `ibv_read_ibdev_sysfs_file`: no urdma device has
/// a sysfs directory.
pub fn no_sysfs() -> c_int {
    ret_minus1(Err(libc::ENODEV))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse() {
        assert_eq!(
            parse_mac("02:75:7f:00:00:01"),
            Some([2, 0x75, 0x7f, 0, 0, 1])
        );
        assert_eq!(parse_mac("02:75"), None);
        assert_eq!(parse_mac("02:75:7f:00:00:01:02"), None);
        assert_eq!(local_mac("127.0.0.1".parse().unwrap()), Some([0; 6]));
    }

    #[test]
    fn link_local_addresses_name_their_mac() {
        let ip = "fe80::fc:ff:fe00:1".parse().unwrap();
        assert_eq!(eui64_mac(ip), Some([0x02, 0xfc, 0, 0, 0, 1]));
        assert_eq!(neighbour_mac(ip), Some([0x02, 0xfc, 0, 0, 0, 1]));
        assert_eq!(eui64_mac("fe80::1".parse().unwrap()), None);
        assert_eq!(eui64_mac("::ffff:127.0.0.1".parse().unwrap()), None);
    }

    #[test]
    fn sysfs_file_reads_strip_newline() {
        let dir = std::env::temp_dir().join(format!("urdma-sysfs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("fw_ver"), "1.2.3\n").unwrap();
        let d = CString::new(dir.to_str().unwrap()).unwrap();
        let mut buf = [0 as c_char; 16];
        // SAFETY: valid strings and buffer.
        let n = unsafe { read_sysfs_file(d.as_ptr(), c"fw_ver".as_ptr(), buf.as_mut_ptr(), 16) };
        assert_eq!(n, 5);
        // SAFETY: NUL-terminated by the call.
        assert_eq!(
            unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap(),
            "1.2.3"
        );
        // SAFETY: valid strings and buffer.
        let n = unsafe { read_sysfs_file(d.as_ptr(), c"nope".as_ptr(), buf.as_mut_ptr(), 16) };
        assert_eq!(n, -1);
        std::fs::remove_dir_all(dir).unwrap();
    }
}

//! Names of enum values (`ibv_*_str`) and static rate conversions.

use crate::sys::*;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int};

fn pick(table: &[&'static CStr], v: i64) -> *const c_char {
    usize::try_from(v)
        .ok()
        .and_then(|i| table.get(i))
        .copied()
        .unwrap_or(c"unknown")
        .as_ptr()
}

/// `ibv_wc_status_str`
pub extern "C" fn wc_status_str(status: ibv_wc_status) -> *const c_char {
    const T: [&CStr; 24] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM software rendezvous",
    ];
    pick(&T, i64::from(status))
}

/// `ibv_event_type_str`
pub extern "C" fn event_type_str(event: ibv_event_type) -> *const c_char {
    const T: [&CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    pick(&T, i64::from(event))
}

/// `ibv_node_type_str`
pub extern "C" fn node_type_str(node_type: ibv_node_type) -> *const c_char {
    const T: [&CStr; 7] = [
        c"InfiniBand channel adapter",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP NIC",
        c"usNIC",
        c"usNIC UDP",
        c"unspecified",
    ];
    // IBV_NODE_CA is 1: the table starts there.
    pick(&T, i64::from(node_type) - i64::from(IBV_NODE_CA))
}

/// `ibv_port_state_str`
pub extern "C" fn port_state_str(port_state: ibv_port_state) -> *const c_char {
    const T: [&CStr; 6] = [
        c"no state change (NOP)",
        c"down",
        c"init",
        c"armed",
        c"active",
        c"active defer",
    ];
    pick(&T, i64::from(port_state))
}

/// Each static rate with its multiple of 2.5 Gb/s (0: none) and its
/// speed in Mb/s.
const RATES: [(ibv_rate, c_int, c_int); 23] = [
    (IBV_RATE_2_5_GBPS, 1, 2500),
    (IBV_RATE_5_GBPS, 2, 5000),
    (IBV_RATE_10_GBPS, 4, 10000),
    (IBV_RATE_20_GBPS, 8, 20000),
    (IBV_RATE_30_GBPS, 12, 30000),
    (IBV_RATE_40_GBPS, 16, 40000),
    (IBV_RATE_60_GBPS, 24, 60000),
    (IBV_RATE_80_GBPS, 32, 80000),
    (IBV_RATE_120_GBPS, 48, 120000),
    (IBV_RATE_14_GBPS, 0, 14062),
    (IBV_RATE_56_GBPS, 0, 56250),
    (IBV_RATE_112_GBPS, 0, 112500),
    (IBV_RATE_168_GBPS, 0, 168750),
    (IBV_RATE_25_GBPS, 0, 25781),
    (IBV_RATE_100_GBPS, 0, 103125),
    (IBV_RATE_200_GBPS, 0, 206250),
    (IBV_RATE_300_GBPS, 0, 309375),
    (IBV_RATE_28_GBPS, 11, 28125),
    (IBV_RATE_50_GBPS, 20, 53125),
    (IBV_RATE_400_GBPS, 160, 425000),
    (IBV_RATE_600_GBPS, 240, 637500),
    (IBV_RATE_800_GBPS, 320, 850000),
    (IBV_RATE_1200_GBPS, 480, 1275000),
];

/// `ibv_rate_to_mult`: the multiple of 2.5 Gb/s, or -1.
pub extern "C" fn rate_to_mult(rate: ibv_rate) -> c_int {
    RATES
        .iter()
        .find(|r| r.0 == rate && r.1 != 0)
        .map_or(-1, |r| r.1)
}

/// `mult_to_ibv_rate`
pub extern "C" fn mult_to_rate(mult: c_int) -> ibv_rate {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult != 0)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

/// `ibv_rate_to_mbps`: the speed in Mb/s, or -1.
pub extern "C" fn rate_to_mbps(rate: ibv_rate) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

/// `mbps_to_ibv_rate`
pub extern "C" fn mbps_to_rate(mbps: c_int) -> ibv_rate {
    RATES
        .iter()
        .find(|r| r.2 == mbps)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(p: *const c_char) -> &'static str {
        // SAFETY: every pointer returned points to a static C string.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap()
    }

    #[test]
    fn names() {
        assert_eq!(s(wc_status_str(IBV_WC_SUCCESS)), "success");
        assert_eq!(
            s(wc_status_str(IBV_WC_RETRY_EXC_ERR)),
            "transport retry counter exceeded"
        );
        assert_eq!(
            s(wc_status_str(IBV_WC_TM_RNDV_INCOMPLETE)),
            "TM software rendezvous"
        );
        assert_eq!(s(wc_status_str(1000)), "unknown");
        assert_eq!(s(event_type_str(IBV_EVENT_WQ_FATAL)), "WQ fatal");
        assert_eq!(s(node_type_str(IBV_NODE_CA)), "InfiniBand channel adapter");
        assert_eq!(s(node_type_str(IBV_NODE_UNSPECIFIED)), "unspecified");
        assert_eq!(s(node_type_str(IBV_NODE_UNKNOWN)), "unknown");
        assert_eq!(s(port_state_str(IBV_PORT_ACTIVE)), "active");
        assert_eq!(s(port_state_str(77)), "unknown");
    }

    #[test]
    fn rates() {
        assert_eq!(rate_to_mult(IBV_RATE_10_GBPS), 4);
        assert_eq!(rate_to_mult(IBV_RATE_25_GBPS), -1);
        assert_eq!(mult_to_rate(48), IBV_RATE_120_GBPS);
        assert_eq!(mult_to_rate(3), IBV_RATE_MAX);
        assert_eq!(rate_to_mbps(IBV_RATE_100_GBPS), 103125);
        assert_eq!(mbps_to_rate(53125), IBV_RATE_50_GBPS);
        assert_eq!(mbps_to_rate(1), IBV_RATE_MAX);
    }
}

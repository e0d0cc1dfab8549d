//! UD requests: single-packet SENDs with no PSN order. They take the steps
//! of the chain that apply to them (Q_Key, length, receive WQE) and land
//! in the receive buffer after the 40-byte GRH area.

use super::check::{header, take_recv};
use super::error::{Refusal, RespError};
use super::execute::{place, recv_wc};
use crate::engine::dma::Body;
use crate::engine::qp::QpCtx;
use crate::engine::Ctx;
use crate::types::{WcFlags, WcOpcode};
use std::net::SocketAddr;
use urdma_wire::{Packet, GRH_LEN};

/// Check and execute a UD request: its Q_Key, its length, a receive WQE,
/// then the GRH and the payload into that WQE.
pub(super) fn request(qp: &mut QpCtx, cx: &mut Ctx<'_>, pkt: &Packet<'_>) -> Result<(), Refusal> {
    let deth = header(pkt.repr.deth)?;
    if deth.qkey != qp.attr.qkey {
        return Err(RespError::InvalidRequest.into());
    }
    if pkt.payload.len() > qp.mtu() {
        return Err(RespError::Length.into());
    }
    let wqe = take_recv(qp, cx)?;
    let grh = received_grh(cx.last_src, cx.local_for(cx.last_src), pkt);
    let (wqe, total) = place(wqe, 0, &[Body::Bytes(&grh), cx.body(pkt.payload)])?;
    let mut wc = recv_wc(qp, &wqe, WcOpcode::Recv, total, deth.src_qp, pkt);
    wc.wc_flags |= WcFlags::GRH;
    wc.sl = roce_packet_type(&grh);
    // Release the buffers before the completion becomes visible.
    drop(wqe);
    qp.push_wc(cx, wc, true, pkt.repr.bth.solicited);
    Ok(())
}

/// `ibv_wc::sl` of a UD receive on RoCE: not a service level (RoCE v2 has
/// none on the wire) but the kind of network header the GRH area holds,
/// as mlx5 devices report it to user space: bit 3 set for a RoCE v2
/// (UDP) packet, bits 2:0 the L3 header, 2 for IPv4 and 1 for IPv6. UCX
/// reads these bits to find the destination address in the GRH area (the
/// last 4 bytes for IPv4, else the last 16).
fn roce_packet_type(grh: &[u8; GRH_LEN]) -> u8 {
    const UDP: u8 = 0x8;
    const L3_IPV6: u8 = 0x1;
    const L3_IPV4: u8 = 0x2;
    // An IPv4 area starts with 20 zero bytes, an IPv6 one with version 6.
    UDP | if grh[0] >> 4 == 6 { L3_IPV6 } else { L3_IPV4 }
}

/// The GRH area of `pkt`, received from `src` at `dst`.
pub(in crate::engine) fn received_grh(
    src: SocketAddr,
    dst: SocketAddr,
    pkt: &Packet<'_>,
) -> [u8; GRH_LEN] {
    let udp_len = 8
        + pkt.repr.header_len()
        + pkt.payload.len()
        + pkt.repr.bth.pad_count as usize
        + urdma_wire::ICRC_LEN;
    grh_bytes(src, dst, udp_len)
}

/// The 40-byte GRH area as RoCE v2 presents it: for IPv4, 20 zero bytes
/// then the IPv4 header; for IPv6, the IPv6 header.
fn grh_bytes(src: SocketAddr, dst: SocketAddr, udp_len: usize) -> [u8; GRH_LEN] {
    let udp_len = u16::try_from(udp_len).unwrap_or(u16::MAX);
    let mut g = [0u8; GRH_LEN];
    urdma_wire::GrhRepr::new(src.ip(), dst.ip(), udp_len).emit(&mut g);
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packet_type_names_the_header_in_the_grh_area() {
        let v4 = grh_bytes(
            "127.0.0.1:4791".parse().unwrap(),
            "127.0.0.2:4791".parse().unwrap(),
            100,
        );
        let v6 = grh_bytes(
            "[fd00::1]:4791".parse().unwrap(),
            "[fd00::2]:4791".parse().unwrap(),
            100,
        );
        // As UCX reads it: the L3 type in the low 3 bits.
        assert_eq!(roce_packet_type(&v4) & 0x7, 2);
        assert_eq!(roce_packet_type(&v6) & 0x7, 1);
        // Both came over UDP (RoCE v2).
        assert_eq!(roce_packet_type(&v4) & 0x8, 0x8);
        assert_eq!(roce_packet_type(&v6) & 0x8, 0x8);
    }

    #[test]
    fn grh_of_ipv4_has_a_valid_checksum() {
        let g = grh_bytes(
            "127.0.0.1:4791".parse().unwrap(),
            "127.0.0.2:4791".parse().unwrap(),
            100,
        );
        assert!(g[..20].iter().all(|&b| b == 0));
        let h: &[u8; 20] = g[20..].try_into().unwrap();
        assert_eq!(urdma_wire::ipv4_header_sum(h), 0xffff);
        assert_eq!(&h[12..16], &[127, 0, 0, 1]);
        assert_eq!(
            urdma_wire::GrhRepr::parse(&g),
            Ok(urdma_wire::GrhRepr::new(
                [127, 0, 0, 1].into(),
                [127, 0, 0, 2].into(),
                100
            ))
        );
    }
}

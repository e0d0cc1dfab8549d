//! Unit tests of the batched send: GSO runs, their limits and
//! identifications, and handling a batch in parts.

use super::super::*;
use super::*;
use crate::engine::Transmit;

fn t(dst: &str, len: usize) -> Transmit {
    Transmit::new(dst.parse().unwrap(), vec![0; len])
}

#[test]
fn runs_group_same_size_datagrams_to_one_destination() {
    let a = "127.0.0.2:4791";
    let b = "127.0.0.3:4791";
    let items = vec![
        t(a, 100),
        t(a, 100),
        t(a, 60),
        t(a, 100),
        t(b, 100),
        t(b, 120),
    ];
    let r = runs(&items, true);
    let seen: Vec<(usize, usize, usize)> =
        r.iter().map(|r| (r.start, r.count, r.segment)).collect();
    assert_eq!(
        seen,
        vec![(0, 3, 100), (3, 1, 100), (4, 1, 100), (5, 1, 120)]
    );
    assert!(runs(&items, false).iter().all(|r| r.count == 1));
}

/// A datagram of `len` bytes with the ICRC of an unsegmented send.
fn roce(src: SocketAddr, dst: SocketAddr, len: usize, seed: u8) -> Transmit {
    let mut data: Vec<u8> = (0..len - 4).map(|i| (i as u8).wrapping_mul(seed)).collect();
    let ctx = urdma_wire::IcrcContext::new(src, dst);
    let icrc = urdma_wire::compute_icrc(&data, &ctx).unwrap();
    data.extend_from_slice(&icrc.to_le_bytes());
    Transmit::new(dst, data)
}

fn socket(addr: &str, gro: bool) -> std::net::UdpSocket {
    let s = std::net::UdpSocket::bind(addr).unwrap();
    if gro {
        use std::os::fd::AsRawFd;
        assert!(enable_gro(s.as_raw_fd()));
    }
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    s
}

/// What a receiver of `n` same-size datagrams sent as one run sees:
/// each datagram's identification as its ICRC tells.
fn send_run_and_receive(n: usize, gro: bool) -> Vec<Option<urdma_wire::Ipv4Ident>> {
    use std::os::fd::AsRawFd;
    let rx = socket("127.0.0.1:0", gro);
    let tx = socket("127.0.0.1:0", false);
    let (src, dst) = (tx.local_addr().unwrap(), rx.local_addr().unwrap());
    let mut items: Vec<Transmit> = (0..n).map(|i| roce(src, dst, 1024, i as u8 + 3)).collect();
    assert_eq!(send_all(tx.as_raw_fd(), &mut items), 0);
    let mut batch = RecvBatch::new();
    let mut got = Vec::new();
    let ctx = urdma_wire::IcrcContext::new(src, dst);
    while got.len() < n {
        assert!(wait_readable(rx.as_raw_fd(), Some(std::time::Duration::from_secs(5))).unwrap());
        batch.recv(rx.as_raw_fd()).unwrap();
        for (from, data, ce) in batch.iter() {
            assert_eq!(from, Some(src));
            assert!(!ce, "no router marks loopback traffic");
            let data = data.expect("not truncated");
            assert_eq!(data.len(), 1024);
            got.push(urdma_wire::check_icrc_any_ident(data, &ctx).ok().flatten());
        }
    }
    got
}

#[test]
fn gso_segments_carry_consecutive_identifications() {
    // Cut by the kernel for a receiver without GRO, and handed whole to
    // one with GRO: either way each datagram's ICRC holds with the
    // identification the kernel gave its segment.
    for gro in [false, true] {
        let idents = send_run_and_receive(5, gro);
        let want: Vec<_> = (0..5u16)
            .map(|k| {
                Some(urdma_wire::Ipv4Ident {
                    identification: k,
                    dont_fragment: true,
                })
            })
            .collect();
        assert_eq!(idents, want, "gro {gro}");
    }
}

#[test]
fn runs_stay_within_the_kernel_limits() {
    let items: Vec<Transmit> = (0..200).map(|_| t("127.0.0.2:4791", 1000)).collect();
    let r = runs(&items, true);
    assert!(r
        .iter()
        .all(|r| r.count <= MAX_SEGMENTS && r.count * 1000 <= MAX_GSO_BYTES));
    assert_eq!(r.iter().map(|r| r.count).sum::<usize>(), 200);
}

#[test]
fn a_batch_is_handled_in_parts_with_a_step_between_each_two() {
    let (parts, steps) = in_parts(
        (Vec::new(), 0),
        0..10,
        4,
        |(parts, _), part| parts.push(part.collect::<Vec<_>>()),
        |(parts, steps)| (parts, steps + 1),
    );
    assert_eq!(parts, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]);
    assert_eq!(steps, 2);
    let (parts, steps) = in_parts(
        (Vec::new(), 0),
        0..8,
        4,
        |(parts, _), part| parts.push(part.collect::<Vec<_>>()),
        |(parts, steps)| (parts, steps + 1),
    );
    assert_eq!(parts.len(), 2);
    assert_eq!(steps, 1);
    let (parts, steps) = in_parts(
        (Vec::new(), 0),
        std::iter::empty::<u8>(),
        4,
        |(parts, _), part| parts.push(part.collect::<Vec<_>>()),
        |(parts, steps)| (parts, steps + 1),
    );
    assert_eq!(parts, vec![Vec::<u8>::new()]);
    assert_eq!(steps, 0);
}

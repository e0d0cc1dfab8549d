//! Which IPv4 identification each sender uses. The ICRC covers the IPv4
//! identification and DF flag, which a UDP socket does not show, so a
//! received ICRC is accepted for whatever value of those 17 bits makes it
//! valid; that leaves 15 of its 32 check bits against other corruption.
//! urdma's own packets carry DF with identification 0, or `k` for the
//! `k`-th segment of a UDP GSO send (fewer than 64:
//! [`urdma_wire::Ipv4Ident::is_urdma`]). Once a sender has sent
//! [`TRUSTED_AFTER`] packets in a row that are valid with such an
//! identification, a later packet of it that is valid only with some other
//! identification is far more likely corrupted than re-identified, and is
//! refused as an ICRC error; a sender that really changes (another stack
//! on that address) shows it by [`RELEARN_AFTER`] such packets in a row.

use std::collections::HashMap;
use std::net::IpAddr;

/// Packets valid with urdma's identifications before a sender is taken
/// to always use them.
pub(super) const TRUSTED_AFTER: u32 = 16;
/// Packets in a row valid only with another identification after which a
/// trusted sender is learnt anew.
pub(super) const RELEARN_AFTER: u32 = 8;
/// Senders remembered at most (the table is cleared when full).
const MAX_SENDERS: usize = 4096;

#[derive(Debug, Default, Clone, Copy)]
struct Sender {
    fixed: u32,
    other: u32,
}

/// The identification habits of the senders seen.
#[derive(Debug, Default)]
pub(super) struct SenderIdents {
    senders: HashMap<IpAddr, Sender>,
}

impl SenderIdents {
    /// A packet from `src` passed the ICRC, with urdma's fixed
    /// identification (`fixed`) or only with another one. Returns false
    /// if it should be refused as corrupted.
    pub(super) fn accept(&mut self, src: IpAddr, fixed: bool) -> bool {
        if self.senders.len() >= MAX_SENDERS && !self.senders.contains_key(&src) {
            self.senders.clear();
        }
        let s = self.senders.entry(src).or_default();
        if fixed {
            s.fixed = s.fixed.saturating_add(1);
            s.other = 0;
            return true;
        }
        if s.fixed < TRUSTED_AFTER {
            s.fixed = 0;
            return true;
        }
        s.other += 1;
        if s.other >= RELEARN_AFTER {
            *s = Sender::default();
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_sender_is_held_to_its_identification() {
        let mut t = SenderIdents::default();
        let urdma: IpAddr = "127.0.0.1".parse().unwrap();
        let rxe: IpAddr = "127.0.0.2".parse().unwrap();
        for _ in 0..TRUSTED_AFTER {
            assert!(t.accept(urdma, true));
        }
        // One odd packet: refused; the sender stays trusted.
        assert!(!t.accept(urdma, false));
        assert!(t.accept(urdma, true));
        assert!(!t.accept(urdma, false));
        // A sender with varying identifications is never refused.
        for i in 0..100 {
            assert!(t.accept(rxe, i % 7 == 0));
        }
        // Another stack takes the trusted address: learnt anew.
        assert!(t.accept(urdma, true));
        let refused = (0..RELEARN_AFTER)
            .filter(|_| !t.accept(urdma, false))
            .count();
        assert_eq!(refused as u32, RELEARN_AFTER - 1);
        assert!(t.accept(urdma, false));
    }
}

//! 24-bit packet sequence number arithmetic.

use urdma_wire::PSN_MASK;

/// `a + n` modulo 2^24.
pub(crate) fn add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & PSN_MASK
}

/// `a - 1` modulo 2^24.
pub(crate) fn prev(a: u32) -> u32 {
    add(a, PSN_MASK)
}

/// Signed distance `a - b` in the 24-bit circle, in [-2^23, 2^23).
pub(crate) fn diff(a: u32, b: u32) -> i32 {
    let d = a.wrapping_sub(b) & PSN_MASK;
    if d & 0x80_0000 != 0 {
        d as i32 - (1 << 24)
    } else {
        d as i32
    }
}

/// `a <= b` in sequence order.
pub(crate) fn le(a: u32, b: u32) -> bool {
    diff(a, b) <= 0
}

/// `a < b` in sequence order.
pub(crate) fn lt(a: u32, b: u32) -> bool {
    diff(a, b) < 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_24_bits() {
        assert_eq!(add(0xFF_FFFF, 1), 0);
        assert_eq!(add(0xFF_FFFE, 5), 3);
        assert_eq!(diff(3, 0xFF_FFFE), 5);
        assert_eq!(diff(0xFF_FFFE, 3), -5);
        assert!(lt(0xFF_FFFF, 0));
        assert!(le(7, 7));
        assert!(!lt(7, 7));
        assert_eq!(diff(0x80_0000, 0), -(1 << 23));
    }
}

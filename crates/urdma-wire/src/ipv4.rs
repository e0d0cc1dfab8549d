//! The IPv4 header checksum, as the GRH area of a RoCE v2 UD receive
//! carries an IPv4 header.

/// The folded 16-bit ones'-complement sum of a 20-byte IPv4 header. A
/// header whose checksum field is right sums to 0xFFFF; to fill the field,
/// zero it and store the complement of the sum.
pub fn ipv4_header_sum(header: &[u8; 20]) -> u16 {
    let mut sum: u32 = header
        .chunks_exact(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filled_checksum_sums_to_all_ones() {
        let mut h = [0u8; 20];
        h[0] = 0x45;
        h[2..4].copy_from_slice(&60u16.to_be_bytes());
        h[8] = 64;
        h[9] = 17;
        h[12..16].copy_from_slice(&[192, 0, 2, 1]);
        h[16..20].copy_from_slice(&[192, 0, 2, 2]);
        let c = !ipv4_header_sum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(ipv4_header_sum(&h), 0xffff);
        h[15] ^= 1;
        assert_ne!(ipv4_header_sum(&h), 0xffff);
    }
}

//! The rsockets wire format: the immediate data of every RDMA WRITE
//! (message type in the top 3 bits, a length, credit count or index in
//! the low 29), the connection private data, and the scatter entries one
//! side writes into the other's target list.
//!
//! The private data is big-endian; the entries written into the target
//! list are in the writer's byte order, which the connection data's
//! `NET` flag announces (a reader of the other order swaps them).

/// The rsocket protocol version in the connection data.
pub const VERSION: u8 = 1;
/// Connection data flag: the sender's host order is network order.
pub const FLAG_NET: u8 = 1 << 0;
/// Connection data flag: the sender has an iomap area after its SGL.
pub const FLAG_IOMAP: u8 = 1 << 1;
/// The length of the connection data.
pub const CONN_DATA_LEN: usize = 40;
/// The length of one scatter entry (`addr`, `key`, `length`).
pub const SGE_LEN: usize = 16;
/// The length of one iomap entry (`offset`, then a scatter entry).
pub const IOMAP_LEN: usize = 24;
/// The entries of each side's target SGL.
pub const SGL_SIZE: u32 = 2;
/// The mask of an immediate's data field.
const DATA_MASK: u32 = 0x1FFF_FFFF;

/// Message types (the top 3 bits of the immediate).
pub mod op {
    /// Data written into the receive buffer; data: its length.
    pub const DATA: u32 = 0;
    /// Data written to an iomap (never sent as an immediate).
    pub const WRITE: u32 = 2;
    /// Credits granted (and maybe a new target entry); data: sequence.
    pub const SGL: u32 = 4;
    /// An iomap entry was written; data: its index.
    pub const IOMAP_SGL: u32 = 6;
    /// A control message; data: one of [`super::ctrl`].
    pub const CTRL: u32 = 7;
}

/// Control messages (the data of an [`op::CTRL`]).
pub mod ctrl {
    /// The sender is closing both directions.
    pub const DISCONNECT: u32 = 0;
    /// A keepalive (no effect).
    pub const KEEPALIVE: u32 = 1;
    /// The sender will send no more (it still reads).
    pub const SHUTDOWN: u32 = 2;
}

/// An immediate of type `op` carrying `data` (truncated to 29 bits).
pub fn msg(op: u32, data: u32) -> u32 {
    (op << 29) | (data & DATA_MASK)
}

/// A received immediate, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Msg {
    /// `n` bytes were written into the receive buffer.
    Data(u32),
    /// The peer's new credit limit (the sequence number it accepts up to).
    Sgl(u16),
    /// An iomap entry was written.
    IomapSgl(u16),
    /// A control message.
    Ctrl(u32),
    /// An iomap write announced (peers do not send these).
    Write(u32),
    /// A reserved message type: a protocol error.
    Reserved(u32),
}

/// Decode an immediate (host order).
pub fn decode(imm: u32) -> Msg {
    let data = imm & DATA_MASK;
    match imm >> 29 {
        op::DATA => Msg::Data(data),
        op::WRITE => Msg::Write(data),
        op::SGL => Msg::Sgl(data as u16),
        op::IOMAP_SGL => Msg::IomapSgl(data as u16),
        op::CTRL => Msg::Ctrl(data),
        other => Msg::Reserved(other),
    }
}

/// A remote buffer: address, key, length.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sge {
    /// Its address in the owner's memory.
    pub addr: u64,
    /// Its rkey.
    pub key: u32,
    /// Its length in bytes.
    pub length: u32,
}

impl Sge {
    /// The entry as this host writes it (native order, or swapped for a
    /// peer of the other order).
    pub fn to_bytes(self, swap: bool) -> [u8; SGE_LEN] {
        let (a, k, l) = match swap {
            false => (self.addr, self.key, self.length),
            true => (
                self.addr.swap_bytes(),
                self.key.swap_bytes(),
                self.length.swap_bytes(),
            ),
        };
        let mut b = [0u8; SGE_LEN];
        b[..8].copy_from_slice(&a.to_ne_bytes());
        b[8..12].copy_from_slice(&k.to_ne_bytes());
        b[12..].copy_from_slice(&l.to_ne_bytes());
        b
    }

    /// An entry in the order [`Sge::to_bytes`] wrote it.
    pub fn from_bytes(b: &[u8; SGE_LEN], swap: bool) -> Sge {
        let a = u64::from_ne_bytes(b[..8].try_into().unwrap_or_default());
        let k = u32::from_ne_bytes(b[8..12].try_into().unwrap_or_default());
        let l = u32::from_ne_bytes(b[12..].try_into().unwrap_or_default());
        match swap {
            false => Sge {
                addr: a,
                key: k,
                length: l,
            },
            true => Sge {
                addr: a.swap_bytes(),
                key: k.swap_bytes(),
                length: l.swap_bytes(),
            },
        }
    }

    fn put_be(self, b: &mut [u8]) {
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.key.to_be_bytes());
        b[12..16].copy_from_slice(&self.length.to_be_bytes());
    }

    fn get_be(b: &[u8]) -> Sge {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        let mut k = [0u8; 4];
        k.copy_from_slice(&b[8..12]);
        let mut l = [0u8; 4];
        l.copy_from_slice(&b[12..16]);
        Sge {
            addr: u64::from_be_bytes(a),
            key: u32::from_be_bytes(k),
            length: u32::from_be_bytes(l),
        }
    }
}

/// The connection private data each side sends (REQ and REP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnData {
    /// [`FLAG_NET`], [`FLAG_IOMAP`].
    pub flags: u8,
    /// The receive queue size: the messages the peer may send at first.
    pub credits: u16,
    /// The iomap area's entries, scaled ([`value_to_scale`]).
    pub iomap_size: u8,
    /// Where the peer writes credit updates: the target SGL (its length
    /// is its entry count).
    pub target_sgl: Sge,
    /// The first receive buffer the peer may write into.
    pub data_buf: Sge,
}

/// Why connection data was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnError {
    /// Shorter than [`CONN_DATA_LEN`].
    Short(usize),
    /// Another protocol version.
    Version(u8),
    /// A target SGL of no entries or too many to address.
    Sgl(u32),
}

impl ConnData {
    /// The 40 bytes on the wire.
    pub fn encode(&self) -> [u8; CONN_DATA_LEN] {
        let mut b = [0u8; CONN_DATA_LEN];
        b[0] = VERSION;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.credits.to_be_bytes());
        b[7] = self.iomap_size;
        self.target_sgl.put_be(&mut b[8..24]);
        self.data_buf.put_be(&mut b[24..40]);
        b
    }

    /// Parse and check the peer's connection data.
    pub fn decode(b: &[u8]) -> Result<ConnData, ConnError> {
        if b.len() < CONN_DATA_LEN {
            return Err(ConnError::Short(b.len()));
        }
        if b[0] != VERSION {
            return Err(ConnError::Version(b[0]));
        }
        let target_sgl = Sge::get_be(&b[8..24]);
        if target_sgl.length == 0 || target_sgl.length > 256 {
            return Err(ConnError::Sgl(target_sgl.length));
        }
        Ok(ConnData {
            flags: b[1],
            credits: u16::from_be_bytes([b[2], b[3]]),
            iomap_size: b[7],
            target_sgl,
            data_buf: Sge::get_be(&b[24..40]),
        })
    }
}

/// A size as the 8-bit scaled value of the connection data: itself up
/// to 128, else the top bit set and the size in units of 256.
pub fn value_to_scale(value: u32, bits: u32) -> u32 {
    let half = 1 << (bits - 1);
    match value <= half {
        true => value,
        false => half | (value >> bits),
    }
}

/// The size a scaled value stands for.
pub fn scale_to_value(value: u32, bits: u32) -> u32 {
    let half = 1 << (bits - 1);
    match value <= half {
        true => value,
        false => (value & !half) << bits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn immediates_encode_type_and_data() {
        assert_eq!(msg(op::DATA, 4096), 4096);
        assert_eq!(msg(op::SGL, 400), 0x8000_0190);
        assert_eq!(msg(op::CTRL, ctrl::SHUTDOWN), 0xE000_0002);
        assert_eq!(msg(op::IOMAP_SGL, 3), 0xC000_0003);
        // Data beyond 29 bits cannot leak into the type.
        assert_eq!(msg(op::DATA, u32::MAX) >> 29, op::DATA);
        assert_eq!(decode(msg(op::DATA, 65536)), Msg::Data(65536));
        assert_eq!(decode(0x8001_0190), Msg::Sgl(0x0190));
        assert_eq!(decode(msg(op::CTRL, ctrl::DISCONNECT)), Msg::Ctrl(0));
        assert_eq!(decode(msg(op::IOMAP_SGL, 7)), Msg::IomapSgl(7));
        assert_eq!(decode(msg(op::WRITE, 9)), Msg::Write(9));
        for r in [1u32, 3, 5] {
            assert_eq!(decode(r << 29), Msg::Reserved(r));
        }
    }

    #[test]
    fn conn_data_is_big_endian_and_checked() {
        let c = ConnData {
            flags: FLAG_IOMAP,
            credits: 384,
            iomap_size: 0,
            target_sgl: Sge {
                addr: 0x1122_3344_5566_7788,
                key: 0xAABB_CCDD,
                length: 2,
            },
            data_buf: Sge {
                addr: 0x10,
                key: 7,
                length: 65536,
            },
        };
        let b = c.encode();
        assert_eq!(b[..8], [1, 2, 0x01, 0x80, 0, 0, 0, 0]);
        assert_eq!(b[8..16], 0x1122_3344_5566_7788u64.to_be_bytes());
        assert_eq!(b[16..20], [0xAA, 0xBB, 0xCC, 0xDD]);
        assert_eq!(b[20..24], [0, 0, 0, 2]);
        assert_eq!(b[36..40], 65536u32.to_be_bytes());
        assert_eq!(ConnData::decode(&b), Ok(c));
        // Trailing private data (the CM pads it) is ignored.
        let mut long = b.to_vec();
        long.extend_from_slice(&[0; 100]);
        assert_eq!(ConnData::decode(&long), Ok(c));
        assert_eq!(ConnData::decode(&b[..39]), Err(ConnError::Short(39)));
        let mut v2 = b;
        v2[0] = 2;
        assert_eq!(ConnData::decode(&v2), Err(ConnError::Version(2)));
        let mut none = b;
        none[20..24].copy_from_slice(&[0; 4]);
        assert_eq!(ConnData::decode(&none), Err(ConnError::Sgl(0)));
    }

    #[test]
    fn sge_round_trips_in_either_order() {
        let s = Sge {
            addr: 0x0102_0304_0506_0708,
            key: 0x0A0B_0C0D,
            length: 0x1000,
        };
        for swap in [false, true] {
            assert_eq!(Sge::from_bytes(&s.to_bytes(swap), swap), s);
        }
        let swapped = s.to_bytes(true);
        assert_eq!(swapped[..8], s.addr.to_be_bytes());
        assert_eq!(
            Sge::from_bytes(&s.to_bytes(false), true).key,
            s.key.swap_bytes()
        );
    }

    #[test]
    fn scale_rounds_sizes() {
        assert_eq!(value_to_scale(0, 8), 0);
        assert_eq!(value_to_scale(128, 8), 128);
        assert_eq!(value_to_scale(512, 8), 130);
        assert_eq!(scale_to_value(130, 8), 512);
        assert_eq!(scale_to_value(value_to_scale(100, 8), 8), 100);
    }
}

//! [`Transmit`]: a datagram the engine hands its fabric to send, its
//! payload perhaps left by reference in the sender's region.

use super::dma;
use std::net::SocketAddr;

/// A datagram for the fabric to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Destination address and UDP port.
    pub dst: SocketAddr,
    /// UDP payload: BTH through ICRC; without the payload's bytes when
    /// `source` holds them.
    pub data: Vec<u8>,
    /// The payload, left in the sender's region for a device of this NIC
    /// to copy (`dma`); the fabric assembles the whole datagram
    /// ([`Transmit::assemble`]) for anything else.
    pub source: Option<dma::DmaSource>,
    /// An RC READ request's buffer at the requester, which a device of
    /// this NIC fills when it executes the READ (`dma`); nothing to
    /// anything else.
    pub sink: Option<dma::DmaSource>,
}

impl Transmit {
    /// A datagram with all its bytes.
    pub fn new(dst: SocketAddr, data: Vec<u8>) -> Self {
        Transmit {
            dst,
            data,
            source: None,
            sink: None,
        }
    }

    /// Make the datagram one for anything but a device of this NIC: put
    /// the payload held by reference into `data`, and forget a READ
    /// buffer (only a device of this NIC fills one). On failure (the
    /// region was deregistered meanwhile) the datagram is to be dropped,
    /// as a link loses one.
    pub fn assemble(&mut self) -> Result<(), crate::memory::MemError> {
        self.sink = None;
        if let Some(src) = self.source.take() {
            let whole = src.assemble(&self.data)?;
            crate::bufpool::give(std::mem::replace(&mut self.data, whole));
        }
        Ok(())
    }

    /// Length of the datagram on a wire, its payload included.
    pub fn wire_len(&self) -> usize {
        self.data.len() + self.source.as_ref().map_or(0, dma::DmaSource::len)
    }
}

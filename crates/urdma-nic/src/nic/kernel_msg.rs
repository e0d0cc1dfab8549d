//! The framing of the NIC file's messages (`struct urdma_msg_hdr` and
//! the fields after it, in the kernel's byte order): reading fields out
//! of a message and building one. Shared by the kernel channel
//! ([`super::kernel_chan`]) and the kernel's RC messages
//! ([`super::kernel_rc`]).

use crate::verbs::Gid;
use std::mem::offset_of;
use urdma_abi::urdma_msg_hdr;

/// A malformed message from the kernel.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad message from the kernel at byte {at}: {why}")]
pub struct BadMessage {
    at: usize,
    why: &'static str,
}

impl BadMessage {
    /// The message at byte `at` is bad: `why`.
    pub(super) fn new(at: usize, why: &'static str) -> Self {
        BadMessage { at, why }
    }
}

/// The native-endian `u16` at byte `at` of a message.
pub(super) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

/// The native-endian `u32` at byte `at`.
pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The native-endian `u64` at byte `at`.
pub(super) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The GID at byte `at`.
pub(super) fn gid_at(b: &[u8], at: usize) -> Gid {
    let mut raw = [0u8; 16];
    raw.copy_from_slice(&b[at..at + 16]);
    Gid(raw)
}

/// Write `v` at byte `at` of a message being built.
pub(super) fn put(m: &mut [u8], at: usize, v: &[u8]) {
    m[at..at + v.len()].copy_from_slice(v);
}

/// A message of type `kind` and `len` bytes for `qpn`: its header, then
/// zeroes.
pub(super) fn header(kind: u16, len: usize, qpn: u32) -> Vec<u8> {
    type H = urdma_msg_hdr;
    let mut m = vec![0; len];
    put(&mut m, offset_of!(H, type_), &kind.to_ne_bytes());
    put(&mut m, offset_of!(H, len), &(len as u16).to_ne_bytes());
    put(&mut m, offset_of!(H, qpn), &qpn.to_ne_bytes());
    m
}

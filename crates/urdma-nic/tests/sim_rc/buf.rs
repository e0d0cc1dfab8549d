//! Memory helpers: registered buffers with a model of their content,
//! and the parts (scatter/gather lists) of messages in them.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, RngCore};
use urdma_abi::mem::MemRegion;
use urdma_proto::engine::command::RegMr;
use urdma_proto::engine::SgEntry;
use urdma_proto::mr::MrEntry;
use urdma_proto::sim::SimNet;
use urdma_proto::types::AccessFlags;
/// What every buffer allows.
const ALL_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

/// A registered region and the model of its expected content.
pub(crate) struct Buf {
    /// The registration.
    pub(crate) mr: Arc<MrEntry>,
    /// The content it should have.
    pub(crate) model: Vec<u8>,
}

impl Buf {
    /// Register `len` bytes at `iova` on device `dev`, filled from `fill`
    /// (or zero).
    pub(crate) fn new(
        net: &mut SimNet,
        dev: usize,
        pd: u32,
        len: usize,
        iova: u64,
        fill: Option<&mut StdRng>,
    ) -> Buf {
        let mem = MemRegion::allocate(len).expect("allocate");
        let mut model = vec![0u8; len];
        if let Some(rng) = fill {
            rng.fill_bytes(&mut model);
            mem.write(0, &model).expect("fill");
        }
        let mr = net
            .engine_mut(dev)
            .call(
                0,
                RegMr {
                    pd,
                    access: ALL_ACCESS,
                    iova,
                    mem: Box::new(mem),
                    rekey: None,
                },
            )
            .expect("reg_mr");
        Buf { mr, model }
    }

    /// The content it has.
    pub(crate) fn actual(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.model.len()];
        self.mr.mem.read(0, &mut v).expect("read back");
        v
    }

    /// The scatter/gather entry of `len` bytes at `off`.
    pub(crate) fn sge(&self, off: usize, len: usize) -> SgEntry {
        SgEntry {
            addr: self.mr.iova + off as u64,
            length: len as u32,
            lkey: self.mr.lkey,
        }
    }
}

/// Where the parts of a message lie in a buffer: (offset, length).
pub(crate) type Parts = Vec<(usize, usize)>;

/// The bytes of `parts` of `buf`, in order.
pub(crate) fn gather(buf: &[u8], parts: &Parts) -> Vec<u8> {
    let mut v = Vec::new();
    for &(o, l) in parts {
        v.extend_from_slice(&buf[o..o + l]);
    }
    v
}

/// Spread `data` over `parts` of `buf`, in order.
pub(crate) fn scatter(buf: &mut [u8], parts: &Parts, mut data: &[u8]) {
    for &(o, l) in parts {
        let n = l.min(data.len());
        buf[o..o + n].copy_from_slice(&data[..n]);
        data = &data[n..];
    }
}

/// Split `len` into 1..=max_parts positive lengths (none for 0).
pub(crate) fn split(rng: &mut StdRng, len: usize, max_parts: usize) -> Vec<usize> {
    if len == 0 {
        return Vec::new();
    }
    let k = rng.gen_range(1..=max_parts.min(len));
    let mut cuts: Vec<usize> = (0..k - 1).map(|_| rng.gen_range(1..len)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::new();
    let mut prev = 0;
    for c in cuts {
        out.push(c - prev);
        prev = c;
    }
    out.push(len - prev);
    out
}

/// A bump allocator of disjoint ranges with random gaps.
pub(crate) struct Bump(pub(crate) usize);

impl Bump {
    /// Ranges of the lengths `lens`, one after the other.
    pub(crate) fn parts(&mut self, rng: &mut StdRng, lens: &[usize]) -> Parts {
        lens.iter()
            .map(|&l| {
                self.0 += rng.gen_range(0..8);
                let o = self.0;
                self.0 += l;
                (o, l)
            })
            .collect()
    }
}

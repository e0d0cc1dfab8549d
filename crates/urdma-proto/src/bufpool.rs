//! Recycled packet buffers.
//!
//! A stream of large messages builds and frees packets at the rate of the
//! NIC: through the C allocator, each burst grows the heap, the allocator
//! hands the freed top back to the kernel, and the next burst pays a page
//! fault and a zeroed page for every 4 KiB again. Packets of an MTU-sized
//! or an internal-loopback payload are instead taken from, and given back
//! to, two bounded stacks of buffers of one capacity each, so that the
//! buffers a stream uses stay allocated, and the last freed (still in the
//! CPU's cache) is the next taken. Small packets (ACKs, atomics) and
//! buffers beyond the bounds use the allocator as before.

use std::sync::Mutex;

/// One size class: buffers of `capacity` bytes, at most `kept` held.
struct Class {
    capacity: usize,
    kept: usize,
    free: Mutex<Vec<Vec<u8>>>,
}

/// Headers and ICRC room above a payload: BTH, RETH or AtomicETH, DETH,
/// ImmDt or IETH, pad and ICRC fit in it.
const HEADROOM: usize = 128;

/// Requests smaller than this are left to the allocator.
const SMALLEST: usize = 1024;

/// Packets of a payload up to 4 KiB (the largest path MTU), and up to the
/// internal-loopback unit. The first class holds at most a send window's
/// worth (256 packets) and a half, the second 192 pieces of 60 KiB (RC
/// payloads between devices of one NIC mostly travel by reference,
/// [`crate::engine::dma`]): the process keeps at most about 13 MiB of
/// free buffers.
static CLASSES: [Class; 2] = [
    Class {
        capacity: 4096 + HEADROOM,
        kept: 384,
        free: Mutex::new(Vec::new()),
    },
    Class {
        capacity: crate::engine::INTERNAL_UNIT + HEADROOM,
        kept: 192,
        free: Mutex::new(Vec::new()),
    },
];

fn class_for_request(len: usize) -> Option<&'static Class> {
    if len < SMALLEST {
        return None;
    }
    CLASSES.iter().find(|c| len <= c.capacity)
}

/// An empty buffer that holds at least `len` bytes.
pub fn take(len: usize) -> Vec<u8> {
    let Some(class) = class_for_request(len) else {
        return Vec::with_capacity(len);
    };
    let reused = class.free.lock().unwrap_or_else(|e| e.into_inner()).pop();
    match reused {
        Some(mut v) => {
            v.clear();
            v
        }
        None => Vec::with_capacity(class.capacity),
    }
}

/// Give back a buffer that is no longer needed: kept for [`take`] if it
/// is of a class's capacity and the class has room, else freed.
pub fn give(buf: Vec<u8>) {
    if let Some(class) = CLASSES.iter().find(|c| c.capacity == buf.capacity()) {
        let mut free = class.free.lock().unwrap_or_else(|e| e.into_inner());
        if free.len() < class.kept {
            free.push(buf);
        }
    }
}

/// Give back every buffer of `bufs`.
pub fn give_all(bufs: impl IntoIterator<Item = Vec<u8>>) {
    for b in bufs {
        give(b);
    }
}

impl Class {
    /// Free the buffers this class keeps.
    fn release(&self) {
        let kept = std::mem::take(&mut *self.free.lock().unwrap_or_else(|e| e.into_inner()));
        drop(kept);
    }
}

/// Free every kept buffer (the NIC went idle: nothing needs them soon).
pub fn release_all() {
    for class in &CLASSES {
        class.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_class_keeps_nothing() {
        let class = Class {
            capacity: 64,
            kept: 4,
            free: Mutex::new(vec![Vec::with_capacity(64), Vec::with_capacity(64)]),
        };
        class.release();
        assert!(class.free.lock().unwrap().is_empty());
    }

    #[test]
    fn small_requests_use_the_allocator() {
        let v = take(64);
        assert!(v.capacity() >= 64);
        assert!(class_for_request(64).is_none());
    }

    #[test]
    fn buffers_come_back_empty_with_their_class_capacity() {
        let mut v = take(4000);
        assert_eq!(v.capacity(), 4096 + HEADROOM);
        v.extend_from_slice(&[7; 4000]);
        give(v);
        let again = take(2000);
        assert!(again.is_empty());
        assert_eq!(again.capacity(), 4096 + HEADROOM);
        let big = take(20_000);
        assert_eq!(big.capacity(), crate::engine::INTERNAL_UNIT + HEADROOM);
        let huge = take(1 << 20);
        assert!(huge.capacity() >= 1 << 20);
        // A buffer of no class is freed, not kept.
        give(huge);
    }

    #[test]
    fn a_class_keeps_at_most_its_bound() {
        let class = &CLASSES[1];
        let many: Vec<_> = (0..class.kept + 10)
            .map(|_| Vec::with_capacity(class.capacity))
            .collect();
        give_all(many);
        assert!(class.free.lock().unwrap().len() <= class.kept);
    }
}

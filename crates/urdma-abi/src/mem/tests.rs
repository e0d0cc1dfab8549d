//! Unit tests of registered memory: bounds, atomics, copies between
//! regions of every kind, and invalidation.

use super::*;

#[test]
fn read_write_in_bounds() {
    let m = MemRegion::allocate(64).unwrap();
    m.write(10, b"hello").unwrap();
    let mut b = [0u8; 5];
    m.read(10, &mut b).unwrap();
    assert_eq!(&b, b"hello");
    let mut v = vec![1];
    m.read_into(9, 3, &mut v).unwrap();
    assert_eq!(v, [1, 0, b'h', b'e']);
}

#[test]
fn out_of_bounds_is_refused() {
    let m = MemRegion::allocate(16).unwrap();
    assert!(m.write(12, b"12345").is_err());
    assert!(m.write(usize::MAX, b"1").is_err());
    let mut b = [0u8; 17];
    assert!(m.read(0, &mut b).is_err());
    let mut v = Vec::new();
    assert!(m.read_into(15, 2, &mut v).is_err());
    assert!(v.is_empty());
    assert!(m.fetch_add(9, 1).is_err());
}

#[test]
fn atomics_and_alignment() {
    let m = MemRegion::allocate(32).unwrap();
    assert_eq!(m.fetch_add(8, 5).unwrap(), 0);
    assert_eq!(m.fetch_add(8, 5).unwrap(), 5);
    assert_eq!(m.compare_swap(8, 10, 99).unwrap(), 10);
    assert_eq!(m.compare_swap(8, 10, 1).unwrap(), 99);
    assert_eq!(m.fetch_add(4, 1), Err(MemError::Misaligned));
}

#[test]
fn memory_of_a_process_through_its_mem_file() {
    let mut buf = vec![0u8; 64];
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem")
        .unwrap();
    let base = buf.as_mut_ptr() as u64;
    let m = MemRegion::in_process(Arc::new(ProcessMemory::file_only(file)), base, 32).unwrap();
    m.write(8, b"remote").unwrap();
    let mut b = [0u8; 6];
    m.read(8, &mut b).unwrap();
    assert_eq!(&b, b"remote");
    assert!(m.write(30, b"xyz").is_err());
    let aligned = (8 - (base % 8) as usize) % 8;
    assert_eq!(m.fetch_add(aligned + 16, 7).unwrap(), 0);
    assert_eq!(m.compare_swap(aligned + 16, 7, 9).unwrap(), 7);
    assert_eq!(m.fetch_add(aligned + 17, 1), Err(MemError::Misaligned));
    assert_eq!(m.addr() as u64, base);
    m.invalidate();
    assert_eq!(m.read(0, &mut b), Err(MemError::Invalid));
    assert_eq!(&std::hint::black_box(&buf)[8..14], b"remote");
    assert!(MemRegion::in_process(
        Arc::new(ProcessMemory::file_only(tempfile_like())),
        u64::MAX,
        2
    )
    .is_none());
}

#[test]
fn copies_between_regions_of_every_kind() {
    let a = MemRegion::allocate(64).unwrap();
    let b = MemRegion::allocate(64).unwrap();
    a.write(0, b"0123456789").unwrap();
    MemRegion::copy_between(&a, 2, &b, 10, 5).unwrap();
    let mut got = [0u8; 5];
    b.read(10, &mut got).unwrap();
    assert_eq!(&got, b"23456");
    // Within one region, overlapping.
    MemRegion::copy_between(&a, 0, &a, 3, 10).unwrap();
    let mut all = [0u8; 13];
    a.read(0, &mut all).unwrap();
    assert_eq!(&all, b"0120123456789");
    // Memory of a process on either side, and on both (this process,
    // reached as the agent reaches a driver's).
    let mut buf = vec![0u8; 64];
    let file = Arc::new(ProcessMemory::new(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/proc/self/mem")
            .unwrap(),
        Some(std::process::id()),
        crate::procmem::Sentinel::of_this_process(),
    ));
    let p = MemRegion::in_process(file.clone(), buf.as_mut_ptr() as u64, 32).unwrap();
    let q = MemRegion::in_process(file.clone(), buf.as_mut_ptr() as u64 + 32, 32).unwrap();
    MemRegion::copy_between(&a, 3, &p, 1, 4).unwrap();
    MemRegion::copy_between(&p, 1, &q, 0, 4).unwrap();
    MemRegion::copy_between(&q, 0, &b, 40, 4).unwrap();
    b.read(40, &mut got[..4]).unwrap();
    assert_eq!(&got[..4], b"0123");
    assert_eq!(&std::hint::black_box(&buf)[32..36], b"0123");
    // Long enough for the cross-memory read.
    let n = crate::procmem::DIRECT_MIN;
    let mut big: Vec<u8> = (0..2 * n).map(|i| (i % 251) as u8).collect();
    let from = MemRegion::in_process(file.clone(), big.as_mut_ptr() as u64, n).unwrap();
    let to = MemRegion::in_process(file.clone(), big.as_mut_ptr() as u64 + n as u64, n).unwrap();
    MemRegion::copy_between(&from, 0, &to, 0, n).unwrap();
    assert_eq!(file.direct_bytes(), n as u64);
    // Into memory this process maps (which may be shared): the file.
    let mapped = MemRegion::allocate(n).unwrap();
    MemRegion::copy_between(&from, 0, &mapped, 0, n).unwrap();
    assert_eq!(file.direct_bytes(), n as u64);
    let mut back = vec![0u8; n];
    mapped.read(0, &mut back).unwrap();
    let big = std::hint::black_box(&big);
    assert_eq!(big[..n], big[n..]);
    assert_eq!(back[..], big[..n]);
}

#[test]
fn copies_out_of_bounds_or_invalid_change_nothing() {
    let a = MemRegion::allocate(16).unwrap();
    let b = MemRegion::allocate(16).unwrap();
    a.write(0, b"abcdefgh").unwrap();
    assert!(MemRegion::copy_between(&a, 12, &b, 0, 8).is_err());
    assert!(MemRegion::copy_between(&a, 0, &b, 12, 8).is_err());
    assert!(MemRegion::copy_between(&a, usize::MAX, &b, 0, 2).is_err());
    assert!(MemRegion::copy_between(&a, 0, &a, 10, 8).is_err());
    b.invalidate();
    assert_eq!(
        MemRegion::copy_between(&a, 0, &b, 0, 4),
        Err(MemError::Invalid)
    );
    let mut all = [0u8; 16];
    a.read(0, &mut all).unwrap();
    assert_eq!(&all, b"abcdefgh\0\0\0\0\0\0\0\0");
}

#[test]
fn copies_in_opposite_directions_at_once_finish() {
    let a = Arc::new(MemRegion::allocate(4096).unwrap());
    let b = Arc::new(MemRegion::allocate(4096).unwrap());
    let (a2, b2) = (a.clone(), b.clone());
    let t = std::thread::spawn(move || {
        for _ in 0..2000 {
            MemRegion::copy_between(&a2, 0, &b2, 0, 4096).unwrap();
        }
    });
    for _ in 0..2000 {
        MemRegion::copy_between(&b, 0, &a, 0, 4096).unwrap();
    }
    t.join().unwrap();
}

fn tempfile_like() -> File {
    File::open("/dev/null").unwrap()
}

#[test]
fn invalidated_region_refuses_access() {
    let mut buf = [0u8; 8];
    // SAFETY: buf outlives m.
    let m = unsafe { MemRegion::from_raw(buf.as_mut_ptr(), buf.len()) }.unwrap();
    m.write(0, b"ab").unwrap();
    m.invalidate();
    assert_eq!(m.write(0, b"x"), Err(MemError::Invalid));
    drop(m);
    assert_eq!(&buf[..2], b"ab");
}

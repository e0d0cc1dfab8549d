//! The TCP anchor: stream bandwidth and ping-pong latency on the same path.

use anyhow::Result;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Send `iters` messages of `size` bytes, wait for the one-byte receipt.
pub fn stream(s: &mut TcpStream, size: usize, iters: usize) -> Result<Duration> {
    let buf = vec![0xa5u8; size.max(1)];
    let t = Instant::now();
    for _ in 0..iters {
        s.write_all(&buf[..size])?;
    }
    let mut ack = [0u8];
    s.read_exact(&mut ack)?;
    Ok(t.elapsed())
}

/// Read `total` bytes and send a one-byte receipt.
pub fn sink(s: &mut TcpStream, total: usize) -> Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut left = total;
    while left > 0 {
        let n = s.read(&mut buf[..left.min(1 << 20)])?;
        if n == 0 {
            anyhow::bail!("TCP peer closed early");
        }
        left -= n;
    }
    s.write_all(&[1])?;
    Ok(())
}

/// Ping-pong `iters` messages of `size` bytes; returns the half round trips.
pub fn ping(s: &mut TcpStream, size: usize, iters: usize) -> Result<Vec<Duration>> {
    let out = vec![0x5au8; size];
    let mut inb = vec![0u8; size];
    let mut v = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        s.write_all(&out)?;
        s.read_exact(&mut inb)?;
        v.push(t.elapsed() / 2);
    }
    Ok(v)
}

/// Answer `iters` pings of `size` bytes.
pub fn echo(s: &mut TcpStream, size: usize, iters: usize) -> Result<()> {
    let mut b = vec![0u8; size];
    for _ in 0..iters {
        s.read_exact(&mut b)?;
        s.write_all(&b)?;
    }
    Ok(())
}

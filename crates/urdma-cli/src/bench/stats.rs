//! Result rows and their printing.

use std::time::Duration;

/// Latency figures in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Latency {
    /// Minimum.
    pub min: f64,
    /// Median.
    pub median: f64,
    /// Mean.
    pub avg: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

impl Latency {
    /// Summarise one-way (or round-trip) samples.
    pub fn from_samples(mut s: Vec<Duration>) -> Option<Latency> {
        if s.is_empty() {
            return None;
        }
        s.sort_unstable();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let n = s.len();
        let sum: f64 = s.iter().map(|&d| us(d)).sum();
        Some(Latency {
            min: us(s[0]),
            median: us(s[n / 2]),
            avg: sum / n as f64,
            p99: us(s[((n * 99) / 100).min(n - 1)]),
            max: us(s[n - 1]),
        })
    }
}

/// Bandwidth in MiB/s and message rate in Mpps.
pub fn bandwidth(size: usize, iters: usize, elapsed: Duration) -> (f64, f64) {
    let secs = elapsed.as_secs_f64().max(1e-9);
    (
        (size * iters) as f64 / secs / (1024.0 * 1024.0),
        iters as f64 / secs / 1e6,
    )
}

/// A section header.
pub fn header(title: &str, bw: bool) -> String {
    let mut h = format!("{}\n{:^96}\n", "-".repeat(96), title);
    h += &if bw {
        format!(
            " {:>10} {:>12} {:>16} {:>14} {:>16} {:>12}",
            "#bytes", "#iterations", "BW avg[MiB/s]", "MsgRate[Mpps]", "TCP BW[MiB/s]", "urdma/TCP"
        )
    } else {
        format!(
            " {:>10} {:>12} {:>10} {:>12} {:>10} {:>10} {:>10} {:>12} {:>10}",
            "#bytes",
            "#iterations",
            "t_min[us]",
            "t_typical[us]",
            "t_avg[us]",
            "t_99%[us]",
            "t_max[us]",
            "TCP t_typ[us]",
            "TCP/urdma"
        )
    };
    h
}

/// A bandwidth row.
pub fn bw_row(size: usize, iters: usize, mib_s: f64, mpps: f64, tcp: Option<f64>) -> String {
    let (t, r) = match tcp {
        Some(t) if t > 0.0 => (format!("{t:.2}"), format!("{:.2}", mib_s / t)),
        _ => ("-".into(), "-".into()),
    };
    format!(" {size:>10} {iters:>12} {mib_s:>16.2} {mpps:>14.4} {t:>16} {r:>12}")
}

/// A latency row.
pub fn lat_row(size: usize, iters: usize, l: &Latency, tcp: Option<&Latency>) -> String {
    let (t, r) = match tcp {
        Some(t) if l.median > 0.0 => (
            format!("{:.2}", t.median),
            format!("{:.2}", t.median / l.median),
        ),
        _ => ("-".into(), "-".into()),
    };
    format!(
        " {size:>10} {iters:>12} {:>10.2} {:>12.2} {:>10.2} {:>10.2} {:>10.2} {t:>12} {r:>10}",
        l.min, l.median, l.avg, l.p99, l.max
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_summary() {
        let s: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        let l = Latency::from_samples(s).unwrap();
        assert_eq!(l.min, 1.0);
        assert_eq!(l.max, 100.0);
        assert_eq!(l.median, 51.0);
        assert_eq!(l.p99, 100.0);
        assert!((l.avg - 50.5).abs() < 1e-9);
        assert!(Latency::from_samples(Vec::new()).is_none());
    }

    #[test]
    fn bandwidth_units() {
        let (bw, rate) = bandwidth(1 << 20, 10, Duration::from_secs(1));
        assert!((bw - 10.0).abs() < 1e-9);
        assert!((rate - 1e-5).abs() < 1e-12);
    }
}

//! `urdma bench --plot`: bandwidth and latency against message size, each
//! operation of urdma beside TCP, as one SVG file of two charts.

use super::report::Report;
use std::fmt::Write;

const CHART_W: f64 = 520.0;
const CHART_H: f64 = 340.0;
const MARGIN_L: f64 = 70.0;
const MARGIN_B: f64 = 50.0;
const MARGIN_T: f64 = 40.0;
const MARGIN_R: f64 = 20.0;
/// Colours of urdma's operations (WRITE, READ, SEND) and of TCP.
const COLOURS: [&str; 3] = ["#1f77b4", "#2ca02c", "#d62728"];
const TCP_COLOUR: &str = "#555555";

/// One line of a chart: name, colour, dashed, points (size, value).
struct Series {
    name: String,
    colour: &'static str,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

/// urdma's line per operation and one for TCP (whose figures do not
/// depend on the operation: those beside the first one are drawn), from
/// rows of (operation, size, urdma's value, TCP's value if measured).
fn lines(rows: &[(&str, usize, f64, Option<f64>)]) -> Vec<Series> {
    let mut ops: Vec<&str> = Vec::new();
    for &(op, ..) in rows {
        if !ops.contains(&op) {
            ops.push(op);
        }
    }
    let points = |op: &str, tcp: bool| -> Vec<(f64, f64)> {
        rows.iter()
            .filter(|r| r.0 == op)
            .filter_map(|r| Some((r.1 as f64, if tcp { r.3? } else { r.2 })))
            .collect()
    };
    let mut v: Vec<Series> = ops
        .iter()
        .enumerate()
        .map(|(i, op)| Series {
            name: format!("urdma {op}"),
            colour: COLOURS[i % COLOURS.len()],
            dashed: false,
            points: points(op, false),
        })
        .collect();
    if let Some(op) = ops.first().filter(|op| !points(op, true).is_empty()) {
        v.push(Series {
            name: "TCP".into(),
            colour: TCP_COLOUR,
            dashed: true,
            points: points(op, true),
        });
    }
    v
}

/// The SVG document for `r`.
pub fn svg(r: &Report) -> String {
    let bw_rows: Vec<_> = r
        .bandwidth
        .iter()
        .map(|b| (b.op.as_str(), b.size, b.mib_s, b.tcp_mib_s))
        .collect();
    let lat_rows: Vec<_> = r
        .latency
        .iter()
        .map(|l| {
            (
                l.op.as_str(),
                l.size,
                l.urdma_us.median,
                l.tcp_us.map(|t| t.median),
            )
        })
        .collect();
    let (bw, lat) = (lines(&bw_rows), lines(&lat_rows));
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"18\" font-size=\"14\">urdma bench: {} -&gt; {}, {}, MTU {}, {} CPUs, Linux {}</text>\n",
        2.0 * CHART_W,
        CHART_H + 30.0,
        r.client,
        r.server,
        r.path,
        r.mtu,
        r.cpus,
        escape(&r.kernel)
    );
    chart(&mut out, 0.0, "Bandwidth [MiB/s]", &bw);
    chart(
        &mut out,
        CHART_W,
        "Typical latency [us] (READ: round trip)",
        &lat,
    );
    out.push_str("</svg>\n");
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Draw one chart with log axes at horizontal offset `x0`.
fn chart(out: &mut String, x0: f64, title: &str, series: &[Series]) {
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let positive = |v: f64| v.is_finite() && v > 0.0;
    let (mut xmin, mut xmax, mut ymin, mut ymax) = (f64::MAX, 0.0f64, f64::MAX, 0.0f64);
    for &(x, y) in pts().filter(|&&(x, y)| positive(x) && positive(y)) {
        xmin = xmin.min(x);
        xmax = xmax.max(x);
        ymin = ymin.min(y);
        ymax = ymax.max(y);
    }
    let top = 30.0;
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" font-size=\"13\">{}</text>",
        x0 + MARGIN_L,
        top + MARGIN_T - 12.0,
        escape(title)
    );
    if xmax <= 0.0 {
        return;
    }
    // Whole decades around the data.
    let (lx0, lx1) = (
        xmin.log10().floor(),
        xmax.log10().ceil().max(xmin.log10().floor() + 1.0),
    );
    let (ly0, ly1) = (
        ymin.log10().floor(),
        ymax.log10().ceil().max(ymin.log10().floor() + 1.0),
    );
    let pw = CHART_W - MARGIN_L - MARGIN_R;
    let ph = CHART_H - MARGIN_T - MARGIN_B;
    let px = |x: f64| x0 + MARGIN_L + (x.log10() - lx0) / (lx1 - lx0) * pw;
    let py = |y: f64| top + MARGIN_T + ph - (y.log10() - ly0) / (ly1 - ly0) * ph;
    let _ = writeln!(
        out,
        "<rect x=\"{}\" y=\"{}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#999\"/>",
        x0 + MARGIN_L,
        top + MARGIN_T
    );
    let mut d = lx0;
    while d <= lx1 {
        let x = px(10f64.powf(d));
        let _ = writeln!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            top + MARGIN_T,
            top + MARGIN_T + ph,
            top + MARGIN_T + ph + 16.0,
            size_label(10f64.powf(d))
        );
        d += 1.0;
    }
    let mut d = ly0;
    while d <= ly1 {
        let y = py(10f64.powf(d));
        let _ = writeln!(
            out,
            "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            x0 + MARGIN_L,
            x0 + MARGIN_L + pw,
            x0 + MARGIN_L - 6.0,
            y + 4.0,
            10f64.powf(d)
        );
        d += 1.0;
    }
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">message size [bytes]</text>",
        x0 + MARGIN_L + pw / 2.0,
        top + MARGIN_T + ph + 34.0
    );
    for (i, s) in series.iter().enumerate() {
        let path: Vec<String> = s
            .points
            .iter()
            .filter(|&&(x, y)| positive(x) && positive(y))
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let dash = if s.dashed {
            " stroke-dasharray=\"6,4\""
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{dash}/>",
            path.join(" "),
            s.colour
        );
        let ly = top + MARGIN_T + 14.0 + 16.0 * i as f64;
        let lx = x0 + MARGIN_L + 10.0;
        let _ = writeln!(
            out,
            "<line x1=\"{lx:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{}\" stroke-width=\"2\"{dash}/>\
             <text x=\"{:.1}\" y=\"{ly:.1}\">{}</text>",
            ly - 4.0,
            lx + 24.0,
            ly - 4.0,
            s.colour,
            lx + 30.0,
            escape(&s.name)
        );
    }
}

/// `1`, `1K`, `1M` for powers of ten of bytes.
fn size_label(v: f64) -> String {
    let v = v.round() as u64;
    match v {
        v if v >= 1_000_000 => format!("{}M", v / 1_000_000),
        v if v >= 1_000 => format!("{}k", v / 1_000),
        v => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::report::{BwRow, Report};
    use super::*;

    #[test]
    fn draws_each_series() {
        let mut r = Report::new("127.0.0.1".into(), "127.0.0.2".into(), 4096, 64);
        for (size, bw) in [(2usize, 1.0), (4096, 2000.0), (1 << 20, 5000.0)] {
            r.bandwidth.push(BwRow {
                op: "RDMA_Write".into(),
                size,
                iters: 10,
                mib_s: bw,
                mpps: 0.1,
                tcp_mib_s: Some(bw / 2.0),
                ratio: Some(2.0),
            });
        }
        let s = svg(&r);
        assert!(s.starts_with("<svg"));
        assert!(s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.contains("urdma RDMA_Write") && s.contains(">TCP<"));
    }

    #[test]
    fn empty_report_is_still_a_document() {
        let r = Report::new("a".into(), "b".into(), 1024, 1);
        let s = svg(&r);
        assert!(s.contains("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 0);
    }

    #[test]
    fn size_labels() {
        assert_eq!(size_label(1.0), "1");
        assert_eq!(size_label(1000.0), "1k");
        assert_eq!(size_label(1e6), "1M");
    }
}

//! `report.html`: one self-contained page (SVG charts inline).

use super::charts::Chart;
use super::{header_facts, one_line_summary, test_engine_note, Report, TSV_COLUMNS};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub fn render(report: &Report, charts: &[Chart]) -> String {
    let mut s = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Basalt bench compare</title><style>\
body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}\
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}\
th{background:#f0f0f0}td:first-child,td:nth-child(2){text-align:left}\
.warn{background:#fff3cd;border:1px solid #e0b000;padding:8px 12px;font-weight:bold}\
.facts td{text-align:left;max-width:1100px}.wide{overflow-x:auto}.charts{display:flex;flex-wrap:wrap;gap:12px}.charts{margin-bottom:12px}.charts div{border:1px solid #ddd}\
pre{font-size:12px;background:#f7f7f7;padding:8px;overflow-x:auto}</style></head><body>",
    );
    s.push_str(&format!(
        "<h1>Basalt bench compare — suite <code>{}</code></h1>",
        esc(&report.suite)
    ));
    if let Some(n) = test_engine_note(report) {
        s.push_str(&format!("<p class=\"warn\">{}</p>", esc(&n)));
    }
    s.push_str("<table class=\"facts\">");
    for (k, v) in header_facts(report) {
        s.push_str(&format!(
            "<tr><th>{}</th><td>{}</td></tr>",
            esc(&k),
            esc(&v)
        ));
    }
    s.push_str("</table><h2>Summary</h2><p>Latencies in µs; empty = does not apply. Device bytes per op come from <code>/proc/&lt;pid&gt;/io</code> of the engine's own process; CPU and RSS from its rusage.</p><div class=\"wide\"><table><tr>");
    for c in TSV_COLUMNS {
        s.push_str(&format!("<th>{}</th>", esc(c)));
    }
    s.push_str("</tr>");
    for e in &report.engines {
        for r in &e.rows {
            s.push_str("<tr>");
            for c in r.tsv_cells() {
                s.push_str(&format!("<td>{}</td>", esc(&c)));
            }
            s.push_str("</tr>");
        }
    }
    s.push_str("</table></div><h2>Amplification and the device limit</h2><p>Write-amp: bytes the engine process wrote to storage ÷ user bytes written. Space-amp: bytes allocated in the data directory ÷ live bytes (keys × (key+value)). Fraction of fio: read steps' ops/s ÷ fio's 4 KiB random-read IOPS at QD32; write steps' MB/s ÷ fio's 1 MiB sequential-write MB/s (line at 1.0).</p><div class=\"charts\">");
    let per_step =
        |c: &&Chart| c.file_stem.starts_with("throughput-") || c.file_stem.starts_with("latency-");
    for c in charts.iter().filter(|c| !per_step(c)) {
        s.push_str(&format!("<div title=\"{}\">{}</div>", esc(&c.title), c.svg));
    }
    s.push_str("</div><h2>Per step: throughput per second and latency percentiles</h2>");
    let steps: Vec<String> = report
        .engines
        .first()
        .map(|e| e.rows.iter().map(|r| r.step.clone()).collect())
        .unwrap_or_default();
    for step in &steps {
        let mine: Vec<&Chart> = charts
            .iter()
            .filter(|c| {
                c.file_stem == format!("throughput-{step}")
                    || c.file_stem == format!("latency-{step}")
            })
            .collect();
        if mine.is_empty() {
            continue;
        }
        s.push_str("<div class=\"charts\">");
        for c in mine {
            s.push_str(&format!("<div title=\"{}\">{}</div>", esc(&c.title), c.svg));
        }
        s.push_str("</div>");
    }
    let _ = per_step;
    s.push_str("<div>");
    s.push_str("</div><h2>One line per step</h2><pre>");
    for e in &report.engines {
        for r in &e.rows {
            s.push_str(&esc(&one_line_summary(r)));
            s.push('\n');
        }
    }
    s.push_str("</pre><h2>Commands</h2>");
    for e in &report.engines {
        s.push_str(&format!("<h3>{}</h3><pre>", esc(&e.label)));
        for c in &e.commands {
            s.push_str(&esc(c));
            s.push('\n');
        }
        s.push_str("</pre>");
    }
    s.push_str("</body></html>\n");
    s
}

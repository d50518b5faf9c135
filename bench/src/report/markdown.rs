//! `report.md`: header facts, the summary table, one-line summaries, links to the charts.

use super::charts::Chart;
use super::{header_facts, one_line_summary, test_engine_note, Report, TSV_COLUMNS};

pub fn render(report: &Report, charts: &[Chart]) -> String {
    let mut s = format!("# Basalt bench compare — suite `{}`\n\n", report.suite);
    if let Some(n) = test_engine_note(report) {
        s.push_str(&format!("> **{n}**\n\n"));
    }
    for (k, v) in header_facts(report) {
        s.push_str(&format!("- **{k}**: {v}\n"));
    }
    s.push_str("\n## Summary\n\nLatencies in µs; empty = does not apply.\n\n");
    s.push_str(&format!("| {} |\n", TSV_COLUMNS.join(" | ")));
    s.push_str(&format!("|{}\n", "---|".repeat(TSV_COLUMNS.len())));
    for e in &report.engines {
        for r in &e.rows {
            s.push_str(&format!("| {} |\n", r.tsv_cells().join(" | ")));
        }
    }
    s.push_str("\n## One line per step\n\n```\n");
    for e in &report.engines {
        for r in &e.rows {
            s.push_str(&one_line_summary(r));
            s.push('\n');
        }
    }
    s.push_str("```\n\n## Charts\n\n");
    for c in charts {
        s.push_str(&format!("![{}](charts/{}.svg)\n\n", c.title, c.file_stem));
    }
    s.push_str("## Commands\n\n");
    for e in &report.engines {
        s.push_str(&format!("### {}\n\n```\n", e.label));
        for c in &e.commands {
            s.push_str(c);
            s.push('\n');
        }
        s.push_str("```\n\n");
    }
    s
}

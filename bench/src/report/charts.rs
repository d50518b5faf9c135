//! SVG charts drawn with plotters (SVG backend, no font files needed).

use super::{Report, Row};
use crate::error::BenchError;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::PathBuf;

pub struct Chart {
    pub file_stem: String,
    pub title: String,
    pub svg: String,
}

const W: u32 = 560;
const H: u32 = 320;

fn color(engine_index: usize) -> RGBColor {
    [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(120, 120, 120),
        RGBColor(44, 160, 44),
    ][engine_index % 4]
}

fn err(stem: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Chart {
        path: PathBuf::from(format!("charts/{stem}.svg")),
        detail: e.to_string(),
    }
}

/// Throughput per 1-second interval of one step, one line per engine.
fn throughput_chart(step: &str, series: &[(usize, &str, &Row)]) -> Result<Chart, BenchError> {
    let stem = format!("throughput-{step}");
    let title = format!("{step}: ops/s per 1-second interval");
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&stem, e))?;
        let max_x = series
            .iter()
            .flat_map(|(_, _, r)| r.intervals.iter().map(|p| p.0))
            .max()
            .unwrap_or(1)
            .max(1);
        let max_y = series
            .iter()
            .flat_map(|(_, _, r)| r.intervals.iter().map(|p| p.1))
            .fold(0.0f64, f64::max)
            .max(1.0)
            * 1.15;
        let mut chart = ChartBuilder::on(&root)
            .caption(&title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d(0u64..max_x + 1, 0f64..max_y)
            .map_err(|e| err(&stem, e))?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc("ops/s")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(|e| err(&stem, e))?;
        for (ci, name, row) in series {
            let c = color(*ci);
            let pts: Vec<(u64, f64)> = row.intervals.clone();
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(|e| err(&stem, e))?
                .label(name.to_string())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))
                .map_err(|e| err(&stem, e))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(|e| err(&stem, e))?;
        root.present().map_err(|e| err(&stem, e))?;
    }
    Ok(Chart {
        file_stem: stem,
        title,
        svg,
    })
}

/// Grouped bars: one group per category, one bar per series. `None` values are skipped.
fn grouped_bars(
    stem: &str,
    title: &str,
    y_desc: &str,
    categories: &[String],
    series: &[(usize, String, Vec<Option<f64>>)],
    reference_line: Option<f64>,
) -> Result<Chart, BenchError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(stem, e))?;
        let max_y = series
            .iter()
            .flat_map(|s| s.2.iter().flatten().copied())
            .chain(reference_line)
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.2;
        let n = categories.len().max(1) as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(60)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..n, 0f64..max_y)
            .map_err(|e| err(stem, e))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(y_desc)
            .y_label_formatter(&|v| format!("{v:.2}"))
            .draw()
            .map_err(|e| err(stem, e))?;
        let k = series.len().max(1) as f64;
        let bw = 0.8 / k;
        for (si, (ci, name, vals)) in series.iter().enumerate() {
            let c = color(*ci);
            let bars: Vec<Rectangle<(f64, f64)>> = vals
                .iter()
                .enumerate()
                .filter_map(|(i, v)| v.filter(|x| x.is_finite()).map(|v| (i, v)))
                .map(|(i, v)| {
                    let x0 = i as f64 + 0.1 + si as f64 * bw;
                    Rectangle::new([(x0, 0.0), (x0 + bw * 0.92, v)], c.filled())
                })
                .collect();
            chart
                .draw_series(bars)
                .map_err(|e| err(stem, e))?
                .label(name.clone())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        if let Some(r) = reference_line {
            chart
                .draw_series(LineSeries::new(
                    vec![(0.0, r), (n, r)],
                    BLACK.stroke_width(1),
                ))
                .map_err(|e| err(stem, e))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|e| err(stem, e))?;
        label_categories(&root, &chart, categories, stem)?;
        root.present().map_err(|e| err(stem, e))?;
    }
    Ok(Chart {
        file_stem: stem.to_string(),
        title: title.to_string(),
        svg,
    })
}

fn label_categories<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &ChartContext<
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    categories: &[String],
    stem: &str,
) -> Result<(), BenchError> {
    let style = TextStyle::from(("sans-serif", 11).into_font()).pos(
        plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Center,
            plotters::style::text_anchor::VPos::Top,
        ),
    );
    for (i, c) in categories.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
        // Alternate rows so long step names do not overlap.
        let dy = if i % 2 == 0 { 6 } else { 22 };
        root.draw(&Text::new(c.clone(), (px, py + dy), style.clone()))
            .map_err(|e| err(stem, e))?;
    }
    Ok(())
}

/// Latency percentiles of one step: x = P50, P99, P99.9, P99.99; log-scale y; one line per engine.
fn latency_chart(step: &str, series: &[(usize, &str, &Row)]) -> Result<Option<Chart>, BenchError> {
    let stem = format!("latency-{step}");
    let title = format!("{step}: latency percentiles (µs, log scale)");
    type Series<'a> = (usize, &'a str, Vec<(f64, f64)>);
    let pts: Vec<Series> = series
        .iter()
        .map(|(ci, n, r)| {
            let v: Vec<(f64, f64)> = [r.p50, r.p99, r.p999, r.p9999]
                .iter()
                .enumerate()
                .filter_map(|(i, p)| p.filter(|x| *x > 0.0).map(|x| (i as f64, x)))
                .collect();
            (*ci, *n, v)
        })
        .filter(|s| !s.2.is_empty())
        .collect();
    if pts.is_empty() {
        return Ok(None);
    }
    let all: Vec<f64> = pts.iter().flat_map(|s| s.2.iter().map(|p| p.1)).collect();
    let lo = all.iter().copied().fold(f64::MAX, f64::min).max(0.01) / 2.0;
    let hi = all.iter().copied().fold(0.0, f64::max) * 2.0;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&stem, e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.3f64..3.3, (lo..hi).log_scale())
            .map_err(|e| err(&stem, e))?;
        let names = ["P50", "P99", "P99.9", "P99.99"];
        chart
            .configure_mesh()
            .x_labels(4)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 0.01 && (0.0..4.0).contains(&i) {
                    names[i as usize].to_string()
                } else {
                    String::new()
                }
            })
            .y_desc("µs")
            .y_label_formatter(&|v| {
                if *v >= 10.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v:.2}")
                }
            })
            .draw()
            .map_err(|e| err(&stem, e))?;
        for (ci, name, p) in &pts {
            let c = color(*ci);
            chart
                .draw_series(LineSeries::new(p.clone(), c.stroke_width(2)))
                .map_err(|e| err(&stem, e))?
                .label(name.to_string())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
            chart
                .draw_series(p.iter().map(|q| Circle::new(*q, 4, c.filled())))
                .map_err(|e| err(&stem, e))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| err(&stem, e))?;
        root.present().map_err(|e| err(&stem, e))?;
    }
    Ok(Some(Chart {
        file_stem: stem,
        title,
        svg,
    }))
}

fn is_read_step(step: &str) -> bool {
    step.contains("read") || step.contains("range")
}

/// All charts of a report, in the order the HTML shows them.
pub fn render_all(report: &Report) -> Result<Vec<Chart>, BenchError> {
    let engines: Vec<(usize, &super::EngineRun)> = report
        .engines
        .iter()
        .enumerate()
        .filter(|(_, e)| e.label != "fio")
        .collect();
    let steps: Vec<String> = engines
        .first()
        .map(|(_, e)| e.rows.iter().map(|r| r.step.clone()).collect())
        .unwrap_or_default();
    let row = |e: &super::EngineRun, s: &str| e.rows.iter().find(|r| r.step == s).cloned();
    let mut charts = Vec::new();

    // Write-amp and space-amp side by side (HTML lays out charts in a flowing row).
    let amp = |f: fn(&Row) -> Option<f64>| -> Vec<(usize, String, Vec<Option<f64>>)> {
        engines
            .iter()
            .map(|(ci, e)| {
                (
                    *ci,
                    e.label.clone(),
                    steps
                        .iter()
                        .map(|s| row(e, s).and_then(|r| f(&r)))
                        .collect(),
                )
            })
            .collect()
    };
    let wsteps: Vec<String> = steps
        .iter()
        .filter(|s| {
            engines
                .iter()
                .any(|(_, e)| row(e, s).and_then(|r| r.write_amp).is_some())
        })
        .cloned()
        .collect();
    let wa: Vec<(usize, String, Vec<Option<f64>>)> = engines
        .iter()
        .map(|(ci, e)| {
            (
                *ci,
                e.label.clone(),
                wsteps
                    .iter()
                    .map(|s| row(e, s).and_then(|r| r.write_amp))
                    .collect(),
            )
        })
        .collect();
    charts.push(grouped_bars(
        "write-amp",
        "Write-amp (device bytes written / user bytes)",
        "write-amp",
        &wsteps,
        &wa,
        Some(1.0),
    )?);
    charts.push(grouped_bars(
        "space-amp",
        "Space-amp after each step (disk bytes / live bytes)",
        "space-amp",
        &steps,
        &amp(|r| r.space_amp),
        Some(1.0),
    )?);

    // Throughput as a fraction of the device limit measured by fio.
    let fio = report.engines.iter().find(|e| e.label == "fio");
    let fio_val = |name: &str, f: fn(&Row) -> Option<f64>| {
        fio.and_then(|e| e.rows.iter().find(|r| r.step == name))
            .and_then(f)
    };
    let rr32 = fio_val("randread-4k-qd32", |r| r.ops_sec);
    let seqw = fio_val("write-1m", |r| r.mb_sec);
    if rr32.is_some() || seqw.is_some() {
        let frac: Vec<(usize, String, Vec<Option<f64>>)> = engines
            .iter()
            .map(|(ci, e)| {
                let v = steps
                    .iter()
                    .map(|s| {
                        let r = row(e, s)?;
                        if is_read_step(s) {
                            Some(r.ops_sec? / rr32?)
                        } else {
                            Some(r.mb_sec? / seqw?)
                        }
                    })
                    .collect();
                (*ci, e.label.clone(), v)
            })
            .collect();
        charts.push(grouped_bars(
            "fraction-of-fio",
            "Throughput as a fraction of fio's device limit",
            "fraction",
            &steps,
            &frac,
            Some(1.0),
        )?);
    }

    for s in &steps {
        let series: Vec<(usize, &str, Row)> = engines
            .iter()
            .filter_map(|(ci, e)| row(e, s).map(|r| (*ci, e.label.as_str(), r)))
            .collect();
        let refs: Vec<(usize, &str, &Row)> = series.iter().map(|(c, n, r)| (*c, *n, r)).collect();
        if refs.iter().any(|(_, _, r)| !r.intervals.is_empty()) {
            charts.push(throughput_chart(s, &refs)?);
        }
        if let Some(c) = latency_chart(s, &refs)? {
            charts.push(c);
        }
    }
    Ok(charts)
}

//! SVG plots (plotters, SVG backend only), one set per model:
//! - `ttft-<model>.svg`: TTFT vs context, log-log, one line per cache state (streaming, batch 1),
//!   mean with its 95% t-interval as a band;
//! - `decode-<model>.svg`: decode TPS vs context (log x), one line per cache state, and the physical
//!   ceiling when records carry `physics.decode_ceiling_tps`;
//! - `staggered-<model>.svg`: user B's wait from wall start, sequential vs batched (median bars,
//!   95% t-interval whiskers).
//!
//! A plot with no data to show is not written.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::{CellStats, is_staggered};
use crate::record::{CacheState, Mode, Scenario};
use crate::stats::Summary;

type Res<T> = Result<T, String>;
/// (context, mean, ci low, ci high)
type Point = (f64, f64, f64, f64);

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn color(state: CacheState) -> RGBColor {
    match state {
        CacheState::Cold => RGBColor(31, 119, 180),
        CacheState::Warm => RGBColor(255, 127, 14),
        CacheState::Hot => RGBColor(214, 39, 40),
    }
}

/// File-name-safe model name. Servers like llama.cpp echo the model's file path as its name:
/// only the last component says anything ("/models/tiny.gguf" -> "tiny-gguf").
pub fn slug(model: &str) -> String {
    let last = model.trim_end_matches('/').rsplit('/').next().unwrap_or(model);
    last.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect()
}

/// One rendered plot: the file `--plot` writes it to, the model it shows, and the SVG document.
pub struct Plot {
    pub file_name: String,
    pub model: String,
    pub svg: String,
}

/// Every plot of `cells` (per model: TTFT, decode, staggered; those with data), rendered in memory
/// so `--plot` writes them as files and the HTML report embeds the same documents.
pub fn render_all(cells: &[CellStats]) -> Res<Vec<Plot>> {
    let mut models: Vec<&str> = cells.iter().map(|c| c.id.model.as_str()).collect();
    models.dedup();
    let mut plots = Vec::new();
    for model in models {
        let mine: Vec<&CellStats> = cells.iter().filter(|c| c.id.model == model).collect();
        let single: Vec<&CellStats> = mine
            .iter()
            .copied()
            .filter(|c| c.id.batch_size == 1 && c.id.mode == Mode::Streaming && !is_staggered(&c.id))
            .collect();
        let mut push = |kind: &str, svg: Option<String>| {
            if let Some(svg) = svg {
                plots.push(Plot {
                    file_name: format!("{kind}-{}.svg", slug(model)),
                    model: model.into(),
                    svg,
                });
            }
        };
        push(
            "ttft",
            series_plot(
                model,
                &single,
                |c| &c.ttft_ms,
                "TTFT ms (mean; band: 95% t-interval within the 5-95% range)",
                true,
            )?,
        );
        push(
            "decode",
            series_plot(
                model,
                &single,
                |c| &c.decode_tps,
                "decode tok/s (mean; band: 95% t-interval within the 5-95% range)",
                false,
            )?,
        );
        push("staggered", staggered_plot(model, &mine)?);
    }
    Ok(plots)
}

pub fn write_all(dir: &Path, cells: &[CellStats]) -> Res<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(err)?;
    let mut written = Vec::new();
    for plot in render_all(cells)? {
        let path = dir.join(&plot.file_name);
        crate::store::write_atomic(&path, plot.svg.as_bytes()).map_err(err)?;
        written.push(path);
    }
    Ok(written)
}

/// (context, mean, lo, hi) points of one cache state.
fn points(cells: &[&CellStats], state: CacheState, pick: fn(&CellStats) -> &Summary) -> Vec<Point> {
    cells
        .iter()
        .filter(|c| c.id.cache_state == state)
        .filter_map(|c| {
            let s = pick(c);
            let mean = s.mean?;
            // With 2-3 runs a t-interval spans far past the data (and below zero, which a log
            // axis cannot show): the band is the interval clipped to the samples' 5-95% range.
            let lo = s.ci95_lo.unwrap_or(mean).max(s.p5.unwrap_or(mean));
            let hi = s.ci95_hi.unwrap_or(mean).min(s.p95.unwrap_or(mean));
            Some((f64::from(c.id.context_tokens), clamp(mean), clamp(lo), clamp(hi)))
        })
        .collect()
}

/// The largest value an axis reaches. Plotters computes ticks and pixels in f64 and i32: a range
/// that is infinite (or NaN) never finishes, so every range is finite and not empty whatever the
/// data (a value beyond it is drawn at the edge).
const AXIS_MAX: f64 = 1e300;
/// The smallest value a log axis starts at.
const LOG_MIN: f64 = 1e-3;

fn clamp(v: f64) -> f64 {
    if v.is_nan() { 0.0 } else { v.clamp(-AXIS_MAX, AXIS_MAX) }
}

/// A finite, non-empty y range around [lo, hi] with some room (for a log axis: positive).
fn padded(lo: f64, hi: f64, log: bool) -> (f64, f64) {
    if log {
        let lo = clamp(lo).max(LOG_MIN);
        let hi = clamp(hi).max(lo);
        (lo / 1.5, hi * 1.5)
    } else {
        (0.0, clamp(hi).max(1.0) * 1.15)
    }
}

/// One decode ceiling per context (cache states differ a little in prompt length): the highest.
fn decode_ceilings(cells: &[&CellStats]) -> Vec<(f64, f64)> {
    let mut ceilings: Vec<(f64, f64)> = Vec::new();
    for c in cells {
        let (Some(y), x) = (c.decode_ceiling_tps, f64::from(c.id.context_tokens)) else { continue };
        match ceilings.iter_mut().find(|(cx, _)| *cx == x) {
            Some(p) => p.1 = p.1.max(clamp(y)),
            None => ceilings.push((x, clamp(y))),
        }
    }
    ceilings.sort_by(|a, b| a.0.total_cmp(&b.0));
    ceilings
}

fn series_plot(
    model: &str,
    cells: &[&CellStats],
    pick: fn(&CellStats) -> &Summary,
    y_desc: &str,
    log_y: bool,
) -> Res<Option<String>> {
    let states = [CacheState::Cold, CacheState::Warm, CacheState::Hot];
    let series: Vec<(CacheState, Vec<Point>)> =
        states.iter().map(|&s| (s, points(cells, s, pick))).filter(|(_, p)| !p.is_empty()).collect();
    if series.is_empty() {
        return Ok(None);
    }
    let all = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, _, lo, hi) in all {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(lo), y1.max(hi));
    }
    let ceilings = if log_y { Vec::new() } else { decode_ceilings(cells) };
    y1 = ceilings.iter().fold(y1, |m, &(_, y)| m.max(y));
    let (y0, y1) = padded(y0, y1, log_y);
    let mut svg = String::new();
    // The drawing area borrows `svg` until it is dropped at the end of this block.
    {
        let root = SVGBackend::with_string(&mut svg, (900, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut builder = ChartBuilder::on(&root);
        builder.caption(model, ("sans-serif", 20)).margin(15).x_label_area_size(45).y_label_area_size(70);
        // Context 0 (a hand-written file) has no place on a log axis: start at 1 token.
        let (x0, x1) = (x0.max(1.0), x1.max(1.0));
        let x_range = (x0 / 1.3..x1 * 1.3).log_scale();
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart.configure_mesh().x_desc("context tokens").y_desc(y_desc).draw().map_err(err)?;
                for (state, pts) in &series {
                    let c = color(*state);
                    let mut band: Vec<(f64, f64)> = pts.iter().map(|p| (p.0, p.3.max(y0))).collect();
                    band.extend(pts.iter().rev().map(|p| (p.0, p.2.max(y0))));
                    chart.draw_series(std::iter::once(Polygon::new(band, c.mix(0.18)))).map_err(err)?;
                    chart
                        .draw_series(LineSeries::new(pts.iter().map(|p| (p.0, p.1)), c.stroke_width(2)))
                        .map_err(err)?
                        .label(state.as_str())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
                }
                if !ceilings.is_empty() {
                    chart
                        .draw_series(LineSeries::new(ceilings.iter().copied(), BLACK.stroke_width(1)))
                        .map_err(err)?
                        .label("physical ceiling")
                        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .draw()
                    .map_err(err)?;
            }};
        }
        if log_y {
            draw!(builder.build_cartesian_2d(x_range, (y0..y1).log_scale()).map_err(err)?);
        } else {
            draw!(builder.build_cartesian_2d(x_range, y0..y1).map_err(err)?);
        }
        root.present().map_err(err)?;
    }
    Ok(Some(svg))
}

fn staggered_plot(model: &str, cells: &[&CellStats]) -> Res<Option<String>> {
    let bars: Vec<(&str, &Summary)> =
        [(Scenario::StaggeredSequential, "sequential"), (Scenario::StaggeredBatched, "batched")]
            .iter()
            .filter_map(|(sc, name)| {
                let c = cells.iter().find(|c| c.id.scenario == *sc && c.user_b_wait_ms.median.is_some())?;
                Some((*name, &c.user_b_wait_ms))
            })
            .collect();
    if bars.is_empty() {
        return Ok(None);
    }
    let top = clamp(bars.iter().filter_map(|(_, s)| s.ci95_hi.or(s.median)).fold(1.0, f64::max)) * 1.2;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (700, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{model}: user B wait from wall start"), ("sans-serif", 18))
            .margin(15)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..bars.len() as f64, 0.0..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc("ms (median, 95% t-interval)")
            .draw()
            .map_err(err)?;
        for (i, (name, s)) in bars.iter().enumerate() {
            let x = i as f64;
            let median = clamp(s.median.unwrap_or_default());
            let fill = if *name == "batched" { color(CacheState::Warm) } else { color(CacheState::Cold) };
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x + 0.2, 0.0), (x + 0.8, median)],
                    fill.filled(),
                )))
                .map_err(err)?;
            if let (Some(lo), Some(hi)) = (s.ci95_lo, s.ci95_hi) {
                let whisker = PathElement::new(
                    vec![(x + 0.5, clamp(lo).max(0.0)), (x + 0.5, clamp(hi))],
                    BLACK.stroke_width(2),
                );
                chart.draw_series(std::iter::once(whisker)).map_err(err)?;
            }
            let label = format!("{name} (n={})", s.n);
            chart
                .draw_series(std::iter::once(Text::new(label, (x + 0.25, top * 0.95), ("sans-serif", 14))))
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(Some(svg))
}

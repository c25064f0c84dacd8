//! SVG plots (plotters, SVG backend only), one set per model:
//! - `ttft-<model>.svg`: TTFT vs context, log-log, one line per cache state (streaming, batch 1):
//!   the median (p50, the statistic the table shows) with the interval of the median as a band,
//!   p99 dashed, and the physical floor (prefill ceiling) where the records carry one;
//! - `decode-<model>.svg`: decode TPS vs context (log x), p50 per cache state with the interval of
//!   the median, and the physical ceiling when records carry `physics.decode_ceiling_tps`;
//! - `staggered-<model>.svg`: user B's wait from wall start, sequential vs batched (median bars,
//!   whiskers: the interval of the median).
//!
//! Context ticks sit at the swept sizes (512, 1K, ..., 32K), thinned where labels would touch;
//! log y ticks on 1-2-5 steps (`ticks`).
//!
//! A plot with no data to show is not written.

use std::path::{Path, PathBuf};

use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::CellStats;
use crate::ticks;
use ttft_model::record::{CacheState, Mode, Scenario};
use ttft_model::stats::Summary;

type Res<T> = Result<T, PlotError>;

/// Why plots could not be made or written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlotError {
    /// plotters failed to draw (a bug: every range is made finite before drawing). Its errors are
    /// generic over the backend, so only their message is kept.
    #[error("cannot draw: {0}")]
    Draw(String),
    #[error("cannot create the directory: {0}")]
    Dir(#[from] std::io::Error),
    #[error(transparent)]
    Write(#[from] ttft_results::store::WriteError),
}

fn err<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError::Draw(e.to_string())
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
pub(crate) fn slug(model: &str) -> String {
    let last = model.trim_end_matches('/').rsplit('/').next().unwrap_or(model);
    last.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect()
}

/// One rendered plot: the file `--plot` writes it to, the model it shows, and the SVG document.
pub(crate) struct Plot {
    pub file_name: String,
    pub model: String,
    pub svg: String,
}

/// Every plot of `cells` (per model: TTFT, decode, staggered; those with data), rendered in memory
/// so `--plot` writes them as files and the HTML report embeds the same documents.
pub(crate) fn render_all(cells: &[CellStats]) -> Res<Vec<Plot>> {
    let mut models: Vec<&str> = cells.iter().map(|c| c.id.model.as_str()).collect();
    models.dedup();
    let mut plots = Vec::new();
    for model in models {
        let mine: Vec<&CellStats> = cells.iter().filter(|c| c.id.model == model).collect();
        let single: Vec<&CellStats> = mine
            .iter()
            .copied()
            // A load level's numbers are of its load, not of its context (the load's own plots
            // show them over its levels): one point per context cannot hold them.
            .filter(|c| {
                c.id.batch_size == 1
                    && c.id.mode == Mode::Streaming
                    && !c.id.scenario.is_staggered()
                    && !c.id.is_load_level()
            })
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
        push("ttft", series_plot(model, &single, &TTFT_SPEC)?);
        push("decode", series_plot(model, &single, &DECODE_SPEC)?);
        push("staggered", staggered_plot(model, &mine)?);
    }
    Ok(plots)
}

pub(crate) fn write_all(dir: &Path, cells: &[CellStats]) -> Res<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for plot in render_all(cells)? {
        let path = dir.join(&plot.file_name);
        ttft_results::store::write_atomic(&path, plot.svg.as_bytes())?;
        written.push(path);
    }
    Ok(written)
}

/// One context's point of a cache state's line: the median (p50), the interval of the median
/// (the band) and p99. The table shows the same median and interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Point {
    pub context_tokens: f64,
    pub p50: f64,
    pub ci_lo: f64,
    pub ci_hi: f64,
    pub p99: Option<f64>,
}

/// The points of one cache state: the median where there is one; the band is the interval of
/// the median where there is one (n >= 3), else the median itself (no band).
pub(crate) fn points(
    cells: &[&CellStats],
    state: CacheState,
    pick: fn(&CellStats) -> &Summary,
) -> Vec<Point> {
    cells
        .iter()
        .filter(|c| c.id.cache_state == state)
        .filter_map(|c| {
            let s = pick(c);
            let p50 = s.median?;
            Some(Point {
                context_tokens: f64::from(c.id.context_tokens),
                p50: clamp(p50),
                ci_lo: clamp(s.median_ci_lo.unwrap_or(p50)),
                ci_hi: clamp(s.median_ci_hi.unwrap_or(p50)),
                p99: s.p99.map(clamp),
            })
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

/// One physical limit per context (cache states differ a little in prompt length): the highest
/// (`highest`) or the lowest of the cells' values.
fn limits(cells: &[&CellStats], pick: fn(&CellStats) -> Option<f64>, highest: bool) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for c in cells {
        let (Some(y), x) = (pick(c), f64::from(c.id.context_tokens)) else { continue };
        let y = clamp(y);
        match out.iter_mut().find(|(cx, _)| *cx == x) {
            Some(p) => p.1 = if highest { p.1.max(y) } else { p.1.min(y) },
            None => out.push((x, y)),
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// What one series plot shows.
struct SeriesSpec {
    pick: fn(&CellStats) -> &Summary,
    /// The axis title: names the statistic, as the table's column does.
    y_desc: &'static str,
    log_y: bool,
    /// Draw p99 as a dashed line beside the median.
    p99: bool,
    /// The physical limit of the records (ceiling or floor) and its legend label.
    limit: fn(&CellStats) -> Option<f64>,
    limit_label: &'static str,
    limit_highest: bool,
}

const TTFT_SPEC: SeriesSpec = SeriesSpec {
    pick: |c| &c.ttft_ms,
    y_desc: "TTFT ms: p50 (band: CI of the median), p99 dashed",
    log_y: true,
    p99: true,
    limit: |c| c.ttft_floor_ms,
    limit_label: "physical floor (prefill ceiling)",
    limit_highest: false,
};

const DECODE_SPEC: SeriesSpec = SeriesSpec {
    pick: |c| &c.decode_tps,
    y_desc: "decode tok/s: p50 (band: CI of the median)",
    log_y: false,
    p99: false,
    limit: |c| c.decode_ceiling_tps,
    limit_label: "physical ceiling (decode)",
    limit_highest: true,
};

fn series_plot(model: &str, cells: &[&CellStats], spec: &SeriesSpec) -> Res<Option<String>> {
    let states = [CacheState::Cold, CacheState::Warm, CacheState::Hot];
    let series: Vec<(CacheState, Vec<Point>)> =
        states.iter().map(|&s| (s, points(cells, s, spec.pick))).filter(|(_, p)| !p.is_empty()).collect();
    if series.is_empty() {
        return Ok(None);
    }
    let all = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for p in all {
        let top = if spec.p99 { p.p99.unwrap_or(p.ci_hi).max(p.ci_hi) } else { p.ci_hi };
        (x0, x1, y0, y1) = (x0.min(p.context_tokens), x1.max(p.context_tokens), y0.min(p.ci_lo), y1.max(top));
    }
    let limit = limits(cells, spec.limit, spec.limit_highest);
    for &(_, y) in &limit {
        (y0, y1) = (y0.min(y), y1.max(y));
    }
    let (y0, y1) = padded(y0, y1, spec.log_y);
    // Context 0 (a hand-written file) has no place on a log axis: start at 1 token.
    let (x0, x1) = (x0.max(1.0) / 1.3, x1.max(1.0) * 1.3);
    let mut swept: Vec<f64> = series.iter().flat_map(|(_, p)| p.iter().map(|p| p.context_tokens)).collect();
    swept.sort_by(f64::total_cmp);
    swept.dedup();
    let x_ticks = ticks::log_ticks(x0, x1, &swept, ticks::MIN_TICK_SHARE);
    let mut svg = String::new();
    // The drawing area borrows `svg` until it is dropped at the end of this block.
    {
        let root = SVGBackend::with_string(&mut svg, (900, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut builder = ChartBuilder::on(&root);
        builder.caption(model, ("sans-serif", 20)).margin(15).x_label_area_size(45).y_label_area_size(70);
        let x_range = (x0..x1).log_scale().with_key_points(x_ticks);
        macro_rules! draw {
            ($chart:expr, $y_format:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .label_style(("sans-serif", 14))
                    .axis_desc_style(("sans-serif", 14))
                    // No minor grid: on a linear axis plotters draws dozens of lines between ticks.
                    .light_line_style(TRANSPARENT)
                    .x_desc("context tokens (log scale; ticks at the swept sizes)")
                    .y_desc(spec.y_desc)
                    .x_label_formatter(&|v| ticks::tokens_label(*v))
                    .y_label_formatter($y_format)
                    .draw()
                    .map_err(err)?;
                for (state, pts) in &series {
                    let c = color(*state);
                    let mut band: Vec<(f64, f64)> =
                        pts.iter().map(|p| (p.context_tokens, p.ci_hi.max(y0))).collect();
                    band.extend(pts.iter().rev().map(|p| (p.context_tokens, p.ci_lo.max(y0))));
                    chart.draw_series(std::iter::once(Polygon::new(band, c.mix(0.18)))).map_err(err)?;
                    let line = pts.iter().map(|p| (p.context_tokens, p.p50.max(y0)));
                    chart
                        .draw_series(LineSeries::new(line.clone(), c.stroke_width(2)))
                        .map_err(err)?
                        .label(format!("{} p50", state.as_str()))
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
                    chart.draw_series(line.map(|p| Circle::new(p, 3, c.filled()))).map_err(err)?;
                    let tail: Vec<(f64, f64)> =
                        pts.iter().filter_map(|p| Some((p.context_tokens, p.p99?.max(y0)))).collect();
                    if spec.p99 && !tail.is_empty() {
                        chart
                            .draw_series(DashedLineSeries::new(tail, 6, 4, c.stroke_width(1)))
                            .map_err(err)?
                            .label(format!("{} p99", state.as_str()))
                            .legend(move |(x, y)| {
                                DashedPathElement::new(vec![(x, y), (x + 20, y)], 6, 4, c.stroke_width(1))
                            });
                    }
                }
                if let Some(&(last_x, last_y)) = limit.last() {
                    let limit_style = BLACK.stroke_width(1);
                    let line =
                        if limit.len() == 1 { vec![(x0, last_y), (x1, last_y)] } else { limit.clone() };
                    chart
                        .draw_series(DashedLineSeries::new(line, 3, 3, limit_style))
                        .map_err(err)?
                        .label(spec.limit_label)
                        .legend(move |(x, y)| {
                            DashedPathElement::new(vec![(x, y), (x + 20, y)], 3, 3, limit_style)
                        });
                    // Labelled on the plot too, beside its last point: the legend may be far away.
                    chart
                        .draw_series(std::iter::once(Text::new(
                            spec.limit_label,
                            (last_x, last_y),
                            ("sans-serif", 12)
                                .into_font()
                                .color(&BLACK)
                                .pos(Pos::new(HPos::Right, VPos::Bottom)),
                        )))
                        .map_err(err)?;
                }
                chart
                    .configure_series_labels()
                    .label_font(("sans-serif", 14))
                    .position(SeriesLabelPosition::UpperLeft)
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .draw()
                    .map_err(err)?;
            }};
        }
        if spec.log_y {
            let y_ticks = ticks::log_ticks(y0, y1, &[], ticks::MIN_TICK_SHARE);
            draw!(
                builder
                    .build_cartesian_2d(x_range, (y0..y1).log_scale().with_key_points(y_ticks))
                    .map_err(err)?,
                &|v: &f64| ticks::number_label(*v)
            );
        } else {
            draw!(builder.build_cartesian_2d(x_range, y0..y1).map_err(err)?, &|v: &f64| ticks::number_label(
                *v
            ));
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
    let top = clamp(bars.iter().filter_map(|(_, s)| s.median_ci_hi.or(s.median)).fold(1.0, f64::max)) * 1.2;
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
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 14))
            .disable_x_mesh()
            .x_labels(0)
            .y_desc("user B wait ms: p50 (whisker: CI of the median)")
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
            if let (Some(lo), Some(hi)) = (s.median_ci_lo, s.median_ci_hi) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::CellId;
    use ttft_model::stats::summarize;

    fn cell(context_tokens: u32, ttft: &[f64]) -> CellStats {
        CellStats {
            id: CellId {
                model: "m".into(),
                batch_size: 1,
                scenario: Scenario::Cold,
                mode: Mode::Streaming,
                context_tokens,
                dataset_row: None,
                concurrency: None,
                offered_rate_per_s: None,
                cache_state: CacheState::Cold,
            },
            records: ttft.len(),
            warmup_records: 0,
            quality_ok: ttft.len(),
            cache_confirmed: 0,
            cache_unconfirmed: 0,
            ttft_ms: summarize(ttft),
            e2e_ms: Summary::default(),
            decode_tps: Summary::default(),
            itl_ms: Summary::default(),
            tpot_ms: Summary::default(),
            decode_ceiling_tps: None,
            ttft_floor_ms: Some(40.0),
            ttft_speedup_vs_cold: None,
            system_tps: Summary::default(),
            user_b_wait_ms: Summary::default(),
            load_runs: vec![],
        }
    }

    /// The line is the table's median, the band the table's interval of the median (observed
    /// values: never below the fastest TTFT), not a mean or a t-interval.
    #[test]
    fn the_ttft_line_is_the_median_and_the_band_its_interval() {
        // 549 of 100 and 998 once printed with a t-interval of -4924..6022.
        let cells = [cell(512, &[100.0, 998.0]), cell(1024, &[300.0, 100.0, 2000.0])];
        let refs: Vec<&CellStats> = cells.iter().collect();
        let pts = points(&refs, CacheState::Cold, |c| &c.ttft_ms);
        assert_eq!(
            (pts[0].context_tokens, pts[0].p50, pts[0].ci_lo, pts[0].ci_hi),
            (512.0, 549.0, 549.0, 549.0)
        );
        // p99 of two values: 99% of the way from 100 to 998.
        assert!(pts[0].p99.is_some_and(|p| (p - 989.02).abs() < 1e-9), "{:?}", pts[0]);
        assert_eq!((pts[1].p50, pts[1].ci_lo, pts[1].ci_hi), (300.0, 100.0, 2000.0));
        let svg = series_plot("m", &refs, &TTFT_SPEC).unwrap().unwrap();
        let texts: Vec<&str> = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim()))
            .collect();
        for text in ["512", "1K", "cold p50", "cold p99", "physical floor (prefill ceiling)"] {
            assert!(texts.contains(&text), "{text}: {texts:?}");
        }
        assert!(texts.iter().any(|t| t.starts_with("TTFT ms: p50")), "{texts:?}");
    }
}

//! The load plots.
//!
//! `load-ttft-p99.svg`: TTFT p50 (dashed) and p99 (solid) against the offered rate, one colour per
//! cache state (log-log: rates usually double, and TTFT grows by orders of magnitude past the
//! knee), with the SLO's TTFT as a horizontal line, so the knee is where a line crosses it. The
//! statistics are the table's TTFT p50 and p99, and the axis says so; the p99 counted from the
//! scheduled send (send lag + TTFT, what the SLO judges) is dotted beside them. A rate not honestly
//! offered is crossed out at its points and named at the top ("not honestly offered"): its
//! latencies say less than they seem to. Rate ticks sit at the offered rates (thinned where labels
//! would touch), TTFT ticks on 1-2-5 steps (`ticks`).
//!
//! `load-throughput-latency.svg` (closed loop): output tokens/s against TTFT p50 and p99, all
//! cache states together, one point per concurrency level, each named by its users: the curve
//! every serving paper shows, where a level that adds latency but no throughput is past the knee.

use std::path::Path;

use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::summary::{LoadSummary, RateSummary, StateSummary};
use crate::ticks;
use ttft_model::record::CacheState;

#[derive(Debug, thiserror::Error)]
#[error("cannot draw {path}: {message}")]
pub(crate) struct PlotError {
    path: String,
    message: String,
}

fn color(state: CacheState) -> RGBColor {
    match state {
        CacheState::Cold => RGBColor(31, 119, 180),
        CacheState::Warm => RGBColor(255, 127, 14),
        CacheState::Hot => RGBColor(214, 39, 40),
    }
}

/// Every axis bound stays finite and positive whatever the data (plotters loops on infinities).
fn finite(v: f64) -> f64 {
    if v.is_finite() { v.clamp(1e-3, 1e300) } else { 1e-3 }
}

/// Which TTFT percentile a line shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stat {
    P50,
    P99,
    /// The p99 of TTFT counted from the scheduled send.
    P99Scheduled,
}

impl Stat {
    fn of(self, st: &StateSummary) -> Option<f64> {
        match self {
            Stat::P50 => st.ttft_ms.p50,
            Stat::P99 => st.ttft_ms.p99,
            Stat::P99Scheduled => st.ttft_from_scheduled_ms.p99,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Stat::P50 => "p50",
            Stat::P99 => "p99",
            Stat::P99Scheduled => "p99 from the scheduled send",
        }
    }
}

/// The label a rate not honestly offered carries on the plot.
pub const NOT_HONEST_LABEL: &str = "not honestly offered";

/// The offered rates (closed-loop levels have none).
fn offered(s: &LoadSummary) -> impl Iterator<Item = &RateSummary> {
    s.rates.iter().filter(|r| r.concurrency.is_none())
}

/// The (rate, TTFT) points of each cache state that has any, for one statistic, by rate.
pub(crate) fn series(s: &LoadSummary, stat: Stat) -> Vec<(CacheState, Vec<(f64, f64)>)> {
    let mut out = Vec::new();
    for state in [CacheState::Cold, CacheState::Warm, CacheState::Hot] {
        let mut pts: Vec<(f64, f64)> = offered(s)
            .filter_map(|r| {
                let v = stat.of(r.states.iter().find(|x| x.state == Some(state))?)?;
                Some((finite(r.rate_per_s), finite(v)))
            })
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        if !pts.is_empty() {
            out.push((state, pts));
        }
    }
    out
}

/// Writes the rate plot; Ok(false) when no rate has a TTFT to show (nothing is written).
pub(crate) fn write(path: &Path, s: &LoadSummary) -> Result<bool, PlotError> {
    let fail =
        |e: &dyn std::fmt::Display| PlotError { path: path.display().to_string(), message: e.to_string() };
    let (p50, p99, late) = (series(s, Stat::P50), series(s, Stat::P99), series(s, Stat::P99Scheduled));
    if p99.is_empty() && p50.is_empty() {
        return Ok(false);
    }
    let pts = p50.iter().chain(&p99).chain(&late).flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, finite(s.slo.ttft_ms), finite(s.slo.ttft_ms));
    for &(x, y) in pts {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    let (x0, x1, y0, y1) = (x0 / 1.3, x1 * 1.3, y0 / 1.5, y1 * 1.5);
    let mut rates: Vec<f64> = p50.iter().chain(&p99).flat_map(|(_, p)| p.iter().map(|p| p.0)).collect();
    rates.sort_by(f64::total_cmp);
    let x_ticks = ticks::log_ticks(x0, x1, &rates, ticks::MIN_TICK_SHARE);
    let y_ticks = ticks::log_ticks(y0, y1, &[], ticks::MIN_TICK_SHARE);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("TTFT p50 and p99 vs offered rate", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x0..x1).log_scale().with_key_points(x_ticks),
            (y0..y1).log_scale().with_key_points(y_ticks),
        )
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 14))
        .x_desc("offered rate, requests/s (log scale; ticks at the offered rates)")
        .y_desc(
            "TTFT ms: p99 solid, p50 dashed (the table's TTFT p50, p99); p99 from the scheduled send dotted",
        )
        .x_label_formatter(&|v| ticks::number_label(*v))
        .y_label_formatter(&|v| ticks::number_label(*v))
        .draw()
        .map_err(|e| fail(&e))?;
    for (state, pts) in &late {
        let c = color(*state);
        chart
            .draw_series(DashedLineSeries::new(pts.iter().copied(), 2, 3, c.stroke_width(1)))
            .map_err(|e| fail(&e))?
            .label(format!("{} {}", state.as_str(), Stat::P99Scheduled.name()))
            .legend(move |(x, y)| DashedPathElement::new(vec![(x, y), (x + 20, y)], 2, 3, c.stroke_width(1)));
    }
    for (stat, series) in [(Stat::P99, &p99), (Stat::P50, &p50)] {
        for (state, pts) in series {
            let c = color(*state);
            let name = format!("{} {}", state.as_str(), stat.name());
            let drawn = match stat {
                Stat::P99 => chart.draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2))),
                _ => chart.draw_series(DashedLineSeries::new(pts.iter().copied(), 6, 4, c.stroke_width(2))),
            }
            .map_err(|e| fail(&e))?;
            match stat {
                Stat::P99 => drawn
                    .label(name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))),
                _ => drawn.label(name).legend(move |(x, y)| {
                    DashedPathElement::new(vec![(x, y), (x + 20, y)], 6, 4, c.stroke_width(2))
                }),
            };
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled()))).map_err(|e| fail(&e))?;
        }
    }
    // Rates not honestly offered: every point crossed out, the rate named at the top.
    let dishonest: Vec<f64> =
        offered(s).filter(|r| !r.honestly_offered).map(|r| finite(r.rate_per_s)).collect();
    if !dishonest.is_empty() {
        let crossed = p50.iter().chain(&p99).flat_map(|(_, p)| p.iter()).filter(|p| dishonest.contains(&p.0));
        chart
            .draw_series(crossed.map(|&p| Cross::new(p, 6, BLACK.stroke_width(2))))
            .map_err(|e| fail(&e))?
            .label(format!("x: {NOT_HONEST_LABEL} (the client set the pace)"))
            .legend(|(x, y)| Cross::new((x + 10, y), 6, BLACK.stroke_width(2)));
        chart
            .draw_series(dishonest.iter().map(|&rate| {
                EmptyElement::at((rate, y1 / 1.25))
                    + Text::new(NOT_HONEST_LABEL, (-40, 0), ("sans-serif", 12).into_font())
            }))
            .map_err(|e| fail(&e))?;
    }
    let slo = finite(s.slo.ttft_ms);
    chart
        .draw_series(LineSeries::new([(x0, slo), (x1, slo)], BLACK.stroke_width(1)))
        .map_err(|e| fail(&e))?
        .label(format!("SLO TTFT {} ms", s.slo.ttft_ms))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(true)
}

/// One point per closed-loop level that has a throughput: (users, output tok/s, TTFT p50, p99).
pub(crate) fn curve(s: &LoadSummary) -> Vec<(u32, f64, Option<f64>, Option<f64>)> {
    s.rates
        .iter()
        .filter(|r| r.stopped.is_none())
        .filter_map(|r| {
            let all = r.states.iter().find(|x| x.state.is_none())?;
            Some((r.concurrency?, all.output_tps?, all.ttft_ms.p50, all.ttft_ms.p99))
        })
        .collect()
}

/// Writes the throughput-vs-latency plot; Ok(false) when no closed-loop level has a point.
pub(crate) fn write_curve(path: &Path, s: &LoadSummary) -> Result<bool, PlotError> {
    let fail =
        |e: &dyn std::fmt::Display| PlotError { path: path.display().to_string(), message: e.to_string() };
    let mut pts = curve(s);
    pts.sort_by_key(|p| p.0);
    let line = |stat: Stat| -> Vec<(f64, f64)> {
        pts.iter()
            .filter_map(|&(_, x, p50, p99)| Some((x, finite(if stat == Stat::P50 { p50? } else { p99? }))))
            .collect()
    };
    let (p50, p99) = (line(Stat::P50), line(Stat::P99));
    if p50.is_empty() && p99.is_empty() {
        return Ok(false);
    }
    let x1 = pts.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-3) * 1.15;
    let ys = p50.iter().chain(&p99).map(|p| p.1);
    let (y0, y1) = ys.fold((finite(s.slo.ttft_ms), finite(s.slo.ttft_ms)), |(a, b), y| (a.min(y), b.max(y)));
    let (y0, y1) = (y0 / 1.5, y1 * 1.5);
    let y_ticks = ticks::log_ticks(y0, y1, &[], ticks::MIN_TICK_SHARE);
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Throughput vs latency, closed loop (a point per level of users)", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x1, (y0..y1).log_scale().with_key_points(y_ticks))
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 14))
        .x_labels(7)
        .x_desc("output tokens/s, all states (the table's Output tok/s)")
        .y_desc("TTFT ms: p99 solid, p50 dashed (the table's TTFT p50, p99)")
        .x_label_formatter(&|v| ticks::number_label(*v))
        .y_label_formatter(&|v| ticks::number_label(*v))
        .draw()
        .map_err(|e| fail(&e))?;
    let c = RGBColor(31, 119, 180);
    chart
        .draw_series(LineSeries::new(p99.iter().copied(), c.stroke_width(2)))
        .map_err(|e| fail(&e))?
        .label("TTFT p99")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    chart
        .draw_series(DashedLineSeries::new(p50.iter().copied(), 6, 4, c.stroke_width(2)))
        .map_err(|e| fail(&e))?
        .label("TTFT p50")
        .legend(move |(x, y)| DashedPathElement::new(vec![(x, y), (x + 20, y)], 6, 4, c.stroke_width(2)));
    chart
        .draw_series(p50.iter().chain(&p99).map(|&p| Circle::new(p, 3, c.filled())))
        .map_err(|e| fail(&e))?;
    // Each level named once, at its p99 point (or p50 where it has no p99), above and right of it.
    let named = pts.iter().filter_map(|&(users, x, p50, p99)| Some((users, x, finite(p99.or(p50)?))));
    chart
        .draw_series(named.map(|(users, x, y)| {
            EmptyElement::at((x, y))
                + Text::new(super::summary::users_label(users), (6, -18), ("sans-serif", 13).into_font())
        }))
        .map_err(|e| fail(&e))?;
    let slo = finite(s.slo.ttft_ms);
    chart
        .draw_series(LineSeries::new([(0.0, slo), (x1, slo)], BLACK.stroke_width(1)))
        .map_err(|e| fail(&e))?
        .label(format!("SLO TTFT {} ms", s.slo.ttft_ms))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::summary::{Percentiles, RateSummary, StateSummary};

    /// Rates 1 to 10 per second once got overlapping labels ("9.010.0"): each tick label is now
    /// its own short number at an offered rate, none closer to the next than the labels need.
    #[test]
    fn rate_ticks_are_offered_rates_and_their_labels_do_not_touch() {
        let rates: Vec<RateSummary> = (1..=10)
            .map(|r| RateSummary {
                run: r,
                rate_per_s: f64::from(r),
                states: vec![StateSummary {
                    state: Some(CacheState::Cold),
                    ttft_ms: Percentiles { p99: Some(100.0 * f64::from(r)), ..Default::default() },
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect();
        let summary = LoadSummary { rates, ..Default::default() };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("load-ttft-p99.svg");
        assert!(write(&path, &summary).unwrap());
        let svg = std::fs::read_to_string(&path).unwrap();
        if let Some(keep) = std::env::var_os("TTFT_BENCH_SCREENSHOT_DIR") {
            std::fs::write(Path::new(&keep).join("load-ttft-p99.svg"), &svg).unwrap();
        }
        let texts: Vec<&str> = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim()))
            .collect();
        let numbers: Vec<f64> = texts.iter().filter_map(|t| t.parse().ok()).collect();
        assert!(!texts.iter().any(|t| t.contains(".0")), "no '9.010.0': {texts:?}");
        for rate in [1.0, 2.0, 5.0] {
            assert!(numbers.contains(&rate), "{rate}: {texts:?}");
        }
        assert!(!(numbers.contains(&9.0) && numbers.contains(&10.0)), "9 and 10 are too close: {texts:?}");
        assert!(texts.iter().any(|t| t.starts_with("SLO TTFT")), "{texts:?}");
    }
}

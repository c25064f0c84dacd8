//! What the user sees while a run goes: the live view on a terminal (src/live, attached with
//! `Progress::showing`), plain lines otherwise (CI logs, pipes), nothing with `--quiet`. Always on
//! stderr: stdout stays clean for scripts.
//!
//! Progress and its ETA are counted in the cost model's seconds (`cost`), not in cells: a 32K cold
//! cell weighs ~30 of a 1K one, so the ETA is right from the first cell. The plan's scale is
//! corrected as cells finish (elapsed over planned so far).
//!
//! This leaf knows nothing of records or terminals: a live view receives what progress says
//! through `LiveSink`, whose calls only hand a small message to the view's own thread (they never
//! wait for a redraw), so a measuring task that reports progress is never held up by the screen.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where a live view takes what progress says. Every call returns at once: the view draws on its
/// own thread.
pub(crate) trait LiveSink: Send + Sync {
    /// A note or warning, kept in order (the view shows the latest and prints them all when it ends).
    fn note(&self, text: String);
    /// Where the run is now: the cell running, the rate under way.
    fn now(&self, text: String);
    /// The thermal gate: `Some(why)` while it waits, `None` once the next measurement starts.
    fn thermal(&self, status: Option<String>);
    /// The share of the plan done (0..=1), the plan's forecast and the time left (None where
    /// the plan has no cost model: its cells are only counted).
    fn position(&self, share: f64, forecast: Option<Duration>, eta: Option<Duration>);
    /// The run's work ended: the view draws its last frame and gives the terminal back.
    fn finish(&self);
}

pub(crate) struct Progress {
    out: Out,
    /// Expected seconds of each cell, in order (all 1.0 when there is no cost model).
    costs: Vec<f64>,
    /// The costs are the cost model's seconds (a forecast), not a count of cells.
    timed: bool,
    state: Mutex<State>,
}

enum Out {
    Live(Arc<dyn LiveSink>),
    Lines,
    Quiet,
}

struct State {
    started: Instant,
    planned_done_s: f64,
}

impl Progress {
    pub(crate) fn new(total: usize, quiet: bool) -> Progress {
        Progress { timed: false, ..Progress::weighted(vec![1.0; total], quiet) }
    }

    /// Progress over cells of these expected durations (seconds), as plain lines (or nothing).
    pub(crate) fn weighted(costs: Vec<f64>, quiet: bool) -> Progress {
        let state = Mutex::new(State { started: Instant::now(), planned_done_s: 0.0 });
        let out = if quiet { Out::Quiet } else { Out::Lines };
        Progress { out, costs, timed: true, state }
    }

    /// The same progress shown by a live view instead of lines (`--quiet` stays quiet).
    pub(crate) fn showing(mut self, sink: Option<Arc<dyn LiveSink>>) -> Progress {
        if let (Some(sink), Out::Lines) = (sink, &self.out) {
            self.out = Out::Live(sink);
        }
        self
    }

    /// A progress over other cells that goes where this one goes (lines, quiet or its live view):
    /// cells of these expected seconds (`timed`), or only counted (every cost 1.0, not `timed`).
    pub(crate) fn reweighted(&self, costs: Vec<f64>, timed: bool) -> Progress {
        let out = match &self.out {
            Out::Live(sink) => Out::Live(sink.clone()),
            Out::Lines => Out::Lines,
            Out::Quiet => Out::Quiet,
        };
        let state = Mutex::new(State { started: Instant::now(), planned_done_s: 0.0 });
        Progress { out, costs, timed, state }
    }

    /// A note that is not about one cell (setup, calibration, warnings), every registered secret
    /// masked (it often quotes a server or a command).
    pub(crate) fn note(&self, text: &str) {
        let text = ttft_model::secrets::redact(text);
        match &self.out {
            Out::Live(sink) => sink.note(text),
            Out::Lines => eprintln!("{text}"),
            Out::Quiet => {}
        }
    }

    /// A warning about what is measured (rows skipped, a setting that cannot hold): said with
    /// `--quiet` too, which silences progress, not what changes the numbers.
    pub(crate) fn warn(&self, text: &str) {
        match &self.out {
            Out::Live(sink) => sink.note(text.to_string()),
            Out::Lines | Out::Quiet => eprintln!("{text}"),
        }
    }

    /// Cell `index` (0-based) starts.
    pub(crate) fn cell(&self, index: usize, label: &str) {
        let total = self.costs.len();
        match &self.out {
            Out::Live(sink) => {
                sink.thermal(None);
                sink.now(format!("cell {}/{total}: {label}", index + 1));
                self.tell_position(sink.as_ref(), index);
            }
            Out::Lines => eprintln!("[{}/{total}] {label} ...{}", index + 1, self.eta_text(index)),
            Out::Quiet => {}
        }
    }

    /// Cell `index` finished; `summary` is e.g. "ttft 812.4 ms" or "error: timeout".
    pub(crate) fn done(&self, index: usize, label: &str, summary: &str) {
        let cost = self.costs.get(index).copied().unwrap_or(0.0);
        {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            s.planned_done_s += cost;
        }
        match &self.out {
            Out::Live(sink) => {
                sink.now(format!("cell {}/{} done: {label}: {summary}", index + 1, self.costs.len()));
                self.tell_position(sink.as_ref(), index + 1);
            }
            Out::Lines => eprintln!("[{}/{}] {label}: {summary}", index + 1, self.costs.len()),
            Out::Quiet => {}
        }
    }

    /// Cell `index` is `fraction` (0..=1) done: a cell that runs for a known time (a rate of
    /// `bench load`) moves the view while it runs; without a terminal each call is a line.
    pub(crate) fn partly(&self, index: usize, fraction: f64, label: &str) {
        match &self.out {
            Out::Live(sink) => {
                let before: f64 = self.costs.iter().take(index).sum();
                let cost = self.costs.get(index).copied().unwrap_or(0.0);
                let planned: f64 = self.costs.iter().sum();
                let done = before + fraction.clamp(0.0, 1.0) * cost;
                let elapsed_s =
                    self.state.lock().unwrap_or_else(|p| p.into_inner()).started.elapsed().as_secs_f64();
                let scale = if done > 0.0 { elapsed_s / done } else { 1.0 };
                let eta = ((planned - done) * scale).max(0.0);
                let share = if planned > 0.0 { done / planned } else { 0.0 };
                let seconds = |s: f64| (self.timed && s.is_finite()).then(|| Duration::from_secs_f64(s));
                sink.position(share, seconds(planned), seconds(eta));
                sink.now(label.to_string());
            }
            Out::Lines => eprintln!("  {label}"),
            Out::Quiet => {}
        }
    }

    /// Whether progress is redrawn in place by a live view (a terminal), rather than lines.
    pub(crate) fn is_live(&self) -> bool {
        matches!(self.out, Out::Live(_))
    }

    /// The time left before cell `index`: the plan's remaining seconds, scaled by how the cells so
    /// far compared with their plan.
    pub(crate) fn eta(&self, index: usize) -> Option<Duration> {
        let remaining: f64 = self.costs.get(index..)?.iter().sum();
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let scale =
            if s.planned_done_s > 0.0 { s.started.elapsed().as_secs_f64() / s.planned_done_s } else { 1.0 };
        let eta = remaining * scale;
        eta.is_finite().then(|| Duration::from_secs_f64(eta.max(0.0)))
    }

    fn tell_position(&self, sink: &dyn LiveSink, index: usize) {
        let planned: f64 = self.costs.iter().sum();
        let done = self.state.lock().unwrap_or_else(|p| p.into_inner()).planned_done_s;
        let share = if planned > 0.0 { done / planned } else { 0.0 };
        // Without a cost model every cell weighs 1: there is no forecast, only a count of cells.
        let forecast = self.timed.then(|| Duration::from_secs_f64(planned.max(0.0)));
        let eta = self.timed.then(|| self.eta(index)).flatten();
        sink.position(share, forecast, eta);
    }

    fn eta_text(&self, index: usize) -> String {
        match self.eta(index) {
            Some(eta) if self.timed && self.costs.iter().any(|&c| c != 1.0) => {
                format!(" (about {} left)", humantime::format_duration(Duration::from_secs(eta.as_secs())))
            }
            _ => String::new(),
        }
    }

    /// The thermal gate is waiting, and why.
    pub(crate) fn cooling(&self, why: &str) {
        match &self.out {
            Out::Live(sink) => sink.thermal(Some(why.to_string())),
            Out::Lines => eprintln!("  cooling down: {why}"),
            Out::Quiet => {}
        }
    }

    /// The run's work ended: a live view gives the terminal back (before the verb's last words).
    pub(crate) fn finish(&self) {
        if let Out::Live(sink) = &self.out {
            sink.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eta_is_the_plans_remainder_scaled_by_the_cells_so_far() {
        let before = Instant::now();
        let p = Progress::weighted(vec![1.0, 30.0, 1.0], true);
        assert_eq!(p.eta(0), Some(Duration::from_secs(32)), "before any cell: the plan itself");
        assert_eq!(p.eta(3), Some(Duration::ZERO));
        p.done(0, "a", "ok");
        // One planned second took `took` here (almost nothing, or more on a loaded machine), so the
        // 31 planned seconds left are scaled by it: never more than 31 x took.
        let eta = p.eta(1).unwrap();
        let took = before.elapsed();
        assert!(eta <= took.mul_f64(31.0), "{eta:?} left after one planned second took {took:?}");
    }
}

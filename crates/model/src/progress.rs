//! What the user sees while a sweep runs: a progress bar on a terminal, plain lines otherwise
//! (CI logs, pipes), nothing with `--quiet`. Always on stderr: stdout stays clean for scripts.
//!
//! Progress and its ETA are counted in the cost model's seconds (`cost`), not in cells: a 32K cold
//! cell weighs ~30 of a 1K one, so the ETA is right from the first cell. The plan's scale is
//! corrected as cells finish (elapsed over planned so far).

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress {
    out: Out,
    /// Expected seconds of each cell, in order (all 1.0 when there is no cost model).
    costs: Vec<f64>,
    state: Mutex<State>,
}

enum Out {
    Bar(ProgressBar),
    Lines,
    Quiet,
}

struct State {
    started: Instant,
    planned_done_s: f64,
}

impl Progress {
    pub fn new(total: usize, quiet: bool) -> Progress {
        Progress::weighted(vec![1.0; total], quiet)
    }

    /// Progress over cells of these expected durations (seconds).
    pub fn weighted(costs: Vec<f64>, quiet: bool) -> Progress {
        let state = Mutex::new(State { started: Instant::now(), planned_done_s: 0.0 });
        if quiet {
            return Progress { out: Out::Quiet, costs, state };
        }
        if std::io::stderr().is_terminal() {
            let total_ms: f64 = costs.iter().sum::<f64>() * 1000.0;
            let bar = ProgressBar::new(total_ms.max(1.0) as u64);
            let style =
                ProgressStyle::with_template("{bar:30.cyan/blue} {percent:>3}%  {elapsed_precise}  {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            return Progress { out: Out::Bar(bar), costs, state };
        }
        Progress { out: Out::Lines, costs, state }
    }

    pub fn is_quiet(&self) -> bool {
        matches!(self.out, Out::Quiet)
    }

    /// A note that is not about one cell (setup, calibration, warnings), every registered secret
    /// masked (it often quotes a server or a command).
    pub fn note(&self, text: &str) {
        let text = crate::secrets::redact(text);
        match &self.out {
            Out::Bar(bar) => bar.println(text),
            Out::Lines => eprintln!("{text}"),
            Out::Quiet => {}
        }
    }

    /// A warning about what is measured (rows skipped, a setting that cannot hold): said with
    /// `--quiet` too, which silences progress, not what changes the numbers.
    pub fn warn(&self, text: &str) {
        match &self.out {
            Out::Bar(bar) => bar.println(text),
            Out::Lines | Out::Quiet => eprintln!("{text}"),
        }
    }

    /// Cell `index` (0-based) starts.
    pub fn cell(&self, index: usize, label: &str) {
        let total = self.costs.len();
        match &self.out {
            Out::Bar(bar) => {
                bar.set_message(format!("[{}/{total}] {label}{}", index + 1, self.eta_text(index)))
            }
            Out::Lines => eprintln!("[{}/{total}] {label} ...{}", index + 1, self.eta_text(index)),
            Out::Quiet => {}
        }
    }

    /// Cell `index` finished; `summary` is e.g. "ttft 812.4 ms" or "error: timeout".
    pub fn done(&self, index: usize, label: &str, summary: &str) {
        let cost = self.costs.get(index).copied().unwrap_or(0.0);
        let planned = {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            s.planned_done_s += cost;
            s.planned_done_s
        };
        match &self.out {
            Out::Bar(bar) => {
                bar.set_position((planned * 1000.0) as u64);
                bar.set_message(format!("{label}: {summary}"));
            }
            Out::Lines => eprintln!("[{}/{}] {label}: {summary}", index + 1, self.costs.len()),
            Out::Quiet => {}
        }
    }

    /// Cell `index` is `fraction` (0..=1) done: a cell that runs for a known time (a rate of
    /// `bench load`) moves the bar while it runs; without a terminal each call is a line.
    pub fn partly(&self, index: usize, fraction: f64, label: &str) {
        match &self.out {
            Out::Bar(bar) => {
                let before: f64 = self.costs.iter().take(index).sum();
                let cost = self.costs.get(index).copied().unwrap_or(0.0);
                bar.set_position(((before + fraction.clamp(0.0, 1.0) * cost) * 1000.0) as u64);
                bar.set_message(label.to_string());
            }
            Out::Lines => eprintln!("  {label}"),
            Out::Quiet => {}
        }
    }

    /// Whether progress is a bar redrawn in place (a terminal), rather than lines.
    pub fn is_bar(&self) -> bool {
        matches!(self.out, Out::Bar(_))
    }

    /// The time left before cell `index`: the plan's remaining seconds, scaled by how the cells so
    /// far compared with their plan.
    pub fn eta(&self, index: usize) -> Option<Duration> {
        let remaining: f64 = self.costs.get(index..)?.iter().sum();
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let scale =
            if s.planned_done_s > 0.0 { s.started.elapsed().as_secs_f64() / s.planned_done_s } else { 1.0 };
        let eta = remaining * scale;
        eta.is_finite().then(|| Duration::from_secs_f64(eta.max(0.0)))
    }

    fn eta_text(&self, index: usize) -> String {
        match self.eta(index) {
            Some(eta) if self.costs.iter().any(|&c| c != 1.0) => {
                format!(" (about {} left)", humantime::format_duration(Duration::from_secs(eta.as_secs())))
            }
            _ => String::new(),
        }
    }

    /// The thermal gate is waiting, and why.
    pub fn cooling(&self, why: &str) {
        match &self.out {
            Out::Bar(bar) => bar.set_message(format!("cooling down: {why}")),
            Out::Lines => eprintln!("  cooling down: {why}"),
            Out::Quiet => {}
        }
    }

    pub fn finish(&self) {
        if let Out::Bar(bar) = &self.out {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eta_is_the_plans_remainder_scaled_by_the_cells_so_far() {
        let before = std::time::Instant::now();
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

//! What the user sees while a sweep runs: a progress bar on a terminal, plain lines otherwise
//! (CI logs, pipes), nothing with `--quiet`. Always on stderr: stdout stays clean for scripts.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

pub enum Progress {
    Bar(ProgressBar),
    Lines { total: usize },
    Quiet,
}

impl Progress {
    pub fn new(total: usize, quiet: bool) -> Progress {
        if quiet {
            return Progress::Quiet;
        }
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(total as u64);
            let style = ProgressStyle::with_template(
                "{bar:30.cyan/blue} {pos}/{len} cells  {elapsed_precise}  {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            return Progress::Bar(bar);
        }
        Progress::Lines { total }
    }

    pub fn is_quiet(&self) -> bool {
        matches!(self, Progress::Quiet)
    }

    /// A note that is not about one cell (setup, calibration, warnings).
    pub fn note(&self, text: &str) {
        match self {
            Progress::Bar(bar) => bar.println(text),
            Progress::Lines { .. } => eprintln!("{text}"),
            Progress::Quiet => {}
        }
    }

    /// Cell `index` (0-based) starts.
    pub fn cell(&self, index: usize, label: &str) {
        match self {
            Progress::Bar(bar) => {
                bar.set_position(index as u64);
                bar.set_message(label.to_string());
            }
            Progress::Lines { total } => eprintln!("[{}/{total}] {label} ...", index + 1),
            Progress::Quiet => {}
        }
    }

    /// Cell `index` finished; `summary` is e.g. "ttft 812.4 ms" or "error: timeout".
    pub fn done(&self, index: usize, label: &str, summary: &str) {
        match self {
            Progress::Bar(bar) => {
                bar.set_position(index as u64 + 1);
                bar.set_message(format!("{label}: {summary}"));
            }
            Progress::Lines { total } => eprintln!("[{}/{total}] {label}: {summary}", index + 1),
            Progress::Quiet => {}
        }
    }

    /// The thermal gate is waiting, and why.
    pub fn cooling(&self, why: &str) {
        match self {
            Progress::Bar(bar) => bar.set_message(format!("cooling down: {why}")),
            Progress::Lines { .. } => eprintln!("  cooling down: {why}"),
            Progress::Quiet => {}
        }
    }

    pub fn finish(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

//! Where a sweep's wall time goes: the measured windows and the priming requests the cache
//! states need are the server's work; prompt building, preset calls, metrics scrapes, record
//! writes (fsync) and thermal waits and probes are the harness's own time between cells, and
//! whatever the parts do not explain is `other` (progress output, record building). The sum is
//! reported at the end of every sweep and kept in run.json (`harness_time`).
//!
//! Parts are timed where they run one after another (sessions are prepared one by one); the
//! measured requests of a batch run together and are timed as one span, so the parts never
//! add up to more than the wall time.

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::meta::HarnessTime;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Part {
    /// The timed windows (a warm reload included).
    Measured,
    /// Unmeasured requests a cache state needs (warm priming, hot turns 1-2, stagger calibration).
    Priming,
    Prompt,
    Preset,
    Metrics,
    Write,
    Thermal,
    /// `--think-time` pauses between a hot conversation's turns: asked for, so neither measured
    /// nor harness time.
    Think,
}

const PARTS: usize = 8;

/// Time spent per part, added up over a sweep.
#[derive(Debug, Default)]
pub(crate) struct HarnessClock {
    spent: Mutex<[Duration; PARTS]>,
}

impl HarnessClock {
    pub(crate) fn add(&self, part: Part, took: Duration) {
        let mut spent = self.spent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        spent[part as usize] += took;
    }

    /// Runs `work`, adding its duration to `part`.
    pub(crate) async fn time<T>(&self, part: Part, work: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let out = work.await;
        self.add(part, started.elapsed());
        out
    }

    /// The parts against `wall` (the cell loop's duration).
    pub(crate) fn summary(&self, wall: Duration) -> HarnessTime {
        let spent = *self.spent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        split(wall, spent)
    }
}

fn split(wall: Duration, spent: [Duration; PARTS]) -> HarnessTime {
    let s = |p: Part| spent[p as usize].as_secs_f64();
    let wall_s = wall.as_secs_f64();
    let known: f64 = spent.iter().map(Duration::as_secs_f64).sum();
    let other_s = (wall_s - known).max(0.0);
    let harness_s =
        s(Part::Prompt) + s(Part::Preset) + s(Part::Metrics) + s(Part::Write) + s(Part::Thermal) + other_s;
    HarnessTime {
        wall_s,
        measured_s: s(Part::Measured),
        priming_s: s(Part::Priming),
        prompt_s: s(Part::Prompt),
        preset_s: s(Part::Preset),
        metrics_s: s(Part::Metrics),
        write_s: s(Part::Write),
        thermal_s: s(Part::Thermal),
        think_s: s(Part::Think),
        other_s,
        harness_s,
        harness_fraction: if wall_s > 0.0 { (harness_s / wall_s).min(1.0) } else { 0.0 },
    }
}

/// "harness time between cells: 0.4% of 25 s (prompts 0.01 s, preset calls 0.05 s, ...)".
pub(crate) fn line(t: &HarnessTime) -> String {
    format!(
        "harness time between cells: {:.1}% of {:.1} s (prompts {:.2} s, preset calls {:.2} s, metrics {:.2} s, \
         writes {:.2} s, thermal {:.2} s, other {:.2} s; measured {:.1} s, priming {:.1} s, think time {:.1} s)",
        100.0 * t.harness_fraction,
        t.wall_s,
        t.prompt_s,
        t.preset_s,
        t.metrics_s,
        t.write_s,
        t.thermal_s,
        t.other_s,
        t.measured_s,
        t.priming_s,
        t.think_s
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_harness_share_is_everything_but_the_servers_work() {
        let clock = HarnessClock::default();
        clock.add(Part::Measured, Duration::from_secs(6));
        clock.add(Part::Priming, Duration::from_secs(2));
        clock.add(Part::Prompt, Duration::from_millis(500));
        clock.add(Part::Write, Duration::from_millis(500));
        let t = clock.summary(Duration::from_secs(10));
        assert_eq!(t.other_s, 1.0);
        assert_eq!(t.harness_s, 2.0);
        assert_eq!(t.harness_fraction, 0.2);
        assert!(line(&t).starts_with("harness time between cells: 20.0% of 10.0 s"));
    }

    #[test]
    fn parts_beyond_the_wall_leave_no_negative_other() {
        let clock = HarnessClock::default();
        clock.add(Part::Measured, Duration::from_secs(3));
        let t = clock.summary(Duration::from_secs(2));
        assert_eq!((t.other_s, t.harness_fraction), (0.0, 0.0));
    }
}

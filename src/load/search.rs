//! `--rates auto`: the highest rate that is honestly offered and meets the SLO target, for the
//! mix as a whole.
//!
//! Two closed-loop passes bound it: a synchronous one (one user: the rate one request at a time
//! sustains) and a saturation one (`SATURATION_USERS` users: the most the server completes). A
//! rate above the saturation throughput cannot be met (its queue grows for as long as it runs),
//! so the search bisects [0, saturation]: its first rate is the synchronous pass's, each later one
//! the middle of the bracket; a rate passes when it was honestly offered (see `summary`), ran to
//! its end, and its goodput is at least the target. The bracket's low end is always a rate that
//! passed (or 0), its high end one that failed (or the saturation throughput). After
//! `--search-steps` rates, or once the bracket is narrower than `CLOSE_ENOUGH` of its top, the
//! answer is the bracket's low end: the highest rate seen to pass, never one only inferred.
//!
//! Each step is decided from its run's records the moment it ends and recorded in run.json
//! (`load.search.steps`), so a search cut short still shows every step it took.

use crate::meta::{LoadPlan, RateSchedule, SearchStep};
use ttft_model::record::{CacheState, Measurement};

use super::schedule;
use super::summary::{RunKey, run_summary};

/// Users of the saturation pass: enough to fill any server this client can drive.
pub(crate) const SATURATION_USERS: u32 = 64;

/// The search stops early once the bracket is this narrow, relative to its top.
pub(crate) const CLOSE_ENOUGH: f64 = 0.05;

/// Rates are offered to 3 significant digits: readable in the table, and as fine as any step.
fn round3(rate: f64) -> f64 {
    if rate <= 0.0 || !rate.is_finite() {
        return 0.0;
    }
    let scale = 10f64.powi(2 - rate.log10().floor() as i32);
    (rate * scale).round() / scale
}

/// The plan's first run of a search: the synchronous pass.
pub(crate) fn first(run: u32) -> RateSchedule {
    RateSchedule { run, concurrency: Some(1), ..Default::default() }
}

/// Decides the step `run` just made from its records, and appends the next run to the plan (or
/// ends the search).
pub(crate) fn advance(plan: &mut LoadPlan, run: u32, written: &[Measurement]) {
    let Some(planned) = plan.rates.iter().find(|r| r.run == run).cloned() else { return };
    let states: Vec<CacheState> = plan.mix.iter().map(|(s, _)| *s).collect();
    let warmup_ms = planned.concurrency.map_or(0.0, |_| plan.warmup_s.unwrap_or(0.0) * 1000.0);
    let key = RunKey { run, rate_per_s: planned.rate_per_s, concurrency: planned.concurrency, warmup_ms };
    let summary = run_summary(written, &key, &states, &plan.slo);
    let all = summary.states.last().cloned().unwrap_or_default();
    let (slo_target, seed, duration_s, mix) =
        (plan.slo_target, plan.seed, plan.duration_s, crate::cli::Mix(plan.mix.clone()));
    let next_run = plan.rates.iter().map(|r| r.run).max().unwrap_or(0) + 1;
    let Some(search) = plan.search.as_mut() else { return };
    if search.finished {
        return;
    }
    let (mut lo, mut hi) = search.steps.last().and_then(|s| s.bracket_per_s).unwrap_or((0.0, f64::INFINITY));
    let mut step = SearchStep {
        run,
        rate_per_s: planned.concurrency.is_none().then_some(planned.rate_per_s),
        concurrency: planned.concurrency,
        achieved_rate_per_s: all.achieved_rate_per_s,
        goodput: all.goodput,
        ttft_p99_ms: all.ttft_ms.p99,
        send_lag_p99_ms: summary.send_lag_ms.p99,
        honestly_offered: summary.honestly_offered,
        ..Default::default()
    };
    let sync = search.steps.iter().find(|s| s.kind == "synchronous").and_then(|s| s.achieved_rate_per_s);
    // A rate offered again after drawing no arrivals draws them from the next run's seed.
    let mut retry = false;
    let next_rate = match planned.concurrency {
        Some(1) if search.steps.is_empty() => {
            step.kind = "synchronous".into();
            None
        }
        Some(_) => {
            // The saturation throughput bounds every rate from above; the synchronous pass's own
            // rate is the first one offered: one user sustained it, so it is the rate most likely
            // to pass honestly. Where the saturation pass got no more (a server serving one
            // request at a time, a slot-pinned one whose sessions wait for slots), the bound is
            // just above it, so it is still offered.
            step.kind = "saturation".into();
            let first = sync.map(round3);
            hi = all.achieved_rate_per_s.unwrap_or(0.0).max(first.map_or(0.0, |r| r * (1.0 + CLOSE_ENOUGH)));
            first
        }
        None => {
            step.kind = "rate".into();
            if all.goodput.is_none() && planned.stopped.is_none() {
                // The schedule drew no arrivals in the duration (a low rate, a short duration):
                // nothing was measured, so the step decides nothing and the same rate is offered
                // again, with the next run's arrivals.
                step.passed = None;
                retry = true;
                Some(planned.rate_per_s)
            } else {
                let passed = planned.stopped.is_none()
                    && summary.honestly_offered
                    && all.goodput.is_some_and(|g| g >= slo_target);
                step.passed = Some(passed);
                if passed {
                    lo = lo.max(planned.rate_per_s);
                } else {
                    hi = hi.min(planned.rate_per_s);
                }
                Some(round3((lo + hi) / 2.0))
            }
        }
    };
    step.bracket_per_s = hi.is_finite().then_some((lo, hi));
    search.steps.push(step);
    let rate_steps = search.steps.iter().filter(|s| s.kind == "rate").count() as u32;
    search.found_rate_per_s = (lo > 0.0).then_some(lo);
    let next = next_rate.filter(|r| {
        *r > 0.0
            && *r > lo
            && *r < hi
            && (hi - lo) / hi >= CLOSE_ENOUGH
            && rate_steps < search.max_steps
            && r * duration_s <= schedule::MAX_ARRIVALS as f64 / 2.0
    });
    let saturation_next = planned.concurrency == Some(1) && rate_steps == 0 && search.steps.len() == 1;
    if saturation_next {
        let users = search.saturation_users;
        plan.rates.push(RateSchedule { run: next_run, concurrency: Some(users), ..Default::default() });
        return;
    }
    match next {
        Some(rate) => plan.rates.push(RateSchedule {
            run: next_run,
            rate_per_s: rate,
            arrivals: schedule::arrivals(
                if retry { seed.wrapping_add(u64::from(next_run)) } else { seed },
                rate,
                duration_s,
                &mix,
            ),
            ..Default::default()
        }),
        None => search.finished = true,
    }
}

/// The steps as a table (stderr at the end of a search).
pub(crate) fn table(search: &crate::meta::RateSearch) -> String {
    let f = |v: Option<f64>, d: usize| v.map_or("-".to_string(), |x| format!("{x:.d$}"));
    let mut t = crate::output::table(
        crate::output::TableStyle::Terminal,
        &[
            "Step",
            "Run",
            "Kind",
            "Offered",
            "Achieved /s",
            "Goodput",
            "TTFT p99 ms",
            "Send lag p99 ms",
            "Honest",
            "Passed",
            "Bracket /s",
        ],
        1,
    );
    for (i, s) in search.steps.iter().enumerate() {
        let offered = match (s.rate_per_s, s.concurrency) {
            (Some(r), _) => format!("{r}/s"),
            (None, Some(c)) => super::summary::users_label(c),
            _ => "-".into(),
        };
        let bracket = s.bracket_per_s.map_or("-".into(), |(lo, hi)| format!("{lo:.3}..{hi:.3}"));
        t.add_row(vec![
            (i + 1).to_string(),
            s.run.to_string(),
            s.kind.clone(),
            offered,
            f(s.achieved_rate_per_s, 2),
            s.goodput.map_or("-".into(), |g| format!("{:.0}%", g * 100.0)),
            f(s.ttft_p99_ms, 1),
            f(s.send_lag_p99_ms, 3),
            if s.honestly_offered { "yes" } else { "NO" }.to_string(),
            s.passed.map_or("-", |p| if p { "yes" } else { "no" }).to_string(),
            bracket,
        ]);
    }
    let mut out = crate::output::table_text(t);
    out.push_str(&match (search.found_rate_per_s, search.finished) {
        (Some(r), true) => format!("Highest rate honestly offered that met the target: {r}/s\n"),
        (Some(r), false) => format!("The search was cut short; the highest rate that passed so far: {r}/s\n"),
        (None, _) => "No rate passed: not even the synchronous pass's rate met the target honestly\n".into(),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A search midway: the synchronous pass and saturation done (bracket 0..10/s), run 3 offered
    /// at `rate` for 1 s.
    fn midway(rate: f64) -> LoadPlan {
        let step = |run, kind: &str| SearchStep {
            run,
            kind: kind.into(),
            bracket_per_s: Some((0.0, 10.0)),
            ..Default::default()
        };
        LoadPlan {
            seed: 7,
            duration_s: 1.0,
            mix: vec![(CacheState::Cold, 1.0)],
            slo_target: 0.9,
            rates: vec![RateSchedule { run: 3, rate_per_s: rate, ..Default::default() }],
            search: Some(crate::meta::RateSearch {
                max_steps: 4,
                saturation_users: 64,
                steps: vec![step(1, "synchronous"), step(2, "saturation")],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_rate_that_drew_no_arrivals_decides_nothing_and_is_offered_again_with_new_arrivals() {
        let mut plan = midway(5.0);
        advance(&mut plan, 3, &[]);
        let search = plan.search.as_ref().unwrap();
        let step = search.steps.last().unwrap();
        assert_eq!((step.kind.as_str(), step.passed), ("rate", None), "{step:?}");
        assert_eq!(step.bracket_per_s, Some((0.0, 10.0)), "the bracket is unchanged");
        let again = plan.rates.last().unwrap();
        assert_eq!((again.run, again.rate_per_s), (4, 5.0));
        let first_draw = schedule::arrivals(7, 5.0, 1.0, &crate::cli::Mix(vec![(CacheState::Cold, 1.0)]));
        assert_ne!(again.arrivals, first_draw, "drawn from the next run's seed");
    }

    #[test]
    fn offered_rates_keep_three_significant_digits() {
        assert_eq!(round3(12.3456), 12.3);
        assert_eq!(round3(0.012345), 0.0123);
        assert_eq!(round3(1234.5), 1230.0);
    }
}

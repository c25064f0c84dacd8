//! What a load run found, computed from its records alone (so it can be recomputed from any
//! measurements.jsonl): per rate and cache state the TTFT and inter-token latency percentiles,
//! the achieved request rate, output tokens/s and goodput against the SLO; per rate the send-lag
//! distribution and whether the rate was honestly offered; per cache state the knee.
//!
//! Definitions (docs/load.md says why):
//! - a request meets the SLO when it is good (no error, every quality gate passed, its cache
//!   state confirmed or unrefuted), its TTFT counted from its *scheduled* send (send lag + TTFT:
//!   the user arrived at the scheduled instant) is at most the SLO's, and its mean inter-token gap
//!   is at most the SLO's (a request with fewer than two streamed deltas has no gap to miss);
//! - goodput = requests meeting the SLO / requests scheduled (failed ones included);
//! - ITL percentiles pool every gap between consecutive deltas of the good requests;
//! - achieved rate and output tok/s divide by the rate's wall time: from its clock's start to the
//!   end of its last response;
//! - the knee is the highest honestly offered rate whose goodput, and that of every lower rate, is
//!   at least the target; a rate not honestly offered breaks the chain (what the server did at it
//!   is not known: the client set the pace); rates without a request of that state, and rates
//!   stopped early (a signal, a server crash: the requests they finished are the quick ones),
//!   neither count nor break it;
//! - a rate is honestly offered when the p99 of its send lags is at most `honest_lag_limit_ms`:
//!   1 ms, or 2% of the rate's median TTFT where that is more (the lag's share of the latency it
//!   distorts: 2.7 ms of lag beside 170 ms TTFTs changes no conclusion, 4.9 s does);
//! - a closed-loop level (`--concurrency`) offers no rate, so it is never "not honestly offered":
//!   its users wait for the client's delays as for the server's, which slows the loop and hides
//!   nothing; its statistics leave its warm-up out and its wall time counts from the warm-up's end;
//! - a p99 of fewer than `P99_MIN_N` values is printed with its n: it is close to the maximum, not
//!   a 99th percentile.

use serde::{Deserialize, Serialize};

use crate::cli::Slo;
use crate::meta::LoadPlan;
use crate::output::{self, TableStyle, table_text};
use ttft_model::record::{CacheState, Measurement};
use ttft_model::stats::Samples;

/// A rate whose p99 send lag is above this (and above `HONEST_LAG_TTFT_SHARE` of its median
/// TTFT) was not offered as scheduled: the client, not the server, set the pace.
pub(crate) const HONEST_LAG_P99_MS: f64 = 1.0;

/// The share of the rate's median TTFT that its p99 send lag may reach and still be honest.
pub(crate) const HONEST_LAG_TTFT_SHARE: f64 = 0.02;

/// Below this many values a p99 is printed with its n (the live view shows it alike).
pub(crate) use crate::live::P99_MIN_N;

/// The p99 send lag a rate may have and still count as honestly offered.
pub(crate) fn honest_lag_limit_ms(median_ttft_ms: Option<f64>) -> f64 {
    median_ttft_ms.map_or(HONEST_LAG_P99_MS, |t| HONEST_LAG_P99_MS.max(HONEST_LAG_TTFT_SHARE * t))
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub n: usize,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl Percentiles {
    pub(crate) fn of(values: impl IntoIterator<Item = f64>) -> Percentiles {
        let s = Samples::new(values);
        Percentiles {
            n: s.len(),
            p50: s.quantile(0.5),
            p90: s.quantile(0.9),
            p99: s.quantile(0.99),
            max: s.values().last().copied(),
        }
    }
}

/// One rate and one cache state (`state` None: every state of the rate together).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StateSummary {
    pub state: Option<CacheState>,
    /// Arrivals scheduled.
    pub requests: usize,
    /// Good requests (no error, quality gate passed, cache state not refuted).
    pub good: usize,
    /// Requests served in a cache state other than the one claimed.
    pub cache_state_refuted: usize,
    pub met_slo: usize,
    pub goodput: Option<f64>,
    pub ttft_ms: Percentiles,
    /// TTFT counted from the scheduled send (send lag + TTFT) of the good requests: what the
    /// users arriving at the scheduled instants saw, the SLO's measure.
    #[serde(default)]
    pub ttft_from_scheduled_ms: Percentiles,
    pub itl_ms: Percentiles,
    pub achieved_rate_per_s: Option<f64>,
    pub output_tps: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RateSummary {
    pub run: u32,
    /// The offered rate; 0 for a closed-loop level.
    pub rate_per_s: f64,
    /// A closed-loop level: its users. Its statistics are of its steady state (the requests sent
    /// after its warm-up); `wall_s` counts from the warm-up's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Requests of a closed-loop level sent in its warm-up, left out of its statistics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_requests: Option<usize>,
    /// Arrivals the rate's schedule held (its records number as many unless it was stopped).
    #[serde(default)]
    pub arrivals_scheduled: usize,
    /// Why the rate ended early (see `RateSchedule::stopped`); None when it ran to its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// Requests that left (the rest failed in their preparation).
    pub sent: usize,
    pub send_lag_ms: Percentiles,
    /// Requests whose preparation was not done at their instant.
    pub prepared_late: usize,
    /// The latest of those preparations, ms past its instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare_late_max_ms: Option<f64>,
    /// p99 send lag at most `honest_lag_limit_ms`.
    pub honestly_offered: bool,
    /// A rate not honestly offered: why, and what to do, in one line (`not_honest_why`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_honest_why: Option<String>,
    /// The limit this rate was held to (`honest_lag_limit_ms` of its median TTFT).
    #[serde(default)]
    pub honest_lag_limit_ms: f64,
    /// From the rate's clock start to the end of its last response.
    pub wall_s: Option<f64>,
    pub states: Vec<StateSummary>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    pub state: Option<CacheState>,
    /// None: the goodput target was missed already at the lowest rate (or no rate had requests).
    pub rate_per_s: Option<f64>,
    /// A closed loop (no rate was offered): the most users at which goodput, and goodput at
    /// every lower level, is at least the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
}

/// One run to summarize: an open-loop rate, or a closed-loop level whose first `warmup_ms` are
/// left out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RunKey {
    pub run: u32,
    pub rate_per_s: f64,
    pub concurrency: Option<u32>,
    pub warmup_ms: f64,
}

/// The summary file (`load-summary.json`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadSummary {
    pub slo: Slo,
    pub slo_target: f64,
    pub honest_lag_p99_ms: f64,
    pub rates: Vec<RateSummary>,
    pub knees: Vec<Knee>,
}

fn good(m: &Measurement) -> bool {
    m.error.is_none() && m.quality_ok && m.cache_state_confirmed != Some(false)
}

/// Gaps between consecutive streamed deltas, ms.
fn gaps(m: &Measurement) -> impl Iterator<Item = f64> + '_ {
    m.token_offsets_ms.windows(2).map(|w| w[1] - w[0])
}

/// The request's mean inter-token gap, ms (None with fewer than two deltas).
pub(crate) fn mean_itl_ms(m: &Measurement) -> Option<f64> {
    let offsets = &m.token_offsets_ms;
    let (first, last) = (offsets.first()?, offsets.last()?);
    (offsets.len() >= 2).then(|| (last - first) / (offsets.len() - 1) as f64)
}

/// Whether a request met the SLO, its TTFT counted from its scheduled send.
pub(crate) fn meets(m: &Measurement, slo: &Slo) -> bool {
    good(m)
        && m.ttft_ms.is_some_and(|t| t + m.send_lag_ms.unwrap_or(0.0).max(0.0) <= slo.ttft_ms)
        && mean_itl_ms(m).is_none_or(|itl| itl <= slo.itl_ms)
}

fn state_summary(
    state: Option<CacheState>,
    ms: &[&Measurement],
    slo: &Slo,
    wall_s: Option<f64>,
) -> StateSummary {
    let mine: Vec<&Measurement> =
        ms.iter().copied().filter(|m| state.is_none_or(|s| m.cell.cache_state == s)).collect();
    let ok: Vec<&Measurement> = mine.iter().copied().filter(|m| good(m)).collect();
    let met = mine.iter().filter(|m| meets(m, slo)).count();
    let per_s = |x: f64| wall_s.filter(|w| *w > 0.0 && !mine.is_empty()).map(|w| x / w);
    StateSummary {
        state,
        requests: mine.len(),
        good: ok.len(),
        cache_state_refuted: mine.iter().filter(|m| m.cache_state_confirmed == Some(false)).count(),
        met_slo: met,
        goodput: (!mine.is_empty()).then(|| met as f64 / mine.len() as f64),
        ttft_ms: Percentiles::of(ok.iter().filter_map(|m| m.ttft_ms)),
        ttft_from_scheduled_ms: Percentiles::of(
            ok.iter().filter_map(|m| Some(m.ttft_ms? + m.send_lag_ms.unwrap_or(0.0).max(0.0))),
        ),
        itl_ms: Percentiles::of(ok.iter().flat_map(|m| gaps(m))),
        achieved_rate_per_s: per_s(ok.len() as f64),
        output_tps: per_s(ok.iter().filter_map(|m| m.output_tokens).sum::<u64>() as f64),
    }
}

/// The summary of every rate in `rates` ((run, rate) pairs, in the order run), from the records
/// of scenario `load` among `records`; `states` are the mix's states, in order.
pub fn summarize(
    records: &[Measurement],
    rates: &[(u32, f64)],
    states: &[CacheState],
    slo: Slo,
    slo_target: f64,
) -> LoadSummary {
    let keys: Vec<RunKey> = rates
        .iter()
        .map(|&(run, rate_per_s)| RunKey { run, rate_per_s, concurrency: None, warmup_ms: 0.0 })
        .collect();
    summarize_runs(records, &keys, states, slo, slo_target)
}

/// One run's summary (see `summarize_runs`).
pub(crate) fn run_summary(
    records: &[Measurement],
    key: &RunKey,
    states: &[CacheState],
    slo: &Slo,
) -> RateSummary {
    let all_of_run: Vec<&Measurement> = records
        .iter()
        .filter(|m| m.cell.scenario == ttft_model::record::Scenario::Load && m.cell.run == key.run)
        .collect();
    // A closed level's statistics are of its steady state: its warm-up is left out.
    let ms: Vec<&Measurement> = all_of_run.iter().copied().filter(|m| !m.warmup).collect();
    let sent: Vec<&Measurement> = ms.iter().copied().filter(|m| m.actual_send_ms.is_some()).collect();
    let lag = Percentiles::of(sent.iter().filter_map(|m| m.send_lag_ms));
    let end_ms = sent
        .iter()
        .filter_map(|m| Some(m.actual_send_ms? + m.e2e_ms?))
        .fold(None, |a: Option<f64>, e| Some(a.map_or(e, |a| a.max(e))));
    let wall_s = end_ms.map(|e| (e - key.warmup_ms) / 1000.0).filter(|w| *w > 0.0);
    let mut per_state: Vec<StateSummary> =
        states.iter().map(|s| state_summary(Some(*s), &ms, slo, wall_s)).collect();
    let all = state_summary(None, &ms, slo, wall_s);
    let limit = honest_lag_limit_ms(all.ttft_ms.p50);
    per_state.push(all);
    RateSummary {
        run: key.run,
        rate_per_s: key.rate_per_s,
        concurrency: key.concurrency,
        warmup_requests: key.concurrency.map(|_| all_of_run.len() - ms.len()),
        arrivals_scheduled: ms.len(),
        stopped: None,
        sent: sent.len(),
        // A closed level offers no rate: its users wait for the client as for the server, so its
        // send lag (shown) slows the loop down and misstates nothing.
        honestly_offered: key.concurrency.is_some() || lag.p99.is_none_or(|p| p <= limit),
        honest_lag_limit_ms: limit,
        send_lag_ms: lag,
        prepared_late: sent.iter().filter(|m| m.prepare_late_ms.is_some_and(|l| l > 0.0)).count(),
        prepare_late_max_ms: sent
            .iter()
            .filter_map(|m| m.prepare_late_ms)
            .filter(|l| *l > 0.0)
            .reduce(f64::max),
        not_honest_why: None,
        wall_s,
        states: per_state,
    }
}

/// The summary of every run in `keys`, in their order, from the records of scenario `load` among
/// `records`; `states` are the mix's states, in order.
pub(crate) fn summarize_runs(
    records: &[Measurement],
    keys: &[RunKey],
    states: &[CacheState],
    slo: Slo,
    slo_target: f64,
) -> LoadSummary {
    let out: Vec<RateSummary> = keys.iter().map(|k| run_summary(records, k, states, &slo)).collect();
    let knees = knees(&out, states, slo_target);
    LoadSummary { slo, slo_target, honest_lag_p99_ms: HONEST_LAG_P99_MS, rates: out, knees }
}

fn knees(rates: &[RateSummary], states: &[CacheState], slo_target: f64) -> Vec<Knee> {
    let mut keys: Vec<Option<CacheState>> = states.iter().copied().map(Some).collect();
    keys.push(None);
    // Knees of the offered rates where any were offered, else of the closed-loop levels.
    let closed = rates.iter().all(|r| r.concurrency.is_some());
    keys.into_iter()
        .map(|state| {
            let at = knee(rates, state, slo_target);
            match closed {
                true => Knee { state, rate_per_s: None, concurrency: at.map(|c| c as u32) },
                false => Knee { state, rate_per_s: at, concurrency: None },
            }
        })
        .collect()
}

/// The summary of a run as its plan (run.json `load`) says it went: every rate that began (all of
/// them, unless a signal or a failure stopped the run), with its scheduled arrivals and, for a
/// rate stopped early, why.
pub(crate) fn of_plan(records: &[Measurement], plan: &LoadPlan, states: &[CacheState]) -> LoadSummary {
    let began: Vec<_> = plan
        .rates
        .iter()
        .filter(|r| {
            r.clock_started_at.is_some() || r.stopped.is_some() || records.iter().any(|m| m.cell.run == r.run)
        })
        .collect();
    let runs: Vec<RunKey> = began
        .iter()
        .map(|r| RunKey {
            run: r.run,
            rate_per_s: r.rate_per_s,
            concurrency: r.concurrency,
            warmup_ms: r.concurrency.map_or(0.0, |_| plan.warmup_s.unwrap_or(0.0) * 1000.0),
        })
        .collect();
    let mut s = summarize_runs(records, &runs, states, plan.slo, plan.slo_target);
    for (summary, planned) in s.rates.iter_mut().zip(&began) {
        if planned.concurrency.is_none() {
            summary.arrivals_scheduled = planned.arrivals.len();
        }
        summary.stopped = planned.stopped.clone();
        summary.not_honest_why = not_honest_why(summary, plan.slots_held, plan.concurrency_limit);
    }
    s.knees = knees(&s.rates, states, plan.slo_target);
    s
}

/// Why a rate was not honestly offered, and what to do, in one line (None for an honest rate).
/// The causes, in the order they are told apart: sessions whose preparation was late, waiting for
/// a pinned slot (`slots`) or not; a `--concurrency-limit` place; the only slot of a one-slot
/// server; else the client's own delay.
pub(crate) fn not_honest_why(
    r: &RateSummary,
    slots: Option<u32>,
    concurrency_limit: Option<u32>,
) -> Option<String> {
    if r.honestly_offered {
        return None;
    }
    let p99 = r.send_lag_ms.p99.unwrap_or_default();
    let late = r.prepare_late_max_ms.unwrap_or_default();
    Some(match (r.prepared_late, slots, concurrency_limit) {
        (n, Some(k), _) if n > 0 => format!(
            "{n} of {} arrivals waited up to {late:.1} ms in bench for a session to be prepared on one of the \
             server's {k} pinned slots (a warm or hot session holds its slot from its preparation to its \
             cleanup): lower the rate, raise the server's --parallel, or use a cold-only mix (cold \
             arrivals need no slot)",
            r.sent
        ),
        (n, None, _) if n > 0 => format!(
            "{n} of {} preparations (priming, eviction, earlier turns) were not done at their instants, up \
             to {late:.1} ms late: raise --prepare-ahead, lower the rate, or use fewer warm and hot arrivals",
            r.sent
        ),
        (_, _, Some(c)) => format!(
            "arrivals waited in bench for one of --concurrency-limit {c} places (p99 send lag {p99:.1} ms): \
             a capped loop is not an open one; raise the limit or lower the rate"
        ),
        // With one slot, a cold arrival beside sessions waits for it; with more, one is never a
        // session's, so a lag without late preparations is the client's own.
        (_, Some(1), None) => format!(
            "arrivals waited in bench for the server's only pinned slot (p99 send lag {p99:.1} ms, above \
             {} ms): lower the rate, raise the server's --parallel, or use a cold-only mix",
            r.honest_lag_limit_ms
        ),
        (_, _, None) => format!(
            "bench itself sent late with every session ready (p99 send lag {p99:.3} ms, above {} ms): its \
             host was busy; lower the rate or measure from a quieter machine (`cargo bench --bench \
             load_rate` shows what this one can offer)",
            r.honest_lag_limit_ms
        ),
    })
}

/// The highest honestly offered rate whose goodput, and every lower rate's, is at least `target`
/// (see the module); where no rate was offered, the same of the closed-loop levels' users.
pub(crate) fn knee(rates: &[RateSummary], state: Option<CacheState>, target: f64) -> Option<f64> {
    let closed = rates.iter().all(|r| r.concurrency.is_some());
    let mut points: Vec<(f64, f64, bool)> = rates
        .iter()
        .filter(|r| r.stopped.is_none() && r.concurrency.is_some() == closed)
        .filter_map(|r| {
            let goodput = r.states.iter().find(|s| s.state == state)?.goodput?;
            Some((r.concurrency.map_or(r.rate_per_s, f64::from), goodput, r.honestly_offered))
        })
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut best = None;
    for (rate, goodput, honest) in points {
        if goodput < target || !honest {
            break;
        }
        best = Some(rate);
    }
    best
}

pub(crate) fn label(state: Option<CacheState>) -> &'static str {
    state.map_or("all", CacheState::as_str)
}

/// "1 user", "16 users".
pub(crate) fn users_label(users: u32) -> String {
    if users == 1 { "1 user".into() } else { format!("{users} users") }
}

/// "4", "16 users", or "4 (stopped)" for a rate that ended early.
fn rate_label(r: &RateSummary) -> String {
    let load = match r.concurrency {
        Some(users) => users_label(users),
        None => r.rate_per_s.to_string(),
    };
    if r.stopped.is_some() { format!("{load} (stopped)") } else { load }
}

/// The first column's name: "Rate /s", "Users", or both where a run has both (`--rates auto`).
fn load_header(s: &LoadSummary) -> &'static str {
    match (s.rates.iter().any(|r| r.concurrency.is_none()), s.rates.iter().any(|r| r.concurrency.is_some())) {
        (true, true) => "Rate /s or users",
        (false, true) => "Users",
        _ => "Rate /s",
    }
}

/// The table printed at the end of a run.
pub(crate) fn table(s: &LoadSummary) -> String {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
    let p99 = |p: &Percentiles, digits: usize| match p.p99 {
        Some(x) if p.n < P99_MIN_N => format!("{x:.digits$} (n={})", p.n),
        v => v.map_or("-".to_string(), |x| format!("{x:.digits$}")),
    };
    let head = load_header(s);
    let mut t = output::table(
        TableStyle::Terminal,
        &[
            head,
            "State",
            "Requests",
            "TTFT p50",
            "TTFT p90",
            "TTFT p99",
            "ITL p50",
            "ITL p90",
            "ITL p99",
            "Achieved /s",
            "Output tok/s",
            "Goodput",
        ],
        2,
    );
    for r in &s.rates {
        for st in &r.states {
            t.add_row(vec![
                rate_label(r),
                label(st.state).to_string(),
                st.requests.to_string(),
                f(st.ttft_ms.p50),
                f(st.ttft_ms.p90),
                p99(&st.ttft_ms, 1),
                f(st.itl_ms.p50),
                f(st.itl_ms.p90),
                p99(&st.itl_ms, 1),
                st.achieved_rate_per_s.map_or("-".into(), |x| format!("{x:.2}")),
                f(st.output_tps),
                st.goodput.map_or("-".into(), |g| format!("{:.0}%", g * 100.0)),
            ]);
        }
    }
    let mut out = table_text(t);
    let mut t = output::table(
        TableStyle::Terminal,
        &[head, "Sent", "Send lag p50 ms", "p90", "p99", "max", "Prepared late", "Offered"],
        1,
    );
    let us = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.3}"));
    for r in &s.rates {
        t.add_row(vec![
            rate_label(r),
            r.sent.to_string(),
            us(r.send_lag_ms.p50),
            us(r.send_lag_ms.p90),
            p99(&r.send_lag_ms, 3),
            us(r.send_lag_ms.max),
            r.prepared_late.to_string(),
            if r.concurrency.is_some() {
                "closed loop (no rate)".to_string()
            } else if r.honestly_offered {
                "honestly".to_string()
            } else {
                format!("NOT honestly (p99 lag > {} ms)", r.honest_lag_limit_ms)
            },
        ]);
    }
    out.push('\n');
    out.push_str(&table_text(t));
    for r in &s.rates {
        if let Some(why) = &r.not_honest_why {
            out.push_str(&format!("Rate {}/s (run {}) NOT honestly offered: {why}\n", r.rate_per_s, r.run));
        }
    }
    let closed = s.rates.iter().all(|r| r.concurrency.is_some()) && !s.rates.is_empty();
    out.push_str(&if closed {
        format!(
            "\nKnee (most users with goodput >= {:.0}% at it and every lower level, steady state; SLO {}):",
            s.slo_target * 100.0,
            s.slo
        )
    } else {
        format!(
            "\nKnee (highest honestly offered rate with goodput >= {:.0}% at it and every lower rate; SLO {}, TTFT from the scheduled send):",
            s.slo_target * 100.0,
            s.slo
        )
    });
    for k in &s.knees {
        let at = match (k.rate_per_s, k.concurrency) {
            (Some(r), _) => format!("{r}/s"),
            (None, Some(c)) => users_label(c),
            (None, None) if closed => "below the lowest level".into(),
            (None, None) => "below the lowest rate".into(),
        };
        out.push_str(&format!(" {} {at};", label(k.state)));
    }
    out.pop();
    out.push('\n');
    for r in s.rates.iter().filter(|r| r.stopped.is_some()) {
        let finished = r.states.last().map_or(0, |all| all.requests);
        out.push_str(&format!(
            "Rate {}/s (run {}) stopped early, {finished} of its {} arrivals finished, left out of the knee: {}\n",
            r.rate_per_s,
            r.run,
            r.arrivals_scheduled,
            r.stopped.as_deref().unwrap_or_default()
        ));
    }
    out
}

#[cfg(test)]
mod tests;

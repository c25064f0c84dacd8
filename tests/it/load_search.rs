//! `bench load --rates auto`: the search for the highest rate honestly offered that meets the SLO
//! target, against a scripted server whose serving slots make the answer computable: a request
//! holds a slot for a known time, so each rate's own schedule (in run.json) says, through a
//! first-come-first-served queue of that many servers, what TTFT each arrival gets, and so
//! whether the rate passes.

use crate::common;

use common::scripted::{Behaviour, Scripted};
use common::{bench, run_dir, stderr};
use serde_json::Value;
use ttft_bench::cli::Mix;
use ttft_bench::load::schedule;

/// Long enough that the honesty limit (2% of the median TTFT, 10 ms) is far above the send lag of
/// a busy test machine.
const FIRST_TOKEN_MS: f64 = 500.0;
/// Four output tokens 5 ms apart after the first.
const SERVICE_MS: f64 = 515.0;
const SLOTS: usize = 8;
/// A request may wait 200 ms for a slot.
const SLO_TTFT_MS: f64 = 700.0;
const TARGET: f64 = 0.9;
const DURATION_S: f64 = 3.0;
const SEED: u64 = 11;

/// The share of a schedule's arrivals whose TTFT (the wait for a slot, then the first token) is
/// within the SLO.
fn queue_goodput(arrivals_ms: &[f64]) -> f64 {
    let mut free = [0.0f64; SLOTS];
    let mut met = 0;
    for &at in arrivals_ms {
        let (i, &soonest) = free.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1)).unwrap();
        let start = at.max(soonest);
        free[i] = start + SERVICE_MS;
        if start - at + FIRST_TOKEN_MS <= SLO_TTFT_MS {
            met += 1;
        }
    }
    if arrivals_ms.is_empty() { 1.0 } else { met as f64 / arrivals_ms.len() as f64 }
}

/// The queue's verdict on a rate's own schedule, as bench drew it.
fn goodput_at(rate: f64) -> f64 {
    let arrivals = schedule::arrivals(SEED, rate, DURATION_S, &Mix::default());
    queue_goodput(&arrivals.iter().map(|a| a.at_ms).collect::<Vec<_>>())
}

#[test]
fn the_rate_search_finds_the_highest_rate_meeting_the_target_within_one_step() {
    let server = Scripted::start(Behaviour {
        first_token_ms: FIRST_TOKEN_MS as u64,
        token_ms: 5,
        max_concurrent: Some(SLOTS),
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "load",
        "--server",
        &server.url,
        "--out",
        dir.path().to_str().unwrap(),
        "--quiet",
        "--thermal",
        "off",
        "--contexts",
        "256",
        "--output-tokens",
        "4",
        "--rates",
        "auto",
        "--search-steps",
        "4",
        "--duration",
        "3s",
        "--seed",
        &SEED.to_string(),
        "--slo",
        "ttft=700ms,itl=50ms",
    ]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    let plan = &meta["load"];
    let search = &plan["search"];
    let steps = search["steps"].as_array().unwrap();
    let kinds: Vec<&str> = steps.iter().map(|s| s["kind"].as_str().unwrap()).collect();
    assert_eq!(&kinds[..2], ["synchronous", "saturation"], "{search}");
    assert!(kinds[2..].iter().all(|k| *k == "rate") && kinds.len() - 2 <= 4, "{search}");
    assert!(kinds.len() > 2, "at least one rate offered: {search}");
    assert_eq!(search["finished"], true);
    // The saturation throughput: 8 slots of 515 ms, 15.5 requests/s at most.
    let saturation = steps[1]["achieved_rate_per_s"].as_f64().unwrap();
    assert!(saturation <= SLOTS as f64 * 1000.0 / SERVICE_MS * 1.05, "{saturation}");
    let found = search["found_rate_per_s"].as_f64();
    let mut passed_rates = Vec::new();
    let mut failed_rates = Vec::new();
    for step in &steps[2..] {
        let rate = step["rate_per_s"].as_f64().unwrap();
        let run_no = step["run"].as_u64().unwrap();
        let planned = plan["rates"].as_array().unwrap().iter().find(|r| r["run"] == run_no).unwrap();
        let at: Vec<f64> =
            planned["arrivals"].as_array().unwrap().iter().map(|a| a["at_ms"].as_f64().unwrap()).collect();
        let predicted = queue_goodput(&at);
        // A schedule that drew no arrivals measured nothing and decides nothing.
        if step["passed"].is_null() {
            assert!(at.is_empty(), "only a rate without arrivals is undecided: {step}");
            continue;
        }
        let passed = step["passed"].as_bool().unwrap();
        // Far from the target the queue decides; near it, a few ms of the client's own either way.
        if predicted >= TARGET + 0.1 && step["honestly_offered"] == true {
            assert!(passed, "rate {rate}: the queue gives goodput {predicted}: {step}");
        }
        if predicted <= TARGET - 0.1 {
            assert!(!passed, "rate {rate}: the queue gives goodput {predicted}: {step}");
        }
        if passed { passed_rates.push(rate) } else { failed_rates.push(rate) }
    }
    let best = passed_rates.iter().copied().fold(None, |a: Option<f64>, r| Some(a.map_or(r, |a| a.max(r))));
    assert_eq!(found, best, "the answer is the highest rate that passed: {search}");
    if let Some(found) = found {
        assert!(failed_rates.iter().all(|f| *f > found), "bisection: every failed rate is above the answer");
    }
    // Within one step: the last bracket's ends are a rate the queue passes (or 0) and one it fails
    // (or the saturation throughput), and bisection halved the bracket at every rate offered.
    let bracket = |s: &Value| {
        let b = s["bracket_per_s"].as_array().unwrap();
        (b[0].as_f64().unwrap(), b[1].as_f64().unwrap())
    };
    let (lo, hi) = bracket(steps.last().unwrap());
    let (_, top) = bracket(&steps[1]);
    let rate_steps = (kinds.len() - 2) as i32;
    assert!(
        hi - lo <= top / 2f64.powi(rate_steps - 1) + 0.01,
        "{lo}..{hi} after {rate_steps} steps from {top}"
    );
    if lo > 0.0 {
        assert!(goodput_at(lo) >= TARGET - 0.1, "the queue fails the answer {lo}: {}", goodput_at(lo));
    }
    if failed_rates.contains(&hi)
        && steps.iter().any(|s| s["rate_per_s"] == hi && s["honestly_offered"] == true)
    {
        assert!(
            goodput_at(hi) <= TARGET + 0.1,
            "the queue passes {hi}, above the answer: {}",
            goodput_at(hi)
        );
    }
    let err = stderr(&out);
    let steps = common::table::find(&err, "Step");
    assert_eq!(steps.header[..3], ["Step", "Run", "Kind"], "{err}");
    assert_eq!(steps.cell("1", "Kind"), Some("synchronous"), "{err}");
    assert_eq!(steps.cell("2", "Kind"), Some("saturation"), "{err}");
    assert!(err.contains("Highest rate honestly offered that met the target"), "{err}");
}

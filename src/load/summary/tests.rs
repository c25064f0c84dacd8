//! The summary's arithmetic on hand-made records: every number below is worked out by hand.

use super::*;
use ttft_model::record::{CellKey, ErrorInfo, ErrorKind, Scenario};

fn rec(run: u32, state: CacheState, send_ms: f64, ttft_ms: f64, gap_ms: f64) -> Measurement {
    Measurement {
        cell: CellKey {
            scenario: Scenario::Load,
            cache_state: state,
            run,
            batch_size: 1,
            ..Default::default()
        },
        actual_send_ms: Some(send_ms),
        scheduled_send_ms: Some(send_ms),
        send_lag_ms: Some(0.1),
        prepare_late_ms: Some(0.0),
        ttft_ms: Some(ttft_ms),
        // Three deltas: the first at TTFT, then two gaps.
        token_offsets_ms: vec![ttft_ms, ttft_ms + gap_ms, ttft_ms + 2.0 * gap_ms],
        e2e_ms: Some(ttft_ms + 2.0 * gap_ms),
        output_tokens: Some(3),
        quality_ok: true,
        cache_state_confirmed: Some(true),
        ..Default::default()
    }
}

const SLO: Slo = Slo { ttft_ms: 500.0, itl_ms: 50.0 };

#[test]
fn goodput_counts_good_requests_within_both_limits_over_every_scheduled_one() {
    let mut refuted = rec(1, CacheState::Warm, 300.0, 100.0, 10.0);
    refuted.cache_state_confirmed = Some(false);
    let mut failed = rec(1, CacheState::Cold, 400.0, 100.0, 10.0);
    failed.error = Some(ErrorInfo::new(ErrorKind::Timeout, "no answer"));
    // TTFT counts from the scheduled send: 500 ms with no lag is exactly the SLO's.
    let mut at_limits = rec(1, CacheState::Warm, 500.0, 500.0, 50.0);
    at_limits.send_lag_ms = Some(0.0);
    let records = vec![
        rec(1, CacheState::Cold, 0.0, 100.0, 10.0),   // meets both
        rec(1, CacheState::Cold, 100.0, 600.0, 10.0), // TTFT over 500
        rec(1, CacheState::Cold, 200.0, 100.0, 60.0), // ITL over 50
        failed,
        at_limits, // exactly at both limits: meets
        refuted,   // a warm request served cold: failed
    ];
    let s = summarize(&records, &[(1, 2.0)], &[CacheState::Cold, CacheState::Warm], SLO, 0.9);
    let r = &s.rates[0];
    let [cold, warm, all] = [&r.states[0], &r.states[1], &r.states[2]];
    assert_eq!((cold.requests, cold.good, cold.met_slo, cold.goodput), (4, 3, 1, Some(0.25)));
    assert_eq!((warm.requests, warm.good, warm.met_slo, warm.cache_state_refuted), (2, 1, 1, 1));
    assert_eq!((all.state, all.requests, all.met_slo, all.goodput), (None, 6, 2, Some(2.0 / 6.0)));
    // The last response ends at 500 + 500 + 100 ms: the rate's wall time is 1.1 s.
    assert_eq!(r.wall_s, Some(1.1));
    assert_eq!(all.achieved_rate_per_s, Some(4.0 / 1.1));
    assert_eq!(all.output_tps, Some(12.0 / 1.1));
    // Cold TTFTs of the good requests: 100, 100, 600 -> p50 100, p90 500 (type 7), max 600.
    assert_eq!(
        (cold.ttft_ms.p50, cold.ttft_ms.p90, cold.ttft_ms.max),
        (Some(100.0), Some(500.0), Some(600.0))
    );
    // ITL pools every gap: 10, 10, 10, 10, 60, 60.
    assert_eq!((cold.itl_ms.n, cold.itl_ms.p50, cold.itl_ms.max), (6, Some(10.0), Some(60.0)));
    assert!(r.honestly_offered && r.sent == 6);
}

fn rate(run: u32, rate_per_s: f64, goodput: Option<f64>) -> RateSummary {
    RateSummary {
        run,
        rate_per_s,
        states: vec![StateSummary { state: None, goodput, ..Default::default() }],
        honestly_offered: true,
        ..Default::default()
    }
}

#[test]
fn the_knee_is_the_top_of_the_unbroken_run_of_rates_meeting_the_target() {
    let rates = [
        rate(1, 1.0, Some(1.0)),
        rate(2, 2.0, Some(0.95)),
        rate(3, 4.0, Some(0.8)),
        rate(4, 8.0, Some(0.92)),
    ];
    // 8/s meets the target again, but 4/s broke the chain: the knee stays at 2/s.
    assert_eq!(knee(&rates, None, 0.9), Some(2.0));
    assert_eq!(knee(&rates, None, 0.95), Some(2.0), "at the target counts");
    assert_eq!(knee(&rates, None, 0.99), Some(1.0));
    assert_eq!(knee(&rates[2..], None, 0.9), None, "missed at the lowest rate");
    // A rate without requests of the state is no evidence either way; order of --rates does not matter.
    let gaps = [rate(2, 4.0, Some(0.9)), rate(1, 1.0, None), rate(3, 2.0, Some(1.0))];
    assert_eq!(knee(&gaps, None, 0.9), Some(4.0));
}

#[test]
fn a_rate_with_a_p99_send_lag_above_its_limit_is_not_honestly_offered() {
    let mut records: Vec<Measurement> =
        (0..100).map(|i| rec(1, CacheState::Cold, f64::from(i) * 10.0, 100.0, 10.0)).collect();
    records[99].send_lag_ms = Some(250.0);
    let s = summarize(&records, &[(1, 100.0)], &[CacheState::Cold], SLO, 0.9);
    // p99 (type 7) of 99 x 0.1 and 1 x 250 ms: h = 99 x 0.99 = 98.01, so: 0.1 + 0.01 x (250 - 0.1) = 2.599 ms.
    let p99 = s.rates[0].send_lag_ms.p99.unwrap();
    assert!((p99 - 2.599).abs() < 1e-9, "{p99}");
    // The limit: 2% of the 100 ms median TTFT = 2 ms.
    assert!(!s.rates[0].honestly_offered);
    let text = table(&s);
    let rows = output::table_rows(&text);
    assert!(
        rows.contains(
            &["100", "100", "0.100", "0.100", "2.599", "250.000", "0", "NOT honestly (p99 lag > 2 ms)"]
                .map(String::from)
                .to_vec()
        ),
        "{text}"
    );
    // The only rate was not honestly offered: nothing is known of the server at it.
    assert!(text.contains("cold below the lowest rate; all below the lowest rate"), "{text}");
}

/// A 2-slot server under the llama.cpp preset at rising rates: every request finished within
/// the SLO once sent, but at 8/s they waited seconds in the client for a slot. Before, the knee
/// read 8/s and goodput 100%.
#[test]
fn the_knee_and_goodput_count_only_what_was_honestly_offered_from_the_scheduled_send() {
    let at = |run: u32, lag_ms: f64| {
        (0..40)
            .map(|i| {
                let mut m = rec(run, CacheState::Cold, f64::from(i) * 100.0, 170.0, 10.0);
                m.send_lag_ms = Some(lag_ms);
                m
            })
            .collect::<Vec<_>>()
    };
    let mut records = at(1, 0.2);
    records.extend(at(2, 2.7)); // 2.7 ms of lag beside 170 ms TTFTs: limit 3.4 ms, honest
    records.extend(at(3, 4900.0)); // 4.9 s in the client's queue
    let s = summarize(&records, &[(1, 0.5), (2, 1.0), (3, 8.0)], &[CacheState::Cold], SLO, 0.9);
    let honest: Vec<bool> = s.rates.iter().map(|r| r.honestly_offered).collect();
    assert_eq!(honest, [true, true, false]);
    // 2% of the median TTFT (170 ms) = 3.4 ms; 1 ms where that is less.
    assert!((s.rates[1].honest_lag_limit_ms - 3.4).abs() < 1e-9, "{}", s.rates[1].honest_lag_limit_ms);
    // From the scheduled send, 4.9 s + 170 ms misses the 500 ms SLO: goodput 0 at 8/s.
    assert_eq!(s.rates[2].states[1].goodput, Some(0.0));
    assert_eq!(s.rates[1].states[1].goodput, Some(1.0));
    assert_eq!(knee(&s.rates, None, 0.9), Some(1.0));
    // Even with goodput met, a dishonest rate breaks the chain.
    let mut forged = s.rates.clone();
    forged[2].states[1].goodput = Some(1.0);
    assert_eq!(knee(&forged, None, 0.9), Some(1.0));
}

#[test]
fn a_p99_of_fewer_than_20_values_says_its_n() {
    let records: Vec<Measurement> =
        (0..12).map(|i| rec(1, CacheState::Cold, f64::from(i) * 100.0, 100.0 + f64::from(i), 10.0)).collect();
    let s = summarize(&records, &[(1, 2.0)], &[CacheState::Cold], SLO, 0.9);
    let text = table(&s);
    // 12 TTFTs 100..111: p99 (type 7) = 110 + 0.89 x 1 = 110.89.
    let rows = output::table_rows(&text);
    assert_eq!(rows[1][..6], ["2", "cold", "12", "105.5", "109.9", "110.9 (n=12)"], "{text}");
    assert!(text.contains("0.100 (n=12)"), "{text}");
}

#[test]
fn a_rate_stopped_early_is_shown_but_left_out_of_the_knee_and_a_rate_never_begun_is_not_shown() {
    use crate::meta::{Arrival, RateSchedule};
    let arrivals = |n: usize| vec![Arrival { at_ms: 0.0, state: CacheState::Cold }; n];
    let rate = |run: u32, per_s: f64, n: usize, started: bool, stopped: Option<&str>| RateSchedule {
        run,
        rate_per_s: per_s,
        arrivals: arrivals(n),
        clock_started_at: started.then(|| "t".to_string()),
        stopped: stopped.map(str::to_string),
        repeats_run: None,
        concurrency: None,
    };
    let plan = LoadPlan {
        seed: 1,
        duration_s: 1.0,
        mix: vec![(CacheState::Cold, 1.0)],
        context_tokens: 256,
        slo: SLO,
        slo_target: 0.9,
        concurrency_limit: None,
        prepare_ahead: 1,
        slots_held: None,
        rates: vec![
            rate(1, 1.0, 2, true, None),
            rate(2, 2.0, 4, true, Some("interrupted by a signal 0.5 s after it began")),
            rate(3, 4.0, 8, false, None),
        ],
        ..Default::default()
    };
    // Every finished request met the SLO, at both rates that began.
    let records =
        vec![rec(1, CacheState::Cold, 0.0, 100.0, 10.0), rec(1, CacheState::Cold, 500.0, 100.0, 10.0)]
            .into_iter()
            .chain([rec(2, CacheState::Cold, 0.0, 100.0, 10.0)])
            .collect::<Vec<_>>();
    let s = of_plan(&records, &plan, &[CacheState::Cold]);
    let shown: Vec<(u32, usize, usize, bool)> = s
        .rates
        .iter()
        .map(|r| (r.run, r.arrivals_scheduled, r.states[1].requests, r.stopped.is_some()))
        .collect();
    assert_eq!(shown, [(1, 2, 2, false), (2, 4, 1, true)]);
    assert_eq!(s.rates[1].states[1].goodput, Some(1.0), "of what finished");
    assert_eq!(s.knees[0].rate_per_s, Some(1.0), "2/s met its target only with its slow requests cut off");
    let table = table(&s);
    let rows = output::table_rows(&table);
    assert!(rows.iter().any(|r| r[..3] == ["2 (stopped)", "cold", "1"]), "{table}");
    assert!(
        table.contains("Rate 2/s (run 2) stopped early, 1 of its 4 arrivals finished, left out of the knee: interrupted by a signal 0.5 s after it began"),
        "{table}"
    );
}

//! The batch and staggered arithmetic, exactly, under paused tokio time: a fake firing stands in
//! for the server (each request "takes" a scripted TTFT and E2E of virtual time).

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use ttft_client::Exchange;
use ttft_model::record::{CacheState, Mode};

fn cell(scenario: Scenario, batch_size: u32) -> CellKey {
    CellKey {
        dataset_row: None,
        model: "m".into(),
        scenario,
        cache_state: CacheState::Cold,
        mode: Mode::Streaming,
        context_tokens: 1024,
        batch_size,
        run: 1,
    }
}

/// A request that waits `lag_ms` before it is sent, then answers: first token at `ttft_ms`, last
/// byte at `e2e_ms`, both counted from its own send.
async fn fake(lag_ms: u64, ttft_ms: f64, e2e_ms: f64) -> Fired {
    fake_gated(lag_ms, ttft_ms, e2e_ms, Box::pin(std::future::ready(())), None).await
}

/// `fake`, opening its window when `gate` completes (after its lag) and announcing it, as the
/// sweep's `fire_announcing` does.
async fn fake_gated(
    lag_ms: u64,
    ttft_ms: f64,
    e2e_ms: f64,
    gate: Gate,
    opened: Option<oneshot::Sender<Instant>>,
) -> Fired {
    tokio::time::sleep(Duration::from_millis(lag_ms)).await;
    gate.await;
    let window_start = Instant::now();
    if let Some(opened) = opened {
        opened.send(window_start).unwrap();
    }
    tokio::time::sleep(Duration::from_secs_f64(e2e_ms / 1000.0)).await;
    let exchange = Exchange {
        start: Some(window_start.into_std()),
        ttft_ms: Some(ttft_ms),
        e2e_ms: Some(e2e_ms),
        ..Default::default()
    };
    Fired { exchange, window_start, handed_off: window_start, reload_ms: None, error: None, body: None }
}

fn measurement(index: u32, fired: &Fired, release: Instant, output_tokens: u64) -> Measurement {
    Measurement {
        request_index: index,
        send_lag_ms: Some(fired.window_start.duration_since(release).as_secs_f64() * 1000.0),
        ttft_ms: fired.exchange.ttft_ms,
        e2e_ms: fired.exchange.e2e_ms,
        output_tokens: Some(output_tokens),
        decode_tps: Some(100.0 + index as f64),
        quality_ok: true,
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_batch_leaves_together_and_its_group_record_is_exact() {
    let plan = [(0, 100.0, 400.0), (5, 150.0, 300.0)];
    let (release, fired) = release_together(2, |i| fake(plan[i].0, plan[i].1, plan[i].2)).await;
    let ms: Vec<Measurement> =
        fired.iter().enumerate().map(|(i, f)| measurement(i as u32, f, release, 32)).collect();
    assert_eq!(ms[0].send_lag_ms, Some(0.0));
    assert_eq!(ms[1].send_lag_ms, Some(5.0));
    let g = group_record("r", &cell(Scenario::Concurrent, 2), "g", &ms);
    // Request 0 ends at 0 + 400 ms, request 1 at 5 + 300 ms from the release.
    assert_eq!(g.wall_ms, 400.0);
    assert_eq!(g.system_tps, Some(64.0 / 0.4));
    assert_eq!(g.avg_ttft_ms, Some(125.0));
    assert_eq!(g.avg_e2e_ms, Some(350.0));
    assert_eq!(g.per_request_tps, Some(100.5));
    assert_eq!((g.requests_ok, g.requests_failed, g.total_output_tokens), (2, 0, 64));
    assert_eq!(g.error, None);
}

#[tokio::test(start_paused = true)]
async fn a_failed_member_fails_the_group_and_leaves_its_numbers_out() {
    let (release, fired) = release_together(2, |_| fake(0, 100.0, 200.0)).await;
    let mut ms: Vec<Measurement> =
        fired.iter().enumerate().map(|(i, f)| measurement(i as u32, f, release, 10)).collect();
    ms[1].error = Some(ErrorInfo::new(ErrorKind::Timeout, "no answer"));
    let g = group_record("r", &cell(Scenario::Concurrent, 2), "g", &ms);
    assert_eq!((g.requests_ok, g.requests_failed, g.total_output_tokens), (1, 1, 10));
    assert_eq!(g.error.unwrap().kind, ErrorKind::Timeout);
}

#[tokio::test(start_paused = true)]
async fn batched_b_arrives_after_the_delay_and_waits_from_the_wall_start() {
    let plan = [(100.0, 1000.0), (300.0, 500.0)];
    let (a, b, arrival) =
        stagger(true, 250.0, |i, gate, opened| fake_gated(0, plan[i].0, plan[i].1, gate, opened)).await;
    assert_eq!(arrival, 250.0);
    let (ma, mb) = (measurement(0, &a, a.window_start, 20), measurement(1, &b, a.window_start, 20));
    let mut rec = StaggeredRecord::default();
    fill_staggered(&mut rec, &ma, &mb, arrival);
    assert_eq!(rec.user_b_ttft_from_wall_start_ms, Some(550.0));
    assert_eq!(rec.total_wall_ms, Some(1000.0));
    assert_eq!(rec.overlapped, Some(true));
    assert_eq!(rec.overlap_ms, Some(500.0), "B ran from 250 to 750 ms, inside A's 0-1000 ms");
    assert_eq!(rec.system_tps, Some(40.0));
}

#[tokio::test(start_paused = true)]
async fn b_counts_its_delay_from_a_window_that_opened_late() {
    // A's client takes 400 ms to open its window (a busy machine); B is still due 250 ms after it.
    let (a, b, arrival) = stagger(true, 250.0, |i, gate, opened| {
        fake_gated(if i == 0 { 400 } else { 0 }, 100.0, 1000.0, gate, opened)
    })
    .await;
    assert_eq!(arrival, 250.0);
    assert_eq!(b.window_start.duration_since(a.window_start), Duration::from_millis(250));
}

#[tokio::test(start_paused = true)]
async fn a_b_sent_after_a_finished_did_not_overlap() {
    let (a, b, arrival) =
        stagger(true, 2000.0, |_, gate, opened| fake_gated(0, 100.0, 500.0, gate, opened)).await;
    assert_eq!(arrival, 2000.0);
    let mut rec = StaggeredRecord::default();
    fill_staggered(
        &mut rec,
        &measurement(0, &a, a.window_start, 8),
        &measurement(1, &b, a.window_start, 8),
        arrival,
    );
    assert_eq!(rec.overlapped, Some(false));
    assert_eq!(rec.overlap_ms, Some(0.0));
    assert_eq!(rec.total_wall_ms, Some(2500.0));
}

#[tokio::test(start_paused = true)]
async fn the_sequential_twin_sends_b_when_a_has_finished() {
    let (_, _, arrival) = stagger(false, 250.0, |i, gate, opened| {
        fake_gated(0, 100.0, if i == 0 { 700.0 } else { 300.0 }, gate, opened)
    })
    .await;
    assert_eq!(arrival, 700.0);
}

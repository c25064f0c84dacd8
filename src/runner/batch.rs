//! Several requests in flight at once: a concurrent batch released together, and the staggered
//! pair (user B arrives while user A runs, and its sequential twin).
//!
//! The scheduling (`release_together`, `stagger`) and the arithmetic (`group_record`,
//! `fill_staggered`) take the firing of a request as a function, so tests drive them with a fake
//! under paused tokio time and check every number exactly; the sweep passes the real `fire`.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::oneshot;
use tokio::time::Instant;

use ttft_model::record::QualityCode;
use ttft_model::record::{
    CellKey, ErrorInfo, ErrorKind, GroupRecord, Measurement, Record, SCHEMA_VERSION, Scenario,
    StaggeredRecord,
};

use crate::measuring::RunContext;
use crate::measuring::harness_time::Part;
use crate::measuring::measure::{self, Fired};

/// B sessions prepared one by one (priming included), then their measured requests released
/// together. Returns B measurement records and the group record.
pub(crate) async fn concurrent(ctx: &RunContext, cell: &CellKey) -> Vec<Record> {
    let group_id = format!("{}-{}", ctx.run_id, ctx.nonces.next());
    let mut ready = Vec::new();
    let mut records = Vec::new();
    for i in 0..cell.batch_size {
        match measure::prepare(ctx, cell, i).await {
            Ok(r) => ready.push(r),
            Err(m) => records.push(*m),
        }
    }
    measure::read_sessions_before(ctx, &mut ready.iter_mut().collect::<Vec<_>>()).await;
    let before = ctx.metrics().await;
    // Each member's connection is opened before the release, so none connects between the
    // release and its write (and none reuses one whose earlier reply may still have a stray).
    ctx.client.preconnect(ready.len()).await;
    let released = release_together(ready.len(), |i| measure::fire(ctx, &ready[i]));
    let (release, fired) = ctx.harness.time(Part::Measured, released).await;
    let metrics = ctx.metrics_since(before).await;
    for (r, f) in ready.into_iter().zip(fired) {
        records.push(measure::finish(ctx, r, f, Some(release), None).await);
    }
    records.sort_by_key(|m| m.request_index);
    let mut group = group_record(&ctx.run_id, cell, &group_id, &records);
    group.server_metrics = metrics.map(Box::new);
    let mut out: Vec<Record> = records
        .into_iter()
        .map(|mut m| {
            m.group_id = Some(group_id.clone());
            Record::Measurement(Box::new(m))
        })
        .collect();
    out.push(Record::Group(Box::new(group)));
    out
}

/// Fires `n` requests at one instant (all were built before it); returns that instant and each
/// request's result, in order. Each one's send lag (`Fired::send_lag_ms`) says how late it left.
pub(crate) async fn release_together<F, Fut>(n: usize, fire: F) -> (Instant, Vec<Fired>)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Fired>,
{
    let release = Instant::now();
    (release, join_all((0..n).map(fire)).await)
}

/// The batch's numbers, from its requests' own measurements.
pub(crate) fn group_record(
    run_id: &str,
    cell: &CellKey,
    group_id: &str,
    records: &[Measurement],
) -> GroupRecord {
    let ok: Vec<&Measurement> = records.iter().filter(|m| m.error.is_none()).collect();
    // Each request's end, measured from the release: its send lag plus its own E2E.
    let ends: Vec<f64> = ok.iter().filter_map(|m| Some(m.send_lag_ms.unwrap_or(0.0) + m.e2e_ms?)).collect();
    let wall_ms = ends.iter().copied().fold(0.0, f64::max);
    let total_output_tokens: u64 = ok.iter().filter_map(|m| m.output_tokens).sum();
    let mean =
        |values: Vec<f64>| (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64);
    // A stream flushed at once has no TTFT or decode of the server's own: its tokens count, its
    // times do not.
    let timed: Vec<&&Measurement> =
        ok.iter().filter(|m| !m.quality_flags.iter().any(|f| f.flag == QualityCode::StreamBurst)).collect();
    let failed = (records.len() - ok.len()) as u32 + cell.batch_size.saturating_sub(records.len() as u32);
    GroupRecord {
        schema_version: SCHEMA_VERSION,
        run_id: run_id.to_string(),
        cell: cell.clone(),
        group_id: group_id.to_string(),
        started_at: records
            .first()
            .map(|m| m.started_at.clone())
            .unwrap_or_else(ttft_model::clock::now_rfc3339),
        wall_ms,
        system_tps: (wall_ms > 0.0 && total_output_tokens > 0)
            .then(|| total_output_tokens as f64 / (wall_ms / 1000.0)),
        per_request_tps: mean(timed.iter().filter_map(|m| m.decode_tps).collect()),
        avg_ttft_ms: mean(timed.iter().filter_map(|m| m.ttft_ms).collect()),
        avg_e2e_ms: mean(ok.iter().filter_map(|m| m.e2e_ms).collect()),
        total_output_tokens,
        requests_ok: ok.len() as u32,
        requests_failed: failed,
        server_metrics: None,
        error: (failed > 0).then(|| {
            let kind =
                records.iter().find_map(|m| m.error.as_ref().map(|e| e.kind)).unwrap_or(ErrorKind::Transport);
            ErrorInfo::new(kind, format!("{failed} of {} requests failed", cell.batch_size))
        }),
    }
}

/// User A at t0; user B at t0 + delay (batched) or when A has finished (sequential).
pub(crate) async fn staggered(ctx: &RunContext, cell: &CellKey) -> Record {
    let mut rec = StaggeredRecord {
        schema_version: SCHEMA_VERSION,
        run_id: ctx.run_id.clone(),
        cell: cell.clone(),
        started_at: ttft_model::clock::now_rfc3339(),
        ..Default::default()
    };
    let batched = cell.scenario == Scenario::StaggeredBatched;
    let delay_ms = match ctx.stagger_delay.get() {
        Some(Ok(ms)) => *ms,
        Some(Err(e)) => {
            rec.error = Some(e.clone());
            return Record::Staggered(Box::new(rec));
        }
        None => ctx.config.staggered.as_ref().and_then(|s| s.delay_ms).unwrap_or(2000.0),
    };
    rec.stagger_delay_ms = batched.then_some(delay_ms);
    let (mut a, mut b) = match (measure::prepare(ctx, cell, 0).await, measure::prepare(ctx, cell, 1).await) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(m), _) | (_, Err(m)) => {
            rec.error = m.error.clone();
            return Record::Staggered(Box::new(rec));
        }
    };
    measure::read_sessions_before(ctx, &mut [&mut a, &mut b]).await;
    let ready = [&a, &b];
    ctx.client.preconnect(ready.len()).await;
    let pair =
        stagger(batched, delay_ms, |i, at, opened| measure::fire_announcing(ctx, ready[i], at, opened));
    let (fired_a, fired_b, arrival_ms) = ctx.harness.time(Part::Measured, pair).await;
    let ma = measure::finish(ctx, a, fired_a, None, None).await;
    let mb = measure::finish(ctx, b, fired_b, None, None).await;
    fill_staggered(&mut rec, &ma, &mb, arrival_ms);
    Record::Staggered(Box::new(rec))
}

/// What a request waits for before its window opens (B: A's start plus the delay).
pub(crate) type Gate = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Fires A (`fire(0, ..)`) and B (`fire(1, ..)`): B `delay_ms` after A opened its window (batched),
/// or after A finished (sequential). `fire(i, gate, opened)` opens request i's window when `gate`
/// completes and tells `opened` that instant. B counts its delay from A's real window, so a slow
/// start of A (a busy client machine) cannot bring B in early. Returns both and B's arrival, ms
/// after A's window opened.
pub(crate) async fn stagger<F, Fut>(batched: bool, delay_ms: f64, fire: F) -> (Fired, Fired, f64)
where
    F: Fn(usize, Gate, Option<oneshot::Sender<Instant>>) -> Fut,
    Fut: Future<Output = Fired>,
{
    let now = || -> Gate { Box::pin(std::future::ready(())) };
    let (a, b) = if batched {
        let delay = Duration::from_secs_f64(delay_ms.max(0.0) / 1000.0);
        let (opened, a_opened) = oneshot::channel();
        let b_gate: Gate = Box::pin(async move {
            // A that never opened (it failed first) leaves B nothing to wait for.
            if let Ok(a_start) = a_opened.await {
                tokio::time::sleep_until(a_start + delay).await;
            }
        });
        tokio::join!(fire(0, now(), Some(opened)), fire(1, b_gate, None))
    } else {
        let a = fire(0, now(), None).await;
        (a, fire(1, now(), None).await)
    };
    // From A's window to B's, each as its record counts it (the client's queueing left out).
    let arrival_ms = b.sent_at().saturating_duration_since(a.sent_at()).as_secs_f64() * 1000.0;
    (a, b, arrival_ms)
}

/// The pair's numbers, all from the two requests' own measurements. B overlapped A when it was
/// sent before A's last byte arrived; `overlap_ms` is how long both were in flight.
pub(crate) fn fill_staggered(rec: &mut StaggeredRecord, a: &Measurement, b: &Measurement, arrival_ms: f64) {
    rec.started_at = a.started_at.clone();
    rec.user_a_ttft_ms = a.ttft_ms;
    rec.user_a_e2e_ms = a.e2e_ms;
    rec.user_b_ttft_ms = b.ttft_ms;
    rec.user_b_e2e_ms = b.e2e_ms;
    rec.user_b_arrival_ms = Some(arrival_ms);
    rec.user_b_ttft_from_wall_start_ms = b.ttft_ms.map(|t| arrival_ms + t);
    rec.total_wall_ms = match (a.e2e_ms, b.e2e_ms) {
        (Some(ae), Some(be)) => Some(ae.max(arrival_ms + be)),
        _ => None,
    };
    let overlap = ttft_results::quality::staggered_overlap(Some(arrival_ms), a.e2e_ms, b.e2e_ms);
    rec.overlapped = overlap.map(|(o, _)| o);
    rec.overlap_ms = overlap.map(|(_, ms)| ms);
    rec.user_a_output_tokens = a.output_tokens;
    rec.user_b_output_tokens = b.output_tokens;
    rec.user_a_token_offsets_ms = a.token_offsets_ms.clone();
    rec.user_b_token_offsets_ms = b.token_offsets_ms.clone();
    rec.system_tps = match (a.output_tokens, b.output_tokens, rec.total_wall_ms) {
        (Some(x), Some(y), Some(w)) if w > 0.0 => Some((x + y) as f64 / (w / 1000.0)),
        _ => None,
    };
    rec.user_a_cache = Some(ttft_model::record::UserCache::of(a));
    rec.user_b_cache = Some(ttft_model::record::UserCache::of(b));
    rec.quality_flags = a
        .quality_flags
        .iter()
        .map(|f| tag(f, "user_a"))
        .chain(b.quality_flags.iter().map(|f| tag(f, "user_b")))
        .collect();
    rec.quality_ok = a.quality_ok && b.quality_ok;
    rec.error = a.error.clone().or_else(|| b.error.clone());
}

fn tag(flag: &ttft_model::record::QualityFlag, user: &str) -> ttft_model::record::QualityFlag {
    let mut f = flag.clone();
    f.reason = format!("{user}: {}", f.reason);
    f
}

#[cfg(test)]
mod tests;

//! `--reuse-primes`: one session serves the cold, warm and hot cells of one (context, mode, run),
//! in turn, so its prompt is prefilled once instead of once per cache state.
//!
//! On a fresh session per state, cold prefills the prompt (measured), warm prefills it again to
//! have something to evict, and hot prefills it a third time as turn 1: at 32K on a laptop that
//! is most of a sweep. A lifecycle instead runs:
//! 1. cold: turn 1, measured (sent unmeasured when cold is not to be measured, e.g. on resume),
//!    then, when warm follows, the session is evicted at once: before the thermal wait, so nothing
//!    the probe does to the server's memory can reach the saved session;
//! 2. warm: the reload and the same turn-1 request, measured (the reload inside TTFT as always);
//! 3. hot: turns 2 to N-1 unmeasured (`--turns N`, default 3), then turn N, measured.
//!
//! The thermal gate still runs before every measured request. Each measured request is judged by
//! its own cache evidence exactly as on a fresh session, so a state the server did not produce
//! fails its cell. Global preset actions run at the lifecycle's start and end only: a global
//! reset between states would wipe what the previous state left (a server whose reset clears its
//! disk tier would lose the saved session). A step that fails ends its lifecycle; the next state
//! starts a fresh one of its own, priming itself as a plain cell does.

use crate::preset::Session;
use ttft_client::ChatRequest;
use ttft_model::record::{CacheState, CellKey, ErrorInfo, Measurement, Mode, Record, TurnSummary};
use ttft_results::plan::{LifecycleKey, continues_lifecycle, lifecycle_key};

use super::RunContext;
use super::harness_time::Part;
use super::measure::{self, Ready, Then};

/// The session a lifecycle runs on, and what it has been through.
pub(crate) struct Lifecycle {
    key: (String, Option<LifecycleKey>),
    id: String,
    session: Session,
    nonce: String,
    expected_input_tokens: u64,
    /// Turn 1, not streaming.
    request: ChatRequest,
    /// Turn 1's answer and summary, once it was sent.
    turn_1: Option<(String, TurnSummary)>,
    /// The session is on disk, out of the server's memory.
    evicted: bool,
}

/// Measures `cell` as the next state of the lifecycle in `life` (starting one when needed), and
/// ends the lifecycle when `next` does not continue it.
pub(crate) async fn step(
    ctx: &RunContext,
    cell: &CellKey,
    next: Option<&CellKey>,
    life: &mut Option<Lifecycle>,
) -> Vec<Record> {
    let key = (cell.model.clone(), lifecycle_key(cell));
    if life.as_ref().is_some_and(|l| l.key != key || cell.cache_state == CacheState::Cold) {
        end(ctx, life.take()).await;
    }
    let goes_on = next.is_some_and(|n| continues_lifecycle(cell, n));
    if let Some(why) = measure::unsupported(ctx, cell) {
        // Not a failure of the session: the lifecycle goes on to the next state without it.
        let mut m = measure::blank(ctx, cell, 0, "");
        m.error = Some(ErrorInfo::new(ttft_model::record::ErrorKind::Unsupported, why));
        if !goes_on {
            end(ctx, life.take()).await;
        }
        return vec![Record::Measurement(Box::new(m))];
    }
    if life.is_none() {
        match start(ctx, cell, key).await {
            Ok(started) => *life = Some(started),
            Err(m) => return vec![Record::Measurement(m)],
        }
    }
    let Some(l) = life.as_mut() else { return Vec::new() };
    let then = if goes_on { Then::Keep } else { Then::Cleanup };
    let measured = match cell.cache_state {
        CacheState::Cold => cold(ctx, cell, l, then).await,
        CacheState::Warm => warm(ctx, cell, l, then).await,
        CacheState::Hot => hot(ctx, cell, l, then).await,
    };
    let mut m = match measured {
        Ok(m) => m,
        Err(m) => {
            // The session's state is unknown after a failure: nothing more is measured on it.
            end(ctx, life.take()).await;
            return vec![Record::Measurement(m)];
        }
    };
    m.lifecycle_id = Some(l.id.clone());
    let warm_next = next.is_some_and(|n| goes_on && n.cache_state == CacheState::Warm);
    if m.error.is_some() || !goes_on {
        if then == Then::Keep {
            end(ctx, life.take()).await;
        } else {
            end_global(ctx, life.take()).await;
        }
    } else if warm_next && !l.evicted {
        // Evicted now, before the thermal wait (see the module comment).
        if measure::session_action(ctx, "evict", &ctx.preset.evict, &l.session).await.is_ok() {
            l.evicted = true;
        } else {
            // Warm then starts a lifecycle of its own, which evicts (and fails) on its own record.
            end(ctx, life.take()).await;
        }
    }
    vec![Record::Measurement(Box::new(m))]
}

/// A new lifecycle: the cell's global reset, a fresh session with its prompt, nothing sent yet.
async fn start(
    ctx: &RunContext,
    cell: &CellKey,
    key: (String, Option<LifecycleKey>),
) -> Result<Lifecycle, Box<Measurement>> {
    if let Err(error) = ctx.harness.time(Part::Preset, measure::begin_cell(ctx)).await {
        let mut m = measure::blank(ctx, cell, 0, "");
        m.error = Some(error);
        return Err(Box::new(m));
    }
    let opened = match measure::open(ctx, cell, 0, ctx.new_session(0)).await {
        Ok(opened) => opened,
        Err(m) => {
            let _ = ctx.harness.time(Part::Preset, measure::end_cell(ctx)).await;
            return Err(m);
        }
    };
    Ok(Lifecycle {
        key,
        id: opened.session.id.clone(),
        session: opened.session,
        nonce: opened.nonce,
        expected_input_tokens: opened.expected_input_tokens,
        request: opened.request,
        turn_1: None,
        evicted: false,
    })
}

/// The session's cleanup, then the global one.
async fn end(ctx: &RunContext, life: Option<Lifecycle>) {
    if let Some(l) = &life {
        let _ = measure::session_action(ctx, "cleanup", &ctx.preset.cleanup, &l.session).await;
    }
    end_global(ctx, life).await;
}

/// The global cleanup only (the session's ran with its last measurement).
async fn end_global(ctx: &RunContext, life: Option<Lifecycle>) {
    if life.is_some() {
        let _ = ctx.harness.time(Part::Preset, measure::end_cell(ctx)).await;
    }
}

/// The measured request of `cell` on the lifecycle's session, as `request`.
fn ready(cell: &CellKey, l: &Lifecycle, mut request: ChatRequest, reload: bool) -> Ready {
    request.stream = cell.mode == Mode::Streaming;
    let expected = (cell.cache_state != CacheState::Hot).then_some(l.expected_input_tokens);
    let turns = match (cell.cache_state, &l.turn_1) {
        (CacheState::Hot, Some((_, t1))) => vec![t1.clone()],
        _ => Vec::new(),
    };
    Ready {
        cell: cell.clone(),
        request_index: 0,
        session: l.session.clone(),
        nonce: l.nonce.clone(),
        expected_input_tokens: expected,
        request,
        reload,
        turns,
        saved: None,
        after_turn: None,
        session_before: None,
    }
}

/// Fires `ready` in the timed window, with the server's counters around it.
async fn measure(ctx: &RunContext, mut ready: Ready, then: Then) -> (Measurement, String) {
    measure::read_sessions_before(ctx, &mut [&mut ready]).await;
    let before = ctx.harness.time(Part::Metrics, ctx.metrics()).await;
    let fired = ctx.harness.time(Part::Measured, measure::fire(ctx, &ready)).await;
    let metrics = ctx.harness.time(Part::Metrics, ctx.metrics_since(before)).await;
    let content = fired.exchange.content.clone();
    (measure::finish_then(ctx, ready, fired, None, metrics, then).await, content)
}

/// A failed step's record: nothing of `cell` was measured.
fn failed(
    ctx: &RunContext,
    cell: &CellKey,
    l: &Lifecycle,
    error: ErrorInfo,
    turns: Vec<TurnSummary>,
) -> Box<Measurement> {
    let mut m = measure::blank(ctx, cell, 0, &l.nonce);
    m.turns = turns;
    m.error = Some(error);
    m.lifecycle_id = Some(l.id.clone());
    Box::new(m)
}

/// Turn 1, measured as the cold cell.
async fn cold(
    ctx: &RunContext,
    cell: &CellKey,
    l: &mut Lifecycle,
    then: Then,
) -> Result<Measurement, Box<Measurement>> {
    let (m, content) = measure(ctx, ready(cell, l, l.request.clone(), false), then).await;
    if m.error.is_none() {
        let summary = TurnSummary {
            turn: 1,
            think_ms: None,
            ttft_ms: m.ttft_ms,
            e2e_ms: m.e2e_ms,
            input_tokens: m.input_tokens,
            output_tokens: m.output_tokens,
            cached_tokens: m.cache_evidence.as_ref().and_then(|e| e.cached_tokens),
            error: None,
        };
        l.turn_1 = Some((content, summary));
    }
    Ok(m)
}

/// Turn 1 sent unmeasured, when the lifecycle starts after cold.
async fn prime(ctx: &RunContext, cell: &CellKey, l: &mut Lifecycle) -> Result<(), Box<Measurement>> {
    if l.turn_1.is_some() {
        return Ok(());
    }
    let first = ctx.harness.time(Part::Priming, ctx.send(&l.request)).await;
    let summary = measure::turn_summary(1, &first);
    if let Some(err) = first.error {
        let error = ErrorInfo::new(err.kind, format!("turn 1 (priming) failed: {}", err.message));
        return Err(failed(ctx, cell, l, error, vec![summary]));
    }
    l.turn_1 = Some((first.content, summary));
    Ok(())
}

/// The same turn-1 request after the session was evicted, with the reload in the timed window.
async fn warm(
    ctx: &RunContext,
    cell: &CellKey,
    l: &mut Lifecycle,
    then: Then,
) -> Result<Measurement, Box<Measurement>> {
    prime(ctx, cell, l).await?;
    if !l.evicted {
        measure::session_action(ctx, "evict", &ctx.preset.evict, &l.session)
            .await
            .map_err(|e| failed(ctx, cell, l, e, vec![]))?;
    }
    let saved = measure::drop_saved(ctx, &l.session).await.map_err(|e| failed(ctx, cell, l, e, vec![]))?;
    let reload = !ctx.preset.reload.is_empty();
    let mut ready = ready(cell, l, l.request.clone(), reload);
    ready.saved = Some(saved);
    let (m, _) = measure(ctx, ready, then).await;
    // Reloaded (or served from disk) by the measured request: the session is in memory again.
    l.evicted = false;
    Ok(m)
}

/// Turns 2 to N-1 unmeasured on top of turn 1, then turn N, measured as the hot cell.
async fn hot(
    ctx: &RunContext,
    cell: &CellKey,
    l: &mut Lifecycle,
    then: Then,
) -> Result<Measurement, Box<Measurement>> {
    prime(ctx, cell, l).await?;
    let Some((content, t1)) = l.turn_1.clone() else { return Err(failed(ctx, cell, l, lost(), vec![])) };
    let mut request = l.request.clone();
    request.stream = cell.mode == Mode::Streaming;
    let later = measure::later_turns(ctx, cell, &mut request, &content).await;
    let mut turns = vec![t1];
    turns.extend(later.turns);
    if let Some(error) = later.error {
        return Err(failed(ctx, cell, l, error, turns));
    }
    measure::think(ctx).await;
    let mut ready = ready(cell, l, request, false);
    ready.turns = turns;
    ready.after_turn = Some(later.ended);
    let (m, _) = measure(ctx, ready, then).await;
    Ok(m)
}

fn lost() -> ErrorInfo {
    ErrorInfo::new(ttft_model::record::ErrorKind::Protocol, "turn 1's answer was lost before hot's turn 2")
}

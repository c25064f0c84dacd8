//! One measured request in three phases, so that batches can prepare every session first and
//! release the measured requests together:
//! - `prepare`: size the prompt, put the session in the claimed cache state (session reset /
//!   prime + evict / turns 1-2), build the request; nothing here is timed;
//! - `fire`: (reload +) send, timed;
//! - `finish`: clean the session up and turn the exchange into a record.
//!
//! Actions that act on the whole server (global scope) run once per cell, in `begin_cell` and
//! `end_cell`, never per session: a global reset run per session wipes the sessions already primed.

use tokio::time::Instant;

use crate::dataset::Row;
use crate::preset::{Scope, Session};
use ttft_client::{ChatRequest, Exchange, Message};
use ttft_model::record::MetricsDelta;
use ttft_model::record::{
    self, CacheEvidence, CacheState, CellKey, ErrorInfo, ErrorKind, Measurement, Mode, PageCache,
    SCHEMA_VERSION, SessionCache, SessionTier, TurnSummary,
};
use ttft_results::quality::PromptTokens;

use super::RunContext;
pub(crate) use super::fired::Fired;
use super::harness_time::Part;

/// The follow-up of a hot conversation (the origin benchmark's text).
pub(crate) const FOLLOW_UP: &str = "Continue explaining in more detail.";
/// The assistant turn placed before turn 3 and every later one (as in the origin benchmark).
pub(crate) const TURN_3_ASSISTANT: &str = "Understood.";

/// A session ready for its measured request.
pub(crate) struct Ready {
    pub cell: CellKey,
    pub request_index: u32,
    pub session: Session,
    pub nonce: String,
    pub expected_input_tokens: Option<u64>,
    pub request: ChatRequest,
    /// Warm with an explicit reload: run the preset's reload steps inside the timed window.
    pub reload: bool,
    pub turns: Vec<TurnSummary>,
    /// Warm: the saved session's file and whether it left the OS page cache before the restore.
    pub saved: Option<Saved>,
    /// Hot with `--think-time`: when turn N-1's answer ended, so the record says how long the
    /// measured turn actually waited after it (`think_ms`).
    pub after_turn: Option<Instant>,
    /// The server's own record of the session's cache right before the measured request
    /// (`read_sessions_before`); None where the preset reads none. Set, it has `finish` read the
    /// record again after the request, and both go into the cache evidence.
    pub session_before: Option<SessionCache>,
}

/// Why a cell cannot be measured at all, before any session: its record says so.
pub(crate) fn unsupported(ctx: &RunContext, cell: &CellKey) -> Option<String> {
    if cell.cache_state != CacheState::Warm {
        return None;
    }
    if !ctx.preset.supports_warm() {
        return Some(format!(
            "preset {} has no evict action, so a warm cache cannot be produced honestly; \
             use a preset that can evict to disk (llama.cpp, agent-memory) or a preset file",
            ctx.preset.name
        ));
    }
    if cell.batch_size > 1 { ctx.preset.warm_batch_problem() } else { None }
}

/// The cell's global actions before any session is touched (e.g. vLLM's prefix-cache reset).
pub(crate) async fn begin_cell(ctx: &RunContext) -> Result<(), ErrorInfo> {
    let p = &ctx.preset;
    let session = ctx.new_session(0);
    p.run(&ctx.client, "reset", &p.reset, Some(Scope::Global), &session)
        .await
        .map(|_| ())
        .map_err(|e| ErrorInfo::new(e.kind, e.to_string()))
}

/// The cell's global cleanup, after every session of it is finished.
pub(crate) async fn end_cell(ctx: &RunContext) -> Result<(), ErrorInfo> {
    let p = &ctx.preset;
    let session = ctx.new_session(0);
    p.run(&ctx.client, "cleanup", &p.cleanup, Some(Scope::Global), &session)
        .await
        .map(|_| ())
        .map_err(|e| ErrorInfo::new(e.kind, e.to_string()))
}

pub(crate) async fn prepare(
    ctx: &RunContext,
    cell: &CellKey,
    request_index: u32,
) -> Result<Ready, Box<Measurement>> {
    prepare_on(ctx, cell, request_index, ctx.new_session(request_index)).await
}

/// `prepare` on a session the caller chose (`bench load` leases server slots itself).
pub(crate) async fn prepare_on(
    ctx: &RunContext,
    cell: &CellKey,
    request_index: u32,
    session: Session,
) -> Result<Ready, Box<Measurement>> {
    let Opened { session, nonce, expected_input_tokens, mut request } =
        open(ctx, cell, request_index, session).await?;
    let fail = |error: ErrorInfo, turns: Vec<TurnSummary>| {
        let mut m = blank(ctx, cell, request_index, &nonce);
        m.turns = turns;
        m.error = Some(error);
        Box::new(m)
    };
    let mut turns = Vec::new();
    let mut reload = false;
    let mut saved = None;
    let mut after_turn = None;
    let mut expected = Some(expected_input_tokens);
    match cell.cache_state {
        CacheState::Cold => {}
        CacheState::Warm => {
            prime_and_evict(ctx, &request, &session).await.map_err(|e| fail(e, vec![]))?;
            saved = Some(drop_saved(ctx, &session).await.map_err(|e| fail(e, vec![]))?);
            reload = !ctx.preset.reload.is_empty();
        }
        CacheState::Hot => {
            request.stream = cell.mode == Mode::Streaming;
            let first = ctx.harness.time(Part::Priming, ctx.send(&request)).await;
            turns.push(turn_summary(1, &first));
            if let Some(err) = first.error {
                let message = format!("hot turn 1 failed: {}", err.message);
                return Err(fail(ErrorInfo::new(err.kind, message), turns));
            }
            let later = later_turns(ctx, cell, &mut request, &first.content).await;
            turns.extend(later.turns);
            if let Some(error) = later.error {
                return Err(fail(error, turns));
            }
            after_turn = Some(later.ended);
            think(ctx).await;
            // Turn N's size depends on the model's turn-1 text; the nominal check applies to turn 1.
            expected = None;
        }
    }
    request.stream = cell.mode == Mode::Streaming;
    Ok(Ready {
        cell: cell.clone(),
        request_index,
        session,
        nonce,
        expected_input_tokens: expected,
        request,
        reload,
        turns,
        saved,
        after_turn,
        session_before: None,
    })
}

/// A session with nothing cached and its turn-1 request, built before any clock starts.
pub(crate) struct Opened {
    pub session: Session,
    pub nonce: String,
    pub expected_input_tokens: u64,
    /// Turn 1: the sized prompt, bound to the session, not streaming.
    pub request: ChatRequest,
}

/// Sizes the prompt, binds the request to `session` and runs the session reset: every cache
/// state starts from nothing cached for this session.
pub(crate) async fn open(
    ctx: &RunContext,
    cell: &CellKey,
    request_index: u32,
    session: Session,
) -> Result<Opened, Box<Measurement>> {
    let nonce = ctx.nonces.next();
    let seed = crate::prompt::text::mix(&[ctx.config.seed, cell.context_tokens as u64, request_index as u64]);
    let fail = |error: ErrorInfo| {
        let mut m = blank(ctx, cell, request_index, &nonce);
        m.error = Some(error);
        Box::new(m)
    };
    if let Some(why) = unsupported(ctx, cell) {
        return Err(fail(ErrorInfo::new(ErrorKind::Unsupported, why)));
    }
    let mut max_tokens = ctx.config.output_tokens;
    let (messages, nonce, expected_input_tokens) = match row_of(ctx, cell) {
        Some(Ok(row)) => {
            max_tokens = row.output_tokens.unwrap_or(max_tokens);
            (turn_1_messages(row, &nonce), nonce.clone(), row.tokens.map_or(0, u64::from))
        }
        Some(Err(error)) => return Err(fail(error)),
        None => {
            let building = ctx.sizer.build(&ctx.client, cell.context_tokens, seed, nonce.clone());
            let prompt = ctx
                .harness
                .time(Part::Prompt, building)
                .await
                .map_err(|e| fail(ErrorInfo::new(e.kind, e.to_string())))?;
            (vec![Message::new("user", prompt.text)], prompt.nonce, prompt.expected_input_tokens)
        }
    };
    let mut request =
        ChatRequest { model: ctx.model.clone(), messages, max_tokens, stream: false, ..Default::default() };
    ctx.preset
        .bind(&mut request, &session)
        .map_err(|e| fail(ErrorInfo::new(ErrorKind::PresetAction, e.to_string())))?;
    session_action(ctx, "reset", &ctx.preset.reset, &session).await.map_err(fail)?;
    Ok(Opened { session, nonce, expected_input_tokens, request })
}

/// The dataset row a cell measures: None for generated prompts.
pub(crate) fn row_of<'a>(ctx: &'a RunContext, cell: &CellKey) -> Option<Result<&'a Row, ErrorInfo>> {
    let row = cell.dataset_row?;
    let found = ctx.config.dataset.as_ref().and_then(|d| d.row(row));
    Some(found.ok_or_else(|| {
        ErrorInfo::new(ErrorKind::Protocol, format!("dataset row {row} is not in this run's dataset"))
    }))
}

/// The texts of a dataset row's turn 1, the nonce opening the first (so no prefix cache can serve
/// it cold, whatever the row begins with).
fn turn_1_texts(row: &Row, nonce: &str) -> Vec<String> {
    row.first_turn()
        .iter()
        .enumerate()
        .map(|(i, t)| if i == 0 { crate::prompt::with_nonce(nonce, &t.content) } else { t.content.clone() })
        .collect()
}

/// A dataset row's turn 1 as sent: its messages, the nonce opening the first.
pub(crate) fn turn_1_messages(row: &Row, nonce: &str) -> Vec<Message> {
    row.first_turn()
        .iter()
        .zip(turn_1_texts(row, nonce))
        .map(|(t, text)| Message::new(t.role, text))
        .collect()
}

/// One of the preset's per-session actions, its time counted as preset time.
pub(crate) async fn session_action(
    ctx: &RunContext,
    name: &'static str,
    steps: &[crate::preset::ActionStep],
    session: &Session,
) -> Result<(), ErrorInfo> {
    if name == "evict" {
        // Known before the save is sent: an interrupt may land between the server writing the
        // file and its answer arriving, and the file must still be found and removed.
        saved_path(ctx, session).into_iter().for_each(super::slot_files::track);
    }
    let run = ctx.preset.run_saving(&ctx.client, name, steps, Some(Scope::Session), session);
    let done = ctx.harness.time(Part::Preset, run).await;
    match (name, &done) {
        ("evict", Ok(evicted)) => {
            if let Some(bytes) = evicted.saved_bytes {
                super::slot_files::note_written(&session.id, bytes);
            }
        }
        // The session is over whether its cleanup worked or not: its saved file goes.
        ("cleanup", _) => remove_saved(ctx, session),
        _ => {}
    }
    done.map(|_| ()).map_err(|e| ErrorInfo::new(e.kind, e.to_string()))
}

/// The session's saved file on this host, where the save directory is known and the preset names
/// the file.
pub(crate) fn saved_path(ctx: &RunContext, session: &Session) -> Option<std::path::PathBuf> {
    ctx.preset.saved_path(ctx.config.slot_dir.as_deref()?, session).ok().flatten()
}

/// Removes the session's saved file from the server's save directory (docs/page-cache.md says
/// why a sweep must): one that cannot be removed is said, never a failed measurement.
pub(crate) fn remove_saved(ctx: &RunContext, session: &Session) {
    if let Some(path) = saved_path(ctx, session)
        && let Err(e) = super::slot_files::remove(&path)
    {
        eprintln!("warning: cannot remove the saved session {}: {e}", path.display());
    }
}

/// Warm's preparation: the prompt sent once unmeasured, then the session evicted (to disk).
pub(crate) async fn prime_and_evict(
    ctx: &RunContext,
    request: &ChatRequest,
    session: &Session,
) -> Result<(), ErrorInfo> {
    let primed = ctx.harness.time(Part::Priming, ctx.send(request)).await;
    if let Some(err) = primed.error {
        return Err(ErrorInfo::new(err.kind, format!("warm priming request failed: {}", err.message)));
    }
    session_action(ctx, "evict", &ctx.preset.evict, session).await
}

/// A warm session's saved file, as it stood when the timed window opened.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    /// Where the restore read it from (`evicted`: the disk).
    pub page_cache: PageCache,
    /// The file's size, where bench reaches it, else what the server said it wrote.
    pub bytes: Option<u64>,
    /// The percentage of the file's pages still in the page cache after the drop, where the
    /// kernel says.
    pub resident_pct: Option<f64>,
}

/// Warm, after the evict and before the timed window: drops the session's saved file from the OS
/// page cache where bench can reach it (the server's save directory is known and the preset names
/// the file), then asks the kernel how much of it is still cached: `evicted` when (nearly) none
/// is, so the restore reads the disk; `memory` when the file stayed (a save directory on tmpfs or
/// ramfs: the drop succeeds and nothing leaves memory). Otherwise `unknown`: the restore may read
/// the file from memory, which on an H200 was about 2x faster (docs/page-cache.md). A known file
/// that cannot be dropped fails the measurement, naming it: a warm number must not silently
/// become a memory number.
pub(crate) async fn drop_saved(ctx: &RunContext, session: &Session) -> Result<Saved, ErrorInfo> {
    // Where the file is out of reach, its size is what the server said it wrote.
    let written = super::slot_files::take_written(&session.id);
    let unknown = Saved { page_cache: PageCache::Unknown, bytes: written, resident_pct: None };
    let Some(dir) = ctx.config.slot_dir.clone() else { return Ok(unknown) };
    let path = match ctx.preset.saved_path(&dir, session) {
        Ok(Some(path)) => path,
        Ok(None) => return Ok(unknown),
        Err(e) => return Err(ErrorInfo::new(ErrorKind::PresetAction, e.to_string())),
    };
    let shown = path.display().to_string();
    let dropping = tokio::task::spawn_blocking(move || {
        let bytes = ttft_model::page_cache::drop_file(&path)?;
        let share = ttft_model::page_cache::resident_share(&path)?;
        Ok::<_, std::io::Error>((bytes, share.map(|s| s * 100.0)))
    });
    let dropped = ctx.harness.time(Part::Preset, dropping).await;
    let error = |why: String| {
        let message = format!(
            "cannot drop the saved session {shown} from the OS page cache (slot dir {}): {why}",
            dir.display()
        );
        Err(ErrorInfo::new(ErrorKind::PresetAction, message))
    };
    match dropped {
        Ok(Ok((bytes, resident_pct))) => {
            Ok(Saved { page_cache: PageCache::after_drop(resident_pct), bytes: Some(bytes), resident_pct })
        }
        Ok(Err(e)) => error(e.to_string()),
        Err(e) => error(e.to_string()),
    }
}

/// Hot's unmeasured turns 2 to N-1, and how they ended.
pub(crate) struct LaterTurns {
    pub turns: Vec<TurnSummary>,
    /// The failure that stopped them (the turn is named).
    pub error: Option<ErrorInfo>,
    /// When the last one's answer ended.
    pub ended: Instant,
}

/// Hot's turns 2 to N-1 (unmeasured, each after the think time) once turn 1 answered
/// `turn_1_output`; leaves `request` as turn N. Turn k adds the answer to turn k-1 and a user
/// message: a dataset row's own (its answer, its k-th user message) where it has them; otherwise
/// turn 1's real output before turn 2, "Understood." before every later turn, and the follow-up
/// question (with `--turns 3`, the origin benchmark's conversation, unchanged). Turns stream when
/// the cell does, so each keeps its TTFT.
pub(crate) async fn later_turns(
    ctx: &RunContext,
    cell: &CellKey,
    request: &mut ChatRequest,
    turn_1_output: &str,
) -> LaterTurns {
    let row = row_of(ctx, cell).and_then(Result::ok);
    let user_turns = row.map(Row::later_user_turns).unwrap_or_default();
    let mut out = LaterTurns { turns: Vec::new(), error: None, ended: Instant::now() };
    for turn in 2..=ctx.config.turns.max(2) {
        let answer = match (row.and_then(|r| r.answer_to(turn as usize - 1)), turn) {
            (Some(answer), _) => answer,
            (None, 2) => turn_1_output,
            (None, _) => TURN_3_ASSISTANT,
        };
        request.messages.push(Message::new("assistant", answer));
        request
            .messages
            .push(Message::new("user", user_turns.get(turn as usize - 2).copied().unwrap_or(FOLLOW_UP)));
        if turn == ctx.config.turns {
            break;
        }
        let think_ms = think(ctx).await;
        let exchange = ctx.harness.time(Part::Priming, ctx.send(request)).await;
        out.ended = Instant::now();
        let mut summary = turn_summary(turn, &exchange);
        summary.think_ms = think_ms;
        out.turns.push(summary);
        if let Some(err) = exchange.error {
            out.error = Some(ErrorInfo::new(err.kind, format!("hot turn {turn} failed: {}", err.message)));
            return out;
        }
    }
    out
}

/// The pause between two turns (`--think-time`), as the clock measured it; None without one.
pub(crate) async fn think(ctx: &RunContext) -> Option<f64> {
    let ms = ctx.config.think_time_ms;
    if ms <= 0.0 {
        return None;
    }
    let start = Instant::now();
    let pause = tokio::time::sleep(std::time::Duration::from_secs_f64(ms / 1000.0));
    ctx.harness.time(Part::Think, pause).await;
    Some(start.elapsed().as_secs_f64() * 1000.0)
}

/// Reads the server's listing of session caches once (`Preset::session_state`) and keeps each
/// session's entry as its state before the measured request. Called after every session of the
/// cell is prepared and right before the measured requests go out, so that no later preparation
/// (another session's priming) can change a tier in between. A listing that cannot be read leaves
/// the states unset: the records then carry no such evidence, and a warm or hot row without other
/// evidence is unconfirmed.
pub(crate) async fn read_sessions_before(ctx: &RunContext, ready: &mut [&mut Ready]) {
    let Some(first) = ready.first() else { return };
    let read = ctx.preset.fetch_session_listing(&ctx.client, &first.session);
    let Some(Ok(listing)) = ctx.harness.time(Part::Metrics, read).await else { return };
    let Some(spec) = ctx.preset.session_state.as_ref() else { return };
    for r in ready.iter_mut() {
        r.session_before = spec.session_cache(&listing, &r.session).ok();
    }
}

/// The server's record of `session`'s cache now; None where it cannot be read.
async fn read_session(ctx: &RunContext, session: &Session) -> Option<SessionCache> {
    let listing = ctx.preset.fetch_session_listing(&ctx.client, session).await?.ok()?;
    ctx.preset.session_state.as_ref()?.session_cache(&listing, session).ok()
}

/// Runs the timed part. The request is serialized before the window opens.
pub(crate) async fn fire(ctx: &RunContext, ready: &Ready) -> Fired {
    fire_at(ctx, ready, std::future::ready(())).await
}

/// `fire`, with the window opening when `at` completes (after serialization): `bench load` sends
/// at scheduled instants.
pub(crate) async fn fire_at(ctx: &RunContext, ready: &Ready, at: impl Future<Output = ()>) -> Fired {
    fire_announcing(ctx, ready, at, None).await
}

/// `fire_at`, telling `opened` the instant the window opened, so that a request due some time after
/// this one (the staggered B) counts from this one's real start, not from when it was asked for.
pub(crate) async fn fire_announcing(
    ctx: &RunContext,
    ready: &Ready,
    at: impl Future<Output = ()>,
    opened: Option<tokio::sync::oneshot::Sender<Instant>>,
) -> Fired {
    let prepared = match ctx.client.prepare(&ready.request) {
        Ok(p) => p,
        Err(e) => {
            let error = ErrorInfo::new(ErrorKind::Protocol, format!("cannot build request: {e}"));
            return Fired::unsent(Instant::now(), error);
        }
    };
    let body = ctx.bodies.as_ref().map(|_| {
        let (path, body) = prepared.path_and_body();
        (path.to_string(), body.to_vec())
    });
    at.await;
    let window_start = Instant::now();
    if let Some(opened) = opened {
        // Nobody waiting (B already failed) is fine: the instant is only a schedule.
        let _ = opened.send(window_start);
    }
    let mut reload_ms = None;
    if ready.reload {
        let p = &ctx.preset;
        match p.run(&ctx.client, "reload", &p.reload, Some(Scope::Session), &ready.session).await {
            Ok(took) => reload_ms = Some(took.as_secs_f64() * 1000.0),
            Err(e) => {
                // Never sent: no body to keep.
                return Fired::unsent(window_start, ErrorInfo::new(e.kind, e.to_string()));
            }
        }
    }
    let handed_off = Instant::now();
    let mut exchange = ctx.client.send(prepared).await;
    exchange.error = exchange.error.map(crate::server::advised);
    Fired { exchange, window_start, handed_off, reload_ms, error: None, body }
}

/// Cleans the session up and builds the record. `release` is when the request was due (batches);
/// `metrics` the server's counters over the request, when it has them.
pub(crate) async fn finish(
    ctx: &RunContext,
    ready: Ready,
    fired: Fired,
    release: Option<Instant>,
    metrics: Option<MetricsDelta>,
) -> Measurement {
    finish_then(ctx, ready, fired, release, metrics, Then::Cleanup).await
}

/// What happens to a measured request's session afterwards.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    /// The preset's cleanup: the session is forgotten.
    Cleanup,
    /// The session is kept for the next cache state of its lifecycle (`--reuse-primes`).
    Keep,
}

/// `finish`, with the session cleaned up or kept.
pub(crate) async fn finish_then(
    ctx: &RunContext,
    ready: Ready,
    fired: Fired,
    release: Option<Instant>,
    metrics: Option<MetricsDelta>,
    then: Then,
) -> Measurement {
    let p = &ctx.preset;
    // Read before the cleanup, which forgets the session.
    let session_state = match ready.session_before.clone() {
        Some(before) => {
            let after = ctx.harness.time(Part::Metrics, read_session(ctx, &ready.session)).await;
            Some((before, after))
        }
        None => None,
    };
    let cleanup = match then {
        Then::Cleanup => session_action(ctx, "cleanup", &p.cleanup, &ready.session).await,
        Then::Keep => Ok(()),
    };
    let stats = p.fetch_stats(&ctx.client, &ready.session).await;
    let mut m = blank(ctx, &ready.cell, ready.request_index, &ready.nonce);
    m.expected_input_tokens = ready.expected_input_tokens;
    m.turns = ready.turns;
    m.server_stats = stats.map(Box::new);
    m.max_tokens = ready.request.max_tokens;
    if let Some(saved) = ready.saved {
        m.page_cache = Some(saved.page_cache);
        m.saved_bytes = saved.bytes;
        m.page_cache_resident_pct = saved.resident_pct;
    }
    if ctx.config.think_time_ms > 0.0 {
        m.think_ms = ready.after_turn.map(|t| fired.window_start.duration_since(t).as_secs_f64() * 1000.0);
    }
    if let (Some(log), Some((path, body))) = (&ctx.bodies, &fired.body) {
        log.append(&ttft_results::store::BodyLine::new(
            m.cell.clone(),
            m.request_index,
            &m.nonce,
            path,
            body,
        ));
    }
    if let Some(error) = fired.error {
        m.error = Some(error);
        return m;
    }
    record_exchange(&mut m, &fired, release, metrics, session_state);
    ctx.annotate(&mut m, &fired.exchange.full_output());
    // The measurement was over before its cleanup began: a failed cleanup is noted, never its failure.
    if let Err(e) = cleanup {
        let flag = record::QualityCode::CleanupFailed;
        m.quality_flags.push(record::QualityFlag { flag, reason: e.message, fails_gate: false });
    }
    m
}

/// The exchange's numbers, with offsets counted from the opening of the timed window (so a warm
/// reload is inside TTFT), less the client's own queueing, which is send lag (`Fired`).
pub(super) fn record_exchange(
    m: &mut Measurement,
    fired: &Fired,
    release: Option<Instant>,
    metrics: Option<MetricsDelta>,
    session_state: Option<(SessionCache, Option<SessionCache>)>,
) {
    let ex = &fired.exchange;
    let shift = fired.offset_ms();
    let add = |v: Option<f64>| v.map(|x| x + shift);
    m.started_at = ex.started_at.clone();
    m.send_lag_ms = release.map(|r| fired.send_lag_ms(r));
    m.first_byte_ms = add(ex.first_byte_ms);
    m.first_event_ms = add(ex.first_event_ms);
    m.ttft_ms = add(ex.ttft_ms);
    m.e2e_ms = add(ex.e2e_ms);
    m.token_offsets_ms = ex.token_offsets_ms.iter().map(|t| t + shift).collect();
    m.reload_ms = fired.reload_ms;
    m.input_tokens = ex.usage.input_tokens;
    m.output_tokens = ex.usage.output_tokens;
    m.cached_tokens = ex.usage.cached_tokens;
    m.delta_count = ex.delta_count;
    m.distinct_arrivals = (m.cell.mode == Mode::Streaming)
        .then(|| ttft_results::quality::distinct_arrivals(&m.token_offsets_ms));
    m.decode_tps = record::decode_tps(m.output_tokens, m.ttft_ms, m.e2e_ms);
    m.prefill_tps = record::prefill_tps(m.input_tokens, m.ttft_ms);
    m.finish_reason = ex.finish_reason.clone();
    m.output_sample = record::output_sample(&ex.full_output());
    m.cache_evidence = evidence(ex).or_else(|| metrics.as_ref().and_then(MetricsDelta::evidence));
    if let Some((before, after)) = session_state {
        m.cache_evidence = Some(with_session_state(m.cache_evidence.take(), before, after, m.input_tokens));
    }
    m.server_metrics = metrics.map(Box::new);
    // A soak repeats its prompts on purpose: whatever the server caches is not the point there.
    // A warm or hot row without evidence that the cache served it is unconfirmed; a failed
    // request is judged by its error, so only the evidence it did bring back is weighed.
    let (state, evidence, prompt) = (m.cell.cache_state, m.cache_evidence.as_ref(), PromptTokens::of(m));
    m.cache_state_confirmed = match (m.cell.scenario, &ex.error) {
        (record::Scenario::Soak, _) => None,
        (_, Some(_)) => evidence.and_then(|e| ttft_results::quality::confirm_cache_state(state, e, prompt)),
        (_, None) => ttft_results::quality::cache_state_verdict(state, evidence, prompt),
    };
    m.server_timings = ex.server_timings.clone().map(Box::new);
    m.attempts = ex.attempts;
    m.unexpected_bytes_dropped = ex.unexpected_bytes_dropped;
    m.connection = ex.connection;
    m.error = ex.error.clone();
}

/// A record with the identity fields filled and nothing measured.
pub(crate) fn blank(ctx: &RunContext, cell: &CellKey, request_index: u32, nonce: &str) -> Measurement {
    Measurement {
        schema_version: SCHEMA_VERSION,
        run_id: ctx.run_id.clone(),
        cell: cell.clone(),
        request_index,
        started_at: ttft_model::clock::now_rfc3339(),
        nonce: nonce.to_string(),
        max_tokens: ctx.config.output_tokens,
        ..Default::default()
    }
}

/// The server's word on what it had cached: llama.cpp timings first (they count exactly what was
/// computed), then OpenAI/Anthropic usage.
pub(crate) fn evidence(ex: &Exchange) -> Option<CacheEvidence> {
    if let Some(t) = &ex.server_timings {
        let cached = t.get("cache_n").and_then(|v| v.as_u64());
        let evaluated = t.get("prompt_n").and_then(|v| v.as_u64());
        if cached.is_some() || evaluated.is_some() {
            return Some(CacheEvidence {
                source: "timings".into(),
                cached_tokens: cached,
                prompt_evaluated_tokens: evaluated,
                ..Default::default()
            });
        }
    }
    let cached = ex.usage.cached_tokens?;
    Some(CacheEvidence {
        source: "usage.cached_tokens".into(),
        cached_tokens: Some(cached),
        prompt_evaluated_tokens: ex.usage.input_tokens.map(|i| i.saturating_sub(cached)),
        ..Default::default()
    })
}

/// The server's own record of the session before and after the request, joined to the evidence
/// the response gave; where it gave none (agent-memory's OpenAI API), the record is the evidence,
/// source `session_state`, with the counts it implies: what the session held before the request
/// is what the server could serve from. Nothing when it was not listed; the tokens it held in
/// memory (at most the prompt); unknown when it was on disk only (the listing says nothing of the
/// file's tokens), where the tiers alone decide (`quality::session_verdict`).
pub(crate) fn with_session_state(
    evidence: Option<CacheEvidence>,
    before: SessionCache,
    after: Option<SessionCache>,
    input_tokens: Option<u64>,
) -> CacheEvidence {
    let mut e = evidence.unwrap_or_else(|| {
        let cached = match before.tier {
            SessionTier::Absent => Some(0),
            SessionTier::InMemory => before.tokens.zip(input_tokens).map(|(t, i)| t.min(i)),
            SessionTier::OnDisk => None,
        };
        CacheEvidence {
            source: "session_state".into(),
            cached_tokens: cached,
            prompt_evaluated_tokens: cached.zip(input_tokens).map(|(c, i)| i.saturating_sub(c)),
            ..Default::default()
        }
    });
    e.session_before = Some(Box::new(before));
    e.session_after = after.map(Box::new);
    e
}

pub(crate) fn turn_summary(turn: u32, ex: &Exchange) -> TurnSummary {
    TurnSummary {
        turn,
        think_ms: None,
        ttft_ms: ex.ttft_ms,
        e2e_ms: ex.e2e_ms,
        input_tokens: ex.usage.input_tokens,
        output_tokens: ex.usage.output_tokens,
        cached_tokens: evidence(ex).and_then(|e| e.cached_tokens),
        error: ex.error.clone(),
    }
}

//! Quality flags of one measurement: pure functions over a record and the full output text.
//!
//! `quality_ok` = no flag with `fails_gate`. Which flags fail the gate, and why:
//!
//! | flag | fails | why |
//! |---|---|---|
//! | empty_output | yes | nothing was generated: no decode to measure |
//! | too_few_tokens | yes | under 5 tokens, a decode rate is noise |
//! | early_eos | **no** | the model legitimately finished; the row is real, only shorter. (The random-weight test model never emits EOS, so tests see it only from fixtures.) |
//! | repetition_loop | yes | a 4-word sequence more than 5 times: the model is broken or the cache corrupt |
//! | spacing_corruption | yes | mean word length over 20: detokenisation is broken |
//! | usage_missing | yes | no server token counts (or input_tokens 0): rates would be guesses (the origin streamed without usage and recorded input_tokens 0) |
//! | max_tokens_exceeded | yes | the server ignored max_tokens (origin: 253 of 64) |
//! | input_tokens_mismatch | **no** | the prompt was mis-sized; the timing is real but for another context (verify warns) |
//! | delta_count_mismatch | yes | more deltas than tokens: the client or the server miscounts |
//! | error_in_stream | yes | a 200 stream carried an error object (an overloaded server answers 200, then an error event) |
//! | http_error | yes | non-2xx status |
//! | request_failed | yes | connect, timeout, truncation, protocol or preset failure |
//! | ttft_after_e2e | yes | impossible timing: clock misuse |
//! | stream_burst | yes | the stream was held back: flushed at once (many tokens per distinct arrival, or the client saw the tokens spread over far less time than the server's own `timings` say it decoded), or its first arrival brought the first token only with 4 or more deltas whose decode is a fifth of TTFT or more (`first_lump`): TTFT holds the decode and the decode rate is the client's read, not the server's |

use std::collections::HashMap;

use ttft_model::record::{
    CacheEvidence, CacheState, ErrorKind, Measurement, Mode, QualityCode, QualityFlag, StaggeredRecord,
};

/// Fewer output tokens than this cannot support a decode rate.
pub const MIN_OUTPUT_TOKENS: u64 = 5;
/// A 4-word sequence seen more than this many times is a loop.
pub const MAX_NGRAM_REPEATS: usize = 5;
pub const NGRAM_WORDS: usize = 4;
/// Mean word length (characters) above which spacing is corrupt.
pub const MAX_MEAN_WORD_CHARS: f64 = 20.0;

/// A stream needs this many output tokens before its arrivals can show a burst.
pub const BURST_MIN_TOKENS: u64 = 8;
/// Output tokens per distinct arrival from which a stream counts as flushed at once, when its
/// first arrival also holds at least `BURST_FIRST_SHARE` of its deltas. A paced stream brings
/// one token per arrival, a few with multi-token deltas (speculative decoding); a stream whose
/// later tokens a busy server or proxy lumps together still has a true TTFT, so the count alone is
/// not enough. What makes a burst distort TTFT is the first token arriving only with the rest: a stream whose
/// first token came alone and whose rest came lumped (a busy server flushing its later tokens)
/// still has a true TTFT and a true decode rate over its span.
pub const BURST_TOKENS_PER_ARRIVAL: f64 = 8.0;
pub const BURST_FIRST_SHARE: f64 = 0.5;
/// Deltas stamped closer than this arrived together (one read, or one flush split in packets).
pub const SAME_ARRIVAL_MS: f64 = 0.1;
/// A stream counts as flushed at once when the client saw its tokens spread over less than this
/// share of the time the server says it decoded them...
pub const BURST_SPREAD_SHARE: f64 = 0.5;
/// ...and the server decoded for at least this long (ms): shorter, the clocks' noise decides.
pub const BURST_MIN_SERVER_DECODE_MS: f64 = 10.0;
/// A stream whose first arrival holds at least this many content deltas had its first token held
/// back with the ones decoded after it (a buffering proxy forwarding in lumps, a proxy holding the
/// first events, a starved server thread). A paced stream brings its first delta alone: a server
/// sends each delta as it makes it, a multi-token delta included, and bench stamps each packet as
/// it arrives; a busy machine may put a few together, so fewer than this is not a lump.
pub const LUMP_MIN_FIRST_DELTAS: usize = 4;
/// ...and counts as lumped when the decode held before the first token was seen, (deltas in the
/// first arrival - 1) x the stream's pace, is at least this share of its TTFT: a TTFT overstated by
/// a fifth or more, above the run-to-run spread of a TTFT (docs/verify-rules.md has the data).
pub const LUMP_HELD_SHARE: f64 = 0.2;
/// ...and at least this long (ms): less is within the clocks' noise.
pub const LUMP_MIN_HELD_MS: f64 = 1.0;

fn flag(code: QualityCode, fails_gate: bool, reason: String) -> QualityFlag {
    QualityFlag { flag: code, reason, fails_gate }
}

/// How far the server's input tokens may be from the nominal (expected) count before the prompt
/// counts as mis-sized: 1% of nominal, at least 2 tokens (a tokenizer may merge or split a token at
/// either end of the prompt). One function for sizing, quality and verify.
pub fn input_tokens_tolerance(nominal: u64) -> f64 {
    (nominal as f64 * 0.01).max(2.0)
}

/// quality_ok: true when no flag fails the gate.
pub fn gate(flags: &[QualityFlag]) -> bool {
    !flags.iter().any(|f| f.fails_gate)
}

/// Every flag of one measurement. `full_output` is the whole generated text (reasoning first),
/// not the 500-character sample.
pub fn assess(m: &Measurement, full_output: &str) -> Vec<QualityFlag> {
    let mut flags = timing_flags(m.ttft_ms, m.e2e_ms);
    if let Some(err) = &m.error {
        let (code, what) = match err.kind {
            ErrorKind::StreamError => (QualityCode::ErrorInStream, "the stream carried an error".to_string()),
            ErrorKind::HttpStatus => (
                QualityCode::HttpError,
                format!("HTTP {}", err.http_status.map_or("error".into(), |s| s.to_string())),
            ),
            _ => (QualityCode::RequestFailed, err.kind.as_str().to_string()),
        };
        flags.push(flag(code, true, format!("{what}: {}", err.message)));
        // A failed request has no output to judge; more flags would only repeat the error.
        return flags;
    }
    flags.extend(text_flags(full_output));
    flags.extend(check_usage(m.input_tokens, m.output_tokens));
    if let Some(out) = m.output_tokens {
        output_count_flags(&mut flags, m, out);
    }
    flags.extend(check_input_tokens(m.input_tokens, m.expected_input_tokens));
    flags.extend(check_burst(m));
    flags
}

/// How many distinct arrival times `offsets_ms` (ascending) hold: a delta stamped within
/// `SAME_ARRIVAL_MS` of the previous one arrived with it.
pub fn distinct_arrivals(offsets_ms: &[f64]) -> u64 {
    arrivals(offsets_ms).0
}

/// (distinct arrivals, deltas in the first one) of `offsets_ms` (ascending).
fn arrivals(offsets_ms: &[f64]) -> (u64, usize) {
    let groups = arrival_groups(offsets_ms);
    (groups.len() as u64, groups.first().map_or(0, |g| g.1))
}

/// Each distinct arrival of `offsets_ms` (ascending): its time (its first delta's stamp) and how
/// many deltas came in it. A delta stamped within `SAME_ARRIVAL_MS` of the previous one arrived
/// with it.
fn arrival_groups(offsets_ms: &[f64]) -> Vec<(f64, usize)> {
    let mut groups: Vec<(f64, usize)> = Vec::new();
    let mut last = None::<f64>;
    for &t in offsets_ms {
        match (last, groups.last_mut()) {
            (Some(l), Some(group)) if t - l <= SAME_ARRIVAL_MS => group.1 += 1,
            _ => groups.push((t, 1)),
        }
        last = Some(t);
    }
    groups
}

/// The server's own decode time (ms) between its first and last output token, from llama.cpp's
/// `timings` (`predicted_ms` over `predicted_n` tokens); None when the server gives none.
pub fn server_decode_ms(timings: Option<&serde_json::Value>) -> Option<f64> {
    let t = timings?;
    let (ms, n) = (t.get("predicted_ms")?.as_f64()?, t.get("predicted_n")?.as_f64()?);
    (n >= 2.0 && ms.is_finite() && ms > 0.0).then(|| ms * (n - 1.0) / n)
}

/// How a stream's first arrival held back its first token: the deltas that came with it, and
/// about how long the server had been decoding them before they were seen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FirstLump {
    /// Content deltas in the first arrival (the first token's among them).
    pub deltas: usize,
    /// When the first arrival came (ms since the send): the record's TTFT.
    pub at_ms: f64,
    /// The stream's pace, ms a delta (`delta_pace_ms`).
    pub pace_ms: f64,
    /// (deltas - 1) x pace, at most TTFT: how much of TTFT is decode that came after the first token.
    pub held_ms: f64,
}

/// The stream's pace in ms a content delta, as the least of two witnesses that the lump itself
/// cannot speed up: the median, over the arrivals after the first, of the time since the arrival
/// before over the deltas it brought (a gateway forwarding 16 deltas every 160 ms paces 10 ms a
/// delta; the median ignores a stall); and the server's own decode time (`server_decode_ms`) over
/// the gaps between the deltas. The smaller one is taken, so a stream slowed by a stall somewhere
/// does not make its first arrival look more held than it was. None without either.
pub fn delta_pace_ms(offsets_ms: &[f64], timings: Option<&serde_json::Value>) -> Option<f64> {
    let arrivals = arrival_groups(offsets_ms);
    let per_delta: Vec<f64> = arrivals.windows(2).map(|w| (w[1].0 - w[0].0) / w[1].1 as f64).collect();
    let by_arrivals = ttft_model::stats::median(&per_delta);
    let by_server = server_decode_ms(timings)
        .zip(offsets_ms.len().checked_sub(1).filter(|&gaps| gaps > 0))
        .map(|(ms, gaps)| ms / gaps as f64);
    match (by_arrivals, by_server) {
        (Some(a), Some(s)) => Some(a.min(s)),
        (a, s) => a.or(s),
    }
}

/// The first arrival's lump, when it held back the first token: at least `LUMP_MIN_FIRST_DELTAS`
/// deltas, holding at least `LUMP_HELD_SHARE` of TTFT and `LUMP_MIN_HELD_MS` of decode. None for a
/// stream whose first token came alone or with a few, or whose pace is unknown.
pub fn first_lump(m: &Measurement) -> Option<FirstLump> {
    let offsets = &m.token_offsets_ms;
    let &(at_ms, deltas) = arrival_groups(offsets).first()?;
    if deltas < LUMP_MIN_FIRST_DELTAS {
        return None;
    }
    let pace_ms = delta_pace_ms(offsets, m.server_timings.as_deref())?;
    let ttft = m.ttft_ms.unwrap_or(at_ms);
    // Nothing was decoded before the request was sent: a pace overstated by a stall is capped there.
    let held_ms = ((deltas - 1) as f64 * pace_ms).min(ttft);
    (held_ms >= LUMP_MIN_HELD_MS && held_ms >= LUMP_HELD_SHARE * ttft).then_some(FirstLump {
        deltas,
        at_ms,
        pace_ms,
        held_ms,
    })
}

/// `stream_burst`: a stream held back, whole or in part, so that its first token arrived only with
/// tokens decoded after it (by the server under load, or by a buffering proxy). TTFT then holds
/// that decode and the decode rate is partly how fast the client read the lump (on a real
/// llama-server: TTFT 70.4 ms holding the server's 55 ms decode, "decode" 5994 tok/s; under load,
/// 17 of 32 tokens with the first at 30.1 ms where the server's prompt took 4.4 ms). Seen three
/// ways: many tokens per distinct arrival with most of them in the first (flushed at once); the
/// client's spread of the tokens well under the server's own decode time; or a first arrival
/// that held back the first token with decode worth a fifth of TTFT or more (`first_lump`: a
/// gateway forwarding 4 KB at a time, a proxy holding the first events). Fails the gate: neither
/// TTFT nor decode is the server's. A lump after a first token that came alone is not flagged: its
/// TTFT is true, and so is the decode over the stream's span.
pub fn check_burst(m: &Measurement) -> Option<QualityFlag> {
    if m.cell.mode != Mode::Streaming || m.error.is_some() {
        return None;
    }
    let out = m.output_tokens.filter(|&n| n >= BURST_MIN_TOKENS)?;
    let (first, last) = (m.token_offsets_ms.first()?, m.token_offsets_ms.last()?);
    let (arrivals, in_first) = arrivals(&m.token_offsets_ms);
    let client_ms = last - first;
    let server_ms = server_decode_ms(m.server_timings.as_deref());
    let per_arrival = out as f64 / arrivals.max(1) as f64;
    let first_share = in_first as f64 / m.token_offsets_ms.len() as f64;
    let by_arrivals = per_arrival >= BURST_TOKENS_PER_ARRIVAL && first_share >= BURST_FIRST_SHARE;
    let by_timings =
        server_ms.is_some_and(|s| s >= BURST_MIN_SERVER_DECODE_MS && client_ms < BURST_SPREAD_SHARE * s);
    let consequence = "TTFT holds the decode; decode not measurable";
    if by_arrivals || by_timings {
        let server = server_ms.map_or(String::new(), |s| {
            format!("; the server decoded for {s:.1} ms, the client saw the tokens within {client_ms:.1} ms")
        });
        let reason =
            format!("stream arrived in a burst ({out} tokens in {arrivals} arrivals{server}): {consequence}");
        return Some(flag(QualityCode::StreamBurst, true, reason));
    }
    let lump = first_lump(m)?;
    let prompt = m
        .server_timings
        .as_ref()
        .and_then(|t| t.get("prompt_ms")?.as_f64())
        .map_or(String::new(), |p| format!("; the server's own prompt took {p:.1} ms"));
    let reason = format!(
        "stream arrived in lumps: its first arrival at {:.1} ms held {} of {} deltas ({arrivals} arrivals in all), \
         about {:.1} ms of decode at {:.2} ms a delta{prompt}: {consequence}",
        lump.at_ms,
        lump.deltas,
        m.token_offsets_ms.len(),
        lump.held_ms,
        lump.pace_ms
    );
    Some(flag(QualityCode::StreamBurst, true, reason))
}

/// `usage_missing`: no server token counts, or input_tokens 0 (rates would be guesses).
pub fn check_usage(input_tokens: Option<u64>, output_tokens: Option<u64>) -> Option<QualityFlag> {
    let reason = match (input_tokens, output_tokens) {
        (None, _) | (_, None) => format!(
            "server usage missing (input_tokens {}, output_tokens {})",
            show(input_tokens),
            show(output_tokens)
        ),
        (Some(0), _) => "input_tokens 0: the server reported no prompt usage".to_string(),
        _ => return None,
    };
    Some(flag(QualityCode::UsageMissing, true, reason))
}

/// `max_tokens_exceeded`: more output tokens than the request allowed (0: no limit was sent).
pub fn check_max_tokens(output_tokens: Option<u64>, max_tokens: u32) -> Option<QualityFlag> {
    let (out, max) = (output_tokens?, u64::from(max_tokens));
    (max > 0 && out > max).then(|| {
        flag(QualityCode::MaxTokensExceeded, true, format!("{out} output tokens > max_tokens {max}"))
    })
}

/// `input_tokens_mismatch`: the server's input tokens are further from `expected` than
/// `input_tokens_tolerance` allows. Does not fail the gate: the timing is real, for another context.
pub fn check_input_tokens(input_tokens: Option<u64>, expected: Option<u64>) -> Option<QualityFlag> {
    let (input, expected) = (input_tokens.filter(|&n| n > 0)?, expected.filter(|&n| n > 0)?);
    let tolerance = input_tokens_tolerance(expected);
    let off = input as f64 - expected as f64;
    (off.abs() > tolerance).then(|| {
        flag(
            QualityCode::InputTokensMismatch,
            false,
            format!(
                "{input} input tokens vs {expected} expected ({:+.1}%, tolerance {tolerance:.0})",
                100.0 * off / expected as f64
            ),
        )
    })
}

fn output_count_flags(flags: &mut Vec<QualityFlag>, m: &Measurement, out: u64) {
    let max = u64::from(m.max_tokens);
    flags.extend(check_max_tokens(Some(out), m.max_tokens));
    if out > 0 && out < MIN_OUTPUT_TOKENS && max >= MIN_OUTPUT_TOKENS {
        flags.push(flag(
            QualityCode::TooFewTokens,
            true,
            format!("{out} output tokens < {MIN_OUTPUT_TOKENS}"),
        ));
    }
    if m.finish_reason.as_deref() == Some("stop") && out > 0 && out * 2 < max {
        flags.push(flag(
            QualityCode::EarlyEos,
            false,
            format!("model stopped after {out} of max_tokens {max} (finish_reason stop)"),
        ));
    }
    if m.cell.mode == Mode::Streaming {
        // A delta may carry several tokens (speculative decoding, batched deltas), so fewer deltas
        // than tokens is fine; more deltas than tokens (+1 for a trailing empty-ish delta) is not.
        if m.delta_count > out + 1 {
            flags.push(flag(
                QualityCode::DeltaCountMismatch,
                true,
                format!("{} content deltas > {out} output tokens (+1)", m.delta_count),
            ));
        } else if m.delta_count == 0 && out > 0 {
            flags.push(flag(
                QualityCode::DeltaCountMismatch,
                true,
                format!("0 content deltas in a stream whose usage says {out} output tokens"),
            ));
        }
    }
}

fn show(v: Option<u64>) -> String {
    v.map_or("null".into(), |n| n.to_string())
}

fn timing_flags(ttft_ms: Option<f64>, e2e_ms: Option<f64>) -> Vec<QualityFlag> {
    check_timing(ttft_ms, e2e_ms).into_iter().collect()
}

/// `ttft_after_e2e`: a negative time, or the first token after the last: clock misuse.
pub fn check_timing(ttft_ms: Option<f64>, e2e_ms: Option<f64>) -> Option<QualityFlag> {
    let reason = if let Some(t) = ttft_ms.filter(|t| *t < 0.0) {
        format!("negative ttft_ms {t:.1}")
    } else if let Some(e) = e2e_ms.filter(|e| *e < 0.0) {
        format!("negative e2e_ms {e:.1}")
    } else if let (Some(t), Some(e)) = (ttft_ms, e2e_ms)
        && t > e
    {
        format!("ttft_ms {t:.1} > e2e_ms {e:.1}")
    } else {
        return None;
    };
    Some(flag(QualityCode::TtftAfterE2e, true, reason))
}

/// The origin's structural checks on the text itself.
fn text_flags(text: &str) -> Vec<QualityFlag> {
    let mut flags = Vec::new();
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.is_empty() {
        flags.push(flag(
            QualityCode::EmptyOutput,
            true,
            format!("no words in {} characters of output", text.len()),
        ));
        return flags;
    }
    let mut counts: HashMap<&[&str], usize> = HashMap::new();
    for gram in words.windows(NGRAM_WORDS) {
        *counts.entry(gram).or_default() += 1;
    }
    if let Some((gram, n)) =
        counts.into_iter().filter(|(_, n)| *n > MAX_NGRAM_REPEATS).max_by_key(|(_, n)| *n)
    {
        flags.push(flag(
            QualityCode::RepetitionLoop,
            true,
            format!("{:?} repeated {n} times (> {MAX_NGRAM_REPEATS})", gram.join(" ")),
        ));
    }
    let mean = words.iter().map(|w| w.chars().count()).sum::<usize>() as f64 / words.len() as f64;
    if mean > MAX_MEAN_WORD_CHARS {
        flags.push(flag(
            QualityCode::SpacingCorruption,
            true,
            format!("mean word length {mean:.1} characters > {MAX_MEAN_WORD_CHARS}"),
        ));
    }
    flags
}

/// Flags of a staggered pair: both users' timings and output counts, and any error.
pub fn assess_staggered(s: &StaggeredRecord) -> Vec<QualityFlag> {
    let mut flags = Vec::new();
    for (user, ttft, e2e, out) in [
        ("user A", s.user_a_ttft_ms, s.user_a_e2e_ms, s.user_a_output_tokens),
        ("user B", s.user_b_ttft_ms, s.user_b_e2e_ms, s.user_b_output_tokens),
    ] {
        for mut f in timing_flags(ttft, e2e) {
            f.reason = format!("{user}: {}", f.reason);
            flags.push(f);
        }
        match out {
            None => {
                flags.push(flag(QualityCode::UsageMissing, true, format!("{user}: output_tokens missing")))
            }
            Some(0) => flags.push(flag(QualityCode::EmptyOutput, true, format!("{user}: 0 output tokens"))),
            Some(n) if n < MIN_OUTPUT_TOKENS => flags.push(flag(
                QualityCode::TooFewTokens,
                true,
                format!("{user}: {n} output tokens < {MIN_OUTPUT_TOKENS}"),
            )),
            Some(_) => {}
        }
    }
    if let Some(err) = &s.error {
        flags.push(flag(QualityCode::RequestFailed, true, format!("{}: {}", err.kind.as_str(), err.message)));
    }
    flags
}

/// Whether user B of a staggered pair was sent while user A was still in flight, and for how
/// long the two were in flight together (ms, 0 when not): B sent `user_b_arrival_ms` after A, A
/// done at `user_a_e2e_ms`, B's own duration `user_b_e2e_ms` (when known, a B that ends first
/// overlaps only for its own duration). None without B's arrival and A's end. One formula for the
/// runner (which records it) and verify (which derives it for files written before it was recorded).
pub fn staggered_overlap(
    user_b_arrival_ms: Option<f64>,
    user_a_e2e_ms: Option<f64>,
    user_b_e2e_ms: Option<f64>,
) -> Option<(bool, f64)> {
    let (b, a) = (user_b_arrival_ms.filter(|v| v.is_finite())?, user_a_e2e_ms.filter(|v| v.is_finite())?);
    let b_end = user_b_e2e_ms.filter(|v| v.is_finite()).map_or(f64::INFINITY, |e| b + e);
    let overlap_ms = (a.min(b_end) - b).max(0.0);
    Some((b < a, overlap_ms))
}

/// Whether the server's cache evidence matches the claimed state; None where the evidence shows
/// nothing about this request.
///
/// Evidence that shows nothing proves nothing: a server that says it computed no prompt token and
/// served none from a cache (counters that did not move, because the request did not reach them
/// or they were read before the server counted it) did not describe this request, and neither do
/// counts whose computed + cached tokens do not add up to its prompt (within 1% or 2 tokens: a
/// counter that moved late, or one that counted another request too). Such evidence is None, as
/// if there were none.
///
/// cold: confirmed iff nothing was served from a cache (cached 0), or the server evaluated about
/// the whole prompt (within 1% or 2 tokens). warm/hot: confirmed iff the server computed only a small
/// part of the prompt: evaluated <= max(64, 10% of input), or cached >= 90% of input.
///
/// Evidence that carries the server's own per-session state (`session_before`) must also show the
/// tier the claimed state implies (`session_verdict`); where it does not, the row is unconfirmed
/// whatever the counts say, and where the counts say nothing, the tiers decide.
pub fn confirm_cache_state(
    state: CacheState,
    evidence: &CacheEvidence,
    prompt: impl Into<PromptTokens>,
) -> Option<bool> {
    let prompt = prompt.into();
    let input = prompt.input.filter(|&n| n > 0);
    let by_session = session_verdict(state, evidence, PromptTokens { input, ..prompt });
    if by_session == Some(false) {
        return Some(false);
    }
    match confirm_by_counts(state, evidence, PromptTokens { input, ..prompt }) {
        None => by_session,
        by_counts => by_counts,
    }
}

/// The most prompt tokens a warm or hot request may compute and still count as served from the
/// cache: max(64, 10% of the prompt); for a later turn of a conversation whose previous turn's
/// prompt is known, at least what this request adds to it (its new messages and their template,
/// within `input_tokens_tolerance`): a long new turn is prefilled whatever the cache holds
/// (llama-server: "cached 418, evaluated 218 of 636" for a 218-token last turn).
fn small_part(prompt: PromptTokens) -> f64 {
    let share = prompt.input.map_or(64.0, |i| (i as f64 * 0.10).max(64.0));
    match (prompt.input, prompt.earlier_turn) {
        (Some(i), Some(e)) if e < i => share.max((i - e) as f64 + input_tokens_tolerance(i)),
        _ => share,
    }
}

/// Whether `cached` tokens cover what a warm or hot request should find cached: 90% of the
/// prompt, or for a later turn the whole previous turn's prompt (within `input_tokens_tolerance`).
fn cached_enough(cached: u64, prompt: PromptTokens) -> Option<bool> {
    let i = prompt.input?;
    let earlier_held =
        prompt.earlier_turn.is_some_and(|e| cached as f64 + input_tokens_tolerance(i) >= e as f64);
    Some(cached as f64 >= 0.9 * i as f64 || earlier_held)
}

/// What the server's own record of the session before and after the request says of the claimed
/// state; None where the evidence carries no such record.
/// - cold: nothing was cached for the session before the request;
/// - warm: the session was on disk before (a file of more than 0 bytes where the size is reported:
///   a listed session whose file is gone is a stale entry) and not in memory, and in memory after,
///   holding at least the prompt where the count is reported;
/// - hot: the session was in memory before, holding all of the prompt but its new part (at most
///   max(64, 10%) tokens short: the earlier turns), and in memory after.
pub fn session_verdict(state: CacheState, evidence: &CacheEvidence, prompt: PromptTokens) -> Option<bool> {
    let input = prompt.input;
    use ttft_model::record::SessionTier;
    let before = evidence.session_before.as_ref()?;
    let after = evidence.session_after.as_ref();
    let in_memory_after = after.is_some_and(|a| a.tier == SessionTier::InMemory);
    Some(match state {
        CacheState::Cold => before.tier == SessionTier::Absent,
        CacheState::Warm => {
            let holds_prompt = match (after.and_then(|a| a.tokens), input) {
                (Some(t), Some(i)) => t as f64 + input_tokens_tolerance(i) >= i as f64,
                _ => true,
            };
            before.tier == SessionTier::OnDisk
                && before.file_bytes != Some(0)
                && in_memory_after
                && holds_prompt
        }
        CacheState::Hot => {
            let held_earlier_turns = match (before.tokens, input) {
                (Some(t), Some(i)) => t as f64 + small_part(prompt) >= i as f64,
                _ => false,
            };
            before.tier == SessionTier::InMemory && held_earlier_turns && in_memory_after
        }
    })
}

/// The prompt a cache verdict is about: its size as the server counted it and, for a later turn
/// of a conversation, the size of the turn before it, whose counts a counter read late would show
/// in its place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PromptTokens {
    pub input: Option<u64>,
    pub earlier_turn: Option<u64>,
}

impl From<Option<u64>> for PromptTokens {
    fn from(input: Option<u64>) -> Self {
        PromptTokens { input, earlier_turn: None }
    }
}

impl PromptTokens {
    /// A measurement's prompt; a hot record's earlier turn is the last of its unmeasured turns.
    pub fn of(m: &Measurement) -> PromptTokens {
        let earlier_turn = match m.cell.cache_state {
            CacheState::Hot => m.turns.last().and_then(|t| t.input_tokens),
            _ => None,
        };
        PromptTokens { input: m.input_tokens, earlier_turn }
    }
}

/// `confirm_cache_state` from the token counts alone.
fn confirm_by_counts(state: CacheState, evidence: &CacheEvidence, prompt: PromptTokens) -> Option<bool> {
    let (cached, evaluated) = (evidence.cached_tokens, evidence.prompt_evaluated_tokens);
    if !shows_this_request(evidence, prompt) {
        return None;
    }
    let input = prompt.input;
    match state {
        CacheState::Cold => {
            if let Some(c) = cached {
                return Some(c == 0);
            }
            let (p, i) = (evaluated?, input?);
            Some(p as f64 + input_tokens_tolerance(i) >= i as f64)
        }
        CacheState::Warm | CacheState::Hot => {
            let small = small_part(prompt);
            let by_evaluated = evaluated.map(|p| p as f64 <= small);
            let by_cached = cached.and_then(|c| cached_enough(c, prompt));
            match (by_evaluated, by_cached) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(false) || b.unwrap_or(false)),
            }
        }
    }
}

/// Whether `evidence` describes a request whose prompt had `prompt.input` tokens: not all zero
/// (nothing computed and nothing cached is no request at all), and where both counts and the
/// prompt are known, computed + cached is the prompt (within `input_tokens_tolerance`). A later
/// turn's counts must also be nearer its own prompt than the turn before it: the tolerance is
/// wider than a short turn's new tokens (1% of 16K is 164 tokens), so counts that add up to the
/// earlier turn (a counter read one scrape late) would otherwise pass for this one.
fn shows_this_request(evidence: &CacheEvidence, prompt: PromptTokens) -> bool {
    let (cached, evaluated) = (evidence.cached_tokens, evidence.prompt_evaluated_tokens);
    if cached.unwrap_or(0) == 0 && evaluated == Some(0) {
        return false;
    }
    let (Some(c), Some(p), Some(i)) = (cached, evaluated, prompt.input) else { return true };
    let sum = c + p;
    let off = sum.abs_diff(i);
    let nearer_than_earlier = prompt.earlier_turn.is_none_or(|e| off < sum.abs_diff(e));
    off as f64 <= input_tokens_tolerance(i) && nearer_than_earlier
}

/// The verdict a record carries in `cache_state_confirmed`, from its evidence (None: no
/// evidence object). A warm or hot row is confirmed only by evidence that the cache served its
/// prompt: without such evidence (none, or evidence that shows nothing) it is unconfirmed
/// (false), because nothing shows that the preset's cache actions did anything. A cold row
/// without evidence stays unknown (None): nothing was claimed of a cache. One function for the
/// sweep that writes the verdict and verify that recomputes it.
pub fn cache_state_verdict(
    state: CacheState,
    evidence: Option<&CacheEvidence>,
    prompt: impl Into<PromptTokens>,
) -> Option<bool> {
    let prompt = prompt.into();
    match evidence.and_then(|e| confirm_cache_state(state, e, prompt)) {
        Some(v) => Some(v),
        None if state == CacheState::Cold => None,
        None => Some(false),
    }
}

/// Why a record's cache state is unconfirmed, in words (the sweep's quality flag and verify's
/// finding say the same).
pub fn cache_verdict_reason(
    state: CacheState,
    evidence: Option<&CacheEvidence>,
    prompt: impl Into<PromptTokens>,
) -> String {
    let prompt = prompt.into();
    let input_tokens = prompt.input;
    let show = |v: Option<u64>| v.map_or("null".to_string(), |n| n.to_string());
    let counts = |e: &CacheEvidence| {
        format!(
            "{}: cached {}, evaluated {} of {} prompt tokens",
            e.source,
            show(e.cached_tokens),
            show(e.prompt_evaluated_tokens),
            show(input_tokens)
        )
    };
    match evidence {
        None => format!("no cache evidence: nothing shows the cache served this '{}' prompt", state.as_str()),
        Some(e)
            if confirm_cache_state(state, e, prompt).is_none()
                && !shows_this_request(e, prompt.input.into()) =>
        {
            format!(
                "the server's cache evidence shows nothing about this request ({}): nothing shows the cache served this '{}' prompt",
                counts(e),
                state.as_str()
            )
        }
        Some(e) if confirm_cache_state(state, e, prompt).is_none() => format!(
            "the server's cache evidence adds up to the previous turn's {}-token prompt, not this one's ({}): \
             counters read late describe another request, so nothing shows the cache served this '{}' prompt",
            show(prompt.earlier_turn),
            counts(e),
            state.as_str()
        ),
        Some(e)
            if session_verdict(
                state,
                e,
                PromptTokens { input: input_tokens.filter(|&n| n > 0), ..prompt },
            ) == Some(false) =>
        {
            format!(
                "the server's own state of the session contradicts '{}' (before: {}; after: {}; {} prompt tokens)",
                state.as_str(),
                describe_session(e.session_before.as_deref()),
                describe_session(e.session_after.as_deref()),
                show(input_tokens)
            )
        }
        Some(e) => format!("the server's cache evidence contradicts '{}' ({})", state.as_str(), counts(e)),
    }
}

/// A session's cache at one instant, in words: "on_disk (0 tokens listed, 446527-byte file)".
fn describe_session(s: Option<&ttft_model::record::SessionCache>) -> String {
    let Some(s) = s else { return "not read".into() };
    let mut parts = Vec::new();
    parts.extend(s.tokens.map(|t| format!("{t} tokens")));
    parts.extend(s.file_bytes.map(|b| format!("{b}-byte file")));
    if parts.is_empty() {
        s.tier.as_str().to_string()
    } else {
        format!("{} ({})", s.tier.as_str(), parts.join(", "))
    }
}

#[cfg(test)]
mod tests;

//! Quality flags on known rows.

use super::*;
use ttft_model::record::{CellKey, ErrorInfo};

const TEXT: &str = "The cache keeps the keys and values of every earlier token so that a later request \
    can skip the prefill of the shared prefix and start decoding almost at once.";

fn m(out: Option<u64>, max: u32, deltas: u64) -> Measurement {
    Measurement {
        cell: CellKey {
            mode: Mode::Streaming,
            context_tokens: 1024,
            batch_size: 1,
            run: 1,
            ..Default::default()
        },
        ttft_ms: Some(100.0),
        e2e_ms: Some(2000.0),
        input_tokens: Some(1024),
        expected_input_tokens: Some(1024),
        output_tokens: out,
        max_tokens: max,
        delta_count: deltas,
        finish_reason: Some("length".into()),
        ..Default::default()
    }
}

fn codes(flags: &[QualityFlag]) -> Vec<QualityCode> {
    flags.iter().map(|f| f.flag.clone()).collect()
}

#[test]
fn a_clean_row_has_no_flags() {
    let flags = assess(&m(Some(64), 64, 64), TEXT);
    assert!(flags.is_empty(), "{flags:?}");
    assert!(gate(&flags));
}

#[test]
fn max_tokens_exceeded_carries_the_numbers_and_fails() {
    let flags = assess(&m(Some(253), 64, 253), TEXT);
    assert_eq!(codes(&flags), vec![QualityCode::MaxTokensExceeded]);
    assert_eq!(flags[0].reason, "253 output tokens > max_tokens 64");
    assert!(!gate(&flags));
}

#[test]
fn usage_missing_and_zero_input_fail() {
    let flags = assess(&m(None, 64, 64), TEXT);
    assert_eq!(codes(&flags), vec![QualityCode::UsageMissing]);
    let mut zero = m(Some(64), 64, 64);
    zero.input_tokens = Some(0);
    let flags = assess(&zero, TEXT);
    assert_eq!(codes(&flags), vec![QualityCode::UsageMissing]);
    assert!(flags[0].reason.contains("input_tokens 0"));
    assert!(!gate(&flags));
}

#[test]
fn early_eos_is_flagged_but_does_not_fail_the_gate() {
    let mut row = m(Some(45), 128, 45);
    row.finish_reason = Some("stop".into());
    let flags = assess(&row, TEXT);
    assert_eq!(codes(&flags), vec![QualityCode::EarlyEos]);
    assert!(flags[0].reason.contains("45 of max_tokens 128"));
    assert!(gate(&flags));
    // 45 of 64 is more than half: not early.
    let mut row = m(Some(45), 64, 45);
    row.finish_reason = Some("stop".into());
    assert!(assess(&row, TEXT).is_empty());
}

#[test]
fn structural_text_rules() {
    assert_eq!(codes(&assess(&m(Some(64), 64, 64), "  \n ")), vec![QualityCode::EmptyOutput]);
    let looped = "and then it goes ".repeat(6);
    let flags = assess(&m(Some(64), 64, 64), &looped);
    assert_eq!(codes(&flags), vec![QualityCode::RepetitionLoop]);
    assert!(flags[0].reason.contains("6 times"), "{}", flags[0].reason);
    assert!(assess(&m(Some(64), 64, 64), &"and then it goes ".repeat(5)).is_empty());
    let glued = "Thecachekeepsthekeysandvalues ofeveryearliertokensothatalater";
    assert_eq!(codes(&assess(&m(Some(64), 64, 64), glued)), vec![QualityCode::SpacingCorruption]);
    assert_eq!(codes(&assess(&m(Some(3), 64, 3), TEXT)), vec![QualityCode::TooFewTokens]);
}

#[test]
fn delta_counts_allow_multi_token_chunks_only() {
    assert!(assess(&m(Some(64), 64, 20), TEXT).is_empty(), "multi-token chunks are legitimate");
    assert!(assess(&m(Some(64), 64, 65), TEXT).is_empty(), "+1 slack");
    assert_eq!(codes(&assess(&m(Some(64), 64, 66), TEXT)), vec![QualityCode::DeltaCountMismatch]);
    assert_eq!(codes(&assess(&m(Some(64), 64, 0), TEXT)), vec![QualityCode::DeltaCountMismatch]);
    let mut ns = m(Some(64), 64, 0);
    ns.cell.mode = Mode::NonStreaming;
    ns.ttft_ms = None;
    assert!(assess(&ns, TEXT).is_empty(), "non-streaming has no deltas and no TTFT");
}

#[test]
fn input_mismatch_uses_one_percent_or_two_tokens() {
    let mut row = m(Some(64), 64, 64);
    row.input_tokens = Some(768); // the origin's 25% short prompts
    let flags = assess(&row, TEXT);
    assert_eq!(codes(&flags), vec![QualityCode::InputTokensMismatch]);
    assert!(flags[0].reason.contains("768 input tokens vs 1024 expected (-25.0%"), "{}", flags[0].reason);
    assert!(gate(&flags), "mis-sized prompts warn in verify; the timing itself is real");
    row.input_tokens = Some(1034);
    assert!(assess(&row, TEXT).is_empty(), "within 1%");
    row.expected_input_tokens = Some(20);
    row.input_tokens = Some(23);
    assert_eq!(
        codes(&assess(&row, TEXT)),
        vec![QualityCode::InputTokensMismatch],
        "tiny prompt: > 2 tokens off"
    );
}

#[test]
fn timing_and_errors() {
    let mut row = m(Some(64), 64, 64);
    row.ttft_ms = Some(2500.0);
    let flags = assess(&row, TEXT);
    assert_eq!(codes(&flags), vec![QualityCode::TtftAfterE2e]);
    assert_eq!(flags[0].reason, "ttft_ms 2500.0 > e2e_ms 2000.0");
    row.ttft_ms = Some(-1.0);
    assert_eq!(codes(&assess(&row, TEXT)), vec![QualityCode::TtftAfterE2e]);

    let mut err = m(None, 64, 0);
    err.error =
        Some(ErrorInfo { kind: ErrorKind::HttpStatus, message: "busy".into(), http_status: Some(503) });
    let flags = assess(&err, "");
    assert_eq!(codes(&flags), vec![QualityCode::HttpError]);
    assert_eq!(flags[0].reason, "HTTP 503: busy");
    err.error = Some(ErrorInfo::new(ErrorKind::StreamError, "overloaded"));
    assert_eq!(codes(&assess(&err, "")), vec![QualityCode::ErrorInStream]);
    err.error = Some(ErrorInfo::new(ErrorKind::Timeout, "600 s"));
    assert_eq!(codes(&assess(&err, "")), vec![QualityCode::RequestFailed]);
}

#[test]
fn staggered_pairs() {
    let mut s = StaggeredRecord {
        user_a_ttft_ms: Some(100.0),
        user_a_e2e_ms: Some(900.0),
        user_b_ttft_ms: Some(300.0),
        user_b_e2e_ms: Some(200.0),
        user_a_output_tokens: Some(64),
        user_b_output_tokens: None,
        ..Default::default()
    };
    let flags = assess_staggered(&s);
    assert_eq!(codes(&flags), vec![QualityCode::TtftAfterE2e, QualityCode::UsageMissing]);
    assert!(flags[0].reason.starts_with("user B"));
    s.user_b_e2e_ms = Some(1200.0);
    s.user_b_output_tokens = Some(64);
    assert!(assess_staggered(&s).is_empty());
}

#[test]
fn staggered_overlap_is_b_sent_before_a_finished() {
    assert_eq!(staggered_overlap(Some(300.0), Some(1200.0), None), Some((true, 900.0)));
    // The H200 case: A (4K) done in ~500 ms, B sent at the default 2 s.
    assert_eq!(staggered_overlap(Some(2000.0), Some(500.0), Some(100.0)), Some((false, 0.0)));
    assert_eq!(staggered_overlap(Some(500.0), Some(500.0), None), Some((false, 0.0)));
    assert_eq!(staggered_overlap(None, Some(500.0), None), None);
    assert_eq!(
        staggered_overlap(Some(250.0), Some(1000.0), Some(500.0)),
        Some((true, 500.0)),
        "B ended first"
    );
    assert_eq!(staggered_overlap(Some(f64::NAN), Some(500.0), None), None);
}

#[test]
fn input_tolerance_is_one_percent_at_least_two_tokens() {
    assert_eq!(input_tokens_tolerance(4096), 40.96);
    assert_eq!(input_tokens_tolerance(100), 2.0);
    assert_eq!(input_tokens_tolerance(0), 2.0);
}

#[test]
fn cache_state_confirmation() {
    let ev = |cached, evaluated| CacheEvidence {
        source: "t".into(),
        cached_tokens: cached,
        prompt_evaluated_tokens: evaluated,
        ..Default::default()
    };
    assert_eq!(confirm_cache_state(CacheState::Cold, &ev(Some(0), None), Some(4096)), Some(true));
    assert_eq!(confirm_cache_state(CacheState::Cold, &ev(Some(4000), None), Some(4096)), Some(false));
    assert_eq!(confirm_cache_state(CacheState::Cold, &ev(None, Some(4090)), Some(4096)), Some(true));
    assert_eq!(confirm_cache_state(CacheState::Cold, &ev(None, Some(100)), Some(4096)), Some(false));
    assert_eq!(confirm_cache_state(CacheState::Cold, &ev(None, None), Some(4096)), None);
    assert_eq!(confirm_cache_state(CacheState::Warm, &ev(None, Some(12)), Some(4096)), Some(true));
    assert_eq!(confirm_cache_state(CacheState::Warm, &ev(None, Some(4096)), Some(4096)), Some(false));
    assert_eq!(confirm_cache_state(CacheState::Hot, &ev(Some(3900), None), Some(4096)), Some(true));
    assert_eq!(confirm_cache_state(CacheState::Warm, &ev(Some(0), None), Some(4096)), Some(false));
    assert_eq!(confirm_cache_state(CacheState::Warm, &ev(None, None), Some(4096)), None);
}

#[test]
fn evidence_that_shows_nothing_confirms_nothing() {
    let ev = |cached, evaluated| CacheEvidence {
        source: "metrics".into(),
        cached_tokens: cached,
        prompt_evaluated_tokens: evaluated,
        ..Default::default()
    };
    // Counters that did not move saw no request: no evidence, for any state.
    for state in [CacheState::Cold, CacheState::Warm, CacheState::Hot] {
        assert_eq!(confirm_cache_state(state, &ev(Some(0), Some(0)), Some(4096)), None, "{state:?}");
        assert_eq!(confirm_cache_state(state, &ev(None, Some(0)), Some(4096)), None, "{state:?}");
    }
    // Counts that do not add up to the prompt are not this request's (moved late, or counted
    // another request too).
    assert_eq!(confirm_cache_state(CacheState::Warm, &ev(Some(0), Some(12)), Some(4096)), None);
    assert_eq!(confirm_cache_state(CacheState::Warm, &ev(Some(4095), Some(4097)), Some(4096)), None);
    assert_eq!(confirm_cache_state(CacheState::Warm, &ev(Some(4095), Some(1)), Some(4096)), Some(true));
    assert_eq!(confirm_cache_state(CacheState::Cold, &ev(Some(0), Some(4096)), Some(4096)), Some(true));
    // The record's verdict: warm and hot without evidence of a served prompt are unconfirmed;
    // cold without evidence is unknown.
    let nothing = ev(Some(0), Some(0));
    assert_eq!(cache_state_verdict(CacheState::Warm, Some(&nothing), Some(4096)), Some(false));
    assert_eq!(cache_state_verdict(CacheState::Hot, None, Some(4096)), Some(false));
    assert_eq!(cache_state_verdict(CacheState::Cold, Some(&nothing), Some(4096)), None);
    assert_eq!(cache_state_verdict(CacheState::Cold, None, Some(4096)), None);
    let reason = cache_verdict_reason(CacheState::Warm, Some(&nothing), Some(4096));
    assert!(reason.contains("shows nothing") && reason.contains("metrics"), "{reason}");
}

#[test]
fn a_stream_flushed_at_once_is_a_burst_and_a_paced_or_grouped_one_is_not() {
    let mut paced = m(Some(64), 64, 64);
    paced.token_offsets_ms = (0..64).map(|i| 100.0 + 30.0 * f64::from(i)).collect();
    assert_eq!(distinct_arrivals(&paced.token_offsets_ms), 64);
    assert!(check_burst(&paced).is_none());
    // The first token alone and on time, the rest in groups of 8 (a busy server or proxy after
    // it): spread over the decode, TTFT true, no burst. (Groups that take the first token in too
    // hold it back: `first_lump`.)
    let mut grouped = paced.clone();
    grouped.token_offsets_ms = std::iter::once(100.0)
        .chain((1..64).map(|i| 100.0 + 30.0 * f64::from((i - 1) / 8 * 8 + 8)))
        .collect();
    assert_eq!(distinct_arrivals(&grouped.token_offsets_ms), 9);
    assert!(check_burst(&grouped).is_none());
    // Held back and flushed at once: every token in one arrival.
    let mut flushed = paced.clone();
    flushed.token_offsets_ms = vec![1990.0; 64];
    let flag = check_burst(&flushed).unwrap_or_else(|| panic!("a burst"));
    assert!(flag.fails_gate);
    assert!(
        flag.reason.starts_with("stream arrived in a burst (64 tokens in 1 arrivals)"),
        "{}",
        flag.reason
    );
    assert!(codes(&assess(&flushed, TEXT)).contains(&QualityCode::StreamBurst));
    // Arrivals 0.2 ms apart look paced; the server's own timings say it decoded for 1.9 s.
    let mut squeezed = paced.clone();
    squeezed.token_offsets_ms = (0..64).map(|i| 100.0 + 0.2 * f64::from(i)).collect();
    assert!(check_burst(&squeezed).is_none(), "without timings there is no second opinion");
    squeezed.server_timings = Some(Box::new(serde_json::json!({"predicted_n": 64, "predicted_ms": 1920.0})));
    let flag = check_burst(&squeezed).unwrap_or_else(|| panic!("a burst by the server's timings"));
    assert!(flag.reason.contains("the server decoded for 1890.0 ms"), "{}", flag.reason);
    paced.server_timings = squeezed.server_timings.clone();
    assert!(check_burst(&paced).is_none(), "the client saw what the server decoded");
    // A busy server: the first token alone and on time, the other 15 lumped at the end of its
    // 60 ms decode. TTFT is true and so is the decode rate over the span: no burst.
    let mut lumped = m(Some(16), 16, 16);
    lumped.token_offsets_ms = std::iter::once(20.0).chain(std::iter::repeat_n(80.4, 15)).collect();
    lumped.server_timings = Some(Box::new(serde_json::json!({"predicted_n": 16, "predicted_ms": 64.6})));
    assert_eq!(distinct_arrivals(&lumped.token_offsets_ms), 2);
    assert!(check_burst(&lumped).is_none());
    // The same 16 tokens with the first held back among them: TTFT holds the decode.
    lumped.token_offsets_ms = std::iter::repeat_n(20.0, 9).chain(std::iter::repeat_n(80.4, 7)).collect();
    assert!(check_burst(&lumped).is_some());
    // Not streamed: nothing arrived token by token.
    flushed.cell.mode = Mode::NonStreaming;
    assert!(check_burst(&flushed).is_none());
}

/// A streamed record as the sweep writes it from these arrivals: one delta a token, TTFT the first
/// arrival, E2E the last.
fn streamed(offsets: Vec<f64>) -> Measurement {
    let n = offsets.len() as u64;
    let mut r = m(Some(n), n as u32, n);
    (r.ttft_ms, r.e2e_ms) = (offsets.first().copied(), offsets.last().copied());
    r.token_offsets_ms = offsets;
    r
}

#[test]
fn a_first_arrival_that_holds_the_decode_is_a_lump_and_a_few_tokens_together_are_not() {
    use std::iter::repeat_n;
    // A real llama-server under load (the tiny model on a 2-core machine): 17 of 32 tokens in its
    // first arrival at 30.1 ms, the other 15 one by one over 19.3 ms (the client's decode 1607
    // tok/s); its own timings: prompt 4.4 ms, 32 tokens at 836 tok/s.
    let mut real =
        streamed(repeat_n(30.1, 17).chain((1..=15).map(|i| 30.1 + 19.29 * f64::from(i) / 15.0)).collect());
    real.server_timings =
        Some(Box::new(serde_json::json!({"prompt_ms": 4.4, "predicted_n": 32, "predicted_ms": 38.28})));
    let flag = check_burst(&real).unwrap_or_else(|| panic!("17 of 32 tokens with the first is a lump"));
    assert!(flag.fails_gate);
    assert!(
        flag.reason.starts_with("stream arrived in lumps: its first arrival at 30.1 ms held 17 of 32 deltas"),
        "{}",
        flag.reason
    );
    assert!(flag.reason.contains("the server's own prompt took 4.4 ms"), "{}", flag.reason);
    assert!(codes(&assess(&real, TEXT)).contains(&QualityCode::StreamBurst));
    // Without the server's timings, the stream's own later arrivals give its pace.
    real.server_timings = None;
    assert!(check_burst(&real).is_some(), "the later arrivals' pace shows the held decode");

    // A buffering gateway that forwards whenever 4 KB are held: 128 tokens 10 ms apart after a
    // 40 ms prefill, forwarded 16 at a time (TTFT 190 ms for the server's 40).
    let gateway = streamed((0..128).map(|i| 40.0 + 10.0 * f64::from((i / 16 + 1) * 16 - 1)).collect());
    assert!(check_burst(&gateway).is_some(), "4 KB lumps");
    // A proxy that holds the first 30 events and flushes them at once, then forwards each.
    let held = streamed(repeat_n(330.0, 30).chain((30..128).map(|i| 40.0 + 10.0 * f64::from(i))).collect());
    assert!(check_burst(&held).is_some(), "the first 30 held");

    // Paced: the first token alone.
    let paced = streamed((0..32).map(|i| 30.0 + 1.2 * f64::from(i)).collect());
    assert!(check_burst(&paced).is_none());
    // A few tokens with the first (a busy machine): 3 in its first arrival is no lump, though the
    // 2.4 ms they held is 30% of this 8 ms TTFT.
    let few = streamed(repeat_n(8.0, 3).chain((3..32).map(|i| 6.0 + 1.2 * f64::from(i))).collect());
    assert!(check_burst(&few).is_none(), "three together");
    // 4 with the first, but the 3.6 ms they held is under a fifth of a 23.1 ms TTFT (seen on a
    // real llama-server with two decode threads): within the TTFT's own noise.
    let small = streamed(repeat_n(23.1, 4).chain((4..32).map(|i| 19.5 + 1.2 * f64::from(i))).collect());
    assert!(check_burst(&small).is_none(), "3.6 ms of 23.1");
    // Multi-token deltas (speculative decoding, a server's stream interval): the first delta holds
    // 4 tokens, sent as one unit the moment it was made: one delta, no lump.
    let mut chunked = streamed((0..16).map(|i| 40.0 + 8.0 * f64::from(i)).collect());
    (chunked.output_tokens, chunked.max_tokens) = (Some(64), 64);
    assert!(check_burst(&chunked).is_none(), "4 tokens a delta");
}

#[test]
fn the_servers_session_state_must_show_the_claimed_tier() {
    use ttft_model::record::{SessionCache, SessionTier};
    let at = |tier, tokens, file_bytes| Some(Box::new(SessionCache { tier, tokens, file_bytes }));
    let ev = |cached, before, after| CacheEvidence {
        source: "session_state".into(),
        cached_tokens: cached,
        prompt_evaluated_tokens: None,
        session_before: before,
        session_after: after,
    };
    let absent = at(SessionTier::Absent, None, None);
    let on_disk = at(SessionTier::OnDisk, Some(0), Some(4096));
    let stale = at(SessionTier::OnDisk, Some(0), Some(0));
    let loaded = at(SessionTier::InMemory, Some(264), Some(4096));
    let held = at(SessionTier::InMemory, Some(290), Some(4096));
    let input = Some(256);
    // cold: nothing of the session cached before.
    assert_eq!(
        confirm_cache_state(CacheState::Cold, &ev(Some(0), absent.clone(), loaded.clone()), input),
        Some(true)
    );
    assert_eq!(
        confirm_cache_state(CacheState::Cold, &ev(None, held.clone(), held.clone()), input),
        Some(false)
    );
    // warm: on disk (a real file) and not in memory before, loaded after, holding the prompt.
    assert_eq!(
        confirm_cache_state(CacheState::Warm, &ev(None, on_disk.clone(), loaded.clone()), input),
        Some(true)
    );
    assert_eq!(
        confirm_cache_state(CacheState::Warm, &ev(None, held.clone(), held.clone()), input),
        Some(false)
    );
    assert_eq!(confirm_cache_state(CacheState::Warm, &ev(None, stale, loaded.clone()), input), Some(false));
    assert_eq!(confirm_cache_state(CacheState::Warm, &ev(None, on_disk.clone(), None), input), Some(false));
    assert_eq!(
        confirm_cache_state(CacheState::Warm, &ev(None, absent.clone(), loaded.clone()), input),
        Some(false)
    );
    let short = at(SessionTier::InMemory, Some(100), Some(4096));
    assert_eq!(confirm_cache_state(CacheState::Warm, &ev(None, on_disk.clone(), short), input), Some(false));
    // hot: in memory before with all but the new turn (at most max(64, 10%) tokens short).
    let turn_3 = Some(310);
    assert_eq!(
        confirm_cache_state(CacheState::Hot, &ev(None, held.clone(), held.clone()), turn_3),
        Some(true)
    );
    assert_eq!(
        confirm_cache_state(CacheState::Hot, &ev(None, on_disk.clone(), held.clone()), turn_3),
        Some(false)
    );
    let little = at(SessionTier::InMemory, Some(200), Some(4096));
    assert_eq!(confirm_cache_state(CacheState::Hot, &ev(None, little, held.clone()), turn_3), Some(false));
    // Counts that confirm cannot outvote tiers that contradict (a usage all-or-nothing cache read).
    assert_eq!(confirm_cache_state(CacheState::Warm, &ev(Some(256), held.clone(), held), input), Some(false));
    let reason = cache_verdict_reason(CacheState::Warm, Some(&ev(None, absent, loaded)), input);
    assert!(reason.contains("own state of the session") && reason.contains("before: absent"), "{reason}");
}

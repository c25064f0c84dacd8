//! Record rules: each looks at one record alone (one function per rule; the list is `table::RULES`).
//! Most need nothing but the record and run as it is read (their findings name no input yet: the
//! input is named where it is judged); the ceiling rules hold what the record left for them
//! (`judged::Measured`, made here by `measured`) against the input's hardware and model.
//!
//! The checks that quality already makes while measuring (usage, max_tokens, timing, input size)
//! come from `quality`, so a record judged at sweep time and one judged later by verify agree.

use super::finding::Finding;
use super::inputs::StoredCeilings;
use super::judged::{Judged, Kind, Made, Measured, Rare};
use super::rule::{RuleContext, RuleId};
use ttft_model::record::PolicyKind;
use ttft_model::record::{CacheState, Measurement, Mode, QualityCode, Record, Scenario, StaggeredRecord};
use ttft_results::physics::{self, Rates};
use ttft_results::quality::{self, PromptTokens};
use ttft_results::results::import::imported_reason;
use ttft_results::results::sources::Source;
use ttft_results::results::text::Text;

/// The measurement a rule may judge: no error (a failed request carries no numbers; merge re-runs
/// it) and not an imported origin batch stand-in (the origin kept only batch totals, which live in
/// the group record, so the stand-in has no per-request numbers to judge).
fn judged(rec: &Record) -> Option<&Measurement> {
    match rec {
        Record::Measurement(m) if m.error.is_none() && !is_stand_in(m) => Some(m),
        _ => None,
    }
}

fn is_stand_in(m: &Measurement) -> bool {
    m.quality_flags.iter().any(|f| f.flag == ttft_results::results::origin::BATCH_AGGREGATE_FLAG)
}

/// A finding of a record alone: its input is named where the input is judged.
fn finding(m: &Measurement, rule: RuleId, message: String) -> Finding {
    Finding::new(rule, "", message).at(&m.run_id, &m.cell)
}

fn rated_finding(ctx: &RuleContext, m: &Measured, rule: RuleId, message: String) -> Finding {
    Finding::new(rule, ctx.file, message).at(m.run_id(), &m.cell)
}

/// `record` as verify keeps it, with what the rules that read it alone found.
pub(crate) fn kept(record: Record, located: bool, found: Vec<Finding>) -> Judged {
    let (good, imported) = (record.is_good(), imported_reason(&record).map(Box::from));
    let kind = match record {
        Record::Measurement(m) => Kind::Measured(measured(*m, located, good, imported)),
        other => Kind::Other(other),
    };
    Judged { found: found.into_boxed_slice(), kind }
}

/// What the rules that are not the record rules' own read of a measurement, and what the ceiling
/// rules need of it, made as it is read. `located`: read lean, its text kept beside it (its
/// arrival times dropped: a hinted burst is read again whole, `burst_unflagged`); `good` and
/// `imported`: what its record says of it (`Record::is_good`, `import::imported_reason`).
fn measured(m: Measurement, located: bool, good: bool, imported: Option<Box<str>>) -> Measured {
    let warm_served =
        m.cache_evidence.as_ref().filter(|_| m.cell.cache_state == CacheState::Warm).and_then(|e| {
            let served = quality::confirm_cache_state(CacheState::Warm, e, m.input_tokens)?;
            Some((served, e.cached_tokens))
        });
    let stand_in = is_stand_in(&m);
    let judged = (m.error.is_none() && !stand_in).then_some(&m);
    let hinted = judged.filter(|m| burst_hinted(m));
    let burst_unflagged =
        hinted.filter(|_| !located).and_then(quality::check_burst).map(|flag| flag.reason.into_boxed_str());
    let made = Made {
        rates: Rates::of(&m),
        stored: m.physics.clone(),
        warm_served,
        failed: m.error.is_some(),
        good,
        stand_in,
        burst_suspect: hinted.is_some() && located,
        rare: Rare {
            imported,
            burst_unflagged,
            burst_note: super::explain::burst_note(&m).map(String::into_boxed_str),
            verdicts_differ: judged.map(verdicts_differ).unwrap_or_default(),
        },
    };
    Measured::new(m, made)
}

fn show(v: Option<u64>) -> String {
    v.map_or("null".into(), |n| n.to_string())
}

pub(crate) fn decode_above_ceiling(ctx: &RuleContext, m: &Measured, out: &mut Vec<Finding>) {
    // A burst's client-side rate is no decode at all: `stream_burst` explains it.
    if !m.judged() || m.rare().burst_note.is_some() {
        return;
    }
    let rates = m.rates();
    let Some(d) = rates.decode_tps else { return };
    let now = ctx.hardware.zip((ctx.model_for)(&m.cell.model));
    if let Some((hw, c)) =
        now.as_ref().and_then(|(hw, model)| Some((hw, rates.ceilings(hw, model).decode_ceiling_tps?)))
        && d > c
    {
        let message = format!(
            "decode {d:.1} tok/s > ceiling {c:.1} tok/s ({:.0}% of it): {:.2} GB read per token needs {:.0} GB/s, {} has {:.0} GB/s",
            100.0 * d / c,
            hw.bandwidth_gbps / c,
            d * hw.bandwidth_gbps / c,
            hw.name,
            hw.bandwidth_gbps
        );
        out.push(rated_finding(ctx, m, RuleId::DecodeAboveCeiling, message).numbers(d, c, "tok/s"));
        return;
    }
    let p = m.stored();
    let stored = p.decode_fraction.zip(p.decode_ceiling_tps);
    if let Some((fraction, c)) = stored_above(ctx, stored) {
        let message = format!(
            "decode {d:.1} tok/s > the ceiling of {c:.1} tok/s the record stored when it was measured \
             (decode_fraction {fraction:.2}){}",
            now_says(now.is_some())
        );
        out.push(rated_finding(ctx, m, RuleId::DecodeAboveCeiling, message).numbers(d, c, "tok/s"));
    }
}

/// A stored (fraction, ceiling) above 1 that verify judges: the run's own physics (no flag chose
/// other hardware or model). A record that beat the ceiling it was measured against stays above it
/// whatever run.json says now: editing run.json's bandwidth or TFLOPS (or removing its physics)
/// must not make it pass. Whether the stored ceiling is the one run.json gives is
/// `stored_verdict_disagrees`'s.
fn stored_above(ctx: &RuleContext, stored: Option<(f64, f64)>) -> Option<(f64, f64)> {
    stored.filter(|(fraction, _)| ctx.stored != StoredCeilings::Overridden && *fraction > 1.0)
}

fn now_says(known: bool) -> &'static str {
    if known {
        ": the run's physics as run.json now states them give a higher ceiling (run.json or the record edited)"
    } else {
        ": run.json now states no physics to judge it by"
    }
}

pub(crate) fn prefill_above_ceiling(ctx: &RuleContext, m: &Measured, out: &mut Vec<Finding>) {
    if !m.judged() {
        return;
    }
    let rates = m.rates();
    let Some(rate) = rates.computed_prefill_tps else { return };
    let why = if m.cell.cache_state == CacheState::Cold {
        "a 'cold' row was probably served from a cache"
    } else {
        "the server computed fewer tokens than its evidence says"
    };
    let now = ctx.hardware.zip((ctx.model_for)(&m.cell.model));
    if let Some((hw, c)) =
        now.as_ref().and_then(|(hw, model)| Some((hw, rates.ceilings(hw, model).prefill_ceiling_tps?)))
        && rate > c
    {
        let message = format!(
            "prefill {rate:.0} computed tok/s > compute ceiling {c:.0} tok/s ({} at {:.1} TFLOP/s): {why}",
            hw.name,
            hw.tflops.unwrap_or(0.0)
        );
        out.push(rated_finding(ctx, m, RuleId::PrefillAboveCeiling, message).numbers(rate, c, "tok/s"));
        return;
    }
    let p = m.stored();
    let stored = p.prefill_fraction.zip(p.prefill_ceiling_tps);
    if let Some((fraction, c)) = stored_above(ctx, stored) {
        let message = format!(
            "prefill {rate:.0} computed tok/s > the compute ceiling of {c:.0} tok/s the record stored when it \
             was measured (prefill_fraction {fraction:.2}): {why}{}",
            now_says(now.is_some())
        );
        out.push(rated_finding(ctx, m, RuleId::PrefillAboveCeiling, message).numbers(rate, c, "tok/s"));
    }
}

pub(crate) fn max_tokens_exceeded(rec: &Record, out: &mut Vec<Finding>) {
    let Some(m) = judged(rec) else { return };
    if let Some(flag) = quality::check_max_tokens(m.output_tokens, m.max_tokens) {
        let message = format!("{}: the server ignored the limit", flag.reason);
        let value = m.output_tokens.unwrap_or(0) as f64;
        out.push(finding(m, RuleId::MaxTokensExceeded, message).numbers(
            value,
            f64::from(m.max_tokens),
            "tokens",
        ));
    }
}

pub(crate) fn usage_missing(rec: &Record, out: &mut Vec<Finding>) {
    let Some(m) = judged(rec) else { return };
    if let Some(flag) = quality::check_usage(m.input_tokens, m.output_tokens) {
        let message = format!("{}: every rate of this row is a guess", flag.reason);
        out.push(finding(m, RuleId::UsageMissing, message));
    }
}

pub(crate) fn ttft_after_e2e(rec: &Record, out: &mut Vec<Finding>) {
    let Some(m) = judged(rec) else { return };
    if let Some(flag) = quality::check_timing(m.ttft_ms, m.e2e_ms) {
        let consequence = if flag.reason.starts_with("negative") {
            "clock misuse"
        } else {
            "the first token came after the last"
        };
        out.push(finding(m, RuleId::TtftAfterE2e, format!("{}: {consequence}", flag.reason)));
    }
}

/// The cache verdict the record's own evidence gives (`quality::cache_state_verdict`, the
/// sweep's own function). A record bench measured (it carries its prompt's nonce) is judged as the
/// sweep judged it: a warm or hot row without evidence is unconfirmed, so deleting its evidence
/// and its verdict together leaves it unconfirmed, not unjudged. An imported record without
/// evidence (another tool's, or the origin's) keeps only a stored `false`; with neither it has no
/// verdict to give. A soak repeats its prompts on purpose: its cache is not judged.
fn derived_cache_verdict(m: &Measurement) -> Option<bool> {
    if m.cell.scenario == Scenario::Soak {
        return None;
    }
    match &m.cache_evidence {
        Some(e) => quality::cache_state_verdict(m.cell.cache_state, Some(e), PromptTokens::of(m)),
        None if bench_verdicts(m) => {
            quality::cache_state_verdict(m.cell.cache_state, None, PromptTokens::of(m))
        }
        None => m.cache_state_confirmed.filter(|c| !c),
    }
}

/// A staggered pair's users that measured something, with their cache evidence: (name, evidence).
fn staggered_users(rec: &Record) -> Vec<(&'static str, &StaggeredRecord, &ttft_model::record::UserCache)> {
    let Record::Staggered(s) = rec else { return Vec::new() };
    if s.error.is_some() || s.cell.scenario == Scenario::Soak {
        return Vec::new();
    }
    [("user_a", &s.user_a_cache), ("user_b", &s.user_b_cache)]
        .into_iter()
        .filter_map(|(name, c)| c.as_ref().map(|c| (name, &**s, c)))
        .collect()
}

/// A staggered user's cache verdict from its own evidence, as `derived_cache_verdict` gives a
/// measurement's.
fn derived_user_verdict(s: &StaggeredRecord, c: &ttft_model::record::UserCache) -> Option<bool> {
    match &c.cache_evidence {
        Some(e) => quality::cache_state_verdict(s.cell.cache_state, Some(e), c.input_tokens),
        None => c.cache_state_confirmed.filter(|c| !c),
    }
}

/// Staggered pairs: each user's stored cache verdict against the one its evidence gives, and an
/// unconfirmed state, as for a measurement.
fn staggered_cache(rec: &Record, out: &mut Vec<Finding>, rule: RuleId) {
    for (user, s, c) in staggered_users(rec) {
        let derived = derived_user_verdict(s, c);
        let message = match rule {
            RuleId::CacheStateUnconfirmed if derived == Some(false) => format!(
                "{user}: {}",
                quality::cache_verdict_reason(s.cell.cache_state, c.cache_evidence.as_ref(), c.input_tokens)
            ),
            RuleId::StoredVerdictDisagrees
                if (c.cache_evidence.is_some() || c.cache_state_confirmed == Some(true))
                    && c.cache_state_confirmed != derived =>
            {
                format!(
                    "{user}: cache_state_confirmed {} but its evidence gives {}; an edited file or a bug",
                    show_bool(c.cache_state_confirmed),
                    show_bool(derived)
                )
            }
            _ => continue,
        };
        out.push(Finding::new(rule, "", message).at(&s.run_id, &s.cell));
    }
}

pub(crate) fn cache_state_unconfirmed(rec: &Record, out: &mut Vec<Finding>) {
    staggered_cache(rec, out, RuleId::CacheStateUnconfirmed);
    let Some(m) = judged(rec) else { return };
    if derived_cache_verdict(m) == Some(false) {
        let message =
            quality::cache_verdict_reason(m.cell.cache_state, m.cache_evidence.as_ref(), PromptTokens::of(m));
        out.push(finding(m, RuleId::CacheStateUnconfirmed, message));
    }
}

/// Whether bench itself wrote this record's verdicts: its requests carry the prompt's nonce;
/// records imported from the origin or another tool carry none, and their `quality_ok` is their
/// tool's word, not a verdict bench derived.
fn bench_verdicts(m: &Measurement) -> bool {
    !m.nonce.is_empty()
}

/// Whether a stored fraction agrees with the one the record's own numbers give (to rounding
/// noise: both are the same division of the same stored numbers).
fn same_fraction(stored: Option<f64>, derived: Option<f64>) -> bool {
    match (stored, derived) {
        (None, None) => true,
        (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-12),
        _ => false,
    }
}

fn show_bool(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "true",
        Some(false) => "false",
        None => "null",
    }
}

/// `stored_verdict_disagrees` of a staggered pair's users (a measurement's is `stored_verdicts`).
pub(crate) fn staggered_verdicts(rec: &Record, out: &mut Vec<Finding>) {
    staggered_cache(rec, out, RuleId::StoredVerdictDisagrees);
}

/// Every verdict a record stores that its own numbers can give again: the cache confirmation
/// (from the evidence), `quality_ok` (against the gate-failing checks that need no output text:
/// usage, max_tokens, timing, the cache state, and the stored flags themselves) and the physics
/// fractions (measured rate over the stored ceiling), and the stored ceilings against the ones the
/// input's physics give (`stored_ceilings_differ`). A stored verdict that disagrees is an edited
/// file or a bug: verify stands by what the evidence says, not by what the record says of itself.
pub(crate) fn stored_verdicts(ctx: &RuleContext, m: &Measured, out: &mut Vec<Finding>) {
    if !m.judged() {
        return;
    }
    let mut differ = m.rare().verdicts_differ.clone();
    differ.extend(stored_ceilings_differ(ctx, m));
    if !differ.is_empty() {
        let message = format!(
            "the record's stored verdicts disagree with its own numbers (request {}, started {}): {}; an edited file or a bug",
            m.request_index,
            m.started_at(),
            differ.join("; ")
        );
        out.push(rated_finding(ctx, m, RuleId::StoredVerdictDisagrees, message));
    }
}

/// The stored verdicts a judged measurement's own numbers contradict, each said (what
/// `stored_verdicts` finds without the input's physics).
fn verdicts_differ(m: &Measurement) -> Vec<String> {
    let mut differ = Vec::new();
    let derived = derived_cache_verdict(m);
    let stored = m.cache_state_confirmed;
    let cache_judged = m.cell.scenario != Scenario::Soak
        && (m.cache_evidence.is_some() || stored == Some(true) || (bench_verdicts(m) && derived.is_some()));
    if cache_judged && stored != derived {
        let ev = m.cache_evidence.as_ref();
        differ.push(format!(
            "cache_state_confirmed {} but its evidence gives {} ({})",
            show_bool(stored),
            show_bool(derived),
            ev.map_or("no evidence".into(), |e| format!(
                "{}: cached {}, evaluated {} of {} prompt tokens",
                e.source,
                show(e.cached_tokens),
                show(e.prompt_evaluated_tokens),
                show(m.input_tokens)
            ))
        ));
    }
    if bench_verdicts(m) && m.quality_ok {
        let mut failing: Vec<String> = [
            quality::check_usage(m.input_tokens, m.output_tokens),
            quality::check_max_tokens(m.output_tokens, m.max_tokens),
            quality::check_timing(m.ttft_ms, m.e2e_ms),
        ]
        .into_iter()
        .flatten()
        .chain(m.quality_flags.iter().filter(|f| f.fails_gate).cloned())
        .map(|f| f.flag.as_str().to_string())
        .collect();
        if derived == Some(false) {
            failing.push("cache_state_unconfirmed".into());
        }
        failing.sort();
        failing.dedup();
        if !failing.is_empty() {
            differ.push(format!("quality_ok true but the gate fails on {}", failing.join(", ")));
        }
    }
    if let Some(p) = &m.physics {
        let decode = m.decode_tps.zip(p.decode_ceiling_tps).map(|(d, c)| d / c);
        if !same_fraction(p.decode_fraction, decode) {
            differ.push(format!(
                "physics.decode_fraction {} but decode {} / ceiling {} gives {}",
                show_f(p.decode_fraction),
                show_f(m.decode_tps),
                show_f(p.decode_ceiling_tps),
                show_f(decode)
            ));
        }
        let prefill = physics::computed_prefill_tps(m).zip(p.prefill_ceiling_tps).map(|(r, c)| r / c);
        if !same_fraction(p.prefill_fraction, prefill) {
            differ.push(format!(
                "physics.prefill_fraction {} but the computed prefill rate over ceiling {} gives {}",
                show_f(p.prefill_fraction),
                show_f(p.prefill_ceiling_tps),
                show_f(prefill)
            ));
        }
    }
    differ
}

/// The ceilings a record stored against the ones the input's physics give now, where both are the
/// run's own (`StoredCeilings::Same`): the same formula over the same numbers, so anything beyond
/// rounding is run.json's physics or the record edited (the bandwidth and TFLOPS multiplied, a
/// stored ceiling raised to pull a fraction under 1).
fn stored_ceilings_differ(ctx: &RuleContext, m: &Measured) -> Vec<String> {
    let (stored, StoredCeilings::Same) = (m.stored(), ctx.stored) else { return Vec::new() };
    let Some(now) =
        ctx.hardware.zip((ctx.model_for)(&m.cell.model)).map(|(hw, model)| m.rates().ceilings(hw, model))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, was, is) in [
        ("decode_ceiling_tps", stored.decode_ceiling_tps, now.decode_ceiling_tps),
        ("prefill_ceiling_tps", stored.prefill_ceiling_tps, now.prefill_ceiling_tps),
    ] {
        if let (Some(was), Some(is)) = (was, is)
            && (was - is).abs() > CEILING_ROUNDING * was.abs().max(is.abs())
        {
            out.push(format!(
                "physics.{name} {was:.1} but the run's hardware and model (run.json) give {is:.1}: run.json's physics or the record edited"
            ));
        }
    }
    out
}

/// How far (relative) a stored ceiling may sit from the one recomputed from run.json: the same
/// computation over numbers read back from JSON; a physics table or profile that changed between
/// versions moves a ceiling by far more.
const CEILING_ROUNDING: f64 = 1e-6;

fn show_f(v: Option<f64>) -> String {
    v.map_or("null".into(), |x| format!("{x:.4}"))
}

pub(crate) fn input_tokens_off_nominal(rec: &Record, out: &mut Vec<Finding>) {
    let Some(m) = judged(rec) else { return };
    // Hot prompts carry the conversation on top of the nominal context, and staggered prompts
    // are sized for their own context, so only an explicit expectation is checked for them.
    let expected = m.expected_input_tokens.or(match (m.cell.cache_state, m.cell.scenario) {
        (CacheState::Hot, _) | (_, Scenario::StaggeredBatched | Scenario::StaggeredSequential) => None,
        _ => Some(u64::from(m.cell.context_tokens)),
    });
    if let Some(flag) = quality::check_input_tokens(m.input_tokens, expected) {
        let message = format!("{}: the prompt was not sized to its context", flag.reason);
        let (input, nominal) = (m.input_tokens.unwrap_or(0) as f64, expected.unwrap_or(0) as f64);
        out.push(finding(m, RuleId::InputTokensOffNominal, message).numbers(input, nominal, "tokens"));
    }
}

pub(crate) fn thermal_not_recovered(rec: &Record, out: &mut Vec<Finding>) {
    let Some(m) = judged(rec) else { return };
    // Only a probe judges recovery; fixed and off have nothing to say.
    let Some(t) = m.thermal.as_ref().filter(|t| t.policy == PolicyKind::Probe && !t.recovered) else {
        return;
    };
    let last = t.probe_tps.last().map_or("none".into(), |p| format!("{p:.1} tok/s"));
    let message = format!(
        "measured before thermal recovery: last probe {last} vs baseline {} after {:.0} s",
        t.baseline_tps.map_or("unknown".into(), |b| format!("{b:.1} tok/s")),
        t.cooldown_s
    );
    out.push(finding(m, RuleId::ThermalNotRecovered, message));
}

pub(crate) fn measurement_failed(rec: &Record, out: &mut Vec<Finding>) {
    let (what, e) = match rec {
        Record::Measurement(m) if !is_stand_in(m) => ("", m.error.as_ref()),
        Record::Group(g) => ("group: ", g.error.as_ref()),
        Record::Staggered(s) => ("staggered: ", s.error.as_ref()),
        Record::Measurement(_) => return,
    };
    if let Some(e) = e {
        let message = format!("failed measurement ({what}{}: {})", e.kind.as_str(), e.message);
        out.push(Finding::new(RuleId::MeasurementFailed, "", message).at(rec.run_id(), rec.cell()));
    }
}

pub(crate) fn quality_gate_failed(rec: &Record, out: &mut Vec<Finding>) {
    let Some(m) = judged(rec).filter(|m| !m.quality_ok) else { return };
    let failing: Vec<&str> =
        m.quality_flags.iter().filter(|f| f.fails_gate).map(|f| f.flag.as_str()).collect();
    let why = if failing.is_empty() { "no flag says why".into() } else { failing.join(", ") };
    out.push(finding(m, RuleId::QualityGateFailed, format!("quality_ok is false ({why})")));
}

/// (overlapped, overlap ms) of a staggered pair: as recorded, or for files written before it was
/// (and origin imports) from when B was sent and when A finished.
pub(crate) fn overlap(s: &StaggeredRecord) -> Option<(bool, f64)> {
    if let Some(o) = s.overlapped {
        return Some((o, s.overlap_ms.unwrap_or(0.0)));
    }
    quality::staggered_overlap(s.user_b_arrival_ms, s.user_a_e2e_ms, s.user_b_e2e_ms)
}

pub(crate) fn staggered_not_overlapped(rec: &Record, out: &mut Vec<Finding>) {
    let Record::Staggered(s) = rec else { return };
    // A sequential twin is meant not to overlap; a failed pair is measurement_failed's.
    if s.cell.scenario != Scenario::StaggeredBatched || s.error.is_some() {
        return;
    }
    let Some((false, _)) = overlap(s) else { return };
    let show_ms = |v: Option<f64>| v.map_or("?".into(), |v| format!("{v:.0} ms"));
    let message = format!(
        "user B was sent {} after user A, but A had finished at {}: the 'batched' pair never overlapped, so it \
         measured two sequential requests (give a --stagger-delay shorter than A's E2E)",
        show_ms(s.user_b_arrival_ms),
        show_ms(s.user_a_e2e_ms)
    );
    let mut f = Finding::new(RuleId::StaggeredNotOverlapped, "", message).at(&s.run_id, &s.cell);
    if let (Some(b), Some(a)) = (s.user_b_arrival_ms, s.user_a_e2e_ms) {
        f = f.numbers(b, a, "ms");
    }
    out.push(f);
}

/// Whether a judged measurement's counts hint at a burst its flags do not name: streaming, with
/// fewer distinct arrivals than deltas (every burst check needs deltas that arrived together),
/// and no `stream_burst` flag.
fn burst_hinted(m: &Measurement) -> bool {
    let grouped = m.distinct_arrivals.is_some_and(|d| d < m.delta_count);
    m.cell.mode == Mode::Streaming
        && grouped
        && !m.quality_flags.iter().any(|f| f.flag == QualityCode::StreamBurst)
}

/// `burst_unflagged`: a streaming record that carries no `stream_burst` flag, yet whose own
/// arrival times show one (`quality::check_burst`, the sweep's own function): the flag was removed
/// (an edited file) or never set (a bug), and its TTFT and decode would count as good. A lean
/// record keeps no arrival times, so the records whose counts hint at grouping (`burst_hinted`)
/// are read again whole from their file; a record read whole was checked as it was read
/// (`measured`); a stream whose every delta came alone is no burst of the kinds the sweep flags
/// by arrivals.
pub(crate) fn burst_unflagged(ctx: &RuleContext, src: &Source<Judged>, out: &mut Vec<Finding>) {
    let texts: Vec<Option<Text>> = match &src.texts {
        Some(t) => t.each().map(Some).collect(),
        None => vec![None; src.records.len()],
    };
    let mut buf = Vec::new();
    for (rec, text) in src.records.iter().zip(texts) {
        let Some(m) = rec.measured() else { continue };
        let reason = match (&m.rare().burst_unflagged, m.burst_suspect, text) {
            (Some(reason), _, _) => reason.to_string(),
            (None, true, Some(text)) => {
                buf.clear();
                let whole =
                    text.append_to(&mut buf).ok().and_then(|_| ttft_results::store::parse_record(&buf).ok());
                let Some(Record::Measurement(whole)) = whole else { continue };
                let Some(flag) = quality::check_burst(&whole) else { continue };
                flag.reason
            }
            (None, _, _) => continue,
        };
        let message = format!(
            "no stream_burst flag, but its own arrival times show one ({reason}); an edited file or a bug: \
             its TTFT and decode are not the server's"
        );
        out.push(rated_finding(ctx, m, RuleId::BurstUnflagged, message));
    }
}

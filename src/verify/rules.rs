//! Rules over single records and over the cache states of one cell.

use std::collections::BTreeMap;

use super::finding::{Finding, Severity, rule};
use crate::physics::{self, Hardware, ModelProfile};
use crate::quality;
use crate::record::{CacheState, Measurement, Mode, Record, Scenario};

/// What the rules of one input know besides the records.
pub struct Ctx<'a> {
    pub file: &'a str,
    pub hardware: Option<&'a Hardware>,
    /// The model profile of a record's `model` (flags, run metadata or the built-in table).
    pub model_for: &'a dyn Fn(&str) -> Option<ModelProfile>,
    pub min_warm_speedup: f64,
    pub storage_gbps: f64,
}

pub fn record_rules(ctx: &Ctx, rec: &Record, out: &mut Vec<Finding>) {
    let m = match rec {
        Record::Measurement(m) => m,
        Record::Group(g) => {
            if let Some(e) = &g.error {
                out.push(failed(ctx, &format!("group: {:?}: {}", e.kind, e.message)).at(&g.run_id, &g.cell));
            }
            return;
        }
        Record::Staggered(s) => {
            if let Some(e) = &s.error {
                out.push(
                    failed(ctx, &format!("staggered: {:?}: {}", e.kind, e.message)).at(&s.run_id, &s.cell),
                );
            }
            return;
        }
    };
    let at = |f: Finding| f.at(&m.run_id, &m.cell);
    // An imported origin batch row: the origin kept only batch totals (they live in the group
    // record), so this stand-in has no per-request numbers to judge.
    if m.quality_flags.iter().any(|f| f.flag == crate::results::origin::BATCH_AGGREGATE_FLAG) {
        return;
    }
    if let Some(e) = &m.error {
        // A failed request carries no numbers to judge; merge re-runs it.
        out.push(at(failed(ctx, &format!("{:?}: {}", e.kind, e.message))));
        return;
    }
    let new = |sev, id, msg: String| at(Finding::new(sev, id, ctx.file, msg));
    match (m.input_tokens, m.output_tokens) {
        (None, _) | (_, None) | (Some(0), _) => out.push(new(
            Severity::Error,
            rule::USAGE_MISSING,
            format!(
                "input_tokens {}, output_tokens {}: the server gave no usage, so every rate of this row is a guess",
                show(m.input_tokens),
                show(m.output_tokens)
            ),
        )),
        _ => {}
    }
    if let Some(out_tokens) = m.output_tokens
        && m.max_tokens > 0
        && out_tokens > u64::from(m.max_tokens)
    {
        out.push(
            new(
                Severity::Error,
                rule::MAX_TOKENS_EXCEEDED,
                format!(
                    "{out_tokens} output tokens > max_tokens {}: the server ignored the limit",
                    m.max_tokens
                ),
            )
            .numbers(out_tokens as f64, f64::from(m.max_tokens), "tokens"),
        );
    }
    input_nominal(m, out, &new);
    timing(m, out, &new);
    let confirmed = m.cache_state_confirmed.or_else(|| {
        m.cache_evidence
            .as_ref()
            .and_then(|e| quality::confirm_cache_state(m.cell.cache_state, e, m.input_tokens))
    });
    if confirmed == Some(false) {
        let ev = m.cache_evidence.as_ref();
        out.push(new(
            Severity::Error,
            rule::CACHE_STATE_UNCONFIRMED,
            format!(
                "the server's cache evidence contradicts '{}' (cached {}, evaluated {} of {} prompt tokens)",
                m.cell.cache_state.as_str(),
                show(ev.and_then(|e| e.cached_tokens).or(m.cached_tokens)),
                show(ev.and_then(|e| e.prompt_evaluated_tokens)),
                show(m.input_tokens)
            ),
        ));
    }
    if let Some(t) = &m.thermal
        && t.policy == "probe"
        && !t.recovered
    {
        let last = t.probe_tps.last().map_or("none".into(), |p| format!("{p:.1} tok/s"));
        out.push(new(
            Severity::Warning,
            rule::THERMAL_NOT_RECOVERED,
            format!(
                "measured before thermal recovery: last probe {last} vs baseline {} after {:.0} s",
                t.baseline_tps.map_or("unknown".into(), |b| format!("{b:.1} tok/s")),
                t.cooldown_s
            ),
        ));
    }
    if !m.quality_ok {
        let failing: Vec<&str> =
            m.quality_flags.iter().filter(|f| f.fails_gate).map(|f| f.flag.as_str()).collect();
        out.push(new(
            Severity::Warning,
            rule::QUALITY_GATE_FAILED,
            format!(
                "quality_ok is false ({})",
                if failing.is_empty() { "no flag says why".into() } else { failing.join(", ") }
            ),
        ));
    }
    if let (Some(hw), Some(model)) = (ctx.hardware, (ctx.model_for)(&m.cell.model)) {
        ceiling_rules(hw, &model, m, out, &new);
    }
}

fn failed(ctx: &Ctx, why: &str) -> Finding {
    Finding::new(Severity::Warning, rule::MEASUREMENT_FAILED, ctx.file, format!("failed measurement ({why})"))
}

fn show(v: Option<u64>) -> String {
    v.map_or("null".into(), |n| n.to_string())
}

fn input_nominal(
    m: &Measurement,
    out: &mut Vec<Finding>,
    new: &dyn Fn(Severity, &'static str, String) -> Finding,
) {
    // Hot prompts carry the conversation on top of the nominal context, so only an explicit
    // expectation is checked for them.
    let expected = m.expected_input_tokens.or(match (m.cell.cache_state, m.cell.scenario) {
        (CacheState::Hot, _) | (_, Scenario::StaggeredBatched | Scenario::StaggeredSequential) => None,
        _ => Some(u64::from(m.cell.context_tokens)),
    });
    let (Some(input), Some(expected)) = (m.input_tokens.filter(|&n| n > 0), expected.filter(|&n| n > 0))
    else {
        return;
    };
    let off = input as f64 - expected as f64;
    if off.abs() > (expected as f64 * 0.01).max(2.0) {
        out.push(
            new(
                Severity::Warning,
                rule::INPUT_TOKENS_OFF_NOMINAL,
                format!(
                    "{input} input tokens for a nominal {expected} ({:+.1}%): the prompt was not sized to its context",
                    100.0 * off / expected as f64
                ),
            )
            .numbers(input as f64, expected as f64, "tokens"),
        );
    }
}

fn timing(m: &Measurement, out: &mut Vec<Finding>, new: &dyn Fn(Severity, &'static str, String) -> Finding) {
    let msg = match (m.ttft_ms, m.e2e_ms) {
        (Some(t), _) if t < 0.0 => Some(format!("negative ttft_ms {t:.1}")),
        (_, Some(e)) if e < 0.0 => Some(format!("negative e2e_ms {e:.1}")),
        (Some(t), Some(e)) if t > e => {
            Some(format!("ttft_ms {t:.1} > e2e_ms {e:.1}: the first token came after the last"))
        }
        _ => None,
    };
    if let Some(msg) = msg {
        out.push(new(Severity::Error, rule::TTFT_AFTER_E2E, msg));
    }
}

fn ceiling_rules(
    hw: &Hardware,
    model: &ModelProfile,
    m: &Measurement,
    out: &mut Vec<Finding>,
    new: &dyn Fn(Severity, &'static str, String) -> Finding,
) {
    let p = physics::ceilings(hw, model, m);
    if let (Some(d), Some(c)) = (m.decode_tps, p.decode_ceiling_tps)
        && d > c
    {
        out.push(
            new(
                Severity::Error,
                rule::DECODE_ABOVE_CEILING,
                format!(
                    "decode {d:.1} tok/s > ceiling {c:.1} tok/s ({:.0}% of it): {:.2} GB read per token needs {:.0} GB/s, {} has {:.0} GB/s",
                    100.0 * d / c,
                    hw.bandwidth_gbps / c,
                    d * hw.bandwidth_gbps / c,
                    hw.name,
                    hw.bandwidth_gbps
                ),
            )
            .numbers(d, c, "tok/s"),
        );
    }
    if let (Some(rate), Some(c)) = (physics::computed_prefill_tps(m), p.prefill_ceiling_tps)
        && rate > c
    {
        let why = if m.cell.cache_state == CacheState::Cold {
            "a 'cold' row was probably served from a cache"
        } else {
            "the server computed fewer tokens than its evidence says"
        };
        out.push(
            new(
                Severity::Error,
                rule::PREFILL_ABOVE_CEILING,
                format!(
                    "prefill {rate:.0} computed tok/s > compute ceiling {c:.0} tok/s ({} at {:.1} TFLOP/s): {why}",
                    hw.name,
                    hw.tflops.unwrap_or(0.0)
                ),
            )
            .numbers(rate, c, "tok/s"),
        );
    }
}

/// Median TTFT per cache state for one cell (same input, model, mode, context, batch).
#[derive(Default)]
struct StateTimes {
    ttft: BTreeMap<CacheState, Vec<f64>>,
    /// Prompt tokens the server had to compute (cache evidence), per state.
    computed: BTreeMap<CacheState, Vec<f64>>,
    input: Vec<f64>,
    /// The cell (run 0 = all runs) the findings name.
    sample: Option<crate::record::CellKey>,
}

pub fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 })
}

/// Warm must beat cold, and hot must not be slower than warm, per cell of one input.
///
/// Warm is judged against physics where it can be: a warm request reloads the KV cache from
/// storage, which costs KV bytes / storage bandwidth. On a fast GPU with ordinary storage that can
/// exceed a cold prefill (measured.md: H200, 32K: warm 3.04 s vs cold 2.32 s, honestly). So when
/// hardware, the model's KV bytes and --storage-gbps are known, "cache broken" is an error only where
/// the reload should have been at least 2 x --min-warm-speedup cheaper than the measured cold TTFT;
/// otherwise the slow warm is reported as info with the physics. Without KV bytes the plain rule
/// holds: warm must be --min-warm-speedup x faster than cold.
pub fn cache_state_rules(ctx: &Ctx, records: &[Record], out: &mut Vec<Finding>) {
    let mut cells: BTreeMap<(String, Mode, u32, u32, bool), StateTimes> = BTreeMap::new();
    for rec in records {
        let Record::Measurement(m) = rec else { continue };
        let Some(ttft) = m.ttft_ms.filter(|_| m.error.is_none()) else { continue };
        let c = &m.cell;
        let key =
            (c.model.clone(), c.mode, c.context_tokens, c.batch_size, c.scenario == Scenario::Concurrent);
        let cell = cells.entry(key).or_default();
        cell.ttft.entry(c.cache_state).or_default().push(ttft);
        if let Some(n) = m.cache_evidence.as_ref().and_then(|e| e.prompt_evaluated_tokens) {
            cell.computed.entry(c.cache_state).or_default().push(n as f64);
        }
        if c.cache_state == CacheState::Warm {
            cell.input.extend(m.input_tokens.map(|n| n as f64));
        }
        if cell.sample.is_none() {
            cell.sample = Some(crate::record::CellKey { run: 0, ..c.clone() });
        }
    }
    for ((model, ..), cell) in cells {
        let med = |s: CacheState| cell.ttft.get(&s).and_then(|v| median(v));
        let Some(key) = cell.sample.clone() else { continue };
        // The finding names the cell of the slower state; run 0 stands for "all runs".
        let at = |state: CacheState, f: Finding| {
            let scenario = match (key.scenario, state) {
                (Scenario::Concurrent, _) => Scenario::Concurrent,
                (_, CacheState::Cold) => Scenario::Cold,
                (_, CacheState::Warm) => Scenario::Warm,
                (_, CacheState::Hot) => Scenario::Hot,
            };
            // A cell-level finding spans every run of the input: no single run id.
            let mut f = f.at("", &crate::record::CellKey { cache_state: state, scenario, ..key.clone() });
            f.run_id = None;
            f
        };
        if let (Some(cold), Some(warm)) = (med(CacheState::Cold), med(CacheState::Warm)) {
            let speedup = cold / warm;
            if speedup < ctx.min_warm_speedup {
                let context = median(&cell.input).unwrap_or(f64::from(key.context_tokens));
                let reload = ctx.hardware.and((ctx.model_for)(&model)).and_then(|m| {
                    physics::expected_reload_ms(&m, context as u64, ctx.storage_gbps)
                        .map(|ms| (ms, m.kv_bytes_per_token.unwrap_or(0.0) * context))
                });
                let base = format!("warm median TTFT {warm:.0} ms vs cold {cold:.0} ms ({speedup:.2}x)");
                let finding = match reload {
                    Some((reload_ms, _)) if cold / reload_ms < 2.0 * ctx.min_warm_speedup => Finding::new(
                        Severity::Info,
                        rule::WARM_SLOWER_EXPLAINED,
                        ctx.file,
                        format!(
                            "{base}; reloading the KV cache at {} GB/s storage takes ~{reload_ms:.0} ms, about what recomputing costs: not a cache fault",
                            ctx.storage_gbps
                        ),
                    ),
                    Some((reload_ms, bytes)) => Finding::new(
                        Severity::Error,
                        rule::WARM_NOT_FASTER,
                        ctx.file,
                        format!(
                            "{base}; reloading {:.2} GB of KV at {} GB/s should take ~{reload_ms:.0} ms: the cache did nothing",
                            bytes / 1e9,
                            ctx.storage_gbps
                        ),
                    ),
                    None => Finding::new(
                        Severity::Error,
                        rule::WARM_NOT_FASTER,
                        ctx.file,
                        format!(
                            "{base}, below the {:.1}x expected of a working cache: the cache did nothing",
                            ctx.min_warm_speedup
                        ),
                    ),
                };
                out.push(at(CacheState::Warm, finding.numbers(speedup, ctx.min_warm_speedup, "x")));
            }
        }
        if let (Some(warm), Some(hot)) = (med(CacheState::Warm), med(CacheState::Hot))
            && hot > warm * 1.10
        {
            // Hot's measured turn brings new tokens ("Understood." + the follow-up) that must be
            // prefilled, while warm re-sends an identical prompt. Where the evidence shows hot
            // computed clearly more, a fast reload (small KV, page cache) honestly beats it.
            let computed = |s: CacheState| cell.computed.get(&s).and_then(|v| median(v));
            let finding = match (computed(CacheState::Hot), computed(CacheState::Warm)) {
                (Some(h), Some(w)) if h > w + 8.0 => Finding::new(
                    Severity::Info,
                    rule::HOT_SLOWER_EXPLAINED,
                    ctx.file,
                    format!(
                        "hot median TTFT {hot:.0} ms > warm {warm:.0} ms, but hot computed {h:.0} new prompt tokens \
                         vs warm's {w:.0}: the new turn costs more than this reload; not a cache fault"
                    ),
                ),
                _ => Finding::new(
                    Severity::Warning,
                    rule::HOT_SLOWER_THAN_WARM,
                    ctx.file,
                    format!(
                        "hot median TTFT {hot:.0} ms > warm {warm:.0} ms: an in-memory cache should not lose to a reload"
                    ),
                ),
            };
            out.push(at(CacheState::Hot, finding.numbers(hot, warm, "ms")));
        }
    }
}

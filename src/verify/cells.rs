//! Cell rules: each looks at several records of one input together (one function per rule; the
//! list is `RULES`).

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};

use super::finding::Finding;
use super::judged::{Judged, Measured};
use super::rule::{RuleContext, RuleId};
use ttft_model::record::{CacheState, CellKey, Mode, Scenario};
use ttft_model::stats;
use ttft_results::physics;
use ttft_results::results::batch::{self, Shape};
use ttft_results::results::slotted::Slotted;

/// TTFTs per cache state of one cell (same model, mode, context, batch size; all runs).
#[derive(Default)]
struct StateTimes {
    ttft: BTreeMap<CacheState, Vec<f64>>,
    /// Prompt tokens the server had to compute (cache evidence), per state.
    computed: BTreeMap<CacheState, Vec<f64>>,
    /// Warm input tokens (the context a reload moves).
    warm_input: Vec<f64>,
    /// Per warm record with cache evidence: whether it shows the cache served the prompt, and
    /// the prompt tokens it says were served.
    warm_served: Vec<(bool, Option<u64>)>,
    /// The cell the findings name (run 0 = all runs).
    key: CellKey,
}

impl StateTimes {
    fn median_ttft(&self, state: CacheState) -> Option<f64> {
        self.ttft.get(&state).and_then(|v| stats::median(v))
    }

    /// Where every warm record with evidence shows the cache served its prompt (the slot was
    /// restored): the median prompt tokens served, and the records that show it. None where any
    /// warm record's evidence says otherwise, or none has evidence.
    fn warm_served_by_evidence(&self) -> Option<(Option<f64>, usize)> {
        if self.warm_served.is_empty() || self.warm_served.iter().any(|(served, _)| !served) {
            return None;
        }
        let cached: Vec<f64> = self.warm_served.iter().filter_map(|(_, c)| c.map(|c| c as f64)).collect();
        Some((stats::median(&cached), self.warm_served.len()))
    }

    fn median_computed(&self, state: CacheState) -> Option<f64> {
        self.computed.get(&state).and_then(|v| stats::median(v))
    }

    /// The cell of `state` that a finding names: a cell-level finding spans every run.
    fn cell_of(&self, state: CacheState) -> CellKey {
        let scenario = match self.key.scenario {
            Scenario::Concurrent => Scenario::Concurrent,
            _ => Scenario::of(state, 1),
        };
        CellKey { cache_state: state, scenario, ..self.key.clone() }
    }
}

/// Every cell of one input with its TTFTs per cache state (failed and negative times left out).
fn state_times(records: &[Judged]) -> Vec<StateTimes> {
    let mut cells: BTreeMap<(&str, Mode, u32, u32, bool), StateTimes> = BTreeMap::new();
    for m in records.iter().filter_map(Judged::measured) {
        let Some(ttft) = m.ttft_ms().filter(|t| !m.failed && *t >= 0.0) else { continue };
        let c = &m.cell;
        let key =
            (c.model.as_str(), c.mode, c.context_tokens, c.batch_size, c.scenario == Scenario::Concurrent);
        let cell = cells
            .entry(key)
            .or_insert_with(|| StateTimes { key: CellKey { run: 0, ..c.clone() }, ..Default::default() });
        cell.ttft.entry(c.cache_state).or_default().push(ttft);
        if let Some(n) = m.prompt_evaluated_tokens() {
            cell.computed.entry(c.cache_state).or_default().push(n as f64);
        }
        if c.cache_state == CacheState::Warm {
            cell.warm_input.extend(m.input_tokens().map(|n| n as f64));
            cell.warm_served.extend(m.warm_served());
        }
    }
    cells.into_values().collect()
}

/// Warm must beat cold, judged against physics and the server's evidence where they can be.
///
/// A warm request reloads the KV cache from storage, which costs KV bytes / storage bandwidth. On
/// a fast GPU with ordinary storage that can exceed a cold prefill (an H200 at 32K: warm 3.04 s vs
/// cold 2.32 s, honestly, restoring 4.31 GB at 1.44 GB/s). So when hardware, the model's KV bytes
/// and --storage-gbps are known, "cache broken" is an error only where the reload should have been
/// at least 2 x --min-warm-speedup cheaper than the measured cold TTFT; otherwise the slow warm is
/// `warm_slower_explained` (info) with the physics. Without KV bytes the plain rule holds: warm
/// must be --min-warm-speedup x faster than cold.
///
/// Whatever the physics, a slow warm whose every record's evidence shows the cache served the
/// prompt (the server restored the slot and computed only the last tokens) is not a cache that did
/// nothing: the reload itself is what costs, and that is `warm_slower_explained` too. "The cache
/// did nothing" is said only where no evidence shows otherwise (the origin's 0.98x had none).
pub(crate) fn warm_not_faster(ctx: &RuleContext, records: &[Judged], out: &mut Vec<Finding>) {
    for cell in state_times(records) {
        let (Some(cold), Some(warm)) =
            (cell.median_ttft(CacheState::Cold), cell.median_ttft(CacheState::Warm))
        else {
            continue;
        };
        let speedup = cold / warm;
        let slow = speedup < ctx.min_warm_speedup;
        if !slow {
            continue;
        }
        let context = stats::median(&cell.warm_input).unwrap_or(f64::from(cell.key.context_tokens));
        let reload = ctx.hardware.and((ctx.model_for)(&cell.key.model)).and_then(|m| {
            physics::expected_reload_ms(m, context as u64, ctx.storage_gbps)
                .map(|ms| (ms, m.kv_bytes_per_token.unwrap_or(0.0) * context))
        });
        let base = format!("warm median TTFT {warm:.0} ms vs cold {cold:.0} ms ({speedup:.2}x)");
        let served = cell.warm_served_by_evidence();
        let (rule, message) = match (reload, served) {
            (Some((reload_ms, _)), _) if cold / reload_ms < 2.0 * ctx.min_warm_speedup => (
                RuleId::WarmSlowerExplained,
                format!(
                    "{base}; reloading the KV cache at {} GB/s storage takes ~{reload_ms:.0} ms, about what recomputing costs: not a cache fault",
                    ctx.storage_gbps
                ),
            ),
            (reload, Some((cached, n))) => (
                RuleId::WarmSlowerExplained,
                format!(
                    "{base}; the server's evidence shows the cache served the prompt in all {n} warm records ({} of ~{context:.0} prompt tokens from the cache): the slot was restored, and restoring it costs about what recomputing does here{}: not a cache fault",
                    cached.map_or("most".into(), |c| format!("median {c:.0}")),
                    reload.map_or(String::new(), |(ms, _)| format!(
                        " (more than the ~{ms:.0} ms that reading its KV at {} GB/s would take: storage or restore is slower than that)",
                        ctx.storage_gbps
                    ))
                ),
            ),
            (Some((reload_ms, bytes)), None) => (
                RuleId::WarmNotFaster,
                format!(
                    "{base}; reloading {:.2} GB of KV at {} GB/s should take ~{reload_ms:.0} ms: the cache did nothing",
                    bytes / 1e9,
                    ctx.storage_gbps
                ),
            ),
            (None, None) => (
                RuleId::WarmNotFaster,
                format!(
                    "{base}, below the {:.1}x expected of a working cache: the cache did nothing",
                    ctx.min_warm_speedup
                ),
            ),
        };
        let f = Finding::new(rule, ctx.file, message).in_cell(&cell.cell_of(CacheState::Warm));
        out.push(f.numbers(speedup, ctx.min_warm_speedup, "x"));
    }
}

/// Hot must not be slower than warm (by more than 10%).
///
/// Hot's measured turn brings new tokens ("Understood." + the follow-up) that must be prefilled,
/// while warm re-sends an identical prompt. Where the evidence shows hot computed clearly more, a
/// fast reload (small KV, page cache) honestly beats it: `hot_slower_explained` (info).
pub(crate) fn hot_slower_than_warm(ctx: &RuleContext, records: &[Judged], out: &mut Vec<Finding>) {
    for cell in state_times(records) {
        let (Some(warm), Some(hot)) = (cell.median_ttft(CacheState::Warm), cell.median_ttft(CacheState::Hot))
        else {
            continue;
        };
        if hot <= warm * 1.10 {
            continue;
        }
        let (rule, message) = match (
            cell.median_computed(CacheState::Hot),
            cell.median_computed(CacheState::Warm),
        ) {
            (Some(h), Some(w)) if h > w + 8.0 => (
                RuleId::HotSlowerExplained,
                format!(
                    "hot median TTFT {hot:.0} ms > warm {warm:.0} ms, but hot computed {h:.0} new prompt tokens \
                     vs warm's {w:.0}: the new turn costs more than this reload; not a cache fault"
                ),
            ),
            _ => (
                RuleId::HotSlowerThanWarm,
                format!(
                    "hot median TTFT {hot:.0} ms > warm {warm:.0} ms: an in-memory cache should not lose to a reload"
                ),
            ),
        };
        let f = Finding::new(rule, ctx.file, message).in_cell(&cell.cell_of(CacheState::Hot));
        out.push(f.numbers(hot, warm, "ms"));
    }
}

/// A concurrent batch is one unit: complete only with all B member requests and its group
/// record. A sweep killed while a batch was being appended leaves a partial one, which must never
/// pass for a measured cell (merge keeps the complete batch of another run instead).
pub(crate) fn batch_incomplete(ctx: &RuleContext, records: &[Judged], out: &mut Vec<Finding>) {
    for b in batch::batch_records(records) {
        let shape = Shape::of(&b);
        if shape.is_complete() {
            continue;
        }
        let first = b[0];
        let group_id = first.group_id();
        let id = if group_id.is_empty() { "without a group id".to_string() } else { group_id.to_string() };
        let message = format!(
            "partial batch {id} in {}: {}; a batch is one unit, so this one measures nothing (re-run the cell)",
            ctx.file,
            shape.gaps().join(", ")
        );
        out.push(Finding::new(RuleId::BatchIncomplete, ctx.file, message).at(first.run_id(), first.cell()));
    }
}

/// The ceilings use hardware other than the input's run.json or host says.
pub(crate) fn hardware_mismatch(ctx: &RuleContext, _records: &[Judged], out: &mut Vec<Finding>) {
    let Some(used) = ctx.hardware else { return };
    let mut differs = Vec::new();
    if let Some(name) = ctx.run_json_hardware.filter(|n| *n != used.name) {
        differs.push(format!("run.json config.physics says {name}"));
    }
    if let Some((brand, p)) = ctx.host.filter(|(_, p)| p.name != used.name) {
        differs.push(format!("the host's CPU {brand:?} suggests {}", p.name));
    }
    if !differs.is_empty() {
        let message = format!(
            "ceilings use {} ({} GB/s) but {}: check which machine measured this",
            used.name,
            used.bandwidth_gbps,
            differs.join(" and ")
        );
        out.push(Finding::new(RuleId::HardwareMismatch, ctx.file, message));
    }
}

/// `nonce_reused`: every request bench sends opens with a fresh nonce, so that no prefix cache can
/// serve a cold prompt; one session measured cold, warm and hot in turn (`--reuse-primes`) carries
/// its nonce once per cache state. Two records of one input (a run, or a merged set) with one
/// nonce and one cache state are one measurement counted twice: a record copied, as the fastest
/// run pasted in as new runs. Each copy after the first is named with the record it repeats.
/// A soak repeats its prompts on purpose; imported records carry no nonce.
pub(crate) fn nonce_reused(ctx: &RuleContext, records: &[Judged], out: &mut Vec<Finding>) {
    let measured: Vec<&Measured> = records.iter().filter_map(Judged::measured).collect();
    for (copy, original) in repeated_nonces(&measured) {
        let (m, original) = (measured[copy], measured[original]);
        let message = format!(
            "nonce {} measured twice: this record (run {}, request {}, started {}) repeats run {} (request {}, \
             started {}); bench sends every request with a fresh nonce, so one of them is a copy, \
             not a measurement",
            m.nonce(),
            m.cell.run,
            m.request_index,
            m.started_at(),
            original.cell.run,
            original.request_index,
            original.started_at(),
        );
        out.push(Finding::new(RuleId::NonceReused, ctx.file, message).at(m.run_id(), &m.cell));
    }
}

/// Every measurement whose nonce and cache state an earlier one has, with the first that had
/// them: (its index, the first's), in the measurements' order. A million nonces are not a million
/// map entries: each is hashed once (16 bytes with its index), the hashes sorted, and only the
/// measurements whose hashes agree are compared by their nonces.
fn repeated_nonces(measured: &[&Measured]) -> Vec<(usize, usize)> {
    let mut hashed: Vec<(u64, usize)> = measured
        .iter()
        .enumerate()
        .filter(|(_, m)| !m.nonce().is_empty() && m.cell.scenario != Scenario::Soak)
        .map(|(i, m)| {
            let mut hasher = DefaultHasher::new();
            nonce_key(m).hash(&mut hasher);
            (hasher.finish(), i)
        })
        .collect();
    hashed.sort_unstable();
    let mut repeats = Vec::new();
    for run in hashed.chunk_by(|a, b| a.0 == b.0).filter(|run| run.len() > 1) {
        // In the measurements' order within one hash: the first of each key is its original.
        let mut first: HashMap<(&str, CacheState), usize> = HashMap::new();
        for &(_, i) in run {
            match first.entry(nonce_key(measured[i])) {
                Entry::Vacant(slot) => {
                    slot.insert(i);
                }
                Entry::Occupied(seen) => repeats.push((i, *seen.get())),
            }
        }
    }
    repeats.sort_unstable();
    repeats
}

/// What makes two measurements one: their nonce and cache state.
fn nonce_key(m: &Measured) -> (&str, CacheState) {
    (m.nonce(), m.cell.cache_state)
}

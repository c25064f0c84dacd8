//! `bench report`: statistics per cell, as a terminal table, markdown, CSV or JSON, plus SVG plots.
//!
//! A cell is (model, scenario, cache state, mode, context, batch size); runs and the requests of a
//! batch are its samples. Every number is recomputed from the raw records (decode TPS from output
//! tokens, TTFT and E2E; never an average of averages), over the records that passed (quality_ok
//! and error-free) and, of concurrent cells, complete batches only (a batch is one unit); a
//! negative or non-finite time never enters a statistic. `records` and `quality_ok` say how many
//! there were and how many were used.
//! Several inputs are combined with merge's rules first, so a re-run is not counted twice.
//! Methods: see `stats` (distribution-free interval of the median; bootstrap for the ratio of
//! medians). Reports show the median (p50) with the interval of the median, beside p90 and p99.
//! ITL is every gap between consecutive streamed tokens of the cell's records (`token_offsets_ms`),
//! pooled; TPOT is each record's (e2e - ttft) / (output_tokens - 1).

mod csv;
mod gaps;
mod html;
// The ingest benchmark's records: a run as a sweep writes it, at any size, every float a
// measurement holds filled.
#[cfg(test)]
#[allow(dead_code, unreachable_pub)]
#[path = "../../tests/common/ingest_records.rs"]
mod ingest_records;
#[cfg(test)]
mod located_tests;
mod plot;
mod sampled;
mod table;

pub use self::csv::{COLUMNS, to_csv};

use std::collections::{BTreeMap, HashSet};
use std::io;

use serde::Serialize;

use crate::cli::{ReportArgs, ReportFormat as Format};
use crate::config::report::{Destination, ReportSettings};
use crate::exit::{Failure, Outcome};
use crate::output;
use gaps::{Gaps, Gather};
use sampled::{Kind, Values};
pub(crate) use sampled::{ReportRecord, Sampled};
use ttft_model::record::{CacheState, CellKey, Mode, Record, Scenario};
use ttft_model::stats::{self, Ratio, Samples, Summary};
use ttft_results::results::batch::Shape;
use ttft_results::results::slotted::Slotted;
use ttft_results::results::sources::{self, Detail, FromRecord, Source};
use ttft_results::results::text::Text;
use ttft_results::results::{batch, combine};

/// A report's cell: a matrix point with its runs pooled. Its identity is the record's `CellKey`
/// without the run (`CellId::of`, which takes the key apart field by field, so a field added to the
/// key is placed here or the build fails), plus, for `bench load`'s records, the load level they
/// were sent at: each offered rate and each closed-loop level is a cell of its own, never pooled
/// with the others.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct CellId {
    pub model: String,
    pub batch_size: u32,
    pub scenario: Scenario,
    pub mode: Mode,
    pub context_tokens: u32,
    /// `--dataset`: the row measured; two rows of one length are two cells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dataset_row: Option<u32>,
    /// `bench load --rates`: the offered rate (requests/s). Before the users in the order, so a
    /// rate search's closed-loop passes come first, as they ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offered_rate_per_s: Option<RatePerS>,
    /// `bench load --concurrency`: the closed-loop level (users).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    pub cache_state: CacheState,
}

/// An offered rate as a key: ordered by value (rates are finite and positive), written as the
/// number it is.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(transparent)]
pub struct RatePerS(pub f64);

impl PartialEq for RatePerS {
    fn eq(&self, other: &Self) -> bool {
        self.0.total_cmp(&other.0).is_eq()
    }
}
impl Eq for RatePerS {}
impl PartialOrd for RatePerS {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for RatePerS {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct CellStats {
    #[serde(flatten)]
    pub id: CellId,
    /// Measurement or staggered records in the cell (group records are not counted here), a
    /// closed-loop level's warm-up left out.
    pub records: usize,
    /// `bench load --concurrency`: records sent in the level's warm-up (its users all starting at
    /// once, not its steady state), left out of `records` and of every statistic, as the load's
    /// own summary leaves them out.
    #[serde(skip_serializing_if = "is_zero")]
    pub warmup_records: usize,
    pub quality_ok: usize,
    pub cache_confirmed: usize,
    pub cache_unconfirmed: usize,
    pub ttft_ms: Summary,
    pub e2e_ms: Summary,
    pub decode_tps: Summary,
    /// Inter-token latency: the gaps between consecutive streamed tokens, all records pooled.
    pub itl_ms: Summary,
    /// Time per output token after the first, one value per record.
    pub tpot_ms: Summary,
    /// Median of the records' physics.decode_ceiling_tps.
    pub decode_ceiling_tps: Option<f64>,
    /// Median of the records' physical TTFT floor: computed prompt tokens at the prefill ceiling
    /// (physics.prefill_ceiling_tps); no TTFT can be below it.
    pub ttft_floor_ms: Option<f64>,
    /// Cold median TTFT / this cell's median TTFT (warm and hot cells).
    pub ttft_speedup_vs_cold: Option<Ratio>,
    /// Concurrent cells: system TPS of the batches (group records).
    pub system_tps: Summary,
    /// Staggered cells: user B's first token, from A's send.
    pub user_b_wait_ms: Summary,
    /// A load level's runs (`bench load` numbers its levels as runs): where verify's findings,
    /// which name a record's key and run, find the level they concern.
    #[serde(skip)]
    pub load_runs: Vec<u32>,
}

/// The raw samples of one cell, before statistics (`bench compare` bootstraps on these, so both
/// verbs use the same records: passing ones, complete batches only, no negative times).
#[derive(Default)]
pub(crate) struct CellSamples {
    pub records: usize,
    /// Closed-loop warm-up records: counted, never sampled.
    pub warmup: usize,
    /// A load level's runs.
    pub load_runs: std::collections::BTreeSet<u32>,
    pub quality_ok: usize,
    pub confirmed: usize,
    pub unconfirmed: usize,
    pub ttft: Vec<f64>,
    pub e2e: Vec<f64>,
    pub decode: Vec<f64>,
    pub tpot: Vec<f64>,
    /// Where the cell's inter-token gaps are: the records (indices into the slice `samples` was
    /// given) whose token offsets enter ITL: those holding two or more, and those read located,
    /// whose offsets are read back from their texts. The gaps themselves are pooled one cell at a
    /// time (`itl`), never every cell's at once: a million streamed records hold 63 million of them.
    pub itl_records: Vec<usize>,
    pub ceiling: Vec<f64>,
    pub ttft_floor: Vec<f64>,
    pub system_tps: Vec<f64>,
    pub b_wait: Vec<f64>,
}

impl CellSamples {
    /// Adds one record of `cell`, at `index` of the records; `used`: it passed and is not part of
    /// a partial batch.
    fn add(&mut self, cell: &CellKey, v: &Values, index: usize, used: bool) {
        if cell.scenario == Scenario::Load {
            self.load_runs.insert(cell.run);
        }
        match v.kind {
            Kind::Warmup => self.warmup += 1,
            Kind::Measurement => {
                self.records += 1;
                match v.cache_state_confirmed {
                    Some(true) => self.confirmed += 1,
                    Some(false) => self.unconfirmed += 1,
                    None => {}
                }
                if !used {
                    return;
                }
                self.quality_ok += 1;
                self.ttft.extend(v.ttft_ms.get());
                self.e2e.extend(v.e2e_ms.get());
                self.decode.extend(v.decode_tps.get());
                self.tpot.extend(v.tpot_ms.get());
                if v.itl {
                    self.itl_records.push(index);
                }
                self.ceiling.extend(v.decode_ceiling_tps.get());
                self.ttft_floor.extend(v.ttft_floor_ms.get());
            }
            Kind::Group if used => self.system_tps.extend(v.system_tps.get()),
            Kind::Group => {}
            Kind::Staggered => {
                self.records += 1;
                if used {
                    self.quality_ok += 1;
                    self.b_wait.extend(v.user_b_wait_ms.get());
                }
            }
        }
    }
}

/// The statistics of the `c`th cell's inter-token gaps (`Gaps::pool`), pooled and sorted in
/// `gaps`, whose memory is kept for the next cell's.
fn itl_summary<T: Sampled>(
    from: &Gaps<'_, T>,
    c: usize,
    itl_records: &[usize],
    gaps: &mut Vec<f64>,
) -> io::Result<Summary> {
    from.pool(c, itl_records, gaps)?;
    let sorted = Samples::new(std::mem::take(gaps));
    let summary = sorted.summary();
    *gaps = sorted.into_values();
    Ok(summary)
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl CellId {
    /// Whether a record of `cell` (any run) with `v` is in this cell.
    fn holds(&self, cell: &CellKey, v: &Values) -> bool {
        let (concurrency, rate) = (v.concurrency, v.offered_rate_per_s.get().map(RatePerS));
        let CellKey { model, scenario, cache_state, mode, context_tokens, dataset_row, batch_size, run: _ } =
            cell;
        self.model == *model
            && self.batch_size == *batch_size
            && self.scenario == *scenario
            && self.mode == *mode
            && self.context_tokens == *context_tokens
            && self.dataset_row == *dataset_row
            && self.cache_state == *cache_state
            && self.concurrency == concurrency
            && self.offered_rate_per_s == rate
    }

    /// The report's cell (runs pooled) of a record's key, outside any load level. The key is taken
    /// apart field by field: a field added to `CellKey` must be placed here (or said to be pooled,
    /// as the run is) before this builds.
    pub(crate) fn of(c: &CellKey) -> CellId {
        let CellKey { model, scenario, cache_state, mode, context_tokens, dataset_row, batch_size, run: _ } =
            c;
        CellId {
            model: model.clone(),
            batch_size: *batch_size,
            scenario: *scenario,
            mode: *mode,
            context_tokens: *context_tokens,
            dataset_row: *dataset_row,
            offered_rate_per_s: None,
            concurrency: None,
            cache_state: *cache_state,
        }
    }

    /// The cell's key at every run (run 0): what its label is made of (`CellKey`'s one format).
    pub(crate) fn key(&self) -> CellKey {
        let CellId {
            model,
            batch_size,
            scenario,
            mode,
            context_tokens,
            dataset_row,
            offered_rate_per_s: _,
            concurrency: _,
            cache_state,
        } = self;
        CellKey {
            model: model.clone(),
            scenario: *scenario,
            cache_state: *cache_state,
            mode: *mode,
            context_tokens: *context_tokens,
            dataset_row: *dataset_row,
            batch_size: *batch_size,
            run: 0,
        }
    }

    /// The report's cell of a record of `cell` with `v`: its key's, at the load level it was sent
    /// at.
    fn of_record(cell: &CellKey, v: &Values) -> CellId {
        let offered_rate_per_s = v.offered_rate_per_s.get().map(RatePerS);
        CellId { concurrency: v.concurrency, offered_rate_per_s, ..CellId::of(cell) }
    }

    /// The load level in words: "4 users", "1 user", "2.5/s"; None outside `bench load`.
    pub(crate) fn level_label(&self) -> Option<String> {
        match (self.concurrency, self.offered_rate_per_s) {
            (Some(1), _) => Some("1 user".into()),
            (Some(n), _) => Some(format!("{n} users")),
            (None, Some(RatePerS(r))) => Some(format!("{r}/s")),
            (None, None) => None,
        }
    }

    /// Whether the cell is one load level of `bench load` (its own plots are the load's).
    pub(crate) fn is_load_level(&self) -> bool {
        self.concurrency.is_some() || self.offered_rate_per_s.is_some()
    }
}

/// The partial batches among some records: a batch is one unit, and a partial one (a sweep killed
/// mid-batch) is not a measurement of its cell. Found once (`batch::batch_records`, a look at every
/// record) for the statistics, report's notes and compare's failures.
pub(crate) struct PartialBatches {
    /// Addresses of their records (members and group records).
    members: HashSet<usize>,
    /// Each one's cell.
    pub cells: Vec<CellId>,
}

impl PartialBatches {
    pub(crate) fn of<T: Slotted>(records: &[T]) -> PartialBatches {
        let mut partial = PartialBatches { members: HashSet::new(), cells: Vec::new() };
        for b in batch::batch_records(records) {
            if !Shape::of(&b).is_complete() {
                partial.members.extend(b.iter().map(|&r| std::ptr::from_ref::<T>(r) as usize));
                partial.cells.push(CellId::of(b[0].cell()));
            }
        }
        partial
    }

    /// Whether `record` (one of the records these were found among) is in one.
    fn holds<T>(&self, record: &T) -> bool {
        !self.members.is_empty() && self.members.contains(&(std::ptr::from_ref::<T>(record) as usize))
    }
}

/// The raw samples of every cell (runs pooled), sorted like `cells`; `partial`: the partial
/// batches among `records`.
pub(crate) fn samples<T: Sampled>(
    records: &[T],
    texts: &[Option<Text>],
    partial: &PartialBatches,
) -> BTreeMap<CellId, CellSamples> {
    let mut by_cell: BTreeMap<CellId, CellSamples> = BTreeMap::new();
    // Records come sorted by cell, runs next to each other: the previous record's cell is
    // nearly always this one's, so a cell's id is built once, not once per record.
    let mut last: Option<CellId> = None;
    for (index, r) in records.iter().enumerate() {
        let used = r.is_good() && !partial.holds(r);
        let located = texts.get(index).is_some_and(Option::is_some);
        let values = r.values(located);
        let id = match last.take() {
            Some(id) if id.holds(r.cell(), &values) => id,
            _ => CellId::of_record(r.cell(), &values),
        };
        match by_cell.get_mut(&id) {
            Some(samples) => samples.add(r.cell(), &values, index, used),
            None => by_cell.entry(id.clone()).or_default().add(r.cell(), &values, index, used),
        }
        last = Some(id);
    }
    by_cell
}

/// Statistics of every cell, sorted by (model, batch size, scenario, mode, context, dataset row,
/// load level, cache state), of records held whole (a sweep's own, its summary).
pub fn cells(records: &[Record]) -> Vec<CellStats> {
    // Nothing is read back without texts, so nothing can fail.
    located_cells(records, &[]).unwrap_or_default()
}

/// `cells` of records read located (`texts[i]` for `records[i]`, None where a record is held
/// whole): their token offsets are read back from the texts, one cell at a time. Fails where a
/// text cannot be read back as it was read (the file changed since).
pub(crate) fn located_cells<T: Sampled>(records: &[T], texts: &[Option<Text>]) -> io::Result<Vec<CellStats>> {
    statistics(&samples(records, texts, &PartialBatches::of(records)), records, texts, Gather::Chosen)
}

/// Every cell's statistics of its samples (`samples` of `records` and `texts`). Each cell's
/// inter-token gaps are pooled when its statistics are computed: read back from the texts, or
/// taken from `records` where a record is held whole (`records` may be empty where none is).
fn statistics<T: Sampled>(
    by_cell: &BTreeMap<CellId, CellSamples>,
    records: &[T],
    texts: &[Option<Text>],
    gather: Gather,
) -> io::Result<Vec<CellStats>> {
    let cold_twin = |id: &CellId| {
        let scenario = match id.scenario {
            Scenario::Warm | Scenario::Hot => Scenario::Cold,
            other => other,
        };
        CellId { scenario, cache_state: CacheState::Cold, ..id.clone() }
    };
    let itl_cells: Vec<&[usize]> = by_cell.values().map(|s| &s.itl_records[..]).collect();
    let from = Gaps::gather(&itl_cells, records, texts, gather)?;
    // One buffer pools every cell's gaps in turn, sorted in place (`Samples::into_values`).
    let mut gaps = Vec::new();
    by_cell
        .iter()
        .enumerate()
        .map(|(c, (id, s))| {
            let speedup = (id.cache_state != CacheState::Cold && !s.ttft.is_empty())
                .then(|| by_cell.get(&cold_twin(id)))
                .flatten()
                .filter(|cold| !cold.ttft.is_empty())
                .map(|cold| stats::ratio_of_medians(&cold.ttft, &s.ttft));
            Ok(CellStats {
                id: id.clone(),
                records: s.records,
                warmup_records: s.warmup,
                quality_ok: s.quality_ok,
                cache_confirmed: s.confirmed,
                cache_unconfirmed: s.unconfirmed,
                ttft_ms: stats::summarize(&s.ttft),
                e2e_ms: stats::summarize(&s.e2e),
                decode_tps: stats::summarize(&s.decode),
                itl_ms: itl_summary(&from, c, &s.itl_records, &mut gaps)?,
                tpot_ms: stats::summarize(&s.tpot),
                decode_ceiling_tps: stats::median(&s.ceiling),
                ttft_floor_ms: stats::median(&s.ttft_floor),
                ttft_speedup_vs_cold: speedup,
                system_tps: stats::summarize(&s.system_tps),
                user_b_wait_ms: stats::summarize(&s.b_wait),
                load_runs: s.load_runs.iter().copied().collect(),
            })
        })
        .collect()
}

/// A run's numbers in a few lines, as `bench report` computes them (`cells`): what a sweep
/// prints at its end, before its run directory.
pub fn summary(records: &[Record]) -> String {
    table::compact(&cells(records))
}

#[derive(Serialize)]
struct JsonReport<'a> {
    ci_method: &'a str,
    quantile_method: &'a str,
    speedup_method: &'a str,
    cells: &'a [CellStats],
}

pub(crate) const QUANTILE_METHOD: &str = "linear interpolation (type 7)";

/// With records of more than one run, names every run pooled (its model, server and preset), and
/// every setting the runs of one model disagree on: a report of runs against different servers
/// or with different settings must not read as one measurement.
/// A note per run that did not finish (interrupted, or killed with kill -9 and read as such), so
/// its numbers are not taken for a whole run's.
fn unfinished_runs<T>(sources: &[Source<T>]) -> Vec<String> {
    let mut notes = Vec::new();
    for source in sources {
        for meta in &source.run_meta {
            let status = meta.raw.get("status").and_then(|s| s.as_str());
            if !matches!(status, Some("interrupted" | "running")) {
                continue;
            }
            let run_id = meta.raw.get("run_id").and_then(|s| s.as_str()).unwrap_or("?");
            let why = match meta.raw.get("status_note").and_then(|s| s.as_str()) {
                Some(note) => format!("{note}; {}", crate::exit::RESUME_ADVICE),
                None => crate::exit::RESUME_ADVICE.to_string(),
            };
            notes.push(format!(
                "{}: run {run_id} is {} ({why}): its cells may be incomplete",
                source.path.display(),
                status.unwrap_or("?")
            ));
        }
    }
    notes
}

fn pooled_note<T: Slotted>(sources: &[Source<T>]) {
    let mut ordered: Vec<&Source<T>> = sources.iter().collect();
    ordered.sort_by_key(|s| s.path.display().to_string());
    let runs = crate::merge::settings::pooled(&ordered);
    if runs.len() > 1 {
        eprintln!("note: pooled {} runs: {}", runs.len(), runs.join("; "));
    }
    for conflict in crate::merge::settings::conflicts(&ordered) {
        eprintln!("warning: {}", crate::merge::settings::describe(&conflict));
    }
}

/// The inputs, read located: a slot's candidates tie-break on their texts as whole records would,
/// and each cell's token offsets (ITL) are read back from its records' texts when its statistics
/// are computed, so no more than one cell's are ever held.
fn load<T: FromRecord>(args: &ReportArgs) -> anyhow::Result<Vec<Source<T>>> {
    let sources = sources::load_all_with(&args.inputs, Detail::Located).map_err(Failure::from)?;
    sources::require_records(&sources, args.allow_empty).map_err(Failure::from)?;
    Ok(sources)
}

/// Every cell's statistics of `sources`, combined with merge's rules, and the notes said of them
/// on stderr (records set aside or left out, runs unfinished).
fn summarise<T: Sampled>(sources: Vec<Source<T>>) -> anyhow::Result<(Vec<CellStats>, Vec<String>)> {
    let mut notes = unfinished_runs(&sources);
    let combined = combine::combine(sources)?;
    let set_aside: usize = combined.provenance.replaced.iter().map(|r| r.beat).sum();
    if set_aside > 0 {
        notes.push(format!("{set_aside} duplicate records set aside by merge rules (re-runs, copies)"));
    }
    let partial = PartialBatches::of(&combined.records);
    if !partial.cells.is_empty() {
        notes.push(format!(
            "{} partial batch(es) left out of the statistics (members or group record missing: a sweep stopped mid-batch; `bench verify` names them)",
            partial.cells.len()
        ));
    }
    let warmup = combined.records.iter().filter(|r| r.is_warmup()).count();
    if warmup > 0 {
        notes.push(format!(
            "{warmup} warm-up record(s) of closed-loop levels left out of the statistics (sent while each level's users all started at once; `warmup_records` per level)"
        ));
    }
    for note in &notes {
        eprintln!("note: {note}");
    }
    // What other tools' files cannot tell (docs/import.md), once per kind of import.
    let mut imported = BTreeMap::<&str, usize>::new();
    for reason in combined.records.iter().filter_map(Sampled::imported_reason) {
        *imported.entry(reason).or_default() += 1;
    }
    for (reason, n) in imported {
        eprintln!("note: {n} record(s) {reason}");
    }
    let by_cell = samples(&combined.records, &combined.texts, &partial);
    let combine::Combined { records, texts, .. } = combined;
    // Where every record whose gaps enter ITL is read back from its text, the records are let go
    // before the statistics (a million of them, even as digests, are 200 MB).
    let held_whole = by_cell.values().flat_map(|s| &s.itl_records).any(|&i| texts[i].is_none());
    let records = if held_whole {
        records
    } else {
        sources::release_each(records);
        Vec::new()
    };
    let cells = statistics(&by_cell, &records, &texts, Gather::Chosen)?;
    sources::release((records, texts, by_cell));
    Ok((cells, notes))
}

pub fn run(args: &ReportArgs) -> anyhow::Result<Outcome> {
    // Refused before anything is read, so nothing half-done (a page for a browser is a file).
    let settings = ReportSettings::from_args(args)?;
    // The page shows verify's findings too: the inputs are read once as verify keeps them, and
    // freed before they are read again for the statistics, so the two never sit together.
    let context = match settings.format {
        Format::Html => {
            let judged = load(args)?;
            let context = html::Context::gather(&judged);
            sources::free(judged);
            context
        }
        _ => html::Context::default(),
    };
    // Of each record only its digest and what the statistics read of it (`sampled`); a note on
    // stderr where runs are pooled.
    let sources: Vec<Source<ReportRecord>> = load(args)?;
    pooled_note(&sources);
    let (cells, notes) = summarise(sources)?;
    let out = match settings.format {
        Format::Table => table::render(&cells, output::TableStyle::Terminal),
        Format::Markdown => table::render(&cells, output::TableStyle::Markdown),
        Format::Csv => to_csv(&cells).map_err(|e| Failure::io(format!("csv: {e}")))?,
        Format::Json => {
            let report = JsonReport {
                ci_method: stats::CI_METHOD,
                quantile_method: QUANTILE_METHOD,
                speedup_method: stats::RATIO_METHOD,
                cells: &cells,
            };
            serde_json::to_string_pretty(&report)? + "\n"
        }
        Format::Html => html::render(&cells, &context, &notes).map_err(Failure::from)?,
    };
    match &settings.destination {
        Destination::File(path) => {
            ttft_results::store::write_atomic(path, out.as_bytes()).map_err(Failure::from)?;
            eprintln!("wrote {}", path.display());
            // The output path alone on stdout, for scripts.
            output::println(&path.display().to_string())?;
        }
        Destination::Stdout => output::print(&out)?,
    }
    if let Some(dir) = &args.plot {
        let written = plot::write_all(dir, &cells)
            .map_err(|e| Failure::io(format!("{}: cannot write plots: {e}", dir.display())))?;
        for path in written {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(Outcome::Clean)
}

//! What failed in each input, and why: complete / partial / unusable, with every failed record
//! put in one category read from the record itself.
//!
//! Categories (`Reason`), in the order a record is tested:
//! - `server_crash`: a connect error in a run where the server had answered before (it was up,
//!   then nobody was listening); the crashes themselves are counted from the run metadata
//!   (`server_crash_events`: run.json's `server_crashes`, which a run that started its own server
//!   with `--server-cmd` records, one per crash, the restarted ones included);
//! - `timeout`, `http_5xx`, `rate_limited` (HTTP 429), `unsupported` (the preset cannot produce
//!   the cache state honestly): from the record's error;
//! - `other_error`: any other error (kinds counted in `other_errors`);
//! - `cache_state_unconfirmed`: no error, but the server's cache evidence contradicts the state;
//! - `quality_gate`: no error, any other failing quality flag;
//! - `incomplete_batch`: a concurrent batch missing members or its group record (counted per batch);
//! - `missing_from_matrix`: with `--expect`, (cell, run) slots of the scenario that the input lacks.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;
use serde_json::Value;

use crate::config::Expectation;
use crate::report::{CellId, CellSamples, PartialBatches, Sampled};
use ttft_model::record::{CellKey, ErrorKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Reason {
    ServerCrash,
    Timeout,
    #[serde(rename = "http_5xx")]
    Http5xx,
    RateLimited,
    QualityGate,
    CacheStateUnconfirmed,
    Unsupported,
    IncompleteBatch,
    MissingFromMatrix,
    OtherError,
}

impl Reason {
    pub(crate) const ALL: [Reason; 10] = [
        Reason::ServerCrash,
        Reason::Timeout,
        Reason::Http5xx,
        Reason::RateLimited,
        Reason::QualityGate,
        Reason::CacheStateUnconfirmed,
        Reason::Unsupported,
        Reason::IncompleteBatch,
        Reason::MissingFromMatrix,
        Reason::OtherError,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Reason::ServerCrash => "server crash",
            Reason::Timeout => "timeout",
            Reason::Http5xx => "HTTP 5xx",
            Reason::RateLimited => "rate limited",
            Reason::QualityGate => "quality gate",
            Reason::CacheStateUnconfirmed => "cache unconfirmed",
            Reason::Unsupported => "unsupported",
            Reason::IncompleteBatch => "incomplete batch",
            Reason::MissingFromMatrix => "missing",
            Reason::OtherError => "other",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    /// Every cell passed (and, with --expect, none is missing).
    Complete,
    /// Some cells failed or are missing, some are usable.
    Partial,
    /// No usable cell.
    Unusable,
}

impl Status {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Status::Complete => "complete",
            Status::Partial => "partial",
            Status::Unusable => "unusable",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct InputFailures {
    pub path: String,
    /// "base" or "candidate".
    pub role: &'static str,
    pub status: Status,
    /// Cells (runs pooled) with any record.
    pub cells: usize,
    /// Every record passed.
    pub cells_ok: usize,
    /// Some record failed, but the cell has usable samples.
    pub cells_failed: usize,
    /// No usable sample.
    pub cells_unusable: usize,
    /// With --expect: cells of the scenario without any record (null without --expect).
    pub cells_missing: Option<usize>,
    pub failed_records: usize,
    /// Every category, 0 included (a stable shape).
    pub reasons: BTreeMap<Reason, usize>,
    /// Error kinds behind `other_error`.
    pub other_errors: BTreeMap<String, usize>,
    /// Server crashes recorded in the input's run metadata (run.json `server_crashes`).
    pub server_crash_events: usize,
}

impl InputFailures {
    /// Categories with a count, in `Reason::ALL` order.
    pub(crate) fn nonzero(&self) -> Vec<(Reason, usize)> {
        Reason::ALL
            .iter()
            .map(|r| (*r, self.reasons.get(r).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

fn error_reason(kind: ErrorKind, http_status: Option<u16>, server_was_up: bool) -> Reason {
    match kind {
        ErrorKind::Connect if server_was_up => Reason::ServerCrash,
        ErrorKind::Timeout => Reason::Timeout,
        ErrorKind::HttpStatus => match http_status {
            Some(429) => Reason::RateLimited,
            Some(500..=599) => Reason::Http5xx,
            _ => Reason::OtherError,
        },
        ErrorKind::Unsupported => Reason::Unsupported,
        _ => Reason::OtherError,
    }
}

/// The server crashes a run's metadata records (run.json `server_crashes`, read through the
/// typed view so a renamed field is an error, not a silent 0); 0 for metadata that cannot say.
fn crashes(meta: &Value) -> usize {
    match ttft_results::results::run_meta::RunMetaView::from_value(meta) {
        Ok(ttft_results::results::run_meta::RunMetaView::Ours(m)) => m.server_crashes.len(),
        _ => 0,
    }
}

/// Was the server up before a request: did one sent earlier in its run (by start time, then by
/// place in the input) reach it? Each run's first request that did, of `records`.
fn first_requests_up<T: Sampled>(records: &[T]) -> HashMap<&str, (&str, usize)> {
    let mut first_up: HashMap<&str, (&str, usize)> = HashMap::new();
    for (place, r) in records.iter().enumerate() {
        let Some(failing) = r.failing() else { continue };
        if failing.error.is_none_or(|(kind, _)| kind != ErrorKind::Connect) {
            let sent = (r.started_at(), place);
            first_up.entry(r.run_id()).and_modify(|first| *first = (*first).min(sent)).or_insert(sent);
        }
    }
    first_up
}

/// Categorises the failures of one input (`records`: after merge's de-duplication; `samples`:
/// report's cells of those records; `partial`: the partial batches among them).
pub(crate) fn classify<T: Sampled>(
    path: &str,
    role: &'static str,
    run_meta: &[Value],
    records: &[T],
    samples: &BTreeMap<CellId, CellSamples>,
    partial: &PartialBatches,
    expect: Option<&Expectation>,
) -> InputFailures {
    let mut reasons: BTreeMap<Reason, usize> = Reason::ALL.iter().map(|r| (*r, 0)).collect();
    let mut other_errors: BTreeMap<String, usize> = BTreeMap::new();
    let mut failed_cells: BTreeSet<CellId> = BTreeSet::new();
    let mut failed_records = 0;
    // Each run's first request that reached the server, found at the first refused connection
    // (only one asks whether the server was up before it).
    let mut first_up: Option<HashMap<&str, (&str, usize)>> = None;
    for (place, r) in records.iter().enumerate() {
        let Some(failing) = r.failing() else { continue };
        if r.is_good() {
            continue;
        }
        failed_records += 1;
        failed_cells.insert(CellId::of(r.cell()));
        let reason = match failing.error {
            Some((kind, http_status)) => {
                let was_up = kind == ErrorKind::Connect
                    && first_up
                        .get_or_insert_with(|| first_requests_up(records))
                        .get(r.run_id())
                        .is_some_and(|&first| first < (r.started_at(), place));
                let reason = error_reason(kind, http_status, was_up);
                if reason == Reason::OtherError {
                    *other_errors.entry(kind.as_str().to_string()).or_default() += 1;
                }
                reason
            }
            None if failing.cache_state_unconfirmed => Reason::CacheStateUnconfirmed,
            None => Reason::QualityGate,
        };
        *reasons.entry(reason).or_default() += 1;
    }
    for cell in &partial.cells {
        *reasons.entry(Reason::IncompleteBatch).or_default() += 1;
        failed_cells.insert(cell.clone());
    }
    let server_crash_events: usize = run_meta.iter().map(crashes).sum();
    let cells_unusable = samples.values().filter(|s| s.quality_ok == 0).count();
    let cells_failed =
        samples.iter().filter(|(id, s)| s.quality_ok > 0 && failed_cells.contains(*id)).count();
    let cells = samples.len();
    let cells_missing = expect.map(|exp| {
        let (slots, cells) = missing(exp, records);
        *reasons.entry(Reason::MissingFromMatrix).or_default() += slots;
        cells
    });
    let usable = cells - cells_unusable;
    let status = if usable == 0 {
        Status::Unusable
    } else if cells_failed == 0 && cells_unusable == 0 && reasons[&Reason::MissingFromMatrix] == 0 {
        Status::Complete
    } else {
        Status::Partial
    };
    InputFailures {
        path: path.to_string(),
        role,
        status,
        cells,
        cells_ok: cells - cells_failed - cells_unusable,
        cells_failed,
        cells_unusable,
        cells_missing,
        failed_records,
        reasons,
        other_errors,
        server_crash_events,
    }
}

/// (expected (cell, run) slots without a record, expected cells without any run). The matrix is
/// expanded for the input's own models (builds under comparison name their model differently),
/// or the scenario's model for an input without records.
fn missing<T: Sampled>(exp: &Expectation, records: &[T]) -> (usize, usize) {
    let present: BTreeSet<&CellKey> = records.iter().map(T::cell).collect();
    let mut models: BTreeSet<String> = present.iter().map(|c| c.model.clone()).collect();
    if models.is_empty() {
        models.extend(exp.model.clone());
    }
    let pooled = |c: &CellKey| CellKey { run: 0, ..c.clone() };
    let present_cells: BTreeSet<CellKey> = present.iter().map(|c| pooled(c)).collect();
    let (mut slots, mut cells) = (0, BTreeSet::new());
    for model in &models {
        for c in exp.matrix.cells(model) {
            if !present.contains(&c) {
                slots += 1;
                if !present_cells.contains(&pooled(&c)) {
                    cells.insert(pooled(&c));
                }
            }
        }
    }
    (slots, cells.len())
}

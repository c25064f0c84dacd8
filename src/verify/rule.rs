//! The rules' vocabulary: every rule's id with its name, severity and reason (declared once, in
//! `rule_ids!` below), and what a rule's check is given (`RuleContext`, `Input`). Findings and the
//! checks (records, cells, explain, imported, outlier, provenance) name rules from here; the table
//! that says where each rule looks and which function checks it (`table`) stands above them all, so
//! no file of verify imports one that imports it back.

use std::fmt;

use serde::Serialize;

use super::inputs::StoredCeilings;
use super::judged::Judged;
use ttft_results::physics::{Hardware, ModelProfile, Profile};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Context a reader should see; never fails the run.
    Info,
    /// Suspicious; fails only with --strict.
    Warning,
    /// Impossible or broken; exit 1.
    Error,
}

impl Severity {
    pub fn label(self) -> &'static str {
        match self {
            Severity::Info => "INFO",
            Severity::Warning => "WARNING",
            Severity::Error => "ERROR",
        }
    }
}

/// Declares `RuleId` and what each id means: `Id = "snake_case_name", Severity, "reason";`.
macro_rules! rule_ids {
    ($( $id:ident = $name:literal, $sev:ident, $reason:literal; )*) => {
        /// Rule ids (stable: scripts match on their snake_case names).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(rename_all = "snake_case")]
        pub enum RuleId {
            $( $id, )*
        }

        impl RuleId {
            /// Every id, in the order declared.
            #[cfg(test)]
            pub(crate) const ALL: &[RuleId] = &[$( RuleId::$id, )*];

            pub(crate) const fn as_str(self) -> &'static str {
                match self {
                    $( RuleId::$id => $name, )*
                }
            }

            pub(crate) const fn severity(self) -> Severity {
                match self {
                    $( RuleId::$id => Severity::$sev, )*
                }
            }

            /// One line: what it flags and why it matters.
            pub(crate) const fn reason(self) -> &'static str {
                match self {
                    $( RuleId::$id => $reason, )*
                }
            }
        }
    };
}

rule_ids! {
    DecodeAboveCeiling = "decode_above_ceiling", Error,
        "decode faster than memory bandwidth can deliver the weights (and KV) per token";
    PrefillAboveCeiling = "prefill_above_ceiling", Error,
        "prefill of the tokens the server computed faster than the chip can multiply: a 'cold' row served from a cache";
    MaxTokensExceeded = "max_tokens_exceeded", Error,
        "more output tokens than max_tokens: the server ignored the limit";
    UsageMissing = "usage_missing", Error,
        "no server token counts (or input_tokens 0): every rate of the row is a guess";
    TtftAfterE2e = "ttft_after_e2e", Error,
        "a negative time, or the first token after the last: clock misuse";
    CacheStateUnconfirmed = "cache_state_unconfirmed", Error,
        "the server's cache evidence contradicts the claimed cache state";
    StoredVerdictDisagrees = "stored_verdict_disagrees", Error,
        "a verdict the record stores (cache_state_confirmed, quality_ok, physics fractions) that its own evidence and numbers do not give: an edited file or a bug";
    InputTokensOffNominal = "input_tokens_off_nominal", Warning,
        "the server saw more than 1% (at least 2 tokens) more or fewer prompt tokens than the nominal context";
    ThermalNotRecovered = "thermal_not_recovered", Warning,
        "measured before the thermal probe was back within tolerance of its baseline";
    MeasurementFailed = "measurement_failed", Warning,
        "the request failed: no numbers to judge (merge a re-run)";
    QualityGateFailed = "quality_gate_failed", Warning,
        "the output failed the quality gate (empty, looping, miscounted)";
    StaggeredNotOverlapped = "staggered_not_overlapped", Warning,
        "a batched staggered pair whose user B was sent after user A had finished: it measured nothing batched";
    StreamBurst = "stream_burst", Info,
        "a stream held back, flushed at once or its first token lumped with later ones: TTFT holds the decode, the decode rate is the client's read (not impossible, not measurable)";
    BurstUnflagged = "burst_unflagged", Error,
        "a streaming record without a stream_burst flag whose own arrival times show a burst (read again whole): an edited file or a bug";
    WarmNotFaster = "warm_not_faster", Error,
        "warm median TTFT not --min-warm-speedup x faster than cold where reloading the KV cache should be cheap and no evidence shows the cache served the prompt";
    WarmSlowerExplained = "warm_slower_explained", Info,
        "a slow warm where reloading the KV cache costs about what recomputing it does, or whose evidence shows the cache served the prompt";
    HotSlowerThanWarm = "hot_slower_than_warm", Warning,
        "hot median TTFT more than 10% above warm's: an in-memory cache lost to a reload";
    HotSlowerExplained = "hot_slower_explained", Info,
        "a slow hot whose evidence shows it prefilled clearly more new tokens than warm";
    BatchIncomplete = "batch_incomplete", Error,
        "a concurrent batch without all its member requests or its group record (a sweep killed mid-batch)";
    NonceReused = "nonce_reused", Error,
        "two records of one input with one nonce and cache state: bench sends every request with a fresh nonce, so one is a copy (a run pasted in as new runs)";
    WarmPageCacheUnknown = "warm_page_cache_unknown", Info,
        "warm records (counted per run) whose saved session bench could not drop from the OS page cache: the restore may have read memory, not disk";
    WarmReadMemory = "warm_read_memory", Warning,
        "warm records (counted per run) whose saved session was still in memory when restored (a save directory on tmpfs, or a drop the kernel did not carry out): the restore read memory, not disk";
    HardwareMismatch = "hardware_mismatch", Warning,
        "the ceilings use other hardware than run.json or the host's CPU says";
    ImportedUnknowns = "imported_unknowns", Info,
        "records imported from another tool (vLLM, AIPerf, GuideLLM): what its file cannot tell (cache state, hardware, load)";
    RunOutlier = "run_outlier", Warning,
        "a run (or a batch or staggered record) far outside its siblings across runs and files: robust MAD test";
    ProvenanceNoSource = "provenance_no_source", Error,
        "a published record (or batch) that no --sources file holds: a number with no measurement behind it";
    ProvenanceNumbersDiffer = "provenance_numbers_differ", Error,
        "a published record whose numbers differ (beyond rounding) from the same measurement in its source";
    ProvenanceMetadataConflict = "provenance_metadata_conflict", Error,
        "published metadata (tolerance, harness, model, hardware, max tokens) that the sources of its records contradict";
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the rules of one input know besides its records.
pub struct RuleContext<'a> {
    pub file: &'a str,
    /// The hardware the ceilings use (flags, else the input's run.json).
    pub hardware: Option<&'a Hardware>,
    /// The model profile of a record's `model` (flags, run metadata or the built-in table).
    pub model_for: &'a dyn Fn(&str) -> Option<&'a ModelProfile>,
    /// What run.json says the hardware was, when flags chose another.
    pub run_json_hardware: Option<&'a str>,
    /// The host's CPU brand and the profile it suggests.
    pub host: Option<(&'a str, &'a Profile)>,
    pub min_warm_speedup: f64,
    pub storage_gbps: f64,
    /// Whether the records' stored ceilings are judged, and compared with `hardware`'s.
    pub stored: StoredCeilings,
}

/// One input given to verify: its name and records.
pub struct Input<'a> {
    pub file: String,
    pub records: &'a [Judged],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_is_named_by_its_serde_name_and_has_a_reason() {
        for &id in RuleId::ALL {
            assert_eq!(serde_json::to_value(id).ok(), Some(serde_json::json!(id.as_str())));
            assert!(!id.reason().is_empty(), "{id}");
        }
        assert_eq!(RuleId::ALL.len(), 28);
    }
}

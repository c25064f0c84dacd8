//! Every rule of `bench verify`, in one list (`RULES`): its id, severity, scope and reason. The
//! rule list of docs/merge-verify.md and `bench verify --list-rules` mirror this list; a rule is
//! added here and nowhere else.

use std::fmt;

use serde::Serialize;

use super::finding::{Finding, Severity};
use super::inputs::StoredCeilings;
use super::{cells, explain, imported, outlier, provenance, records};
use crate::physics::{Hardware, ModelProfile, Profile};
use crate::record::Record;
use crate::results::sources::Source;

/// Rule ids (stable: scripts match on their snake_case names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleId {
    DecodeAboveCeiling,
    PrefillAboveCeiling,
    MaxTokensExceeded,
    UsageMissing,
    TtftAfterE2e,
    CacheStateUnconfirmed,
    StoredVerdictDisagrees,
    InputTokensOffNominal,
    ThermalNotRecovered,
    MeasurementFailed,
    QualityGateFailed,
    StaggeredNotOverlapped,
    StreamBurst,
    BurstUnflagged,
    WarmNotFaster,
    WarmSlowerExplained,
    HotSlowerThanWarm,
    HotSlowerExplained,
    BatchIncomplete,
    NonceReused,
    WarmPageCacheUnknown,
    WarmReadMemory,
    HardwareMismatch,
    ImportedUnknowns,
    RunOutlier,
    ProvenanceNoSource,
    ProvenanceNumbersDiffer,
    ProvenanceMetadataConflict,
}

impl RuleId {
    pub fn as_str(self) -> &'static str {
        self.rule().name
    }

    pub fn severity(self) -> Severity {
        self.rule().severity
    }

    /// This id's entry of `RULES` (every id has exactly one; a unit test holds it).
    pub fn rule(self) -> &'static Rule {
        RULES.iter().find(|r| r.id == self).unwrap_or(&RULES[0])
    }
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
    pub model_for: &'a dyn Fn(&str) -> Option<ModelProfile>,
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
    pub records: &'a [Record],
}

/// Where a rule looks and the function that checks it.
#[derive(Clone, Copy)]
pub enum Check {
    /// Each record alone.
    Record(fn(&RuleContext, &Record, &mut Vec<Finding>)),
    /// The cells of one input (several records together).
    Cell(fn(&RuleContext, &[Record], &mut Vec<Finding>)),
    /// One input with its file: a record read lean can be read again whole where its rule needs
    /// what the lean reading drops (its arrival times).
    Input(fn(&RuleContext, &Source, &mut Vec<Finding>)),
    /// All inputs together.
    CrossInput(fn(&[Input], &mut Vec<Finding>)),
    /// One input (a published file) against the sources it claims (`--sources`); runs only when
    /// sources are given.
    Sources(fn(&Source, &[Source], &mut Vec<Finding>)),
    /// Raised by another rule's check when the physics explains what that rule would flag.
    OutcomeOf(RuleId),
}

pub struct Rule {
    pub id: RuleId,
    pub name: &'static str,
    pub severity: Severity,
    pub check: Check,
    /// One line: what it flags and why it matters.
    pub reason: &'static str,
}

use Severity::{Error, Info, Warning};

macro_rules! rule {
    ($id:ident, $name:literal, $sev:ident, $check:expr, $reason:literal) => {
        Rule { id: RuleId::$id, name: $name, severity: $sev, check: $check, reason: $reason }
    };
}

/// Every rule: record rules, then cell rules, then cross-input rules; errors first in each.
pub const RULES: &[Rule] = &[
    rule!(
        DecodeAboveCeiling,
        "decode_above_ceiling",
        Error,
        Check::Record(records::decode_above_ceiling),
        "decode faster than memory bandwidth can deliver the weights (and KV) per token"
    ),
    rule!(
        PrefillAboveCeiling,
        "prefill_above_ceiling",
        Error,
        Check::Record(records::prefill_above_ceiling),
        "prefill of the tokens the server computed faster than the chip can multiply: a 'cold' row served from a cache"
    ),
    rule!(
        MaxTokensExceeded,
        "max_tokens_exceeded",
        Error,
        Check::Record(records::max_tokens_exceeded),
        "more output tokens than max_tokens: the server ignored the limit"
    ),
    rule!(
        UsageMissing,
        "usage_missing",
        Error,
        Check::Record(records::usage_missing),
        "no server token counts (or input_tokens 0): every rate of the row is a guess"
    ),
    rule!(
        TtftAfterE2e,
        "ttft_after_e2e",
        Error,
        Check::Record(records::ttft_after_e2e),
        "a negative time, or the first token after the last: clock misuse"
    ),
    rule!(
        CacheStateUnconfirmed,
        "cache_state_unconfirmed",
        Error,
        Check::Record(records::cache_state_unconfirmed),
        "the server's cache evidence contradicts the claimed cache state"
    ),
    rule!(
        StoredVerdictDisagrees,
        "stored_verdict_disagrees",
        Error,
        Check::Record(records::stored_verdict_disagrees),
        "a verdict the record stores (cache_state_confirmed, quality_ok, physics fractions) that its own evidence and numbers do not give: an edited file or a bug"
    ),
    rule!(
        InputTokensOffNominal,
        "input_tokens_off_nominal",
        Warning,
        Check::Record(records::input_tokens_off_nominal),
        "the server saw more than 1% (at least 2 tokens) more or fewer prompt tokens than the nominal context"
    ),
    rule!(
        ThermalNotRecovered,
        "thermal_not_recovered",
        Warning,
        Check::Record(records::thermal_not_recovered),
        "measured before the thermal probe was back within tolerance of its baseline"
    ),
    rule!(
        MeasurementFailed,
        "measurement_failed",
        Warning,
        Check::Record(records::measurement_failed),
        "the request failed: no numbers to judge (merge a re-run)"
    ),
    rule!(
        QualityGateFailed,
        "quality_gate_failed",
        Warning,
        Check::Record(records::quality_gate_failed),
        "the output failed the quality gate (empty, looping, miscounted)"
    ),
    rule!(
        StaggeredNotOverlapped,
        "staggered_not_overlapped",
        Warning,
        Check::Record(records::staggered_not_overlapped),
        "a batched staggered pair whose user B was sent after user A had finished: it measured nothing batched"
    ),
    rule!(
        StreamBurst,
        "stream_burst",
        Info,
        Check::Record(explain::stream_burst),
        "a stream held back, flushed at once or its first token lumped with later ones: TTFT holds the decode, the decode rate is the client's read (not impossible, not measurable)"
    ),
    rule!(
        BurstUnflagged,
        "burst_unflagged",
        Error,
        Check::Input(records::burst_unflagged),
        "a streaming record without a stream_burst flag whose own arrival times show a burst (read again whole): an edited file or a bug"
    ),
    rule!(
        WarmNotFaster,
        "warm_not_faster",
        Error,
        Check::Cell(cells::warm_not_faster),
        "warm median TTFT not --min-warm-speedup x faster than cold where reloading the KV cache should be cheap and no evidence shows the cache served the prompt"
    ),
    rule!(
        WarmSlowerExplained,
        "warm_slower_explained",
        Info,
        Check::OutcomeOf(RuleId::WarmNotFaster),
        "a slow warm where reloading the KV cache costs about what recomputing it does, or whose evidence shows the cache served the prompt"
    ),
    rule!(
        HotSlowerThanWarm,
        "hot_slower_than_warm",
        Warning,
        Check::Cell(cells::hot_slower_than_warm),
        "hot median TTFT more than 10% above warm's: an in-memory cache lost to a reload"
    ),
    rule!(
        HotSlowerExplained,
        "hot_slower_explained",
        Info,
        Check::OutcomeOf(RuleId::HotSlowerThanWarm),
        "a slow hot whose evidence shows it prefilled clearly more new tokens than warm"
    ),
    rule!(
        BatchIncomplete,
        "batch_incomplete",
        Error,
        Check::Cell(cells::batch_incomplete),
        "a concurrent batch without all its member requests or its group record (a sweep killed mid-batch)"
    ),
    rule!(
        NonceReused,
        "nonce_reused",
        Error,
        Check::Cell(cells::nonce_reused),
        "two records of one input with one nonce and cache state: bench sends every request with a fresh nonce, so one is a copy (a run pasted in as new runs)"
    ),
    rule!(
        WarmPageCacheUnknown,
        "warm_page_cache_unknown",
        Info,
        Check::Cell(explain::warm_page_cache_unknown),
        "warm records (counted per run) whose saved session bench could not drop from the OS page cache: the restore may have read memory, not disk"
    ),
    rule!(
        WarmReadMemory,
        "warm_read_memory",
        Warning,
        Check::Cell(explain::warm_read_memory),
        "warm records (counted per run) whose saved session was still in memory when restored (a save directory on tmpfs, or a drop the kernel did not carry out): the restore read memory, not disk"
    ),
    rule!(
        HardwareMismatch,
        "hardware_mismatch",
        Warning,
        Check::Cell(cells::hardware_mismatch),
        "the ceilings use other hardware than run.json or the host's CPU says"
    ),
    rule!(
        ImportedUnknowns,
        "imported_unknowns",
        Info,
        Check::Cell(imported::imported_unknowns),
        "records imported from another tool (vLLM, AIPerf, GuideLLM): what its file cannot tell (cache state, hardware, load)"
    ),
    rule!(
        RunOutlier,
        "run_outlier",
        Warning,
        Check::CrossInput(outlier::run_outlier),
        "a run (or a batch or staggered record) far outside its siblings across runs and files: robust MAD test"
    ),
    rule!(
        ProvenanceNoSource,
        "provenance_no_source",
        Error,
        Check::Sources(provenance::no_source),
        "a published record (or batch) that no --sources file holds: a number with no measurement behind it"
    ),
    rule!(
        ProvenanceNumbersDiffer,
        "provenance_numbers_differ",
        Error,
        Check::Sources(provenance::numbers_differ),
        "a published record whose numbers differ (beyond rounding) from the same measurement in its source"
    ),
    rule!(
        ProvenanceMetadataConflict,
        "provenance_metadata_conflict",
        Error,
        Check::Sources(provenance::metadata_conflict),
        "published metadata (tolerance, harness, model, hardware, max tokens) that the sources of its records contradict"
    ),
];

/// Where a rule looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Record,
    Cell,
    CrossInput,
    Sources,
}

impl Scope {
    pub fn title(self) -> &'static str {
        match self {
            Scope::Record => "record rules (each record)",
            Scope::Cell => "cell rules (the cells of one input)",
            Scope::CrossInput => "cross-input rules (all inputs together)",
            Scope::Sources => "provenance rules (with --sources: each input against its claimed sources)",
        }
    }
}

impl Rule {
    /// Where the rule looks (an outcome looks where the rule that raises it does).
    pub fn scope(&self) -> Scope {
        match self.check {
            Check::Record(_) | Check::Input(_) => Scope::Record,
            Check::Cell(_) => Scope::Cell,
            Check::CrossInput(_) => Scope::CrossInput,
            Check::Sources(_) => Scope::Sources,
            Check::OutcomeOf(parent) => parent.rule().scope(),
        }
    }
}

/// `bench verify --list-rules`: the list, grouped by where each rule looks.
pub fn list() -> String {
    let mut out = String::new();
    for scope in [Scope::Record, Scope::Cell, Scope::CrossInput, Scope::Sources] {
        out.push_str(scope.title());
        out.push('\n');
        for rule in RULES.iter().filter(|r| r.scope() == scope) {
            let outcome = match rule.check {
                Check::OutcomeOf(parent) => format!(" (raised by {parent})"),
                _ => String::new(),
            };
            let sev = rule.severity.label().to_lowercase();
            out.push_str(&format!("  {sev:<7} {:<25} {}{outcome}\n", rule.name, rule.reason));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_has_one_entry_whose_name_is_its_serde_name() {
        for rule in RULES {
            assert_eq!(RULES.iter().filter(|r| r.id == rule.id).count(), 1, "{}", rule.name);
            assert_eq!(serde_json::to_value(rule.id).ok(), Some(serde_json::json!(rule.name)));
            assert!(!rule.reason.is_empty());
        }
        assert_eq!(RULES.len(), 28);
    }

    #[test]
    fn docs_describe_every_rule_at_its_severity() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/verify-rules.md");
        let doc = std::fs::read_to_string(path).unwrap_or_default();
        for rule in RULES {
            let row = format!("| `{}` | {} |", rule.name, rule.severity.label().to_lowercase());
            assert!(doc.contains(&row), "docs/verify-rules.md lacks {row}");
        }
    }

    #[test]
    fn the_list_groups_rules_by_scope() {
        let text = list();
        let at = |s: &str| text.find(s).unwrap_or(usize::MAX);
        assert!(at("record rules") < at("decode_above_ceiling"));
        assert!(
            at("cell rules") < at("warm_slower_explained") && at("warm_slower_explained") < at("cross-input")
        );
        assert!(text.contains("(raised by warm_not_faster)"));
        assert!(
            at("cell rules") < at("batch_incomplete") && at("batch_incomplete") < at("cross-input rules")
        );
        assert!(at("cross-input rules") < at("run_outlier"));
        assert!(text.contains("  error   batch_incomplete"), "{text}");
        assert!(at("provenance rules") < at("provenance_no_source"));
        assert_eq!(text.lines().count(), RULES.len() + 4);
    }
}

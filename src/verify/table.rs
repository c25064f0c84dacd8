//! The rule table: every rule of `bench verify` with where it looks and the function that checks
//! it (`RULES`), in the order they run and are listed. `bench verify --list-rules` prints it, and
//! docs/verify-rules.md describes each rule at its severity (a unit test holds both). A rule is
//! declared once in `rule::rule_ids!` (name, severity, reason) and given its check here; a unit test
//! holds that every id has exactly one entry.

use super::finding::Finding;
use super::judged::{Judged, Measured};
use super::provenance::Audit;
use super::rule::{Input, RuleContext, RuleId, Severity};
use super::{cells, explain, imported, outlier, provenance, records};
use ttft_model::record::Record;
use ttft_results::results::sources::{Detail, FromRecord, Source};

/// Where a rule looks and the function that checks it.
#[derive(Clone, Copy)]
pub enum Check {
    /// Each record alone, as it is read (`judge`).
    Record(fn(&Record, &mut Vec<Finding>)),
    /// Each measurement against the ceilings of its input's hardware and model, from what the
    /// record left for them (`judged::Measured`); `alone`: what the rule finds in a record alone, run as
    /// it is read.
    Rated {
        alone: Option<fn(&Record, &mut Vec<Finding>)>,
        rated: fn(&RuleContext, &Measured, &mut Vec<Finding>),
    },
    /// The cells of one input (several records together).
    Cell(fn(&RuleContext, &[Judged], &mut Vec<Finding>)),
    /// One input with its file: a record read lean can be read again whole where its rule needs
    /// what the lean reading drops (its arrival times).
    Input(fn(&RuleContext, &Source<Judged>, &mut Vec<Finding>)),
    /// All inputs together.
    CrossInput(fn(&[Input], &mut Vec<Finding>)),
    /// One input (a published file) against the sources it claims (`--sources`), each of its
    /// records traced to them once for every such rule; runs only when sources are given.
    Sources(fn(&Audit, &mut Vec<Finding>)),
    /// Raised by another rule's check when the physics explains what that rule would flag.
    OutcomeOf(RuleId),
}

/// One rule: its id (with its name, severity and reason, `rule::RuleId`) and its check.
pub struct Rule {
    pub id: RuleId,
    pub name: &'static str,
    pub severity: Severity,
    pub check: Check,
    /// One line: what it flags and why it matters.
    pub reason: &'static str,
}

/// The row of `id`: its name, severity and reason from the id's declaration.
macro_rules! rule {
    ($id:ident, $check:expr) => {
        Rule {
            id: RuleId::$id,
            name: RuleId::$id.as_str(),
            severity: RuleId::$id.severity(),
            check: $check,
            reason: RuleId::$id.reason(),
        }
    };
}

/// Every rule: record rules, then cell rules, then cross-input rules; errors first in each.
pub const RULES: &[Rule] = &[
    rule!(DecodeAboveCeiling, Check::Rated { alone: None, rated: records::decode_above_ceiling }),
    rule!(PrefillAboveCeiling, Check::Rated { alone: None, rated: records::prefill_above_ceiling }),
    rule!(MaxTokensExceeded, Check::Record(records::max_tokens_exceeded)),
    rule!(UsageMissing, Check::Record(records::usage_missing)),
    rule!(TtftAfterE2e, Check::Record(records::ttft_after_e2e)),
    rule!(CacheStateUnconfirmed, Check::Record(records::cache_state_unconfirmed)),
    rule!(
        StoredVerdictDisagrees,
        Check::Rated { alone: Some(records::staggered_verdicts), rated: records::stored_verdicts }
    ),
    rule!(InputTokensOffNominal, Check::Record(records::input_tokens_off_nominal)),
    rule!(ThermalNotRecovered, Check::Record(records::thermal_not_recovered)),
    rule!(MeasurementFailed, Check::Record(records::measurement_failed)),
    rule!(QualityGateFailed, Check::Record(records::quality_gate_failed)),
    rule!(StaggeredNotOverlapped, Check::Record(records::staggered_not_overlapped)),
    rule!(StreamBurst, Check::Rated { alone: None, rated: explain::stream_burst }),
    rule!(BurstUnflagged, Check::Input(records::burst_unflagged)),
    rule!(WarmNotFaster, Check::Cell(cells::warm_not_faster)),
    rule!(WarmSlowerExplained, Check::OutcomeOf(RuleId::WarmNotFaster)),
    rule!(HotSlowerThanWarm, Check::Cell(cells::hot_slower_than_warm)),
    rule!(HotSlowerExplained, Check::OutcomeOf(RuleId::HotSlowerThanWarm)),
    rule!(BatchIncomplete, Check::Cell(cells::batch_incomplete)),
    rule!(NonceReused, Check::Cell(cells::nonce_reused)),
    rule!(WarmPageCacheUnknown, Check::Cell(explain::warm_page_cache_unknown)),
    rule!(WarmReadMemory, Check::Cell(explain::warm_read_memory)),
    rule!(HardwareMismatch, Check::Cell(cells::hardware_mismatch)),
    rule!(ImportedUnknowns, Check::Cell(imported::imported_unknowns)),
    rule!(RunOutlier, Check::CrossInput(outlier::run_outlier)),
    rule!(ProvenanceNoSource, Check::Sources(provenance::no_source)),
    rule!(ProvenanceNumbersDiffer, Check::Sources(provenance::numbers_differ)),
    rule!(ProvenanceMetadataConflict, Check::Sources(provenance::metadata_conflict)),
];

/// The entry of `id` in `RULES` (every id has exactly one; a unit test holds it).
pub(crate) fn of(id: RuleId) -> &'static Rule {
    RULES.iter().find(|r| r.id == id).unwrap_or(&RULES[0])
}

/// Where a rule looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    Record,
    Cell,
    CrossInput,
    Sources,
}

impl Scope {
    pub(crate) fn title(self) -> &'static str {
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
    pub(crate) fn scope(&self) -> Scope {
        match self.check {
            Check::Record(_) | Check::Rated { .. } | Check::Input(_) => Scope::Record,
            Check::Cell(_) => Scope::Cell,
            Check::CrossInput(_) => Scope::CrossInput,
            Check::Sources(_) => Scope::Sources,
            Check::OutcomeOf(parent) => of(parent).scope(),
        }
    }
}

/// `record` as verify keeps it (`judged`), the rules that need nothing but the record run on it
/// there and then (`Check::Record`, and the `alone` part of `Check::Rated`), in `RULES` order.
pub(crate) fn judge(record: Record, detail: Detail) -> Judged {
    let mut found = Vec::new();
    for rule in RULES {
        match rule.check {
            Check::Record(check) | Check::Rated { alone: Some(check), .. } => check(&record, &mut found),
            _ => {}
        }
    }
    records::kept(record, detail.locates(), found)
}

/// Each record is judged as it is read, in the reading threads.
impl FromRecord for Judged {
    fn from_record(record: Record, detail: Detail) -> Judged {
        judge(record, detail)
    }
}

/// `bench verify --list-rules`: the list, grouped by where each rule looks.
pub(crate) fn list() -> String {
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
    fn every_id_has_one_entry() {
        for &id in RuleId::ALL {
            assert_eq!(RULES.iter().filter(|r| r.id == id).count(), 1, "{id}");
        }
        assert_eq!(RULES.len(), RuleId::ALL.len());
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

//! What a file imported from another tool cannot tell (`results::import`): said once per input,
//! as an info finding, so nobody reads an imported row as a cold, batch-1 measurement of known
//! hardware.

use std::collections::BTreeMap;

use super::finding::Finding;
use super::judged::Judged;
use super::rule::{RuleContext, RuleId};

pub(crate) fn imported_unknowns(ctx: &RuleContext, records: &[Judged], out: &mut Vec<Finding>) {
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for reason in records.iter().filter_map(|r| r.measured()?.rare().imported.as_deref()) {
        *reasons.entry(reason).or_default() += 1;
    }
    for (reason, n) in reasons {
        out.push(Finding::new(RuleId::ImportedUnknowns, ctx.file, format!("{n} record(s) {reason}")));
    }
}

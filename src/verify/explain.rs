//! Rules that explain a record's numbers rather than fault them: a stream held back, whole or in
//! lumps (its decode was never observable), and warm restores that may have read the OS page
//! cache instead of the disk.

use std::collections::BTreeMap;

use super::finding::Finding;
use super::judged::{Judged, Measured};
use super::rule::{RuleContext, RuleId};
use ttft_model::record::QualityCode;
use ttft_model::record::{CacheState, Measurement, PageCache};

/// `stream_burst`: a stream held back, whole or in part, so that its first token came only with
/// tokens decoded after it. Its client-side decode rate can be far above the physical ceiling
/// without anything being faked: the tokens were decoded at the server's pace and read at the
/// client's. `decode_above_ceiling` leaves such a record to this rule, which says what happened in
/// the sweep's own words (the flag's reason: a burst of N tokens in M arrivals, or the first
/// arrival's lump and the decode it held) instead of calling the rate impossible.
pub(crate) fn stream_burst(ctx: &RuleContext, m: &Measured, out: &mut Vec<Finding>) {
    let Some(note) = &m.rare().burst_note else { return };
    let mut message = note.to_string();
    let rates = m.rates();
    let ceiling = ctx
        .hardware
        .zip((ctx.model_for)(&m.cell.model))
        .and_then(|(hw, model)| rates.ceilings(hw, model).decode_ceiling_tps);
    if let (Some(d), Some(c)) = (rates.decode_tps, ceiling)
        && d > c
    {
        message.push_str(&format!(
            " (its {d:.0} tok/s above the {c:.0} tok/s ceiling is the client reading what was held back, not the server decoding)"
        ));
    }
    message.push_str("; kept out of TTFT and decode statistics");
    out.push(Finding::new(RuleId::StreamBurst, ctx.file, message).at(m.run_id(), &m.cell));
}

/// `stream_burst`'s message up to the ceiling's part, of a measurement flagged `stream_burst` that
/// did not fail.
pub(crate) fn burst_note(m: &Measurement) -> Option<String> {
    let flag = m.quality_flags.iter().find(|f| f.flag == QualityCode::StreamBurst)?;
    if m.error.is_some() {
        return None;
    }
    Some(if flag.reason.is_empty() {
        let arrivals = m.distinct_arrivals.map_or("?".into(), |n| n.to_string());
        let tokens = m.output_tokens.map_or("?".into(), |n| n.to_string());
        format!("stream arrived in a burst ({tokens} tokens in {arrivals} arrivals); decode not measurable")
    } else {
        flag.reason.clone()
    })
}

/// Per run, (warm records with `page_cache` equal to `label`, warm records that say where their
/// restore read from). Records written before bench kept the field say nothing either way and are
/// not counted (imports and older files would otherwise all raise the rules below).
fn warm_page_cache_counts(records: &[Judged], label: PageCache) -> BTreeMap<&str, (usize, usize)> {
    let mut runs: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for m in records.iter().filter_map(Judged::measured) {
        if m.cell.cache_state != CacheState::Warm || m.failed {
            continue;
        }
        let Some(page_cache) = m.page_cache else { continue };
        let (matching, all) = runs.entry(m.run_id()).or_default();
        *all += 1;
        if page_cache == label {
            *matching += 1;
        }
    }
    runs.retain(|_, (matching, _)| *matching > 0);
    runs
}

/// `warm_page_cache_unknown`: per run, how many warm records restored a saved session bench could
/// not drop from the OS page cache (`page_cache: "unknown"`): such a restore may have read memory,
/// not the disk that "warm" claims.
pub(crate) fn warm_page_cache_unknown(ctx: &RuleContext, records: &[Judged], out: &mut Vec<Finding>) {
    for (run_id, (unknown, all)) in warm_page_cache_counts(records, PageCache::Unknown) {
        let message = format!(
            "{unknown} of {all} warm records restored a saved session that may still have been in the OS page \
             cache (page_cache unknown): their TTFT may read memory, not disk (on an H200 about 2x faster); \
             give --slot-dir DIR, or --server-cmd with --slot-save-path, so bench drops the file first"
        );
        let mut f = Finding::new(RuleId::WarmPageCacheUnknown, ctx.file, message);
        f.run_id = Some(run_id.to_string());
        out.push(f);
    }
}

/// `warm_read_memory`: per run, how many warm records restored a saved session that was still in
/// memory when the restore was sent (`page_cache: "memory"`: a save directory on tmpfs or ramfs,
/// or a drop the kernel did not carry out): "warm" claims a disk read, and these read memory.
pub(crate) fn warm_read_memory(ctx: &RuleContext, records: &[Judged], out: &mut Vec<Finding>) {
    for (run_id, (memory, all)) in warm_page_cache_counts(records, PageCache::Memory) {
        let message = format!(
            "{memory} of {all} warm records restored a saved session that was still in memory (page_cache \
             memory: the save directory keeps its files in memory, or the kernel kept the file's pages after \
             the drop): their TTFT is a read from memory, not the disk that warm claims (on an H200 about 2x \
             faster); give the server a save directory on a disk"
        );
        let mut f = Finding::new(RuleId::WarmReadMemory, ctx.file, message);
        f.run_id = Some(run_id.to_string());
        out.push(f);
    }
}

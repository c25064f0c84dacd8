//! quality_ok gating (placeholder until the integrity work lands).

use crate::record::{CacheEvidence, CacheState, Measurement, QualityFlag};

pub fn assess(m: &Measurement, _full_output: &str) -> Vec<QualityFlag> {
    let mut flags = Vec::new();
    if m.output_tokens.is_none() || m.input_tokens.is_none() {
        flags.push(QualityFlag { flag: "usage_missing".into(), reason: "no usage".into(), fails_gate: true });
    }
    flags
}

pub fn gate(flags: &[QualityFlag]) -> bool {
    !flags.iter().any(|f| f.fails_gate)
}

pub fn confirm_cache_state(
    state: CacheState,
    evidence: &CacheEvidence,
    _input_tokens: Option<u64>,
) -> Option<bool> {
    let cached = evidence.cached_tokens?;
    Some(match state {
        CacheState::Cold => cached == 0,
        _ => cached > 0,
    })
}

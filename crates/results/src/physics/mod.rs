//! Physical ceilings: no server decodes faster than memory can deliver the weights, nor prefills
//! faster than the chip can multiply. A number above its ceiling is not a fast server; it is a
//! measurement that did not measure what it says.
//!
//! Decode (memory bound): every step reads the (active) weights once and the KV cache of every
//! stream in the batch. With batch B the weights are shared by the B streams of one step, so
//!   per-stream decode ceiling = bandwidth / (weight_bytes + B x kv_bytes_per_token x context).
//! The context used is the prompt size (the smallest KV of the decode), which keeps the ceiling an
//! upper bound.
//!
//! Prefill (compute bound): a computed token costs 2 x params FLOPs of matmuls plus causal
//! attention. Token p attends to p earlier tokens: QK^T and AV cost 2 x 2 x p x width FLOPs per
//! layer (width = heads x head dim). Averaged over computed positions k..c (k cached tokens, c the
//! context) that is 2 x n_layer x width x (k + c) per token, i.e. 2 x n_layer x context x n_embd for a
//! cold prompt (the causal half of 4 x n_layer x context x width). Measured on an H200 at 32K, 8B shape,
//! 2 x 32 x 32784 x 4096 x 14.3k tok/s = 123 TFLOP/s, as measured. Only the tokens the server had to
//! compute count toward a prefill rate; a "cold" rate above the ceiling was served from a cache.

mod error;
pub mod gguf;
pub mod hardware;
pub mod model;

use serde::{Deserialize, Serialize};

pub use error::{PhysicsError, PhysicsInput};
pub use hardware::{Profile, suggest_hardware};
pub use model::ModelProfile;
use ttft_model::record::{CacheState, CellKey, Measurement, PhysicsRecord};

/// The hardware numbers ceilings are computed from (a table profile or numbers given by hand).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hardware {
    /// Profile name, or "custom" for a bandwidth and compute given alone.
    pub name: String,
    pub bandwidth_gbps: f64,
    pub tflops: Option<f64>,
}

/// Far above any device (a B200 has 8,000 GB/s and 2,250 TFLOP/s): a larger figure is a typo.
pub const MAX_BANDWIDTH_GBPS: f64 = 1e6;
pub const MAX_TFLOPS: f64 = 1e6;

/// A hardware profile by name, its bandwidth and compute optionally overridden; or the numbers alone.
/// Ok(None) when nothing was given.
pub fn resolve_hardware(
    name: Option<&str>,
    bandwidth_gbps: Option<f64>,
    tflops: Option<f64>,
) -> Result<Option<Hardware>, PhysicsError> {
    for (input, v, max) in [
        (PhysicsInput::BandwidthGbps, bandwidth_gbps, MAX_BANDWIDTH_GBPS),
        (PhysicsInput::Tflops, tflops, MAX_TFLOPS),
    ] {
        if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(PhysicsError::DeviceNotPositive { input, value: v });
        }
        if let Some(v) = v.filter(|v| *v > max) {
            return Err(PhysicsError::BeyondDevice { input, value: v, max });
        }
    }
    match name {
        Some(n) => {
            let p = hardware::lookup(n)?;
            Ok(Some(Hardware {
                name: p.name.clone(),
                bandwidth_gbps: bandwidth_gbps.unwrap_or(p.bandwidth_gbps),
                tflops: Some(tflops.unwrap_or(p.tflops_fp16)),
            }))
        }
        None => Ok(bandwidth_gbps.map(|bw| Hardware { name: "custom".into(), bandwidth_gbps: bw, tflops })),
    }
}

/// A model from a model file and/or its weight bytes and parameter count (the numbers override the
/// file).
/// Ok(None) when nothing was given.
pub fn resolve_model(
    model_bytes: Option<&str>,
    params: Option<&str>,
    model_file: Option<&std::path::Path>,
) -> Result<Option<ModelProfile>, PhysicsError> {
    let mut profile = match model_file {
        Some(path) => Some(model::from_file(path)?),
        None => None,
    };
    if model_bytes.is_none() && params.is_none() {
        return match profile {
            Some(p) if p.weight_bytes <= 0.0 => Err(PhysicsError::NoWeightSize { file: p.source }),
            other => Ok(other),
        };
    }
    let p = profile.get_or_insert_with(|| ModelProfile { name: "flags".into(), ..Default::default() });
    if let Some(b) = model_bytes {
        // The bytes given are those read per token (active bytes for MoE).
        p.weight_bytes = model::parse_bytes(PhysicsInput::ModelBytes, b)?;
        p.active_weight_bytes = None;
        p.source = format!("{} + flags", p.source);
    }
    if let Some(n) = params {
        p.params = model::parse_count(PhysicsInput::Params, n)?;
        p.active_params = None;
    }
    if p.weight_bytes <= 0.0 {
        return Err(PhysicsError::ParamsWithoutBytes);
    }
    if p.params <= 0.0 {
        return Err(PhysicsError::BytesWithoutParams);
    }
    Ok(profile)
}

/// Per-stream decode ceiling in tok/s at `context_tokens`, for `batch` streams decoding together.
pub fn decode_ceiling_tps(hw: &Hardware, model: &ModelProfile, context_tokens: u64, batch: u32) -> f64 {
    let kv = model.kv_bytes_per_token.unwrap_or(0.0) * context_tokens as f64 * f64::from(batch.max(1));
    hw.bandwidth_gbps * 1e9 / (model.decode_bytes() + kv)
}

/// FLOPs per computed prompt token when `cached` of `context` tokens came from a cache.
pub fn prefill_flops_per_token(model: &ModelProfile, cached: u64, context: u64) -> f64 {
    let attention = match (model.n_layer, model.attention_width()) {
        (Some(l), Some(w)) => 2.0 * f64::from(l) * w * (cached + context) as f64,
        _ => 0.0, // unknown shape: leaving attention out only raises the ceiling
    };
    2.0 * model.prefill_params() + attention
}

/// Prefill ceiling in computed tok/s; None without a compute figure.
pub fn prefill_ceiling_tps(hw: &Hardware, model: &ModelProfile, cached: u64, context: u64) -> Option<f64> {
    Some(hw.tflops? * 1e12 / prefill_flops_per_token(model, cached, context))
}

/// Prompt tokens the server had to compute: its own count when it gives one, else input minus
/// cached; a cold row without evidence computed everything. None for warm/hot rows without evidence
/// (what they computed is unknown) and without usage.
pub fn computed_prompt_tokens(m: &Measurement) -> Option<u64> {
    let input = m.input_tokens.filter(|&n| n > 0)?;
    let ev = m.cache_evidence.as_ref();
    if let Some(p) = ev.and_then(|e| e.prompt_evaluated_tokens) {
        return Some(p);
    }
    match m.cached_tokens.or(ev.and_then(|e| e.cached_tokens)) {
        Some(c) => Some(input.saturating_sub(c)),
        None if m.cell.cache_state == CacheState::Cold => Some(input),
        None => None,
    }
}

/// Measured prefill rate over computed tokens only.
pub fn computed_prefill_tps(m: &Measurement) -> Option<f64> {
    let ttft_s = m.ttft_ms.filter(|t| *t > 0.0)? / 1000.0;
    Some(computed_prompt_tokens(m)? as f64 / ttft_s)
}

/// What the ceilings of a measurement depend on (`Rates::of`): a verb that holds many records
/// keeps this beside them instead of the records, and judges them once the hardware is known.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rates {
    /// The context the decode reads: the server's prompt count, else the cell's nominal one.
    pub context_tokens: u64,
    pub batch_size: u32,
    /// `computed_prompt_tokens`.
    pub computed_prompt_tokens: Option<u64>,
    pub decode_tps: Option<f64>,
    /// `computed_prefill_tps`.
    pub computed_prefill_tps: Option<f64>,
}

impl Rates {
    pub fn of(m: &Measurement) -> Rates {
        Rates {
            context_tokens: Rates::context_of(m.input_tokens, &m.cell),
            batch_size: m.cell.batch_size,
            computed_prompt_tokens: computed_prompt_tokens(m),
            decode_tps: m.decode_tps,
            computed_prefill_tps: computed_prefill_tps(m),
        }
    }

    /// The context a measurement's decode reads: the server's prompt count (`input_tokens`), else
    /// its cell's nominal context.
    pub fn context_of(input_tokens: Option<u64>, cell: &CellKey) -> u64 {
        input_tokens.filter(|&n| n > 0).unwrap_or(u64::from(cell.context_tokens))
    }

    /// The ceilings at these rates, and the measured fraction of each.
    pub fn ceilings(&self, hw: &Hardware, model: &ModelProfile) -> PhysicsRecord {
        let context = self.context_tokens;
        let decode_ceiling = decode_ceiling_tps(hw, model, context, self.batch_size);
        let prefill_ceiling = self
            .computed_prompt_tokens
            .and_then(|c| prefill_ceiling_tps(hw, model, context.saturating_sub(c), context));
        PhysicsRecord {
            decode_ceiling_tps: Some(decode_ceiling),
            decode_fraction: self.decode_tps.map(|d| d / decode_ceiling),
            prefill_ceiling_tps: prefill_ceiling,
            prefill_fraction: self.computed_prefill_tps.zip(prefill_ceiling).map(|(r, c)| r / c),
        }
    }
}

/// Ceilings of one measurement, and the measured fraction of each.
pub fn ceilings(hw: &Hardware, model: &ModelProfile, m: &Measurement) -> PhysicsRecord {
    Rates::of(m).ceilings(hw, model)
}

/// Time to read the KV cache of `context_tokens` from storage, in ms; None without KV bytes.
pub fn expected_reload_ms(model: &ModelProfile, context_tokens: u64, storage_gbps: f64) -> Option<f64> {
    let kv = model.kv_bytes_per_token? * context_tokens as f64;
    Some(kv / (storage_gbps * 1e9) * 1000.0)
}

#[cfg(test)]
mod tests;

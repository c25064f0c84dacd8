//! Model profiles: the bytes read and FLOPs spent per token, from flags, a GGUF header, an HF
//! config.json, or the built-in table of the origin's models (`models.toml`, where the numbers are
//! explained). Sizes are parsed here, not with bytesize, which truncates "8.03GB" to 8,029,999,999
//! bytes (`parse_bytes`).

use std::path::Path;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::error::{PhysicsError, PhysicsInput};
use super::gguf::GgufHeader;
use ttft_model::input_file::{self, Limit};

const BUILTIN: &str = include_str!("models.toml");

/// What the ceilings need to know about a model. Mixture-of-experts models read only the active
/// experts per decoded token, so decode uses `active_*`; for dense models they equal the totals.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelProfile {
    pub name: String,
    /// Where the numbers came from: "flags", "builtin", a file path.
    #[serde(default)]
    pub source: String,
    pub weight_bytes: f64,
    #[serde(default)]
    pub active_weight_bytes: Option<f64>,
    pub params: f64,
    #[serde(default)]
    pub active_params: Option<f64>,
    pub n_layer: Option<u32>,
    pub n_embd: Option<u32>,
    pub n_head: Option<u32>,
    pub n_head_kv: Option<u32>,
    pub head_dim: Option<u32>,
    pub context_length: Option<u64>,
    pub expert_count: Option<u32>,
    pub expert_used_count: Option<u32>,
    /// K and V of one token over all layers; None where the cache layout is not known.
    pub kv_bytes_per_token: Option<f64>,
    /// Parameters of the LM head (output projection). Servers compute logits for the last prompt
    /// position only, so prefill does not pay them per token. None where unknown.
    #[serde(default)]
    pub lm_head_params: Option<f64>,
}

impl ModelProfile {
    /// Weight bytes read per decoded token.
    pub fn decode_bytes(&self) -> f64 {
        self.active_weight_bytes.unwrap_or(self.weight_bytes)
    }

    /// Parameters that take part in one token's matmuls.
    pub fn compute_params(&self) -> f64 {
        self.active_params.unwrap_or(self.params)
    }

    /// Parameters every PROMPT token passes through: the LM head is left out when known (it runs
    /// for the last position only). For a 8B model that is ~2%; for a tiny test model, most of it —
    /// counting it would put the ceiling below what an honest server does.
    pub fn prefill_params(&self) -> f64 {
        self.compute_params() - self.lm_head_params.unwrap_or(0.0)
    }

    /// Width of the attention (query heads x head dim), which is n_embd for llama-shaped models.
    pub fn attention_width(&self) -> Option<f64> {
        match (self.n_head, self.head_dim) {
            (Some(h), Some(d)) => Some(f64::from(h) * f64::from(d)),
            _ => self.n_embd.map(f64::from),
        }
    }
}

/// 2 (K and V) x layers x KV heads x head dim x bytes per element (2 for an f16 cache).
pub fn kv_bytes_per_token(n_layer: u32, n_head_kv: u32, head_dim: u32, bytes_per_element: f64) -> f64 {
    2.0 * f64::from(n_layer) * f64::from(n_head_kv) * f64::from(head_dim) * bytes_per_element
}

#[derive(Deserialize)]
struct Table {
    model: Vec<ModelProfile>,
}

pub fn builtin() -> &'static [ModelProfile] {
    static MODELS: OnceLock<Vec<ModelProfile>> = OnceLock::new();
    MODELS.get_or_init(|| {
        let table: Table = toml::from_str(BUILTIN).expect("embedded models.toml is valid (unit-tested)");
        table.model.into_iter().map(|m| ModelProfile { source: "builtin".into(), ..m }).collect()
    })
}

/// The built-in profile of a model name as records carry it (exact, or the same final path part).
pub fn find_builtin(model: &str) -> Option<&'static ModelProfile> {
    let short = |s: &str| s.rsplit('/').next().unwrap_or(s).to_ascii_lowercase();
    builtin().iter().find(|m| m.name == model || short(&m.name) == short(model))
}

/// Byte sizes: "8.03GB", "889MB", "14.48 GB", "8GiB" (GB = 10^9, GiB = 2^30), or a plain number.
/// (Parsed here rather than with a size crate: bytesize 2.7 truncates through an integer and
/// reads "8.03GB" as 8,029,999,999 bytes, so the model would not be the one given.)
pub fn parse_bytes(input: PhysicsInput, text: &str) -> Result<f64, PhysicsError> {
    let t = text.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (digits, unit) = (t[..split].trim(), t[split..].trim().to_ascii_lowercase());
    let scale = match unit.as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(PhysicsError::UnknownUnit { input, text: text.into(), unit });
        }
    };
    let v: f64 = digits.parse().map_err(|_| PhysicsError::NotASize { input, text: text.into() })?;
    positive(input, text, (v * scale).round())
}

/// Counts: "12B", "840M", "2.4B", "7.24e9", "1.5T", "500K" (decimal multipliers).
pub fn parse_count(input: PhysicsInput, text: &str) -> Result<f64, PhysicsError> {
    let t = text.trim();
    let (digits, scale) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let scale = match c.to_ascii_uppercase() {
                'K' => 1e3,
                'M' => 1e6,
                'B' | 'G' => 1e9,
                'T' => 1e12,
                _ => {
                    return Err(PhysicsError::UnknownSuffix { input, text: text.into(), suffix: c });
                }
            };
            (&t[..i], scale)
        }
        _ => (t, 1.0),
    };
    let v: f64 = digits.trim().parse().map_err(|_| PhysicsError::NotACount { input, text: text.into() })?;
    positive(input, text, v * scale)
}

/// No model has a quadrillion bytes or parameters (the largest today are a few trillion): a value
/// above this is a typo, and would only make every ceiling meaningless.
pub const MAX_SIZE: f64 = 1e15;

fn positive(input: PhysicsInput, text: &str, v: f64) -> Result<f64, PhysicsError> {
    if !(v.is_finite() && v > 0.0) {
        return Err(PhysicsError::SizeNotPositive { input, text: text.into() });
    }
    if v > MAX_SIZE {
        return Err(PhysicsError::BeyondModel { input, text: text.into(), max: MAX_SIZE });
    }
    Ok(v)
}

/// Reads a profile from a GGUF file or an HF config.json (chosen by content, not by name).
pub fn from_file(path: &Path) -> Result<ModelProfile, PhysicsError> {
    // A regular file only, read no further than its kind needs (input_file): a FIFO or a device
    // would be waited on or read without end.
    let unreadable = |source| PhysicsError::ModelFileUnreadable { path: path.to_path_buf(), source };
    let mut file = input_file::open_file(path).map_err(unreadable)?;
    let mut magic = [0u8; 4];
    let head = std::io::Read::read_exact(&mut file, &mut magic);
    if head.is_ok() && &magic == b"GGUF" {
        let header = super::gguf::read_file(path, file)?;
        let mut profile = from_gguf(&header)?;
        profile.source = path.display().to_string();
        return Ok(profile);
    }
    let text = input_file::read_text(path, Limit::MODEL_CONFIG).map_err(unreadable)?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|source| PhysicsError::ModelFileFormat { path: path.to_path_buf(), source })?;
    let index = path.with_file_name("model.safetensors.index.json");
    let total_size = input_file::read_text(&index, Limit::MODEL_CONFIG)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["metadata"]["total_size"].as_f64());
    let mut profile = from_hf_config(&json, total_size)?;
    profile.source = path.display().to_string();
    Ok(profile)
}

/// Derives a profile from a GGUF header: weights and params from the tensor infos, shape from
/// `{arch}.*` keys. Expert tensors (`*_exps`) hold every expert; only `expert_used_count` of
/// `expert_count` are read per token. The token embedding is only indexed (one row per token), so
/// it counts neither as bytes read nor as matmul params unless the output layer reuses it.
pub fn from_gguf(h: &GgufHeader) -> Result<ModelProfile, PhysicsError> {
    let arch = h.string("general.architecture").ok_or(PhysicsError::NoArchitecture)?.to_string();
    let key = |k: &str| format!("{arch}.{k}");
    let u32_of = |k: &str| h.uint(&key(k)).and_then(|v| u32::try_from(v).ok());
    let tied = !h.tensors.iter().any(|t| t.name == "output.weight");
    let lm_head_name = if tied { "token_embd.weight" } else { "output.weight" };
    let lm_head_params = h.tensors.iter().find(|t| t.name == lm_head_name).map(|t| t.n_elements() as f64);
    let (mut bytes, mut params, mut expert_bytes, mut expert_params, mut embd_bytes, mut embd_params) =
        (0f64, 0f64, 0f64, 0f64, 0f64, 0f64);
    for t in &h.tensors {
        let (b, p) = (t.n_bytes()? as f64, t.n_elements() as f64);
        bytes += b;
        params += p;
        if t.name.contains("_exps") {
            expert_bytes += b;
            expert_params += p;
        }
        if t.name == "token_embd.weight" && !tied {
            embd_bytes += b;
            embd_params += p;
        }
    }
    if h.tensors.is_empty() {
        return Err(PhysicsError::NoTensors);
    }
    let (expert_count, expert_used_count) = (u32_of("expert_count"), u32_of("expert_used_count"));
    let inactive = match (expert_count, expert_used_count) {
        (Some(n), Some(k)) if n > 0 && k <= n => 1.0 - f64::from(k) / f64::from(n),
        _ => 0.0,
    };
    let n_layer = u32_of("block_count");
    let n_embd = u32_of("embedding_length");
    let n_head = u32_of("attention.head_count");
    let head_dim = u32_of("attention.key_length").or(match (n_embd, n_head) {
        (Some(e), Some(n)) if n > 0 => Some(e / n),
        _ => None,
    });
    // head_count_kv is a number, or one number per layer (e.g. models mixing layer kinds).
    let kv_heads: Option<Vec<u64>> = match h.metadata.get(&key("attention.head_count_kv")) {
        Some(serde_json::Value::Array(items)) => items.iter().map(|v| v.as_u64()).collect(),
        Some(v) => v.as_u64().and_then(|n| n_layer.map(|l| vec![n; l as usize])),
        None => n_head.and_then(|n| n_layer.map(|l| vec![u64::from(n); l as usize])),
    };
    let n_head_kv = kv_heads.as_ref().and_then(|v| v.iter().max()).and_then(|&n| u32::try_from(n).ok());
    let kv_bytes_per_token = match (&kv_heads, head_dim) {
        (Some(heads), Some(d)) => Some(2.0 * heads.iter().sum::<u64>() as f64 * f64::from(d) * 2.0),
        _ => None,
    };
    Ok(ModelProfile {
        name: h.string("general.name").unwrap_or(&arch).to_string(),
        source: "gguf".into(),
        weight_bytes: bytes,
        active_weight_bytes: Some(bytes - embd_bytes - expert_bytes * inactive),
        params,
        active_params: Some(params - embd_params - expert_params * inactive),
        n_layer,
        n_embd,
        n_head,
        n_head_kv,
        head_dim,
        context_length: h.uint(&key("context_length")),
        expert_count,
        expert_used_count,
        kv_bytes_per_token,
        lm_head_params,
    })
}

/// Derives a profile from an HF config.json. Weight bytes come from the safetensors index
/// (`metadata.total_size`) when given; params are then total bytes over the dtype's size. Without
/// it, the model must be given with --model-bytes/--params (no guessing from the architecture).
pub fn from_hf_config(c: &serde_json::Value, total_size: Option<f64>) -> Result<ModelProfile, PhysicsError> {
    let u = |k: &str| c.get(k).and_then(serde_json::Value::as_u64).and_then(|v| u32::try_from(v).ok());
    let n_layer = u("num_hidden_layers");
    let n_embd = u("hidden_size");
    let n_head = u("num_attention_heads");
    let n_head_kv = u("num_key_value_heads").or(n_head);
    let head_dim = u("head_dim").or(match (n_embd, n_head) {
        (Some(e), Some(n)) if n > 0 => Some(e / n),
        _ => None,
    });
    let expert_count = u("num_local_experts").or(u("n_routed_experts")).or(u("num_experts"));
    let expert_used_count = u("num_experts_per_tok");
    let dtype_bytes = match c.get("torch_dtype").or(c.get("dtype")).and_then(|v| v.as_str()) {
        Some("float32") => 4.0,
        _ => 2.0,
    };
    let kv_bytes_per_token = match (n_layer, n_head_kv, head_dim) {
        (Some(l), Some(k), Some(d)) => Some(kv_bytes_per_token(l, k, d, 2.0)),
        _ => None,
    };
    let weight_bytes = total_size.unwrap_or(0.0);
    Ok(ModelProfile {
        name: c.get("_name_or_path").and_then(|v| v.as_str()).unwrap_or("config.json").to_string(),
        source: "config.json".into(),
        weight_bytes,
        params: weight_bytes / dtype_bytes,
        n_layer,
        n_embd,
        n_head,
        n_head_kv,
        head_dim,
        context_length: c.get("max_position_embeddings").and_then(|v| v.as_u64()),
        expert_count,
        expert_used_count,
        kv_bytes_per_token,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::super::gguf::{self, testing::V};
    use super::*;

    #[test]
    fn sizes_and_counts_parse() {
        assert_eq!(parse_bytes(PhysicsInput::ModelBytes, "8.03GB").ok(), Some(8.03e9));
        assert_eq!(parse_bytes(PhysicsInput::ModelBytes, "889MB").ok(), Some(889e6));
        assert_eq!(parse_bytes(PhysicsInput::ModelBytes, "1GiB").ok(), Some(1073741824.0));
        assert_eq!(parse_bytes(PhysicsInput::ModelBytes, "14480000000").ok(), Some(14.48e9));
        assert!(
            parse_bytes(PhysicsInput::ModelBytes, "lots").unwrap_err().to_string().contains("model bytes")
        );
        assert_eq!(parse_count(PhysicsInput::Params, "12B").ok(), Some(12e9));
        assert_eq!(parse_count(PhysicsInput::Params, "840M").ok(), Some(840e6));
        assert_eq!(parse_count(PhysicsInput::Params, "2.4B").ok(), Some(2.4e9));
        assert_eq!(parse_count(PhysicsInput::Params, "7.24e9").ok(), Some(7.24e9));
        assert!(parse_count(PhysicsInput::Params, "12X").unwrap_err().to_string().contains("unknown suffix"));
        assert!(parse_count(PhysicsInput::Params, "0B").is_err());
        for absurd in ["1e400", "inf", "NaN", "2e15", "-1"] {
            let err = parse_count(PhysicsInput::Params, absurd).unwrap_err().to_string();
            assert!(err.starts_with("parameter count: "), "{err}");
            let err = parse_bytes(PhysicsInput::ModelBytes, absurd).unwrap_err().to_string();
            assert!(err.starts_with("model bytes: "), "{err}");
        }
        assert!(
            parse_bytes(PhysicsInput::ModelBytes, "2000TB")
                .unwrap_err()
                .to_string()
                .contains("beyond any model")
        );
    }

    #[test]
    fn builtin_models_and_their_moe_numbers() {
        let g = find_builtin("mlx-community/gemma-3-12b-it-4bit").unwrap();
        assert_eq!((g.decode_bytes(), g.compute_params()), (8.03e9, 12e9));
        let d = find_builtin("DeepSeek-Coder-V2-Lite-Instruct-4bit-mlx").unwrap();
        assert!(d.decode_bytes() < 0.2 * d.weight_bytes, "decode reads only the active experts");
        assert_eq!(find_builtin("some/other-model"), None);
    }

    #[test]
    fn gguf_profile_of_a_small_moe_model() {
        // 2 layers, 64 wide, 4 heads (dim 16), 2 KV heads, 8 experts of which 2 used, untied output.
        let bytes = gguf::testing::write(
            &[
                ("general.architecture", V::Str("llama")),
                ("llama.block_count", V::U32(2)),
                ("llama.embedding_length", V::U32(64)),
                ("llama.attention.head_count", V::U32(4)),
                ("llama.attention.head_count_kv", V::U32(2)),
                ("llama.context_length", V::U32(4096)),
                ("llama.expert_count", V::U32(8)),
                ("llama.expert_used_count", V::U32(2)),
            ],
            &[
                ("token_embd.weight", &[64, 1000], 1),
                ("output.weight", &[64, 1000], 1),
                ("blk.0.ffn_up_exps.weight", &[64, 128, 8], 0),
                ("blk.0.attn_q.weight", &[64, 64], 8),
            ],
        );
        let h = gguf::read(&bytes[..]).unwrap();
        let m = from_gguf(&h).unwrap();
        let (embd, out, exps, q) = (128_000.0, 128_000.0, 64.0 * 128.0 * 8.0 * 4.0, 128.0 * 34.0);
        assert_eq!(m.weight_bytes, embd + out + exps + q);
        assert_eq!(m.active_weight_bytes, Some(out + exps * 0.25 + q));
        assert_eq!(m.params, 64_000.0 * 2.0 + 65536.0 + 4096.0);
        assert_eq!(m.active_params, Some(64_000.0 + 65536.0 * 0.25 + 4096.0));
        assert_eq!((m.head_dim, m.n_head_kv, m.context_length), (Some(16), Some(2), Some(4096)));
        // 2 (K,V) x 2 layers x 2 kv heads x 16 dim x 2 bytes
        assert_eq!(m.kv_bytes_per_token, Some(256.0));
    }

    #[test]
    fn hf_config_gives_the_8b_shape_measured_on_the_h200() {
        let c = serde_json::json!({"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "max_position_embeddings": 32768, "torch_dtype": "float16"});
        let m = from_hf_config(&c, Some(14.48e9)).unwrap();
        assert_eq!(m.kv_bytes_per_token, Some(131_072.0), "the H200 slot files: 131,072 bytes per token");
        assert_eq!(m.params, 7.24e9);
        assert_eq!(m.head_dim, Some(128));
    }
}

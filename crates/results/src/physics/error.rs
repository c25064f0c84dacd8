//! Why a hardware or model description cannot be used. Each message names the flag or file it came
//! from, because these errors reach the user as exit-2 usage errors.

use std::path::PathBuf;

use super::gguf::GgufError;

#[derive(Debug, thiserror::Error)]
pub enum PhysicsError {
    #[error("{flag} {value} must be more than 0")]
    DeviceNotPositive { flag: &'static str, value: f64 },
    #[error("{flag} {value} is beyond any device (at most {max})")]
    BeyondDevice { flag: &'static str, value: f64, max: f64 },
    #[error(
        "--hardware {name:?} is not a known profile; known: {known} (or give --bandwidth-gbps and --tflops)"
    )]
    UnknownHardware { name: String, known: String },
    #[error("{flag}: {text:?}: unknown unit {unit:?} (examples: 8.03GB, 889MB, 14.48GiB)")]
    UnknownUnit { flag: String, text: String, unit: String },
    #[error("{flag}: {text:?} is not a size (examples: 8.03GB, 889MB, 14.48GiB)")]
    NotASize { flag: String, text: String },
    #[error("{flag}: {text:?}: unknown suffix {suffix:?} (use K, M, B or T)")]
    UnknownSuffix { flag: String, text: String, suffix: char },
    #[error("{flag}: {text:?} is not a count (examples: 12B, 840M, 2.4B)")]
    NotACount { flag: String, text: String },
    #[error("{flag}: {text:?} must be more than 0")]
    SizeNotPositive { flag: String, text: String },
    #[error("{flag}: {text:?} is beyond any model (at most {max:e})")]
    BeyondModel { flag: String, text: String, max: f64 },
    #[error("--model-file {}: {source}", path.display())]
    ModelFileUnreadable { path: PathBuf, source: ttft_model::input_file::ReadError },
    #[error("--model-file {}: neither GGUF nor JSON: {source}", path.display())]
    ModelFileFormat { path: PathBuf, source: serde_json::Error },
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("GGUF: no general.architecture key")]
    NoArchitecture,
    #[error("GGUF: the file lists no tensors")]
    NoTensors,
    #[error(
        "--model-file {file}: the file does not say how large the weights are; add --model-bytes and --params"
    )]
    NoWeightSize { file: String },
    #[error("--params was given without --model-bytes (decode ceilings need the weight bytes)")]
    ParamsWithoutBytes,
    #[error("--model-bytes was given without --params (prefill ceilings need the parameter count)")]
    BytesWithoutParams,
}

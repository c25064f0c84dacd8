//! Why a hardware or model description cannot be used. This crate knows no flags: each error says
//! which input it is about (`PhysicsInput`), and whoever owns the names the user gave those inputs
//! (the root crate's flags) renders the message with them through `describe`. Alone (`Display`),
//! a message names the quantity in words.

use std::fmt;
use std::path::PathBuf;

use super::gguf::GgufError;

/// An input the ceilings are computed from, as the user can give it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhysicsInput {
    /// A hardware profile's name.
    Hardware,
    /// Memory bandwidth in GB/s.
    BandwidthGbps,
    /// Compute in TFLOP/s.
    Tflops,
    /// A GGUF or HF config.json file describing the model.
    ModelFile,
    /// The bytes of weights read per decoded token.
    ModelBytes,
    /// The parameter count.
    Params,
}

impl PhysicsInput {
    /// The quantity in words, for a message without a caller to name it.
    pub fn quantity(self) -> &'static str {
        match self {
            PhysicsInput::Hardware => "hardware",
            PhysicsInput::BandwidthGbps => "bandwidth (GB/s)",
            PhysicsInput::Tflops => "compute (TFLOP/s)",
            PhysicsInput::ModelFile => "model file",
            PhysicsInput::ModelBytes => "model bytes",
            PhysicsInput::Params => "parameter count",
        }
    }
}

#[derive(Debug)]
pub enum PhysicsError {
    DeviceNotPositive { input: PhysicsInput, value: f64 },
    BeyondDevice { input: PhysicsInput, value: f64, max: f64 },
    UnknownHardware { name: String, known: String },
    UnknownUnit { input: PhysicsInput, text: String, unit: String },
    NotASize { input: PhysicsInput, text: String },
    UnknownSuffix { input: PhysicsInput, text: String, suffix: char },
    NotACount { input: PhysicsInput, text: String },
    SizeNotPositive { input: PhysicsInput, text: String },
    BeyondModel { input: PhysicsInput, text: String, max: f64 },
    ModelFileUnreadable { path: PathBuf, source: ttft_model::input_file::ReadError },
    ModelFileFormat { path: PathBuf, source: serde_json::Error },
    Gguf(GgufError),
    NoArchitecture,
    NoTensors,
    NoWeightSize { file: String },
    ParamsWithoutBytes,
    BytesWithoutParams,
}

impl PhysicsError {
    /// The message, each input named by `name` (the root crate passes the flag that gave it).
    pub fn describe(&self, name: &dyn Fn(PhysicsInput) -> &'static str) -> String {
        use PhysicsInput::{BandwidthGbps, Hardware, ModelBytes, ModelFile, Params, Tflops};
        match self {
            PhysicsError::DeviceNotPositive { input, value } => {
                format!("{} {value} must be more than 0", name(*input))
            }
            PhysicsError::BeyondDevice { input, value, max } => {
                format!("{} {value} is beyond any device (at most {max})", name(*input))
            }
            PhysicsError::UnknownHardware { name: given, known } => format!(
                "{} {given:?} is not a known profile; known: {known} (or give {} and {})",
                name(Hardware),
                name(BandwidthGbps),
                name(Tflops)
            ),
            PhysicsError::UnknownUnit { input, text, unit } => {
                format!(
                    "{}: {text:?}: unknown unit {unit:?} (examples: 8.03GB, 889MB, 14.48GiB)",
                    name(*input)
                )
            }
            PhysicsError::NotASize { input, text } => {
                format!("{}: {text:?} is not a size (examples: 8.03GB, 889MB, 14.48GiB)", name(*input))
            }
            PhysicsError::UnknownSuffix { input, text, suffix } => {
                format!("{}: {text:?}: unknown suffix {suffix:?} (use K, M, B or T)", name(*input))
            }
            PhysicsError::NotACount { input, text } => {
                format!("{}: {text:?} is not a count (examples: 12B, 840M, 2.4B)", name(*input))
            }
            PhysicsError::SizeNotPositive { input, text } => {
                format!("{}: {text:?} must be more than 0", name(*input))
            }
            PhysicsError::BeyondModel { input, text, max } => {
                format!("{}: {text:?} is beyond any model (at most {max:e})", name(*input))
            }
            PhysicsError::ModelFileUnreadable { path, source } => {
                format!("{} {}: {source}", name(ModelFile), path.display())
            }
            PhysicsError::ModelFileFormat { path, source } => {
                format!("{} {}: neither GGUF nor JSON: {source}", name(ModelFile), path.display())
            }
            PhysicsError::Gguf(e) => e.to_string(),
            PhysicsError::NoArchitecture => "GGUF: no general.architecture key".into(),
            PhysicsError::NoTensors => "GGUF: the file lists no tensors".into(),
            PhysicsError::NoWeightSize { file } => format!(
                "{} {file}: the file does not say how large the weights are; add {} and {}",
                name(ModelFile),
                name(ModelBytes),
                name(Params)
            ),
            PhysicsError::ParamsWithoutBytes => format!(
                "{} was given without {} (decode ceilings need the weight bytes)",
                name(Params),
                name(ModelBytes)
            ),
            PhysicsError::BytesWithoutParams => format!(
                "{} was given without {} (prefill ceilings need the parameter count)",
                name(ModelBytes),
                name(Params)
            ),
        }
    }
}

impl fmt::Display for PhysicsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe(&PhysicsInput::quantity))
    }
}

impl std::error::Error for PhysicsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PhysicsError::ModelFileUnreadable { source, .. } => Some(source),
            PhysicsError::ModelFileFormat { source, .. } => Some(source),
            // The GGUF error's message is this one's (it was transparent), so it is no cause of its own.
            PhysicsError::Gguf(e) => e.source(),
            _ => None,
        }
    }
}

impl From<GgufError> for PhysicsError {
    fn from(e: GgufError) -> PhysicsError {
        PhysicsError::Gguf(e)
    }
}

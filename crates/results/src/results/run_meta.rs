//! A source's metadata read back as a type: a sweep's `run.json`, or the metadata of an origin file.
//!
//! merge (settings that must agree between sources), verify (the physics fallback, the host) and the
//! provenance audit read these fields. Reading them by string paths (`meta["config"]["thermal"]`)
//! meant a renamed field silently emptied their answers. Here a renamed field is an error at load
//! time (exit 2, `file:line`) where the view can tell: the thermal policy's fields are required, the
//! physics inputs and the harness accept no unknown field. Sections may be absent (hand-written or
//! partial run.json files are read), but a section that is present must have its expected shape.
//!
//! `meta` builds each of these views from the struct it writes, naming every field of both, so a
//! field renamed on either side fails the build (and a test holds the serde names to the same).

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Number, Value};

pub use super::origin::ORIGIN_FORMAT;

/// One source's metadata, verbatim (copied into canonical files as is) and typed.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceMeta {
    pub raw: Value,
    pub view: RunMetaView,
}

#[derive(Clone, Debug, PartialEq)]
pub enum RunMetaView {
    /// A `run.json` written by `bench sweep`.
    Ours(Box<OurMeta>),
    /// The metadata of an origin benchmark result file.
    Origin(Box<OriginMeta>),
}

/// The parts of `meta::RunMeta` the reading verbs use.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct OurMeta {
    pub run_id: Option<String>,
    pub harness: Option<HarnessView>,
    pub config: Option<ConfigView>,
    pub server: Option<ServerView>,
    pub host: Option<HostView>,
    /// Every crash of a server the run started (`--server-cmd`).
    #[serde(default)]
    pub server_crashes: Vec<ServerCrashView>,
    /// The profiles the sweep resolved (`meta::PhysicsProfiles`).
    pub physics: Option<ProfilesView>,
}

/// `meta::PhysicsProfiles` as written: the model profile the sweep used, read at sweep time from
/// the GGUF or config it named (which may not exist where the run is verified). Kept as the JSON
/// it is: the physics that reads it sits beside results, not below it, so verify types it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ProfilesView {
    pub model: Option<Value>,
}

/// `supervise::ServerCrash` as written: its required fields, so a rename fails the load.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ServerCrashView {
    pub at: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub in_flight: String,
    pub restarted: bool,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarnessView {
    pub name: String,
    pub version: String,
    pub git_sha: String,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ConfigView {
    /// The server URL as written (credentials already removed by the sweep).
    pub server: Option<String>,
    /// `--server-cmd`: the command bench started the server with (`{port}` not filled in).
    pub server_cmd: Option<String>,
    pub api: Option<Value>,
    pub preset: Option<String>,
    pub model: Option<String>,
    pub output_tokens: Option<u32>,
    pub thermal: Option<ThermalView>,
    pub physics: Option<PhysicsView>,
    /// `--insecure`: the server's TLS certificate was not verified.
    #[serde(default)]
    pub insecure: bool,
    /// `--turns`: the turn hot measures (written only when it is not `DEFAULT_TURNS`).
    #[serde(default = "default_turns")]
    pub turns: u32,
    /// `--temperature` of every request (0, greedy, unless given).
    #[serde(default)]
    pub temperature: f64,
    /// `--extra-body`: merged into every request body (written only when given).
    #[serde(default)]
    pub extra_body: serde_json::Map<String, Value>,
}

/// The turn hot measures unless `--turns` says otherwise (run.json then states none).
pub const DEFAULT_TURNS: u32 = 3;

fn default_turns() -> u32 {
    DEFAULT_TURNS
}

/// `config::ThermalPolicy` as written (`{"policy": "probe", "tolerance": 0.2, ...}`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "policy", rename_all = "snake_case")]
pub enum ThermalView {
    Probe { tolerance: f64 },
    Fixed { cooldown_s: f64 },
    Off,
}

/// `config::PhysicsInputs` as written: every field optional, so only refusing unknown fields can
/// tell a renamed one from an absent one.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhysicsView {
    pub hardware: Option<String>,
    pub bandwidth_gbps: Option<f64>,
    pub tflops: Option<f64>,
    pub model_bytes: Option<String>,
    pub params: Option<String>,
    pub model_file: Option<PathBuf>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ServerView {
    /// llama.cpp's /props, verbatim (a server's own document: no shape to hold it to).
    pub props: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct HostView {
    pub cpu_brand: Option<String>,
    pub arch: Option<String>,
}

/// What `origin::import` keeps of an origin file: `{format, metadata, model_id, server_env, ...}`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct OriginMeta {
    pub metadata: OriginMetadata,
    pub model_id: Option<String>,
    pub server_env: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct OriginMetadata {
    pub benchmark: Option<String>,
    pub git_sha: Option<String>,
    pub machine: Option<Value>,
    #[serde(default)]
    pub config: OriginConfig,
}

/// Numbers kept as written (`Number`), so settings print exactly as the file states them.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct OriginConfig {
    pub throttle_tps_tolerance: Option<Number>,
    pub output_tokens: Option<Number>,
    pub max_cooldown_s: Option<Number>,
}

impl SourceMeta {
    /// A metadata document from its text (run.json, or one of a canonical file's `run_meta`):
    /// errors carry the line inside `text`.
    pub fn parse(text: &str) -> Result<SourceMeta, serde_json::Error> {
        let raw: Value = serde_json::from_str(text)?;
        let view = if is_origin(&raw) {
            RunMetaView::from_value(&raw)?
        } else {
            // Parsed from the text, not the tree, so a shape error keeps its line.
            RunMetaView::Ours(Box::new(serde_json::from_str::<OurMeta>(text)?))
        };
        Ok(SourceMeta { raw, view })
    }

    pub fn from_value(raw: Value) -> Result<SourceMeta, serde_json::Error> {
        let view = RunMetaView::from_value(&raw)?;
        Ok(SourceMeta { raw, view })
    }
}

fn is_origin(raw: &Value) -> bool {
    raw.get("format").and_then(Value::as_str) == Some(ORIGIN_FORMAT)
}

impl RunMetaView {
    /// Reads one metadata document: an origin's (marked by `format`) or a sweep's run.json.
    pub fn from_value(raw: &Value) -> Result<RunMetaView, serde_json::Error> {
        if is_origin(raw) {
            OriginMeta::deserialize(raw).map(|m| RunMetaView::Origin(Box::new(m)))
        } else {
            OurMeta::deserialize(raw).map(|m| RunMetaView::Ours(Box::new(m)))
        }
    }

    /// Physics inputs a sweep was configured with (`config.physics`); None for origin files.
    pub fn physics_inputs(&self) -> Option<&PhysicsView> {
        match self {
            RunMetaView::Ours(m) => m.config.as_ref()?.physics.as_ref(),
            RunMetaView::Origin(_) => None,
        }
    }

    /// The model profile the sweep resolved and recorded (`physics.model`); None for origin files
    /// and run.json files written without one.
    pub fn recorded_model(&self) -> Option<&Value> {
        match self {
            RunMetaView::Ours(m) => m.physics.as_ref()?.model.as_ref().filter(|v| !v.is_null()),
            RunMetaView::Origin(_) => None,
        }
    }

    /// Whether the run was measured with `--insecure` (certificate verification off).
    pub fn insecure(&self) -> bool {
        match self {
            RunMetaView::Ours(m) => m.config.as_ref().is_some_and(|c| c.insecure),
            RunMetaView::Origin(_) => false,
        }
    }

    /// The CPU the run's host reported (`host.cpu_brand`).
    pub fn host_cpu_brand(&self) -> Option<&str> {
        match self {
            RunMetaView::Ours(m) => m.host.as_ref()?.cpu_brand.as_deref(),
            RunMetaView::Origin(_) => None,
        }
    }

    pub fn run_id(&self) -> Option<&str> {
        match self {
            RunMetaView::Ours(m) => m.run_id.as_deref(),
            RunMetaView::Origin(_) => None,
        }
    }

    /// The thermal tolerance the run was measured with, where it probed.
    pub fn thermal_tolerance(&self) -> Option<f64> {
        match self {
            RunMetaView::Ours(m) => match m.config.as_ref()?.thermal.as_ref()? {
                ThermalView::Probe { tolerance } => Some(*tolerance),
                _ => None,
            },
            RunMetaView::Origin(m) => m.metadata.config.throttle_tps_tolerance.as_ref()?.as_f64(),
        }
    }

    /// The git revision of the harness that measured the run.
    pub fn harness_git_sha(&self) -> Option<&str> {
        match self {
            RunMetaView::Ours(m) => m.harness.as_ref().map(|h| h.git_sha.as_str()),
            RunMetaView::Origin(m) => m.metadata.git_sha.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_partial_run_json_reads_with_its_sections_absent() {
        let raw =
            json!({"host": {"cpu_brand": "Apple M4 Pro"}, "config": {"physics": {"hardware": "m4-pro"}}});
        let view = RunMetaView::from_value(&raw).unwrap();
        assert_eq!(view.physics_inputs().and_then(|p| p.hardware.as_deref()), Some("m4-pro"));
        assert_eq!(view.host_cpu_brand(), Some("Apple M4 Pro"));
        assert_eq!(view.thermal_tolerance(), None);
    }

    #[test]
    fn renamed_fields_are_errors() {
        let tol = json!({"config": {"thermal": {"policy": "probe", "tolerance_frac": 0.2}}});
        let e = RunMetaView::from_value(&tol).unwrap_err().to_string();
        assert!(e.contains("missing field `tolerance`"), "{e}");
        let hw = json!({"config": {"physics": {"hardware_name": "h200"}}});
        let e = RunMetaView::from_value(&hw).unwrap_err().to_string();
        assert!(e.contains("unknown field `hardware_name`"), "{e}");
    }

    #[test]
    fn origin_metadata_is_told_apart_by_its_format() {
        let raw = json!({"format": ORIGIN_FORMAT, "metadata": {"git_sha": "ee24513",
            "config": {"throttle_tps_tolerance": 0.05}}, "model_id": "gemma"});
        let view = RunMetaView::from_value(&raw).unwrap();
        assert_eq!(view.thermal_tolerance(), Some(0.05));
        assert_eq!(view.harness_git_sha(), Some("ee24513"));
        assert!(view.physics_inputs().is_none());
    }
}

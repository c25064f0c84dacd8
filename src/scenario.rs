//! Scenario files (`scenarios/*.toml`): every key optional, named like the flag it stands for
//! (underscores for dashes). `config::resolve` merges them with the flags.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// A scenario file: every key is optional and mirrors a flag (underscores for dashes).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub description: Option<String>,
    pub server: Option<String>,
    pub model: Option<String>,
    pub api: Option<String>,
    pub preset: Option<String>,
    pub contexts: Option<ListValue>,
    pub modes: Option<ListValue>,
    pub cache_states: Option<ListValue>,
    pub batch_sizes: Option<ListValue>,
    pub concurrent_max_context: Option<ListValue>,
    pub runs: Option<u32>,
    pub output_tokens: Option<u32>,
    pub request_timeout: Option<String>,
    pub seed: Option<u64>,
    pub staggered: Option<bool>,
    pub stagger_delay: Option<String>,
    pub stagger_context: Option<ListValue>,
    pub stagger_runs: Option<u32>,
    pub thermal: Option<String>,
    pub tolerance: Option<f64>,
    pub min_cooldown: Option<String>,
    pub max_cooldown: Option<String>,
    pub hardware: Option<String>,
    pub bandwidth_gbps: Option<f64>,
    pub tflops: Option<f64>,
    pub model_bytes: Option<String>,
    pub params: Option<String>,
    pub model_file: Option<PathBuf>,
}

/// `contexts = "1k..4k"` or `contexts = [1024, "4k"]`: both read as the same spec string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ListValue {
    Text(String),
    Number(u64),
    Items(Vec<ListItem>),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ListItem {
    Text(String),
    Number(u64),
}

impl ListValue {
    /// The value as one spec string, as the flag would take it.
    pub fn as_spec(&self) -> String {
        match self {
            ListValue::Text(s) => s.clone(),
            ListValue::Number(n) => n.to_string(),
            ListValue::Items(items) => items
                .iter()
                .map(|i| match i {
                    ListItem::Text(s) => s.clone(),
                    ListItem::Number(n) => n.to_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}

pub fn load_scenario(path: &Path) -> Result<ScenarioFile, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--scenario {}: cannot read: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("--scenario {}: {e}", path.display()))
}

//! Scenario files (`scenarios/*.toml`): any sweep setting, keyed by the flag's name with
//! underscores (`cache_states = "cold,warm"`), plus a `description`. They fill the same typed
//! structs as the flags (`cli::ConnectionArgs`, `cli::MeasureArgs`), so the two can never disagree on
//! what a setting is or how it parses.

use std::collections::BTreeSet;
use std::path::Path;

use clap::Args;
use serde::Deserialize;

use super::ConfigError;
use crate::cli::{ConnectionArgs, MeasureArgs};

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ScenarioFile {
    // Accepted so a scenario can say what it is for; nothing in bench reads it.
    #[expect(dead_code, reason = "a scenario file's own note to its readers")]
    pub description: Option<String>,
    #[serde(flatten)]
    pub connection: ConnectionArgs,
    #[serde(flatten)]
    pub measure: MeasureArgs,
}

/// Every key a scenario file may hold: the settings' ids, as clap knows them (one source of truth:
/// the structs in `cli`), and `description`.
pub(crate) fn known_keys() -> BTreeSet<String> {
    let cmd = MeasureArgs::augment_args(ConnectionArgs::augment_args(clap::Command::new("scenario")));
    let mut keys: BTreeSet<String> = cmd.get_arguments().map(|a| a.get_id().to_string()).collect();
    keys.insert("description".into());
    keys
}

pub(crate) fn load(path: &Path) -> Result<ScenarioFile, ConfigError> {
    let err = |message: String| ConfigError::Scenario { path: path.display().to_string(), message };
    let text = ttft_model::input_file::read_text(path, ttft_model::input_file::Limit::SCENARIO)
        .map_err(|e| err(e.to_string()))?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
    let known = known_keys();
    for (key, value) in &table {
        if !known.contains(key) {
            let listed: Vec<&str> = known.iter().map(String::as_str).collect();
            return Err(err(format!("unknown key `{key}` (known: {})", listed.join(", "))));
        }
        // Each key alone first, so a bad value is reported with its key: the flattened structs
        // would otherwise report the problem without saying where it is.
        let mut one = toml::Table::new();
        one.insert(key.clone(), value.clone());
        toml::Value::Table(one).try_into::<ScenarioFile>().map_err(|e| err(format!("{key}: {e}")))?;
    }
    toml::Value::Table(table).try_into::<ScenarioFile>().map_err(|e| err(e.to_string()))
}

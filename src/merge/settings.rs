//! Settings that must agree between the sources of one canonical file, and the conflicts found.
//!
//! Read from our run.json (`config.thermal.tolerance`, `config.output_tokens`,
//! `server.props.build_info`, `host.cpu_brand`/`arch`, `harness`, `config.model`) and from the
//! origin's metadata (`config.throttle_tps_tolerance`, `config.output_tokens`, `server_env`,
//! `machine`, `benchmark`/`git_sha`, `model_id`). A setting a source does not state is not a conflict.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::results::canonical::{Conflict, ConflictValue};
use crate::results::load::Source;
use crate::results::origin::ORIGIN_FORMAT;

/// (setting, value) pairs one metadata object states.
pub fn settings(meta: &Value) -> Vec<(&'static str, String)> {
    let text = |v: &Value| match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    };
    let mut out = Vec::new();
    let mut put = |name: &'static str, v: Option<String>| {
        if let Some(v) = v {
            out.push((name, v));
        }
    };
    if meta.get("format").and_then(Value::as_str) == Some(ORIGIN_FORMAT) {
        let m = &meta["metadata"];
        put("thermal_tolerance", text(&m["config"]["throttle_tps_tolerance"]));
        put("output_tokens", text(&m["config"]["output_tokens"]));
        put("server_settings", text(&meta["server_env"]));
        put("hardware", text(&m["machine"]));
        let harness =
            format!("{} ({})", m["benchmark"].as_str().unwrap_or("?"), m["git_sha"].as_str().unwrap_or("?"));
        put("harness", Some(harness));
        put("model", text(&meta["model_id"]));
    } else {
        let thermal = &meta["config"]["thermal"];
        let tolerance = match thermal["policy"].as_str() {
            Some("probe") => text(&thermal["tolerance"]),
            Some(other) => Some(format!("policy {other}")),
            None => None,
        };
        put("thermal_tolerance", tolerance);
        put("output_tokens", text(&meta["config"]["output_tokens"]));
        put("server_version", text(&meta["server"]["props"]["build_info"]));
        let host = &meta["host"];
        if host.is_object() {
            put(
                "hardware",
                Some(format!(
                    "{} ({})",
                    host["cpu_brand"].as_str().unwrap_or("?"),
                    host["arch"].as_str().unwrap_or("?")
                )),
            );
        }
        let h = &meta["harness"];
        if h.is_object() {
            let harness = format!(
                "{} {} ({})",
                h["name"].as_str().unwrap_or("?"),
                h["version"].as_str().unwrap_or("?"),
                h["git_sha"].as_str().unwrap_or("?")
            );
            put("harness", Some(harness));
        }
        put("model", text(&meta["config"]["model"]));
    }
    out
}

/// Every setting with more than one value across the sources, each value with who stated it.
pub fn conflicts(sources: &[Source]) -> Vec<Conflict> {
    let mut seen: BTreeMap<&'static str, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for source in sources {
        let path = source.path.display().to_string();
        for (i, meta) in source.run_meta.iter().enumerate() {
            let who = if source.run_meta.len() == 1 {
                path.clone()
            } else {
                let id = meta["run_id"].as_str().map_or_else(|| i.to_string(), str::to_string);
                format!("{path}[{id}]")
            };
            for (name, value) in settings(meta) {
                seen.entry(name).or_default().entry(value).or_default().insert(who.clone());
            }
        }
    }
    seen.into_iter()
        .filter(|(_, values)| values.len() > 1)
        .map(|(setting, values)| Conflict {
            setting: setting.to_string(),
            values: values
                .into_iter()
                .map(|(value, who)| ConflictValue { value, sources: who.into_iter().collect() })
                .collect(),
        })
        .collect()
}

/// One line per conflict, for stderr.
pub fn describe(conflict: &Conflict) -> String {
    let values: Vec<String> =
        conflict.values.iter().map(|v| format!("{} ({})", v.value, v.sources.join(", "))).collect();
    format!("conflict: {} differs between sources: {}", conflict.setting, values.join(" vs "))
}

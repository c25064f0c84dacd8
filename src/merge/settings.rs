//! Settings that must agree between the sources of one canonical file, and the conflicts found.
//!
//! Read through the typed metadata view (`results::run_meta`): from our run.json
//! (`config.thermal.tolerance`, `config.output_tokens`, `server.props.build_info`,
//! `host.cpu_brand`/`arch`, `harness`, `config.model`) and from the origin's metadata
//! (`config.throttle_tps_tolerance`, `config.output_tokens`, `server_env`, `machine`,
//! `benchmark`/`git_sha`, `model_id`). A setting a source does not state is not a conflict.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Number, Value, json};

use crate::results::canonical::{Conflict, ConflictValue};
use crate::results::load::Source;
use crate::results::run_meta::{RunMetaView, ThermalView};

/// (setting, value) pairs one metadata document states.
pub fn settings(meta: &RunMetaView) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut put = |name: &'static str, v: Option<String>| {
        if let Some(v) = v {
            out.push((name, v));
        }
    };
    match meta {
        RunMetaView::Origin(o) => {
            let m = &o.metadata;
            put("thermal_tolerance", m.config.throttle_tps_tolerance.as_ref().map(Number::to_string));
            put("output_tokens", m.config.output_tokens.as_ref().map(Number::to_string));
            put("server_settings", o.server_env.as_ref().and_then(text));
            put("hardware", m.machine.as_ref().and_then(text));
            let harness = format!(
                "{} ({})",
                m.benchmark.as_deref().unwrap_or("?"),
                m.git_sha.as_deref().unwrap_or("?")
            );
            put("harness", Some(harness));
            put("model", o.model_id.clone());
        }
        RunMetaView::Ours(m) => {
            let config = m.config.as_ref();
            let tolerance = config.and_then(|c| c.thermal.as_ref()).map(|t| match t {
                // Printed as the JSON number it was written as (0.2, not 0.2000000001).
                ThermalView::Probe { tolerance } => json!(tolerance).to_string(),
                ThermalView::Fixed { .. } => "policy fixed".to_string(),
                ThermalView::Off => "policy off".to_string(),
            });
            put("thermal_tolerance", tolerance);
            put("output_tokens", config.and_then(|c| c.output_tokens).map(|n| n.to_string()));
            let props = m.server.as_ref().and_then(|s| s.props.as_ref());
            put("server_version", props.and_then(|p| p.get("build_info")).and_then(text));
            if let Some(host) = &m.host {
                let (brand, arch) = (host.cpu_brand.as_deref(), host.arch.as_deref());
                put("hardware", Some(format!("{} ({})", brand.unwrap_or("?"), arch.unwrap_or("?"))));
            }
            if let Some(h) = &m.harness {
                put("harness", Some(format!("{} {} ({})", h.name, h.version, h.git_sha)));
            }
            put("model", config.and_then(|c| c.model.clone()));
        }
    }
    out
}

/// A JSON value as a setting's text: strings as they are, anything else as JSON; null states nothing.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// Every setting with more than one value across the sources, each value with who stated it.
pub fn conflicts(sources: &[&Source]) -> Vec<Conflict> {
    let mut seen: BTreeMap<&'static str, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for source in sources {
        let path = source.path.display().to_string();
        for (i, meta) in source.run_meta.iter().enumerate() {
            let who = if source.run_meta.len() == 1 {
                path.clone()
            } else {
                let id = meta.view.run_id().map_or_else(|| i.to_string(), str::to_string);
                format!("{path}[{id}]")
            };
            for (name, value) in settings(&meta.view) {
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

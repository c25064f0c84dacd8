//! Settings that must agree between the sources of one model, and the conflicts found.
//!
//! Records of one model share cells: a merge pools them and replaces one run's by another's, so
//! the runs must have measured the same thing on the same server. What must agree: which server
//! (its URL, or the `--server-cmd` that started it, whose port differs every run; the preset; the
//! API; the server's build; the model file; the hardware profile) and what was measured (output
//! tokens, the thermal policy, the harness, the host). Sources of different models never share a
//! cell and are not compared. A setting a source does not state is not a conflict.
//!
//! Read through the typed metadata view (`results::run_meta`): from our run.json (`config.server`,
//! `config.server_cmd`, `config.preset`, `config.api`, `server.props.build_info`,
//! `server.props.model_path`, `config.physics.hardware`, `config.output_tokens`,
//! `config.thermal.tolerance`, `host.cpu_brand`/`arch`, `harness`, `config.model`) and from the
//! origin's metadata (`config.throttle_tps_tolerance`, `config.output_tokens`, `server_env`,
//! `machine`, `benchmark`/`git_sha`, `model_id`). Values are printed: URLs lose their
//! credentials and commands the values of key and password flags.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Number, Value, json};

use crate::results::canonical::{Conflict, ConflictValue};
use crate::results::run_meta::{RunMetaView, ThermalView};
use crate::results::sources::Source;

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
            match config.and_then(|c| c.server_cmd.as_deref()) {
                Some(cmd) => put("server_command", Some(redact_command(cmd))),
                None => put("server_url", config.and_then(|c| c.server.as_deref()).map(redact_url)),
            }
            put("preset", config.and_then(|c| c.preset.clone()));
            put("api", config.and_then(|c| c.api.as_ref()).and_then(text));
            put("output_tokens", config.and_then(|c| c.output_tokens).map(|n| n.to_string()));
            let props = m.server.as_ref().and_then(|s| s.props.as_ref());
            put("server_version", props.and_then(|p| p.get("build_info")).and_then(text));
            let physics = config.and_then(|c| c.physics.as_ref());
            let model_file = props
                .and_then(|p| p.get("model_path"))
                .and_then(text)
                .or_else(|| physics.and_then(|p| p.model_file.as_ref()).map(|f| f.display().to_string()));
            put("model_file", model_file);
            put("server_hardware", physics.and_then(|p| p.hardware.clone()));
            if let Some(host) = &m.host {
                let (brand, arch) = (host.cpu_brand.as_deref(), host.arch.as_deref());
                put("hardware", Some(format!("{} ({})", brand.unwrap_or("?"), arch.unwrap_or("?"))));
            }
            if let Some(h) = &m.harness {
                put("harness", Some(format!("{} {} ({})", h.name, h.version, h.git_sha)));
            }
        }
    }
    out
}

/// The model a metadata document says its run measured.
pub fn model(meta: &RunMetaView) -> Option<&str> {
    match meta {
        RunMetaView::Origin(o) => o.model_id.as_deref(),
        RunMetaView::Ours(m) => m.config.as_ref()?.model.as_deref(),
    }
}

/// A URL as it may be printed: without user or password.
fn redact_url(url: &str) -> String {
    crate::secrets::redact(&crate::secrets::redact_url(url))
}

/// A server command as it may be printed: the value of every flag that names a key, token,
/// password or secret masked (`--api-key X`, `--api-key=X`), URLs without credentials. Two
/// commands that differ only there start the same server.
pub fn redact_command(cmd: &str) -> String {
    let secret_flag = |w: &str| {
        let w = w.trim_start_matches('-').to_ascii_lowercase();
        ["key", "token", "password", "passwd", "secret"].iter().any(|k| w.contains(k))
    };
    let mut out: Vec<String> = Vec::new();
    let mut mask_next = false;
    for word in cmd.split(' ') {
        if mask_next && !word.is_empty() {
            out.push(crate::secrets::MASK.to_string());
            mask_next = false;
            continue;
        }
        match word.split_once('=') {
            Some((flag, _)) if flag.starts_with('-') && secret_flag(flag) => {
                out.push(format!("{flag}={}", crate::secrets::MASK));
            }
            _ => {
                mask_next = word.starts_with('-') && secret_flag(word);
                out.push(redact_url(word));
            }
        }
    }
    out.join(" ")
}

/// A JSON value as a setting's text: strings as they are, anything else as JSON; null states nothing.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// Every setting with more than one value among the sources of one model, each value with who
/// stated it; by model, then setting.
pub fn conflicts(sources: &[&Source]) -> Vec<Conflict> {
    type Values = BTreeMap<String, BTreeSet<String>>;
    let mut seen: BTreeMap<Option<&str>, BTreeMap<&'static str, Values>> = BTreeMap::new();
    for source in sources {
        let path = source.path.display().to_string();
        for (i, meta) in source.run_meta.iter().enumerate() {
            let who = if source.run_meta.len() == 1 {
                path.clone()
            } else {
                let id = meta.view.run_id().map_or_else(|| i.to_string(), str::to_string);
                format!("{path}[{id}]")
            };
            let of_model = seen.entry(model(&meta.view)).or_default();
            for (name, value) in settings(&meta.view) {
                of_model.entry(name).or_default().entry(value).or_default().insert(who.clone());
            }
        }
    }
    let mut out = Vec::new();
    for (model, settings) in seen {
        for (setting, values) in settings.into_iter().filter(|(_, values)| values.len() > 1) {
            out.push(Conflict {
                model: model.map(str::to_string),
                setting: setting.to_string(),
                values: values
                    .into_iter()
                    .map(|(value, who)| ConflictValue { value, sources: who.into_iter().collect() })
                    .collect(),
            });
        }
    }
    out
}

/// One line per conflict, for stderr.
pub fn describe(conflict: &Conflict) -> String {
    let values: Vec<String> =
        conflict.values.iter().map(|v| format!("{} ({})", v.value, v.sources.join(", "))).collect();
    let of = conflict.model.as_ref().map_or(String::new(), |m| format!(" (model {m})"));
    format!("conflict: {} differs between sources: {}{of}", conflict.setting, values.join(" vs "))
}

/// The runs `sources` hold, one label each (run id, model, server, preset), in source order: what
/// a report of several runs pools. A source without metadata contributes its records' run ids.
pub fn pooled(sources: &[&Source]) -> Vec<String> {
    let mut out = Vec::new();
    for source in sources {
        let path = source.path.display().to_string();
        if source.run_meta.is_empty() {
            let ids: BTreeSet<&str> = source.records.iter().map(crate::record::Record::run_id).collect();
            out.extend(ids.into_iter().map(|id| format!("{id} ({path}: server not stated)")));
            continue;
        }
        for meta in &source.run_meta {
            let stated = settings(&meta.view);
            let get = |name: &str| stated.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str());
            let mut parts = vec![model(&meta.view).unwrap_or("model not stated").to_string()];
            parts.push(match (get("server_url"), get("server_command")) {
                (Some(url), _) => url.to_string(),
                (None, Some(cmd)) => format!("started by `{cmd}`"),
                (None, None) => "server not stated".to_string(),
            });
            if let Some(preset) = get("preset") {
                parts.push(format!("preset {preset}"));
            }
            let id = meta.view.run_id().unwrap_or(&path);
            out.push(format!("{id} ({})", parts.join(", ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_commands_secrets_are_masked_and_its_identity_kept() {
        let cmd = "llama-server -m /m/gemma.gguf --api-key sk-live-1 --hf-token=hf_abc --port {port} \
                   --ssl-key-file k.pem http://u:pw-9999@host/x";
        let shown = redact_command(cmd);
        assert_eq!(
            shown,
            "llama-server -m /m/gemma.gguf --api-key [redacted] --hf-token=[redacted] --port {port} \
             --ssl-key-file [redacted] http://[redacted]@host/x"
        );
        for secret in ["sk-live-1", "hf_abc", "pw-9999"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        // Two commands that differ only in a key start the same server.
        assert_eq!(redact_command("s --api-key a1b2c3"), redact_command("s --api-key d4e5f6"));
    }
}

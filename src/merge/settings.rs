//! Settings that must agree between the sources of one model, and the conflicts found.
//!
//! Records of one model share cells: a merge pools them and replaces one run's by another's, so
//! the runs must have measured the same thing on the same server. What must agree: which server
//! (its URL, or the `--server-cmd` that started it, whose port differs every run; a run against a
//! running server and a run of a server bench started are never known to be one server; the
//! preset; the API; the server's build; the model file; the hardware profile) and what was
//! measured (output tokens, the hot turn, the temperature, the extra request body, the thermal
//! policy, the harness, the host). Sources of different models never share a cell and are not
//! compared. A setting a source does not state is not a conflict, but records of bench's own
//! without their run.json (a `measurements.jsonl` alone) state nothing at all: pooled with
//! another source of their model they are a conflict of their own (`run_json`), since nothing
//! shows they measured the same server and settings.
//!
//! Read through the typed metadata view (`results::run_meta`): from our run.json (`config.server`,
//! `config.server_cmd`, `config.preset`, `config.api`, `server.props.build_info`,
//! `server.props.model_path`, `config.physics.hardware`, `config.output_tokens`, `config.turns`,
//! `config.temperature`, `config.extra_body`, `config.thermal.tolerance`, `host.cpu_brand`/`arch`,
//! `harness`, `config.model`) and from the origin's metadata (`config.throttle_tps_tolerance`,
//! `config.output_tokens`, `server_env`, `machine`, `benchmark`/`git_sha`, `model_id`). The
//! server command is compared as run.json holds it: the sweep masked the values of secret flags
//! (`--api-key`, `--hf-token`) before writing it, and two commands that differ only in a
//! credential start the same server; every other value (`--max-num-batched-tokens 8192`) is
//! written and compared as given. URLs are printed without their credentials.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Number, Value, json};

use ttft_results::results::canonical::{Conflict, ConflictValue};
use ttft_results::results::run_meta::{RunMetaView, ThermalView};
use ttft_results::results::slotted::Slotted;
use ttft_results::results::sources::{Source, SourceKind};

/// (setting, value) pairs one metadata document states.
pub(crate) fn settings(meta: &RunMetaView) -> Vec<(&'static str, String)> {
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
                Some(cmd) => put("server_command", Some(ttft_model::secrets::redact_command(cmd))),
                None => {
                    put("server_url", config.and_then(|c| c.server.as_deref()).map(redact_url));
                    // Stated so that a run of a server bench started never pools with one of a
                    // server it was pointed at: nothing shows the two were one server.
                    put("server_command", config.map(|_| NO_SERVER_COMMAND.to_string()));
                }
            }
            put("preset", config.and_then(|c| c.preset.clone()));
            put("api", config.and_then(|c| c.api.as_ref()).and_then(text));
            put("output_tokens", config.and_then(|c| c.output_tokens).map(|n| n.to_string()));
            put("turns", config.map(|c| c.turns.to_string()));
            // Printed as the JSON number it was written as (0.7, not 0.7000000000000001).
            put("temperature", config.map(|c| json!(c.temperature).to_string()));
            put(
                "extra_body",
                config.map(|c| match c.extra_body.is_empty() {
                    true => "none".to_string(),
                    false => Value::Object(c.extra_body.clone()).to_string(),
                }),
            );
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
pub(crate) fn model(meta: &RunMetaView) -> Option<&str> {
    match meta {
        RunMetaView::Origin(o) => o.model_id.as_deref(),
        RunMetaView::Ours(m) => m.config.as_ref()?.model.as_deref(),
    }
}

/// The server command a run against a running server (`--server URL`) states.
pub(crate) const NO_SERVER_COMMAND: &str = "none (measured a running server: --server URL)";

/// A URL as it may be printed: without user or password.
fn redact_url(url: &str) -> String {
    ttft_model::secrets::redact(&ttft_model::secrets::redact_url(url))
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
pub(crate) fn conflicts<T: Slotted>(sources: &[&Source<T>]) -> Vec<Conflict> {
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
    for (model, values) in unstated(sources) {
        seen.entry(model).or_default().insert(RUN_JSON, values);
    }
    let mut out = Vec::new();
    for (model, settings) in seen {
        let pooled_unknown =
            |setting: &str, values: &Values| setting == RUN_JSON && values.contains_key(RUN_JSON_MISSING);
        for (setting, values) in settings
            .into_iter()
            .filter(|(setting, values)| values.len() > 1 || pooled_unknown(setting, values))
        {
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

/// The setting under which records without their run.json are a conflict.
const RUN_JSON: &str = "run_json";
/// What such records state of their server and settings.
const RUN_JSON_MISSING: &str = "missing: records without their run.json state no server or settings";

/// Per model whose records come from more than one source, where any of those sources holds bench's
/// own records without their run.json: each source's word on it (missing, or present). A model
/// measured by one source alone pools nothing and is left out.
fn unstated<'a, T: Slotted>(
    sources: &[&'a Source<T>],
) -> BTreeMap<Option<&'a str>, BTreeMap<String, BTreeSet<String>>> {
    let bare =
        |s: &Source<T>| s.run_meta.is_empty() && matches!(s.kind, SourceKind::RunDir | SourceKind::Jsonl);
    let mut by_model: BTreeMap<&str, Vec<&Source<T>>> = BTreeMap::new();
    for source in sources {
        let models: BTreeSet<&str> = source.records.iter().map(|r| r.cell().model.as_str()).collect();
        for model in models {
            by_model.entry(model).or_default().push(source);
        }
    }
    let mut out = BTreeMap::new();
    for (model, of_model) in by_model {
        if of_model.len() < 2 || !of_model.iter().any(|s| bare(s)) {
            continue;
        }
        let mut values: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for source in of_model {
            let word = if bare(source) { RUN_JSON_MISSING } else { "present" };
            values.entry(word.to_string()).or_default().insert(source.path.display().to_string());
        }
        out.insert(Some(model), values);
    }
    out
}

/// One line per conflict, for stderr.
pub(crate) fn describe(conflict: &Conflict) -> String {
    if conflict.setting == RUN_JSON {
        let bare: Vec<&str> = conflict
            .values
            .iter()
            .filter(|v| v.value == RUN_JSON_MISSING)
            .flat_map(|v| v.sources.iter().map(String::as_str))
            .collect();
        let of = conflict.model.as_ref().map_or(String::new(), |m| format!(" of model {m}"));
        return format!(
            "conflict: {RUN_JSON}: records without their run.json ({}) pooled with other records{of}: nothing \
             shows they measured the same server and settings (merge their run directory instead)",
            bare.join(", ")
        );
    }
    let values: Vec<String> =
        conflict.values.iter().map(|v| format!("{} ({})", v.value, v.sources.join(", "))).collect();
    let of = conflict.model.as_ref().map_or(String::new(), |m| format!(" (model {m})"));
    format!("conflict: {} differs between sources: {}{of}", conflict.setting, values.join(" vs "))
}

/// The runs `sources` hold, one label each (run id, model, server, preset), in source order: what
/// a report of several runs pools. A source without metadata contributes its records' run ids.
pub(crate) fn pooled<T: Slotted>(sources: &[&Source<T>]) -> Vec<String> {
    let mut out = Vec::new();
    for source in sources {
        let path = source.path.display().to_string();
        if source.run_meta.is_empty() {
            let ids: BTreeSet<&str> = source.records.iter().map(T::run_id).collect();
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

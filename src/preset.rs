//! Server presets: how a server binds a request to a session, and the HTTP actions that put a
//! session into the cache state a scenario claims. Presets are DATA (TOML, built in under
//! `presets/`, or a user's file via `--preset path.toml`), not code branches.
//!
//! Placeholders in paths, bodies and headers: `{slot}` (the session's server slot), `{session}`
//! (a unique session id), `{env:NAME}` (read from the environment when the action runs: admin keys
//! stay out of files, records and logs).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::client::{ChatRequest, Client};
use crate::server;

const BUILTIN: &[(&str, &str)] = &[
    ("openai", include_str!("../presets/openai.toml")),
    ("llama.cpp", include_str!("../presets/llama.cpp.toml")),
    ("vllm", include_str!("../presets/vllm.toml")),
    ("sglang", include_str!("../presets/sglang.toml")),
    ("agent-memory", include_str!("../presets/agent-memory.toml")),
];

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Added to every chat request of a session.
    #[serde(default)]
    pub request: RequestBinding,
    /// Before a cold measurement: make sure nothing of this session is cached.
    #[serde(default)]
    pub reset: Vec<Step>,
    /// Warm, after priming: drop the session from memory, keep it on disk.
    #[serde(default)]
    pub evict: Vec<Step>,
    /// Warm, before the measured request: an explicit reload, timed INSIDE the measured TTFT.
    #[serde(default)]
    pub reload: Vec<Step>,
    /// After every measurement: forget the session so runs stay isolated.
    #[serde(default)]
    pub cleanup: Vec<Step>,
    /// Fetched after every measurement and kept in the record (e.g. cache pool statistics).
    #[serde(default)]
    pub stats: Option<Step>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RequestBinding {
    #[serde(default)]
    pub body: BTreeMap<String, Value>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub method: String,
    pub path: String,
    #[serde(default)]
    pub body: Option<Value>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// HTTP statuses that count as success besides 2xx (e.g. 404 when deleting what is gone).
    #[serde(default)]
    pub ok_status: Vec<u16>,
}

/// Identifies one session on the server.
#[derive(Clone, Debug, PartialEq)]
pub struct Session {
    pub id: String,
    pub slot: u32,
}

impl Preset {
    /// A built-in name or a path to a TOML file.
    pub fn load(name_or_path: &str) -> Result<Preset, String> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return toml::from_str(text).map_err(|e| format!("built-in preset {name_or_path}: {e}"));
        }
        let path = std::path::Path::new(name_or_path);
        if path.extension().is_some_and(|e| e == "toml") || path.exists() {
            let text = std::fs::read_to_string(path).map_err(|e| format!("--preset {name_or_path}: {e}"))?;
            return toml::from_str(&text).map_err(|e| format!("--preset {name_or_path}: {e}"));
        }
        let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        Err(format!(
            "--preset: unknown preset {name_or_path:?} (built in: {}; or a .toml file)",
            names.join(", ")
        ))
    }

    pub fn supports_warm(&self) -> bool {
        !self.evict.is_empty()
    }

    /// Adds the session binding to a chat request.
    pub fn bind(&self, req: &mut ChatRequest, session: &Session) -> Result<(), String> {
        for (k, v) in &self.request.body {
            req.extra_body.insert(k.clone(), fill_value(v, session)?);
        }
        for (k, v) in &self.request.headers {
            req.headers.push((k.clone(), fill(v, session)?));
        }
        Ok(())
    }

    /// Runs the steps of one action in order; returns the time they took.
    pub async fn run(&self, client: &Client, steps: &[Step], session: &Session) -> Result<Duration, String> {
        let start = Instant::now();
        for step in steps {
            run_step(client, step, session).await?;
        }
        Ok(start.elapsed())
    }

    pub async fn fetch_stats(&self, client: &Client, session: &Session) -> Option<Value> {
        let step = self.stats.as_ref()?;
        run_step(client, step, session).await.ok()
    }
}

async fn run_step(client: &Client, step: &Step, session: &Session) -> Result<Value, String> {
    let method = reqwest::Method::from_bytes(step.method.to_uppercase().as_bytes())
        .map_err(|_| format!("preset step: bad method {:?}", step.method))?;
    let path = fill(&step.path, session)?;
    let body = step.body.as_ref().map(|b| fill_value(b, session)).transpose()?;
    let mut headers = Vec::new();
    for (k, v) in &step.headers {
        headers.push((k.clone(), fill(v, session)?));
    }
    match server::call(client, method, &path, body.as_ref(), &headers).await {
        Ok(v) => Ok(v),
        Err(e) if e.status().is_some_and(|s| step.ok_status.contains(&s)) => Ok(Value::Null),
        // The message names method and path only: headers may hold secrets.
        Err(e) => Err(format!("preset action failed: {e}")),
    }
}

/// Replaces placeholders in a string.
fn fill(template: &str, session: &Session) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            return Err(format!("preset: unclosed placeholder in {template:?}"));
        };
        let name = &rest[open + 1..open + close];
        match name {
            "slot" => out.push_str(&session.slot.to_string()),
            "session" => out.push_str(&session.id),
            _ => match name.strip_prefix("env:") {
                Some(var) => {
                    let value = std::env::var(var)
                        .map_err(|_| format!("preset needs the environment variable {var}"))?;
                    crate::secrets::register(&value); // an admin key a server may echo back
                    out.push_str(&value);
                }
                None => return Err(format!("preset: unknown placeholder {{{name}}} in {template:?}")),
            },
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Fills placeholders inside JSON strings. A string that is exactly `{slot}` becomes a number,
/// because servers want `"id_slot": 0`, not `"0"`.
fn fill_value(value: &Value, session: &Session) -> Result<Value, String> {
    Ok(match value {
        Value::String(s) if s == "{slot}" => Value::from(session.slot),
        Value::String(s) => Value::String(fill(s, session)?),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| fill_value(v, session)).collect::<Result<_, _>>()?)
        }
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            for (k, v) in map {
                out.insert(k.clone(), fill_value(v, session)?);
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        Session { id: "tb-42".into(), slot: 1 }
    }

    #[test]
    fn builtins_parse_and_say_what_they_support() {
        for (name, _) in BUILTIN {
            let p = Preset::load(name).unwrap();
            assert_eq!(&p.name, name);
        }
        assert!(!Preset::load("openai").unwrap().supports_warm(), "openai must not fake warm");
        assert!(Preset::load("llama.cpp").unwrap().supports_warm());
        assert!(Preset::load("agent-memory").unwrap().supports_warm());
    }

    #[test]
    fn placeholders_fill_and_slot_stays_a_number() {
        let p = Preset::load("llama.cpp").unwrap();
        let mut req = ChatRequest::default();
        p.bind(&mut req, &session()).unwrap();
        assert_eq!(req.extra_body["id_slot"], Value::from(1));
        assert_eq!(fill("/slots/{slot}?action=save", &session()).unwrap(), "/slots/1?action=save");
        assert_eq!(fill("/v1/agents/oai_{session}", &session()).unwrap(), "/v1/agents/oai_tb-42");
    }

    #[test]
    fn missing_env_and_unknown_placeholders_are_clear_errors() {
        let err = fill("{env:TTFT_BENCH_SURELY_UNSET_VAR}", &session()).unwrap_err();
        assert!(err.contains("TTFT_BENCH_SURELY_UNSET_VAR"));
        assert!(fill("{nope}", &session()).unwrap_err().contains("unknown placeholder"));
        assert!(Preset::load("tgi").unwrap_err().contains("built in: openai"));
    }
}

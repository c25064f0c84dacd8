//! Server presets: how a server binds a request to a session, and the HTTP actions that put a
//! session into the cache state a scenario claims. Presets are DATA (TOML, built in under
//! `presets/`, or a user's file via `--preset path.toml`), not code branches.
//!
//! Placeholders in paths, bodies and headers: `{slot}` (the session's server slot), `{session}`
//! (a unique session id), `{env:NAME}` (read from the environment when the action runs; the value
//! is registered as a secret, so it never reaches a record, run.json or a log line).
//!
//! Every step has a scope. A `session` step acts on one session (it names `{slot}` or `{session}`);
//! a `global` step acts on the whole server (vLLM's `/reset_prefix_cache`, SGLang's `/flush_cache`,
//! agent-memory's `DELETE /admin/caches`). The scope is inferred from the placeholders unless the
//! step says `scope = ...`. The runner runs global steps once per cell, before any session is
//! primed: run per session, a global reset would wipe the sessions primed before it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::server::{self, CallError};
use ttft_client::{ChatRequest, Client};
use ttft_model::record::{ErrorKind, SessionCache, SessionTier};

const BUILTIN: &[(&str, &str)] = &[
    ("openai", include_str!("../presets/openai.toml")),
    ("llama.cpp", include_str!("../presets/llama.cpp.toml")),
    ("vllm", include_str!("../presets/vllm.toml")),
    ("sglang", include_str!("../presets/sglang.toml")),
    ("agent-memory", include_str!("../presets/agent-memory.toml")),
];

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Preset {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Added to every chat request of a session.
    #[serde(default)]
    pub request: RequestBinding,
    /// How a cold request that reuses nothing is bound (`bench load`): its keys replace
    /// `request`'s (llama.cpp: `cache_prompt = false`, so the server computes the whole prompt
    /// whatever its slot held). Such a request needs no reset and no cleanup, so the session
    /// actions are skipped for it, and it needs no slot of its own: where no warm or hot session
    /// holds a slot it is sent to none (`request` keys naming `{slot}` left out; the server picks
    /// a slot or queues it), otherwise to a slot no session holds, taken at its instant
    /// (docs/load.md). None: cold requests are bound as every other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_request: Option<RequestBinding>,
    /// Before a measurement: make sure nothing of this session (or, global, of anything) is cached.
    #[serde(default)]
    pub reset: Vec<ActionStep>,
    /// Warm, after priming: drop the session from memory, keep it on disk.
    #[serde(default)]
    pub evict: Vec<ActionStep>,
    /// Warm, before the measured request: an explicit reload, timed INSIDE the measured TTFT.
    #[serde(default)]
    pub reload: Vec<ActionStep>,
    /// After every measurement: forget the session so runs stay isolated.
    #[serde(default)]
    pub cleanup: Vec<ActionStep>,
    /// Fetched after every measurement and kept in the record (e.g. cache pool statistics).
    #[serde(default)]
    pub stats: Option<ActionStep>,
    /// Prometheus counters (GET `metrics.path`) snapshotted around every measurement as cache
    /// evidence that does not depend on usage fields.
    #[serde(default)]
    pub metrics: Option<MetricsSpec>,
    /// The server ends the connection after every streamed response without announcing it (no
    /// `Connection: close`, a `Keep-Alive` header even): llama-server does. A pooled client puts
    /// such a connection back as idle, and the request sent right after the stream (the session's
    /// cleanup) goes out on it and is lost. Streamed requests to such a server therefore ask for
    /// `Connection: close`, so their connection never returns to the pool (see docs/load.md).
    #[serde(default)]
    pub stream_closes_connection: bool,
    /// The file the evict action leaves in the server's save directory (`{session}` and `{slot}`
    /// filled), e.g. llama.cpp's `{session}.bin`. With that directory known, bench drops the
    /// file from the OS page cache before the restore, so warm reads the disk it claims.
    #[serde(default)]
    pub saved_file: Option<String>,
    /// The server's save directory, when the server runs on this host (`--slot-dir` overrides,
    /// `--slot-save-path DIR` in `--server-cmd` also says it).
    #[serde(default)]
    pub slot_dir: Option<std::path::PathBuf>,
    /// Placeholders whose value depends on the API the sweep speaks, by `--api` name:
    /// `[per_api.openai] agent = "oai_{session}"` makes `{agent}` mean `oai_{session}` under
    /// `--api openai`. A server may name a session's cache by the API it came through
    /// (agent-memory: `oai_<id>` and `sess_<id>`). Resolved once, before the sweep (`for_api`), so
    /// every action afterwards sees only `{slot}`, `{session}` and `{env:NAME}`.
    #[serde(default)]
    pub per_api: BTreeMap<String, BTreeMap<String, String>>,
    /// Where the server lists each session's cache tier, read just before and just after every
    /// measured request and kept in its cache evidence (docs/agent-memory.md).
    #[serde(default)]
    pub session_state: Option<SessionStateSpec>,
    /// Under `--api anthropic`, the server's `usage.input_tokens` counts the whole prompt, cached
    /// and newly cached tokens included (agent-memory's does), where Anthropic's API counts only
    /// the tokens after the cache: the prompt is then `input_tokens` alone, not its sum with
    /// `cache_read_input_tokens` and `cache_creation_input_tokens`.
    #[serde(default)]
    pub anthropic_input_tokens_total: bool,
}

/// Where and how the server lists each session's cache (`Preset::session_state`). The read must
/// not change what it reads: agent-memory's `GET /v1/agents/{id}` loads a session from disk into
/// memory (a warm session would turn hot), so its preset reads the list of every agent instead.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct SessionStateSpec {
    #[serde(with = "method")]
    pub method: reqwest::Method,
    pub path: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// JSON pointer to the array of listed sessions in the response ("" for the response itself).
    #[serde(default)]
    pub entries: String,
    /// The field of an entry that names its session...
    pub id_field: String,
    /// ...and this session's name there (placeholders filled, e.g. "{agent}").
    pub id: String,
    /// The field of an entry that holds its tier...
    pub tier_field: String,
    /// ...its value for a cache in memory...
    pub in_memory: String,
    /// ...and for a cache on disk only.
    pub on_disk: String,
    /// The field holding the tokens the session's cache holds, where the server says.
    #[serde(default)]
    pub tokens_field: Option<String>,
    /// The field holding the size of the session's cache file in bytes, where the server says.
    #[serde(default)]
    pub file_bytes_field: Option<String>,
}

impl SessionStateSpec {
    /// `session`'s cache in the server's listing: `absent` when it is not listed.
    pub(crate) fn session_cache(&self, listing: &Value, session: &Session) -> Result<SessionCache, String> {
        let id = fill(&self.id, session).map_err(|e| e.to_string())?;
        let entries = listing.pointer(&self.entries).and_then(Value::as_array).ok_or_else(|| {
            format!("session_state: {} {}: no array at {:?}", self.method, self.path, self.entries)
        })?;
        let named = |e: &&Value| e.get(&self.id_field).and_then(Value::as_str) == Some(id.as_str());
        let Some(entry) = entries.iter().find(named) else {
            return Ok(SessionCache { tier: SessionTier::Absent, tokens: None, file_bytes: None });
        };
        let tier = match entry.get(&self.tier_field).and_then(Value::as_str) {
            Some(t) if t == self.in_memory => SessionTier::InMemory,
            Some(t) if t == self.on_disk => SessionTier::OnDisk,
            other => {
                return Err(format!(
                    "session_state: session {id} has {} {other:?}, neither {:?} (in memory) nor {:?} (on disk)",
                    self.tier_field, self.in_memory, self.on_disk
                ));
            }
        };
        let count =
            |field: &Option<String>| field.as_ref().and_then(|f| entry.get(f)).and_then(Value::as_u64);
        Ok(SessionCache {
            tier,
            tokens: count(&self.tokens_field),
            file_bytes: count(&self.file_bytes_field),
        })
    }

    fn step(&self) -> ActionStep {
        ActionStep {
            method: self.method.clone(),
            path: self.path.clone(),
            body: None,
            headers: self.headers.clone(),
            ok_status: Vec::new(),
            scope: Some(Scope::Global),
            saved_bytes: None,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct RequestBinding {
    #[serde(default)]
    pub body: BTreeMap<String, Value>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// Which Prometheus counters say what the server computed (see `metrics`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct MetricsSpec {
    #[serde(default = "default_metrics_path")]
    pub path: String,
    /// Prompt tokens computed (prefilled), cached ones excluded: `llamacpp:prompt_tokens_total`.
    #[serde(default)]
    pub computed_tokens: Option<String>,
    /// All prompt tokens, cached ones included: `vllm:prompt_tokens_total`.
    #[serde(default)]
    pub prompt_tokens: Option<String>,
    /// Prompt tokens served from a cache: `vllm:prefix_cache_hits_total`.
    #[serde(default)]
    pub cached_tokens: Option<String>,
}

fn default_metrics_path() -> String {
    "/metrics".into()
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Scope {
    Session,
    Global,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct ActionStep {
    #[serde(with = "method")]
    pub method: reqwest::Method,
    pub path: String,
    #[serde(default)]
    pub body: Option<Value>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// HTTP statuses that count as success besides 2xx (e.g. 404 when deleting what is gone).
    #[serde(default)]
    pub ok_status: Vec<u16>,
    /// Inferred from the placeholders when not given (see the module docs).
    #[serde(default)]
    pub scope: Option<Scope>,
    /// The field of this step's JSON answer that says how many bytes the server saved to its disk
    /// (llama.cpp's slot save: `n_written`): the size of a warm session's saved file where bench
    /// cannot reach the server's save directory to read it.
    #[serde(default)]
    pub saved_bytes: Option<String>,
}

/// An HTTP method is checked once, when the preset is read, not on every call.
mod method {
    use serde::{Deserialize, Deserializer, Serializer, de};

    pub(crate) fn serialize<S: Serializer>(m: &reqwest::Method, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(m.as_str())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<reqwest::Method, D::Error> {
        let text = String::deserialize(d)?;
        match text.to_uppercase().as_str() {
            m @ ("GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD") => {
                reqwest::Method::from_bytes(m.as_bytes()).map_err(de::Error::custom)
            }
            _ => Err(de::Error::custom(format!(
                "unknown HTTP method {text:?} (GET, POST, PUT, PATCH, DELETE, HEAD)"
            ))),
        }
    }
}

impl ActionStep {
    pub(crate) fn scope(&self) -> Scope {
        self.scope.unwrap_or_else(|| {
            let mut text = vec![self.path.clone()];
            text.extend(self.headers.values().cloned());
            text.extend(self.body.as_ref().map(Value::to_string));
            let names_session = text.iter().any(|t| t.contains("{slot}") || t.contains("{session}"));
            if names_session { Scope::Session } else { Scope::Global }
        })
    }
}

/// Identifies one session on the server.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Session {
    pub id: String,
    pub slot: u32,
    /// How the session's requests and actions are bound.
    pub binding: Binding,
}

/// How a session's requests reach the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Binding {
    /// The preset's `request` binding and every session action (reset, evict, reload, cleanup).
    #[default]
    Session,
    /// A cold request that reuses nothing (`Preset::cold_request`): no session action runs for
    /// it (nothing of it is reused, so nothing needs resetting or forgetting). `pinned`: sent to
    /// the session's slot; otherwise binding keys naming `{slot}` are left out.
    Cold { pinned: bool },
}

impl Session {
    pub(crate) fn new(id: String, slot: u32) -> Session {
        Session { id, slot, binding: Binding::Session }
    }
}

/// A preset that cannot be used: it cannot be read, or a placeholder cannot be filled.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PresetError {
    #[error("built-in preset {name}: {source}")]
    BuiltIn { name: String, source: toml::de::Error },
    #[error("--preset {path}: {source}")]
    Unreadable { path: String, source: ttft_model::input_file::ReadError },
    #[error("--preset {path}: {source}")]
    Malformed { path: String, source: toml::de::Error },
    #[error("--preset: unknown preset {name:?} (built in: {known}; or a .toml file)")]
    Unknown { name: String, known: String },
    #[error("preset: unclosed placeholder in {template:?}")]
    Unclosed { template: String },
    #[error("preset needs the environment variable {0}")]
    MissingEnv(String),
    #[error("preset: unknown placeholder {{{name}}} in {template:?}")]
    UnknownPlaceholder { name: String, template: String },
    #[error(
        "--preset {preset}: {place}: unknown placeholder {{{name}}} in {template:?} (known: {{slot}}, \
         {{session}}, {{env:NAME}})"
    )]
    PlaceholderInFile { preset: String, place: String, name: String, template: String },
    #[error("--preset {preset}: {place}: unclosed placeholder in {template:?}")]
    UnclosedInFile { preset: String, place: String, template: String },
    #[error("preset {preset}: {{{name}}} has no value for --api {api} (its [per_api.*] tables: {known})")]
    NotForApi { preset: String, name: String, api: String, known: String },
}

/// A preset that cannot be used is the user's input (its file, its name, its environment).
impl From<PresetError> for crate::exit::Failure {
    fn from(e: PresetError) -> crate::exit::Failure {
        crate::exit::Failure::Usage(e.to_string())
    }
}

/// A preset action that ran: how long it took, and what its answers said the server saved.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ActionDone {
    pub took: Duration,
    pub saved_bytes: Option<u64>,
}

/// A preset action that failed: which action, and what a record of it is (the server gone or too
/// slow, or the server refusing the action).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{action}: {message}")]
pub(crate) struct ActionError {
    pub action: String,
    pub kind: ErrorKind,
    pub message: String,
}

/// What a failed call means for a record: unreachable -> connect, too slow -> timeout, anything
/// else the server said -> preset_action.
pub(crate) fn kind_of(e: &CallError) -> ErrorKind {
    if e.is_unreachable() {
        ErrorKind::Connect
    } else if e.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::PresetAction
    }
}

impl Preset {
    /// A built-in name or a path to a TOML file.
    pub(crate) fn load(name_or_path: &str) -> Result<Preset, PresetError> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return toml::from_str(text)
                .map_err(|source| PresetError::BuiltIn { name: name_or_path.into(), source });
        }
        let path = std::path::Path::new(name_or_path);
        if path.extension().is_some_and(|e| e == "toml") || path.exists() {
            let text = ttft_model::input_file::read_text(path, ttft_model::input_file::Limit::PRESET)
                .map_err(|source| PresetError::Unreadable { path: name_or_path.into(), source })?;
            let preset: Preset = toml::from_str(&text)
                .map_err(|source| PresetError::Malformed { path: name_or_path.into(), source })?;
            preset.check_placeholders(name_or_path)?;
            return Ok(preset);
        }
        let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        Err(PresetError::Unknown { name: name_or_path.into(), known: names.join(", ") })
    }

    /// Every placeholder of every template is one `fill` knows, checked when the file is read:
    /// found only when an action runs, a misspelled one would fail every cell of a sweep.
    fn check_placeholders(&self, preset: &str) -> Result<(), PresetError> {
        let mut texts: Vec<(String, String)> = Vec::new();
        self.clone().visit_templates(&mut |place, text| texts.push((place, text.clone())));
        for (api, values) in &self.per_api {
            for (k, v) in values {
                texts.push((format!("per_api.{api}.{k}"), v.clone()));
            }
        }
        let per_api = |name: &str| self.per_api.values().any(|values| values.contains_key(name));
        for (place, template) in &texts {
            let (place, template) = (place.clone(), template.as_str());
            let mut rest = template;
            while let Some(open) = rest.find('{') {
                let Some(close) = rest[open..].find('}') else {
                    return Err(PresetError::UnclosedInFile {
                        preset: preset.into(),
                        place,
                        template: template.into(),
                    });
                };
                let name = &rest[open + 1..open + close];
                if !(name == "slot" || name == "session" || name.starts_with("env:") || per_api(name)) {
                    return Err(PresetError::PlaceholderInFile {
                        preset: preset.into(),
                        place,
                        name: name.into(),
                        template: template.into(),
                    });
                }
                rest = &rest[open + close + 1..];
            }
        }
        Ok(())
    }

    /// The preset as `api` uses it: every `[per_api.<api>]` placeholder replaced by its value in
    /// every template. A placeholder that another API's table defines and this API's does not is
    /// an error naming it: the action would otherwise fail on every cell of the sweep.
    pub(crate) fn for_api(mut self, api: &str) -> Result<Preset, PresetError> {
        let names: std::collections::BTreeSet<String> =
            self.per_api.values().flat_map(|values| values.keys().cloned()).collect();
        if names.is_empty() {
            return Ok(self);
        }
        let values = self.per_api.get(api).cloned().unwrap_or_default();
        let known = self.per_api.keys().cloned().collect::<Vec<_>>().join(", ");
        let mut missing = None;
        let mut resolve = |_: String, text: &mut String| {
            for name in &names {
                let placeholder = format!("{{{name}}}");
                if !text.contains(&placeholder) {
                    continue;
                }
                match values.get(name) {
                    Some(value) => *text = text.replace(&placeholder, value),
                    None => missing = Some(name.clone()),
                }
            }
        };
        self.visit_templates(&mut resolve);
        if let Some(name) = missing {
            return Err(PresetError::NotForApi { preset: self.name.clone(), name, api: api.into(), known });
        }
        Ok(self)
    }

    /// Calls `f` on every template string of the preset (request binding, actions, stats, saved
    /// file, session state) with where it is (`reset[0].path`): the one walk that placeholder
    /// checks and `for_api` share, so a template field added here is both checked and resolved.
    fn visit_templates(&mut self, f: &mut impl FnMut(String, &mut String)) {
        fn in_value(place: String, value: &mut Value, f: &mut impl FnMut(String, &mut String)) {
            match value {
                Value::String(s) => f(place, s),
                Value::Array(items) => {
                    for (i, v) in items.iter_mut().enumerate() {
                        in_value(format!("{place}[{i}]"), v, f);
                    }
                }
                Value::Object(map) => {
                    for (k, v) in map.iter_mut() {
                        in_value(format!("{place}.{k}"), v, f);
                    }
                }
                _ => {}
            }
        }
        for (k, v) in self.request.body.iter_mut() {
            in_value(format!("request.body.{k}"), v, f);
        }
        for (k, v) in self.request.headers.iter_mut() {
            f(format!("request.headers.{k}"), v);
        }
        if let Some(cold) = &mut self.cold_request {
            for (k, v) in cold.body.iter_mut() {
                in_value(format!("cold_request.body.{k}"), v, f);
            }
            for (k, v) in cold.headers.iter_mut() {
                f(format!("cold_request.headers.{k}"), v);
            }
        }
        let actions = [
            ("reset", &mut self.reset),
            ("evict", &mut self.evict),
            ("reload", &mut self.reload),
            ("cleanup", &mut self.cleanup),
        ];
        let steps = actions
            .into_iter()
            .flat_map(|(name, steps)| {
                steps.iter_mut().enumerate().map(move |(i, s)| (format!("{name}[{i}]"), s))
            })
            .chain(self.stats.iter_mut().map(|s| ("stats".to_string(), s)));
        for (at, step) in steps {
            f(format!("{at}.path"), &mut step.path);
            for (k, v) in step.headers.iter_mut() {
                f(format!("{at}.headers.{k}"), v);
            }
            if let Some(body) = &mut step.body {
                in_value(format!("{at}.body"), body, f);
            }
        }
        if let Some(file) = &mut self.saved_file {
            f("saved_file".into(), file);
        }
        if let Some(st) = &mut self.session_state {
            f("session_state.path".into(), &mut st.path);
            f("session_state.id".into(), &mut st.id);
            for (k, v) in st.headers.iter_mut() {
                f(format!("session_state.headers.{k}"), v);
            }
        }
    }

    /// The server's listing of every session's cache (`session_state`), or why it could not be
    /// read; None when the preset names no such listing.
    pub(crate) async fn fetch_session_listing(
        &self,
        client: &Client,
        session: &Session,
    ) -> Option<Result<Value, String>> {
        let spec = self.session_state.as_ref()?;
        Some(run_step(client, &spec.step(), session).await.map_err(|(_, message)| message))
    }

    /// The saved file of `session` in `dir`, when the preset names one.
    pub(crate) fn saved_path(
        &self,
        dir: &std::path::Path,
        session: &Session,
    ) -> Result<Option<std::path::PathBuf>, PresetError> {
        self.saved_file.as_deref().map(|f| fill(f, session).map(|name| dir.join(name))).transpose()
    }

    pub(crate) fn supports_warm(&self) -> bool {
        !self.evict.is_empty()
    }

    /// Why this preset cannot produce a warm state for several sessions at once, if it cannot: an
    /// eviction or reload that acts on the whole server would evict or reload the other sessions
    /// of the batch too.
    pub(crate) fn warm_batch_problem(&self) -> Option<String> {
        let global: Vec<String> = [("evict", &self.evict), ("reload", &self.reload)]
            .iter()
            .flat_map(|(name, steps)| {
                steps.iter().filter(|s| s.scope() == Scope::Global).map(move |s| format!("{name} {}", s.path))
            })
            .collect();
        (!global.is_empty()).then(|| {
            format!(
                "preset {} acts on the whole server to evict or reload ({}), so several warm sessions \
                 cannot be prepared at once without disturbing each other",
                self.name,
                global.join(", ")
            )
        })
    }

    /// Environment variables the given actions need (`{env:NAME}`), with the action naming each.
    pub(crate) fn required_env<'a>(
        &'a self,
        actions: &[(&'a str, &'a [ActionStep])],
    ) -> Vec<(String, &'a str)> {
        let mut out = Vec::new();
        let mut texts: Vec<(&str, String)> = Vec::new();
        for (name, steps) in actions {
            for step in steps.iter() {
                texts.push((name, step.path.clone()));
                texts.extend(step.headers.values().map(|v| (*name, v.clone())));
                texts.extend(step.body.as_ref().map(|b| (*name, b.to_string())));
            }
        }
        texts.extend(self.request.headers.values().map(|v| ("request", v.clone())));
        for (action, text) in texts {
            let mut rest = text.as_str();
            while let Some(at) = rest.find("{env:") {
                let tail = &rest[at + 5..];
                let Some(end) = tail.find('}') else { break };
                let var = tail[..end].to_string();
                if !out.iter().any(|(v, _)| *v == var) {
                    out.push((var, action));
                }
                rest = &tail[end..];
            }
        }
        out
    }

    /// Whether cold requests can be sent without a session's slot (`cold_request`).
    pub(crate) fn cold_needs_no_slot(&self) -> bool {
        self.cold_request.is_some()
    }

    /// Adds the session binding to a chat request (replacing what an earlier binding added).
    pub(crate) fn bind(&self, req: &mut ChatRequest, session: &Session) -> Result<(), PresetError> {
        let names_slot = |v: &str| v.contains("{slot}");
        let (cold, pinned) = match (session.binding, &self.cold_request) {
            (Binding::Cold { pinned }, Some(cold)) => (Some(cold), pinned),
            _ => (None, true),
        };
        let mut body = self.request.body.clone();
        let mut headers = self.request.headers.clone();
        if let Some(cold) = cold {
            body.extend(cold.body.clone());
            headers.extend(cold.headers.clone());
        }
        for (k, v) in &body {
            req.extra_body.remove(k);
            if pinned || !names_slot(&v.to_string()) {
                req.extra_body.insert(k.clone(), fill_value(v, session)?);
            }
        }
        for (k, v) in &headers {
            req.headers.retain(|(name, _)| name != k);
            if pinned || !names_slot(v) {
                req.headers.push((k.clone(), fill(v, session)?));
            }
        }
        Ok(())
    }

    /// Runs the steps of one action that have `scope` (all steps when None), in order; returns the
    /// time they took.
    pub(crate) async fn run(
        &self,
        client: &Client,
        action: &str,
        steps: &[ActionStep],
        scope: Option<Scope>,
        session: &Session,
    ) -> Result<Duration, ActionError> {
        self.run_saving(client, action, steps, scope, session).await.map(|done| done.took)
    }

    /// `run`, and the bytes the server said it saved (the steps' `saved_bytes` fields, added up).
    pub(crate) async fn run_saving(
        &self,
        client: &Client,
        action: &str,
        steps: &[ActionStep],
        scope: Option<Scope>,
        session: &Session,
    ) -> Result<ActionDone, ActionError> {
        let start = Instant::now();
        let mut saved_bytes = None;
        // A cold request that reuses nothing has no session to reset, evict or forget (`Binding`).
        let no_session_actions = matches!(session.binding, Binding::Cold { .. });
        for step in steps
            .iter()
            .filter(|s| scope.is_none_or(|want| s.scope() == want))
            .filter(|s| !(no_session_actions && s.scope() == Scope::Session))
        {
            let answer = run_step(client, step, session).await.map_err(|(kind, message)| ActionError {
                action: action.to_string(),
                kind,
                message,
            })?;
            if let Some(n) =
                step.saved_bytes.as_ref().and_then(|field| answer.get(field)).and_then(Value::as_u64)
            {
                saved_bytes = Some(saved_bytes.unwrap_or(0) + n);
            }
        }
        Ok(ActionDone { took: start.elapsed(), saved_bytes })
    }

    pub(crate) async fn fetch_stats(&self, client: &Client, session: &Session) -> Option<Value> {
        let step = self.stats.as_ref()?;
        run_step(client, step, session).await.ok()
    }
}

/// Actions honour the client's one timeout policy (`--request-timeout`).
async fn run_step(
    client: &Client,
    step: &ActionStep,
    session: &Session,
) -> Result<Value, (ErrorKind, String)> {
    let setup = |e: PresetError| (ErrorKind::PresetAction, e.to_string());
    let path = fill(&step.path, session).map_err(setup)?;
    let body = step.body.as_ref().map(|b| fill_value(b, session)).transpose().map_err(setup)?;
    let mut headers = Vec::new();
    for (k, v) in &step.headers {
        headers.push((k.clone(), fill(v, session).map_err(setup)?));
    }
    match server::call(client, step.method.clone(), &path, body.as_ref(), &headers).await {
        Ok(v) => Ok(v),
        Err(e) if e.status().is_some_and(|s| step.ok_status.contains(&s)) => Ok(Value::Null),
        // The message names method and path only: headers may hold secrets.
        Err(e) => Err((kind_of(&e), format!("preset action failed: {e}"))),
    }
}

/// Replaces placeholders in a string. `{env:NAME}` values are registered as secrets.
fn fill(template: &str, session: &Session) -> Result<String, PresetError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            return Err(PresetError::Unclosed { template: template.into() });
        };
        let name = &rest[open + 1..open + close];
        match name {
            "slot" => out.push_str(&session.slot.to_string()),
            "session" => out.push_str(&session.id),
            _ => match name.strip_prefix("env:") {
                Some(var) => {
                    let value = std::env::var(var).map_err(|_| PresetError::MissingEnv(var.into()))?;
                    ttft_model::secrets::register(&value); // an admin key a server may echo back
                    out.push_str(&value);
                }
                None => {
                    return Err(PresetError::UnknownPlaceholder {
                        name: name.into(),
                        template: template.into(),
                    });
                }
            },
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Fills placeholders inside JSON strings. A string that is exactly `{slot}` becomes a number,
/// because servers want `"id_slot": 0`, not `"0"`.
fn fill_value(value: &Value, session: &Session) -> Result<Value, PresetError> {
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
mod tests;

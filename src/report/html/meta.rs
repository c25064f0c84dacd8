//! The inputs' metadata (run.json of a sweep, an origin file's metadata, every run of a canonical
//! file) and the settings that differ between sources (merge's conflicts).
//!
//! The highlights are read from the verbatim document by JSON pointer, not through a typed view:
//! this is display only, a partial or older run.json shows what it has, and the whole document is
//! printed under each summary, so nothing is hidden when a field moves. `tests/real/report_html.rs`
//! writes a run.json from the sweep's own `meta::RunMeta` and checks the highlights, so a rename on
//! the writing side fails that test instead of emptying a line here.

use maud::{Markup, html};
use serde_json::Value;

use super::page::thead;
use ttft_results::results::canonical::Conflict;
use ttft_results::results::run_meta::{RunMetaView, SourceMeta};
use ttft_results::results::sources::Source;

/// A highlight: its label, and where it is (the first pointer present wins; `All` joins them).
enum Pick {
    First(&'static [&'static str]),
    All(&'static [&'static str], &'static str),
    /// The length of an array, shown when not zero.
    Count(&'static str),
}

const OURS: &[(&str, Pick)] = &[
    ("run", Pick::First(&["/run_id"])),
    ("status", Pick::First(&["/status"])),
    ("started / ended", Pick::All(&["/started_at", "/ended_at"], " / ")),
    ("harness", Pick::All(&["/harness/name", "/harness/version", "/harness/git_sha"], " ")),
    ("server", Pick::First(&["/server/base_url", "/config/server"])),
    ("server command", Pick::First(&["/server/command", "/config/server_cmd"])),
    ("server version", Pick::First(&["/server/props/build_info"])),
    ("preset / api", Pick::All(&["/server/preset", "/config/api"], " / ")),
    ("model", Pick::First(&["/config/model", "/server/models/data/0/id"])),
    ("hardware", Pick::First(&["/physics/hardware/name", "/config/physics/hardware"])),
    ("model profile", Pick::First(&["/physics/model", "/config/physics"])),
    ("host", Pick::All(&["/host/cpu_brand", "/host/arch", "/host/os", "/host/os_version"], " · ")),
    ("scenario file", Pick::First(&["/config/scenario_file"])),
    ("contexts", Pick::First(&["/config/contexts"])),
    ("modes", Pick::First(&["/config/modes"])),
    ("cache states", Pick::First(&["/config/cache_states"])),
    ("batch sizes", Pick::First(&["/config/batch_sizes"])),
    ("runs / output tokens", Pick::All(&["/config/runs", "/config/output_tokens"], " / ")),
    ("thermal", Pick::First(&["/config/thermal"])),
    ("thermal baseline tok/s", Pick::First(&["/thermal_baseline/baseline_tps"])),
    ("shard", Pick::First(&["/config/shard"])),
    ("server crashes", Pick::Count("/server_crashes")),
    ("resumed", Pick::Count("/resumed_at")),
    ("TLS verification off", Pick::First(&["/config/insecure"])),
];

const ORIGIN: &[(&str, Pick)] = &[
    ("benchmark", Pick::All(&["/metadata/benchmark", "/metadata/git_sha"], " ")),
    ("model", Pick::First(&["/model_id"])),
    ("machine", Pick::First(&["/metadata/machine"])),
    ("server settings", Pick::First(&["/server_env"])),
    ("config", Pick::First(&["/metadata/config"])),
];

/// A value as one line: strings as they are, lists of plain values joined, anything else as JSON;
/// null, false and empty say nothing.
fn shown(v: &Value) -> Option<String> {
    match v {
        Value::Null | Value::Bool(false) => None,
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(s.clone()),
        Value::Array(items) if items.iter().all(|i| !i.is_array() && !i.is_object()) => {
            let parts: Vec<String> = items.iter().filter_map(shown).collect();
            (!parts.is_empty()).then(|| parts.join(", "))
        }
        other => Some(other.to_string()),
    }
}

fn pick(raw: &Value, p: &Pick) -> Option<String> {
    match p {
        Pick::First(pointers) => pointers.iter().find_map(|ptr| raw.pointer(ptr).and_then(shown)),
        Pick::All(pointers, sep) => {
            let parts: Vec<String> =
                pointers.iter().filter_map(|ptr| raw.pointer(ptr).and_then(shown)).collect();
            (!parts.is_empty()).then(|| parts.join(sep))
        }
        Pick::Count(ptr) => match raw.pointer(ptr) {
            Some(Value::Array(a)) if !a.is_empty() => Some(a.len().to_string()),
            _ => None,
        },
    }
}

/// The highlights of one metadata document, and the document itself (folded).
fn run_meta_html(meta: &SourceMeta) -> Markup {
    let (fields, what) = match meta.view {
        RunMetaView::Ours(_) => (OURS, "run.json"),
        RunMetaView::Origin(_) => (ORIGIN, "origin metadata"),
    };
    let whole = serde_json::to_string_pretty(&meta.raw).unwrap_or_else(|_| meta.raw.to_string());
    html! {
        dl.meta {
            @for (label, p) in fields {
                @if let Some(v) = pick(&meta.raw, p) { dt { (label) } dd { (v) } }
            }
        }
        details { summary { "the whole " (what) } pre { (whole) } }
    }
}

/// One input: its path, kind and record count, then each of its runs' metadata.
pub(crate) fn input_html<T>(src: &Source<T>) -> Markup {
    let n = src.run_meta.len();
    html! {
        section.input {
            h3 {
                code { (src.path.display()) } " "
                span.muted { (src.kind.as_str()) ", " (src.records.len()) " records" }
            }
            @if src.run_meta.is_empty() { p.muted { "no metadata (records only)" } }
            @for (i, meta) in src.run_meta.iter().enumerate() {
                // A canonical file holds every merged run's metadata: each is headed by its run.
                @if n > 1 {
                    h4 { (meta.view.run_id().map_or_else(|| format!("{} of {n}", i + 1), |id| format!("run {id}"))) }
                }
                (run_meta_html(meta))
            }
        }
    }
}

/// Conflicts with where they come from ("recorded in paper.json by bench merge").
pub(crate) struct ConflictSet {
    pub origin: String,
    pub conflicts: Vec<Conflict>,
}

/// Every set of conflicts: each canonical input's recorded ones, then (with several inputs) those
/// between the inputs, as `bench merge` of the same inputs would record them.
pub(crate) fn conflict_sets<T: ttft_results::results::slotted::Slotted>(
    sources: &[Source<T>],
) -> Vec<ConflictSet> {
    let mut sets = Vec::new();
    for src in sources.iter().filter(|s| !s.conflicts.is_empty()) {
        let origin = format!("recorded in {} by bench merge", src.path.display());
        sets.push(ConflictSet { origin, conflicts: src.conflicts.clone() });
    }
    if sources.len() > 1 {
        let mut ordered: Vec<&Source<T>> = sources.iter().collect();
        ordered.sort_by_key(|s| s.path.display().to_string());
        let conflicts = crate::merge::settings::conflicts(&ordered);
        if !conflicts.is_empty() {
            sets.push(ConflictSet { origin: "between the inputs of this report".into(), conflicts });
        }
    }
    sets
}

pub(crate) fn conflicts_html(sets: &[ConflictSet]) -> Markup {
    html! {
        @if sets.is_empty() { p.muted { "none: every setting the sources state agrees" } }
        @for set in sets {
            p { (set.origin) }
            table.conflicts {
                (thead(&["setting", "value", "sources"]))
                tbody {
                    @for c in &set.conflicts {
                        @for v in &c.values {
                            tr { td { (c.setting) } td { (v.value) } td { (v.sources.join(", ")) } }
                        }
                    }
                }
            }
        }
    }
}

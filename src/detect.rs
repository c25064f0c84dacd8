//! Which server is this? (docs/servers.md) Without `--preset`, bench picks the preset of the
//! server it talks to from what that server already answers, so a first sweep against llama.cpp
//! drives its slots instead of treating it as a plain OpenAI endpoint (whose "cold" a llama.cpp
//! prompt cache contradicts and whose warm cannot be produced). `--preset NAME` always wins;
//! `--preset openai` forces the plain one.
//!
//! Each signal is a server's own endpoint answering with its own shape, never a status alone: a
//! gateway or a catch-all route that answers 200 to every path must not pass for a server. The
//! probes are GETs within the preflight timeout, in this order, and the first match wins:
//! the hosted APIs by host name (no probe), llama.cpp's `/props` (already fetched by preflight),
//! the Prometheus page's metric prefixes (`llamacpp:`, `vllm:`, `sglang:`), agent-memory's
//! `/v1/agents/stats`, SGLang's `/get_server_info`, vLLM's `/version`. Nothing matching is the
//! plain `openai` preset, said so.

use serde_json::Value;

use crate::server;
use ttft_client::Client;

/// The preset detection chose, and the evidence it chose it on (one line, for stderr and
/// run.json's `server.preset_detected`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Detection {
    pub preset: &'static str,
    pub why: String,
}

impl Detection {
    fn new(preset: &'static str, why: impl Into<String>) -> Detection {
        Detection { preset, why: why.into() }
    }

    /// The line printed when a run starts.
    pub(crate) fn announce(&self) -> String {
        format!(
            "server detected: preset {} ({}); --preset NAME overrides, --preset openai forces the plain one",
            self.preset, self.why
        )
    }
}

/// Detects the server behind `client`; `props` is preflight's GET /props answer, if any.
pub(crate) async fn detect(client: &Client, props: Option<&Value>) -> Detection {
    if let Some(found) = hosted(client.base()) {
        return found;
    }
    if let Some(found) = props.and_then(llama_cpp_props) {
        return found;
    }
    if let Some(found) = metrics_page(client).await.as_deref().and_then(by_metric_prefix) {
        return found;
    }
    let json = |path: &'static str| async move { server::preflight_get(client, path).await.ok() };
    if let Some(found) = json("/v1/agents/stats").await.as_ref().and_then(agent_memory_stats) {
        return found;
    }
    if let Some(found) = json("/get_server_info").await.as_ref().and_then(sglang_server_info) {
        return found;
    }
    if let Some(found) = json("/version").await.as_ref().and_then(vllm_version) {
        return found;
    }
    Detection::new(
        "openai",
        "no llama.cpp, vLLM, SGLang or agent-memory endpoint answered: a plain OpenAI-compatible server, \
         cold relies on the prompt's nonce and warm is unsupported",
    )
}

/// The hosted APIs, known by their host: nothing to probe (and no cache control to drive).
fn hosted(base: &str) -> Option<Detection> {
    let authority = base.split("://").nth(1)?.split('/').next()?;
    let host = authority.rsplit('@').next()?.split(':').next()?.to_ascii_lowercase();
    let hosted =
        [("api.openai.com", "the hosted OpenAI API"), ("api.anthropic.com", "the hosted Anthropic API")];
    hosted
        .iter()
        .find(|(h, _)| host == *h)
        .map(|(h, what)| Detection::new("openai", format!("{h} is {what}: no cache control")))
}

/// llama.cpp's `/props`: its slot count and build.
fn llama_cpp_props(props: &Value) -> Option<Detection> {
    let slots = props.get("total_slots")?.as_u64()?;
    let build =
        props.get("build_info").and_then(Value::as_str).map_or(String::new(), |b| format!(", build {b}"));
    Some(Detection::new("llama.cpp", format!("GET /props answered with total_slots {slots}{build}")))
}

/// A Prometheus page names its server in its metrics' prefix.
fn by_metric_prefix(page: &str) -> Option<Detection> {
    let names = crate::metrics::parse(page);
    [("llamacpp:", "llama.cpp"), ("vllm:", "vllm"), ("sglang:", "sglang")].iter().find_map(
        |(prefix, preset)| {
            let name = names.keys().find(|n| n.starts_with(prefix))?;
            Some(Detection::new(preset, format!("GET /metrics serves {name}")))
        },
    )
}

/// agent-memory's aggregate cache statistics: tier counts.
fn agent_memory_stats(stats: &Value) -> Option<Detection> {
    stats.get("hot_count")?.as_u64()?;
    stats.get("warm_count")?.as_u64()?;
    Some(Detection::new("agent-memory", "GET /v1/agents/stats answered with hot_count and warm_count"))
}

/// SGLang's `/get_server_info`: its server arguments.
fn sglang_server_info(info: &Value) -> Option<Detection> {
    info.get("tp_size")?.as_u64()?;
    info.get("model_path")?.as_str()?;
    Some(Detection::new(
        "sglang",
        "GET /get_server_info answered with its server arguments (tp_size, model_path)",
    ))
}

/// vLLM's `/version`: a lone version string.
fn vllm_version(version: &Value) -> Option<Detection> {
    let object = version.as_object()?;
    let v = object.get("version")?.as_str()?;
    (object.len() == 1)
        .then(|| Detection::new("vllm", format!("GET /version answered {{\"version\": \"{v}\"}}")))
}

/// The server's Prometheus page as text, when it serves one (preflight timeout, capped).
async fn metrics_page(client: &Client) -> Option<String> {
    crate::metrics::page(client, "/metrics", client.preflight_timeout()).await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_signal_needs_the_servers_own_shape_not_a_status() {
        let ok = json!({"ok": true});
        assert_eq!(llama_cpp_props(&ok), None);
        assert_eq!(agent_memory_stats(&ok), None);
        assert_eq!(sglang_server_info(&ok), None);
        assert_eq!(vllm_version(&ok), None);
        assert_eq!(by_metric_prefix("process_cpu_seconds_total 3\n"), None);
        assert_eq!(llama_cpp_props(&json!({"total_slots": 4})).unwrap().preset, "llama.cpp");
        assert_eq!(
            agent_memory_stats(&json!({"hot_count": 0, "warm_count": 2})).unwrap().preset,
            "agent-memory"
        );
        assert_eq!(sglang_server_info(&json!({"tp_size": 1, "model_path": "m"})).unwrap().preset, "sglang");
        assert_eq!(vllm_version(&json!({"version": "0.11.0"})).unwrap().preset, "vllm");
        assert_eq!(by_metric_prefix("vllm:prompt_tokens_total{model=\"m\"} 5\n").unwrap().preset, "vllm");
        assert_eq!(by_metric_prefix("sglang:num_running_reqs 0\n").unwrap().preset, "sglang");
    }

    #[test]
    fn the_hosted_apis_are_known_by_host_whatever_the_url_carries() {
        for url in
            ["https://api.openai.com/v1", "https://user:pw@API.anthropic.com:443", "https://api.openai.com"]
        {
            assert_eq!(hosted(url).map(|d| d.preset), Some("openai"), "{url}");
        }
        assert_eq!(hosted("http://127.0.0.1:8080"), None);
        assert_eq!(hosted("https://api.openai.com.evil.example"), None);
    }
}

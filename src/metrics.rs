//! Cache evidence from a server's Prometheus counters (llama.cpp `--metrics`, vLLM and SGLang
//! `/metrics`): a snapshot before and after a measurement, and the deltas of the counters the
//! preset names. This proves a cache state even where usage carries no cached-token count.
//!
//! The text format is parsed here, in a few lines, because the crate that parses it
//! (prometheus-parse 0.2) only accepts `\w+` names, and every server we read names its counters
//! with a colon (`llamacpp:prompt_tokens_total`, `vllm:prefix_cache_hits_total`), which the
//! format allows. A counter with several label sets (vLLM labels by model and engine) is summed.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;

use crate::preset::MetricsSpec;
use ttft_client::Client;
use ttft_model::record::MetricsDelta;

/// A metrics page larger than this is not read further (a real one is a few KiB).
const MAX_METRICS_BYTES: usize = 4 << 20;

/// Counter values by name (summed over label sets).
pub(crate) type Snapshot = BTreeMap<String, f64>;

/// Parses Prometheus text: `name{labels} value [timestamp]` lines; comments and blank lines skipped,
/// unparsable lines ignored (a scrape is evidence, not input to validate).
pub(crate) fn parse(text: &str) -> Snapshot {
    let mut out = Snapshot::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (name, rest) = match line.find(['{', ' ', '\t']) {
            Some(i) => line.split_at(i),
            None => continue,
        };
        let rest = match rest.strip_prefix('{') {
            Some(labelled) => labelled.rsplit_once('}').map_or("", |(_, after)| after),
            None => rest,
        };
        let Some(value) = rest.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        if value.is_finite() {
            *out.entry(name.to_string()).or_default() += value;
        }
    }
    out
}

/// Fetches and parses the server's metrics page; None when there is none or it cannot be read.
pub(crate) async fn snapshot(client: &Client, spec: &MetricsSpec, timeout: Duration) -> Option<Snapshot> {
    page(client, &spec.path, timeout).await.map(|text| parse(&text))
}

/// The text of GET `path` (a Prometheus page), with the client's credentials and the user's
/// headers like every call bench makes; None when the server has none or it cannot be read.
/// A GET of counters is idempotent and outside every timed window, so a failed send (a pooled
/// connection the server had just closed) is tried once more.
pub(crate) async fn page(client: &Client, path: &str, timeout: Duration) -> Option<String> {
    let url = format!("{}{path}", client.base());
    let send = || client.identify(client.http().get(&url)).timeout(timeout).send();
    let response = match send().await {
        Ok(r) => r,
        Err(_) => send().await.ok()?,
    };
    if !response.status().is_success() {
        return None;
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        body.extend_from_slice(&chunk.ok()?);
        if body.len() > MAX_METRICS_BYTES {
            return None;
        }
    }
    Some(String::from_utf8_lossy(&body).into_owned())
}

/// The change of the spec's counters between two snapshots.
pub(crate) fn delta(spec: &MetricsSpec, before: &Snapshot, after: &Snapshot) -> MetricsDelta {
    let change = |name: &Option<String>| {
        let name = name.as_ref()?;
        Some(after.get(name)? - before.get(name).copied().unwrap_or(0.0))
    };
    let mut counters = BTreeMap::new();
    for name in [&spec.computed_tokens, &spec.prompt_tokens, &spec.cached_tokens].into_iter().flatten() {
        if let Some(d) = change(&Some(name.clone())) {
            counters.insert(name.clone(), d);
        }
    }
    let cached_tokens = change(&spec.cached_tokens);
    let computed_tokens = change(&spec.computed_tokens)
        .or_else(|| Some(change(&spec.prompt_tokens)? - cached_tokens.unwrap_or(0.0)));
    MetricsDelta { computed_tokens, cached_tokens, counters }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA: &str = "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n\
        # TYPE llamacpp:prompt_tokens_total counter\n\
        llamacpp:prompt_tokens_total 4096\n\
        llamacpp:prompt_tokens_cached_total 12\n\
        llamacpp:n_tokens_max 4160\n";

    #[test]
    fn colon_names_labels_and_timestamps_parse() {
        let s = parse(LLAMA);
        assert_eq!(s["llamacpp:prompt_tokens_total"], 4096.0);
        let vllm = "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 32.0\n\
                    vllm:prefix_cache_hits_total{engine=\"1\",model_name=\"m\"} 16.0 1712000000000\n\
                    garbage line\nvllm:x{a=\"}\"} 1\n";
        let s = parse(vllm);
        assert_eq!(s["vllm:prefix_cache_hits_total"], 48.0, "label sets are summed");
        assert_eq!(s["vllm:x"], 1.0, "a brace inside a label value");
        assert!(!s.contains_key("garbage"));
    }

    #[test]
    fn deltas_give_computed_and_cached_tokens() {
        let llama = MetricsSpec {
            path: "/metrics".into(),
            computed_tokens: Some("llamacpp:prompt_tokens_total".into()),
            prompt_tokens: None,
            cached_tokens: Some("llamacpp:prompt_tokens_cached_total".into()),
        };
        let before = parse(LLAMA);
        let after = parse(&LLAMA.replace("4096", "4098").replace(" 12\n", " 4106\n"));
        let d = delta(&llama, &before, &after);
        assert_eq!((d.computed_tokens, d.cached_tokens), (Some(2.0), Some(4094.0)));

        let vllm = MetricsSpec {
            path: "/metrics".into(),
            computed_tokens: None,
            prompt_tokens: Some("vllm:prompt_tokens_total".into()),
            cached_tokens: Some("vllm:prefix_cache_hits_total".into()),
        };
        let before = parse("vllm:prompt_tokens_total 100\nvllm:prefix_cache_hits_total 0\n");
        let after = parse("vllm:prompt_tokens_total 1124\nvllm:prefix_cache_hits_total 1008\n");
        let d = delta(&vllm, &before, &after);
        assert_eq!((d.computed_tokens, d.cached_tokens), (Some(16.0), Some(1008.0)));
        let e = d.evidence().unwrap();
        assert_eq!(
            (e.source.as_str(), e.cached_tokens, e.prompt_evaluated_tokens),
            ("metrics", Some(1008), Some(16))
        );
        assert_eq!(MetricsDelta::default().evidence(), None);
    }
}

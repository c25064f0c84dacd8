//! The fuzz targets' properties (fuzz/src/), replayed on stable over the committed corpus and every
//! crash ever found (fuzz/regressions/<target>/), so CI keeps them without libFuzzer.

#[path = "../../fuzz/src/h1.rs"]
mod h1;
#[path = "../../fuzz/src/results.rs"]
mod results;
#[path = "../../fuzz/src/stream.rs"]
mod stream;

use std::path::Path;

use ttft_model::spec::Api;

fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut out = Vec::new();
    for dir in [root.join("corpus").join(target), root.join("regressions").join(target)] {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            out.push((path.display().to_string(), std::fs::read(&path).unwrap()));
        }
    }
    out
}

/// Every input of `target` through `check`; a panic names the input that caused it.
fn replay(target: &str, check: impl Fn(&[u8]) + std::panic::RefUnwindSafe) {
    let inputs = inputs(target);
    assert!(!inputs.is_empty(), "no corpus for {target}");
    for (name, data) in inputs {
        if let Err(panic) = std::panic::catch_unwind(|| check(&data)) {
            let why = panic.downcast_ref::<String>().cloned().unwrap_or_default();
            panic!("{name}: {why}");
        }
    }
}

#[test]
fn sse_openai_corpus_and_regressions_hold() {
    replay("sse_openai", |data| stream::check(Api::Openai, data));
}

#[test]
fn sse_anthropic_corpus_and_regressions_hold() {
    replay("sse_anthropic", |data| stream::check(Api::Anthropic, data));
}

#[test]
fn h1_unframe_corpus_and_regressions_hold() {
    replay("h1_unframe", h1::check);
}

#[test]
fn record_line_corpus_and_regressions_hold() {
    replay("record_line", results::check_record_line);
}

#[test]
fn results_jsonl_corpus_and_regressions_hold() {
    replay("results_jsonl", |data| results::check_file("measurements.jsonl", data));
}

#[test]
fn results_document_corpus_and_regressions_hold() {
    replay("results_document", |data| results::check_file("published.json", data));
}

#[test]
fn run_json_corpus_and_regressions_hold() {
    replay("run_json", results::check_run_json);
}

/// The reader seeds load (so the fuzzer starts from files that get past the first byte).
#[test]
fn the_result_file_seeds_load() {
    for (target, name) in [("results_jsonl", "m.jsonl"), ("results_document", "p.json")] {
        for (path, data) in inputs(target) {
            let loaded = ttft_results::results::sources::from_bytes(name, &data);
            assert!(loaded.is_ok_and(|s| !s.records.is_empty()), "{path} does not load");
        }
    }
    for (path, data) in inputs("run_json") {
        assert!(ttft_results::results::sources::read_run_json("run.json", &data).is_ok(), "{path}");
    }
}

/// The corpus seeds decode to what they say (so the fuzzer starts from real streams).
#[test]
fn the_llama_cpp_seed_is_a_complete_stream() {
    let data = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/sse_openai/llama_cpp"))
        .unwrap();
    let ex = ttft_client::replay_stream(Api::Openai, &stream::limits(), &[(&data, 1.0)]);
    assert!(ex.error.is_none(), "{:?}", ex.error);
    assert_eq!(ex.content, "Hello world");
    assert_eq!(ex.usage.input_tokens, Some(1024));
}

/// The framing seeds read as they say (so the fuzzer starts past the head, into each framing).
#[test]
fn the_framing_seeds_read_as_they_say() {
    let seed = |name: &str| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/h1_unframe").join(name);
        ttft_client::replay_response([std::fs::read(path).unwrap().as_slice()])
    };
    let sse = seed("chunked_sse");
    assert_eq!((sse.status, sse.ended, sse.reusable, sse.error.as_deref()), (Some(200), true, true, None));
    assert!(sse.payload.ends_with(b"data: [DONE]\n\n"), "{:?}", String::from_utf8_lossy(&sse.payload));
    let json = seed("interim_then_length");
    assert_eq!(
        (json.status, json.payload.as_slice(), json.reusable),
        (Some(200), &b"{\"ok\":true}"[..], true)
    );
    let close = seed("to_close");
    assert_eq!(
        (close.payload.as_slice(), close.ended, close.reusable),
        (&b"until the end"[..], false, false)
    );
    let lf = seed("lf_only_chunks");
    assert!(lf.error.unwrap().starts_with("a chunked-encoding line does not end in CRLF"));
    let more = seed("gzip_chunked_then_more");
    assert_eq!((more.ended, more.reusable), (true, false), "bytes after the body: not reused");
    let busy = seed("error_status");
    assert_eq!((busy.status, busy.payload.as_slice(), busy.reusable), (Some(503), &b"busy"[..], false));
}

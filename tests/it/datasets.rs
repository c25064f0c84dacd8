//! `bench sweep --dataset` and `--turns N --think-time` against the scripted server: every row is
//! measured at its own length and named in its records, cold still opens with a nonce, hot
//! replays a row's own turns and measures turn N on the cache, and merge, report and verify read
//! such a run.

use crate::common;

use std::path::{Path, PathBuf};

use common::scripted::{Behaviour, Logged, Scripted};
use common::{bench, measurements, run_dir, stderr};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/datasets").join(name)
}

fn server() -> Scripted {
    Scripted::start(Behaviour { tokenizer: true, first_token_ms: 5, token_ms: 10, ..Default::default() })
}

/// A quiet sweep of `extra` on the llama.cpp preset (slots give the cache evidence).
fn sweep(url: &str, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = common::quiet_sweep_args(url, out);
    args.extend(["--preset", "llama.cpp", "--runs", "1", "--output-tokens", "8"]);
    args.extend_from_slice(extra);
    bench(&args)
}

fn run_json(run: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap()
}

/// The chat requests that carry `text` in any message.
fn chats_with<'a>(log: &'a [Logged], text: &str) -> Vec<&'a Logged> {
    log.iter()
        .filter(|l| l.path == "/v1/chat/completions")
        .filter(|l| {
            l.body["messages"]
                .as_array()
                .is_some_and(|ms| ms.iter().any(|m| m["content"].as_str() == Some(text)))
        })
        .collect()
}

#[test]
fn a_sharegpt_dataset_is_measured_row_by_row_at_its_own_lengths_and_hot_replays_each_rows_turns() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let file = fixture("sharegpt.json");
    let out = sweep(
        &server.url,
        dir.path(),
        &[
            "--dataset",
            file.to_str().unwrap(),
            "--cache-states",
            "cold,hot",
            "--turns",
            "4",
            "--think-time",
            "150ms",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let meta = run_json(&run);
    let dataset = &meta["config"]["dataset"];
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(dataset["path"], file.to_str().unwrap());
    assert_eq!(dataset["size_bytes"], bytes.len() as u64);
    assert_eq!(dataset["crc32"], format!("{:08x}", crc32fast::hash(&bytes)));
    assert_eq!(dataset["format"], "sharegpt");
    assert_eq!(dataset["rows_in_file"], 3);
    assert_eq!(meta["config"]["turns"], 4);
    let rows = dataset["rows"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["line"].as_u64().unwrap()).collect::<Vec<_>>(), [2, 9, 20]);

    let ms = measurements(&run);
    assert_eq!(ms.len(), 6, "cold and hot of 3 rows: {ms:?}");
    for (row, pair) in rows.iter().zip(ms.chunks(2)) {
        let tokens = row["tokens"].as_u64().unwrap();
        for m in pair {
            assert_eq!(m["dataset_row"], row["row"], "{m}");
            assert_eq!(m["context_tokens"], tokens, "the row's own token count is its context: {m}");
            assert_eq!(m["cache_state_confirmed"], true, "{m}");
            assert_eq!(m["quality_ok"], true, "{m}");
        }
        let (cold, hot) = (&pair[0], &pair[1]);
        assert_eq!(cold["cache_state"], "cold");
        // Counted with the nonce line and the chat template, as the server counted it sent.
        let input = cold["input_tokens"].as_u64().unwrap();
        assert!(input.abs_diff(tokens) <= 2, "row {} counted {tokens}, sent {input}", row["row"]);
        assert_eq!(cold["cache_evidence"]["cached_tokens"], 0, "{cold}");
        // Hot measured turn 4; turns 1 to 3 are kept with their own TTFT, 2 and 3 after a think.
        assert_eq!(hot["cache_state"], "hot");
        let turns = hot["turns"].as_array().unwrap();
        assert_eq!(turns.iter().map(|t| t["turn"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 2, 3]);
        for t in turns {
            assert!(t["ttft_ms"].as_f64().is_some(), "every turn's TTFT is kept: {t}");
        }
        assert!(turns[0].get("think_ms").is_none(), "{hot}");
        for t in &turns[1..] {
            assert!(t["think_ms"].as_f64().unwrap() >= 150.0, "{t}");
        }
        assert!(hot["think_ms"].as_f64().unwrap() >= 150.0, "the measured turn waited too: {hot}");
        assert!(hot["input_tokens"].as_u64().unwrap() > input, "turn 4 holds turns 1 to 3: {hot}");
    }
    let nonces: std::collections::BTreeSet<&str> = ms.iter().map(|m| m["nonce"].as_str().unwrap()).collect();
    assert_eq!(nonces.len(), 3, "one nonce per row's session");

    // Every cold prompt opens with its nonce, whatever the row begins with (a system message).
    let log = server.log();
    for m in ms.iter().filter(|m| m["cache_state"] == "cold") {
        let opening = format!("[ref {}] ", m["nonce"].as_str().unwrap());
        let sent = log
            .iter()
            .filter(|l| l.path == "/v1/chat/completions")
            .filter_map(|l| l.body["messages"][0]["content"].as_str())
            .any(|c| c.starts_with(&opening));
        assert!(sent, "no request opened with {opening}");
    }
    // Row 2's own later turns are replayed, with its own answers; the follow-up fills turn 4.
    let replayed = chats_with(&log, "Summarize both answers in one sentence.");
    assert!(!replayed.is_empty(), "row 2's third user turn was never sent");
    let last = replayed.last().unwrap().body["messages"].as_array().unwrap();
    let roles: Vec<&str> = last.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user", "assistant", "user", "assistant", "user"]);
    assert_eq!(
        last[2]["content"],
        "Prefill computes the whole prompt at once and is bound by compute; decode produces one token at a time and is bound by memory bandwidth."
    );
    assert_eq!(last[7]["content"], "Continue explaining in more detail.");

    // The reading verbs take such a run: merge keeps every row, report and verify read it.
    let merged = dir.path().join("merged.json");
    let out = bench(&["merge", run.to_str().unwrap(), "-o", merged.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let canonical: Value = serde_json::from_str(&std::fs::read_to_string(&merged).unwrap()).unwrap();
    let kept: Vec<u64> = canonical["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["record_type"] == "measurement")
        .map(|r| r["dataset_row"].as_u64().unwrap())
        .collect();
    assert_eq!(kept.len(), 6, "{kept:?}");
    let out = bench(&["report", merged.to_str().unwrap(), "--format", "csv"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let csv = String::from_utf8_lossy(&out.stdout).to_string();
    for row in rows {
        assert!(csv.contains(&row["tokens"].to_string()), "report has no cell of row {}: {csv}", row["row"]);
    }
    let out = bench(&["verify", run.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
}

#[test]
fn jsonl_and_text_datasets_are_sampled_by_seed_and_keep_their_rows() {
    let server = server();
    let sampled = |file: &str, seed: &str| {
        let dir = tempfile::tempdir().unwrap();
        let path = fixture(file);
        let out = sweep(
            &server.url,
            dir.path(),
            &["--dataset", path.to_str().unwrap(), "--dataset-limit", "2", "--seed", seed],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let run = run_dir(dir.path());
        let rows: Vec<u64> = measurements(&run).iter().map(|m| m["dataset_row"].as_u64().unwrap()).collect();
        (run_json(&run)["config"]["dataset"].clone(), rows)
    };
    let (text, rows) = sampled("prompts.txt", "7");
    assert_eq!(
        (text["format"].as_str(), text["rows_in_file"].as_u64(), text["limit"].as_u64()),
        (Some("text"), Some(3), Some(2))
    );
    assert_eq!(rows.len(), 2);
    assert_eq!(sampled("prompts.txt", "7").1, rows, "the same seed draws the same rows");
    // The blank line is no row: the third prompt is row 3, on line 4.
    let (jsonl, _) = sampled("prompts.jsonl", "3");
    assert_eq!(jsonl["format"], "jsonl");
    let lines: Vec<(u64, u64)> = text["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["row"].as_u64().unwrap(), r["line"].as_u64().unwrap()))
        .collect();
    for (row, line) in lines {
        assert_eq!(line, if row == 3 { 4 } else { row });
    }
}

#[test]
fn a_row_that_cannot_be_read_is_named_by_file_and_line_and_nothing_is_measured() {
    let dir = tempfile::tempdir().unwrap();
    let bad = fixture("malformed.jsonl");
    let out =
        sweep("http://127.0.0.1:9", dir.path(), &["--dataset", bad.to_str().unwrap(), "--dataset-strict"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(&format!("{}:3:", bad.display())), "{err}");
    assert!(err.contains("\"messages\" or \"conversations\""), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no run directory");
    // A line that is not JSON at all is a broken file, refused without --dataset-strict too.
    let files = tempfile::tempdir().unwrap();
    let broken = files.path().join("broken.jsonl");
    std::fs::write(&broken, "{\"prompt\": \"fine\"}\n{\"prompt\": \"cut\n").unwrap();
    let out = sweep("http://127.0.0.1:9", dir.path(), &["--dataset", broken.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("{}:2:", broken.display())), "{}", stderr(&out));

    // The dataset replaces --contexts: both at once is refused, naming the flag.
    let good = fixture("prompts.txt");
    let out =
        sweep("http://127.0.0.1:9", dir.path(), &["--dataset", good.to_str().unwrap(), "--contexts", "1k"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--contexts"), "{}", stderr(&out));
    let out = sweep("http://127.0.0.1:9", dir.path(), &["--turns", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--turns"), "{}", stderr(&out));
}

#[test]
fn turns_beyond_three_measure_turn_n_on_the_cache_and_keep_every_earlier_turn() {
    let server = server();
    for reuse in ["true", "false"] {
        let dir = tempfile::tempdir().unwrap();
        let out = sweep(
            &server.url,
            dir.path(),
            &[
                "--contexts",
                "256",
                "--cache-states",
                "cold,hot",
                "--turns",
                "6",
                "--think-time",
                "100ms",
                "--reuse-primes",
                reuse,
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let ms = measurements(&run_dir(dir.path()));
        let hot = ms.iter().find(|m| m["cache_state"] == "hot").unwrap();
        assert_eq!(hot["cache_state_confirmed"], true, "turn 6 on the cache: {hot}");
        assert!(hot["cache_evidence"]["cached_tokens"].as_u64().unwrap() > 256, "{hot}");
        let turns = hot["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 5, "turns 1 to 5 kept (reuse {reuse}): {hot}");
        for t in &turns[1..] {
            assert!(t["think_ms"].as_f64().unwrap() >= 100.0, "{t}");
            assert!(t["ttft_ms"].as_f64().is_some() && t["error"].is_null(), "{t}");
        }
        assert!(hot["think_ms"].as_f64().unwrap() >= 100.0, "{hot}");
    }
}

#[test]
fn a_load_sends_dataset_rows_and_hot_arrivals_are_sessions_of_n_turns() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let file = fixture("prompts.jsonl");
    let args = [
        "load",
        "--server",
        &server.url,
        "--out",
        dir.path().to_str().unwrap(),
        "--quiet",
        "--thermal",
        "off",
        "--preset",
        "llama.cpp",
        "--rates",
        "2",
        "--duration",
        "3s",
        "--mix",
        "cold=0.5,hot=0.5",
        "--output-tokens",
        "8",
        "--dataset",
        file.to_str().unwrap(),
        "--turns",
        "4",
        "--think-time",
        "50ms",
    ];
    let out = bench(&args);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let run = run_dir(dir.path());
    let rows = run_json(&run)["config"]["dataset"]["rows"].as_array().unwrap().clone();
    assert_eq!(rows.len(), 3);
    let ms = measurements(&run);
    assert!(!ms.is_empty());
    for m in &ms {
        assert_eq!(m["scenario"], "load");
        let index = m["request_index"].as_u64().unwrap() as usize;
        let row = &rows[index % rows.len()];
        assert_eq!(m["dataset_row"], row["row"], "arrival i sends row i mod n: {m}");
        assert_eq!(m["context_tokens"], row["tokens"], "{m}");
        if m["error"].is_null() {
            assert_eq!(m["cache_state_confirmed"], true, "{m}");
        }
        if m["cache_state"] == "hot" && m["error"].is_null() {
            let turns = m["turns"].as_array().unwrap();
            assert_eq!(turns.len(), 3, "turns 1 to 3 prepared, turn 4 sent at the arrival: {m}");
            assert!(turns[1..].iter().all(|t| t["think_ms"].as_f64().unwrap() >= 50.0), "{m}");
            assert!(m["think_ms"].as_f64().unwrap() >= 50.0, "{m}");
        }
    }
    assert!(ms.iter().any(|m| m["cache_state"] == "hot" && m["error"].is_null()), "no hot arrival: {ms:?}");
}

#[test]
fn a_resumed_dataset_run_reads_its_file_again_and_refuses_one_that_changed() {
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prompts.txt");
    std::fs::copy(fixture("prompts.txt"), &file).unwrap();
    let out_dir = dir.path().join("out");
    let out = sweep(&server.url, &out_dir, &["--dataset", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = run_dir(&out_dir);
    let before = std::fs::read_to_string(run.join("measurements.jsonl")).unwrap();

    let resume =
        |dir: &Path| bench(&["sweep", "--resume", dir.to_str().unwrap(), "--server", &server.url, "--quiet"]);
    let out = resume(&run);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(run.join("measurements.jsonl")).unwrap(),
        before,
        "every row was done"
    );

    std::fs::write(&file, "A different first prompt.\n").unwrap();
    let out = resume(&run);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(file.to_str().unwrap()) && err.contains("changed since the run began"), "{err}");
    assert_eq!(std::fs::read_to_string(run.join("measurements.jsonl")).unwrap(), before, "nothing measured");
}

/// A dataset saved with a UTF-8 byte-order mark (as Windows editors write it) is the same
/// dataset: ShareGPT and JSONL files are read by their shape, not sent as raw JSON text prompts.
#[test]
fn a_byte_order_mark_does_not_turn_a_dataset_into_plain_text() {
    let server = server();
    let sharegpt = std::fs::read(fixture("sharegpt.json")).unwrap();
    let jsonl =
        b"{\"prompt\": \"tell me about rivers and the sea\"}\n{\"prompt\": \"name three birds\"}\n".to_vec();
    for (name, format, body, rows) in
        [("bom.json", "sharegpt", sharegpt, 3), ("bom.jsonl", "jsonl", jsonl, 2)]
    {
        let files = tempfile::tempdir().unwrap();
        let file = files.path().join(name);
        std::fs::write(&file, [b"\xEF\xBB\xBF".as_slice(), &body].concat()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let out =
            sweep(&server.url, dir.path(), &["--dataset", file.to_str().unwrap(), "--cache-states", "cold"]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let meta = run_json(&run_dir(dir.path()));
        assert_eq!(meta["config"]["dataset"]["format"], format, "{name}: {}", meta["config"]["dataset"]);
        assert_eq!(meta["config"]["dataset"]["rows_in_file"], rows, "{name}");
        let log = server.log();
        assert!(log.iter().any(|l| l.path == "/v1/chat/completions"), "the server keeps its requests");
        let raw_json_sent = log.iter().filter(|l| l.path == "/v1/chat/completions").any(|l| {
            l.body["messages"].as_array().is_some_and(|ms| {
                ms.iter().any(|m| {
                    m["content"]
                        .as_str()
                        .is_some_and(|c| c.contains("\"prompt\"") || c.contains("\"conversations\""))
                })
            })
        });
        assert!(!raw_json_sent, "{name}: a row's raw JSON was sent as a prompt");
    }
}

/// A long dataset without --dataset-limit: the sweep says up front that every row is measured in
/// every cell and how to measure fewer, and its token count (one call per row) says how far it got.
#[test]
fn counting_a_long_dataset_says_how_far_it_got_and_how_to_measure_fewer() {
    use std::io::{BufRead, BufReader};
    let server = server();
    let files = tempfile::tempdir().unwrap();
    let file = files.path().join("many.jsonl");
    let rows: String =
        (0..2000).map(|i| format!("{{\"prompt\": \"question number {i} about rivers\"}}\n")).collect();
    std::fs::write(&file, rows).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["sweep", "--server", &server.url, "--out", dir.path().to_str().unwrap(), "--thermal", "off"])
        .args(["--preset", "llama.cpp", "--runs", "1", "--output-tokens", "8", "--cache-states", "cold"])
        .args(["--dataset", file.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        let done = line.starts_with("counted 1000 of 2000 dataset rows (50%)");
        said.push(line);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let said = said.join("\n");
    assert!(said.contains("2000 rows: every row is measured in every cell; --dataset-limit N"), "{said}");
    assert!(said.contains("counted 200 of 2000 dataset rows (10%)"), "{said}");
    assert!(said.contains("counted 1000 of 2000 dataset rows (50%)"), "{said}");
}

/// A conversation whose measured turn is long (its new user message far over 10% of the prompt):
/// hot is confirmed against what the request itself adds to the cached conversation (the new turn
/// and its template), not against a fixed share of the prompt, so the long turn's own prefill is
/// no reason to call the cache unproven; the cached part must still be the conversation so far.
#[test]
fn a_long_later_turn_is_confirmed_hot_by_what_it_adds_to_the_cached_conversation() {
    let server = server();
    let files = tempfile::tempdir().unwrap();
    let file = files.path().join("long-turn.json");
    let long: String = (0..300).map(|i| format!("word{i} ")).collect();
    let rows = serde_json::json!([{"conversations": [
        {"from": "human", "value": "What does a prefix cache keep between two requests?"},
        {"from": "gpt", "value": "The keys and values of the prompt's beginning."},
        {"from": "human", "value": format!("Now read this long note and summarize it: {long}")}
    ]}]);
    std::fs::write(&file, rows.to_string()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(
        &server.url,
        dir.path(),
        &["--dataset", file.to_str().unwrap(), "--cache-states", "hot", "--turns", "2"],
    );
    let ms = measurements(&run_dir(dir.path()));
    assert_eq!(ms.len(), 1, "{}", stderr(&out));
    let hot = &ms[0];
    let (input, evaluated) = (
        hot["input_tokens"].as_u64().unwrap(),
        hot["cache_evidence"]["prompt_evaluated_tokens"].as_u64().unwrap(),
    );
    assert!(evaluated as f64 > 0.1 * input as f64 && evaluated > 64, "the turn is long: {hot:#}");
    assert_eq!(hot["cache_state_confirmed"], true, "{hot:#}");
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Real ShareGPT dumps hold rows with `conversations: []`, and other benchmarks' files put a prompt
/// under `text` (AIPerf) or `input`/`question` (GuideLLM): the empty rows are skipped, counted and
/// named (stderr and run.json), the rest measured; with --dataset-output-tokens each row asks for
/// its own reply length (its `output_length` field, or the server's count of its ShareGPT reply).
#[test]
fn rows_of_real_files_are_skipped_named_or_read_in_the_shapes_other_benchmarks_use() {
    let server = server();
    let files = tempfile::tempdir().unwrap();
    let sharegpt = files.path().join("dump.json");
    let reply = "a reply of exactly nine words for the length";
    let rows = serde_json::json!([
        {"id": "empty", "conversations": []},
        {"id": "ok", "conversations": [{"from": "human", "value": "what is a cache"}, {"from": "gpt", "value": reply}]},
        {"id": "no-human", "conversations": [{"from": "gpt", "value": "hello"}]},
    ]);
    std::fs::write(&sharegpt, serde_json::to_string_pretty(&rows).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let args = ["--dataset", sharegpt.to_str().unwrap(), "--cache-states", "cold", "--dataset-output-tokens"];
    let out = sweep(&server.url, dir.path(), &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("skipped 2 of 3 rows"), "{err}");
    assert!(
        err.contains(&format!("{}:2: row 1: the row has no user message with text", sharegpt.display())),
        "{err}"
    );
    let run = run_dir(dir.path());
    let dataset = &run_json(&run)["config"]["dataset"];
    assert_eq!(dataset["skipped_rows"], 2, "{dataset}");
    assert_eq!(dataset["skipped"][0]["line"], 2, "{dataset}");
    let ms = measurements(&run);
    assert_eq!(ms.len(), 1, "{ms:#?}");
    let words = reply.split_whitespace().count() as u64;
    assert_eq!(
        ms[0]["max_tokens"], words,
        "the row's own reply length (the scripted tokenizer counts words): {}",
        ms[0]
    );
    let strict =
        sweep(&server.url, dir.path(), &["--dataset", sharegpt.to_str().unwrap(), "--dataset-strict"]);
    assert_eq!(strict.status.code(), Some(2), "{}", stderr(&strict));

    // AIPerf's and GuideLLM's JSONL shapes, a row's output_length sent as its max_tokens.
    let jsonl = files.path().join("aiperf.jsonl");
    std::fs::write(
        &jsonl,
        "{\"text\": \"tell me about rivers\", \"output_length\": 12}\n{\"question\": \"name a bird\"}\n{\"input\": \"name a fish\"}\n",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(
        &server.url,
        dir.path(),
        &["--dataset", jsonl.to_str().unwrap(), "--cache-states", "cold", "--dataset-output-tokens"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let ms = measurements(&run_dir(dir.path()));
    let max: Vec<u64> = ms.iter().map(|m| m["max_tokens"].as_u64().unwrap()).collect();
    assert_eq!(max, [12, 8, 8], "row 1's own length, the others --output-tokens");
    let log = server.log();
    for text in ["tell me about rivers", "name a bird", "name a fish"] {
        assert!(
            !chats_with(&log, text).is_empty() || log.iter().any(|l| l.body.to_string().contains(text)),
            "{text} was sent"
        );
    }
}

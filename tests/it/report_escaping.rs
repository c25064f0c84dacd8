//! `bench report --format html`: every string from an input reaches the page as text. A model
//! name, a server command, a server's answer (`/props`) and the input's own path that hold markup
//! (`<script>`, `"`, `&`) are written escaped, checked on the bytes bench writes and read back as
//! the same text by an HTML5 parser.

use std::path::Path;

use scraper::{ElementRef, Html, Selector};
use serde_json::json;
use ttft_bench::meta::{RunMeta, ServerInfo};
use ttft_model::record::{CacheState, CellKey, Measurement, Mode, Record, SCHEMA_VERSION, Scenario};

use crate::common;

const EVIL_MODEL: &str = "m<script>alert(1)</script>&\"";
const EVIL_COMMAND: &str = "llama-server --alias \"<script>alert(2)</script>\" && echo <b>done</b>";
const EVIL_ANSWER: &str = "b1<script>alert(3)</script>&\"";
/// A path component may not hold `/`: the closing tag spans two directories.
const EVIL_DIR: &str = "x<script>alert(4)<";
const EVIL_RUN: &str = "script>&\"run";

fn measurement(model: &str, run: u32, quality_ok: bool) -> Record {
    Record::Measurement(Box::new(Measurement {
        schema_version: SCHEMA_VERSION,
        run_id: "r1".into(),
        cell: CellKey {
            dataset_row: None,
            model: model.into(),
            scenario: Scenario::Cold,
            cache_state: CacheState::Cold,
            mode: Mode::Streaming,
            context_tokens: 1024,
            batch_size: 1,
            run,
        },
        started_at: "2026-01-01T00:00:00Z".into(),
        ttft_ms: Some(100.0 + f64::from(run)),
        e2e_ms: Some(1000.0),
        input_tokens: Some(1024),
        expected_input_tokens: Some(1024),
        output_tokens: Some(65),
        // A failed quality gate: a finding that names the cell (the model) and the file (the path).
        quality_ok,
        ..Default::default()
    }))
}

fn sel(s: &str) -> Selector {
    Selector::parse(s).unwrap()
}

fn text(e: ElementRef) -> String {
    e.text().collect::<String>().trim().to_string()
}

/// The page of a run whose model, server command, server answer and path hold markup.
fn evil_page(dir: &Path) -> (std::path::PathBuf, String) {
    std::fs::create_dir_all(dir.join(EVIL_DIR)).unwrap();
    let meta = common::runs::meta("r1", &["--model", EVIL_MODEL, "--output-tokens", "64"]);
    let meta = RunMeta {
        server: ServerInfo {
            base_url: "http://127.0.0.1:1".into(),
            command: Some(EVIL_COMMAND.into()),
            props: Some(json!({ "build_info": EVIL_ANSWER })),
            ..Default::default()
        },
        ..meta
    };
    let records: Vec<Record> = (1..=4).map(|run| measurement(EVIL_MODEL, run, run != 4)).collect();
    let run = common::runs::write_with(dir, &format!("{EVIL_DIR}/{EVIL_RUN}"), &meta, &records);
    let page = dir.join("report.html");
    let out =
        common::bench(&["report", run.to_str().unwrap(), "--format", "html", "-o", page.to_str().unwrap()]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    (run, std::fs::read_to_string(&page).unwrap())
}

/// `s` as an escaper writes text and double-quoted attributes.
fn escaped(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[test]
fn markup_in_a_model_a_command_an_answer_or_a_path_is_written_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let (run, page) = evil_page(dir.path());
    let path = run.display().to_string();
    // The bytes: no markup from an input, each value in its escaped form.
    assert_eq!(page.matches("<script").count(), 1, "the page's own script only:\n{page}");
    for n in 1..=4 {
        assert!(!page.contains(&format!("alert({n})</script>")), "raw markup of value {n}:\n{page}");
    }
    assert!(!page.contains("<b>done"), "{page}");
    for value in [EVIL_MODEL, EVIL_COMMAND, EVIL_ANSWER, path.as_str()] {
        assert!(page.contains(&escaped(value)), "{value} escaped, in:\n{page}");
    }
    assert!(page.contains("m&lt;script&gt;alert(1)&lt;/script&gt;&amp;&quot;"), "{page}");

    // Read back by an HTML5 parser, each is the text it was, where it belongs.
    let doc = Html::parse_document(&page);
    assert_eq!(doc.select(&sel("script")).count(), 1);
    assert_eq!(doc.select(&sel("b")).count(), 0);
    let headings: Vec<String> = doc.select(&sel("section.model h2")).map(text).collect();
    assert_eq!(headings, [EVIL_MODEL], "the model's section");
    let row = doc.select(&sel("tr.cell-row")).next().unwrap();
    assert_eq!(row.value().attr("data-model"), Some(EVIL_MODEL), "the cell's key, as an attribute");
    let inputs = doc.select(&sel("#inputs")).next().unwrap();
    let code: Vec<String> = inputs.select(&sel("h3 code")).map(text).collect();
    assert_eq!(code, [path.as_str()], "the input's path");
    let fields: Vec<(String, String)> =
        inputs.select(&sel("dt")).map(text).zip(inputs.select(&sel("dd")).map(text)).collect();
    let field = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    assert_eq!(field("server command"), Some(EVIL_COMMAND), "{fields:?}");
    assert_eq!(field("server version"), Some(EVIL_ANSWER), "{fields:?}");
    assert_eq!(field("model"), Some(EVIL_MODEL), "{fields:?}");
    // The quality gate's finding, under its cell: it names the model and the file.
    let finding = doc.select(&sel("tr.finding")).map(text).next().unwrap_or_default();
    assert!(finding.contains("quality_gate_failed"), "{finding}");
    assert!(finding.contains(EVIL_MODEL) && finding.contains(EVIL_DIR), "{finding}");
    let title = doc.select(&sel("title")).map(text).next().unwrap();
    assert_eq!(title, format!("ttft-bench report: {EVIL_MODEL}"));
}

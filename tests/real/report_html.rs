//! `bench report --format html`: the page, parsed with a real HTML5 parser (scraper/html5ever):
//! every cell with the markdown table's numbers, one inline SVG per plot, verify's findings under
//! the cells they concern, nothing fetched from outside the page, every input string escaped, the
//! run's metadata and merge's conflicts; and, where chromium is installed, the page as a real
//! browser builds it.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common;

use assert_cmd::Command;
use scraper::{ElementRef, Html, Selector};
use serde_json::{Value, json};
use ttft_bench::meta::{Harness, HostFacts, RunMeta, ServerInfo};
use ttft_model::record::{
    CacheEvidence, CacheState, CellKey, Measurement, Mode, Record, SCHEMA_VERSION, Scenario, StaggeredRecord,
};

/// A model name and a server command that would run script if pasted into the page unescaped.
const EVIL_MODEL: &str = "<script>alert('model')</script>&\"";
const EVIL_COMMAND: &str = "llama-server --port {port} <img src=x onerror=alert(1)>";

fn key(model: &str, cache_state: CacheState, context_tokens: u32, run: u32) -> CellKey {
    let scenario = match cache_state {
        CacheState::Cold => Scenario::Cold,
        CacheState::Warm => Scenario::Warm,
        CacheState::Hot => Scenario::Hot,
    };
    CellKey {
        dataset_row: None,
        model: model.into(),
        scenario,
        cache_state,
        mode: Mode::Streaming,
        context_tokens,
        batch_size: 1,
        run,
    }
}

fn m(cell: CellKey, ttft: f64, e2e: f64, ok: bool, confirmed: Option<bool>) -> Record {
    // The evidence behind the verdict, as a sweep records it (verify recomputes the verdict from it).
    let input = u64::from(cell.context_tokens);
    let served = (cell.cache_state != CacheState::Cold) == (confirmed == Some(true));
    let cache_evidence = confirmed.map(|_| CacheEvidence {
        source: "timings".into(),
        cached_tokens: Some(if served { input - 1 } else { 0 }),
        prompt_evaluated_tokens: Some(if served { 1 } else { input }),
        ..Default::default()
    });
    Record::Measurement(Box::new(Measurement {
        cache_evidence,
        schema_version: SCHEMA_VERSION,
        run_id: "r1".into(),
        input_tokens: Some(u64::from(cell.context_tokens)),
        expected_input_tokens: Some(u64::from(cell.context_tokens)),
        cell,
        started_at: "2026-01-01T00:00:00Z".into(),
        ttft_ms: Some(ttft),
        e2e_ms: Some(e2e),
        output_tokens: Some(65),
        quality_ok: ok,
        cache_state_confirmed: confirmed,
        ..Default::default()
    }))
}

/// Model "m": cold 1K (TTFT 100/200/300, a fourth run that failed its quality gate: a warning on
/// that cell), warm 1K (TTFT 10/20/30, the third with contradicting cache evidence: an error on
/// that cell), cold 4K; a staggered pair; and two cold runs of the evil model.
fn records() -> Vec<Record> {
    use CacheState::{Cold, Warm};
    let mut v = Vec::new();
    for (run, ttft, e2e) in [(1, 100.0, 1100.0), (2, 200.0, 1300.0), (3, 300.0, 1100.0)] {
        v.push(m(key("m", Cold, 1024, run), ttft, e2e, true, Some(true)));
    }
    v.push(m(key("m", Cold, 1024, 4), 9999.0, 99999.0, false, Some(true)));
    for (run, ttft, confirmed) in [(1, 10.0, true), (2, 20.0, true), (3, 30.0, false)] {
        v.push(m(key("m", Warm, 1024, run), ttft, ttft + 1000.0, true, Some(confirmed)));
    }
    for run in 1..=3 {
        v.push(m(key("m", Cold, 4096, run), 400.0 + f64::from(run), 1500.0, true, Some(true)));
    }
    for (run, wait) in [(1, 2500.0), (2, 2600.0)] {
        v.push(Record::Staggered(Box::new(StaggeredRecord {
            schema_version: SCHEMA_VERSION,
            run_id: "r1".into(),
            cell: CellKey {
                scenario: Scenario::StaggeredBatched,
                batch_size: 2,
                ..key("m", Cold, 4096, run)
            },
            started_at: "2026-01-01T00:00:00Z".into(),
            user_b_ttft_from_wall_start_ms: Some(wait),
            overlapped: Some(true),
            quality_ok: true,
            ..Default::default()
        })));
    }
    for run in 1..=2 {
        v.push(m(key(EVIL_MODEL, Cold, 2048, run), 50.0, 500.0, true, Some(true)));
    }
    v
}

/// The run.json a sweep writes (`common::runs`), measured on "h200" by a host whose CPU suggests
/// another profile (verify's hardware_mismatch: a finding about the run, not a cell), sweeping
/// shard 2 of 3 (`--shard 2/3`, kept in `config.shard`).
fn run_json(tolerance: &str) -> RunMeta {
    let flags = ["--server", "http://gpu-box:8080", "--tolerance", tolerance, "--shard", "2/3"];
    let more = ["--model", "m", "--hardware", "h200", "--output-tokens", "64"];
    let meta = common::runs::meta("r1", &[&flags[..], &more[..]].concat());
    RunMeta {
        server: ServerInfo {
            base_url: "http://gpu-box:8080".into(),
            command: Some(EVIL_COMMAND.into()),
            props: Some(json!({"build_info": "b4567-test"})),
            ..Default::default()
        },
        host: HostFacts { cpu_brand: "Apple M4 Pro".into(), arch: "aarch64".into(), ..Default::default() },
        ..meta
    }
}

fn run_dir(dir: &Path, name: &str, records: &[Record], meta: &RunMeta) -> PathBuf {
    common::runs::write_with(dir, name, meta, records)
}

fn bench(args: &[&std::ffi::OsStr]) -> Output {
    Command::cargo_bin("bench")
        .unwrap()
        .args(args)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap()
}

/// `bench report INPUT --format html -o DIR/report.html [--plot DIR/plots]`: the page's text.
fn html_report(dir: &Path, input: &Path, plots: bool) -> String {
    let out = dir.join("report.html");
    let mut args =
        vec![input.as_os_str(), "--format".as_ref(), "html".as_ref(), "-o".as_ref(), out.as_os_str()];
    let plot_dir = dir.join("plots");
    if plots {
        args.extend(["--plot".as_ref(), plot_dir.as_os_str()]);
    }
    let report = bench(&[&["report".as_ref()], &args[..]].concat());
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    // The page goes to -o only; stdout holds its path alone, for scripts.
    assert_eq!(
        String::from_utf8_lossy(&report.stdout),
        format!("{}\n", out.display()),
        "the page goes to -o only"
    );
    std::fs::read_to_string(out).unwrap()
}

fn sel(s: &str) -> Selector {
    Selector::parse(s).unwrap()
}

fn text(e: ElementRef) -> String {
    e.text().collect::<String>().trim().to_string()
}

fn fixture() -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let run = run_dir(dir.path(), "run", &records(), &run_json("0.15"));
    let page = html_report(dir.path(), &run, true);
    (dir, run, page)
}

/// Rows of every markdown table (`| a | b |`, separators skipped), cells trimmed.
fn markdown_rows(md: &str) -> Vec<Vec<String>> {
    md.lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|-") && !l.starts_with("| -") && !l.contains("---"))
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect())
        .filter(|row: &Vec<String>| row[0] != "ctx" && row[0] != "pair")
        .collect()
}

#[test]
fn every_cell_is_in_the_table_with_the_markdown_numbers() {
    let (_dir, run, page) = fixture();
    let md = bench(&["report".as_ref(), run.as_os_str(), "--format".as_ref(), "markdown".as_ref()]);
    assert!(md.status.success());
    let want = markdown_rows(&String::from_utf8(md.stdout).unwrap());
    let doc = Html::parse_document(&page);
    // Same rows, same order, same text: html shows the table's numbers, it does not recompute them
    // (a cell row has one more column, verify's summary).
    let got: Vec<Vec<String>> = doc
        .select(&sel("tr.cell-row"))
        .zip(&want)
        .map(|(tr, w)| tr.select(&sel("td")).map(text).take(w.len()).collect())
        .collect();
    assert_eq!(doc.select(&sel("tr.cell-row")).count(), want.len());
    assert_eq!(got, want, "{page}");
    assert_eq!(want.len(), 5, "3 cells of m, its staggered pair, 1 cell of the evil model: {want:?}");
    // And the numbers themselves, checked by hand: cold 1K median 200 over 3 of 4 records; warm 10x.
    let cold = want.iter().find(|r| r[0] == "1K" && r[1] == "cold").unwrap();
    assert_eq!(cold[4], "3/4");
    assert!(cold[5].starts_with("200 ("), "{cold:?}");
    let warm = want.iter().find(|r| r[1] == "warm").unwrap();
    assert!(warm[8].starts_with("10.0"), "{warm:?}");
    let pair = want.iter().find(|r| r[0] == "batched").unwrap();
    assert_eq!(pair[5], "2550", "B wait mean");
    assert_eq!(pair[3], "2550 (n<3)", "two pairs: the median, no interval");
}

#[test]
fn every_plot_is_one_inline_svg() {
    let (dir, _run, page) = fixture();
    let doc = Html::parse_document(&page);
    let mut files: Vec<String> = std::fs::read_dir(dir.path().join("plots"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    files.sort();
    // ttft and decode of both models, staggered of m.
    assert_eq!(files.len(), 5, "{files:?}");
    let figures: Vec<ElementRef> = doc.select(&sel("figure.plot")).collect();
    assert_eq!(doc.select(&sel("svg")).count(), files.len(), "one <svg> per plot, nothing else");
    let mut captions: Vec<String> = figures
        .iter()
        .map(|f| {
            assert_eq!(f.select(&sel("svg")).count(), 1);
            f.select(&sel("figcaption")).map(text).collect()
        })
        .collect();
    captions.sort();
    assert_eq!(captions, files, "the same plots --plot writes");
}

/// verify's findings on the same input (`bench verify --format json`).
fn verify_findings(input: &Path) -> Vec<Value> {
    let out = bench(&["verify".as_ref(), input.as_os_str(), "--format".as_ref(), "json".as_ref()]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["findings"].as_array().unwrap().clone()
}

/// A cell row's data attribute and the field of verify's cell key it holds.
const KEY_ATTRS: [(&str, &str); 6] = [
    ("data-model", "model"),
    ("data-scenario", "scenario"),
    ("data-cache-state", "cache_state"),
    ("data-mode", "mode"),
    ("data-context-tokens", "context_tokens"),
    ("data-batch-size", "batch_size"),
];

#[test]
fn findings_sit_under_the_cells_they_concern() {
    let (_dir, run, page) = fixture();
    let doc = Html::parse_document(&page);
    let findings = verify_findings(&run);
    let rules: Vec<&str> = findings.iter().map(|f| f["rule"].as_str().unwrap()).collect();
    for rule in ["cache_state_unconfirmed", "quality_gate_failed", "hardware_mismatch"] {
        assert!(rules.contains(&rule), "the fixture raises {rule}: {rules:?}");
    }
    let rows: Vec<ElementRef> = doc.select(&sel("tr.finding")).collect();
    let (with_cell, without): (Vec<&Value>, Vec<&Value>) =
        findings.iter().partition(|f| !f["cell"].is_null());
    assert_eq!(rows.len(), with_cell.len(), "one row per finding about a cell");
    // Each finding has its own row (rows are used up as they are matched: the same message on two
    // cells needs two rows), under the cell its key names.
    let mut unmatched: Vec<ElementRef> = rows.clone();
    for f in with_cell {
        let (rule, message) = (f["rule"].as_str().unwrap(), f["message"].as_str().unwrap());
        // The finding's cell key, as the cell row's data attributes.
        let same_cell = |r: &ElementRef| {
            KEY_ATTRS.iter().all(|(attr, field)| {
                let v = &f["cell"][field];
                r.value().attr(attr)
                    == Some(v.as_str().map_or_else(|| v.to_string(), str::to_string).as_str())
            })
        };
        let cell_row_of = |row: &ElementRef| {
            let id = row.value().attr("data-cell").unwrap();
            doc.select(&sel(&format!("tr#{id}"))).next().unwrap()
        };
        let at = unmatched
            .iter()
            .position(|r| text(*r).contains(rule) && text(*r).contains(message) && same_cell(&cell_row_of(r)))
            .unwrap_or_else(|| panic!("no row under its cell for {f}\nin {:#?}", findings));
        let row = unmatched.remove(at);
        assert!(row.value().classes().any(|c| c == f["severity"].as_str().unwrap()));
        // Attached: in the cell's own group of rows, which sorting moves as one.
        let body = |e: &ElementRef| e.parent().and_then(ElementRef::wrap).unwrap().id();
        assert_eq!(body(&row), body(&cell_row_of(&row)), "{rule} in its cell's <tbody>");
    }
    let elsewhere = doc.select(&sel("#findings li.finding")).map(text).collect::<Vec<_>>().join("\n");
    assert_eq!(doc.select(&sel("#findings li.finding")).count(), without.len(), "{elsewhere}");
    for f in without {
        assert!(elsewhere.contains(f["message"].as_str().unwrap()), "{f} missing from {elsewhere}");
    }
    let summary = text(doc.select(&sel("p.summary")).next().unwrap());
    // cache_state_unconfirmed; quality_gate_failed and hardware_mismatch: verify's own counts.
    assert!(summary.contains("verify: 1 error(s), 2 warning(s), 0 info"), "{summary}");
    assert_eq!(findings.len(), 3, "{findings:#?}");
}

/// Every URL-bearing attribute of every element, and the style text.
#[test]
fn nothing_outside_the_page_is_referenced() {
    let (_dir, _run, page) = fixture();
    let doc = Html::parse_document(&page);
    for e in doc.select(&sel("*")) {
        let name = e.value().name();
        assert!(
            !["link", "iframe", "object", "embed", "img", "base"].contains(&name),
            "<{name}> in the page"
        );
        for (attr, value) in e.value().attrs() {
            if ["src", "href", "xlink:href", "action", "srcset", "data", "poster"].contains(&attr) {
                let v = value.trim().to_ascii_lowercase();
                assert!(v.starts_with('#'), "<{name} {attr}={value:?}>: only links inside the page");
            }
        }
    }
    let style: String = doc.select(&sel("style")).map(|s| s.text().collect::<String>()).collect();
    assert!(!style.contains("@import") && !style.contains("url("), "{style}");
    let scripts: Vec<ElementRef> = doc.select(&sel("script")).collect();
    assert_eq!(scripts.len(), 1, "the page's own sorting script only");
    assert!(scripts[0].value().attr("src").is_none());
    assert!(!page.contains("http://cdn") && !page.contains("https://"), "no remote URL anywhere");
}

#[test]
fn strings_from_the_inputs_are_escaped() {
    let (_dir, _run, page) = fixture();
    assert!(!page.contains("<script>alert") && !page.contains("<img src=x"), "raw markup from an input");
    let doc = Html::parse_document(&page);
    let script = text(doc.select(&sel("script")).next().unwrap());
    assert!(!script.contains("alert"), "the only script is the page's own");
    assert_eq!(doc.select(&sel("img")).count(), 0);
    // The names read back as the text they are.
    let headings: Vec<String> = doc.select(&sel("section.model h2")).map(text).collect();
    assert!(headings.contains(&EVIL_MODEL.to_string()), "{headings:?}");
    assert!(doc.select(&sel("tr.cell-row")).any(|r| r.value().attr("data-model") == Some(EVIL_MODEL)));
    let meta = text(doc.select(&sel("#inputs")).next().unwrap());
    assert!(meta.contains(EVIL_COMMAND), "{meta}");
    // Inside the plots too (plotters escapes its text).
    assert!(doc.select(&sel("svg text")).any(|t| text(t).contains(EVIL_MODEL)));
}

#[test]
fn the_runs_metadata_is_shown() {
    let (_dir, run, page) = fixture();
    let doc = Html::parse_document(&page);
    let section = doc.select(&sel("#inputs")).next().unwrap();
    assert!(text(section).contains(&run.display().to_string()));
    let fields: Vec<(String, String)> =
        section.select(&sel("dt")).map(text).zip(section.select(&sel("dd")).map(text)).collect();
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{name}: {fields:?}"))
    };
    assert_eq!(field("server"), "http://gpu-box:8080");
    assert_eq!(field("server version"), "b4567-test");
    assert_eq!(field("model"), "m");
    assert_eq!(field("hardware"), "h200");
    let harness = Harness::current();
    assert_eq!(field("harness"), format!("ttft-bench {} {}", harness.version, harness.git_sha));
    assert!(field("thermal").contains("0.15"), "{}", field("thermal"));
    assert!(field("host").starts_with("Apple M4 Pro · aarch64"), "{}", field("host"));
    let shard = field("shard");
    assert!(shard.contains(r#""index":2"#) && shard.contains(r#""count":3"#), "{shard}");
    assert_eq!(section.select(&sel("details pre")).count(), 1, "the whole run.json, folded");
}

#[test]
fn a_canonical_files_conflicts_are_shown() {
    let dir = tempfile::tempdir().unwrap();
    let (cold, warm): (Vec<Record>, Vec<Record>) =
        records().into_iter().partition(|r| r.cell().cache_state == CacheState::Cold);
    let a = run_dir(dir.path(), "a", &cold, &run_json("0.05"));
    let b = run_dir(dir.path(), "b", &warm, &run_json("0.2"));
    let merged = dir.path().join("merged.json");
    let merge = bench(&[
        "merge".as_ref(),
        a.as_os_str(),
        b.as_os_str(),
        "-o".as_ref(),
        merged.as_os_str(),
        "--allow-conflicts".as_ref(),
    ]);
    assert!(merge.status.success(), "{}", String::from_utf8_lossy(&merge.stderr));
    let page = html_report(dir.path(), &merged, false);
    let doc = Html::parse_document(&page);
    let section = doc.select(&sel("#conflicts")).next().unwrap();
    assert!(text(section).contains(&format!("recorded in {}", merged.display())), "{}", text(section));
    let rows: Vec<Vec<String>> =
        section.select(&sel("tbody tr")).map(|r| r.select(&sel("td")).map(text).collect()).collect();
    let tolerance: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == "thermal_tolerance").collect();
    assert_eq!(tolerance.len(), 2, "{rows:?}");
    assert_eq!(tolerance[0][1], "0.05");
    assert!(tolerance[0][2].ends_with("a"), "{:?}", tolerance[0]);
    assert_eq!(tolerance[1][1], "0.2");
    // Both runs' metadata are there.
    assert_eq!(doc.select(&sel("#inputs dl.meta")).count(), 2);
}

#[test]
fn html_needs_an_output_file_and_other_formats_may_use_one() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_dir(dir.path(), "run", &records(), &run_json("0.15"));
    let out = bench(&["report".as_ref(), run.as_os_str(), "--format".as_ref(), "html".as_ref()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("give -o FILE"), "{out:?}");
    let md = dir.path().join("report.md");
    let args = ["report".as_ref(), run.as_os_str(), "--format".as_ref(), "markdown".as_ref()];
    let to_file = bench(&[&args[..], &["-o".as_ref(), md.as_os_str()]].concat());
    assert!(to_file.status.success());
    assert_eq!(
        String::from_utf8_lossy(&to_file.stdout),
        format!("{}\n", md.display()),
        "only the path on stdout"
    );
    assert_eq!(std::fs::read(&md).unwrap(), bench(&args).stdout, "the same report, in the file");
    // A file that cannot be written: exit 4, naming it.
    let bad = Path::new("/proc/report.html");
    let out = bench(&[
        "report".as_ref(),
        run.as_os_str(),
        "--format".as_ref(),
        "html".as_ref(),
        "-o".as_ref(),
        bad.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("/proc/report.html"));
}

/// Chromium's command, where it is installed (CI installs it); None (the test skips) elsewhere
/// unless TTFT_BENCH_REQUIRE_CHROMIUM=1.
fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| std::process::Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()));
    if found.is_none() {
        assert!(
            std::env::var("TTFT_BENCH_REQUIRE_CHROMIUM").as_deref() != Ok("1"),
            "TTFT_BENCH_REQUIRE_CHROMIUM=1 but no chromium on PATH"
        );
        eprintln!(
            "SKIP: no chromium on PATH (apt-get install chromium; TTFT_BENCH_REQUIRE_CHROMIUM=1 makes this fail)"
        );
    }
    found
}

/// The page as chromium builds it (`--dump-dom`): the tables and every SVG are in the DOM.
#[test]
fn a_real_browser_builds_the_table_and_the_plots() {
    let Some(chromium) = chromium() else { return };
    let (dir, _run, page) = fixture();
    let profile = dir.path().join("chromium-profile");
    let url = format!("file://{}", dir.path().join("report.html").display());
    let out = std::process::Command::new("timeout")
        .args(["120", chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--dump-dom", &url])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dom = Html::parse_document(&String::from_utf8_lossy(&out.stdout));
    let ours = Html::parse_document(&page);
    let count = |d: &Html, s: &str| d.select(&sel(s)).count();
    assert_eq!(count(&dom, "table.cells tr.cell-row"), 4);
    assert_eq!(count(&dom, "table.cells tr.cell-row"), count(&ours, "table.cells tr.cell-row"));
    assert_eq!(count(&dom, "figure.plot svg"), 5);
    assert!(count(&dom, "svg path, svg polyline, svg rect") > 10, "the plots have their shapes");
    assert_eq!(count(&dom, "tr.finding"), count(&ours, "tr.finding"));
    assert_eq!(count(&dom, "script"), 1, "nothing from the inputs became a script");
    assert_eq!(count(&dom, "img"), 0);
}

/// The page as a reader sees it: chromium renders it (`--screenshot`) to a PNG of the size asked
/// for, with the tables and plots drawn (a blank or unstyled page compresses to a few KB; this one
/// is tens of KB of text and lines). The PNG is kept in TTFT_BENCH_SCREENSHOT_DIR when set, to be
/// looked at.
#[test]
fn a_real_browser_renders_the_page_to_a_screenshot() {
    let Some(chromium) = chromium() else { return };
    let (dir, _run, _page) = fixture();
    let shot = |url: &str, png: &Path| {
        let out = std::process::Command::new("timeout")
            .args(["120", chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"])
            .arg(format!("--user-data-dir={}", dir.path().join("chromium-profile").display()))
            .args(["--hide-scrollbars", "--window-size=1400,2600"])
            .arg(format!("--screenshot={}", png.display()))
            .arg(url)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::fs::read(png).unwrap()
    };
    let page =
        shot(&format!("file://{}", dir.path().join("report.html").display()), &dir.path().join("page.png"));
    let blank_html = dir.path().join("blank.html");
    std::fs::write(&blank_html, "<!doctype html><title>blank</title>").unwrap();
    let blank = shot(&format!("file://{}", blank_html.display()), &dir.path().join("blank.png"));
    assert_eq!(&page[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    // IHDR: width and height, big-endian, at bytes 16..24.
    let size = |png: &[u8]| {
        let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        (be(&png[16..20]), be(&png[20..24]))
    };
    assert_eq!(size(&page), (1400, 2600));
    assert!(
        page.len() > 10 * blank.len(),
        "the page draws: {} bytes vs a blank page's {}",
        page.len(),
        blank.len()
    );
    if let Some(keep) = std::env::var_os("TTFT_BENCH_SCREENSHOT_DIR") {
        std::fs::write(Path::new(&keep).join("report.png"), &page).unwrap();
    }
}

//! run.json is read back as a type: a renamed field is an error (exit 2 naming run.json), not a
//! setting that silently disappears from merge's conflicts or verify's physics fallback; and what
//! the sweep writes reads back through that type whole.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use clap::Parser;
use serde_json::{Value, json};
use ttft_bench::command::{Cli, Command as Verb};
use ttft_bench::meta::{Harness, HostFacts, PhysicsProfiles, RunMeta, ServerInfo};
use ttft_bench::supervise::ServerCrash;
use ttft_model::record::{CacheState, CellKey, Measurement, Mode, Record, SCHEMA_VERSION, Scenario};
use ttft_results::results::run_meta::{OurMeta, RunMetaView, ThermalView};
use ttft_results::results::sources::read_run_json;

fn record(run_id: &str, context_tokens: u32) -> Record {
    Record::Measurement(Box::new(Measurement {
        schema_version: SCHEMA_VERSION,
        run_id: run_id.into(),
        cell: CellKey {
            dataset_row: None,
            model: "m".into(),
            scenario: Scenario::Cold,
            cache_state: CacheState::Cold,
            mode: Mode::Streaming,
            context_tokens,
            batch_size: 1,
            run: 1,
        },
        started_at: "2026-01-01T00:00:00Z".into(),
        quality_ok: true,
        ..Default::default()
    }))
}

/// A run directory as a sweep with `flags` leaves it (`common::runs`), its run.json then edited by
/// `edit` the way a writer renaming a field would change it. Returns the run and its run.json text.
fn run_dir(
    dir: &Path,
    name: &str,
    context_tokens: u32,
    flags: &[&str],
    edit: impl FnOnce(&mut Value),
) -> (PathBuf, String) {
    let run = crate::common::runs::write_with(
        dir,
        name,
        &crate::common::runs::meta(name, flags),
        &[record(name, context_tokens)],
    );
    let path = run.join("run.json");
    let mut meta: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut meta);
    let text = serde_json::to_string_pretty(&meta).unwrap();
    std::fs::write(&path, &text).unwrap();
    (run, text)
}

/// Renames `config.SECTION.FROM` to `TO`, keeping its value (or giving it `value` where absent).
fn rename(meta: &mut Value, section: &str, from: &str, to: &str, value: Value) {
    let section = meta["config"][section].as_object_mut().unwrap();
    let kept = section.remove(from).filter(|v| !v.is_null()).unwrap_or(value);
    section.insert(to.into(), kept);
}

#[test]
fn a_renamed_thermal_field_is_an_error_not_a_missing_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = run_dir(dir.path(), "a", 1024, &["--tolerance", "0.05"], |_| {});
    // As if the writer had renamed `tolerance`: before, this merged with exit 0 and no conflict.
    let (b, _) = run_dir(dir.path(), "b", 2048, &["--tolerance", "0.2"], |m| {
        rename(m, "thermal", "tolerance", "tolerance_frac", json!(0.2));
    });
    let out = dir.path().join("out.json");
    let assert = Command::cargo_bin("bench")
        .unwrap()
        .arg("merge")
        .arg(&a)
        .arg(&b)
        .arg("-o")
        .arg(&out)
        .assert()
        .code(2);
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    let run_json = b.join("run.json").display().to_string();
    assert!(stderr.contains(&format!("{run_json}:")), "{stderr}");
    assert!(stderr.contains("missing field `tolerance`"), "{stderr}");
    assert!(!out.exists(), "nothing written");
}

#[test]
fn a_renamed_physics_field_is_an_error_not_a_skipped_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    // As if the writer had renamed `hardware`.
    let (run, text) = run_dir(dir.path(), "r", 1024, &[], |m| {
        rename(m, "physics", "hardware", "hardware_profile", json!("m4-pro"));
    });
    let line = 1 + text.lines().position(|l| l.contains("\"hardware_profile\"")).unwrap();
    let assert = Command::cargo_bin("bench").unwrap().arg("verify").arg(&run).assert().code(2);
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    assert!(
        stderr.contains(&format!("run.json:{line}: not a bench run.json: unknown field `hardware_profile`")),
        "{stderr}"
    );
}

#[test]
fn what_a_sweep_writes_reads_back_through_the_typed_view() {
    let argv =
        ["bench", "sweep", "--server", "http://127.0.0.1:1", "--tolerance", "0.15", "--output-tokens", "48"];
    let physics = ["--model", "the-model", "--hardware", "h200", "--bandwidth-gbps", "4214"];
    let sizes = ["--model-bytes", "16GB", "--params", "8B"];
    let cli = Cli::try_parse_from(argv.iter().chain(&physics).chain(&sizes)).unwrap();
    let Verb::Sweep(args) = cli.command else { panic!("parsed as sweep") };
    let config = ttft_bench::config::resolve(&args).unwrap();
    let meta = RunMeta {
        server: ServerInfo { props: Some(json!({"build_info": "b4567"})), ..Default::default() },
        ..RunMeta::started(
            "20260101T000000Z-cold".into(),
            config,
            "2026-01-01T00:00:00.000Z".into(),
            HostFacts { cpu_brand: "Apple M4 Pro".into(), arch: "aarch64".into(), ..Default::default() },
        )
    };
    let text = serde_json::to_string_pretty(&meta).unwrap();
    let read = read_run_json("run.json", text.as_bytes()).unwrap();
    assert_eq!(read.raw, serde_json::to_value(&meta).unwrap(), "kept verbatim");
    let view = &read.view;
    let RunMetaView::Ours(ours) = view else { panic!("a sweep's run.json is ours: {view:?}") };
    assert_eq!(view.run_id(), Some("20260101T000000Z-cold"));
    assert_eq!(view.thermal_tolerance(), Some(0.15));
    assert_eq!(view.harness_git_sha(), Some(Harness::current().git_sha.as_str()));
    assert_eq!(view.host_cpu_brand(), Some("Apple M4 Pro"));
    let config = ours.config.as_ref().unwrap();
    assert_eq!((config.output_tokens, config.model.as_deref()), (Some(48), Some("the-model")));
    let physics = view.physics_inputs().unwrap();
    assert_eq!(physics.hardware.as_deref(), Some("h200"));
    assert_eq!(physics.bandwidth_gbps, Some(4214.0));
    assert_eq!((physics.model_bytes.as_deref(), physics.params.as_deref()), (Some("16GB"), Some("8B")));
    let props = ours.server.as_ref().and_then(|s| s.props.as_ref()).unwrap();
    assert_eq!(props["build_info"], "b4567");
    assert_eq!(ours.host.as_ref().unwrap().arch.as_deref(), Some("aarch64"));
}

/// The reader's view of a run.json is what `meta` says it is: read back from the bytes a RunMeta
/// serializes to, it equals the view `meta` builds from the same RunMeta field by field. The build
/// holds the fields' Rust names; this holds their serde names (a `rename` on one side only).
#[test]
fn the_view_read_back_equals_the_view_meta_builds() {
    let argv = ["bench", "sweep", "--server-cmd", "llama-server --port {port} --api-key sk-view-4421-secret"];
    let flags = ["--tolerance", "0.15", "--output-tokens", "48", "--model", "the-model", "--insecure"];
    // The model file is looked at when the config is resolved: one that exists (its contents are
    // read only by a sweep).
    let dir = tempfile::tempdir().unwrap();
    let model_file = dir.path().join("m.gguf");
    std::fs::write(&model_file, b"GGUF").unwrap();
    let model_file = model_file.to_str().unwrap();
    let physics =
        ["--hardware", "h200", "--model-bytes", "16GB", "--params", "8B", "--model-file", model_file];
    let cli = Cli::try_parse_from(argv.iter().chain(&flags).chain(&physics)).unwrap();
    let Verb::Sweep(args) = cli.command else { panic!("parsed as sweep") };
    let config = ttft_bench::config::resolve(&args).unwrap();
    let mut meta = RunMeta::started(
        "20260101T000000Z-view".into(),
        config,
        "2026-01-01T00:00:00.000Z".into(),
        HostFacts::collect(),
    );
    meta.server.props = Some(json!({"build_info": "b4567", "n_ctx": 8192}));
    meta.physics = Some(PhysicsProfiles {
        hardware: ttft_results::physics::resolve_hardware(Some("h200"), None, None).unwrap(),
        model: ttft_results::physics::resolve_model(Some("16GB"), Some("8B"), None).unwrap(),
    });
    meta.server_crashes.push(ServerCrash {
        at: "2026-01-01T00:01:00.000Z".into(),
        exit_code: None,
        signal: Some(11),
        in_flight: "ctx 1024 cold streaming b1 run 2".into(),
        stderr_tail: vec!["segfault".into()],
        restarted: true,
    });

    let text = serde_json::to_string_pretty(&meta).unwrap();
    let read = read_run_json("run.json", text.as_bytes()).unwrap();
    let RunMetaView::Ours(ours) = &read.view else { panic!("a sweep's run.json is ours: {:?}", read.view) };
    let built = OurMeta::from(&meta);
    assert_eq!(**ours, built);
    // Every section the view reads is present, so the equality above compared each of them.
    let config = built.config.as_ref().unwrap();
    assert!(config.server_cmd.as_deref().is_some_and(|c| !c.contains("sk-view-4421-secret")), "{config:?}");
    assert!(config.insecure && config.physics.as_ref().is_some_and(|p| p.model_file.is_some()));
    assert!(matches!(config.thermal, Some(ThermalView::Probe { .. })));
    assert!(built.physics.as_ref().is_some_and(|p| p.model.is_some()));
    assert_eq!(built.server_crashes.len(), 1);
    assert!(built.harness.is_some() && built.server.as_ref().is_some_and(|s| s.props.is_some()));
}

//! Every sweep says how much of its wall time was the harness's own (prompt building, preset
//! calls, metrics, fsync, thermal), prints it at the end and keeps it in run.json. Only the
//! consistency of the parts is asserted, never a speed. It also says how its reads were stamped.

use crate::common;

use common::scripted::{Behaviour, Scripted};
use common::{bench, run_dir, stderr};
use serde_json::Value;

#[test]
fn a_sweep_reports_its_harness_time_and_the_parts_add_up_within_its_wall_time() {
    // Tokens 10 ms apart arrive one by one even on a busy machine (1 ms apart, a starved client read
    // them in a few reads and the quality gate rightly failed the stream as a burst).
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 10, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let flags = ["--contexts", "256,512", "--runs", "2", "--output-tokens", "24", "--thermal", "off"];
    let mut args = vec!["sweep", "--server", &server.url, "--out", out, "--preset", "llama.cpp"];
    args.extend(flags);
    args.extend(["--cache-states", "cold,warm,hot", "--modes", "streaming", "--batch-sizes", "1,2"]);
    let result = bench(&args);
    assert!(result.status.success(), "{}", stderr(&result));
    assert!(stderr(&result).contains("harness time between cells: "), "{}", stderr(&result));
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir(dir.path()).join("run.json")).unwrap())
            .unwrap();
    let t = &meta["harness_time"];
    let s = |k: &str| t[k].as_f64().unwrap_or_else(|| panic!("harness_time.{k} missing: {t}"));
    let parts =
        ["measured_s", "priming_s", "prompt_s", "preset_s", "metrics_s", "write_s", "thermal_s", "other_s"];
    let sum: f64 = parts.iter().map(|k| s(k)).sum();
    assert!(parts.iter().all(|k| s(k) >= 0.0), "{t}");
    assert!(sum <= s("wall_s") + 1e-6, "parts {sum} s exceed the wall {} s: {t}", s("wall_s"));
    assert!(
        s("measured_s") > 0.0 && s("priming_s") > 0.0 && s("preset_s") > 0.0 && s("write_s") > 0.0,
        "{t}"
    );
    // What the harness share means, not the code's sum (measuring::harness_time's unit tests hold that
    // to literals): the wall is the server's work (measured, priming) and the harness's time, with
    // nothing left over; and the line on stderr prints the share run.json keeps.
    let servers = s("measured_s") + s("priming_s");
    assert!((servers + s("harness_s") - s("wall_s")).abs() < 1e-6, "{t}");
    assert!((0.0..1.0).contains(&s("harness_fraction")), "{t}");
    let printed =
        format!("harness time between cells: {:.1}% of {:.1} s", 100.0 * s("harness_fraction"), s("wall_s"));
    assert!(stderr(&result).contains(&printed), "{printed} in {}", stderr(&result));
    // Plain HTTP goes the direct path, and run.json says how its reads were stamped.
    let stamps = &meta["arrival_stamps"];
    assert_eq!(stamps["transport"], "direct", "{stamps}");
    let count =
        |k: &str| stamps[k].as_u64().unwrap_or_else(|| panic!("arrival_stamps.{k} missing: {stamps}"));
    let reads = count("reads_kernel_stamped") + count("reads_stamped_on_return");
    assert!(reads > 0, "{stamps}");
    if cfg!(target_os = "linux") {
        assert_eq!(count("reads_stamped_on_return"), 0, "Linux stamps every read: {stamps}");
    }
    count("peeks_while_behind");
}

/// `--think-time` pauses are asked for: run.json and the stderr line keep them apart (`think_s`),
/// never in the harness's share of the wall time (they were counted as harness time, `other`).
#[test]
fn think_time_is_its_own_part_not_harness_time() {
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 10, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let result = bench(&[
        "sweep",
        "--server",
        &server.url,
        "--out",
        out,
        "--preset",
        "llama.cpp",
        "--contexts",
        "256",
        "--runs",
        "2",
        "--output-tokens",
        "24",
        "--thermal",
        "off",
        "--cache-states",
        "hot",
        "--turns",
        "4",
        "--think-time",
        "300ms",
    ]);
    assert!(result.status.success(), "{}", stderr(&result));
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir(dir.path()).join("run.json")).unwrap())
            .unwrap();
    let t = &meta["harness_time"];
    let s = |k: &str| t[k].as_f64().unwrap_or_else(|| panic!("harness_time.{k} missing: {t}"));
    // 2 runs x 3 pauses (before turns 2, 3 and 4) of 300 ms.
    assert!(s("think_s") >= 6.0 * 0.3, "{t}");
    assert!(s("harness_s") < s("think_s"), "the pauses are not the harness's: {t}");
    let servers = s("measured_s") + s("priming_s") + s("think_s");
    assert!((servers + s("harness_s") - s("wall_s")).abs() < 1e-6, "{t}");
    assert!(stderr(&result).contains(&format!("think time {:.1} s", s("think_s"))), "{}", stderr(&result));
}

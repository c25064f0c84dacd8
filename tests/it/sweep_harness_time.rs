//! Every sweep says how much of its wall time was the harness's own (prompt building, preset
//! calls, metrics, fsync, thermal), prints it at the end and keeps it in run.json. Only the
//! consistency of the parts is asserted, never a speed. It also says how its reads were stamped.

use crate::common;

use common::scripted::{Behaviour, Scripted};
use common::{bench, run_dir, stderr};
use serde_json::Value;

#[test]
fn a_sweep_reports_its_harness_time_and_the_parts_add_up_within_its_wall_time() {
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 1, ..Default::default() });
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
    let harness =
        s("prompt_s") + s("preset_s") + s("metrics_s") + s("write_s") + s("thermal_s") + s("other_s");
    assert!((s("harness_s") - harness).abs() < 1e-9, "{t}");
    assert!((s("harness_fraction") - harness / s("wall_s")).abs() < 1e-9, "{t}");
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

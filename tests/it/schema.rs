//! The published JSON Schema of records (schema/record.schema.json) matches the Rust types, and
//! real output of `bench sweep` validates against it.

use crate::common;

use common::scripted::{Behaviour, Scripted};
use common::{bench, records, run_dir, stderr};

const SCHEMA_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/record.schema.json");

fn generated() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(ttft_model::record::Record)).unwrap()
}

#[test]
fn published_schema_matches_the_record_types() {
    let fresh = serde_json::to_string_pretty(&generated()).unwrap() + "\n";
    if std::env::var("UPDATE_SCHEMA").as_deref() == Ok("1") {
        std::fs::write(SCHEMA_PATH, &fresh).unwrap();
    }
    let committed = std::fs::read_to_string(SCHEMA_PATH).unwrap_or_default();
    assert!(
        committed == fresh,
        "schema/record.schema.json is out of date with the record types (crates/model/src/record/); regenerate with: UPDATE_SCHEMA=1 cargo test --test it schema::"
    );
}

#[test]
fn real_sweep_output_validates_against_the_schema() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&[
        "sweep",
        "--server",
        &server.url,
        "--preset",
        "llama.cpp",
        "--contexts",
        "256",
        "--modes",
        "streaming,non-streaming",
        "--cache-states",
        "cold,warm,hot",
        "--batch-sizes",
        "1,2",
        "--runs",
        "1",
        "--output-tokens",
        "24",
        "--thermal",
        "off",
        "--staggered",
        "--stagger-delay",
        "50ms",
        "--stagger-context",
        "256",
        "--stagger-runs",
        "1",
        "--quiet",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let validator = common::schema_validator();
    let recs = records(&run_dir(dir.path()));
    let kinds: std::collections::BTreeSet<&str> =
        recs.iter().map(|r| r["record_type"].as_str().unwrap()).collect();
    assert_eq!(kinds.into_iter().collect::<Vec<_>>(), ["group", "measurement", "staggered"]);
    for r in &recs {
        let errors: Vec<String> =
            validator.iter_errors(r).map(|e| format!("{} at {}", e, e.instance_path)).collect();
        assert!(errors.is_empty(), "record does not match the schema: {errors:?}\n{r}");
    }
    // A record that breaks the schema is caught (the validator is not vacuous).
    let mut broken = recs[0].clone();
    broken["ttft_ms"] = serde_json::json!("fast");
    assert!(!validator.is_valid(&broken));
}

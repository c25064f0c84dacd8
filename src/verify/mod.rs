//! `bench verify FILE...`: flags impossible or suspicious numbers in result files.
//!
//! Exit codes: 0 clean (warnings and infos allowed unless --strict); 1 any error, or any warning
//! with --strict; 2 unusable input (unreadable file, bad flag).
//!
//! `--format json` prints one object (shape version `verify_schema`, additions only within a version):
//! ```text
//! { "verify_schema": 1,
//!   "inputs":   [{"path", "kind", "records"}],
//!   "physics":  [{"path", "hardware": {name, bandwidth_gbps, tflops} | null, "models": [ModelProfile]}],
//!   "notes":    ["..."],               // e.g. why physics rules were skipped
//!   "findings": [{"severity": "error"|"warning"|"info", "rule", "file", "run_id", "cell": CellKey | null,
//!                 "value", "limit", "unit", "message"}],
//!   "summary":  {"errors", "warnings", "infos", "records", "exit_code"} }
//! ```

mod finding;
mod outlier;
mod rules;

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};

use crate::exit::{self, Failure};
use crate::physics::{self, Hardware, ModelProfile, hardware};
use crate::results::load::{self, Source, SourceKind};
use crate::results::run_meta::PhysicsView;
pub use finding::{Finding, Severity, rule};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    bench verify results/20261122T031500Z-cold\n  \
    bench verify run1.jsonl run2.jsonl --hardware m4-pro --model-bytes 8.03GB --params 12B\n  \
    bench verify results/* --format json --strict\n\n\
    Physics inputs fall back to each run's run.json (config.physics), then to the built-in profiles of\n\
    known models. Without hardware, the ceiling rules are skipped and a note says so.\n\
    Exit codes: 0 clean; 1 errors (or warnings with --strict); 2 unusable input.")]
pub struct VerifyArgs {
    /// Result files or run directories.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// text (one line per finding) or json (stable shape, see the module docs).
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Warnings fail too (exit 1).
    #[arg(long)]
    pub strict: bool,
    #[command(flatten)]
    pub physics: crate::cli::PhysicsArgs,
    /// Warm must be at least this much faster than cold (median TTFT) where physics cannot say more.
    #[arg(long, default_value_t = 1.5)]
    pub min_warm_speedup: f64,
    /// Storage read bandwidth for the warm-reload estimate, GB/s. The default is deliberately modest
    /// (measured.md: 1.44 GB/s on an H200 host): a slower guess only makes "cache broken" harder to raise.
    #[arg(long, default_value_t = 2.0)]
    pub storage_gbps: f64,
}

pub fn run(args: &VerifyArgs) -> anyhow::Result<ExitCode> {
    if !(args.min_warm_speedup.is_finite() && args.min_warm_speedup > 0.0) {
        return Err(Failure::usage("--min-warm-speedup must be more than 0").into());
    }
    if !(args.storage_gbps.is_finite() && args.storage_gbps > 0.0) {
        return Err(Failure::usage("--storage-gbps must be more than 0").into());
    }
    let p = &args.physics;
    let flag_hw = physics::resolve_hardware(p.hardware.as_deref(), p.bandwidth_gbps, p.tflops)
        .map_err(Failure::usage)?;
    let flag_model =
        physics::resolve_model(p.model_bytes.as_deref(), p.params.as_deref(), p.model_file.as_deref())
            .map_err(Failure::usage)?;
    let mut sources = Vec::new();
    for path in &args.inputs {
        sources.push(load::load(path).map_err(|e| Failure::usage(e.to_string()))?);
    }
    let report = verify_sources(args, &sources, flag_hw.as_ref(), flag_model.as_ref());
    let failed = report.errors > 0 || (args.strict && report.warnings > 0);
    let code = if failed { exit::FINDINGS } else { exit::SUCCESS };
    match args.format {
        Format::Json => {
            let mut value = report.json;
            value["summary"]["exit_code"] = json!(code);
            println!("{}", serde_json::to_string_pretty(&value)?);
        }
        Format::Text => {
            for note in &report.notes {
                println!("note: {note}");
            }
            for f in &report.findings {
                println!("{}", f.line());
            }
            println!(
                "summary: {} error(s), {} warning(s), {} info in {} record(s) from {} input(s){}",
                report.errors,
                report.warnings,
                report.infos,
                report.records,
                sources.len(),
                if args.strict { " (--strict: warnings fail)" } else { "" }
            );
        }
    }
    Ok(exit::code(code))
}

struct Report {
    findings: Vec<Finding>,
    notes: Vec<String>,
    errors: usize,
    warnings: usize,
    infos: usize,
    records: usize,
    json: Value,
}

/// Physics of one input: flags first, then its run.json (`config.physics`).
fn source_physics(
    src: &Source,
    file: &str,
    flag_hw: Option<&Hardware>,
    flag_model: Option<&ModelProfile>,
    notes: &mut Vec<String>,
    findings: &mut Vec<Finding>,
) -> (Option<Hardware>, Option<ModelProfile>) {
    let meta_physics: Option<&PhysicsView> = src.run_meta.iter().find_map(|m| m.view.physics_inputs());
    let text = |f: fn(&PhysicsView) -> Option<&str>| meta_physics.and_then(f);
    let hw_in = (
        text(|m| m.hardware.as_deref()),
        meta_physics.and_then(|m| m.bandwidth_gbps),
        meta_physics.and_then(|m| m.tflops),
    );
    let meta_hw = match physics::resolve_hardware(hw_in.0, hw_in.1, hw_in.2) {
        Ok(hw) => hw,
        Err(e) => {
            notes.push(format!("{file}: run.json physics unusable: {e}"));
            None
        }
    };
    let brand = src.run_meta.iter().find_map(|m| m.view.host_cpu_brand());
    let suggested = brand.and_then(hardware::suggest_hardware);
    let hw = flag_hw.cloned().or(meta_hw.clone());
    match &hw {
        None => notes.push(format!(
            "{file}: no hardware known: decode/prefill ceiling rules skipped (give --hardware NAME, or --bandwidth-gbps and --tflops){}",
            suggested.map_or(String::new(), |p| format!("; the host reports {:?}: try --hardware {}", brand.unwrap_or(""), p.name))
        )),
        Some(used) => {
            let mut differs = Vec::new();
            if let Some(m) = meta_hw.as_ref().filter(|m| flag_hw.is_some() && m.name != used.name) {
                differs.push(format!("run.json config.physics says {}", m.name));
            }
            if let Some(p) = suggested.filter(|p| p.name != used.name) {
                differs.push(format!("the host's CPU {:?} suggests {}", brand.unwrap_or(""), p.name));
            }
            if !differs.is_empty() {
                findings.push(Finding::new(
                    Severity::Warning,
                    rule::HARDWARE_MISMATCH,
                    file,
                    format!("ceilings use {} ({} GB/s) but {}: check which machine measured this", used.name, used.bandwidth_gbps, differs.join(" and ")),
                ));
            }
        }
    }
    let model = flag_model.cloned().or_else(|| {
        let file_path = meta_physics.and_then(|m| m.model_file.as_deref());
        match physics::resolve_model(
            text(|m| m.model_bytes.as_deref()),
            text(|m| m.params.as_deref()),
            file_path,
        ) {
            Ok(m) => m,
            Err(e) => {
                notes.push(format!("{file}: run.json model profile unusable: {e}"));
                None
            }
        }
    });
    (hw, model)
}

fn verify_sources(
    args: &VerifyArgs,
    sources: &[Source],
    flag_hw: Option<&Hardware>,
    flag_model: Option<&ModelProfile>,
) -> Report {
    let mut findings = Vec::new();
    let mut notes = Vec::new();
    let mut inputs_json = Vec::new();
    let mut physics_json = Vec::new();
    for src in sources {
        let file = src.path.display().to_string();
        let (hw, model) = source_physics(src, &file, flag_hw, flag_model, &mut notes, &mut findings);
        let model_for = |name: &str| model.clone().or_else(|| physics::model::find_builtin(name).cloned());
        let mut models: Vec<String> = src.records.iter().map(|r| r.cell().model.clone()).collect();
        models.sort();
        models.dedup();
        let mut profiles = Vec::new();
        for name in &models {
            match model_for(name) {
                Some(p) => profiles.push(p),
                None if hw.is_some() => notes.push(format!(
                    "{file}: no model profile for {name:?}: ceiling rules skipped for it (give --model-bytes and --params, or --model-file)"
                )),
                None => {}
            }
        }
        physics_json.push(json!({ "path": file, "hardware": hw, "models": profiles }));
        inputs_json.push(json!({ "path": file, "kind": kind_name(src.kind), "records": src.records.len() }));
        let ctx = rules::Ctx {
            file: &file,
            hardware: hw.as_ref(),
            model_for: &model_for,
            min_warm_speedup: args.min_warm_speedup,
            storage_gbps: args.storage_gbps,
        };
        for rec in &src.records {
            rules::record_rules(&ctx, rec, &mut findings);
        }
        rules::cache_state_rules(&ctx, &src.records, &mut findings);
    }
    let together: Vec<(String, &[crate::record::Record])> =
        sources.iter().map(|s| (s.path.display().to_string(), s.records.as_slice())).collect();
    outlier::run_outliers(&together, &mut findings);
    // Most severe first, then in input order (stable sort keeps it).
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
    let (errors, warnings, infos) = (count(Severity::Error), count(Severity::Warning), count(Severity::Info));
    let records = sources.iter().map(|s| s.records.len()).sum();
    let json = json!({
        "verify_schema": 1,
        "inputs": inputs_json,
        "physics": physics_json,
        "notes": notes,
        "findings": findings,
        "summary": { "errors": errors, "warnings": warnings, "infos": infos, "records": records, "exit_code": null },
    });
    Report { findings, notes, errors, warnings, infos, records, json }
}

fn kind_name(kind: SourceKind) -> &'static str {
    match kind {
        SourceKind::RunDir => "run_dir",
        SourceKind::Jsonl => "jsonl",
        SourceKind::Canonical => "canonical",
        SourceKind::Origin => "origin",
    }
}

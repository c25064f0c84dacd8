//! The reading verbs' arguments (`verify`, `merge`, `report`, `compare`) and their format values.
//! They read result files and never reach a server, so they share no group with the driving verbs
//! except the physics inputs (`PhysicsArgs`), which `verify` and `sweep` read alike.

use std::path::PathBuf;

use super::PhysicsArgs;

/// `bench verify --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum VerifyFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    bench verify results/20261122T031500Z-cold\n  \
    bench verify run1.jsonl run2.jsonl --hardware m4-pro --model-bytes 8.03GB --params 12B\n  \
    bench verify results/* --format json --strict\n  \
    bench verify published.json --sources results/run-a results/run-b\n  \
    bench verify --list-rules\n\n\
    With --sources, every record of each input must be found in one of the sources (same cell\n\
    and run, same numbers up to the input's rounding) and the input's metadata must agree with\n\
    the sources its records come from; anything else is an error (provenance_* rules).\n\
    Physics inputs fall back to each run's run.json: the model profile the sweep recorded\n\
    (physics.model, read from the GGUF at sweep time), then its inputs (config.physics), then the\n\
    built-in profiles of known models. Without hardware, the ceiling rules are skipped and a note says so.\n\
    Exit codes: 0 clean; 1 errors (or warnings with --strict); 2 unusable input (a bad flag, an\n\
    unreadable file, an input without records unless --allow-empty).\n\n\
    Guide: docs/merge-verify.md (in the ttft-bench repository)")]
pub struct VerifyArgs {
    /// Result files or run directories (ours, the origin's, or vLLM/AIPerf/GuideLLM results:
    /// docs/import.md).
    #[arg(required_unless_present = "list_rules")]
    pub inputs: Vec<PathBuf>,
    /// The raw files the inputs claim to come from (run dirs, .jsonl, canonical or origin files):
    /// audit every input record against them (provenance rules; errors).
    #[arg(long, num_args = 1.., value_name = "RAW")]
    pub sources: Vec<PathBuf>,
    /// text (one line per finding) or json (stable shape, see the module docs).
    #[arg(long, value_enum, default_value = "text")]
    pub format: VerifyFormat,
    /// Warnings fail too (exit 1).
    #[arg(long)]
    pub strict: bool,
    #[command(flatten)]
    pub physics: PhysicsArgs,
    /// Warm must be at least this much faster than cold (median TTFT) where physics cannot say more
    /// [default: 1.5].
    #[arg(long, value_parser = ttft_model::spec::finite)]
    pub min_warm_speedup: Option<f64>,
    /// Storage read bandwidth for the warm-reload estimate, GB/s. The default is deliberately modest
    /// (an H200 host's disk read its slot file at 1.44 GB/s): a slower guess only makes "cache
    /// broken" harder to raise [default: 2].
    #[arg(long, value_parser = ttft_model::spec::finite)]
    pub storage_gbps: Option<f64>,
    /// Accept inputs that hold no records (otherwise exit 2: nothing to verify is not a pass).
    #[arg(long)]
    pub allow_empty: bool,
    /// Print every rule with its severity and reason, and exit.
    #[arg(long)]
    pub list_rules: bool,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    bench merge results/run-a results/run-b/measurements.jsonl -o results/paper.json\n  \
    bench merge first.json rerun.json -o results/gemma.json --expect scenarios/paper.toml\n\n\
    Inputs: run directories, .jsonl record files, canonical files, origin benchmark JSON.\n\
    Records read from files keep their text byte for byte (copied, not printed again); an input\n\
    changed in place while the merge runs is refused (exit 2). The output may be an existing\n\
    canonical file (it is replaced whole), never one of the raw inputs or a path inside a run\n\
    directory (exit 2).\n\
    Runs of one model must agree on the server (URL or --server-cmd, preset, API, build, model\n\
    file, hardware) and on what was measured (output tokens, thermal policy, harness, host):\n\
    each disagreement is printed as a conflict, and the merge exits 1 without writing.\n\
    Exit codes: 0 merged (and complete); 1 conflicts (nothing written) or incomplete against\n\
    --expect (written); 2 bad input (nothing written); 4 the output could not be written.\n\n\
    Guide: docs/merge-verify.md (in the ttft-bench repository)")]
pub struct MergeArgs {
    /// Run directories, .jsonl files, canonical files or origin result JSON.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Where to write the canonical file (e.g. results/paper.json).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Scenario file whose matrix the merged records should fill; prints a completeness table.
    #[arg(long, value_name = "SCENARIO")]
    pub expect: Option<PathBuf>,
    /// Exit 0 even when --expect finds missing or failed cells.
    #[arg(long)]
    pub allow_incomplete: bool,
    /// Accept inputs that hold no records (a run killed before its first one); without it they
    /// are refused (exit 2) and nothing is written.
    #[arg(long)]
    pub allow_empty: bool,
    /// Write the merge even when sources of one model disagree on the server or on what was
    /// measured (the conflicts are listed in the file and on stderr); without it: exit 1,
    /// nothing written.
    #[arg(long)]
    pub allow_conflicts: bool,
}

/// `bench report --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    Table,
    Markdown,
    Csv,
    Json,
    Html,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    bench report results/paper.json\n  \
    bench report results/paper.json --format csv > paper.csv\n  \
    bench report results/run-a results/run-b --plot plots/\n  \
    bench report results/paper.json --format html -o paper.html\n\n\
    --format html writes one self-contained page (no network: inline style and SVG plots) with the\n\
    cell table, verify's findings under the cells they concern (the rules `bench verify INPUTS`\n\
    runs), every run's metadata and the conflicts between sources; it needs -o.\n\
    CSV columns: docs/report-columns.md. Exit codes: 0 done; 2 bad input (an input without records\n\
    unless --allow-empty; html without -o); 4 the report or the plots not written.\n\n\
    Guide: docs/merge-verify.md (in the ttft-bench repository)")]
pub struct ReportArgs {
    /// Canonical files, run directories, .jsonl files or origin result JSON.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Output format (html: one self-contained page, written to -o).
    #[arg(long, value_enum, default_value = "table")]
    pub format: ReportFormat,
    /// Write the report to FILE (atomically: a reader never sees half of it) instead of stdout.
    /// Required with --format html.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write SVG plots into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Accept inputs that hold no records (otherwise exit 2).
    #[arg(long)]
    pub allow_empty: bool,
}

/// `bench compare --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CompareFormat {
    Table,
    Markdown,
    Json,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    bench compare results/main-build results/patched-build\n  \
    bench compare base.json cand-a.json cand-b.json --format markdown\n  \
    bench compare results/main results/pr --fail-on-regression 5      # CI gate\n  \
    bench compare old.json new.json --expect scenarios/paper.toml --format json\n\n\
    Per cell present in both (runs pooled): median(candidate) / median(base), 95% bootstrap interval;\n\
    'faster' or 'slower' only when the interval excludes 1. Lower is faster for times (TTFT, E2E),\n\
    higher for rates (decode, system tok/s). Details: docs/compare.md.\n\
    Exit codes: 0 compared; 1 a significant regression beyond --fail-on-regression; 2 bad input (an\n\
    unreadable file, an input without records or a candidate sharing no cell with the base, unless\n\
    --allow-empty).\n\n\
    Guide: docs/compare.md (in the ttft-bench repository)")]
pub struct CompareArgs {
    /// The reference: a run directory, .jsonl, canonical file or origin result JSON.
    pub base: PathBuf,
    /// One or more candidates, each compared with the base.
    #[arg(required = true)]
    pub candidates: Vec<PathBuf>,
    /// Output format on stdout (json: a stable, versioned shape; see docs/compare.md).
    #[arg(long, value_enum, default_value = "table")]
    pub format: CompareFormat,
    /// Exit 1 when a candidate is significantly slower than the base by more than PCT percent on
    /// any metric of any cell (the whole 95% interval beyond it: ratio above 1 + PCT/100 for
    /// times, below 1 - PCT/100 for rates). 0 fails on any significant slowdown.
    #[arg(long, value_name = "PCT", value_parser = ttft_model::spec::finite)]
    pub fail_on_regression: Option<f64>,
    /// Scenario file whose matrix every input should fill: cells it lacks are counted as
    /// missing_from_matrix in the failure table.
    #[arg(long, value_name = "SCENARIO")]
    pub expect: Option<PathBuf>,
    /// Accept inputs without records and candidates that share no cell with the base.
    #[arg(long)]
    pub allow_empty: bool,
}

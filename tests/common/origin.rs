//! Where the origin benchmark's real published result files are, for tests that read them.
//!
//! They are test data kept beside the repository, not in it (docs/design.md, "Reference data", says
//! what they are and what the tests pin on them): the directory named by
//! `TTFT_BENCH_ORIGIN_DIR`, else `shared/data/origin-results` next to the checkout (or next to its
//! parent, for a worktree). Absent, a test skips with a message on stderr; with
//! `TTFT_BENCH_REQUIRE_ORIGIN=1` (where the data is provisioned) it fails instead.

use std::path::{Path, PathBuf};

fn dirs() -> Vec<PathBuf> {
    if let Some(dir) = std::env::var_os("TTFT_BENCH_ORIGIN_DIR") {
        return vec![PathBuf::from(dir)];
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Not in the repository (docs/design.md, "Reference data", says what these files are): looked
    // for beside the checkout, or one level higher for a worktree; TTFT_BENCH_ORIGIN_DIR overrides.
    vec![root.join("../shared/data/origin-results"), root.join("../../shared/data/origin-results")]
}

/// The directory holding the origin files, when it holds `name`.
pub fn dir_with(name: &str) -> Option<PathBuf> {
    real(name).and_then(|p| p.parent().map(Path::to_path_buf))
}

/// The real origin file `name`, or None (after saying so) when the data is not on this machine.
/// Panics when `TTFT_BENCH_REQUIRE_ORIGIN=1` and the file is missing.
pub fn real(name: &str) -> Option<PathBuf> {
    let candidates = dirs();
    if let Some(found) = candidates.iter().map(|d| d.join(name)).find(|p| p.exists()) {
        return Some(found);
    }
    let looked: Vec<String> = candidates.iter().map(|d| d.display().to_string()).collect();
    let message = format!("origin result file {name} is absent (looked in {})", looked.join(", "));
    if std::env::var("TTFT_BENCH_REQUIRE_ORIGIN").is_ok_and(|v| v == "1") {
        panic!("{message}; TTFT_BENCH_REQUIRE_ORIGIN=1 requires it");
    }
    eprintln!("SKIP: {message}; set TTFT_BENCH_REQUIRE_ORIGIN=1 to make this a failure");
    None
}

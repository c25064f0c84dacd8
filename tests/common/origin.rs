//! Where the origin benchmark's real published result files are, for tests that read them:
//! tests/fixtures/origin-results/ (docs/design.md, "Reference data", says what they are and what
//! the tests pin on them).

use std::path::{Path, PathBuf};

/// The directory of the origin files.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/origin-results")
}

/// The real origin file `name`. Panics when it is not there (a name the fixtures do not have is a
/// mistake in the test).
pub fn real(name: &str) -> PathBuf {
    let path = dir().join(name);
    assert!(path.exists(), "origin result file {} is not in the checkout", path.display());
    path
}

//! The real llama.cpp server, started through the project's one path (scripts/llama-server.sh).
//!
//! Skips (returns None with a printed reason) when the server is not built locally, unless
//! TTFT_BENCH_REQUIRE_LLAMA=1 (set by .ci/run), which turns the skip into a failure.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

/// One real server at a time per test binary. Tests of one binary run in parallel, and on a 2-core
/// machine two servers plus their clients leave the client waiting for a core while tokens queue
/// in its socket: it then stamps a burst, and the decode rate it measures exceeds what the memory
/// bandwidth allows (seen as decode_fraction 1.96). Timing tests must not share the CPU.
static ONE_SERVER: Mutex<()> = Mutex::new(());

pub struct LlamaServer {
    pub url: String,
    state_dir: tempfile::TempDir,
    /// Held until the server is stopped (fields drop after `Drop::drop`).
    _turn: MutexGuard<'static, ()>,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/llama-server.sh")
}

/// Whether the server is built here; false after saying why (a failure under
/// TTFT_BENCH_REQUIRE_LLAMA=1).
fn available(test: &str) -> bool {
    let available = Command::new("bash").arg(script()).arg("available").output().unwrap();
    if available.status.success() {
        return true;
    }
    let why = String::from_utf8_lossy(&available.stderr).trim().to_string();
    if std::env::var("TTFT_BENCH_REQUIRE_LLAMA").as_deref() == Ok("1") {
        panic!("{test}: the real llama-server is required (TTFT_BENCH_REQUIRE_LLAMA=1) but: {why}");
    }
    eprintln!("SKIPPED {test}: real llama-server not available ({why}); `just server-build` builds it");
    false
}

/// The last line the script prints for `args` (a path).
fn script_output(args: &[&str]) -> String {
    let out = Command::new("bash").arg(script()).args(args).output().unwrap();
    assert!(out.status.success(), "llama-server.sh {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("").trim().to_string()
}

/// A shell command that starts the built server on the tiny model, with `{port}` left for
/// `bench --server-cmd` to fill.
pub fn server_command(test: &str) -> Option<String> {
    if !available(test) {
        return None;
    }
    let (bin, model) = (script_output(&["build"]), script_output(&["model", "tiny"]));
    Some(format!(
        "{bin} -m {model} --host 127.0.0.1 --port {{port}} -c 8192 --parallel 2 -t 1 --metrics --cache-ram 0"
    ))
}

impl LlamaServer {
    /// Starts a private server (own port, own state dir); `extra` goes to llama-server.
    pub fn start(test: &str, extra: &[&str]) -> Option<LlamaServer> {
        if !available(test) {
            return None;
        }
        // A test that panicked while holding the lock stopped its server when it unwound.
        let turn = ONE_SERVER.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let state_dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("bash");
        // One decode thread: llama.cpp's threads spin while they decode, and on a 2-core machine two
        // of them starve the server's HTTP thread, which then writes a whole stream at once (a burst
        // the quality gate rightly fails). One thread leaves a core to the HTTP thread and the client.
        cmd.arg(script()).arg("start").arg("--threads").arg("1").arg("--state-dir").arg(state_dir.path());
        if !extra.is_empty() {
            cmd.arg("--").args(extra);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{test}: llama-server did not start:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("").trim().to_string();
        assert!(url.starts_with("http://"), "{test}: no URL from the start script: {url:?}");
        Some(LlamaServer { url, state_dir, _turn: turn })
    }

    /// The directory the server saves slots to (its `--slot-save-path`).
    pub fn slot_dir(&self) -> PathBuf {
        self.state_dir.path().join("slots")
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg("--state-dir")
            .arg(self.state_dir.path())
            .output();
    }
}

/// Whether a missing llama-server or model is a failure here (TTFT_BENCH_REQUIRE_LLAMA=1, set by
/// .ci/run) instead of a skip.
pub fn required() -> bool {
    std::env::var("TTFT_BENCH_REQUIRE_LLAMA").as_deref() == Ok("1")
}

/// The project's tiny generated model (scripts/gen_model.py "tiny") in the cache
/// (`$TTFT_BENCH_CACHE`, else ~/.cache/ttft-bench).
pub fn tiny_model(test: &str) -> Option<PathBuf> {
    let cache = std::env::var_os("TTFT_BENCH_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/ttft-bench")));
    tiny_model_in(cache.as_deref(), test, required())
}

/// `cache`'s tiny model, or None after saying why it is absent; absent while `required`, a
/// failure: a test that skips where CI promised the model would prove nothing.
pub fn tiny_model_in(cache: Option<&std::path::Path>, test: &str, required: bool) -> Option<PathBuf> {
    let path = cache.map(|c| c.join("models/tiny.gguf"));
    if let Some(path) = path.as_ref().filter(|p| p.is_file()) {
        return Some(path.clone());
    }
    let shown = path
        .map_or("no cache directory (neither TTFT_BENCH_CACHE nor HOME)".into(), |p| p.display().to_string());
    if required {
        panic!("{test}: the tiny model is required (TTFT_BENCH_REQUIRE_LLAMA=1) but {shown} is absent");
    }
    eprintln!("SKIPPED {test}: {shown} absent (bash scripts/llama-server.sh model tiny generates it)");
    None
}

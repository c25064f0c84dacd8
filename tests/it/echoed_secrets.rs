//! Keys a server says back in a form other than the one bench sent: the base64 of the URL's Basic
//! credentials, `\/`-escaped JSON, repeated in the completion, or across the place where an error
//! quote is cut. None of them may reach a file bench writes, its stdout or its stderr.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::scripted::{Behaviour, EchoKey, Fault, Scripted};
use common::{measurements, run_dir, stderr};

/// Guards against a hang only; nothing here is timed.
const HANG: Duration = Duration::from_secs(90);

fn faulty(fault: Fault) -> Scripted {
    Scripted::start(Behaviour { first_token_ms: 20, token_ms: 1, fault, ..Default::default() })
}

/// `bench VERB --server URL ...` with the key in $TTFT_TEST_ECHO_KEY.
fn bench(verb: &str, url: &str, out: &Path, key: Option<&str>, extra: &[&str]) -> std::process::Output {
    let mut cmd = assert_cmd::Command::cargo_bin("bench").unwrap();
    cmd.args([verb, "--server", url, "--out", out.to_str().unwrap(), "--thermal", "off"])
        .args(["--contexts", "256", "--output-tokens", "24"])
        .args(extra)
        .timeout(HANG);
    if let Some(key) = key {
        cmd.env("TTFT_TEST_ECHO_KEY", key).args(["--api-key-env", "TTFT_TEST_ECHO_KEY"]);
    }
    cmd.output().unwrap()
}

/// Fails when any of `secrets` is in a file under `dir`, or in the output.
fn assert_nowhere(dir: &Path, out: &std::process::Output, secrets: &[&str]) {
    let mut written = vec![String::from_utf8_lossy(&out.stdout).to_string(), stderr(out)];
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                written.push(String::from_utf8_lossy(&std::fs::read(&path).unwrap()).to_string());
            }
        }
    }
    for text in &written {
        for secret in secrets {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
    }
}

/// The error message of the first measurement.
fn first_error(out: &Path) -> String {
    let m = &measurements(&run_dir(out))[0];
    m["error"]["message"].as_str().unwrap_or_else(|| panic!("no error: {m}")).to_string()
}

/// Fails when the Basic credentials the client makes of a URL's user and password are written
/// when a server echoes its headers (only the password itself was masked).
#[test]
fn echoed_basic_credentials_of_the_url_are_redacted() {
    const BASIC: &str = "YmVuY2h1c2VyOnB3LWJhc2ljLTAxMjM="; // base64 of benchuser:pw-basic-0123
    let server = faulty(Fault::EchoHeaders);
    let url = server.url.replace("http://", "http://benchuser:pw-basic-0123@");
    let dir = tempfile::tempdir().unwrap();
    let out = bench("sweep", &url, dir.path(), None, &["--runs", "1", "--quiet"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_nowhere(dir.path(), &out, &[BASIC, "pw-basic-0123"]);
    let message = first_error(dir.path());
    assert!(message.contains("HTTP 401") && message.contains("Basic [redacted]"), "{message}");
    let sent: Vec<String> = server.log().iter().flat_map(|l| l.headers.values().cloned()).collect();
    assert!(sent.iter().any(|v| v.contains(BASIC)), "the server got the credentials: {sent:?}");
}

/// Fails when a key with `/` is written because the server's JSON escaped it as `\/`.
#[test]
fn a_key_echoed_with_escaped_slashes_is_redacted() {
    const KEY: &str = "sk-echo/abc+def/0123456789";
    let dir = tempfile::tempdir().unwrap();
    let server = faulty(Fault::EchoKey(EchoKey::Escaped));
    let out = bench("sweep", &server.url, dir.path(), Some(KEY), &["--runs", "1", "--quiet"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_nowhere(dir.path(), &out, &[KEY, r"sk-echo\/abc+def\/0123456789", "abc+def"]);
    let message = first_error(dir.path());
    assert!(message.contains(r#""key":"[redacted]""#), "{message}");
}

/// Fails when half of a key survives because the error quote was cut (at 2000 characters)
/// through it before redaction ran.
#[test]
fn a_key_cut_by_the_error_quote_leaves_no_half_behind() {
    const KEY: &str = "sk-cut-0123456789abcdef";
    let dir = tempfile::tempdir().unwrap();
    let server = faulty(Fault::EchoKey(EchoKey::AtCut));
    let out = bench("sweep", &server.url, dir.path(), Some(KEY), &["--runs", "1", "--quiet"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_nowhere(dir.path(), &out, &[&KEY[..8]]);
    assert!(first_error(dir.path()).ends_with("x[redacte"), "{}", first_error(dir.path()));
}

/// Fails when a key the server repeats in its completion is written in `output_sample`, by a
/// sweep or by a load.
#[test]
fn a_key_repeated_in_the_completion_is_redacted_from_the_sample() {
    const KEY: &str = "sk-said-back-0123456789";
    for (verb, extra) in [
        ("sweep", vec!["--runs", "1", "--quiet"]),
        ("load", vec!["--quiet", "--mix", "cold=1", "--rates", "4", "--duration", "1s", "--run-id", "l"]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let server = faulty(Fault::EchoKey(EchoKey::Completion));
        let out = bench(verb, &server.url, dir.path(), Some(KEY), &extra);
        assert!(matches!(out.status.code(), Some(0 | 1)), "{verb}: {}", stderr(&out));
        assert_nowhere(dir.path(), &out, &[KEY]);
        let ms = measurements(&run_dir(dir.path()));
        assert!(!ms.is_empty(), "{verb}");
        for m in &ms {
            let sample = m["output_sample"].as_str().unwrap();
            assert!(sample.starts_with("your key is [redacted] "), "{verb}: {m}");
        }
    }
}

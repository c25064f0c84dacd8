//! `bench sweep` over https: the scripted server behind TLS with a certificate signed by a test CA
//! generated per server (rcgen). Trust comes from the platform roots, SSL_CERT_FILE or --ca-cert;
//! --insecure is never silent.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::scripted::{Behaviour, Scripted};
use common::{measurements, run_dir, stderr};

fn sweep(url: &str, out: &Path, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = assert_cmd::Command::cargo_bin("bench").unwrap();
    cmd.args(["sweep", "--server", url, "--out", out.to_str().unwrap(), "--contexts", "256"])
        .args(["--runs", "1", "--output-tokens", "32", "--thermal", "off"])
        .args(extra)
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .timeout(Duration::from_secs(120));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn https() -> (Scripted, tempfile::TempDir, String) {
    let server = Scripted::start_tls(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, server.ca_pem.as_ref().unwrap()).unwrap();
    (server, dir, ca.to_str().unwrap().to_string())
}

fn measured_ok(out_dir: &Path) {
    let ms = measurements(&run_dir(out_dir));
    assert_eq!(ms.len(), 1);
    assert!(ms[0]["error"].is_null(), "{}", ms[0]);
    assert_eq!(ms[0]["output_tokens"], 32);
    assert!(ms[0]["ttft_ms"].as_f64().is_some());
}

#[test]
fn a_sweep_over_https_with_the_private_ca_measures() {
    let (server, dir, ca) = https();
    assert!(server.url.starts_with("https://"));
    let out = sweep(&server.url, &dir.path().join("out"), &["--ca-cert", &ca], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    measured_ok(&dir.path().join("out"));
}

#[test]
fn an_unknown_issuer_is_named_and_exits_3_before_anything_is_measured() {
    let (server, dir, _) = https();
    let out = sweep(&server.url, &dir.path().join("out"), &[], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("invalid peer certificate: UnknownIssuer"), "{err}");
    assert!(err.contains("--ca-cert"), "the message says what to do: {err}");
    assert!(!err.contains("is it running?"), "it is running; its certificate is not trusted: {err}");
    assert!(server.log().is_empty(), "no request got through the failed handshake");
    let records = dir.path().join("out");
    let none = !records.exists()
        || std::fs::read_dir(&records).unwrap().all(|e| {
            let jsonl = e.unwrap().path().join("measurements.jsonl");
            std::fs::read_to_string(jsonl).unwrap_or_default().is_empty()
        });
    assert!(none, "nothing was measured");
}

/// A self-signed server certificate (`openssl req -x509 -subj /CN=localhost -addext
/// subjectAltName=IP:127.0.0.1`: it says it is a CA) given to --ca-cert is that server's, pinned.
#[test]
fn a_self_signed_server_certificate_given_to_ca_cert_is_trusted_as_that_servers() {
    let server = Scripted::start_tls_self_signed(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let pin = dir.path().join("server.pem");
    std::fs::write(&pin, server.ca_pem.as_ref().unwrap()).unwrap();
    let out = sweep(&server.url, &dir.path().join("out"), &["--ca-cert", pin.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    measured_ok(&dir.path().join("out"));
    // Pinned to that server's name: the same certificate presented for another name is refused.
    // (The certificate names 127.0.0.1 only, as the openssl line above.)
    let other = server.url.replace("127.0.0.1", "localhost");
    let out = sweep(&other, &dir.path().join("other"), &["--ca-cert", pin.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("not valid for name \"localhost\""), "{}", stderr(&out));
    // Another server's certificate pins nothing here, and is no CA of this one.
    let (_another, _its_dir, ca_of_another) = https();
    let out = sweep(&server.url, &dir.path().join("another"), &["--ca-cert", &ca_of_another], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("--ca-cert"), "{}", stderr(&out));
}

#[test]
fn ssl_cert_file_is_trusted() {
    let (server, dir, ca) = https();
    let out = sweep(&server.url, &dir.path().join("out"), &[], &[("SSL_CERT_FILE", &ca)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    measured_ok(&dir.path().join("out"));
}

#[test]
fn insecure_measures_but_never_silently() {
    let (server, dir, _) = https();
    let out = sweep(&server.url, &dir.path().join("out"), &["--insecure", "--quiet"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning: --insecure: the server's TLS certificate is not verified"),
        "even with --quiet: {}",
        stderr(&out)
    );
    measured_ok(&dir.path().join("out"));
    let run = run_dir(&dir.path().join("out"));
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(meta["config"]["insecure"], true, "recorded in run.json");
    let verify = common::bench(&["verify", run.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&verify.stdout).contains("measured with --insecure"),
        "verify says so: {}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

#[test]
fn a_bad_ca_cert_file_is_a_usage_error() {
    let (server, dir, _) = https();
    let missing = dir.path().join("nope.pem");
    let out = sweep(&server.url, &dir.path().join("out"), &["--ca-cert", missing.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--ca-cert"), "{}", stderr(&out));
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let out = sweep(&server.url, &dir.path().join("out"), &["--ca-cert", junk.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("holds no PEM certificate"), "{}", stderr(&out));
}

/// The API key travels in the request header over TLS and nowhere else.
#[test]
fn the_api_key_never_reaches_disk_or_stdout_over_https() {
    const KEY: &str = "sk-test-tls-key-5f2a9c41d0e8";
    let (server, dir, ca) = https();
    let out_dir = dir.path().join("out");
    let out = sweep(
        &server.url,
        &out_dir,
        &["--ca-cert", &ca, "--api-key-env", "TTFT_TLS_TEST_KEY"],
        &[("TTFT_TLS_TEST_KEY", KEY)],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    measured_ok(&out_dir);
    let run = run_dir(&out_dir);
    for entry in std::fs::read_dir(&run).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
        assert!(!text.contains(KEY), "the key reached {}", run.display());
    }
    assert!(!String::from_utf8_lossy(&out.stdout).contains(KEY));
    assert!(!stderr(&out).contains(KEY));
    let auth =
        server.log().iter().filter_map(|l| l.headers.get("authorization").cloned()).collect::<Vec<_>>();
    assert!(!auth.is_empty() && auth.iter().all(|a| a == &format!("Bearer {KEY}")), "the key was sent");
}

/// `https://` to a port that speaks plain HTTP: the message says so and what to do (http://),
/// not that a certificate needs --ca-cert.
#[test]
fn https_to_a_plain_http_port_says_the_port_speaks_plain_http() {
    let server = Scripted::start(Behaviour::default());
    let url = server.url.replacen("http://", "https://", 1);
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(&url, &dir.path().join("out"), &[], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("this port speaks plain HTTP") && err.contains("use http://"), "{err}");
    assert!(!err.contains("--ca-cert"), "no certificate is involved: {err}");
}

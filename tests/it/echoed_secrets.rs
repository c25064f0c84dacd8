//! Keys a server says back in a form other than the one bench sent: the base64 of the URL's Basic
//! credentials, `\/`-escaped JSON, repeated in the completion, or across the place where an error
//! quote is cut; and every key bench is given, said back in every shape a gateway or a JSON
//! writer gives it, to every verb that writes. None of them may reach a file bench writes, its
//! stdout or its stderr.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::scripted::{Behaviour, EchoKey, Fault, Scripted};
use common::{measurements, run_dir, stderr};

/// What bench writes in place of a secret.
const MASK: &str = "[redacted]";

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

/// The key of `--api-key-env` (it also rides in `--extra-body`'s metadata): `/`, `=`, `+`, `&`
/// and `'` make its JSON-escaped, Gson-escaped, percent-encoded and HTML-escaped forms differ;
/// longer than the 26 characters of it soak's 40-character quote of the completion holds.
const API_KEY: &str = "sk-Api/0123=ab+cd&e'fgh-ijklmnop";
/// The value of a credential header (`--header`).
const HEADER_KEY: &str = "gw-Tok/4567=<ij>klmn";
/// The value of `--extra-body`'s `api_key`.
const BODY_KEY: &str = "bd-Key/8901=mn&opqr";
/// Values of `--server-cmd`'s flags (`--apikey`, `--auth`, `-k`, `--bearer`, `--credential`) and
/// environment assignments (`MY_APIKEY=`, `SERVICE_AUTH=`), each said back by the server.
const COMMAND_KEYS: [(&str, &str); 7] = [
    ("--apikey", "Fa1-Qz/3141=qq"),
    ("--auth", "Fb2-Wx/5926=rr"),
    ("-k", "Fc3-Ev/5358=ss"),
    ("--bearer", "Fd4-Rt/9793=tt"),
    ("--credential", "Fe5-Yu/2384=uu"),
    ("MY_APIKEY", "Ea6-Io/6264=vv"),
    ("SERVICE_AUTH", "Eb7-Pl/3383=ww"),
];

/// Every form a secret may take in a file or an output: as written, JSON-escaped (with `/` as
/// `\/` too), Gson-escaped (`\u003d`), every punctuation `\u`-escaped (either case of hex),
/// percent-encoded (either case), HTML-escaped, and any 10 characters of it (half a key, cut by
/// a quote or a sample).
fn forms_of(secret: &str) -> Vec<String> {
    let json = serde_json::to_string(secret).unwrap();
    let json = json[1..json.len() - 1].to_string();
    let escape_all = |upper: bool, only: &str| -> String {
        secret
            .chars()
            .map(|c| {
                match (c.is_ascii_alphanumeric() || c == '-') || !(only.is_empty() || only.contains(c)) {
                    true => c.to_string(),
                    false if upper => format!("\\u{:04X}", c as u32),
                    false => format!("\\u{:04x}", c as u32),
                }
            })
            .collect()
    };
    let percent = |upper: bool| -> String {
        secret
            .bytes()
            .map(|b| match b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                true => (b as char).to_string(),
                false if upper => format!("%{b:02X}"),
                false => format!("%{b:02x}"),
            })
            .collect()
    };
    let html = secret
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;");
    let mut forms = vec![
        json.replace('/', "\\/"),
        json,
        escape_all(false, "=<>&'"),
        escape_all(true, "=<>&'"),
        escape_all(false, ""),
        escape_all(true, ""),
        percent(false),
        percent(true),
        html,
    ];
    let chars: Vec<char> = secret.chars().collect();
    forms.extend(chars.windows(10).map(|w| w.iter().collect::<String>()));
    forms
}

/// Every file under `dir` and every output, as text with a name.
fn written(dir: &Path, outputs: &[(String, std::process::Output)]) -> Vec<(String, String)> {
    let mut texts = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).to_string();
                texts.push((path.display().to_string(), text));
            }
        }
    }
    for (what, out) in outputs {
        texts.push((format!("stdout of {what}"), String::from_utf8_lossy(&out.stdout).to_string()));
        texts.push((format!("stderr of {what}"), stderr(out)));
    }
    texts
}

fn bench_with_keys(args: &[&str]) -> std::process::Output {
    let header = format!("X-Gateway-Token: {HEADER_KEY}");
    assert_cmd::Command::cargo_bin("bench")
        .unwrap()
        .args(args)
        .env("TTFT_TEST_SHAPES_KEY", API_KEY)
        .args(["--api-key-env", "TTFT_TEST_SHAPES_KEY", "--header", &header])
        .timeout(HANG)
        .output()
        .unwrap()
}

/// Fails when any key bench was given (by `--api-key-env`, `--header`, `--extra-body`, a
/// `--server-cmd` flag or assignment outside the old name list) reaches any file a sweep, a soak,
/// a load, a merge or an HTML report writes, or their stdout or stderr, in any form a server or a
/// JSON writer gives it: a gateway's `/v1/models` and `/props` answers listing the request's
/// headers and the server's arguments (stored in run.json), the completion saying each key plain,
/// Gson-escaped (`\u003d`) and lowercase percent-encoded (`%2f`) (the output sample, soak's
/// `output_mismatch` reason), the extra body in run.json and request-bodies.jsonl.
#[test]
fn every_key_in_every_shape_a_server_says_it_back_is_redacted_from_everything_bench_writes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let out_s = out.to_str().unwrap();
    let mut outputs = Vec::new();
    // The sweep starts its own server: the command's keys are in its flags and environment, and
    // the server says its arguments back (/props, the completion).
    let flags: Vec<String> = COMMAND_KEYS[..5].iter().map(|(f, k)| format!("{f} {k}")).collect();
    let cmd = format!(
        "MY_APIKEY={} SERVICE_AUTH={} sh -c 'exec {bin} --port {{port}} --first-token-ms 20 --token-ms 1 \
         --fault echo-key:shapes -- \"$@\" \"$MY_APIKEY\" \"$SERVICE_AUTH\"' srv {}",
        COMMAND_KEYS[5].1,
        COMMAND_KEYS[6].1,
        flags.join(" "),
        bin = env!("CARGO_BIN_EXE_bench-scripted-server"),
    );
    let extra_body = serde_json::json!({"api_key": BODY_KEY, "metadata": {"tenant": API_KEY}}).to_string();
    let sweep = bench_with_keys(&[
        "sweep",
        "--server-cmd",
        &cmd,
        "--out",
        out_s,
        "--run-id",
        "sweep",
        "--thermal",
        "off",
        "--quiet",
        "--contexts",
        "256",
        "--output-tokens",
        "24",
        "--runs",
        "1",
        "--modes",
        "streaming",
        "--extra-body",
        &extra_body,
        "--request-bodies",
    ]);
    assert!(matches!(sweep.status.code(), Some(0 | 1)), "sweep: {}", stderr(&sweep));
    outputs.push(("sweep".to_string(), sweep));
    // Soak and load against a server of their own: the completion differs from the serial
    // reference (whole, without the echo), so soak's reason quotes it.
    let server = faulty(Fault::EchoKey(EchoKey::Shapes));
    let soak = bench_with_keys(&[
        "soak",
        "--server",
        &server.url,
        "--out",
        out_s,
        "--run-id",
        "soak",
        "--quiet",
        "--contexts",
        "256",
        "--output-tokens",
        "24",
        "--concurrency",
        "2",
        "--iterations",
        "1",
    ]);
    assert!(matches!(soak.status.code(), Some(0 | 1)), "soak: {}", stderr(&soak));
    outputs.push(("soak".to_string(), soak));
    let load = bench_with_keys(&[
        "load",
        "--server",
        &server.url,
        "--out",
        out_s,
        "--run-id",
        "load",
        "--thermal",
        "off",
        "--quiet",
        "--contexts",
        "256",
        "--output-tokens",
        "24",
        "--mix",
        "cold=1",
        "--rates",
        "4",
        "--duration",
        "1s",
    ]);
    assert!(matches!(load.status.code(), Some(0 | 1)), "load: {}", stderr(&load));
    outputs.push(("load".to_string(), load));
    let run = |name: &str| out.join(name).to_str().unwrap().to_string();
    let merged = dir.path().join("merged.jsonl");
    let html = dir.path().join("report.html");
    for args in [
        vec!["merge".to_string(), run("sweep"), "-o".into(), merged.to_str().unwrap().into()],
        vec![
            "report".into(),
            run("sweep"),
            "--format".into(),
            "html".into(),
            "-o".into(),
            html.to_str().unwrap().into(),
        ],
        vec!["report".into(), run("sweep")],
        vec!["report".into(), run("soak")],
        vec!["report".into(), run("load")],
        vec!["verify".into(), run("sweep")],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        outputs.push((args.join(" "), common::bench(&args)));
    }
    assert!(
        merged.exists() && html.exists(),
        "{:?}",
        outputs.iter().map(|(w, o)| (w, stderr(o))).collect::<Vec<_>>()
    );
    // A resume would send `[redacted]` where the extra body's key was: it is refused, naming the flag.
    let resume = bench_with_keys(&["sweep", "--resume", &run("sweep"), "--server-cmd", &cmd]);
    let (resume_code, resume_err) = (resume.status.code(), stderr(&resume));
    outputs.push(("sweep --resume".to_string(), resume));

    let mut secrets = vec![API_KEY, HEADER_KEY, BODY_KEY];
    secrets.extend(COMMAND_KEYS.iter().map(|(_, k)| *k));
    let mut leaks = Vec::new();
    for (what, text) in written(dir.path(), &outputs) {
        for secret in &secrets {
            if let Some(form) = forms_of(secret).into_iter().find(|form| text.contains(form)) {
                let at = text.find(&form).unwrap_or(0);
                let around: String =
                    text[text.floor_char_boundary(at.saturating_sub(60))..].chars().take(140).collect();
                leaks.push(format!("{secret} as {form:?} in {what}: ...{around}..."));
            }
        }
    }
    assert!(leaks.is_empty(), "{} leaks:\n{}", leaks.len(), leaks.join("\n"));
    // The server did say every key back, in each place: the scan above would have seen a leak.
    let meta = common::run_json(&out.join("sweep"));
    let said = |v: &serde_json::Value| v.to_string().matches(MASK).count();
    assert!(said(&meta["server"]["models"]["gateway"]) >= 2, "{}", meta["server"]["models"]);
    assert!(said(&meta["server"]["props"]["server_args"]) >= 7, "{}", meta["server"]["props"]);
    assert_eq!(meta["config"]["extra_body"]["api_key"], MASK, "{}", meta["config"]);
    let samples = |name: &str| -> Vec<String> {
        measurements(&out.join(name))
            .iter()
            .filter_map(|m| m["output_sample"].as_str().map(str::to_string))
            .collect()
    };
    for name in ["sweep", "soak", "load"] {
        let samples = samples(name);
        assert!(!samples.is_empty(), "{name}");
        for s in &samples {
            assert!(s.starts_with("your keys are [redacted] [redacted] [redacted] "), "{name}: {s}");
        }
    }
    let soak_reasons: Vec<String> = measurements(&out.join("soak"))
        .iter()
        .flat_map(|m| m["quality_flags"].as_array().cloned().unwrap_or_default())
        .filter(|f| f["flag"] == "output_mismatch")
        .map(|f| f["reason"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        !soak_reasons.is_empty() && soak_reasons.iter().all(|r| r.contains("[redacted]")),
        "{soak_reasons:?}"
    );
    let bodies = std::fs::read_to_string(out.join("sweep").join("request-bodies.jsonl")).unwrap();
    assert!(bodies.lines().count() > 0 && bodies.lines().all(|l| l.contains("\"withheld\"")), "{bodies}");

    assert_eq!(resume_code, Some(2), "{resume_err}");
    assert!(resume_err.contains("--extra-body"), "{resume_err}");
}

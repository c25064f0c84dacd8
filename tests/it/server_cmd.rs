//! `--server-cmd` through the binary: the command's secrets never reach a file or an output, and
//! the server (with everything it forked) never outlives bench, however bench ends.

#![cfg(target_os = "linux")]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::stderr;
use serde_json::Value;

/// Guards against a hang only; nothing here is timed.
const HANG: Duration = Duration::from_secs(120);

const FLAG_KEY: &str = "sk-cmdflag-0123456789";
const TOKEN: &str = "hf_cmdtoken_abcdef123";
const ENV_PASSWORD: &str = "envpass-0987654321";

fn scripted_bin() -> &'static str {
    env!("CARGO_BIN_EXE_bench-scripted-server")
}

fn spawn_bench(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(args)
        .env("TTFT_TEST_CMD_KEY", FLAG_KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(child: Child) -> Output {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    rx.recv_timeout(HANG).expect("bench did not end").unwrap()
}

fn bench(args: &[&str]) -> Output {
    finish(spawn_bench(args))
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < HANG, "{what} did not happen");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `pid` is a live process (a zombie waiting for its reaper is not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| !rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// Every pid in `pidfile` is gone within a few seconds (the kill -9 guard acts asynchronously;
/// 30 s bounds a hang, with room for a loaded machine to schedule the watcher).
fn assert_gone(pidfile: &Path, when: &str) {
    let pids: Vec<u32> =
        std::fs::read_to_string(pidfile).unwrap().split_whitespace().map(|p| p.parse().unwrap()).collect();
    assert!(!pids.is_empty());
    let start = Instant::now();
    while pids.iter().any(|&p| alive(p)) {
        if start.elapsed() > Duration::from_secs(30) {
            let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
            for &p in &left {
                // SAFETY: kill(2) of a process this test's command started; cleanup only.
                unsafe { libc::kill(p as libc::pid_t, libc::SIGKILL) };
            }
            panic!("{when}: processes of the server command are still running: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every file under `dir`, as text.
fn files_under(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).to_string();
                out.push((path, text));
            }
        }
    }
    out
}

fn sweep_flags<'a>(out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["sweep", "--out", out.to_str().unwrap(), "--run-id", "run", "--thermal", "off"];
    all.extend(["--contexts", "256", "--output-tokens", "24", "--max-restarts", "0"]);
    all.extend_from_slice(extra);
    all
}

/// Fails when the keys of a `--server-cmd` (a flag, a `--flag=value`, an environment assignment,
/// the same key given with --api-key-env) reach run.json, the records, the HTML report, the
/// merged file, stdout or stderr, or when the crashed server's stderr tail carries them.
#[test]
fn the_keys_of_a_server_command_never_reach_a_file_or_an_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let first_record = out.join("run").join("measurements.jsonl");
    // Like llama-server, it prints its arguments at start; it dies (kill -9 of the server, the
    // wrapper exits 1) once the first record is written, so the crash and its stderr tail land in
    // run.json.
    let cmd = format!(
        "env DB_PASSWORD={ENV_PASSWORD} sh -c 'echo \"server args: $* pw $DB_PASSWORD\" >&2; \
         {bin} --port {{port}} --first-token-ms 200 --token-ms 1 & p=$!; \
         until [ -s {rec} ]; do sleep 0.05; done; kill -9 $p; echo \"dying with $2\" >&2; exit 1' \
         srv --api-key {FLAG_KEY} --hf-token={TOKEN}",
        bin = scripted_bin(),
        rec = first_record.display(),
    );
    let mut outputs = Vec::new();
    let sweep = bench(&sweep_flags(
        &out,
        &["--server-cmd", &cmd, "--runs", "5", "--api-key-env", "TTFT_TEST_CMD_KEY"],
    ));
    assert_eq!(sweep.status.code(), Some(3), "{}", stderr(&sweep));
    let run = out.join("run");
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    let tail = meta["server_crashes"][0]["stderr_tail"].to_string();
    assert!(tail.contains("server args: --api-key [redacted] --hf-token=[redacted] pw [redacted]"), "{meta}");
    assert!(tail.contains("dying with [redacted]"), "{meta}");
    let written = meta["config"]["server_cmd"].as_str().unwrap();
    assert!(written.contains("env DB_PASSWORD=[redacted] sh -c") && written.contains("--api-key [redacted]"));
    outputs.push(sweep);
    let run_s = run.to_str().unwrap();
    let html = dir.path().join("report.html");
    let merged = dir.path().join("merged.jsonl");
    for args in [
        vec!["report", run_s, "--format", "html", "-o", html.to_str().unwrap()],
        vec!["report", run_s, "--format", "markdown"],
        vec!["merge", run_s, "-o", merged.to_str().unwrap()],
        vec!["verify", run_s],
    ] {
        outputs.push(bench(&args));
    }
    // A resume must be given the command again: what is written has its keys masked.
    let resume = bench(&["sweep", "--resume", run_s]);
    assert_eq!(resume.status.code(), Some(2), "{}", stderr(&resume));
    assert!(stderr(&resume).contains("pass --server-cmd again"), "{}", stderr(&resume));
    outputs.push(resume);
    // A server command that exits at start: its words are quoted on stderr.
    let dies = format!("sh -c 'echo \"bad key $2\" >&2; exit 7' srv --token {TOKEN} # {{port}}");
    let early = bench(&sweep_flags(&dir.path().join("early"), &["--server-cmd", &dies]));
    assert_eq!(early.status.code(), Some(3), "{}", stderr(&early));
    assert!(stderr(&early).contains("bad key [redacted]"), "{}", stderr(&early));
    outputs.push(early);
    let mut texts: Vec<(String, String)> =
        files_under(dir.path()).into_iter().map(|(p, t)| (p.display().to_string(), t)).collect();
    assert!(texts.iter().any(|(p, _)| p.ends_with("report.html")) && merged.exists());
    for (i, o) in outputs.iter().enumerate() {
        texts.push((format!("stdout of call {i}"), String::from_utf8_lossy(&o.stdout).to_string()));
        texts.push((format!("stderr of call {i}"), stderr(o)));
    }
    for (what, text) in &texts {
        for secret in [FLAG_KEY, TOKEN, ENV_PASSWORD] {
            assert!(!text.contains(secret), "{secret} leaked into {what}: {text}");
        }
    }
}

/// A wrapper that forks the scripted server and waits for it, writing both pids to `pidfile`.
fn forking_cmd(pidfile: &Path) -> String {
    format!(
        "sh -c '{bin} --port {{port}} --first-token-ms 100 --token-ms 1 & echo $! $$ > {pids}; wait'",
        bin = scripted_bin(),
        pids = pidfile.display()
    )
}

/// Fails when a forking server command is left running after a clean run (bench killed only the
/// wrapper, its child held the port).
#[test]
fn a_forking_server_command_ends_with_a_clean_run() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pids");
    let cmd = forking_cmd(&pidfile);
    let out = bench(&sweep_flags(&dir.path().join("out"), &["--server-cmd", &cmd, "--runs", "1"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_gone(&pidfile, "after a clean run");
}

/// Fails when SIGTERM or kill -9 of bench leaves the server command (or what it forked) running.
#[test]
fn a_server_command_dies_with_bench_on_sigterm_and_kill_9() {
    for (signal, code) in [(libc::SIGTERM, Some(130)), (libc::SIGKILL, None)] {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pids");
        let cmd = forking_cmd(&pidfile);
        let out = dir.path().join("out");
        let records = out.join("run").join("measurements.jsonl");
        let child = spawn_bench(&sweep_flags(&out, &["--server-cmd", &cmd, "--runs", "20"]));
        wait_for("a first record", || std::fs::metadata(&records).is_ok_and(|m| m.len() > 0));
        // SAFETY: kill(2) of the bench this test started.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
        let output = finish(child);
        assert_eq!(output.status.code(), code, "signal {signal}: {}", stderr(&output));
        assert_gone(&pidfile, &format!("after signal {signal} to bench"));
    }
}

/// Fails when a server command that never answers is waited on for a fixed 300 s, or the wait
/// ends without saying what was awaited and what the server said, or leaves it running.
#[test]
fn a_server_that_never_answers_is_given_up_after_the_start_timeout_and_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pids");
    let cmd = format!(
        "sh -c 'echo loading weights from disk >&2; sleep 600 & echo $! $$ > {}; wait' srv {{port}}",
        pidfile.display()
    );
    let out = bench(&sweep_flags(
        &dir.path().join("out"),
        &["--server-cmd", &cmd, "--runs", "1", "--server-start-timeout", "1s"],
    ));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("did not answer http://127.0.0.1:")
            && err.contains("/health (or /v1/models) within 1s (--server-start-timeout)")
            && err.contains("loading weights from disk"),
        "{err}"
    );
    assert!(err.contains("waiting for http://127.0.0.1:"), "what is awaited is said: {err}");
    assert_gone(&pidfile, "after the start timeout");
}

/// Server commands whose server leaves bench's process group with `setsid`, each writing the
/// server's pid to `pidfile`: a wrapper that waits for its setsid'd child, and a command that
/// starts its server in a session of its own and returns at once (as a daemon does).
fn setsid_cmds(pidfile: &Path) -> [String; 2] {
    let (bin, pids) = (scripted_bin(), pidfile.display());
    [
        format!(
            "sh -c 'setsid {bin} --port {{port}} --first-token-ms 100 --token-ms 1 & echo $! > {pids}; wait'"
        ),
        format!(
            "setsid sh -c 'echo $$ > {pids}; exec {bin} --port {{port}} --first-token-ms 100 --token-ms 1' &"
        ),
    ]
}

/// Fails when a server that left bench's process group with `setsid` is left running after a
/// clean run, SIGTERM or kill -9 of bench (it was, 3 of 3: the group's kill missed it), or when a
/// command that starts its server that way and returns is taken for a server that exited.
#[test]
fn a_server_command_that_calls_setsid_ends_with_bench_however_bench_ends() {
    for form in 0..2 {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pids");
        let cmd = &setsid_cmds(&pidfile)[form];
        let out = bench(&sweep_flags(&dir.path().join("out"), &["--server-cmd", cmd, "--runs", "1"]));
        assert_eq!(out.status.code(), Some(0), "{cmd}: {}", stderr(&out));
        assert_gone(&pidfile, &format!("{cmd}: after a clean run"));
        for (signal, code) in [(libc::SIGTERM, Some(130)), (libc::SIGKILL, None)] {
            let dir = tempfile::tempdir().unwrap();
            let pidfile = dir.path().join("pids");
            let cmd = &setsid_cmds(&pidfile)[form];
            let out = dir.path().join("out");
            let records = out.join("run").join("measurements.jsonl");
            let child = spawn_bench(&sweep_flags(&out, &["--server-cmd", cmd, "--runs", "20"]));
            wait_for("a first record", || std::fs::metadata(&records).is_ok_and(|m| m.len() > 0));
            // SAFETY: kill(2) of the bench this test started.
            assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
            let output = finish(child);
            assert_eq!(output.status.code(), code, "{cmd}: signal {signal}: {}", stderr(&output));
            assert_gone(&pidfile, &format!("{cmd}: after signal {signal} to bench"));
        }
    }
}

/// A bench sweep whose server command writes each port it is given to `dir/ports` and waits for
/// the test to create `dir/ports.PORT` before starting the server: the test acts on each port
/// before the server binds it.
struct PortGate {
    ports: PathBuf,
    out: PathBuf,
    bench: Child,
}

impl PortGate {
    fn start(dir: &Path) -> PortGate {
        let (ports, out) = (dir.join("ports"), dir.join("out"));
        let cmd = format!(
            "sh -c 'echo {{port}} >> {ports}; while [ ! -e {ports}.{{port}} ]; do sleep 0.02; done; \
             exec {bin} --port {{port}} --token-ms 1'",
            ports = ports.display(),
            bin = scripted_bin()
        );
        let bench = spawn_bench(&sweep_flags(&out, &["--server-cmd", &cmd, "--runs", "1"]));
        PortGate { ports, out, bench }
    }

    fn given(&self) -> Vec<u16> {
        let text = std::fs::read_to_string(&self.ports).unwrap_or_default();
        text.lines().map(|p| p.parse().unwrap()).collect()
    }

    /// The `nth` (0-based) port the command was given, once it is.
    fn port(&mut self, nth: usize) -> u16 {
        wait_for("a port or bench's exit", || {
            self.given().len() > nth || self.bench.try_wait().unwrap().is_some()
        });
        match self.given().get(nth) {
            Some(&port) => port,
            None => {
                let mut err = String::new();
                if let Some(mut pipe) = self.bench.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut pipe, &mut err);
                }
                panic!("bench gave up before port #{nth}: {err}")
            }
        }
    }

    /// What lets the command's server start on `port`.
    fn go_file(&self, port: u16) -> PathBuf {
        PathBuf::from(format!("{}.{port}", self.ports.display()))
    }

    /// Lets the server start on `port` and waits for bench: its exit code, stderr and run.json.
    fn finish(self, port: u16) -> (Option<i32>, String, Value) {
        std::fs::write(self.go_file(port), "").unwrap();
        let output = finish(self.bench);
        let meta = std::fs::read_to_string(self.out.join("run").join("run.json")).unwrap_or_default();
        (output.status.code(), stderr(&output), serde_json::from_str(&meta).unwrap_or_default())
    }
}

/// Fails when a port that another process takes between bench's pick and the server's bind
/// (another shard's server on the same node, picking at the same moment) ends the run: the
/// server exits with "Address already in use", and bench must start it again on another port.
/// The squatter here is this test, which binds the first port the command is given before
/// letting the server start; run.json must name the second port, and the records come from it.
#[test]
fn a_port_taken_before_the_server_binds_it_is_given_up_for_another() {
    let dir = tempfile::tempdir().unwrap();
    let mut gate = PortGate::start(dir.path());
    let squatted = gate.port(0);
    let _squatter = std::net::TcpListener::bind(("127.0.0.1", squatted)).unwrap();
    std::fs::write(gate.go_file(squatted), "").unwrap();
    let second = gate.port(1);
    let out = gate.out.clone();
    let (code, err, meta) = gate.finish(second);
    assert_eq!(code, Some(0), "{err}");
    assert_ne!(second, squatted);
    assert!(err.contains(&format!("port {squatted} was taken by another process")), "{err}");
    assert_eq!(meta["server"]["base_url"], format!("http://127.0.0.1:{second}"), "{meta}");
    let records = std::fs::read_to_string(out.join("run").join("measurements.jsonl")).unwrap();
    assert!(records.lines().count() > 0 && !records.contains("\"error\":\""), "{records}");
}

/// Fails when a server command whose port another server already answers on is taken for
/// started: the other server answers /health at once, before the command's own server has failed
/// to listen and exited, and bench would measure a server that is not the one it started. Here
/// the other server is this test, answering /health on the first port the command is given as
/// it lets the command's server start (which then fails on the taken port, moments later).
#[test]
fn another_server_answering_on_the_port_is_never_taken_for_the_command_s() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let mut gate = PortGate::start(dir.path());
    let other = gate.port(0);
    let listener = std::net::TcpListener::bind(("127.0.0.1", other)).unwrap();
    let go = gate.go_file(other);
    // The other server: 200 to every request, as it lets the command's server start.
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let _ = std::fs::write(&go, "");
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    let second = gate.port(1);
    let (code, err, meta) = gate.finish(second);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(meta["server"]["base_url"], format!("http://127.0.0.1:{second}"), "{meta}");
    assert!(meta["server_crashes"].as_array().is_none_or(|c| c.is_empty()), "{meta}");
}

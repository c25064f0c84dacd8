//! Bad input is refused up front, by every verb, with exit 2 and the flag, file or key named:
//! non-finite numbers, paths that are not files, server addresses that cannot be used, contexts
//! too small for any prompt, presets with placeholders nobody fills, a soak that may not run.
//! And the exit codes that say something else are the README's: a disk that cannot take the run's
//! first write is 4 (nothing left behind), a held run names its holder's pid.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::scripted::{Behaviour, Scripted};
use common::{bench, stderr};
use serde_json::Value;

/// A port nothing listens on: whatever reaches the server side fails with exit 3, so a test that
/// expects exit 2 proves the input was refused before any connection.
const NOBODY: &str = "http://127.0.0.1:9";

fn code(out: &std::process::Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn verify_fixture() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/verify/clean_m4_pro.jsonl")
        .display()
        .to_string()
}

/// Every float flag of every verb, NaN and infinity alike: exit 2, naming the flag. Sweep and plan
/// once dropped them (a NaN serializes to null, which read as "not given") and ran with defaults.
#[test]
fn nan_and_inf_in_float_flags_are_refused_by_every_verb_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = out_dir.to_str().unwrap();
    let input = verify_fixture();
    for value in ["nan", "NaN", "inf", "-inf", "infinity"] {
        let cases: Vec<(&str, Vec<&str>)> = vec![
            ("--tolerance", vec!["sweep", "--server", NOBODY, "--out", out]),
            ("--bandwidth-gbps", vec!["sweep", "--server", NOBODY, "--out", out]),
            ("--tflops", vec!["sweep", "--server", NOBODY, "--out", out]),
            ("--tolerance", vec!["plan"]),
            ("--bandwidth-gbps", vec!["plan"]),
            ("--tflops", vec!["plan"]),
            ("--bandwidth-gbps", vec!["verify", &input]),
            ("--tflops", vec!["verify", &input]),
            ("--min-warm-speedup", vec!["verify", &input]),
            ("--storage-gbps", vec!["verify", &input]),
            ("--fail-on-regression", vec!["compare", &input, &input]),
            ("--slo-target", vec!["load", "--server", NOBODY, "--out", out]),
        ];
        for (flag, mut args) in cases {
            // `--flag=-inf`: a separate `-inf` would read as a flag of its own.
            let given = format!("{flag}={value}");
            args.push(&given);
            let run = bench(&args);
            assert_eq!(code(&run), 2, "{args:?}: {}", stderr(&run));
            assert!(stderr(&run).contains(flag), "{args:?}: {}", stderr(&run));
        }
    }
    assert!(!out_dir.exists(), "nothing is created for bad input");
}

/// The same keys in a scenario file (TOML writes `nan` and `inf` as numbers): exit 2, naming the
/// file and the key, for sweep, plan and merge --expect.
#[test]
fn nan_and_inf_in_scenario_keys_are_refused_naming_the_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    for (key, value) in
        [("tolerance", "nan"), ("bandwidth_gbps", "inf"), ("tflops", "-inf"), ("tolerance", "\"nan\"")]
    {
        let scenario = dir.path().join(format!("{key}.toml"));
        std::fs::write(&scenario, format!("contexts = \"1k\"\n{key} = {value}\n")).unwrap();
        let scenario = scenario.to_str().unwrap();
        let out = dir.path().join("out");
        for args in [
            vec!["plan", "--scenario", scenario],
            vec!["sweep", "--scenario", scenario, "--server", NOBODY, "--out", out.to_str().unwrap()],
        ] {
            let run = bench(&args);
            assert_eq!(code(&run), 2, "{args:?}: {}", stderr(&run));
            let err = stderr(&run);
            assert!(err.contains(scenario) && err.contains(key), "{args:?}: {err}");
        }
        assert!(!out.exists());
    }
}

fn bench_with_timeout(args: &[&str]) -> std::process::Output {
    assert_cmd::Command::cargo_bin("bench")
        .unwrap()
        .args(args)
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap()
}

/// A named pipe given as an input once hung verify, merge and report (opening it waits for a
/// writer): a settings file that is not a regular file, or a result input that is neither a file,
/// a pipe nor a directory, is exit 2 naming it, and a named pipe nobody writes to is an empty input.
#[cfg(unix)]
#[test]
fn a_fifo_given_as_an_input_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("results.jsonl");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let fifo = fifo.to_str().unwrap();
    let merged = dir.path().join("merged.json");
    // Settings files are refused by kind; a result file may come through a pipe, and a named one
    // that nothing writes to reads as empty at once (`pipes_with_a_writer_are_read_...`).
    for (args, why) in [
        (vec!["verify", fifo], "empty: a pipe that nothing was written to"),
        (vec!["report", fifo], "empty: a pipe that nothing was written to"),
        (vec!["merge", fifo, "-o", merged.to_str().unwrap()], "empty: a pipe that nothing was written to"),
        (vec!["compare", fifo, fifo], "empty: a pipe that nothing was written to"),
        (vec!["plan", "--from", fifo], "empty: a pipe that nothing was written to"),
        (vec!["plan", "--scenario", fifo], "not a regular file"),
        (
            vec!["merge", &verify_fixture(), "-o", merged.to_str().unwrap(), "--expect", fifo],
            "not a regular file",
        ),
    ] {
        let run = bench_with_timeout(&args);
        assert_eq!(code(&run), 2, "{args:?}: {}", stderr(&run));
        let err = stderr(&run);
        assert!(err.contains(fifo) && err.contains(why), "{args:?}: {err}");
    }
    // A device is no result file either.
    let run = bench_with_timeout(&["verify", "/dev/zero"]);
    assert_eq!(code(&run), 2, "{}", stderr(&run));
    assert!(stderr(&run).contains("/dev/zero:0: not a regular file"), "{}", stderr(&run));
    assert!(!merged.exists());
}

/// Fails when a file flag reads a device without end or waits on a FIFO: `--ca-cert /dev/zero` once
/// read until the OOM killer ended bench at 23 GiB, and a FIFO to `--ca-cert` or `--model-file`
/// hung. Each is exit 2 naming the flag, the file and why, within the guard's 30 s (in
/// milliseconds when right), before anything is created or contacted; so is a CA bundle larger
/// than any (a sparse 5 MiB file: nothing of it is read).
#[cfg(unix)]
#[test]
fn a_device_or_a_fifo_given_to_a_file_flag_is_refused_naming_the_flag_not_read_or_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("bundle.pem");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let fifo = fifo.to_str().unwrap();
    let huge = dir.path().join("huge.pem");
    std::fs::File::create(&huge).unwrap().set_len(5 << 20).unwrap();
    let huge = huge.to_str().unwrap();
    let out = dir.path().join("out");
    let out_s = out.to_str().unwrap();
    let input = verify_fixture();
    let mut cases: Vec<(Vec<&str>, &str, &str, &str)> = Vec::new();
    for (file, why) in [
        ("/dev/zero", "not a regular file (it is a device)"),
        (fifo, "not a regular file (it is a named pipe"),
    ] {
        for verb in ["sweep", "load", "soak"] {
            cases.push((
                vec![verb, "--server", NOBODY, "--out", out_s, "--ca-cert", file],
                "--ca-cert",
                file,
                why,
            ));
        }
        cases.push((
            vec!["sweep", "--server", NOBODY, "--out", out_s, "--model-file", file],
            "--model-file",
            file,
            why,
        ));
        // verify reads the model file itself (no server, no config).
        cases.push((vec!["verify", &input, "--model-file", file], "--model-file", file, why));
    }
    cases.push((
        vec!["sweep", "--server", NOBODY, "--out", out_s, "--ca-cert", huge],
        "--ca-cert",
        huge,
        "too large for a CA bundle: 5242880 bytes, at most 4 MiB",
    ));
    for (args, flag, file, why) in cases {
        let run = bench_with_timeout(&args);
        let err = stderr(&run);
        assert_eq!(code(&run), 2, "{args:?}: {err}");
        assert!(err.contains(flag) && err.contains(file) && err.contains(why), "{args:?}: {err}");
    }
    assert!(!out.exists(), "nothing is created for bad input");
}

/// Fails when a result file given through a pipe is refused or read otherwise than the file itself:
/// `bench verify <(cat RUN/measurements.jsonl)` (an anonymous pipe with its writer, `/dev/fd/63`)
/// verifies as the file does, findings and exit code alike, for a run bench just wrote and for
/// records with findings; and a named FIFO with a writer is read, one without is refused at once.
#[cfg(unix)]
#[test]
fn pipes_with_a_writer_are_read_as_the_file_itself_and_a_fifo_without_one_never_waited_on() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let sweep = bench(&[
        "sweep",
        "--server",
        &server.url,
        "--out",
        out.to_str().unwrap(),
        "--quiet",
        "--thermal",
        "off",
        "--contexts",
        "256",
        "--runs",
        "2",
        "--output-tokens",
        "16",
        "--cache-states",
        "cold,hot",
    ]);
    assert!(sweep.status.success(), "{}", stderr(&sweep));
    let written = common::run_dir(&out).join("measurements.jsonl");
    let with_findings = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/verify/decode_77_7.jsonl");
    for file in [written.as_path(), with_findings.as_path()] {
        let file = file.to_str().unwrap();
        let direct = bench_with_timeout(&["verify", file]);
        let piped = assert_cmd::Command::new("bash")
            .arg("-c")
            .arg("exec \"$0\" verify <(cat \"$1\")")
            .arg(assert_cmd::cargo::cargo_bin("bench"))
            .arg(file)
            .timeout(Duration::from_secs(30))
            .output()
            .unwrap();
        assert_eq!(code(&piped), code(&direct), "{file}: {}", stderr(&piped));
        assert!(matches!(code(&direct), 0 | 1), "{file}: {}", stderr(&direct));
        let as_file =
            |o: &std::process::Output, name: &str| String::from_utf8_lossy(&o.stdout).replace(name, "INPUT");
        // What bench calls the pipe: the path bash gave it (`/dev/fd/63`).
        let said = format!("{}{}", String::from_utf8_lossy(&piped.stdout), stderr(&piped));
        let at = said.find("/dev/fd/").unwrap_or_else(|| panic!("the pipe is not named: {said}"));
        let piped_name: String = said[at..].chars().take_while(|c| !c.is_whitespace() && *c != ':').collect();
        assert_eq!(as_file(&piped, &piped_name), as_file(&direct, file), "{file}");
        assert!(
            String::from_utf8_lossy(&direct.stdout).contains("record(s)"),
            "{}",
            String::from_utf8_lossy(&direct.stdout)
        );
    }
    // A named FIFO with a writer is read like the file.
    let fifo = dir.path().join("records.jsonl");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let writer = {
        let (fifo, written) = (fifo.clone(), written.clone());
        std::thread::spawn(move || std::fs::write(&fifo, std::fs::read(&written).unwrap()))
    };
    // The writer holds the FIFO open first (its open waits for a reader: bench), so bench's read
    // sees it; a reader opening first would see no writer and an empty input, by design.
    std::thread::sleep(Duration::from_millis(200));
    let run = bench_with_timeout(&["verify", fifo.to_str().unwrap()]);
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    writer.join().unwrap().unwrap();
}

/// `bench plan` with a scenario file that is missing or broken is bad input (2), like every other
/// verb, not "a bug" (5).
#[test]
fn plan_with_a_missing_or_broken_scenario_is_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "contxts = \"1k\"\n").unwrap();
    let missing = dir.path().join("misspelled.toml");
    for path in [&broken, &missing] {
        let path = path.to_str().unwrap();
        for args in
            [vec!["plan", "--scenario", path], vec!["plan", "--scenario", path, "--from", &verify_fixture()]]
        {
            let run = bench(&args);
            assert_eq!(code(&run), 2, "{args:?}: {}", stderr(&run));
            assert!(stderr(&run).contains(path), "{}", stderr(&run));
        }
    }
}

/// A port that cannot exist is a typo (2), not a server that is down (3); so is a URL without a
/// host.
#[test]
fn a_server_url_that_cannot_exist_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    for server in [
        "http://127.0.0.1:99999",
        "http://127.0.0.1:65536",
        "http://:8080",
        "http://user:pw@host:123456",
        "http://127.0.0.1:0",
    ] {
        for verb in ["sweep", "soak", "load"] {
            let run = bench(&[verb, "--server", server, "--out", out.to_str().unwrap()]);
            assert_eq!(code(&run), 2, "{verb} {server}: {}", stderr(&run));
            assert!(stderr(&run).contains("--server"), "{}", stderr(&run));
            assert!(!stderr(&run).contains(":pw@"), "a password is never shown: {}", stderr(&run));
        }
    }
    assert!(!out.exists());
}

/// A context below any usable prompt would fail every cell's sizing: refused up front naming the
/// flag (or the scenario key).
#[test]
fn a_context_too_small_for_any_prompt_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    for (flag, args) in [
        ("--contexts", vec!["plan", "--contexts", "10"]),
        ("--contexts", vec!["plan", "--contexts", "10,1k"]),
        ("--contexts", vec!["sweep", "--server", NOBODY, "--out", o, "--contexts", "1k,63"]),
        ("--contexts", vec!["soak", "--server", NOBODY, "--out", o, "--contexts", "10"]),
        ("--contexts", vec!["load", "--server", NOBODY, "--out", o, "--contexts", "10"]),
        ("--stagger-context", vec!["plan", "--staggered", "--stagger-context", "32"]),
    ] {
        let run = bench(&args);
        assert_eq!(code(&run), 2, "{args:?}: {}", stderr(&run));
        assert!(stderr(&run).contains(flag) && stderr(&run).contains("too small"), "{}", stderr(&run));
    }
    let scenario = dir.path().join("tiny.toml");
    std::fs::write(&scenario, "contexts = 10\n").unwrap();
    let run = bench(&["plan", "--scenario", scenario.to_str().unwrap()]);
    assert_eq!(code(&run), 2, "{}", stderr(&run));
    assert!(stderr(&run).contains("tiny.toml: contexts"), "{}", stderr(&run));
    assert!(!out.exists());
    // The smallest allowed is accepted.
    let run = bench(&["plan", "--contexts", "64"]);
    assert_eq!(code(&run), 0, "{}", stderr(&run));
}

/// A placeholder the preset language does not have would fail every cell's action: refused when
/// the file is read, naming the file, where it is and the placeholder; nothing is created.
#[test]
fn an_unknown_placeholder_in_a_preset_file_is_refused_naming_file_and_placeholder() {
    let dir = tempfile::tempdir().unwrap();
    let preset = dir.path().join("mine.toml");
    std::fs::write(
        &preset,
        "name = \"mine\"\n[[reset]]\nmethod = \"POST\"\npath = \"/slots/{slot}?action=erase\"\n\
         [[cleanup]]\nmethod = \"DELETE\"\npath = \"/sessions/{sesion}\"\n",
    )
    .unwrap();
    let unclosed = dir.path().join("unclosed.toml");
    std::fs::write(&unclosed, "name = \"u\"\n[request.body]\nid_slot = \"{slot\"\n").unwrap();
    let out = dir.path().join("out");
    let (p, u) = (preset.to_str().unwrap(), unclosed.to_str().unwrap());
    for verb in ["sweep", "soak", "load"] {
        let run = bench(&[verb, "--server", NOBODY, "--out", out.to_str().unwrap(), "--preset", p]);
        assert_eq!(code(&run), 2, "{verb}: {}", stderr(&run));
        let err = stderr(&run);
        assert!(
            err.contains(p) && err.contains("{sesion}") && err.contains("cleanup[0].path"),
            "{verb}: {err}"
        );
        let run = bench(&[verb, "--server", NOBODY, "--out", out.to_str().unwrap(), "--preset", u]);
        assert_eq!(code(&run), 2, "{verb}: {}", stderr(&run));
        assert!(stderr(&run).contains(u) && stderr(&run).contains("unclosed"), "{}", stderr(&run));
    }
    assert!(!out.exists(), "nothing is created for a preset that cannot be used");
}

/// `--server http://host:port/v1` is the base URL every OpenAI SDK user has: it is accepted, the
/// `/v1` dropped with a note on stderr, and the sweep measures.
#[test]
fn a_server_url_ending_in_v1_is_accepted_with_a_note() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}/v1/", server.url);
    let run = bench(&[
        "sweep",
        "--server",
        &url,
        "--out",
        dir.path().to_str().unwrap(),
        "--contexts",
        "256",
        "--runs",
        "1",
        "--output-tokens",
        "8",
        "--thermal",
        "off",
        "--quiet",
    ]);
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    let err = stderr(&run);
    assert!(err.contains("note:") && err.contains("/v1 is dropped") && err.contains(&server.url), "{err}");
    assert!(server.log().iter().all(|l| !l.path.contains("/v1/v1/")), "no request doubles /v1");
    let run_json: Value =
        serde_json::from_str(&std::fs::read_to_string(common::run_dir(dir.path()).join("run.json")).unwrap())
            .unwrap();
    assert_eq!(run_json["config"]["server"], server.url.as_str());
}

/// `bench soak --duration 0s` could not start an iteration and printed "PASS 0/0" with exit 1:
/// refused up front (2), nothing created.
#[test]
fn a_soak_of_zero_duration_is_refused_up_front() {
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    for duration in ["0s", "0", "0ms"] {
        let run =
            bench(&["soak", "--server", &server.url, "--out", out.to_str().unwrap(), "--duration", duration]);
        assert_eq!(code(&run), 2, "{duration}: {}", stderr(&run));
        assert!(stderr(&run).contains("--duration"), "{}", stderr(&run));
        assert!(!stderr(&run).contains("PASS") && run.stdout.is_empty());
    }
    assert!(!out.exists());
}

/// A soak's efficiency is a fraction: N concurrent streams give at most N times one lone stream.
/// The server caches prompts (prefill 300 ms, 2 ms a token): the serial pass's first requests
/// compute theirs and the iterations find them cached, so a lone stream timed on those first
/// requests read several hundred percent.
#[test]
fn soak_efficiency_is_a_fraction_of_n_lone_streams() {
    let server = Scripted::start(Behaviour { first_token_ms: 300, token_ms: 2, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let run = bench(&[
        "soak",
        "--server",
        &server.url,
        "--out",
        dir.path().to_str().unwrap(),
        "--quiet",
        "--contexts",
        "256",
        "--output-tokens",
        "24",
        "--concurrency",
        "2",
        "--iterations",
        "3",
    ]);
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    let run_json: Value =
        serde_json::from_str(&std::fs::read_to_string(common::run_dir(dir.path()).join("run.json")).unwrap())
            .unwrap();
    let s = &run_json["soak"];
    let f = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("{k}: {s}"));
    let efficiency = f("efficiency");
    assert!(efficiency > 0.0 && efficiency <= 1.0, "efficiency {efficiency}: {s}");
    // What the table shows is what run.json holds: speedup = output_tps / single_stream_tps, and
    // efficiency = speedup / N.
    assert!((f("speedup") - f("output_tps") / f("single_stream_tps")).abs() < 1e-9, "{s}");
    assert!((efficiency - f("speedup") / 2.0).abs() < 1e-9, "{s}");
    let table = stderr(&run);
    assert!(table.contains(&format!("{:.1}%", efficiency * 100.0)), "{table}");
}

/// The run directory's first writes failing (a full disk: here, a file size limit of 0 makes
/// every write fail with EFBIG) is exit 4, and the run directory bench created is removed.
#[cfg(unix)]
#[test]
fn a_run_that_cannot_write_its_first_files_is_exit_4_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let bench_bin: PathBuf = assert_cmd::cargo::cargo_bin("bench");
    let run = std::process::Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 0; exec \"$@\"")
        .arg("sh")
        .arg(&bench_bin)
        .args(["sweep", "--server", NOBODY, "--out", out.to_str().unwrap(), "--run-id", "full"])
        .output()
        .unwrap();
    assert_eq!(code(&run), 4, "{}", stderr(&run));
    assert!(stderr(&run).contains("full"), "the message names what could not be written: {}", stderr(&run));
    let left: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
    assert!(left.is_empty(), "nothing left behind: {left:?}");
}

/// A process refused because the run is held names the holder's pid, also when it looks while the
/// holder is still writing it (the lock is taken, bench.lock emptied, the pid written a moment
/// later): it once said "pid unknown" while bench.lock held the pid.
#[test]
fn a_held_run_names_the_holders_pid_even_while_it_is_being_written() {
    use std::io::Write;
    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let first = bench(&[
        "sweep",
        "--server",
        &server.url,
        "--out",
        dir.path().to_str().unwrap(),
        "--run-id",
        "held",
        "--contexts",
        "256",
        "--runs",
        "1",
        "--output-tokens",
        "8",
        "--thermal",
        "off",
        "--quiet",
    ]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let run = dir.path().join("held");
    // Held the way a starting bench holds it: locked, emptied, the pid not yet written.
    let mut lock = std::fs::OpenOptions::new().read(true).write(true).open(run.join("bench.lock")).unwrap();
    lock.try_lock().unwrap();
    lock.set_len(0).unwrap();
    let holder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1000));
        lock.write_all(format!("{}\n", std::process::id()).as_bytes()).unwrap();
        lock
    });
    let refused = bench(&["sweep", "--resume", run.to_str().unwrap(), "--server", &server.url]);
    let lock = holder.join().unwrap();
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(err.contains(&format!("in use by another bench process (pid {})", std::process::id())), "{err}");
    drop(lock);
}

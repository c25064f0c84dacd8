//! What merge does with inputs that hold no records, with a stdout closed early, with an output
//! that would replace what it reads, and when its output cannot be written or an input changes
//! while it runs: each through the binary, asserting on what bench wrote.

use std::path::{Path, PathBuf};
use std::process::{Command as Std, Stdio};

use assert_cmd::Command;
use assert_cmd::cargo::CommandCargoExt;
use ttft_model::record::{CacheState, CellKey, Measurement, Mode, Record, SCHEMA_VERSION, Scenario};

fn record(context_tokens: u32) -> Record {
    Record::Measurement(Box::new(Measurement {
        schema_version: SCHEMA_VERSION,
        run_id: "r".into(),
        cell: CellKey {
            dataset_row: None,
            model: "m".into(),
            scenario: Scenario::Cold,
            cache_state: CacheState::Cold,
            mode: Mode::Streaming,
            context_tokens,
            batch_size: 1,
            run: 1,
        },
        started_at: "2026-01-01T00:00:00Z".into(),
        quality_ok: true,
        ..Default::default()
    }))
}

/// A run directory of `records` as a sweep leaves it.
fn run_dir(dir: &Path, name: &str, records: &[Record]) -> PathBuf {
    crate::common::runs::write(dir, name, records)
}

#[test]
fn inputs_without_records_are_refused_unless_allowed_and_nothing_empty_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let empty = run_dir(dir.path(), "empty", &[]);
    let good = run_dir(dir.path(), "good", &[record(1024)]);
    let out = dir.path().join("out.json");
    for inputs in [vec![&empty], vec![&good, &empty]] {
        let assert = Command::cargo_bin("bench")
            .unwrap()
            .arg("merge")
            .args(&inputs)
            .arg("-o")
            .arg(&out)
            .assert()
            .code(2);
        let stderr = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
        assert!(stderr.contains(&format!("no records in {}", empty.display())), "{stderr}");
        assert!(!out.exists(), "no canonical file without --allow-empty");
    }
    Command::cargo_bin("bench")
        .unwrap()
        .arg("merge")
        .arg(&empty)
        .arg("-o")
        .arg(&out)
        .arg("--allow-empty")
        .assert()
        .code(0);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(doc["records"], serde_json::json!([]));
}

/// Fails when a reader that went away turns an incomplete merge into exit 0.
#[test]
fn a_closed_stdout_keeps_merges_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_dir(dir.path(), "r", &[record(1024)]);
    let scenario = dir.path().join("s.toml");
    // 32 contexts x 3 runs: a completeness table that lists 95 missing cells on stdout.
    std::fs::write(&scenario, "contexts = \"1k..32k\"\nruns = 3\n").unwrap();
    for (extra, want) in [(None, 1), (Some("--allow-incomplete"), 0)] {
        let out_file = dir.path().join("out.json");
        let mut child = Std::cargo_bin("bench")
            .unwrap()
            .arg("merge")
            .arg(&run)
            .arg("-o")
            .arg(&out_file)
            .arg("--expect")
            .arg(&scenario)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before merge writes a byte.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(want), "{extra:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(stderr.contains("incomplete against") == (want == 1), "{stderr}");
        assert!(out_file.exists(), "the merge itself was done");
    }
}

fn merge(inputs: &[&Path], out: &Path) -> std::process::Output {
    Std::cargo_bin("bench").unwrap().arg("merge").args(inputs).arg("-o").arg(out).output().unwrap()
}

/// Every file under `dir`, with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(snapshot(&path));
        } else {
            out.push((path.clone(), std::fs::read(&path).unwrap_or_default()));
        }
    }
    out.sort();
    out
}

/// Fails when `bench merge RUN -o RUN/measurements.jsonl` (or `x.jsonl -o x.jsonl`, or a symlink
/// to either) replaces its own input, or writes into a run directory; merging into an existing
/// canonical file stays allowed, through a symlink too.
#[test]
fn an_output_over_a_raw_input_or_inside_a_run_directory_is_refused_and_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_dir(dir.path(), "run", &[record(1024), record(2048)]);
    let more = run_dir(dir.path(), "more", &[record(4096)]);
    let jsonl = dir.path().join("x.jsonl");
    std::fs::copy(run.join("measurements.jsonl"), &jsonl).unwrap();
    let link = dir.path().join("link.jsonl");
    std::os::unix::fs::symlink(run.join("measurements.jsonl"), &link).unwrap();
    let before = snapshot(dir.path());
    for (input, output, why) in [
        (&run, run.join("measurements.jsonl"), "inside the run directory"),
        (&run, run.join("merged.json"), "inside the run directory"),
        (&more, run.join("merged.json"), "inside the run directory"),
        (&jsonl, jsonl.clone(), "it is the input"),
        (&run, link.clone(), "inside the run directory"),
    ] {
        let out = merge(&[input], &output);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{} -o {}: {stderr}", input.display(), output.display());
        assert!(stderr.contains(&format!("-o {}: {why}", output.display())), "{stderr}");
        assert!(stderr.contains("Nothing was written"), "{stderr}");
        assert_eq!(snapshot(dir.path()), before, "-o {}: nothing changed", output.display());
    }
    // An existing canonical file may take the merge of itself and more, also through a symlink.
    let paper = dir.path().join("paper.json");
    assert_eq!(merge(&[&run], &paper).status.code(), Some(0));
    let paper_link = dir.path().join("paper-link.json");
    std::os::unix::fs::symlink(&paper, &paper_link).unwrap();
    let out = merge(&[&paper, &more], &paper_link);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&paper_link).unwrap()).unwrap();
    assert_eq!(doc["records"].as_array().unwrap().len(), 3);
}

/// Fails when an output that cannot be written exits other than 4 or leaves a file (whole or
/// partial, or a temp file) behind; an existing output stays as it was.
#[test]
fn an_output_that_cannot_be_written_exits_4_and_leaves_nothing_behind() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let many: Vec<Record> = (1..=64).map(|i| record(i * 256)).collect();
    let run = run_dir(&runs, "r", &many);
    let outputs = dir.path().join("out");
    std::fs::create_dir(&outputs).unwrap();
    let existing = outputs.join("paper.json");
    assert_eq!(merge(&[&run], &existing).status.code(), Some(0));
    let before = snapshot(dir.path());
    let more = run_dir(&runs, "more", &[record(1)]);
    let with_more = snapshot(dir.path());
    assert_ne!(before, with_more);
    // A file size limit of 4 KiB: the merge (tens of KiB) fails mid-write, as on a full disk.
    let mut limited = Std::cargo_bin("bench").unwrap();
    limited.arg("merge").arg(&run).arg(&more).arg("-o").arg(&existing);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        limited.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit { rlim_cur: 4096, rlim_max: 4096 };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = limited.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains(&existing.display().to_string()), "names the output: {stderr}");
    assert_eq!(snapshot(dir.path()), with_more, "no temp file, the old output untouched");
    // A directory that cannot be made (its parent is a file).
    let blocked = dir.path().join("a-file");
    std::fs::write(&blocked, "").unwrap();
    let out = merge(&[&run], &blocked.join("out.json"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains(&blocked.display().to_string()), "{stderr}");
    assert_eq!(std::fs::read(&blocked).unwrap(), b"", "nothing written");
}

/// SIGTERM (or Ctrl-C) while merge writes its output: exit 130 as every verb, the temp file it
/// was filling removed at once (not left until the next merge), and no output file.
#[test]
fn a_merge_stopped_by_a_signal_exits_130_and_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let records: Vec<Record> = (0..120_000).map(|i| record(64 + (i % 1000) as u32)).collect();
    let records: Vec<Record> = records
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            if let Record::Measurement(m) = &mut r {
                m.cell.run = 1 + i as u32 / 1000;
            }
            r
        })
        .collect();
    // The run's first record through the sweep's writer, the rest appended as one write (the
    // writer's fsync per record would take minutes for 120,000 on a busy disk).
    let input = run_dir(dir.path(), "big", &records[..1]);
    let rest: String = records[1..].iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect();
    let mut file = std::fs::OpenOptions::new().append(true).open(input.join("measurements.jsonl")).unwrap();
    std::io::Write::write_all(&mut file, rest.as_bytes()).unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let output = out_dir.join("merged.json");
    let mut child = Std::cargo_bin("bench")
        .unwrap()
        .args(["merge", input.to_str().unwrap(), "-o", output.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let temp_seen = || {
        std::fs::read_dir(&out_dir)
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().contains(".tmp-"))
    };
    let start = std::time::Instant::now();
    while !temp_seen() {
        assert!(child.try_wait().unwrap().is_none(), "merge ended before it began writing");
        assert!(start.elapsed() < std::time::Duration::from_secs(120), "no temp file appeared");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    // SAFETY: kill(2) on the child this test started.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    let left: Vec<_> = std::fs::read_dir(&out_dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "nothing may be left in the output's directory: {left:?}");
}

//! Warm reads the disk, and says so only when it did: against a server that writes its slot files
//! to a real directory and reads them back, the server itself sees (through the kernel's
//! `mincore`) that the file bench dropped was no longer in memory when the restore began, and a
//! save directory on tmpfs, where nothing can leave memory, is recorded as `memory`, said at the
//! start of the run and raised by verify.

use crate::common;

use std::path::Path;

use common::scripted::{Behaviour, Scripted};
use common::{bench, measurements, run_dir, run_json, stderr};
use serde_json::Value;

/// A directory on the build's own disk: /tmp may be tmpfs on some machines.
fn disk_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// Whether `dir` is on tmpfs, read from /proc/mounts independently of bench's own check.
fn on_tmpfs(dir: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let dir = dir.canonicalize().unwrap();
    let mut best: Option<(usize, bool)> = None;
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, mount, kind, ..] = fields[..] else { continue };
        if dir.starts_with(mount) && best.is_none_or(|(len, _)| mount.len() >= len) {
            best = Some((mount.len(), kind == "tmpfs"));
        }
    }
    best.is_some_and(|(_, tmpfs)| tmpfs)
}

fn warm_sweep(url: &str, out: &Path, slots: &Path) -> std::process::Output {
    bench(&[
        "sweep",
        "--server",
        url,
        "--out",
        out.to_str().unwrap(),
        "--preset",
        "llama.cpp",
        "--cache-states",
        "warm",
        "--contexts",
        "256",
        "--runs",
        "2",
        "--modes",
        "streaming,non-streaming",
        "--output-tokens",
        "24",
        "--thermal",
        "off",
        "--slot-dir",
        slots.to_str().unwrap(),
    ])
}

fn saving_server(slots: &Path) -> Scripted {
    Scripted::start(Behaviour {
        slot_save_path: Some(slots.to_path_buf()),
        slot_file_bytes: 4 << 20,
        ..Behaviour::default()
    })
}

#[test]
fn a_warm_restore_reads_a_file_bench_dropped_from_memory_as_the_server_itself_sees() {
    let slots = disk_dir();
    if on_tmpfs(slots.path()) {
        eprintln!("skipped: the build directory is on tmpfs, no disk to drop a file to");
        return;
    }
    let server = saving_server(slots.path());
    let out_dir = tempfile::tempdir().unwrap();
    let out = warm_sweep(&server.url, out_dir.path(), slots.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let ms = measurements(&run_dir(out_dir.path()));
    assert_eq!(ms.len(), 4, "2 runs x 2 modes: {ms:#?}");
    for m in &ms {
        assert_eq!(m["page_cache"], "evicted", "{m:#}");
        let pct = m["page_cache_resident_pct"].as_f64().unwrap_or_else(|| panic!("no residency: {m:#}"));
        assert!(pct <= 10.0, "bench saw its dropped file still cached: {m:#}");
        assert_eq!(m["saved_bytes"], 4 << 20, "{m:#}");
        assert_eq!(m["cache_state_confirmed"], true, "{m:#}");
    }
    // The server's own look at each file as its restore began: the pages were gone.
    // The first restore is the preflight's check that the preset's actions work, before any
    // measurement: the measured ones are the last.
    let restores = server.restores();
    assert!(restores.len() > ms.len(), "{restores:?}");
    for r in &restores[restores.len() - ms.len()..] {
        let share = r.resident_share.unwrap_or_else(|| panic!("the kernel would not say: {r:?}"));
        assert!(share < 0.10, "the restore read a file still in the page cache: {r:?}");
    }
    assert_eq!(run_json(&run_dir(out_dir.path()))["config"]["page_cache"], "evicted");
}

#[test]
fn a_save_directory_on_tmpfs_is_memory_said_up_front_recorded_and_raised_by_verify() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() || !on_tmpfs(shm) {
        eprintln!("skipped: no tmpfs at /dev/shm");
        return;
    }
    let slots = tempfile::tempdir_in(shm).unwrap();
    let server = saving_server(slots.path());
    let out_dir = tempfile::tempdir().unwrap();
    let out = warm_sweep(&server.url, out_dir.path(), slots.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("is on tmpfs") && err.contains("page_cache: memory"), "{err}");
    let run = run_dir(out_dir.path());
    let ms = measurements(&run);
    assert_eq!(ms.len(), 4, "{ms:#?}");
    for m in &ms {
        assert_eq!(m["page_cache"], "memory", "a tmpfs file never left memory: {m:#}");
        let pct = m["page_cache_resident_pct"].as_f64().unwrap_or_else(|| panic!("no residency: {m:#}"));
        assert!(pct > 90.0, "{m:#}");
    }
    for r in server.restores() {
        assert!(r.resident_share.is_some_and(|s| s > 0.9), "{r:?}");
    }
    assert_eq!(run_json(&run)["config"]["page_cache"], "memory");
    let out = bench(&["verify", run.to_str().unwrap(), "--format", "json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let memory: Vec<&Value> =
        report["findings"].as_array().unwrap().iter().filter(|f| f["rule"] == "warm_read_memory").collect();
    assert_eq!(memory.len(), 1, "{report:#}");
    assert!(memory[0]["message"].as_str().unwrap().contains("4 of 4 warm records"), "{report:#}");
    assert_eq!(out.status.code(), Some(0), "a warning: {report:#}");
    let strict = bench(&["verify", run.to_str().unwrap(), "--strict"]);
    assert_eq!(strict.status.code(), Some(1), "--strict fails a warm read from memory: {}", stderr(&strict));
}

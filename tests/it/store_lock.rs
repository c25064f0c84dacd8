//! The run-directory lock across processes: a second process is refused, told the holder's pid,
//! and gets the lock once the holder is gone (however it ended: the OS releases it).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use ttft_results::store::{LockError, RunLock};

const CHILD_DIR: &str = "TTFT_BENCH_LOCK_TEST_DIR";

/// Run as a child process only: takes the lock, says so, and holds it until stdin closes.
#[test]
fn lock_holder_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else { return };
    let _lock = RunLock::acquire(std::path::Path::new(&dir)).unwrap();
    // The parent reads this line from the child's stdout.
    std::io::stdout().write_all(b"locked\n").unwrap();
    std::io::stdout().flush().unwrap();
    let mut rest = String::new();
    let _ = std::io::stdin().read_line(&mut rest);
}

#[test]
fn a_second_process_is_refused_naming_the_holder_and_gets_the_lock_after_it_exits() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "store_lock::lock_holder_child", "--nocapture", "--test-threads", "1"])
        .env(CHILD_DIR, dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.is_ok_and(|l| l.contains("locked"))), "the child took the lock");

    match RunLock::acquire(dir.path()) {
        Err(LockError::Held { pid, .. }) => assert_eq!(pid, Some(child.id())),
        other => panic!("expected the lock to be held by the child, got {other:?}"),
    }
    let message = RunLock::acquire(dir.path()).unwrap_err().to_string();
    assert!(message.contains(&format!("pid {}", child.id())), "{message}");

    // Killed, not asked: the OS drops a dead holder's lock.
    child.kill().unwrap();
    child.wait().unwrap();
    let lock = RunLock::acquire(dir.path()).unwrap();
    let written = std::fs::read_to_string(lock.path()).unwrap();
    assert_eq!(written.trim(), std::process::id().to_string());
}

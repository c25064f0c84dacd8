//! The keeper: the process between bench and its `--server-cmd`, which no process the command
//! starts can leave (Linux).
//!
//! A process group is not enough to end a server command: `setsid` (or a daemon's double fork)
//! takes a process out of the group, and the group's kill then misses it; it kept a setsid'd
//! server running after a clean run, SIGTERM and kill -9 of bench alike. The keeper is bench's own
//! binary run again (`KEEPER_ARG`), which marks itself a child subreaper
//! (`PR_SET_CHILD_SUBREAPER`): every process the command starts stays its descendant, whatever
//! session or group it moves to, because an orphan is re-parented to its nearest subreaper
//! ancestor. So the command's processes are exactly the keeper's descendants, found by parentage in
//! `/proc`.
//!
//! Protocol: the keeper's stdin is a pipe only bench writes to (never written; it only closes);
//! the command runs as `sh -c LINE` with the keeper's stderr (bench reads it). On its stdout the
//! keeper writes the command's pid as it starts it, and `kept` when the command exited 0 leaving
//! its server running: bench watches that pid itself, so it sees the server die at once, not only
//! when the keeper has ended what was left (`Supervisor::check`). The keeper ends
//! every descendant (SIGTERM once, SIGKILL after `END_GRACE`) when that pipe closes (bench is done
//! with the server, or died: kill -9 included, the kernel closes it), or on SIGTERM. When the
//! command itself ends, the keeper ends as it did (the same exit code, or the same signal), so
//! bench sees the server's own end: first it ends what the command left behind (a wrapper's
//! child still holding the port). A command that exits 0 while processes it started live on
//! (`setsid srv &`, a daemon that forks) has started its server: the keeper keeps it, and ends
//! as the last of them does.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The first argument that makes `bench` the keeper (`bench __keep-server 'LINE'`).
pub const KEEPER_ARG: &str = "__keep-server";

/// How long the command's processes have after SIGTERM before SIGKILL.
pub const END_GRACE: Duration = Duration::from_secs(3);

/// The write end of the self-pipe that wakes the loop on a signal; -1 until it exists.
static WAKE: AtomicI32 = AtomicI32::new(-1);
/// SIGTERM, SIGINT or SIGHUP arrived: end everything.
static ASKED_TO_END: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(signal: libc::c_int) {
    if signal != libc::SIGCHLD {
        ASKED_TO_END.store(true, Ordering::SeqCst);
    }
    let fd = WAKE.load(Ordering::SeqCst);
    if fd >= 0 {
        let byte = 1u8;
        // SAFETY: write(2) is async-signal-safe; a full pipe already holds a wake-up.
        unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
    }
}

/// Runs the keeper for the command line in the arguments and exits as the command did.
pub fn main() -> ! {
    let line = std::env::args().nth(2).unwrap_or_default();
    // SAFETY: prctl, pipe2 and sigaction with a handler that only stores and writes.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong);
        let mut fds = [-1; 2];
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) == 0 {
            WAKE.store(fds[1], Ordering::SeqCst);
            WAKE_READ.store(fds[0], Ordering::SeqCst);
        }
        for signal in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            // A handler, not SIG_IGN: handlers are reset by exec, so the command starts with the
            // default dispositions.
            libc::signal(signal, on_signal as *const () as libc::sighandler_t);
        }
    }
    let mut command = Command::new("sh");
    command.arg("-c").arg(&line).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit());
    // SAFETY: between fork and exec only prctl (async-signal-safe). The keeper is single-threaded,
    // so "the parent thread dies" is "the keeper dies".
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            Ok(())
        });
    }
    let child = match command.spawn() {
        Ok(child) => child.id() as libc::pid_t,
        Err(e) => {
            eprintln!("cannot start the server command: {e}");
            std::process::exit(127);
        }
    };
    tell_bench(&child.to_string());
    let mut kept = false;
    let mut command_ended: Option<libc::c_int> = None;
    let mut last_ended: Option<libc::c_int> = None;
    loop {
        wait_for_news();
        let bench_gone = control_closed();
        for (pid, status) in reap() {
            if pid == child {
                command_ended = Some(status);
            }
            last_ended = Some(status);
        }
        if bench_gone || ASKED_TO_END.load(Ordering::SeqCst) {
            end_descendants();
            std::process::exit(0);
        }
        if let Some(status) = command_ended {
            let daemonized = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
            if !daemonized {
                end_descendants();
                end_as(status);
            }
            if descendants().is_empty() {
                end_descendants();
                end_as(last_ended.unwrap_or(status));
            }
            if !kept {
                kept = true;
                tell_bench(KEPT);
            }
        }
    }
}

/// What the keeper writes when the command exited 0 and its server lives on.
pub const KEPT: &str = "kept";

/// One line to bench (stdout is a pipe bench reads); bench gone is no reason to stop.
fn tell_bench(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// The read end of the self-pipe.
static WAKE_READ: AtomicI32 = AtomicI32::new(-1);

/// Blocks until bench's pipe or the self-pipe has something (a signal arrived), then drains the
/// self-pipe.
fn wait_for_news() {
    let wake = WAKE_READ.load(Ordering::SeqCst);
    let mut fds = [
        libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: wake, events: libc::POLLIN, revents: 0 },
    ];
    // SAFETY: poll on two descriptors this process owns; read drains a non-blocking pipe.
    unsafe {
        // A signal that arrived between the last drain and here left a byte: poll returns at once.
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1);
        let mut buf = [0u8; 64];
        while wake >= 0 && libc::read(wake, buf.as_mut_ptr().cast(), buf.len()) > 0 {}
    }
}

/// Whether bench's end of the control pipe is closed (it never writes, so readable means closed).
fn control_closed() -> bool {
    let mut fd = libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 };
    // SAFETY: a zero-timeout poll of stdin.
    let ready = unsafe { libc::poll(&mut fd, 1, 0) } > 0;
    ready && fd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

/// Every child that has ended (the command, or a re-parented orphan), with its wait status.
fn reap() -> Vec<(libc::pid_t, libc::c_int)> {
    let mut ended = Vec::new();
    loop {
        let mut status = 0;
        // SAFETY: waitpid of any child: the keeper's children are only the command and orphans.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return ended;
        }
        ended.push((pid, status));
    }
}

/// The live processes below the keeper, by parentage in /proc (zombies are not alive: they are
/// reaped, by the keeper or by a parent that is itself ended).
fn descendants() -> Vec<libc::pid_t> {
    let mut children: BTreeMap<libc::pid_t, Vec<libc::pid_t>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<libc::pid_t>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so read after the last ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("Z");
        let Some(ppid) = fields.next().and_then(|p| p.parse::<libc::pid_t>().ok()) else { continue };
        if state != "Z" && state != "X" {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut queue = vec![std::process::id() as libc::pid_t];
    while let Some(pid) = queue.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            found.push(child);
            queue.push(child);
        }
    }
    found
}

/// Ends every descendant: SIGTERM once each (a second one makes some servers skip their
/// shutdown), SIGKILL to whatever is left after `END_GRACE`, until none is left.
fn end_descendants() {
    let started = Instant::now();
    let mut told: BTreeSet<libc::pid_t> = BTreeSet::new();
    loop {
        let _ = reap();
        let left = descendants();
        if left.is_empty() {
            return;
        }
        let killing = started.elapsed() > END_GRACE;
        for pid in left {
            if killing {
                // SAFETY: kill(2) of a live descendant, found by parentage just now.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            } else if told.insert(pid) {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Exits as a process with wait status `status` ended: its exit code, or its signal (without a
/// core dump: the server's was its own to write).
fn end_as(status: libc::c_int) -> ! {
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        // SAFETY: setrlimit, signal, sigprocmask and kill on this process only.
        unsafe {
            let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            libc::signal(signal, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
        }
        std::process::exit(128 + signal);
    }
    std::process::exit(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 1 });
}

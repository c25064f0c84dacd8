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
//!
//! System calls go through nix's safe wrappers. What stays `unsafe` is what nix itself leaves
//! unsafe, because no wrapper can check it: installing the signal handler and resetting a
//! signal's disposition (`sigaction`, `signal`: the handler must be async-signal-safe, which
//! `on_signal` is: it stores to atomics and writes one byte), the handler's view of the self-pipe
//! (a raw descriptor in an atomic: a static cannot hold a borrow), and `pre_exec` (code between
//! fork and exec).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::c_int;
use std::os::fd::{AsFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, kill, sigaction};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// The first argument that makes `bench` the keeper (`bench __keep-server 'LINE'`).
pub const KEEPER_ARG: &str = "__keep-server";

/// How long the command's processes have after SIGTERM before SIGKILL.
pub(crate) const END_GRACE: Duration = Duration::from_secs(3);

/// The write end of the self-pipe that wakes the loop on a signal; -1 until it exists. It stays
/// open for the keeper's life.
static WAKE: AtomicI32 = AtomicI32::new(-1);
/// SIGTERM, SIGINT or SIGHUP arrived: end everything.
static ASKED_TO_END: AtomicBool = AtomicBool::new(false);

/// Async-signal-safe: two atomics and one write(2); errno is left as the interrupted code had it.
extern "C" fn on_signal(signal: c_int) {
    let errno = Errno::last_raw();
    if signal != Signal::SIGCHLD as c_int {
        ASKED_TO_END.store(true, Ordering::SeqCst);
    }
    let fd = WAKE.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: WAKE holds the self-pipe's write end, open for the keeper's life (its OwnedFd
        // was given up with into_raw_fd). A full pipe already holds a wake-up, so a failed write
        // loses nothing.
        let _ = nix::unistd::write(unsafe { BorrowedFd::borrow_raw(fd) }, &[1]);
    }
    Errno::set_raw(errno);
}

/// Runs the keeper for the command line in the arguments and exits as the command did.
pub fn main() -> ! {
    let line = std::env::args().nth(2).unwrap_or_default();
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let wake_read = match nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK) {
        Ok((read, write)) => {
            WAKE.store(write.into_raw_fd(), Ordering::SeqCst);
            Some(read)
        }
        Err(_) => None,
    };
    // A handler, not SIG_IGN: handlers are reset by exec, so the command starts with the default
    // dispositions. SA_RESTART as signal(2) gives: a call interrupted by SIGCHLD is resumed.
    let action = SigAction::new(SigHandler::Handler(on_signal), SaFlags::SA_RESTART, SigSet::empty());
    for signal in [Signal::SIGCHLD, Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: on_signal is async-signal-safe (see there).
        let _ = unsafe { sigaction(signal, &action) };
    }
    let mut command = Command::new("sh");
    command.arg("-c").arg(&line).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit());
    // SAFETY: between fork and exec only prctl (async-signal-safe, no allocation). The keeper is
    // single-threaded, so "the parent thread dies" is "the keeper dies".
    unsafe {
        command.pre_exec(|| Ok(nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?));
    }
    let child = match command.spawn() {
        Ok(child) => Pid::from_raw(child.id() as i32),
        Err(e) => {
            eprintln!("cannot start the server command: {e}");
            std::process::exit(127);
        }
    };
    tell_bench(&child.to_string());
    let mut kept = false;
    let mut command_ended: Option<WaitStatus> = None;
    let mut last_ended: Option<WaitStatus> = None;
    loop {
        wait_for_news(wake_read.as_ref());
        let bench_gone = control_closed();
        for status in reap() {
            if status.pid() == Some(child) {
                command_ended = Some(status);
            }
            last_ended = Some(status);
        }
        if bench_gone || ASKED_TO_END.load(Ordering::SeqCst) {
            end_descendants();
            std::process::exit(0);
        }
        if let Some(status) = command_ended {
            let daemonized = matches!(status, WaitStatus::Exited(_, 0));
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
pub(crate) const KEPT: &str = "kept";

/// One line to bench (stdout is a pipe bench reads); bench gone is no reason to stop.
fn tell_bench(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// Blocks until bench's pipe or the self-pipe has something (a signal arrived), then drains the
/// self-pipe.
fn wait_for_news(wake: Option<&OwnedFd>) {
    let stdin = std::io::stdin();
    let mut fds = vec![PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
    fds.extend(wake.map(|w| PollFd::new(w.as_fd(), PollFlags::POLLIN)));
    // A signal that arrived between the last drain and here left a byte: poll returns at once.
    // An interrupted poll (EINTR) is news too: the loop looks at everything again.
    let _ = poll(&mut fds, PollTimeout::NONE);
    if let Some(wake) = wake {
        let mut buf = [0u8; 64];
        while nix::unistd::read(wake, &mut buf).is_ok_and(|n| n > 0) {}
    }
}

/// Whether bench's end of the control pipe is closed (it never writes, so readable means closed).
fn control_closed() -> bool {
    let stdin = std::io::stdin();
    let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
    let ready = poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0);
    let closed = PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL;
    ready && fds[0].revents().is_some_and(|r| r.intersects(closed))
}

/// Every child that has ended (the command, or a re-parented orphan), with its wait status.
fn reap() -> Vec<WaitStatus> {
    let mut ended = Vec::new();
    // Any child: the keeper's children are only the command and orphans. StillAlive (none has
    // ended) or ECHILD (none left) ends the round.
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
        ended.push(status);
    }
    ended
}

/// The live processes below the keeper, by parentage in /proc (zombies are not alive: they are
/// reaped, by the keeper or by a parent that is itself ended).
fn descendants() -> Vec<Pid> {
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so read after the last ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("Z");
        let Some(ppid) = fields.next().and_then(|p| p.parse::<i32>().ok()) else { continue };
        if state != "Z" && state != "X" {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut queue = vec![Pid::this().as_raw()];
    while let Some(pid) = queue.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            found.push(Pid::from_raw(child));
            queue.push(child);
        }
    }
    found
}

/// Ends every descendant: SIGTERM once each (a second one makes some servers skip their
/// shutdown), SIGKILL to whatever is left after `END_GRACE`, until none is left.
fn end_descendants() {
    let started = Instant::now();
    let mut told: BTreeSet<Pid> = BTreeSet::new();
    loop {
        let _ = reap();
        let left = descendants();
        if left.is_empty() {
            return;
        }
        let killing = started.elapsed() > END_GRACE;
        for pid in left {
            if killing {
                let _ = kill(pid, Signal::SIGKILL);
            } else if told.insert(pid) {
                let _ = kill(pid, Signal::SIGTERM);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Exits as a process with wait status `status` ended: its exit code, or its signal (without a
/// core dump: the server's was its own to write).
fn end_as(status: WaitStatus) -> ! {
    match status {
        WaitStatus::Signaled(_, signal, _) => {
            let _ = setrlimit(Resource::RLIMIT_CORE, 0, 0);
            // SAFETY: the default disposition installs no handler.
            let _ = unsafe { nix::sys::signal::signal(signal, SigHandler::SigDfl) };
            let _ = SigSet::from(signal).thread_unblock();
            let _ = kill(Pid::this(), signal);
            std::process::exit(128 + signal as i32);
        }
        WaitStatus::Exited(_, code) => std::process::exit(code),
        _ => std::process::exit(1),
    }
}

//! `--server-cmd`: bench starts the server itself, watches it, and survives its crashes.
//!
//! The command is run by `sh -c` with `{port}` replaced by a free port bench picked, so users
//! write it as they would in a shell (`llama-server -m m.gguf --port {port} -ngl 99`). Bench waits
//! until `/health` (or `/v1/models`) answers (a command that exits at start because another
//! process took the port in the meantime is started again on another port), keeps the last lines
//! of the server's stderr, and between cells or iterations checks whether the process is still
//! alive. A server that died is a `ServerCrash` (exit code, signal, what was in flight, the stderr
//! tail), recorded in run.json; it is restarted on the same port, up to `max_restarts` times.
//!
//! The server never outlives bench. On Linux the `bench` binary runs the command under a keeper
//! (`keeper.rs`): bench's own binary again, a child subreaper, so every process the command starts
//! stays its descendant even when it leaves the process group (`setsid`, a daemon's double fork);
//! the keeper ends them all when bench closes the pipe it holds to it: when bench is done with the
//! server, before a restart, and as bench dies (kill -9 included: the kernel closes the pipe).
//! Elsewhere (and where bench is used as a library, which cannot run itself as the keeper) the
//! command runs in a process group of its own, which bench ends (SIGTERM, then SIGKILL) when it is
//! done with it, however the run ended, and before a restart (a crashed wrapper may have left a
//! child on the port). For the exits bench cannot act on (kill -9), two guards: on Linux the
//! command's own process gets a parent-death signal, and a small watcher process, holding the read
//! end of a pipe only bench writes to, kills the whole group when that pipe closes, which the
//! kernel does as bench dies (so a wrapper's forked children go too, on every Unix); a process that
//! left the group escapes these, which is why Linux has the keeper.

#[cfg(target_os = "linux")]
pub mod keeper;

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::exit::Failure;

/// Lines of the server's stderr kept for a crash report.
const STDERR_TAIL_LINES: usize = 20;
/// How often a start that is taking a while is reported.
const START_NOTE_EVERY: Duration = Duration::from_secs(15);
/// How long a command must stay up after its port first answered for the answer to be its own.
const START_SETTLE: Duration = Duration::from_secs(1);
/// How many ports a start tries when another process takes the one picked before the server
/// listens on it.
const PORT_TRIES: u32 = 5;
/// How long the group has to end after SIGTERM before it gets SIGKILL.
const END_GRACE: Duration = Duration::from_secs(3);

/// Whether this process is the `bench` binary, which can run itself as the keeper.
static KEEPER: AtomicBool = AtomicBool::new(false);

/// Called by the `bench` binary: server commands run under the keeper (`keeper.rs`) from now on.
/// A library user's process cannot re-run itself as one, and keeps the process-group guards.
pub fn run_server_commands_under_a_keeper() {
    KEEPER.store(cfg!(target_os = "linux"), Ordering::SeqCst);
}

fn under_keeper() -> bool {
    KEEPER.load(Ordering::SeqCst)
}

/// A server process that ended while bench was using it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerCrash {
    pub at: String,
    pub exit_code: Option<i32>,
    /// The signal that ended it (11 = SIGSEGV, 5 = SIGTRAP, 9 = SIGKILL), when one did.
    pub signal: Option<i32>,
    /// The cell or iteration in flight when it was found dead.
    pub in_flight: String,
    pub stderr_tail: Vec<String>,
    /// Whether bench started it again.
    pub restarted: bool,
}

pub(crate) struct Supervisor {
    template: String,
    port: u16,
    child: Child,
    /// Kills the child's process group if bench dies (see the module's comment).
    watcher: Option<Child>,
    tail: Arc<Mutex<VecDeque<String>>>,
    /// The task that fills `tail`; done once the server's stderr is closed.
    reader: Option<tokio::task::JoinHandle<()>>,
    pub max_restarts: u32,
    pub crashes: Vec<ServerCrash>,
    start_timeout: Duration,
    /// What the keeper said of the command (its pid, whether it was kept); default without one.
    news: Arc<Mutex<KeeperNews>>,
}

/// The keeper's lines (`keeper.rs`): the command's pid, and whether the keeper kept its server
/// after the command exited 0.
#[derive(Clone, Debug, Default)]
struct KeeperNews {
    command_pid: Option<u32>,
    kept: bool,
}

impl Supervisor {
    /// Starts the command on a free port and waits until it answers; `note` hears what is being
    /// waited for while it does.
    pub(crate) async fn start(
        template: &str,
        max_restarts: u32,
        start_timeout: Duration,
        note: &(dyn Fn(&str) + Sync),
    ) -> Result<Supervisor, Failure> {
        // Its secrets are known before its stderr is read or any message quotes it.
        let shown = ttft_model::secrets::redact_command(template);
        if !template.contains("{port}") {
            return Err(Failure::usage(format!(
                "--server-cmd {shown:?}: must contain {{port}}, where bench puts the port it picked"
            )));
        }
        let mut tries = 0;
        loop {
            let port = free_port().map_err(|e| Failure::internal(format!("cannot find a free port: {e}")))?;
            let tail = Arc::new(Mutex::new(VecDeque::new()));
            let (mut child, reader) = spawn(template, port, &tail)?;
            let news = Arc::new(Mutex::new(KeeperNews::default()));
            listen_to_keeper(&mut child, &news);
            let watcher = if under_keeper() { None } else { watch_group(&child) };
            let mut sup = Supervisor {
                template: template.into(),
                port,
                child,
                watcher,
                tail,
                reader,
                max_restarts,
                crashes: Vec::new(),
                start_timeout,
                news,
            };
            let Err(failure) = sup.wait_healthy(note).await else { return Ok(sup) };
            tries += 1;
            if tries == PORT_TRIES || !sup.lost_its_port() {
                return Err(failure);
            }
            note(&format!(
                "port {port} was taken by another process before the server could listen on it; \
                 starting the server again on another port"
            ));
        }
    }

    /// Whether the command is still running `START_SETTLE` after its port answered: a server that
    /// cannot listen (another process has the port) exits at once, and until it does another
    /// server answering on the port looks like it.
    async fn still_running_after_answering(&mut self) -> bool {
        tokio::time::sleep(START_SETTLE).await;
        self.check("start").is_none()
    }

    /// Whether the command exited at start because another process holds its port: the port was
    /// free when bench picked it, and something outside the command (whose processes are ended
    /// here first) listens on it now, as happens when servers started at the same moment on one
    /// host (the shards of an array job) are given the same port.
    fn lost_its_port(&mut self) -> bool {
        let exited = self.child.try_wait().ok().flatten().is_some();
        self.end_group();
        exited
            && std::net::TcpListener::bind(("127.0.0.1", self.port))
                .is_err_and(|e| e.kind() == std::io::ErrorKind::AddrInUse)
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The command as run (port filled in).
    pub(crate) fn command(&self) -> String {
        self.template.replace("{port}", &self.port.to_string())
    }

    /// Whether the server died; if so, the crash (not yet restarted).
    pub(crate) fn check(&mut self, in_flight: &str) -> Option<ServerCrash> {
        #[cfg(target_os = "linux")]
        self.settle_keeper();
        let status = self.child.try_wait().ok().flatten()?;
        #[cfg(unix)]
        let signal = std::os::unix::process::ExitStatusExt::signal(&status);
        #[cfg(not(unix))]
        let signal = None;
        let stderr_tail = self.tail.lock().map(|t| t.iter().cloned().collect()).unwrap_or_default();
        Some(ServerCrash {
            at: ttft_model::clock::now_rfc3339(),
            exit_code: status.code(),
            signal,
            in_flight: in_flight.to_string(),
            stderr_tail,
            restarted: false,
        })
    }

    /// Records `crash` and starts the server again, unless it has used up its restarts. Err means
    /// the server is gone for good (the caller stops, everything measured kept).
    pub(crate) async fn restart(&mut self, mut crash: ServerCrash) -> Result<(), Failure> {
        self.settle_tail(&mut crash).await;
        let allowed = (self.crashes.len() as u32) < self.max_restarts;
        crash.restarted = allowed;
        let why = describe(&crash);
        self.crashes.push(crash);
        if !allowed {
            return Err(Failure::server(format!(
                "{why}; it has crashed {} times, more than --max-restarts {} allows",
                self.crashes.len(),
                self.max_restarts
            )));
        }
        if let Ok(mut t) = self.tail.lock() {
            t.clear();
        }
        // What the crashed command left behind (a wrapper's child on the port) goes first.
        self.end_group();
        (self.child, self.reader) = spawn(&self.template, self.port, &self.tail)?;
        self.news = Arc::new(Mutex::new(KeeperNews::default()));
        listen_to_keeper(&mut self.child, &self.news);
        self.watcher = if under_keeper() { None } else { watch_group(&self.child) };
        self.wait_healthy(&|_| {}).await
    }

    /// `crash` with the last words of the dead server: its stderr is read by a task of its own,
    /// which may not have reached the last lines when the exit was seen. Bounded, because a child
    /// the command forked may hold the pipe open.
    async fn settle_tail(&mut self, crash: &mut ServerCrash) {
        if let Some(reader) = self.reader.take() {
            let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
        }
        crash.stderr_tail = self.tail.lock().map(|t| t.iter().cloned().collect()).unwrap_or_default();
    }

    /// The command as shown: its secrets masked.
    fn shown(&self) -> String {
        ttft_model::secrets::redact_command(&self.command())
    }

    async fn wait_healthy(&mut self, note: &(dyn Fn(&str) + Sync)) -> Result<(), Failure> {
        let http = ttft_client::default_http()?;
        let started = tokio::time::Instant::now();
        let deadline = started + self.start_timeout;
        let mut next_note = started;
        let what = format!("{}/health (or /v1/models)", self.url());
        loop {
            if let Some(mut crash) = self.check("start") {
                self.settle_tail(&mut crash).await;
                return Err(Failure::server(format!(
                    "the server command {:?} exited while starting: {}",
                    self.shown(),
                    describe(&crash)
                )));
            }
            let mut answered = false;
            for path in ["/health", "/v1/models"] {
                let answer =
                    http.get(format!("{}{path}", self.url())).timeout(Duration::from_secs(2)).send().await;
                if answer.is_ok_and(|r| r.status().is_success()) {
                    answered = true;
                    break;
                }
            }
            // Gone by then: the loop's next turn reports the exit.
            if answered && self.still_running_after_answering().await {
                return Ok(());
            }
            let now = tokio::time::Instant::now();
            if now > deadline {
                let tail =
                    self.tail.lock().map(|t| t.iter().cloned().collect::<Vec<_>>()).unwrap_or_default();
                let last = match tail.len() {
                    0 => "it wrote nothing to stderr".to_string(),
                    _ => format!("its last stderr lines:\n  {}", tail.join("\n  ")),
                };
                self.end_group();
                return Err(Failure::server(format!(
                    "the server command {:?} did not answer {what} within {}s (--server-start-timeout); \
                     it was stopped; {last}",
                    self.shown(),
                    self.start_timeout.as_secs_f64()
                )));
            }
            if now >= next_note {
                note(&format!(
                    "waiting for {what}: {:.0}s of {:.0}s (--server-start-timeout)",
                    (now - started).as_secs_f64(),
                    self.start_timeout.as_secs_f64()
                ));
                next_note = now + START_NOTE_EVERY;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Supervisor {
    /// Ends the command's process group: SIGTERM, then SIGKILL to whatever is left after
    /// `END_GRACE`. The group's leader is reaped on the way, so "gone" means gone.
    fn end_group(&mut self) {
        #[cfg(target_os = "linux")]
        if under_keeper() && self.end_keeper() {
            return;
        }
        #[cfg(unix)]
        if let Some(pgid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            use nix::sys::signal::{Signal, killpg};
            // The group is the one `spawn` created (its leader's pid); no signal only asks whether
            // any member is left.
            let group = nix::unistd::Pid::from_raw(pgid);
            let alive = || killpg(group, None).is_ok();
            let _ = killpg(group, Signal::SIGTERM);
            let deadline = std::time::Instant::now() + END_GRACE;
            loop {
                let _ = self.child.try_wait();
                if !alive() || std::time::Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = killpg(group, Signal::SIGKILL);
            let _ = self.child.try_wait();
        }
        #[cfg(not(unix))]
        let _ = self.child.start_kill();
        // Its pipe closes: the watcher's kill finds nothing, and it exits.
        self.watcher = None;
    }
}

#[cfg(target_os = "linux")]
impl Supervisor {
    /// Closes the keeper's pipe (it ends every process the command started, SIGTERM then SIGKILL
    /// after its grace) and waits for the keeper to exit; false if it has not by then (the caller
    /// falls back on the process group).
    /// When the command's own process has ended, waits for the keeper to end too (it ends what
    /// the command left first, within its grace), so the crash is seen now, not some cells later,
    /// unless the keeper says it kept the server (a command that started it and exited 0).
    fn settle_keeper(&mut self) {
        let news = |s: &Self| s.news.lock().map(|n| n.clone()).unwrap_or_default();
        let Some(pid) = news(self).command_pid else { return };
        if news(self).kept || process_alive(pid) {
            return;
        }
        let deadline = std::time::Instant::now() + keeper::END_GRACE + Duration::from_secs(2);
        while std::time::Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) || news(self).kept {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn end_keeper(&mut self) -> bool {
        drop(self.child.stdin.take());
        let deadline = std::time::Instant::now() + keeper::END_GRACE + Duration::from_secs(2);
        loop {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Supervisor {
    /// However the run ends (done, an error, a signal that aborts the task holding it), the
    /// server and everything it started end with it.
    fn drop(&mut self) {
        self.end_group();
    }
}

/// "the server died of signal 11 (SIGSEGV) during ctx 4096 cold ...; last stderr: ..."
pub(crate) fn describe(crash: &ServerCrash) -> String {
    let how = match (crash.signal, crash.exit_code) {
        (Some(s), _) => {
            format!("died of signal {s}{}", signal_name(s).map_or(String::new(), |n| format!(" ({n})")))
        }
        (None, Some(c)) => format!("exited with code {c}"),
        (None, None) => "ended".to_string(),
    };
    let last = crash.stderr_tail.last().map_or(String::new(), |l| format!("; last stderr line: {l}"));
    format!("the server {how} during {}{last}", crash.in_flight)
}

fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        15 => "SIGTERM",
        _ => return None,
    })
}

type Reader = Option<tokio::task::JoinHandle<()>>;

/// `command` run by `exec`, after any leading `NAME=value` assignments (sh reads `exec NAME=x cmd`
/// as a command named `NAME=x`; `NAME=x exec cmd` gives cmd the variable).
fn exec_line(command: &str) -> String {
    let is_assignment = |word: &str| {
        word.split_once('=').is_some_and(|(name, _)| {
            name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    let mut rest = command.trim_start();
    let mut assignments = String::new();
    while let Some(word) =
        rest.split_whitespace().next().filter(|w| is_assignment(w) && !w.contains(['\'', '"']))
    {
        assignments.push_str(word);
        assignments.push(' ');
        rest = rest[word.len()..].trim_start();
    }
    format!("{assignments}exec {rest}")
}

fn spawn(template: &str, port: u16, tail: &Arc<Mutex<VecDeque<String>>>) -> Result<(Child, Reader), Failure> {
    let command = template.replace("{port}", &port.to_string());
    #[cfg(target_os = "linux")]
    if under_keeper() {
        return spawn_with(keeper_command(&command), &command, tail);
    }
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        // `exec` so the server is the child itself: its signals and exit status are the server's.
        .arg(exec_line(&command))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // A group of its own: what the command forks is ended with it, and a Ctrl-C at the terminal
    // reaches bench (which stops the run in order) and not the server mid-request.
    #[cfg(unix)]
    cmd.process_group(0);
    #[cfg(target_os = "linux")]
    {
        // SAFETY: between fork and exec only async-signal-safe calls (prctl, getppid).
        let parent = nix::unistd::getpid();
        unsafe {
            cmd.pre_exec(move || {
                // SIGKILL when the thread that forked it ends: spawns happen on the runtime's
                // worker threads, which live as long as bench.
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
                // Bench died between fork and prctl: nobody is left to send the signal.
                if nix::unistd::getppid() != parent {
                    return Err(std::io::Error::other("bench exited while starting the server"));
                }
                Ok(())
            });
        }
    }
    spawn_with(cmd, &command, tail)
}

/// `bench __keep-server LINE`: this very binary (`/proc/self/exe`, whatever became of its path) as
/// the keeper of the command. Its stdin is the pipe whose closing ends the command; it is in a
/// group of its own (a Ctrl-C at the terminal reaches bench, not the server mid-request), and is
/// neither killed with the `Child` nor given a parent-death signal: it must outlive bench to end
/// what the command started.
#[cfg(target_os = "linux")]
fn keeper_command(command: &str) -> Command {
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg(keeper::KEEPER_ARG)
        .arg(exec_line(command))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(false)
        .process_group(0);
    cmd
}

fn spawn_with(
    mut cmd: Command,
    command: &str,
    tail: &Arc<Mutex<VecDeque<String>>>,
) -> Result<(Child, Reader), Failure> {
    let mut child = cmd.spawn().map_err(|e| {
        Failure::usage(format!(
            "--server-cmd {:?}: cannot start: {e}",
            ttft_model::secrets::redact_command(command)
        ))
    })?;
    let reader = child.stderr.take().map(|stderr| {
        let tail = tail.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(mut t) = tail.lock() {
                    if t.len() == STDERR_TAIL_LINES {
                        t.pop_front();
                    }
                    t.push_back(ttft_model::secrets::redact(&line));
                }
            }
        })
    });
    Ok((child, reader))
}

/// Reads the keeper's lines into `news` (nothing without a keeper: its stdout is not a pipe).
fn listen_to_keeper(child: &mut Child, news: &Arc<Mutex<KeeperNews>>) {
    let Some(stdout) = child.stdout.take() else { return };
    let news = news.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(mut n) = news.lock() {
                match line.trim().parse::<u32>() {
                    Ok(pid) => n.command_pid = Some(pid),
                    Err(_) => n.kept |= line.trim() == keeper_kept(),
                }
            }
        }
    });
}

fn keeper_kept() -> &'static str {
    #[cfg(target_os = "linux")]
    return keeper::KEPT;
    #[cfg(not(target_os = "linux"))]
    ""
}

/// Whether `pid` is a live process (a zombie, ended and waiting to be reaped, is not).
#[cfg(target_os = "linux")]
fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')').map(|(_, rest)| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X')))
        })
        .unwrap_or(false)
}

/// A watcher of `child`'s process group: `sh` reading a pipe that only bench holds open. The read
/// returns when the pipe closes (bench dropped it, or died, kill -9 included), and the group gets
/// SIGKILL. None when it cannot be started: the group is still ended on every exit bench sees.
fn watch_group(child: &Child) -> Option<Child> {
    let pgid = child.id()?;
    Command::new("sh")
        .arg("-c")
        // Not in the server's group, and deaf to the terminal's Ctrl-C: it acts only on the pipe.
        .arg(format!("trap '' INT HUP; read -r _line; kill -s KILL -- -{pgid} 2>/dev/null"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(false)
        .spawn()
        .ok()
}

/// A port nothing listens on now (the OS picks it; the server binds it a moment later).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_command_without_a_port_or_that_dies_at_start_is_refused_clearly() {
        let err = Supervisor::start("sleep 1", 0, Duration::from_secs(5), &|_| {}).await.err().unwrap();
        assert!(err.to_string().contains("{port}"), "{err}");
        let err =
            Supervisor::start("sh -c 'echo boom >&2; exit 7' # {port}", 0, Duration::from_secs(5), &|_| {})
                .await
                .err()
                .unwrap();
        assert_eq!(err.exit_code(), crate::exit::SERVER);
        assert!(err.to_string().contains("exited with code 7") && err.to_string().contains("boom"), "{err}");
    }

    #[test]
    fn leading_assignments_stay_before_exec() {
        assert_eq!(exec_line("llama-server --port 8"), "exec llama-server --port 8");
        assert_eq!(exec_line("API_KEY=x  B_2=y llama-server -m m"), "API_KEY=x B_2=y exec llama-server -m m");
        assert_eq!(exec_line("llama-server --opt=a"), "exec llama-server --opt=a");
        // A quoted value is left to the shell whole (split on whitespace it would be cut).
        assert_eq!(exec_line("K='a b' srv"), "exec K='a b' srv");
    }

    #[test]
    fn crashes_are_described_with_their_signal_and_last_words() {
        let crash = ServerCrash {
            at: String::new(),
            exit_code: None,
            signal: Some(11),
            in_flight: "iteration 3".into(),
            stderr_tail: vec!["ggml: fatal".into()],
            restarted: true,
        };
        assert_eq!(
            describe(&crash),
            "the server died of signal 11 (SIGSEGV) during iteration 3; last stderr line: ggml: fatal"
        );
    }
}

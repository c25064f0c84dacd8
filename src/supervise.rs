//! `--server-cmd`: bench starts the server itself, watches it, and survives its crashes.
//!
//! The command is run by `sh -c` with `{port}` replaced by a free port bench picked, so users
//! write it as they would in a shell (`llama-server -m m.gguf --port {port} -ngl 99`). Bench waits
//! until `/health` (or `/v1/models`) answers, keeps the last lines of the server's stderr, and
//! between cells or iterations checks whether the process is still alive. A server that died is a
//! `ServerCrash` (exit code, signal, what was in flight, the stderr tail), recorded in run.json;
//! it is restarted on the same port, up to `max_restarts` times.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::exit::Failure;

/// Lines of the server's stderr kept for a crash report.
const STDERR_TAIL_LINES: usize = 20;
/// How long a starting server may take before bench gives up on it.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(300);

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

pub struct Supervisor {
    template: String,
    port: u16,
    child: Child,
    tail: Arc<Mutex<VecDeque<String>>>,
    pub max_restarts: u32,
    pub crashes: Vec<ServerCrash>,
    start_timeout: Duration,
}

impl Supervisor {
    /// Starts the command on a free port and waits until it answers.
    pub async fn start(
        template: &str,
        max_restarts: u32,
        start_timeout: Duration,
    ) -> Result<Supervisor, Failure> {
        if !template.contains("{port}") {
            return Err(Failure::usage(format!(
                "--server-cmd {template:?}: must contain {{port}}, where bench puts the port it picked"
            )));
        }
        let port = free_port().map_err(|e| Failure::internal(format!("cannot find a free port: {e}")))?;
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let child = spawn(template, port, &tail)?;
        let mut sup = Supervisor {
            template: template.into(),
            port,
            child,
            tail,
            max_restarts,
            crashes: Vec::new(),
            start_timeout,
        };
        sup.wait_healthy().await?;
        Ok(sup)
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The command as run (port filled in).
    pub fn command(&self) -> String {
        self.template.replace("{port}", &self.port.to_string())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Whether the server died; if so, the crash (not yet restarted).
    pub fn check(&mut self, in_flight: &str) -> Option<ServerCrash> {
        let status = self.child.try_wait().ok().flatten()?;
        #[cfg(unix)]
        let signal = std::os::unix::process::ExitStatusExt::signal(&status);
        #[cfg(not(unix))]
        let signal = None;
        let stderr_tail = self.tail.lock().map(|t| t.iter().cloned().collect()).unwrap_or_default();
        Some(ServerCrash {
            at: crate::clock::now_rfc3339(),
            exit_code: status.code(),
            signal,
            in_flight: in_flight.to_string(),
            stderr_tail,
            restarted: false,
        })
    }

    /// Records `crash` and starts the server again, unless it has used up its restarts. Err means
    /// the server is gone for good (the caller stops, everything measured kept).
    pub async fn restart(&mut self, mut crash: ServerCrash) -> Result<(), Failure> {
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
        self.child = spawn(&self.template, self.port, &self.tail)?;
        self.wait_healthy().await
    }

    async fn wait_healthy(&mut self) -> Result<(), Failure> {
        let http = crate::client::default_http()?;
        let deadline = tokio::time::Instant::now() + self.start_timeout;
        loop {
            if let Some(crash) = self.check("start") {
                return Err(Failure::server(format!(
                    "the server command {:?} exited while starting: {}",
                    self.command(),
                    describe(&crash)
                )));
            }
            for path in ["/health", "/v1/models"] {
                let answer =
                    http.get(format!("{}{path}", self.url())).timeout(Duration::from_secs(2)).send().await;
                if answer.is_ok_and(|r| r.status().is_success()) {
                    return Ok(());
                }
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Failure::server(format!(
                    "the server command {:?} did not answer /health within {:?}",
                    self.command(),
                    self.start_timeout
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// "the server died of signal 11 (SIGSEGV) during ctx 4096 cold ...; last stderr: ..."
pub fn describe(crash: &ServerCrash) -> String {
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

fn spawn(template: &str, port: u16, tail: &Arc<Mutex<VecDeque<String>>>) -> Result<Child, Failure> {
    let command = template.replace("{port}", &port.to_string());
    let mut child = Command::new("sh")
        .arg("-c")
        // `exec` so the server is the child itself: its signals and exit status are the server's.
        .arg(format!("exec {command}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Failure::usage(format!("--server-cmd {command:?}: cannot start: {e}")))?;
    if let Some(stderr) = child.stderr.take() {
        let tail = tail.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(mut t) = tail.lock() {
                    if t.len() == STDERR_TAIL_LINES {
                        t.pop_front();
                    }
                    t.push_back(crate::secrets::redact(&line));
                }
            }
        });
    }
    Ok(child)
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
        let err = Supervisor::start("sleep 1", 0, Duration::from_secs(5)).await.err().unwrap();
        assert!(err.to_string().contains("{port}"), "{err}");
        let err = Supervisor::start("sh -c 'echo boom >&2; exit 7' # {port}", 0, Duration::from_secs(5))
            .await
            .err()
            .unwrap();
        assert_eq!(err.exit_code(), crate::exit::SERVER);
        assert!(err.to_string().contains("exited with code 7") && err.to_string().contains("boom"), "{err}");
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

//! What `bench` itself adds, measured against `bench-scripted-server` in another process.
//!
//! The server logs, per request and by the prompt's nonce, when it finished reading the body and
//! when it handed each content chunk to the connection, on CLOCK_MONOTONIC (the clock of every
//! process on the host; `Instant` reads it too). The client here is bench's measuring client
//! (`ttft_client`), exactly as a sweep uses it. Per request:
//! - TTFT error = client TTFT - server TTFT (first chunk written - body read): what the client's
//!   send path and receive path add together, the figure the Python anchors are quoted in. The
//!   client's TTFT counts from the exchange's start on its lane, as a sweep's record does;
//! - queue = caller's hand-off to that start: the wait for the lane and for the requests handed
//!   to it just before to be written. A record holds it as `send_lag_ms`, beside TTFT;
//! - client-added TTFT = send (the exchange's start to the request's last byte in the kernel,
//!   which on loopback puts it in the server's socket) + arrival lag: the client's part of TTFT
//!   error, the rest being the server's time from its socket holding the request to its clock
//!   start;
//! - arrival lag = client's first-token stamp - server's write of that chunk (receive side only);
//! - ITL error = |client gap - server gap| for every pair of consecutive tokens.
//!
//! Client CPU: getrusage(RUSAGE_SELF) of this process (the client only) per 1000 requests.
//! Ingest capacity: 256 streams of 256 tokens at once, round after round for 2 s per step (one
//! round is too short to average over the machine's own stalls), the token interval lowered step
//! by step;
//! the highest output rate (from the server's log) at which the client's first-token stamp
//! (arrival lag) and its ITL stay within 1 ms of the server's log at p99. The TTFT error is
//! printed too, but at 256 simultaneous requests it mostly measures the server dispatching 256
//! bodies on the cores the client shares with it, not the client. Client and server share this
//! machine's cores, as they would in CI. Each ingest step also says where its ITL errors over 1 ms
//! fall (how many 5 ms windows of server time) and in how many of those windows one of the
//! client's cores stalled (a watch thread pinned to each: a 1 ms sleep over 1 ms late).
//!
//! Run with `just bench` (release). Prints a table and writes target/bench-overhead.json
//! (BENCH_OVERHEAD_JSON elsewhere). To give the client cores of its own on a bigger machine:
//! `BENCH_SERVER_CPUS=2-15 taskset -c 0,1 target/release/deps/external-*`.
//! `-- --quick` for a short run. Reports numbers; never asserts them.

// A benchmark's table on stdout is its output.
#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{Value, json};
use ttft_bench::prompt::{Nonces, document};
use ttft_client::{ChatRequest, Client, ClientOptions, Exchange, Message};
use ttft_model::spec::Api;
use ttft_scripted::dialect::{Counts, Endpoint, Wire};
use ttft_scripted::{Clock, Dialect, RequestTiming, TraceLine};

/// The goal of the ingest capacity: both errors within this at p99.
const MATCH_MS: f64 = 1.0;

/// Windows of server time in which large ITL errors are counted together.
const WINDOW_NS: u64 = 5_000_000;

/// How long an ingest step streams in all (rounds of 256 x 256 tokens back to back). A stall of
/// the machine of a few ms (a VM's vCPU taken away for a moment: several per second per core on
/// the GPU host, with no process of ours running) puts every stream of a lane over 1 ms at once;
/// in a step of one 64 ms round that alone is over 1% of the step, in a step of 2 s it is not.
/// A client that cannot keep up fails a long step all the same.
const INGEST_STEP: Duration = Duration::from_secs(2);

/// bench-scripted-server, started for one measurement and stopped (SIGTERM) when dropped.
struct Server {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Server {
    fn start(dir: &Path, name: &str, first_token_ms: u64, token_us: u64, dialect: Dialect) -> Server {
        let log = dir.join(format!("{name}.jsonl"));
        // BENCH_SCRIPTED_SERVER: the server binary elsewhere (a copied build on another machine);
        // BENCH_SERVER_CPUS: pin the server to these CPUs (taskset -c), so that a client pinned to
        // other cores is measured on cores of its own.
        let server = std::env::var_os("BENCH_SCRIPTED_SERVER")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_bench-scripted-server").into());
        let mut command = match std::env::var("BENCH_SERVER_CPUS") {
            Ok(cpus) => {
                let mut c = Command::new("taskset");
                c.args(["-c", &cpus]).arg(&server);
                c
            }
            Err(_) => Command::new(&server),
        };
        let mut child = command
            .args(["--port", "0", "--first-token-ms", &first_token_ms.to_string()])
            .args(["--dialect", dialect.as_str()])
            .args(["--token-ms", &format!("{}", token_us as f64 / 1000.0), "--log"])
            .arg(&log)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("bench-scripted-server starts");
        let mut url = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut url).expect("the URL line");
        Server { child, url: url.trim().to_string(), log }
    }

    /// The clock origin and every request logged so far, by nonce; waits (up to 10 s) until
    /// `expect` requests are there, since the server logs a stream just after its last byte.
    fn timings(&self, expect: usize) -> (u64, HashMap<String, RequestTiming>) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let mut origin = 0;
            let mut by_nonce = HashMap::new();
            for line in text.lines() {
                match serde_json::from_str::<TraceLine>(line) {
                    Ok(TraceLine::Clock { origin_ns, .. }) => origin = origin_ns,
                    Ok(TraceLine::Request(t)) => {
                        if let Some(n) = t.nonce.clone() {
                            by_nonce.insert(n, t);
                        }
                    }
                    Err(_) => {} // a line being written
                }
            }
            if by_nonce.len() >= expect || Instant::now() > deadline {
                return (origin, by_nonce);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Server {
    /// The server process's CPU time so far (user + system, /proc; 10 ms ticks): what it costs to
    /// produce the tokens, beside what the client spends to read them.
    fn cpu_ms(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // After the command name's closing parenthesis: state is field 3; utime, stime 14 and 15.
        let fields: Vec<&str> =
            stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(f64::NAN);
        let per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        (ticks(11) + ticks(12)) * 1000.0 / per_s
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn usage() -> libc::rusage {
    usage_of(libc::RUSAGE_SELF)
}

fn usage_of(who: libc::c_int) -> libc::rusage {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut usage) };
    usage
}

/// CPU time of this process, or with RUSAGE_THREAD of the calling thread.
fn cpu_ms_of(who: libc::c_int) -> f64 {
    let usage = usage_of(who);
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn cpu_ms() -> f64 {
    let usage = usage();
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// One thread per core the client may run on, each pinned to its core, sleeping 1 ms at a time
/// and noting every wake more than 1 ms late (when, and how late): that core was taken from the
/// client then (by the VM's host, an interrupt, another process) or was busy for that long. Where
/// ITL errors pile up in a few windows, this tells a stall of the client's cores from the rest.
/// (One unpinned watcher saw only the core it happened to be on.)
struct Watch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Each watcher's stalls and its own CPU time (ms), which the client's figures leave out.
    handles: Vec<std::thread::JoinHandle<(Stalls, f64)>>,
}

/// When a watcher woke late, and how late.
type Stalls = Vec<(Instant, Duration)>;

/// The cores this process may run on (its affinity mask: `taskset`).
fn client_cores() -> Vec<usize> {
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = size_of::<libc::cpu_set_t>();
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
}

/// Pins the calling thread to `core`. A watcher that cannot be pinned still watches, unpinned.
fn pin_to(core: usize) {
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
    }
}

impl Watch {
    fn start(cores: &[usize]) -> Watch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let handles = cores
            .iter()
            .map(|&core| {
                let flag = stop.clone();
                std::thread::spawn(move || {
                    pin_to(core);
                    let mut stalls = Vec::new();
                    // 1 ms, not less: each wake costs the core it watches (200 us naps took
                    // about 8% of a core on the GPU host's VM, in the client's CPU figure).
                    let nap = Duration::from_millis(1);
                    while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                        let before = Instant::now();
                        std::thread::sleep(nap);
                        let late = before.elapsed().saturating_sub(nap);
                        if late > Duration::from_millis(1) {
                            stalls.push((Instant::now(), late));
                        }
                    }
                    (stalls, cpu_ms_of(libc::RUSAGE_THREAD))
                })
            })
            .collect();
        Watch { stop, handles }
    }

    /// Every core's stalls together, and the watchers' CPU time (ms).
    fn stop(self) -> (Stalls, f64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (mut stalls, mut cpu) = (Vec::new(), 0.0);
        for (found, spent) in self.handles.into_iter().filter_map(|h| h.join().ok()) {
            stalls.extend(found);
            cpu += spent;
        }
        (stalls, cpu)
    }
}

/// Context switches forced on this process so far (another thread or process took its core).
fn involuntary_switches() -> i64 {
    usage().ru_nivcsw
}

fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Errors of one set of requests, against the server's log.
#[derive(Default)]
struct Errors {
    ttft_ms: Vec<f64>,
    /// From the caller's hand-off to its lane taking the request up: the client's queue, which a
    /// record counts as send lag, not TTFT (src/runner/fired.rs).
    queue_ms: Vec<f64>,
    /// From the exchange's start on its lane to the request's last byte in the kernel (direct path).
    send_ms: Vec<f64>,
    /// What the client adds to a TTFT: its send plus the first token's arrival lag. The rest of
    /// the TTFT error is the server's, from its socket holding the request to its own clock start.
    added_ms: Vec<f64>,
    arrival_ms: Vec<f64>,
    itl_ms: Vec<f64>,
    /// ITL errors over 1 ms: (pair index in its stream, server ns of the pair's second chunk).
    itl_over: Vec<(usize, u64)>,
    /// Of those, pairs the client read together (one stamp for both): it read them late.
    itl_over_same_read: usize,
    /// Requests the client or the server did not complete, or whose token counts differ.
    unmatched: usize,
}

impl Errors {
    /// `sent`: when the caller handed the request to `Client::send`. The client's TTFT counts from
    /// the exchange's own start on its lane, as a sweep's record does; the wait before it is the
    /// queue (the record's send lag).
    fn add(
        &mut self,
        clock: &Clock,
        origin_ns: u64,
        sent: Instant,
        ex: &Exchange,
        server: Option<&RequestTiming>,
    ) {
        let (Some(t), Some(start), Some(ttft)) = (server, ex.start, ex.ttft_ms) else {
            self.unmatched += 1;
            return;
        };
        if ex.error.is_some() || !t.completed || t.chunk_ns.len() != ex.token_offsets_ms.len() {
            self.unmatched += 1;
            return;
        }
        let Some(first) = t.first_content_ns else { return };
        let server_ttft_ms = (first - t.body_read_ns) as f64 / 1e6;
        let arrived = start + Duration::from_secs_f64(ttft / 1000.0);
        self.ttft_ms.push(ttft - server_ttft_ms);
        self.queue_ms.push(start.saturating_duration_since(sent).as_secs_f64() * 1000.0);
        let lag_ms = (clock.offset_ns(arrived, origin_ns) - first as i64) as f64 / 1e6;
        self.arrival_ms.push(lag_ms);
        if let Some(send_ms) = ex.request_written_ms {
            self.send_ms.push(send_ms);
            self.added_ms.push(send_ms + lag_ms);
        }
        for (i, (c, s)) in ex.token_offsets_ms.windows(2).zip(t.chunk_ns.windows(2)).enumerate() {
            let server_gap = (s[1] - s[0]) as f64 / 1e6;
            let error = ((c[1] - c[0]) - server_gap).abs();
            self.itl_ms.push(error);
            if error > MATCH_MS {
                self.itl_over.push((i, s[1]));
                self.itl_over_same_read += usize::from(c[1] == c[0]);
            }
        }
    }

    /// Where the ITL errors over 1 ms sit, by 5 ms window of server time: in a few windows (a
    /// stall) or spread out (load).
    fn over_windows(&self) -> HashMap<u64, usize> {
        let mut windows: HashMap<u64, usize> = HashMap::new();
        for (_, at) in &self.itl_over {
            *windows.entry(at / WINDOW_NS).or_default() += 1;
        }
        windows
    }

    fn summary(&self) -> Value {
        let p = |v: &[f64], q| (percentile(v, q) * 1000.0).round() / 1000.0;
        let windows = self.over_windows();
        json!({
            "n": self.ttft_ms.len(), "unmatched": self.unmatched,
            "ttft_error_p50_ms": p(&self.ttft_ms, 0.5), "ttft_error_p99_ms": p(&self.ttft_ms, 0.99),
            "client_queue_p50_ms": p(&self.queue_ms, 0.5), "client_queue_p99_ms": p(&self.queue_ms, 0.99),
            "client_send_p50_ms": p(&self.send_ms, 0.5), "client_send_p99_ms": p(&self.send_ms, 0.99),
            "client_added_ttft_p50_ms": p(&self.added_ms, 0.5), "client_added_ttft_p99_ms": p(&self.added_ms, 0.99),
            "arrival_lag_p50_ms": p(&self.arrival_ms, 0.5), "arrival_lag_p99_ms": p(&self.arrival_ms, 0.99),
            "itl_error_p50_ms": p(&self.itl_ms, 0.5), "itl_error_p99_ms": p(&self.itl_ms, 0.99),
            "itl_pairs": self.itl_ms.len(), "itl_over_1ms": self.itl_over.len(),
            "itl_over_1ms_read_together": self.itl_over_same_read,
            "itl_over_1ms_in_first_4": self.itl_over.iter().filter(|(i, _)| *i < 4).count(),
            "itl_over_1ms_windows_5ms": windows.len(),
        })
    }
}

fn request(nonce: &str, max_tokens: u32) -> ChatRequest {
    ChatRequest {
        model: "scripted".into(),
        messages: vec![Message::new("user", document(7, nonce, 400))],
        max_tokens,
        stream: true,
        ..Default::default()
    }
}

/// `rounds` batches of `concurrency` simultaneous requests (after one unmeasured round that opens
/// the connections); the exchanges by nonce and the client CPU they cost.
fn rounds(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    nonces: &Nonces,
    concurrency: usize,
    rounds: usize,
    max_tokens: u32,
) -> (Vec<(String, Instant, Exchange)>, f64) {
    let one = |max_tokens| {
        let batch: Vec<(String, _)> = (0..concurrency)
            .map(|_| {
                let nonce = nonces.next();
                let prepared = client.prepare(&request(&nonce, max_tokens)).expect("request builds");
                (nonce, prepared)
            })
            .collect();
        rt.block_on(join_all(
            batch.into_iter().map(|(nonce, p)| async move { (nonce, Instant::now(), client.send(p).await) }),
        ))
    };
    one(4);
    let cpu = cpu_ms();
    let mut all = Vec::new();
    for _ in 0..rounds {
        all.extend(one(max_tokens));
    }
    (all, cpu_ms() - cpu)
}

fn client(url: &str) -> Client {
    Client::new(url, Api::Openai, None, Duration::from_secs(120), ClientOptions::default()).expect("client")
}

/// TTFT/ITL errors and client CPU at one concurrency (fresh server: first token 20 ms, 1 ms/token).
fn overhead(rt: &tokio::runtime::Runtime, dir: &Path, concurrency: usize, n_rounds: usize) -> Value {
    let max_tokens = 32;
    let server = Server::start(dir, &format!("c{concurrency}"), 20, 1000, Dialect::default());
    let client = client(&server.url);
    let nonces = Nonces::new();
    let (exchanges, cpu) = rounds(rt, &client, &nonces, concurrency, n_rounds, max_tokens);
    let (origin, log) = server.timings(exchanges.len() + concurrency);
    let clock = Clock::now();
    let mut errors = Errors::default();
    for (nonce, sent, ex) in &exchanges {
        errors.add(&clock, origin, *sent, ex, log.get(nonce));
    }
    let mut row = errors.summary();
    row["concurrency"] = json!(concurrency);
    row["output_tokens"] = json!(max_tokens);
    row["client_cpu_ms_per_1000_requests"] = json!((cpu / exchanges.len() as f64 * 1000.0).round());
    row
}

/// One ingest step: rounds of 256 streams of 256 tokens at `token_us` apart, as many rounds as
/// stream for `INGEST_STEP` in all; the achieved rate from the server's log (all chunks / the
/// rounds' first-to-last writes) and the errors of all rounds together.
fn ingest_step(rt: &tokio::runtime::Runtime, dir: &Path, token_us: u64, dialect: Dialect) -> Value {
    let (streams, tokens) = (256usize, 256u32);
    let round_us = tokens as u64 * token_us;
    let n_rounds = INGEST_STEP.as_micros().div_ceil(round_us as u128).max(1) as usize;
    let server = Server::start(dir, &format!("ingest-{dialect}-{token_us}us"), 20, token_us, dialect);
    let client = client(&server.url);
    let nonces = Nonces::new();
    let (watch, switched) = (Watch::start(&client_cores()), involuntary_switches());
    let (before, server_cpu) = (ttft_client::read_counts(), server.cpu_ms());
    let (exchanges, cpu) = rounds(rt, &client, &nonces, streams, n_rounds, tokens);
    let server_cpu = server.cpu_ms() - server_cpu;
    let ((stalls, watch_cpu_ms), switched) = (watch.stop(), involuntary_switches() - switched);
    let reads = ttft_client::read_counts().since(before);
    let (origin, log) = server.timings(exchanges.len() + streams);
    let clock = Clock::now();
    let mut errors = Errors::default();
    let (mut streaming_ns, mut chunks, mut start_spreads_ms) = (0u64, 0usize, Vec::new());
    for round in exchanges.chunks(streams) {
        let (mut first, mut last) = (u64::MAX, 0u64);
        let (mut first_read, mut last_read) = (u64::MAX, 0u64);
        for (nonce, sent, ex) in round {
            let t = log.get(nonce);
            if let Some(t) = t {
                first = first.min(t.chunk_ns.first().copied().unwrap_or(u64::MAX));
                last = last.max(t.chunk_ns.last().copied().unwrap_or(0));
                (first_read, last_read) = (first_read.min(t.body_read_ns), last_read.max(t.body_read_ns));
                chunks += t.chunk_ns.len();
            }
            errors.add(&clock, origin, *sent, ex, t);
        }
        streaming_ns += last.saturating_sub(first);
        start_spreads_ms.push(last_read.saturating_sub(first_read) as f64 / 1e6);
    }
    let seconds = streaming_ns as f64 / 1e9;
    let mut row = errors.summary();
    let nominal = streams as f64 * 1e6 / token_us as f64;
    row["dialect"] = json!(dialect.as_str());
    row["token_interval_us"] = json!(token_us);
    row["rounds"] = json!(n_rounds);
    // How long the server took to read all of a round's 256 bodies: the same in every round of a
    // step, unless the server slows down as it serves more requests.
    row["round_start_spread_ms_first_median_last"] = json!([
        start_spreads_ms.first().copied().unwrap_or(f64::NAN).round(),
        percentile(&start_spreads_ms, 0.5).round(),
        start_spreads_ms.last().copied().unwrap_or(f64::NAN).round(),
    ]);
    row["nominal_tokens_per_s"] = json!(nominal.round());
    row["achieved_tokens_per_s"] = json!((chunks as f64 / seconds.max(1e-9)).round());
    row["client_cpu_ms"] = json!((cpu - watch_cpu_ms).max(0.0).round());
    row["watchers_cpu_ms"] = json!(watch_cpu_ms.round());
    // Per token streamed: where client and server share cores, their sum bounds the rate.
    let per_token = |ms: f64| json!((ms * 1000.0 / chunks.max(1) as f64 * 100.0).round() / 100.0);
    row["client_cpu_us_per_token"] = per_token((cpu - watch_cpu_ms).max(0.0));
    row["server_cpu_ms"] = json!(server_cpu.round());
    row["server_cpu_us_per_token"] = per_token(server_cpu);
    // Which error windows the client process was seen stalled in (within a window either side).
    let stalled: std::collections::HashSet<u64> = stalls
        .iter()
        .flat_map(|&(woke, late)| {
            let ns = |at: Instant| clock.offset_ns(at, origin).max(0) as u64 / WINDOW_NS;
            ns(woke - late).saturating_sub(1)..=ns(woke) + 1
        })
        .collect();
    let windows = errors.over_windows();
    row["client_stalls_over_1ms"] = json!(stalls.len());
    row["client_stall_max_ms"] = json!(stalls.iter().map(|s| s.1.as_secs_f64() * 1000.0).fold(0.0, f64::max));
    row["itl_over_1ms_windows_with_client_stall"] =
        json!(windows.keys().filter(|w| stalled.contains(w)).count());
    row["client_involuntary_switches"] = json!(switched);
    // Reads stamped with the kernel's arrival time, and reads stamped when they returned.
    row["reads_kernel_stamped"] = json!(reads.kernel_stamped);
    row["reads_stamped_on_return"] = json!(reads.stamped_on_return);
    // Peeks of lanes behind: each one lets the events it saw be read one at a time.
    row["peeks_while_behind"] = json!(reads.peeks_while_behind);
    // Reads that found the socket empty: a syscall that bought nothing.
    row["reads_found_empty"] = json!(reads.found_empty);
    let p99 = |k: &str| row[k].as_f64().unwrap_or(f64::INFINITY);
    let matched =
        errors.unmatched == 0 && p99("arrival_lag_p99_ms") <= MATCH_MS && p99("itl_error_p99_ms") <= MATCH_MS;
    row["within_1ms_p99"] = json!(matched);
    row
}

/// The bytes of one one-token content event (`data: ...\n\n`) as the dialect's server sends it.
fn event_bytes(dialect: Dialect) -> usize {
    let wire = Wire {
        dialect,
        endpoint: Endpoint::Chat,
        id: "chatcmpl-Ab3dEf7hIj1lMn5pQr9tUv3xYz7bCd1f".into(),
        created: 1_764_145_200,
        include_usage: true,
        continuous_usage: false,
        cache_report: true,
    };
    let chunk = wire.content_chunk(" w123", Counts::default(), None);
    "data: ".len() + chunk.len() + 2
}

fn ms(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |x| format!("{x:.3}"))
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let dir = tempfile::tempdir().expect("temp dir");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let plan: &[(usize, usize)] =
        if quick { &[(1, 50), (64, 2), (256, 1)] } else { &[(1, 300), (64, 10), (256, 4)] };
    // The client's path for plain HTTP (crates/client/src/direct.rs); reqwest's when asked, to compare.
    let transport = match std::env::var("TTFT_BENCH_TRANSPORT") {
        Ok(v) if v == "reqwest" => "reqwest",
        _ => "direct",
    };
    println!(
        "bench's measuring client ({transport} path) vs bench-scripted-server (another process), errors in ms"
    );
    println!(
        "{:>5} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>13}",
        "conc",
        "n",
        "ttft p50",
        "ttft p99",
        "queue p50",
        "queue p99",
        "added p50",
        "added p99",
        "lag p50",
        "lag p99",
        "itl p50",
        "itl p99",
        "cpu ms/1000"
    );
    let mut overhead_rows = Vec::new();
    for &(c, r) in plan {
        let row = overhead(&rt, dir.path(), c, r);
        println!(
            "{c:>5} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>13}",
            row["n"],
            ms(&row["ttft_error_p50_ms"]),
            ms(&row["ttft_error_p99_ms"]),
            ms(&row["client_queue_p50_ms"]),
            ms(&row["client_queue_p99_ms"]),
            ms(&row["client_added_ttft_p50_ms"]),
            ms(&row["client_added_ttft_p99_ms"]),
            ms(&row["arrival_lag_p50_ms"]),
            ms(&row["arrival_lag_p99_ms"]),
            ms(&row["itl_error_p50_ms"]),
            ms(&row["itl_error_p99_ms"]),
            row["client_cpu_ms_per_1000_requests"]
        );
        overhead_rows.push(row);
    }
    // The chunk shapes the client ingests: bare (choices only, ~60 bytes a token) and llama.cpp's
    // (id, created, model, fingerprint, object: ~220 bytes, timings on the last chunk), or those
    // named in BENCH_INGEST_DIALECTS (comma-separated).
    let dialects: Vec<Dialect> = std::env::var("BENCH_INGEST_DIALECTS")
        .unwrap_or_else(|_| "bare,llama.cpp".into())
        .split(',')
        .map(|d| d.trim().parse().unwrap_or_else(|e| panic!("BENCH_INGEST_DIALECTS: {e}")))
        .collect();
    let steps: &[u64] =
        if quick { &[4000, 1000, 250] } else { &[32000, 16000, 8000, 4000, 2000, 1000, 700, 500, 350, 250] };
    let mut ingest_rows = Vec::new();
    let mut capacities = serde_json::Map::new();
    for &dialect in &dialects {
        println!(
            "\ningest, {dialect} chunks ({} bytes a one-token event): rounds of 256 streams x 256 tokens at once, {} s per step; within = arrival lag and ITL error p99 <= {MATCH_MS} ms",
            event_bytes(dialect),
            INGEST_STEP.as_secs()
        );
        println!(
            "{:>9} {:>12} {:>12} {:>9} {:>9} {:>9} {:>9} {:>8} {:>13} {:>9} {:>10} {:>9} {:>13}",
            "interval",
            "nominal t/s",
            "achieved t/s",
            "ttft p99",
            "lag p99",
            "itl p99",
            "unmatched",
            "within",
            "itl>1ms n/win",
            "stalled",
            "unstamped",
            "peeks",
            "us/tok c+s"
        );
        let mut capacity: Option<f64> = None;
        for &us in steps {
            let row = ingest_step(&rt, dir.path(), us, dialect);
            println!(
                "{:>7}us {:>12} {:>12} {:>9} {:>9} {:>9} {:>9} {:>8} {:>13} {:>9} {:>10} {:>9} {:>13}",
                us,
                row["nominal_tokens_per_s"],
                row["achieved_tokens_per_s"],
                ms(&row["ttft_error_p99_ms"]),
                ms(&row["arrival_lag_p99_ms"]),
                ms(&row["itl_error_p99_ms"]),
                row["unmatched"],
                row["within_1ms_p99"],
                format!("{}/{}", row["itl_over_1ms"], row["itl_over_1ms_windows_5ms"]),
                format!(
                    "{}/{}",
                    row["itl_over_1ms_windows_with_client_stall"], row["client_stalls_over_1ms"]
                ),
                row["reads_stamped_on_return"],
                row["peeks_while_behind"],
                format!("{}+{}", row["client_cpu_us_per_token"], row["server_cpu_us_per_token"])
            );
            if row["within_1ms_p99"] == json!(true) {
                let achieved = row["achieved_tokens_per_s"].as_f64().unwrap_or(0.0);
                capacity = Some(capacity.map_or(achieved, |c: f64| c.max(achieved)));
            }
            ingest_rows.push(row);
        }
        match capacity {
            Some(c) => println!(
                "ingest capacity, {dialect} chunks (first-token stamp and ITL within {MATCH_MS} ms p99): {c:.0} tokens/s"
            ),
            None => println!("ingest capacity, {dialect} chunks: no step stayed within {MATCH_MS} ms p99"),
        }
        capacities.insert(dialect.as_str().into(), json!(capacity));
    }
    // The headline is the realistic shape where it was measured.
    let capacity = capacities.get("llama.cpp").or_else(|| capacities.values().next()).cloned();
    let host = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let report = json!({
        "benchmark": "external", "cores": host, "quick": quick, "transport": transport,
        "overhead": overhead_rows, "ingest": ingest_rows, "ingest_capacity_tokens_per_s": capacity,
        "ingest_capacity_tokens_per_s_by_dialect": capacities,
    });
    let out = std::env::var_os("BENCH_OVERHEAD_JSON").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-overhead.json"),
        PathBuf::from,
    );
    match std::fs::write(&out, serde_json::to_string_pretty(&report).unwrap_or_default()) {
        Ok(()) => println!("written: {}", out.display()),
        Err(e) => eprintln!("cannot write {}: {e}", out.display()),
    }
}

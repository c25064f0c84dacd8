//! The highest arrival rate `bench load` can offer honestly on this machine: send lag p99 under
//! 1 ms, against the scripted server in this process (cold requests, 16 output tokens, a server
//! fast enough never to be the bottleneck: 5 ms to the first token, 1 ms a token).
//!
//! Runs the release `bench load` binary over a ladder of doubling rates and reads each rate's
//! send-lag distribution from its load-summary.json. The lag measured is the whole client's:
//! dispatcher, send task, request serialization and the HTTP client handing the request to the
//! socket. Run with `just bench`. Reports numbers, never asserts speed (the machine is shared).

#[path = "../tests/common/scripted.rs"]
mod scripted;

use std::process::Command;

use scripted::{Behaviour, Scripted};

const RATES: &str = "25,50,100,200,400,800,1600,3200";
const SECONDS_PER_RATE: &str = "3s";

fn main() {
    let server = Scripted::start(Behaviour { first_token_ms: 5, token_ms: 1, ..Default::default() });
    let out = tempfile::tempdir().expect("a temporary directory");
    // TTFT_BENCH_BIN: the bench binary to measure, when this one runs away from its build tree.
    let bin = std::env::var("TTFT_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_bench").to_string());
    let status = Command::new(bin)
        .args(["load", "--server", &server.url, "--rates", RATES, "--duration", SECONDS_PER_RATE])
        .args(["--mix", "cold=1", "--contexts", "256", "--output-tokens", "16", "--thermal", "off"])
        .args(["--prepare-ahead", "64", "--quiet", "--run-id", "rate", "--out"])
        .arg(out.path())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("bench load runs");
    // Exit 1 is expected: the top rates are not honestly offered (that is what is measured).
    assert!(matches!(status.code(), Some(0 | 1)), "bench load failed: {status}");
    let text = std::fs::read_to_string(out.path().join("rate/load-summary.json")).expect("a summary");
    let summary: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "bench load send lag against the in-process scripted server ({cores} cores, {SECONDS_PER_RATE} a rate)"
    );
    println!(
        "{:>8} {:>6} {:>10} {:>10} {:>10} {:>10}  offered",
        "rate/s", "sent", "p50 ms", "p90 ms", "p99 ms", "max ms"
    );
    let (mut best, mut broken) = (None, false);
    for r in summary["rates"].as_array().into_iter().flatten() {
        let lag = &r["send_lag_ms"];
        let f = |k: &str| lag[k].as_f64().map_or("-".into(), |v| format!("{v:.3}"));
        let honest = r["honestly_offered"].as_bool() == Some(true);
        println!(
            "{:>8} {:>6} {:>10} {:>10} {:>10} {:>10} {:>6}  {}",
            r["rate_per_s"].as_f64().unwrap_or(0.0),
            r["sent"].as_u64().unwrap_or(0),
            f("p50"),
            f("p90"),
            f("p99"),
            f("max"),
            r["prepared_late"].as_u64().unwrap_or(0),
            if honest { "honestly" } else { "NOT honestly" }
        );
        // The top of the unbroken run of honest rates from the bottom of the ladder.
        broken |= !honest;
        if !broken {
            best = r["rate_per_s"].as_f64();
        }
    }
    match best {
        Some(r) => println!("highest rate offered with send lag p99 < 1 ms: {r}/s"),
        None => println!("no rate of the ladder was offered with send lag p99 < 1 ms"),
    }
}

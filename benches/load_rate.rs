//! The highest arrival rate `bench load` can offer honestly on this machine: send lag p99 under
//! 1 ms, against the scripted server in this process (cold requests, 16 output tokens, a server
//! fast enough never to be the bottleneck: 5 ms to the first token, 1 ms a token).
//!
//! Runs the release `bench load` binary once per rate of a ladder (1 to 5000 requests/s), each
//! long enough for its p99 to rest on about `SAMPLES` sends (at least 2 s, at most 60 s), and reads
//! the rate's send-lag distribution from its load-summary.json. The lag measured is the whole
//! client's: dispatcher, send task, request serialization and the HTTP client handing the request
//! to the socket. The ladder stops early once even the median send is late (the client is
//! saturated: every higher rate would be too).
//!
//! Prints a line per rate, then the highest rate offered with p99 send lag under 1 ms, and writes
//! all of it to target/load-rate.json (or $CARGO_TARGET_DIR/load-rate.json), with the machine's
//! core count and load average: on a busy host the p99 is the wait for a core, not the client.
//! Reports numbers, never asserts speed. LOAD_RATE_LADDER (e.g. "1,10,100") and LOAD_RATE_SAMPLES
//! override the ladder and the sample count.

// A benchmark's table on stdout is its output.
#![allow(clippy::print_stdout)]

#[path = "../tests/common/scripted.rs"]
mod scripted;

use std::path::PathBuf;
use std::process::Command;

use scripted::{Behaviour, Scripted};
use serde_json::{Value, json};

const LADDER: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0];
/// Sends per rate its p99 should rest on (the p99 of 100 sends is its second-highest, nearly).
const SAMPLES: f64 = 100.0;
const MIN_SECONDS: f64 = 2.0;
const MAX_SECONDS: f64 = 60.0;

fn ladder() -> Vec<f64> {
    match std::env::var("LOAD_RATE_LADDER") {
        Ok(text) => text.split(',').filter_map(|r| r.trim().parse().ok()).collect(),
        Err(_) => LADDER.to_vec(),
    }
}

fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(text.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

fn out_file() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("load-rate.json")
}

/// One rate in its own `bench load` run; its summary's row.
fn measure(bin: &str, url: &str, rate: f64, seconds: f64) -> Value {
    let out = tempfile::tempdir().expect("a temporary directory");
    let ran = Command::new(bin)
        .args(["load", "--server", url, "--rates", &rate.to_string()])
        .args(["--duration", &format!("{seconds}s"), "--mix", "cold=1", "--contexts", "256"])
        .args(["--output-tokens", "16", "--thermal", "off", "--prepare-ahead", "64", "--quiet"])
        .args(["--run-id", "rate", "--out"])
        .arg(out.path())
        .output()
        .expect("bench load runs");
    // Exit 1 is expected where the rate is not honestly offered (that is what is measured).
    assert!(
        matches!(ran.status.code(), Some(0 | 1)),
        "bench load at {rate}/s failed: {}: {}",
        ran.status,
        String::from_utf8_lossy(&ran.stderr)
    );
    let text = std::fs::read_to_string(out.path().join("rate/load-summary.json")).expect("a summary");
    let summary: Value = serde_json::from_str(&text).expect("JSON");
    summary["rates"][0].clone()
}

fn main() {
    let server =
        Scripted::start(Behaviour { first_token_ms: 5, token_ms: 1, catch_up: true, ..Default::default() });
    // TTFT_BENCH_BIN: the bench binary to measure, when this one runs away from its build tree.
    let bin = std::env::var("TTFT_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_bench").to_string());
    let samples: f64 =
        std::env::var("LOAD_RATE_SAMPLES").ok().and_then(|s| s.parse().ok()).unwrap_or(SAMPLES);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load_before = load_average();
    println!(
        "bench load send lag against the in-process scripted server ({cores} cores, load average {})",
        load_before.as_deref().unwrap_or("unknown")
    );
    println!(
        "{:>8} {:>6} {:>6} {:>10} {:>10} {:>10} {:>10} {:>6}  offered",
        "rate/s", "secs", "sent", "p50 ms", "p90 ms", "p99 ms", "max ms", "late"
    );
    let mut rows = Vec::new();
    for rate in ladder() {
        let seconds = (samples / rate).clamp(MIN_SECONDS, MAX_SECONDS);
        let r = measure(&bin, &server.url, rate, seconds);
        let lag = &r["send_lag_ms"];
        let f = |k: &str| lag[k].as_f64().map_or("-".into(), |v| format!("{v:.3}"));
        let honest = r["honestly_offered"].as_bool() == Some(true);
        println!(
            "{:>8} {:>6} {:>6} {:>10} {:>10} {:>10} {:>10} {:>6}  {}",
            rate,
            seconds,
            r["sent"].as_u64().unwrap_or(0),
            f("p50"),
            f("p90"),
            f("p99"),
            f("max"),
            r["prepared_late"].as_u64().unwrap_or(0),
            if honest { "honestly" } else { "NOT honestly" }
        );
        let saturated = lag["p50"].as_f64().is_some_and(|p| p > 1.0);
        rows.push(json!({
            "rate_per_s": rate,
            "seconds": seconds,
            "sent": r["sent"],
            "send_lag_ms": lag,
            "prepared_late": r["prepared_late"],
            "honestly_offered": honest,
        }));
        if saturated {
            println!(
                "(the median send is late at {rate}/s: the client is saturated; higher rates are not tried)"
            );
            break;
        }
    }
    let honest = |row: &&Value| row["honestly_offered"].as_bool() == Some(true);
    let best = rows
        .iter()
        .filter(honest)
        .filter_map(|r| r["rate_per_s"].as_f64())
        .fold(None, |a: Option<f64>, r| Some(a.map_or(r, |a| a.max(r))));
    // Whether every rate below the best was honest too (on a busy host a low rate can miss by a
    // scheduling hiccup that a higher one happened not to meet).
    let unbroken = best.is_some_and(|b| {
        rows.iter().filter(|r| r["rate_per_s"].as_f64().is_some_and(|x| x <= b)).all(|r| honest(&r))
    });
    match best {
        Some(r) if unbroken => println!("highest rate offered with send lag p99 < 1 ms: {r}/s"),
        Some(r) => println!(
            "highest rate offered with send lag p99 < 1 ms: {r}/s (but not every lower rate was: a busy host)"
        ),
        None => println!("no rate of the ladder was offered with send lag p99 < 1 ms"),
    }
    let report = json!({
        "highest_honest_rate_per_s": best,
        "every_lower_rate_honest": unbroken,
        "honest_lag_p99_ms": 1.0,
        "cores": cores,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "samples_per_rate": samples,
        "rates": rows,
    });
    let path = out_file();
    let written = std::fs::create_dir_all(path.parent().unwrap_or(&path))
        .and_then(|()| std::fs::write(&path, serde_json::to_vec_pretty(&report).unwrap_or_default()));
    match written {
        Ok(()) => println!("written: {}", path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", path.display()),
    }
}

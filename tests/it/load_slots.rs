//! `bench load` on a slot-pinned server: the scripted server speaking llama.cpp (`/props`
//! total_slots 2, `id_slot`, slot erase/save/restore, `cache_prompt`) driven with `--preset
//! llama.cpp`. Cold arrivals reuse nothing and need no slot of their own, so a cold mix is offered
//! as scheduled; warm and hot sessions still lease slots; a rate not honestly offered says why in
//! one line; the rate search offers the synchronous pass's own rate; the plot marks what was not
//! honestly offered; the progress moves while a rate runs.

use crate::common;

use std::path::Path;

use common::scripted::{Behaviour, Logged, Scripted};
use common::{bench, measurements, run_dir, stderr};
use serde_json::Value;

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn load(url: &str, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["load", "--server", url, "--out", out.to_str().unwrap(), "--thermal", "off"];
    args.extend_from_slice(&["--preset", "llama.cpp", "--contexts", "256", "--output-tokens", "24"]);
    args.extend_from_slice(extra);
    bench(&args)
}

/// A second before the first token of a prompt computed whole: at 2 arrivals/s, Poisson arrivals
/// often come three within one request's time, more than 2 slots hold at once; and the honesty
/// limit (2% of the median TTFT, 20 ms) is far above the send lag of a busy test machine.
fn slow_server() -> Scripted {
    Scripted::start(Behaviour { first_token_ms: 1000, token_ms: 1, ..Default::default() })
}

/// The chat requests the server received at the measured size (a hot session's earlier turns
/// too).
fn chats(server: &Scripted) -> Vec<Logged> {
    server
        .log()
        .into_iter()
        .filter(|l| l.path.starts_with("/v1/chat") && l.body["max_tokens"].as_u64() == Some(24))
        .collect()
}

/// The nonce opening a request's prompt (`[ref NONCE] ...`): the record of the session names it.
fn nonce_of(body: &Value) -> String {
    let text = body["messages"][0]["content"].as_str().unwrap_or_default();
    text.strip_prefix("[ref ").and_then(|t| t.split(']').next()).unwrap_or_default().to_string()
}

/// Slot erases after the setup's last chat request (`setup` tells its bodies apart): the one that
/// may follow it is its own cleanup; the rest are the sessions'.
fn erases_after_setup(log: &[Logged], setup: impl Fn(&Value) -> bool) -> usize {
    let chat = |l: &Logged| l.path.starts_with("/v1/chat");
    let last = log.iter().rposition(|l| chat(l) && setup(&l.body)).expect("setup sends a warm-up request");
    log[last + 1..].iter().filter(|l| l.path.contains("action=erase")).count()
}

#[test]
fn a_cold_mix_on_a_slot_pinned_server_is_offered_as_scheduled_on_no_slot_and_every_arrival_is_confirmed() {
    let server = slow_server();
    let dir = tempfile::tempdir().unwrap();
    let out =
        load(&server.url, dir.path(), &["--rates", "2", "--duration", "4s", "--mix", "cold=1", "--quiet"]);
    let run = run_dir(dir.path());
    let ms = measurements(&run);
    assert!(ms.len() >= 4, "the seeded schedule has about 8 arrivals: {}", ms.len());
    for m in &ms {
        assert!(m["error"].is_null(), "{}", m["error"]);
        assert_eq!(m["cache_state_confirmed"], true, "{}", m["cache_evidence"]);
    }
    let summary = json(&run.join("load-summary.json"));
    let rate = &summary["rates"][0];
    assert_eq!(rate["honestly_offered"], true, "{rate}\n{}", stderr(&out));
    assert_eq!(rate["prepared_late"], 0, "{rate}");
    assert!(rate["not_honest_why"].is_null(), "{rate}");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Each cold request went to no slot, with the prompt cache off: the server reused nothing, and
    // no slot was erased for it (it needs no reset and no cleanup).
    let bodies = chats(&server);
    assert_eq!(bodies.len(), ms.len());
    for l in &bodies {
        assert!(l.body.get("id_slot").is_none(), "{}", l.body);
        assert_eq!(l.body["cache_prompt"], false, "{}", l.body);
    }
    let ours = |body: &Value| ms.iter().any(|m| m["nonce"] == nonce_of(body).as_str());
    assert!(erases_after_setup(&server.log(), |body| !ours(body)) <= 1, "no slot action for cold arrivals");
}

#[test]
fn a_mix_with_hot_still_leases_slots_and_sends_cold_to_a_slot_no_session_holds() {
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 1, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = load(
        &server.url,
        dir.path(),
        &["--rates", "4", "--duration", "3s", "--mix", "cold=0.5,hot=0.5", "--quiet"],
    );
    let run = run_dir(dir.path());
    assert_eq!(json(&run.join("run.json"))["load"]["slots_held"], 2);
    let ms = measurements(&run);
    for state in ["cold", "hot"] {
        assert!(ms.iter().any(|m| m["cache_state"] == state), "no {state} arrival drawn: {}", stderr(&out));
    }
    for m in &ms {
        assert!(m["error"].is_null(), "{}", m["error"]);
        assert_eq!(m["cache_state_confirmed"], true, "{} {}", m["cache_state"], m["cache_evidence"]);
    }
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    // Which measured request was which: its record's nonce opens its first message.
    let state_of = |body: &Value| {
        let nonce = nonce_of(body);
        ms.iter()
            .find(|m| m["nonce"] == nonce.as_str())
            .map(|m| m["cache_state"].as_str().unwrap().to_string())
    };
    let log = server.log();
    let bodies = chats(&server);
    assert!(bodies.len() > ms.len(), "hot sessions send their earlier turns too");
    for l in &bodies {
        match state_of(&l.body).as_deref() {
            // A hot session's turns go to the slot it leased, reusing what the earlier ones left.
            Some("hot") => assert_eq!(l.body["cache_prompt"], true, "{}", l.body),
            // Beside sessions that hold slots, a cold request is pinned to a slot: sent to none,
            // llama-server would give it the least recently used idle slot, a session's maybe.
            Some("cold") => {
                assert!(l.body["id_slot"].is_u64(), "{}", l.body);
                assert_eq!(l.body["cache_prompt"], false, "{}", l.body);
            }
            other => panic!("a measured request of no record ({other:?}): {}", l.body),
        }
        assert!(l.body["id_slot"].as_u64().is_some_and(|s| s < 2), "{}", l.body);
    }
    // Hot sessions erase their slot before their first turn and after their last; cold ones never
    // (counted after the setup, which erases slots too).
    let erases = erases_after_setup(&log, |body| state_of(body).is_none());
    let hot = ms.iter().filter(|m| m["cache_state"] == "hot").count();
    assert!(
        (2 * hot..=2 * hot + 1).contains(&erases),
        "{erases} erases for {hot} hot sessions and the rest cold"
    );
}

#[test]
fn a_rate_not_honestly_offered_says_why_in_one_line_and_the_plot_marks_it() {
    let server = slow_server();
    let dir = tempfile::tempdir().unwrap();
    let out =
        load(&server.url, dir.path(), &["--rates", "2", "--duration", "4s", "--mix", "hot=1", "--quiet"]);
    let run = run_dir(dir.path());
    let summary = json(&run.join("load-summary.json"));
    let rate = &summary["rates"][0];
    assert_eq!(rate["honestly_offered"], false, "{rate}");
    let why = rate["not_honest_why"].as_str().unwrap_or_default();
    for says in ["in bench", "2 pinned slots", "lower the rate", "--parallel", "cold-only mix"] {
        assert!(why.contains(says), "{says:?} in {why:?}");
    }
    let err = stderr(&out);
    let line = err.lines().find(|l| l.contains("NOT honestly offered:")).unwrap_or_default();
    assert!(line.starts_with("Rate 2/s (run 1)") && line.ends_with(why), "{err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    let svg = std::fs::read_to_string(run.join("load-ttft-p99.svg")).unwrap();
    assert!(svg.contains(ttft_bench::load::plot::NOT_HONEST_LABEL), "the rate is marked on the plot");
    assert!(svg.contains("hot p99 from the scheduled send"), "TTFT from the scheduled send is drawn");
}

#[test]
fn the_rate_search_offers_the_synchronous_pass_s_own_rate_first() {
    // One request at a time: 64 users complete no more than one does.
    let server = Scripted::start(Behaviour {
        first_token_ms: 100,
        token_ms: 1,
        max_concurrent: Some(1),
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = load(
        &server.url,
        dir.path(),
        &["--rates", "auto", "--duration", "2s", "--search-steps", "1", "--slo", "ttft=2s", "--quiet"],
    );
    let search = &json(&run_dir(dir.path()).join("run.json"))["load"]["search"];
    let steps = search["steps"].as_array().unwrap();
    assert_eq!(steps[0]["kind"], "synchronous", "{search}\n{}", stderr(&out));
    let sync = steps[0]["achieved_rate_per_s"].as_f64().unwrap();
    let first_rate = steps.iter().find(|s| s["kind"] == "rate").expect("a rate offered");
    let offered = first_rate["rate_per_s"].as_f64().unwrap();
    // Offered to 3 significant digits.
    assert!(
        (offered - sync).abs() <= sync * 0.005,
        "offered {offered}/s, one user achieved {sync}/s: {search}"
    );
}

#[test]
fn the_progress_moves_while_a_rate_runs() {
    let server = Scripted::start(Behaviour { first_token_ms: 20, token_ms: 1, ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let out = load(&server.url, dir.path(), &["--rates", "4", "--duration", "4s", "--mix", "cold=1"]);
    let err = stderr(&out);
    let n = measurements(&run_dir(dir.path())).len();
    // Lines (stderr is no terminal here): each tenth of the rate's duration says how far it got.
    let partial: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("rate 4/s (run 1): ") && l.contains("% of 4s"))
        .filter(|l| {
            let done: usize =
                l.split(", ").nth(1).and_then(|t| t.split(' ').next()?.parse().ok()).unwrap_or(0);
            done > 0 && done < n
        })
        .collect();
    assert!(partial.len() >= 2, "{n} arrivals; {err}");
}

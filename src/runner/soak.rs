//! `bench soak`: is the server stable under concurrent load, and does it stay correct?
//!
//! N clients, each with its own prompt. First a serial pass: each prompt alone, greedy
//! (temperature 0), its output kept as the reference. Then iterations: every client sends its
//! prompt at the same instant; each request is a measurement record (scenario `soak`, run = the
//! iteration, a group record per iteration), its output compared with the reference
//! (`output_mismatch` fails its gate: a server that answers differently under load is a finding
//! even when nothing crashed). With `--server-cmd`, a crash between or during iterations is
//! recorded (signal, exit code, stderr tail) and survived by a restart.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::batch;
use crate::cli::{MeasureArgs, OutputArgs, SizeArgs, SoakArgs, SweepArgs, ThermalArgs, WorkloadArgs};
use crate::exit::{Failure, Outcome};
use crate::measuring::drive::{self, Ended};
use crate::measuring::measure::{self, Ready};
use crate::measuring::{Journal, RunContext, open, setup};
use crate::meta::SoakSummary;
use crate::progress::Progress;
use ttft_client::{ChatRequest, Message};
use ttft_model::record::QualityCode;
use ttft_model::record::{CacheState, CellKey, Measurement, QualityFlag, Record, Scenario};
use ttft_model::spec::ThermalChoice;
use ttft_results::store::RecordWriter;

pub async fn soak(args: &SoakArgs) -> anyhow::Result<Outcome> {
    // A soak that may not start an iteration measures nothing: refused before anything is created.
    if args.duration.is_some_and(|d| d.0.is_zero()) {
        return Err(Failure::usage(
            "--duration: must be more than 0 (leave it out to run every --iterations)",
        )
        .into());
    }
    let sweep = sweep_args(args);
    let open::Opened { config, journal, resumed, lock } = open::open(&sweep)?;
    let summary = SoakSummary {
        concurrency: args.concurrency.0,
        iterations_planned: args.iterations.0,
        duration_limit_s: args.duration.map(|d| d.secs()),
        ..Default::default()
    };
    journal.update(|m| m.soak = Some(summary.clone()))?;
    let title = format!("bench soak {}", journal.dir().display());
    let board = crate::live::soak::SoakBoard::new(args.iterations.0);
    let (mut view, live) = crate::live::start(title, crate::live::STOP_KEYS, board, args.output.quiet);
    let progress = Arc::new(Progress::new(0, args.output.quiet).showing(view.as_ref().map(|v| v.sink())));
    let limit = args.duration.map(|d| d.0);
    let reads = ttft_client::read_counts();
    let work = run(config, summary, limit, journal.clone(), progress.clone(), live);
    let ended = drive::drive("soak", work, drive::OnSignal::Abort).await;
    let ended = match drive::settle(ended, &journal, resumed, lock, &progress, view.as_mut()) {
        drive::Settled::Kept(ended) => ended,
        drive::Settled::Removed(outcome) => return Ok(outcome?),
    };
    let (summary, ended) = match ended {
        Ended::Done(SoakEnd::Done(s)) => {
            let clean = s.passed == s.requests && s.crashes == 0 && s.mismatches == 0 && s.requests > 0;
            (Some(s), Outcome::findings_if(!clean))
        }
        Ended::Done(SoakEnd::Gone(s, why)) => {
            eprintln!("{why}; every finished request is in {}", journal.dir().display());
            (Some(s), Outcome::ServerGone)
        }
        Ended::Signal => {
            eprintln!("interrupted: every finished request is in {}", journal.dir().display());
            (None, Outcome::Interrupted)
        }
        Ended::Failed(failure) => {
            let _ = journal.update(|m| m.status = crate::meta::RunStatus::Interrupted);
            return Err(failure.into());
        }
    };
    let status = if matches!(ended, Outcome::Clean | Outcome::Findings) {
        crate::meta::RunStatus::Complete
    } else {
        crate::meta::RunStatus::Interrupted
    };
    journal.update(|m| {
        m.status = status;
        m.ended_at = Some(ttft_model::clock::now_rfc3339());
        m.arrival_stamps = Some(crate::meta::ArrivalStamps::since(reads));
        if let Some(s) = &summary {
            m.soak = Some(s.clone());
        }
    })?;
    // The table is for people (stderr, even with --quiet: it is the soak's verdict); stdout
    // gets the run directory alone, for scripts, as every verb that writes a run does.
    if let Some(s) = &summary {
        eprint!("{}", table(s));
        eprintln!("records in {}", journal.dir().display());
        crate::output::println(&journal.dir().display().to_string())?;
    }
    Ok(ended)
}

enum SoakEnd {
    Done(SoakSummary),
    Gone(SoakSummary, String),
}

/// The soak as the sweep's settings: cold, one run, no thermal gate (a soak is load on purpose).
fn sweep_args(args: &SoakArgs) -> SweepArgs {
    let sizes = SizeArgs {
        contexts: Some(args.sizes.contexts.clone().unwrap_or(ttft_model::spec::Contexts(vec![1024]))),
        ..args.sizes.clone()
    };
    let measure = MeasureArgs::driven(
        args.target.clone(),
        sizes,
        WorkloadArgs::default(),
        ThermalArgs { thermal: Some(ThermalChoice::Off), ..Default::default() },
        None,
        None,
    );
    let output = OutputArgs {
        run_id: Some(args.output.run_id.clone().unwrap_or_else(|| ttft_model::clock::new_run_id("soak"))),
        ..args.output.clone()
    };
    SweepArgs::new_run(args.connection.clone(), measure, None, output)
}

async fn run(
    mut config: crate::config::SweepConfig,
    mut summary: SoakSummary,
    limit: Option<Duration>,
    journal: Journal,
    progress: Arc<Progress>,
    live: crate::live::Publisher,
) -> Result<SoakEnd, Failure> {
    let mut supervisor = crate::measuring::start_server(&mut config, &progress).await?;
    let ctx = setup::prepare(config, Some(&journal), &progress).await?;
    crate::measuring::record_server(supervisor.as_ref(), &journal)?;
    let n = summary.concurrency;
    let prompts = prompts(&ctx, n).await?;
    progress.note(&format!("serial reference pass: {n} prompts, one at a time, temperature 0 ..."));
    let (references, single_tps) = reference_pass(&ctx, &prompts).await?;
    summary.single_stream_tps = single_tps;
    let mut writer = RecordWriter::open(journal.dir())?;
    let started = Instant::now();
    let mut concurrent = Served::default();
    for iteration in 1..=summary.iterations_planned {
        if limit.is_some_and(|l| started.elapsed() >= l) {
            break;
        }
        let (records, in_flight_s) = iteration_records(&ctx, &prompts, &references, iteration, n).await;
        for r in &records {
            writer.append(r)?;
        }
        for r in &records {
            live.record(r);
        }
        let measured: Vec<&Measurement> = records
            .iter()
            .filter_map(|r| match r {
                Record::Measurement(m) => Some(m.as_ref()),
                _ => None,
            })
            .collect();
        let passed = measured.iter().filter(|m| m.quality_ok && m.error.is_none()).count() as u32;
        let mismatched = measured
            .iter()
            .filter(|m| m.quality_flags.iter().any(|f| f.flag == QualityCode::OutputMismatch))
            .count() as u32;
        concurrent.tokens += measured.iter().filter_map(|m| m.output_tokens).sum::<u64>();
        concurrent.seconds += in_flight_s;
        summary.iterations_run = iteration;
        summary.requests += measured.len() as u32;
        summary.passed += passed;
        summary.mismatches += mismatched;
        for m in measured.iter().filter(|m| !(m.quality_ok && m.error.is_none())) {
            *summary.failed_by.entry(failure_of(m)).or_default() += 1;
        }
        progress.note(&format!(
            "iteration {iteration}/{}: {passed}/{} passed, {mismatched} mismatched",
            summary.iterations_planned,
            measured.len()
        ));
        let share = f64::from(iteration) / f64::from(summary.iterations_planned.max(1));
        let left = started.elapsed().mul_f64((1.0 - share) / share.max(1e-9));
        live.send(crate::live::Event::Position {
            share,
            forecast: None,
            eta: Some(limit.map_or(left, |l| left.min(l.saturating_sub(started.elapsed())))),
        });
        if let Some(sup) = &mut supervisor
            && let Some(crash) = sup.check(&format!("iteration {iteration}"))
        {
            progress.note(&format!("{}; restarting it", crate::supervise::describe(&crash)));
            let restarted = sup.restart(crash).await;
            summary.crashes = sup.crashes.len() as u32;
            live.send(crate::live::Event::Crashes(summary.crashes));
            let crashes = sup.crashes.clone();
            journal.update(|m| m.server_crashes = crashes)?;
            if let Err(gone) = restarted {
                finish(&mut summary, started, concurrent);
                return Ok(SoakEnd::Gone(summary, gone.to_string()));
            }
        }
    }
    finish(&mut summary, started, concurrent);
    Ok(SoakEnd::Done(summary))
}

/// Output tokens served, and the seconds their requests took.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Served {
    tokens: u64,
    seconds: f64,
}

impl Served {
    /// Tokens per second (None without time to divide by).
    fn rate(self) -> Option<f64> {
        (self.seconds > 0.0).then(|| self.tokens as f64 / self.seconds)
    }
}

/// The throughput figures from what was served. Both rates are a ratio of sums over the same kind
/// of request (the prompt already cached): one stream alone (`single`, the serial pass's repeat)
/// and N at once (`concurrent`, each iteration's time in flight). A lone stream is the fastest a
/// stream can be, so N concurrent streams give at most N times its rate: the efficiency is a
/// fraction. The serial pass's first requests are not that kind: they compute their prompts,
/// which the iterations then find cached, so timing them would charge every prefill to the lone
/// stream alone and put the efficiency above 100%.
fn finish(summary: &mut SoakSummary, started: Instant, concurrent: Served) {
    let wall = started.elapsed().as_secs_f64();
    summary.wall_s = wall;
    summary.requests_per_s = (wall > 0.0).then(|| f64::from(summary.passed) / wall);
    summary.output_tps = concurrent.rate();
    summary.speedup = summary.output_tps.zip(summary.single_stream_tps).map(|(n, one)| n / one);
    summary.efficiency = summary.speedup.map(|s| s / f64::from(summary.concurrency));
}

/// One prompt per client; client i gets the (i mod n)-th context.
async fn prompts(ctx: &RunContext, n: u32) -> Result<Vec<(u32, crate::prompt::Prompt)>, Failure> {
    let mut out = Vec::new();
    for i in 0..n {
        let context = ctx.config.contexts[i as usize % ctx.config.contexts.len()];
        let seed = crate::prompt::text::mix(&[ctx.config.seed, u64::from(context), u64::from(i), 0x50A4]);
        let prompt = ctx
            .sizer
            .build(&ctx.client, context, seed, ctx.nonces.next())
            .await
            .map_err(|e| Failure::server(e.to_string()))?;
        out.push((context, prompt));
    }
    Ok(out)
}

fn request(ctx: &RunContext, prompt: &crate::prompt::Prompt, stream: bool) -> ChatRequest {
    let mut req = ChatRequest {
        model: ctx.model.clone(),
        messages: vec![Message::new("user", prompt.text.clone())],
        max_tokens: ctx.config.output_tokens,
        stream,
        ..Default::default()
    };
    // Greedy: the same prompt must give the same text, alone or under load.
    req.extra_body.insert("temperature".into(), serde_json::json!(0));
    req
}

/// Each prompt alone: its greedy output, and one stream's output tok/s. The rate is timed on a
/// second request of the same prompt: the first computes the prompt, and the iterations find it
/// cached (on a server that caches prefixes), so only the second is the same work as theirs.
async fn reference_pass(
    ctx: &RunContext,
    prompts: &[(u32, crate::prompt::Prompt)],
) -> Result<(Vec<String>, Option<f64>), Failure> {
    let mut texts = Vec::new();
    let mut alone = Served::default();
    for (_, prompt) in prompts {
        let mut output = None;
        for _ in 0..2 {
            let ex = ctx.send(&request(ctx, prompt, false)).await;
            if let Some(e) = ex.error {
                return Err(Failure::server(format!("serial reference request failed: {}", e.message)));
            }
            if output.is_some()
                && let (Some(out), Some(e2e)) = (ex.usage.output_tokens, ex.e2e_ms)
            {
                alone.tokens += out;
                alone.seconds += e2e / 1000.0;
            }
            output.get_or_insert_with(|| ex.full_output());
        }
        texts.extend(output);
    }
    Ok((texts, alone.rate()))
}

async fn iteration_records(
    ctx: &RunContext,
    prompts: &[(u32, crate::prompt::Prompt)],
    references: &[String],
    iteration: u32,
    n: u32,
) -> (Vec<Record>, f64) {
    let stream = ctx.config.modes.first() == Some(&ttft_model::record::Mode::Streaming);
    let cell = |context: u32| CellKey {
        dataset_row: None,
        model: ctx.model.clone(),
        scenario: Scenario::Soak,
        cache_state: CacheState::Cold,
        mode: ctx.config.modes.first().copied().unwrap_or_default(),
        context_tokens: context,
        batch_size: n,
        run: iteration,
    };
    let ready: Vec<Ready> = prompts
        .iter()
        .enumerate()
        .map(|(i, (context, prompt))| {
            let session = ctx.new_session(i as u32);
            let mut req = request(ctx, prompt, stream);
            let _ = ctx.preset.bind(&mut req, &session);
            Ready {
                cell: cell(*context),
                request_index: i as u32,
                session,
                nonce: prompt.nonce.clone(),
                expected_input_tokens: Some(prompt.expected_input_tokens),
                request: req,
                reload: false,
                turns: Vec::new(),
                saved: None,
                after_turn: None,
                session_before: None,
            }
        })
        .collect();
    let sent = Instant::now();
    let (release, fired) = batch::release_together(ready.len(), |i| measure::fire(ctx, &ready[i])).await;
    let in_flight_s = sent.elapsed().as_secs_f64();
    let group_id = format!("{}-soak-{iteration}", ctx.run_id);
    let mut measured = Vec::new();
    for ((i, r), f) in ready.into_iter().enumerate().zip(fired) {
        let output = f.exchange.full_output();
        let mut m = measure::finish(ctx, r, f, Some(release), None).await;
        if m.error.is_none() && output != references[i] {
            m.quality_flags.push(QualityFlag {
                flag: QualityCode::OutputMismatch,
                reason: format!(
                    "differs from the serial output: {}",
                    first_difference(&references[i], &output)
                ),
                fails_gate: true,
            });
            m.quality_ok = false;
        }
        m.group_id = Some(group_id.clone());
        measured.push(m);
    }
    let group_cell = cell(ctx.config.contexts[0]);
    let group = batch::group_record(&ctx.run_id, &group_cell, &group_id, &measured);
    let mut out: Vec<Record> = measured.into_iter().map(|m| Record::Measurement(Box::new(m))).collect();
    out.push(Record::Group(Box::new(group)));
    (out, in_flight_s)
}

/// "at character 37: serial \"…the cat\" vs \"…the dog\"". Both texts are redacted before they
/// are compared and cut: a window cut from the raw text could hold half of a key the server said
/// back, which no later redaction recognises.
fn first_difference(serial: &str, concurrent: &str) -> String {
    let (serial, concurrent) = (ttft_model::secrets::redact(serial), ttft_model::secrets::redact(concurrent));
    let (serial, concurrent) = (serial.as_str(), concurrent.as_str());
    let at = serial.chars().zip(concurrent.chars()).take_while(|(a, b)| a == b).count();
    let around = |s: &str| -> String { s.chars().skip(at.saturating_sub(20)).take(40).collect() };
    format!("at character {at}: serial {:?} vs {:?}", around(serial), around(concurrent))
}

/// What failed a request, in one word: its error's kind, else its first gate-failing flag.
fn failure_of(m: &Measurement) -> String {
    if let Some(e) = &m.error {
        return e.kind.as_str().to_string();
    }
    m.quality_flags
        .iter()
        .find(|f| f.fails_gate)
        .map_or_else(|| "quality".to_string(), |f| f.flag.as_str().to_string())
}

/// The final table: the verdict and what was served, one row; under a FAIL, why.
pub(crate) fn table(s: &SoakSummary) -> String {
    let opt = |v: Option<f64>, unit: &str| v.map_or("-".into(), |x| format!("{x:.1}{unit}"));
    let verdict = if s.passed == s.requests && s.crashes == 0 && s.mismatches == 0 { "PASS" } else { "FAIL" };
    let speedup = format!("x{} vs one stream", s.concurrency);
    let header = [
        "Soak",
        "Requests passed",
        "Crashes",
        "Output mismatches",
        "req/s",
        "tok/s",
        speedup.as_str(),
        "Efficiency",
    ];
    let mut t = crate::output::table(crate::output::TableStyle::Terminal, &header, 1);
    t.add_row(vec![
        format!(
            "{verdict} {}/{} ({} iterations x {})",
            s.passed, s.requests, s.iterations_run, s.concurrency
        ),
        format!("{}/{}", s.passed, s.requests),
        s.crashes.to_string(),
        s.mismatches.to_string(),
        opt(s.requests_per_s, ""),
        opt(s.output_tps, ""),
        opt(s.speedup, "x"),
        opt(s.efficiency.map(|e| e * 100.0), "%"),
    ]);
    let mut text = crate::output::table_text(t);
    if verdict == "FAIL" {
        let mut why: Vec<String> = s.failed_by.iter().map(|(what, n)| format!("{n} {what}")).collect();
        if s.crashes > 0 {
            why.push(format!("{} server crash(es)", s.crashes));
        }
        if why.is_empty() {
            why.push("no request finished".to_string());
        }
        text.push_str(&format!(
            "FAIL because: {} (each request's flags are in its record)\n",
            why.join(", ")
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_difference_is_shown_in_context() {
        assert_eq!(
            first_difference("w0 w1 w2", "w0 w1 x2"),
            r#"at character 6: serial "w0 w1 w2" vs "w0 w1 x2""#
        );
    }

    /// Both rates are ratios of sums, worked out here by hand: alone, 24 tokens in 0.1 s and 24
    /// in 0.3 s are 48 / 0.4 = 120 tok/s; two at once, 48 tokens in 0.3 s and 48 in 0.5 s are
    /// 96 / 0.8 = 120 tok/s, a speedup of 1.0 over one stream: half of what 2 lone streams give.
    #[test]
    fn efficiency_is_the_concurrent_rate_over_n_lone_streams() {
        let alone = [(24u64, 0.1), (24, 0.3)];
        let together = [(48u64, 0.3), (48, 0.5)];
        let sum = |v: &[(u64, f64)]| {
            v.iter().fold(Served::default(), |s, (t, secs)| Served {
                tokens: s.tokens + t,
                seconds: s.seconds + secs,
            })
        };
        let mut s =
            SoakSummary { concurrency: 2, single_stream_tps: sum(&alone).rate(), ..Default::default() };
        finish(&mut s, Instant::now(), sum(&together));
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        assert!(close(s.single_stream_tps, 120.0), "{s:?}");
        assert!(close(s.output_tps, 120.0), "{s:?}");
        assert!(close(s.speedup, 1.0), "{s:?}");
        assert!(close(s.efficiency, 0.5), "{s:?}");
        // Nothing timed: no rates, rather than a division by zero.
        let mut s = SoakSummary { concurrency: 2, ..Default::default() };
        finish(&mut s, Instant::now(), Served::default());
        assert_eq!((s.output_tps, s.speedup, s.efficiency), (None, None, None));
    }

    #[test]
    fn the_table_says_pass_only_when_everything_passed() {
        let s = SoakSummary {
            concurrency: 8,
            requests: 400,
            passed: 400,
            iterations_run: 50,
            ..Default::default()
        };
        let rows = crate::output::table_rows(&table(&s));
        assert_eq!(rows[1][..3], ["PASS 400/400 (50 iterations x 8)", "400/400", "0"], "{}", table(&s));
        let s = SoakSummary { crashes: 1, ..s };
        assert!(table(&s).contains("FAIL"));
    }
}

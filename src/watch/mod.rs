//! `bench watch`: follows run directories while another bench writes them, and shows the same
//! live view their own verbs show, from the records as they land (docs/live.md).
//!
//! Each run is read where its writer leaves it: measurements.jsonl from the byte it had reached
//! (a line counts once its newline is there: a writer appends a record with one write, so a line
//! without one is still being written), run.json for what the run is (`load`, `soak`, else a
//! sweep), its plan and how it ended. A run has ended when run.json says `complete` or
//! `interrupted`, or says `running` while no process holds its lock (it was killed: read as
//! interrupted, as every reading verb reads it). Its records are read once more after that, so
//! nothing written before the end is missed. Watching only reads: it takes no lock and writes
//! nothing.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cli::WatchArgs;
use crate::exit::{Failure, Outcome};
use crate::live::{self, Board, Event, Publisher, Sheet, Step};
use crate::meta::{LoadPlan, RunStatus};
use ttft_model::record::Record;
use ttft_results::store;

/// What `q` does in the watch's view.
const WATCH_KEYS: &str = "q: stop watching, as Ctrl-C does (the runs go on)";

/// The shortest pause between two reads of the runs' files.
const MIN_EVERY: Duration = Duration::from_millis(50);

pub async fn run(args: &WatchArgs) -> anyhow::Result<Outcome> {
    let mut runs = Vec::new();
    for dir in &args.runs {
        runs.push(Followed::open(dir)?);
    }
    let boards: Vec<(String, Box<dyn Board>)> =
        runs.iter().map(|r| (r.dir.display().to_string(), r.board())).collect();
    let title = match runs.len() {
        1 => format!("bench watch {}", runs[0].dir.display()),
        n => format!("bench watch: {n} runs"),
    };
    let (mut view, live) = live::start(title, WATCH_KEYS, Runs { boards }, false);
    let every = args.every.0.max(MIN_EVERY);
    let watching = async {
        loop {
            for (i, r) in runs.iter_mut().enumerate() {
                r.poll(i, &live)?;
            }
            if runs.iter().all(|r| r.ended.is_some()) {
                return Ok::<(), Failure>(());
            }
            tokio::time::sleep(every).await;
        }
    };
    let stopped = tokio::select! {
        done = watching => { done?; false }
        _ = crate::measuring::shutdown_signal() => true,
    };
    if let Some(v) = view.as_mut() {
        v.finish();
    }
    for r in &runs {
        let how = r.ended.as_deref().unwrap_or("still running (no longer watched)");
        eprintln!("{}: {how}; {} records", r.dir.display(), r.records);
    }
    Ok(if stopped { Outcome::Interrupted } else { Outcome::Clean })
}

/// What a run is, as its run.json says.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Sweep,
    Load,
    Soak,
}

/// One run directory being followed.
struct Followed {
    dir: PathBuf,
    kind: Kind,
    meta: serde_json::Value,
    /// The bytes of measurements.jsonl read so far, and the start of a line not yet whole.
    offset: u64,
    partial: Vec<u8>,
    line: usize,
    records: usize,
    failed: usize,
    /// The load steps already announced.
    steps: usize,
    crashes: usize,
    /// How the run ended, once it has.
    ended: Option<String>,
}

impl Followed {
    fn open(dir: &Path) -> Result<Followed, Failure> {
        let meta = read_meta(dir)?;
        let kind = if !meta["load"].is_null() {
            Kind::Load
        } else if !meta["soak"].is_null() {
            Kind::Soak
        } else {
            Kind::Sweep
        };
        Ok(Followed {
            dir: dir.to_path_buf(),
            kind,
            meta,
            offset: 0,
            partial: Vec::new(),
            line: 0,
            records: 0,
            failed: 0,
            steps: 0,
            crashes: 0,
            ended: None,
        })
    }

    fn board(&self) -> Box<dyn Board> {
        match self.kind {
            Kind::Sweep => Box::new(live::sweep::SweepBoard::new()),
            Kind::Soak => {
                let planned = self.meta["soak"]["iterations_planned"].as_u64().unwrap_or(0);
                Box::new(live::soak::SoakBoard::new(planned as u32))
            }
            Kind::Load => {
                let plan = self.plan().unwrap_or_default();
                let states = plan.mix.iter().map(|(s, _)| *s).collect();
                Box::new(crate::load::board::LoadBoard::new(plan.slo, states))
            }
        }
    }

    fn plan(&self) -> Option<LoadPlan> {
        serde_json::from_value(self.meta["load"].clone()).ok()
    }

    /// Reads what the run wrote since the last poll and tells the view (as run `i`).
    fn poll(&mut self, i: usize, live: &Publisher) -> Result<(), Failure> {
        if self.ended.is_some() {
            return Ok(());
        }
        // run.json first: a run that ended wrote its last record before it said so.
        let meta = read_meta(&self.dir)?;
        let status: Option<RunStatus> = serde_json::from_value(meta["status"].clone()).ok();
        let ended = match status {
            Some(RunStatus::Running) | None if store::holder_gone(&self.dir) => Some(
                "interrupted (run.json says running, but no bench process holds it: it was killed)".into(),
            ),
            Some(RunStatus::Running) | None => None,
            Some(s) => Some(
                serde_json::to_value(s).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
            ),
        };
        self.meta = meta;
        let before = self.records;
        let mut last = None;
        for record in self.read_records()? {
            self.records += 1;
            self.failed += usize::from(!record.is_good());
            last = Some(format!("{:#}", record.cell()));
            live.send(Event::For(i, Box::new(Event::Record(Box::new(record)))));
        }
        if self.kind == Kind::Load {
            self.announce_steps(i, live);
        }
        let crashes = self.meta["server_crashes"].as_array().map_or(0, Vec::len);
        if crashes != self.crashes {
            self.crashes = crashes;
            live.send(Event::For(i, Box::new(Event::Crashes(crashes as u32))));
        }
        if !live.is_on() && self.records > before {
            eprintln!(
                "{}: +{} records ({} so far, {} failed); last: {}",
                self.dir.display(),
                self.records - before,
                self.records,
                self.failed,
                last.unwrap_or_default()
            );
        }
        if let Some(how) = ended {
            if !live.is_on() {
                eprintln!("{}: {how}", self.dir.display());
            }
            live.send(Event::For(i, Box::new(Event::Ended(how.clone()))));
            self.ended = Some(how);
        }
        Ok(())
    }

    /// The load's rates and levels as run.json plans them, each announced once.
    fn announce_steps(&mut self, i: usize, live: &Publisher) {
        let Some(plan) = self.plan() else { return };
        for rate in plan.rates.iter().skip(self.steps) {
            let step = Step {
                run: rate.run,
                label: crate::load::run::label(rate),
                duration_s: plan.duration_s,
                rate_per_s: rate.rate_per_s,
                arrivals: Vec::new(),
                concurrency: rate.concurrency,
                warmup_s: rate.concurrency.and(plan.warmup_s).unwrap_or(0.0),
                // Its clock is the writer's: elapsed and arrivals due are not known here.
                began: None,
            };
            live.send(Event::For(i, Box::new(Event::Step(step))));
        }
        self.steps = plan.rates.len();
    }

    /// The whole lines appended to measurements.jsonl since the last read.
    fn read_records(&mut self) -> Result<Vec<Record>, Failure> {
        let path = self.dir.join(store::MEASUREMENTS_FILE);
        let mut file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Failure::io(format!("cannot read {}: {e}", path.display()))),
        };
        let mut fresh = Vec::new();
        file.seek(SeekFrom::Start(self.offset))
            .and_then(|_| file.read_to_end(&mut fresh))
            .map_err(|e| Failure::io(format!("cannot read {}: {e}", path.display())))?;
        self.offset += fresh.len() as u64;
        self.partial.extend_from_slice(&fresh);
        let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else { return Ok(Vec::new()) };
        let whole: Vec<u8> = self.partial.drain(..=end).collect();
        let mut out = Vec::new();
        for line in whole[..whole.len() - 1].split(|&b| b == b'\n') {
            self.line += 1;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let why = match store::parse_record(line) {
                Ok(r) => {
                    out.push(r);
                    continue;
                }
                Err(store::LineError::Json(e) | store::LineError::Shape(e)) => store::json_message(&e),
                Err(store::LineError::Version(v)) => format!("schema version {}", store::shown(v)),
            };
            return Err(Failure::usage(format!("{}:{}: not a record: {why}", path.display(), self.line)));
        }
        Ok(out)
    }
}

fn read_meta(dir: &Path) -> Result<serde_json::Value, Failure> {
    let path = dir.join(store::RUN_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Failure::usage(format!(
            "{}: not a run directory being written ({}: {e})",
            dir.display(),
            path.display()
        ))
    })?;
    serde_json::from_str(&text).map_err(|e| Failure::usage(format!("{}: {e}", path.display())))
}

/// The boards of every run watched, one under the other.
struct Runs {
    boards: Vec<(String, Box<dyn Board>)>,
}

impl Board for Runs {
    fn apply(&mut self, event: &Event) {
        if let Event::For(i, inner) = event
            && let Some((name, board)) = self.boards.get_mut(*i)
        {
            if let Event::Ended(how) = inner.as_ref() {
                name.push_str(&format!(" ({how})"));
            }
            board.apply(inner);
        }
    }

    fn sheet(&self) -> Sheet {
        let mut lines = Vec::new();
        for (name, board) in &self.boards {
            if !lines.is_empty() {
                lines.push(String::new());
            }
            lines.push(format!("== {name}"));
            lines.extend(board.sheet().text());
        }
        Sheet { lines, table: None }
    }
}

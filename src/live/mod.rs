//! The live view of a long run (sweep, load, soak, and a run watched from elsewhere): the numbers
//! so far, per cache state, and where the run is, redrawn in place on a terminal (docs/live.md).
//!
//! The view never changes what is measured. The measuring code only *publishes*: each call of a
//! `Publisher` (and of the progress sink it lends to `Progress`) puts one small message on an
//! unbounded channel and returns; it never takes a lock the view holds and never waits for a
//! redraw. Records are published after they are written, off every timed window. Everything else
//! happens on the view's own thread: it folds the messages into its `Board` (the verb's table),
//! redraws at most `REDRAW_HZ` times a second, and reads the keyboard.
//!
//! `q` stops the run exactly as Ctrl-C does: the view sends SIGINT to its own process, so the one
//! interrupt path (each verb's `shutdown_signal`) keeps every record, writes run.json
//! `interrupted` and exits 130. The terminal is put back on every way out: the end of the work,
//! an early return (the view's `Drop`), a panic (a hook restores it before the panic is printed),
//! and a signal (which ends the work, so its `finish`).
//!
//! Without a terminal on stderr, or with `--quiet`, there is no view: progress prints plain lines
//! as it always did, and a `Publisher` is a no-op.

pub(crate) mod sheet;
pub(crate) mod soak;
pub(crate) mod sweep;
mod terminal;

use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::progress::LiveSink;
use ttft_model::record::Record;

pub(crate) use sheet::{Sheet, Table};

/// Redraws per second at most (and at least one a second, so the clocks move).
pub(crate) const REDRAW_HZ: u32 = 8;
/// How long the view's thread waits for a key before it looks at its messages again.
const KEY_WAIT: Duration = Duration::from_millis(40);
/// Notes shown under the table (all of them are printed when the view ends).
const NOTES_SHOWN: usize = 4;

/// What the run tells its view.
pub(crate) enum Event {
    /// A note or warning (printed in order when the view ends).
    Note(String),
    /// Where the run is: the cell running, the rate under way.
    Now(String),
    /// The thermal gate's state: Some while it waits.
    Thermal(Option<String>),
    /// The share of the plan done, its forecast and the time left.
    Position { share: f64, forecast: Option<Duration>, eta: Option<Duration> },
    /// A record, once it is on disk.
    Record(Box<Record>),
    /// A rate or concurrency level of `bench load` begins.
    Step(Step),
    /// The server bench started has crashed this many times so far.
    Crashes(u32),
    /// A watched run ended: how.
    Ended(String),
    /// An event of the i-th of several runs shown together (`bench watch`).
    For(usize, Box<Event>),
    /// The work is over: draw the last frame and give the terminal back.
    Finish,
}

/// One rate or closed-loop level of `bench load`, as it begins.
#[derive(Clone, Debug, Default)]
pub(crate) struct Step {
    pub run: u32,
    pub label: String,
    pub duration_s: f64,
    /// The offered rate (0 for a closed loop).
    pub rate_per_s: f64,
    /// The arrivals as scheduled from the rate's clock start (empty for a closed loop).
    pub arrivals: Vec<crate::meta::Arrival>,
    /// A closed loop: its users, and its warm-up (left out of its statistics).
    pub concurrency: Option<u32>,
    pub warmup_s: f64,
    /// When it began (None for a watched run: its clock is another process's).
    pub began: Option<Instant>,
}

/// A verb's table: it folds the run's events into the numbers so far and lays them out.
pub(crate) trait Board: Send + 'static {
    fn apply(&mut self, event: &Event);
    fn sheet(&self) -> Sheet;
}

/// The measuring side's handle: sends never block, and do nothing when there is no view.
#[derive(Clone, Default)]
pub(crate) struct Publisher {
    tx: Option<mpsc::Sender<Event>>,
}

impl Publisher {
    /// A publisher with no view behind it.
    pub(crate) fn off() -> Publisher {
        Publisher { tx: None }
    }

    pub(crate) fn send(&self, event: Event) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(event);
        }
    }

    /// A record, once it is on disk (a copy: the caller keeps its own).
    pub(crate) fn record(&self, record: &Record) {
        if self.tx.is_some() {
            self.send(Event::Record(Box::new(record.clone())));
        }
    }

    pub(crate) fn is_on(&self) -> bool {
        self.tx.is_some()
    }
}

impl LiveSink for Publisher {
    fn note(&self, text: String) {
        self.send(Event::Note(text));
    }
    fn now(&self, text: String) {
        self.send(Event::Now(text));
    }
    fn thermal(&self, status: Option<String>) {
        self.send(Event::Thermal(status));
    }
    fn position(&self, share: f64, forecast: Option<Duration>, eta: Option<Duration>) {
        self.send(Event::Position { share, forecast, eta });
    }
    fn finish(&self) {
        self.send(Event::Finish);
    }
}

/// A live view, running on its own thread until `finish` (or drop).
pub(crate) struct View {
    publisher: Publisher,
    thread: Option<JoinHandle<()>>,
}

impl View {
    /// Starts a view titled `title` drawing `board`, when stderr is a terminal and not `quiet`;
    /// None otherwise (progress then prints lines).
    pub(crate) fn start(title: String, keys: String, board: impl Board, quiet: bool) -> Option<View> {
        if quiet || !terminal::is_terminal() {
            return None;
        }
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("live-view".into())
            .spawn(move || draw_loop(title, keys, board, rx))
            .ok()?;
        Some(View { publisher: Publisher { tx: Some(tx) }, thread: Some(thread) })
    }

    pub(crate) fn publisher(&self) -> Publisher {
        self.publisher.clone()
    }

    /// The view as `Progress` speaks to it.
    pub(crate) fn sink(&self) -> Arc<dyn LiveSink> {
        Arc::new(self.publisher.clone())
    }

    /// Draws the last frame, gives the terminal back and prints the notes and the last numbers
    /// on stderr; returns once the terminal is restored. Idempotent.
    pub(crate) fn finish(&mut self) {
        self.publisher.send(Event::Finish);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // The thread restores the terminal; should it have died, this does.
        terminal::restore();
    }
}

impl Drop for View {
    fn drop(&mut self) {
        self.finish();
    }
}

/// What `q` does in a run's view.
pub(crate) const STOP_KEYS: &str =
    "q: stop as Ctrl-C does (every finished record kept, run.json interrupted)";

/// The view (when there is one) and the publisher for the measuring side; `keys` says what `q` does.
pub(crate) fn start(title: String, keys: &str, board: impl Board, quiet: bool) -> (Option<View>, Publisher) {
    let view = View::start(title, keys.to_string(), board, quiet);
    let publisher = view.as_ref().map_or_else(Publisher::off, View::publisher);
    (view, publisher)
}

/// What the view knows besides its board.
struct Status {
    title: String,
    keys: String,
    started: Instant,
    now: Option<String>,
    thermal: Option<String>,
    position: Option<(f64, Option<Duration>, Option<Duration>)>,
    notes: Vec<String>,
    stopping: bool,
}

fn draw_loop(title: String, keys: String, mut board: impl Board, rx: mpsc::Receiver<Event>) {
    let mut status = Status {
        title,
        keys,
        started: Instant::now(),
        now: None,
        thermal: None,
        position: None,
        notes: Vec::new(),
        stopping: false,
    };
    let mut screen = terminal::Screen::enter().ok();
    let redraw = Duration::from_secs(1) / REDRAW_HZ;
    let mut drawn: Option<Instant> = None;
    let mut dirty = true;
    loop {
        let stop_key = match &mut screen {
            Some(s) => s.stop_key(KEY_WAIT),
            None => {
                std::thread::sleep(KEY_WAIT);
                false
            }
        };
        if stop_key && !status.stopping {
            status.stopping = true;
            dirty = true;
            terminal::interrupt_self();
        }
        let mut finished = false;
        loop {
            match rx.try_recv() {
                Ok(Event::Finish) | Err(mpsc::TryRecvError::Disconnected) => {
                    finished = true;
                    break;
                }
                Ok(event) => {
                    fold(&mut status, &mut board, event);
                    dirty = true;
                }
                Err(mpsc::TryRecvError::Empty) => break,
            }
        }
        let since = drawn.map_or(Duration::MAX, |d| d.elapsed());
        if finished || (dirty && since >= redraw) || since >= Duration::from_secs(1) {
            if let Some(s) = &mut screen {
                s.draw(&frame_lines(&status, &board.sheet()), gauge(&status));
            }
            drawn = Some(Instant::now());
            dirty = false;
        }
        if finished {
            break;
        }
    }
    let was_drawn = screen.is_some();
    drop(screen);
    terminal::restore();
    if was_drawn {
        // The alternate screen is gone: what it showed is said once more, in the scrollback.
        let mut out = String::new();
        for n in &status.notes {
            out.push_str(n);
            out.push('\n');
        }
        for line in board.sheet().text() {
            out.push_str(&line);
            out.push('\n');
        }
        eprint!("{out}");
    }
}

fn fold(status: &mut Status, board: &mut impl Board, event: Event) {
    match &event {
        Event::Note(text) => status.notes.push(text.clone()),
        Event::Now(text) => status.now = Some(text.clone()),
        Event::Thermal(t) => status.thermal = t.clone(),
        Event::Position { share, forecast, eta } => status.position = Some((*share, *forecast, *eta)),
        _ => {}
    }
    board.apply(&event);
}

/// "1h 2m 3s", to the second.
pub(crate) fn clock(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

/// The gauge: the share done and its label (elapsed, forecast, ETA).
fn gauge(status: &Status) -> Option<(f64, String)> {
    let (share, forecast, eta) = status.position?;
    let mut label = format!("{:.0}% · elapsed {}", share * 100.0, clock(status.started.elapsed()));
    if let Some(f) = forecast {
        label.push_str(&format!(" · forecast {}", clock(f)));
    }
    if let Some(e) = eta {
        label.push_str(&format!(" · ETA {}", clock(e)));
    }
    Some((share.clamp(0.0, 1.0), label))
}

/// Every line of a frame but the gauge: title, where the run is, the board, the last notes, keys.
fn frame_lines(status: &Status, sheet: &Sheet) -> Vec<String> {
    let mut lines = vec![format!("{}   (elapsed {})", status.title, clock(status.started.elapsed()))];
    if let Some(now) = &status.now {
        lines.push(format!("now: {now}"));
    }
    if let Some(t) = &status.thermal {
        lines.push(format!("thermal gate: waiting: {t}"));
    }
    lines.push(String::new());
    lines.extend(sheet.text());
    if !status.notes.is_empty() {
        lines.push(String::new());
        let from = status.notes.len().saturating_sub(NOTES_SHOWN);
        lines.extend(status.notes[from..].iter().cloned());
    }
    lines.push(String::new());
    lines.push(if status.stopping {
        "stopping, as Ctrl-C does ...".to_string()
    } else {
        status.keys.clone()
    });
    lines
}

/// A p50 or p99 as text: "-" without values, a p99 of fewer than 20 values with its n (it is
/// close to the maximum, not a 99th percentile).
pub(crate) fn ms(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{v:.1}"))
}

/// Below this many values a p99 is shown with its n.
pub(crate) const P99_MIN_N: usize = 20;

pub(crate) fn p99(value: Option<f64>, n: usize) -> String {
    match value {
        Some(v) if n < P99_MIN_N => format!("{v:.1} (n={n})"),
        other => ms(other),
    }
}

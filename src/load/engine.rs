//! The open loop of one rate: every arrival sent at its Poisson instant, whatever the server does.
//!
//! Three things run at once:
//! - the preparer walks the schedule in order and puts each arrival's session in its cache state
//!   (reset; priming and eviction for warm; turns 1 and 2 for hot), at most `ahead` arrivals
//!   ahead of the dispatcher, each preparation in its own task;
//! - the dispatcher waits for each arrival's instant and hands the prepared session to a task of
//!   its own that sends it: the dispatcher never waits for a response, so a slow server cannot
//!   slow the schedule (open loop). With `concurrency_limit`, it waits for a free place first (a
//!   closed-loop cap, visible as send lag);
//! - each send task fires the measured request, cleans its session up, and hands the record on.
//!
//! When an arrival's preparation is not finished at its instant, the dispatcher waits for it:
//! the request then leaves late, its `prepare_late_ms` says by how much and its `send_lag_ms`
//! includes it. Nothing is hidden: a rate whose sends were late is flagged in the summary.
//!
//! Servers that pin a session's cache to a slot (llama.cpp's `id_slot`) get a slot lease: a
//! session holds its slot from the start of its preparation to the end of its cleanup, so no
//! other session's preparation can erase it in between.
//!
//! The engine takes its server side as a `Driver`, so tests drive it with a simulated server
//! under paused tokio time and check every instant exactly; `bench load` passes the real one.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::meta::Arrival;
use crate::record::{ErrorInfo, ErrorKind, Measurement};

/// The server side of the loop.
pub trait Driver: Send + Sync + 'static {
    /// A session in its cache state, its measured request built.
    type Ready: Send + 'static;
    /// What `fire` got back.
    type Fired: Send + 'static;

    /// Puts arrival `index`'s session in its cache state, on server slot `slot`. An error is the
    /// arrival's (failed) record.
    fn prepare(
        &self,
        index: u32,
        arrival: Arrival,
        slot: u32,
    ) -> impl Future<Output = Result<Self::Ready, Box<Measurement>>> + Send;

    /// Sends the measured request once `at` completes (anything that can be done before, such as
    /// serializing it, is done before); returns when its response ended, with the instant its
    /// timed window opened, moved on by any wait in the client's own queue (the actual send).
    fn fire(
        &self,
        ready: &Self::Ready,
        at: impl Future<Output = ()> + Send,
    ) -> impl Future<Output = (Instant, Self::Fired)> + Send;

    /// Cleans the session up and builds its record; `due` is the arrival's instant.
    fn finish(
        &self,
        ready: Self::Ready,
        fired: Self::Fired,
        due: Instant,
    ) -> impl Future<Output = Measurement> + Send;

    /// The record of an arrival whose preparation ended without a result.
    fn blank(&self, index: u32, arrival: Arrival) -> Measurement;
}

/// How the loop waits for an instant, in two steps: the dispatcher waits `coarse`ly, then hands
/// the request to its own task, which waits the rest (`fine`) and sends. The send task is thus
/// already running at the instant: a task spawned at the instant would first have to be woken
/// on a worker thread, which costs tenths of a millisecond on a busy machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timer {
    /// tokio's timer to `SPIN` before the instant, then the send task polls the monotonic clock,
    /// yielding to other tasks between polls: tokio's timer wheel has a resolution of 1 ms, too
    /// coarse for a send lag below 1 ms.
    Precise,
    /// tokio's timer alone (paused-time tests, where the clock only moves through it).
    Tokio,
}

/// How long before an instant the precise timer hands over to the send task.
pub const SPIN: Duration = Duration::from_micros(2_000);

impl Timer {
    /// The dispatcher's wait: until shortly before `due`.
    pub async fn coarse(self, due: Instant) {
        let until = match self {
            Timer::Tokio => due,
            Timer::Precise => due.checked_sub(SPIN).unwrap_or(due),
        };
        if until > Instant::now() {
            tokio::time::sleep_until(until).await;
        }
    }

    /// The send task's wait: until `due` exactly.
    pub async fn fine(self, due: Instant) {
        match self {
            Timer::Tokio => tokio::time::sleep_until(due).await,
            Timer::Precise => {
                // At most SPIN of polling per request: the price of keeping the schedule to the µs.
                while Instant::now() < due {
                    tokio::task::yield_now().await;
                }
            }
        }
    }
}

/// One rate to run.
#[derive(Clone, Debug)]
pub struct RatePlan {
    pub rate_per_s: f64,
    pub arrivals: Vec<Arrival>,
    /// Arrivals prepared or being prepared ahead of the dispatcher (at least 1).
    pub ahead: usize,
    /// Server slots sessions are pinned to (None: sessions are not slot-bound).
    pub slots: Option<usize>,
    /// At most this many measured requests in flight (None: open loop).
    pub concurrency_limit: Option<usize>,
    pub timer: Timer,
}

/// When the rate's clock started: every `at_ms` counts from `origin`.
#[derive(Clone, Debug)]
pub struct RateClock {
    pub origin: Instant,
    pub started_at: String,
}

/// Server slots free to lease; None when sessions are not slot-bound (each gets its index).
#[derive(Clone)]
pub(super) struct SlotPool(Option<(Arc<Semaphore>, FreeSlots)>);

/// The slot numbers not leased now.
type FreeSlots = Arc<Mutex<Vec<u32>>>;

pub(super) struct Lease {
    pub(super) slot: u32,
    _permit: Option<OwnedSemaphorePermit>,
    free: Option<FreeSlots>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(free) = &self.free {
            free.lock().unwrap_or_else(|p| p.into_inner()).push(self.slot);
        }
    }
}

impl SlotPool {
    pub(super) fn new(slots: Option<usize>) -> SlotPool {
        SlotPool(slots.map(|n| {
            let n = n.max(1);
            (Arc::new(Semaphore::new(n)), Arc::new(Mutex::new((0..n as u32).rev().collect())))
        }))
    }

    pub(super) async fn acquire(&self, index: u32) -> Option<Lease> {
        let Some((sem, free)) = &self.0 else {
            return Some(Lease { slot: index, _permit: None, free: None });
        };
        let permit = sem.clone().acquire_owned().await.ok()?;
        // A permit guarantees a free slot: the pool and the semaphore change together.
        let slot = free.lock().unwrap_or_else(|p| p.into_inner()).pop()?;
        Some(Lease { slot, _permit: Some(permit), free: Some(free.clone()) })
    }
}

type Prepared<D> = (Result<<D as Driver>::Ready, Box<Measurement>>, Lease, OwnedSemaphorePermit);

/// Milliseconds from whole nanoseconds: exact for any whole number of ms (secs * 1000 is not).
pub(super) fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

/// Runs one rate: every record goes to `sink` the moment its request is finished. Returns when
/// every arrival has been sent and finished.
pub async fn run<D: Driver>(
    driver: Arc<D>,
    plan: RatePlan,
    sink: mpsc::UnboundedSender<Measurement>,
) -> RateClock {
    let n = plan.arrivals.len();
    let ahead = Arc::new(Semaphore::new(plan.ahead.max(1)));
    let pool = SlotPool::new(plan.slots);
    let (mut senders, mut receivers): (Vec<_>, VecDeque<_>) = (0..n).map(|_| oneshot::channel()).unzip();
    // Dropping the set (an interrupted run) aborts the preparations and the requests in flight.
    let mut tasks = JoinSet::new();
    {
        let (driver, arrivals, ahead, pool) =
            (driver.clone(), plan.arrivals.clone(), ahead.clone(), pool.clone());
        let senders = std::mem::take(&mut senders);
        tasks.spawn(async move {
            let mut preparing = JoinSet::new();
            for (i, (arrival, tx)) in arrivals.into_iter().zip(senders).enumerate() {
                let Ok(place) = ahead.clone().acquire_owned().await else { return };
                let Some(lease) = pool.acquire(i as u32).await else { return };
                let d = driver.clone();
                preparing.spawn(async move {
                    let ready = d.prepare(i as u32, arrival, lease.slot).await;
                    let _ = tx.send((ready, lease, place));
                });
            }
            while preparing.join_next().await.is_some() {}
        });
    }
    // The clock starts once the first arrivals are prepared: the pipeline is full from the first
    // instant on. Never more than a slot-bound server has slots (their leases end only after sends).
    let first = plan.ahead.max(1).min(plan.slots.unwrap_or(usize::MAX)).min(n);
    let mut early: VecDeque<Option<Prepared<D>>> = VecDeque::new();
    for _ in 0..first {
        if let Some(rx) = receivers.pop_front() {
            early.push_back(rx.await.ok());
        }
    }
    let clock = RateClock { origin: Instant::now(), started_at: crate::clock::now_rfc3339() };
    let origin = clock.origin;
    let cap = plan.concurrency_limit.map(|c| Arc::new(Semaphore::new(c.max(1))));
    for (i, arrival) in plan.arrivals.iter().copied().enumerate() {
        let due = origin + Duration::from_secs_f64(arrival.at_ms / 1000.0);
        plan.timer.coarse(due).await;
        let (prepared, late_ms) = match early.pop_front() {
            Some(p) => (p, 0.0),
            None => match receivers.pop_front() {
                Some(mut rx) => match rx.try_recv() {
                    Ok(p) => (Some(p), 0.0),
                    Err(oneshot::error::TryRecvError::Empty) => {
                        let p = rx.await.ok();
                        (p, ms(Instant::now().saturating_duration_since(due)))
                    }
                    Err(oneshot::error::TryRecvError::Closed) => (None, 0.0),
                },
                None => (None, 0.0),
            },
        };
        let stamp = |m: &mut Measurement| {
            m.offered_rate_per_s = Some(plan.rate_per_s);
            m.scheduled_send_ms = Some(arrival.at_ms);
        };
        let (ready, lease, place) = match prepared {
            Some((Ok(ready), lease, place)) => (ready, lease, place),
            Some((Err(mut m), _, _)) => {
                stamp(&mut m);
                let _ = sink.send(*m);
                continue;
            }
            None => {
                let mut m = driver.blank(i as u32, arrival);
                m.error =
                    Some(ErrorInfo::new(ErrorKind::Transport, "the preparation ended without a result"));
                stamp(&mut m);
                let _ = sink.send(m);
                continue;
            }
        };
        let in_flight = match &cap {
            Some(c) => c.clone().acquire_owned().await.ok(),
            None => None,
        };
        let (d, sink, rate, timer) = (driver.clone(), sink.clone(), plan.rate_per_s, plan.timer);
        tasks.spawn(async move {
            drop(place);
            let (sent, fired) = d.fire(&ready, timer.fine(due)).await;
            let mut m = d.finish(ready, fired, due).await;
            drop((lease, in_flight));
            m.offered_rate_per_s = Some(rate);
            m.scheduled_send_ms = Some(arrival.at_ms);
            m.actual_send_ms = Some(ms(sent.saturating_duration_since(origin)));
            m.send_lag_ms = Some(ms(sent.saturating_duration_since(due)));
            m.prepare_late_ms = Some(late_ms);
            let _ = sink.send(m);
        });
    }
    while tasks.join_next().await.is_some() {}
    clock
}

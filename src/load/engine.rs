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
//! other session's preparation can erase it in between. A cold request that reuses nothing
//! (the preset's `cold_request`) needs no slot of its own and waits for none: it is sent to no
//! slot where no session holds one, and otherwise to a slot no session holds (`SlotPool`).
//!
//! The engine takes its server side as a `Driver`, so tests drive it with a simulated server
//! under paused tokio time and check every instant exactly; `bench load` passes the real one.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::meta::Arrival;
use ttft_model::record::{CacheState, ErrorInfo, ErrorKind, Measurement};

/// The server side of the loop.
pub trait Driver: Send + Sync + 'static {
    /// A session in its cache state, its measured request built.
    type Ready: Send + 'static;
    /// What `fire` got back.
    type Fired: Send + 'static;

    /// Puts arrival `index`'s session in its cache state, on server slot `slot` (None: an arrival
    /// that holds no slot of its own, see `holds_slot`). An error is the arrival's (failed) record.
    fn prepare(
        &self,
        index: u32,
        arrival: Arrival,
        slot: Option<u32>,
    ) -> impl Future<Output = Result<Self::Ready, Box<Measurement>>> + Send;

    /// Whether an arrival in `state` holds a slot of a slot-pinned server from its preparation
    /// to its cleanup. One that does not (a cold request that reuses nothing) is prepared without
    /// a slot and sent to none, or, where sessions hold slots, `pin`ned at its instant to a slot
    /// none of them holds.
    fn holds_slot(&self, _state: CacheState) -> bool {
        true
    }

    /// Binds a prepared arrival that holds no slot of its own to `slot`, before it is sent (and
    /// before its request is serialized). An error is why it cannot be.
    fn pin(&self, _ready: &mut Self::Ready, _slot: u32) -> Result<(), String> {
        Ok(())
    }

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
pub(crate) const SPIN: Duration = Duration::from_micros(2_000);

impl Timer {
    /// The dispatcher's wait: until shortly before `due`.
    pub(crate) async fn coarse(self, due: Instant) {
        let until = match self {
            Timer::Tokio => due,
            Timer::Precise => due.checked_sub(SPIN).unwrap_or(due),
        };
        if until > Instant::now() {
            tokio::time::sleep_until(until).await;
        }
    }

    /// The send task's wait: until `due` exactly.
    pub(crate) async fn fine(self, due: Instant) {
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

/// The slots of a slot-pinned server, leased two ways:
/// - a session lease, from an arrival's preparation to its cleanup: the slot holds the session's
///   cache, so nothing else may run on it (no session, no cold request in flight). At most
///   `session_cap` at once: with cold arrivals in the rate, one slot is never a session's, so a
///   cold arrival always finds a slot at its instant and never waits in the client;
/// - a flight lease, a cold request that reuses nothing (`Driver::holds_slot` false) taking a slot
///   no session holds at its instant, for as long as it is in flight. Several may share a slot:
///   the server queues them there, inside their TTFT, as it queues any request for a busy slot.
///
/// None: sessions are not slot-bound (each gets its index).
#[derive(Clone)]
pub(super) struct SlotPool(Option<Arc<Slots>>);

pub(super) struct Slots {
    state: Mutex<SlotsState>,
    freed: Notify,
}

struct SlotsState {
    /// Per slot: held by a session, and cold requests in flight on it.
    slots: Vec<(bool, u32)>,
    sessions: usize,
    session_cap: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum LeaseKind {
    Session,
    Flight,
}

pub(super) struct Lease {
    pub(super) slot: u32,
    kind: LeaseKind,
    pool: Option<Arc<Slots>>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(pool) = &self.pool else { return };
        {
            let mut s = pool.state.lock().unwrap_or_else(|p| p.into_inner());
            let sessions = &mut s.sessions;
            if self.kind == LeaseKind::Session {
                *sessions -= 1;
            }
            if let Some(slot) = s.slots.get_mut(self.slot as usize) {
                match self.kind {
                    LeaseKind::Session => slot.0 = false,
                    LeaseKind::Flight => slot.1 -= 1,
                }
            }
        }
        pool.freed.notify_waiters();
    }
}

impl SlotPool {
    /// `slots` server slots, of which sessions may hold at most `session_cap` (at least 1).
    pub(super) fn new(slots: Option<usize>, session_cap: Option<usize>) -> SlotPool {
        SlotPool(slots.map(|n| {
            let n = n.max(1);
            let state = SlotsState {
                slots: vec![(false, 0); n],
                sessions: 0,
                session_cap: session_cap.unwrap_or(n).clamp(1, n),
            };
            Arc::new(Slots { state: Mutex::new(state), freed: Notify::new() })
        }))
    }

    /// A session lease: waits for a slot nothing runs on (the lowest such).
    pub(super) async fn session(&self, index: u32) -> Lease {
        self.take(index, LeaseKind::Session, |s| {
            if s.sessions >= s.session_cap {
                return None;
            }
            s.slots.iter().position(|&(session, cold)| !session && cold == 0)
        })
        .await
    }

    /// A flight lease: the slot no session holds with the fewest cold requests in flight.
    pub(super) async fn flight(&self, index: u32) -> Lease {
        self.take(index, LeaseKind::Flight, |s| {
            let free = s.slots.iter().enumerate().filter(|(_, (session, _))| !session);
            free.min_by_key(|(i, (_, cold))| (*cold, *i)).map(|(i, _)| i)
        })
        .await
    }

    async fn take(&self, index: u32, kind: LeaseKind, pick: impl Fn(&SlotsState) -> Option<usize>) -> Lease {
        let Some(pool) = &self.0 else {
            return Lease { slot: index, kind, pool: None };
        };
        loop {
            // Registered before the state is read, so a release in between is not missed.
            let freed = pool.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut s = pool.state.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(i) = pick(&s) {
                    match kind {
                        LeaseKind::Session => {
                            s.slots[i].0 = true;
                            s.sessions += 1;
                        }
                        LeaseKind::Flight => s.slots[i].1 += 1,
                    }
                    return Lease { slot: i as u32, kind, pool: Some(pool.clone()) };
                }
            }
            freed.await;
        }
    }
}

type Prepared<D> = (Result<<D as Driver>::Ready, Box<Measurement>>, Option<Lease>, OwnedSemaphorePermit);

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
    // On a slot-pinned server, an arrival that holds no slot of its own is sent to none where no
    // arrival of the rate holds one (nothing can be overwritten), else pinned at its instant.
    let holds: Vec<bool> =
        plan.arrivals.iter().map(|a| plan.slots.is_none() || driver.holds_slot(a.state)).collect();
    let flights = plan.slots.is_some() && holds.iter().any(|h| *h) && holds.iter().any(|h| !h);
    let session_cap = plan.slots.map(|k| if flights && k >= 2 { k - 1 } else { k });
    let pool = SlotPool::new(plan.slots, session_cap);
    let (mut senders, mut receivers): (Vec<_>, VecDeque<_>) = (0..n).map(|_| oneshot::channel()).unzip();
    // Dropping the set (an interrupted run) aborts the preparations and the requests in flight.
    let mut tasks = JoinSet::new();
    {
        let (driver, arrivals, ahead, pool, holds) =
            (driver.clone(), plan.arrivals.clone(), ahead.clone(), pool.clone(), holds.clone());
        let senders = std::mem::take(&mut senders);
        tasks.spawn(async move {
            let mut preparing = JoinSet::new();
            for (i, (arrival, tx)) in arrivals.into_iter().zip(senders).enumerate() {
                let Ok(place) = ahead.clone().acquire_owned().await else { return };
                let lease = match holds[i] {
                    true => Some(pool.session(i as u32).await),
                    false => None,
                };
                let d = driver.clone();
                preparing.spawn(async move {
                    let ready = d.prepare(i as u32, arrival, lease.as_ref().map(|l| l.slot)).await;
                    let _ = tx.send((ready, lease, place));
                });
            }
            while preparing.join_next().await.is_some() {}
        });
    }
    // The clock starts once the first arrivals are prepared: the pipeline is full from the first
    // instant on. Never more sessions than a slot-bound server lets them hold (their leases end
    // only after their sends).
    let mut first = 0;
    let mut sessions = 0;
    for &holds_one in holds.iter().take(plan.ahead.max(1)) {
        if plan.slots.is_some() && holds_one {
            if Some(sessions) == session_cap {
                break;
            }
            sessions += 1;
        }
        first += 1;
    }
    let mut early: VecDeque<Option<Prepared<D>>> = VecDeque::new();
    for _ in 0..first {
        if let Some(rx) = receivers.pop_front() {
            early.push_back(rx.await.ok());
        }
    }
    let clock = RateClock { origin: Instant::now(), started_at: ttft_model::clock::now_rfc3339() };
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
        let (mut ready, lease, place) = match prepared {
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
        let (d, sink, rate, timer, pool) =
            (driver.clone(), sink.clone(), plan.rate_per_s, plan.timer, pool.clone());
        tasks.spawn(async move {
            drop(place);
            // A cold arrival beside sessions takes a slot none of them holds, at its instant.
            let flight = match lease.is_none() && flights {
                true => {
                    let flight = pool.flight(i as u32).await;
                    if let Err(why) = d.pin(&mut ready, flight.slot) {
                        let mut m = d.blank(i as u32, arrival);
                        m.error = Some(ErrorInfo::new(ErrorKind::PresetAction, why));
                        m.offered_rate_per_s = Some(rate);
                        m.scheduled_send_ms = Some(arrival.at_ms);
                        let _ = sink.send(m);
                        return;
                    }
                    Some(flight)
                }
                false => None,
            };
            let (sent, fired) = d.fire(&ready, timer.fine(due)).await;
            let mut m = d.finish(ready, fired, due).await;
            drop((lease, flight, in_flight));
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

//! The closed loop of one concurrency level: `users` users start together, and each sends its
//! next request the moment its last one ended (its session prepared first, as in the open loop:
//! reset; priming and eviction for warm; turns 1 and 2 for hot), until the level's duration is
//! over; requests in flight then finish. The server's speed sets the pace, so the level shows
//! the throughput it gives that many users and the latency they see: the throughput-vs-latency
//! curve. (An open loop asks the other question, docs/load.md says why both.)
//!
//! Each user draws its requests' cache states from the mix with a generator of its own, seeded
//! by the seed, the level and the user, so a level's draws depend on nothing else.
//!
//! Steady state: requests sent in the level's first `warmup` are recorded with `warmup: true` and
//! left out of its statistics: at the start every user sends at once, a burst no steady state has.
//!
//! Servers that pin sessions to slots get slot leases as in the open loop: a user holds its
//! slot from its preparation to its cleanup, so such a server serves at most its slots of users
//! at once, and the rest wait for a slot between their requests (run.json `slots_held`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::engine::{Driver, RateClock, SlotPool, ms};
use super::schedule::unit_open;
use crate::cli::Mix;
use crate::meta::Arrival;
use ttft_model::record::Measurement;
use ttft_model::stats::Rng;

/// Requests in a row that failed after which a user stops: a server answering every request
/// with an error at once would otherwise be asked thousands of times a second for the rest of the
/// level. Its failed records stay, and the level's goodput shows them.
pub(crate) const FAILED_IN_A_ROW: u32 = 3;

/// One level to run.
#[derive(Clone, Debug)]
pub(crate) struct LevelPlan {
    pub users: u32,
    pub duration: Duration,
    pub warmup: Duration,
    pub seed: u64,
    pub mix: Mix,
    /// Server slots sessions are pinned to (None: sessions are not slot-bound).
    pub slots: Option<usize>,
}

/// The generator of user `user` at a level of `users`.
fn user_rng(seed: u64, users: u32, user: u32) -> Rng {
    let mut rng = Rng::new(seed);
    rng.absorb(0x636c_6f73_6564 ^ u64::from(users));
    rng.absorb(u64::from(user));
    rng
}

/// Runs one level: every record goes to `sink` the moment its request is finished. Returns when
/// the duration is over and every request in flight has finished.
pub(crate) async fn run<D: Driver>(
    driver: Arc<D>,
    plan: LevelPlan,
    sink: mpsc::UnboundedSender<Measurement>,
) -> RateClock {
    let clock = RateClock { origin: Instant::now(), started_at: ttft_model::clock::now_rfc3339() };
    let origin = clock.origin;
    let (end, warm_until) = (origin + plan.duration, origin + plan.warmup);
    let pool = SlotPool::new(plan.slots, None);
    let next_index = Arc::new(AtomicU32::new(0));
    // Dropping the set (an interrupted level) aborts every user and its request in flight.
    let mut users = JoinSet::new();
    for user in 0..plan.users {
        let (driver, pool, sink, next_index, mix) =
            (driver.clone(), pool.clone(), sink.clone(), next_index.clone(), plan.mix.clone());
        let mut rng = user_rng(plan.seed, plan.users, user);
        let level = plan.users;
        users.spawn(async move {
            let mut failed = 0;
            while Instant::now() < end && failed < FAILED_IN_A_ROW {
                let state = mix.draw(unit_open(&mut rng) - f64::EPSILON);
                let index = next_index.fetch_add(1, Ordering::Relaxed);
                let lease = pool.session(index).await;
                let intent = Instant::now();
                if intent >= end {
                    return;
                }
                let arrival = Arrival { at_ms: ms(intent - origin), state };
                let stamp = |m: &mut Measurement| {
                    m.concurrency = Some(level);
                    m.user_id = Some(user);
                };
                let ready = match driver.prepare(index, arrival, Some(lease.slot)).await {
                    Ok(ready) => ready,
                    Err(mut m) => {
                        stamp(&mut m);
                        m.warmup = intent < warm_until;
                        let _ = sink.send(*m);
                        failed += 1;
                        continue;
                    }
                };
                // The send is due the moment the session is ready: any wait past it is the
                // client's own (its lane's queue), kept as send lag.
                let due = Instant::now();
                let (sent, fired) = driver.fire(&ready, std::future::ready(())).await;
                let mut m = driver.finish(ready, fired, due).await;
                drop(lease);
                stamp(&mut m);
                m.actual_send_ms = Some(ms(sent.saturating_duration_since(origin)));
                m.send_lag_ms = Some(ms(sent.saturating_duration_since(due)));
                m.warmup = sent < warm_until;
                failed = if m.error.is_some() { failed + 1 } else { 0 };
                let _ = sink.send(m);
            }
        });
    }
    while users.join_next().await.is_some() {}
    clock
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_user_draws_its_own_states_whatever_the_other_users_do() {
        let mix: Mix = "cold=0.5,hot=0.5".parse().unwrap();
        let draws = |users, user| {
            let mut rng = user_rng(7, users, user);
            (0..32).map(|_| mix.draw(unit_open(&mut rng) - f64::EPSILON)).collect::<Vec<_>>()
        };
        assert_eq!(draws(4, 1), draws(4, 1));
        assert_ne!(draws(4, 1), draws(4, 2));
        assert_ne!(draws(4, 1), draws(16, 1), "a level's draws are its own");
    }
}

//! The open loop under paused tokio time: a simulated server (a FIFO queue in front of
//! `max_concurrent` serving places, each request taking a fixed prefill and token time) stands in
//! for the real one, so every instant, TTFT, goodput and knee is checked exactly.
//!
//! Paused tokio time moves in whole milliseconds (the timer wheel's resolution), so a send due at
//! 12.345 ms leaves at 13 ms of virtual time: the tests expect exactly that.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use ttft_bench::cli::{Mix, Slo};
use ttft_bench::load::engine::{self, Driver, RatePlan, Timer};
use ttft_bench::load::schedule;
use ttft_bench::load::summary;
use ttft_bench::meta::Arrival;
use ttft_model::record::{CacheState, CellKey, ErrorInfo, ErrorKind, Measurement, Mode, Scenario};

/// A simulated server and session preparation.
struct Sim {
    run: u32,
    /// Serving places; the rest wait first come, first served (tokio's semaphore is fair).
    places: Option<Arc<Semaphore>>,
    prefill_ms: u64,
    token_ms: u64,
    tokens: u32,
    /// Preparation time per cache state (cold, warm, hot).
    prepare_ms: [u64; 3],
    /// Arrivals whose preparation fails.
    fail_prepare: Vec<u32>,
    /// (index, slot) of every preparation, in the order they started.
    slots_used: Mutex<Vec<(u32, u32)>>,
    in_flight: Mutex<(usize, usize)>,
}

impl Sim {
    fn new(run: u32, max_concurrent: Option<usize>) -> Sim {
        Sim {
            run,
            places: max_concurrent.map(|n| Arc::new(Semaphore::new(n))),
            prefill_ms: 50,
            token_ms: 5,
            tokens: 11,
            prepare_ms: [1, 1, 1],
            fail_prepare: Vec::new(),
            slots_used: Mutex::new(Vec::new()),
            in_flight: Mutex::new((0, 0)),
        }
    }

    fn blank_of(&self, index: u32, state: CacheState) -> Measurement {
        Measurement {
            cell: CellKey {
                dataset_row: None,
                model: "sim".into(),
                scenario: Scenario::Load,
                cache_state: state,
                mode: Mode::Streaming,
                context_tokens: 1024,
                batch_size: 1,
                run: self.run,
            },
            request_index: index,
            ..Default::default()
        }
    }
}

struct Answer {
    ttft_ms: f64,
    offsets: Vec<f64>,
    e2e_ms: f64,
}

fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

impl Driver for Sim {
    type Ready = (u32, Arrival);
    type Fired = Answer;

    async fn prepare(
        &self,
        index: u32,
        arrival: Arrival,
        slot: Option<u32>,
    ) -> Result<(u32, Arrival), Box<Measurement>> {
        self.slots_used.lock().unwrap().push((index, slot.unwrap_or(u32::MAX)));
        let i = arrival.state as usize;
        tokio::time::sleep(Duration::from_millis(self.prepare_ms[i])).await;
        if self.fail_prepare.contains(&index) {
            let mut m = self.blank_of(index, arrival.state);
            m.error = Some(ErrorInfo::new(ErrorKind::PresetAction, "evict failed"));
            return Err(Box::new(m));
        }
        Ok((index, arrival))
    }

    async fn fire(&self, _ready: &(u32, Arrival), at: impl Future<Output = ()> + Send) -> (Instant, Answer) {
        at.await;
        let sent = Instant::now();
        {
            let mut f = self.in_flight.lock().unwrap();
            f.0 += 1;
            f.1 = f.1.max(f.0);
        }
        let place = match &self.places {
            Some(p) => Some(p.clone().acquire_owned().await.unwrap()),
            None => None,
        };
        tokio::time::sleep(Duration::from_millis(self.prefill_ms)).await;
        let mut offsets = vec![ms(sent.elapsed())];
        for _ in 1..self.tokens {
            tokio::time::sleep(Duration::from_millis(self.token_ms)).await;
            offsets.push(ms(sent.elapsed()));
        }
        drop(place);
        self.in_flight.lock().unwrap().0 -= 1;
        (sent, Answer { ttft_ms: offsets[0], e2e_ms: ms(sent.elapsed()), offsets })
    }

    async fn finish(&self, ready: (u32, Arrival), a: Answer, _due: Instant) -> Measurement {
        let mut m = self.blank_of(ready.0, ready.1.state);
        m.ttft_ms = Some(a.ttft_ms);
        m.e2e_ms = Some(a.e2e_ms);
        m.token_offsets_ms = a.offsets;
        m.output_tokens = Some(u64::from(self.tokens));
        m.quality_ok = true;
        m.cache_state_confirmed = Some(true);
        m
    }

    fn blank(&self, index: u32, arrival: Arrival) -> Measurement {
        self.blank_of(index, arrival.state)
    }
}

fn plan(rate: f64, arrivals: Vec<Arrival>) -> RatePlan {
    RatePlan {
        rate_per_s: rate,
        arrivals,
        ahead: 4,
        slots: None,
        concurrency_limit: None,
        timer: Timer::Tokio,
    }
}

async fn run_sim(sim: Arc<Sim>, plan: RatePlan) -> Vec<Measurement> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    engine::run(sim, plan, tx).await;
    let mut out = Vec::new();
    while let Ok(m) = rx.try_recv() {
        out.push(m);
    }
    out.sort_by_key(|m| m.request_index);
    out
}

fn mix() -> Mix {
    "cold=0.5,warm=0.2,hot=0.3".parse().unwrap()
}

#[tokio::test(start_paused = true)]
async fn every_request_leaves_at_its_poisson_instant_however_slow_the_server() {
    let arrivals = schedule::arrivals(11, 20.0, 10.0, &mix());
    assert!(arrivals.len() > 150, "{}", arrivals.len());
    // A server far slower than the arrival gaps (TTFT 2 s), and only 2 serving places: an open
    // loop still sends on schedule; the queue shows in TTFT, not in the sends.
    let mut sim = Sim::new(1, Some(2));
    sim.prefill_ms = 2000;
    let records = run_sim(Arc::new(sim), plan(20.0, arrivals.clone())).await;
    assert_eq!(records.len(), arrivals.len());
    for (m, a) in records.iter().zip(&arrivals) {
        assert_eq!(m.scheduled_send_ms, Some(a.at_ms));
        assert_eq!(m.cell.cache_state, a.state);
        // Paused time fires timers on the next whole millisecond.
        assert_eq!(m.actual_send_ms, Some(a.at_ms.ceil()), "arrival {}", m.request_index);
        let lag = m.send_lag_ms.unwrap();
        assert!((lag - (a.at_ms.ceil() - a.at_ms)).abs() < 1e-6 && lag < 1.0, "{lag}");
        assert_eq!((m.prepare_late_ms, m.offered_rate_per_s), (Some(0.0), Some(20.0)));
    }
    let ttft_last = records.last().unwrap().ttft_ms.unwrap();
    assert!(ttft_last > 10_000.0, "the queue grew (last TTFT {ttft_last} ms)");
}

#[tokio::test(start_paused = true)]
async fn a_late_preparation_delays_its_send_and_says_by_how_much() {
    // Arrivals at 10, 20 and 30 ms; hot sessions take 45 ms to prepare, one at a time.
    let at = |ms: f64, state| Arrival { at_ms: ms, state };
    let arrivals = vec![at(10.0, CacheState::Cold), at(20.0, CacheState::Hot), at(30.0, CacheState::Cold)];
    let mut sim = Sim::new(1, None);
    sim.prepare_ms = [5, 0, 45];
    let mut p = plan(3.0, arrivals);
    p.ahead = 1;
    let records = run_sim(Arc::new(sim), p).await;
    // The clock starts once arrival 0 is prepared (5 ms). Arrival 1's preparation starts when
    // arrival 0 leaves (10 ms) and ends at 55 ms: 35 ms late. Arrival 2's starts then (55 ms),
    // ends at 60 ms: 30 ms late.
    let got: Vec<(f64, f64, f64)> = records
        .iter()
        .map(|m| (m.actual_send_ms.unwrap(), m.send_lag_ms.unwrap(), m.prepare_late_ms.unwrap()))
        .collect();
    assert_eq!(got, [(10.0, 0.0, 0.0), (55.0, 35.0, 35.0), (60.0, 30.0, 30.0)]);
    let s =
        summary::summarize(&records, &[(1, 3.0)], &[CacheState::Cold, CacheState::Hot], Slo::default(), 0.9);
    assert_eq!(s.rates[0].prepared_late, 2);
    assert!(!s.rates[0].honestly_offered, "p99 send lag 35 ms > 1 ms");
}

#[tokio::test(start_paused = true)]
async fn slot_bound_sessions_hold_their_slot_from_preparation_to_cleanup() {
    let arrivals: Vec<Arrival> =
        (0..6).map(|i| Arrival { at_ms: 1.0 + f64::from(i), state: CacheState::Hot }).collect();
    let sim = Arc::new(Sim::new(1, None));
    let mut p = plan(1000.0, arrivals);
    p.slots = Some(2);
    let records = run_sim(sim.clone(), p).await;
    // Each request takes 100 ms: only 2 sessions exist at once, so arrivals 2.. wait for a slot.
    let used = sim.slots_used.lock().unwrap().clone();
    assert_eq!(used.iter().map(|(_, s)| *s).collect::<Vec<_>>(), [0, 1, 0, 1, 0, 1]);
    assert_eq!(sim.in_flight.lock().unwrap().1, 2);
    assert!(records[2].prepare_late_ms.unwrap() > 90.0, "{:?}", records[2].prepare_late_ms);
}

#[tokio::test(start_paused = true)]
async fn a_concurrency_limit_closes_the_loop_and_the_wait_shows_as_send_lag() {
    let arrivals: Vec<Arrival> =
        (0..4).map(|i| Arrival { at_ms: f64::from(i), state: CacheState::Cold }).collect();
    let sim = Arc::new(Sim::new(1, None));
    let mut p = plan(1000.0, arrivals);
    p.concurrency_limit = Some(1);
    let records = run_sim(sim.clone(), p).await;
    assert_eq!(sim.in_flight.lock().unwrap().1, 1);
    // One at a time, 100 ms each, after the first at 0 ms.
    let sends: Vec<f64> = records.iter().map(|m| m.actual_send_ms.unwrap()).collect();
    assert_eq!(sends, [0.0, 100.0, 200.0, 300.0]);
    assert_eq!(records[3].send_lag_ms, Some(297.0));
}

#[tokio::test(start_paused = true)]
async fn a_failed_preparation_is_a_record_that_misses_the_slo() {
    let arrivals: Vec<Arrival> =
        (0..4).map(|i| Arrival { at_ms: 10.0 * f64::from(i + 1), state: CacheState::Warm }).collect();
    let mut sim = Sim::new(1, None);
    sim.fail_prepare = vec![2];
    let records = run_sim(Arc::new(sim), plan(4.0, arrivals)).await;
    assert_eq!(records.len(), 4);
    assert_eq!(records[2].error.as_ref().map(|e| e.kind), Some(ErrorKind::PresetAction));
    assert_eq!((records[2].scheduled_send_ms, records[2].actual_send_ms), (Some(30.0), None));
    let s = summary::summarize(&records, &[(1, 4.0)], &[CacheState::Warm], Slo::default(), 0.9);
    let warm = &s.rates[0].states[0];
    assert_eq!((warm.requests, warm.good, warm.met_slo, warm.goodput), (4, 3, 3, Some(0.75)));
    assert_eq!(s.rates[0].sent, 3);
}

/// TTFTs of a one-place FIFO server with a fixed service time, from the send instants alone
/// (Lindley's recursion: a request starts when it arrives or when the one before it ends).
fn lindley(sends_ms: &[f64], prefill_ms: f64, service_ms: f64) -> Vec<f64> {
    let mut end = f64::MIN;
    sends_ms
        .iter()
        .map(|&send| {
            let start = send.max(end);
            end = start + service_ms;
            start - send + prefill_ms
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_knee_of_a_saturating_server_lands_where_the_queue_arithmetic_puts_it() {
    // One serving place, 100 ms a request (50 ms prefill, then 10 gaps of 5 ms): 10 requests/s at
    // most. With a TTFT SLO of 200 ms a request may wait at most 150 ms in the queue.
    let slo = Slo { ttft_ms: 200.0, itl_ms: 50.0 };
    let rates = [1.0, 2.0, 4.0, 8.0, 16.0];
    let schedules = schedule::plan_rates(20260208, &rates, 60.0, &mix());
    let mut records = Vec::new();
    for s in &schedules {
        let sim = Arc::new(Sim::new(s.run, Some(1)));
        records.extend(run_sim(sim, plan(s.rate_per_s, s.arrivals.clone())).await);
    }
    let runs: Vec<(u32, f64)> = schedules.iter().map(|s| (s.run, s.rate_per_s)).collect();
    let states = mix().states();
    let summary = summary::summarize(&records, &runs, &states, slo, 0.9);
    let mut expected_goodput = Vec::new();
    for s in &schedules {
        let mut mine: Vec<&Measurement> = records.iter().filter(|m| m.cell.run == s.run).collect();
        mine.sort_by(|a, b| a.actual_send_ms.partial_cmp(&b.actual_send_ms).unwrap());
        let sends: Vec<f64> = mine.iter().map(|m| m.actual_send_ms.unwrap()).collect();
        let want = lindley(&sends, 50.0, 100.0);
        // The SLO counts TTFT from the scheduled send: the queue wait, the prefill and the send lag.
        let met = want.iter().zip(&mine).filter(|(t, m)| *t + m.send_lag_ms.unwrap() <= 200.0).count();
        let mut want = want;
        let mut got: Vec<f64> = mine.iter().map(|m| m.ttft_ms.unwrap()).collect();
        want.sort_by(f64::total_cmp);
        got.sort_by(f64::total_cmp);
        assert_eq!(got, want, "rate {}: TTFT = queue wait + prefill", s.rate_per_s);
        let all = summary.rates.iter().find(|r| r.run == s.run).unwrap().states.last().unwrap();
        assert_eq!((all.state, all.requests, all.met_slo), (None, s.arrivals.len(), met));
        expected_goodput.push(met as f64 / s.arrivals.len() as f64);
    }
    // The knee: the last rate before the first whose goodput is below 90%.
    let below = expected_goodput.iter().position(|&g| g < 0.9).unwrap_or(rates.len());
    let expected_knee = below.checked_sub(1).map(|i| rates[i]);
    let knee = summary.knees.iter().find(|k| k.state.is_none()).unwrap().rate_per_s;
    assert_eq!(knee, expected_knee, "goodput per rate {expected_goodput:?}");
    // Below capacity with room to spare the queue rarely reaches 150 ms; at 16/s it never drains.
    assert_eq!(knee, Some(4.0), "goodput per rate {expected_goodput:?}");
    assert!(expected_goodput[4] < 0.1, "{expected_goodput:?}");
    // Every send kept its instant: each rate was honestly offered (paused time lags < 1 ms).
    assert!(summary.rates.iter().all(|r| r.honestly_offered));
}

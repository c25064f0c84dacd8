//! Where chat requests are sent and their streams read: a few threads ("lanes"), each with its own
//! single-threaded tokio runtime and its own connection pool.
//!
//! Why not the sweep's multi-threaded runtime: there, a connection's socket is read by one worker
//! and every body chunk is handed through a channel to the task awaiting the stream, often on
//! another thread (the sweep itself runs in `block_on` on the main thread), so each token costs a
//! cross-thread wakeup. Measured against `bench-scripted-server` on two dedicated cores
//! (docs/client-lanes.md): 1.5-2.5x less client CPU per request, and at 256 streams the first-token
//! stamp's p99 lag and the ITL error's p99 under 1 ms where the shared runtime had 1-6 ms. On a
//! lane, the socket, the SSE decoding and the arrival stamps all happen on one thread, and lanes
//! read their sockets in parallel, each with its own epoll.
//!
//! A request goes to the lane with the fewest requests in flight, the lowest-numbered on a tie.
//! So requests sent one after another all go to lane 0 and take the spare connection it opened
//! after the one before (direct.rs), and a batch released together spreads evenly.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::options::{ClientOptions, http_client};
use super::{Exchange, Prepared};
use crate::SetupError;
use ttft_model::record::ErrorKind;
use ttft_model::spec::Api;

/// At most this many lanes: beyond eight, a measuring client would take cores from a server on
/// the same host, and eight already read 256 streams with room to spare (docs/client-lanes.md).
const MAX_LANES: usize = 8;

/// One exchange for a lane: the request, prepared on the caller's side, and where to answer.
struct Job {
    prepared: Prepared,
    reply: oneshot::Sender<Exchange>,
}

/// What a lane is asked to do.
enum Work {
    Exchange(Box<Job>),
    /// Have this many spare connections to this `host:port` (direct.rs), then say so.
    #[cfg_attr(not(unix), allow(dead_code))]
    Spares {
        authority: String,
        count: usize,
        done: oneshot::Sender<()>,
    },
}

/// What every exchange of a client is run with.
#[derive(Clone)]
struct Settings {
    options: ClientOptions,
    api: Api,
    timeout: Duration,
}

pub(super) struct Lanes {
    jobs: Vec<mpsc::UnboundedSender<Work>>,
    /// Requests handed to each lane and not yet answered.
    in_flight: Vec<Arc<AtomicUsize>>,
}

impl Lanes {
    /// One lane per core, at most `MAX_LANES`, all started (and their pools built) before this
    /// returns: a lane that started inside a measured window would put its start-up (about 30 ms,
    /// mostly the TLS roots loaded by its HTTP client) into that request's TTFT.
    pub(super) fn start(options: &ClientOptions, api: Api, timeout: Duration) -> Result<Lanes, SetupError> {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, MAX_LANES);
        let settings = Settings { options: options.clone(), api, timeout };
        let in_flight: Vec<_> = (0..n).map(|_| Arc::new(AtomicUsize::new(0))).collect();
        let mut jobs = Vec::new();
        let mut ready = Vec::new();
        for (i, count) in in_flight.iter().enumerate() {
            let (send, queue) = mpsc::unbounded_channel();
            let (started, is_ready) = std::sync::mpsc::channel();
            let (settings, count) = (settings.clone(), count.clone());
            std::thread::Builder::new()
                .name(format!("bench-lane-{i}"))
                .spawn(move || run_lane(settings, queue, count, started))
                .map_err(|e| SetupError::Start(format!("cannot start client lane {i}: {e}")))?;
            jobs.push(send);
            ready.push(is_ready);
        }
        for (i, is_ready) in ready.into_iter().enumerate() {
            match is_ready.recv() {
                Ok(Ok(())) => {}
                Ok(Err(why)) => return Err(why),
                Err(_) => return Err(SetupError::Start(format!("client lane {i} ended while starting"))),
            }
        }
        Ok(Lanes { jobs, in_flight })
    }

    /// Runs the exchange on a lane and waits for it. Dropping the returned future abandons the
    /// request: the lane stops reading it and drops its connection.
    pub(super) async fn send(&self, prepared: Prepared) -> Exchange {
        let (reply, answer) = oneshot::channel();
        let i = least_busy(&self.in_flight);
        self.in_flight[i].fetch_add(1, Ordering::SeqCst);
        if self.jobs[i].send(Work::Exchange(Box::new(Job { prepared, reply }))).is_err() {
            self.in_flight[i].fetch_sub(1, Ordering::SeqCst);
            return failed("the client lane has stopped".into());
        }
        answer.await.unwrap_or_else(|_| failed("the client lane stopped before answering".into()))
    }

    /// `n` spare connections to `authority`, spread over the lanes as `n` requests sent together
    /// now would be (`least_busy` with none in flight: lane i takes the i-th, the n+i-th, ...);
    /// returns once every lane has opened its share.
    #[cfg(unix)]
    pub(super) async fn preconnect(&self, authority: &str, n: usize) {
        let lanes = self.jobs.len();
        let mut opened = Vec::new();
        for (i, lane) in self.jobs.iter().enumerate() {
            let count = n / lanes + usize::from(i < n % lanes);
            if count == 0 {
                continue;
            }
            let (done, is_done) = oneshot::channel();
            if lane.send(Work::Spares { authority: authority.to_string(), count, done }).is_ok() {
                opened.push(is_done);
            }
        }
        for is_done in opened {
            let _ = is_done.await;
        }
    }
}

/// The lane with the fewest requests in flight; the lowest index on a tie.
fn least_busy(in_flight: &[Arc<AtomicUsize>]) -> usize {
    let loads = in_flight.iter().map(|n| n.load(Ordering::SeqCst));
    loads.enumerate().min_by_key(|&(i, n)| (n, i)).map_or(0, |(i, _)| i)
}

/// A lane's thread: its runtime and pool, then every job it is sent, until the client is dropped.
fn run_lane(
    settings: Settings,
    queue: mpsc::UnboundedReceiver<Work>,
    in_flight: Arc<AtomicUsize>,
    started: std::sync::mpsc::Sender<Result<(), SetupError>>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = started.send(Err(SetupError::Start(format!("cannot start a client lane: {e}"))));
            return;
        }
    };
    // The lane's own pool: its connections are driven by this thread alone.
    let http = match http_client(&settings.options) {
        Ok(http) => http,
        Err(e) => {
            let _ = started.send(Err(e));
            return;
        }
    };
    let _ = started.send(Ok(()));
    runtime.block_on(serve(queue, http, settings, in_flight));
}

/// A lane's loop: every job becomes a task on this thread.
async fn serve(
    mut queue: mpsc::UnboundedReceiver<Work>,
    http: reqwest::Client,
    settings: Settings,
    in_flight: Arc<AtomicUsize>,
) {
    let (api, limits, timeout) = (settings.api, settings.options.limits, settings.timeout);
    #[cfg(unix)]
    let spares = Arc::new(super::direct::Spares::new(settings.options.keep_alive_idle));
    while let Some(work) = queue.recv().await {
        let mut job = match work {
            Work::Exchange(job) => *job,
            #[cfg(unix)]
            Work::Spares { authority, count, done } => {
                let spares = spares.clone();
                tokio::spawn(async move {
                    spares.fill(&authority, count).await;
                    let _ = done.send(());
                });
                continue;
            }
            #[cfg(not(unix))]
            Work::Spares { done, .. } => {
                let _ = done.send(());
                continue;
            }
        };
        let (http, in_flight) = (http.clone(), in_flight.clone());
        #[cfg(unix)]
        let spares = spares.clone();
        tokio::spawn(async move {
            let run = async {
                #[cfg(unix)]
                if let Some(wire) = &job.prepared.wire {
                    let stream = job.prepared.stream;
                    return super::direct::exchange(&spares, api, &limits, timeout, wire, stream).await;
                }
                super::exchange(&http, api, &limits, timeout, job.prepared).await
            };
            let answer = tokio::select! {
                ex = run => Some(ex),
                () = job.reply.closed() => None,
            };
            // Counted out before the caller hears back: a caller that sends its next request at
            // once must find this lane free again, or it would go to another lane's pool and pay a
            // connect inside its measured time.
            in_flight.fetch_sub(1, Ordering::SeqCst);
            if let Some(ex) = answer {
                let _ = job.reply.send(ex);
            }
        });
    }
}

fn failed(why: String) -> Exchange {
    let mut ex = Exchange { started_at: ttft_model::clock::now_rfc3339(), ..Default::default() };
    ex.fail(ErrorKind::Transport, why);
    ex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_requests_stay_on_lane_zero_and_a_batch_spreads_evenly() {
        let in_flight: Vec<_> = (0..3).map(|_| Arc::new(AtomicUsize::new(0))).collect();
        // One at a time: lane 0 is free again each time.
        for _ in 0..3 {
            let i = least_busy(&in_flight);
            assert_eq!(i, 0);
            in_flight[i].fetch_add(1, Ordering::SeqCst);
            in_flight[i].fetch_sub(1, Ordering::SeqCst);
        }
        // Seven at once: 3, 2, 2.
        let mut picked = Vec::new();
        for _ in 0..7 {
            let i = least_busy(&in_flight);
            in_flight[i].fetch_add(1, Ordering::SeqCst);
            picked.push(i);
        }
        assert_eq!(picked, vec![0, 1, 2, 0, 1, 2, 0]);
    }
}

//! A fired request's instants, and which of them its timings count from.
//!
//! Three instants matter, in this order:
//! - `window_start`: the timed window opens (before a warm reload, which is inside TTFT);
//! - `handed_off`: the request is handed to the client (after the reload, if any);
//! - the exchange's own start (`Exchange::start`), when its lane takes it up: a connection taken
//!   or made, then the write.
//!
//! Between the last two the request waits in the client: for the lane to wake, and for the
//! requests handed to that lane just before it to be written (a batch of 64 on 2 lanes: up to 31
//! writes, each ~10-15 us on loopback, where a write also does the server's receive work). That
//! wait is the client's, not the server's, so it is not in TTFT: it is send lag, recorded beside
//! it, since client-side queueing left out of the record is a known way harnesses mislead
//! (docs/design.md, "Pitfalls"). Before, it was inside TTFT and in no field at all.

use std::time::Duration;

use tokio::time::Instant;

use ttft_client::Exchange;
use ttft_model::record::ErrorInfo;

/// Result of `fire`: the exchange, with its offsets counted from its own start on a lane.
pub(crate) struct Fired {
    pub exchange: Exchange,
    /// When the timed window opened (reload start for warm, the hand-off for the rest).
    pub window_start: Instant,
    /// When the request was handed to the client, after a warm reload.
    pub handed_off: Instant,
    pub reload_ms: Option<f64>,
    /// A reload failure: the request was not sent.
    pub error: Option<ErrorInfo>,
    /// The request's path and body bytes, kept only for `--request-bodies` (copied before the
    /// window opened).
    pub body: Option<(String, Vec<u8>)>,
}

impl Fired {
    /// A request that was never handed to the client (it could not be built, or its reload
    /// failed): nothing was queued or sent.
    pub(crate) fn unsent(window_start: Instant, error: ErrorInfo) -> Fired {
        let exchange = Exchange::default();
        Fired {
            exchange,
            window_start,
            handed_off: window_start,
            reload_ms: None,
            error: Some(error),
            body: None,
        }
    }

    /// How long the request waited in the client after it was handed off, before its lane took
    /// it up (zero when the exchange never started).
    pub(crate) fn queued(&self) -> Duration {
        let start = self.exchange.start.map(Instant::from_std);
        start.map_or(Duration::ZERO, |s| s.saturating_duration_since(self.handed_off))
    }

    /// The window's start as the record counts it: moved on by the client's own queueing, so
    /// that the TTFT counted from here holds a warm reload and the server's time, not the wait.
    pub(crate) fn sent_at(&self) -> Instant {
        self.window_start + self.queued()
    }

    /// What to add to the exchange's offsets (counted from its own start) to count them from
    /// `sent_at`: the reload, for warm.
    pub(crate) fn offset_ms(&self) -> f64 {
        ms(self.handed_off.saturating_duration_since(self.window_start))
    }

    /// From `due` (a batch's release, a load arrival's instant) to `sent_at`: client-side queueing.
    pub(crate) fn send_lag_ms(&self, due: Instant) -> f64 {
        ms(self.sent_at().saturating_duration_since(due))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Released at 0; window opens at 1 ms; a 5 ms reload; handed off at 6 ms; the lane takes it
    /// up at 9 ms (3 ms behind earlier writes); first token 10 ms after that.
    #[tokio::test(start_paused = true)]
    async fn a_lanes_queue_is_send_lag_and_a_reload_is_ttft() {
        let release = Instant::now();
        let at = |ms: u64| release + Duration::from_millis(ms);
        let exchange = Exchange { start: Some(at(9).into_std()), ttft_ms: Some(10.0), ..Default::default() };
        let fired = Fired {
            exchange,
            window_start: at(1),
            handed_off: at(6),
            reload_ms: Some(5.0),
            error: None,
            body: None,
        };
        assert_eq!(fired.queued(), Duration::from_millis(3));
        assert_eq!(fired.sent_at(), at(4));
        // TTFT: the reload and the server's 10 ms; not the client's 3 ms queue.
        assert_eq!(fired.offset_ms() + 10.0, 15.0);
        // Send lag: 1 ms before the window opened, 3 ms in the lane's queue.
        assert_eq!(fired.send_lag_ms(release), 4.0);
        // Nothing lost: due to first token is send lag + TTFT, 19 ms.
        assert_eq!(fired.send_lag_ms(release) + fired.offset_ms() + 10.0, 19.0);
        // And so the record reads (before, the queue was in TTFT: 18 ms, send lag 1 ms).
        let mut m = ttft_model::record::Measurement::default();
        super::super::measure::record_exchange(&mut m, &fired, Some(release), None, None);
        assert_eq!((m.ttft_ms, m.send_lag_ms), (Some(15.0), Some(4.0)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_never_sent_has_no_queue() {
        let t = Instant::now();
        let fired = Fired::unsent(t, ErrorInfo::new(ttft_model::record::ErrorKind::Protocol, "x"));
        assert_eq!(fired.queued(), Duration::ZERO);
        assert_eq!(fired.sent_at(), t);
        assert_eq!(fired.offset_ms(), 0.0);
    }
}

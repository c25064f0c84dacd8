//! What `bench load` offers: the rates, the cache-state mix, the SLO, and each rate's Poisson
//! schedule of arrivals, drawn from the project's one seeded generator (`stats::Rng`).
//!
//! A rate's schedule depends only on the seed and the rate itself (the rate's bits are stirred
//! into the generator), so adding or reordering rates never changes the schedule of another, and
//! the same `--seed` gives the same arrival instants and cache states on every machine.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::record::CacheState;
use crate::stats::Rng;

/// The highest arrival rate accepted (requests/s): far above anything a client keeps honestly, low
/// enough that a typo (`--rates 1e9`) is an error, not a schedule of billions of requests.
pub const MAX_RATE_PER_S: f64 = 100_000.0;

/// Arrivals one rate may have at most (rate x duration): the schedule is held in memory and in
/// run.json.
pub const MAX_ARRIVALS: usize = 1_000_000;

/// A load flag that does not parse (clap names the flag).
#[derive(Debug, thiserror::Error)]
pub enum LoadSpecError {
    #[error("{0:?} is not a rate in requests/s (examples: 0.5, 8)")]
    NotRate(String),
    #[error("{0:?}: a rate must be more than 0 requests/s")]
    RateNotPositive(String),
    #[error("{text:?}: at most {max} requests/s")]
    RateTooHigh { text: String, max: f64 },
    #[error("rate {0} is listed twice")]
    RateTwice(String),
    #[error("{0:?} is not state=share (example: cold=0.5,warm=0.2,hot=0.3)")]
    NotShare(String),
    #[error("{0:?}: a share must be a number, 0 or more")]
    BadShare(String),
    #[error("{0} is listed twice")]
    StateTwice(CacheState),
    #[error("every share is 0: nothing could be drawn")]
    AllZero,
    #[error("{0:?} is not key=duration (example: ttft=500ms)")]
    NotSlo(String),
    #[error("unknown SLO key {0:?} (allowed: ttft, itl)")]
    UnknownSloKey(String),
    #[error("{part:?}: {source}")]
    Spec { part: String, source: crate::spec::SpecError },
}

/// An offered arrival rate, requests per second (`0.5`, `8`).
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize, Deserialize)]
pub struct Rate(pub f64);

impl FromStr for Rate {
    type Err = LoadSpecError;
    fn from_str(text: &str) -> Result<Rate, LoadSpecError> {
        let value: f64 = text.trim().parse().map_err(|_| LoadSpecError::NotRate(text.into()))?;
        if !value.is_finite() || value <= 0.0 {
            return Err(LoadSpecError::RateNotPositive(text.into()));
        }
        if value > MAX_RATE_PER_S {
            return Err(LoadSpecError::RateTooHigh { text: text.into(), max: MAX_RATE_PER_S });
        }
        Ok(Rate(value))
    }
}

/// `--rates`: a comma list of rates, none twice.
#[derive(Clone, Debug, PartialEq)]
pub struct Rates(pub Vec<Rate>);

impl FromStr for Rates {
    type Err = LoadSpecError;
    fn from_str(spec: &str) -> Result<Rates, LoadSpecError> {
        let mut out: Vec<Rate> = Vec::new();
        for part in spec.split(',') {
            let rate: Rate = part.parse()?;
            if out.contains(&rate) {
                return Err(LoadSpecError::RateTwice(part.trim().into()));
            }
            out.push(rate);
        }
        Ok(Rates(out))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The share of arrivals of each cache state: `cold=0.5,warm=0.2,hot=0.3`. Weights need not sum
/// to 1 (they are normalized); a state left out is never drawn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mix(pub Vec<(CacheState, f64)>);

impl Mix {
    /// The states that can be drawn (weight above 0), in the order given.
    pub fn states(&self) -> Vec<CacheState> {
        self.0.iter().filter(|(_, w)| *w > 0.0).map(|(s, _)| *s).collect()
    }

    /// Each state's share of arrivals (weights normalized to 1).
    pub fn shares(&self) -> Vec<(CacheState, f64)> {
        let total: f64 = self.0.iter().map(|(_, w)| w).sum();
        self.0.iter().filter(|(_, w)| *w > 0.0).map(|(s, w)| (*s, w / total)).collect()
    }

    fn draw(&self, u: f64) -> CacheState {
        let shares = self.shares();
        let mut acc = 0.0;
        for (state, share) in &shares {
            acc += share;
            if u < acc {
                return *state;
            }
        }
        // u is below 1 and the shares sum to 1 up to rounding: the last state takes the rest.
        shares.last().map_or(CacheState::Cold, |(s, _)| *s)
    }
}

impl Default for Mix {
    fn default() -> Mix {
        Mix(vec![(CacheState::Cold, 1.0)])
    }
}

impl FromStr for Mix {
    type Err = LoadSpecError;
    fn from_str(spec: &str) -> Result<Mix, LoadSpecError> {
        let mut out: Vec<(CacheState, f64)> = Vec::new();
        for part in spec.split(',').map(str::trim) {
            let (state, weight) = part.split_once('=').ok_or_else(|| LoadSpecError::NotShare(part.into()))?;
            let state: CacheState =
                state.parse().map_err(|source| LoadSpecError::Spec { part: part.into(), source })?;
            let weight: f64 = weight.trim().parse().map_err(|_| LoadSpecError::BadShare(part.into()))?;
            if !weight.is_finite() || weight < 0.0 {
                return Err(LoadSpecError::BadShare(part.into()));
            }
            if out.iter().any(|(s, _)| *s == state) {
                return Err(LoadSpecError::StateTwice(state));
            }
            out.push((state, weight));
        }
        if out.iter().all(|(_, w)| *w == 0.0) {
            return Err(LoadSpecError::AllZero);
        }
        Ok(Mix(out))
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(s, w)| format!("{s}={w}")).collect();
        f.write_str(&parts.join(","))
    }
}

/// The service-level objective a request must meet to count towards goodput: its TTFT, and its
/// mean inter-token latency (the gap between consecutive streamed tokens).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    pub ttft_ms: f64,
    pub itl_ms: f64,
}

impl Default for Slo {
    fn default() -> Slo {
        Slo { ttft_ms: 500.0, itl_ms: 50.0 }
    }
}

impl FromStr for Slo {
    type Err = LoadSpecError;
    /// `ttft=500ms,itl=50ms`; a key left out keeps its default (ttft 500ms, itl 50ms).
    fn from_str(spec: &str) -> Result<Slo, LoadSpecError> {
        let mut slo = Slo::default();
        for part in spec.split(',').map(str::trim) {
            let (key, value) = part.split_once('=').ok_or_else(|| LoadSpecError::NotSlo(part.into()))?;
            let span: crate::spec::Span =
                value.parse().map_err(|source| LoadSpecError::Spec { part: part.into(), source })?;
            let ms = span.secs() * 1000.0;
            match key.trim() {
                "ttft" => slo.ttft_ms = ms,
                "itl" => slo.itl_ms = ms,
                other => return Err(LoadSpecError::UnknownSloKey(other.into())),
            }
        }
        Ok(slo)
    }
}

impl fmt::Display for Slo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ttft={}ms,itl={}ms", self.ttft_ms, self.itl_ms)
    }
}

/// One arrival: when (ms after its rate's clock started) and which cache state its session is in.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arrival {
    pub at_ms: f64,
    pub state: CacheState,
}

/// A number in (0, 1]: 53 random bits, never 0 (its logarithm is taken).
fn unit_open(rng: &mut Rng) -> f64 {
    ((rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
}

/// A Poisson process of `rate` arrivals/s over `duration_s`: exponential gaps (-ln U / rate), each
/// arrival's cache state drawn from `mix`. Instants are rounded to the microsecond, so the ones
/// written to run.json and the records are the ones the client waits for.
pub fn arrivals(seed: u64, rate: f64, duration_s: f64, mix: &Mix) -> Vec<Arrival> {
    let mut rng = Rng::new(seed);
    rng.absorb(rate.to_bits());
    let mut out = Vec::new();
    let mut t_s = 0.0;
    while out.len() < MAX_ARRIVALS {
        t_s += -unit_open(&mut rng).ln() / rate;
        if t_s >= duration_s {
            break;
        }
        let at_ms = (t_s * 1e6).round() / 1e3;
        out.push(Arrival { at_ms, state: mix.draw(unit_open(&mut rng) - f64::EPSILON) });
    }
    out
}

/// One rate as planned: its run number (the records' `run`: its position in `--rates`, 1-based;
/// a repeat after a server crash gets the next free number), its rate and its schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateSchedule {
    pub run: u32,
    pub rate_per_s: f64,
    pub arrivals: Vec<Arrival>,
    /// When the rate's clock started (RFC 3339, UTC); the arrivals' `at_ms` count from it.
    pub clock_started_at: Option<String>,
    /// Why the rate ended before every arrival had finished (a signal, a crash of the server
    /// bench started), and when; None when it ran to its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// The run whose schedule this one repeats, from its first arrival (a server crash cut that
    /// one short).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats_run: Option<u32>,
}

/// Everything `bench load` offers, as run.json records it (`load`): enough to re-create every
/// schedule and to recompute the summary from the records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadPlan {
    /// Seed of the arrival schedules (and of the prompt text).
    pub seed: u64,
    pub duration_s: f64,
    pub mix: Vec<(CacheState, f64)>,
    pub context_tokens: u32,
    pub slo: Slo,
    pub slo_target: f64,
    /// Closed-loop cap: at most this many measured requests in flight.
    pub concurrency_limit: Option<u32>,
    /// Arrivals prepared (or being prepared) ahead of their instants.
    pub prepare_ahead: u32,
    /// The server pins sessions to slots (the preset binds `{slot}`): a session holds its slot
    /// from its preparation to its cleanup, so at most this many are prepared or in flight.
    pub slots_held: Option<u32>,
    pub rates: Vec<RateSchedule>,
}

/// Every rate's schedule (`run` = position in `rates`, 1-based).
pub fn plan_rates(seed: u64, rates: &[f64], duration_s: f64, mix: &Mix) -> Vec<RateSchedule> {
    rates
        .iter()
        .enumerate()
        .map(|(i, &rate)| RateSchedule {
            run: i as u32 + 1,
            rate_per_s: rate,
            arrivals: arrivals(seed, rate, duration_s, mix),
            clock_started_at: None,
            stopped: None,
            repeats_run: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_name_their_mistakes() {
        let mix: Mix = "cold=0.5,warm=0.2,hot=0.3".parse().unwrap();
        assert_eq!(mix.states(), [CacheState::Cold, CacheState::Warm, CacheState::Hot]);
        let err = |spec: &str| spec.parse::<Mix>().unwrap_err().to_string();
        assert!(err("cold=1,cold=2").contains("twice"));
        assert!(err("cold=0").contains("every share is 0"));
        assert!(err("tepid=1").contains("unknown cache state"), "{}", err("tepid=1"));
        assert_eq!("ttft=1s".parse::<Slo>().unwrap(), Slo { ttft_ms: 1000.0, itl_ms: 50.0 });
        assert_eq!("itl=20ms,ttft=250ms".parse::<Slo>().unwrap(), Slo { ttft_ms: 250.0, itl_ms: 20.0 });
        assert!("tpot=1s".parse::<Slo>().unwrap_err().to_string().contains("unknown SLO key"));
        assert!("1,2,1".parse::<Rates>().unwrap_err().to_string().contains("listed twice"));
        assert!(
            "0".parse::<Rate>().is_err() && "-1".parse::<Rate>().is_err() && "1e9".parse::<Rate>().is_err()
        );
        assert_eq!("0.5".parse::<Rate>().unwrap(), Rate(0.5));
    }

    #[test]
    fn a_schedule_is_a_seeded_poisson_process() {
        let mix: Mix = "cold=0.5,hot=0.5".parse().unwrap();
        let a = arrivals(7, 50.0, 200.0, &mix);
        assert_eq!(a, arrivals(7, 50.0, 200.0, &mix), "same seed, same schedule");
        assert_ne!(a, arrivals(8, 50.0, 200.0, &mix));
        // 10 000 expected arrivals: the count is within 4 sd (sd = 100) of rate x duration.
        assert!((a.len() as f64 - 10_000.0).abs() < 400.0, "{}", a.len());
        let gaps: Vec<f64> = a.windows(2).map(|w| w[1].at_ms - w[0].at_ms).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        // Exponential gaps: mean 20 ms and sd equal to the mean (coefficient of variation 1).
        assert!((mean - 20.0).abs() < 1.0 && (sd / mean - 1.0).abs() < 0.05, "mean {mean}, sd {sd}");
        let hot = a.iter().filter(|x| x.state == CacheState::Hot).count() as f64 / a.len() as f64;
        assert!((hot - 0.5).abs() < 0.04, "{hot}");
        assert!(
            a.iter().all(|x| x.at_ms < 200_000.0 && ((x.at_ms * 1e3).round() - x.at_ms * 1e3).abs() < 1e-6)
        );
    }

    #[test]
    fn a_rate_s_schedule_does_not_depend_on_the_other_rates() {
        let mix = Mix::default();
        let both = plan_rates(3, &[1.0, 4.0], 30.0, &mix);
        let alone = plan_rates(3, &[4.0], 30.0, &mix);
        assert_eq!(both[1].arrivals, alone[0].arrivals);
        assert_eq!((both[1].run, alone[0].run), (2, 1));
    }
}

//! The value types of `bench load`'s flags: rates, the cache-state mix and the SLO, each parsed
//! and checked where clap reads it, so a bad value is named with its flag.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use ttft_model::record::CacheState;

/// The highest arrival rate accepted (requests/s): far above anything a client keeps honestly, low
/// enough that a typo (`--rates 1e9`) is an error, not a schedule of billions of requests.
pub const MAX_RATE_PER_S: f64 = 100_000.0;

/// A load flag that does not parse (clap names the flag).
#[derive(Debug, thiserror::Error)]
pub enum LoadSpecError {
    #[error("{0:?} is not a rate in requests/s (examples: 0.5, 8)")]
    NotRate(String),
    #[error("{0:?}: a rate must be more than 0 requests/s")]
    RateNotPositive(String),
    #[error("{text:?}: at most {max} requests/s")]
    RateTooHigh { text: String, max: f64 },
    #[error("{0:?} is not a number of users from 1 to 1024 (example: 1,4,16,64)")]
    NotLevel(String),
    #[error("{0} users are listed twice")]
    LevelTwice(u32),
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
    Spec { part: String, source: ttft_model::spec::SpecError },
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

/// `--rates`: a comma list of rates, none twice; or `auto` (an empty list): search for the highest
/// rate that is honestly offered and meets the SLO target.
#[derive(Clone, Debug, PartialEq)]
pub struct OfferedRates(pub Vec<Rate>);

impl OfferedRates {
    /// `--rates auto`.
    pub(crate) fn is_auto(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromStr for OfferedRates {
    type Err = LoadSpecError;
    fn from_str(spec: &str) -> Result<OfferedRates, LoadSpecError> {
        if spec.trim() == "auto" {
            return Ok(OfferedRates(Vec::new()));
        }
        let mut out: Vec<Rate> = Vec::new();
        for part in spec.split(',') {
            let rate: Rate = part.parse()?;
            if out.contains(&rate) {
                return Err(LoadSpecError::RateTwice(part.trim().into()));
            }
            out.push(rate);
        }
        Ok(OfferedRates(out))
    }
}

/// The most users one closed-loop level may have (each is a task and a session on the server).
pub const MAX_USERS: u32 = 1024;

/// `--concurrency`: closed-loop levels, users per level, comma-separated, none twice (`1,4,16,64`).
#[derive(Clone, Debug, PartialEq)]
pub struct Levels(pub Vec<u32>);

impl FromStr for Levels {
    type Err = LoadSpecError;
    fn from_str(spec: &str) -> Result<Levels, LoadSpecError> {
        let mut out: Vec<u32> = Vec::new();
        for part in spec.split(',').map(str::trim) {
            let users: u32 = part.parse().map_err(|_| LoadSpecError::NotLevel(part.into()))?;
            if users == 0 || users > MAX_USERS {
                return Err(LoadSpecError::NotLevel(part.into()));
            }
            if out.contains(&users) {
                return Err(LoadSpecError::LevelTwice(users));
            }
            out.push(users);
        }
        Ok(Levels(out))
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
    pub(crate) fn shares(&self) -> Vec<(CacheState, f64)> {
        let total: f64 = self.0.iter().map(|(_, w)| w).sum();
        self.0.iter().filter(|(_, w)| *w > 0.0).map(|(s, w)| (*s, w / total)).collect()
    }

    /// The state whose share covers `u` in [0, 1).
    pub(crate) fn draw(&self, u: f64) -> CacheState {
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
            let span: ttft_model::spec::Span =
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

/// `bench load --warmup-duration`: a duration with its unit (`10s`, `500ms`; `0` is none). A bare
/// number is refused, naming the unit: a bare `2` would silently have meant 2 seconds to someone
/// who meant 2 requests (`bench sweep --warmup N`).
pub(crate) fn warmup_span(text: &str) -> Result<ttft_model::spec::Span, String> {
    let t = text.trim();
    if t.parse::<f64>().is_ok_and(|x| x != 0.0) {
        return Err(format!("{t:?} has no unit: the warm-up is a duration, e.g. --warmup-duration {t}s"));
    }
    t.parse().map_err(|e: ttft_model::spec::SpecError| e.to_string())
}

/// `bench load --warmup`, the old spelling of `--warmup-duration`: refused, naming the new flag with
/// the value as it would be written there (a bare number read as seconds, as it used to be).
pub(crate) fn renamed_warmup(text: &str) -> Result<ttft_model::spec::Span, String> {
    let t = text.trim();
    let span = if t.parse::<f64>().is_ok() { format!("{t}s") } else { t.to_string() };
    Err(format!(
        "bench load's warm-up is --warmup-duration now (e.g. --warmup-duration {span}); \
         --warmup counts discarded requests, in bench sweep"
    ))
}

/// `bench sweep --warmup`: a count of discarded requests. A duration (`10s`) is refused, naming
/// the difference: a warm-up of a duration is `bench load`'s closed loop's.
pub(crate) fn warmup_count(text: &str) -> Result<u32, String> {
    let t = text.trim();
    if let Ok(n) = t.parse::<u32>() {
        return Ok(n);
    }
    if t.parse::<ttft_model::spec::Span>().is_ok() {
        return Err(format!(
            "{t:?} is a duration: bench sweep's --warmup counts discarded requests (e.g. --warmup 2); \
             a warm-up of a duration is bench load's (--concurrency ... --warmup-duration {t})"
        ));
    }
    Err(format!("{t:?} is not a number of requests (e.g. --warmup 2)"))
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
        assert!("1,2,1".parse::<OfferedRates>().unwrap_err().to_string().contains("listed twice"));
        assert!(
            "0".parse::<Rate>().is_err() && "-1".parse::<Rate>().is_err() && "1e9".parse::<Rate>().is_err()
        );
        assert_eq!("0.5".parse::<Rate>().unwrap(), Rate(0.5));
        assert!(
            "auto".parse::<OfferedRates>().unwrap().is_auto()
                && !"1".parse::<OfferedRates>().unwrap().is_auto()
        );
        assert_eq!("1,4,16".parse::<Levels>().unwrap(), Levels(vec![1, 4, 16]));
        assert!("0".parse::<Levels>().unwrap_err().to_string().contains("number of users"));
        assert!("4,4".parse::<Levels>().unwrap_err().to_string().contains("twice"));
    }
}

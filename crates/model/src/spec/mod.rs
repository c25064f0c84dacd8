//! The small value languages of the command line and the scenario files, each parsed once into a
//! type: token counts (`4096`, `4k`), context lists (`1024..32768`, `1k,4k,32k`), comma lists,
//! bounded counts and durations (`2s`, `1500ms`, `240`).
//!
//! Every type here implements `FromStr` (clap parses flags with it, so a bad flag is named by clap)
//! and `Deserialize` (scenario files may write `contexts = "1k..4k"` or `contexts = [1024, "4k"]`),
//! and `Serialize`s back to the text it was parsed from. Bounds are checked here, before any value
//! can size an allocation or a `Duration`: `--runs 4e9` or `--request-timeout 1e30` is an error
//! that names its limit, never a panic or a runaway. The named choices (api, thermal policy,
//! stagger delay) are in `choice.rs`, the one error type in `error.rs`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

/// Largest context a sweep may ask for (16 Mi tokens: above every model served today).
pub const MAX_CONTEXT_TOKENS: u32 = 16 * 1024 * 1024;
/// Longest duration any flag accepts (one week).
pub const MAX_DURATION_S: f64 = 7.0 * 24.0 * 3600.0;
/// `4096`, `4k`, `4K` -> 4096 tokens. Zero is refused: a context must hold at least the question.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tokens(pub u32);

impl FromStr for Tokens {
    type Err = SpecError;
    fn from_str(text: &str) -> Result<Tokens, SpecError> {
        let text = text.trim();
        let (digits, scale) = match text.strip_suffix(['k', 'K']) {
            Some(d) => (d, 1024u64),
            None => (text, 1),
        };
        let value: u64 = digits.parse().map_err(|_| SpecError::NotTokens(text.into()))?;
        let value = value.saturating_mul(scale);
        if value == 0 {
            return Err(SpecError::ZeroContext);
        }
        if value > u64::from(MAX_CONTEXT_TOKENS) {
            return Err(SpecError::TooManyTokens { text: text.into(), max: MAX_CONTEXT_TOKENS });
        }
        Ok(Tokens(value as u32))
    }
}

/// A context list: `A..B` doubles from A up to B (B must be A x 2^n, so nothing is silently
/// skipped); `A,B,C` is explicit; both forms mix: `512,1k..4k`. No size twice.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Contexts(pub Vec<u32>);

impl FromStr for Contexts {
    type Err = SpecError;
    fn from_str(spec: &str) -> Result<Contexts, SpecError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(SpecError::EmptyContexts);
        }
        let mut out: Vec<u32> = Vec::new();
        for part in spec.split(',').map(str::trim) {
            let Some((lo, hi)) = part.split_once("..") else {
                out.push(part.parse::<Tokens>()?.0);
                continue;
            };
            let (lo, hi) = (lo.parse::<Tokens>()?.0, hi.parse::<Tokens>()?.0);
            if lo > hi {
                return Err(SpecError::Backwards { range: part.into(), lo, hi });
            }
            let mut steps = vec![lo];
            while steps[steps.len() - 1] < hi {
                steps.push(steps[steps.len() - 1].saturating_mul(2));
            }
            if steps[steps.len() - 1] != hi {
                let shown: Vec<String> = steps.iter().map(u32::to_string).collect();
                return Err(SpecError::NeverLands { range: part.into(), steps: shown.join(", "), hi });
            }
            out.extend(steps);
        }
        for (i, value) in out.iter().enumerate() {
            if out[..i].contains(value) {
                return Err(SpecError::ContextTwice { value: *value, spec: spec.into() });
            }
        }
        Ok(Contexts(out))
    }
}

impl fmt::Display for Contexts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u32::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

/// A whole number from 1 to `MAX` (runs, output tokens, batch sizes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Count<const MAX: u32>(pub u32);

impl<const MAX: u32> FromStr for Count<MAX> {
    type Err = SpecError;
    fn from_str(text: &str) -> Result<Self, SpecError> {
        let text = text.trim();
        let value: u64 = text.parse().map_err(|_| SpecError::NotWhole(text.into()))?;
        Count::<MAX>::try_from(value)
    }
}

impl<const MAX: u32> TryFrom<u64> for Count<MAX> {
    type Error = SpecError;
    fn try_from(value: u64) -> Result<Self, SpecError> {
        match value {
            0 => Err(SpecError::Zero),
            v if v > u64::from(MAX) => Err(SpecError::OverLimit { value: v, max: MAX }),
            v => Ok(Count(v as u32)),
        }
    }
}

impl<const MAX: u32> fmt::Display for Count<MAX> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// `--runs`: a whole number from 1 to `MAX`, or `auto` (each cell repeated until its median is
/// known well enough: `--target-ci`). A scenario file writes `runs = 3` or `runs = "auto"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runs<const MAX: u32> {
    Fixed(u32),
    Auto,
}

impl<const MAX: u32> FromStr for Runs<MAX> {
    type Err = SpecError;
    fn from_str(text: &str) -> Result<Self, SpecError> {
        match text.trim() {
            "auto" => Ok(Runs::Auto),
            other => other.parse::<Count<MAX>>().map(|c| Runs::Fixed(c.0)),
        }
    }
}

impl<const MAX: u32> Serialize for Runs<MAX> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Runs::Fixed(n) => s.serialize_u32(*n),
            Runs::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de, const MAX: u32> Deserialize<'de> for Runs<MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Number(u64),
            Text(String),
        }
        match Given::deserialize(d)? {
            Given::Number(n) => {
                Count::<MAX>::try_from(n).map(|c| Runs::Fixed(c.0)).map_err(de::Error::custom)
            }
            Given::Text(t) => t.parse().map_err(de::Error::custom),
        }
    }
}

/// `2s`, `1500ms`, `4m`, or a bare number of seconds (`30`, `0.5`); at most `MAX_DURATION_S`.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Span(pub Duration);

impl Span {
    pub fn secs(self) -> f64 {
        self.0.as_secs_f64()
    }
}

impl FromStr for Span {
    type Err = SpecError;
    fn from_str(text: &str) -> Result<Span, SpecError> {
        let text = text.trim();
        let secs = match text.parse::<f64>() {
            Ok(s) => s,
            Err(_) => humantime::parse_duration(text)
                .map_err(|source| SpecError::BadDuration { text: text.into(), source })?
                .as_secs_f64(),
        };
        // Checked before Duration::from_secs_f64, which panics on values it cannot hold.
        if !secs.is_finite() || secs < 0.0 {
            return Err(SpecError::NotDuration(text.into()));
        }
        if secs > MAX_DURATION_S {
            return Err(SpecError::TooLong { text: text.into(), limit: humantime_s(MAX_DURATION_S) });
        }
        Ok(Span(Duration::from_secs_f64(secs)))
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&humantime_s(self.secs()))
    }
}

fn humantime_s(secs: f64) -> String {
    humantime::format_duration(Duration::from_secs_f64(secs)).to_string()
}

/// A finite real number (`0.2`, `4214`, `1e3`): the value parser of every float flag, and (through
/// `finite_option`) of the same keys in scenario files. NaN and infinity are refused here, where
/// the flag is still named: further in, a NaN compares false with every bound and serializes to
/// JSON null, so it would pass range checks or be dropped as "not given" and silently defaulted.
pub fn finite(text: &str) -> Result<f64, SpecError> {
    let text = text.trim();
    let value: f64 = text.parse().map_err(|_| SpecError::NotNumber(text.into()))?;
    if !value.is_finite() {
        return Err(SpecError::NotFinite(text.into()));
    }
    Ok(value)
}

/// `finite` for an optional scenario key: a number (TOML also writes `nan` and `inf`) or the text
/// a flag would take.
pub fn finite_option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Number {
        Float(f64),
        Text(String),
    }
    match Option::<Number>::deserialize(d)? {
        None => Ok(None),
        Some(Number::Float(x)) if x.is_finite() => Ok(Some(x)),
        Some(Number::Float(x)) => Err(de::Error::custom(SpecError::NotFinite(x.to_string()))),
        Some(Number::Text(t)) => finite(&t).map(Some).map_err(de::Error::custom),
    }
}

/// A comma list (`streaming,non-streaming`, `1,2,4`), each item parsed by `T`; nothing twice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct List<T>(pub Vec<T>);

impl<T> Default for List<T> {
    fn default() -> Self {
        List(Vec::new())
    }
}

impl<T: FromStr<Err = SpecError> + PartialEq + fmt::Display> FromStr for List<T> {
    type Err = SpecError;
    fn from_str(spec: &str) -> Result<List<T>, SpecError> {
        let mut out: Vec<T> = Vec::new();
        for part in spec.split(',').map(str::trim) {
            let value = part.parse::<T>()?;
            if out.contains(&value) {
                return Err(SpecError::ListedTwice(value.to_string()));
            }
            out.push(value);
        }
        Ok(List(out))
    }
}

impl<T: fmt::Display> fmt::Display for List<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(T::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

/// Scenario files write a value as text, a number, or a list of either; all of them read as the
/// text the flag would take, and the one `FromStr` parses it.
#[derive(Deserialize)]
#[serde(untagged)]
enum Written {
    Text(String),
    Int(i64),
    Float(f64),
    Items(Vec<Item>),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Item {
    Text(String),
    Int(i64),
}

impl Written {
    fn text(self) -> String {
        match self {
            Written::Text(s) => s,
            Written::Int(n) => n.to_string(),
            Written::Float(x) => x.to_string(),
            Written::Items(items) => items
                .into_iter()
                .map(|i| match i {
                    Item::Text(s) => s,
                    Item::Int(n) => n.to_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}

/// Implements `Deserialize` (through `Written` and `FromStr`) and `Serialize` (as `Display` text).
macro_rules! text_value {
    ($($ty:ty),* $(,)?) => {$(
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Written::deserialize(d)?.text().parse().map_err(de::Error::custom)
            }
        }
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    )*};
}

impl fmt::Display for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

text_value!(Tokens, Contexts, Span);

impl<'de, const MAX: u32> Deserialize<'de> for Count<MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Written::deserialize(d)?.text().parse().map_err(de::Error::custom)
    }
}

impl<const MAX: u32> Serialize for Count<MAX> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.0)
    }
}

impl<'de, T: FromStr<Err = SpecError> + PartialEq + fmt::Display> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Written::deserialize(d)?.text().parse().map_err(de::Error::custom)
    }
}

impl<T: fmt::Display> Serialize for List<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

mod choice;
mod error;
mod json_object;

pub use choice::{Api, StaggerDelay, ThermalChoice};
pub use error::SpecError;
pub use json_object::JsonObject;

#[cfg(test)]
mod tests {
    use super::*;

    fn contexts(s: &str) -> Result<Vec<u32>, String> {
        s.parse::<Contexts>().map(|c| c.0).map_err(|e| e.to_string())
    }

    #[test]
    fn range_doubles_from_start_to_end() {
        assert_eq!(contexts("1024..32768").unwrap(), vec![1024, 2048, 4096, 8192, 16384, 32768]);
        assert_eq!(contexts("1k..4k").unwrap(), vec![1024, 2048, 4096]);
        assert_eq!(contexts("512..512").unwrap(), vec![512]);
    }

    #[test]
    fn lists_and_k_suffixes() {
        assert_eq!(contexts("1k,4k,32k").unwrap(), vec![1024, 4096, 32768]);
        assert_eq!(contexts(" 500 , 2K ").unwrap(), vec![500, 2048]);
        assert_eq!(contexts("256,1k..2k").unwrap(), vec![256, 1024, 2048]);
    }

    #[test]
    fn bad_specs_name_the_problem() {
        let cases = [
            ("", "empty"),
            ("1k..", "not a token count"),
            ("4k..1k", "backwards"),
            ("1000..5000", "never lands on 5000"),
            ("abc", "not a token count"),
            ("0", "0 tokens"),
            ("1k,1024", "listed twice"),
            ("99999999k", "too large"),
            ("4000000000", "too large"),
            ("4e9", "not a token count"),
        ];
        for (spec, expected) in cases {
            let err = contexts(spec).unwrap_err();
            assert!(err.contains(expected), "{spec}: {err}");
        }
    }

    #[test]
    fn counts_are_positive_and_bounded() {
        assert_eq!("3".parse::<Count<10>>().unwrap().0, 3);
        assert!("0".parse::<Count<10>>().unwrap_err().to_string().contains("at least 1"));
        assert!("11".parse::<Count<10>>().unwrap_err().to_string().contains("limit of 10"));
        assert!("4e9".parse::<Count<10>>().unwrap_err().to_string().contains("not a whole number"));
        assert!("4000000000".parse::<Count<10>>().unwrap_err().to_string().contains("limit of 10"));
    }

    #[test]
    fn durations_are_bounded_before_they_become_a_duration() {
        assert_eq!("2s".parse::<Span>().unwrap().0, Duration::from_secs(2));
        assert_eq!("1500ms".parse::<Span>().unwrap().0, Duration::from_millis(1500));
        assert_eq!("30".parse::<Span>().unwrap().0, Duration::from_secs(30));
        for bad in ["1e30", "1e19", "1e20", "1e25", "inf", "NaN", "-1", "99999999999999999999999s"] {
            assert!(bad.parse::<Span>().is_err(), "{bad}");
        }
        assert!("soon".parse::<Span>().unwrap_err().to_string().contains("not a duration"));
        assert!("8days".parse::<Span>().unwrap_err().to_string().contains("limit"));
    }

    #[test]
    fn scenario_values_read_as_text_numbers_or_lists() {
        #[derive(Deserialize)]
        struct S {
            a: Contexts,
            b: Contexts,
            c: Span,
            d: Count<100>,
            e: List<Count<9>>,
        }
        let s: S = toml::from_str("a = [512, \"1k\"]\nb = 2048\nc = 0.5\nd = 7\ne = \"1,2\"\n").unwrap();
        assert_eq!(s.a.0, vec![512, 1024]);
        assert_eq!(s.b.0, vec![2048]);
        assert_eq!(s.c.0, Duration::from_millis(500));
        assert_eq!(s.d.0, 7);
        assert_eq!(s.e.0, vec![Count(1), Count(2)]);
        assert_eq!(serde_json::to_string(&s.a).unwrap(), "\"512,1024\"");
    }
}

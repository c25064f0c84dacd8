//! The named choices of the command line and the scenario files: the API dialect, the thermal
//! policy and the stagger delay. Each parses from and prints back to the text a flag takes.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

use super::{Span, SpecError, Written};

/// The API dialect: OpenAI chat completions or Anthropic messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    Openai,
    Anthropic,
    /// OpenAI legacy completions (`/v1/completions`): a prompt string, `choices[].text` chunks.
    #[serde(rename = "openai-completions", alias = "openai_completions")]
    OpenaiCompletions,
}

impl FromStr for Api {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Api, SpecError> {
        match s.trim() {
            "openai" => Ok(Api::Openai),
            "anthropic" => Ok(Api::Anthropic),
            "openai-completions" => Ok(Api::OpenaiCompletions),
            other => Err(SpecError::Unknown {
                what: "api",
                value: other.into(),
                allowed: "openai, anthropic, openai-completions",
            }),
        }
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Api::Openai => "openai",
            Api::Anthropic => "anthropic",
            Api::OpenaiCompletions => "openai-completions",
        })
    }
}

/// `--thermal`: `probe`, `fixed:30s` or `off`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ThermalChoice {
    Probe,
    Fixed(Span),
    Off,
}

impl FromStr for ThermalChoice {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<ThermalChoice, SpecError> {
        match s.trim() {
            "probe" => Ok(ThermalChoice::Probe),
            "off" => Ok(ThermalChoice::Off),
            other => match other.strip_prefix("fixed:") {
                Some(rest) => Ok(ThermalChoice::Fixed(rest.parse()?)),
                None => Err(SpecError::Unknown {
                    what: "thermal policy",
                    value: other.into(),
                    allowed: "probe, fixed:30s, off",
                }),
            },
        }
    }
}

impl fmt::Display for ThermalChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThermalChoice::Probe => f.write_str("probe"),
            ThermalChoice::Fixed(span) => write!(f, "fixed:{span}"),
            ThermalChoice::Off => f.write_str("off"),
        }
    }
}

/// `--stagger-delay`: a fixed delay (`2s`) or a share of user A's own duration (`50%`), measured
/// by a calibration request, so "B arrives while A runs" holds on a laptop and on an H200 alike.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StaggerDelay {
    Fixed(Span),
    /// Fraction (0 < f < 1) of A's end-to-end time.
    ShareOfA(f64),
}

impl FromStr for StaggerDelay {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<StaggerDelay, SpecError> {
        let s = s.trim();
        let Some(percent) = s.strip_suffix('%') else { return Ok(StaggerDelay::Fixed(s.parse()?)) };
        match percent.trim().parse::<f64>() {
            Ok(p) if p > 0.0 && p < 100.0 => Ok(StaggerDelay::ShareOfA(p / 100.0)),
            _ => Err(SpecError::BadShare(s.into())),
        }
    }
}

impl fmt::Display for StaggerDelay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StaggerDelay::Fixed(span) => write!(f, "{span}"),
            StaggerDelay::ShareOfA(share) => write!(f, "{}%", share * 100.0),
        }
    }
}

text_value!(ThermalChoice, StaggerDelay);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_and_delays_parse_and_print_back() {
        for text in ["probe", "off", "fixed:30s"] {
            assert_eq!(text.parse::<ThermalChoice>().unwrap().to_string(), text);
        }
        assert!("cold".parse::<ThermalChoice>().unwrap_err().to_string().contains("probe, fixed:30s, off"));
        assert_eq!("50%".parse::<StaggerDelay>().unwrap(), StaggerDelay::ShareOfA(0.5));
        assert_eq!("2s".parse::<StaggerDelay>().unwrap().to_string(), "2s");
        assert!("150%".parse::<StaggerDelay>().is_err());
        assert!("1e25".parse::<StaggerDelay>().is_err());
    }
}

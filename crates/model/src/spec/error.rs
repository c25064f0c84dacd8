//! Why a value of the command line or a scenario file was refused.

/// Why a value was refused. Each message says what was expected (clap and the scenario reader put
/// the flag or key in front of it).
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("{0:?} is not a token count (examples: 512, 4k, 32768)")]
    NotTokens(String),
    #[error("a context of 0 tokens cannot be measured")]
    ZeroContext,
    #[error("{text:?} is too large (at most {max} tokens)")]
    TooManyTokens { text: String, max: u32 },
    #[error("empty context list (try 1024..32768 or 1k,4k,32k)")]
    EmptyContexts,
    #[error("range {range} runs backwards ({lo} > {hi})")]
    Backwards { range: String, lo: u32, hi: u32 },
    #[error(
        "range {range} doubles {steps} and never lands on {hi}; \
         give an end that is the start doubled, or list the sizes with commas"
    )]
    NeverLands { range: String, steps: String, hi: u32 },
    #[error("context {value} is listed twice in {spec:?}")]
    ContextTwice { value: u32, spec: String },
    #[error("{0:?} is not a whole number")]
    NotWhole(String),
    #[error("must be at least 1")]
    Zero,
    #[error("{value} is more than the limit of {max}")]
    OverLimit { value: u64, max: u32 },
    #[error("{text:?} is not a duration ({source}; examples: 2s, 1500ms, 4m)")]
    BadDuration { text: String, source: humantime::DurationError },
    #[error("{0:?} is not a duration (examples: 2s, 1500ms, 4m)")]
    NotDuration(String),
    #[error("{text:?} is longer than the limit of {limit}")]
    TooLong { text: String, limit: String },
    #[error("{0:?} is not a number (examples: 0.2, 4214, 1e3)")]
    NotNumber(String),
    #[error("{0:?} is not a finite number (NaN and infinity mean nothing here)")]
    NotFinite(String),
    #[error("{0} is listed twice")]
    ListedTwice(String),
    #[error("unknown {what} {value:?} (allowed: {allowed})")]
    Unknown { what: &'static str, value: String, allowed: &'static str },
    #[error("{0:?}: a share of user A's duration must be above 0% and below 100% (e.g. 50%)")]
    BadShare(String),
}

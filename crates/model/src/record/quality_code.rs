//! Quality flag codes as records carry them (`quality_flags[].flag`): a leaf type, so the record
//! layer can name it without depending on the checks.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A stable snake_case code. The checks that raise each are in `quality`; the origin importer
/// adds its own `origin_*` notes. A code this version does not know (a newer bench's, another
/// tool's) is kept verbatim as `Other`, so reading a file never fails over a new code.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QualityCode {
    EmptyOutput,
    TooFewTokens,
    EarlyEos,
    RepetitionLoop,
    SpacingCorruption,
    UsageMissing,
    MaxTokensExceeded,
    InputTokensMismatch,
    DeltaCountMismatch,
    ErrorInStream,
    HttpError,
    RequestFailed,
    TtftAfterE2e,
    /// The server's cache evidence contradicts the claimed cache state (a failed measurement).
    CacheStateUnconfirmed,
    /// Soak: greedy output under concurrency differs from the same prompt's serial output.
    OutputMismatch,
    /// The session's cleanup failed after the measurement ended (recorded; it does not fail it).
    CleanupFailed,
    /// The stream was held back, flushed at once or with its first token lumped together with
    /// later ones: its TTFT holds the decode, and the decode rate is not measurable.
    StreamBurst,
    /// Origin import: the origin wrote 0 (or e2e) as TTFT where none was observed.
    OriginTtftNotMeasured,
    /// Origin import: the stand-in measurement of a batch the origin kept only totals of.
    OriginBatchAggregate,
    /// Origin import: the origin ran no quality check on staggered pairs.
    OriginQualityUnchecked,
    /// Origin import: the staggered context is assumed (the origin's rows do not say).
    OriginContextAssumed,
    /// A code this version does not know, verbatim.
    Other(String),
}

impl QualityCode {
    /// Every code this version knows (not `Other`).
    pub const KNOWN: [QualityCode; 21] = [
        QualityCode::EmptyOutput,
        QualityCode::TooFewTokens,
        QualityCode::EarlyEos,
        QualityCode::RepetitionLoop,
        QualityCode::SpacingCorruption,
        QualityCode::UsageMissing,
        QualityCode::MaxTokensExceeded,
        QualityCode::InputTokensMismatch,
        QualityCode::DeltaCountMismatch,
        QualityCode::ErrorInStream,
        QualityCode::HttpError,
        QualityCode::RequestFailed,
        QualityCode::TtftAfterE2e,
        QualityCode::CacheStateUnconfirmed,
        QualityCode::OutputMismatch,
        QualityCode::CleanupFailed,
        QualityCode::StreamBurst,
        QualityCode::OriginTtftNotMeasured,
        QualityCode::OriginBatchAggregate,
        QualityCode::OriginQualityUnchecked,
        QualityCode::OriginContextAssumed,
    ];

    pub fn as_str(&self) -> &str {
        match self {
            QualityCode::EmptyOutput => "empty_output",
            QualityCode::TooFewTokens => "too_few_tokens",
            QualityCode::EarlyEos => "early_eos",
            QualityCode::RepetitionLoop => "repetition_loop",
            QualityCode::SpacingCorruption => "spacing_corruption",
            QualityCode::UsageMissing => "usage_missing",
            QualityCode::MaxTokensExceeded => "max_tokens_exceeded",
            QualityCode::InputTokensMismatch => "input_tokens_mismatch",
            QualityCode::DeltaCountMismatch => "delta_count_mismatch",
            QualityCode::ErrorInStream => "error_in_stream",
            QualityCode::HttpError => "http_error",
            QualityCode::RequestFailed => "request_failed",
            QualityCode::TtftAfterE2e => "ttft_after_e2e",
            QualityCode::CacheStateUnconfirmed => "cache_state_unconfirmed",
            QualityCode::OutputMismatch => "output_mismatch",
            QualityCode::CleanupFailed => "cleanup_failed",
            QualityCode::StreamBurst => "stream_burst",
            QualityCode::OriginTtftNotMeasured => "origin_ttft_not_measured",
            QualityCode::OriginBatchAggregate => "origin_batch_aggregate",
            QualityCode::OriginQualityUnchecked => "origin_quality_unchecked",
            QualityCode::OriginContextAssumed => "origin_context_assumed",
            QualityCode::Other(code) => code,
        }
    }

    /// The code of `name`: a known one, or `Other(name)`.
    pub fn from_name(name: &str) -> QualityCode {
        QualityCode::KNOWN
            .iter()
            .find(|c| c.as_str() == name)
            .cloned()
            .unwrap_or_else(|| QualityCode::Other(name.to_string()))
    }
}

impl fmt::Display for QualityCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for QualityCode {
    fn from(name: &str) -> QualityCode {
        QualityCode::from_name(name)
    }
}

impl PartialEq<str> for QualityCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for QualityCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for QualityCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for QualityCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<QualityCode, D::Error> {
        let name = Cow::<str>::deserialize(d)?;
        Ok(QualityCode::from_name(&name))
    }
}

impl JsonSchema for QualityCode {
    fn schema_name() -> Cow<'static, str> {
        "QualityCode".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let known: Vec<&str> = QualityCode::KNOWN.iter().map(QualityCode::as_str).collect();
        json_schema!({
            "description": "Stable snake_case code. bench writes only the listed ones; readers keep an unknown code verbatim.",
            "type": "string",
            "examples": known,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_as_their_strings() {
        for code in QualityCode::KNOWN {
            let json = serde_json::to_string(&code).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            let back: QualityCode = serde_json::from_str(&json).unwrap_or(QualityCode::Other(String::new()));
            assert_eq!(back, code);
        }
        let other: QualityCode = serde_json::from_str("\"made_up\"").unwrap_or(QualityCode::EmptyOutput);
        assert_eq!(other, QualityCode::Other("made_up".into()));
        assert_eq!(serde_json::to_string(&other).unwrap_or_default(), "\"made_up\"");
        assert_eq!(QualityCode::from("ttft_after_e2e"), QualityCode::TtftAfterE2e);
        assert!(QualityCode::UsageMissing == "usage_missing");
    }
}

//! The thermal policy's name as records carry it (`thermal.policy`): a leaf type, so the record
//! layer can name it without depending on the gate.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which thermal policy ran before a measurement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    /// TPS probes until the machine is back within tolerance of its baseline: `recovered` is a
    /// verdict.
    Probe,
    /// A fixed sleep: nothing was judged.
    Fixed,
    /// No wait: nothing was judged.
    #[default]
    Off,
}

impl PolicyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Probe => "probe",
            PolicyKind::Fixed => "fixed",
            PolicyKind::Off => "off",
        }
    }
}

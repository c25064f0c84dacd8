//! The Prometheus counters' word on one measurement, as records carry it (`server_metrics`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the counters say one measurement (or one batch) made the server do.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MetricsDelta {
    /// Prompt tokens the server computed (prefilled) in between.
    pub computed_tokens: Option<f64>,
    /// Prompt tokens it served from a cache in between.
    pub cached_tokens: Option<f64>,
    /// Every named counter's change, by counter name.
    pub counters: BTreeMap<String, f64>,
}

impl MetricsDelta {
    /// Cache evidence from the counters, for a response that says nothing about its cache.
    pub fn evidence(&self) -> Option<super::CacheEvidence> {
        let round = |v: f64| v.max(0.0).round() as u64;
        if self.computed_tokens.is_none() && self.cached_tokens.is_none() {
            return None;
        }
        Some(super::CacheEvidence {
            source: "metrics".into(),
            cached_tokens: self.cached_tokens.map(round),
            prompt_evaluated_tokens: self.computed_tokens.map(round),
            ..Default::default()
        })
    }
}

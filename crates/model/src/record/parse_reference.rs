//! The record types as serde derived their reading before `wire` (frozen here as the reference
//! of `parse_tests`; only reading is used: the result is compared through the real types'
//! serialization).

use serde::{Deserialize, Serialize};

use crate::record::{
    CacheEvidence, CellKey, ErrorInfo, PhysicsRecord, QualityFlag, ThermalRecord, TurnSummary,
};

#[derive(Serialize, Deserialize)]
#[serde(tag = "record_type", rename_all = "snake_case")]
pub enum Record {
    Measurement(Box<Measurement>),
    Group(Box<GroupRecord>),
    Staggered(Box<StaggeredRecord>),
}

fn one() -> u32 {
    1
}

#[derive(Serialize, Deserialize)]
pub struct Measurement {
    pub schema_version: u32,
    pub run_id: String,
    #[serde(flatten)]
    pub cell: CellKey,
    pub request_index: u32,
    pub group_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle_id: Option<String>,
    pub started_at: String,
    pub nonce: String,
    pub send_lag_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offered_rate_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_send_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual_send_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare_late_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<u32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warmup: bool,
    pub first_byte_ms: Option<f64>,
    pub first_event_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    pub token_offsets_ms: Vec<f64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub expected_input_tokens: Option<u64>,
    pub delta_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distinct_arrivals: Option<u64>,
    pub decode_tps: Option<f64>,
    pub prefill_tps: Option<f64>,
    pub max_tokens: u32,
    pub finish_reason: Option<String>,
    pub output_sample: String,
    pub reload_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_cache: Option<crate::record::PageCache>,
    pub turns: Vec<TurnSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_ms: Option<f64>,
    pub cache_evidence: Option<CacheEvidence>,
    pub cache_state_confirmed: Option<bool>,
    pub server_timings: Option<serde_json::Value>,
    pub server_stats: Option<serde_json::Value>,
    #[serde(default)]
    pub server_metrics: Option<crate::record::MetricsDelta>,
    pub quality_ok: bool,
    pub quality_flags: Vec<QualityFlag>,
    pub thermal: Option<ThermalRecord>,
    pub physics: Option<PhysicsRecord>,
    pub error: Option<ErrorInfo>,
    #[serde(default = "one")]
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unexpected_bytes_dropped: bool,
}

#[derive(Serialize, Deserialize)]
pub struct GroupRecord {
    pub schema_version: u32,
    pub run_id: String,
    #[serde(flatten)]
    pub cell: CellKey,
    pub group_id: String,
    pub started_at: String,
    pub wall_ms: f64,
    pub system_tps: Option<f64>,
    pub per_request_tps: Option<f64>,
    pub avg_ttft_ms: Option<f64>,
    pub avg_e2e_ms: Option<f64>,
    pub total_output_tokens: u64,
    pub requests_ok: u32,
    pub requests_failed: u32,
    #[serde(default)]
    pub server_metrics: Option<crate::record::MetricsDelta>,
    pub error: Option<ErrorInfo>,
}

#[derive(Serialize, Deserialize)]
pub struct StaggeredRecord {
    pub schema_version: u32,
    pub run_id: String,
    #[serde(flatten)]
    pub cell: CellKey,
    pub started_at: String,
    pub stagger_delay_ms: Option<f64>,
    pub user_a_ttft_ms: Option<f64>,
    pub user_a_e2e_ms: Option<f64>,
    pub user_b_ttft_ms: Option<f64>,
    pub user_b_e2e_ms: Option<f64>,
    pub user_b_arrival_ms: Option<f64>,
    pub user_b_ttft_from_wall_start_ms: Option<f64>,
    pub overlapped: Option<bool>,
    pub overlap_ms: Option<f64>,
    pub total_wall_ms: Option<f64>,
    pub user_a_output_tokens: Option<u64>,
    pub user_b_output_tokens: Option<u64>,
    pub user_a_token_offsets_ms: Vec<f64>,
    pub user_b_token_offsets_ms: Vec<f64>,
    pub system_tps: Option<f64>,
    pub quality_ok: bool,
    pub quality_flags: Vec<QualityFlag>,
    pub thermal: Option<ThermalRecord>,
    pub error: Option<ErrorInfo>,
}

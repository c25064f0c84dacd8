//! Thermal gate (placeholder until the integrity work lands).

use std::future::Future;

use crate::config::ThermalPolicy;
use crate::record::ThermalRecord;

pub fn baseline(probes: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = probes.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

pub async fn cooldown<F, Fut>(
    policy: &ThermalPolicy,
    baseline_tps: Option<f64>,
    _probe: F,
    _on_status: impl FnMut(&str),
) -> ThermalRecord
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<f64>>,
{
    let name = match policy {
        ThermalPolicy::Probe { .. } => "probe",
        ThermalPolicy::Fixed { .. } => "fixed",
        ThermalPolicy::Off => "off",
    };
    ThermalRecord { policy: name.into(), baseline_tps, recovered: true, ..Default::default() }
}

pub fn host_snapshot() -> serde_json::Value {
    serde_json::Value::Null
}

//! Host and GPU telemetry for a ThermalRecord's before/after (the only I/O of the thermal gate).

use std::process::Command;

use serde_json::{Map, Value, json};

const NVIDIA_SMI_FIELDS: &str =
    "index,name,temperature.gpu,clocks.sm,power.draw,clocks_throttle_reasons.active";

/// Host and GPU telemetry for a ThermalRecord's before/after: sysinfo component temperatures
/// (label -> °C) and, where `nvidia-smi` is on PATH, per-GPU temperature, SM clock, power and
/// throttle reasons. Never fails: what cannot be read is left out. Blocking (runs nvidia-smi): call
/// it from `spawn_blocking` inside async code.
pub(crate) fn host_snapshot() -> Value {
    let components = sysinfo::Components::new_with_refreshed_list();
    let mut temps = Map::new();
    for c in components.list() {
        if let Some(t) = c.temperature().filter(|t| t.is_finite()) {
            temps.insert(c.label().to_string(), json!(t));
        }
    }
    let mut out = json!({ "taken_at": ttft_model::clock::now_rfc3339(), "components_c": temps });
    if let Some(gpus) = nvidia_smi() {
        out["gpus"] = Value::Array(gpus);
    }
    out
}

fn nvidia_smi() -> Option<Vec<Value>> {
    let path = std::env::var_os("PATH")?;
    let exe = std::env::split_paths(&path).map(|d| d.join("nvidia-smi")).find(|p| p.is_file())?;
    let output = Command::new(exe)
        .args([format!("--query-gpu={NVIDIA_SMI_FIELDS}"), "--format=csv,noheader,nounits".into()])
        .output()
        .ok()?;
    output.status.success().then(|| parse_nvidia_smi(&String::from_utf8_lossy(&output.stdout)))
}

/// Parses `nvidia-smi --query-gpu=index,name,temperature.gpu,clocks.sm,power.draw,
/// clocks_throttle_reasons.active --format=csv,noheader,nounits`; "[N/A]" and unparsable values
/// become null.
pub(crate) fn parse_nvidia_smi(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            let num =
                |i: usize| f.get(i).and_then(|s| s.parse::<f64>().ok()).map_or(Value::Null, |v| json!(v));
            json!({
                "index": num(0),
                "name": f.get(1).copied().unwrap_or_default(),
                "temperature_c": num(2),
                "sm_clock_mhz": num(3),
                "power_w": num(4),
                "throttle_reasons": f.get(5).filter(|s| s.starts_with("0x")).copied(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_smi_lines_parse_with_missing_values() {
        let gpus = parse_nvidia_smi(
            "0, NVIDIA H200, 41, 1980, 118.52, 0x0000000000000000\n1, NVIDIA H200, [N/A], 345, [N/A], [N/A]\n",
        );
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0]["temperature_c"], 41.0);
        assert_eq!(gpus[0]["power_w"], 118.52);
        assert_eq!(gpus[0]["throttle_reasons"], "0x0000000000000000");
        assert!(gpus[1]["temperature_c"].is_null() && gpus[1]["throttle_reasons"].is_null());
    }

    #[test]
    fn host_snapshot_never_fails() {
        let snap = host_snapshot();
        assert!(snap["components_c"].is_object());
        assert!(snap["taken_at"].as_str().is_some_and(|t| t.starts_with("20")));
    }
}

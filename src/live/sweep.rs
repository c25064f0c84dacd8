//! The sweep's board: the matrix so far, one row per cache state x context x batch (x mode), with
//! its records, how many had their cache state confirmed by the server's evidence, how many
//! failed, TTFT p50/p99 and decode tok/s of its good records (as `bench report` counts them: a
//! failed record is in no statistic); then the thermal gate's last wait.

use std::collections::BTreeMap;

use super::{Board, Event, Sheet, Table, ms, p99};
use ttft_model::record::{CacheState, Mode, Record, Scenario, ThermalRecord};
use ttft_model::stats::Samples;

/// A row of the matrix.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct RowKey {
    /// Plain cache states first (cold, warm, hot), then staggered pairs.
    staggered: Option<Scenario>,
    state: CacheState,
    context: u32,
    batch: u32,
    mode: Mode,
}

#[derive(Default)]
struct Row {
    records: usize,
    confirmed: usize,
    failed: usize,
    ttft_ms: Vec<f64>,
    decode_tps: Vec<f64>,
}

#[derive(Default)]
pub(crate) struct SweepBoard {
    rows: BTreeMap<RowKey, Row>,
    records: usize,
    failed: usize,
    thermal: Option<ThermalRecord>,
}

impl SweepBoard {
    pub(crate) fn new() -> SweepBoard {
        SweepBoard::default()
    }

    fn add(&mut self, record: &Record) {
        let good = record.is_good();
        let (key, ttft, decode, confirmed, thermal) = match record {
            Record::Measurement(m) => (
                RowKey {
                    staggered: None,
                    state: m.cell.cache_state,
                    context: m.cell.context_tokens,
                    batch: m.cell.batch_size,
                    mode: m.cell.mode,
                },
                m.ttft_ms,
                m.decode_tps,
                m.cache_state_confirmed == Some(true),
                m.thermal.as_ref(),
            ),
            Record::Staggered(s) => (
                RowKey {
                    staggered: Some(s.cell.scenario),
                    state: s.cell.cache_state,
                    context: s.cell.context_tokens,
                    batch: s.cell.batch_size,
                    mode: s.cell.mode,
                },
                // B's wait from A's send: what a staggered pair measures.
                s.user_b_ttft_from_wall_start_ms,
                None,
                false,
                s.thermal.as_ref(),
            ),
            // A batch's group record repeats its members, which are counted themselves.
            Record::Group(_) => return,
        };
        if let Some(t) = thermal {
            self.thermal = Some(t.clone());
        }
        self.records += 1;
        self.failed += usize::from(!good);
        let row = self.rows.entry(key).or_default();
        row.records += 1;
        row.confirmed += usize::from(confirmed);
        row.failed += usize::from(!good);
        if good {
            row.ttft_ms.extend(ttft);
            row.decode_tps.extend(decode);
        }
    }
}

impl Board for SweepBoard {
    fn apply(&mut self, event: &Event) {
        if let Event::Record(r) = event {
            self.add(r);
        }
    }

    fn sheet(&self) -> Sheet {
        let mut lines = vec![format!("records so far: {} ({} failed)", self.records, self.failed)];
        if let Some(t) = &self.thermal {
            lines.push(thermal_line(t));
        }
        let mut table = Table::new(&[
            "state",
            "context",
            "batch",
            "mode",
            "records",
            "confirmed",
            "failed",
            "TTFT p50 ms",
            "TTFT p99 ms",
            "decode tok/s",
        ]);
        for (k, row) in &self.rows {
            let ttft = Samples::new(row.ttft_ms.iter().copied());
            let decode = Samples::new(row.decode_tps.iter().copied());
            table.rows.push(vec![
                match k.staggered {
                    Some(s) => format!("{}/{}", s.as_str(), k.state),
                    None => k.state.to_string(),
                },
                k.context.to_string(),
                k.batch.to_string(),
                k.mode.short_label().to_string(),
                row.records.to_string(),
                row.confirmed.to_string(),
                row.failed.to_string(),
                ms(ttft.median()),
                p99(ttft.quantile(0.99), ttft.len()),
                ms(decode.median()),
            ]);
        }
        Sheet { lines, table: Some(table) }
    }
}

/// The thermal gate's last wait: its probes against the baseline, and the hottest temperature the
/// host reported after the cell (a GPU's where nvidia-smi answers).
fn thermal_line(t: &ThermalRecord) -> String {
    let mut line = format!("thermal gate: {}", t.policy.as_str());
    if t.cooldown_s >= 0.5 {
        line.push_str(&format!(", last wait {:.0} s", t.cooldown_s));
    }
    if let Some(p) = t.probe_tps.last() {
        line.push_str(&format!(", probe {p:.1} tok/s"));
    }
    if let Some(b) = t.baseline_tps {
        line.push_str(&format!(" vs baseline {b:.1} tok/s"));
    }
    if !t.recovered {
        line.push_str(", not recovered");
    }
    if let Some(c) = t.after.as_deref().or(t.before.as_deref()).and_then(hottest) {
        line.push_str(&format!(", {c}"));
    }
    line
}

fn hottest(snapshot: &serde_json::Value) -> Option<String> {
    let max = |v: Vec<f64>| v.into_iter().reduce(f64::max);
    let gpus: Vec<f64> = snapshot["gpus"]
        .as_array()
        .map(|g| g.iter().filter_map(|x| x["temperature_c"].as_f64()).collect())
        .unwrap_or_default();
    if let Some(t) = max(gpus) {
        return Some(format!("GPU {t:.0} °C"));
    }
    let host: Vec<f64> = snapshot["components_c"]
        .as_object()
        .map(|c| c.values().filter_map(serde_json::Value::as_f64).collect())
        .unwrap_or_default();
    max(host).map(|t| format!("host {t:.0} °C"))
}

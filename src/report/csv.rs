//! CSV: one row per cell, columns fixed in the order of `COLUMNS` (also in
//! docs/report-columns.md): the cell's key (a dataset row and a load level included) and counts,
//! then for each of TTFT, E2E, decode rate, ITL and TPOT: n, median, mean, sd, p5, p90, p95, p99
//! and the interval of the median with its coverage; then ceilings, the speed-up over cold, system rate and user B's wait.
//!
//! Numbers have 3 decimals (a coverage 6); an empty field means "not applicable or not
//! measurable" (for example TTFT of a non-streaming cell, or an interval from fewer than 3
//! samples).

use super::CellStats;
use ttft_model::stats::Summary;

pub const COLUMNS: &[&str] = &[
    "model",
    "scenario",
    "cache_state",
    "mode",
    "context_tokens",
    "batch_size",
    "dataset_row",
    "concurrency",
    "offered_rate_per_s",
    "records",
    "warmup_records",
    "quality_ok",
    "cache_confirmed",
    "cache_unconfirmed",
    "ttft_n",
    "ttft_median_ms",
    "ttft_mean_ms",
    "ttft_sd_ms",
    "ttft_p5_ms",
    "ttft_p90_ms",
    "ttft_p95_ms",
    "ttft_p99_ms",
    "ttft_median_ci_lo_ms",
    "ttft_median_ci_hi_ms",
    "ttft_median_ci_level",
    "e2e_n",
    "e2e_median_ms",
    "e2e_mean_ms",
    "e2e_sd_ms",
    "e2e_p5_ms",
    "e2e_p90_ms",
    "e2e_p95_ms",
    "e2e_p99_ms",
    "e2e_median_ci_lo_ms",
    "e2e_median_ci_hi_ms",
    "e2e_median_ci_level",
    "decode_n",
    "decode_median_tps",
    "decode_mean_tps",
    "decode_sd_tps",
    "decode_p5_tps",
    "decode_p90_tps",
    "decode_p95_tps",
    "decode_p99_tps",
    "decode_median_ci_lo_tps",
    "decode_median_ci_hi_tps",
    "decode_median_ci_level",
    "itl_n",
    "itl_median_ms",
    "itl_mean_ms",
    "itl_sd_ms",
    "itl_p5_ms",
    "itl_p90_ms",
    "itl_p95_ms",
    "itl_p99_ms",
    "itl_median_ci_lo_ms",
    "itl_median_ci_hi_ms",
    "itl_median_ci_level",
    "tpot_n",
    "tpot_median_ms",
    "tpot_mean_ms",
    "tpot_sd_ms",
    "tpot_p5_ms",
    "tpot_p90_ms",
    "tpot_p95_ms",
    "tpot_p99_ms",
    "tpot_median_ci_lo_ms",
    "tpot_median_ci_hi_ms",
    "tpot_median_ci_level",
    "decode_ceiling_tps",
    "ttft_floor_ms",
    "ttft_speedup_vs_cold",
    "ttft_speedup_ci95_lo",
    "ttft_speedup_ci95_hi",
    "system_tps_n",
    "system_tps_median",
    "user_b_wait_n",
    "user_b_wait_median_ms",
    "user_b_wait_p99_ms",
    "user_b_wait_median_ci_lo_ms",
    "user_b_wait_median_ci_hi_ms",
    "user_b_wait_median_ci_level",
];

fn num(v: Option<f64>) -> String {
    v.map_or_else(String::new, |x| format!("{x:.3}"))
}

/// A coverage (0..1) keeps every digit that tells 0.9375 from 0.94.
fn level(v: Option<f64>) -> String {
    v.map_or_else(String::new, |x| format!("{x:.6}"))
}

fn summary(s: &Summary) -> [String; 11] {
    [
        s.n.to_string(),
        num(s.median),
        num(s.mean),
        num(s.sd),
        num(s.p5),
        num(s.p90),
        num(s.p95),
        num(s.p99),
        num(s.median_ci_lo),
        num(s.median_ci_hi),
        level(s.median_ci_level),
    ]
}

fn row(c: &CellStats) -> Vec<String> {
    let id = &c.id;
    let mut r = vec![
        id.model.clone(),
        id.scenario.as_str().to_string(),
        id.cache_state.as_str().to_string(),
        id.mode.as_str().to_string(),
        id.context_tokens.to_string(),
        id.batch_size.to_string(),
        id.dataset_row.map_or_else(String::new, |r| r.to_string()),
        id.concurrency.map_or_else(String::new, |n| n.to_string()),
        id.offered_rate_per_s.map_or_else(String::new, |r| r.0.to_string()),
        c.records.to_string(),
        c.warmup_records.to_string(),
        c.quality_ok.to_string(),
        c.cache_confirmed.to_string(),
        c.cache_unconfirmed.to_string(),
    ];
    r.extend(summary(&c.ttft_ms));
    r.extend(summary(&c.e2e_ms));
    r.extend(summary(&c.decode_tps));
    r.extend(summary(&c.itl_ms));
    r.extend(summary(&c.tpot_ms));
    r.push(num(c.decode_ceiling_tps));
    r.push(num(c.ttft_floor_ms));
    let speed = c.ttft_speedup_vs_cold.clone().unwrap_or_default();
    r.extend([num(speed.ratio), num(speed.ci95_lo), num(speed.ci95_hi)]);
    r.extend([c.system_tps.n.to_string(), num(c.system_tps.median)]);
    let b = &c.user_b_wait_ms;
    r.extend([
        b.n.to_string(),
        num(b.median),
        num(b.p99),
        num(b.median_ci_lo),
        num(b.median_ci_hi),
        level(b.median_ci_level),
    ]);
    r
}

pub fn to_csv(cells: &[CellStats]) -> Result<String, ::csv::Error> {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    w.write_record(COLUMNS)?;
    for c in cells {
        w.write_record(row(c))?;
    }
    let bytes = w.into_inner().map_err(|e| ::csv::Error::from(e.into_error()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::CellId;

    #[test]
    fn every_row_has_every_column() {
        let id = CellId {
            model: "m".into(),
            batch_size: 1,
            scenario: Default::default(),
            mode: Default::default(),
            context_tokens: 1024,
            dataset_row: Some(2),
            concurrency: None,
            offered_rate_per_s: Some(crate::report::RatePerS(2.5)),
            cache_state: Default::default(),
        };
        let c = CellStats {
            id,
            records: 0,
            warmup_records: 0,
            quality_ok: 0,
            cache_confirmed: 0,
            cache_unconfirmed: 0,
            ttft_ms: Summary::default(),
            e2e_ms: Summary::default(),
            decode_tps: Summary::default(),
            itl_ms: Summary::default(),
            tpot_ms: Summary::default(),
            decode_ceiling_tps: None,
            ttft_floor_ms: None,
            ttft_speedup_vs_cold: None,
            system_tps: Summary::default(),
            user_b_wait_ms: Summary::default(),
            load_runs: vec![],
        };
        let r = row(&c);
        assert_eq!(r.len(), COLUMNS.len());
        assert_eq!(r[4], "1024");
        assert_eq!((r[6].as_str(), r[7].as_str(), r[8].as_str()), ("2", "", "2.5"));
    }
}

//! CSV: one row per cell, columns fixed in this order (also in docs/report-columns.md):
//!
//! `model, scenario, cache_state, mode, context_tokens, batch_size, records, quality_ok,
//! cache_confirmed, cache_unconfirmed,`
//! `ttft_n, ttft_median_ms, ttft_mean_ms, ttft_sd_ms, ttft_p5_ms, ttft_p95_ms, ttft_ci95_lo_ms,
//! ttft_ci95_hi_ms,` the same eight for `e2e_*_ms` and for `decode_*_tps`,
//! `decode_ceiling_tps, ttft_speedup_vs_cold, ttft_speedup_ci95_lo, ttft_speedup_ci95_hi,
//! system_tps_n, system_tps_median, user_b_wait_n, user_b_wait_median_ms, user_b_wait_ci95_lo_ms,
//! user_b_wait_ci95_hi_ms`.
//!
//! Numbers have 3 decimals; an empty field means "not applicable or not measurable" (for example
//! TTFT of a non-streaming cell, or an interval from fewer than 2 samples).

use super::CellStats;
use crate::stats::Summary;

pub const COLUMNS: &[&str] = &[
    "model",
    "scenario",
    "cache_state",
    "mode",
    "context_tokens",
    "batch_size",
    "records",
    "quality_ok",
    "cache_confirmed",
    "cache_unconfirmed",
    "ttft_n",
    "ttft_median_ms",
    "ttft_mean_ms",
    "ttft_sd_ms",
    "ttft_p5_ms",
    "ttft_p95_ms",
    "ttft_ci95_lo_ms",
    "ttft_ci95_hi_ms",
    "e2e_n",
    "e2e_median_ms",
    "e2e_mean_ms",
    "e2e_sd_ms",
    "e2e_p5_ms",
    "e2e_p95_ms",
    "e2e_ci95_lo_ms",
    "e2e_ci95_hi_ms",
    "decode_n",
    "decode_median_tps",
    "decode_mean_tps",
    "decode_sd_tps",
    "decode_p5_tps",
    "decode_p95_tps",
    "decode_ci95_lo_tps",
    "decode_ci95_hi_tps",
    "decode_ceiling_tps",
    "ttft_speedup_vs_cold",
    "ttft_speedup_ci95_lo",
    "ttft_speedup_ci95_hi",
    "system_tps_n",
    "system_tps_median",
    "user_b_wait_n",
    "user_b_wait_median_ms",
    "user_b_wait_ci95_lo_ms",
    "user_b_wait_ci95_hi_ms",
];

fn num(v: Option<f64>) -> String {
    v.map_or_else(String::new, |x| format!("{x:.3}"))
}

fn summary(s: &Summary) -> [String; 8] {
    [
        s.n.to_string(),
        num(s.median),
        num(s.mean),
        num(s.sd),
        num(s.p5),
        num(s.p95),
        num(s.ci95_lo),
        num(s.ci95_hi),
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
        c.records.to_string(),
        c.quality_ok.to_string(),
        c.cache_confirmed.to_string(),
        c.cache_unconfirmed.to_string(),
    ];
    r.extend(summary(&c.ttft_ms));
    r.extend(summary(&c.e2e_ms));
    r.extend(summary(&c.decode_tps));
    r.push(num(c.decode_ceiling_tps));
    let speed = c.ttft_speedup_vs_cold.clone().unwrap_or_default();
    r.extend([num(speed.ratio), num(speed.ci95_lo), num(speed.ci95_hi)]);
    r.extend([c.system_tps.n.to_string(), num(c.system_tps.median)]);
    let b = &c.user_b_wait_ms;
    r.extend([b.n.to_string(), num(b.median), num(b.ci95_lo), num(b.ci95_hi)]);
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
            cache_state: Default::default(),
        };
        let c = CellStats {
            id,
            records: 0,
            quality_ok: 0,
            cache_confirmed: 0,
            cache_unconfirmed: 0,
            ttft_ms: Summary::default(),
            e2e_ms: Summary::default(),
            decode_tps: Summary::default(),
            decode_ceiling_tps: None,
            ttft_speedup_vs_cold: None,
            system_tps: Summary::default(),
            user_b_wait_ms: Summary::default(),
        };
        let r = row(&c);
        assert_eq!(r.len(), COLUMNS.len());
        assert_eq!(r[4], "1024");
    }
}

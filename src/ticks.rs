//! Tick marks and labels of log-scaled plot axes (report's and load's plots).
//!
//! A log axis left to the plotting library marks powers of ten: a sweep of 512 and 1K tokens got
//! one tick ("1000.0"), and rates 9 and 10 per second got labels that ran into each other
//! ("9.010.0"). Here ticks sit where the data are (the swept sizes, the offered rates) or on 1-2-5
//! steps, neighbours are kept apart by a share of the axis so no two labels touch, and labels are
//! short ("512", "1K", "32K"; "10", "0.5").

/// The share of a log axis's span two labelled ticks are at least apart: 900-pixel plots have about
/// 800 pixels of axis, and a label of up to 5 characters is under 40 of them.
pub(crate) const MIN_TICK_SHARE: f64 = 0.06;

/// Ticks for a log axis over [lo, hi] (both positive): `at` (the values the data sit at) where
/// there are any inside it, else 1-2-5 steps (finer steps, 1..9 then halves and tenths, where the
/// coarser give fewer than 3, so a narrow range still reads); thinned
/// so that neighbours are at least `min_share` of the axis's log span apart (the first is kept).
pub(crate) fn log_ticks(lo: f64, hi: f64, at: &[f64], min_share: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi > lo && hi.is_finite()) {
        return Vec::new();
    }
    let mut inside: Vec<f64> = at.iter().copied().filter(|v| *v >= lo && *v <= hi).collect();
    if inside.is_empty() {
        inside = steps(lo, hi, &[1.0, 2.0, 5.0]);
        for step in [1.0, 0.5, 0.1] {
            if inside.len() >= 3 {
                break;
            }
            let mantissas: Vec<f64> =
                (0..).map(|i| 1.0 + step * f64::from(i)).take_while(|m| *m < 10.0).collect();
            inside = steps(lo, hi, &mantissas);
        }
    }
    inside.sort_by(f64::total_cmp);
    inside.dedup();
    let span = hi.log10() - lo.log10();
    let mut kept: Vec<f64> = Vec::new();
    for v in inside {
        if kept.last().is_none_or(|last| (v.log10() - last.log10()) / span >= min_share) {
            kept.push(v);
        }
    }
    kept
}

/// m·10^k for every mantissa m of `mantissas` inside [lo, hi].
fn steps(lo: f64, hi: f64, mantissas: &[f64]) -> Vec<f64> {
    let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let mut out = Vec::new();
    for k in first..=last.min(first + 400) {
        for m in mantissas {
            let v = m * 10f64.powi(k);
            if v >= lo && v <= hi {
                out.push(v);
            }
        }
    }
    out
}

/// A token count as people write it: 512, 1K, 1.5K, 32K, 128K (K = 1024).
pub(crate) fn tokens_label(v: f64) -> String {
    let n = v.round();
    if n >= 1024.0 {
        let k = n / 1024.0;
        if (k - k.round()).abs() < 1e-9 { format!("{k:.0}K") } else { format!("{k:.1}K") }
    } else {
        format!("{n:.0}")
    }
}

/// A tick value without noise digits: 2000, 10, 0.5, 0.25, 1e+12.
pub(crate) fn number_label(v: f64) -> String {
    if !v.is_finite() || v.abs() >= 1e7 || (v != 0.0 && v.abs() < 1e-3) {
        return format!("{v:.0e}");
    }
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_sit_at_the_swept_sizes() {
        let sizes = [512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0];
        let ticks = log_ticks(512.0 / 1.3, 32768.0 * 1.3, &sizes, MIN_TICK_SHARE);
        assert_eq!(ticks, sizes);
        let labels: Vec<String> = ticks.iter().map(|&t| tokens_label(t)).collect();
        assert_eq!(labels, ["512", "1K", "2K", "4K", "8K", "16K", "32K"]);
        // A sweep of 512 and 1K: both, not one "1000.0".
        assert_eq!(log_ticks(393.0, 1331.0, &[512.0, 1024.0], MIN_TICK_SHARE), [512.0, 1024.0]);
    }

    #[test]
    fn close_values_are_thinned_so_labels_do_not_touch() {
        // Rates 1..10 on an axis from 0.77 to 13: 9 and 10 are 4% of it apart; 10 is left out.
        let rates: Vec<f64> = (1..=10).map(f64::from).collect();
        let ticks = log_ticks(1.0 / 1.3, 13.0, &rates, MIN_TICK_SHARE);
        let span = 13f64.log10() - (1.0f64 / 1.3).log10();
        for w in ticks.windows(2) {
            assert!((w[1].log10() - w[0].log10()) / span >= MIN_TICK_SHARE, "{ticks:?}");
        }
        assert_eq!(ticks.first(), Some(&1.0));
        assert!(!ticks.contains(&10.0) || !ticks.contains(&9.0), "{ticks:?}");
    }

    #[test]
    fn without_data_values_ticks_are_1_2_5_steps() {
        assert_eq!(log_ticks(3.0, 600.0, &[], 0.0), [5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0]);
        // A narrow range (500..1500 ms) still gets several ticks.
        assert_eq!(log_ticks(500.0, 1500.0, &[], 0.0), [500.0, 600.0, 700.0, 800.0, 900.0, 1000.0]);
        // Narrower still (27..45 ms, a scripted server's TTFTs): halves of the decade.
        assert_eq!(log_ticks(27.0, 45.0, &[], 0.0), [30.0, 35.0, 40.0, 45.0]);
        assert!(log_ticks(0.0, 10.0, &[], 0.0).is_empty());
        assert_eq!(number_label(2000.0), "2000");
        assert_eq!(number_label(0.5), "0.5");
        assert_eq!(number_label(9.0), "9");
        assert_eq!(tokens_label(1536.0), "1.5K");
    }
}

//! Statistics over raw per-record values (never over averages).
//!
//! Methods, named in every output that uses them:
//! - quantiles (median, p5, p95): linear interpolation between order statistics (Hyndman & Fan
//!   type 7, numpy's default);
//! - sd: sample standard deviation (n - 1);
//! - 95% CI: Student t-interval on the mean (mean ± t(0.975, n-1) · sd / √n; statrs), none for n < 2;
//! - speed-up (ratio of medians, e.g. cold TTFT / warm TTFT): 95% percentile bootstrap, both groups
//!   resampled independently, 2000 resamples, fixed seed (so the same data give the same interval);
//!   none when either group has fewer than 2 values.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

pub const CI_METHOD: &str = "t-interval on the mean (95%)";
pub const RATIO_METHOD: &str = "ratio of medians, 95% percentile bootstrap (2000 resamples, seed 2026)";
const BOOTSTRAP_RESAMPLES: usize = 2000;
const BOOTSTRAP_SEED: u64 = 2026;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub median: Option<f64>,
    pub mean: Option<f64>,
    pub sd: Option<f64>,
    pub p5: Option<f64>,
    pub p95: Option<f64>,
    pub ci95_lo: Option<f64>,
    pub ci95_hi: Option<f64>,
}

/// Summarises finite values; NaN and infinities are ignored (they are not measurements).
pub fn summarize(values: &[f64]) -> Summary {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return Summary::default();
    }
    let mean = v.iter().sum::<f64>() / n as f64;
    let sd = sample_sd(&v, mean);
    let (ci95_lo, ci95_hi) = match t_interval(mean, sd, n) {
        Some((lo, hi)) => (Some(lo), Some(hi)),
        None => (None, None),
    };
    Summary {
        n,
        median: quantile_sorted(&v, 0.5),
        mean: Some(mean),
        sd,
        p5: quantile_sorted(&v, 0.05),
        p95: quantile_sorted(&v, 0.95),
        ci95_lo,
        ci95_hi,
    }
}

fn sample_sd(v: &[f64], mean: f64) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let ss: f64 = v.iter().map(|x| (x - mean).powi(2)).sum();
    Some((ss / (v.len() - 1) as f64).sqrt())
}

fn t_interval(mean: f64, sd: Option<f64>, n: usize) -> Option<(f64, f64)> {
    let sd = sd?;
    let t = StudentsT::new(0.0, 1.0, (n - 1) as f64).ok()?.inverse_cdf(0.975);
    let half = t * sd / (n as f64).sqrt();
    Some((mean - half, mean + half))
}

/// Type-7 quantile of sorted values.
pub fn quantile_sorted(v: &[f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let h = (v.len() - 1) as f64 * p.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(v.len() - 1);
    Some(v[lo] + (h - lo as f64) * (v[hi] - v[lo]))
}

pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    quantile_sorted(&v, 0.5)
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Ratio {
    pub ratio: Option<f64>,
    pub ci95_lo: Option<f64>,
    pub ci95_hi: Option<f64>,
}

/// median(numerator) / median(denominator) with its bootstrap interval.
pub fn ratio_of_medians(numerator: &[f64], denominator: &[f64]) -> Ratio {
    let num: Vec<f64> = numerator.iter().copied().filter(|x| x.is_finite()).collect();
    let den: Vec<f64> = denominator.iter().copied().filter(|x| x.is_finite()).collect();
    let ratio = |a: &[f64], b: &[f64]| match (median(a), median(b)) {
        (Some(x), Some(y)) if y > 0.0 => Some(x / y),
        _ => None,
    };
    let point = ratio(&num, &den);
    if point.is_none() || num.len() < 2 || den.len() < 2 {
        return Ratio { ratio: point, ..Default::default() };
    }
    let mut rng = SplitMix64(BOOTSTRAP_SEED);
    let mut draws = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    let (mut a, mut b) = (vec![0.0; num.len()], vec![0.0; den.len()]);
    for _ in 0..BOOTSTRAP_RESAMPLES {
        a.iter_mut().for_each(|x| *x = num[rng.below(num.len())]);
        b.iter_mut().for_each(|x| *x = den[rng.below(den.len())]);
        if let Some(r) = ratio(&a, &b) {
            draws.push(r);
        }
    }
    draws.sort_by(f64::total_cmp);
    Ratio { ratio: point, ci95_lo: quantile_sorted(&draws, 0.025), ci95_hi: quantile_sorted(&draws, 0.975) }
}

/// A tiny deterministic generator (SplitMix64): enough for resampling indices, no dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9 * b.abs().max(1.0))
    }

    #[test]
    fn summary_of_a_known_vector() {
        let s = summarize(&[4.0, 1.0, 3.0, 2.0, 5.0]);
        assert_eq!(s.n, 5);
        assert!(close(s.median, 3.0) && close(s.mean, 3.0));
        assert!(close(s.sd, 2.5f64.sqrt()));
        assert!(close(s.p5, 1.2) && close(s.p95, 4.8));
        // t(0.975, 4) = 2.7764451051977987
        let half = 2.7764451051977987 * 2.5f64.sqrt() / 5f64.sqrt();
        assert!(close(s.ci95_lo, 3.0 - half) && close(s.ci95_hi, 3.0 + half), "{s:?}");
    }

    #[test]
    fn one_value_has_no_spread_and_nan_is_ignored() {
        let s = summarize(&[7.0, f64::NAN]);
        assert_eq!((s.n, s.median, s.sd, s.ci95_lo), (1, Some(7.0), None, None));
        assert_eq!(summarize(&[]), Summary::default());
    }

    #[test]
    fn ratio_of_medians_is_deterministic_and_brackets_the_point() {
        let cold = [1000.0, 1100.0, 1050.0];
        let warm = [100.0, 110.0, 90.0];
        let r = ratio_of_medians(&cold, &warm);
        assert!(close(r.ratio, 10.5));
        let (lo, hi) = (r.ci95_lo.unwrap_or(f64::NAN), r.ci95_hi.unwrap_or(f64::NAN));
        assert!(lo <= 10.5 && 10.5 <= hi && lo >= 1000.0 / 110.0 && hi <= 1100.0 / 90.0, "{r:?}");
        assert_eq!(ratio_of_medians(&cold, &warm), r, "fixed seed");
        assert_eq!(ratio_of_medians(&cold, &[100.0]).ci95_lo, None);
    }
}

//! Statistics over raw per-record values (never over averages).
//!
//! One home for every statistic bench computes (report, verify, the thermal gate): `Samples`
//! drops NaN and infinities once, medians and type-7 quantiles, MAD, the bootstrap, and the one
//! seeded generator (`Rng`, SplitMix64). Every figure returned is finite or None.
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

mod bootstrap;
mod divisor;

#[cfg(test)]
use bootstrap::{BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, ratio_of_medians_on};
pub use bootstrap::{Ratio, bootstrap, ratio_of_medians};
pub use divisor::Divisor;

pub const CI_METHOD: &str = "t-interval on the mean (95%)";
pub const RATIO_METHOD: &str = "ratio of medians, 95% percentile bootstrap (2000 resamples, seed 2026)";

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

/// The finite values of a sample, sorted: NaN and infinities are dropped here, once, so no
/// statistic downstream ever sees them (they are not measurements).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Samples(Vec<f64>);

impl Samples {
    pub fn new(values: impl IntoIterator<Item = f64>) -> Samples {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        Samples(v)
    }

    /// Sorted, finite.
    pub fn values(&self) -> &[f64] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Type-7 quantile (`p` in 0..=1).
    pub fn quantile(&self, p: f64) -> Option<f64> {
        quantile_sorted(&self.0, p)
    }

    pub fn median(&self) -> Option<f64> {
        self.quantile(0.5)
    }

    /// Median absolute deviation from the median (unscaled: multiply by 1.4826 for a normal sd).
    pub fn mad(&self) -> Option<f64> {
        let med = self.median()?;
        Samples::new(self.0.iter().map(|x| (x - med).abs())).median()
    }

    /// Mean without overflow for any finite values (a running mean, not sum / n).
    pub fn mean(&self) -> Option<f64> {
        if self.0.is_empty() {
            return None;
        }
        let sum: f64 = self.0.iter().sum();
        if sum.is_finite() {
            return Some(sum / self.0.len() as f64);
        }
        // The sum overflowed (values near f64::MAX): a running mean stays in range.
        let mut mean = 0.0;
        for (i, x) in self.0.iter().enumerate() {
            mean += x / (i + 1) as f64 - mean / (i + 1) as f64;
        }
        Some(mean).filter(|m| m.is_finite())
    }

    /// Sample standard deviation (n - 1); None for fewer than 2 values or when it overflows.
    pub fn sd(&self) -> Option<f64> {
        let (n, mean) = (self.0.len(), self.mean()?);
        if n < 2 {
            return None;
        }
        let ss: f64 = self.0.iter().map(|x| (x - mean).powi(2)).sum();
        let sd = (ss / (n - 1) as f64).sqrt();
        if sd.is_finite() {
            return Some(sd);
        }
        // The squares overflowed: scaled by the largest deviation they cannot.
        let scale = self.0.iter().map(|x| (x - mean).abs()).fold(0.0, f64::max);
        if scale == 0.0 {
            return Some(0.0);
        }
        let ss: f64 = self.0.iter().map(|x| ((x - mean) / scale).powi(2)).sum();
        Some(scale * (ss / (n - 1) as f64).sqrt()).filter(|s| s.is_finite())
    }
}

/// Summarises finite values; NaN and infinities are ignored (they are not measurements). Every
/// field is finite or None: a statistic that would overflow is not reported.
pub fn summarize(values: &[f64]) -> Summary {
    let s = Samples::new(values.iter().copied());
    let n = s.len();
    if n == 0 {
        return Summary::default();
    }
    let mean = s.mean();
    let sd = s.sd();
    let (ci95_lo, ci95_hi) = match mean.zip(sd).and_then(|(m, sd)| t_interval(m, sd, n)) {
        Some((lo, hi)) => (Some(lo), Some(hi)),
        None => (None, None),
    };
    Summary { n, median: s.median(), mean, sd, p5: s.quantile(0.05), p95: s.quantile(0.95), ci95_lo, ci95_hi }
}

/// Student t-interval on the mean; None for n < 2 or when a bound is not finite.
fn t_interval(mean: f64, sd: f64, n: usize) -> Option<(f64, f64)> {
    if n < 2 {
        return None;
    }
    let t = StudentsT::new(0.0, 1.0, (n - 1) as f64).ok()?.inverse_cdf(0.975);
    let half = t * sd / (n as f64).sqrt();
    let (lo, hi) = (mean - half, mean + half);
    (lo.is_finite() && hi.is_finite()).then_some((lo, hi))
}

/// Type-7 quantile of sorted values.
pub fn quantile_sorted(v: &[f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let h = (v.len() - 1) as f64 * p.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(v.len() - 1);
    let f = h - lo as f64;
    let q = v[lo] + f * (v[hi] - v[lo]);
    // b - a overflows for a near -MAX and b near MAX; (1 - f)a + fb does not.
    Some(if q.is_finite() { q } else { (1.0 - f) * v[lo] + f * v[hi] })
}

/// Median of the finite values; None when there are none.
pub fn median(values: &[f64]) -> Option<f64> {
    Samples::new(values.iter().copied()).median()
}

/// Median absolute deviation of the finite values (unscaled).
pub fn mad(values: &[f64]) -> Option<f64> {
    Samples::new(values.iter().copied()).mad()
}

/// The one seeded generator of bench (SplitMix64): tiny, fast, stable across platforms and
/// versions, so the same seed gives the same prompt text and the same bootstrap interval.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in 0..n (n > 0; 0 for n = 0). Modulo bias is below 1e-9 for any n a sample has.
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.next_u64() % n as u64) as usize
    }

    /// `below(n)` for a divisor prepared once: the same number, without a division.
    #[inline]
    pub fn below_by(&mut self, n: &Divisor) -> usize {
        n.remainder(self.next_u64()) as usize
    }

    /// A number in [0, 1), with the 53 bits an f64 holds.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Moves on as `n` calls of `next_u64` would (SplitMix64's state only counts up).
    pub fn skip(&mut self, n: u64) {
        self.0 = self.0.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    }

    /// Stirs `value` into the state (to derive a stream from several seeds).
    pub fn absorb(&mut self, value: u64) {
        self.0 ^= value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `median` of finite values in any order, reordering them instead of sorting a copy: linear time
    /// and no allocation, for the bootstrap's thousands of resamples. The same number as `median`: the
    /// two middle order statistics go through the same type-7 formula.
    fn median_in_place(v: &mut [f64]) -> Option<f64> {
        if v.is_empty() {
            return None;
        }
        let h = (v.len() - 1) as f64 * 0.5;
        let lo = h.floor() as usize;
        let (_, lo_value, upper) = v.select_nth_unstable_by(lo, f64::total_cmp);
        let lo_value = *lo_value;
        let hi_value = upper.iter().copied().min_by(f64::total_cmp).unwrap_or(lo_value);
        quantile_sorted(&[lo_value, hi_value], h - lo as f64)
    }

    /// `ratio_of_medians` as it was computed before the counting bootstrap: every resample
    /// materialised and its median selected.
    fn ratio_by_resampling(numerator: &[f64], denominator: &[f64]) -> Ratio {
        let num = Samples::new(numerator.iter().copied());
        let den = Samples::new(denominator.iter().copied());
        let ratio = bootstrap::ratio;
        let point = ratio(num.median(), den.median());
        if point.is_none() || num.len() < 2 || den.len() < 2 {
            return Ratio { ratio: point, ..Default::default() };
        }
        let resampled = |a: &mut [f64], b: &mut [f64]| ratio(median_in_place(a), median_in_place(b));
        let draws = bootstrap(num.values(), den.values(), BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, resampled);
        Ratio { ratio: point, ci95_lo: draws.quantile(0.025), ci95_hi: draws.quantile(0.975) }
    }

    #[test]
    fn skip_is_that_many_draws() {
        for n in [0u64, 1, 2, 1000, 123_457] {
            let (mut walked, mut skipped) = (Rng::new(11), Rng::new(11));
            (0..n).for_each(|_| {
                walked.next_u64();
            });
            skipped.skip(n);
            assert_eq!(walked.next_u64(), skipped.next_u64(), "{n}");
        }
    }

    #[test]
    fn the_counting_bootstrap_gives_the_resampling_bootstrap_s_numbers_exactly() {
        let mut rng = Rng::new(31);
        for case in 0..120 {
            let (n, m) = (1 + rng.below(40), 1 + rng.below(40));
            // Few distinct values (ties), zeros, negatives, and wide continuous ones.
            let value = |rng: &mut Rng| match case % 4 {
                0 => rng.below(5) as f64,
                1 => rng.below(7) as f64 - 2.0,
                2 => rng.unit() * 1e4,
                _ => {
                    if rng.below(3) == 0 {
                        0.0
                    } else {
                        100.0 + rng.unit()
                    }
                }
            };
            let a: Vec<f64> = (0..n).map(|_| value(&mut rng)).collect();
            let b: Vec<f64> = (0..m).map(|_| value(&mut rng)).collect();
            let (new, old) = (ratio_of_medians(&a, &b), ratio_by_resampling(&a, &b));
            let bits = |r: &Ratio| [r.ratio, r.ci95_lo, r.ci95_hi].map(|v| v.map(f64::to_bits));
            assert_eq!(bits(&new), bits(&old), "{a:?} / {b:?}");
        }
        let big: Vec<f64> = (0..1500).map(|i| f64::from(i % 97) + 1000.0).collect();
        let small: Vec<f64> = (0..900).map(|i| f64::from(i % 13) + 10.0).collect();
        let one = ratio_by_resampling(&big, &small);
        // Shared among any number of threads, the draws are the same.
        assert_eq!(ratio_of_medians(&big, &small), one);
        for threads in [0, 1, 3, 7] {
            assert_eq!(ratio_of_medians_on(&big, &small, threads), one, "{threads} threads");
        }
    }

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

    #[test]
    fn samples_drop_non_finite_values_once() {
        let s = Samples::new([3.0, f64::NAN, 1.0, f64::INFINITY, 2.0, f64::NEG_INFINITY]);
        assert_eq!(s.values(), &[1.0, 2.0, 3.0]);
        assert_eq!((s.median(), s.mad()), (Some(2.0), Some(1.0)));
        assert_eq!(median(&[f64::NAN]), None);
        assert_eq!(mad(&[1.0, 1.0, 1.0, 9.0]), Some(0.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn huge_finite_values_give_finite_statistics_or_none() {
        let s = summarize(&[f64::MAX, f64::MAX, f64::MAX]);
        assert_eq!((s.median, s.mean, s.sd), (Some(f64::MAX), Some(f64::MAX), Some(0.0)));
        assert_eq!((s.ci95_lo, s.ci95_hi), (Some(f64::MAX), Some(f64::MAX)));
        let s = summarize(&[-f64::MAX, f64::MAX, 5.0]);
        for v in [s.median, s.mean, s.sd, s.p5, s.p95, s.ci95_lo, s.ci95_hi].into_iter().flatten() {
            assert!(v.is_finite(), "{s:?}");
        }
        assert_eq!(s.ci95_hi, None, "an interval that overflows is not reported");
        let s = summarize(&[1e200, 2e200, 3e200]);
        assert!(close(s.sd, 1e200), "{s:?}");
    }

    #[test]
    fn rng_is_splitmix64() {
        // Reference values of SplitMix64 seeded with 0 (Vigna's splitmix64.c).
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut r = Rng::new(7);
        assert!((0..1000).all(|_| r.below(3) < 3));
        assert_eq!(r.below(0), 0);
    }

    #[test]
    fn the_in_place_median_is_the_sorted_median() {
        let mut rng = Rng::new(7);
        for n in 1..40 {
            let v: Vec<f64> = (0..n).map(|_| (rng.below(10) as f64) * 1.5 - 3.0).collect();
            let mut scratch = v.clone();
            assert_eq!(median_in_place(&mut scratch), median(&v), "{v:?}");
        }
        assert_eq!(median_in_place(&mut []), None);
    }
}

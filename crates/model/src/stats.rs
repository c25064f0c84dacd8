//! Statistics over raw per-record values (never over averages).
//!
//! One home for every statistic bench computes (report, verify, the thermal gate): `Samples`
//! drops NaN and infinities once, medians and type-7 quantiles, MAD, the bootstrap, and the one
//! seeded generator (`Rng`, SplitMix64). Every figure returned is finite or None.
//!
//! Methods, named in every output that uses them:
//! - quantiles (median, p5, p90, p95, p99): linear interpolation between order statistics
//!   (Hyndman & Fan type 7, numpy's default);
//! - sd: sample standard deviation (n - 1);
//! - CI of the median: the distribution-free interval between two order statistics, x(k)..x(n+1-k),
//!   k the largest rank whose exact binomial coverage (1 - 2·P(B <= k-1), B ~ Bin(n, 1/2)) is at
//!   least 95%; from n = 3 to 5 no pair reaches 95% and the interval is min..max with its coverage
//!   (75%, 87.5%, 93.75%) stated; none for n < 3. The interval is of the statistic reports show (the
//!   median), and it never leaves the observed range (its bounds are observed values);
//! - speed-up (ratio of medians, e.g. cold TTFT / warm TTFT): 95% percentile bootstrap, both groups
//!   resampled independently, 2000 resamples, fixed seed (so the same data give the same interval);
//!   none when either group has fewer than 2 values.

use serde::Serialize;
use statrs::distribution::{Binomial, DiscreteCDF};

mod bootstrap;
mod order;

#[cfg(test)]
use bootstrap::{BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED};
pub use bootstrap::{Ratio, ratio_of_medians};

pub const CI_METHOD: &str = "distribution-free interval of the median (order statistics, exact binomial \
     coverage >= 95%; min..max with its coverage below n = 6; none below n = 3)";

/// The fewest values a median interval is given for: with two, the only interval between order
/// statistics is min..max at 50% coverage, which says nothing.
pub const MEDIAN_CI_MIN_N: usize = 3;
/// The fewest values on each side a ratio of medians is given an interval for (`MEDIAN_CI_MIN_N`):
/// the median of a resample of two values is one of them or their mean, so the bootstrap of two
/// spans little more than the two values and reads as a precision the data does not have.
pub const RATIO_CI_MIN_N: usize = MEDIAN_CI_MIN_N;
pub const RATIO_METHOD: &str = "ratio of medians, 95% percentile bootstrap (2000 resamples, seed 2026)";
/// Below this many values a p90 or p99 is shown with its n: it is then (nearly) the largest value,
/// not a tail of the distribution.
pub const TAIL_MIN_N: usize = 20;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub median: Option<f64>,
    pub mean: Option<f64>,
    pub sd: Option<f64>,
    pub p5: Option<f64>,
    pub p90: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    /// Interval of the median between two observed values (see the module's methods); None for
    /// n < 3.
    pub median_ci_lo: Option<f64>,
    pub median_ci_hi: Option<f64>,
    /// The interval's exact coverage (0.95 or more from n = 6; 0.75 at n = 3).
    pub median_ci_level: Option<f64>,
}

/// The finite values of a sample, sorted: NaN and infinities are dropped here, once, so no
/// statistic downstream ever sees them (they are not measurements).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Samples(Vec<f64>);

impl Samples {
    pub fn new(values: impl IntoIterator<Item = f64>) -> Samples {
        Samples(order::sorted_finite(values))
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

    /// `summarize` of these values.
    pub fn summary(&self) -> Summary {
        let n = self.len();
        if n == 0 {
            return Summary::default();
        }
        let ci = median_interval(self.values());
        Summary {
            n,
            median: self.median(),
            mean: self.mean(),
            sd: self.sd(),
            p5: self.quantile(0.05),
            p90: self.quantile(0.90),
            p95: self.quantile(0.95),
            p99: self.quantile(0.99),
            median_ci_lo: ci.map(|c| c.0),
            median_ci_hi: ci.map(|c| c.1),
            median_ci_level: ci.map(|c| c.2),
        }
    }

    /// The sorted values, their memory to be filled again (`Samples::new` of a `Vec` sorts in it):
    /// a report pools one cell's inter-token gaps after another, a million and more each, in one
    /// buffer instead of fresh pages per cell.
    pub fn into_values(self) -> Vec<f64> {
        self.0
    }
}

/// Summarises finite values; NaN and infinities are ignored (they are not measurements). Every
/// field is finite or None: a statistic that would overflow is not reported.
pub fn summarize(values: &[f64]) -> Summary {
    Samples::new(values.iter().copied()).summary()
}

/// The ranks (1-based) k and n + 1 - k of the median's interval over n values and its exact
/// coverage; None for n < 3. The coverage of x(k)..x(n+1-k) is P(k <= B <= n-k) for
/// B ~ Bin(n, 1/2), the chance that the true median lies between the two order statistics.
pub fn median_interval_ranks(n: usize) -> Option<(usize, usize, f64)> {
    if n < MEDIAN_CI_MIN_N {
        return None;
    }
    let b = Binomial::new(0.5, n as u64).ok()?;
    // The binomial CDF (a regularized beta function) carries rounding of about 1e-15: rounded to 9
    // decimals, the exact coverages of small n come out exact (0.75, not 0.7500000000000012).
    let coverage = |k: usize| ((1.0 - 2.0 * b.cdf(k as u64 - 1)) * 1e9).round() / 1e9;
    // The coverage falls as k grows: the largest k (at most n/2) still at 95%, else k = 1.
    let (mut lo, mut hi) = (1, n / 2);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if coverage(mid) >= 0.95 { lo = mid } else { hi = mid - 1 }
    }
    Some((lo, n + 1 - lo, coverage(lo)))
}

/// (lo, hi, coverage) of the median of sorted values: observed values, so never outside the data.
fn median_interval(sorted: &[f64]) -> Option<(f64, f64, f64)> {
    let (k, j, level) = median_interval_ranks(sorted.len())?;
    Some((sorted[k - 1], sorted[j - 1], level))
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
///
/// Hand-written on purpose: `rand_xoshiro::SplitMix64` draws the same stream (checked over a
/// million draws, seed 20260208), but keeps its state to itself, and bench needs the state: `absorb`
/// derives a rate's or a user's stream from the run's seed. The ten lines below are the whole algorithm (Vigna's splitmix64.c), pinned
/// to its reference values by `rng_is_splitmix64`.
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

    /// A number in [0, 1), with the 53 bits an f64 holds.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Stirs `value` into the state (to derive a stream from several seeds).
    pub fn absorb(&mut self, value: u64) {
        self.0 ^= value;
    }
}

/// bench's generator as rand's, for the samplers of rand_distr (the bootstrap's binomial draws).
impl rand_core::RngCore for Rng {
    fn next_u32(&mut self) -> u32 {
        (Rng::next_u64(self) >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        Rng::next_u64(self)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        rand_core::impls::fill_bytes_via_next(self, dest)
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
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

    /// The percentile bootstrap by its definition: every resample drawn value by value and its
    /// median selected; the reference the binomial draws are held to.
    fn resampled_medians(v: &[f64], resamples: usize, rng: &mut Rng) -> Vec<f64> {
        let mut x = vec![0.0; v.len()];
        (0..resamples)
            .filter_map(|_| {
                x.iter_mut().for_each(|x| *x = v[rng.below(v.len())]);
                median_in_place(&mut x)
            })
            .collect()
    }

    /// The exact distribution of the two middle indices of a resample of n draws from 0..n,
    /// counted over all n^n resamples (equally likely).
    fn exact_middle_ranks(n: usize) -> std::collections::BTreeMap<(usize, usize), f64> {
        let lo = (n - 1) / 2;
        let both = n.is_multiple_of(2);
        let total = n.pow(n as u32);
        let mut counts = std::collections::BTreeMap::new();
        let mut draws = vec![0usize; n];
        for code in 0..total {
            let mut c = code;
            for d in draws.iter_mut() {
                *d = c % n;
                c /= n;
            }
            draws.sort_unstable();
            let pair = (draws[lo], if both { draws[lo + 1] } else { draws[lo] });
            *counts.entry(pair).or_insert(0.0) += 1.0 / total as f64;
        }
        counts
    }

    #[test]
    fn middle_ranks_follow_the_exact_distribution() {
        use statrs::distribution::{ChiSquared, ContinuousCDF};
        let mut rng = Rng::new(41);
        for n in 1..=6 {
            let exact = exact_middle_ranks(n);
            let trials = 60_000;
            let mut seen = std::collections::BTreeMap::new();
            let lo = (n - 1) / 2;
            for _ in 0..trials {
                *seen.entry(bootstrap::middle_ranks(n, lo, n.is_multiple_of(2), &mut rng)).or_insert(0.0) +=
                    1.0;
            }
            assert!(seen.keys().all(|k| exact.contains_key(k)), "n {n}: an impossible pair in {seen:?}");
            // Pearson's chi-square over the pairs the exact distribution allows.
            let chi2: f64 = exact
                .iter()
                .map(|(pair, p)| {
                    let expected = p * trials as f64;
                    (seen.get(pair).copied().unwrap_or(0.0) - expected).powi(2) / expected
                })
                .sum();
            let dof = (exact.len() - 1).max(1) as f64;
            // One chance in a million of failing if the draws had exactly the distribution (they
            // are seeded, so the test is deterministic; the bound is what a wrong split breaks).
            let limit = ChiSquared::new(dof).map(|c| c.inverse_cdf(1.0 - 1e-6)).unwrap_or(f64::NAN);
            assert!(
                chi2 < limit,
                "n {n}: chi-square {chi2:.1} over {dof} degrees of freedom, limit {limit:.1}"
            );
        }
    }

    /// Two-sample Kolmogorov-Smirnov distance between the empirical distributions of a and b.
    fn ks_distance(a: &[f64], b: &[f64]) -> f64 {
        let (a, b) = (Samples::new(a.iter().copied()), Samples::new(b.iter().copied()));
        let (a, b) = (a.values(), b.values());
        let (mut i, mut j, mut d) = (0, 0, 0.0f64);
        while i < a.len() && j < b.len() {
            let x = a[i].min(b[j]);
            while i < a.len() && a[i] <= x {
                i += 1;
            }
            while j < b.len() && b[j] <= x {
                j += 1;
            }
            d = d.max((i as f64 / a.len() as f64 - j as f64 / b.len() as f64).abs());
        }
        d
    }

    #[test]
    fn resampled_medians_of_large_samples_are_distributed_as_resampling_gives_them() {
        // Large n takes rand_distr's BTPE branch (n·p >= 10) that small n never reaches.
        let mut rng = Rng::new(43);
        for n in [2000usize, 2001, 10_000] {
            // Skewed and tied, as latencies are: the ranks, not the values, are what is drawn.
            let v = Samples::new((0..n).map(|_| (100.0 + 50.0 * (-rng.unit().max(1e-12).ln())).round()));
            let resamples = 2000;
            let reference = resampled_medians(v.values(), resamples, &mut rng);
            let drawn: Vec<f64> =
                (0..resamples).filter_map(|_| bootstrap::resampled_median(v.values(), &mut rng)).collect();
            // Kolmogorov-Smirnov at alpha 1e-4 (seeded: deterministic).
            let limit = (-(1e-4f64 / 2.0).ln() / 2.0).sqrt() * (2.0 / resamples as f64).sqrt();
            let d = ks_distance(&reference, &drawn);
            assert!(d < limit, "n {n}: KS distance {d:.4} against a limit of {limit:.4}");
        }
    }

    #[test]
    fn the_interval_is_the_resampling_bootstrap_s_within_its_monte_carlo_error() {
        let mut rng = Rng::new(47);
        let cold: Vec<f64> = (0..3000).map(|_| 1000.0 + 200.0 * rng.unit()).collect();
        let warm: Vec<f64> = (0..2500).map(|_| 100.0 + 40.0 * rng.unit() * rng.unit()).collect();
        let r = ratio_of_medians(&cold, &warm);
        let mut reference_rng = Rng::new(BOOTSTRAP_SEED);
        let (c, w) = (Samples::new(cold), Samples::new(warm));
        let draws: Vec<f64> = resampled_medians(c.values(), BOOTSTRAP_RESAMPLES, &mut reference_rng)
            .into_iter()
            .zip(resampled_medians(w.values(), BOOTSTRAP_RESAMPLES, &mut reference_rng))
            .filter_map(|(x, y)| bootstrap::ratio(Some(x), Some(y)))
            .collect();
        let reference = Samples::new(draws);
        let lo = reference.quantile(0.025).unwrap_or(f64::NAN);
        let hi = reference.quantile(0.975).unwrap_or(f64::NAN);
        let width = hi - lo;
        let (got_lo, got_hi) = (r.ci95_lo.unwrap_or(f64::NAN), r.ci95_hi.unwrap_or(f64::NAN));
        // 2000 resamples put each end of a percentile interval within about a tenth of its width
        // of where infinitely many would; two such estimates within a fifth of each other.
        assert!(
            (got_lo - lo).abs() < 0.2 * width && (got_hi - hi).abs() < 0.2 * width,
            "{r:?} vs {lo}..{hi}"
        );
        let point = r.ratio.unwrap_or(f64::NAN);
        assert!(got_lo <= point && point <= got_hi, "{r:?}");
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
        // Type 7 over 1..5: h = 4p, so p90 = 1 + 3.6 and p99 = 1 + 3.96.
        assert!(close(s.p90, 4.6) && close(s.p99, 4.96));
        // Five values: no pair of order statistics covers 95%; min..max covers 1 - 2/2^5.
        assert_eq!((s.median_ci_lo, s.median_ci_hi), (Some(1.0), Some(5.0)), "{s:?}");
        assert!(close(s.median_ci_level, 0.9375));
    }

    /// Ranks of the median's interval as published tables give them (e.g. Conover, "Practical
    /// Nonparametric Statistics", table A3; coverage counted by hand from binomial coefficients).
    #[test]
    fn median_interval_ranks_match_the_published_tables() {
        assert_eq!(median_interval_ranks(2), None, "n < 3: none");
        // n = 3: min..max, 1 - 2 * 1/8.
        assert_eq!(median_interval_ranks(3), Some((1, 3, 0.75)));
        assert_eq!(median_interval_ranks(4), Some((1, 4, 0.875)));
        // n = 6: 1 - 2/64; n = 8: k = 2 would cover 1 - 2 * 9/256 = 0.9297 < 95%.
        assert_eq!(median_interval_ranks(6), Some((1, 6, 0.96875)));
        assert_eq!(median_interval_ranks(8), Some((1, 8, 0.9921875)));
        // n = 10: P(B <= 1) = 11/1024.
        let (k, j, level) = median_interval_ranks(10).unwrap();
        assert_eq!((k, j), (2, 9));
        assert!((level - (1.0 - 22.0 / 1024.0)).abs() < 1e-12, "{level}");
        // n = 20: P(B <= 5) = 21700/1048576 = 0.0207.
        let (k, j, level) = median_interval_ranks(20).unwrap();
        assert_eq!((k, j), (6, 15));
        assert!((level - (1.0 - 2.0 * 21700.0 / 1_048_576.0)).abs() < 1e-9, "{level}");
        // n = 100: ranks 40 and 61 (coverage 0.9648).
        let (k, j, level) = median_interval_ranks(100).unwrap();
        assert_eq!((k, j), (40, 61));
        assert!((level - 0.9648).abs() < 1e-4, "{level}");
        // Large n: near the normal approximation n/2 -+ 0.98 sqrt(n).
        let (k, j, _) = median_interval_ranks(10_000).unwrap();
        assert!((4900..=4902).contains(&k) && j == 10_001 - k, "{k}");
    }

    #[test]
    fn the_median_interval_is_of_observed_values_and_never_leaves_the_data() {
        // The n = 2 case that once printed `549 (-4924..6022)`: no interval at all.
        let s = summarize(&[100.0, 998.0]);
        assert_eq!((s.median, s.median_ci_lo, s.median_ci_hi), (Some(549.0), None, None));
        let s = summarize(&[300.0, 100.0, 200.0]);
        assert_eq!((s.median_ci_lo, s.median_ci_hi), (Some(100.0), Some(300.0)));
        let v: Vec<f64> = (1..=10).map(|i| f64::from(i * i)).collect();
        let s = summarize(&v);
        assert_eq!((s.median_ci_lo, s.median_ci_hi), (Some(4.0), Some(81.0)), "x(2)..x(9)");
    }

    #[test]
    fn one_value_has_no_spread_and_nan_is_ignored() {
        let s = summarize(&[7.0, f64::NAN]);
        assert_eq!((s.n, s.median, s.sd, s.median_ci_lo), (1, Some(7.0), None, None));
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
        // Two values on a side: the point, and no interval.
        let two = ratio_of_medians(&cold, &warm[..2]);
        assert!(
            close(two.ratio, 1050.0 / 105.0) && two.ci95_lo.is_none() && two.ci95_hi.is_none(),
            "{two:?}"
        );
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
        assert_eq!((s.median_ci_lo, s.median_ci_hi), (Some(f64::MAX), Some(f64::MAX)));
        let s = summarize(&[-f64::MAX, f64::MAX, 5.0]);
        for v in
            [s.median, s.mean, s.sd, s.p5, s.p95, s.p99, s.median_ci_lo, s.median_ci_hi].into_iter().flatten()
        {
            assert!(v.is_finite(), "{s:?}");
        }
        assert_eq!((s.median_ci_lo, s.median_ci_hi), (Some(-f64::MAX), Some(f64::MAX)), "observed values");
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

//! What `bench load` offers: the rates, the cache-state mix, the SLO, and each rate's Poisson
//! schedule of arrivals, drawn from the project's one seeded generator (`stats::Rng`).
//!
//! A rate's schedule depends only on the seed and the rate itself (the rate's bits are stirred
//! into the generator), so adding or reordering rates never changes the schedule of another, and
//! the same `--seed` gives the same arrival instants and cache states on every machine.

use crate::cli::Mix;
use crate::meta::{Arrival, RateSchedule};
#[cfg(test)]
use ttft_model::record::CacheState;
use ttft_model::stats::Rng;

pub(crate) use crate::config::load::MAX_ARRIVALS;

/// A number in (0, 1]: 53 random bits, never 0 (its logarithm is taken).
pub(super) fn unit_open(rng: &mut Rng) -> f64 {
    ((rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
}

/// A Poisson process of `rate` arrivals/s over `duration_s`: exponential gaps (-ln U / rate), each
/// arrival's cache state drawn from `mix`. Instants are rounded to the microsecond, so the ones
/// written to run.json and the records are the ones the client waits for.
pub fn arrivals(seed: u64, rate: f64, duration_s: f64, mix: &Mix) -> Vec<Arrival> {
    let mut rng = Rng::new(seed);
    rng.absorb(rate.to_bits());
    let mut out = Vec::new();
    let mut t_s = 0.0;
    while out.len() < MAX_ARRIVALS {
        t_s += -unit_open(&mut rng).ln() / rate;
        if t_s >= duration_s {
            break;
        }
        let at_ms = (t_s * 1e6).round() / 1e3;
        out.push(Arrival { at_ms, state: mix.draw(unit_open(&mut rng) - f64::EPSILON) });
    }
    out
}

/// Every rate's schedule (`run` = position in `rates`, 1-based).
pub fn plan_rates(seed: u64, rates: &[f64], duration_s: f64, mix: &Mix) -> Vec<RateSchedule> {
    rates
        .iter()
        .enumerate()
        .map(|(i, &rate)| RateSchedule {
            run: i as u32 + 1,
            rate_per_s: rate,
            arrivals: arrivals(seed, rate, duration_s, mix),
            clock_started_at: None,
            stopped: None,
            repeats_run: None,
            concurrency: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_is_a_seeded_poisson_process() {
        let mix: Mix = "cold=0.5,hot=0.5".parse().unwrap();
        let a = arrivals(7, 50.0, 200.0, &mix);
        assert_eq!(a, arrivals(7, 50.0, 200.0, &mix), "same seed, same schedule");
        assert_ne!(a, arrivals(8, 50.0, 200.0, &mix));
        // 10 000 expected arrivals: the count is within 4 sd (sd = 100) of rate x duration.
        assert!((a.len() as f64 - 10_000.0).abs() < 400.0, "{}", a.len());
        let gaps: Vec<f64> = a.windows(2).map(|w| w[1].at_ms - w[0].at_ms).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        // Exponential gaps: mean 20 ms and sd equal to the mean (coefficient of variation 1).
        assert!((mean - 20.0).abs() < 1.0 && (sd / mean - 1.0).abs() < 0.05, "mean {mean}, sd {sd}");
        let hot = a.iter().filter(|x| x.state == CacheState::Hot).count() as f64 / a.len() as f64;
        assert!((hot - 0.5).abs() < 0.04, "{hot}");
        assert!(
            a.iter().all(|x| x.at_ms < 200_000.0 && ((x.at_ms * 1e3).round() - x.at_ms * 1e3).abs() < 1e-6)
        );
    }

    #[test]
    fn a_rate_s_schedule_does_not_depend_on_the_other_rates() {
        let mix = Mix::default();
        let both = plan_rates(3, &[1.0, 4.0], 30.0, &mix);
        let alone = plan_rates(3, &[4.0], 30.0, &mix);
        assert_eq!(both[1].arrivals, alone[0].arrivals);
        assert_eq!((both[1].run, alone[0].run), (2, 1));
    }
}

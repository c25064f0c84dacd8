//! `x % n` for one `n` used millions of times, by multiplication instead of division.
//!
//! The bootstrap draws `n` indices below `n` for each of its 2000 resamples, and a 64-bit `div`
//! (tens of cycles) was most of a 100,000-record report's time. Lemire, Kaser and Kurz ("Faster
//! Remainder by Direct Computation", 2019) show that with `m = ceil(2^128 / n)` the remainder of
//! any 64-bit `x` is the high 64 bits of `(m * x mod 2^128) * n`, exactly: the same numbers as
//! `%`, so every interval bench reported before stays bit for bit what it was.

/// A divisor prepared for `remainder`.
#[derive(Clone, Copy, Debug)]
pub struct Divisor {
    n: u64,
    /// ceil(2^128 / n); 0 stands for n <= 1 (every remainder is 0).
    m: u128,
}

impl Divisor {
    pub fn new(n: u64) -> Divisor {
        // For n >= 2, floor((2^128 - 1) / n) + 1 is ceil(2^128 / n), and it fits.
        let m = if n < 2 { 0 } else { u128::MAX / u128::from(n) + 1 };
        Divisor { n, m }
    }

    /// `x % n` (0 when n is 0 or 1).
    #[inline]
    pub fn remainder(&self, x: u64) -> u64 {
        if self.m == 0 {
            return 0;
        }
        let low = self.m.wrapping_mul(u128::from(x));
        // The high 64 bits of the 192-bit product low * n, from its two 64-bit halves.
        let n = u128::from(self.n);
        let low_half = ((low as u64 as u128) * n) >> 64;
        let high_half = (low >> 64) * n;
        ((high_half + low_half) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Rng;

    #[test]
    fn the_remainder_is_the_one_division_gives() {
        let mut rng = Rng::new(11);
        let mut divisors: Vec<u64> = (2..5000).collect();
        divisors.extend([u64::from(u32::MAX), u64::from(u32::MAX) + 1, 1 << 63, u64::MAX - 1, u64::MAX]);
        divisors.extend((0..2000).map(|_| rng.next_u64() >> (rng.next_u64() % 64)).filter(|&n| n >= 2));
        for n in divisors {
            let d = Divisor::new(n);
            let edges = [0, 1, n - 1, n, n.wrapping_add(1), u64::MAX, u64::MAX - 1, u64::MAX / n * n];
            for x in edges.into_iter().chain((0..200).map(|_| rng.next_u64())) {
                assert_eq!(d.remainder(x), x % n, "{x} % {n}");
            }
        }
        assert_eq!(Divisor::new(1).remainder(u64::MAX), 0);
        assert_eq!(Divisor::new(0).remainder(17), 0);
    }
}

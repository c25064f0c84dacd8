//! Sorting a sample: every statistic reads its values in `f64::total_cmp` order. A cell's
//! inter-token gaps are a million values and more: sorting floats by `total_cmp` took most of a
//! report's statistics time there, so each value is made an unsigned number in that order once,
//! and a large sample's numbers are sorted by their digits (a least significant digit radix sort,
//! eleven bits a pass; the same numbers sorted by comparison took half as long again). Values equal
//! under `total_cmp` are the same bits, so every correct sort of a sample gives the same array:
//! the statistics are bit for bit those of a sort by `total_cmp`.

/// Below this many values sorting by comparison is the quicker (and needs no second buffer).
const RADIX_MIN_LEN: usize = 4096;

/// `values`' finite values, sorted in `f64::total_cmp` order.
pub(super) fn sorted_finite(values: impl IntoIterator<Item = f64>) -> Vec<f64> {
    let finite = values.into_iter().filter(|x| x.is_finite());
    let mut keys: Vec<u64> = finite.map(|x| key(x.to_bits())).collect();
    if keys.len() < RADIX_MIN_LEN {
        keys.sort_unstable();
    } else {
        radix_sort(&mut keys);
    }
    // Same size and alignment: the keys' buffer becomes the values'.
    keys.into_iter().map(|k| f64::from_bits(bits(k))).collect()
}

/// The bits of a float as an unsigned number in `total_cmp` order: a negative one's bits all
/// flipped (a larger magnitude is smaller), a positive one's sign bit set (above every negative).
fn key(bits: u64) -> u64 {
    if bits >> 63 == 1 { !bits } else { bits | 1 << 63 }
}

/// The float's bits back from `key`.
fn bits(key: u64) -> u64 {
    if key >> 63 == 1 { key & !(1 << 63) } else { !key }
}

/// The width of the digit a pass sorts by: six passes of 11 bits cover a key (eight of a byte
/// did), and a pass's 2,048 write positions stay in the cache as it scatters.
const DIGIT_BITS: u32 = 11;
const DIGITS: usize = 1 << DIGIT_BITS;
const PASSES: usize = 64usize.div_ceil(DIGIT_BITS as usize);

/// Sorts `keys`, a digit a pass from the lowest (each pass stable, so the order of the lower
/// digits holds among equal higher ones). A digit that is the same in every key moves nothing:
/// its pass is skipped (a sample's sign and exponent mostly are).
fn radix_sort(keys: &mut Vec<u64>) {
    let mut counts = vec![[0usize; DIGITS]; PASSES];
    for &k in keys.iter() {
        for (pass, count) in counts.iter_mut().enumerate() {
            count[digit(k, pass)] += 1;
        }
    }
    let mut scratch = vec![0u64; keys.len()];
    for (pass, count) in counts.iter().enumerate() {
        if count.contains(&keys.len()) {
            continue;
        }
        let mut next = [0usize; DIGITS];
        let mut at = 0;
        for (slot, &n) in next.iter_mut().zip(count) {
            *slot = at;
            at += n;
        }
        for &k in keys.iter() {
            let d = digit(k, pass);
            scratch[next[d]] = k;
            next[d] += 1;
        }
        std::mem::swap(keys, &mut scratch);
    }
}

fn digit(key: u64, pass: usize) -> usize {
    ((key >> (DIGIT_BITS as usize * pass)) & (DIGITS as u64 - 1)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Rng;

    /// The reference: the comparison sort `total_cmp` defines.
    fn compared(values: &[f64]) -> Vec<u64> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_unstable_by(f64::total_cmp);
        v.into_iter().map(f64::to_bits).collect()
    }

    fn radix(values: &[f64]) -> Vec<u64> {
        sorted_finite(values.iter().copied()).into_iter().map(f64::to_bits).collect()
    }

    #[test]
    fn large_samples_sort_as_total_cmp_sorts_them_bit_for_bit() {
        let mut rng = Rng::new(41);
        let edges = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
            5e-324,
            -5e-324,
            f64::MAX,
            f64::MIN,
        ];
        for len in [RADIX_MIN_LEN, RADIX_MIN_LEN + 1, 100_000] {
            // Gaps of a stream (one exponent, random low bits), with signs, repeats, the edges
            // of the format and values that are not finite (dropped).
            let mut values: Vec<f64> = (0..len)
                .map(|i| match i % 7 {
                    0 => -(rng.unit() * 30.0),
                    1 => f64::from_bits(rng.next_u64()),
                    2 => edges[rng.below(edges.len())],
                    3 => f64::NAN,
                    4 => f64::NEG_INFINITY,
                    _ => 20.0 + rng.unit() * 5.0,
                })
                .collect();
            values.extend_from_within(..len / 10);
            assert!(values.len() >= RADIX_MIN_LEN);
            assert_eq!(radix(&values), compared(&values), "{len} values");
        }
    }

    #[test]
    fn a_large_sample_of_one_value_moves_nothing_and_is_given_back_as_floats() {
        for value in [2.5, -0.0, -3.75] {
            let values = vec![value; RADIX_MIN_LEN + 10];
            assert_eq!(radix(&values), compared(&values), "{value}");
        }
    }

    #[test]
    fn a_sample_of_one_exponent_skips_passes_and_still_sorts() {
        let mut rng = Rng::new(7);
        let values: Vec<f64> = (0..50_000).map(|_| 1.0 + rng.unit()).collect();
        assert_eq!(radix(&values), compared(&values));
    }
}

//! An array of numbers in the form bench writes its token offsets in (`[0-9]+(\.[0-9]+)?`, no
//! leading zero before another digit, no sign, no whitespace, `,` between them), walked 64 bytes
//! at a time: each byte of a block is classed once (digit, `,`, `.`, `]`, `0`) into a bit mask, and
//! the array's rules are checked on the masks, a block at a time, no byte visited on its own (that
//! no number holds two points too: `walk` says how). The word-at-a-time walk
//! (`fast::plain_numbers_end_from`) visits every byte that is not a digit, and was a tenth of a lean
//! reading; token offsets are four tenths of a streamed record's bytes.
//!
//! It never decides that an array is malformed: anything outside that form (a sign, an exponent,
//! whitespace, a syntax error) is handed back to the word-at-a-time walk, from the array's start,
//! and the last block of a text (fewer than 64 bytes) from the start of the number it is in.

/// How `walk` ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Walked {
    /// Just past the array's `]`: every number before it is in the form.
    End(usize),
    /// The text's last block was reached: every number before the one beginning here is in the
    /// form, and this one and the rest are left to the word-at-a-time walk.
    From(usize),
}

const BLOCK: usize = 64;

/// The longest number the hand reading converts or checks without serde (`fast::checked_number`).
const LONGEST: usize = 300;

/// One block's bytes by class: bit k for byte k.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Classes {
    digit: u64,
    comma: u64,
    point: u64,
    close: u64,
    zero: u64,
}

/// The array whose `[` is at `open` in `bytes`, walked a block at a time; None where a block holds
/// anything outside the form (the word-at-a-time walk decides then).
pub(super) fn walk(bytes: &[u8], open: usize) -> Option<Walked> {
    let mut base = open + 1;
    // Where the number being walked begins, and whether it has its point.
    let mut number_start = base;
    let mut point = false;
    // What the previous block's last byte tells this block's first: it is a digit (a `,`, `.` or
    // `]` may follow it); it is a `,` (a number begins); it is a number's leading `0` (no digit
    // may follow). The byte before the first block is the `[`: a number begins.
    let (mut after_digit, mut starts_here, mut after_zero) = (false, true, false);
    loop {
        let Some(block) = bytes.get(base..base + BLOCK) else { return Some(Walked::From(number_start)) };
        let c = classes(block.try_into().ok()?);
        // Only the bytes up to the first `]` are the array's.
        let close = c.close & c.close.wrapping_neg();
        let inside = if close == 0 { !0 } else { close | (close - 1) };
        if !(c.digit | c.comma | c.point | close) & inside != 0 {
            return None;
        }
        let separators = (c.comma | c.point) & inside;
        // A `,`, `.` or `]` follows a digit. So does the byte after a separator: anything else
        // there is a separator or the `]` (which would not follow a digit) or outside the form.
        let digit_before = c.digit << 1 | u64::from(after_digit);
        if (separators | close) & !digit_before != 0 {
            return None;
        }
        // A `0` that begins a number is not followed by a digit (the block's last byte is answered
        // by the next block's first).
        let starts = (c.comma << 1 | u64::from(starts_here)) & inside;
        let leading_zeros = starts & c.zero;
        if leading_zeros & c.digit >> 1 != 0 || (after_zero && c.digit & 1 == 1) {
            return None;
        }
        // No number holds two points: the separator after a point is never a point. Each point's
        // carry, added just past it, runs up its number's digits and lands on the next
        // separator; one carried in from the previous block lands on this block's first.
        let stops = separators | close;
        let landed = (!stops).wrapping_add(c.point << 1).wrapping_add(u64::from(point)) & stops & inside;
        if landed & c.point != 0 {
            return None;
        }
        // A number is at most `LONGEST` bytes: commas within a block are nearer one another than
        // that, so only the first comma and the `]` are measured, from a number that began in an
        // earlier block.
        let commas = c.comma & inside;
        if commas != 0 {
            let first = base + commas.trailing_zeros() as usize;
            if first - number_start > LONGEST {
                return None;
            }
            number_start = base + (63 - commas.leading_zeros() as usize) + 1;
        }
        if separators != 0 {
            point = c.point >> (63 - separators.leading_zeros()) & 1 == 1;
        }
        if close != 0 {
            let at = base + close.trailing_zeros() as usize;
            return (at - number_start <= LONGEST).then_some(Walked::End(at + 1));
        }
        base += BLOCK;
        if base - number_start > LONGEST {
            return None;
        }
        after_digit = c.digit >> 63 == 1;
        starts_here = c.comma >> 63 == 1;
        after_zero = leading_zeros >> 63 == 1;
    }
}

/// `block`'s bytes by class, sixteen at a time (SSE2).
#[cfg(target_arch = "x86_64")]
fn classes(block: &[u8; BLOCK]) -> Classes {
    // SAFETY: SSE2 is part of x86-64: every processor this build runs on has it.
    unsafe { classes_sse2(block) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn classes_sse2(block: &[u8; BLOCK]) -> Classes {
    use std::arch::x86_64::{
        _mm_and_si128, _mm_cmpeq_epi8, _mm_cmpgt_epi8, _mm_cmplt_epi8, _mm_loadu_si128, _mm_movemask_epi8,
        _mm_set1_epi8,
    };
    let (below_digits, above_digits) = (_mm_set1_epi8(b'0' as i8 - 1), _mm_set1_epi8(b'9' as i8 + 1));
    let (comma, point) = (_mm_set1_epi8(b',' as i8), _mm_set1_epi8(b'.' as i8));
    let (close, zero) = (_mm_set1_epi8(b']' as i8), _mm_set1_epi8(b'0' as i8));
    let mut c = Classes::default();
    for (k, sixteen) in block.chunks_exact(16).enumerate() {
        // SAFETY: `sixteen` is 16 bytes; the load needs no alignment.
        let v = unsafe { _mm_loadu_si128(sixteen.as_ptr().cast()) };
        let shift = 16 * k;
        // Signed compares: the digits are 0x30..=0x39, and every byte from 0x80 is below them.
        let digit = _mm_and_si128(_mm_cmpgt_epi8(v, below_digits), _mm_cmplt_epi8(v, above_digits));
        c.digit |= u64::from(_mm_movemask_epi8(digit) as u16) << shift;
        c.comma |= u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(v, comma)) as u16) << shift;
        c.point |= u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(v, point)) as u16) << shift;
        c.close |= u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(v, close)) as u16) << shift;
        c.zero |= u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(v, zero)) as u16) << shift;
    }
    c
}

/// `block`'s bytes by class, a byte at a time (elsewhere than x86-64).
#[cfg(not(target_arch = "x86_64"))]
fn classes(block: &[u8; BLOCK]) -> Classes {
    bytewise(block)
}

#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn bytewise(block: &[u8; BLOCK]) -> Classes {
    let mut c = Classes::default();
    for (k, &b) in block.iter().enumerate() {
        let bit = 1 << k;
        let set = |mask: &mut u64, is: bool| *mask |= if is { bit } else { 0 };
        set(&mut c.digit, b.is_ascii_digit());
        set(&mut c.comma, b == b',');
        set(&mut c.point, b == b'.');
        set(&mut c.close, b == b']');
        set(&mut c.zero, b == b'0');
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::fast::plain_numbers_end_from;
    use crate::stats::Rng;

    /// The word-at-a-time walk of the array at `open`, from its first number.
    fn by_words(bytes: &[u8], open: usize) -> Option<usize> {
        plain_numbers_end_from(bytes, open + 1)
    }

    /// Whether `end` is where the array at `open` ends: just past its first `]`, and serde reads
    /// the array.
    fn ends_at(text: &str, open: usize, end: usize) -> bool {
        let close = text[open..].find(']').map(|at| open + at + 1);
        close == Some(end) && serde_json::from_str::<Vec<f64>>(&text[open..end]).is_ok()
    }

    /// Bench's own arrays and arrays of broken pieces, at every place against the blocks' edges:
    /// an array the blocks walk to its end is one serde reads, ending at its first `]` (as the
    /// word-at-a-time walk ends it, where that walk reaches it); a walk handed over at the last
    /// block is handed over at a number's start, and the whole walk (`plain_numbers_end`) ends
    /// only where the array does; bench's own arrays are walked to their end.
    #[test]
    fn arrays_walked_a_block_at_a_time_end_where_the_word_walk_ends_them() {
        let mut rng = Rng::new(64);
        let pieces =
            ["0", "1", "7", "9", ".", ",", "-", "]", "e", " ", "00", "01", "3.25", "10", "0.5", "1.2.3"];
        let (mut ended, mut handed_over) = (0, 0);
        for round in 0..100_000 {
            let own = round % 3 == 0;
            let body: String = if own {
                let n = 1 + rng.below(60);
                let v: Vec<String> =
                    (0..n).map(|_| format!("{}", rng.unit() * 10f64.powi(rng.below(7) as i32))).collect();
                v.join(",") + "]"
            } else {
                let mut numbers: Vec<String> =
                    (0..1 + rng.below(12)).map(|_| format!("{}", rng.unit() * 1e4)).collect();
                // One piece broken in, anywhere.
                let at = rng.below(numbers.len());
                let place = rng.below(numbers[at].len() + 1);
                numbers[at].insert_str(place, pieces[rng.below(pieces.len())]);
                numbers.join(",") + "]"
            };
            let lead = rng.below(BLOCK);
            let tail = if round % 5 == 0 { rng.below(BLOCK) } else { BLOCK + rng.below(BLOCK) };
            let text = format!("{}[{body}{}", " ".repeat(lead), "}".repeat(tail));
            let bytes = text.as_bytes();
            let words = by_words(bytes, lead);
            match walk(bytes, lead) {
                Some(Walked::End(end)) => {
                    ended += 1;
                    assert!(ends_at(&text, lead, end), "walked to {end}: {text}");
                    assert!(words.is_none() || words == Some(end), "{text}");
                }
                Some(Walked::From(start)) => {
                    handed_over += 1;
                    assert!(start == lead + 1 || bytes[start - 1] == b',', "{text} from {start}");
                }
                None => assert!(!own || tail < BLOCK, "bench's own array not walked: {text}"),
            }
            match crate::record::fast::plain_numbers_end(bytes, lead) {
                Some(end) => assert!(ends_at(&text, lead, end), "ended at {end}: {text}"),
                None => assert!(!own || tail < 8, "bench's own array not walked: {text}"),
            }
        }
        assert!(ended > 30_000 && handed_over > 1_000, "{ended} ended, {handed_over} handed over");
    }

    /// A number of `LONGEST` bytes is walked (without an exponent it is finite as an f64), a
    /// longer one never: it is left to the reading that converts it to see whether it is finite
    /// (from 309 digits it is not, and serde refuses it). Wherever it lies against the blocks,
    /// and wherever in the array.
    #[test]
    fn a_number_longer_than_the_hand_reading_checks_is_not_walked() {
        for len in [LONGEST - 1, LONGEST, LONGEST + 1, LONGEST + 40] {
            let long = "9".repeat(len);
            for (before, after) in [("", ""), ("1.5,", ""), ("", ",2.5"), ("1,2,3,", ",4")] {
                for lead in 0..BLOCK {
                    let text =
                        format!("{}[{before}{long}{after}]{}", " ".repeat(lead), "}".repeat(2 * BLOCK));
                    let walked = walk(text.as_bytes(), lead);
                    if len <= LONGEST {
                        assert!(matches!(walked, Some(Walked::End(_))), "{len} bytes not walked");
                    } else {
                        assert_eq!(walked, None, "{len} bytes walked");
                    }
                }
            }
        }
    }

    /// Each rule of the form, broken where a block ends (its last byte, the next block's first):
    /// never walked to an end the word walk does not give.
    #[test]
    fn a_rule_broken_across_a_block_edge_is_not_walked() {
        let broken =
            ["1,,2", "1..2", "1.2.3", "01", "1,01", "1,.5", "1.,2", "1.]", "1,]", "-1", "1 ,2", "1e5"];
        for bad in broken {
            for lead in 0..BLOCK {
                for before in 0..3 {
                    let numbers = vec!["12.5"; before].join(",");
                    let sep = if before > 0 { "," } else { "" };
                    let text =
                        format!("{}[{numbers}{sep}{bad},3]{}", " ".repeat(lead), "}".repeat(2 * BLOCK));
                    let bytes = text.as_bytes();
                    if let Some(Walked::End(end)) = walk(bytes, lead) {
                        assert_eq!(Some(end), by_words(bytes, lead), "{text}");
                    }
                    let read: Result<Vec<f64>, _> = serde_json::from_str(text[lead..].trim_end_matches('}'));
                    if read.is_err() {
                        assert!(!matches!(walk(bytes, lead), Some(Walked::End(_))), "walked {text}");
                    }
                }
            }
        }
    }

    /// Every byte value at every place of a block is classed as a byte at a time classes it.
    #[test]
    fn blocks_are_classed_as_each_byte_is() {
        for value in 0..=255u8 {
            for at in 0..BLOCK {
                let mut block = [b'5'; BLOCK];
                block[at] = value;
                block[(at + 17) % BLOCK] = value.wrapping_add(1);
                assert_eq!(classes(&block), bytewise(&block), "byte {value:#x} at {at}");
            }
        }
    }
}

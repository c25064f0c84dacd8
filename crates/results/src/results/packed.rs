//! Compact forms of a record's fields, for what a reading verb keeps of a million records: a few
//! short strings in one allocation (`Packed`: its run id, start time, nonce are a million
//! allocations fewer per string, and 16 bytes for them all instead of 16 each), and an optional
//! number in 8 bytes instead of 16 (`OptF64`).

/// `N` strings end to end in one allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packed<const N: usize> {
    text: Box<str>,
    /// Where each ends in `text`.
    ends: [u32; N],
}

impl<const N: usize> Packed<N> {
    /// `strings`, to be read back by their place (`get`). A record's line is far shorter than the
    /// 4 GB an end can say; a longer string would read back cut short.
    pub fn new(strings: [&str; N]) -> Packed<N> {
        let mut text = String::with_capacity(strings.iter().map(|s| s.len()).sum());
        let mut ends = [0; N];
        for (end, s) in ends.iter_mut().zip(strings) {
            text.push_str(s);
            *end = u32::try_from(text.len()).unwrap_or(u32::MAX);
        }
        Packed { text: text.into_boxed_str(), ends }
    }

    /// The string at place `i` (empty past the last).
    pub fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends.get(i - 1).map_or(0, |&e| e as usize) };
        let end = self.ends.get(i).map_or(start, |&e| e as usize);
        self.text.get(start..end).unwrap_or_default()
    }
}

/// An optional number in 8 bytes: NaN stands for none. A record's numbers come from JSON, which
/// holds no NaN, and no time or rate computed from its finite numbers is one.
#[derive(Clone, Copy, Debug)]
pub struct OptF64(f64);

impl OptF64 {
    pub fn of(v: Option<f64>) -> OptF64 {
        OptF64(v.unwrap_or(f64::NAN))
    }

    pub fn get(self) -> Option<f64> {
        (!self.0.is_nan()).then_some(self.0)
    }
}

impl Default for OptF64 {
    fn default() -> OptF64 {
        OptF64(f64::NAN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_string_reads_back_as_it_was_given() {
        let packed = Packed::new(["run-1", "", "2026-02-05T21:21:05.022Z", "nonce é"]);
        let got: Vec<&str> = (0..4).map(|i| packed.get(i)).collect();
        assert_eq!(got, ["run-1", "", "2026-02-05T21:21:05.022Z", "nonce é"]);
        assert_eq!(packed.get(4), "");
        assert_eq!(Packed::new(["", ""]).get(1), "");
    }

    #[test]
    fn an_optional_number_reads_back_as_it_was_given() {
        for v in [None, Some(0.0), Some(-0.0), Some(1089.0539303218), Some(f64::INFINITY), Some(f64::MAX)] {
            assert_eq!(OptF64::of(v).get().map(f64::to_bits), v.map(f64::to_bits), "{v:?}");
        }
        assert_eq!(OptF64::default().get(), None);
    }
}

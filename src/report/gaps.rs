//! Each cell's inter-token gaps, pooled for its statistics one cell at a time, so only one cell's
//! gaps are ever in memory.
//!
//! A record held whole gives its gaps from its offsets. A record read located has its offsets read
//! back from its text. A canonical file holds a cell's records side by side, and reading them back
//! cell by cell is a few large reads. A run's file holds them in sweep order, a sweep apart, and
//! read back cell by cell each text is a read of its own: a million for a million records, over a
//! quarter of the report. There the texts are read once in file order instead, in a few hundred
//! large reads, and each record's gaps are set aside on disk under its cell (`store::Spill`) until
//! the cell's statistics read them. The two ways pool the same gaps: the statistics sort them, so the
//! order they come in does not matter.

use std::io;

use super::sampled::{Sampled, sample};
use ttft_results::results::sources;
use ttft_results::results::text::{self, Text};
use ttft_results::store::Spill;

/// Below this many reads cell by cell, reading the texts back cell by cell costs less than a file
/// set aside.
const SPILL_MIN_READS: usize = 4096;

/// How the located records' gaps are gathered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gather {
    /// In one pass over the texts in file order where reading them cell by cell would take more
    /// than twice the reads (and at least `SPILL_MIN_READS`), cell by cell otherwise.
    Chosen,
    #[cfg(test)]
    CellByCell,
    /// In one pass, wherever any record is located (the tests' way to take it on small inputs).
    #[cfg(test)]
    OnePass,
}

/// Where each cell's gaps come from.
pub(super) struct Gaps<'a, T> {
    records: &'a [T],
    texts: &'a [Option<Text>],
    /// The located records' gaps, bucket `c` for the `c`th cell, when gathered in one pass.
    spilled: Option<Spill>,
}

impl<'a, T: Sampled> Gaps<'a, T> {
    /// The gaps of `cells` (each the records whose gaps enter its ITL) of `records` and `texts`
    /// (`texts[i]` is `records[i]`'s, None where it is held whole). Fails where a text cannot be
    /// read back as it was read; where the file set aside cannot be written, the gaps are read back
    /// cell by cell instead.
    pub(super) fn gather(
        cells: &[&[usize]],
        records: &'a [T],
        texts: &'a [Option<Text>],
        gather: Gather,
    ) -> io::Result<Gaps<'a, T>> {
        Gaps::gather_into(cells, records, texts, gather, Spill::new)
    }

    /// `gather`, setting the gaps aside (where it does) in what `spill` makes for so many cells.
    fn gather_into(
        cells: &[&[usize]],
        records: &'a [T],
        texts: &'a [Option<Text>],
        gather: Gather,
        spill: impl FnOnce(usize) -> io::Result<Spill>,
    ) -> io::Result<Gaps<'a, T>> {
        let mut gaps = Gaps { records, texts, spilled: None };
        let located: Vec<Vec<&Text>> = cells.iter().map(|cell| gaps.located(cell)).collect();
        // Every located text, and the cell it is of.
        let (mut all, mut cell_of) = (Vec::new(), Vec::new());
        for (c, cell) in located.iter().enumerate() {
            all.extend_from_slice(cell);
            cell_of.extend(std::iter::repeat_n(c, cell.len()));
        }
        let one_pass = match gather {
            #[cfg(test)]
            Gather::CellByCell => false,
            Gather::Chosen => {
                let by_cell: usize = located.iter().map(|cell| text::reads(cell)).sum();
                by_cell >= SPILL_MIN_READS && by_cell > 2 * text::reads(&all)
            }
            #[cfg(test)]
            Gather::OnePass => !all.is_empty(),
        };
        if one_pass {
            gaps.spilled = set_aside(&all, &cell_of, spill(located.len()))?;
        }
        Ok(gaps)
    }

    /// Whether the located records' gaps were gathered in one pass.
    #[cfg(test)]
    pub(super) fn in_one_pass(&self) -> bool {
        self.spilled.is_some()
    }

    /// The texts of `cell`'s records read located.
    fn located(&self, cell: &[usize]) -> Vec<&'a Text> {
        let texts = self.texts;
        cell.iter().filter_map(|&i| texts.get(i).and_then(Option::as_ref)).collect()
    }

    /// The gaps of the `c`th cell given to `gather`, whose records are `cell`, pooled into `gaps`
    /// (emptied first), in no particular order.
    pub(super) fn pool(&self, c: usize, cell: &[usize], gaps: &mut Vec<f64>) -> io::Result<()> {
        gaps.clear();
        let mut located = Vec::new();
        for &i in cell {
            match self.texts.get(i) {
                Some(Some(text)) => located.push(text),
                _ => gaps.extend(gaps_of(self.records.get(i).map_or(&[][..], T::token_offsets_ms))),
            }
        }
        if let Some(spill) = &self.spilled {
            return spill.read(c, gaps).map_err(|e| {
                io::Error::other(format!("cannot read back the gaps set aside in the temp directory: {e}"))
            });
        }
        let mut offsets = Vec::new();
        text::read_each(&located, |_, line| {
            sources::token_offsets_read_back(line, &mut offsets)?;
            gaps.extend(gaps_of(&offsets));
            Ok(())
        })
    }
}

/// Every gap between consecutive offsets that may enter statistics.
fn gaps_of(offsets: &[f64]) -> impl Iterator<Item = f64> + '_ {
    offsets.windows(2).filter_map(|w| sample(Some(w[1] - w[0])))
}

/// The gaps of the texts `all`, read in file order, each set aside in `spill` under its cell
/// (`cell_of[i]` for `all[i]`). None where the spill could not be made or written (the disk's
/// fault, not the input's).
fn set_aside(all: &[&Text], cell_of: &[usize], spill: io::Result<Spill>) -> io::Result<Option<Spill>> {
    let Ok(mut spill) = spill else { return Ok(None) };
    let mut offsets = Vec::new();
    let mut unwritten = None;
    let read = text::read_each(all, |i, line| {
        sources::token_offsets_read_back(line, &mut offsets)?;
        spill.push(cell_of[i], gaps_of(&offsets)).map_err(|e| {
            unwritten = Some(e);
            io::Error::other("the gaps set aside could not be written")
        })
    });
    match (read, unwritten) {
        (_, Some(_)) => Ok(None),
        (Err(e), None) => Err(e),
        (Ok(()), None) => Ok(Some(spill)),
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::path::Path;

    use super::*;
    use crate::report::{PartialBatches, ReportRecord, samples};
    use ttft_results::results::combine;
    use ttft_results::results::sources::{Detail, load_with};

    /// Where the file set aside fills up as the gaps are written (a full disk: `/dev/full`), the
    /// gaps are read back cell by cell: every cell's are the ones a gathering cell by cell pools.
    #[test]
    fn gaps_that_cannot_be_set_aside_are_read_back_cell_by_cell() {
        let run = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/reference/reuse-ab-h100/off-reuse");
        let source = load_with::<ReportRecord>(&run, Detail::Located).unwrap();
        let combined = combine::combine(vec![source]).unwrap();
        let (records, texts) = (&combined.records, &combined.texts);
        let by_cell = samples(records, texts, &PartialBatches::of(records));
        let cells: Vec<&[usize]> = by_cell.values().map(|s| &s.itl_records[..]).collect();
        // Small pieces, so some go to disk (a few thousand gaps a cell here).
        let small = |spill: Spill| spill.with_pieces(64, 256);
        let full =
            |n| Ok(small(Spill::in_file(File::options().read(true).write(true).open("/dev/full")?, n)));
        let unwritten = Gaps::gather_into(&cells, records, texts, Gather::OnePass, full).unwrap();
        assert!(!unwritten.in_one_pass());
        let cell_by_cell = Gaps::gather(&cells, records, texts, Gather::CellByCell).unwrap();
        let (mut got, mut want) = (Vec::new(), Vec::new());
        let mut pooled = 0;
        for (c, cell) in cells.iter().enumerate() {
            unwritten.pool(c, cell, &mut got).unwrap();
            cell_by_cell.pool(c, cell, &mut want).unwrap();
            assert_eq!(got, want, "cell {c}");
            pooled += got.len();
        }
        assert!(pooled > 100, "{pooled} gaps");
        // Set aside in a file that takes them, the same gaps come back (in another order).
        let written =
            Gaps::gather_into(&cells, records, texts, Gather::OnePass, |n| Ok(small(Spill::new(n)?)))
                .unwrap();
        assert!(written.in_one_pass());
        for (c, cell) in cells.iter().enumerate() {
            written.pool(c, cell, &mut got).unwrap();
            cell_by_cell.pool(c, cell, &mut want).unwrap();
            got.sort_by(f64::total_cmp);
            want.sort_by(f64::total_cmp);
            assert_eq!(got, want, "cell {c}");
        }
    }
}

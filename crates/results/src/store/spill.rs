//! Numbers set aside on disk by bucket, gathered in one pass and read back a bucket at a time.
//!
//! Why: report pools each cell's inter-token gaps to sort them, one cell at a time, so only one
//! cell's gaps are in memory. It reads them back from the records' texts. A run's file holds its
//! records in sweep order, so a cell's records lie a sweep apart: read back cell by cell, each text
//! is a read of its own (a million reads for a million records, over a quarter of the report).
//! Read in file order, the texts are a few hundred large reads, but every cell's gaps come at once:
//! 464 MB at a million records, more than the rest of the report. Set aside here as they come, each
//! cell's gaps are read back with a few large reads when its statistics are computed.
//!
//! The file is unnamed in the system's temp directory: the system removes it when it is closed,
//! or when the process ends however it ends. Values come back as they went in, bit for bit.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};

/// Values held in memory across all buckets before they are written out (16 MB).
const HELD_VALUES: usize = 2 * 1024 * 1024;
/// Values one bucket holds before they are written out as one piece (512 KB).
const PIECE_VALUES: usize = 64 * 1024;
const VALUE_BYTES: usize = size_of::<f64>();

/// Buckets of numbers, most of them on disk.
pub struct Spill {
    file: File,
    /// The file's length: where the next piece goes.
    end: u64,
    buckets: Vec<Bucket>,
    /// Values held across all buckets, and the most they may be before all are written out.
    held: usize,
    most_held: usize,
    piece: usize,
}

#[derive(Default)]
struct Bucket {
    /// Values not written yet.
    held: Vec<f64>,
    /// Its pieces on disk, in the order they were written: offset, values.
    pieces: Vec<(u64, usize)>,
}

impl Spill {
    /// `buckets` empty buckets, in a new unnamed file of the temp directory.
    pub fn new(buckets: usize) -> io::Result<Spill> {
        Ok(Spill::in_file(tempfile::tempfile()?, buckets))
    }

    /// `buckets` empty buckets in `file`, which is empty and open to read and write (a test's
    /// file that cannot be written).
    pub fn in_file(file: File, buckets: usize) -> Spill {
        Spill::sized(file, buckets, PIECE_VALUES, HELD_VALUES)
    }

    /// This spill, writing a bucket out once it holds `piece` values, and every bucket once they
    /// hold `most_held` together (what a test sets to make a few values go to disk).
    pub fn with_pieces(self, piece: usize, most_held: usize) -> Spill {
        Spill { piece, most_held, ..self }
    }

    #[cfg(test)]
    fn with_sizes(buckets: usize, piece: usize, most_held: usize) -> io::Result<Spill> {
        Ok(Spill::new(buckets)?.with_pieces(piece, most_held))
    }

    fn sized(file: File, buckets: usize, piece: usize, most_held: usize) -> Spill {
        let buckets = std::iter::repeat_with(Bucket::default).take(buckets).collect();
        Spill { file, end: 0, buckets, held: 0, most_held, piece }
    }

    /// Adds `values` to `bucket`'s.
    pub fn push(&mut self, bucket: usize, values: impl IntoIterator<Item = f64>) -> io::Result<()> {
        let held = &mut self.buckets[bucket].held;
        let before = held.len();
        held.extend(values);
        self.held += held.len() - before;
        if held.len() >= self.piece {
            self.write_out(bucket)?;
        }
        if self.held > self.most_held {
            for b in 0..self.buckets.len() {
                self.write_out(b)?;
            }
        }
        Ok(())
    }

    /// Writes what `bucket` holds as its next piece.
    fn write_out(&mut self, bucket: usize) -> io::Result<()> {
        let share = self.most_held / self.buckets.len();
        let b = &mut self.buckets[bucket];
        if b.held.is_empty() {
            return Ok(());
        }
        // A read moves the cursor: each piece goes where the last one ended.
        let mut file = &self.file;
        file.seek(SeekFrom::Start(self.end))?;
        file.write_all(bytemuck::cast_slice(&b.held))?;
        b.pieces.push((self.end, b.held.len()));
        self.end += (b.held.len() * VALUE_BYTES) as u64;
        self.held -= b.held.len();
        b.held.clear();
        // A bucket keeps room for its share of what may be held, no more: buckets that each
        // filled a piece in turn would otherwise keep a piece's room each.
        b.held.shrink_to(share);
        Ok(())
    }

    /// Appends `bucket`'s values to `out`, in the order they were pushed.
    pub fn read(&self, bucket: usize, out: &mut Vec<f64>) -> io::Result<()> {
        let b = &self.buckets[bucket];
        for &(offset, len) in &b.pieces {
            let start = out.len();
            out.resize(start + len, 0.0);
            let mut file = &self.file;
            file.seek(SeekFrom::Start(offset))?;
            file.read_exact(bytemuck::cast_slice_mut(&mut out[start..]))?;
        }
        out.extend_from_slice(&b.held);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values pushed to buckets in turn, a few at a time, come back each bucket's own, in order, bit
    /// for bit: through pieces written when a bucket fills, through every bucket written when
    /// they hold too much together, and through what is still held.
    #[test]
    fn each_bucket_reads_back_its_own_values_in_the_order_they_were_pushed() {
        for (piece, most_held) in [(4, 1000), (1000, 10), (3, 7), (1_000_000, 1_000_000)] {
            let mut spill = Spill::with_sizes(5, piece, most_held).unwrap();
            let mut expected: Vec<Vec<f64>> = vec![Vec::new(); 5];
            let mut x = 0.1f64;
            for round in 0..40 {
                for (bucket, want) in expected.iter_mut().enumerate() {
                    // Bucket 3 is never pushed to; a bucket gets 0-3 values a time.
                    if bucket == 3 {
                        continue;
                    }
                    let values: Vec<f64> = (0..(round + bucket) % 4)
                        .map(|_| {
                            x = x * 1.37 + 0.011;
                            if x > 1e6 { -x / 3.0 } else { x }
                        })
                        .collect();
                    want.extend(&values);
                    spill.push(bucket, values).unwrap();
                }
            }
            assert!(expected.iter().map(Vec::len).sum::<usize>() > 100);
            for (bucket, want) in expected.iter().enumerate() {
                let mut got = vec![f64::NAN];
                spill.read(bucket, &mut got).unwrap();
                let got: Vec<u64> = got[1..].iter().map(|v| v.to_bits()).collect();
                let want: Vec<u64> = want.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "bucket {bucket}, pieces of {piece}, at most {most_held} held");
            }
            if piece < 1000 || most_held < 1000 {
                assert!(spill.end > 0, "some values went to disk");
            }
            assert!(spill.held <= most_held.max(piece), "held {} with pieces of {piece}", spill.held);
        }
    }

    /// Buckets that each fill a piece in turn (and write it out) keep room for their share of what
    /// may be held, not a piece each: memory stays bounded however many cells there are.
    #[test]
    fn buckets_filled_in_turn_keep_room_for_their_share_only() {
        let mut spill = Spill::with_sizes(8, 100, 400).unwrap();
        for bucket in 0..8 {
            spill.push(bucket, (0..100).map(f64::from)).unwrap();
        }
        let room: usize = spill.buckets.iter().map(|b| b.held.capacity()).sum();
        assert!(room <= 400 + 100, "room for {room} values");
        let mut got = Vec::new();
        spill.read(7, &mut got).unwrap();
        assert_eq!(got, (0..100).map(f64::from).collect::<Vec<_>>());
    }
}

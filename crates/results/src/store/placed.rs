//! A stretch of a document whose bytes arrive out of order, each at its known place.
//!
//! Why: a merge writes a run's records sorted by cell, but a run's file holds them in sweep order
//! (every cell of run 1, then every cell of run 2, ...). Copied in output order, each record's text
//! is a read of its own at a far place of the input (a million reads for a million records, a
//! third of the merge's time). Copied in input order, the input is read front to back in large
//! reads, and each record's bytes go to their place in the output: the output's places then
//! continue from a few points at once (one per cell), each point moving forward. A stretch keeps
//! a buffer for each such point and writes it out when full, whole blocks around the page cache
//! where the file takes it, like the rest of the document (`direct`).

use std::io::{self, Write};
use std::ops::Range;
use std::sync::mpsc;

/// A document being written: its bytes in order, and where the writer can, a stretch of them
/// placed out of order.
pub trait Document: Write {
    /// Writes the document's next `len` bytes through `fill`, which hands each of them over once,
    /// in any order, by its place from the stretch's start (`Placed::write_at`), the places
    /// continuing from at most `points` places at once. Ok(false): this writer takes bytes in
    /// order only, nothing was written, and the caller writes them in order.
    fn write_stretch(
        &mut self,
        len: u64,
        points: usize,
        fill: &mut dyn FnMut(&mut dyn Placed) -> io::Result<()>,
    ) -> io::Result<bool>;
}

/// A byte vector takes bytes in order only (what a test writes a document into).
impl Document for Vec<u8> {
    fn write_stretch(
        &mut self,
        _: u64,
        _: usize,
        _: &mut dyn FnMut(&mut dyn Placed) -> io::Result<()>,
    ) -> io::Result<bool> {
        Ok(false)
    }
}

/// Where the bytes of a stretch are handed over.
pub trait Placed {
    /// `bytes` at `at` bytes from the stretch's start.
    fn write_at(&mut self, at: u64, bytes: &[u8]) -> io::Result<()>;
}

/// Where a stretch's buffers go: the file's blocks (`ALIGN` bytes, aligned in memory and in the
/// file), and any bytes as usual.
pub(super) trait Blocks {
    /// `buf[range]`, whole blocks, at a block's place, around the page cache where the file takes
    /// it; gives back a buffer as long as `buf` to fill next (`buf` itself once written, or
    /// another while `buf` is still being written: `behind`).
    fn write_blocks(&mut self, buf: Vec<u8>, range: Range<usize>, at: u64) -> io::Result<Vec<u8>>;
    /// Any bytes at any place, through the page cache.
    fn write_cached(&mut self, bytes: &[u8], at: u64) -> io::Result<()>;
}

/// Full buffers waiting for the writing thread (`behind`) at most, beside the one it writes.
const WAITING_BUFFERS: usize = 2;

/// What the writing thread is handed.
enum Job {
    Blocks(Vec<u8>, Range<usize>, u64),
    Cached(Vec<u8>, u64),
}

/// Blocks handed to a thread that writes them to `out` while the stretch goes on filling
/// buffers (`behind`).
pub(super) struct Behind {
    jobs: mpsc::SyncSender<Job>,
    written: mpsc::Receiver<Vec<u8>>,
}

impl Blocks for Behind {
    fn write_blocks(&mut self, buf: Vec<u8>, range: Range<usize>, at: u64) -> io::Result<Vec<u8>> {
        let len = buf.len();
        self.jobs.send(Job::Blocks(buf, range, at)).map_err(|_| stopped())?;
        Ok(self.written.try_recv().unwrap_or_else(|_| vec![0u8; len]))
    }

    fn write_cached(&mut self, bytes: &[u8], at: u64) -> io::Result<()> {
        self.jobs.send(Job::Cached(bytes.to_vec(), at)).map_err(|_| stopped())
    }
}

fn stopped() -> io::Error {
    io::Error::other("the writing thread stopped")
}

/// `work` done with a sink (`Behind`) whose writes a thread of their own makes to `out`, in the
/// order they are handed over: a stretch reads, copies and fills its buffers while the disk takes
/// the full ones, where one thread waited on each direct write in turn. The writer's error, if
/// any, is the error; else `work`'s outcome.
pub(super) fn behind<B: Blocks + Send, T>(
    out: &mut B,
    work: impl FnOnce(&mut Behind) -> io::Result<T>,
) -> io::Result<T> {
    std::thread::scope(|scope| {
        let (jobs, queue) = mpsc::sync_channel::<Job>(WAITING_BUFFERS);
        let (give_back, written) = mpsc::channel();
        let writer = scope.spawn(move || -> io::Result<()> {
            for job in queue {
                match job {
                    Job::Blocks(buf, range, at) => {
                        let buf = out.write_blocks(buf, range, at)?;
                        // The stretch may be done with buffers: one not taken back is dropped.
                        let _ = give_back.send(buf);
                    }
                    Job::Cached(bytes, at) => out.write_cached(&bytes, at)?,
                }
            }
            Ok(())
        });
        let mut sink = Behind { jobs, written };
        let done = work(&mut sink);
        // Closing the queue lets the writer finish what it was handed.
        drop(sink);
        writer.join().map_err(|_| io::Error::other("the writing thread panicked"))??;
        done
    })
}

/// The block size that direct writes align to (in memory and in the file).
pub(super) const ALIGN: usize = 4096;

/// Where `ALIGN`-aligned memory begins in `buf` (allocated `ALIGN` bytes longer than it is used).
pub(super) fn aligned_start(buf: &[u8]) -> usize {
    buf.as_ptr().align_offset(ALIGN).min(ALIGN)
}

/// Memory for the points' buffers together, and the most one buffer takes.
const BUFFERS_BYTES: usize = 32 << 20;
const MOST_BUFFER_BYTES: usize = 4 << 20;
/// Points a stretch follows at most at once; a place that continues none of them when that many
/// are open closes the one written to longest ago.
const MOST_POINTS: usize = 256;

/// Bytes placed from one point on: `held` bytes from `at` (the file's place of its next byte to
/// write), the first of them `at % ALIGN` bytes into its block.
struct Point {
    /// `ALIGN`-aligned memory from `start`.
    buf: Vec<u8>,
    start: usize,
    at: u64,
    held: usize,
    /// When it was last written to (for closing the oldest point).
    used: u64,
}

impl Point {
    fn end(&self) -> u64 {
        self.at + self.held as u64
    }

    /// How far into its block file place `at` lies: where its byte sits in `buf` from `start`.
    fn skew(&self) -> usize {
        self.at as usize % ALIGN
    }
}

/// A stretch being written from `base` of the file, `len` bytes long.
pub(super) struct Stretch<'a, B: Blocks> {
    out: &'a mut B,
    base: u64,
    len: u64,
    points: Vec<Point>,
    buffer_bytes: usize,
    placed: u64,
    writes: u64,
    /// The point written last.
    last: usize,
}

impl<'a, B: Blocks> Stretch<'a, B> {
    /// A stretch of `len` bytes from `base` of the file behind `out`, followed from `points`
    /// places at once.
    pub(super) fn new(out: &'a mut B, base: u64, len: u64, points: usize) -> Stretch<'a, B> {
        let share = BUFFERS_BYTES / points.clamp(1, MOST_POINTS);
        let buffer_bytes = share.clamp(16 * ALIGN, MOST_BUFFER_BYTES) / ALIGN * ALIGN;
        Stretch { out, base, len, points: Vec::new(), buffer_bytes, placed: 0, writes: 0, last: 0 }
    }

    /// Every point written out; an error unless every byte of the stretch was handed over once.
    pub(super) fn finish(mut self) -> io::Result<()> {
        while !self.points.is_empty() {
            self.close(self.points.len() - 1)?;
        }
        if self.placed != self.len {
            return Err(io::Error::other(format!(
                "a stretch of {} bytes was handed {} (every byte once): the document is not whole",
                self.len, self.placed
            )));
        }
        Ok(())
    }

    /// The point whose next place is file place `at`, opened there if none is.
    fn point_at(&mut self, at: u64) -> io::Result<usize> {
        // A text continues where its separator ended: the point written last is looked at first.
        if self.points.get(self.last).is_some_and(|p| p.end() == at) {
            return Ok(self.last);
        }
        if let Some(i) = self.points.iter().rposition(|p| p.end() == at) {
            return Ok(i);
        }
        if self.points.len() == MOST_POINTS {
            let oldest = (0..self.points.len()).min_by_key(|&i| self.points[i].used).unwrap_or(0);
            self.close(oldest)?;
        }
        let buf = vec![0u8; self.buffer_bytes + ALIGN];
        let start = aligned_start(&buf);
        self.points.push(Point { buf, start, at, held: 0, used: 0 });
        Ok(self.points.len() - 1)
    }

    /// The whole blocks point `i` holds written, and its part of a first block partly another's
    /// (written cached); what is left of a last block stays held.
    fn write_out(&mut self, i: usize) -> io::Result<()> {
        let point = &mut self.points[i];
        let skew = point.skew();
        let first = point.start;
        let mut from = 0;
        if skew > 0 {
            // The block this point starts in is partly another's: its part is written cached.
            let own = (ALIGN - skew).min(point.held);
            self.out.write_cached(&point.buf[first + skew..first + skew + own], point.at)?;
            from = own;
        }
        let whole = (point.held - from) / ALIGN * ALIGN;
        let done = from + whole;
        // What is left (less than a block) starts a block: it goes to the front of the buffer
        // filled next, this one or the one the blocks' writer gives back.
        let rest = point.held - done;
        let mut kept = [0u8; ALIGN];
        kept[..rest].copy_from_slice(&point.buf[first + skew + done..first + skew + point.held]);
        if whole > 0 {
            let blocks = first + skew + from;
            let buf = std::mem::take(&mut point.buf);
            point.buf = self.out.write_blocks(buf, blocks..blocks + whole, point.at + from as u64)?;
            point.start = aligned_start(&point.buf);
        }
        point.buf[point.start..point.start + rest].copy_from_slice(&kept[..rest]);
        point.at += done as u64;
        point.held = rest;
        Ok(())
    }

    /// Everything point `i` holds written (its whole blocks as ever, the rest cached), and the
    /// point let go.
    fn close(&mut self, i: usize) -> io::Result<()> {
        self.write_out(i)?;
        let point = self.points.swap_remove(i);
        let from = point.start + point.skew();
        self.out.write_cached(&point.buf[from..from + point.held], point.at)
    }
}

impl<B: Blocks> Placed for Stretch<'_, B> {
    fn write_at(&mut self, at: u64, mut bytes: &[u8]) -> io::Result<()> {
        if super::interrupted() {
            return Err(io::Error::other("interrupted by a signal"));
        }
        if at.checked_add(bytes.len() as u64).is_none_or(|end| end > self.len) {
            return Err(io::Error::other(format!(
                "{} bytes at {at} of a stretch of {}: past its end",
                bytes.len(),
                self.len
            )));
        }
        self.placed += bytes.len() as u64;
        self.writes += 1;
        let i = self.point_at(self.base + at)?;
        self.points[i].used = self.writes;
        self.last = i;
        while !bytes.is_empty() {
            let point = &mut self.points[i];
            let to = point.start + point.skew() + point.held;
            let n = bytes.len().min(point.start + self.buffer_bytes - to);
            point.buf[to..to + n].copy_from_slice(&bytes[..n]);
            point.held += n;
            bytes = &bytes[n..];
            if point.skew() + point.held == self.buffer_bytes {
                self.write_out(i)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file in memory that records how each byte was written.
    #[derive(Default)]
    struct Recorded {
        bytes: Vec<u8>,
        /// Bytes written as whole blocks, and cached.
        in_blocks: usize,
        cached: usize,
        misaligned_blocks: usize,
    }

    impl Recorded {
        fn put(&mut self, bytes: &[u8], at: u64) {
            let at = at as usize;
            if self.bytes.len() < at + bytes.len() {
                self.bytes.resize(at + bytes.len(), 0);
            }
            self.bytes[at..at + bytes.len()].copy_from_slice(bytes);
        }
    }

    impl Blocks for Recorded {
        fn write_blocks(&mut self, buf: Vec<u8>, range: Range<usize>, at: u64) -> io::Result<Vec<u8>> {
            let blocks = &buf[range];
            let aligned = (at as usize).is_multiple_of(ALIGN)
                && blocks.len().is_multiple_of(ALIGN)
                && (blocks.as_ptr() as usize).is_multiple_of(ALIGN);
            self.misaligned_blocks += usize::from(!aligned);
            self.in_blocks += blocks.len();
            self.put(blocks, at);
            Ok(buf)
        }

        fn write_cached(&mut self, bytes: &[u8], at: u64) -> io::Result<()> {
            self.cached += bytes.len();
            self.put(bytes, at);
            Ok(())
        }
    }

    /// `count` texts of varied lengths (some longer than a buffer) laid end to end, each as
    /// (place, bytes).
    fn texts(count: usize) -> Vec<(u64, Vec<u8>)> {
        let mut at = 0;
        (0..count)
            .map(|i| {
                let len = if i % 97 == 5 { 300_000 } else { 1 + (i * 7919) % 5000 };
                let text: Vec<u8> = (0..len).map(|k| ((i * 31 + k) % 251) as u8).collect();
                let placed = (at, text);
                at += len as u64;
                placed
            })
            .collect()
    }

    /// Writes `texts` (laid out from file place `base`) in the order `order` gives, in two
    /// pieces each (its buffers written by a thread of their own where `behind_a_thread`), and
    /// the file it makes.
    fn written(
        base: u64,
        texts: &[(u64, Vec<u8>)],
        order: &[usize],
        points: usize,
        behind_a_thread: bool,
    ) -> Recorded {
        let len = texts.iter().map(|(_, t)| t.len() as u64).sum();
        let mut file = Recorded::default();
        file.put(&vec![7u8; base as usize], 0);
        fn fill<B: Blocks>(
            mut stretch: Stretch<'_, B>,
            texts: &[(u64, Vec<u8>)],
            order: &[usize],
        ) -> io::Result<()> {
            for &i in order {
                let (at, text) = &texts[i];
                let cut = text.len() / 3;
                stretch.write_at(*at, &text[..cut])?;
                stretch.write_at(*at + cut as u64, &text[cut..])?;
            }
            stretch.finish()
        }
        if behind_a_thread {
            behind(&mut file, |sink| fill(Stretch::new(sink, base, len, points), texts, order)).unwrap();
        } else {
            fill(Stretch::new(&mut file, base, len, points), texts, order).unwrap();
        }
        file
    }

    #[test]
    fn texts_placed_from_many_points_make_the_document_they_make_in_order() {
        let texts = texts(3000);
        let whole: Vec<u8> = texts.iter().flat_map(|(_, t)| t.clone()).collect();
        // Thirty cells of a hundred runs: the file holds run by run, the document cell by cell.
        // (Told of more points than there are, each buffer is its smallest and fills many times.)
        let (cells, runs) = (30, 100);
        let order: Vec<usize> = (0..runs).flat_map(|r| (0..cells).map(move |c| c * runs + r)).collect();
        for (base, behind_a_thread) in [(0, false), (1, true), (4095, false), (4096, true), (123_457, true)] {
            let file = written(base, &texts, &order, MOST_POINTS, behind_a_thread);
            assert_eq!(file.bytes.len(), base as usize + whole.len(), "base {base}");
            assert!(file.bytes[..base as usize].iter().all(|&b| b == 7), "base {base}: before the stretch");
            assert!(file.bytes[base as usize..] == whole[..], "base {base}: every byte at its place");
            assert_eq!(file.misaligned_blocks, 0, "base {base}");
            // Each point leaves at most two partial blocks cached.
            assert!(file.cached <= 2 * cells * ALIGN, "base {base}: {} bytes cached", file.cached);
        }
    }

    #[test]
    fn more_points_than_a_stretch_follows_still_make_the_document() {
        let texts = texts(2 * MOST_POINTS + 10);
        let whole: Vec<u8> = texts.iter().flat_map(|(_, t)| t.clone()).collect();
        // Every text its own point, from the last to the first.
        let order: Vec<usize> = (0..texts.len()).rev().collect();
        let file = written(10, &texts, &order, 1, true);
        assert!(file.bytes[10..] == whole[..]);
        assert_eq!(file.misaligned_blocks, 0);
    }

    /// Fails when a write the writing thread could not make is lost, or reported as anything but
    /// its own error.
    #[test]
    fn the_writing_threads_error_is_the_stretchs_error() {
        struct Full;
        impl Blocks for Full {
            fn write_blocks(&mut self, _: Vec<u8>, _: Range<usize>, _: u64) -> io::Result<Vec<u8>> {
                Err(io::Error::other("no space left on device"))
            }
            fn write_cached(&mut self, _: &[u8], _: u64) -> io::Result<()> {
                Err(io::Error::other("no space left on device"))
            }
        }
        let texts = texts(200);
        let len = texts.iter().map(|(_, t)| t.len() as u64).sum();
        let err = behind(&mut Full, |sink| {
            let mut stretch = Stretch::new(sink, 0, len, 1);
            for (at, text) in &texts {
                stretch.write_at(*at, text)?;
            }
            stretch.finish()
        })
        .unwrap_err();
        assert!(err.to_string().contains("no space left"), "{err}");
    }

    #[test]
    fn a_stretch_not_handed_every_byte_is_an_error_and_one_past_its_end_is_refused() {
        let mut file = Recorded::default();
        let mut stretch = Stretch::new(&mut file, 0, 10, 1);
        stretch.write_at(0, b"12345").unwrap();
        let past = stretch.write_at(6, b"12345").unwrap_err();
        assert!(past.to_string().contains("past its end"), "{past}");
        let short = stretch.finish().unwrap_err();
        assert!(short.to_string().contains("handed 5"), "{short}");
    }
}

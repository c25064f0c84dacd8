//! Reading a measurement line as bench writes it, by hand, in one pass: the tag first, then each
//! member a field of `Measurement` at most once, strings without `\u` escapes, every number
//! plainly within its field's type. Anything else (another record type, an unknown or repeated
//! key, a number that needs serde's judgement, nesting deeper than `MAX_DEPTH`, any syntax error)
//! is not read here (`None`) and the serde reading (`LeanRecord`, `TimedRecord`) reads the line,
//! naming its error where there is one.
//!
//! What this returns is exactly what the serde reading returns for the same line, field for field:
//! the same JSON is accepted, numbers convert as serde_json converts them (correctly rounded: the
//! workspace builds serde_json with `float_roundtrip`) and nested objects bench writes rarely
//! (turns, quality flags, errors, counters) go through their own serde readers. `fast_tests.rs`
//! holds the two readings together on every fixture line and on lines broken on purpose.
//!
//! Why it exists: serde's visitors spent about 5 us on each 2.9 KB line of a streamed record, most
//! of what a reading verb does with a million of them (docs/performance.md, "Reading result
//! files"); a lean reading does not convert the token offsets it drops, only checks them.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::value::{Error as ValueError, StrDeserializer};

use super::plain_array::{self, Walked};

use super::{
    CacheEvidence, ErrorInfo, Measurement, MetricsDelta, PhysicsRecord, QualityFlag, Record, SCHEMA_VERSION,
    SessionCache, ThermalRecord, TurnSummary,
};

/// What a reading keeps of the raw samples (see `Record::lean`, `Record::timed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// `Record::lean`: the token offsets and the output sample are checked, not kept.
    Lean,
    /// `Record::timed`: lean, the token offsets kept.
    Timed,
    /// Lean, only the floats of the members `Floats` names converted: every other float is checked
    /// as the lean reading checks it (the same lines accepted, the same errors) and read as 0.0.
    /// Only for a reading that keeps of each record what it reads of it, never the record:
    /// merge's digest (where it is and what decides its slot) converts none, report's samples the
    /// few its statistics read. Converting a record's twenty floats was a tenth of reading it.
    Converting(Floats),
}

/// Which of a measurement's floats a reading converts (`Keep::Converting`): those of the members
/// it names, nested ones included, a bit for each member's place in `FIELDS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Floats(u64);

impl Floats {
    pub const NONE: Floats = Floats(0);
    pub const ALL: Floats = Floats(u64::MAX);

    /// The floats of the members whose keys are `keys`. A key that is no measurement's member
    /// fails the build (the constant's evaluation panics).
    pub const fn of_members(keys: &[&str]) -> Floats {
        let mut bits = 0u64;
        let mut k = 0;
        while k < keys.len() {
            let mut place = 0;
            while place < FIELDS.len() && !const_same_bytes(FIELDS[place].0.as_bytes(), keys[k].as_bytes()) {
                place += 1;
            }
            assert!(place < FIELDS.len(), "not a measurement's member");
            bits |= 1 << place;
            k += 1;
        }
        Floats(bits)
    }

    /// Whether the member at `place` of `FIELDS` has its floats converted.
    fn converts(self, place: usize) -> bool {
        self.0 >> place & 1 == 1
    }
}

/// `a == b`, where a constant is evaluated.
const fn const_same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Nesting this deep is left to serde (whose own limit is 128 levels), so that no value read here
/// is one serde would refuse for its depth.
const MAX_DEPTH: u32 = 64;

/// `Record::lean` (or `timed`) of a measurement line, or None when the line is not in the shape
/// read here: the serde reading decides it then.
pub fn measurement(line: &[u8], keep: Keep) -> Option<Record> {
    let text = std::str::from_utf8(line).ok()?;
    let mut cursor = Cursor { text, bytes: line, at: 0, floats: true };
    let m = cursor.measurement(keep)?;
    cursor.skip_ws();
    if cursor.at != line.len() || m.schema_version != SCHEMA_VERSION {
        return None;
    }
    let record = Record::Measurement(Box::new(m));
    Some(match keep {
        Keep::Lean | Keep::Converting(_) => record.lean(),
        Keep::Timed => record.timed(),
    })
}

/// The token offsets of a measurement line read lean before, into `offsets` (replacing what it
/// held); None where this walk cannot tell them (the key written with an escape, a number it
/// would not convert): the caller reads the line `Keep::Timed` then. Only the top-level members before `token_offsets_ms` are walked (bench
/// writes them first; they are short scalars), so this is a small part of a full reading: a report
/// reads each cell's offsets back from its texts this way instead of holding every record's
/// (docs/design.md, "Reading at scale"). The line must be one that read as a measurement: a key
/// is then unique and every value well formed, and the numbers convert as `Keep::Timed` converts
/// them (the same `f64`).
pub fn token_offsets_ms(line: &[u8], offsets: &mut Vec<f64>) -> Option<()> {
    let text = std::str::from_utf8(line).ok()?;
    let mut c = Cursor { text, bytes: line, at: 0, floats: true };
    if let Some(at) = top_level_offsets_key(line) {
        c.at = at;
        offsets.clear();
        return c.array(|c| c.f64().map(|v| offsets.push(v)));
    }
    c.eat(b'{')?;
    loop {
        if c.key_is("token_offsets_ms") {
            c.eat(b':')?;
            offsets.clear();
            return c.array(|c| c.f64().map(|v| offsets.push(v)));
        }
        c.string()?;
        c.eat(b':')?;
        c.skip_value(1)?;
        match c.peek()? {
            b',' => c.at += 1,
            _ => return None,
        }
    }
}

/// Where the array of the top-level key `token_offsets_ms` begins in `line` (a line that read as a
/// measurement), found by a search for the key as bench writes it instead of a walk over the
/// members before it; None where the search cannot be sure (the walk decides then). The first
/// `"token_offsets_ms":[` is that key when no `{` or `[` comes before it but the line's first:
/// every member before it is then a scalar of the top-level object, and its quote, not escaped
/// (no backslash before it), cannot be inside a string (whose quotes are all escaped) nor close
/// one (a closing quote is followed by `,`, `:`, `}` or whitespace in a well-formed line), so it
/// opens a key. A key is unique in a line that read as a measurement.
fn top_level_offsets_key(line: &[u8]) -> Option<usize> {
    const KEY: &[u8] = b"\"token_offsets_ms\":";
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(KEY));
    let at = FINDER.find(line)?;
    let before = line.get(1..at)?;
    let plain = line.first() == Some(&b'{')
        && before.last() != Some(&b'\\')
        && memchr::memchr2(b'{', b'[', before).is_none();
    plain.then_some(at + KEY.len())
}

/// A JSON number's text and what its syntax says of it.
struct Number<'a> {
    text: &'a str,
    /// No fraction and no exponent.
    integer: bool,
    negative: bool,
    exponent: bool,
}

/// A nonzero high nibble in each byte of `x` that is not an ASCII digit, zero in each that is: a
/// digit is 0x30..=0x39, whose high nibble is 3 and still 3 with 6 added. (No byte carries into
/// the next: valid UTF-8 holds no byte above 0xF4.)
fn not_digit_nibbles(x: u64) -> u64 {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const THREES: u64 = 0x3030_3030_3030_3030;
    const SIXES: u64 = 0x0606_0606_0606_0606;
    ((x & HIGH) ^ THREES) | ((x.wrapping_add(SIXES) & HIGH) ^ THREES)
}

/// The end of the run of ASCII digits from `i`, eight bytes at a time (token offsets are mostly
/// digits).
fn skip_digits(bytes: &[u8], mut i: usize) -> usize {
    while let Some(chunk) = bytes.get(i..i + 8) {
        let not_digit = not_digit_nibbles(u64::from_le_bytes(chunk.try_into().unwrap_or_default()));
        if not_digit != 0 {
            return i + not_digit.trailing_zeros() as usize / 8;
        }
        i += 8;
    }
    while let Some(b'0'..=b'9') = bytes.get(i) {
        i += 1;
    }
    i
}

/// One bit for each of the eight bytes of `x` (bit k for byte k, the lowest first) that is not an
/// ASCII digit.
fn non_digits(x: u64) -> u64 {
    let nibbles = not_digit_nibbles(x);
    // Each byte's high nibble gathered into its top bit, then the eight top bits into the low byte
    // (each lands on its own bit: the products never overlap, so nothing carries).
    let top = (nibbles | nibbles << 1 | nibbles << 2 | nibbles << 3) & 0x8080_8080_8080_8080;
    (top >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56
}

/// Just past the `]` of the array of numbers whose `[` is at `open`, where it is in the form bench
/// writes (`checked_numbers`' tight loop): walked 64 bytes at a time where it is in the form
/// bench writes token offsets in (`plain_array`), and eight at a time from where that walk stops.
/// None for anything else, and for an array that ends within a word of the text's end: that loop
/// decides.
pub(super) fn plain_numbers_end(bytes: &[u8], open: usize) -> Option<usize> {
    match plain_array::walk(bytes, open) {
        Some(Walked::End(end)) => Some(end),
        Some(Walked::From(start)) => plain_numbers_end_from(bytes, start),
        None => plain_numbers_end_from(bytes, open + 1),
    }
}

/// `plain_numbers_end` of the array's numbers from the one beginning at `start` (just past the
/// `[` or a `,`), walked eight bytes at a time: its digits, most of its bytes, are passed over a
/// word at a time and only the bytes between them looked at.
pub(super) fn plain_numbers_end_from(bytes: &[u8], mut start: usize) -> Option<usize> {
    let digit = |at: usize| bytes.get(at).is_some_and(u8::is_ascii_digit);
    // A number begins with a digit (after a minus, if any) and no zero leads other digits.
    let begins_well = |at: usize| {
        let first = at + usize::from(bytes.get(at) == Some(&b'-'));
        digit(first) && !(bytes[first] == b'0' && digit(first + 1))
    };
    if !begins_well(start) {
        return None;
    }
    let mut point = false;
    let mut word = start;
    while let Some(chunk) = bytes.get(word..word + 8) {
        let mut others = non_digits(u64::from_le_bytes(chunk.try_into().unwrap_or_default()));
        while others != 0 {
            let at = word + others.trailing_zeros() as usize;
            others &= others - 1;
            // A number begins with a digit and a point is followed by one: a point follows a
            // digit, and so do a `,` and the `]`.
            match bytes[at] {
                b'-' if at == start => {}
                b'.' if !point && digit(at + 1) => point = true,
                b']' if at - start <= 300 => return Some(at + 1),
                b',' if at - start <= 300 => {
                    (start, point) = (at + 1, false);
                    if !begins_well(start) {
                        return None;
                    }
                }
                _ => return None,
            }
        }
        word += 8;
    }
    None
}

/// Where the plain run of a string's text from `i` ends: the first quote, backslash or control
/// character (below 0x20), sixteen bytes at a time, then eight (one pass over a string instead of
/// a search for the first two and a check of every byte for the third); None when the text ends
/// first.
pub(super) fn plain_run_end(bytes: &[u8], mut i: usize) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    while let Some(chunk) = bytes.get(i..i + 16) {
        let stops = string_stops(chunk.try_into().ok()?);
        if stops != 0 {
            return Some(i + stops.trailing_zeros() as usize);
        }
        i += 16;
    }
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
    // A byte below `n` (`n` at most 0x80) has its high bit set here. A borrow runs from a byte
    // only into the bytes above it, and only from one that is flagged: the lowest flagged byte is
    // always a byte that stops the run.
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH_BITS;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let x = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        let stops =
            below(x ^ (ONES * u64::from(b'"')), 1) | below(x ^ (ONES * u64::from(b'\\')), 1) | below(x, 0x20);
        if stops != 0 {
            return Some(i + stops.trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    let rest = bytes.get(i..)?;
    rest.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20).map(|at| i + at)
}

/// A bit for each byte of `chunk` that ends a string's plain run: a quote, a backslash or a
/// control character (SSE2, which every x86-64 processor has).
#[cfg(target_arch = "x86_64")]
fn string_stops(chunk: &[u8; 16]) -> u32 {
    // SAFETY: SSE2 is part of x86-64: every processor this build runs on has it.
    unsafe { string_stops_sse2(chunk) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn string_stops_sse2(chunk: &[u8; 16]) -> u32 {
    use std::arch::x86_64::{
        _mm_and_si128, _mm_cmpeq_epi8, _mm_cmpgt_epi8, _mm_cmplt_epi8, _mm_loadu_si128, _mm_movemask_epi8,
        _mm_or_si128, _mm_set1_epi8,
    };
    // SAFETY: `chunk` is 16 bytes; the load needs no alignment.
    let v = unsafe { _mm_loadu_si128(chunk.as_ptr().cast()) };
    let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
    let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
    // Signed compares: a control character is 0x00..=0x1F; every byte from 0x80 is negative.
    let control = _mm_and_si128(_mm_cmplt_epi8(v, _mm_set1_epi8(0x20)), _mm_cmpgt_epi8(v, _mm_set1_epi8(-1)));
    _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control)) as u32
}

/// Two short byte strings of one length compared eight bytes at a time, inline: a key is
/// compared with its expected name once per member, 60 times a record (a call to the C library's
/// `memcmp` each time was a twentieth of a reading verb).
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let (mut a8, mut b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let word = |c: &[u8]| u64::from_le_bytes(c.try_into().unwrap_or_default());
    a.len() == b.len()
        && a8.by_ref().zip(b8.by_ref()).all(|(x, y)| word(x) == word(y))
        && a8.remainder().iter().eq(b8.remainder())
}

/// The powers of ten up to 10^18, each of which an `f64` holds exactly.
const EXACT_POWERS_OF_TEN: [f64; 19] =
    [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18];

/// A JSON number without an exponent (`text`) whose digits make an integer an `f64` holds exactly
/// (at most 2^53): that integer divided by a power of ten, both exact, and one division is
/// correctly rounded, so this is the `f64` any correctly rounded reading gives (Clinger's fast
/// path). None for any other number, which the standard reading converts. Its own digit walk is
/// what saves time on a short decimal: the standard reading scans the text again.
fn exact_decimal(text: &str, negative: bool) -> Option<f64> {
    let digits = &text.as_bytes()[usize::from(negative)..];
    // More than 17 bytes are 17 digits or more (one byte at most is the point), an integer of at
    // least 10^16 > 2^53: not walked (every 17-digit text Rust writes), read the standard way.
    if digits.len() > 17 {
        return None;
    }
    let (mut mantissa, mut fraction_digits, mut point) = (0u64, 0, false);
    for &b in digits {
        if b == b'.' {
            point = true;
        } else {
            mantissa = mantissa * 10 + u64::from(b - b'0');
            fraction_digits += usize::from(point);
        }
    }
    if mantissa > 1 << 53 {
        return None;
    }
    let v = mantissa as f64 / EXACT_POWERS_OF_TEN[fraction_digits];
    Some(if negative { -v } else { v })
}

struct Cursor<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    /// Floats converted; where not (a member `Keep::Converting` leaves out), each checked and read
    /// as 0.0.
    floats: bool,
}

impl<'a> Cursor<'a> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn word(&mut self, word: &[u8]) -> Option<()> {
        self.bytes[self.at..].starts_with(word).then(|| self.at += word.len())
    }

    /// Consumes a `null` if one comes next: Some(true); Some(false) when another value comes.
    fn null(&mut self) -> Option<bool> {
        if self.peek()? != b'n' {
            return Some(false);
        }
        self.word(b"null")?;
        Some(true)
    }

    fn bool(&mut self) -> Option<bool> {
        match self.peek()? {
            b't' => self.word(b"true").map(|()| true),
            b'f' => self.word(b"false").map(|()| false),
            _ => None,
        }
    }

    /// Consumes the key `name` (quoted, as keys are written) if it comes next.
    fn key_is(&mut self, name: &str) -> bool {
        self.skip_ws();
        let at = self.at;
        let end = at + 1 + name.len();
        let found = self.bytes.get(at) == Some(&b'"')
            && self.bytes.get(at + 1..end).is_some_and(|key| same_bytes(key, name.as_bytes()))
            && self.bytes.get(end) == Some(&b'"');
        if found {
            self.at = end + 1;
        }
        found
    }

    /// A string, unescaped; None for a `\u` escape or a control character (serde decides those).
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let start = self.at;
        let mut owned: Option<String> = None;
        let mut run = start;
        loop {
            let end = plain_run_end(self.bytes, run)?;
            if self.bytes[end] < 0x20 {
                return None;
            }
            if self.bytes[end] == b'"' {
                self.at = end + 1;
                return Some(match owned {
                    None => Cow::Borrowed(&self.text[start..end]),
                    Some(mut s) => {
                        s.push_str(&self.text[run..end]);
                        Cow::Owned(s)
                    }
                });
            }
            let s = owned.get_or_insert_with(String::new);
            s.push_str(&self.text[run..end]);
            s.push(match self.bytes.get(end + 1)? {
                b'"' => '"',
                b'\\' => '\\',
                b'/' => '/',
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                b'n' => '\n',
                b'r' => '\r',
                b't' => '\t',
                _ => return None,
            });
            run = end + 2;
        }
    }

    fn owned_string(&mut self) -> Option<String> {
        self.string().map(Cow::into_owned)
    }

    /// A number as JSON's grammar writes it.
    fn number(&mut self) -> Option<Number<'a>> {
        self.skip_ws();
        let bytes = self.bytes;
        let start = self.at;
        let negative = bytes.get(start) == Some(&b'-');
        let mut i = start + usize::from(negative);
        match bytes.get(i)? {
            b'0' => i += 1,
            b'1'..=b'9' => i = skip_digits(bytes, i + 1),
            _ => return None,
        }
        let mut integer = true;
        if bytes.get(i) == Some(&b'.') {
            integer = false;
            let from = i + 1;
            i = skip_digits(bytes, from);
            if i == from {
                return None;
            }
        }
        let mut exponent = false;
        if let Some(b'e' | b'E') = bytes.get(i) {
            (integer, exponent) = (false, true);
            i += 1;
            if let Some(b'+' | b'-') = bytes.get(i) {
                i += 1;
            }
            let from = i;
            i = skip_digits(bytes, from);
            if i == from {
                return None;
            }
        }
        self.at = i;
        Some(Number { text: &self.text[start..i], integer, negative, exponent })
    }

    /// A number as serde_json gives it to an `f64`: an integer through u64 or i64, anything else
    /// correctly rounded (`-0` too is -0.0); out of range is None.
    fn f64(&mut self) -> Option<f64> {
        if !self.floats {
            return self.checked_number().map(|()| 0.0);
        }
        let n = self.number()?;
        if n.integer {
            // An integer that fits is converted from it; a longer one is read as a float.
            if n.negative {
                if let Ok(v) = n.text.parse::<i64>() {
                    return Some(if v == 0 { -0.0 } else { v as f64 });
                }
            } else if let Ok(v) = n.text.parse::<u64>() {
                return Some(v as f64);
            }
        }
        if !n.exponent
            && let Some(v) = exact_decimal(n.text, n.negative)
        {
            return Some(v);
        }
        let v: f64 = n.text.parse().ok()?;
        v.is_finite().then_some(v)
    }

    /// A number checked as `f64` reads it, not converted where its text shows it fits.
    fn checked_number(&mut self) -> Option<()> {
        let n = self.number()?;
        // Any number of up to 300 digits and no exponent is finite as an f64.
        if n.text.len() <= 300 && !n.exponent {
            return Some(());
        }
        let v: f64 = n.text.parse().ok()?;
        v.is_finite().then_some(())
    }

    /// An array of numbers checked as `[f64]` reads it (`checked_number` each), in one tight loop
    /// over the form bench writes them in: `-?(0|[1-9][0-9]*)(.[0-9]+)?` of at most 300 bytes,
    /// each followed at once by `,` or `]`. Anything else (whitespace, an exponent, a long number,
    /// a syntax error) is read from the array's start by the general loop, which decides it: what
    /// this loop accepts, that loop accepts too.
    fn checked_numbers(&mut self) -> Option<()> {
        self.skip_ws();
        let (bytes, open) = (self.bytes, self.at);
        if bytes.get(open) != Some(&b'[') {
            return None;
        }
        let mut i = open + 1;
        if bytes.get(i) == Some(&b']') {
            self.at = i + 1;
            return Some(());
        }
        if let Some(end) = plain_numbers_end(bytes, open) {
            self.at = end;
            return Some(());
        }
        loop {
            let start = i;
            i += usize::from(bytes.get(i) == Some(&b'-'));
            i = match bytes.get(i) {
                Some(b'0') => i + 1,
                Some(b'1'..=b'9') => skip_digits(bytes, i + 1),
                _ => break,
            };
            if bytes.get(i) == Some(&b'.') {
                let from = i + 1;
                i = skip_digits(bytes, from);
                if i == from {
                    break;
                }
            }
            if i - start > 300 {
                break;
            }
            match bytes.get(i) {
                Some(b',') => i += 1,
                Some(b']') => {
                    self.at = i + 1;
                    return Some(());
                }
                _ => break,
            }
        }
        self.at = open;
        self.array(Self::checked_number)
    }

    fn u64(&mut self) -> Option<u64> {
        let n = self.number()?;
        if !n.integer || n.negative {
            return None;
        }
        n.text.parse().ok()
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.u64()?).ok()
    }

    fn option<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.null()? { Some(None) } else { read(self).map(Some) }
    }

    /// A unit enum written as its name.
    fn name<T: for<'de> Deserialize<'de>>(&mut self) -> Option<T> {
        let name = self.string()?;
        T::deserialize(StrDeserializer::<ValueError>::new(&name)).ok()
    }

    /// Each element of an array, read by `element`.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            element(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Each member of an object, its key (without escapes) and the cursor at its value.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            let Cow::Borrowed(key) = self.string()? else { return None };
            self.eat(b':')?;
            member(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Any JSON value, checked as `serde_json::Value` reads it, kept nowhere.
    fn skip_value(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => self.object(|c, _| c.skip_value(depth + 1)),
            b'[' => self.array(|c| c.skip_value(depth + 1)),
            b't' | b'f' => self.bool().map(drop),
            b'n' => self.word(b"null"),
            _ => self.checked_number(),
        }
    }

    /// The text of the next value (checked as any JSON), for a serde reader of its type.
    fn value_text(&mut self) -> Option<&'a str> {
        self.skip_ws();
        let start = self.at;
        self.skip_value(1)?;
        Some(&self.text[start..self.at])
    }

    /// The next value read by its type's own serde reader.
    fn serde<T: for<'de> Deserialize<'de>>(&mut self) -> Option<T> {
        serde_json::from_str(self.value_text()?).ok()
    }

    /// A list, read by its elements' serde reader unless it is empty (as it mostly is).
    fn list<T: for<'de> Deserialize<'de>>(&mut self) -> Option<Vec<T>> {
        if self.peek()? == b'[' {
            let at = self.at;
            self.at += 1;
            if self.peek()? == b']' {
                self.at += 1;
                return Some(Vec::new());
            }
            self.at = at;
        }
        self.serde()
    }

    fn thermal(&mut self) -> Option<ThermalRecord> {
        const KEYS: [&str; 7] =
            ["policy", "baseline_tps", "probe_tps", "cooldown_s", "recovered", "before", "after"];
        let mut t = ThermalRecord::default();
        let mut seen = Seen::default();
        self.object(|c, key| {
            match seen.mark(&KEYS, key)? {
                "policy" => t.policy = c.name()?,
                "baseline_tps" => t.baseline_tps = c.option(Self::f64)?,
                "probe_tps" => c.array(|c| c.f64().map(|v| t.probe_tps.push(v)))?,
                "cooldown_s" => t.cooldown_s = c.f64()?,
                "recovered" => t.recovered = c.bool()?,
                // The snapshots, `before` and `after`: a lean reading drops them (`Record::lean`),
                // so they are only checked.
                _ => c.skip_value(2)?,
            }
            Some(())
        })?;
        seen.has_all(&KEYS, &["policy", "probe_tps", "cooldown_s", "recovered"]).then_some(t)
    }

    fn physics(&mut self) -> Option<PhysicsRecord> {
        const KEYS: [&str; 4] =
            ["decode_ceiling_tps", "decode_fraction", "prefill_ceiling_tps", "prefill_fraction"];
        let mut p = PhysicsRecord::default();
        let mut seen = Seen::default();
        self.object(|c, key| {
            let field = match seen.mark(&KEYS, key)? {
                "decode_ceiling_tps" => &mut p.decode_ceiling_tps,
                "decode_fraction" => &mut p.decode_fraction,
                "prefill_ceiling_tps" => &mut p.prefill_ceiling_tps,
                _ => &mut p.prefill_fraction,
            };
            *field = c.option(Self::f64)?;
            Some(())
        })?;
        Some(p)
    }

    fn cache_evidence(&mut self) -> Option<CacheEvidence> {
        const KEYS: [&str; 5] =
            ["source", "cached_tokens", "prompt_evaluated_tokens", "session_before", "session_after"];
        let mut e = CacheEvidence::default();
        let mut seen = Seen::default();
        self.object(|c, key| {
            match seen.mark(&KEYS, key)? {
                "source" => e.source = c.owned_string()?,
                "cached_tokens" => e.cached_tokens = c.option(Self::u64)?,
                "prompt_evaluated_tokens" => e.prompt_evaluated_tokens = c.option(Self::u64)?,
                "session_before" => e.session_before = c.serde::<Option<Box<SessionCache>>>()?,
                _ => e.session_after = c.serde::<Option<Box<SessionCache>>>()?,
            }
            Some(())
        })?;
        seen.has_all(&KEYS, &["source"]).then_some(e)
    }

    fn measurement(&mut self, keep: Keep) -> Option<Measurement> {
        self.eat(b'{')?;
        if self.string()? != "record_type" {
            return None;
        }
        self.eat(b':')?;
        if self.string()? != "measurement" {
            return None;
        }
        let mut m = Measurement { attempts: 1, ..Measurement::default() };
        let mut seen = Seen::default();
        // Where the next key is looked for first: bench writes them in `FIELDS`' order.
        let mut next = 0;
        loop {
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    break;
                }
                _ => return None,
            }
            let place = match FIELDS.get(next) {
                Some((name, _)) if self.key_is(name) => next,
                // A field left out (an optional one bench writes only when set): the key is one
                // of the later fields, most likely, or of the earlier.
                _ => {
                    let Cow::Borrowed(key) = self.string()? else { return None };
                    let later = FIELDS.iter().skip(next).position(|(name, _)| *name == key);
                    match later {
                        Some(i) => next + i,
                        None => FIELDS.iter().position(|(name, _)| *name == key)?,
                    }
                }
            };
            next = place + 1;
            seen.field(place)?;
            self.eat(b':')?;
            if let Keep::Converting(floats) = keep {
                self.floats = floats.converts(place);
            }
            self.member(&mut m, FIELDS[place].1, keep)?;
        }
        REQUIRED.iter().all(|&field| seen.has(field as usize)).then_some(m)
    }

    /// One member of a measurement: its field set from the value (or the value checked, where a
    /// lean reading drops the field).
    fn member(&mut self, m: &mut Measurement, field: Field, keep: Keep) -> Option<()> {
        let c = self;
        match field {
            Field::SchemaVersion => m.schema_version = c.u32()?,
            Field::RunId => m.run_id = c.owned_string()?,
            Field::Model => m.cell.model = c.owned_string()?,
            Field::Scenario => m.cell.scenario = c.name()?,
            Field::CacheState => m.cell.cache_state = c.name()?,
            Field::Mode => m.cell.mode = c.name()?,
            Field::ContextTokens => m.cell.context_tokens = c.u32()?,
            Field::DatasetRow => m.cell.dataset_row = c.option(Self::u32)?,
            Field::BatchSize => m.cell.batch_size = c.u32()?,
            Field::Run => m.cell.run = c.u32()?,
            Field::RequestIndex => m.request_index = c.u32()?,
            Field::GroupId => m.group_id = c.option(Self::owned_string)?,
            Field::LifecycleId => m.lifecycle_id = c.option(Self::owned_string)?,
            Field::StartedAt => m.started_at = c.owned_string()?,
            Field::Nonce => m.nonce = c.owned_string()?,
            Field::SendLagMs => m.send_lag_ms = c.option(Self::f64)?,
            Field::OfferedRatePerS => m.offered_rate_per_s = c.option(Self::f64)?,
            Field::ScheduledSendMs => m.scheduled_send_ms = c.option(Self::f64)?,
            Field::ActualSendMs => m.actual_send_ms = c.option(Self::f64)?,
            Field::PrepareLateMs => m.prepare_late_ms = c.option(Self::f64)?,
            Field::Concurrency => m.concurrency = c.option(Self::u32)?,
            Field::UserId => m.user_id = c.option(Self::u32)?,
            Field::Warmup => m.warmup = c.bool()?,
            Field::FirstByteMs => m.first_byte_ms = c.option(Self::f64)?,
            Field::FirstEventMs => m.first_event_ms = c.option(Self::f64)?,
            Field::TtftMs => m.ttft_ms = c.option(Self::f64)?,
            Field::E2eMs => m.e2e_ms = c.option(Self::f64)?,
            Field::TokenOffsetsMs => match keep {
                Keep::Lean | Keep::Converting(_) => c.checked_numbers()?,
                Keep::Timed => c.array(|c| c.f64().map(|v| m.token_offsets_ms.push(v)))?,
            },
            Field::InputTokens => m.input_tokens = c.option(Self::u64)?,
            Field::OutputTokens => m.output_tokens = c.option(Self::u64)?,
            Field::CachedTokens => m.cached_tokens = c.option(Self::u64)?,
            Field::ExpectedInputTokens => m.expected_input_tokens = c.option(Self::u64)?,
            Field::DeltaCount => m.delta_count = c.u64()?,
            Field::DistinctArrivals => m.distinct_arrivals = c.option(Self::u64)?,
            Field::DecodeTps => m.decode_tps = c.option(Self::f64)?,
            Field::PrefillTps => m.prefill_tps = c.option(Self::f64)?,
            Field::MaxTokens => m.max_tokens = c.u32()?,
            Field::FinishReason => m.finish_reason = c.option(Self::owned_string)?,
            Field::OutputSample => {
                c.string()?;
            }
            Field::ReloadMs => m.reload_ms = c.option(Self::f64)?,
            Field::PageCache => m.page_cache = c.option(Self::name)?,
            Field::PageCacheResidentPct => m.page_cache_resident_pct = c.option(Self::f64)?,
            Field::SavedBytes => m.saved_bytes = c.option(Self::u64)?,
            Field::Turns => m.turns = c.list::<TurnSummary>()?,
            Field::ThinkMs => m.think_ms = c.option(Self::f64)?,
            Field::CacheEvidence => m.cache_evidence = c.option(Self::cache_evidence)?,
            Field::CacheStateConfirmed => m.cache_state_confirmed = c.option(Self::bool)?,
            Field::ServerTimings | Field::ServerStats => c.skip_value(1)?,
            Field::ServerMetrics => {
                c.serde::<Option<MetricsDelta>>()?;
            }
            Field::QualityOk => m.quality_ok = c.bool()?,
            Field::QualityFlags => m.quality_flags = c.list::<QualityFlag>()?,
            Field::Thermal => m.thermal = c.option(Self::thermal)?,
            Field::Physics => m.physics = c.option(Self::physics)?,
            Field::Error => m.error = c.option(Self::serde::<ErrorInfo>)?,
            Field::Attempts => m.attempts = c.u32()?,
            Field::UnexpectedBytesDropped => m.unexpected_bytes_dropped = c.bool()?,
            Field::Connection => m.connection = c.option(Self::name)?,
        }
        Some(())
    }
}

/// A measurement's fields (the tag aside), in the order bench writes them: a field's place is its
/// bit in `Seen`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    SchemaVersion,
    RunId,
    Model,
    Scenario,
    CacheState,
    Mode,
    ContextTokens,
    DatasetRow,
    BatchSize,
    Run,
    RequestIndex,
    GroupId,
    LifecycleId,
    StartedAt,
    Nonce,
    SendLagMs,
    OfferedRatePerS,
    ScheduledSendMs,
    ActualSendMs,
    PrepareLateMs,
    Concurrency,
    UserId,
    Warmup,
    FirstByteMs,
    FirstEventMs,
    TtftMs,
    E2eMs,
    TokenOffsetsMs,
    InputTokens,
    OutputTokens,
    CachedTokens,
    ExpectedInputTokens,
    DeltaCount,
    DistinctArrivals,
    DecodeTps,
    PrefillTps,
    MaxTokens,
    FinishReason,
    OutputSample,
    ReloadMs,
    PageCache,
    PageCacheResidentPct,
    SavedBytes,
    Turns,
    ThinkMs,
    CacheEvidence,
    CacheStateConfirmed,
    ServerTimings,
    ServerStats,
    ServerMetrics,
    QualityOk,
    QualityFlags,
    Thermal,
    Physics,
    Error,
    Attempts,
    UnexpectedBytesDropped,
    Connection,
}

/// Each field's key.
const FIELDS: [(&str, Field); 58] = [
    ("schema_version", Field::SchemaVersion),
    ("run_id", Field::RunId),
    ("model", Field::Model),
    ("scenario", Field::Scenario),
    ("cache_state", Field::CacheState),
    ("mode", Field::Mode),
    ("context_tokens", Field::ContextTokens),
    ("dataset_row", Field::DatasetRow),
    ("batch_size", Field::BatchSize),
    ("run", Field::Run),
    ("request_index", Field::RequestIndex),
    ("group_id", Field::GroupId),
    ("lifecycle_id", Field::LifecycleId),
    ("started_at", Field::StartedAt),
    ("nonce", Field::Nonce),
    ("send_lag_ms", Field::SendLagMs),
    ("offered_rate_per_s", Field::OfferedRatePerS),
    ("scheduled_send_ms", Field::ScheduledSendMs),
    ("actual_send_ms", Field::ActualSendMs),
    ("prepare_late_ms", Field::PrepareLateMs),
    ("concurrency", Field::Concurrency),
    ("user_id", Field::UserId),
    ("warmup", Field::Warmup),
    ("first_byte_ms", Field::FirstByteMs),
    ("first_event_ms", Field::FirstEventMs),
    ("ttft_ms", Field::TtftMs),
    ("e2e_ms", Field::E2eMs),
    ("token_offsets_ms", Field::TokenOffsetsMs),
    ("input_tokens", Field::InputTokens),
    ("output_tokens", Field::OutputTokens),
    ("cached_tokens", Field::CachedTokens),
    ("expected_input_tokens", Field::ExpectedInputTokens),
    ("delta_count", Field::DeltaCount),
    ("distinct_arrivals", Field::DistinctArrivals),
    ("decode_tps", Field::DecodeTps),
    ("prefill_tps", Field::PrefillTps),
    ("max_tokens", Field::MaxTokens),
    ("finish_reason", Field::FinishReason),
    ("output_sample", Field::OutputSample),
    ("reload_ms", Field::ReloadMs),
    ("page_cache", Field::PageCache),
    ("page_cache_resident_pct", Field::PageCacheResidentPct),
    ("saved_bytes", Field::SavedBytes),
    ("turns", Field::Turns),
    ("think_ms", Field::ThinkMs),
    ("cache_evidence", Field::CacheEvidence),
    ("cache_state_confirmed", Field::CacheStateConfirmed),
    ("server_timings", Field::ServerTimings),
    ("server_stats", Field::ServerStats),
    ("server_metrics", Field::ServerMetrics),
    ("quality_ok", Field::QualityOk),
    ("quality_flags", Field::QualityFlags),
    ("thermal", Field::Thermal),
    ("physics", Field::Physics),
    ("error", Field::Error),
    ("attempts", Field::Attempts),
    ("unexpected_bytes_dropped", Field::UnexpectedBytesDropped),
    ("connection", Field::Connection),
];

/// The fields serde requires (neither optional nor defaulted).
const REQUIRED: [Field; 19] = [
    Field::SchemaVersion,
    Field::RunId,
    Field::Model,
    Field::Scenario,
    Field::CacheState,
    Field::Mode,
    Field::ContextTokens,
    Field::BatchSize,
    Field::Run,
    Field::RequestIndex,
    Field::StartedAt,
    Field::Nonce,
    Field::TokenOffsetsMs,
    Field::DeltaCount,
    Field::MaxTokens,
    Field::OutputSample,
    Field::Turns,
    Field::QualityOk,
    Field::QualityFlags,
];

/// The fields of an object read so far, one bit each (a field's place in its object's list of
/// keys): a repeated key is left to serde.
#[derive(Default)]
struct Seen(u64);

impl Seen {
    fn field(&mut self, bit: usize) -> Option<()> {
        let mask = 1u64 << bit;
        (self.0 & mask == 0).then(|| self.0 |= mask)
    }

    fn has(&self, bit: usize) -> bool {
        self.0 & (1u64 << bit) != 0
    }

    /// `key` as one of `keys`, marked read; None for a key not among them or read already.
    fn mark<'k>(&mut self, keys: &[&'k str], key: &str) -> Option<&'k str> {
        let place = keys.iter().position(|k| *k == key)?;
        self.field(place)?;
        Some(keys[place])
    }

    /// Whether every one of `required` (of `keys`) was read.
    fn has_all(&self, keys: &[&str], required: &[&str]) -> bool {
        required.iter().all(|r| keys.iter().position(|k| k == r).is_some_and(|place| self.has(place)))
    }
}

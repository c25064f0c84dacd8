//! A streaming reader of one top-level JSON object: its keys, and each value (or each element of an
//! array value) as raw bytes with the line it starts on, for serde to parse.
//!
//! Canonical files hold 100,000s of records (hundreds of MB). Parsing the whole document at once
//! holds the text and a tree of it in memory together; this reads one value at a time from a
//! buffered reader, counting lines as the bytes go by (one pass: linear in the file). It does not
//! validate JSON itself: it only finds where each value ends (brackets outside strings), and serde
//! validates every value it is given, so any malformed byte still gets a `file:line` error.

use std::io::BufRead;

use crate::store::InputError;

pub struct ObjectScanner<R> {
    reader: R,
    file: String,
    /// 1-based line of the next byte.
    line: usize,
    /// Bytes consumed so far: the offset of the next byte in the input.
    offset: u64,
    /// Inside an array being read element by element: whether an element was read yet.
    array_started: Option<bool>,
    /// A member was read already (so the next one follows a comma).
    after_member: bool,
}

const TRUNCATED: &str = "not valid JSON (truncated?): the file ends inside a value";

impl<R: BufRead> ObjectScanner<R> {
    pub fn new(reader: R, file: &str) -> ObjectScanner<R> {
        ObjectScanner {
            reader,
            file: file.to_string(),
            line: 1,
            offset: 0,
            array_started: None,
            after_member: false,
        }
    }

    fn error(&self, line: usize, message: impl Into<String>) -> InputError {
        InputError::new(&self.file, line, message)
    }

    /// The offset in the input of the next byte (of the byte after an element just read).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn consume(&mut self, n: usize) {
        self.reader.consume(n);
        self.offset += n as u64;
    }

    fn peek(&mut self) -> Result<Option<u8>, InputError> {
        let line = self.line;
        match self.reader.fill_buf() {
            Ok(buf) => Ok(buf.first().copied()),
            Err(e) => Err(self.error(line, format!("cannot read: {e}"))),
        }
    }

    fn bump(&mut self) {
        if let Ok(buf) = self.reader.fill_buf()
            && let Some(&b) = buf.first()
        {
            if b == b'\n' {
                self.line += 1;
            }
            self.consume(1);
        }
    }

    /// The next byte after any whitespace (not consumed); None at the end of the input.
    fn skip_ws(&mut self) -> Result<Option<u8>, InputError> {
        loop {
            let line = self.line;
            let buf = self
                .reader
                .fill_buf()
                .map_err(|e| InputError::new(&self.file, line, format!("cannot read: {e}")))?;
            if buf.is_empty() {
                return Ok(None);
            }
            let n = buf.iter().take_while(|b| b.is_ascii_whitespace()).count();
            let newlines = buf[..n].iter().filter(|&&b| b == b'\n').count();
            let next = buf.get(n).copied();
            self.consume(n);
            self.line += newlines;
            if next.is_some() {
                return Ok(next);
            }
        }
    }

    fn expect(&mut self, want: u8, what: &str) -> Result<(), InputError> {
        match self.skip_ws()? {
            Some(b) if b == want => {
                self.bump();
                Ok(())
            }
            Some(b) => {
                Err(self.error(self.line, format!("not valid JSON: expected {what}, found `{}`", b as char)))
            }
            None => Err(self.error(self.line, TRUNCATED)),
        }
    }

    /// Reads up to the object's opening brace. False when the input is not a JSON object (its
    /// first byte is something else); an input of only whitespace is an error.
    pub fn begin(&mut self) -> Result<bool, InputError> {
        match self.skip_ws()? {
            Some(b'{') => {
                self.bump();
                Ok(true)
            }
            Some(_) => Ok(false),
            None => Err(self.error(0, "empty file")),
        }
    }

    /// The next member's key (its value is to be read next), or None after the closing brace.
    pub fn next_key(&mut self) -> Result<Option<String>, InputError> {
        match self.skip_ws()? {
            Some(b'}') => {
                self.bump();
                return Ok(None);
            }
            Some(b',') if self.after_member => self.bump(),
            Some(_) if !self.after_member => {}
            Some(b) => {
                let found = b as char;
                return Err(
                    self.error(self.line, format!("not valid JSON: expected `,` or `}}`, found `{found}`"))
                );
            }
            None => return Err(self.error(self.line, TRUNCATED)),
        }
        let mut raw = Vec::new();
        let line = self.value(&mut raw)?;
        let key: String = serde_json::from_slice(&raw).map_err(|e| {
            self.error(line, format!("not valid JSON: an object key: {}", crate::store::json_message(&e)))
        })?;
        self.expect(b':', "`:` after a key")?;
        self.after_member = true;
        Ok(Some(key))
    }

    /// Only whitespace may follow the object.
    pub fn end(&mut self) -> Result<(), InputError> {
        match self.skip_ws()? {
            None => Ok(()),
            Some(_) => Err(self.error(self.line, "not valid JSON: data after the end of the document")),
        }
    }

    /// Starts reading an array value element by element; false (nothing consumed) when the value
    /// is not an array.
    pub fn array_begin(&mut self) -> Result<bool, InputError> {
        if self.skip_ws()? != Some(b'[') {
            return Ok(false);
        }
        self.bump();
        self.array_started = Some(false);
        Ok(true)
    }

    /// The next element of the array begun by `array_begin`: its first line, or None after the
    /// closing bracket. An object that ends on its own line is offered to `quick` first, straight
    /// from the read buffer: a canonical file holds one record per line, and copying every byte
    /// past the bracket matcher cost as much as parsing it. `quick` gets the line's text up to its
    /// last `}`; when it accepts that as one whole value (a parser that takes nothing less), that
    /// text is the element, and its answer comes back with the element's line. Otherwise the
    /// element's text is copied into `out` (cleared first), and `quick`'s answer is None.
    pub fn next_element<T>(
        &mut self,
        out: &mut Vec<u8>,
        quick: &mut dyn FnMut(&[u8]) -> Option<T>,
    ) -> Result<Option<(usize, Option<T>)>, InputError> {
        if !self.element_start()? {
            return Ok(None);
        }
        self.skip_ws()?;
        let line = self.line;
        let answer = match self.reader.fill_buf() {
            Ok(buf) if buf.first() == Some(&b'{') => memchr::memchr(b'\n', buf)
                .and_then(|eol| buf[..eol].iter().rposition(|&b| b == b'}'))
                .and_then(|last| quick(&buf[..=last]).map(|t| (last + 1, t))),
            _ => None,
        };
        if let Some((len, t)) = answer {
            // The accepted text holds no newline: the line count stands.
            self.consume(len);
            return Ok(Some((line, Some(t))));
        }
        self.value(out).map(|line| Some((line, None)))
    }

    /// Past the separator before the next element; false after the closing bracket (or outside an
    /// array).
    fn element_start(&mut self) -> Result<bool, InputError> {
        let Some(started) = self.array_started else { return Ok(false) };
        match self.skip_ws()? {
            Some(b']') => {
                self.bump();
                self.array_started = None;
                return Ok(false);
            }
            Some(b',') if started => self.bump(),
            Some(_) if !started => {}
            Some(b) => {
                let found = b as char;
                return Err(
                    self.error(self.line, format!("not valid JSON: expected `,` or `]`, found `{found}`"))
                );
            }
            None => return Err(self.error(self.line, TRUNCATED)),
        }
        self.array_started = Some(true);
        Ok(true)
    }

    /// Copies the next value's bytes into `out` (cleared first); returns the line it starts on.
    pub fn value(&mut self, out: &mut Vec<u8>) -> Result<usize, InputError> {
        out.clear();
        let first = self.skip_ws()?.ok_or_else(|| self.error(self.line, TRUNCATED))?;
        let start = self.line;
        match first {
            b'{' | b'[' | b'"' => self.compound(out)?,
            _ => self.scalar(out)?,
        }
        Ok(start)
    }

    /// An object, array or string: up to its matching end, brackets inside strings ignored.
    fn compound(&mut self, out: &mut Vec<u8>) -> Result<(), InputError> {
        let mut depth = 0usize;
        let mut in_string = false;
        let mut escaped = false;
        loop {
            let line = self.line;
            let buf = self
                .reader
                .fill_buf()
                .map_err(|e| InputError::new(&self.file, line, format!("cannot read: {e}")))?;
            if buf.is_empty() {
                return Err(self.error(self.line, TRUNCATED));
            }
            let mut done = false;
            let mut i = 0;
            while i < buf.len() {
                let b = buf[i];
                i += 1;
                if in_string {
                    if escaped {
                        escaped = false;
                    } else if b == b'\\' {
                        escaped = true;
                    } else if b == b'"' {
                        in_string = false;
                        if depth == 0 {
                            done = true;
                            break;
                        }
                    }
                    continue;
                }
                match b {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            done = true;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            out.extend_from_slice(&buf[..i]);
            self.line += buf[..i].iter().filter(|&&b| b == b'\n').count();
            self.consume(i);
            if done {
                return Ok(());
            }
        }
    }

    /// A number, `true`, `false` or `null` (or garbage, which serde will name): up to the next
    /// delimiter.
    fn scalar(&mut self, out: &mut Vec<u8>) -> Result<(), InputError> {
        loop {
            let Some(b) = self.peek()? else { return Ok(()) };
            if b.is_ascii_whitespace() || matches!(b, b',' | b'}' | b']' | b'{' | b'[' | b'"' | b':') {
                if out.is_empty() {
                    let found = b as char;
                    return Err(
                        self.error(self.line, format!("not valid JSON: expected a value, found `{found}`"))
                    );
                }
                return Ok(());
            }
            out.push(b);
            self.bump();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The next element's text, never taken quickly.
    fn next<R: BufRead>(sc: &mut ObjectScanner<R>, buf: &mut Vec<u8>) -> Result<Option<usize>, InputError> {
        Ok(sc.next_element(buf, &mut |_| None::<()>)?.map(|(line, _)| line))
    }

    fn members(text: &str) -> Result<Vec<(String, usize, String)>, InputError> {
        let mut sc = ObjectScanner::new(text.as_bytes(), "t.json");
        assert!(sc.begin()?);
        let mut out = Vec::new();
        while let Some(key) = sc.next_key()? {
            if sc.array_begin()? {
                let mut buf = Vec::new();
                while let Some(line) = next(&mut sc, &mut buf)? {
                    out.push((key.clone(), line, String::from_utf8_lossy(&buf).to_string()));
                }
            } else {
                let mut buf = Vec::new();
                let line = sc.value(&mut buf)?;
                out.push((key, line, String::from_utf8_lossy(&buf).to_string()));
            }
        }
        sc.end()?;
        Ok(out)
    }

    #[test]
    fn values_and_array_elements_come_with_their_lines() {
        let text = "{\n \"kind\": \"x\",\n \"n\": -1.5e3,\n \"records\": [\n  {\"a\": \"}]\\\"\"},\n  [1,\n 2]\n ],\n \"e\": []\n}\n";
        let got = members(text).unwrap();
        assert_eq!(
            got,
            vec![
                ("kind".into(), 2, "\"x\"".into()),
                ("n".into(), 3, "-1.5e3".into()),
                ("records".into(), 5, "{\"a\": \"}]\\\"\"}".into()),
                ("records".into(), 6, "[1,\n 2]".into()),
            ]
        );
    }

    #[test]
    fn structural_errors_name_their_line() {
        let e = members("{\n\"a\": 1\n\"b\": 2}").unwrap_err();
        assert_eq!((e.line, e.message.contains("expected `,` or `}`")), (3, true), "{e}");
        let e = members("{\n\"a\": [1,\n").unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.starts_with("not valid JSON (truncated?)"), "{e}");
        let e = members("{\"a\": 1} x").unwrap_err();
        assert!(e.message.contains("data after the end"), "{e}");
        let e = members("{\"a\" 1}").unwrap_err();
        assert!(e.message.contains("expected `:`"), "{e}");
    }

    #[test]
    fn whole_objects_on_their_own_lines_are_taken_quickly_and_the_rest_the_long_way() {
        let text =
            "{\"r\": [\n {\"a\": 1},\n {\"b\": \"}\"}, {\"c\": 3},\n {\"d\":\n 4},\n [5],\n {\"e\": 6}\n]}";
        let mut sc = ObjectScanner::new(text.as_bytes(), "t");
        assert!(sc.begin().unwrap());
        assert_eq!(sc.next_key().unwrap().as_deref(), Some("r"));
        assert!(sc.array_begin().unwrap());
        let mut quick = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).ok();
        let mut got = Vec::new();
        let mut buf = Vec::new();
        while let Some((line, value)) = sc.next_element(&mut buf, &mut quick).unwrap() {
            let long = (value.is_none()).then(|| String::from_utf8_lossy(&buf).to_string());
            got.push((line, value.map(|v| v.to_string()), long));
        }
        let quick = |line, v: &str| (line, Some(v.to_string()), None);
        let long = |line, v: &str| (line, None, Some(v.to_string()));
        assert_eq!(
            got,
            vec![
                quick(2, "{\"a\":1}"),
                // Two elements on one line: the line to its last `}` is not one value; the
                // second is then alone on the rest of its line.
                long(3, "{\"b\": \"}\"}"),
                quick(3, "{\"c\":3}"),
                long(4, "{\"d\":\n 4}"),
                long(6, "[5]"),
                quick(7, "{\"e\":6}"),
            ]
        );
        assert_eq!(sc.next_key().unwrap(), None);
        sc.end().unwrap();
    }

    #[test]
    fn a_document_read_through_a_tiny_buffer_gives_the_same_values() {
        let text = "{\"a\": {\"b\": [1, 2, \"x\\\\\"]},\n \"c\": [true, null]}";
        let reader = std::io::BufReader::with_capacity(1, text.as_bytes());
        let mut sc = ObjectScanner::new(reader, "t");
        assert!(sc.begin().unwrap());
        let mut buf = Vec::new();
        assert_eq!(sc.next_key().unwrap().as_deref(), Some("a"));
        sc.value(&mut buf).unwrap();
        assert_eq!(buf, b"{\"b\": [1, 2, \"x\\\\\"]}");
        assert_eq!(sc.next_key().unwrap().as_deref(), Some("c"));
        assert!(sc.array_begin().unwrap());
        assert_eq!(next(&mut sc, &mut buf).unwrap(), Some(2));
        assert_eq!(buf, b"true");
        assert_eq!(next(&mut sc, &mut buf).unwrap(), Some(2));
        assert_eq!(next(&mut sc, &mut buf).unwrap(), None);
        assert_eq!(sc.next_key().unwrap(), None);
    }
}

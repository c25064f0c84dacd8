//! Prompts users bring (`--dataset FILE`): ShareGPT JSON, JSONL of `{"prompt": ...}` or
//! `{"messages": [...]}`, or a plain text file of one prompt per line.
//!
//! A dataset replaces the matrix's context axis: every sampled row is measured at its own length
//! (its token count, counted by the server before the first cell, is the cell's context) and the
//! cell key names the row (`dataset_row`), so two rows of equal length stay two cells everywhere
//! (resume, merge, report). run.json records the file's path, size and CRC-32, and the rows
//! sampled; a resume reads the file again and refuses one whose bytes changed.
//!
//! Every row is read before anything is measured. A row that holds no conversation bench can send
//! (ShareGPT dumps hold rows with `conversations: []`) is skipped, counted and named (`file:line`
//! and why, on stderr and in run.json), as other benchmarks skip them; `--dataset-strict` refuses
//! the file at such a row instead (exit 2). A file that is not JSON where it claims to be, or holds
//! no row bench can send, is refused either way: never a failed cell halfway through a sweep.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How many rows a file may hold: far beyond any benchmark set, small enough that a wrong file
/// (a log, a corpus) is refused instead of read into memory.
pub(crate) const MAX_ROWS: usize = 1_000_000;

/// One message of a row's conversation, in the chat API's roles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    pub role: &'static str,
    pub content: String,
}

/// A row of the file, as the sweep sends it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// 1-based position among the file's rows (the `dataset_row` of its records).
    pub row: u32,
    /// 1-based line of the file the row starts on.
    pub line: u32,
    /// Turn 1's prompt tokens as the server counts them (chat template and nonce line included);
    /// None until counted.
    pub tokens: Option<u32>,
    /// `--dataset-output-tokens`: the reply length this row asks for (its own `output_length`,
    /// `output_tokens` or `max_tokens` field, else the server's count of its reply to turn 1), sent
    /// as its max_tokens; None: `--output-tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u32>,
    /// The row's conversation: optional system message, then user (and assistant) turns. Read from
    /// the file, never written to run.json (a row may be long, and may be private).
    #[serde(skip)]
    pub messages: Vec<Turn>,
}

/// A row of the file that holds no conversation bench can send, skipped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SkippedRow {
    pub line: u32,
    pub why: String,
}

/// How many skipped rows run.json and stderr name one by one (all are counted).
pub(crate) const SKIPPED_NAMED: usize = 10;

/// How a dataset is read (`--dataset-strict`, `--dataset-output-tokens`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reading {
    /// Refuse the file at its first row that holds no conversation, instead of skipping it.
    pub strict: bool,
    /// Each row's max_tokens from the row itself (`Row::output_tokens`).
    pub output_tokens_from_rows: bool,
}

impl Row {
    /// Turn 1: every message up to and including the first user message.
    pub(crate) fn first_turn(&self) -> &[Turn] {
        let end = self.messages.iter().position(|t| t.role == "user").map_or(0, |i| i + 1);
        &self.messages[..end]
    }

    /// The row's user messages after the first, in order (replayed as hot's later turns).
    pub(crate) fn later_user_turns(&self) -> Vec<&str> {
        self.messages.iter().filter(|t| t.role == "user").skip(1).map(|t| t.content.as_str()).collect()
    }

    /// The assistant message that answers the row's `n`-th user message (1-based), if the row has one.
    pub(crate) fn answer_to(&self, n: usize) -> Option<&str> {
        let user =
            self.messages.iter().enumerate().filter(|(_, t)| t.role == "user").nth(n.checked_sub(1)?)?.0;
        match self.messages.get(user + 1) {
            Some(t) if t.role == "assistant" => Some(t.content.as_str()),
            _ => None,
        }
    }
}

/// The dataset of a run, as run.json records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dataset {
    pub path: PathBuf,
    pub size_bytes: u64,
    /// CRC-32 (IEEE) of the file's bytes, 8 hex digits.
    pub crc32: String,
    /// sharegpt (a JSON array), jsonl, or text.
    pub format: String,
    /// Rows in the file.
    pub rows_in_file: usize,
    /// `--dataset-limit`: rows sampled (seeded by `--seed`); None when every row is measured.
    pub limit: Option<u32>,
    /// The rows measured, in file order.
    pub rows: Vec<Row>,
    /// Rows of the file that hold no conversation bench can send, skipped (all counted).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_rows: usize,
    /// The first `SKIPPED_NAMED` of them, by line and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedRow>,
    /// `--dataset-output-tokens`: each row's max_tokens is its own reply length.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_tokens_from_rows: bool,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Rows read from a file, and the ones skipped.
#[derive(Default)]
struct Read {
    rows: Vec<Row>,
    skipped: Vec<SkippedRow>,
}

impl Read {
    /// Keeps the row, or (not strict) skips it with why; strict, the row's error is the file's.
    fn take(
        &mut self,
        strict: bool,
        line: usize,
        row: Result<(Vec<Turn>, Option<u32>), String>,
    ) -> Result<(), String> {
        match row {
            Ok((messages, output_tokens)) => {
                let row = self.rows.len() as u32 + 1;
                self.rows.push(Row { row, line: line as u32, tokens: None, output_tokens, messages });
                Ok(())
            }
            Err(why) if strict => Err(why),
            Err(why) => {
                self.skipped.push(SkippedRow { line: line as u32, why });
                Ok(())
            }
        }
    }
}

/// A dataset that cannot be used, naming the file (and the line, for a row).
#[derive(Debug, thiserror::Error)]
#[error("--dataset {0}")]
pub(crate) struct DatasetError(String);

fn at(path: &Path, line: usize, why: impl std::fmt::Display) -> DatasetError {
    DatasetError(format!("{}:{line}: {why}", path.display()))
}

impl Dataset {
    /// Reads `path`, every row checked (skipped or, strict, refused), then samples `limit` rows with `seed`.
    pub(crate) fn load(
        path: &Path,
        limit: Option<u32>,
        seed: u64,
        reading: Reading,
    ) -> Result<Dataset, DatasetError> {
        let cannot = |why: String| DatasetError(format!("{}: {why}", path.display()));
        // A regular file of at most `Limit::DATASET`: a FIFO or a device would be waited on, never
        // read to its end.
        let bytes = ttft_model::input_file::read_bytes(path, ttft_model::input_file::Limit::DATASET)
            .map_err(|e| cannot(e.to_string()))?;
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            let line = bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1;
            at(path, line, "not UTF-8 text")
        })?;
        // A UTF-8 byte-order mark (editors on Windows write one) is not part of the first row:
        // kept, it hides the `[` or `{` that says what the file holds.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let trimmed = text.trim_start();
        let (format, read) = if trimmed.starts_with('[') {
            ("sharegpt", json_array(path, text, reading)?)
        } else if trimmed.starts_with('{') {
            ("jsonl", json_lines(path, text, reading)?)
        } else {
            ("text", Read { rows: text_lines(text), skipped: Vec::new() })
        };
        let Read { mut rows, skipped } = read;
        if rows.is_empty() {
            let why = skipped.first().map_or(String::new(), |s| {
                format!(" ({} skipped; line {}: {})", skipped.len(), s.line, s.why)
            });
            return Err(DatasetError(format!("{}: holds no rows bench can send{why}", path.display())));
        }
        if rows.len() > MAX_ROWS {
            return Err(DatasetError(format!(
                "{}: {} rows, more than the {MAX_ROWS} a dataset may hold",
                path.display(),
                rows.len()
            )));
        }
        let rows_in_file = rows.len();
        if let Some(n) = limit.map(|n| n as usize).filter(|&n| n < rows.len()) {
            rows = sample(rows, n, seed);
        }
        Ok(Dataset {
            path: path.to_path_buf(),
            size_bytes: bytes.len() as u64,
            crc32: format!("{:08x}", crc32fast::hash(&bytes)),
            format: format.to_string(),
            rows_in_file,
            limit,
            rows,
            skipped_rows: skipped.len(),
            skipped: skipped.into_iter().take(SKIPPED_NAMED).collect(),
            output_tokens_from_rows: reading.output_tokens_from_rows,
        })
    }

    /// What a sweep says of the rows it skipped: one line per named row, then the count of the rest.
    pub(crate) fn skipped_lines(&self) -> Vec<String> {
        if self.skipped_rows == 0 {
            return Vec::new();
        }
        let path = self.path.display();
        let mut lines = vec![format!(
            "{path}: skipped {} of {} rows that hold no conversation bench can send (--dataset-strict refuses the file instead):",
            self.skipped_rows,
            self.rows_in_file + self.skipped_rows
        )];
        lines.extend(self.skipped.iter().map(|s| format!("  {path}:{}: {}", s.line, s.why)));
        if self.skipped_rows > self.skipped.len() {
            lines.push(format!("  ... and {} more", self.skipped_rows - self.skipped.len()));
        }
        lines
    }

    /// The same dataset read again (a resumed run): refused when the file's bytes changed.
    pub(crate) fn reload(&self) -> Result<Dataset, DatasetError> {
        let reading = Reading { strict: false, output_tokens_from_rows: self.output_tokens_from_rows };
        let seed_free = Dataset::load(&self.path, None, 0, reading)?;
        if seed_free.crc32 != self.crc32 || seed_free.size_bytes != self.size_bytes {
            return Err(DatasetError(format!(
                "{}: changed since the run began (CRC-32 {} of {} bytes, now {} of {} bytes)",
                self.path.display(),
                self.crc32,
                self.size_bytes,
                seed_free.crc32,
                seed_free.size_bytes
            )));
        }
        let mut again = self.clone();
        for row in &mut again.rows {
            match seed_free.rows.iter().find(|r| r.row == row.row) {
                Some(read) => row.messages = read.messages.clone(),
                None => {
                    return Err(DatasetError(format!("{}: row {} is gone", self.path.display(), row.row)));
                }
            }
        }
        Ok(again)
    }

    /// The row of a cell.
    pub(crate) fn row(&self, row: u32) -> Option<&Row> {
        self.rows.iter().find(|r| r.row == row)
    }
}

/// `n` of `rows` drawn without replacement by a seeded shuffle (the project's one seeded
/// generator, `stats::Rng`), kept in file order.
fn sample(rows: Vec<Row>, n: usize, seed: u64) -> Vec<Row> {
    let mut rng = ttft_model::stats::Rng::new(seed ^ 0x0DA7_A5E7);
    let mut order: Vec<usize> = (0..rows.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let mut keep: Vec<usize> = order.into_iter().take(n).collect();
    keep.sort_unstable();
    let mut rows: Vec<Option<Row>> = rows.into_iter().map(Some).collect();
    keep.into_iter().filter_map(|i| rows[i].take()).collect()
}

fn text_lines(text: &str) -> Vec<Row> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .enumerate()
        .map(|(i, (line, l))| Row {
            row: i as u32 + 1,
            line: line as u32 + 1,
            tokens: None,
            output_tokens: None,
            messages: vec![Turn { role: "user", content: l.trim_end_matches('\r').to_string() }],
        })
        .collect()
}

/// A row's conversation and, when asked, its own reply length.
fn row_of(value: &Value, reading: Reading) -> Result<(Vec<Turn>, Option<u32>), String> {
    let messages = conversation(value).map_err(|e| e.to_string())?;
    let output = if reading.output_tokens_from_rows { given_output_tokens(value)? } else { None };
    Ok((messages, output))
}

fn json_lines(path: &Path, text: &str, reading: Reading) -> Result<Read, DatasetError> {
    let mut read = Read::default();
    for (line, l) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        // A line that is not JSON is a broken file, not a row to skip.
        let value: Value = serde_json::from_str(l).map_err(|e| at(path, line + 1, e))?;
        read.take(reading.strict, line + 1, row_of(&value, reading))
            .map_err(|why| at(path, line + 1, why))?;
    }
    Ok(read)
}

/// A JSON array of rows (ShareGPT's layout); each element is named by the line it starts on.
fn json_array(path: &Path, text: &str, reading: Reading) -> Result<Read, DatasetError> {
    let values: Vec<Value> = serde_json::from_str(text).map_err(|e| at(path, e.line(), e))?;
    let starts = element_lines(text);
    let mut read = Read::default();
    for (i, value) in values.iter().enumerate() {
        let line = starts.get(i).copied().unwrap_or(1);
        let row = row_of(value, reading).map_err(|why| format!("row {}: {why}", i + 1));
        read.take(reading.strict, line, row).map_err(|why| at(path, line, why))?;
    }
    Ok(read)
}

/// The fields other benchmarks' datasets give a row's reply length in: AIPerf's `output_length`,
/// GuideLLM's `output_tokens_count`, `output_tokens`, `max_tokens`.
const OUTPUT_LENGTH_KEYS: &[&str] = &["output_length", "output_tokens", "output_tokens_count", "max_tokens"];

/// A row's own reply length, where it gives one.
fn given_output_tokens(value: &Value) -> Result<Option<u32>, String> {
    let Some((key, v)) = OUTPUT_LENGTH_KEYS.iter().find_map(|k| Some((*k, value.get(*k)?))) else {
        return Ok(None);
    };
    match v.as_u64() {
        Some(n) if n >= 1 && n <= u64::from(u32::MAX) => Ok(Some(n as u32)),
        _ => Err(format!("\"{key}\" must be a whole number of tokens, at least 1")),
    }
}

/// The line each element of a top-level JSON array starts on (the text is valid JSON).
fn element_lines(text: &str) -> Vec<usize> {
    let (mut line, mut depth, mut in_string, mut escaped, mut expect) = (1, 0usize, false, false, false);
    let mut starts = Vec::new();
    for c in text.chars() {
        if c == '\n' {
            line += 1;
        }
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        if expect && !c.is_whitespace() && c != ']' {
            starts.push(line);
            expect = false;
        }
        match c {
            '"' => in_string = true,
            '[' | '{' => {
                depth += 1;
                if depth == 1 {
                    expect = true;
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            ',' if depth == 1 => expect = true,
            _ => {}
        }
    }
    starts
}

/// Why a row holds no conversation bench can send (its Display is the message after `file:line:`).
#[derive(Debug, thiserror::Error)]
enum RowError {
    #[error("a row must be a JSON object")]
    NotAnObject,
    #[error("\"{0}\" must be a string")]
    PromptNotAString(&'static str),
    #[error(
        "a row needs \"prompt\" (or \"text\", \"input\", \"question\", \"instruction\"), \"messages\" or \"conversations\""
    )]
    NoMessages,
    #[error("the row has no user message with text")]
    NoUserText,
    #[error("\"{key}\" must be an array")]
    NotAnArray { key: &'static str },
    #[error("{key}[{index}] needs string \"{role_key}\" and \"{text_key}\"")]
    TurnFields { key: &'static str, index: usize, role_key: &'static str, text_key: &'static str },
    #[error("{key}[{index}]: unknown {role_key} {role:?}")]
    UnknownRole { key: &'static str, index: usize, role_key: &'static str, role: String },
}

/// The keys other benchmarks' datasets hold a single prompt under, in the order they are looked
/// for: vLLM's custom and GuideLLM's `prompt`, AIPerf's single-turn `text`, and the columns
/// GuideLLM also reads (`input`, `question`, `instruction`).
const PROMPT_KEYS: &[&str] = &["prompt", "text", "input", "question", "instruction"];

/// A row's messages: a prompt under one of `PROMPT_KEYS` (`{"prompt": "..."}`, AIPerf's
/// `{"text": "..."}`), `{"messages": [{"role", "content"}]}` or ShareGPT's
/// `{"conversations": [{"from", "value"}]}`. It must hold a user message with text.
fn conversation(value: &Value) -> Result<Vec<Turn>, RowError> {
    let Some(object) = value.as_object() else { return Err(RowError::NotAnObject) };
    let prompt = PROMPT_KEYS.iter().find_map(|k| Some((*k, object.get(*k)?)));
    let messages = if let Some((key, prompt)) = prompt {
        let Some(text) = prompt.as_str() else { return Err(RowError::PromptNotAString(key)) };
        vec![Turn { role: "user", content: text.to_string() }]
    } else if let Some(list) = object.get("messages") {
        turns(list, "messages", "role", "content")?
    } else if let Some(list) = object.get("conversations") {
        turns(list, "conversations", "from", "value")?
    } else {
        return Err(RowError::NoMessages);
    };
    if !messages.iter().any(|t| t.role == "user" && !t.content.trim().is_empty()) {
        return Err(RowError::NoUserText);
    }
    Ok(messages)
}

fn turns(
    list: &Value,
    key: &'static str,
    role_key: &'static str,
    text_key: &'static str,
) -> Result<Vec<Turn>, RowError> {
    let Some(items) = list.as_array() else { return Err(RowError::NotAnArray { key }) };
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let role = item.get(role_key).and_then(Value::as_str);
            let text = item.get(text_key).and_then(Value::as_str);
            let (Some(role), Some(text)) = (role, text) else {
                return Err(RowError::TurnFields { key, index, role_key, text_key });
            };
            let role = match role {
                "user" | "human" => "user",
                "assistant" | "gpt" | "chatgpt" | "bard" | "bing" | "model" => "assistant",
                "system" => "system",
                other => return Err(RowError::UnknownRole { key, index, role_key, role: other.to_string() }),
            };
            Ok(Turn { role, content: text.to_string() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_elements_are_named_by_the_line_they_start_on() {
        let text = "[\n  {\"a\": \"x,[\\\"\"},\n  {\"b\": [1, 2]}\n, {}]";
        assert_eq!(element_lines(text), [2, 3, 4]);
    }

    #[test]
    fn sampling_is_seeded_and_keeps_file_order() {
        let rows: Vec<Row> = (1..=10)
            .map(|i| Row { row: i, line: i, tokens: None, output_tokens: None, messages: vec![] })
            .collect();
        let a: Vec<u32> = sample(rows.clone(), 4, 7).iter().map(|r| r.row).collect();
        let b: Vec<u32> = sample(rows.clone(), 4, 7).iter().map(|r| r.row).collect();
        let c: Vec<u32> = sample(rows, 4, 8).iter().map(|r| r.row).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.windows(2).all(|w| w[0] < w[1]), "{a:?}");
    }

    #[test]
    fn a_row_without_a_conversation_is_refused_saying_what_it_lacks() {
        let why = |row: &str| conversation(&serde_json::from_str(row).unwrap()).unwrap_err().to_string();
        assert_eq!(why("[1]"), "a row must be a JSON object");
        assert_eq!(why(r#"{"prompt": 3}"#), "\"prompt\" must be a string");
        assert_eq!(
            why(r#"{"body": "x"}"#),
            "a row needs \"prompt\" (or \"text\", \"input\", \"question\", \"instruction\"), \"messages\" or \"conversations\""
        );
        assert_eq!(why(r#"{"text": 3}"#), "\"text\" must be a string");
        assert_eq!(why(r#"{"messages": {}}"#), "\"messages\" must be an array");
        assert_eq!(
            why(r#"{"conversations": [{"from": "human"}]}"#),
            "conversations[0] needs string \"from\" and \"value\""
        );
        assert_eq!(
            why(r#"{"conversations": [{"from": "robot", "value": "hi"}]}"#),
            "conversations[0]: unknown from \"robot\""
        );
        assert_eq!(
            why(r#"{"messages": [{"role": "assistant", "content": "hi"}]}"#),
            "the row has no user message with text"
        );
    }
}

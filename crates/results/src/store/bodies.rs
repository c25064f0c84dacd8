//! `request-bodies.jsonl` (`bench sweep --request-bodies`): the exact body of every measured
//! request, so a client that is not bench can send the same bytes to the same server and its TTFT
//! can be set beside bench's (scripts/parity.py).
//!
//! One line per measured request, appended after its record is built: the record's identity (cell,
//! request index, nonce: the join key with measurements.jsonl), the path, the body's length and
//! CRC-32, and the body itself as one JSON string holding the bytes that went on the wire (the
//! server read them, so they are valid UTF-8). A body that carries a registered secret (a preset's
//! `{env:NAME}` value, a key the server echoed into a header bench forwards) is withheld, hash
//! included: a known prompt beside its hash would let anyone test guesses of the secret.
//! Headers are never written (the API key travels there).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::atomic::WriteError;
use ttft_model::record::CellKey;

pub const BODIES_FILE: &str = "request-bodies.jsonl";

/// One measured request's body, as written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BodyLine {
    #[serde(flatten)]
    pub cell: CellKey,
    pub request_index: u32,
    /// The record's nonce (hot turns share it; the cell tells them apart).
    pub nonce: String,
    /// The request path, e.g. /v1/chat/completions.
    pub path: String,
    /// Length of the body on the wire.
    pub body_bytes: usize,
    /// CRC-32 (IEEE) of those bytes, 8 hex digits.
    pub body_crc32: Option<String>,
    /// The body as sent; None when withheld.
    pub body: Option<String>,
    /// Why the body is not here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withheld: Option<String>,
}

impl BodyLine {
    /// The line for `body` as sent to `path`: the body itself, or nothing of it where it carries
    /// a secret.
    pub fn new(cell: CellKey, request_index: u32, nonce: &str, path: &str, body: &[u8]) -> BodyLine {
        let text = std::str::from_utf8(body).ok().filter(|t| !carries_secret(t));
        let withheld = match (std::str::from_utf8(body), &text) {
            (_, Some(_)) => None,
            (Ok(_), None) => Some("the body carries a secret (a preset value or key)".to_string()),
            (Err(_), None) => Some("the body is not UTF-8".to_string()),
        };
        BodyLine {
            cell,
            request_index,
            nonce: nonce.to_string(),
            path: path.to_string(),
            body_bytes: body.len(),
            body_crc32: text.map(|_| format!("{:08x}", crc32fast::hash(body))),
            body: text.map(str::to_string),
            withheld,
        }
    }
}

/// Whether `text` holds a registered secret as it is, or as a JSON string value holds it
/// (escaped on the wire, so the plain text would not match).
fn carries_secret(text: &str) -> bool {
    if ttft_model::secrets::redact(text) != text {
        return true;
    }
    fn any_string(v: &serde_json::Value, hit: &dyn Fn(&str) -> bool) -> bool {
        match v {
            serde_json::Value::String(s) => hit(s),
            serde_json::Value::Array(a) => a.iter().any(|v| any_string(v, hit)),
            serde_json::Value::Object(o) => o.iter().any(|(k, v)| hit(k) || any_string(v, hit)),
            _ => false,
        }
    }
    serde_json::from_str::<serde_json::Value>(text)
        .is_ok_and(|v| any_string(&v, &|s| ttft_model::secrets::redact(s) != s))
}

/// Appends body lines to a run's `request-bodies.jsonl`. Shared by the requests of a batch; the
/// first write error is kept for the cell loop, which stops the sweep with it (exit 4) after the
/// cell's records are safe.
pub struct BodyLog {
    path: PathBuf,
    file: Mutex<(File, Option<String>)>,
}

impl BodyLog {
    pub fn open(run_dir: &Path) -> Result<BodyLog, WriteError> {
        let path = run_dir.join(BODIES_FILE);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| WriteError::new(&path, "open for appending", e))?;
        Ok(BodyLog { path, file: Mutex::new((file, None)) })
    }

    /// Appends one line (one write). Not fsync'd: a body lost in a crash loses no measurement,
    /// and its record says which request it was.
    pub fn append(&self, line: &BodyLine) {
        let mut guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if guard.1.is_some() {
            return;
        }
        let mut bytes = match serde_json::to_vec(line) {
            Ok(b) => b,
            Err(e) => {
                guard.1 = Some(format!("cannot write {}: {e}", self.path.display()));
                return;
            }
        };
        bytes.push(b'\n');
        let bytes = ttft_model::secrets::redact_json_bytes(&bytes);
        if let Err(e) = guard.0.write_all(&bytes) {
            guard.1 = Some(WriteError::new(&self.path, "append a request body", e).to_string());
        }
    }

    /// The first write that failed, in words naming the file.
    pub fn error(&self) -> Option<String> {
        self.file.lock().unwrap_or_else(|p| p.into_inner()).1.clone()
    }
}

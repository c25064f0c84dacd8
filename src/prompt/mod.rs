//! Prompts of an exact size: a unique nonce first (so no prefix cache can serve a cold prompt),
//! deterministic prose, and a closing question. `sizing` makes the total, chat template included,
//! land on the nominal context.

pub(crate) mod sizing;
pub(crate) mod text;

use std::sync::atomic::{AtomicU64, Ordering};

pub use sizing::Sizer;

/// The closing question: gives the model something to answer, like the origin benchmark's prompts.
pub(crate) const QUESTION: &str = "\n\nQuestion: What are the main topics and themes discussed in the notes above? \
                            Answer in detail.";

/// A prompt ready to send, with what the server should report for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Prompt {
    pub nonce: String,
    /// The user message.
    pub text: String,
    /// Prompt tokens the server should count (chat template included).
    pub expected_input_tokens: u64,
    /// Words of prose between nonce and question.
    pub words: usize,
}

/// The user message for a nonce and a number of prose words.
pub fn document(seed: u64, nonce: &str, words: usize) -> String {
    format!("[ref {nonce}] Notes:\n\n{}{QUESTION}", text::words(seed, words))
}

/// A dataset row's first message behind the nonce, so no prefix cache can serve it cold.
pub(crate) fn with_nonce(nonce: &str, text: &str) -> String {
    format!("[ref {nonce}] {text}")
}

/// Unique 12-digit nonces: a per-process random base plus a counter. Digits keep the token count
/// of every nonce the same on common tokenizers, so sizing stays exact.
pub struct Nonces {
    base: u64,
    counter: AtomicU64,
}

impl Nonces {
    pub fn new() -> Nonces {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Nonces { base: text::mix(&[now, std::process::id() as u64]), counter: AtomicU64::new(0) }
    }

    pub fn next(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let value = text::mix(&[self.base, n]) % 1_000_000_000_000;
        format!("{value:012}")
    }
}

impl Default for Nonces {
    fn default() -> Self {
        Nonces::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonce_comes_first_and_question_last() {
        let doc = document(1, "000000000042", 50);
        assert!(doc.starts_with("[ref 000000000042]"));
        assert!(doc.ends_with("Answer in detail."));
    }

    #[test]
    fn nonces_are_unique_and_fixed_width() {
        let n = Nonces::new();
        let a: Vec<String> = (0..1000).map(|_| n.next()).collect();
        let mut b = a.clone();
        b.sort();
        b.dedup();
        assert_eq!(b.len(), 1000);
        assert!(a.iter().all(|s| s.len() == 12 && s.bytes().all(|c| c.is_ascii_digit())));
    }
}

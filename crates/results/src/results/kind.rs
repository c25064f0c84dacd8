//! What kind of input a source is: a run directory, a records file, a canonical file, the origin
//! benchmark's JSON, or another tool's results. Below every reader, which each says what it found.

use super::import::Tool;

/// The kind of one input, as `bench verify --format json` and merge's provenance name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceKind {
    RunDir,
    Jsonl,
    Canonical,
    Origin,
    /// Another tool's result file (`import`).
    Imported(Tool),
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::RunDir => "run_dir",
            SourceKind::Jsonl => "jsonl",
            SourceKind::Canonical => "canonical",
            SourceKind::Origin => "origin",
            SourceKind::Imported(Tool::Vllm) => "vllm",
            SourceKind::Imported(Tool::AiperfRecords | Tool::AiperfAggregate) => "aiperf",
            SourceKind::Imported(Tool::Guidellm) => "guidellm",
            SourceKind::Imported(Tool::OriginStreaming) => "origin_streaming",
        }
    }
}

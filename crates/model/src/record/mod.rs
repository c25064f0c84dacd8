//! The records `bench sweep` writes, one JSON object per line of `measurements.jsonl`.
//!
//! Every later stage (merge, verify, report) reads only these types, never a server, so they carry
//! the raw samples (token arrival offsets) needed to recompute any statistic. Units are in the field
//! names. The published JSON Schema (`schema/record.schema.json`) is generated from these types and a
//! test keeps the two in step.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Bumped whenever a field changes meaning or a required field is added.
pub const SCHEMA_VERSION: u32 = 1;

/// How many characters of the model's output a record keeps.
pub const OUTPUT_SAMPLE_CHARS: usize = 500;

#[macro_use]
mod cell;
#[macro_use]
mod wire;
pub mod fast;
#[cfg(test)]
mod fast_tests;
mod lean;
mod metrics_delta;
#[cfg(test)]
mod parse_tests;
mod plain_array;
mod policy_kind;
mod quality_code;
mod tagged;
pub use cell::{CacheState, CellKey, CellRest, MergeLabel, Mode, Scenario};
pub use lean::{LeanRecord, TimedRecord};
pub use metrics_delta::MetricsDelta;
pub use policy_kind::PolicyKind;
pub use quality_code::QualityCode;

/// One line of `measurements.jsonl`.
// Read by `wire` (the derive would buffer every record); written and described by the derive.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[serde(tag = "record_type", rename_all = "snake_case")]
pub enum Record {
    Measurement(Box<Measurement>),
    Group(Box<GroupRecord>),
    Staggered(Box<StaggeredRecord>),
}

impl Record {
    pub fn cell(&self) -> &CellKey {
        match self {
            Record::Measurement(m) => &m.cell,
            Record::Group(g) => &g.cell,
            Record::Staggered(s) => &s.cell,
        }
    }

    pub fn run_id(&self) -> &str {
        match self {
            Record::Measurement(m) => &m.run_id,
            Record::Group(g) => &g.run_id,
            Record::Staggered(s) => &s.run_id,
        }
    }

    pub fn schema_version(&self) -> u32 {
        match self {
            Record::Measurement(m) => m.schema_version,
            Record::Group(g) => g.schema_version,
            Record::Staggered(s) => s.schema_version,
        }
    }

    pub fn started_at(&self) -> &str {
        match self {
            Record::Measurement(m) => &m.started_at,
            Record::Group(g) => &g.started_at,
            Record::Staggered(s) => &s.started_at,
        }
    }

    /// Passed every quality gate and carries no error: the record a resume or a merge keeps.
    pub fn is_good(&self) -> bool {
        match self {
            Record::Measurement(m) => m.quality_ok && m.error.is_none(),
            Record::Group(g) => g.error.is_none() && g.requests_failed == 0,
            Record::Staggered(s) => s.quality_ok && s.error.is_none(),
        }
    }

    /// The record without its raw samples and server payloads: token offsets, the output sample,
    /// hot turns but the last (the turn before the measured one, whose prompt size tells late
    /// counters from this turn's), server timings, stats and metrics, thermal snapshots. Every number verify's
    /// rules and report's statistics read stays; a lean record is never written back (a reader
    /// of 100,000 records holds a third of the memory: `results::sources::Detail::Lean`). `LeanRecord`
    /// reads a record straight into this.
    pub fn lean(self) -> Record {
        match self {
            Record::Measurement(mut m) => {
                m.token_offsets_ms = Vec::new();
                m.output_sample = String::new();
                let earlier = m.turns.len().saturating_sub(1);
                m.turns.drain(..earlier);
                m.turns.shrink_to_fit();
                m.server_timings = None;
                m.server_stats = None;
                m.server_metrics = None;
                if let Some(t) = &mut m.thermal {
                    (t.before, t.after) = (None, None);
                }
                Record::Measurement(m)
            }
            Record::Group(mut g) => {
                g.server_metrics = None;
                Record::Group(g)
            }
            Record::Staggered(mut s) => {
                s.user_a_token_offsets_ms = Vec::new();
                s.user_b_token_offsets_ms = Vec::new();
                if let Some(t) = &mut s.thermal {
                    (t.before, t.after) = (None, None);
                }
                Record::Staggered(s)
            }
        }
    }

    /// `lean`, a measurement's token offsets kept: what `bench report` reads (its inter-token
    /// latency is the gaps between them); a tenth of a whole record's memory. `TimedRecord` reads a
    /// record straight into this.
    pub fn timed(mut self) -> Record {
        let offsets = match &mut self {
            Record::Measurement(m) => std::mem::take(&mut m.token_offsets_ms),
            _ => Vec::new(),
        };
        let mut lean = self.lean();
        if let Record::Measurement(m) = &mut lean {
            m.token_offsets_ms = offsets;
        }
        lean
    }

    pub fn record_type(&self) -> &'static str {
        match self {
            Record::Measurement(_) => "measurement",
            Record::Group(_) => "group",
            Record::Staggered(_) => "staggered",
        }
    }
}

// Each record type's fields, declared once: the types, their twins (the streaming reader) and the
// conversion between them are declared from this list (`record_types!` in `wire`).
record_types! {
    /// One request as the client saw it.
    #[derive(Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
    pub struct Measurement {
        pub schema_version: u32,
        pub run_id: String,
        flatten cell: CellKey,
        /// Position inside a concurrent batch (0 for batch size 1).
        pub request_index: u32,
        /// Ties the requests of one concurrent batch to their group record.
        pub group_id: Option<String>,
        /// `--reuse-primes`: the session lifecycle this request was measured in. Records that share it
        /// were measured in turn on one session (cold turn 1, then warm after evict and reload, then
        /// hot turn 3), in started_at order; absent when the request had a session of its own.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub lifecycle_id: Option<String>,
        /// Wall-clock time the request was sent (RFC 3339, UTC).
        pub started_at: String,
        /// The unique prefix that keeps prefix caches from serving a cold prompt.
        pub nonce: String,
        /// Time from the planned release of the request to the moment it was handed to the socket
        /// (client-side queueing, a lane's earlier writes in a batch included; near zero unless the
        /// harness is the bottleneck). Not part of `ttft_ms`, which counts from the send; their sum
        /// counts from the release.
        pub send_lag_ms: Option<f64>,
        /// `bench load`: the offered arrival rate (requests/s) this request was scheduled at.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub offered_rate_per_s: Option<f64>,
        /// `bench load`: the request's Poisson arrival instant, ms after its rate's clock started.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub scheduled_send_ms: Option<f64>,
        /// `bench load`: when it was actually handed to the socket (its timed window opened, any wait
        /// in the client's own queue after that added), ms after the same origin; `send_lag_ms` =
        /// actual - scheduled.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub actual_send_ms: Option<f64>,
        /// `bench load`: how long past its arrival instant the request's preparation (priming,
        /// eviction) was still running; 0 when it was ready in time. Part of `send_lag_ms`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub prepare_late_ms: Option<f64>,
        /// `bench load --concurrency`: the closed-loop level (users) this request was sent at.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub concurrency: Option<u32>,
        /// `bench load --concurrency`: the user (0-based) that sent it; a user sends its next request
        /// when this one has ended.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub user_id: Option<u32>,
        /// `bench load --concurrency`: sent in the level's warm-up (its first `--warmup`), so left out
        /// of the level's statistics: the users all start at once, which is not the steady state.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub warmup: bool,
        /// Response headers received.
        pub first_byte_ms: Option<f64>,
        /// First SSE event of any kind (role-only chunks included). Null when not streaming.
        pub first_event_ms: Option<f64>,
        /// First delta with non-empty content or reasoning. Null when not streaming.
        pub ttft_ms: Option<f64>,
        pub e2e_ms: Option<f64>,
        /// Arrival of every content/reasoning delta, ms since send (raw samples for later statistics).
        pub token_offsets_ms: Vec<f64> => K::Offsets,
        /// Prompt tokens as the server reported them (usage); null when the server gave no usage.
        pub input_tokens: Option<u64>,
        pub output_tokens: Option<u64>,
        pub cached_tokens: Option<u64>,
        /// Prompt tokens the harness expected the server to see (nominal context for cold/warm).
        pub expected_input_tokens: Option<u64>,
        /// Number of content/reasoning deltas received (a delta may hold several tokens).
        pub delta_count: u64,
        /// Streaming: how many distinct arrival times the content deltas had (deltas stamped by one
        /// read arrived together). With `output_tokens` it tells a paced stream from one held back and
        /// flushed at once (quality flag `stream_burst`). Absent when not streaming and in older records.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub distinct_arrivals: Option<u64>,
        /// (output_tokens - 1) / ((e2e_ms - ttft_ms) / 1000); null without usage or without a TTFT.
        pub decode_tps: Option<f64>,
        /// input_tokens / (ttft_ms / 1000).
        pub prefill_tps: Option<f64>,
        pub max_tokens: u32,
        pub finish_reason: Option<String>,
        /// The first 500 characters of the output (content, with reasoning first when present).
        pub output_sample: String => K::Text,
        /// Warm only: time of the explicit reload call (e.g. llama.cpp slot restore), also inside ttft_ms.
        pub reload_ms: Option<f64>,
        /// Warm only: whether the restore read the saved session from disk. `evicted`: bench dropped
        /// the saved file from the OS page cache (fsync, then POSIX_FADV_DONTNEED) before the timed
        /// window and the kernel showed it gone where it says; `memory`: the file stayed in memory
        /// (a save directory on tmpfs or ramfs, or a drop the kernel did not carry out), so the
        /// restore read memory; `unknown`: bench could not reach the file, so the restore may have
        /// read memory (on an H200 about 2x faster than from disk: docs/page-cache.md). Absent in
        /// older records.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub page_cache: Option<PageCache> => OptionalEnum<PageCache>,
        /// Warm only: the percentage of the saved file's pages the OS page cache held after bench's
        /// drop, just before the timed window (the kernel's `mincore`); absent where bench could
        /// not reach the file or the kernel would not say (a file neither owned nor writable by
        /// bench). Above `PageCache::MAX_RESIDENT_PCT` the record says `memory`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub page_cache_resident_pct: Option<f64>,
        /// Warm only: the size in bytes of the session the server saved to its disk (llama.cpp's
        /// slot file): read from the file where bench reaches the server's save directory (and
        /// removes the file once the session is measured), else what the server's evict answered
        /// it wrote (llama.cpp's `n_written`). Absent where neither is known and in older records.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub saved_bytes: Option<u64>,
        /// Hot only: the unmeasured turns that built the conversation (turns 1 to N-1 of `--turns N`),
        /// each with its own TTFT when the cell streams.
        pub turns: Vec<TurnSummary>,
        /// Hot with `--think-time`: the pause between the previous turn's answer and this (measured)
        /// turn's send, as the clock measured it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub think_ms: Option<f64>,
        /// What the server said about its cache for this request.
        pub cache_evidence: Option<CacheEvidence>,
        /// Whether the evidence matches the claimed cache state; null when the server gives none.
        pub cache_state_confirmed: Option<bool>,
        /// llama.cpp's `timings` object, verbatim, when present.
        pub server_timings: Option<Box<serde_json::Value>> => K::Json,
        /// What the preset's stats endpoint said after the measurement (e.g. agent-memory cache pool).
        pub server_stats: Option<Box<serde_json::Value>> => K::Json,
        /// The server's Prometheus counters, before vs after the measured request (batch 1 only).
        #[serde(default)]
        pub server_metrics: Option<Box<MetricsDelta>>,
        pub quality_ok: bool,
        pub quality_flags: Vec<QualityFlag>,
        pub thermal: Option<ThermalRecord>,
        pub physics: Option<PhysicsRecord>,
        pub error: Option<ErrorInfo>,
        /// Times the measured request was sent: 1, or 2 when the first connect failed (a request that
        /// may have reached the server is never re-sent); 0 when it was never sent. Records written
        /// before this field existed read as 1.
        #[serde(default = "one")]
        pub attempts: u32,
        /// A kept-alive connection of this request held bytes no request asked for (a stray second
        /// response after this one, or bytes already waiting before it was sent): the connection was
        /// closed and never read as an answer (direct path; see client::Exchange). Written only when
        /// true.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub unexpected_bytes_dropped: bool,
        /// How the request was kept from reading bytes that were not its reply (a stray: a copy of
        /// an earlier answer that a proxy or server sent late on a kept-alive connection):
        /// `new_before_window`, a connection that had carried nothing, opened before the timed
        /// window (the direct path); `new_in_window`, one opened for this request inside the
        /// window, its connect and any TLS handshake inside TTFT (reqwest over HTTP/1.1);
        /// `http2_stream`, an HTTP/2 stream, whose reply is tied to it. Absent in older records,
        /// whose requests may have reused a connection.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub connection: Option<ConnectionUse> => OptionalEnum<ConnectionUse>,
    }

    /// The summary of one concurrent batch; its requests are Measurement records with the same group_id.
    #[derive(Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
    pub struct GroupRecord {
        pub schema_version: u32,
        pub run_id: String,
        flatten cell: CellKey,
        pub group_id: String,
        pub started_at: String,
        /// From the release of the batch to the end of its last response.
        pub wall_ms: f64,
        /// Sum of output tokens over wall time.
        pub system_tps: Option<f64>,
        /// Mean of the requests' decode rates.
        pub per_request_tps: Option<f64>,
        pub avg_ttft_ms: Option<f64>,
        pub avg_e2e_ms: Option<f64>,
        pub total_output_tokens: u64,
        pub requests_ok: u32,
        pub requests_failed: u32,
        /// The server's Prometheus counters, before vs after the whole batch.
        #[serde(default)]
        pub server_metrics: Option<Box<MetricsDelta>>,
        pub error: Option<ErrorInfo>,
    }

    /// One staggered pair: user A at t0, user B later.
    #[derive(Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
    pub struct StaggeredRecord {
        pub schema_version: u32,
        pub run_id: String,
        flatten cell: CellKey,
        pub started_at: String,
        /// Planned delay of B after A (batched); null for sequential.
        pub stagger_delay_ms: Option<f64>,
        pub user_a_ttft_ms: Option<f64>,
        pub user_a_e2e_ms: Option<f64>,
        pub user_b_ttft_ms: Option<f64>,
        pub user_b_e2e_ms: Option<f64>,
        /// When B was actually sent, ms after A was sent.
        pub user_b_arrival_ms: Option<f64>,
        /// B's first token, ms after A was sent: the wait user B really sees measured from the wall start.
        pub user_b_ttft_from_wall_start_ms: Option<f64>,
        /// Whether B was sent while A was still in flight (what a batched pair exists to measure; a
        /// sequential pair never overlaps). Null in files written before it was recorded.
        pub overlapped: Option<bool>,
        /// How long B's request overlapped A's, ms (0 when it did not).
        pub overlap_ms: Option<f64>,
        pub total_wall_ms: Option<f64>,
        pub user_a_output_tokens: Option<u64>,
        pub user_b_output_tokens: Option<u64>,
        pub user_a_token_offsets_ms: Vec<f64> => K::Offsets,
        pub user_b_token_offsets_ms: Vec<f64> => K::Offsets,
        pub system_tps: Option<f64>,
        /// User A's cache evidence and verdict, as its own measurement record would hold them:
        /// each user of the pair is measured in the cell's cache state. Absent in files written
        /// before they were recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub user_a_cache: Option<UserCache>,
        /// User B's, likewise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub user_b_cache: Option<UserCache>,
        pub quality_ok: bool,
        pub quality_flags: Vec<QualityFlag>,
        pub thermal: Option<ThermalRecord>,
        pub error: Option<ErrorInfo>,
    }
}

/// One user's cache evidence in a staggered pair (`StaggeredRecord::user_a_cache`): the fields of
/// its measurement that the verdict is derived from, and the verdict.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UserCache {
    /// Prompt tokens as the server reported them.
    pub input_tokens: Option<u64>,
    /// What the server said about its cache for this user's request.
    pub cache_evidence: Option<CacheEvidence>,
    /// Whether the evidence matches the cell's cache state; null when the server gives none.
    pub cache_state_confirmed: Option<bool>,
}

impl UserCache {
    pub fn of(m: &Measurement) -> UserCache {
        UserCache {
            input_tokens: m.input_tokens,
            cache_evidence: m.cache_evidence.clone(),
            cache_state_confirmed: m.cache_state_confirmed,
        }
    }
}

fn one() -> u32 {
    1
}

/// The connection a measured request went out on (`Measurement::connection`): each one that of
/// a request that can read no stray.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionUse {
    /// A connection that had carried no request, opened before the timed window.
    NewBeforeWindow,
    /// A connection opened for this request inside the timed window (connect and TLS in TTFT).
    NewInWindow,
    /// A stream of an HTTP/2 connection: its reply carries its stream's id.
    Http2Stream,
}

/// Where a warm restore read the saved session from (`Measurement::page_cache`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PageCache {
    /// The saved file was dropped from the OS page cache before the restore: it read the disk.
    Evicted,
    /// Bench could not reach the saved file: the restore may have read it from memory.
    Unknown,
    /// The saved file was still in memory when the restore was sent (its filesystem keeps files
    /// in memory, or the kernel kept its pages): the restore read memory, not the disk.
    Memory,
}

impl PageCache {
    /// The most of a saved file (percent of its pages) that may still be in the page cache after
    /// the drop for its restore to count as a disk read. A drop that works leaves 0%; a file on
    /// tmpfs stays at 100%. The margin covers pages read back between the drop and the restore
    /// (readahead by another reader of the directory).
    pub const MAX_RESIDENT_PCT: f64 = 10.0;

    /// The label a restore earns from the share of its file still cached after the drop (None:
    /// the kernel would not say, and the drop is taken as done).
    pub fn after_drop(resident_pct: Option<f64>) -> PageCache {
        match resident_pct {
            Some(pct) if pct > Self::MAX_RESIDENT_PCT => PageCache::Memory,
            _ => PageCache::Evicted,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PageCache::Evicted => "evicted",
            PageCache::Unknown => "unknown",
            PageCache::Memory => "memory",
        }
    }
}

/// An unmeasured turn of a hot conversation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnSummary {
    pub turn: u32,
    /// `--think-time`: the pause between the previous turn's answer and this turn's send, as the
    /// clock measured it (absent for turn 1 and without a think time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub error: Option<ErrorInfo>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CacheEvidence {
    /// Where the numbers came from: "usage.prompt_tokens_details", "timings", "anthropic.usage", ...
    pub source: String,
    /// Prompt tokens served from a cache.
    pub cached_tokens: Option<u64>,
    /// Prompt tokens the server had to compute.
    pub prompt_evaluated_tokens: Option<u64>,
    /// The server's own record of this session's cache just before the measured request (the
    /// preset's `session_state`, e.g. agent-memory's `/v1/agents/list`); absent where the preset
    /// reads none. With it, the verdict also needs the tier the claimed state implies
    /// (`quality::confirm_cache_state`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_before: Option<Box<SessionCache>>,
    /// The same record just after the measured request, before the session's cleanup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_after: Option<Box<SessionCache>>,
}

/// One session's cache as the server's own state listed it at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionCache {
    /// Where the server held the session's cache then.
    pub tier: SessionTier,
    /// Tokens the server said the session's cache held; null where it did not say (agent-memory
    /// says 0 for a session on disk only, so bench keeps null there).
    pub tokens: Option<u64>,
    /// Bytes of the session's cache file the server reported; null where it reports none. A
    /// session listed on disk with a 0-byte file is a stale entry (agent-memory lists sessions
    /// whose file an admin clear deleted), not a cache on disk.
    pub file_bytes: Option<u64>,
}

/// Where a server held a session's cache (`SessionCache::tier`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionTier {
    /// Not listed: nothing cached for this session.
    #[default]
    Absent,
    /// In memory (agent-memory's "hot").
    InMemory,
    /// On disk only, not in memory (agent-memory's "warm").
    OnDisk,
}

impl SessionTier {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionTier::Absent => "absent",
            SessionTier::InMemory => "in_memory",
            SessionTier::OnDisk => "on_disk",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct QualityFlag {
    /// Stable snake_case code, e.g. "usage_missing".
    pub flag: QualityCode,
    /// A short human explanation with the numbers.
    pub reason: String,
    /// Whether this flag makes quality_ok false.
    pub fails_gate: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThermalRecord {
    /// "probe", "fixed" or "off".
    pub policy: PolicyKind,
    pub baseline_tps: Option<f64>,
    pub probe_tps: Vec<f64>,
    pub cooldown_s: f64,
    pub recovered: bool,
    pub before: Option<Box<serde_json::Value>>,
    pub after: Option<Box<serde_json::Value>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PhysicsRecord {
    pub decode_ceiling_tps: Option<f64>,
    pub decode_fraction: Option<f64>,
    pub prefill_ceiling_tps: Option<f64>,
    pub prefill_fraction: Option<f64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// TCP connect failed (server down, crashed, wrong port).
    Connect,
    /// `--request-timeout` elapsed.
    Timeout,
    /// Non-2xx HTTP status.
    HttpStatus,
    /// A 2xx stream that carried an `{"error": ...}` object.
    StreamError,
    /// The stream ended without its terminator (`[DONE]` / `message_stop`).
    StreamTruncated,
    /// The body could not be understood (bad JSON, wrong shape).
    Protocol,
    /// The prompt could not be sized to the nominal context.
    PromptSize,
    /// A preset action (reset, evict, reload, delete) failed.
    PresetAction,
    /// The preset cannot produce this cache state honestly (e.g. warm without an evict action).
    Unsupported,
    /// Anything else the transport reported.
    Transport,
}

impl ErrorKind {
    /// The record's name of the kind (its serde name), for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::HttpStatus => "http_status",
            ErrorKind::StreamError => "stream_error",
            ErrorKind::StreamTruncated => "stream_truncated",
            ErrorKind::Protocol => "protocol",
            ErrorKind::PromptSize => "prompt_size",
            ErrorKind::PresetAction => "preset_action",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Transport => "transport",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorInfo {
    pub kind: ErrorKind,
    pub message: String,
    pub http_status: Option<u16>,
}

impl ErrorInfo {
    /// The message passes through `secrets::redact`: it is often built from a server's answer,
    /// and a server may echo the API key or an admin key back.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ErrorInfo { kind, message: crate::secrets::redact(&message.into()), http_status: None }
    }
}

/// decode_tps = (output_tokens - 1) / ((e2e_ms - ttft_ms) / 1000). The first token's time belongs
/// to prefill, so it is excluded; null when the interval or the count cannot support a rate.
pub fn decode_tps(output_tokens: Option<u64>, ttft_ms: Option<f64>, e2e_ms: Option<f64>) -> Option<f64> {
    let (out, ttft, e2e) = (output_tokens?, ttft_ms?, e2e_ms?);
    let decode_ms = e2e - ttft;
    if out < 2 || decode_ms <= 0.0 {
        return None;
    }
    Some((out - 1) as f64 / (decode_ms / 1000.0))
}

/// prefill_tps = input_tokens / (ttft_ms / 1000).
pub fn prefill_tps(input_tokens: Option<u64>, ttft_ms: Option<f64>) -> Option<f64> {
    let (input, ttft) = (input_tokens?, ttft_ms?);
    if input == 0 || ttft <= 0.0 {
        return None;
    }
    Some(input as f64 / (ttft / 1000.0))
}

/// The first `OUTPUT_SAMPLE_CHARS` characters (not bytes: never split a UTF-8 sequence),
/// redacted before the cut: a server may repeat a key in its completion.
pub fn output_sample(text: &str) -> String {
    crate::secrets::redact_prefix(text, OUTPUT_SAMPLE_CHARS)
}

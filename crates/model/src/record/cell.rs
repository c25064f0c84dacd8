//! The key of a matrix cell and its parts (scenario, cache state, mode): what every record is
//! measured under, the merge key, and the one label of a cell in messages.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    #[default]
    Cold,
    Warm,
    Hot,
    /// A batch of `batch_size` requests released together.
    Concurrent,
    /// User B sent `stagger_delay_ms` after user A, while A runs.
    StaggeredBatched,
    /// User B sent after user A has finished: the twin that shows what batching buys.
    StaggeredSequential,
    /// `bench soak`: N clients at once, iteration after iteration (stability and correctness).
    Soak,
    /// `bench load`: requests at Poisson arrival instants of an offered rate (run = the rate's
    /// position in `--rates`, request_index = the arrival's position in its schedule).
    Load,
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum CacheState {
    #[default]
    Cold,
    Warm,
    Hot,
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum Mode {
    #[default]
    #[serde(rename = "streaming")]
    Streaming,
    #[serde(rename = "non-streaming")]
    NonStreaming,
}

impl Scenario {
    /// The scenario of a matrix cell: the cache state, or concurrent for batches.
    pub fn of(cache_state: CacheState, batch_size: u32) -> Scenario {
        match (batch_size > 1, cache_state) {
            (true, _) => Scenario::Concurrent,
            (false, CacheState::Cold) => Scenario::Cold,
            (false, CacheState::Warm) => Scenario::Warm,
            (false, CacheState::Hot) => Scenario::Hot,
        }
    }

    /// A staggered pair (user B after or while user A runs): its records are pairs, judged by B's
    /// wait, never by one request's TTFT.
    pub fn is_staggered(self) -> bool {
        matches!(self, Scenario::StaggeredBatched | Scenario::StaggeredSequential)
    }

    /// A scenario whose cells may be in any cache state (a batch, a soak, a load level): its label
    /// names the state beside it.
    fn holds_any_cache_state(self) -> bool {
        matches!(self, Scenario::Concurrent | Scenario::Soak | Scenario::Load)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::Cold => "cold",
            Scenario::Warm => "warm",
            Scenario::Hot => "hot",
            Scenario::Concurrent => "concurrent",
            Scenario::StaggeredBatched => "staggered_batched",
            Scenario::StaggeredSequential => "staggered_sequential",
            Scenario::Soak => "soak",
            Scenario::Load => "load",
        }
    }
}

impl CacheState {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheState::Cold => "cold",
            CacheState::Warm => "warm",
            CacheState::Hot => "hot",
        }
    }
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Streaming => "streaming",
            Mode::NonStreaming => "non-streaming",
        }
    }

    /// The mode in a table's narrow column: "stream", "non-str".
    pub fn short_label(self) -> &'static str {
        match self {
            Mode::Streaming => "stream",
            Mode::NonStreaming => "non-str",
        }
    }
}

impl std::fmt::Display for CacheState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for CacheState {
    type Err = crate::spec::SpecError;
    fn from_str(s: &str) -> Result<CacheState, Self::Err> {
        match s.trim() {
            "cold" => Ok(CacheState::Cold),
            "warm" => Ok(CacheState::Warm),
            "hot" => Ok(CacheState::Hot),
            other => Err(crate::spec::SpecError::Unknown {
                what: "cache state",
                value: other.into(),
                allowed: "cold, warm, hot",
            }),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Mode {
    type Err = crate::spec::SpecError;
    fn from_str(s: &str) -> Result<Mode, Self::Err> {
        match s.trim() {
            "streaming" | "stream" => Ok(Mode::Streaming),
            "non-streaming" | "non_streaming" | "nonstreaming" => Ok(Mode::NonStreaming),
            other => Err(crate::spec::SpecError::Unknown {
                what: "mode",
                value: other.into(),
                allowed: "streaming, non-streaming",
            }),
        }
    }
}

/// The cell key's fields, declared once: `CellKey` below and every record's twin, which reads them
/// inline (`wire`), are declared from this list. `with_cell_key_fields!(m! { input })` is
/// `m! { @cell { fields } input }`; a field's `=> Type` is how a twin reads it (`record_types!`).
macro_rules! with_cell_key_fields {
    ($m:ident ! { $($input:tt)* }) => {
        $m! {
            @cell {
                pub model: String,
                pub scenario: Scenario => UnitEnum<Scenario>,
                pub cache_state: CacheState => UnitEnum<CacheState>,
                pub mode: Mode => UnitEnum<Mode>,
                /// Nominal prompt size in tokens, chat template included (a dataset row's own count).
                pub context_tokens: u32,
                /// `--dataset`: the row measured (1-based, as run.json's `config.dataset.rows` lists it), so
                /// two rows of one length stay two cells in resume, merge and report. Absent for generated
                /// prompts.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub dataset_row: Option<u32>,
                pub batch_size: u32,
                /// 1-based repetition number.
                pub run: u32,
            }
            $($input)*
        }
    };
}

/// Declares the cell key from `with_cell_key_fields!`.
macro_rules! cell_key {
    (
        @cell { $( $(#[$fattr:meta])* pub $field:ident : $ty:ty $(=> $wire:ty)? , )* }
        $(#[$attr:meta])* pub struct $name:ident;
    ) => {
        $(#[$attr])*
        pub struct $name {
            $( $(#[$fattr])* pub $field: $ty, )*
        }
    };
}

with_cell_key_fields!(cell_key! {
    /// Identifies one cell of the matrix. It is also the merge key (with the record type and the
    /// request index), so it is flattened into every record.
    #[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
    pub struct CellKey;
});

/// The one label of a cell in every message (progress, verify's findings, compare's tables):
/// `gemma ctx 4096 warm streaming b1 run 2`; a scenario that holds any cache state names it
/// (`concurrent/warm`, `load/hot`, `soak/cold`). `{:#}` leaves the model out (progress lines and
/// compare's tables, where it is said once); run 0 stands for "every run" (cell-level findings,
/// compare's pooled cells).
impl std::fmt::Display for CellKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !f.alternate() {
            write!(f, "{} ", self.model)?;
        }
        match (self.context_tokens, self.dataset_row) {
            // A dataset row not counted yet (`bench plan` without a server): its length is unknown.
            (0, Some(_)) => f.write_str("ctx ? ")?,
            (tokens, _) => write!(f, "ctx {tokens} ")?,
        }
        if let Some(row) = self.dataset_row {
            write!(f, "row {row} ")?;
        }
        match self.scenario {
            s if s.holds_any_cache_state() => write!(f, "{}/{}", s.as_str(), self.cache_state)?,
            other => f.write_str(other.as_str())?,
        }
        write!(f, " {} b{} ", self.mode, self.batch_size)?;
        match self.run {
            0 => f.write_str("all runs"),
            n => write!(f, "run {n}"),
        }
    }
}

impl CellKey {
    /// The cell's matrix point: the cell at every run (run 0, which its label reads "all runs").
    pub fn point(&self) -> CellKey {
        CellKey { run: 0, ..self.clone() }
    }

    /// The key as merge lists it (`--expect`'s missing cells, a canonical file's replaced
    /// slots): `m concurrent/warm streaming 1024 b2`, scenario and cache state both spelled out, a
    /// dataset row's cell with its row (`m cold/cold streaming 300 row 4 b1`); the run is the
    /// caller's to add ("run 1", "r1"), as each file has always written it.
    pub fn merge_label(&self) -> MergeLabel<'_> {
        MergeLabel(self)
    }

    /// Every field of the key but the model, in the key's own order: with the model's rank in
    /// front it sorts and tells cells apart exactly as the key does (merge's and report's fast
    /// order, `results::combine`). The key is taken apart field by field, so a field added to it
    /// fails to build here until it is placed, instead of merging two cells silently.
    pub fn without_model(&self) -> CellRest {
        let CellKey { model: _, scenario, cache_state, mode, context_tokens, dataset_row, batch_size, run } =
            self;
        (*scenario, *cache_state, *mode, *context_tokens, *dataset_row, *batch_size, *run)
    }
}

/// `CellKey::without_model`: scenario, cache state, mode, context, dataset row, batch size, run.
pub type CellRest = (Scenario, CacheState, Mode, u32, Option<u32>, u32, u32);

/// `CellKey::merge_label`.
pub struct MergeLabel<'a>(&'a CellKey);

impl std::fmt::Display for MergeLabel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = self.0;
        write!(f, "{} {}/{} {} {} ", c.model, c.scenario.as_str(), c.cache_state, c.mode, c.context_tokens)?;
        // Rows of a dataset may share a length: the row tells their cells apart.
        if let Some(row) = c.dataset_row {
            write!(f, "row {row} ")?;
        }
        write!(f, "b{}", c.batch_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> CellKey {
        CellKey {
            model: "m".into(),
            scenario: Scenario::Concurrent,
            cache_state: CacheState::Warm,
            mode: Mode::Streaming,
            context_tokens: 1024,
            dataset_row: None,
            batch_size: 2,
            run: 3,
        }
    }

    /// The texts run.json, merge's lists and canonical files have always held.
    #[test]
    fn every_label_of_a_cell_comes_from_its_key() {
        let k = key();
        assert_eq!(k.to_string(), "m ctx 1024 concurrent/warm streaming b2 run 3");
        assert_eq!(format!("{k:#}"), "ctx 1024 concurrent/warm streaming b2 run 3");
        assert_eq!(format!("{:#}", k.point()), "ctx 1024 concurrent/warm streaming b2 all runs");
        assert_eq!(k.merge_label().to_string(), "m concurrent/warm streaming 1024 b2");
        assert_eq!(Mode::NonStreaming.short_label(), "non-str");
        let load =
            CellKey { scenario: Scenario::Load, cache_state: CacheState::Hot, batch_size: 1, ..k.clone() };
        assert_eq!(format!("{load:#}"), "ctx 1024 load/hot streaming b1 run 3");
        let pair = CellKey { scenario: Scenario::StaggeredBatched, cache_state: CacheState::Cold, ..k };
        assert_eq!(format!("{pair:#}"), "ctx 1024 staggered_batched streaming b2 run 3");
        assert!(pair.scenario.is_staggered() && !Scenario::Concurrent.is_staggered());
    }

    /// Two rows of a dataset at the same length are two cells, and every label says which.
    #[test]
    fn a_dataset_row_is_named_in_every_label_of_its_cell() {
        let row = |n| CellKey {
            dataset_row: Some(n),
            scenario: Scenario::Cold,
            cache_state: CacheState::Cold,
            ..key()
        };
        let (a, b) = (row(4), row(5));
        assert_eq!(a.merge_label().to_string(), "m cold/cold streaming 1024 row 4 b2");
        assert_ne!(a.merge_label().to_string(), b.merge_label().to_string());
        assert_ne!(a.to_string(), b.to_string());
    }
}

//! The matrix: which cells a sweep measures, in a deterministic, pinned order.
//!
//! Order (outermost first): batch size, context, cache state, mode, run; then the staggered pairs.
//! Runs are innermost so the repetitions of a cell are taken under the same conditions, and
//! contexts ascend so a server that falls over at long context has already given the short ones.
//!
//! With `--reuse-primes` the single-request cells of one (context, mode, run) are adjacent, cache
//! state innermost (cold, warm, hot): one session lifecycle measures them in turn
//! (src/runner/lifecycle.rs), so its turn 1 is prefilled once instead of once per state.

use ttft_model::record::{CacheState, CellKey, Mode, Scenario};

/// The parts of a config that define the matrix (also what `bench merge --expect` compares with).
#[derive(Clone, Debug)]
pub struct Matrix {
    pub contexts: Vec<u32>,
    pub modes: Vec<Mode>,
    pub cache_states: Vec<CacheState>,
    pub batch_sizes: Vec<u32>,
    pub runs: u32,
    /// Largest context measured with batch size > 1 (the origin ran batch 2 only up to 16K).
    pub concurrent_max_context: Option<u32>,
    /// (context, runs) of the staggered pair, when enabled.
    pub staggered: Option<(u32, u32)>,
    /// `--reuse-primes`: batch-1 cells ordered as session lifecycles (cache state innermost).
    pub reuse_primes: bool,
    /// `--dataset`: (row, token count) of every row measured, in file order. When given it
    /// replaces `contexts`: each row is a context of its own, named by its row.
    pub dataset_rows: Vec<(u32, u32)>,
}

impl Matrix {
    /// How many cells `cells` would return, computed without building them (so an absurd plan is
    /// refused before it allocates).
    pub fn cell_count(&self) -> usize {
        let per_context = self.cache_states.len() * self.modes.len() * self.runs as usize;
        let mut n = 0usize;
        for &batch_size in &self.batch_sizes {
            let contexts = self
                .points()
                .iter()
                .filter(|&&(c, _)| batch_size == 1 || self.concurrent_max_context.is_none_or(|max| c <= max))
                .count();
            n = n.saturating_add(contexts.saturating_mul(per_context));
        }
        n.saturating_add(self.staggered.map_or(0, |(_, runs)| 2 * runs as usize))
    }

    /// The context axis: (context, dataset row) of each point, rows replacing contexts when a
    /// dataset is measured.
    fn points(&self) -> Vec<(u32, Option<u32>)> {
        if self.dataset_rows.is_empty() {
            self.contexts.iter().map(|&c| (c, None)).collect()
        } else {
            self.dataset_rows.iter().map(|&(row, tokens)| (tokens, Some(row))).collect()
        }
    }

    /// Every cell for `model`, in execution order.
    pub fn cells(&self, model: &str) -> Vec<CellKey> {
        let mut cells = Vec::new();
        for &batch_size in &self.batch_sizes {
            for (context_tokens, dataset_row) in self.points() {
                if batch_size > 1 && self.concurrent_max_context.is_some_and(|max| context_tokens > max) {
                    continue;
                }
                let cell = |cache_state, mode, run| CellKey {
                    model: model.to_string(),
                    scenario: Scenario::of(cache_state, batch_size),
                    cache_state,
                    mode,
                    context_tokens,
                    dataset_row,
                    batch_size,
                    run,
                };
                if self.reuse_primes && batch_size == 1 {
                    for &mode in &self.modes {
                        for run in 1..=self.runs {
                            let mut states = self.cache_states.clone();
                            states.sort();
                            cells.extend(states.into_iter().map(|state| cell(state, mode, run)));
                        }
                    }
                    continue;
                }
                for &cache_state in &self.cache_states {
                    for &mode in &self.modes {
                        for run in 1..=self.runs {
                            cells.push(cell(cache_state, mode, run));
                        }
                    }
                }
            }
        }
        if let Some((context_tokens, runs)) = self.staggered {
            for run in 1..=runs {
                for scenario in [Scenario::StaggeredBatched, Scenario::StaggeredSequential] {
                    cells.push(CellKey {
                        dataset_row: None,
                        model: model.to_string(),
                        scenario,
                        cache_state: CacheState::Cold,
                        mode: Mode::Streaming,
                        context_tokens,
                        batch_size: 2,
                        run,
                    });
                }
            }
        }
        cells
    }
}

/// A session lifecycle: (context, dataset row, mode, run).
pub type LifecycleKey = (u32, Option<u32>, Mode, u32);

/// The session lifecycle a cell belongs to under `--reuse-primes`: its (context, mode, run), for
/// the single-request cache-state cells (and its dataset row); None for batches and staggered pairs.
pub fn lifecycle_key(cell: &CellKey) -> Option<LifecycleKey> {
    matches!(cell.scenario, Scenario::Cold | Scenario::Warm | Scenario::Hot).then_some((
        cell.context_tokens,
        cell.dataset_row,
        cell.mode,
        cell.run,
    ))
}

/// `b` continues the lifecycle `a` is in (same lifecycle, a later cache state).
pub fn continues_lifecycle(a: &CellKey, b: &CellKey) -> bool {
    lifecycle_key(a).is_some()
        && lifecycle_key(a) == lifecycle_key(b)
        && a.model == b.model
        && a.cache_state < b.cache_state
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix() -> Matrix {
        Matrix {
            contexts: vec![1024, 2048],
            modes: vec![Mode::Streaming, Mode::NonStreaming],
            cache_states: vec![CacheState::Cold, CacheState::Warm],
            batch_sizes: vec![1, 2],
            runs: 2,
            concurrent_max_context: Some(1024),
            staggered: Some((4096, 1)),
            reuse_primes: false,
            dataset_rows: vec![],
        }
    }

    fn label(c: &CellKey) -> String {
        format!(
            "b{} {} {}/{} {} r{}",
            c.batch_size,
            c.context_tokens,
            c.scenario.as_str(),
            c.cache_state.as_str(),
            c.mode.as_str(),
            c.run
        )
    }

    #[test]
    fn order_is_pinned() {
        let cells: Vec<String> = matrix().cells("m").iter().map(label).collect();
        let expected = [
            "b1 1024 cold/cold streaming r1",
            "b1 1024 cold/cold streaming r2",
            "b1 1024 cold/cold non-streaming r1",
            "b1 1024 cold/cold non-streaming r2",
            "b1 1024 warm/warm streaming r1",
            "b1 1024 warm/warm streaming r2",
            "b1 1024 warm/warm non-streaming r1",
            "b1 1024 warm/warm non-streaming r2",
            "b1 2048 cold/cold streaming r1",
            "b1 2048 cold/cold streaming r2",
            "b1 2048 cold/cold non-streaming r1",
            "b1 2048 cold/cold non-streaming r2",
            "b1 2048 warm/warm streaming r1",
            "b1 2048 warm/warm streaming r2",
            "b1 2048 warm/warm non-streaming r1",
            "b1 2048 warm/warm non-streaming r2",
            "b2 1024 concurrent/cold streaming r1",
            "b2 1024 concurrent/cold streaming r2",
            "b2 1024 concurrent/cold non-streaming r1",
            "b2 1024 concurrent/cold non-streaming r2",
            "b2 1024 concurrent/warm streaming r1",
            "b2 1024 concurrent/warm streaming r2",
            "b2 1024 concurrent/warm non-streaming r1",
            "b2 1024 concurrent/warm non-streaming r2",
            "b2 4096 staggered_batched/cold streaming r1",
            "b2 4096 staggered_sequential/cold streaming r1",
        ];
        assert_eq!(cells, expected);
        assert_eq!(matrix().cell_count(), expected.len());
    }

    #[test]
    fn reuse_primes_puts_each_lifecycle_together_cold_warm_hot() {
        let mut m = matrix();
        m.reuse_primes = true;
        // Given out of order: the lifecycle still runs cold, warm, hot.
        m.cache_states = vec![CacheState::Hot, CacheState::Cold, CacheState::Warm];
        let cells: Vec<String> = m.cells("m").iter().map(label).collect();
        assert_eq!(
            &cells[..7],
            [
                "b1 1024 cold/cold streaming r1",
                "b1 1024 warm/warm streaming r1",
                "b1 1024 hot/hot streaming r1",
                "b1 1024 cold/cold streaming r2",
                "b1 1024 warm/warm streaming r2",
                "b1 1024 hot/hot streaming r2",
                "b1 1024 cold/cold non-streaming r1",
            ]
        );
        // Batches keep their own order (each request of a batch has its own session).
        assert_eq!(cells[24], "b2 1024 concurrent/hot streaming r1");
        assert_eq!(m.cell_count(), cells.len());
        let mut plain = m.clone();
        plain.reuse_primes = false;
        let (mut a, mut b) = (m.cells("m"), plain.cells("m"));
        a.sort();
        b.sort();
        assert_eq!(a, b, "the same cells, only ordered differently");
    }

    #[test]
    fn origin_matrix_has_198_cells_plus_6_staggered() {
        let m = Matrix {
            contexts: vec![1024, 2048, 4096, 8192, 16384, 32768],
            modes: vec![Mode::Streaming, Mode::NonStreaming],
            cache_states: vec![CacheState::Cold, CacheState::Warm, CacheState::Hot],
            batch_sizes: vec![1, 2],
            runs: 3,
            concurrent_max_context: Some(16384),
            staggered: Some((4096, 3)),
            reuse_primes: false,
            dataset_rows: vec![],
        };
        let cells = m.cells("m");
        let staggered = cells
            .iter()
            .filter(|c| {
                c.scenario == Scenario::StaggeredBatched || c.scenario == Scenario::StaggeredSequential
            })
            .count();
        assert_eq!(cells.len() - staggered, 198);
        assert_eq!(staggered, 6);
    }
}

//! The real server side of the load engine: the sweep's own preparation (`measure::prepare_on`:
//! reset, priming and eviction for warm, turns 1 and 2 for hot), timed send (`measure::fire`,
//! with a warm reload inside the window) and finish (cleanup, cache-state evidence and gates via
//! `measure::finish`), on a session per arrival.

use std::sync::Arc;

use tokio::time::Instant;

use super::engine::Driver;
use crate::measuring::RunContext;
use crate::measuring::measure::{self, Fired, Ready};
use crate::meta::Arrival;
use crate::preset::Binding;
use ttft_model::record::{CacheState, CellKey, Measurement, Mode, Scenario};

pub(crate) struct Real {
    pub ctx: Arc<RunContext>,
    pub context_tokens: u32,
    /// The rate's position in `--rates` (the records' `run`).
    pub run: u32,
    /// The thermal record of the rate (the gate ran before it).
    pub thermal: Option<ttft_model::record::ThermalRecord>,
}

impl Real {
    /// Arrival `index`'s cell: with `--dataset`, row `index` mod n of the rows sampled, at its own
    /// length.
    fn cell(&self, index: u32, arrival: &Arrival) -> CellKey {
        let rows = self.ctx.config.dataset.as_ref().map_or(&[][..], |d| &d.rows[..]);
        let row = (!rows.is_empty()).then(|| &rows[index as usize % rows.len()]);
        CellKey {
            dataset_row: row.map(|r| r.row),
            model: self.ctx.model.clone(),
            scenario: Scenario::Load,
            cache_state: arrival.state,
            mode: Mode::Streaming,
            context_tokens: row.map_or(self.context_tokens, |r| r.tokens.unwrap_or(0)),
            batch_size: 1,
            run: self.run,
        }
    }
}

impl Driver for Real {
    type Ready = Ready;
    type Fired = Fired;

    async fn prepare(
        &self,
        index: u32,
        arrival: Arrival,
        slot: Option<u32>,
    ) -> Result<Ready, Box<Measurement>> {
        // new_session spreads sessions over slots by the number it is given: the leased slot.
        let mut session = self.ctx.new_session(slot.unwrap_or(index));
        if slot.is_none() {
            // A cold request that reuses nothing, on no slot of its own (see `holds_slot`).
            session.binding = Binding::Cold { pinned: false };
        }
        measure::prepare_on(&self.ctx, &self.cell(index, &arrival), index, session).await.map_err(|mut m| {
            m.thermal = self.thermal.clone();
            m
        })
    }

    async fn fire(&self, ready: &Ready, at: impl Future<Output = ()> + Send) -> (Instant, Fired) {
        let fired = measure::fire_at(&self.ctx, ready, at).await;
        (fired.sent_at(), fired)
    }

    async fn finish(&self, ready: Ready, fired: Fired, due: Instant) -> Measurement {
        let mut m = measure::finish(&self.ctx, ready, fired, Some(due), None).await;
        m.thermal = self.thermal.clone();
        m
    }

    fn holds_slot(&self, state: CacheState) -> bool {
        !(state == CacheState::Cold && self.ctx.preset.cold_needs_no_slot())
    }

    fn pin(&self, ready: &mut Ready, slot: u32) -> Result<(), String> {
        ready.session.slot = slot;
        ready.session.binding = Binding::Cold { pinned: true };
        self.ctx.preset.bind(&mut ready.request, &ready.session).map_err(|e| e.to_string())
    }

    fn blank(&self, index: u32, arrival: Arrival) -> Measurement {
        let mut m = measure::blank(&self.ctx, &self.cell(index, &arrival), index, "");
        m.thermal = self.thermal.clone();
        m
    }
}

/// Whether the preset pins a session's cache to a server slot (its request binding names
/// `{slot}`, like llama.cpp's `id_slot`): then sessions lease slots (see `engine`).
pub(crate) fn slot_bound(preset: &crate::preset::Preset) -> bool {
    let names = |v: &serde_json::Value| v.to_string().contains("{slot}");
    preset.request.body.values().any(names) || preset.request.headers.values().any(|h| h.contains("{slot}"))
}

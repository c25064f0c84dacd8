//! What a sweep will cost before it starts: a model of each cell's time from a few measured rates.
//!
//! A 32K cold cell costs ~30x a 1K one (prefill grows faster than linearly: attention), so cells
//! are weighted by their model cost, not counted. The same weights drive the sweep's progress bar,
//! so its ETA is right from the first cell, and `bench plan` prints the ETA before anything runs.
//!
//! Model, per request: TTFT(c) = a·c + b·c² for the c tokens it must prefill (a and b fitted to
//! two measured cold TTFTs, or to an earlier run's records), then (n - 1) / decode_tps for n output
//! tokens, plus a fixed overhead per request (tokenizer calls, preset actions, connection). A warm
//! request adds a reload, estimated as a tenth of its prefill unless measured; a hot turn 3
//! prefills only its new turn. Batches cost their B priming passes plus one concurrent release
//! (the requests share the server, so the release costs B prefills and one decode). Thermal
//! cooldowns add their minimum wait and one probe per cell.

use serde::{Deserialize, Serialize};

use crate::config::{SweepConfig, ThermalPolicy};
use ttft_model::record::{CacheState, CellKey, Record, Scenario};

/// Tokens a hot conversation's later turn adds besides the model's output: "Understood." (the
/// assistant's turn from turn 3 on) and the follow-up question ("Continue explaining in more
/// detail."), about ten tokens, with the chat template of their two messages. Turn 2 adds the
/// model's real output before them, which `cell_work_s` counts from the output tokens; the one
/// declaration of the hot turn, for the ETA and the shards' weights alike.
pub(crate) const HOT_TURN_TOKENS: f64 = 30.0;
/// Reload cost as a share of the prefill it replaces, where nothing better is known.
const RELOAD_SHARE: f64 = 0.1;

/// The rates the model is built from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerRates {
    /// Prefill seconds per token (linear term).
    pub prefill_s_per_token: f64,
    /// Prefill seconds per token squared (attention).
    pub prefill_s_per_token2: f64,
    pub decode_tps: f64,
    /// Fixed seconds per request besides prefill and decode.
    pub overhead_s: f64,
    /// One thermal probe's duration, seconds.
    pub probe_s: f64,
    /// Where the rates came from, for the output.
    pub source: String,
}

impl ServerRates {
    /// Prefill seconds for `tokens` tokens.
    pub(crate) fn prefill_s(&self, tokens: f64) -> f64 {
        (self.prefill_s_per_token * tokens + self.prefill_s_per_token2 * tokens * tokens).max(0.0)
    }

    /// Seconds of one request that prefills `prefill_tokens` and decodes `output_tokens`.
    pub(crate) fn request_s(&self, prefill_tokens: f64, output_tokens: u32) -> f64 {
        let decode = f64::from(output_tokens.saturating_sub(1)) / self.decode_tps.max(1e-9);
        self.prefill_s(prefill_tokens) + decode + self.overhead_s
    }

    /// Fits TTFT(c) = a·c + b·c² through two (tokens, seconds) points, both coefficients kept
    /// non-negative (noise must not make a longer prompt cheaper).
    pub(crate) fn fit_prefill(p1: (f64, f64), p2: (f64, f64)) -> (f64, f64) {
        let ((c1, t1), (c2, t2)) = (p1, p2);
        let det = c1 * c2 * c2 - c2 * c1 * c1;
        if c1 <= 0.0 || c2 <= 0.0 || det.abs() < 1e-9 {
            let c = c1.max(c2).max(1.0);
            return (t1.max(t2) / c, 0.0);
        }
        let a = (t1 * c2 * c2 - t2 * c1 * c1) / det;
        let b = (c1 * t2 - c2 * t1) / det;
        match (a >= 0.0, b >= 0.0) {
            (true, true) => (a, b),
            // Sublinear noise: a straight line through the longer point.
            (_, false) => (t2 / c2, 0.0),
            // All attention: a parabola through the longer point.
            (false, true) => (0.0, t2 / (c2 * c2)),
        }
    }

    /// Rates fitted to an earlier run's records: cold TTFT per prompt size, decode rate, and the
    /// per-request overhead left over.
    pub(crate) fn from_records(records: &[Record], source: &str) -> Option<ServerRates> {
        let mut by_context: std::collections::BTreeMap<u64, Vec<f64>> = Default::default();
        let mut decode = Vec::new();
        for r in records {
            let Record::Measurement(m) = r else { continue };
            if !r.is_good() {
                continue;
            }
            decode.extend(m.decode_tps);
            if m.cell.cache_state == CacheState::Cold
                && let (Some(ttft), Some(input)) = (m.ttft_ms, m.input_tokens)
            {
                by_context.entry(input).or_default().push(ttft / 1000.0);
            }
        }
        let points: Vec<(f64, f64)> =
            by_context.iter().filter_map(|(c, t)| Some((*c as f64, ttft_model::stats::median(t)?))).collect();
        let (first, last) = (points.first()?, points.last()?);
        let (a, b) = ServerRates::fit_prefill(*first, *last);
        Some(ServerRates {
            prefill_s_per_token: a,
            prefill_s_per_token2: b,
            decode_tps: ttft_model::stats::median(&decode)?,
            overhead_s: 0.01,
            probe_s: 0.5,
            source: source.to_string(),
        })
    }
}

/// Seconds one cell is expected to take, cooldown before it included.
pub(crate) fn cell_s(cell: &CellKey, config: &SweepConfig, rates: &ServerRates) -> f64 {
    let session = Session {
        output_tokens: config.output_tokens,
        turns: config.turns,
        think_s: config.think_time_ms / 1000.0,
    };
    cell_work_s(cell, &session, rates) + cooldown_s(&config.thermal, rates)
}

/// What a cell's sessions send besides its key: output tokens per request, the hot conversation's
/// turns and the pause before each later turn.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Session {
    pub output_tokens: u32,
    pub turns: u32,
    pub think_s: f64,
}

/// Seconds of a cell's requests, without the thermal gate's cooldown: the model `cell_s` and the
/// shards' weights (`shard::cell_cost`) share.
pub(crate) fn cell_work_s(cell: &CellKey, session: &Session, rates: &ServerRates) -> f64 {
    let c = f64::from(cell.context_tokens);
    let out = session.output_tokens;
    let single = match cell.cache_state {
        CacheState::Cold => rates.request_s(c, out),
        CacheState::Warm => {
            rates.request_s(c, out) + rates.prefill_s(c) * RELOAD_SHARE + rates.request_s(1.0, out)
        }
        CacheState::Hot => {
            // Turn 1, the unmeasured turns 2..N-1 (each prefills the previous answer and its new
            // turn), the measured turn N, and a think-time pause before each later turn.
            let turns = f64::from(session.turns.max(2));
            rates.request_s(c, out)
                + (turns - 2.0) * rates.request_s(f64::from(out) + HOT_TURN_TOKENS, out)
                + rates.request_s(HOT_TURN_TOKENS, out)
                + (turns - 1.0) * session.think_s
        }
    };
    match cell.scenario {
        Scenario::Concurrent => {
            let b = f64::from(cell.batch_size);
            // B sessions primed one by one, then released together: B prefills, one decode.
            let measured = prefill_of_measured(cell);
            let primed = single - rates.request_s(measured, out);
            b * primed + b * rates.prefill_s(measured) + rates.request_s(0.0, out)
        }
        Scenario::StaggeredBatched | Scenario::StaggeredSequential => 2.0 * rates.request_s(c, out),
        Scenario::Soak => f64::from(cell.batch_size) * rates.request_s(c, out),
        _ => single,
    }
}

/// Tokens the measured request of a cell prefills.
fn prefill_of_measured(cell: &CellKey) -> f64 {
    match cell.cache_state {
        CacheState::Cold => f64::from(cell.context_tokens),
        CacheState::Warm => 1.0,
        CacheState::Hot => HOT_TURN_TOKENS,
    }
}

fn cooldown_s(policy: &ThermalPolicy, rates: &ServerRates) -> f64 {
    match policy {
        ThermalPolicy::Off => 0.0,
        ThermalPolicy::Fixed { cooldown_s } => *cooldown_s,
        ThermalPolicy::Probe { min_cooldown_s, .. } => min_cooldown_s + rates.probe_s,
    }
}

/// Seconds the thermal gate is expected to add to `cells` cells: the policy's cooldown before
/// each (for `probe`, its minimum and one probe; a machine that does not recover at once costs
/// more probes, 5 s apart).
pub(crate) fn thermal_s(cells: usize, policy: &ThermalPolicy, rates: &ServerRates) -> f64 {
    cells as f64 * cooldown_s(policy, rates)
}

/// Where the gate buys nothing, and how to skip it.
const THERMAL_OFF_HINT: &str = "on a datacenter GPU with steady clocks, --thermal off skips it";

/// What the thermal gate is expected to cost, said before the first cell, and how to turn it off
/// where it buys nothing: a datacenter GPU holds its clocks under a benchmark's load, while the
/// gate's waits and probes can be most of a short sweep's time.
pub(crate) fn thermal_line(policy: &ThermalPolicy, cells: usize, rates: &ServerRates, eta_s: f64) -> String {
    let show =
        |s: f64| humantime::format_duration(std::time::Duration::from_secs(s.round() as u64)).to_string();
    let gate = match policy {
        ThermalPolicy::Off => return "thermal gate: off (no cooldown between cells)".to_string(),
        ThermalPolicy::Fixed { cooldown_s } => format!("fixed {cooldown_s}s before every cell"),
        ThermalPolicy::Probe { min_cooldown_s, tolerance, .. } => format!(
            "probe before every cell (min cooldown {min_cooldown_s}s, recovered within {:.0}% of the baseline)",
            tolerance * 100.0
        ),
    };
    let cost = thermal_s(cells, policy, rates);
    format!(
        "thermal gate: {gate}; expected to cost at least {} of the forecast {} ({:.0}%); {THERMAL_OFF_HINT}",
        show(cost),
        show(eta_s),
        100.0 * cost / eta_s.max(1e-9)
    )
}

/// Seconds a cell costs less when it continues a session lifecycle (`--reuse-primes`): warm
/// skips its priming request, hot its turn 1.
fn reused_s(cell: &CellKey, config: &SweepConfig, rates: &ServerRates) -> f64 {
    match cell.cache_state {
        CacheState::Cold => 0.0,
        CacheState::Warm | CacheState::Hot => {
            rates.request_s(f64::from(cell.context_tokens), config.output_tokens)
        }
    }
}

/// Every cell's expected seconds, in plan order, and the total.
pub(crate) fn estimate(cells: &[CellKey], config: &SweepConfig, rates: &ServerRates) -> (Vec<f64>, f64) {
    let costs: Vec<f64> = cells
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let reused = config.reuse_primes
                && i > 0
                && cells.get(i - 1).is_some_and(|p| ttft_results::plan::continues_lifecycle(p, c));
            cell_s(c, config, rates) - if reused { reused_s(c, config, rates) } else { 0.0 }
        })
        .collect();
    let total = costs.iter().sum();
    (costs, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates() -> ServerRates {
        ServerRates {
            prefill_s_per_token: 1e-4,
            prefill_s_per_token2: 1e-9,
            decode_tps: 100.0,
            overhead_s: 0.0,
            probe_s: 0.5,
            source: "test".into(),
        }
    }

    #[test]
    fn two_points_give_the_exact_parabola() {
        // t = 1e-4 c + 1e-9 c^2 at c = 1024 and 8192.
        let t = |c: f64| 1e-4 * c + 1e-9 * c * c;
        let (a, b) = ServerRates::fit_prefill((1024.0, t(1024.0)), (8192.0, t(8192.0)));
        assert!((a - 1e-4).abs() < 1e-12 && (b - 1e-9).abs() < 1e-15, "{a} {b}");
        // Noise that would make the parabola bend down falls back to a line through the far point.
        let (a, b) = ServerRates::fit_prefill((1024.0, 0.5), (8192.0, 1.0));
        assert_eq!((a, b), (1.0 / 8192.0, 0.0));
    }

    #[test]
    fn long_cold_cells_cost_more_than_linearly_and_cooldowns_add_up() {
        let mut config = crate::config::resolve(&{
            use clap::Parser;
            match crate::command::Cli::parse_from([
                "bench",
                "sweep",
                "--server",
                "http://x",
                "--thermal",
                "off",
            ])
            .command
            {
                crate::command::Command::Sweep(a) => *a,
                _ => unreachable!(),
            }
        })
        .unwrap();
        config.output_tokens = 101;
        let cell = |c: u32, state: CacheState| CellKey {
            scenario: Scenario::of(state, 1),
            cache_state: state,
            context_tokens: c,
            batch_size: 1,
            ..Default::default()
        };
        let r = rates();
        let cold_1k = cell_s(&cell(1024, CacheState::Cold), &config, &r);
        let cold_32k = cell_s(&cell(32768, CacheState::Cold), &config, &r);
        // 1 s of decode each; prefill 0.104 s vs 4.35 s.
        assert!((cold_1k - (0.1024 + 1024.0f64.powi(2) * 1e-9 + 1.0)).abs() < 1e-9);
        assert!(cold_32k / cold_1k > 4.0);
        assert!(
            cell_s(&cell(4096, CacheState::Warm), &config, &r)
                > cell_s(&cell(4096, CacheState::Cold), &config, &r)
        );
        config.thermal = ThermalPolicy::Probe { tolerance: 0.2, min_cooldown_s: 10.0, max_cooldown_s: 240.0 };
        let cooled = cell_s(&cell(1024, CacheState::Cold), &config, &r);
        assert!((cooled - cold_1k - 10.5).abs() < 1e-9);
    }

    #[test]
    fn a_reused_session_saves_warm_its_priming_and_hot_its_turn_1() {
        let mut config = crate::config::resolve(&{
            use clap::Parser;
            let argv = ["bench", "sweep", "--server", "http://x", "--thermal", "off", "--reuse-primes"];
            match crate::command::Cli::parse_from(argv).command {
                crate::command::Command::Sweep(a) => *a,
                _ => unreachable!(),
            }
        })
        .unwrap();
        assert!(config.reuse_primes);
        config.contexts = vec![32768];
        config.cache_states = vec![CacheState::Cold, CacheState::Warm, CacheState::Hot];
        config.runs = 1;
        let r = rates();
        let cells = config.matrix().cells("m");
        let (costs, reused) = estimate(&cells, &config, &r);
        let turn_1 = r.request_s(32768.0, config.output_tokens);
        let plain: Vec<f64> = cells.iter().map(|c| cell_s(c, &config, &r)).collect();
        assert_eq!(costs[0], plain[0], "cold is turn 1 itself");
        assert!((plain[1] - costs[1] - turn_1).abs() < 1e-9 && (plain[2] - costs[2] - turn_1).abs() < 1e-9);
        config.reuse_primes = false;
        let (_, fresh) = estimate(&config.matrix().cells("m"), &config, &r);
        assert!((fresh - reused - 2.0 * turn_1).abs() < 1e-9, "two prefills of 32K fewer");
    }
}

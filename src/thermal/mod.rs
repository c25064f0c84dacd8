//! The thermal gate: after each measurement, wait until the machine is back to its baseline speed
//! so heat from one measurement does not leak into the next.
//!
//! - `gate`: the pure decision (`decide`), the baseline and the `cooldown` loop that drives it
//!   with tokio time (tests run it under `tokio::time::pause()`, no real sleeping) and any probe;
//! - `host`: host and GPU telemetry (sysinfo, `nvidia-smi`) for a record's before/after;
//! - `kind`: the policy's name as records carry it.
//!
//! Runner usage:
//! ```ignore
//! let probes = [probe().await, probe().await, probe().await]; // after a discarded warm-up
//! let baseline = thermal::baseline(&probes.iter().flatten().copied().collect::<Vec<_>>());
//! let before = thermal::host_snapshot();
//! // ... measure ...
//! let mut rec = thermal::cooldown(&cfg.thermal, baseline, || probe(), |s| bar.set_message(s.to_string())).await;
//! rec.before = Some(before);
//! rec.after = Some(thermal::host_snapshot());
//! ```

pub(crate) mod gate;
pub(crate) mod host;

pub(crate) use gate::{baseline, cooldown, policy_kind};
pub(crate) use host::host_snapshot;

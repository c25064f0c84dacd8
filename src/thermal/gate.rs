//! The pure gate: the baseline, the decision (`decide`), and the `cooldown` loop that drives it.

use std::future::Future;

use tokio::time::{Duration, Instant};

use crate::config::ThermalPolicy;
use ttft_model::record::PolicyKind;
use ttft_model::record::ThermalRecord;

/// Seconds between probes once the minimum cooldown has passed (the origin used 5 s).
pub(crate) const PROBE_INTERVAL_S: f64 = 5.0;

/// Median of the baseline probes (the gate takes 3); None when no probe succeeded. Failed
/// (non-finite or non-positive) probes are left out rather than dragging the median down.
pub(crate) fn baseline(probes: &[f64]) -> Option<f64> {
    ttft_model::stats::median(&probes.iter().copied().filter(|p| *p > 0.0).collect::<Vec<f64>>())
}

/// The probe rate that counts as recovered.
pub(crate) fn recovery_threshold(baseline_tps: f64, tolerance: f64) -> f64 {
    (1.0 - tolerance) * baseline_tps
}

/// What the gate does next.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Decision {
    /// Sleep this long, then probe (probe policy) or re-decide (fixed policy).
    Wait {
        sleep_s: f64,
        then_probe: bool,
    },
    Finish {
        recovered: bool,
    },
}

/// One decision. `elapsed_s`: time since the measurement ended; `last_probe`: None before the
/// first probe, Some(None) for a failed probe, Some(Some(tps)) for a result.
///
/// `recovered` means "nothing says the machine is still hot": true for `off` and `fixed` (there
/// is nothing to judge; the record's `policy` says so), true for `probe` only when a probe reached
/// the threshold. Without a baseline the probe policy waits the minimum and reports not recovered.
/// A failed probe ends the wait at once, not recovered: a server that does not answer a short
/// request is a failed server, not a hot GPU, and waiting out the maximum cooldown for it made a
/// sweep whose server died take 723 s (with the gate off, under 10) to say so.
pub(crate) fn decide(
    policy: &ThermalPolicy,
    baseline_tps: Option<f64>,
    elapsed_s: f64,
    last_probe: Option<Option<f64>>,
) -> Decision {
    match *policy {
        ThermalPolicy::Off => Decision::Finish { recovered: true },
        ThermalPolicy::Fixed { cooldown_s } => {
            if elapsed_s < cooldown_s {
                Decision::Wait { sleep_s: cooldown_s - elapsed_s, then_probe: false }
            } else {
                Decision::Finish { recovered: true }
            }
        }
        ThermalPolicy::Probe { tolerance, min_cooldown_s, max_cooldown_s } => {
            let Some(base) = baseline_tps else {
                return if elapsed_s < min_cooldown_s {
                    Decision::Wait { sleep_s: min_cooldown_s - elapsed_s, then_probe: false }
                } else {
                    Decision::Finish { recovered: false }
                };
            };
            match last_probe {
                None => Decision::Wait { sleep_s: (min_cooldown_s - elapsed_s).max(0.0), then_probe: true },
                Some(Some(tps)) if tps >= recovery_threshold(base, tolerance) => {
                    Decision::Finish { recovered: true }
                }
                Some(None) => Decision::Finish { recovered: false },
                Some(_) if elapsed_s >= max_cooldown_s => Decision::Finish { recovered: false },
                Some(_) => Decision::Wait {
                    sleep_s: PROBE_INTERVAL_S.min(max_cooldown_s - elapsed_s),
                    then_probe: true,
                },
            }
        }
    }
}

/// The policy's name as records carry it.
pub(crate) fn policy_kind(policy: &ThermalPolicy) -> PolicyKind {
    match policy {
        ThermalPolicy::Probe { .. } => PolicyKind::Probe,
        ThermalPolicy::Fixed { .. } => PolicyKind::Fixed,
        ThermalPolicy::Off => PolicyKind::Off,
    }
}

/// Waits per `policy` after a measurement. `probe` runs one TPS probe (Err: why it failed);
/// `on_status` receives one line per step for a progress display. `before`/`after` telemetry is
/// the caller's to fill (see `host_snapshot`).
pub(crate) async fn cooldown<F, Fut>(
    policy: &ThermalPolicy,
    baseline_tps: Option<f64>,
    mut probe: F,
    mut on_status: impl FnMut(&str),
) -> ThermalRecord
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<f64, String>>,
{
    let start = Instant::now();
    let mut probe_tps = Vec::new();
    let mut last: Option<Option<f64>> = None;
    let recovered = loop {
        let elapsed = start.elapsed().as_secs_f64();
        match decide(policy, baseline_tps, elapsed, last) {
            Decision::Finish { recovered } => break recovered,
            Decision::Wait { sleep_s, then_probe } => {
                if sleep_s > 0.0 {
                    on_status(&format!("cooling down {sleep_s:.0}s (waited {elapsed:.0}s)"));
                    tokio::time::sleep(Duration::from_secs_f64(sleep_s)).await;
                }
                if then_probe {
                    let result = probe().await;
                    if let Ok(tps) = result {
                        probe_tps.push(tps);
                    }
                    let target = baseline_tps.zip(match policy {
                        ThermalPolicy::Probe { tolerance, .. } => Some(*tolerance),
                        _ => None,
                    });
                    on_status(&match (&result, target) {
                        (Ok(tps), Some((b, t))) => {
                            format!("probe {tps:.1} tok/s (need {:.1})", recovery_threshold(b, t))
                        }
                        (Ok(tps), None) => format!("probe {tps:.1} tok/s"),
                        (Err(why), _) => format!(
                            "probe failed ({why}): the server did not answer, so the gate stops waiting"
                        ),
                    });
                    last = Some(result.ok());
                }
            }
        }
    };
    if !recovered {
        on_status("not recovered: the next measurement may run hot");
    }
    ThermalRecord {
        policy: policy_kind(policy),
        baseline_tps,
        probe_tps,
        cooldown_s: start.elapsed().as_secs_f64(),
        recovered,
        before: None,
        after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROBE: ThermalPolicy =
        ThermalPolicy::Probe { tolerance: 0.20, min_cooldown_s: 10.0, max_cooldown_s: 240.0 };

    #[test]
    fn baseline_is_the_median_of_good_probes() {
        assert_eq!(baseline(&[30.0, 10.0, 20.0]), Some(20.0));
        assert_eq!(baseline(&[30.0, f64::NAN, 20.0, 0.0]), Some(25.0));
        assert_eq!(baseline(&[]), None);
        assert_eq!(recovery_threshold(50.0, 0.20), 40.0);
    }

    #[test]
    fn decisions_of_the_probe_policy() {
        let b = Some(50.0);
        assert_eq!(decide(&PROBE, b, 0.0, None), Decision::Wait { sleep_s: 10.0, then_probe: true });
        assert_eq!(decide(&PROBE, b, 10.0, Some(Some(40.0))), Decision::Finish { recovered: true });
        assert_eq!(
            decide(&PROBE, b, 10.0, Some(Some(39.9))),
            Decision::Wait { sleep_s: 5.0, then_probe: true }
        );
        assert_eq!(
            decide(&PROBE, b, 238.0, Some(Some(1.0))),
            Decision::Wait { sleep_s: 2.0, then_probe: true }
        );
        assert_eq!(decide(&PROBE, b, 10.0, Some(None)), Decision::Finish { recovered: false });
        assert_eq!(decide(&PROBE, b, 240.0, Some(Some(1.0))), Decision::Finish { recovered: false });
        assert_eq!(decide(&PROBE, None, 0.0, None), Decision::Wait { sleep_s: 10.0, then_probe: false });
        assert_eq!(decide(&PROBE, None, 10.0, None), Decision::Finish { recovered: false });
        let fixed = ThermalPolicy::Fixed { cooldown_s: 30.0 };
        assert_eq!(decide(&fixed, None, 0.0, None), Decision::Wait { sleep_s: 30.0, then_probe: false });
        assert_eq!(decide(&fixed, None, 30.0, None), Decision::Finish { recovered: true });
        assert_eq!(decide(&ThermalPolicy::Off, None, 0.0, None), Decision::Finish { recovered: true });
    }

    #[tokio::test(start_paused = true)]
    async fn cooldown_probes_until_recovered() {
        let mut answers = vec![30.0, 35.0, 38.0, 45.0].into_iter();
        let mut lines = Vec::new();
        let rec = cooldown(
            &PROBE,
            Some(50.0),
            || std::future::ready(answers.next().ok_or_else(|| "none left".to_string())),
            |s| lines.push(s.to_string()),
        )
        .await;
        assert!(rec.recovered);
        assert_eq!(rec.probe_tps, vec![30.0, 35.0, 38.0, 45.0]);
        // 10 s minimum, then three more probes 5 s apart.
        assert_eq!(rec.cooldown_s, 25.0);
        assert_eq!(rec.policy, PolicyKind::Probe);
        assert!(lines.iter().any(|l| l == "probe 45.0 tok/s (need 40.0)"), "{lines:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_ends_the_wait_at_once_not_recovered() {
        let mut answers = vec![Ok(30.0), Err("connection refused".to_string())].into_iter();
        let mut lines = Vec::new();
        let rec = cooldown(
            &PROBE,
            Some(50.0),
            || std::future::ready(answers.next().unwrap_or_else(|| panic!("no probe after a failed one"))),
            |s| lines.push(s.to_string()),
        )
        .await;
        assert!(!rec.recovered);
        assert_eq!(rec.probe_tps, vec![30.0]);
        assert_eq!(rec.cooldown_s, 15.0, "the minimum, one more probe, and no wait for the maximum");
        assert!(lines.iter().any(|l| l.contains("probe failed (connection refused)")), "{lines:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn cooldown_gives_up_at_the_cap() {
        let policy = ThermalPolicy::Probe { tolerance: 0.20, min_cooldown_s: 10.0, max_cooldown_s: 22.0 };
        let mut n = 0;
        let rec = cooldown(
            &policy,
            Some(50.0),
            || {
                n += 1;
                std::future::ready(Ok(20.0))
            },
            |_| {},
        )
        .await;
        assert!(!rec.recovered);
        assert_eq!(rec.cooldown_s, 22.0);
        assert_eq!(n, 4, "probes at 10, 15, 20 and 22 s");
    }

    #[tokio::test(start_paused = true)]
    async fn fixed_and_off_do_not_probe() {
        let rec = cooldown(
            &ThermalPolicy::Fixed { cooldown_s: 30.0 },
            None,
            || async { panic!("no probe") },
            |_| {},
        )
        .await;
        assert_eq!((rec.cooldown_s, rec.recovered, rec.policy), (30.0, true, PolicyKind::Fixed));
        let rec = cooldown(&ThermalPolicy::Off, Some(5.0), || async { panic!("no probe") }, |_| {}).await;
        assert_eq!((rec.cooldown_s, rec.probe_tps.len()), (0.0, 0));
    }
}

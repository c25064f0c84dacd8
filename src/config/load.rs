//! `bench load`'s settings, validated once before anything is created or contacted: how the load
//! is driven (offered rates, closed-loop levels, or a rate search), for how long, with what
//! warm-up and SLO target. Each value that is well-formed but cannot be measured honestly is
//! refused naming its flag (exit 2), as the sweep's settings are (`SweepConfig`). What needs the
//! server's preset (whether warm arrivals can be produced) is the verb's to check once the preset
//! is known.

use crate::cli::LoadArgs;
use crate::exit::Failure;

/// Arrivals one rate may have at most (rate x duration): the schedule is held in memory and in
/// run.json.
pub(crate) const MAX_ARRIVALS: usize = 1_000_000;

/// How the load is driven.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum LoadShape {
    /// `--rates R,...`: Poisson arrivals at each offered rate (requests/s), one after another.
    Open { rates: Vec<f64> },
    /// `--concurrency N,...`: N users each sending as soon as its last request ended.
    Closed { levels: Vec<u32> },
    /// `--rates auto`: two closed-loop passes, then at most `max_steps` offered rates.
    Search { max_steps: u32 },
}

impl LoadShape {
    /// A closed loop drives it (levels, or a search's passes): it has a warm-up.
    pub(crate) fn is_closed(&self) -> bool {
        !matches!(self, LoadShape::Open { .. })
    }
}

/// `bench load`'s settings besides the ones it shares with the sweep (`SweepConfig`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LoadSettings {
    pub shape: LoadShape,
    /// Each rate's or level's time (`--duration`), seconds.
    pub duration_s: f64,
    /// A closed loop's warm-up (default a tenth of the duration); None for an open loop.
    pub warmup_s: Option<f64>,
    /// The share of requests that must meet the SLO (`--slo-target`), in (0, 1].
    pub slo_target: f64,
}

impl LoadSettings {
    /// The settings `args` give, or the first one refused, naming its flag.
    pub(crate) fn from_args(args: &LoadArgs) -> Result<LoadSettings, Failure> {
        if let Some(c) = &args.sizes.contexts
            && c.0.len() != 1
        {
            return Err(Failure::usage(
                "--contexts: bench load measures one context at a time (e.g. --contexts 4k); run it once per context",
            ));
        }
        if !(args.slo_target > 0.0 && args.slo_target <= 1.0) {
            return Err(Failure::usage(format!(
                "--slo-target {}: must be above 0 and at most 1",
                args.slo_target
            )));
        }
        let duration_s = args.duration.secs();
        if duration_s <= 0.0 {
            return Err(Failure::usage("--duration: must be more than 0"));
        }
        let shape = match (&args.concurrency, args.rates.is_auto()) {
            (Some(levels), _) => LoadShape::Closed { levels: levels.0.clone() },
            (None, true) => LoadShape::Search { max_steps: args.search_steps },
            (None, false) => LoadShape::Open { rates: args.rates.0.iter().map(|r| r.0).collect() },
        };
        if let Some(w) = args.warmup_duration
            && w.secs() >= duration_s
        {
            return Err(Failure::usage(format!(
                "--warmup-duration {w}: must be shorter than --duration {}, or nothing is left to measure",
                args.duration
            )));
        }
        if args.warmup_duration.is_some() && !shape.is_closed() {
            return Err(Failure::usage(
                "--warmup-duration: only a closed loop (--concurrency, or the passes of --rates auto) has a warm-up; an open loop's rate starts with its pipeline full",
            ));
        }
        if let LoadShape::Open { rates } = &shape {
            for (r, rate) in args.rates.0.iter().zip(rates) {
                let n = rate * duration_s;
                if n > MAX_ARRIVALS as f64 / 2.0 {
                    return Err(Failure::usage(format!(
                        "--rates {r} x --duration {}: about {n:.0} arrivals, more than one run can hold",
                        args.duration
                    )));
                }
            }
        }
        let warmup_s =
            shape.is_closed().then(|| args.warmup_duration.map_or(duration_s / 10.0, |w| w.secs()));
        Ok(LoadSettings { shape, duration_s, warmup_s, slo_target: args.slo_target })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Load {
        #[command(flatten)]
        args: LoadArgs,
    }

    fn settings(flags: &[&str]) -> Result<LoadSettings, String> {
        let argv = ["load", "--server", "http://127.0.0.1:1"].iter().chain(flags);
        let args = Load::try_parse_from(argv).map_err(|e| e.to_string())?.args;
        LoadSettings::from_args(&args).map_err(|f| f.to_string())
    }

    #[test]
    fn each_shape_gets_its_warm_up_and_the_open_loop_none() {
        let open = settings(&["--rates", "1,2", "--duration", "10s"]).unwrap();
        assert_eq!((open.shape, open.warmup_s), (LoadShape::Open { rates: vec![1.0, 2.0] }, None));
        let closed = settings(&["--concurrency", "1,4", "--duration", "20s"]).unwrap();
        assert_eq!(closed.shape, LoadShape::Closed { levels: vec![1, 4] });
        assert!(closed.warmup_s.is_some_and(|w| (w - 2.0).abs() < 1e-9), "a tenth of --duration");
        let search = settings(&["--rates", "auto", "--search-steps", "3"]).unwrap();
        assert_eq!(search.shape, LoadShape::Search { max_steps: 3 });
    }

    #[test]
    fn what_cannot_be_measured_is_refused_naming_its_flag() {
        for (flags, says) in [
            (&["--contexts", "1k,2k"][..], "--contexts"),
            (&["--slo-target", "1.5"][..], "--slo-target 1.5"),
            (&["--duration", "0s"][..], "--duration"),
            (
                &["--concurrency", "2", "--duration", "2s", "--warmup-duration", "2s"][..],
                "must be shorter than --duration",
            ),
            (&["--rates", "1,2", "--warmup-duration", "1s"][..], "only a closed loop"),
            (&["--rates", "100000", "--duration", "60s"][..], "more than one run can hold"),
        ] {
            let refused = settings(flags).map(|_| ()).unwrap_err();
            assert!(refused.contains(says), "{flags:?}: {refused}");
        }
    }
}

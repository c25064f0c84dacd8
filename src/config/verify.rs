//! `bench verify`'s settings: what its rules judge with, validated once. The verb builds them from
//! its flags (`from_args`); the HTML report, which runs the same rules on its inputs, takes the
//! defaults (`Default`), so the two agree on every finding and the report never forms a command line
//! of verify's to learn them (a flag of verify's renamed would have broken it at run time).

use crate::cli::VerifyArgs;
use crate::exit::Failure;
use ttft_results::physics::{self, Hardware, ModelProfile};

/// `--min-warm-speedup`: warm at least this much faster than cold where physics cannot say more.
pub(crate) const DEFAULT_MIN_WARM_SPEEDUP: f64 = 1.5;
/// `--storage-gbps`: deliberately modest (an H200 host's disk read its slot file at 1.44 GB/s), so
/// a slower guess only makes "cache broken" harder to raise.
pub(crate) const DEFAULT_STORAGE_GBPS: f64 = 2.0;

/// What verify's rules judge with besides the records.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct VerifySettings {
    pub min_warm_speedup: f64,
    pub storage_gbps: f64,
    /// The hardware the ceilings use, from the physics flags (None: each input's run.json).
    pub hardware: Option<Hardware>,
    /// The model profile from the physics flags (None: run.json, else the built-in table).
    pub model: Option<ModelProfile>,
}

impl Default for VerifySettings {
    fn default() -> VerifySettings {
        VerifySettings {
            min_warm_speedup: DEFAULT_MIN_WARM_SPEEDUP,
            storage_gbps: DEFAULT_STORAGE_GBPS,
            hardware: None,
            model: None,
        }
    }
}

impl VerifySettings {
    /// The settings `args` give, each bound checked against the flag that set it (exit 2).
    pub(crate) fn from_args(args: &VerifyArgs) -> Result<VerifySettings, Failure> {
        let defaults = VerifySettings::default();
        let min_warm_speedup = args.min_warm_speedup.unwrap_or(defaults.min_warm_speedup);
        let storage_gbps = args.storage_gbps.unwrap_or(defaults.storage_gbps);
        // (flag, value, largest sane value)
        for (flag, v, max) in
            [("--min-warm-speedup", min_warm_speedup, 1000.0), ("--storage-gbps", storage_gbps, 100_000.0)]
        {
            if !(v.is_finite() && v > 0.0) {
                return Err(Failure::usage(format!("{flag} {v} must be more than 0")));
            }
            if v > max {
                return Err(Failure::usage(format!("{flag} {v} is not plausible (at most {max})")));
            }
        }
        let p = &args.physics;
        let hardware = physics::resolve_hardware(p.hardware.as_deref(), p.bandwidth_gbps, p.tflops)?;
        let model =
            physics::resolve_model(p.model_bytes.as_deref(), p.params.as_deref(), p.model_file.as_deref())?;
        Ok(VerifySettings { min_warm_speedup, storage_gbps, hardware, model })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Verify {
        #[command(flatten)]
        args: VerifyArgs,
    }

    /// The defaults verify's own flags state in --help are the ones its settings use.
    #[test]
    fn the_help_states_the_defaults_the_settings_use() {
        let help = <Verify as clap::CommandFactory>::command().render_long_help().to_string();
        for (flag, v) in
            [("--min-warm-speedup", DEFAULT_MIN_WARM_SPEEDUP), ("--storage-gbps", DEFAULT_STORAGE_GBPS)]
        {
            let text = &help[help.find(flag).unwrap_or_else(|| panic!("{flag} missing: {help}"))..];
            let next = text[2..].find("--").map_or(text.len(), |i| i + 2);
            assert!(text[..next].contains(&format!("[default: {v}]")), "{flag}: {}", &text[..next]);
        }
        let given = Verify::try_parse_from(["verify", "run"]).map(|v| VerifySettings::from_args(&v.args));
        assert_eq!(given.ok().and_then(Result::ok), Some(VerifySettings::default()));
    }

    #[test]
    fn a_bound_is_refused_naming_its_flag() {
        for (argv, says) in [
            (&["verify", "run", "--min-warm-speedup", "0"][..], "--min-warm-speedup 0 must be more than 0"),
            (&["verify", "run", "--storage-gbps", "1e9"][..], "--storage-gbps 1000000000 is not plausible"),
        ] {
            let args = Verify::try_parse_from(argv).map(|v| v.args).ok();
            let err = args.map(|a| VerifySettings::from_args(&a).map(|_| ()));
            let message = match err {
                Some(Err(f)) => f.to_string(),
                other => panic!("{argv:?}: {other:?}"),
            };
            assert!(message.contains(says), "{message}");
        }
    }
}

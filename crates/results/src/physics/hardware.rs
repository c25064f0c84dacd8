//! Hardware profiles: peak memory bandwidth and dense fp16 compute, kept as data (`hardware.toml`,
//! each device with the vendor document its figures come from; docs/hardware.md) so a new device
//! is a table row, not code.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::error::PhysicsError;

const TABLE: &str = include_str!("hardware.toml");

/// One device of the table.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    pub label: String,
    /// Where the figures come from (the vendor datasheet or announcement, by name).
    pub source: String,
    /// Peak memory bandwidth, GB/s (the ceilings use this).
    pub bandwidth_gbps: f64,
    /// Dense (no 2:4 sparsity) fp16/bf16 TFLOP/s (the ceilings use this).
    pub tflops_fp16: f64,
    /// The vendor publishes no fp16 figure; ours is an estimate.
    #[serde(default)]
    pub compute_estimated: bool,
    /// What this project measured on the device: a note for readers, never a ceiling (a ceiling
    /// must be an upper bound; a measured copy or sum is not).
    #[serde(default)]
    pub measured_bandwidth_gbps: Option<f64>,
    #[serde(default)]
    pub measured_tflops_fp16: Option<f64>,
    /// How and where the measured figures were taken.
    #[serde(default)]
    pub measured_source: Option<String>,
    /// Substrings of a CPU brand or GPU name that identify the device (suggestions only).
    #[serde(default)]
    pub brands: Vec<String>,
}

#[derive(Deserialize)]
struct Table {
    device: Vec<Profile>,
}

/// Every known profile, in table order.
pub fn profiles() -> &'static [Profile] {
    static PROFILES: OnceLock<Vec<Profile>> = OnceLock::new();
    PROFILES.get_or_init(|| {
        // The table ships inside the binary and a unit test parses it, so a failure here is a
        // build defect, not bad user input.
        toml::from_str::<Table>(TABLE).map(|t| t.device).expect("embedded hardware.toml is valid")
    })
}

/// Looks a profile up by name or alias (case-insensitive).
pub fn find(name: &str) -> Option<&'static Profile> {
    let wanted = name.trim().to_ascii_lowercase();
    profiles().iter().find(|p| p.name == wanted || p.aliases.contains(&wanted))
}

/// `find`, or an error that lists every known name.
pub fn lookup(name: &str) -> Result<&'static Profile, PhysicsError> {
    find(name).ok_or_else(|| {
        let names: Vec<&str> = profiles().iter().map(|p| p.name.as_str()).collect();
        PhysicsError::UnknownHardware { name: name.to_string(), known: names.join(", ") }
    })
}

/// The profile whose brand string occurs in `brand` ("Apple M4 Pro" -> m4-pro). The longest match
/// wins and a match must end on a word boundary, so "Apple M4 Pro" is not taken for "Apple M4" and
/// "NVIDIA A100" not for "NVIDIA A10". The caller prints the suggestion; it is never applied silently.
pub fn suggest_hardware(cpu_brand: &str) -> Option<&'static Profile> {
    let hay = cpu_brand.to_ascii_lowercase();
    let mut best: Option<(&Profile, usize)> = None;
    for p in profiles() {
        for b in &p.brands {
            let needle = b.to_ascii_lowercase();
            if contains_word(&hay, &needle) && best.is_none_or(|(_, len)| needle.len() > len) {
                best = Some((p, needle.len()));
            }
        }
    }
    best.map(|(p, _)| p)
}

fn contains_word(hay: &str, needle: &str) -> bool {
    hay.match_indices(needle).any(|(i, _)| {
        let after = hay[i + needle.len()..].chars().next();
        after.is_none_or(|c| !c.is_ascii_alphanumeric())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_parses_and_holds_the_named_devices() {
        for name in [
            "m4-pro",
            "m4-max-40c",
            "m3-ultra",
            "h100-sxm",
            "h100-pcie",
            "h200",
            "a100-80gb-sxm",
            "rtx-4090",
            "mi300x",
        ] {
            assert!(find(name).is_some(), "{name}");
        }
        let m4 = lookup("M4-Pro").unwrap();
        assert_eq!(m4.bandwidth_gbps, 273.0);
        assert!(m4.compute_estimated);
        assert_eq!(lookup("h200").unwrap().tflops_fp16, 989.0);
        assert_eq!(lookup("m4-max").unwrap().name, "m4-max-40c");
        let names: Vec<&str> = profiles().iter().map(|p| p.name.as_str()).collect();
        let mut dedup = names.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), names.len(), "profile names are unique");
    }

    #[test]
    fn every_device_has_a_source_and_sane_numbers() {
        for p in profiles() {
            let name = &p.name;
            assert!(p.source.trim().len() > 20, "{name}: source {:?}", p.source);
            assert!((50.0..=20_000.0).contains(&p.bandwidth_gbps), "{name}: {} GB/s", p.bandwidth_gbps);
            assert!((1.0..=5_000.0).contains(&p.tflops_fp16), "{name}: {} TFLOP/s", p.tflops_fp16);
            // A device moves at most ~1 byte per 20 FLOPs of dense fp16 at worst (Apple) and ~1
            // per 400 at best (B200): outside that, a figure was mistyped by a factor.
            let flops_per_byte = p.tflops_fp16 * 1e12 / (p.bandwidth_gbps * 1e9);
            assert!((15.0..=500.0).contains(&flops_per_byte), "{name}: {flops_per_byte:.0} FLOP/byte");
            let measured = [p.measured_bandwidth_gbps, p.measured_tflops_fp16];
            assert_eq!(
                measured.iter().any(Option::is_some),
                p.measured_source.is_some(),
                "{name}: measured needs its source"
            );
            if let Some(m) = p.measured_bandwidth_gbps {
                assert!(m > 0.0 && m <= p.bandwidth_gbps, "{name}: measured {m} GB/s above spec");
            }
            if let Some(m) = p.measured_tflops_fp16 {
                assert!(m > 0.0 && m <= p.tflops_fp16, "{name}: measured {m} TFLOP/s above spec");
            }
            for alias in &p.aliases {
                assert!(
                    profiles().iter().all(|q| &q.name != alias),
                    "{name}: alias {alias} is another's name"
                );
            }
        }
        let h200 = lookup("h200").unwrap();
        assert_eq!((h200.measured_bandwidth_gbps, h200.measured_tflops_fp16), (Some(4214.0), Some(770.0)));
    }

    #[test]
    fn the_devices_people_benchmark_on_are_in_the_table() {
        for name in [
            "a100-40gb",
            "a100-40gb-sxm",
            "a100-40gb-pcie",
            "a100-80gb-pcie",
            "a100-80gb-sxm",
            "h100-sxm",
            "h100-pcie",
            "h200",
            "b200",
            "mi250x",
            "mi300x",
            "mi325x",
            "l4",
            "l40s",
            "a10g",
            "a10",
            "rtx-3090",
            "rtx-4090",
            "rtx-5090",
            "m1",
            "m1-pro",
            "m1-max",
            "m1-ultra",
            "m2",
            "m2-pro",
            "m2-max",
            "m2-ultra",
            "m3",
            "m3-pro",
            "m3-max",
            "m3-ultra",
            "m4",
            "m4-pro",
            "m4-max",
        ] {
            assert!(find(name).is_some(), "{name}");
        }
        assert_eq!(suggest_hardware("NVIDIA A10G").map(|p| p.name.as_str()), Some("a10g"));
        assert_eq!(suggest_hardware("NVIDIA A10").map(|p| p.name.as_str()), Some("a10"));
    }

    #[test]
    fn docs_list_every_profile() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/hardware.md");
        let doc = std::fs::read_to_string(path).unwrap_or_default();
        for p in profiles() {
            assert!(doc.contains(&format!("`{}`", p.name)), "docs/hardware.md lacks {}", p.name);
        }
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let err = lookup("m9-hyper").unwrap_err().to_string();
        assert!(err.contains("m9-hyper") && err.contains("m4-pro") && err.contains("h200"), "{err}");
    }

    #[test]
    fn suggestions_take_the_longest_whole_word_match() {
        assert_eq!(suggest_hardware("Apple M4 Pro").map(|p| p.name.as_str()), Some("m4-pro"));
        assert_eq!(suggest_hardware("Apple M4").map(|p| p.name.as_str()), Some("m4"));
        assert_eq!(suggest_hardware("Apple M1 Max").map(|p| p.name.as_str()), Some("m1-max"));
        assert_eq!(suggest_hardware("NVIDIA H200").map(|p| p.name.as_str()), Some("h200"));
        assert_eq!(suggest_hardware("NVIDIA A100-SXM4-80GB").map(|p| p.name.as_str()), Some("a100-80gb-sxm"));
        assert_eq!(suggest_hardware("NVIDIA A100 unknown variant"), None);
        assert_eq!(suggest_hardware("Intel(R) Xeon(R) Platinum 8480+"), None);
    }
}

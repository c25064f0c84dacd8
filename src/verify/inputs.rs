//! What verify knows about one input besides its records: the hardware and model the ceilings
//! use (flags first, then the input's run.json: the model profile the sweep recorded, else the
//! inputs it was given), and what run.json and the host say about them.

use serde::Deserialize;

use ttft_results::physics::{self, Hardware, ModelProfile, Profile, hardware};
use ttft_results::results::run_meta::PhysicsView;
use ttft_results::results::sources::Source;

/// The physics of one input.
pub(crate) struct InputPhysics {
    pub hardware: Option<Hardware>,
    /// The model given by flags or run.json (None: each record's model from the built-in table).
    pub model: Option<ModelProfile>,
    /// run.json's hardware name, kept only when flags chose the hardware (for hardware_mismatch).
    pub run_json_hardware: Option<String>,
    /// The host's CPU brand and the profile it suggests.
    pub host: Option<(String, &'static Profile)>,
    pub stored: StoredCeilings,
}

/// What the ceilings each record stored when it was measured (`physics`) are to verify.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredCeilings {
    /// Flags chose the hardware or the model: the stored ceilings are another machine's, and the
    /// flags' ceilings judge.
    Overridden,
    /// The runs' own physics, but the input's runs stated different physics (a merge of several):
    /// each record's stored fraction still says whether it beat the ceiling it was measured
    /// against, but the one physics verify resolves for the input is not each record's.
    Mixed,
    /// One physics for the whole input, the run's own: every stored ceiling must be the one it
    /// gives, or run.json's physics or the record were edited.
    Same,
}

/// Resolves the physics of `src`; what cannot be used is said in `notes`.
pub(crate) fn resolve<T>(
    src: &Source<T>,
    file: &str,
    flag_hw: Option<&Hardware>,
    flag_model: Option<&ModelProfile>,
    notes: &mut Vec<String>,
) -> InputPhysics {
    // run.json read back as a type: a renamed field fails to compile here, not silently.
    let meta_physics: Option<&PhysicsView> = src.run_meta.iter().find_map(|m| m.view.physics_inputs());
    let text = |f: fn(&PhysicsView) -> Option<&str>| meta_physics.and_then(f);
    let bandwidth = meta_physics.and_then(|m| m.bandwidth_gbps);
    let tflops = meta_physics.and_then(|m| m.tflops);
    let meta_hw = match physics::resolve_hardware(text(|m| m.hardware.as_deref()), bandwidth, tflops) {
        Ok(hw) => hw,
        Err(e) => {
            notes.push(format!("{file}: run.json physics unusable: {e}"));
            None
        }
    };
    let brand = src.run_meta.iter().find_map(|m| m.view.host_cpu_brand());
    let host = brand.and_then(|b| hardware::suggest_hardware(b).map(|p| (b.to_string(), p)));
    let hw = flag_hw.cloned().or(meta_hw.clone());
    if hw.is_none() {
        notes.push(format!(
            "{file}: no hardware known: decode/prefill ceiling rules skipped (give --hardware NAME, or --bandwidth-gbps and --tflops){}",
            host.as_ref().map_or(String::new(), |(b, p)| format!("; the host reports {b:?}: try --hardware {}", p.name))
        ));
    }
    // The profile the sweep recorded comes before its inputs: the GGUF it read stays on the
    // machine that measured, and verify anywhere must apply the same physics as there.
    let recorded = src.run_meta.iter().find_map(|m| m.view.recorded_model()).and_then(|v| {
        ModelProfile::deserialize(v)
            .map_err(|e| notes.push(format!("{file}: run.json physics.model unusable: {e}")))
            .ok()
    });
    let model = flag_model.cloned().or(recorded).or_else(|| {
        let file_path = meta_physics.and_then(|m| m.model_file.as_deref());
        match physics::resolve_model(
            text(|m| m.model_bytes.as_deref()),
            text(|m| m.params.as_deref()),
            file_path,
        ) {
            Ok(m) => m,
            Err(e) => {
                notes.push(format!("{file}: run.json model profile unusable: {e}"));
                None
            }
        }
    });
    let run_json_hardware = meta_hw.filter(|_| flag_hw.is_some()).map(|m| m.name);
    let stated = |m: &ttft_results::results::run_meta::SourceMeta| {
        (m.view.physics_inputs().cloned(), m.view.recorded_model().cloned())
    };
    let physics_stated: Vec<_> = src.run_meta.iter().map(stated).collect();
    let stored = if flag_hw.is_some() || flag_model.is_some() {
        StoredCeilings::Overridden
    } else if physics_stated.windows(2).any(|w| w[0] != w[1]) {
        StoredCeilings::Mixed
    } else {
        StoredCeilings::Same
    };
    InputPhysics { hardware: hw, model, run_json_hardware, host, stored }
}

impl InputPhysics {
    /// The profile of a record's model: the input's, else the built-in table's.
    pub(crate) fn model_for(&self, name: &str) -> Option<ModelProfile> {
        self.model.clone().or_else(|| physics::model::find_builtin(name).cloned())
    }

    /// Profiles of every model among `models` (sorted, unique); a note for each one missing
    /// where hardware is known (its ceiling rules are skipped).
    pub(crate) fn profiles(
        &self,
        file: &str,
        models: &[String],
        notes: &mut Vec<String>,
    ) -> Vec<ModelProfile> {
        let mut out = Vec::new();
        for name in models {
            match self.model_for(name) {
                Some(p) => out.push(p),
                None if self.hardware.is_some() => notes.push(format!(
                    "{file}: no model profile for {name:?}: ceiling rules skipped for it (give --model-bytes and --params, or --model-file)"
                )),
                None => {}
            }
        }
        out
    }
}

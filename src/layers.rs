//! The layer table: which top-level module may use which (docs/design.md#architecture).
//!
//! A module uses only modules of a lower rank, so data flows one way and no import cycle can form:
//! the verbs read and drive, the run document records, the services talk to a server, settings
//! are validated once, and the model and leaves below know nothing of flags or verbs. The
//! workspace's crates hold the coarse order (ttft-model below ttft-results and ttft-client, those
//! below ttft-bench; the compiler refuses a crate that names one above it); this table orders the
//! modules inside and across them. The unit test below reads every production source file of every
//! crate, its `crate::` and `ttft_*::` paths, and fails on one that points up the table, or across
//! the two verb groups (the reading verbs never drive a server, the driving verbs never read what
//! the reading verbs write).

/// Top-level modules by rank, highest first. A module may use only modules of a lower rank.
pub(crate) const LAYERS: &[(&str, u32)] = &[
    // the command line: every verb and its arguments
    ("command", 99),
    // `bench watch`: follows run directories and shows the driving verbs' live view of their
    // records (it reads files only, and uses neither group's verbs but their boards)
    ("watch", 97),
    // the scripted reference server (crate ttft-scripted): a server of its own, used by tests,
    // benchmarks and its binary
    ("scripted", 96),
    // verbs that read results
    ("compare", 95),
    ("report", 94),
    ("verify", 93),
    ("merge", 93),
    // verbs that drive a server
    ("load", 92),
    ("runner", 91),
    // the measuring core every driving verb drives: a run's life, one request measured, setup
    ("measuring", 88),
    // the live view of a run (terminal, redraw thread, the sweep's and soak's boards)
    ("live", 85),
    // the run document (run.json) and every section it holds
    ("meta", 80),
    // sweep services: which server is this (it picks the preset), then the rest
    ("detect", 77),
    ("prompt", 76),
    ("metrics", 76),
    ("preset", 75),
    ("server", 74),
    ("supervise", 73),
    ("thermal", 73),
    ("shard", 73),
    ("cost", 72),
    // settings: validated (config) over raw flags (cli)
    ("config", 61),
    ("cli", 60),
    // exit categories: every lower crate's errors convert here to the one map of exit codes
    ("exit", 55),
    // transport (crate ttft-client) and reading (crate ttft-results)
    ("client", 50),
    ("results", 49),
    ("store", 48),
    ("quality", 47),
    ("physics", 46),
    ("plan", 45),
    // prompts users bring (`--dataset`)
    ("dataset", 44),
    // the record model and the leaves (crate ttft-model)
    ("record", 30),
    ("spec", 10),
    ("stats", 10),
    // below the leaves that print (output, progress): they mask secrets in what they print
    ("secrets", 9),
    ("clock", 10),
    ("input_file", 10),
    ("page_cache", 10),
    // the terminal's leaves (ttft-bench): printing, progress lines and plot ticks
    ("output", 10),
    ("progress", 10),
    ("ticks", 10),
    // this table (ttft-bench)
    ("layers", 10),
];

/// Groups that never use each other, whatever their ranks.
pub(crate) const APART: &[(&[&str], &[&str])] =
    &[(&["compare", "report", "verify", "merge"], &["load", "runner"])];

/// The rank of a top-level module, None for one the table does not know.
pub(crate) fn rank(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, r)| *r)
}

/// Why `from` may not use `to`, or None when it may.
pub(crate) fn violation(from: &str, to: &str) -> Option<String> {
    let (Some(a), Some(b)) = (rank(from), rank(to)) else {
        return Some(format!("{from} -> {to}: a module missing from the layer table (src/layers.rs)"));
    };
    if APART
        .iter()
        .any(|(x, y)| (x.contains(&from) && y.contains(&to)) || (y.contains(&from) && x.contains(&to)))
    {
        return Some(format!("{from} -> {to}: the reading and the driving verbs never use each other"));
    }
    (b >= a).then(|| format!("{from} (rank {a}) -> {to} (rank {b}): a module uses only lower layers"))
}

#[cfg(test)]
mod tests;

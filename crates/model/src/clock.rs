//! Wall-clock stamps: the only place bench reads the time of day (durations use monotonic clocks,
//! docs/design.md#timing).

/// RFC 3339 UTC timestamp of now, to the millisecond.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// A run id that sorts by time, says what ran and is this process's own:
/// `20261122T031500Z-cold-7f3a`. The last part is 4 hex digits drawn afresh for every id, so two
/// sweeps started in the same second (a script, a cluster's tasks writing to one directory) get
/// two directories instead of the second being refused as an existing run.
pub fn new_run_id(label: &str) -> String {
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let compact: String = stamp.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    let suffix = format!("{:04x}", unique_bits() & 0xffff);
    if label.is_empty() { format!("{compact}-{suffix}") } else { format!("{compact}-{label}-{suffix}") }
}

/// Bits no other process, and no earlier call, is likely to share: the standard library's
/// per-process random hash keys over this process's id, the time to the nanosecond and a count
/// of calls.
fn unique_bits() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    h.write_u64(CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_compact_timestamps() {
        let id = new_run_id("cold");
        let (head, suffix) = id.rsplit_once('-').unwrap();
        assert!(head.ends_with("-cold"), "{id}");
        assert!(suffix.len() == 4 && suffix.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
        assert!(id.starts_with("20"), "{id}");
        assert!(!id.contains(':'), "{id}");
    }
}

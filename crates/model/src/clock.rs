//! Wall-clock stamps: the only place bench reads the time of day (durations use monotonic clocks,
//! docs/design.md#timing).

/// RFC 3339 UTC timestamp of now, to the millisecond.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// A run id that sorts by time and says what ran: `20261122T031500Z-cold`.
pub fn new_run_id(label: &str) -> String {
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let compact: String = stamp.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    if label.is_empty() { compact } else { format!("{compact}-{label}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_compact_timestamps() {
        let id = new_run_id("cold");
        assert!(id.ends_with("-cold"), "{id}");
        assert!(id.starts_with("20"), "{id}");
        assert!(!id.contains(':'), "{id}");
    }
}

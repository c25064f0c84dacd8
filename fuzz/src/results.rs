//! The result-file readers (`ttft_results::results::sources::from_bytes`, run.json): no panic on any
//! bytes, every error names the file and a line that exists, and what loads survives a write and
//! a re-read unchanged (a canonical file is a fixed point).

use ttft_results::results::sources;

/// Lines in `data` as a reader counts them (a last line without '\n' still counts).
fn lines(data: &[u8]) -> usize {
    data.split(|&b| b == b'\n').count()
}

/// `name`'s extension chooses the reader, as for a file on disk.
pub fn check_file(name: &str, data: &[u8]) {
    match sources::from_bytes(name, data) {
        Err(e) => {
            assert_eq!(e.file, name, "the error names another file: {e:?}");
            assert!(e.line <= lines(data), "line {} of a {}-line file: {e:?}", e.line, lines(data));
            assert!(!e.message.is_empty(), "an error without a message");
        }
        Ok(source) => {
            for record in &source.records {
                // A record that loads can be written back and read again as the same record.
                let line = serde_json::to_vec(record).expect("a loaded record serializes");
                let again = ttft_results::store::parse_record(&line).expect("a written record parses");
                assert_eq!(
                    serde_json::to_value(&again).ok(),
                    serde_json::to_value(record).ok(),
                    "a record changed on its way through a file"
                );
            }
        }
    }
}

pub fn check_run_json(data: &[u8]) {
    if let Err(e) = sources::read_run_json("run.json", data) {
        assert_eq!(e.file, "run.json");
        assert!(e.line <= lines(data), "line {} of a {}-line file: {e:?}", e.line, lines(data));
    }
}

/// One line through the hand reading of a measurement (`record::fast`) and through serde, at both
/// depths: where the hand reading reads the line, serde reads it too, to the same record (written
/// out alike, so -0.0 and 0.0 differ); everything else it leaves to serde. The unconverted reading
/// (merge's) and one converting some read the lines the lean one reads. A line serde reads as a
/// measurement has its token offsets read back (`fast::token_offsets_ms`, what report does with a
/// located record's text) as the timed reading keeps them, or declined.
pub fn check_record_line(data: &[u8]) {
    use ttft_model::record::fast::{self, Floats, Keep};
    use ttft_model::record::{LeanRecord, Record, TimedRecord};
    if let Ok(TimedRecord(Record::Measurement(timed))) = serde_json::from_slice::<TimedRecord>(data) {
        let mut offsets = Vec::new();
        if fast::token_offsets_ms(data, &mut offsets).is_some() {
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
            assert_eq!(bits(&offsets), bits(&timed.token_offsets_ms), "offsets read back apart");
        }
    }
    for keep in [Keep::Lean, Keep::Timed] {
        let Some(hand) = fast::measurement(data, keep) else { continue };
        let serde = match keep {
            Keep::Lean | Keep::Converting(_) => serde_json::from_slice::<LeanRecord>(data).map(|r| r.0),
            Keep::Timed => serde_json::from_slice::<TimedRecord>(data).map(|r| r.0),
        };
        let serde = serde.unwrap_or_else(|e| panic!("read by hand ({keep:?}), refused by serde: {e}"));
        assert_eq!(serde, hand, "{keep:?}: another record by hand");
        assert_eq!(
            serde_json::to_string(&serde).ok(),
            serde_json::to_string(&hand).ok(),
            "{keep:?}: written apart"
        );
    }
    // Merge's reading, its floats unconverted, and one converting some: the lines the lean
    // reading reads, and no other.
    let lean = fast::measurement(data, Keep::Lean).is_some();
    for floats in [Floats::NONE, Floats::of_members(&["ttft_ms", "thermal"])] {
        let converting = fast::measurement(data, Keep::Converting(floats));
        assert_eq!(converting.is_some(), lean, "read {floats:?} converted or lean only");
    }
}

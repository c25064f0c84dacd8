//! The hand-read records (`wire`) against the derived reading they replace (`Derived` below: the
//! record types with serde's derived reading, declared from the same field list as the record types
//! and their twins, flatten and internal tag included): the same records
//! from the fixtures and from generated records, and the same verdict (and message) on unknown,
//! missing, duplicated and mistyped fields and on a tag that comes late. On every line tried, the
//! lean reading (`LeanRecord`) accepts exactly what the full one does, and reads `Record::lean` of
//! it.

use std::path::Path;

use serde_json::{Value, json};

use super::wire::TAG;
use super::*;

/// `Record` as serde derives its reading: internally tagged, over the derived record types.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(tag = "record_type", rename_all = "snake_case")]
enum Derived {
    Measurement(Box<derived::Measurement>),
    Group(Box<derived::GroupRecord>),
    Staggered(Box<derived::StaggeredRecord>),
}

/// A serde message without its position (the two readers fail at different columns).
fn bare(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.find(" at line ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Both readers on one line: the same record (compared as the JSON it writes back) or both an
/// error, with the same message when `messages` (see the mistyped fields for when they differ).
fn agree(line: &str, messages: bool) -> Result<Value, String> {
    fast_tests::by_hand_agrees(line.as_bytes());
    let lean = serde_json::from_str::<LeanRecord>(line).map(|r| r.0);
    match (serde_json::from_str::<Record>(line), lean) {
        (Ok(full), Ok(lean)) => assert_eq!(full.lean(), lean, "lean reading of {line}"),
        (Err(_), Err(_)) => {}
        (full, lean) => panic!("{line}: full {:?} vs lean {:?}", full.map(|_| ()), lean.map(|_| ())),
    }
    let timed = serde_json::from_str::<TimedRecord>(line).map(|r| r.0);
    match (serde_json::from_str::<Record>(line), timed) {
        (Ok(full), Ok(timed)) => assert_eq!(full.timed(), timed, "timed reading of {line}"),
        (Err(_), Err(_)) => {}
        (full, timed) => panic!("{line}: full {:?} vs timed {:?}", full.map(|_| ()), timed.map(|_| ())),
    }
    let new = serde_json::from_str::<Record>(line);
    let old = serde_json::from_str::<Derived>(line);
    match (new, old) {
        (Ok(new), Ok(old)) => {
            let new = serde_json::to_value(&new).map_err(|e| e.to_string())?;
            assert_eq!(new, serde_json::to_value(&old).unwrap_or_default(), "different records from {line}");
            Ok(new)
        }
        (Err(new), Err(old)) => {
            if messages {
                assert_eq!(bare(&new), bare(&old), "different messages for {line}");
            }
            Err(bare(&new))
        }
        (new, old) => panic!("{line}: wire {:?} vs derived {:?}", new.map(|_| ()), old.map(|_| ())),
    }
}

fn same(line: &str) -> Result<Value, String> {
    agree(line, true)
}

pub(super) fn fixture_records() -> Vec<String> {
    // The fixtures are the workspace's (this crate is crates/model).
    let root = &Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut lines = Vec::new();
    let verify = root.join("tests/fixtures/verify");
    let mut paths: Vec<_> = std::fs::read_dir(&verify).unwrap().map(|e| e.unwrap().path()).collect();
    paths.extend(
        ["fuzz/corpus/results_jsonl/batch_partial", "fuzz/corpus/results_jsonl/three_records"]
            .map(|p| root.join(p)),
    );
    for path in paths.iter().filter(|p| p.extension().is_none_or(|e| e == "jsonl")) {
        let text = std::fs::read_to_string(path).unwrap();
        lines.extend(text.lines().filter(|l| !l.trim().is_empty()).map(str::to_string));
    }
    // The origin's files and the canonical seed, converted by their readers, as bench writes them.
    for (name, path) in [
        ("small_first.json", "tests/fixtures/origin/small_first.json"),
        ("small_rerun.json", "tests/fixtures/origin/small_rerun.json"),
        ("gemma.json", "fuzz/corpus/results_document/origin_gemma"),
        ("canonical.json", "fuzz/corpus/results_document/canonical"),
    ] {
        let bytes = std::fs::read(root.join(path)).unwrap();
        let source = ttft_results::results::sources::from_bytes(name, &bytes).unwrap();
        lines.extend(source.records.iter().map(|r| serde_json::to_string(r).unwrap()));
    }
    lines
}

#[test]
fn the_fixtures_read_the_same_as_through_the_derive() {
    let lines = fixture_records();
    assert!(lines.len() > 100, "{} fixture records", lines.len());
    for kind in ["measurement", "group", "staggered"] {
        let tag = format!("\"record_type\":\"{kind}\"");
        assert!(lines.iter().any(|l| l.replace(' ', "").contains(&tag)), "no {kind} among the fixtures");
    }
    for line in &lines {
        assert!(same(line).is_ok(), "{line}");
    }
}

/// Records with every field filled (and the load fields present), one of each type.
pub(super) fn full_records() -> Vec<Record> {
    let cell = CellKey {
        dataset_row: Some(3),
        model: "org/model \"quoted\" é".into(),
        scenario: Scenario::Concurrent,
        cache_state: CacheState::Warm,
        mode: Mode::NonStreaming,
        context_tokens: 4096,
        batch_size: 2,
        run: 3,
    };
    let flag = QualityFlag { flag: QualityCode::UsageMissing, reason: "r".into(), fails_gate: true };
    let thermal = ThermalRecord {
        policy: PolicyKind::Probe,
        baseline_tps: Some(45.5),
        probe_tps: vec![44.25, 1e-300],
        cooldown_s: 10.0,
        recovered: false,
        before: Some(Box::new(json!({"gpu_c": 71}))),
        after: Some(Box::new(json!("x"))),
    };
    let error =
        ErrorInfo { kind: ErrorKind::HttpStatus, message: "bad\nline".into(), http_status: Some(503) };
    let m = Measurement {
        schema_version: SCHEMA_VERSION,
        run_id: "r1".into(),
        cell: cell.clone(),
        request_index: 1,
        group_id: Some("g".into()),
        lifecycle_id: Some("tb-000000000001-0".into()),
        started_at: "2026-02-05T21:30:00.000Z".into(),
        nonce: "n".into(),
        send_lag_ms: Some(0.1),
        offered_rate_per_s: Some(2.5),
        scheduled_send_ms: Some(10.0),
        actual_send_ms: Some(10.5),
        prepare_late_ms: Some(0.0),
        concurrency: Some(4),
        user_id: Some(3),
        warmup: true,
        first_byte_ms: Some(1.0),
        first_event_ms: Some(2.0),
        ttft_ms: Some(3.000_000_000_000_4),
        e2e_ms: Some(1e6),
        token_offsets_ms: vec![3.0, 4.5, 123_456.789_012_345_6],
        input_tokens: Some(u64::MAX),
        output_tokens: Some(2),
        cached_tokens: Some(0),
        expected_input_tokens: Some(4096),
        delta_count: 2,
        decode_tps: Some(1.5),
        prefill_tps: None,
        max_tokens: 64,
        finish_reason: Some("length".into()),
        output_sample: "text".into(),
        reload_ms: Some(7.0),
        think_ms: Some(250.5),
        turns: vec![TurnSummary {
            turn: 1,
            ttft_ms: Some(1.0),
            error: Some(error.clone()),
            ..Default::default()
        }],
        cache_evidence: Some(CacheEvidence {
            source: "timings".into(),
            cached_tokens: Some(1),
            prompt_evaluated_tokens: None,
            session_before: Some(Box::new(SessionCache {
                tier: SessionTier::OnDisk,
                tokens: Some(0),
                file_bytes: Some(4096),
            })),
            session_after: Some(Box::new(SessionCache {
                tier: SessionTier::InMemory,
                tokens: Some(9),
                file_bytes: None,
            })),
        }),
        cache_state_confirmed: Some(false),
        server_timings: Some(Box::new(json!({"prompt_n": 5, "nested": {"a": [1, 2.5, "x"]}}))),
        server_stats: Some(Box::new(json!([1, 2]))),
        server_metrics: Some(Box::new(MetricsDelta {
            computed_tokens: Some(5.0),
            cached_tokens: None,
            counters: [("a".to_string(), 1.0)].into(),
        })),
        quality_ok: false,
        quality_flags: vec![flag.clone()],
        thermal: Some(thermal.clone()),
        physics: Some(PhysicsRecord { decode_ceiling_tps: Some(90.0), ..Default::default() }),
        error: Some(error.clone()),
        attempts: 2,
        unexpected_bytes_dropped: true,
        connection: Some(ConnectionUse::NewBeforeWindow),
        distinct_arrivals: Some(3),
        page_cache: Some(PageCache::Memory),
        page_cache_resident_pct: Some(97.5),
        saved_bytes: Some(4_300_000_000),
    };
    let g = GroupRecord {
        schema_version: SCHEMA_VERSION,
        run_id: "r1".into(),
        cell: cell.clone(),
        group_id: "g".into(),
        started_at: "t".into(),
        wall_ms: 5000.5,
        system_tps: Some(40.0),
        per_request_tps: Some(20.0),
        avg_ttft_ms: Some(900.0),
        avg_e2e_ms: Some(4900.0),
        total_output_tokens: 256,
        requests_ok: 1,
        requests_failed: 1,
        server_metrics: None,
        error: Some(error.clone()),
    };
    let s = StaggeredRecord {
        schema_version: SCHEMA_VERSION,
        run_id: "r1".into(),
        cell: CellKey { scenario: Scenario::StaggeredBatched, ..cell },
        started_at: "t".into(),
        stagger_delay_ms: Some(50.0),
        user_a_ttft_ms: Some(1.0),
        user_a_e2e_ms: Some(2.0),
        user_b_ttft_ms: Some(3.0),
        user_b_e2e_ms: Some(4.0),
        user_b_arrival_ms: Some(5.0),
        user_b_ttft_from_wall_start_ms: Some(6.0),
        overlapped: Some(true),
        overlap_ms: Some(7.0),
        total_wall_ms: Some(8.0),
        user_a_output_tokens: Some(9),
        user_b_output_tokens: Some(10),
        user_a_token_offsets_ms: vec![1.0],
        user_b_token_offsets_ms: vec![2.0, 3.0],
        system_tps: Some(11.0),
        quality_ok: true,
        quality_flags: vec![flag],
        thermal: Some(thermal),
        error: None,
        user_a_cache: Some(UserCache {
            input_tokens: Some(7),
            cache_evidence: Some(CacheEvidence {
                source: "session_state".into(),
                cached_tokens: Some(0),
                prompt_evaluated_tokens: Some(7),
                session_before: Some(Box::default()),
                session_after: None,
            }),
            cache_state_confirmed: Some(true),
        }),
        user_b_cache: Some(UserCache {
            input_tokens: None,
            cache_evidence: None,
            cache_state_confirmed: None,
        }),
    };
    vec![Record::Measurement(Box::new(m)), Record::Group(Box::new(g)), Record::Staggered(Box::new(s))]
}

#[test]
fn written_records_read_back_whole_and_the_same_as_through_the_derive() {
    let mut rng = crate::stats::Rng::new(9);
    let mut records = full_records();
    // Defaults (every optional field empty) and random numbers at full precision.
    records.push(Record::Measurement(Box::default()));
    records.push(Record::Group(Box::default()));
    records.push(Record::Staggered(Box::default()));
    for i in 0..200 {
        let mut m = Measurement { schema_version: SCHEMA_VERSION, request_index: i, ..Default::default() };
        m.ttft_ms = Some(rng.unit() * 1e4);
        m.token_offsets_ms = (0..rng.below(70)).map(|_| rng.unit() * 1e5).collect();
        m.cell.context_tokens = rng.next_u64() as u32;
        records.push(Record::Measurement(Box::new(m)));
    }
    for record in &records {
        let line = serde_json::to_string(record).unwrap();
        let back = same(&line).unwrap();
        // Exactly: serde_json is built to read back every float it writes (`float_roundtrip`).
        assert_eq!(back, serde_json::to_value(record).unwrap(), "{line}");
    }
}

/// A JSON object's members in the order written.
struct Ordered(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Ordered, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    out.push(entry);
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Each record's members as bench writes them (the tag first).
fn objects() -> Vec<(String, Vec<(String, Value)>)> {
    full_records()
        .iter()
        .map(|r| {
            let members: Ordered = serde_json::from_str(&serde_json::to_string(r).unwrap()).unwrap();
            (r.record_type().to_string(), members.0)
        })
        .collect()
}

fn line_of(members: &[(String, Value)]) -> String {
    let body: Vec<String> =
        members.iter().map(|(k, v)| format!("{}:{}", Value::String(k.clone()), v)).collect();
    format!("{{{}}}", body.join(","))
}

#[test]
fn a_missing_field_fails_exactly_where_the_schema_requires_it() {
    let schema = serde_json::to_value(schemars::schema_for!(Record)).unwrap();
    for (kind, members) in objects() {
        let def = match kind.as_str() {
            "measurement" => "Measurement",
            "group" => "GroupRecord",
            _ => "StaggeredRecord",
        };
        let required: Vec<&str> =
            schema["$defs"][def]["required"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(required.contains(&"model") && required.contains(&"schema_version"), "{required:?}");
        for i in 0..members.len() {
            let mut fewer = members.clone();
            let (key, _) = fewer.remove(i);
            let verdict = same(&line_of(&fewer));
            if key == "record_type" {
                assert_eq!(verdict, Err("missing field `record_type`".into()));
            } else if required.contains(&key.as_str()) {
                assert_eq!(verdict, Err(format!("missing field `{key}`")), "{kind} without {key}");
            } else {
                assert!(verdict.is_ok(), "{kind} without {key}: {verdict:?}");
            }
        }
    }
}

#[test]
fn unknown_duplicated_mistyped_fields_and_a_late_tag_read_as_through_the_derive() {
    for (kind, members) in objects() {
        assert_eq!(members[0].0, "record_type");
        let with = |extra: (&str, Value), at: usize| {
            let mut m = members.clone();
            m.insert(at.min(m.len()), (extra.0.to_string(), extra.1));
            line_of(&m)
        };
        // Unknown fields are ignored, wherever they are.
        assert!(same(&with(("future_field", json!({"a": [1]})), 1)).is_ok());
        assert!(same(&with(("future_field", json!(1)), 99)).is_ok());
        // The tag anywhere reads the same record; twice, or unknown, is refused.
        let mut late = members.clone();
        let tag = late.remove(0);
        let first = same(&line_of(&members)).unwrap();
        for at in [1, 5, late.len()] {
            let mut moved = late.clone();
            moved.insert(at, tag.clone());
            assert_eq!(same(&line_of(&moved)).as_ref(), Ok(&first), "{kind}: tag at {at}");
        }
        let twice = Err("duplicate field `record_type`".to_string());
        assert_eq!(same(&with(("record_type", json!(kind)), 3)), twice);
        let mut late_twice = late.clone();
        late_twice.insert(2, tag.clone());
        late_twice.push(tag.clone());
        assert_eq!(same(&line_of(&late_twice)), twice);
        assert!(
            same(&with(("record_type", json!("nope")), 0)).unwrap_err().contains("unknown variant `nope`")
        );
        let mut bad_tag = members.clone();
        bad_tag[0].1 = json!(7);
        assert!(same(&line_of(&bad_tag)).unwrap_err().contains("invalid type: integer `7`"));
        let mut unknown_late = late.clone();
        unknown_late.push(("record_type".into(), json!(7)));
        assert!(same(&line_of(&unknown_late)).unwrap_err().contains("invalid type: integer `7`"));
        // Every field mistyped, and every field twice, tag first and tag last.
        for i in 1..members.len() {
            for wrong in [json!("x"), json!(-1), json!(1.5), json!(null), json!([{}])] {
                // An array read as a struct is read field by field; the derived enum, which
                // buffered, named a nested enum's error differently (both refuse the line).
                let messages = wrong != json!([{}]);
                let mut m = members.clone();
                m[i].1 = wrong.clone();
                let _ = agree(&line_of(&m), messages);
                m.rotate_left(1);
                let _ = agree(&line_of(&m), messages);
            }
            let mut m = members.clone();
            m.push(members[i].clone());
            assert_eq!(same(&line_of(&m)), Err(format!("duplicate field `{}`", members[i].0)));
        }
    }
    // The lean reading checks what it does not keep, as the full one reads it: wrong types, a
    // number out of range, nesting past serde_json's limit, keys of any kind.
    let (_, members) = &objects()[0];
    let deep = "[".repeat(200) + &"]".repeat(200);
    for (field, value, ok) in [
        ("token_offsets_ms", "[1, \"2\"]", false),
        ("token_offsets_ms", "[1e999]", false),
        ("token_offsets_ms", "null", false),
        ("token_offsets_ms", "[1, -2.5e3, 7]", true),
        ("output_sample", "7", false),
        ("output_sample", "\"\\ud800\"", false),
        ("output_sample", "\"ok \\u00e9\"", true),
        ("server_timings", "{\"a\": [1e999]}", false),
        ("server_timings", &deep, false),
        ("server_timings", "{\"a\": {\"b\": [null, true, \"x\", -1, 2.5]}}", true),
        ("server_stats", "[{}, []]", true),
    ] {
        let line = line_of(members).replacen(
            &format!("\"{field}\":{}", members.iter().find(|(k, _)| k == field).unwrap().1),
            &format!("\"{field}\":{value}"),
            1,
        );
        assert_ne!(line, line_of(members), "{field} replaced");
        assert_eq!(agree(&line, true).is_ok(), ok, "{field}: {value}");
    }
    // Not an object at all: refused (the derived enum also tried an array as [tag, fields...]).
    for line in ["[]", "[\"measurement\"]", "1", "\"measurement\"", "null"] {
        assert!(agree(line, false).is_err(), "{line}");
    }
    assert_eq!(same("{}"), Err("missing field `record_type`".into()));
}

/// A deserializer that answers `deserialize_struct` with the field names the type accepts (serde's
/// derive hands them over), as its error.
struct FieldNames;

#[derive(Debug)]
struct Accepted(Vec<&'static str>);

impl std::fmt::Display for Accepted {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl std::error::Error for Accepted {}

impl serde::de::Error for Accepted {
    fn custom<T: std::fmt::Display>(_: T) -> Accepted {
        Accepted(Vec::new())
    }
}

impl<'de> serde::Deserializer<'de> for FieldNames {
    type Error = Accepted;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Accepted> {
        Err(Accepted(Vec::new()))
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Accepted> {
        Err(Accepted(fields.to_vec()))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// The member names a twin reads.
fn read_by<T: serde::de::DeserializeOwned>() -> std::collections::BTreeSet<&'static str> {
    T::deserialize(FieldNames).err().expect("only an error comes back").0.into_iter().collect()
}

/// A field declared once is in the record type (what it writes), its JSON Schema and its twin (what
/// it reads, fully and lean) alike: a field any of them lacks, or one a twin reads that the type
/// does not declare, fails here, with the members that differ.
#[test]
fn every_declared_field_is_written_described_and_read() {
    use super::lean::Lean;
    use super::wire::Full;
    use std::collections::BTreeSet;
    let schema = serde_json::to_value(schemars::schema_for!(Record)).unwrap();
    let twins = [
        (
            "measurement",
            "Measurement",
            read_by::<twin::Measurement<Full>>(),
            read_by::<twin::Measurement<Lean>>(),
        ),
        ("group", "GroupRecord", read_by::<twin::GroupRecord<Full>>(), read_by::<twin::GroupRecord<Lean>>()),
        (
            "staggered",
            "StaggeredRecord",
            read_by::<twin::StaggeredRecord<Full>>(),
            read_by::<twin::StaggeredRecord<Lean>>(),
        ),
    ];
    let written = objects();
    for (kind, def, full, lean) in twins {
        let described: BTreeSet<&str> =
            schema["$defs"][def]["properties"].as_object().unwrap().keys().map(String::as_str).collect();
        // A record with every field filled writes every member (the tag first).
        let (_, members) = written.iter().find(|(k, _)| k == kind).unwrap();
        let members: BTreeSet<&str> = members.iter().map(|(k, _)| k.as_str()).filter(|k| *k != TAG).collect();
        assert_eq!(members, described, "{def}: written vs described");
        // The twin also reads the tag when it comes with the fields (a duplicate then).
        let read: BTreeSet<&str> = full.iter().copied().filter(|k| *k != TAG).collect();
        assert!(full.contains(TAG), "{def}: {full:?}");
        assert_eq!(read, described, "{def}: read vs described");
        assert_eq!(lean, full, "{def}: read lean vs read");
    }
}

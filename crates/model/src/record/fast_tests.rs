//! The hand reading (`fast`) against the serde reading it stands in for: on every line either it
//! declines (None) or it reads exactly the record serde reads, lean and timed. Every line
//! `parse_tests` tries goes through `by_hand_agrees`; here, bench's own lines must be read by
//! hand (else the fast path would be a path never taken), and lines broken on purpose (bytes
//! swapped, cut, repeated; numbers of every length and exponent) must agree.

use super::fast::{self, Floats, Keep};
use super::*;
use crate::stats::Rng;

/// The serde reading of `line` at `keep`.
fn by_serde(line: &[u8], keep: Keep) -> Option<Record> {
    match keep {
        Keep::Lean | Keep::Converting(_) => serde_json::from_slice::<LeanRecord>(line).ok().map(|r| r.0),
        Keep::Timed => serde_json::from_slice::<TimedRecord>(line).ok().map(|r| r.0),
    }
}

/// Whether the hand reading read `line` (at both depths); panics where it read another record
/// than serde, or read a line serde refuses.
pub(super) fn by_hand_agrees(line: &[u8]) -> bool {
    let mut read = [false; 2];
    for (i, keep) in [Keep::Lean, Keep::Timed].into_iter().enumerate() {
        if let Some(hand) = fast::measurement(line, keep) {
            let serde = by_serde(line, keep);
            assert_eq!(serde.as_ref(), Some(&hand), "{keep:?} by hand: {}", String::from_utf8_lossy(line));
            // Written out, as equality cannot tell -0.0 from 0.0.
            let written = |r: &Record| serde_json::to_string(r).unwrap();
            assert_eq!(
                serde.as_ref().map(written),
                Some(written(&hand)),
                "{}",
                String::from_utf8_lossy(line)
            );
            read[i] = true;
        }
    }
    assert_eq!(read[0], read[1], "read by hand at one depth only: {}", String::from_utf8_lossy(line));
    converting_agrees(line);
    offsets_read_back_agree(line);
    read[0]
}

/// `record` as JSON with every float 0.0: what an unconverted reading holds of it.
fn floats_zeroed(record: &Record) -> serde_json::Value {
    fn zero(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Number(n) if n.is_f64() => *v = serde_json::json!(0.0),
            serde_json::Value::Array(items) => items.iter_mut().for_each(zero),
            serde_json::Value::Object(members) => members.values_mut().for_each(zero),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(record).unwrap();
    zero(&mut v);
    v
}

/// The members a partial conversion converts in these tests: a top-level float and an object of
/// them.
const CONVERTED_MEMBERS: [&str; 2] = ["ttft_ms", "thermal"];

/// A reading converting some floats or none (`Keep::Converting`) reads a line where the lean
/// reading does, and the same record but for the floats of the members it leaves out (those it
/// reads by hand it holds as 0.0); the members it converts are the lean reading's. Panics otherwise.
fn converting_agrees(line: &[u8]) {
    let lean = fast::measurement(line, Keep::Lean);
    let shown = || String::from_utf8_lossy(line).into_owned();
    for members in [&[][..], &CONVERTED_MEMBERS[..]] {
        let converting = fast::measurement(line, Keep::Converting(Floats::of_members(members)));
        assert_eq!(
            lean.is_some(),
            converting.is_some(),
            "read {members:?} converted or lean only: {}",
            shown()
        );
        let (Some(lean), Some(converting)) = (&lean, converting) else { continue };
        assert_eq!(floats_zeroed(lean), floats_zeroed(&converting), "{}", shown());
        let (lean, converting) =
            (serde_json::to_value(lean).unwrap(), serde_json::to_value(&converting).unwrap());
        for member in members {
            assert_eq!(lean.get(member), converting.get(member), "{member}: {}", shown());
        }
    }
}

/// Whether the offsets of a line that reads as a measurement were read back by the walk
/// (`fast::token_offsets_ms`); panics where they are not the ones the timed reading keeps.
fn offsets_read_back_agree(line: &[u8]) -> bool {
    let Some(Record::Measurement(timed)) = by_serde(line, Keep::Timed) else { return false };
    let mut offsets = vec![-1.0];
    if fast::token_offsets_ms(line, &mut offsets).is_none() {
        return false;
    }
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
    assert_eq!(bits(&offsets), bits(&timed.token_offsets_ms), "{}", String::from_utf8_lossy(line));
    true
}

/// Measurement lines as bench writes them: the fixtures' records (every kind of field filled
/// somewhere) written again by bench's own writer, at this schema.
fn written_lines() -> Vec<String> {
    let mut lines: Vec<String> = parse_tests::fixture_records()
        .iter()
        .filter_map(|line| serde_json::from_str::<Record>(line).ok())
        .chain(parse_tests::full_records())
        .filter(|r| matches!(r, Record::Measurement(m) if m.schema_version == SCHEMA_VERSION))
        .map(|r| serde_json::to_string(&r).unwrap())
        .collect();
    lines.sort();
    lines.dedup();
    lines
}

#[test]
fn every_measurement_bench_writes_is_read_by_hand_as_serde_reads_it() {
    let lines = written_lines();
    assert!(lines.len() >= 50, "{} measurement lines", lines.len());
    for line in &lines {
        assert!(by_hand_agrees(line.as_bytes()), "not read by hand: {line}");
        assert!(offsets_read_back_agree(line.as_bytes()), "offsets not read back: {line}");
    }
    let with_offsets = lines.iter().filter(|l| !l.contains("\"token_offsets_ms\":[]")).count();
    assert!(with_offsets >= 1, "no written line holds token offsets");
    // The lines hold what the hand reading passes to serde or reads by hand apart: turns, quality
    // flags, an error, counters, session evidence, thermal snapshots, escapes.
    for part in [
        "\"turns\":[{",
        "\"quality_flags\":[{",
        "\"error\":{",
        "\"server_metrics\":{",
        "session_before",
        "\"before\":{",
        "\\n",
        "\\\"",
    ] {
        assert!(lines.iter().any(|l| l.contains(part)), "no written line holds {part}");
    }
}

/// Bytes a mutation puts in: JSON's structure, escapes, digits and signs, letters of literals,
/// a control character, a multi-byte character.
const PIECES: [&str; 24] = [
    "\"", "\\", "{", "}", "[", "]", ",", ":", "0", "7", ".", "e", "E", "-", "+", "n", "t", "null", "\\u0041",
    "\\n", "\u{1}", "é", " ", "1e400",
];

fn mutate(rng: &mut Rng, line: &str) -> String {
    let mut bytes = line.as_bytes().to_vec();
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(bytes.len() + 1);
        match rng.below(4) {
            0 if at < bytes.len() => {
                let piece = PIECES[rng.below(PIECES.len())].as_bytes();
                bytes.splice(at..at + 1, piece.iter().copied());
            }
            1 => {
                let piece = PIECES[rng.below(PIECES.len())].as_bytes();
                bytes.splice(at..at, piece.iter().copied());
            }
            2 => {
                let end = (at + 1 + rng.below(40)).min(bytes.len());
                bytes.drain(at.min(end)..end);
            }
            _ => {
                let end = (at + 1 + rng.below(60)).min(bytes.len());
                let copy = bytes[at.min(end)..end].to_vec();
                let to = rng.below(bytes.len() + 1);
                bytes.splice(to..to, copy);
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn lines_broken_on_purpose_are_declined_or_read_as_serde_reads_them() {
    let lines = written_lines();
    let mut rng = Rng::new(41);
    let (mut tried, mut by_hand) = (0, 0);
    for _ in 0..10_000 {
        let pick = rng.below(lines.len());
        let line = mutate(&mut rng, &lines[pick]);
        tried += 1;
        by_hand += usize::from(by_hand_agrees(line.as_bytes()));
    }
    // Many mutations land in a value and leave a line bench could have written: those are read by
    // hand, so both outcomes are exercised.
    assert!(by_hand > tried / 50 && by_hand < tried, "{by_hand} of {tried} read by hand");
}

/// A JSON number of `digits` significant digits, a point somewhere or none, maybe an exponent.
fn number(rng: &mut Rng) -> String {
    let digits = 1 + rng.below(25);
    let mut text = String::new();
    if rng.below(4) == 0 {
        text.push('-');
    }
    for i in 0..digits {
        let d = if i == 0 && digits > 1 { 1 + rng.below(9) } else { rng.below(10) };
        text.push(char::from(b'0' + d as u8));
        if i + 1 < digits && rng.below(digits) == 0 && !text.contains('.') {
            text.push('.');
        }
    }
    if rng.below(3) == 0 {
        text.push(['e', 'E'][rng.below(2)]);
        if rng.below(2) == 0 {
            text.push(['-', '+'][rng.below(2)]);
        }
        text.push_str(&rng.below(340).to_string());
    }
    text
}

#[test]
fn every_kind_of_number_converts_as_serde_json_converts_it() {
    let line = written_lines()
        .into_iter()
        .find(|l| l.contains("\"ttft_ms\":") && l.contains("\"token_offsets_ms\":["))
        .unwrap();
    let mut rng = Rng::new(7);
    let mut by_hand = 0;
    for _ in 0..6_000 {
        let n = number(&mut rng);
        let (head, tail) = line.split_once("\"ttft_ms\":").unwrap();
        let rest = &tail[tail.find(',').unwrap()..];
        let in_ttft = format!("{head}\"ttft_ms\":{n}{rest}");
        let (head, tail) = line.split_once("\"token_offsets_ms\":[").unwrap();
        let in_offsets = format!("{head}\"token_offsets_ms\":[{n},{n}{}", &tail[tail.find(']').unwrap()..]);
        for line in [in_ttft, in_offsets] {
            by_hand += usize::from(by_hand_agrees(line.as_bytes()));
        }
    }
    assert!(by_hand > 9_000, "{by_hand} of 12000 read by hand");
}

/// `line` without the member `key` of the object that starts at `object` (`"thermal":{`): its
/// value ends at the first `,` or `}` outside brackets.
fn without_member(line: &str, object: &str, key: &str) -> Option<String> {
    let from = line.find(object)? + object.len();
    let start = from + line[from..].find(&format!("\"{key}\":"))?;
    let mut depth = 0i32;
    let mut end = start + key.len() + 3;
    for (i, b) in line[end..].bytes().enumerate() {
        match b {
            b'[' | b'{' => depth += 1,
            b']' | b'}' if depth > 0 => depth -= 1,
            b',' | b'}' if depth == 0 => {
                end += i;
                break;
            }
            _ => {}
        }
    }
    Some(if line.as_bytes()[end] == b',' {
        format!("{}{}", &line[..start], &line[end + 1..])
    } else {
        format!("{}{}", line[..start].trim_end_matches(','), &line[end..])
    })
}

#[test]
fn a_nested_object_without_one_of_its_members_is_read_as_serde_reads_it() {
    let nested = [
        (
            "\"thermal\":{",
            &["policy", "baseline_tps", "probe_tps", "cooldown_s", "recovered", "before", "after"][..],
        ),
        (
            "\"physics\":{",
            &["decode_ceiling_tps", "decode_fraction", "prefill_ceiling_tps", "prefill_fraction"],
        ),
        ("\"cache_evidence\":{", &["source", "cached_tokens", "prompt_evaluated_tokens", "session_before"]),
    ];
    let (mut tried, mut refused) = (0, 0);
    for line in written_lines() {
        for (object, keys) in nested {
            for key in keys {
                let Some(cut) = without_member(&line, object, key) else { continue };
                tried += 1;
                by_hand_agrees(cut.as_bytes());
                refused += usize::from(serde_json::from_str::<Record>(&cut).is_err());
            }
        }
    }
    // Required members (thermal's policy, probe_tps, cooldown_s, recovered; the evidence's source)
    // are refused without; optional ones read as None.
    assert!(tried > 200 && refused > 50 && refused < tried, "{refused} refused of {tried}");
}

/// Token offsets arrays of every shape the tight loop of a lean reading must hand back to the
/// general one or refuse as serde does: malformed numbers, whitespace, exponents, signs, empty and
/// doubled elements, long numbers; each alone, first, between and last.
#[test]
fn offsets_arrays_of_every_shape_are_read_as_serde_reads_them() {
    let line = written_lines().into_iter().find(|l| l.contains("\"token_offsets_ms\":[")).unwrap();
    let long = format!("1{}", "0".repeat(310));
    let long_fraction = format!("0.{}1", "0".repeat(310));
    let elements = [
        "1",
        "0",
        "-0",
        "-0.0",
        "12.5",
        "1.",
        ".5",
        "-",
        "--1",
        "+1",
        "01",
        "-01",
        "00",
        "1e5",
        "1E5",
        "1e",
        "1e+",
        "1.e5",
        "1e-400",
        "1e400",
        "NaN",
        "Infinity",
        "0x1",
        "1_0",
        " 1",
        "1 ",
        "\t1",
        "\"1\"",
        "null",
        "true",
        "[1]",
        "{}",
        "",
        long.as_str(),
        long_fraction.as_str(),
    ];
    let (head, tail) = line.split_once("\"token_offsets_ms\":[").unwrap();
    let rest = &tail[tail.find(']').unwrap() + 1..];
    let (mut by_hand, mut tried) = (0, 0);
    for e in elements {
        for array in [
            format!("[{e}]"),
            format!("[{e},2.5]"),
            format!("[1.5,{e},2.5]"),
            format!("[1.5,{e}]"),
            format!("[1.5,{e},]"),
        ] {
            let line = format!("{head}\"token_offsets_ms\":{array}{rest}");
            tried += 1;
            by_hand += usize::from(by_hand_agrees(line.as_bytes()));
        }
    }
    assert!(by_hand > 30 && by_hand < tried, "{by_hand} of {tried} read by hand");
}

/// The walk that reads a line's token offsets back declines what it cannot tell (the key written
/// with an escape, the key absent), so the caller reads the line whole then; it never reads another
/// member's array (a nested `token_offsets_ms`, as a hot turn could hold) for it.
#[test]
fn offsets_are_read_back_from_the_top_level_key_only() {
    let line = written_lines().into_iter().find(|l| !l.contains("\"token_offsets_ms\":[]")).unwrap();
    let escaped = line.replacen("\"token_offsets_ms\"", "\"token_offsets_m\\u0073\"", 1);
    let mut offsets = Vec::new();
    assert_eq!(fast::token_offsets_ms(escaped.as_bytes(), &mut offsets), None, "{escaped}");
    let absent = line.replacen("\"token_offsets_ms\"", "\"token_offsets_gone\"", 1);
    assert_eq!(fast::token_offsets_ms(absent.as_bytes(), &mut offsets), None, "{absent}");
    let nested = line.replacen("{", "{\"first\":{\"token_offsets_ms\":[1,2]},", 1);
    assert!(fast::token_offsets_ms(nested.as_bytes(), &mut offsets).is_some());
    assert!(offsets.len() > 2, "the top-level offsets, not the nested pair: {offsets:?}");
}

/// The search that finds the top-level key without walking to it is never fooled by the key's
/// text where it is not that key: in a longer key (its quote escaped), inside a string value, after
/// a nested object or array; and it finds the key where bench writes it. Each line's offsets read
/// back are the timed reading's (`offsets_read_back_agree`).
#[test]
fn offsets_found_by_search_are_the_top_level_key_s() {
    let line = written_lines()
        .into_iter()
        .find(|l| l.contains("\"token_offsets_ms\":[") && !l.contains("\"token_offsets_ms\":[]"))
        .unwrap();
    let (head, tail) = line.split_once(",\"").unwrap();
    let lines = [
        line.clone(),
        format!("{head},\"x\\\"token_offsets_ms\":[1,2],\"{tail}"),
        format!("{head},\"y\":\"\\\"token_offsets_ms\\\":[3,4]\",\"{tail}"),
        format!("{head},\"z\":[\"token_offsets_ms\",5],\"{tail}"),
        format!("{head},\"w\":{{\"token_offsets_ms\":[6]}},\"{tail}"),
    ];
    for l in &lines {
        assert!(offsets_read_back_agree(l.as_bytes()), "not read back: {l}");
    }
}

/// Every byte value, at every place of the sixteen and the eight bytes looked at together, stops
/// a string's plain run exactly where a byte-at-a-time look says it does.
#[test]
fn every_byte_value_stops_a_plain_run_where_a_byte_at_a_time_look_stops_it() {
    for value in 0..=255u8 {
        for at in 0..40 {
            let mut bytes = vec![b'a'; 40];
            bytes[at] = value;
            let stops = value == b'"' || value == b'\\' || value < 0x20;
            assert_eq!(fast::plain_run_end(&bytes, 0), stops.then_some(at), "byte {value:#x} at {at}");
        }
    }
}

#[test]
fn a_string_s_plain_run_ends_at_its_first_quote_backslash_or_control_character() {
    let stops = [b'"', b'\\', 0x00, 0x1F, b'\n'];
    let plain = [b' ', b'a', b'!', b'#', b'[', b']', 0x7F, 0x80, 0xC3, 0xA9, 0xFF, 0x21, 0x5D];
    let naive =
        |bytes: &[u8], from: usize| bytes[from..].iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20);
    let mut rng = Rng::new(3);
    for _ in 0..20_000 {
        let len = rng.below(40);
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                if rng.below(12) == 0 { stops[rng.below(stops.len())] } else { plain[rng.below(plain.len())] }
            })
            .collect();
        for from in 0..=len {
            let expected = naive(&bytes, from).map(|at| from + at);
            assert_eq!(fast::plain_run_end(&bytes, from), expected, "{bytes:?} from {from}");
        }
    }
}

#[test]
fn an_array_walked_a_word_at_a_time_is_one_serde_reads_and_ends_where_serde_ends_it() {
    let mut rng = Rng::new(11);
    let alphabet = ["0", "1", "7", "9", ".", ",", "-", "]", "e", " ", "00", "3.25", "10"];
    let padding = "}".repeat(16);
    let mut walked = 0;
    for round in 0..200_000 {
        // Bench's own arrays (numbers as Rust writes them) and arrays of broken pieces.
        let body: String = if round % 4 == 0 {
            let n = 1 + rng.below(40);
            let v: Vec<String> =
                (0..n).map(|_| format!("{}", (rng.unit() - 0.1) * 10f64.powi(rng.below(6) as i32))).collect();
            v.join(",") + "]"
        } else {
            (0..1 + rng.below(30)).map(|_| alphabet[rng.below(alphabet.len())]).collect()
        };
        let text = format!("[{body}{padding}");
        let Some(end) = fast::plain_numbers_end(text.as_bytes(), 0) else {
            assert!(round % 4 != 0, "bench's own array not walked: {text}");
            continue;
        };
        walked += 1;
        let close = text.find(']').unwrap();
        assert_eq!(end, close + 1, "{text}");
        let read: Result<Vec<f64>, _> = serde_json::from_str(&text[..end]);
        assert!(read.is_ok(), "walked an array serde refuses: {}", &text[..end]);
    }
    assert!(walked > 50_000, "{walked} walked");
}

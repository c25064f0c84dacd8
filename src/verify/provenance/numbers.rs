//! The numbers a published copy of a record must keep, and how two of them are the same.

use ttft_model::record::{GroupRecord, Measurement, Record, StaggeredRecord};

/// A compared value: a rate or time (rounding allowed), a count or a verdict (exact).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Value {
    Real(Option<f64>),
    Count(Option<u64>),
    Flag(bool),
}

impl Value {
    pub(super) fn show(self) -> String {
        match self {
            Value::Real(Some(v)) => format!("{v}"),
            Value::Count(Some(n)) => n.to_string(),
            Value::Real(None) | Value::Count(None) => "null".into(),
            Value::Flag(b) => b.to_string(),
        }
    }
}

/// The numbers of a record that a published copy must keep, by name (an array: a million
/// records compared are not a million lists allocated).
pub(super) type Numbers<const N: usize> = [(&'static str, Value); N];

/// The differences between a published record and its claimed copy's values (the key tells the
/// types apart).
pub(super) fn diff_record(published: &Record, source: &[Value], out: &mut Vec<Diff>) {
    match published {
        Record::Measurement(p) => diff_numbers("", measurement_numbers(p), source, out),
        Record::Group(p) => diff_numbers("", group_numbers(p), source, out),
        Record::Staggered(p) => diff_numbers("", staggered_numbers(p), source, out),
    }
}

/// Every number of `record` that a published copy must keep, in order.
pub(super) fn each_value(record: &Record, mut each: impl FnMut(Value)) {
    let mut all = |values: &[(&'static str, Value)]| values.iter().for_each(|&(_, v)| each(v));
    match record {
        Record::Measurement(m) => all(&measurement_numbers(m)),
        Record::Group(g) => all(&group_numbers(g)),
        Record::Staggered(s) => all(&staggered_numbers(s)),
    }
}

pub(super) fn measurement_numbers(m: &Measurement) -> Numbers<12> {
    use Value::{Count, Flag, Real};
    [
        ("ttft_ms", Real(m.ttft_ms)),
        ("e2e_ms", Real(m.e2e_ms)),
        ("first_event_ms", Real(m.first_event_ms)),
        ("decode_tps", Real(m.decode_tps)),
        ("prefill_tps", Real(m.prefill_tps)),
        ("reload_ms", Real(m.reload_ms)),
        ("input_tokens", Count(m.input_tokens)),
        ("output_tokens", Count(m.output_tokens)),
        ("cached_tokens", Count(m.cached_tokens)),
        ("max_tokens", Count(Some(u64::from(m.max_tokens)))),
        ("quality_ok", Flag(m.quality_ok)),
        ("failed", Flag(m.error.is_some())),
    ]
}

pub(super) fn group_numbers(g: &GroupRecord) -> Numbers<9> {
    use Value::{Count, Flag, Real};
    [
        ("wall_ms", Real(Some(g.wall_ms))),
        ("system_tps", Real(g.system_tps)),
        ("per_request_tps", Real(g.per_request_tps)),
        ("avg_ttft_ms", Real(g.avg_ttft_ms)),
        ("avg_e2e_ms", Real(g.avg_e2e_ms)),
        ("total_output_tokens", Count(Some(g.total_output_tokens))),
        ("requests_ok", Count(Some(u64::from(g.requests_ok)))),
        ("requests_failed", Count(Some(u64::from(g.requests_failed)))),
        ("failed", Flag(g.error.is_some())),
    ]
}

pub(super) fn staggered_numbers(s: &StaggeredRecord) -> Numbers<13> {
    use Value::{Count, Flag, Real};
    [
        ("stagger_delay_ms", Real(s.stagger_delay_ms)),
        ("user_a_ttft_ms", Real(s.user_a_ttft_ms)),
        ("user_a_e2e_ms", Real(s.user_a_e2e_ms)),
        ("user_b_ttft_ms", Real(s.user_b_ttft_ms)),
        ("user_b_e2e_ms", Real(s.user_b_e2e_ms)),
        ("user_b_arrival_ms", Real(s.user_b_arrival_ms)),
        ("user_b_ttft_from_wall_start_ms", Real(s.user_b_ttft_from_wall_start_ms)),
        ("total_wall_ms", Real(s.total_wall_ms)),
        ("system_tps", Real(s.system_tps)),
        ("user_a_output_tokens", Count(s.user_a_output_tokens)),
        ("user_b_output_tokens", Count(s.user_b_output_tokens)),
        ("quality_ok", Flag(s.quality_ok)),
        ("failed", Flag(s.error.is_some())),
    ]
}

/// Whether `published` is `source` as published: equal, or `source` rounded to the decimals
/// `published` shows (Rust prints the shortest text that reads back the same number).
pub(crate) fn same_within_rounding(published: f64, source: f64) -> bool {
    if published == source {
        return true;
    }
    let text = format!("{published}");
    let decimals = text.split_once('.').map_or(0, |(_, d)| d.len()).min(15);
    let half_step = 0.5 * 10f64.powi(-(decimals as i32));
    // A hair of relative slack for the binary representation of both numbers.
    (published - source).abs() <= half_step + 1e-12 * published.abs().max(source.abs())
}

pub(super) fn same(published: Value, source: Value) -> bool {
    match (published, source) {
        (Value::Real(Some(p)), Value::Real(Some(s))) => same_within_rounding(p, s),
        (p, s) => p == s,
    }
}

/// "field: published X, source Y" for every field that differs.
pub(super) struct Diff {
    pub(super) field: String,
    pub(super) published: String,
    pub(super) source: String,
}

/// `published` against `source`'s values of the same fields (values of another record type, another
/// count of them, are never paired: nothing is compared).
pub(super) fn diff_numbers<const N: usize>(
    prefix: &str,
    published: Numbers<N>,
    source: &[Value],
    out: &mut Vec<Diff>,
) {
    if source.len() != N {
        return;
    }
    for ((field, p), &s) in published.into_iter().zip(source) {
        if !same(p, s) {
            out.push(Diff { field: format!("{prefix}{field}"), published: p.show(), source: s.show() });
        }
    }
}

pub(super) fn presence(present: bool) -> String {
    if present { "present" } else { "absent" }.into()
}

pub(super) fn show_diffs(diffs: &[Diff], source: &str) -> String {
    let parts: Vec<String> = diffs
        .iter()
        .map(|d| format!("{} {} published, {} in {source}", d.field, d.published, d.source))
        .collect();
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_value_may_round_its_source_but_not_refine_it() {
        assert!(same_within_rounding(798.6, 798.64));
        assert!(same_within_rounding(798.6, 798.55));
        assert!(!same_within_rounding(798.6, 798.7));
        assert!(same_within_rounding(1838.0, 1837.6), "1838 shows no decimals");
        assert!(!same_within_rounding(798.64, 798.6), "more precise than its source");
        assert!(same_within_rounding(0.1 + 0.2, 0.3));
    }
}

//! What report's statistics read of each record (`Values`): its samples, each as it enters
//! statistics, taken as a located record is read, so report keeps them beside the record's digest
//! instead of the record (`results::digest`); and the view `samples` reads of a record either way
//! (`Sampled`): a record held whole gives the same values, computed from it.

use std::borrow::Cow;

use ttft_model::record::fast::Floats;
use ttft_model::record::{self, ErrorInfo, ErrorKind, QualityCode, QualityFlag, Record, Scenario};
use ttft_results::results::digest::{Extract, Kept};
use ttft_results::results::import::imported_reason;
use ttft_results::results::packed::OptF64;
use ttft_results::results::slotted::Slotted;

/// A time or a rate that may enter statistics: finite and not negative (a negative duration is
/// clock misuse, which verify reports; it is never averaged in).
pub(crate) fn sample(v: Option<f64>) -> Option<f64> {
    v.filter(|x| x.is_finite() && *x >= 0.0)
}

/// Which of a cell's counts and samples a record feeds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Kind {
    #[default]
    Measurement,
    /// A closed loop's warm-up request: counted, never sampled.
    Warmup,
    Group,
    Staggered,
}

/// What report's statistics read of one record, each sample already as it enters statistics
/// (`sample`; none where it may not).
#[derive(Clone, Debug, Default)]
pub(crate) struct Values {
    pub kind: Kind,
    pub cache_state_confirmed: Option<bool>,
    pub ttft_ms: OptF64,
    pub e2e_ms: OptF64,
    /// Recomputed from the raw times; a time that may not enter statistics makes no rate.
    pub decode_tps: OptF64,
    pub tpot_ms: OptF64,
    /// Its inter-token gaps enter ITL: its times may enter statistics and its offsets are there
    /// (read back from its text, or two or more held).
    pub itl: bool,
    pub decode_ceiling_tps: OptF64,
    pub ttft_floor_ms: OptF64,
    pub system_tps: OptF64,
    pub user_b_wait_ms: OptF64,
    /// The load level it was sent at (`bench load`): a closed loop's users, or an open loop's rate.
    pub concurrency: Option<u32>,
    pub offered_rate_per_s: OptF64,
    /// What its importer could not tell (`import::imported_reason`).
    pub imported: Option<Box<str>>,
    /// Why it may fail, as compare counts failures (none for a group record).
    pub failing: Option<Failing>,
}

/// What compare reads of a record that can fail on its own (a measurement or a staggered record; a
/// group record is judged through its members): its error's kind and HTTP status, and whether a
/// failing cache-state flag holds it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Failing {
    pub error: Option<(ErrorKind, Option<u16>)>,
    pub cache_state_unconfirmed: bool,
}

impl Failing {
    fn of(error: Option<&ErrorInfo>, flags: &[QualityFlag]) -> Failing {
        Failing {
            error: error.map(|e| (e.kind, e.http_status)),
            cache_state_unconfirmed: flags
                .iter()
                .any(|f| f.fails_gate && f.flag == QualityCode::CacheStateUnconfirmed),
        }
    }

    /// `r`'s, where it can fail on its own.
    fn of_record(r: &Record) -> Option<Failing> {
        match r {
            Record::Measurement(m) => Some(Failing::of(m.error.as_ref(), &m.quality_flags)),
            Record::Staggered(s) => Some(Failing::of(s.error.as_ref(), &s.quality_flags)),
            Record::Group(_) => None,
        }
    }
}

impl Values {
    /// `r`'s values; `located`: its token offsets are in its text (read back), not in it.
    pub(crate) fn of(r: &Record, located: bool) -> Values {
        match r {
            Record::Measurement(m) => {
                let (ttft, e2e) = (sample(m.ttft_ms), sample(m.e2e_ms));
                let bad_time =
                    (m.ttft_ms.is_some() && ttft.is_none()) || (m.e2e_ms.is_some() && e2e.is_none());
                let (decode, tpot) = if bad_time {
                    (None, None)
                } else {
                    (
                        record::decode_tps(m.output_tokens, ttft, e2e).or(m.decode_tps),
                        tpot_ms(m.output_tokens, ttft, e2e),
                    )
                };
                let physics = m.physics.as_ref();
                let prefill_ceiling = physics.and_then(|p| p.prefill_ceiling_tps).filter(|c| *c > 0.0);
                let floor = ttft_results::physics::computed_prompt_tokens(m)
                    .zip(prefill_ceiling)
                    .map(|(tokens, tps)| tokens as f64 * 1000.0 / tps);
                let (concurrency, offered_rate_per_s) = match m.cell.scenario {
                    Scenario::Load => {
                        (m.concurrency, m.concurrency.is_none().then_some(m.offered_rate_per_s).flatten())
                    }
                    _ => (None, None),
                };
                Values {
                    kind: if m.warmup { Kind::Warmup } else { Kind::Measurement },
                    cache_state_confirmed: m.cache_state_confirmed,
                    ttft_ms: OptF64::of(ttft),
                    e2e_ms: OptF64::of(e2e),
                    decode_tps: OptF64::of(sample(decode)),
                    tpot_ms: OptF64::of(sample(tpot)),
                    itl: !bad_time && (located || m.token_offsets_ms.len() >= 2),
                    decode_ceiling_tps: OptF64::of(sample(physics.and_then(|p| p.decode_ceiling_tps))),
                    ttft_floor_ms: OptF64::of(sample(floor)),
                    concurrency,
                    offered_rate_per_s: OptF64::of(offered_rate_per_s),
                    imported: imported_reason(r).map(Box::from),
                    failing: Failing::of_record(r),
                    ..Values::default()
                }
            }
            Record::Group(g) => Values {
                kind: Kind::Group,
                system_tps: OptF64::of(sample(g.system_tps)),
                ..Values::default()
            },
            Record::Staggered(s) => Values {
                kind: Kind::Staggered,
                user_b_wait_ms: OptF64::of(sample(s.user_b_ttft_from_wall_start_ms)),
                failing: Failing::of_record(r),
                ..Values::default()
            },
        }
    }
}

/// Time per output token after the first: (e2e - ttft) / (output_tokens - 1), ms; None with
/// fewer than two tokens or a decode time that is not positive.
fn tpot_ms(output_tokens: Option<u64>, ttft_ms: Option<f64>, e2e_ms: Option<f64>) -> Option<f64> {
    let (out, ttft, e2e) = (output_tokens?, ttft_ms?, e2e_ms?);
    (out >= 2 && e2e > ttft).then(|| (e2e - ttft) / (out - 1) as f64)
}

/// Taken from a record read located: its offsets are read back from its text.
impl Extract for Values {
    /// The members whose floats `Values::of` reads; every other float of a located measurement
    /// (ten a record: thermal probes, send lag, first byte and event, prefill rate) is checked, not
    /// converted, and read as 0.0, which nothing here reads (docs/performance.md, "Report and
    /// compare").
    const CONVERTS: Floats =
        Floats::of_members(&["offered_rate_per_s", "ttft_ms", "e2e_ms", "decode_tps", "physics"]);

    fn extract(record: &Record) -> Values {
        Values::of(record, true)
    }
}

/// What report keeps of each record it reads: a located one's digest and values.
pub(crate) type ReportRecord = Kept<Values>;

/// What report's statistics read of a record, held whole or as its digest and values.
pub(crate) trait Sampled: Slotted {
    /// Its values; `located`: its text is held, its token offsets are read back from it.
    fn values(&self, located: bool) -> Cow<'_, Values>;
    /// Its token offsets, where it holds them (a record held whole).
    fn token_offsets_ms(&self) -> &[f64];
    /// A closed loop's warm-up request (`Kind::Warmup`).
    fn is_warmup(&self) -> bool;
    /// What its importer could not tell (`import::imported_reason`).
    fn imported_reason(&self) -> Option<&str>;
    /// Why it may fail (`Failing`); none for a group record.
    fn failing(&self) -> Option<Failing>;
}

impl Sampled for Record {
    fn values(&self, located: bool) -> Cow<'_, Values> {
        Cow::Owned(Values::of(self, located))
    }

    fn token_offsets_ms(&self) -> &[f64] {
        match self {
            Record::Measurement(m) => &m.token_offsets_ms,
            _ => &[],
        }
    }

    fn is_warmup(&self) -> bool {
        matches!(self, Record::Measurement(m) if m.warmup)
    }

    fn imported_reason(&self) -> Option<&str> {
        imported_reason(self)
    }

    fn failing(&self) -> Option<Failing> {
        Failing::of_record(self)
    }
}

impl Sampled for ReportRecord {
    fn values(&self, located: bool) -> Cow<'_, Values> {
        match self {
            Kept::Located(_, values) => Cow::Borrowed(values),
            Kept::Whole(r) => r.values(located),
        }
    }

    fn token_offsets_ms(&self) -> &[f64] {
        match self {
            Kept::Located(..) => &[],
            Kept::Whole(r) => r.token_offsets_ms(),
        }
    }

    fn is_warmup(&self) -> bool {
        match self {
            Kept::Located(_, values) => values.kind == Kind::Warmup,
            Kept::Whole(r) => r.is_warmup(),
        }
    }

    fn imported_reason(&self) -> Option<&str> {
        match self {
            Kept::Located(_, values) => values.imported.as_deref(),
            Kept::Whole(r) => Sampled::imported_reason(r),
        }
    }

    fn failing(&self) -> Option<Failing> {
        match self {
            Kept::Located(_, values) => values.failing,
            Kept::Whole(r) => r.failing(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttft_model::record::Measurement;
    use ttft_model::record::fast::{self, Keep};

    /// A located record is read converting only the floats report keeps (`Values::CONVERTS`), every
    /// other float read as 0.0: its values must be those of the record read whole. Fails where
    /// `Values::of` reads a float the list leaves out (its value would then be 0.0), and where the
    /// list converts every float (nothing saved).
    #[test]
    fn values_read_converting_only_their_floats_are_those_of_the_whole_record() {
        // The ingest benchmark's records: every float a measurement holds, filled.
        let mut measurements: Vec<Measurement> = crate::report::ingest_records::records(400)
            .into_iter()
            .filter_map(|r| match r {
                Record::Measurement(m) => Some(*m),
                _ => None,
            })
            .collect();
        assert!(measurements.len() >= 100);
        // A rate without the tokens it is recomputed from: the record's own decode_tps is taken.
        measurements[0].output_tokens = None;
        // `bench load`'s records: an open loop's offered rate, a closed loop's level.
        measurements[1].cell.scenario = Scenario::Load;
        measurements[1].offered_rate_per_s = Some(2.5);
        measurements[2].cell.scenario = Scenario::Load;
        measurements[2].concurrency = Some(4);
        let mut zeroed = 0;
        for m in measurements {
            let whole = Record::Measurement(Box::new(m));
            let line = serde_json::to_vec(&whole).unwrap();
            let read = fast::measurement(&line, Keep::Converting(<Values as Extract>::CONVERTS))
                .expect("a line bench writes is read by hand");
            let shown = String::from_utf8_lossy(&line).into_owned();
            assert_eq!(
                format!("{:?}", Values::of(&read, true)),
                format!("{:?}", Values::of(&whole, true)),
                "{shown}"
            );
            let Record::Measurement(read) = read else { unreachable!() };
            zeroed += usize::from(
                read.thermal.is_some_and(|t| t.baseline_tps == Some(0.0)) && read.send_lag_ms == Some(0.0),
            );
        }
        assert!(zeroed >= 100, "floats report does not read were converted: {zeroed} records left them");
    }
}

//! Reading records: the same JSON the derived code accepted, without serde's buffering.
//!
//! A record's cell key is flattened into it (`"model": ..., "scenario": ...` beside the other
//! fields) and a `Record` is tagged inside the object (`"record_type"`). serde's derive reads both
//! by buffering: every flattened struct collects its unknown keys into a generic tree, and an
//! internally tagged enum buffers the whole object before it knows the variant. On 100,000
//! records that buffering was most of the load time. Here each record type is read through a
//! private twin whose fields are the record's own plus the cell key's, inline (so the derive reads
//! them in one streaming pass); `tagged` reads the `Record` around them.
//!
//! Serialization and the JSON Schema stay derived on the record types (`mod.rs`). A field added
//! there must be added to its twin here: the conversions below name every field, so the compiler
//! refuses a twin that lacks one, and the tests (`parse_tests.rs`) hold the twins to the schema's
//! required fields.

use std::fmt;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, DeserializeOwned, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use super::{
    CacheEvidence, CacheState, CellKey, ErrorInfo, GroupRecord, Measurement, Mode, PageCache, PhysicsRecord,
    QualityFlag, Scenario, StaggeredRecord, ThermalRecord, TurnSummary,
};

pub(super) const TAG: &str = "record_type";

/// What a reading keeps of the raw samples and server payloads: `Full` keeps them; `lean::Lean`
/// only checks them (what it accepts is exactly what `Full` accepts).
pub(super) trait Depth {
    /// Token offsets.
    type Offsets: DeserializeOwned + Kept<Vec<f64>>;
    /// The output sample.
    type Text: DeserializeOwned + Kept<String>;
    /// Server timings and stats (any JSON), read inside an `Option`.
    type Json: DeserializeOwned;
    fn json(value: Option<Self::Json>) -> Option<Value>;
}

/// What a field read at some `Depth` keeps.
pub(super) trait Kept<T> {
    fn kept(self) -> T;
}

impl Kept<Vec<f64>> for Vec<f64> {
    fn kept(self) -> Vec<f64> {
        self
    }
}

impl Kept<String> for String {
    fn kept(self) -> String {
        self
    }
}

/// Every field.
pub(super) struct Full;

impl Depth for Full {
    type Offsets = Vec<f64>;
    type Text = String;
    type Json = Value;
    fn json(value: Option<Value>) -> Option<Value> {
        value
    }
}

fn one() -> u32 {
    1
}

#[derive(Deserialize)]
#[serde(rename = "Measurement", bound = "")]
pub(super) struct MeasurementWire<K: Depth> {
    schema_version: u32,
    run_id: String,
    model: String,
    #[serde(deserialize_with = "unit_enum")]
    scenario: Scenario,
    #[serde(deserialize_with = "unit_enum")]
    cache_state: CacheState,
    #[serde(deserialize_with = "unit_enum")]
    mode: Mode,
    context_tokens: u32,
    #[serde(default)]
    dataset_row: Option<u32>,
    batch_size: u32,
    run: u32,
    request_index: u32,
    group_id: Option<String>,
    #[serde(default)]
    lifecycle_id: Option<String>,
    started_at: String,
    nonce: String,
    send_lag_ms: Option<f64>,
    #[serde(default)]
    offered_rate_per_s: Option<f64>,
    #[serde(default)]
    scheduled_send_ms: Option<f64>,
    #[serde(default)]
    actual_send_ms: Option<f64>,
    #[serde(default)]
    prepare_late_ms: Option<f64>,
    #[serde(default)]
    concurrency: Option<u32>,
    #[serde(default)]
    user_id: Option<u32>,
    #[serde(default)]
    warmup: bool,
    first_byte_ms: Option<f64>,
    first_event_ms: Option<f64>,
    ttft_ms: Option<f64>,
    e2e_ms: Option<f64>,
    token_offsets_ms: K::Offsets,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    expected_input_tokens: Option<u64>,
    delta_count: u64,
    #[serde(default)]
    distinct_arrivals: Option<u64>,
    decode_tps: Option<f64>,
    prefill_tps: Option<f64>,
    max_tokens: u32,
    finish_reason: Option<String>,
    output_sample: K::Text,
    reload_ms: Option<f64>,
    #[serde(default, deserialize_with = "optional_enum")]
    page_cache: Option<PageCache>,
    turns: Vec<TurnSummary>,
    #[serde(default)]
    think_ms: Option<f64>,
    cache_evidence: Option<CacheEvidence>,
    cache_state_confirmed: Option<bool>,
    server_timings: Option<K::Json>,
    server_stats: Option<K::Json>,
    #[serde(default)]
    server_metrics: Option<crate::record::MetricsDelta>,
    quality_ok: bool,
    quality_flags: Vec<QualityFlag>,
    thermal: Option<ThermalRecord>,
    physics: Option<PhysicsRecord>,
    error: Option<ErrorInfo>,
    #[serde(default = "one")]
    attempts: u32,
    #[serde(default)]
    unexpected_bytes_dropped: bool,
    /// The tag, when it is read with the fields (see `Tagged`).
    #[serde(rename = "record_type", default)]
    tag: Option<IgnoredAny>,
}

impl<K: Depth> From<MeasurementWire<K>> for Measurement {
    fn from(w: MeasurementWire<K>) -> Measurement {
        Measurement {
            schema_version: w.schema_version,
            run_id: w.run_id,
            cell: CellKey {
                model: w.model,
                scenario: w.scenario,
                cache_state: w.cache_state,
                mode: w.mode,
                context_tokens: w.context_tokens,
                dataset_row: w.dataset_row,
                batch_size: w.batch_size,
                run: w.run,
            },
            request_index: w.request_index,
            group_id: w.group_id,
            lifecycle_id: w.lifecycle_id,
            started_at: w.started_at,
            nonce: w.nonce,
            send_lag_ms: w.send_lag_ms,
            offered_rate_per_s: w.offered_rate_per_s,
            scheduled_send_ms: w.scheduled_send_ms,
            actual_send_ms: w.actual_send_ms,
            prepare_late_ms: w.prepare_late_ms,
            concurrency: w.concurrency,
            user_id: w.user_id,
            warmup: w.warmup,
            first_byte_ms: w.first_byte_ms,
            first_event_ms: w.first_event_ms,
            ttft_ms: w.ttft_ms,
            e2e_ms: w.e2e_ms,
            token_offsets_ms: w.token_offsets_ms.kept(),
            input_tokens: w.input_tokens,
            output_tokens: w.output_tokens,
            cached_tokens: w.cached_tokens,
            expected_input_tokens: w.expected_input_tokens,
            delta_count: w.delta_count,
            distinct_arrivals: w.distinct_arrivals,
            decode_tps: w.decode_tps,
            prefill_tps: w.prefill_tps,
            max_tokens: w.max_tokens,
            finish_reason: w.finish_reason,
            output_sample: w.output_sample.kept(),
            reload_ms: w.reload_ms,
            page_cache: w.page_cache,
            turns: w.turns,
            think_ms: w.think_ms,
            cache_evidence: w.cache_evidence,
            cache_state_confirmed: w.cache_state_confirmed,
            server_timings: K::json(w.server_timings),
            server_stats: K::json(w.server_stats),
            server_metrics: w.server_metrics,
            quality_ok: w.quality_ok,
            quality_flags: w.quality_flags,
            thermal: w.thermal,
            physics: w.physics,
            error: w.error,
            attempts: w.attempts,
            unexpected_bytes_dropped: w.unexpected_bytes_dropped,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename = "GroupRecord")]
pub(super) struct GroupWire {
    schema_version: u32,
    run_id: String,
    model: String,
    #[serde(deserialize_with = "unit_enum")]
    scenario: Scenario,
    #[serde(deserialize_with = "unit_enum")]
    cache_state: CacheState,
    #[serde(deserialize_with = "unit_enum")]
    mode: Mode,
    context_tokens: u32,
    #[serde(default)]
    dataset_row: Option<u32>,
    batch_size: u32,
    run: u32,
    group_id: String,
    started_at: String,
    wall_ms: f64,
    system_tps: Option<f64>,
    per_request_tps: Option<f64>,
    avg_ttft_ms: Option<f64>,
    avg_e2e_ms: Option<f64>,
    total_output_tokens: u64,
    requests_ok: u32,
    requests_failed: u32,
    #[serde(default)]
    server_metrics: Option<crate::record::MetricsDelta>,
    error: Option<ErrorInfo>,
    #[serde(rename = "record_type", default)]
    tag: Option<IgnoredAny>,
}

impl From<GroupWire> for GroupRecord {
    fn from(w: GroupWire) -> GroupRecord {
        GroupRecord {
            schema_version: w.schema_version,
            run_id: w.run_id,
            cell: CellKey {
                model: w.model,
                scenario: w.scenario,
                cache_state: w.cache_state,
                mode: w.mode,
                context_tokens: w.context_tokens,
                dataset_row: w.dataset_row,
                batch_size: w.batch_size,
                run: w.run,
            },
            group_id: w.group_id,
            started_at: w.started_at,
            wall_ms: w.wall_ms,
            system_tps: w.system_tps,
            per_request_tps: w.per_request_tps,
            avg_ttft_ms: w.avg_ttft_ms,
            avg_e2e_ms: w.avg_e2e_ms,
            total_output_tokens: w.total_output_tokens,
            requests_ok: w.requests_ok,
            requests_failed: w.requests_failed,
            server_metrics: w.server_metrics,
            error: w.error,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename = "StaggeredRecord", bound = "")]
pub(super) struct StaggeredWire<K: Depth> {
    schema_version: u32,
    run_id: String,
    model: String,
    #[serde(deserialize_with = "unit_enum")]
    scenario: Scenario,
    #[serde(deserialize_with = "unit_enum")]
    cache_state: CacheState,
    #[serde(deserialize_with = "unit_enum")]
    mode: Mode,
    context_tokens: u32,
    #[serde(default)]
    dataset_row: Option<u32>,
    batch_size: u32,
    run: u32,
    started_at: String,
    stagger_delay_ms: Option<f64>,
    user_a_ttft_ms: Option<f64>,
    user_a_e2e_ms: Option<f64>,
    user_b_ttft_ms: Option<f64>,
    user_b_e2e_ms: Option<f64>,
    user_b_arrival_ms: Option<f64>,
    user_b_ttft_from_wall_start_ms: Option<f64>,
    overlapped: Option<bool>,
    overlap_ms: Option<f64>,
    total_wall_ms: Option<f64>,
    user_a_output_tokens: Option<u64>,
    user_b_output_tokens: Option<u64>,
    user_a_token_offsets_ms: K::Offsets,
    user_b_token_offsets_ms: K::Offsets,
    system_tps: Option<f64>,
    quality_ok: bool,
    quality_flags: Vec<QualityFlag>,
    thermal: Option<ThermalRecord>,
    error: Option<ErrorInfo>,
    #[serde(rename = "record_type", default)]
    tag: Option<IgnoredAny>,
}

impl<K: Depth> From<StaggeredWire<K>> for StaggeredRecord {
    fn from(w: StaggeredWire<K>) -> StaggeredRecord {
        StaggeredRecord {
            schema_version: w.schema_version,
            run_id: w.run_id,
            cell: CellKey {
                model: w.model,
                scenario: w.scenario,
                cache_state: w.cache_state,
                mode: w.mode,
                context_tokens: w.context_tokens,
                dataset_row: w.dataset_row,
                batch_size: w.batch_size,
                run: w.run,
            },
            started_at: w.started_at,
            stagger_delay_ms: w.stagger_delay_ms,
            user_a_ttft_ms: w.user_a_ttft_ms,
            user_a_e2e_ms: w.user_a_e2e_ms,
            user_b_ttft_ms: w.user_b_ttft_ms,
            user_b_e2e_ms: w.user_b_e2e_ms,
            user_b_arrival_ms: w.user_b_arrival_ms,
            user_b_ttft_from_wall_start_ms: w.user_b_ttft_from_wall_start_ms,
            overlapped: w.overlapped,
            overlap_ms: w.overlap_ms,
            total_wall_ms: w.total_wall_ms,
            user_a_output_tokens: w.user_a_output_tokens,
            user_b_output_tokens: w.user_b_output_tokens,
            user_a_token_offsets_ms: w.user_a_token_offsets_ms.kept(),
            user_b_token_offsets_ms: w.user_b_token_offsets_ms.kept(),
            system_tps: w.system_tps,
            quality_ok: w.quality_ok,
            quality_flags: w.quality_flags,
            thermal: w.thermal,
            error: w.error,
        }
    }
}

/// A cell key's enum (scenario, cache state, mode) read as the flattened key read it: a wrong type
/// is named ("invalid type: integer `1`, expected string or map") where serde_json reading the
/// enum directly would only say "expected value".
fn unit_enum<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    struct EnumVisitor<T>(std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for EnumVisitor<T> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("string or map")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            T::deserialize(de::value::StrDeserializer::new(v))
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(MapAccessDeserializer::new(map))
        }
    }

    d.deserialize_any(EnumVisitor(std::marker::PhantomData))
}

/// An optional unit enum (null or absent: None), a wrong type named as `unit_enum` names it.
fn optional_enum<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    struct OptionVisitor<T>(std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for OptionVisitor<T> {
        type Value = Option<T>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("option")
        }

        fn visit_none<E: de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }

        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Option<T>, D2::Error> {
            unit_enum(d).map(Some)
        }
    }

    d.deserialize_option(OptionVisitor(std::marker::PhantomData))
}

/// A record type read alone ignores a `record_type` key (the store reads a line it knows the type
/// of straight into that type); read as a `Record` variant, its tag was taken already, so a second
/// one is a duplicate, as it was for the derived enum.
macro_rules! read_as {
    ($ty:ty, $wire:ty, $full:ty) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
                <$full>::deserialize(d).map(<$ty>::from)
            }
        }

        impl<K: Depth> $wire {
            pub(super) fn untagged<'de, D: Deserializer<'de>>(d: D) -> Result<Box<$ty>, D::Error> {
                let wire = <$wire>::deserialize(d)?;
                if wire.tag.is_some() {
                    return Err(de::Error::duplicate_field(TAG));
                }
                Ok(Box::new(<$ty>::from(wire)))
            }
        }
    };
}

read_as!(Measurement, MeasurementWire<K>, MeasurementWire<Full>);
read_as!(StaggeredRecord, StaggeredWire<K>, StaggeredWire<Full>);

impl<'de> Deserialize<'de> for GroupRecord {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<GroupRecord, D::Error> {
        GroupWire::deserialize(d).map(GroupRecord::from)
    }
}

impl GroupWire {
    pub(super) fn untagged<'de, D: Deserializer<'de>>(d: D) -> Result<Box<GroupRecord>, D::Error> {
        let wire = GroupWire::deserialize(d)?;
        if wire.tag.is_some() {
            return Err(de::Error::duplicate_field(TAG));
        }
        Ok(Box::new(GroupRecord::from(wire)))
    }
}

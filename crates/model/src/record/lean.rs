//! Reading a record lean: `Record::lean` of it, without building what it drops. Token offsets,
//! the output sample and server timings and stats are read only to check them (a tenth of a
//! 100,000-record report went to building vectors, strings and JSON maps it then threw away).
//!
//! What a lean reading accepts is exactly what the full reading accepts (the same JSON types, the
//! same nesting limit), so a reader that falls back to the full reading on any error names every
//! error as before; `parse_tests.rs` holds the two together on every line it tries.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::Record;
use super::tagged::RecordVisitor;
use super::wire::{Depth, Kept};

/// `Record::lean` of the record read (`LeanRecord(record)`).
pub struct LeanRecord(pub Record);

impl<'de> Deserialize<'de> for LeanRecord {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<LeanRecord, D::Error> {
        let record = d.deserialize_map(RecordVisitor::<Lean>(std::marker::PhantomData))?;
        Ok(LeanRecord(record.lean()))
    }
}

/// `Record::timed` of the record read (`TimedRecord(record)`): lean, its token offsets kept.
pub struct TimedRecord(pub Record);

impl<'de> Deserialize<'de> for TimedRecord {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<TimedRecord, D::Error> {
        let record = d.deserialize_map(RecordVisitor::<Timed>(std::marker::PhantomData))?;
        Ok(TimedRecord(record.timed()))
    }
}

/// Checks the raw samples and payloads, keeps none of them.
pub(super) struct Lean;

impl Depth for Lean {
    type Offsets = Numbers;
    type Text = Text;
    type Json = Option<AnyJson>;
}

/// Keeps the token offsets (inter-token latency is read from them), checks the rest as `Lean`.
pub(super) struct Timed;

impl Depth for Timed {
    type Offsets = Vec<f64>;
    type Text = Text;
    type Json = Option<AnyJson>;
}

/// An array of numbers, as `Vec<f64>` reads it.
pub(super) struct Numbers;

impl<'de> Deserialize<'de> for Numbers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Numbers, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Numbers;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Numbers, A::Error> {
                while seq.next_element::<f64>()?.is_some() {}
                Ok(Numbers)
            }
        }
        d.deserialize_seq(V)
    }
}

impl Kept<Vec<f64>> for Numbers {
    fn kept(self) -> Vec<f64> {
        Vec::new()
    }
}

/// A string, as `String` reads it.
pub(super) struct Text;

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Text, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Text, E> {
                Ok(Text)
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Text, E> {
                match std::str::from_utf8(v) {
                    Ok(_) => Ok(Text),
                    Err(_) => Err(E::invalid_value(de::Unexpected::Bytes(v), &self)),
                }
            }
        }
        d.deserialize_string(V)
    }
}

impl Kept<String> for Text {
    fn kept(self) -> String {
        String::new()
    }
}

/// Any JSON value, read as `serde_json::Value` reads it (through `deserialize_any`, so its numbers
/// and its nesting are checked as they are for a `Value`), keeping nothing.
pub(super) struct AnyJson;

impl Kept<Option<Box<Value>>> for Option<AnyJson> {
    fn kept(self) -> Option<Box<Value>> {
        None
    }
}

impl<'de> Deserialize<'de> for AnyJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AnyJson, D::Error> {
        d.deserialize_any(AnyVisitor)
    }
}

struct AnyVisitor;

impl<'de> Visitor<'de> for AnyVisitor {
    type Value = AnyJson;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }

    fn visit_i64<E>(self, _: i64) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }

    fn visit_u64<E>(self, _: u64) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }

    fn visit_f64<E>(self, _: f64) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }

    fn visit_str<E>(self, _: &str) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }

    fn visit_none<E>(self) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<AnyJson, D::Error> {
        AnyJson::deserialize(d)
    }

    fn visit_unit<E>(self) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AnyJson, A::Error> {
        while seq.next_element::<AnyJson>()?.is_some() {}
        Ok(AnyJson)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnyJson, A::Error> {
        // Keys as a `Value` map reads them: strings.
        while map.next_key::<Key>()?.is_some() {
            map.next_value::<AnyJson>()?;
        }
        Ok(AnyJson)
    }
}

/// A map key, checked to be a string.
struct Key;

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Key, E> {
                Ok(Key)
            }
        }
        d.deserialize_str(V)
    }
}

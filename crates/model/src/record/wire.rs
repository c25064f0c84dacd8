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
//! Each field is declared once, in the `record_types!` invocation in `mod.rs` (the cell key's in
//! `with_cell_key_fields!` in `cell.rs`): the macro below declares from that one list the record
//! type (serialization and the JSON Schema derived on it), its twin (`twin::Measurement` ...), the
//! conversion from the twin, and for the tests the type as serde derived its reading
//! (`derived::Measurement` ..., flatten included), which `parse_tests.rs` holds the twins to.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, Visitor};
use serde_json::Value;

pub(super) const TAG: &str = "record_type";

/// What a reading keeps of the raw samples and server payloads: `Full` keeps them; `lean::Lean`
/// only checks them (what it accepts is exactly what `Full` accepts).
pub(super) trait Depth {
    /// Token offsets.
    type Offsets: DeserializeOwned + Kept<Vec<f64>>;
    /// The output sample.
    type Text: DeserializeOwned + Kept<String>;
    /// Server timings and stats (any JSON, or null or absent).
    type Json: DeserializeOwned + Kept<Option<Box<Value>>>;
}

/// What a twin's field, read at some `Depth`, keeps of the record's field: the field itself, for
/// every field read as the record declares it.
pub(super) trait Kept<T> {
    fn kept(self) -> T;
}

impl<T> Kept<T> for T {
    fn kept(self) -> T {
        self
    }
}

/// Every field.
pub(super) struct Full;

impl Depth for Full {
    type Offsets = Vec<f64>;
    type Text = String;
    type Json = Option<Box<Value>>;
}

/// A cell key's enum (scenario, cache state, mode) read as the flattened key read it: a wrong type
/// is named ("invalid type: integer `1`, expected string or map") where serde_json reading the
/// enum directly would only say "expected value".
pub(super) struct UnitEnum<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for UnitEnum<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<UnitEnum<T>, D::Error> {
        unit_enum(d).map(UnitEnum)
    }
}

impl<T> Kept<T> for UnitEnum<T> {
    fn kept(self) -> T {
        self.0
    }
}

/// An optional unit enum (null or absent: None), a wrong type named as `UnitEnum` names it.
pub(super) struct OptionalEnum<T>(Option<T>);

impl<T> Default for OptionalEnum<T> {
    fn default() -> OptionalEnum<T> {
        OptionalEnum(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OptionalEnum<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<OptionalEnum<T>, D::Error> {
        optional_enum(d).map(OptionalEnum)
    }
}

impl<T> Kept<Option<T>> for OptionalEnum<T> {
    fn kept(self) -> Option<T> {
        self.0
    }
}

fn unit_enum<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    struct EnumVisitor<T>(PhantomData<T>);

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

    d.deserialize_any(EnumVisitor(PhantomData))
}

fn optional_enum<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    struct OptionVisitor<T>(PhantomData<T>);

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

    d.deserialize_option(OptionVisitor(PhantomData))
}

/// Declares the record types from their fields, each field written once. The input is the record
/// types as they are declared (doc comments, derives, serde attributes), each field ended by a
/// comma, with two additions the macro reads:
/// - the flattened cell key is written `flatten cell: CellKey,`; its fields are
///   `with_cell_key_fields!`'s;
/// - a field its twin reads as another type names that type after its own:
///   `pub token_offsets_ms: Vec<f64> => K::Offsets,` (`K: Depth` is the twin's depth); `Kept` turns
///   what was read into the record's field.
///
/// For each type it declares:
/// - the record type, its fields as written and the cell key as `#[serde(flatten)] pub cell`;
/// - `twin::Type<K>`: every field, the cell key's inline, with its serde attributes, plus the tag
///   when it comes with the fields (`tagged`); the conversion into the record type;
///   `Deserialize` for the record type through it (a record type read alone ignores a
///   `record_type` key: the store reads a line it knows the type of straight into that type);
///   `untagged`, the record read as a `Record` variant;
/// - under test, `derived::Type`: the record type with serde's derived reading, flatten included
///   (the reading the twins replaced, which `parse_tests` holds them to).
macro_rules! record_types {
    (
        @cell $cell:tt
        $( $(#[$attr:meta])* pub struct $name:ident $body:tt )*
    ) => {
        $( record_types!(@public $(#[$attr])* $name $body); )*

        /// The twins the records are read through (`wire`).
        mod twin {
            use super::*;
            use super::wire::{Depth, Full, Kept, OptionalEnum, TAG, UnitEnum};
            $( record_types!(@twin $cell $name $body); )*
        }

        /// The record types as serde derives their reading: what the twins must read alike.
        #[cfg(test)]
        mod derived {
            use super::*;
            $( record_types!(@public #[derive(serde::Serialize, serde::Deserialize)] $name $body); )*
        }
    };
    (
        @public $(#[$attr:meta])* $name:ident {
            $( $(#[$ha:meta])* pub $hf:ident : $ht:ty $(=> $hw:ty)? , )*
            flatten $cell:ident : CellKey ,
            $( $(#[$ta:meta])* pub $tf:ident : $tty:ty $(=> $tw:ty)? , )*
        }
    ) => {
        $(#[$attr])*
        pub struct $name {
            $( $(#[$ha])* pub $hf: $ht, )*
            #[serde(flatten)]
            pub $cell: CellKey,
            $( $(#[$ta])* pub $tf: $tty, )*
        }
    };
    (
        @twin
        { $( $(#[$ca:meta])* pub $cf:ident : $ct:ty $(=> $cw:ty)? , )* }
        $name:ident {
            $( $(#[$ha:meta])* pub $hf:ident : $ht:ty $(=> $hw:ty)? , )*
            flatten $cell:ident : CellKey ,
            $( $(#[$ta:meta])* pub $tf:ident : $tty:ty $(=> $tw:ty)? , )*
        }
    ) => {
        #[derive(serde::Deserialize)]
        #[serde(bound = "")]
        pub(super) struct $name<K: Depth> {
            $( $(#[$ha])* $hf: record_types!(@read $ht $(=> $hw)?), )*
            $( $(#[$ca])* $cf: record_types!(@read $ct $(=> $cw)?), )*
            $( $(#[$ta])* $tf: record_types!(@read $tty $(=> $tw)?), )*
            /// The tag, when it is read with the fields (see `tagged`).
            #[serde(rename = "record_type", default)]
            tag: Option<serde::de::IgnoredAny>,
            #[serde(skip)]
            depth: std::marker::PhantomData<K>,
        }

        impl<K: Depth> From<$name<K>> for super::$name {
            fn from(w: $name<K>) -> super::$name {
                super::$name {
                    $( $hf: Kept::<$ht>::kept(w.$hf), )*
                    $cell: CellKey { $( $cf: Kept::<$ct>::kept(w.$cf), )* },
                    $( $tf: Kept::<$tty>::kept(w.$tf), )*
                }
            }
        }

        impl<'de> serde::Deserialize<'de> for super::$name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<super::$name, D::Error> {
                <$name<Full> as serde::Deserialize>::deserialize(d).map(super::$name::from)
            }
        }

        impl<K: Depth> $name<K> {
            /// Read as a `Record` variant: its tag was taken already, so a second one is a
            /// duplicate, as it was for the derived enum.
            pub(super) fn untagged<'de, D: serde::Deserializer<'de>>(
                d: D,
            ) -> Result<Box<super::$name>, D::Error> {
                let wire = <$name<K> as serde::Deserialize>::deserialize(d)?;
                if wire.tag.is_some() {
                    return Err(serde::de::Error::duplicate_field(TAG));
                }
                Ok(Box::new(super::$name::from(wire)))
            }
        }
    };
    (@read $ty:ty => $wire:ty) => { $wire };
    (@read $ty:ty) => { $ty };
    ($( $(#[$attr:meta])* pub struct $name:ident $body:tt )*) => {
        with_cell_key_fields!(record_types! { $( $(#[$attr])* pub struct $name $body )* });
    };
}

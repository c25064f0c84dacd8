//! A `Record`: its tag (`record_type`) names the variant. bench writes the tag first, and such a
//! record is read straight into its variant (`wire`); a record whose tag comes later is buffered as
//! JSON values and read the same way, so what parses and what fails is what the derived,
//! internally tagged enum accepted.

use std::fmt;

use serde::Deserialize;
use serde::de::value::{MapAccessDeserializer, MapDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use super::Record;
use super::twin;
use super::wire::{Depth, Full, TAG};

#[derive(Clone, Copy)]
enum Tag {
    Measurement,
    Group,
    Staggered,
}

const VARIANTS: &[&str] = &["measurement", "group", "staggered"];

/// The tag's value, with the derived enum's messages.
struct TagVisitor;

impl Visitor<'_> for TagVisitor {
    type Value = Tag;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("variant identifier")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Tag, E> {
        match v {
            "measurement" => Ok(Tag::Measurement),
            "group" => Ok(Tag::Group),
            "staggered" => Ok(Tag::Staggered),
            other => Err(E::unknown_variant(other, VARIANTS)),
        }
    }
}

impl<'de> DeserializeSeed<'de> for TagVisitor {
    type Value = Tag;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Tag, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl Tag {
    /// The rest of the record (every field but the tag) as this variant, read at depth `K`.
    fn read<'de, K: Depth, D: Deserializer<'de>>(self, rest: D) -> Result<Record, D::Error> {
        Ok(match self {
            Tag::Measurement => Record::Measurement(twin::Measurement::<K>::untagged(rest)?),
            Tag::Group => Record::Group(twin::GroupRecord::<K>::untagged(rest)?),
            Tag::Staggered => Record::Staggered(twin::StaggeredRecord::<K>::untagged(rest)?),
        })
    }
}

impl<'de> Deserialize<'de> for Record {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Record, D::Error> {
        d.deserialize_map(RecordVisitor::<Full>(std::marker::PhantomData))
    }
}

/// A record read at depth `K`.
pub(super) struct RecordVisitor<K>(pub(super) std::marker::PhantomData<K>);

impl<'de, K: Depth> Visitor<'de> for RecordVisitor<K> {
    type Value = Record;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("internally tagged enum Record")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Record, A::Error> {
        let Some(first) = map.next_key_seed(KeySeed)? else {
            return Err(de::Error::missing_field(TAG));
        };
        let first = match first {
            Key::Tag => {
                let tag = map.next_value_seed(TagVisitor)?;
                return tag.read::<K, _>(MapAccessDeserializer::new(map));
            }
            Key::Other(key) => key,
        };
        // The tag comes later: buffer the members (in order, duplicates kept so that they are
        // refused as duplicates), then read them like the streamed case.
        let mut members: Vec<(String, Value)> = vec![(first, map.next_value()?)];
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let key = match key {
                Key::Tag => TAG.to_string(),
                Key::Other(key) => key,
            };
            members.push((key, map.next_value()?));
        }
        let mut tags = members.iter().filter(|(k, _)| k == TAG);
        let (Some((_, tag)), None) = (tags.next(), tags.next()) else {
            let found = members.iter().any(|(k, _)| k == TAG);
            return Err(if found { de::Error::duplicate_field(TAG) } else { de::Error::missing_field(TAG) });
        };
        let tag = TagVisitor.deserialize(tag).map_err(de::Error::custom)?;
        members.retain(|(k, _)| k != TAG);
        let rest = MapDeserializer::<_, serde_json::Error>::new(members.into_iter());
        tag.read::<K, _>(rest).map_err(de::Error::custom)
    }
}

/// A member's key: the tag, or any other (kept for the buffered case).
enum Key {
    Tag,
    Other(String),
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeySeed {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
        Ok(if v == TAG { Key::Tag } else { Key::Other(v.to_string()) })
    }
}

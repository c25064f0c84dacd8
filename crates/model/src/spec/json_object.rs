//! `--extra-body`: a JSON object given as text on the command line, or as text or a table in a
//! scenario file.

use std::fmt;
use std::str::FromStr;

use serde::de::Deserializer;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

/// A JSON object (`{"ignore_eos": true, "top_k": 1}`); anything else is refused where it is given.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct JsonObject(pub Map<String, Value>);

/// Why a text is not a JSON object.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotAnObject(String);

impl FromStr for JsonObject {
    type Err = NotAnObject;
    fn from_str(text: &str) -> Result<JsonObject, NotAnObject> {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => Ok(JsonObject(map)),
            Ok(other) => Err(NotAnObject(format!(
                "{other} is not a JSON object (example: '{{\"ignore_eos\": true, \"top_k\": 1}}')"
            ))),
            Err(e) => Err(NotAnObject(format!("{text:?} is not JSON: {e}"))),
        }
    }
}

impl fmt::Display for JsonObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Value::Object(self.0.clone()))
    }
}

impl Serialize for JsonObject {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for JsonObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JsonObject, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Table(Map<String, Value>),
            Text(String),
        }
        match Given::deserialize(d)? {
            Given::Table(map) => Ok(JsonObject(map)),
            Given::Text(text) => text.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_object_is_a_json_object() {
        assert_eq!("{\"top_k\": 1}".parse::<JsonObject>().unwrap().0["top_k"], 1);
        assert!("[1]".parse::<JsonObject>().unwrap_err().to_string().contains("not a JSON object"));
        assert!("{top_k".parse::<JsonObject>().unwrap_err().to_string().contains("not JSON"));
    }
}

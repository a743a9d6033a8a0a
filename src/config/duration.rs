//! Durations written the human way in the config file: `"500ms"`, `"4s"`, `"5m"`.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

pub(super) fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(de)?;
    humantime::parse_duration(text.trim()).map_err(|e| {
        serde::de::Error::custom(format!(
            "invalid duration `{text}`: {e} (write it like \"500ms\", \"4s\" or \"5m\")"
        ))
    })
}

pub(super) fn serialize<S: Serializer>(value: &Duration, ser: S) -> Result<S::Ok, S::Error> {
    ser.collect_str(&humantime::format_duration(*value))
}

/// The same, for optional durations.
pub(super) mod option {
    use std::time::Duration;

    use serde::{Deserializer, Serializer};

    pub(in crate::config) fn deserialize<'de, D: Deserializer<'de>>(
        de: D,
    ) -> Result<Option<Duration>, D::Error> {
        super::deserialize(de).map(Some)
    }

    pub(in crate::config) fn serialize<S: Serializer>(
        value: &Option<Duration>,
        ser: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => super::serialize(d, ser),
            None => ser.serialize_none(),
        }
    }
}

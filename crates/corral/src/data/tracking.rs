//! The setting that says how a Redis store learns of changes made outside
//! this process ([`Tracking`]): read from code or from a config file.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use crate::data::error::ConfigError;

/// How a `RedisStore` learns of changes made outside this process — by any
/// client: other processes, an operator's `DEL`, an expiry, an eviction, a
/// `FLUSHDB` — so the caches on it drop their stale in-process copies
/// (Redis client tracking; see the `RedisStore` docs, "Coherence", for
/// how to choose).
///
/// Where the server refuses client tracking (Redis before 6, `CLIENT` or
/// `HELLO` refused, a proxy), the store runs without it, as with
/// [`Off`](Self::Off), and logs why once. In a config file:
/// `redis_tracking = "keys"`, `"bcast"` or `"off"` (`true` and `false`
/// read as `"keys"` and `"off"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Tracking {
    /// The server remembers the keys this process read and tells it alone
    /// when one of them changes (client tracking's default mode). Costs
    /// server memory per key read, per process. The default.
    #[default]
    Keys,
    /// The server tells every process of a namespace of every change of
    /// the namespace's values and tag versions, read or not (client
    /// tracking's `BCAST` mode, by key prefix). Keeps nothing per key on
    /// the server; costs one message per change to every process with a
    /// cache of the namespace.
    Broadcast,
    /// No client tracking: only corral's own writes (the backplane) reach
    /// the caches' in-process copies.
    Off,
}

impl Tracking {
    /// Its name in config files: `keys`, `bcast`, `off`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Keys => "keys",
            Self::Broadcast => "bcast",
            Self::Off => "off",
        }
    }
}

impl fmt::Display for Tracking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Tracking {
    type Err = ConfigError;

    /// `keys` (or `on`, `true`), `bcast` (or `broadcast`), `off` (or
    /// `false`), in any case.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "keys" | "on" | "true" => Ok(Self::Keys),
            "bcast" | "broadcast" => Ok(Self::Broadcast),
            "off" | "false" => Ok(Self::Off),
            _ => Err(ConfigError::new(format!(
                "redis tracking {text:?}: expected \"keys\", \"bcast\" or \"off\""
            ))),
        }
    }
}

impl<'de> Deserialize<'de> for Tracking {
    /// From a string, as [`FromStr`] reads it, or a boolean (`true`:
    /// [`Keys`](Self::Keys), `false`: [`Off`](Self::Off)).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ModeVisitor)
    }
}

struct ModeVisitor;

impl Visitor<'_> for ModeVisitor {
    type Value = Tracking;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(r#""keys", "bcast" or "off""#)
    }

    fn visit_bool<E: de::Error>(self, on: bool) -> Result<Tracking, E> {
        Ok(if on { Tracking::Keys } else { Tracking::Off })
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Tracking, E> {
        text.parse().map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print_the_same_name() {
        for mode in [Tracking::Keys, Tracking::Broadcast, Tracking::Off] {
            assert_eq!(mode.to_string().parse::<Tracking>().ok(), Some(mode));
        }
        assert_eq!(
            " BCAST ".parse::<Tracking>().ok(),
            Some(Tracking::Broadcast)
        );
        assert_eq!("false".parse::<Tracking>().ok(), Some(Tracking::Off));
        let error = "bcats".parse::<Tracking>().err().map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some(
                r#"invalid cache configuration: redis tracking "bcats": expected "keys", "bcast" or "off""#
            )
        );
    }
}

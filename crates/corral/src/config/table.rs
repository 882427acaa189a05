//! What writes [`CacheConfig`](super::CacheConfig) from its one table of
//! fields (`fields.rs`, whose documentation says how to add one): the
//! `settings!` macro and [`Setting`], what the type of a field brings.
//!
//! A line of the table, `name: Type [as url | as secret] => target,`
//! (`Type` one identifier with at most one type argument), gives the
//! field: the public `Option<Type>` and how TOML reads it ([`read`]); its
//! entry in `FIELDS` (its `CORRAL_<NAME>` variable, how the variable is
//! read, whether the field is process-wide: target `store`); its part of
//! `overlay`, of the fields a config sets and of what reaches the builder
//! (target `builder` or `with(method)`); the setter of its name (taking
//! `impl Into<String>` for a `String`, any iterator of them for a
//! `Vec<String>`); its `Debug` entry; and, for the tests, its samples.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::redact::redact_url;

/// How a variable's value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Text,
    List,
    Bool,
    Number,
    Numbers,
    Duration,
}

/// The form a duration is written in, for error messages.
const DURATION_FORM: &str = r#"a duration with a unit (ms, s, m, h or d), like "60s""#;

/// Deserializes a duration written as a number and a unit.
pub(super) fn read_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    deserializer.deserialize_any(DurationVisitor)
}

/// Reads a duration string; any other type is an error that shows the
/// form expected (`ttl = 60` → "expected a duration with a unit ... like
/// "60s"").
struct DurationVisitor;

impl serde::de::Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(DURATION_FORM)
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Duration, E> {
        parse_duration(text).map_err(E::custom)
    }
}

/// Parses `"250ms"`, `"1.5s"`, `"5m"`, `"2h"`, `"1d"`.
pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| {
            format!(r#"duration {text:?} has no unit (ms, s, m, h or d), like "60s""#)
        })?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("duration {text:?}: {number:?} is not a number"))?;
    let seconds = match unit.trim() {
        "ms" => number / 1000.0,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        "d" => number * 86_400.0,
        other => {
            return Err(format!(
                "duration {text:?}: unknown unit {other:?} (ms, s, m, h or d)"
            ))
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("duration {text:?}: {e}"))
}

/// A field of the table, as the readers of variables and sections see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Field {
    /// Its name: the TOML key and, upper case after the prefix, the
    /// variable (`ttl`: `CORRAL_TTL`).
    pub(super) name: &'static str,
    /// How a variable's value is read.
    pub(super) kind: Kind,
    /// Whether it describes the process's one store: set globally, never
    /// per cache (the caches of a process share one store).
    pub(super) process: bool,
}

/// What the type of a field brings to its surfaces.
pub(super) trait Setting: Sized {
    /// How a variable holding it is read.
    const KIND: Kind;

    /// Reads it from TOML (or from a variable, once turned into TOML).
    fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error>;

    /// How `Debug` shows it.
    fn show(&self) -> String;
}

/// Reads a field that is present: the `deserialize_with` of every field.
pub(super) fn read<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Setting,
{
    T::read(deserializer).map(Some)
}

/// `Setting` for types read by serde as they are; `display` types are
/// shown as they print, `debug` ones as `{:?}`.
macro_rules! plain_settings {
    ($($ty:ty => $kind:ident, $show:ident;)*) => {$(
        impl Setting for $ty {
            const KIND: Kind = Kind::$kind;

            fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                <$ty>::deserialize(deserializer)
            }

            fn show(&self) -> String {
                plain_settings!(@show self, $show)
            }
        }
    )*};
    (@show $value:ident, display) => { $value.to_string() };
    (@show $value:ident, debug) => { format!("{:?}", $value) };
}

plain_settings! {
    bool => Bool, display;
    f64 => Number, display;
    u32 => Number, display;
    u64 => Number, display;
    usize => Number, display;
    Vec<u32> => Numbers, debug;
    String => Text, debug;
    Vec<String> => List, debug;
    crate::data::compression::Compression => Text, display;
    crate::data::tracking::Tracking => Text, display;
}

/// A duration is written as a number and a unit (`"250ms"`, `"5m"`).
impl Setting for Duration {
    const KIND: Kind = Kind::Duration;

    fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        read_duration(deserializer)
    }

    fn show(&self) -> String {
        format!("{self:?}")
    }
}

/// How `Debug` shows a field marked `as url`: every password hidden.
pub(super) trait Redacted {
    /// The value with its passwords replaced by `***`.
    fn redacted(&self) -> String;
}

impl Redacted for String {
    fn redacted(&self) -> String {
        redact_url(self)
    }
}

impl Redacted for Vec<String> {
    fn redacted(&self) -> String {
        let urls: Vec<String> = self.iter().map(|url| redact_url(url)).collect();
        format!("{urls:?}")
    }
}

/// Writes [`CacheConfig`](super::CacheConfig) and every surface of its
/// fields from one line per field: see the module's documentation.
macro_rules! settings {
    (@process store) => { true };
    (@process $target:ident) => { false };

    (@apply $config:ident, $builder:ident, $field:ident, builder) => {
        if let Some(value) = $config.$field.clone() {
            $builder = $builder.$field(value);
        }
    };
    (@apply $config:ident, $builder:ident, $field:ident, with($apply:ident)) => {
        if $config.$field.is_some() {
            $builder = $builder.$apply($config);
        }
    };
    (@apply $config:ident, $builder:ident, $field:ident, store) => {};

    (@setter $field:ident, String) => {
        #[doc = concat!("Sets [`", stringify!($field), "`](Self::", stringify!($field), ").")]
        #[must_use]
        pub fn $field(mut self, value: impl Into<String>) -> Self {
            self.$field = Some(value.into());
            self
        }
    };
    (@setter $field:ident, Vec<String>) => {
        #[doc = concat!("Sets [`", stringify!($field), "`](Self::", stringify!($field), ").")]
        #[must_use]
        pub fn $field(mut self, values: impl IntoIterator<Item = impl Into<String>>) -> Self {
            self.$field = Some(values.into_iter().map(Into::into).collect());
            self
        }
    };
    (@setter $field:ident, $ty:ty) => {
        #[doc = concat!("Sets [`", stringify!($field), "`](Self::", stringify!($field), ").")]
        #[must_use]
        pub fn $field(mut self, value: $ty) -> Self {
            self.$field = Some(value);
            self
        }
    };

    (@show $value:ident) => { $crate::config::table::Setting::show($value) };
    (@show $value:ident url) => { $crate::config::table::Redacted::redacted($value) };
    (@show $value:ident secret) => {{
        let _ = $value;
        String::from("***")
    }};

    (
        $(#[$meta:meta])*
        pub struct CacheConfig {
            $(
                $(#[doc = $doc:literal])*
                $field:ident: $head:ident $(<$arg:ident>)? $(as $show:ident)?
                    => $target:ident $(($apply:ident))?,
            )*
        }
    ) => {
        $(#[$meta])*
        pub struct CacheConfig {
            $(
                $(#[doc = $doc])*
                #[serde(default, deserialize_with = "crate::config::table::read")]
                pub $field: Option<$head $(<$arg>)?>,
            )*
            /// Per-cache settings, by cache name: each over the settings
            /// above for that cache only (TOML `[cache.users]`, variables
            /// `CORRAL_USERS_TTL`; see [`for_cache`](Self::for_cache)). A
            /// section sets no Redis URL or connection setting (the
            /// process's caches share one store) and has no sections of its
            /// own. Names are matched ignoring case, with `-` and `.` read
            /// as `_`. A section for a cache that is never built is never
            /// read.
            #[serde(default)]
            pub cache: std::collections::BTreeMap<String, CacheConfig>,
        }

        /// Every field, in the table's order.
        pub(super) const FIELDS: &[$crate::config::table::Field] = &[$(
            $crate::config::table::Field {
                name: stringify!($field),
                kind: <$head $(<$arg>)? as $crate::config::table::Setting>::KIND,
                process: settings!(@process $target),
            },
        )*];

        impl CacheConfig {
            $( settings!(@setter $field, $head $(<$arg>)?); )*

            /// `self`'s fields, each over `under`'s where `self` does not
            /// set it, with `sections`.
            pub(super) fn fields_over(
                self,
                under: Self,
                sections: std::collections::BTreeMap<String, CacheConfig>,
            ) -> Self {
                Self {
                    $( $field: self.$field.or(under.$field), )*
                    cache: sections,
                }
            }

            /// The fields this config sets (not its sections').
            pub(super) fn fields_set(
                &self,
            ) -> impl Iterator<Item = &'static $crate::config::table::Field> {
                let set = [$( self.$field.is_some() ),*];
                FIELDS
                    .iter()
                    .zip(set)
                    .filter_map(|(field, set)| set.then_some(field))
            }

            /// Applies this config's own fields (not its sections) to
            /// `builder`; the `store` fields are not the builder's.
            pub(super) fn apply_own<V>(
                &self,
                mut builder: $crate::cache::builder::CacheBuilder<V>,
            ) -> $crate::cache::builder::CacheBuilder<V>
            where
                V: Clone + Send + Sync + 'static,
            {
                let config = self;
                $( settings!(@apply config, builder, $field, $target $(($apply))?); )*
                builder
            }

            /// Each field's sample values, set with its setter and written
            /// in TOML and in a variable.
            #[cfg(test)]
            pub(super) fn samples() -> Vec<$crate::config::fields::tests::examples::Sample> {
                use $crate::config::fields::tests::examples::Example;
                let mut samples = Vec::new();
                $(
                    for value in <$head $(<$arg>)? as Example>::examples() {
                        samples.push($crate::config::fields::tests::examples::Sample {
                            field: stringify!($field),
                            toml: format!("{} = {}", stringify!($field), value.toml()),
                            var: value.var(),
                            set: CacheConfig::default().$field(value),
                        });
                    }
                )*
                samples
            }
        }

        impl std::fmt::Debug for CacheConfig {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let mut set = std::collections::BTreeMap::new();
                $(
                    if let Some(value) = &self.$field {
                        set.insert(stringify!($field), settings!(@show value $($show)?));
                    }
                )*
                let mut map = f.debug_map();
                map.entries(set);
                for (name, section) in &self.cache {
                    map.entry(&format_args!("cache.{name}"), section);
                }
                map.finish()
            }
        }
    };
}

pub(super) use settings;

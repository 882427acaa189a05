//! Reading a [`CacheConfig`] from `CORRAL_*` variables and from TOML text:
//! the fields and their kinds, per-cache variables (`CORRAL_USERS_TTL`),
//! durations written with a unit, and errors on one line.

use serde::Deserialize;

use super::fields::FIELDS;
use super::table::{parse_duration, Field, Kind};
use super::CacheConfig;
use crate::data::error::ConfigError;

/// The key of cache `name`'s section: lowercase, `-` and `.` read as `_`
/// (the form a variable's name can spell).
pub(super) fn section_key(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            '-' | '.' => '_',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// Reads `vars` into a config: see [`CacheConfig::from_vars`].
pub(super) fn from_vars<'a>(
    prefix: &str,
    vars: impl Iterator<Item = (&'a str, &'a str)>,
) -> Result<CacheConfig, ConfigError> {
    let mut config = CacheConfig::default();
    for (name, value) in vars {
        let Some(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        let rest = rest.to_ascii_lowercase();
        let (section, field) = match field_of(&rest) {
            Some(found) => found,
            None => {
                return Err(ConfigError::new(format!(
                    "unknown variable {name} (known: {prefix}<FIELD> or \
                     {prefix}<CACHE>_<FIELD>, FIELD one of {})",
                    FIELDS
                        .iter()
                        .map(|field| field.name.to_ascii_uppercase())
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
        };
        if section.is_some() && field.process {
            return Err(ConfigError::new(format!(
                "{name}: {} is set for the whole process ({prefix}{}), not per cache: \
                 the caches of a process share one store",
                field.name,
                field.name.to_ascii_uppercase()
            )));
        }
        let trimmed = value.trim();
        if trimmed.is_empty() {
            continue;
        }
        let one = read_one(name, field, trimmed)?;
        config = match section {
            None => config.overlay(one),
            Some(section) => config.overlay(CacheConfig::default().cache(section, one)),
        };
    }
    Ok(config)
}

/// The section (a cache's name, `None`: global) and field a variable's
/// lowercase name without its prefix names. A global field wins;
/// otherwise the longest field the name ends with (`users_fill_timeout`:
/// cache `users`, field `fill_timeout`).
fn field_of(rest: &str) -> Option<(Option<&str>, &'static Field)> {
    if let Some(field) = FIELDS.iter().find(|field| field.name == rest) {
        return Some((None, field));
    }
    FIELDS
        .iter()
        .filter_map(|field| {
            let section = rest.strip_suffix(field.name)?.strip_suffix('_')?;
            (!section.is_empty()).then_some((Some(section), field))
        })
        .max_by_key(|(_, field)| field.name.len())
}

/// The config that variable `name` sets: its one `field`, read from
/// `value` (not blank) as the field's kind.
fn read_one(name: &str, field: &Field, value: &str) -> Result<CacheConfig, ConfigError> {
    let kind = field.kind;
    // The value of a URL variable may hold a password: never shown.
    let shown = match kind {
        Kind::Text | Kind::List => String::new(),
        _ => format!(", got {value:?}"),
    };
    let bad = |what: &str| ConfigError::new(format!("{name}: expected {what}{shown}"));
    let items = || {
        value
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
    };
    let value = match kind {
        Kind::Text => toml::Value::String(value.to_owned()),
        Kind::List => toml::Value::Array(
            items()
                .map(|url| toml::Value::String(url.to_owned()))
                .collect(),
        ),
        Kind::Bool => match value.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => toml::Value::Boolean(true),
            "0" | "false" | "no" | "off" => toml::Value::Boolean(false),
            _ => return Err(bad("true or false (also yes/no, on/off, 1/0)")),
        },
        Kind::Number => match value.parse::<i64>() {
            Ok(int) => toml::Value::Integer(int),
            Err(_) => toml::Value::Float(value.parse().map_err(|_| bad("a number"))?),
        },
        Kind::Numbers => toml::Value::Array(
            items()
                .map(|item| item.parse::<i64>().map(toml::Value::Integer))
                .collect::<Result<_, _>>()
                .map_err(|_| bad("whole numbers separated by commas"))?,
        ),
        Kind::Duration => match parse_duration(value) {
            Ok(_) => toml::Value::String(value.to_owned()),
            Err(e) => return Err(ConfigError::new(format!("{name}: {e}"))),
        },
    };
    // One variable at a time, so an error names its variable.
    let mut table = toml::Table::new();
    table.insert(field.name.to_owned(), value);
    CacheConfig::deserialize(table)
        .map_err(|e| ConfigError::new(format!("{name}: {}{shown}", one_line(&e.to_string()))))
}

/// Reads TOML text: see [`CacheConfig::from_toml`].
pub(super) fn from_toml(text: &str) -> Result<CacheConfig, ConfigError> {
    toml::from_str(text).map_err(|e| {
        let key = e.span().and_then(|span| key_at(text, span.start));
        let message = one_line(e.message());
        ConfigError::new(match key {
            Some(key) => format!("corral config: key `{key}`: {message}"),
            None => format!("corral config: {message}"),
        })
    })
}

/// The key of the `key = value` line of TOML `text` that holds byte
/// `offset`, if it is one.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let start = text.get(..offset)?.rfind('\n').map_or(0, |at| at + 1);
    let line = text.get(start..)?.lines().next()?;
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    (!key.is_empty() && !key.starts_with('[')).then(|| key.to_owned())
}

/// `message` on one line.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration(" 2h "), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert!(parse_duration("60").is_err());
        assert!(parse_duration("5 weeks").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn a_variable_names_a_global_field_or_a_caches() {
        let field = |rest| field_of(rest).map(|(section, field)| (section, field.name));
        assert_eq!(field("ttl"), Some((None, "ttl")));
        assert_eq!(field("negative_ttl"), Some((None, "negative_ttl")));
        assert_eq!(field("users_ttl"), Some((Some("users"), "ttl")));
        assert_eq!(
            field("user_sessions_fill_timeout"),
            Some((Some("user_sessions"), "fill_timeout"))
        );
        assert_eq!(
            field("users_negative_ttl"),
            Some((Some("users"), "negative_ttl"))
        );
        assert_eq!(
            field("users_l1_lifetime"),
            Some((Some("users"), "l1_lifetime"))
        );
        assert_eq!(field("tttl"), None);
        assert_eq!(field("_ttl"), None);
    }

    #[test]
    fn each_process_field_is_named_beside_its_own_value() {
        let process: Vec<&Field> = FIELDS.iter().filter(|field| field.process).collect();
        assert_eq!(process.len(), 10, "{process:?}");
        for field in process {
            let value = match field.kind {
                _ if field.name == "redis_tracking" => "bcast",
                Kind::Duration => "1s",
                Kind::List => "redis://a:1,redis://b:1",
                Kind::Bool => "false",
                _ => "redis://a:1",
            };
            let name = format!("C_{}", field.name.to_ascii_uppercase());
            let config = from_vars("C_", [(name.as_str(), value)].into_iter())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let set: Vec<&Field> = config.fields_set().collect();
            assert_eq!(set, [field], "{name}");
        }
        let ttl = FIELDS.iter().find(|field| field.name == "ttl");
        assert!(ttl.is_some_and(|field| !field.process));
    }

    #[test]
    fn section_keys_are_what_a_variable_can_spell() {
        assert_eq!(section_key("User-Sessions.v2"), "user_sessions_v2");
    }
}

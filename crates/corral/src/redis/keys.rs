//! Where a logical key lives in Redis: the names of its value, lease and
//! fence keys, and the channel its namespace is notified on. The layout is
//! described on [`RedisStore`](super::RedisStore).

use crate::store::StoreKey;

/// Prefix of every key and channel corral writes.
const PREFIX: &str = "corral:";

pub(super) use crate::key::fnv1a64;

/// The three Redis keys of one logical key; they share a hash slot.
///
/// They share everything up to the marker, so the first `{...}` of each is
/// the same whatever the namespace holds: co-location never depends on the
/// namespace. Uniqueness relies on namespaces without `{` (cache names
/// allow none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeyNames {
    /// `corral:<namespace>:{<h>}:v:<key>`: the envelope bytes.
    pub(super) value: String,
    /// `corral:<namespace>:{<h>}:l:<key>`: the token of the fill lease.
    pub(super) lease: String,
    /// `corral:<namespace>:{<h>}:f:<key>`: the token of the last grant.
    pub(super) fence: String,
}

impl KeyNames {
    /// The names for `key`.
    pub(super) fn new(key: &StoreKey) -> Self {
        let value = value_name(key);
        let marker = value.len() - key.key().len() - 2;
        let name = |letter: &str| {
            let mut name = value.clone();
            name.replace_range(marker..marker + 1, letter);
            name
        };
        Self {
            lease: name("l"),
            fence: name("f"),
            value,
        }
    }
}

/// The key holding the version of `tag` in `namespace` (the empty tag: the
/// clear version): `corral:<namespace>:{<namespace>}:t:<tag>`. Every tag key
/// of a namespace shares one hash slot, so one `MGET` reads any of them on
/// a cluster.
pub(super) fn tag_key(namespace: &str, tag: &str) -> String {
    format!("{PREFIX}{namespace}:{{{namespace}}}:t:{tag}")
}

/// The namespace whose changes `channel` carries (see [`channel`]).
pub(super) fn namespace_of(channel: &str) -> Option<&str> {
    channel.strip_prefix(PREFIX)?.strip_suffix(":filled")
}

/// The id under which listeners of `key` wait: the namespace and the user's
/// key, which a backplane message names.
pub(super) fn listener_id(namespace: &str, key: &str) -> String {
    format!("{namespace}\u{0}{key}")
}

/// The name of `key`'s value key alone (`corral:<namespace>:{<h>}:v:<key>`),
/// built with one allocation: what a plain read needs.
pub(super) fn value_name(key: &StoreKey) -> String {
    let (namespace, raw) = (key.namespace(), key.key());
    let mut name = String::with_capacity(PREFIX.len() + namespace.len() + 22 + raw.len());
    name.push_str(PREFIX);
    name.push_str(namespace);
    name.push_str(":{");
    let hash = fnv1a64(raw.as_bytes());
    // 16 lowercase hex digits, most significant first (as `{:016x}`, without
    // the formatting machinery: every read builds this name).
    for shift in (0..16).rev() {
        let digit = (hash >> (shift * 4)) & 0xf;
        name.push(char::from(b"0123456789abcdef"[digit as usize]));
    }
    name.push_str("}:v:");
    name.push_str(raw);
    name
}

/// The Redis Cluster hash slot of a key name: CRC16 (XMODEM) of its hash
/// tag, or of the whole name when it has no usable tag, modulo 16384.
pub(super) fn slot(name: &str) -> u16 {
    let bytes = name.as_bytes();
    let tagged = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(bytes);
    let mut crc: u16 = 0;
    for &byte in tagged {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// The channel on which changes of keys in `namespace` are published:
/// `corral:<namespace>:filled`. The messages are backplane messages
/// ([`Change`](crate::store::Change)s, or `r|<origin>|<key>` for a released
/// lease); listeners wait under [`listener_id`].
pub(super) fn channel(namespace: &str) -> String {
    let mut channel = String::with_capacity(PREFIX.len() + namespace.len() + 7);
    channel.push_str(PREFIX);
    channel.push_str(namespace);
    channel.push_str(":filled");
    channel
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_reference_values() {
        // From the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot("123456789"), 0x31c3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        // An empty tag is no tag: the whole name is hashed.
        assert_ne!(slot("foo{}{bar}"), slot("{bar}"));
    }

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn layout_is_documented_shape() {
        let names = KeyNames::new(&StoreKey::new("users:v1", "user:42"));
        let h = format!("{:016x}", fnv1a64(b"user:42"));
        assert_eq!(names.value, format!("corral:users:v1:{{{h}}}:v:user:42"));
        assert_eq!(names.lease, format!("corral:users:v1:{{{h}}}:l:user:42"));
        assert_eq!(names.fence, format!("corral:users:v1:{{{h}}}:f:user:42"));
        assert_eq!(
            value_name(&StoreKey::new("users:v1", "user:42")),
            names.value
        );
        let odd = KeyNames::new(&StoreKey::new("n:v1", "v:}{l:f:"));
        assert!(odd.lease.ends_with("}:l:v:}{l:f:"), "{}", odd.lease);
        assert!(odd.fence.ends_with("}:f:v:}{l:f:"), "{}", odd.fence);
        assert_eq!(channel("users:v1"), "corral:users:v1:filled");
    }

    #[test]
    fn braces_in_keys_do_not_split_slots() {
        for raw in [
            "plain",
            "}",
            "}leading",
            "{",
            "a{b}c",
            "{}",
            "}{x}{",
            "ключ{}",
        ] {
            let names = KeyNames::new(&StoreKey::new("ns:v3", raw));
            let want = slot(&names.value);
            assert_eq!(slot(&names.lease), want, "{raw:?}");
            assert_eq!(slot(&names.fence), want, "{raw:?}");
            let h = format!("{:016x}", fnv1a64(raw.as_bytes()));
            assert_eq!(want, slot(&format!("{{{h}}}")), "{raw:?}");
        }
    }

    #[test]
    fn user_keys_cannot_name_internal_keys() {
        // A user key that spells another key's lease name still gets its own
        // tag, so its value key differs from that lease key.
        let victim = KeyNames::new(&StoreKey::new("ns:v1", "k"));
        let suffix = victim.lease.trim_start_matches("corral:ns:v1:");
        let forged = KeyNames::new(&StoreKey::new("ns:v1", suffix));
        assert_ne!(forged.value, victim.lease);
        assert_ne!(forged.value, victim.fence);
    }
}

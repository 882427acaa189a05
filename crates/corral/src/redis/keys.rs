//! Where a logical key lives in Redis: the names of its value, lease and
//! fence keys, and the channel its namespace is notified on. The layout is
//! described on [`RedisStore`](super::RedisStore).

use crate::store::StoreKey;

/// Prefix of every key and channel corral writes.
const PREFIX: &str = "corral:";

pub(super) use crate::data::key::fnv1a64;
use crate::data::key::fnv1a64_from;

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
/// of a namespace shares one hash slot, so one script reads any of them on
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

/// The name of `key`'s value key alone (`corral:<namespace>:{<h>}:v:<key>`).
pub(super) fn value_name(key: &StoreKey) -> String {
    let name = ValueName::new(key);
    let mut bytes = Vec::with_capacity(name.len());
    name.write(&mut bytes);
    // Written from `str`s and hex digits only.
    String::from_utf8(bytes).unwrap_or_default()
}

/// A value key's name, written straight into the command that sends it:
/// every read names one, and building a `String` first would cost it an
/// allocation.
#[derive(Clone, Copy)]
pub(super) struct ValueName<'a> {
    key: &'a StoreKey,
    /// FNV-1a of the user's key: the hash tag.
    hash: u64,
}

impl<'a> ValueName<'a> {
    pub(super) fn new(key: &'a StoreKey) -> Self {
        Self {
            key,
            hash: fnv1a64(key.key().as_bytes()),
        }
    }

    /// A 64-bit id of the name (not its FNV-1a): the hash tag, folded on
    /// with the namespace.
    pub(super) fn id(&self) -> u64 {
        fnv1a64_from(self.hash, self.key.namespace().as_bytes())
    }

    /// The name's length in bytes.
    pub(super) fn len(&self) -> usize {
        PREFIX.len() + self.key.namespace().len() + 22 + self.key.key().len()
    }

    /// Appends the name to `out`.
    fn write(&self, out: &mut impl std::io::Write) {
        let mut hex = [0u8; 16];
        for (at, digit) in hex.iter_mut().enumerate() {
            let nibble = (self.hash >> ((15 - at) * 4)) & 0xf;
            *digit = b"0123456789abcdef"[nibble as usize];
        }
        for part in [
            PREFIX.as_bytes(),
            self.key.namespace().as_bytes(),
            b":{",
            &hex,
            b"}:v:",
            self.key.key().as_bytes(),
        ] {
            // Writing to a `Vec` or a command's buffer cannot fail.
            let _ = out.write_all(part);
        }
    }
}

impl ::redis::ToRedisArgs for ValueName<'_> {
    fn write_redis_args<W: ?Sized + ::redis::RedisWrite>(&self, out: &mut W) {
        self.write(&mut out.writer_for_next_arg());
    }
}

impl ::redis::ToSingleRedisArg for ValueName<'_> {}

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
        let key = StoreKey::new("users:v1", "user:42");
        assert_eq!(value_name(&key), names.value);
        assert_eq!(ValueName::new(&key).len(), names.value.len());
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

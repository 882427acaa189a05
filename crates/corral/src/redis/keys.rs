//! Where a logical key lives in Redis: the names of its value, lease and
//! waiters keys, and the channel its namespace is notified on. The layout is
//! described on [`RedisStore`](super::RedisStore).

use crate::store::StoreKey;

/// Prefix of every key and channel corral writes.
const PREFIX: &str = "corral:";

/// How many buckets a namespace's keys fall into: a key's hash tag names
/// its bucket, so on a cluster the keys of one bucket share a slot, and a
/// cluster store notifies a key's changes on its bucket's sharded channel
/// (in that same slot, so the message stays in the key's shard).
pub(super) const BUCKETS: usize = 256;

/// The hash tag of each bucket: four characters whose slot is
/// `bucket * 64`, so the buckets spread evenly over the 16,384 slots and
/// over any split of them into contiguous ranges (checked by a test).
const BUCKET_TAGS: [&str; BUCKETS] = [
    "05cc", "09f2", "012m", "0hyd", "0bje", "0no4", "03u3", "07yz", "045j", "08t3", "00dd", "0ike",
    "06r4", "0v25", "02g2", "0kh3", "0hdk", "01kj", "0dxu", "1696", "07du", "0fbl", "03qs", "0792",
    "0i2b", "00yk", "0ejt", "04lm", "06vt", "0g4e", "02cr", "0cek", "01on", "0qkg", "05zh", "0d8y",
    "03l8", "0jc9", "0b7f", "03uw", "009g", "0i6f", "04hi", "08m8", "0g0a", "066x", "0cao", "02gv",
    "09b6", "05gg", "0h9h", "016i", "03hx", "07d1", "079v", "03q7", "08p7", "041n", "0afy", "08ix",
    "02zy", "0628", "0kl7", "02c6", "056i", "0938", "01gg", "0hhf", "07q7", "039v", "03d1", "07hx",
    "0aj0", "08e1", "001n", "0a7w", "06c6", "0ol7", "0228", "06zy", "0h1a", "01zh", "0diw", "05on",
    "07uw", "0f7f", "0nc9", "07l8", "0anp", "00hi", "0m6f", "049g", "06gv", "0gao", "026x", "0c0a",
    "09wt", "0h5e", "05kj", "0dms", "0392", "07qs", "0bbl", "03du", "00lm", "0ajt", "04yk", "0882",
    "0gek", "06cr", "0c4e", "02vt", "09s4", "052m", "0hlb", "01cc", "03yz", "07u3", "0jo4", "0fje",
    "08a5", "04dd", "0a3s", "005j", "0oh3", "06g2", "0r25", "02r4", "0bku", "03ml", "0n3c", "07xj",
    "05bs", "0ddj", "01wu", "0hxt", "0cyt", "0g15", "0glr", "06jk", "044z", "0083", "00et", "0acm",
    "07ee", "0njd", "034k", "0b2r", "05f3", "01jz", "01s5", "0q34", "063l", "0g5u", "02bb", "0kmc",
    "04t2", "085k", "00a4", "0in5", "0fgx", "07aa", "0b6v", "030o", "09gf", "05b7", "0hx0", "0139",
    "0g1q", "067h", "0kig", "02ff", "008w", "04p6", "04iy", "00e0", "03ih", "0boq", "078f", "0fzw",
    "0liv", "05fw", "0h8x", "017y", "0g51", "0c9x", "06no", "0ghv", "0e6g", "04tv", "04m9", "00ap",
    "0bzw", "038f", "0foq", "07ih", "057y", "0duh", "01fw", "0hiv", "0chv", "02no", "0g9x", "0c51",
    "04ap", "00m9", "00tv", "0a6g", "070o", "0f6v", "03aa", "0bgx", "0539", "096h", "01b7", "0hm6",
    "06ff", "0oig", "027h", "0c1q", "04e0", "00iy", "00p6", "048w", "0f2r", "074k", "0jjd", "03ee",
    "092l", "05s5", "05jz", "01f3", "0omc", "06bb", "0c5u", "023l", "08de", "04a4", "0p43", "00t2",
    "03xj", "0j3c", "07ml", "0fku", "0d5d", "05wu", "0hmr", "01bs", "02jk", "0clr", "0c15", "0gyt",
    "0ecm", "04et", "0483", "004z",
];

/// The hash tag of the bucket of a key whose FNV-1a is `hash`.
fn bucket_tag(hash: u64) -> &'static str {
    BUCKET_TAGS[(hash % BUCKETS as u64) as usize]
}

pub(super) use crate::data::key::fnv1a64;
use crate::data::key::fnv1a64_from;

/// The Redis keys of one logical key; they share a hash slot.
///
/// They differ only in the kind letter after `corral:`, so the first
/// `{...}` of each is the same whatever the namespace holds: co-location
/// never depends on the namespace. Uniqueness relies on namespaces without
/// `{` (cache names allow none); so does [`bcast_prefixes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeyNames {
    /// `corral:v:<namespace>:{<b>}:<key>`: the envelope bytes.
    pub(super) value: String,
    /// `corral:g:<namespace>:{<b>}:<key>`: the fill lease, which is also
    /// its fence (see [`scripts`](super::scripts)).
    pub(super) lease: String,
    /// `corral:w:<namespace>:{<b>}:<key>`: present while a caller in
    /// another process waits for the lease's fill, so that only then does
    /// the fill's end wake anyone.
    pub(super) waiters: String,
    /// The hash tag `<b>` of the key's bucket.
    pub(super) bucket: &'static str,
}

impl KeyNames {
    /// The names for `key`.
    pub(super) fn new(key: &StoreKey) -> Self {
        let name = ValueName::new(key);
        let (value, bucket) = (name.owned(), name.bucket());
        let marker = PREFIX.len();
        let name = |letter: &str| {
            let mut name = value.clone();
            name.replace_range(marker..marker + 1, letter);
            name
        };
        Self {
            lease: name("g"),
            waiters: name("w"),
            value,
            bucket,
        }
    }
}

/// The key holding the version of `tag` in `namespace` on one server (the
/// empty tag: the clear version): `corral:t:<namespace>:{<namespace>}:<tag>`.
pub(super) fn tag_key(namespace: &str, tag: &str) -> String {
    version_key(namespace, namespace, tag)
}

/// `corral:t:<namespace>:{<hash_tag>}:<tag>`, built in one allocation
/// (every lease request and commit names the clear version's copy).
fn version_key(namespace: &str, hash_tag: &str, tag: &str) -> String {
    let parts = [PREFIX, "t:", namespace, ":{", hash_tag, "}:", tag];
    let mut name = String::with_capacity(parts.iter().map(|part| part.len()).sum());
    for part in parts {
        name.push_str(part);
    }
    name
}

/// The key prefixes under which every value key and every version key of
/// `namespace` lies, and no other key corral writes: `corral:v:<namespace>:{`
/// and `corral:t:<namespace>:{`. A namespace holds no `{`, so the prefixes
/// of two namespaces never overlap (one is never the start of the other),
/// and leases and waiters marks lie under neither.
pub(super) fn bcast_prefixes(namespace: &str) -> [String; 2] {
    ["v", "t"].map(|kind| format!("{PREFIX}{kind}:{namespace}:{{"))
}

/// The bucket of `key` (0 to 255): on a cluster, the home of the copies
/// of the versions that guard its entry.
pub(super) fn bucket_of(key: &StoreKey) -> u32 {
    (fnv1a64(key.key().as_bytes()) % BUCKETS as u64) as u32
}

/// The hash tag of bucket `home` (taken modulo [`BUCKETS`]).
pub(super) fn home_tag(home: u32) -> &'static str {
    BUCKET_TAGS[home as usize % BUCKETS]
}

/// The key holding bucket `home`'s copy of the version of `tag` in
/// `namespace`, on a cluster: `corral:t:<namespace>:{<b>}:<tag>`, in the
/// slot of the bucket's value keys, so a shard holds the copies that guard
/// its own entries.
pub(super) fn copy_key(namespace: &str, home: u32, tag: &str) -> String {
    version_key(namespace, home_tag(home), tag)
}

/// The name of the clear version's copy that guards the entry of a value
/// key, written straight into the command that touches it with a read:
/// [`copy_key`] of the key's bucket on a cluster, [`tag_key`] on one
/// server.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct ClearCopy<'a> {
    namespace: &'a str,
    /// The hash tag: the key's bucket (cluster) or the namespace.
    tag: &'a str,
    cluster: bool,
}

impl<'a> ClearCopy<'a> {
    /// The copy guarding `name`'s entry; `cluster`: the bucket's own.
    pub(super) fn of(name: &ValueName<'a>, cluster: bool) -> Self {
        let namespace = name.key.namespace();
        let tag = if cluster { name.bucket() } else { namespace };
        Self {
            namespace,
            tag,
            cluster,
        }
    }

    /// Whether `due` says to touch this copy now, asked with the FNV-1a of
    /// what tells the copy apart: the namespace on one server, the name up
    /// to its hash tag (`corral:t:<namespace>:{<b>}`) on a cluster.
    pub(super) fn due(&self, due: impl FnOnce(u64) -> bool) -> bool {
        if !self.cluster {
            return due(fnv1a64(self.namespace.as_bytes()));
        }
        let hash = [
            PREFIX.as_bytes(),
            b"t:",
            self.namespace.as_bytes(),
            b":{",
            self.tag.as_bytes(),
            b"}",
        ]
        .into_iter()
        .fold(fnv1a64(b""), fnv1a64_from);
        due(hash)
    }

    fn write(&self, out: &mut impl std::io::Write) {
        for part in [
            PREFIX.as_bytes(),
            b"t:",
            self.namespace.as_bytes(),
            b":{",
            self.tag.as_bytes(),
            b"}:",
        ] {
            // Writing to a command's buffer cannot fail.
            let _ = out.write_all(part);
        }
    }
}

impl ::redis::ToRedisArgs for ClearCopy<'_> {
    fn write_redis_args<W: ?Sized + ::redis::RedisWrite>(&self, out: &mut W) {
        self.write(&mut out.writer_for_next_arg());
    }
}

impl ::redis::ToSingleRedisArg for ClearCopy<'_> {}

/// The namespace whose changes `channel` carries (see [`channel`] and
/// [`shard_channels`]).
pub(super) fn namespace_of(channel: &str) -> Option<&str> {
    let named = channel.strip_prefix(PREFIX)?.strip_suffix(":filled")?;
    // A namespace holds no `{`: a sharded channel's tag follows it.
    Some(
        named
            .split_once(":{")
            .map_or(named, |(namespace, _)| namespace),
    )
}

/// What the name of a Redis key corral writes names ([`named`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Named<'a> {
    /// A value key: `corral:v:<namespace>:{<b>}:<key>`.
    Value { namespace: &'a str, key: &'a str },
    /// A tag's version, or one bucket's copy of it (the empty tag: the
    /// clear version): `corral:t:<namespace>:{<ns or b>}:<tag>`.
    Version { namespace: &'a str, tag: &'a str },
    /// A lease or a waiters mark (or, from earlier versions, a separate
    /// lease or fence).
    Guard,
}

/// What the key named `name` holds, if corral wrote it: a one-letter
/// marker, the namespace (which holds no `{`) up to the first `:{`, then
/// the hash tag.
pub(super) fn named(name: &[u8]) -> Option<Named<'_>> {
    let name = std::str::from_utf8(name).ok()?.strip_prefix(PREFIX)?;
    let (marker, named) = name.split_at_checked(1)?;
    let (namespace, tagged) = named.strip_prefix(':')?.split_once(":{")?;
    let (_tag, rest) = tagged.split_once("}:")?;
    match marker {
        "v" => Some(Named::Value {
            namespace,
            key: rest,
        }),
        "t" => Some(Named::Version {
            namespace,
            tag: rest,
        }),
        "g" | "w" | "l" | "f" => Some(Named::Guard),
        _ => None,
    }
}

/// The id under which listeners of `key` wait: the namespace and the user's
/// key, which a backplane message names.
pub(super) fn listener_id(namespace: &str, key: &str) -> String {
    let mut id = String::with_capacity(namespace.len() + 1 + key.len());
    id.push_str(namespace);
    id.push('\0');
    id.push_str(key);
    id
}

/// The name of `key`'s value key alone (`corral:v:<namespace>:{<b>}:<key>`),
/// as the commands write it ([`ValueName`]): for checks.
#[cfg(any(test, feature = "test-hooks"))]
pub(super) fn value_name(key: &StoreKey) -> String {
    ValueName::new(key).owned()
}

/// A value key's name, written straight into the command that sends it:
/// every read names one, and building a `String` first would cost it an
/// allocation.
#[derive(Clone, Copy)]
pub(super) struct ValueName<'a> {
    key: &'a StoreKey,
    /// FNV-1a of the user's key: it picks the bucket.
    hash: u64,
}

impl<'a> ValueName<'a> {
    pub(super) fn new(key: &'a StoreKey) -> Self {
        Self {
            key,
            hash: fnv1a64(key.key().as_bytes()),
        }
    }

    /// The name as a `String`.
    pub(super) fn owned(&self) -> String {
        let mut bytes = Vec::with_capacity(self.len());
        self.write(&mut bytes);
        // Written from `str`s only.
        String::from_utf8(bytes).unwrap_or_default()
    }

    /// The hash tag of the key's bucket.
    pub(super) fn bucket(&self) -> &'static str {
        bucket_tag(self.hash)
    }

    /// The key named.
    pub(super) fn key(&self) -> &'a StoreKey {
        self.key
    }

    /// The name's hash slot: [`slot`] of the name, without writing it out
    /// (its first `{...}` is the bucket's tag unless the namespace holds a
    /// `{`, which a cache's never does).
    pub(super) fn slot(&self) -> u16 {
        if self.key.namespace().contains('{') {
            return slot(&self.owned());
        }
        crc_slot(self.bucket().as_bytes())
    }

    /// A 64-bit id of the name (not its FNV-1a): the key's FNV-1a, folded
    /// on with the namespace.
    pub(super) fn id(&self) -> u64 {
        fnv1a64_from(self.hash, self.key.namespace().as_bytes())
    }

    /// The name's length in bytes.
    pub(super) fn len(&self) -> usize {
        PREFIX.len() + self.key.namespace().len() + 10 + self.key.key().len()
    }

    /// The name's parts, in order.
    fn parts(&self) -> [&[u8]; 7] {
        [
            PREFIX.as_bytes(),
            b"v:",
            self.key.namespace().as_bytes(),
            b":{",
            self.bucket().as_bytes(),
            b"}:",
            self.key.key().as_bytes(),
        ]
    }

    /// Appends the name to `out`.
    fn write(&self, out: &mut impl std::io::Write) {
        for part in self.parts() {
            // Writing to a `Vec` or a command's buffer cannot fail.
            let _ = out.write_all(part);
        }
    }
}

/// Value names up to this long are assembled on the stack and written to
/// a command in one piece.
const INLINE_NAME: usize = 160;

impl ::redis::ToRedisArgs for ValueName<'_> {
    fn write_redis_args<W: ?Sized + ::redis::RedisWrite>(&self, out: &mut W) {
        if self.len() > INLINE_NAME {
            self.write(&mut out.writer_for_next_arg());
            return;
        }
        let mut name = arrayvec::ArrayVec::<u8, INLINE_NAME>::new();
        for part in self.parts() {
            // Fits: the length was checked.
            let _ = name.try_extend_from_slice(part);
        }
        out.write_arg(&name);
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
    crc_slot(tagged)
}

/// CRC16 (XMODEM) of `tagged`, modulo 16384.
fn crc_slot(tagged: &[u8]) -> u16 {
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

/// The channel on which a standalone store publishes the changes of keys
/// in `namespace`: `corral:<namespace>:filled`. The messages are backplane
/// messages ([`Change`](crate::store::Change)s, or `r|<origin>|<key>` for a
/// released lease); listeners wait under [`listener_id`]. The subscriber
/// keeps its books under this name on a cluster too.
pub(super) fn channel(namespace: &str) -> String {
    let mut channel = String::with_capacity(PREFIX.len() + namespace.len() + 7);
    channel.push_str(PREFIX);
    channel.push_str(namespace);
    channel.push_str(":filled");
    channel
}

/// The sharded channel on which a cluster store publishes the changes of
/// the keys of bucket `bucket` in `namespace`:
/// `corral:<namespace>:{<b>}:filled`, in the slot of those keys.
pub(super) fn bucket_channel(namespace: &str, bucket: &str) -> String {
    format!("{PREFIX}{namespace}:{{{bucket}}}:filled")
}

/// The sharded channel on which a cluster store publishes the tag and
/// clear invalidations of `namespace`:
/// `corral:<namespace>:{<namespace>}:filled`. (A copy created anew is
/// announced on its bucket's channel, in its own slot.)
pub(super) fn tag_channel(namespace: &str) -> String {
    format!("{PREFIX}{namespace}:{{{namespace}}}:filled")
}

/// Every sharded channel of `namespace`: one per bucket, then the tag
/// channel.
pub(super) fn shard_channels(namespace: &str) -> Vec<String> {
    BUCKET_TAGS
        .iter()
        .map(|bucket| bucket_channel(namespace, bucket))
        .chain(std::iter::once(tag_channel(namespace)))
        .collect()
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
        let h = BUCKET_TAGS[(fnv1a64(b"user:42") % 256) as usize];
        assert_eq!(names.value, format!("corral:v:users:v1:{{{h}}}:user:42"));
        assert_eq!(names.lease, format!("corral:g:users:v1:{{{h}}}:user:42"));
        assert_eq!(names.waiters, format!("corral:w:users:v1:{{{h}}}:user:42"));
        let key = StoreKey::new("users:v1", "user:42");
        assert_eq!(value_name(&key), names.value);
        assert_eq!(ValueName::new(&key).len(), names.value.len());
        let odd = KeyNames::new(&StoreKey::new("n:v1", "v:}{l:f:"));
        assert!(odd.lease.starts_with("corral:g:n:v1:{"), "{}", odd.lease);
        assert!(odd.lease.ends_with("}:v:}{l:f:"), "{}", odd.lease);
        assert!(
            odd.waiters.starts_with("corral:w:n:v1:{"),
            "{}",
            odd.waiters
        );
        assert!(odd.waiters.ends_with("}:v:}{l:f:"), "{}", odd.waiters);
        assert_eq!(channel("users:v1"), "corral:users:v1:filled");
    }

    #[test]
    fn value_names_are_written_whole_short_or_long() {
        for raw in ["user:42".to_owned(), "k".repeat(INLINE_NAME + 1)] {
            let key = StoreKey::new("users:v1", &raw);
            let mut cmd = ::redis::cmd("GET");
            cmd.arg(ValueName::new(&key));
            let written: Vec<Vec<u8>> = cmd
                .args_iter()
                .map(|arg| match arg {
                    ::redis::Arg::Simple(bytes) => bytes.to_vec(),
                    _ => Vec::new(),
                })
                .collect();
            assert_eq!(written, [b"GET".to_vec(), value_name(&key).into_bytes()]);
        }
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
            let key = StoreKey::new("ns:v3", raw);
            let names = KeyNames::new(&key);
            let want = slot(&names.value);
            assert_eq!(ValueName::new(&key).slot(), want, "{raw:?}");
            // A namespace no cache has: the name's first `{` is in it.
            let odd = StoreKey::new("n{s}:v3", raw);
            assert_eq!(ValueName::new(&odd).slot(), slot(&value_name(&odd)));
            assert_eq!(slot(&names.lease), want, "{raw:?}");
            assert_eq!(slot(&names.waiters), want, "{raw:?}");
            let bucket = (fnv1a64(raw.as_bytes()) % 256) as usize;
            assert_eq!(usize::from(want), bucket * 64, "{raw:?}");
            let channel = bucket_channel("ns:v3", names.bucket);
            assert_eq!(slot(&channel), want, "{raw:?}");
            assert_eq!(namespace_of(&channel), Some("ns:v3"));
        }
    }

    #[test]
    fn buckets_spread_evenly_over_the_slots() {
        for (bucket, tag) in BUCKET_TAGS.iter().enumerate() {
            assert_eq!(tag.len(), 4, "{tag}");
            assert!(!tag.contains(['{', '}']), "{tag}");
            assert_eq!(
                usize::from(slot(&format!("{{{tag}}}"))),
                bucket * 64,
                "{tag}"
            );
        }
        let channels = shard_channels("users:v1");
        assert_eq!(channels.len(), BUCKETS + 1);
        assert_eq!(
            slot(channels.last().map_or("", String::as_str)),
            slot(&tag_key("users:v1", "some-tag"))
        );
        assert!(channels.iter().all(|c| namespace_of(c) == Some("users:v1")));
    }

    #[test]
    fn version_copies_share_their_entries_slot() {
        for raw in ["plain", "}", "{x}", "ключ"] {
            let key = StoreKey::new("ns:v3", raw);
            let names = KeyNames::new(&key);
            let home = bucket_of(&key);
            let copy = copy_key("ns:v3", home, "");
            assert_eq!(slot(&copy), slot(&names.value), "{raw:?}");
            assert_eq!(slot(&copy_key("ns:v3", home, "some tag")), slot(&copy));
            let name = ValueName::new(&key);
            let mut written = Vec::new();
            ClearCopy::of(&name, true).write(&mut written);
            assert_eq!(String::from_utf8(written).ok(), Some(copy));
            let mut written = Vec::new();
            ClearCopy::of(&name, false).write(&mut written);
            assert_eq!(String::from_utf8(written).ok(), Some(tag_key("ns:v3", "")));
            // Reads under one copy share its turn: asked with one id.
            let bucket = format!("corral:t:ns:v3:{{{}}}", home_tag(home));
            for (cluster, base) in [(true, bucket.as_str()), (false, "ns:v3")] {
                let mut asked = None;
                ClearCopy::of(&name, cluster).due(|id| {
                    asked = Some(id);
                    true
                });
                assert_eq!(asked, Some(fnv1a64(base.as_bytes())), "{raw:?}");
            }
        }
    }

    #[test]
    fn user_keys_cannot_name_internal_keys() {
        // A user key that spells another key's lease name still gets its own
        // tag, so its value key differs from that lease key.
        let victim = KeyNames::new(&StoreKey::new("ns:v1", "k"));
        for internal in [&victim.lease, &victim.waiters] {
            let suffix = internal.split_once("}:").map_or("", |(_, key)| key);
            let forged = KeyNames::new(&StoreKey::new("ns:v1", suffix));
            assert_ne!(&forged.value, internal);
            // Nor in a namespace that spells the kind letter.
            let forged = KeyNames::new(&StoreKey::new("g:ns:v1", "k"));
            assert_ne!(&forged.value, internal);
        }
    }

    #[test]
    fn names_read_back() {
        for raw in ["k", "", "}x", "{a}:v:b", "a:{b}:t:c", "ключ"] {
            let key = StoreKey::new("ns:v1", raw);
            let names = KeyNames::new(&key);
            assert_eq!(
                named(names.value.as_bytes()),
                Some(Named::Value {
                    namespace: "ns:v1",
                    key: raw
                })
            );
            assert_eq!(named(names.lease.as_bytes()), Some(Named::Guard));
            assert_eq!(named(names.waiters.as_bytes()), Some(Named::Guard));
            let version = Named::Version {
                namespace: "ns:v1",
                tag: raw,
            };
            assert_eq!(named(tag_key("ns:v1", raw).as_bytes()), Some(version));
            assert_eq!(named(copy_key("ns:v1", 7, raw).as_bytes()), Some(version));
        }
        for foreign in [
            "",
            "user:1",
            "corral:",
            "corral:ns:v1",
            "corral:q:ns:v1:{x}:k",
            "corral:v:ns:v1",
            "corral:vv:ns:v1:{x}:k",
            "corral:v:ns:v1:{x}k",
        ] {
            assert_eq!(named(foreign.as_bytes()), None, "{foreign}");
        }
        assert_eq!(named(b"corral:ns:v1:filled"), None);
        assert_eq!(named(&[0xff, 0xfe]), None);
    }

    #[test]
    fn bcast_prefixes_hold_a_namespaces_values_and_versions_alone() {
        let prefixes = bcast_prefixes("ns");
        assert_eq!(prefixes, ["corral:v:ns:{", "corral:t:ns:{"]);
        let under = |name: &str| prefixes.iter().any(|p| name.starts_with(p.as_str()));
        for raw in ["k", "", "}x", "{a}:b"] {
            let names = KeyNames::new(&StoreKey::new("ns", raw));
            assert!(under(&names.value), "{}", names.value);
            assert!(!under(&names.lease) && !under(&names.waiters), "{raw:?}");
            assert!(under(&tag_key("ns", raw)) && under(&copy_key("ns", 9, raw)));
            // A namespace that starts like this one lies under neither.
            let other = KeyNames::new(&StoreKey::new("ns:x", raw));
            assert!(!under(&other.value) && !under(&tag_key("ns:x", raw)));
        }
        // Redis refuses prefixes of one client where one starts another.
        let all = [
            bcast_prefixes("ns"),
            bcast_prefixes("ns:x"),
            bcast_prefixes("n"),
        ];
        let all: Vec<&String> = all.iter().flatten().collect();
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert!(
                    !a.starts_with(b.as_str()) && !b.starts_with(a.as_str()),
                    "{a} {b}"
                );
            }
        }
    }
}

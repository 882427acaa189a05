//! Memcached item keys for corral's logical keys.
//!
//! Memcached keys are at most 250 bytes with no spaces or control bytes.
//! A logical key (namespace, user key) maps to two items on one server:
//!
//! ```text
//! <prefix>v:<body>   the slot: fence, generation and value (see `frame`)
//! <prefix>l:<body>   the lease: the token of the fill allowed to run
//! <prefix>t:<body>   a tag version (body built from namespace and tag):
//!                    one copy on every server that holds entries
//! ```
//!
//! `<body>` is `<namespace>:<key>` verbatim when the namespace is that of a
//! cache (`[A-Za-z0-9_.-]+` and one `:`), every byte of the key is printable
//! ASCII other than `#`, and the whole item key fits in 250 bytes.
//! Otherwise it is a readable part — the first 48 bytes of `<namespace>:<key>`
//! with every byte outside printable ASCII, and `#`, replaced by `_` — then
//! `#` and the first 16 bytes of SHA-256(namespace ‖ 0x00 ‖ key) in lowercase
//! hex. The two forms cannot collide: only the hashed one holds `#`. SHA-256
//! is fixed by its standard, so processes of every version agree.
//!
//! The server of a logical key is chosen from the first 8 bytes of that
//! same digest (see `ring`), so its slot and lease share a server.

use sha2::{Digest, Sha256};

use crate::store::StoreKey;

/// Memcached's longest key.
pub(super) const MAX_ITEM_KEY: usize = 250;
/// The longest configurable key prefix.
pub(super) const MAX_PREFIX: usize = 64;
/// How many bytes of `<namespace>:<key>` a hashed body keeps readable.
const READABLE: usize = 48;

/// The items of one logical key.
#[derive(Debug, Clone)]
pub(super) struct Items {
    /// The slot item: fence, generation and value.
    pub(super) slot: String,
    /// The lease item.
    pub(super) lease: String,
    /// Where the items live (input of the server choice).
    pub(super) route: u64,
}

/// Whether `byte` may appear verbatim in a body.
fn plain(byte: u8) -> bool {
    byte.is_ascii_graphic() && byte != b'#'
}

/// Whether `prefix` is usable: printable ASCII without `#`, at most
/// [`MAX_PREFIX`] bytes.
pub(super) fn valid_prefix(prefix: &str) -> bool {
    prefix.len() <= MAX_PREFIX && prefix.bytes().all(plain)
}

fn cache_namespace(namespace: &str) -> bool {
    namespace.bytes().filter(|&b| b == b':').count() == 1
        && namespace
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b':'))
}

fn digest(namespace: &str, name: &str, kind: u8) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(namespace.as_bytes());
    hasher.update([0]);
    hasher.update(name.as_bytes());
    hasher.update([kind]);
    hasher.finalize().into()
}

fn route_of(digest: &[u8; 32]) -> u64 {
    let mut route = [0u8; 8];
    route.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(route)
}

/// Where `key`'s items live (input of the server choice), as
/// [`items`] names it, without building the names.
pub(super) fn route(key: &StoreKey) -> u64 {
    route_of(&digest(key.namespace(), key.key(), 0))
}

/// The body and route of `(namespace, name)`, for items of kind `kind`
/// under `prefix` (whose length the body must leave room for).
fn body(prefix: &str, namespace: &str, name: &str, kind: u8) -> (String, u64) {
    let digest = digest(namespace, name, kind);
    let route = route_of(&digest);
    let fixed = prefix.len() + 2;
    let verbatim = namespace.len() + 1 + name.len();
    if cache_namespace(namespace) && name.bytes().all(plain) && fixed + verbatim <= MAX_ITEM_KEY {
        return (format!("{namespace}:{name}"), route);
    }
    let mut out: String = namespace
        .bytes()
        .chain(std::iter::once(b':'))
        .chain(name.bytes())
        .take(READABLE)
        .map(|b| if plain(b) { char::from(b) } else { '_' })
        .collect();
    out.push('#');
    for byte in &digest[..16] {
        out.push_str(&format!("{byte:02x}"));
    }
    (out, route)
}

/// The items of `key` under `prefix`.
pub(super) fn items(prefix: &str, key: &StoreKey) -> Items {
    let (body, route) = body(prefix, key.namespace(), key.key(), 0);
    Items {
        slot: format!("{prefix}v:{body}"),
        lease: format!("{prefix}l:{body}"),
        route,
    }
}

/// The item of `tag`'s version in `namespace`: every server holds its own
/// copy under this name (the store sends it to each, not by its route).
pub(super) fn tag(prefix: &str, namespace: &str, tag: &str) -> String {
    let (body, _) = body(prefix, namespace, tag, 1);
    format!("{prefix}t:{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(item: &str) -> bool {
        item.len() <= MAX_ITEM_KEY && item.bytes().all(|b| b.is_ascii_graphic())
    }

    #[test]
    fn short_printable_keys_stay_readable() {
        let items = items("corral:", &StoreKey::new("users:v1", "42"));
        assert_eq!(items.slot, "corral:v:users:v1:42");
        assert_eq!(items.lease, "corral:l:users:v1:42");
    }

    #[test]
    fn other_keys_are_hashed_within_the_limits() {
        let long = "k".repeat(1024);
        for key in ["a b", "é", "x#y", long.as_str(), "\u{7f}"] {
            let items = items("corral:", &StoreKey::new("users:v1", key));
            assert!(valid(&items.slot), "{}", items.slot);
            assert!(items.slot.contains('#'), "{}", items.slot);
        }
        let a = items("p", &StoreKey::new("n:v1", "a b"));
        let b = items("p", &StoreKey::new("n:v1", "a_b"));
        assert_ne!(a.slot, b.slot);
    }

    #[test]
    fn the_encoding_is_stable() {
        let items = items("corral:", &StoreKey::new("users:v1", "a b"));
        assert_eq!(
            items.slot,
            format!("corral:v:users:v1:a_b#{}", &items.slot[22..])
        );
        assert_eq!(items.slot.len(), "corral:v:users:v1:a_b#".len() + 32);
        // Pinned: a change of this value moves every key.
        assert_eq!(items.route, items_route_pinned());
        assert_eq!(route(&StoreKey::new("users:v1", "a b")), items.route);
    }

    fn items_route_pinned() -> u64 {
        let mut hasher = Sha256::new();
        hasher.update(b"users:v1\x00a b\x00");
        let digest = hasher.finalize();
        let mut route = [0u8; 8];
        route.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(route)
    }

    #[test]
    fn tags_and_values_differ() {
        let tag = tag("c:", "n:v1", "t");
        assert_eq!(tag, "c:t:n:v1:t");
        assert!(!valid_prefix("a b"));
        assert!(valid_prefix("corral:"));
    }
}

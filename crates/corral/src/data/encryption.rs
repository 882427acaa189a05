//! Encryption of the bytes a cache writes to a shared store (feature
//! `encryption`): AES-256-GCM under a key derived per cache.
//!
//! ```text
//! offset size field
//!  0     1    format (0xE1: AES-256-GCM, HKDF-SHA256 per-cache key)
//!  1     4    key id: names the master key that sealed it (not secret)
//!  5     12   nonce, random (the operating system's CSPRNG)
//! 17     n    ciphertext of the envelope, then the 16-byte tag
//! ```
//!
//! The per-cache key is HKDF-SHA256 of the master key, its info naming the
//! cache's namespace. The associated data is the format byte, the key id,
//! the namespace and the full key, so bytes copied to another key or
//! another cache do not open. Whatever does not open — foreign or
//! plaintext bytes, another master key, a changed byte — is rejected, and
//! the cache treats it as a counted miss.

use std::fmt;

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use hkdf::Hkdf;
use sha2::Sha256;

use crate::data::error::ConfigError;

/// The format byte of sealed values.
const FORMAT: u8 = 0xE1;
const KEY_ID_LEN: usize = 4;
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
/// Format byte, key id and nonce.
const HEADER_LEN: usize = 1 + KEY_ID_LEN + NONCE_LEN;
/// The length of a master key in bytes.
pub(crate) const MASTER_KEY_LEN: usize = 32;
/// The most previous (decrypt-only) master keys a cache accepts.
pub(crate) const MAX_PREVIOUS_KEYS: usize = 8;
/// HKDF salt: fixed, so every process derives the same keys.
const SALT: &[u8] = b"corral value encryption v1";

/// Encryption of values in shared stores (feature `encryption`): the
/// current master key, which seals every write, and previous master keys,
/// which only open values written before a rotation.
///
/// Every cache derives its own AES-256-GCM key from a master key (HKDF-SHA256
/// with the cache's namespace), so caches sharing a master key still cannot
/// read each other's values. Each value is sealed with a fresh random
/// 96-bit nonce, and bound to its cache and its full key: bytes copied to
/// another key do not decrypt. A value that does not decrypt (tampered,
/// copied, written under an unknown key or unencrypted) is never served: it
/// is a miss, counted in [`Stats::decrypt_failures`](crate::Stats::decrypt_failures),
/// and the next fill overwrites it.
///
/// `Debug` shows how many keys it holds, never a key.
///
/// ```
/// let key = [7u8; 32]; // from a secret store, not from source code
/// let encryption = corral::Encryption::new(key);
/// assert_eq!(format!("{encryption:?}"), "Encryption { keys: 1 }");
/// let cache = corral::Cache::<String>::builder("users")
///     .store(corral::store::MemoryStore::new())
///     .encryption(encryption)
///     .build()?;
/// # Ok::<(), corral::ConfigError>(())
/// ```
///
/// To rotate: deploy `Encryption::new(new).previous_key(old)` everywhere
/// (values written under `old` are still read, new writes use `new`), then,
/// once every value written under `old` has expired, drop `old`.
#[derive(Clone)]
pub struct Encryption {
    current: [u8; MASTER_KEY_LEN],
    previous: Vec<[u8; MASTER_KEY_LEN]>,
}

impl Encryption {
    /// Encryption under `master_key`: 32 bytes from a secret store or a
    /// key management service, unpredictable and kept secret.
    pub fn new(master_key: [u8; MASTER_KEY_LEN]) -> Self {
        Self {
            current: master_key,
            previous: Vec::new(),
        }
    }

    /// [`new`](Self::new) from a slice.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] unless `master_key` is exactly 32 bytes long (the
    /// message gives the length, never the bytes).
    pub fn from_bytes(master_key: &[u8]) -> Result<Self, ConfigError> {
        Ok(Self::new(master_key_from(master_key)?))
    }

    /// Adds a previous master key: values sealed under it are still read,
    /// never written. At most 8 are accepted (more make
    /// [`build`](crate::CacheBuilder::build) fail).
    pub fn previous_key(mut self, master_key: [u8; MASTER_KEY_LEN]) -> Self {
        self.previous.push(master_key);
        self
    }

    /// [`previous_key`](Self::previous_key) from a slice.
    ///
    /// # Errors
    ///
    /// As [`from_bytes`](Self::from_bytes).
    pub fn previous_key_from_bytes(self, master_key: &[u8]) -> Result<Self, ConfigError> {
        Ok(self.previous_key(master_key_from(master_key)?))
    }

    /// The cipher of the cache with `namespace`.
    pub(crate) fn cipher(&self, namespace: &str) -> Result<Cipher, ConfigError> {
        if self.previous.len() > MAX_PREVIOUS_KEYS {
            return Err(ConfigError::new(format!(
                "{} previous encryption keys, the limit is {MAX_PREVIOUS_KEYS}",
                self.previous.len()
            )));
        }
        let keys = std::iter::once(&self.current)
            .chain(&self.previous)
            .map(|master| CacheKey::derive(master, namespace))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Cipher { keys })
    }
}

impl fmt::Debug for Encryption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Encryption")
            .field("keys", &(1 + self.previous.len()))
            .finish()
    }
}

fn master_key_from(bytes: &[u8]) -> Result<[u8; MASTER_KEY_LEN], ConfigError> {
    <[u8; MASTER_KEY_LEN]>::try_from(bytes).map_err(|_| {
        ConfigError::new(format!(
            "an encryption master key must be {MASTER_KEY_LEN} bytes, not {}",
            bytes.len()
        ))
    })
}

/// One master key's AES key for one cache, and the id naming it in the
/// values it seals.
struct CacheKey {
    id: [u8; KEY_ID_LEN],
    aead: Aes256Gcm,
}

impl CacheKey {
    fn derive(master: &[u8; MASTER_KEY_LEN], namespace: &str) -> Result<Self, ConfigError> {
        let hkdf = Hkdf::<Sha256>::new(Some(SALT), master);
        let expand_failed = |_| ConfigError::new("encryption key derivation failed");
        let mut key = [0u8; 32];
        hkdf.expand_multi_info(
            &[b"corral aes-256-gcm key\0", namespace.as_bytes()],
            &mut key,
        )
        .map_err(expand_failed)?;
        // The id depends on the master key alone: the same in every cache,
        // and it tells nothing about the key it names.
        let mut id = [0u8; KEY_ID_LEN];
        hkdf.expand(b"corral key id", &mut id)
            .map_err(expand_failed)?;
        Ok(Self {
            id,
            aead: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&key)),
        })
    }
}

/// Why stored bytes did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenError {
    /// Too short, or not of this format (e.g. written unencrypted).
    NotSealed,
    /// Sealed under a master key this cache does not hold.
    UnknownKey,
    /// The tag did not match: another key or cache, another master key with
    /// the same id, or changed bytes.
    Rejected,
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotSealed => "not an encrypted value",
            Self::UnknownKey => "encrypted under a key this cache does not hold",
            Self::Rejected => {
                "authentication failed (another key, cache or master key, or altered bytes)"
            }
        })
    }
}

/// The keys of one cache: the first seals, all open.
pub(crate) struct Cipher {
    keys: Vec<CacheKey>,
}

impl Cipher {
    /// Seals `envelope`, the bytes of `key` in the cache's `namespace`.
    pub(crate) fn seal(
        &self,
        namespace: &str,
        key: &str,
        envelope: &[u8],
    ) -> Result<Vec<u8>, String> {
        let current = self
            .keys
            .first()
            .ok_or_else(|| "no encryption key".to_owned())?;
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let mut header = [0u8; HEADER_LEN];
        header[0] = FORMAT;
        header[1..1 + KEY_ID_LEN].copy_from_slice(&current.id);
        header[1 + KEY_ID_LEN..].copy_from_slice(&nonce);
        let aad = associated_data(&header[..1 + KEY_ID_LEN], namespace, key);
        let sealed = current
            .aead
            .encrypt(
                &nonce,
                Payload {
                    msg: envelope,
                    aad: &aad,
                },
            )
            .map_err(|_| "encryption failed".to_owned())?;
        let mut out = Vec::with_capacity(HEADER_LEN + sealed.len());
        out.extend_from_slice(&header);
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    /// Opens bytes sealed by [`seal`](Self::seal) for the same namespace
    /// and key, under any of the cache's keys.
    pub(crate) fn open(
        &self,
        namespace: &str,
        key: &str,
        bytes: &[u8],
    ) -> Result<Vec<u8>, OpenError> {
        if bytes.len() < HEADER_LEN + TAG_LEN || bytes[0] != FORMAT {
            return Err(OpenError::NotSealed);
        }
        let (header, sealed) = bytes.split_at(HEADER_LEN);
        let id = &header[1..1 + KEY_ID_LEN];
        let nonce = Nonce::from_slice(&header[1 + KEY_ID_LEN..]);
        let aad = associated_data(&header[..1 + KEY_ID_LEN], namespace, key);
        let mut known = false;
        for candidate in self.keys.iter().filter(|k| k.id == id) {
            known = true;
            let payload = Payload {
                msg: sealed,
                aad: &aad,
            };
            if let Ok(envelope) = candidate.aead.decrypt(nonce, payload) {
                return Ok(envelope);
            }
        }
        Err(if known {
            OpenError::Rejected
        } else {
            OpenError::UnknownKey
        })
    }
}

/// What a sealed value is bound to: its format and key id, the cache's
/// namespace (length-prefixed) and the full key.
fn associated_data(prefix: &[u8], namespace: &str, key: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(prefix.len() + 4 + namespace.len() + key.len());
    aad.extend_from_slice(prefix);
    aad.extend_from_slice(&(namespace.len() as u32).to_le_bytes());
    aad.extend_from_slice(namespace.as_bytes());
    aad.extend_from_slice(key.as_bytes());
    aad
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cipher(master: u8, namespace: &str) -> Cipher {
        Encryption::new([master; 32])
            .cipher(namespace)
            .expect("cipher")
    }

    #[test]
    fn sealed_bytes_open_only_for_their_namespace_and_key() {
        let c = cipher(1, "users:v0");
        let sealed = c.seal("users:v0", "k", b"envelope").expect("seal");
        assert_eq!(sealed.len(), HEADER_LEN + 8 + TAG_LEN);
        assert_eq!(c.open("users:v0", "k", &sealed), Ok(b"envelope".to_vec()));
        assert_eq!(c.open("users:v0", "k2", &sealed), Err(OpenError::Rejected));
        let other = cipher(1, "users:v1");
        assert_eq!(
            other.open("users:v1", "k", &sealed),
            Err(OpenError::Rejected)
        );
        assert_eq!(
            cipher(2, "users:v0").open("users:v0", "k", &sealed),
            Err(OpenError::UnknownKey)
        );
        assert_eq!(
            c.open("users:v0", "k", b"CRL\0plain"),
            Err(OpenError::NotSealed)
        );
        for i in 0..sealed.len() {
            let mut flipped = sealed.clone();
            flipped[i] ^= 0x01;
            assert!(c.open("users:v0", "k", &flipped).is_err(), "byte {i}");
        }
    }

    #[test]
    fn nonces_differ_and_previous_keys_open() {
        let old = cipher(1, "n:v0");
        let a = old.seal("n:v0", "k", b"x").expect("seal");
        let b = old.seal("n:v0", "k", b"x").expect("seal");
        assert_ne!(a, b);
        let rotated = Encryption::new([2; 32])
            .previous_key([1; 32])
            .cipher("n:v0")
            .expect("cipher");
        assert_eq!(rotated.open("n:v0", "k", &a), Ok(b"x".to_vec()));
        let new = rotated.seal("n:v0", "k", b"y").expect("seal");
        assert_eq!(old.open("n:v0", "k", &new), Err(OpenError::UnknownKey));
        assert_eq!(cipher(2, "n:v0").open("n:v0", "k", &new), Ok(b"y".to_vec()));
    }

    #[test]
    fn key_lengths_are_checked_and_never_shown() {
        let error = Encryption::from_bytes(&[0xAB; 31]).expect_err("short key");
        assert!(error.to_string().contains("32 bytes, not 31"), "{error}");
        let mut too_many = Encryption::new([0; 32]);
        for i in 0..=MAX_PREVIOUS_KEYS {
            too_many = too_many.previous_key([i as u8; 32]);
        }
        assert!(too_many.cipher("n:v0").is_err());
        let debug = format!("{:?}", Encryption::new([0xAB; 32]).previous_key([0xCD; 32]));
        assert_eq!(debug, "Encryption { keys: 2 }");
    }
}

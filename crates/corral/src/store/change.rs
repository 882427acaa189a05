//! The backplane: what a store tells the caches attached to a namespace
//! when a key, a tag or the whole namespace changes, so each keeps its
//! in-process tier coherent.
//!
//! A message carries the change and the [`Origin`] (the cache instance)
//! that made it, never a value. Every cache ignores its own messages. A
//! store that may have lost messages (a subscriber reconnect) says so with
//! [`ChangeSink::lost`]: the caches then distrust everything the backplane
//! kept current.
//!
//! A store whose server reports changes itself (Redis client tracking)
//! hands them on with [`ChangeSink::invalidated`] — changes by any client,
//! without an origin — and says with [`ChangeSink::flushed`] when the
//! server may have stopped reporting them, and why ([`FlushReason`]). A
//! connection that carries those reports and stops answering makes the
//! store say so once per silence ([`FlushReason::Silence`]): the caches
//! drop what they hold on the store's word and keep what they filled
//! without it.

use crate::sync::lock_std;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The cache instance that made a change: a random 64-bit id drawn when the
/// cache is built, so a cache recognises (and ignores) its own messages.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Origin(u64);

impl Origin {
    /// The origin with this id.
    pub const fn new(id: u64) -> Self {
        Self(id)
    }

    /// The id.
    pub const fn id(self) -> u64 {
        self.0
    }

    /// The id as 16 lowercase hex digits (how stores write it).
    pub fn to_hex(self) -> String {
        let mut hex = String::with_capacity(16);
        self.push_hex(&mut hex);
        hex
    }

    /// Appends [`to_hex`](Self::to_hex)'s form to `out`.
    pub(crate) fn push_hex(self, out: &mut String) {
        crate::data::key::push_hex(out, u128::from(self.0), 16);
    }

    /// Parses [`to_hex`](Self::to_hex)'s form.
    pub fn from_hex(hex: &str) -> Option<Self> {
        if hex.len() != 16 {
            return None;
        }
        u64::from_str_radix(hex, 16).ok().map(Self)
    }
}

impl fmt::Debug for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Origin({:016x})", self.0)
    }
}

/// What changed in a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A fill committed a value for the key.
    Filled(Arc<str>),
    /// The key was written with `set`.
    Written(Arc<str>),
    /// The key was invalidated.
    Removed(Arc<str>),
    /// Every entry carrying the tag was invalidated.
    TagInvalidated(Arc<str>),
    /// The whole namespace was cleared.
    Cleared,
}

impl Event {
    /// The one-letter code stores write for the event's kind.
    pub fn code(&self) -> char {
        match self {
            Self::Filled(_) => 'c',
            Self::Written(_) => 's',
            Self::Removed(_) => 'i',
            Self::TagInvalidated(_) => 't',
            Self::Cleared => 'x',
        }
    }

    /// The event of kind `code` about `subject` (a key, a tag, or empty for
    /// [`Event::Cleared`]); `None` for an unknown code.
    pub fn from_code(code: char, subject: &str) -> Option<Self> {
        Some(match code {
            'c' => Self::Filled(subject.into()),
            's' => Self::Written(subject.into()),
            'i' => Self::Removed(subject.into()),
            't' => Self::TagInvalidated(subject.into()),
            'x' => Self::Cleared,
            _ => return None,
        })
    }
}

/// Why a store told its caches to drop what they keep in process
/// ([`ChangeSink::flushed`]): the server that reported changes to it may
/// have missed some, or reported that everything changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FlushReason {
    /// The connection the server tracked this process's reads on was lost
    /// or replaced: the server forgot what it tracked for it.
    Reconnected,
    /// The store moved to another server (a failover; a demoted master
    /// left): that server tracked nothing this process read before.
    Failover,
    /// The server dropped its data (`FLUSHALL`, `FLUSHDB`): it reports
    /// that every key changed.
    ServerFlush,
    /// A cluster's slot map changed without a master coming or going (a
    /// slot moved between masters): a change around the move may have
    /// gone unreported.
    Topology,
    /// A connection that carries the server's reports (the tracked
    /// connection, the backplane's subscription) gave no answer to a health
    /// check, or was lost, and no new one is confirmed yet: reports may be
    /// held up or lost from now on. Only what is held on the store's word
    /// (read from it, or written to it) is dropped; what was filled from
    /// the source without the store, while it did not answer, is kept. Said
    /// once per silence.
    Silence,
}

impl FlushReason {
    /// Its name in metrics and logs: `reconnect`, `failover`,
    /// `server_flush`, `topology`, `silence`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Reconnected => "reconnect",
            Self::Failover => "failover",
            Self::ServerFlush => "server_flush",
            Self::Topology => "topology",
            Self::Silence => "silence",
        }
    }
}

/// One backplane message: who changed what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The cache instance that made the change.
    pub origin: Origin,
    /// What changed.
    pub event: Event,
}

impl Change {
    /// The message text stores publish: `<code>|<origin hex>|<subject>`.
    pub fn encode(&self) -> String {
        let subject = match &self.event {
            Event::Filled(s) | Event::Written(s) | Event::Removed(s) | Event::TagInvalidated(s) => {
                &**s
            }
            Event::Cleared => "",
        };
        format!("{}|{}|{subject}", self.event.code(), self.origin.to_hex())
    }

    /// Parses [`encode`](Self::encode)'s form; `None` for anything else.
    pub fn decode(text: &str) -> Option<Self> {
        let mut chars = text.chars();
        let code = chars.next()?;
        let rest = chars.as_str().strip_prefix('|')?;
        let (origin, subject) = rest.split_once('|')?;
        Some(Self {
            origin: Origin::from_hex(origin)?,
            event: Event::from_code(code, subject)?,
        })
    }
}

/// Receives the backplane messages of one namespace (see
/// [`Store::backplane`](super::Store::backplane)). Called on the store's
/// dispatching task or inside its write calls: implementations must be quick
/// and must not block.
pub trait ChangeSink: Send + Sync {
    /// A change made by some cache (possibly this one: compare the origin).
    fn changed(&self, change: &Change);

    /// Messages may have been lost (the store's subscription was
    /// interrupted): distrust everything the backplane kept current.
    fn lost(&self);

    /// The store's server reported a change to a key, tag or clear version
    /// this process read — made by any client (another process, an
    /// operator, an expiry, an eviction), so it carries no origin. The
    /// default treats it as a message from another cache.
    fn invalidated(&self, event: &Event) {
        self.changed(&Change {
            origin: Origin::new(0),
            event: event.clone(),
        });
    }

    /// Changes the server reported may have been missed, or everything
    /// changed (`reason`): drop every in-process copy and distrust what the
    /// store's reports kept current ([`FlushReason::Silence`]: the copies
    /// filled without the store may be kept). The default is
    /// [`lost`](Self::lost).
    fn flushed(&self, reason: FlushReason) {
        let _ = reason;
        self.lost();
    }

    /// Whether the sink keeps copies of values in process (an L1): a store
    /// that can have its server track reads does so for the namespaces of
    /// such sinks. Default: true.
    fn keeps_copies(&self) -> bool {
        true
    }
}

/// The sinks attached to each namespace (or channel) of a store. Holds them
/// weakly: a dropped cache stops receiving and is forgotten.
#[derive(Default)]
pub(crate) struct Sinks {
    by_name: Mutex<HashMap<Arc<str>, Vec<WeakSink>>>,
    /// Set by the first [`silenced`](Self::silenced) of a silence, until
    /// [`answered`](Self::answered).
    silent: AtomicBool,
}

type WeakSink = Weak<dyn ChangeSink>;

impl Sinks {
    /// Attaches `sink` under `name`.
    pub(crate) fn attach(&self, name: &str, sink: Weak<dyn ChangeSink>) {
        let mut by_name = lock_std(&self.by_name);
        by_name.entry(name.into()).or_default().push(sink);
    }

    /// The live sinks under `name`, forgetting dropped ones.
    pub(crate) fn live(&self, name: &str) -> Vec<Arc<dyn ChangeSink>> {
        let mut by_name = lock_std(&self.by_name);
        let Some(attached) = by_name.get_mut(name) else {
            return Vec::new();
        };
        attached.retain(|sink| sink.strong_count() > 0);
        attached.iter().filter_map(Weak::upgrade).collect()
    }

    /// Every live sink.
    pub(crate) fn all_live(&self) -> Vec<Arc<dyn ChangeSink>> {
        let by_name = lock_std(&self.by_name);
        by_name
            .values()
            .flatten()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// A connection that carries the server's reports stopped answering
    /// (or was lost): the first time since the store was last
    /// [`answered`](Self::answered), every live sink is flushed for
    /// [`FlushReason::Silence`]. Returns whether it was.
    pub(crate) fn silenced(&self) -> bool {
        if self.silent.swap(true, Ordering::AcqRel) {
            return false;
        }
        for sink in self.all_live() {
            sink.flushed(FlushReason::Silence);
        }
        true
    }

    /// A connection that carries the server's reports answered (a health
    /// check, a new connection, a subscription confirmed anew): the
    /// silence, if any, is over, and the next one flushes again.
    pub(crate) fn answered(&self) {
        if self.silent.load(Ordering::Relaxed) {
            self.silent.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let origin = Origin::new(0x0123_4567_89ab_cdef);
        for event in [
            Event::Filled("k|with|bars".into()),
            Event::Written("".into()),
            Event::Removed("ключ".into()),
            Event::TagInvalidated("team:7".into()),
            Event::Cleared,
        ] {
            let change = Change { origin, event };
            assert_eq!(Change::decode(&change.encode()), Some(change));
        }
        assert_eq!(Change::decode(""), None);
        assert_eq!(Change::decode("c|xyz|k"), None);
        assert_eq!(Change::decode("q|0123456789abcdef|k"), None);
        assert_eq!(Change::decode("corral:v:ns:v1:{0}:k"), None);
    }

    /// Counts the flushes it is told of, by reason.
    #[derive(Default)]
    struct Flushes(Mutex<Vec<FlushReason>>);

    impl ChangeSink for Flushes {
        fn changed(&self, _: &Change) {}
        fn lost(&self) {}
        fn flushed(&self, reason: FlushReason) {
            lock_std(&self.0).push(reason);
        }
    }

    #[test]
    fn a_silence_flushes_once_until_the_store_answers() {
        let sinks = Sinks::default();
        let sink = Arc::new(Flushes::default());
        let weak: Weak<dyn ChangeSink> = Arc::downgrade(&sink) as Weak<dyn ChangeSink>;
        sinks.attach("ns", weak);
        assert!(sinks.silenced());
        assert!(!sinks.silenced(), "the same silence");
        assert!(!sinks.silenced());
        sinks.answered();
        assert!(sinks.silenced(), "a new silence");
        assert_eq!(
            *lock_std(&sink.0),
            [FlushReason::Silence, FlushReason::Silence]
        );
    }
}

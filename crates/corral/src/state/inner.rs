//! `Inner<V>`: the state of one cache instance, its one home, and the
//! steps every read and write path shares (encode and judge entries, call
//! the store through its guard, keep values in the L1; what it knows of
//! tag versions is in [`versions`](super::versions)).
//! It sits below the paths that use it (the read pipeline, the flights'
//! caller and leader sides, the batch leader, the backplane) and the facade ([`Cache`](crate::Cache)); nothing here
//! imports them.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::budget::{FillBudget, DEFAULT_FAIL_OPEN_LIMIT};
use crate::codec::{round_trips, Codec};
use crate::data::cause::FillError;
use crate::data::compression::frames::Frames;
use crate::data::compression::Compression;
use crate::data::encryption::Cipher;
use crate::data::entry::{self, Decoded, Format, Ttls};
use crate::data::error::{Error, StoreError};
use crate::data::freshness::{Fetched, Judged};
use crate::data::key::KeyLabel;
use crate::data::policy::{jittered, Policy};
use crate::data::tags::{Home, Stamps, TagTable};
use crate::state::flight::{Failure, Flight, FlightTable, Outcome};
use crate::stats::{Counters, Stats};
use crate::store::{new_version, Origin, StoreKey, Stored};
use crate::sync::{lock, Mutex};
use crate::throttle::{warn_throttled, Throttle};
use crate::tier::local::{InL1, LocalTier};
use crate::tier::shared::SharedTier;

/// Where a cache keeps its values: decoded in process (L1), as envelopes in
/// a shared store (L2), or both, the L1 in front.
pub(crate) struct Tiers<V> {
    pub(crate) l1: Option<LocalTier<V>>,
    pub(crate) l2: Option<SharedTier>,
}

/// The state of one cache instance. Its fields are this module's: the
/// paths and the facade above read them through the accessors below.
pub(crate) struct Inner<V> {
    name: Arc<str>,
    namespace: Arc<str>,
    /// The namespaces of other versions its invalidations also reach.
    also_invalidate: Arc<[Arc<str>]>,
    schema: u32,
    policy: Policy,
    /// Encodes values for the shared store and weighs them for a capacity
    /// in bytes; `None` only without a store and with a capacity in
    /// entries (the builder checks it).
    codec: Option<Arc<dyn Codec<V>>>,
    /// Seals what goes to the shared store and opens what comes back
    /// (feature `encryption`; `None`: envelopes are stored as they are).
    cipher: Option<Cipher>,
    /// Compresses what goes to the shared store (as its setting says) and
    /// unpacks what comes back compressed, whoever wrote it.
    frames: Frames,
    tiers: Tiers<V>,
    /// This instance's id on the backplane.
    origin: Origin,
    /// The tag versions this instance knows, and its L1 keys by tag.
    tags: TagTable,
    flights: Arc<FlightTable<Fetched<V>>>,
    counters: Counters,
    rng: Mutex<fastrand::Rng>,
    /// Whether the in-process tier is bounded by bytes (entries weigh their
    /// encoded size) rather than by entries.
    weigh_by_bytes: bool,
    /// Caps the background refreshes of this cache (or of every cache
    /// sharing the injected semaphore).
    refresh_limiter: Arc<Semaphore>,
    /// Bounds the fills of this cache (and of every cache sharing it).
    budget: Option<FillBudget>,
    /// Bounds the fills without a lease while the store does not answer:
    /// `budget` if the cache has one, else a default budget of its own.
    fail_open: FillBudget,
    /// Whether values round-trip through the codec, checked on the first
    /// value encoded ([`round_trips`]): an `Err` refuses every write.
    round_trip: OnceLock<Result<(), Arc<str>>>,
    /// Rations the warnings of failed store calls during an outage.
    store_warnings: Throttle,
    /// Rations the warnings of fills that returned an error (a source that
    /// is down fails every fill).
    fill_warnings: Throttle,
    /// What this instance last exported to `metrics`.
    #[cfg(feature = "metrics")]
    exported: crate::stats::export::Exported,
}

/// What a cache instance is made of, as the builder assembles it.
pub(crate) struct InnerParts<V> {
    pub(crate) name: Arc<str>,
    pub(crate) namespace: Arc<str>,
    pub(crate) also_invalidate: Arc<[Arc<str>]>,
    pub(crate) schema: u32,
    pub(crate) policy: Policy,
    pub(crate) codec: Option<Arc<dyn Codec<V>>>,
    pub(crate) cipher: Option<Cipher>,
    pub(crate) compression: Compression,
    pub(crate) tiers: Tiers<V>,
    pub(crate) origin: Origin,
    pub(crate) rng: fastrand::Rng,
    pub(crate) weigh_by_bytes: bool,
    pub(crate) refresh_limiter: Arc<Semaphore>,
    pub(crate) budget: Option<FillBudget>,
}

impl<V: Clone> Inner<V> {
    /// A new instance: no flights, no counts, no tag versions known (kept
    /// from the start when there is no store: then they are its own).
    pub(crate) fn new(parts: InnerParts<V>) -> Self {
        let tags = TagTable::new(parts.tiers.l2.is_none());
        let name = parts.name;
        Self {
            name: Arc::clone(&name),
            namespace: parts.namespace,
            also_invalidate: parts.also_invalidate,
            schema: parts.schema,
            policy: parts.policy,
            codec: parts.codec,
            cipher: parts.cipher,
            frames: Frames::new(parts.compression),
            tiers: parts.tiers,
            origin: parts.origin,
            tags,
            flights: Arc::new(FlightTable::new()),
            counters: Counters::new(),
            rng: Mutex::new(parts.rng),
            weigh_by_bytes: parts.weigh_by_bytes,
            refresh_limiter: parts.refresh_limiter,
            fail_open: parts
                .budget
                .clone()
                .unwrap_or_else(|| FillBudget::new(DEFAULT_FAIL_OPEN_LIMIT)),
            budget: parts.budget,
            round_trip: OnceLock::new(),
            store_warnings: Throttle::default(),
            fill_warnings: Throttle::default(),
            #[cfg(feature = "metrics")]
            exported: crate::stats::export::Exported::new(Arc::clone(&name)),
        }
    }
}

impl<V> Inner<V> {
    /// The cache's name.
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Its namespace in shared stores (`name:v<schema>`).
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The namespaces of other versions its invalidations also reach
    /// (during a rolling deploy).
    pub(crate) fn also_invalidate(&self) -> &[Arc<str>] {
        &self.also_invalidate
    }

    /// Its settings.
    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Its L1 and shared store.
    pub(crate) fn tiers(&self) -> &Tiers<V> {
        &self.tiers
    }

    /// Its id on the backplane.
    pub(crate) fn origin(&self) -> Origin {
        self.origin
    }

    /// The tag versions it knows, and its L1 keys by tag.
    pub(crate) fn tags(&self) -> &TagTable {
        &self.tags
    }

    /// Its flights in progress.
    pub(crate) fn flights(&self) -> &Arc<FlightTable<Fetched<V>>> {
        &self.flights
    }

    /// Its counters.
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// A new random tag version, for a cache without a store (whose
    /// versions are its own).
    pub(crate) fn new_version(&self) -> Arc<str> {
        new_version(&mut lock(&self.rng))
    }

    /// Its fill budget, if it has one.
    pub(crate) fn budget(&self) -> Option<&FillBudget> {
        self.budget.as_ref()
    }

    /// The budget of its fills without a lease while the store does not
    /// answer: its fill budget, or a default one.
    pub(crate) fn fail_open_budget(&self) -> &FillBudget {
        &self.fail_open
    }

    /// The limiter of its background refreshes.
    pub(crate) fn refresh_limiter(&self) -> &Arc<Semaphore> {
        &self.refresh_limiter
    }
}

impl<V> Inner<V> {
    /// Counts a failed store call and says what the cache does instead:
    /// at debug level while the circuit breaker is open (then every call
    /// fails, by design), as a warning otherwise — at most one per
    /// window of its [`Throttle`], the next one with the count of those
    /// left out (logged at debug level).
    pub(crate) fn note_store_failure(&self, error: &StoreError, instead: &str) {
        self.counters.store_failed(error);
        if error.is_breaker_open() {
            tracing::debug!(cache = %self.name, "circuit breaker open: {instead}");
            return;
        }
        warn_throttled!(
            self.store_warnings,
            { cache = %self.name, %error },
            "store call failed: {}",
            instead
        );
    }

    /// Logs that a fill returned an error (an error of type `error_type`):
    /// the first at warning level, the repeats within the window of its
    /// [`Throttle`] at debug level, the next warning with their count.
    pub(crate) fn fill_failed(&self, error_type: &'static str) {
        warn_throttled!(
            self.fill_warnings,
            { cache = %self.name, error_type },
            "fill returned an error: nothing stored"
        );
    }
}

impl<V: 'static> Inner<V> {
    /// A TTL drawn with the cache's jitter.
    pub(crate) fn draw_ttl(&self, ttl: Duration) -> Duration {
        let unit = lock(&self.rng).f64();
        jittered(ttl, self.policy.jitter, unit)
    }

    pub(crate) fn store_key(&self, key: &str) -> StoreKey {
        StoreKey::of(&self.namespace, key)
    }

    /// Where the copies of the versions guarding `key`'s entry live in the
    /// store ([`Store::version_home`](crate::store::Store::version_home));
    /// 0 without a store.
    pub(crate) fn home(&self, key: &str) -> Home {
        self.tiers
            .l2
            .as_ref()
            .map_or(0, |store| store.version_home(&self.store_key(key)))
    }

    /// The bytes of `key`'s `value` (`None`: "not found") in the shared
    /// store, written with `ttls`, filled under `stamps`: its envelope,
    /// its value compressed when the setting says so and it pays (counted),
    /// then sealed when the cache encrypts.
    pub(crate) fn encode(
        &self,
        key: &str,
        value: Option<&V>,
        ttls: Ttls,
        flags: u16,
        stamps: &Stamps,
    ) -> Result<Vec<u8>, String> {
        let codec = self.codec.as_deref().ok_or(NO_CODEC)?;
        if let Some(value) = value {
            self.check_round_trip(codec, value)?;
        }
        let (envelope, packing) = entry::encode(&self.format(codec), ttls, flags, value, stamps)?;
        self.counters.packed(packing);
        match &self.cipher {
            Some(cipher) => cipher.seal(&self.namespace, key, &envelope),
            None => Ok(envelope),
        }
    }

    /// How this cache writes and reads envelopes with `codec`.
    fn format<'a>(&'a self, codec: &'a dyn Codec<V>) -> Format<'a, V> {
        Format {
            codec,
            schema: self.schema,
            max_value_bytes: self.policy.max_value_bytes,
            frames: &self.frames,
        }
    }

    /// Refuses values of a type the codec cannot round-trip (checked on
    /// the first value that encodes; one ERROR then, if it does not).
    fn check_round_trip(&self, codec: &dyn Codec<V>, value: &V) -> Result<(), String> {
        let checked = match self.round_trip.get() {
            Some(checked) => checked,
            None => match round_trips(codec, value) {
                None => return Ok(()),
                Some(result) => {
                    let result = result.map_err(Arc::<str>::from);
                    if self.round_trip.set(result.clone()).is_ok() {
                        if let Err(message) = &result {
                            tracing::error!(cache = %self.name, "{message}: nothing is written to the shared store");
                        }
                    }
                    self.round_trip.get().unwrap_or(&Ok(()))
                }
            },
        };
        checked.clone().map_err(|message| message.to_string())
    }

    /// Decodes the stored bytes of `key` (opening them first when the cache
    /// encrypts); bytes that do not open or decode are counted (if `count`)
    /// and yield `None`.
    pub(crate) fn decode(&self, key: &str, bytes: &[u8], count: bool) -> Option<Decoded<V>> {
        let opened;
        let envelope = match &self.cipher {
            None => bytes,
            Some(cipher) => match cipher.open(&self.namespace, key, bytes) {
                Ok(envelope) => {
                    opened = envelope;
                    opened.as_slice()
                }
                Err(error) => {
                    if count {
                        Counters::bump(&self.counters.decrypt_failures);
                        let key = KeyLabel {
                            key,
                            raw: self.policy.trace_raw_keys,
                        };
                        tracing::warn!(cache = %self.name, %key, %error, "entry did not decrypt: treated as a miss");
                    }
                    return None;
                }
            },
        };
        let decoded = match &self.codec {
            Some(codec) => entry::decode(&self.format(&**codec), envelope),
            None => Err(entry::DecodeError::Codec(NO_CODEC.to_owned())),
        };
        match decoded {
            Ok(decoded) => Some(decoded),
            Err(error) => {
                if count {
                    Counters::bump(&self.counters.decode_failures);
                    tracing::warn!(cache = %self.name, %error, "undecodable entry treated as a miss");
                }
                None
            }
        }
    }

    /// Judges the bytes of `key` read from the shared store by the store's
    /// clock: age is the physical TTL in the envelope minus the remaining
    /// TTL read with them. Undecodable bytes yield `None`, counted if
    /// `count_undecodable` (a look the leader repeats leaves them to it).
    pub(crate) fn judge_stored(
        &self,
        key: &str,
        stored: &Stored,
        count_undecodable: bool,
    ) -> Option<Judged<V>> {
        let decoded = self.decode(key, &stored.bytes, count_undecodable)?;
        let remaining = stored.remaining.unwrap_or(decoded.ttls.physical);
        let age = decoded.ttls.physical.saturating_sub(remaining);
        let fail_safe = decoded.flags & entry::FLAG_FAIL_SAFE != 0;
        let mut judged = Judged::new(
            decoded.value,
            age,
            decoded.ttls,
            fail_safe,
            self.policy.eager_refresh,
        );
        judged.stamps = decoded.stamps;
        Some(judged)
    }

    /// Copies an entry read from the L2 into the L1, with the age the L2's
    /// clock gave it, unless a write of this cache landed since `mark` or a
    /// flight of the key runs.
    pub(crate) fn keep_in_l1(&self, key: &str, judged: &Judged<V>, mark: u64)
    where
        V: Clone,
    {
        if let Some(copy) = self.l1_copy(key, judged) {
            self.flights.keep_if_unchanged(key, mark, || copy(key));
        }
    }

    /// What copies an entry read from the L2 into the L1, with the age the
    /// L2's clock gave it, if its stamps are still current: to be run under
    /// the flight table's lock (a retiring flight's, or
    /// [`keep_if_unchanged`](crate::state::flight::FlightTable::keep_if_unchanged)).
    /// `None` without an L1 or when the value cannot be weighed. The copy
    /// is handed `key` again (a retiring flight's own).
    pub(crate) fn l1_copy<'a>(
        &'a self,
        key: &str,
        judged: &'a Judged<V>,
    ) -> Option<impl FnOnce(&str) + 'a>
    where
        V: Clone,
    {
        self.tiers.l1.as_ref()?;
        let weight = weight(self, key, judged.value.as_ref()).ok()?;
        let home = judged.home.unwrap_or_else(|| self.home(key));
        Some(move |key: &str| {
            self.insert_in_l1(
                key,
                home,
                &judged.stamps,
                InL1 {
                    value: judged.value.clone(),
                    ttls: judged.ttls,
                    fail_safe: judged.fail_safe,
                    weight,
                    age: judged.age,
                },
            );
        })
    }

    /// Puts `entry` in the L1 as `key` if its `stamps` are all current as
    /// far as the tag table knows, indexing it under its tags (and only
    /// them: a write without tags leaves the key indexed under none); the
    /// entries it evicts leave the index. To be run under the flight
    /// table's lock, as every L1 insert is; `home` is [`home`](Self::home)
    /// of `key`. Returns whether it was put there (false too without an
    /// L1).
    pub(crate) fn insert_in_l1(
        &self,
        key: &str,
        home: Home,
        stamps: &Stamps,
        entry: InL1<V>,
    ) -> bool
    where
        V: Clone,
    {
        let Some(local) = &self.tiers.l1 else {
            return false;
        };
        let Some(id) = self.tags.admit_to_l1(key, home, stamps) else {
            return false;
        };
        self.put_in_l1(local, key, id, entry, false);
        true
    }

    /// Inserts `entry` of `key` in the L1 unchecked, indexed under `tags`:
    /// a fill made while the store did not answer (its versions unknown),
    /// called under the flight table's lock like [`insert_in_l1`](Self::insert_in_l1).
    pub(crate) fn insert_unverified_in_l1(&self, key: &str, tags: &[Arc<str>], entry: InL1<V>)
    where
        V: Clone,
    {
        if let Some(local) = &self.tiers.l1 {
            let id = self.tags.admit_unverified(key, tags);
            self.put_in_l1(local, key, id, entry, true);
        }
    }

    /// Puts `entry` of `key`, filled from the source without a lease while
    /// the store did not answer but under `stamps` this cache knew, in the
    /// L1 as filled without the store (a silence keeps it), under the
    /// flight table's lock: for its TTL while the stamps are current; for
    /// `cap` at most if one is no longer known (forgotten meanwhile: the
    /// store's reports may be lost); not at all if one moved.
    pub(crate) fn insert_filled_alone(
        &self,
        key: &str,
        home: Home,
        stamps: &Stamps,
        mut entry: InL1<V>,
        cap: Duration,
    ) where
        V: Clone,
    {
        let Some(local) = &self.tiers.l1 else {
            return;
        };
        let Some((id, checked)) = self.tags.admit_filled_alone(key, home, stamps) else {
            return;
        };
        if !checked {
            entry.ttls = entry.ttls.capped(cap);
        }
        self.put_in_l1(local, key, id, entry, true);
    }

    fn put_in_l1(&self, local: &LocalTier<V>, key: &str, id: u64, entry: InL1<V>, unverified: bool)
    where
        V: Clone,
    {
        let left = local.insert(key, id, entry, unverified);
        self.tags.left_l1(&left);
    }

    /// The key's L1 entry judged at the L1's now (`None` without an L1, or
    /// if absent or gone; a gone entry is dropped and leaves the tag index).
    pub(crate) fn judge_in_l1(&self, key: &str) -> Option<Judged<V>>
    where
        V: Clone,
    {
        let local = self.tiers.l1.as_ref()?;
        local.judge(key, |left| self.tags.left_l1(&[left]))
    }

    /// Drops the key's in-process copy, if any (and its place in the tag
    /// index).
    pub(crate) fn remove_from_l1(&self, key: &str)
    where
        V: Clone,
    {
        if let Some(local) = &self.tiers.l1 {
            if let Some(left) = local.remove(key) {
                self.tags.left_l1(&[left]);
            }
        }
    }

    /// Drops every in-process copy and the whole tag index with them.
    pub(crate) fn clear_l1(&self)
    where
        V: Clone,
    {
        if let Some(local) = &self.tiers.l1 {
            local.clear();
        }
    }

    /// Drops every in-process copy held on the store's word (and its place
    /// in the tag index), keeping those filled while the store did not
    /// answer ([`insert_unverified_in_l1`](Self::insert_unverified_in_l1)).
    pub(crate) fn keep_unverified_in_l1(&self)
    where
        V: Clone,
    {
        if let Some(local) = &self.tiers.l1 {
            let left = local.keep_unverified();
            self.tags.left_l1(&left);
        }
    }

    /// Waits for the outcome of a flight another caller leads; the wait is
    /// a recorded duration with the feature `metrics`.
    pub(crate) async fn wait_joined(&self, flight: &Arc<Flight<Fetched<V>>>) -> Outcome<Fetched<V>>
    where
        V: Clone,
    {
        #[cfg(feature = "metrics")]
        let started = std::time::Instant::now();
        let outcome = flight.wait().await;
        #[cfg(feature = "metrics")]
        crate::stats::export::wait_took(&self.name, started.elapsed());
        outcome
    }

    /// A snapshot of the instance's counters, the breaker's included.
    pub(crate) fn stats(&self) -> Stats {
        let mut stats = self.counters.snapshot();
        if let Some(breaker) = self.tiers.l2.as_ref().and_then(SharedTier::breaker) {
            stats.breaker_opened = breaker.opened();
            stats.store_calls_skipped = breaker.skipped();
        }
        stats
    }
}

impl<V: Clone + Send + Sync + 'static> Inner<V> {
    /// Adds what this instance's counters and gauges changed since its
    /// last export to the `metrics` recorder.
    #[cfg(feature = "metrics")]
    pub(crate) fn export_metrics(&self) {
        let breaker = self.tiers.l2.as_ref().and_then(SharedTier::breaker);
        let mut gauges = crate::stats::export::Gauges {
            l1_entries: self.tiers.l1.as_ref().map_or(0, |l1| l1.len() as u64),
            flights: self.flights.len() as u64,
            breaker_open: u64::from(breaker.is_some_and(|breaker| breaker.is_open())),
            ..crate::stats::export::Gauges::default()
        };
        if let Some(budget) = &self.budget {
            let load = budget.stats();
            gauges.budget_in_use = load.in_use as u64;
            gauges.budget_queued = load.queued as u64;
            gauges.budget_limit = load.limit as u64;
        }
        self.exported.export(&self.stats(), &gauges);
    }
}

/// A flight's outcome as its caller's result. The caller's `E` is the error
/// type the flight is keyed by (see [`FlightTable::claim`]), and every fill
/// fails with a [`FillError<E>`] (the public calls wrap their fills'
/// errors), so the fill's error always downcasts to it; were it ever not to, the caller would get
/// [`Error::Aborted`] (no outcome it can receive), never a panic.
///
/// [`FlightTable::claim`]: crate::state::flight::FlightTable::claim
pub(crate) fn outcome_to_result<V, E: Send + Sync + 'static>(
    outcome: Outcome<Fetched<V>>,
) -> Result<Fetched<V>, Error<E>> {
    match outcome {
        Outcome::Value(fetched) => Ok(fetched),
        Outcome::Failed(Failure::Fill(error)) => match error.downcast::<FillError<E>>() {
            Ok(error) => Err(Error::Fill(FillError::clone(&error))),
            Err(_) => Err(Error::Aborted),
        },
        Outcome::Failed(Failure::Panicked(message)) => Err(Error::FillPanicked { message }),
        Outcome::Failed(Failure::TimedOut(after)) => Err(Error::Timeout { after }),
        Outcome::Failed(Failure::Overloaded(waited)) => Err(Error::Overloaded { waited }),
        Outcome::Failed(Failure::Aborted) => Err(Error::Aborted),
    }
}

/// Why a cache without a codec encodes nothing: it has no store, and its
/// builder refused a capacity in bytes.
const NO_CODEC: &str = "the cache has no codec";

/// The weight of a value in the in-process tier: 1 when it is bounded by
/// entries, the key and encoded value size when it is bounded by bytes (a
/// cache bounded by bytes always has a codec).
pub(crate) fn weight<V: 'static>(
    inner: &Inner<V>,
    key: &str,
    value: Option<&V>,
) -> Result<u32, Error> {
    if !inner.weigh_by_bytes {
        return Ok(1);
    }
    let mut bytes = Vec::new();
    if let (Some(value), Some(codec)) = (value, &inner.codec) {
        codec.encode(value, &mut bytes).map_err(|e| {
            Counters::bump(&inner.counters.encode_failures);
            Error::Encode {
                message: e.to_string().into(),
            }
        })?;
    }
    Ok(u32::try_from(key.len() + bytes.len()).unwrap_or(u32::MAX))
}

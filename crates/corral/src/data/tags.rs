//! Tags and clear: invalidating groups of entries without scanning keys.
//!
//! Every tag of a namespace has a **version** in the shared store: a random
//! token created on the tag's first use and replaced by each
//! [`invalidate_tag`](crate::Cache::invalidate_tag). The empty tag is the
//! namespace's **clear version**, replaced by [`clear`](crate::Cache::clear). A fill reads the versions of its tags and
//! the clear version *before* it runs, and its entry carries them
//! ([`Stamps`]); a reader serves an entry only while every version it
//! carries is still current. So an invalidation makes every entry of the
//! tag a miss at once, in every process, and a fill that was running when
//! it happened is fenced: its entry carries the old version and is never
//! served. No wall-clock time is compared anywhere: versions are tokens.
//!
//! A store may forget a version (evicted, expired, flushed, lost in a
//! restart). The next read of it creates a new random one, so an entry is
//! current only while the very version it was stamped with survives: a
//! lost version costs a refill of its tag's entries (of the whole
//! namespace, for the clear version), and never serves an entry filled
//! before an invalidation. Entries stamped without a version (written
//! before versions were always created) are never current.
//!
//! A store may keep several copies of each version, one per part of it
//! that can be lost alone (a memcached server, a Redis Cluster bucket:
//! their *homes*, see [`Store::version_home`](crate::store::Store::version_home)):
//! an entry is stamped with, and checked against, the copies at its own
//! key's home, so a lost part costs only its own entries.
//!
//! Each cache keeps the versions it has read ([`TagTable`], by home and
//! tag) and trusts them
//! only while the backplane keeps them current: a backplane message about a
//! tag makes it forget that tag's version (read again when next needed), a
//! lost-messages notice makes it forget all of them, and a cache without a
//! backplane reads them from the store on every check (one script on Redis:
//! the copies of one home share one hash slot). An entry in the L1 was
//! checked when it got there; a tag invalidation evicts the L1 entries
//! that carry the tag (indexed by tag here), a clear drops the whole L1.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_utils::sync::ShardedLock;

use crate::sync::{read, write};

/// The tag whose version is the namespace's clear version.
pub(crate) const CLEAR: &str = "";

/// The tag whose version moves with every tag invalidation, just before the
/// tag's own: no entry carries it. A fill reads it before it runs, and a
/// fill that declares tags from what it loaded (their versions only read
/// once it has) stores its entry only if this version did not move
/// meanwhile. Users cannot name it: keys and tags hold no control
/// characters.
pub(crate) const MOVED: &str = "\u{1}moved";

pub(crate) use super::stamps::Stamps;

/// The home of the versions of a cache without a store: its own.
const OWN: Home = 0;

/// At most this many tag versions are remembered per cache: past it the
/// least used are forgotten (read again from the store when next needed),
/// so per-user or per-tenant tags cost memory only while they are in use.
pub(crate) const KNOWN_TAGS: usize = 16_384;

/// The tag versions one cache knows, and which L1 keys carry which tag.
pub(crate) struct TagTable {
    /// Read by every read of the store (a check of its stamps), written
    /// only when versions are learnt or forgotten: a read takes only its
    /// thread's slice of the lock, so concurrent reads do not contend.
    state: ShardedLock<TagState>,
    /// The id of the last L1 insert admitted (see [`L1Index`]).
    last_id: AtomicU64,
    /// [`CLEAR`] and [`MOVED`], shared by the stamps of every fill.
    names: [Arc<str>; 2],
}

/// Where a copy of a version lives in the store: a server or slot group
/// ([`Store::version_home`](crate::store::Store::version_home)); 0 for a
/// store that keeps one copy.
pub(crate) type Home = u32;

/// A version's address in the table: its copy's home and its tag.
type Copy = (Home, Arc<str>);

/// [`Copy`] borrowed, for lookups that allocate nothing: hashes as the
/// tuple does.
#[derive(Hash)]
struct CopyRef<'a>(Home, &'a str);

impl quick_cache::Equivalent<Copy> for CopyRef<'_> {
    fn equivalent(&self, key: &Copy) -> bool {
        self.0 == key.0 && self.1 == &*key.1
    }
}

type Versions = quick_cache::unsync::Cache<
    Copy,
    Arc<str>,
    quick_cache::UnitWeighter,
    foldhash::fast::RandomState,
>;

struct TagState {
    /// Versions read from the store and not invalidated since, at most
    /// [`KNOWN_TAGS`] of them (forgetting one only costs a read).
    known: Versions,
    /// Bumped whenever a version is forgotten, so a read of the store that
    /// raced with an invalidation is not remembered.
    forgets: u64,
    /// Whether versions may be remembered at all (the backplane keeps
    /// them current).
    remember: bool,
    /// The tagged keys of the L1: never more than it holds.
    l1: L1Index,
}

/// The L1 keys that carry tags, by key and by tag. Each L1 insert gets an
/// id; a key leaves the index when the entry with its id leaves the L1
/// (evicted, expired, removed) or is replaced by one with other tags. An
/// index entry for a key the L1 no longer holds costs at most a useless
/// removal; a key the L1 holds under a tag is always indexed under it.
#[derive(Default)]
struct L1Index {
    by_key: HashMap<Box<str>, Indexed, foldhash::fast::RandomState>,
    by_tag: HashMap<Arc<str>, HashSet<Box<str>>, foldhash::fast::RandomState>,
}

/// A tagged L1 entry: the id of its insert and its tags.
struct Indexed {
    id: u64,
    tags: Box<[Arc<str>]>,
}

impl L1Index {
    /// Indexes `key` under `tags` (replacing what it was indexed under) for
    /// the L1 insert `id` that follows; returns `id`.
    fn admit<'a>(&mut self, key: &str, id: u64, tags: impl Iterator<Item = &'a Arc<str>>) -> u64 {
        self.unindex(key);
        let tags: Box<[Arc<str>]> = tags.cloned().collect();
        if tags.is_empty() {
            return id;
        }
        for tag in &*tags {
            self.by_tag
                .entry(Arc::clone(tag))
                .or_default()
                .insert(key.into());
        }
        self.by_key.insert(key.into(), Indexed { id, tags });
        id
    }

    /// The L1 entry of `key` inserted as `id` left the L1.
    fn left(&mut self, key: &str, id: u64) {
        if self.by_key.get(key).is_some_and(|indexed| indexed.id == id) {
            self.unindex(key);
        }
    }

    fn unindex(&mut self, key: &str) {
        let Some(indexed) = self.by_key.remove(key) else {
            return;
        };
        for tag in &*indexed.tags {
            if let Some(keys) = self.by_tag.get_mut(tag) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_tag.remove(tag);
                }
            }
        }
    }

    /// Takes the keys indexed under `tag` out of the index.
    fn take_tag(&mut self, tag: &str) -> HashSet<Box<str>> {
        let keys = self.by_tag.remove(tag).unwrap_or_default();
        for key in &keys {
            self.unindex(key);
        }
        keys
    }

    fn clear(&mut self) {
        self.by_key.clear();
        self.by_tag.clear();
    }
}

impl TagState {
    fn check(&self, home: Home, stamps: &Stamps) -> Option<bool> {
        let mut current = true;
        for (tag, stamped) in stamps.all() {
            current &= Some(self.known.get(&CopyRef(home, tag))?.as_bytes()) == stamped;
        }
        Some(current)
    }
}

/// What [`TagTable::lookup`] found.
pub(crate) enum Known {
    /// Every version, in the order asked.
    All(Vec<Arc<str>>),
    /// Some are unknown: read them all from the store, and hand this mark
    /// to [`TagTable::learn`].
    Unknown { mark: u64 },
}

impl TagTable {
    /// A table that remembers versions only if `remember` (the cache
    /// listens to a backplane, or has no store: then versions are its own).
    pub(crate) fn new(remember: bool) -> Self {
        Self {
            state: ShardedLock::new(TagState {
                known: Versions::with(
                    KNOWN_TAGS,
                    KNOWN_TAGS as u64,
                    quick_cache::UnitWeighter,
                    foldhash::fast::RandomState::default(),
                    quick_cache::unsync::DefaultLifecycle::default(),
                ),
                forgets: 0,
                remember,
                l1: L1Index::default(),
            }),
            last_id: AtomicU64::new(0),
            names: [CLEAR.into(), MOVED.into()],
        }
    }

    /// Whether versions may be remembered from now on.
    pub(crate) fn set_remember(&self, remember: bool) {
        write(&self.state).remember = remember;
    }

    /// Whether `stamps` are all current at `home` (the copies of the
    /// versions that guard the entry), if every version they name is
    /// known (`None`: read the unknown ones from the store). Allocates
    /// nothing: the check of every read of the store.
    pub(crate) fn check(&self, home: Home, stamps: &Stamps) -> Option<bool> {
        read(&self.state).check(home, stamps)
    }

    /// The known versions of `tags` at `home`, if all are known.
    pub(crate) fn lookup(&self, home: Home, tags: &[Arc<str>]) -> Known {
        let state = read(&self.state);
        let versions: Option<Vec<_>> = tags
            .iter()
            .map(|tag| state.known.get(&CopyRef(home, tag)).cloned())
            .collect();
        match versions {
            Some(versions) => Known::All(versions),
            None => Known::Unknown {
                mark: state.forgets,
            },
        }
    }

    /// Remembers versions read from `home`'s copies since `mark`, unless a
    /// version was forgotten meanwhile (the read may predate it).
    pub(crate) fn learn(&self, home: Home, tags: &[Arc<str>], versions: &[Arc<str>], mark: u64) {
        let mut state = write(&self.state);
        if !state.remember || state.forgets != mark {
            return;
        }
        for (tag, version) in tags.iter().zip(versions) {
            state
                .known
                .insert((home, Arc::clone(tag)), Arc::clone(version));
        }
    }

    /// The versions of `tags` for a cache without a store, whose versions
    /// are its own: known ones, and a new one from `new_version` for each
    /// tag first used (kept at once, whatever was forgotten meanwhile). A
    /// version forgotten past [`KNOWN_TAGS`] is replaced by a new one on
    /// its next use: the L1 entries stamped with the old one stay indexed
    /// under the tag, so an invalidation still drops them.
    pub(crate) fn own_versions(
        &self,
        tags: &[Arc<str>],
        mut new_version: impl FnMut() -> Arc<str>,
    ) -> Vec<Arc<str>> {
        let mut state = write(&self.state);
        tags.iter()
            .map(|tag| {
                if let Some(version) = state.known.get(&CopyRef(OWN, tag)) {
                    return Arc::clone(version);
                }
                let version = new_version();
                state
                    .known
                    .insert((OWN, Arc::clone(tag)), Arc::clone(&version));
                version
            })
            .collect()
    }

    /// `tag` was invalidated: forgets its version at every home, or — for
    /// a cache without a store, whose versions are its own — replaces it
    /// with `replaced_by`. Returns the L1 keys that carry it, forgetting
    /// them too.
    pub(crate) fn invalidated(
        &self,
        tag: &str,
        replaced_by: Option<Arc<str>>,
    ) -> HashSet<Box<str>> {
        let mut state = write(&self.state);
        match replaced_by {
            Some(version) => {
                state.known.insert((OWN, tag.into()), version);
            }
            None => state.known.retain(|(_, known), _| &**known != tag),
        }
        state.forgets += 1;
        if tag == CLEAR {
            state.l1.clear();
            return HashSet::new();
        }
        state.l1.take_tag(tag)
    }

    /// Forgets every version (backplane messages may have been lost) and
    /// the L1 index (the L1 is dropped with it).
    pub(crate) fn distrust(&self) {
        let mut state = write(&self.state);
        state.known.clear();
        state.l1.clear();
        state.forgets += 1;
    }

    /// Forgets every version (the store's reports may be getting lost),
    /// keeping the L1 index: the entries that stay in the L1 stay indexed.
    pub(crate) fn forget_versions(&self) {
        let mut state = write(&self.state);
        state.known.clear();
        state.forgets += 1;
    }

    /// Whether `stamps` are all current as far as this table knows (a
    /// forgotten version counts as moved), and if so indexes `key` under
    /// its tags for the L1, returning the id to insert it with: called
    /// under the flight table's lock with the L1 insert, so an invalidation
    /// either sees the key indexed or the insert sees the version moved.
    pub(crate) fn admit_to_l1(&self, key: &str, home: Home, stamps: &Stamps) -> Option<u64> {
        // An untagged entry of a key the index does not hold changes
        // nothing in it: the check takes only this thread's slice of the
        // lock (every L2 hit and fill of an untagged key comes here).
        if stamps.user_tags().next().is_none() {
            let state = read(&self.state);
            if state.remember && state.check(home, stamps) != Some(true) {
                return None;
            }
            if !state.l1.by_key.contains_key(key) {
                return Some(self.next_id());
            }
        }
        let mut state = write(&self.state);
        if state.remember && state.check(home, stamps) != Some(true) {
            return None;
        }
        Some(state.l1.admit(key, self.next_id(), stamps.user_tags()))
    }

    /// The versions a fill of an entry tagged `tags` reads before it runs:
    /// [`CLEAR`], `tags` without duplicates, then [`MOVED`].
    pub(crate) fn fill_wanted(&self, tags: &[Arc<str>]) -> Vec<Arc<str>> {
        let [clear, moved] = &self.names;
        let mut wanted = Vec::with_capacity(tags.len() + 2);
        wanted.push(Arc::clone(clear));
        for tag in tags {
            if !wanted.contains(tag) {
                wanted.push(Arc::clone(tag));
            }
        }
        wanted.push(Arc::clone(moved));
        wanted
    }

    /// A new L1 insert id, greater than every one before.
    fn next_id(&self) -> u64 {
        self.last_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// [`admit_to_l1`](Self::admit_to_l1) for an entry filled while the
    /// store did not answer, under `stamps` this table knew: checked while
    /// they are all known; admitted unchecked (`false`) if one is no longer
    /// known (forgotten since: the store's reports may be lost, and it
    /// cannot be read); `None` only if one is known to have moved.
    pub(crate) fn admit_filled_alone(
        &self,
        key: &str,
        home: Home,
        stamps: &Stamps,
    ) -> Option<(u64, bool)> {
        let mut state = write(&self.state);
        let checked = match state.check(home, stamps) {
            _ if !state.remember => true,
            Some(true) => true,
            Some(false) => return None,
            None => false,
        };
        Some((
            state.l1.admit(key, self.next_id(), stamps.user_tags()),
            checked,
        ))
    }

    /// Indexes `key` under `tags` for the L1 without checking versions (an
    /// entry filled while the store did not answer, whose versions could
    /// not be read): an invalidation of one of them still evicts it.
    /// Returns the id to insert it with.
    pub(crate) fn admit_unverified(&self, key: &str, tags: &[Arc<str>]) -> u64 {
        write(&self.state)
            .l1
            .admit(key, self.next_id(), tags.iter())
    }

    /// These L1 entries (key, insert id) left the L1: their keys leave the
    /// index, unless inserted again since.
    pub(crate) fn left_l1(&self, left: &[(Box<str>, u64)]) {
        // Without tagged keys (a cache that uses no tags) there is nothing
        // to forget, and the shared read lock is all an eviction costs.
        if left.is_empty() || read(&self.state).l1.by_key.is_empty() {
            return;
        }
        let mut state = write(&self.state);
        for (key, id) in left {
            state.l1.left(key, *id);
        }
    }

    /// How many L1 keys are indexed, and how many tag versions are known.
    #[cfg(any(test, feature = "test-hooks"))]
    pub(crate) fn sizes(&self) -> (usize, usize) {
        let state = read(&self.state);
        (state.l1.by_key.len(), state.known.len())
    }
}

#[cfg(all(test, not(shuttle)))]
mod tests {
    use super::*;

    fn tags(names: &[&str]) -> Vec<Arc<str>> {
        names.iter().map(|name| Arc::<str>::from(*name)).collect()
    }

    #[test]
    fn a_read_racing_an_invalidation_is_not_remembered() {
        let table = TagTable::new(true);
        let wanted = tags(&["", "t"]);
        let Known::Unknown { mark } = table.lookup(0, &wanted) else {
            panic!("nothing is known yet");
        };
        table.invalidated("t", None);
        table.learn(0, &wanted, &["c".into(), "v0".into()], mark);
        assert!(matches!(table.lookup(0, &wanted), Known::Unknown { .. }));
        let Known::Unknown { mark } = table.lookup(0, &wanted) else {
            panic!("still unknown");
        };
        table.learn(0, &wanted, &["c".into(), "v1".into()], mark);
        assert!(matches!(table.lookup(0, &wanted), Known::All(v) if &*v[1] == "v1"));
    }

    #[test]
    fn stale_stamps_are_not_admitted_and_admitted_keys_are_evicted_by_tag() {
        let table = TagTable::new(true);
        let wanted = tags(&["", "t"]);
        table.learn(0, &wanted, &["c".into(), "v1".into()], 0);
        let old = Stamps::zip(&wanted, vec!["c".into(), "v0".into()]);
        let new = Stamps::zip(&wanted, vec!["c".into(), "v1".into()]);
        assert!(table.admit_to_l1("k", 0, &old).is_none());
        assert!(table.admit_to_l1("k", 0, &new).is_some());
        let evicted = table.invalidated("t", None);
        assert!(evicted.contains("k"));
        assert!(
            table.admit_to_l1("k", 0, &new).is_none(),
            "the version was forgotten"
        );
    }

    #[test]
    fn entries_without_a_version_never_match() {
        let table = TagTable::new(true);
        let wanted = tags(&["", "t"]);
        table.learn(0, &wanted, &["c".into(), "v".into()], 0);
        // Written before versions always existed: no version for the tag,
        // or no clear stamp at all.
        let unversioned = Stamps::new(vec![("".into(), Some("c".into())), ("t".into(), None)]);
        let unstamped = Stamps::new(vec![("t".into(), Some("v".into()))]);
        for stamps in [&unversioned, &unstamped] {
            assert_eq!(table.check(0, stamps), Some(false), "{stamps:?}");
            assert!(!stamps.matches(&["c".into(), "v".into()]), "{stamps:?}");
        }
        assert_eq!(
            table.check(0, &Stamps::zip(&wanted, vec!["c".into(), "v".into()])),
            Some(true)
        );
    }

    #[test]
    fn each_home_has_its_own_copies_and_an_invalidation_forgets_all() {
        let table = TagTable::new(true);
        let wanted = tags(&["", "t"]);
        table.learn(1, &wanted, &["c1".into(), "v1".into()], 0);
        table.learn(2, &wanted, &["c2".into(), "v2".into()], 0);
        let at_1 = Stamps::zip(&wanted, vec!["c1".into(), "v1".into()]);
        assert_eq!(table.check(1, &at_1), Some(true));
        assert_eq!(table.check(2, &at_1), Some(false), "another home's copy");
        assert_eq!(table.check(3, &at_1), None, "unknown at home 3");
        table.invalidated("t", None);
        assert_eq!(table.check(1, &at_1), None);
        assert!(matches!(table.lookup(2, &wanted), Known::Unknown { .. }));
        assert!(matches!(table.lookup(2, &wanted[..1]), Known::All(v) if &*v[0] == "c2"));
    }

    #[test]
    fn own_versions_are_created_once_and_kept() {
        let table = TagTable::new(true);
        let mut made = 0;
        let wanted = tags(&["", "t"]);
        let first = table.own_versions(&wanted, || {
            made += 1;
            format!("v{made}").into()
        });
        let again = table.own_versions(&wanted, || unreachable!("known"));
        assert_eq!((first.clone(), made), (again, 2));
        table.invalidated("t", Some("moved".into()));
        assert_eq!(
            &*table.own_versions(&wanted, || unreachable!("known"))[1],
            "moved"
        );
    }

    #[test]
    fn wanted_puts_clear_first_without_duplicates() {
        assert_eq!(
            Stamps::wanted(&tags(&["a", "b", "a"])),
            tags(&["", "a", "b"])
        );
    }

    #[test]
    fn a_key_leaves_the_index_with_its_entry_and_not_with_an_older_one() {
        let table = TagTable::new(true);
        let wanted = tags(&["", "t", "u"]);
        table.learn(0, &wanted, &["c".into(), "v".into(), "w".into()], 0);
        let both = Stamps::zip(&wanted, vec!["c".into(), "v".into(), "w".into()]);
        let first = table.admit_to_l1("k", 0, &both).expect("current");
        let second = table.admit_to_l1("k", 0, &both).expect("current");
        table.left_l1(&[("k".into(), first)]);
        assert_eq!(table.sizes().0, 1, "an older insert leaving keeps the key");
        table.left_l1(&[("k".into(), second)]);
        assert_eq!(table.sizes().0, 0);
        assert!(read(&table.state).l1.by_tag.is_empty());

        // Written again without tags: indexed under none.
        table.admit_to_l1("k", 0, &both).expect("current");
        let untagged = Stamps::zip(&wanted[..1], vec!["c".into()]);
        table.admit_to_l1("k", 0, &untagged).expect("current");
        assert_eq!(table.sizes().0, 0);
        assert!(table.invalidated("t", None).is_empty());
    }

    #[test]
    fn known_versions_are_bounded() {
        let table = TagTable::new(true);
        for i in 0..KNOWN_TAGS * 3 {
            let tag: Arc<str> = format!("tenant:{i}").into();
            table.own_versions(&[tag], || "v".into());
        }
        let known = table.sizes().1;
        assert!(known <= KNOWN_TAGS, "{known} versions kept");
    }
}

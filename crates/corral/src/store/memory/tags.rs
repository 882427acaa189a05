//! Tag and clear versions, each kept for a retention from its last use,
//! with an index of when each is forgotten so that forgetting never scans
//! the tags.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use tokio::time::Instant;

/// A tag of a namespace: `(namespace, tag)`.
pub(super) type TagName = (Arc<str>, Arc<str>);

/// Versions by tag, with when each is forgotten.
#[derive(Debug, Default)]
pub(super) struct Tags {
    versions: HashMap<TagName, (Arc<str>, Instant)>,
    /// Every version's `(until, tag)`, earliest first.
    until: BTreeSet<(Instant, TagName)>,
}

impl Tags {
    /// Forgets the versions whose retention is over at `now`: only those,
    /// each found first in the index.
    pub(super) fn forget_expired(&mut self, now: Instant) {
        while let Some(first) = self.until.first() {
            if first.0 > now {
                return;
            }
            if let Some((_, name)) = self.until.pop_first() {
                self.versions.remove(&name);
            }
        }
    }

    /// The version of `name`, kept from now until `until`, if it has one.
    pub(super) fn read(&mut self, name: &TagName, until: Instant) -> Option<Arc<str>> {
        let (version, kept) = self.versions.get_mut(name)?;
        let version = Arc::clone(version);
        if *kept != until {
            self.until.remove(&(*kept, name.clone()));
            self.until.insert((until, name.clone()));
            *kept = until;
        }
        Some(version)
    }

    /// Sets the version of `name`, kept until `until`.
    pub(super) fn insert(&mut self, name: TagName, version: Arc<str>, until: Instant) {
        if let Some((_, kept)) = self.versions.insert(name.clone(), (version, until)) {
            self.until.remove(&(kept, name.clone()));
        }
        self.until.insert((until, name));
    }

    #[cfg(feature = "test-hooks")]
    pub(super) fn clear(&mut self) {
        self.versions.clear();
        self.until.clear();
    }
}

//! What a cache instance knows of tag versions: the current versions of
//! the tags a fill declares, the stamps an entry carries and whether they
//! are still current, and what happens when a tag moves.

use std::sync::Arc;

use crate::data::error::StoreError;
use crate::data::key::MAX_TAGS;
use crate::data::tags::{Home, Known, Stamps, CLEAR, MOVED};
use crate::state::inner::Inner;
use crate::stats::Counters;

impl<V: Clone + Send + Sync + 'static> Inner<V> {
    /// The current versions of `tags`: known ones from the tag table, the
    /// rest read from the store in one round trip — which creates those the
    /// store does not have — and remembered while the backplane keeps them
    /// current. Without a store, versions are the table's own.
    pub(crate) async fn current_versions(
        &self,
        home: Home,
        tags: &[Arc<str>],
    ) -> Result<Vec<Arc<str>>, StoreError> {
        let mark = match self.tags().lookup(home, tags) {
            Known::All(versions) => return Ok(versions),
            Known::Unknown { mark } => mark,
        };
        let Some(store) = &self.tiers().l2 else {
            return Ok(self.tags().own_versions(tags, || self.new_version()));
        };
        let retention = self.policy().tag_retention;
        let versions = store
            .call(store.tag_versions(self.namespace(), home, tags, retention, self.origin()))
            .await
            .inspect_err(|error| self.counters().store_failed(error))?;
        self.tags().learn(home, tags, &versions, mark);
        Ok(versions)
    }

    /// The stamps a fill declaring `tags` writes with its entry: the
    /// current versions of its tags and of the clear tag, read before the
    /// fill runs — from the store if `from_store` and they are not known
    /// (a fill without a lease, the store unreachable, uses only the known
    /// ones). `None` if they could not be had (the fill's answer is then
    /// not stored). They also carry the [`MOVED`] version, which
    /// [`settle_stamps`](Self::settle_stamps) takes out before the entry is
    /// written.
    pub(crate) async fn fill_stamps(
        &self,
        home: Home,
        tags: &[Arc<str>],
        from_store: bool,
    ) -> Option<Stamps> {
        let wanted = self.tags().fill_wanted(tags);
        let versions = match (self.tags().lookup(home, &wanted), from_store) {
            (Known::All(versions), _) => versions,
            (Known::Unknown { .. }, true) => self.current_versions(home, &wanted).await.ok()?,
            (Known::Unknown { .. }, false) if self.tiers().l2.is_none() => {
                self.current_versions(home, &wanted).await.ok()?
            }
            (Known::Unknown { .. }, false) => return None,
        };
        Some(Stamps::zip(&wanted, versions))
    }

    /// The stamps an answer is written with: the fill's `stamps` without
    /// their [`MOVED`] version, plus `declared` — tags the fill declared
    /// from what it loaded — at their versions read now, from the store.
    /// `None` (store nothing) if a tag was invalidated since the fill
    /// started (any tag: the [`MOVED`] version moved, and the declared
    /// tags' versions could not have been read before the data), if the
    /// versions could not be read, or if the tags are invalid.
    pub(crate) async fn settle_stamps(
        &self,
        home: Home,
        stamps: Option<Stamps>,
        declared: Option<&[Arc<str>]>,
    ) -> Option<Stamps> {
        let mut stamps = stamps?;
        let before = stamps.take_moved();
        let Some(declared) = declared else {
            return Some(stamps);
        };
        let mut added: Vec<Arc<str>> = Vec::new();
        for tag in declared {
            if let Err(invalid) = crate::data::key::validate_key(tag) {
                tracing::warn!(cache = %self.name(), %invalid, "answer's tag invalid: not stored");
                return None;
            }
            if !stamps.has(tag) && !added.contains(tag) {
                added.push(Arc::clone(tag));
            }
        }
        if added.is_empty() {
            return Some(stamps);
        }
        if stamps.len() + added.len() > MAX_TAGS {
            tracing::warn!(cache = %self.name(), "answer declared too many tags: not stored");
            return None;
        }
        let before = before??;
        let mut asked = vec![Arc::<str>::from(MOVED)];
        asked.extend(added.iter().cloned());
        let now = match &self.tiers().l2 {
            // From the store itself, in one read: a version known here may
            // lag a move the backplane has not brought yet.
            Some(store) => {
                let retention = self.policy().tag_retention;
                let read =
                    store.tag_versions(self.namespace(), home, &asked, retention, self.origin());
                store
                    .call(read)
                    .await
                    .inspect_err(|error| self.counters().store_failed(error))
                    .ok()?
            }
            None => self.tags().own_versions(&asked, || self.new_version()),
        };
        let (moved, versions) = now.split_first()?;
        if *moved != before {
            Counters::bump(&self.counters().commits_refused);
            tracing::debug!(cache = %self.name(), "a tag moved while the fill ran: its answer is not stored");
            return None;
        }
        stamps.extend(added.into_iter().zip(versions.iter().cloned().map(Some)));
        Some(stamps)
    }

    /// Whether every version in `stamps` is still current at `home` (an entry read
    /// from the store carrying them may be served; a fill stamped with them
    /// may be stored). A store error counts as "not current": invalidation
    /// wins. Known versions are checked in place; reading unknown ones
    /// from the store is boxed, so the future every store read awaits stays
    /// small.
    pub(crate) async fn stamps_current(&self, home: Home, stamps: &Stamps) -> bool {
        match self.tags().check(home, stamps) {
            Some(current) => current,
            None => self.stamps_read_current(home, stamps).await,
        }
    }

    /// [`stamps_current`](Self::stamps_current) for stamps whose versions
    /// the cache does not all know (the in-place check said so): reads them
    /// from the store.
    pub(crate) async fn stamps_read_current(&self, home: Home, stamps: &Stamps) -> bool {
        let tags = stamps.tags();
        match Box::pin(self.current_versions(home, &tags)).await {
            Ok(versions) => stamps.matches(&versions),
            Err(_) => false,
        }
    }

    /// `tag` (or, for [`CLEAR`], every tag) moved to a new version: forgets
    /// the old one (or takes `version`, for a cache without a store) and
    /// evicts the L1 entries carrying it. Under the flight table's lock, the
    /// lock L1 inserts hold while they check their stamps.
    pub(crate) fn tag_moved(&self, tag: &str, version: Option<Arc<str>>)
    where
        V: Clone,
    {
        self.flights().detach_all(|| {
            // The keys leave the index here, so their removals need not.
            let keys = self.tags().invalidated(tag, version);
            let Some(local) = &self.tiers().l1 else {
                return;
            };
            if tag == CLEAR {
                local.clear();
            } else {
                for key in keys {
                    local.remove(&key);
                }
            }
        });
    }
}

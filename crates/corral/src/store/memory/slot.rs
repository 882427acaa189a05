//! What the store holds for one key: a value, a lease and a fence, each
//! with its own expiry, and what an eviction may take first.

use std::sync::Arc;

use tokio::time::Instant;

use crate::store::Stored;

/// A key's value, lease and fence. A part whose expiry has passed is as
/// good as absent: [`expire`](Slot::expire) drops it.
#[derive(Debug, Default)]
pub(super) struct Slot {
    pub(super) value: Option<(Vec<u8>, Instant)>,
    pub(super) lease: Option<(Arc<str>, Instant)>,
    pub(super) fence: Option<(Arc<str>, Instant)>,
    /// Whether the fence is a granted lease's (a fill in flight may still
    /// commit over it) rather than the generation of the value it was
    /// committed or written with.
    pub(super) fence_of_fill: bool,
}

/// Which keys an eviction takes first: every [`Value`](Class::Value) key
/// before any [`Fill`](Class::Fill) key. The order is also the index of the
/// class's recency list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    /// A value (with the fence of its own generation) and no fill in
    /// flight: evicting it costs a later miss.
    Value = 0,
    /// A live lease, or the fence of a granted lease: a fill in flight,
    /// whose commit an eviction would refuse.
    Fill = 1,
}

impl Slot {
    /// Drops every part whose expiry is at or before `now`.
    pub(super) fn expire(&mut self, now: Instant) {
        if self.value.as_ref().is_some_and(|(_, at)| *at <= now) {
            self.value = None;
        }
        if self.lease.as_ref().is_some_and(|(_, at)| *at <= now) {
            self.lease = None;
        }
        if self.fence.as_ref().is_some_and(|(_, at)| *at <= now) {
            self.fence = None;
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.value.is_none() && self.lease.is_none() && self.fence.is_none()
    }

    pub(super) fn owns_lease(&self, token: &str) -> bool {
        self.lease.as_ref().is_some_and(|(t, _)| &**t == token)
    }

    pub(super) fn holds_fence(&self, token: &str) -> bool {
        self.fence.as_ref().is_some_and(|(t, _)| &**t == token)
    }

    /// The value, as a read at `now` returns it.
    pub(super) fn stored(&self, now: Instant) -> Option<Stored> {
        let (bytes, expires) = self.value.as_ref()?;
        Some(Stored {
            bytes: bytes.clone(),
            remaining: Some(expires.saturating_duration_since(now)),
            generation: self.generation(),
        })
    }

    /// The key's generation: its fence token, if any.
    pub(super) fn generation(&self) -> Option<Arc<str>> {
        self.fence.as_ref().map(|(token, _)| token.clone())
    }

    /// Sets the fence to a granted lease's token, for `until`.
    pub(super) fn fence_fill(&mut self, token: Arc<str>, until: Instant) {
        self.fence = Some((token, until));
        self.fence_of_fill = true;
    }

    /// Sets the fence to the generation of the value just written, for
    /// `until` (the value's expiry).
    pub(super) fn fence_value(&mut self, token: Arc<str>, until: Instant) {
        self.fence = Some((token, until));
        self.fence_of_fill = false;
    }

    pub(super) fn class(&self) -> Class {
        if self.lease.is_some() || (self.fence.is_some() && self.fence_of_fill) {
            Class::Fill
        } else {
            Class::Value
        }
    }

    /// The next time a part of this slot expires (and its class may change,
    /// or it becomes empty): the earliest expiry present.
    pub(super) fn next_expiry(&self) -> Option<Instant> {
        [
            self.value.as_ref().map(|(_, at)| *at),
            self.lease.as_ref().map(|(_, at)| *at),
            self.fence.as_ref().map(|(_, at)| *at),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

//! The tag versions an entry was filled under ([`Stamps`]), and their
//! checks.
//!
//! Most entries carry one stamp: the namespace's clear version (no tags).
//! Every L2 hit decodes and checks an entry's stamps, so that one is held
//! inline, its version's bytes copied out of the envelope: decoding and
//! checking it allocates nothing. Any other stamps are a list of shared
//! strings (tags and versions also live in the tag table and the L1's tag
//! index, which clone them).

use std::sync::Arc;

use super::tags::{CLEAR, MOVED};

/// The length of a clear version held inline: the stores create versions
/// of 16 hex digits. Any other (written by something else, up to the 64
/// bytes a store accepts) is held in the list. At this length the stamps
/// take no more room than the list alone (24 bytes), so an entry read from
/// a store moves through the read path as cheaply as before.
const INLINE_VERSION: usize = 16;

/// One `(tag, version)` pair as the list holds it.
pub(crate) type Stamp = (Arc<str>, Option<Arc<str>>);

/// One `(tag, version)` pair as read: the version's bytes.
type Pair<'a> = (&'a str, Option<&'a [u8]>);

/// The versions an entry was filled under: `(tag, version)` pairs for its
/// tags and the clear tag. A version read back as `None` (or a missing
/// clear stamp) matches no current version: such an entry is never served.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stamps(Repr);

#[derive(Debug, Clone)]
enum Repr {
    /// The pairs, in order.
    List(Vec<Stamp>),
    /// The clear stamp alone, with this version ([`INLINE_VERSION`] bytes
    /// of ASCII, so also UTF-8).
    Clear([u8; INLINE_VERSION]),
}

impl Default for Repr {
    fn default() -> Self {
        Self::List(Vec::new())
    }
}

impl Stamps {
    /// Stamps holding `pairs`, in order.
    pub(crate) fn new(pairs: Vec<Stamp>) -> Self {
        Self(Repr::List(pairs))
    }

    /// The clear stamp alone, at `version`, without allocating; `None` if
    /// the version is not [`INLINE_VERSION`] bytes of ASCII (the caller
    /// then builds the list).
    pub(crate) fn clear_only(version: &[u8]) -> Option<Self> {
        let inline = <[u8; INLINE_VERSION]>::try_from(version).ok()?;
        inline.is_ascii().then_some(Self(Repr::Clear(inline)))
    }

    /// The stamped `(tag, version)` pairs, in order, as written (without
    /// the implicit clear stamp of [`all`](Self::all)).
    pub(crate) fn iter(&self) -> impl Iterator<Item = Pair<'_>> {
        let (clear, list) = self.parts();
        clear.into_iter().chain(
            list.iter()
                .map(|(tag, version)| (&**tag, version.as_deref().map(str::as_bytes))),
        )
    }

    /// How many pairs are stamped.
    pub(crate) fn len(&self) -> usize {
        match &self.0 {
            Repr::List(list) => list.len(),
            Repr::Clear(_) => 1,
        }
    }

    /// Whether `tag` is stamped.
    pub(crate) fn has(&self, tag: &str) -> bool {
        self.iter().any(|(have, _)| have == tag)
    }

    /// Adds `pairs` after the stamped ones.
    pub(crate) fn extend(&mut self, pairs: impl IntoIterator<Item = Stamp>) {
        match &mut self.0 {
            Repr::List(list) => list.extend(pairs),
            Repr::Clear(version) => {
                // ASCII by construction.
                let version = std::str::from_utf8(version).map(Arc::from).ok();
                let mut list = vec![(CLEAR.into(), version)];
                list.extend(pairs);
                self.0 = Repr::List(list);
            }
        }
    }

    /// The tags stamped, without the clear tag.
    pub(crate) fn user_tags(&self) -> impl Iterator<Item = &Arc<str>> {
        let (_, list) = self.parts();
        list.iter()
            .map(|(tag, _)| tag)
            .filter(|tag| !tag.is_empty())
    }

    /// Every `(tag, version)` stamped, the implicit clear stamp included.
    pub(crate) fn all(&self) -> impl Iterator<Item = Pair<'_>> {
        let implicit_clear = match &self.0 {
            Repr::List(list) if !list.iter().any(|(tag, _)| tag.is_empty()) => Some((CLEAR, None)),
            _ => None,
        };
        implicit_clear.into_iter().chain(self.iter())
    }

    /// Every tag stamped, the clear tag included.
    pub(crate) fn tags(&self) -> Vec<Arc<str>> {
        self.all().map(|(tag, _)| Arc::from(tag)).collect()
    }

    /// Whether `versions` (of [`tags`](Self::tags), in order) are the
    /// stamped ones.
    pub(crate) fn matches(&self, versions: &[Arc<str>]) -> bool {
        self.all()
            .zip(versions)
            .all(|((_, stamped), current)| stamped == Some(current.as_bytes()))
    }

    /// The stamps of an entry carrying `tags` (deduplicated), with their
    /// versions read from `versions` in the same order, the clear tag
    /// first.
    pub(crate) fn zip(tags: &[Arc<str>], versions: Vec<Arc<str>>) -> Self {
        Self::new(
            tags.iter()
                .cloned()
                .zip(versions.into_iter().map(Some))
                .collect(),
        )
    }

    /// Takes out the [`MOVED`] stamp a fill's stamps carry (see
    /// [`Inner::fill_stamps`](crate::state::inner::Inner::fill_stamps)),
    /// returning its version: `Some(None)` if it was stamped unread, `None`
    /// if it was not there.
    pub(crate) fn take_moved(&mut self) -> Option<Option<Arc<str>>> {
        let Repr::List(list) = &mut self.0 else {
            return None;
        };
        let at = list.iter().position(|(tag, _)| &**tag == MOVED)?;
        Some(list.remove(at).1)
    }

    /// `CLEAR` followed by `tags` without duplicates: what a fill asks for.
    pub(crate) fn wanted(tags: &[Arc<str>]) -> Vec<Arc<str>> {
        let mut wanted: Vec<Arc<str>> = vec![CLEAR.into()];
        for tag in tags {
            if !wanted.contains(tag) {
                wanted.push(Arc::clone(tag));
            }
        }
        wanted
    }

    /// The inline clear stamp, if held so, and the list.
    fn parts(&self) -> (Option<Pair<'_>>, &[Stamp]) {
        match &self.0 {
            Repr::List(list) => (None, list),
            Repr::Clear(version) => (Some((CLEAR, Some(&version[..]))), &[]),
        }
    }
}

/// The same pairs in the same order, however they are held.
impl PartialEq for Stamps {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Stamps {}

#[cfg(test)]
mod tests {
    use super::*;

    fn clear(version: &str) -> Stamps {
        Stamps::new(vec![(CLEAR.into(), Some(version.into()))])
    }

    #[test]
    fn an_inline_clear_stamp_is_the_listed_one() {
        let inline = Stamps::clear_only(b"0123456789abcdef").expect("inline");
        assert!(matches!(inline.0, Repr::Clear(_)));
        assert_eq!(inline, clear("0123456789abcdef"));
        assert_eq!(inline.len(), 1);
        assert!(inline.has(CLEAR) && !inline.has("t"));
        assert_eq!(inline.user_tags().count(), 0);
        assert_eq!(inline.tags(), vec![Arc::<str>::from(CLEAR)]);
        assert!(inline.matches(&["0123456789abcdef".into()]));
        assert!(!inline.matches(&["0123456789abcdee".into()]));
        assert_eq!(
            inline.all().collect::<Vec<_>>(),
            vec![(CLEAR, Some(&b"0123456789abcdef"[..]))]
        );
    }

    #[test]
    fn only_short_ascii_versions_are_inline() {
        assert!(Stamps::clear_only(b"").is_none());
        assert!(Stamps::clear_only("0123456789abcdé".as_bytes()).is_none());
        assert!(Stamps::clear_only(&[b'a'; INLINE_VERSION - 1]).is_none());
        assert!(Stamps::clear_only(&[b'a'; INLINE_VERSION + 1]).is_none());
        assert!(Stamps::clear_only(&[b'a'; INLINE_VERSION]).is_some());
        assert_eq!(
            std::mem::size_of::<Stamps>(),
            std::mem::size_of::<Vec<Stamp>>(),
            "inline stamps make the read path's values no larger"
        );
    }

    #[test]
    fn extending_an_inline_stamp_keeps_it_first() {
        let mut stamps = Stamps::clear_only(b"00000000c0ffee00").expect("inline");
        stamps.extend([("t".into(), Some("v".into()))]);
        assert_eq!(
            stamps,
            Stamps::new(vec![
                (CLEAR.into(), Some("00000000c0ffee00".into())),
                ("t".into(), Some("v".into())),
            ])
        );
        assert_eq!(stamps.user_tags().map(|t| &**t).collect::<Vec<_>>(), ["t"]);
        assert_eq!(stamps.take_moved(), None);
    }

    #[test]
    fn a_list_without_a_clear_stamp_has_an_unversioned_one() {
        let stamps = Stamps::new(vec![("t".into(), Some("v".into()))]);
        assert_eq!(
            stamps.all().collect::<Vec<_>>(),
            vec![(CLEAR, None), ("t", Some(&b"v"[..]))]
        );
        assert!(!stamps.matches(&["c".into(), "v".into()]));
    }
}

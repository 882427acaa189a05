//! `BCAST` mode ([`Tracking::Broadcast`]): the server reports every change
//! of a key under a registered prefix, read or not, and keeps nothing per
//! key. The prefixes are each attached namespace's two
//! ([`keys::bcast_prefixes`]: its values and its versions; leases and
//! waiters marks lie under neither).
//!
//! - **A new connection** registers every prefix asked for so far before
//!   it serves its first call, then records itself as the connection in
//!   use, under the same lock that a namespace attached meanwhile takes:
//!   that namespace is either in the list the connection registered, or
//!   sees the connection and registers its prefixes on it itself. Redis
//!   refuses a prefix registered twice on one connection, so each is sent
//!   once per connection.
//! - **A namespace attached later** has its prefixes added to the
//!   connection in use (`CLIENT TRACKING on BCAST` again, with the new
//!   prefixes only: Redis adds them to the client's).
//! - **Until its first registration** a namespace is *pending*: reads of
//!   it wait for it, bounded ([`Tracker::ready`]); a read that went ahead
//!   and kept something has the namespace's sinks told, once the
//!   registration is confirmed, that changes may have been missed
//!   ([`ChangeSink::lost`](crate::store::ChangeSink::lost)), as the
//!   backplane does for a read ahead of its first subscription.
//!
//! [`Tracking::Broadcast`]: crate::data::tracking::Tracking::Broadcast

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::RedisResult;
use tokio::sync::Notify;

use super::Tracker;
use crate::redis::keys;
use crate::sync::lock_std;

/// The namespaces whose prefixes the server is asked to broadcast, and the
/// connection they are registered on.
#[derive(Default)]
pub(super) struct Prefixes {
    book: Mutex<Book>,
    /// How many namespaces wait for their first registration.
    pending: AtomicUsize,
    /// Woken when a namespace's registration is confirmed, or tracking
    /// turned out to be off.
    settled: Notify,
}

#[derive(Default)]
struct Book {
    /// Every namespace attached, in the order attached.
    namespaces: Vec<Arc<str>>,
    standing: HashMap<Arc<str>, Standing>,
    /// The connection in use, once it registered every prefix then
    /// listed.
    conn: Option<MultiplexedConnection>,
    /// The server refused tracking: nothing waits for a registration.
    off: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// Not registered on any connection yet; reads wait for it.
    Pending,
    /// Not registered yet, and a read went ahead and kept what it read.
    ReadAhead,
    /// Registered on a connection once (and on every new one since).
    Registered,
}

impl Tracker {
    /// A cache on `namespace` attached: its prefixes are registered on the
    /// connection in use (in the background) or, if none is, by the next
    /// one made.
    pub(super) fn attach_broadcast(&self, namespace: &str) {
        let prefixes = &self.shared.prefixes;
        let conn = {
            let mut book = lock_std(&prefixes.book);
            if book.standing.contains_key(namespace) {
                return;
            }
            let namespace: Arc<str> = namespace.into();
            book.namespaces.push(Arc::clone(&namespace));
            let standing = if book.off {
                Standing::Registered
            } else {
                prefixes.pending.fetch_add(1, Ordering::Release);
                Standing::Pending
            };
            book.standing.insert(namespace, standing);
            book.conn.clone()
        };
        let Some(mut conn) = conn else {
            return;
        };
        let (tracker, namespace) = (self.clone(), Arc::<str>::from(namespace));
        let timeout = self.shared.timeout;
        self.shared.runtime.spawn(async move {
            let list = [namespace];
            match tracker.register(&mut conn, &list, timeout).await {
                Ok(true) => tracker.registered(&list),
                Ok(false) => tracker.broadcast_off(),
                // The connection broke: the next one registers every
                // prefix (and flushes). Else it is still in use, without
                // the namespace's prefixes.
                Err(error) if error.is_unrecoverable_error() => {}
                Err(error) => tracing::warn!(
                    store = %tracker.shared.store,
                    namespace = %list[0],
                    %error,
                    "redis client tracking: the namespace's prefixes were not added; its \
                     caches hear of other writers' changes once the connection is made anew"
                ),
            }
        });
    }

    /// Registers the prefixes of every namespace attached on `conn`, a new
    /// connection, and records it as the one in use: whether the server
    /// took them (a refusal is said once; no answer within `timeout` is an
    /// error).
    pub(super) async fn enable_broadcast(
        &self,
        conn: &mut MultiplexedConnection,
        timeout: Duration,
    ) -> RedisResult<bool> {
        let prefixes = &self.shared.prefixes;
        let mut done = 0;
        loop {
            let todo: Vec<Arc<str>> = {
                let mut book = lock_std(&prefixes.book);
                if book.namespaces.len() == done {
                    book.conn = Some(conn.clone());
                    book.off = false;
                    return Ok(true);
                }
                book.namespaces[done..].to_vec()
            };
            if !self.register(conn, &todo, timeout).await? {
                self.broadcast_off();
                return Ok(false);
            }
            self.registered(&todo);
            done += todo.len();
        }
    }

    /// The namespaces attached, from the `done`th on (in the order
    /// attached).
    pub(super) fn namespaces_from(&self, done: usize) -> Vec<Arc<str>> {
        let book = lock_std(&self.shared.prefixes.book);
        book.namespaces.get(done..).unwrap_or_default().to_vec()
    }

    /// Sends `CLIENT TRACKING on BCAST NOLOOP` with the prefixes of
    /// `namespaces` on `conn` (nothing if there are none: `BCAST` without
    /// a prefix would report every key).
    pub(super) async fn register(
        &self,
        conn: &mut MultiplexedConnection,
        namespaces: &[Arc<str>],
        timeout: Duration,
    ) -> RedisResult<bool> {
        if namespaces.is_empty() {
            return Ok(true);
        }
        let mut command = ::redis::cmd("CLIENT");
        command.arg("TRACKING").arg("ON").arg("BCAST").arg("NOLOOP");
        for namespace in namespaces {
            for prefix in keys::bcast_prefixes(namespace) {
                command.arg("PREFIX").arg(prefix);
            }
        }
        self.send_tracking(conn, &command, timeout).await
    }

    /// The prefixes of `namespaces` are registered: pending reads go on,
    /// and the sinks of a namespace a read went ahead of hear that changes
    /// may have been missed.
    pub(super) fn registered(&self, namespaces: &[Arc<str>]) {
        let prefixes = &self.shared.prefixes;
        for namespace in namespaces {
            let was = lock_std(&prefixes.book)
                .standing
                .insert(Arc::clone(namespace), Standing::Registered);
            match was {
                Some(Standing::Pending) => {
                    prefixes.pending.fetch_sub(1, Ordering::Release);
                }
                Some(Standing::ReadAhead) => {
                    for sink in self.shared.sinks.live(&keys::channel(namespace)) {
                        sink.lost();
                    }
                }
                Some(Standing::Registered) | None => {}
            }
        }
        prefixes.settled.notify_waiters();
    }

    /// Tracking is off (refused, or RESP2): nothing waits for a
    /// registration, and nothing is sent until a connection takes it.
    pub(super) fn broadcast_off(&self) {
        let prefixes = &self.shared.prefixes;
        {
            let mut book = lock_std(&prefixes.book);
            book.conn = None;
            book.off = true;
            for standing in book.standing.values_mut() {
                *standing = Standing::Registered;
            }
            prefixes.pending.store(0, Ordering::Release);
        }
        prefixes.settled.notify_waiters();
    }

    /// Waits, at most `bound`, until `namespace`'s prefixes have had their
    /// first registration, if they wait for it. Returns the namespace if a
    /// read made now goes ahead of it: should the read keep anything, pass
    /// it to [`went_ahead`](Self::went_ahead). Answers `None` at once when
    /// nothing waits.
    #[inline]
    pub(in crate::redis) async fn ready(
        &self,
        namespace: &str,
        bound: Duration,
    ) -> Option<Arc<str>> {
        if self.shared.prefixes.pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.wait_registered(namespace, bound).await
    }

    #[cold]
    async fn wait_registered(&self, namespace: &str, bound: Duration) -> Option<Arc<str>> {
        let prefixes = &self.shared.prefixes;
        let pending =
            || lock_std(&prefixes.book).standing.get(namespace) == Some(&Standing::Pending);
        crate::sync::until_settled(&prefixes.settled, bound, pending).await;
        pending().then(|| namespace.into())
    }

    /// A read of `namespace` went ahead of its prefixes' first
    /// registration and kept what it read.
    pub(in crate::redis) fn went_ahead(&self, namespace: &str) {
        let prefixes = &self.shared.prefixes;
        let mut book = lock_std(&prefixes.book);
        if let Some(standing @ Standing::Pending) = book.standing.get_mut(namespace) {
            *standing = Standing::ReadAhead;
            prefixes.pending.fetch_sub(1, Ordering::Release);
        }
    }
}

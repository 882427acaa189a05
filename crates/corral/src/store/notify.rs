//! Dispatch of "this key changed" notices to the waiters of one store.

use std::sync::Arc;
use tokio::sync::broadcast;

/// How many notices a slow listener may fall behind before it is told to
/// re-check everything.
const CAPACITY: usize = 1024;

#[derive(Debug, Clone)]
enum Notice {
    Key(Arc<str>),
    All,
}

/// Fans notices out to the listeners of one store. At most one flight per
/// key and process waits on a store, so listeners filter by key.
#[derive(Debug, Clone)]
pub struct Notifier {
    sender: broadcast::Sender<Notice>,
}

impl Default for Notifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Notifier {
    /// A notifier with no listeners.
    pub fn new() -> Self {
        let (sender, _) = broadcast::channel(CAPACITY);
        Self { sender }
    }

    /// A listener for the notices of `id` (a store-specific key identity).
    pub fn listen(&self, id: Arc<str>) -> Listener {
        Listener {
            id,
            receiver: self.sender.subscribe(),
            deadline: None,
            on_wait: None,
        }
    }

    /// Tells the listeners of `id` that it changed.
    pub fn notify(&self, id: &str) {
        if self.sender.receiver_count() > 0 {
            let _ = self.sender.send(Notice::Key(id.into()));
        }
    }

    /// Tells every listener to re-check (notices may have been lost, for
    /// example while a subscription reconnected).
    pub fn notify_all(&self) {
        let _ = self.sender.send(Notice::All);
    }
}

/// Waits for a change of one key. See [`Store::listen`](super::Store::listen).
#[derive(Debug)]
pub struct Listener {
    id: Arc<str>,
    receiver: broadcast::Receiver<Notice>,
    /// When [`changed`](Self::changed) resolves at the latest, for stores
    /// whose waiters poll (a re-check is due then).
    deadline: Option<tokio::time::Instant>,
    /// Run when [`changed`](Self::changed) is first called.
    on_wait: Option<OnWait>,
}

/// What a listener does when it first waits.
struct OnWait(Box<dyn FnOnce() + Send + Sync>);

impl std::fmt::Debug for OnWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnWait")
    }
}

impl Listener {
    /// A listener that is never notified (for stores without notifications:
    /// waiters then poll).
    pub fn never() -> Self {
        Notifier::new().listen("".into())
    }

    /// This listener, resolving [`changed`](Self::changed) after `delay`
    /// at the latest: for stores without cross-process notices, whose
    /// waiters re-check on a schedule of their own (e.g. a backoff).
    #[must_use]
    pub fn recheck_after(mut self, delay: std::time::Duration) -> Self {
        self.deadline = Some(tokio::time::Instant::now() + delay);
        self
    }

    /// This listener, running `hook` when [`changed`](Self::changed) is
    /// first called: for a store that subscribes to notices only once
    /// someone waits for one (a listener registered before a read that
    /// then needs no wait costs no subscription). The store must then wake
    /// every listener ([`Notifier::notify_all`]) once that subscription is
    /// confirmed, since a notice published before it was not seen.
    #[must_use]
    pub fn on_first_wait(mut self, hook: impl FnOnce() + Send + Sync + 'static) -> Self {
        self.on_wait = Some(OnWait(Box::new(hook)));
        self
    }

    /// Resolves when the key may have changed: a notice for it, a notice to
    /// re-check everything, lost notices, or the re-check deadline of
    /// [`recheck_after`](Self::recheck_after). Cancel-safe.
    pub async fn changed(&mut self) {
        if let Some(OnWait(hook)) = self.on_wait.take() {
            hook();
        }
        let deadline = self.deadline;
        tokio::select! {
            () = self.notice() => {}
            () = crate::clock::sleep_until_some(deadline) => {}
        }
    }

    async fn notice(&mut self) {
        loop {
            match self.receiver.recv().await {
                Ok(Notice::Key(id)) if id == self.id => return,
                Ok(Notice::Key(_)) => continue,
                Ok(Notice::All) | Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    }
}

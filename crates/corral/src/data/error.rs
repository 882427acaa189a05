//! corral's one error type and its parts.

use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::data::cause::FillError;
use crate::data::key::InvalidKey;

/// A failure of the shared store (Redis or the in-memory store).
#[derive(Debug, Clone)]
pub struct StoreError {
    kind: StoreErrorKind,
    message: Arc<str>,
}

/// What kind of store failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The call did not answer within the store's operation timeout.
    Timeout,
    /// The store could not be reached (connection refused, reset, closed).
    Unavailable,
    /// The store answered with an error or an unexpected reply.
    Protocol,
    /// The store refused the call or the connection: a Redis ACL denied a
    /// key, channel or command (`NOPERM`), or authentication failed (wrong
    /// user name or password, `NOAUTH`). Retrying does not help; the
    /// message says what was refused.
    Denied,
    /// The call was not made: the cache's circuit breaker is open after
    /// consecutive timeouts or unavailability (see
    /// [`CacheBuilder::circuit_breaker`](crate::CacheBuilder::circuit_breaker)).
    /// Returned at once, without waiting for the store.
    BreakerOpen,
    /// The call cannot work as written: only a change of code or
    /// configuration fixes it — a store connected outside a tokio runtime,
    /// a malformed or unsupported URL, TLS material that does not load, no
    /// server address, a setting out of range. Never retryable.
    Configuration,
}

impl StoreError {
    /// A new store error.
    pub fn new(kind: StoreErrorKind, message: impl Into<Arc<str>>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// The kind of failure.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// The message, without the kind.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn message(&self) -> &str {
        &self.message
    }

    /// Whether only a change of code or configuration fixes the call
    /// ([`StoreErrorKind::Configuration`]).
    pub fn is_configuration(&self) -> bool {
        self.kind == StoreErrorKind::Configuration
    }

    /// Whether the call timed out.
    pub fn is_timeout(&self) -> bool {
        self.kind == StoreErrorKind::Timeout
    }

    /// Whether the call was skipped because the cache's circuit breaker is
    /// open ([`StoreErrorKind::BreakerOpen`]).
    pub fn is_breaker_open(&self) -> bool {
        self.kind == StoreErrorKind::BreakerOpen
    }

    /// Whether the same call may work later, unchanged: the store did not
    /// answer ([`Timeout`](StoreErrorKind::Timeout),
    /// [`Unavailable`](StoreErrorKind::Unavailable)) or was not asked
    /// ([`BreakerOpen`](StoreErrorKind::BreakerOpen)). Not for a mistake
    /// in code or configuration
    /// ([`Configuration`](StoreErrorKind::Configuration)), an unexpected
    /// reply ([`Protocol`](StoreErrorKind::Protocol)) or a refusal
    /// ([`Denied`](StoreErrorKind::Denied)): retrying those only repeats
    /// them.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            StoreErrorKind::Timeout | StoreErrorKind::Unavailable | StoreErrorKind::BreakerOpen
        )
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "store {:?}: {}", self.kind, self.message)
    }
}

impl std::error::Error for StoreError {}

/// An error from a corral operation.
///
/// `E` is the error type of the fill passed to
/// [`get_or_fill`](crate::Cache::get_or_fill); operations without a fill use
/// `Error` (that is, `Error<Infallible>`, which
/// [`widen`](Error::widen) turns into any `Error<E>`).
///
/// Every caller coalesced onto one fill receives the same error: a fill error
/// arrives as [`Error::Fill`] holding the leader's error (a [`FillError`],
/// an `Arc<E>` inside), never flattened to a string. Callers are only
/// coalesced onto a fill of their own error type, so the error is always
/// theirs.
///
/// # Composing
///
/// `Error<E>` is a [`std::error::Error`] whatever the fill's error type
/// (anything [`FillCause`](crate::FillCause) admits: std errors,
/// `anyhow::Error`, `Box<dyn Error + Send + Sync>`, `String`), so `?`
/// carries it into `anyhow::Result` and `Box<dyn Error + Send + Sync>`.
/// Its `Display` says what happened; the cause — the fill's error, the
/// store's, the key's — is its [`source`](std::error::Error::source), so
/// `{:#}` in anyhow prints each once:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use corral::Cache;
///
/// async fn load(id: u64) -> anyhow::Result<String> {
///     anyhow::bail!("db down (user {id})")
/// }
///
/// async fn handler(users: &Cache<String>) -> anyhow::Result<String> {
///     // The fill's error is an `anyhow::Error`; `?` takes the corral error into anyhow.
///     let name = users.get_or_fill("user:1", || load(1)).await?;
///     Ok(name)
/// }
///
/// let users = Cache::<String>::builder("users").build().expect("valid");
/// let error = handler(&users).await.expect_err("the fill failed");
/// assert_eq!(format!("{error:#}"), "fill failed: db down (user 1)");
/// # }
/// ```
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::error::Error as StdError;
/// use corral::Cache;
///
/// type BoxError = Box<dyn StdError + Send + Sync>;
///
/// async fn load(id: u64) -> Result<String, BoxError> {
///     Err(format!("no row for {id}").into())
/// }
///
/// async fn handler(users: &Cache<String>) -> Result<String, BoxError> {
///     // Boxed errors in, boxed errors out.
///     Ok(users.get_or_fill("user:1", || load(1)).await?)
/// }
///
/// let users = Cache::<String>::builder("users").build().expect("valid");
/// let error = handler(&users).await.expect_err("the fill failed");
/// assert_eq!(error.to_string(), "fill failed");
/// assert_eq!(error.source().expect("the cause").to_string(), "no row for 1");
/// # }
/// ```
#[derive(Debug)]
#[non_exhaustive]
// A whole-word tag in front: a `Result<V, Error>` then moves in whole words.
// Left to the compiler, the tag sits in a niche inside a payload and every
// hit's result is copied in odd-sized pieces that stall store forwarding
// (a third of a hit's cost, see `BENCHMARKS.md`).
#[repr(u64)]
pub enum Error<E = Infallible> {
    /// The key was rejected before anything ran.
    InvalidKey(InvalidKey),
    /// The fill returned this error (the leader's, shared by every caller
    /// of the flight).
    Fill(FillError<E>),
    /// The fill panicked.
    FillPanicked {
        /// The panic payload when it was a string.
        message: Arc<str>,
    },
    /// The flight passed its hard `fill_timeout`: the fill was stopped and
    /// nothing it produced is stored.
    Timeout {
        /// The timeout that passed.
        after: Duration,
    },
    /// The flight was stopped before it produced an outcome: its runtime
    /// shut down, or it has no time driver (build it with `enable_time()` or
    /// `enable_all()`: corral's timeouts need tokio's timers).
    Aborted,
    /// The key holds a cached "not found" (written by
    /// [`get_or_fill_option`](crate::Cache::get_or_fill_option) or
    /// [`get_or_fill_answer`](crate::Cache::get_or_fill_answer)), met by a
    /// [`get_or_fill`](crate::Cache::get_or_fill), whose fill answers `V`;
    /// those two get it as `None`.
    NotFound,
    /// The value could not be encoded or is larger than the cache's
    /// `max_value_bytes`.
    Encode {
        /// What went wrong.
        message: Arc<str>,
    },
    /// The shared store failed. Reported by the operations that must reach
    /// the store: the writes (`set`, `invalidate`, `invalidate_tag`,
    /// `clear`) and the reads that look without filling (`peek`,
    /// `peek_entry`); `get_or_fill` and `get_many_or_fill` fail open (they
    /// fill without the store) instead.
    Store(StoreError),
    /// The operation was called outside a tokio runtime.
    NoRuntime,
    /// The cache's [`FillBudget`](crate::FillBudget) had no permit for this
    /// fill within its [`max_wait`](crate::FillBudget::max_wait), and no
    /// stale or fail-safe value was at hand: the source was not called.
    /// Retryable: the source is busy, not broken ([`is_retryable`](Self::is_retryable)).
    Overloaded {
        /// How long the fill waited for a permit.
        waited: Duration,
    },
}

impl<E> Error<E> {
    /// Whether a timeout passed: the flight's hard `fill_timeout`
    /// ([`Timeout`](Self::Timeout)), or a store call's
    /// (a [`Store`](Self::Store) error of kind
    /// [`StoreErrorKind::Timeout`]).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout { .. }) || matches!(self, Self::Store(e) if e.is_timeout())
    }

    /// Whether the fill budget had no permit in time
    /// ([`Overloaded`](Self::Overloaded)).
    pub fn is_overloaded(&self) -> bool {
        matches!(self, Self::Overloaded { .. })
    }

    /// Whether the same call may work later, unchanged: the fill budget
    /// was full ([`Overloaded`](Self::Overloaded)), the fill timed out, or
    /// the store failed in a retryable way
    /// ([`StoreError::is_retryable`]). Fill errors are the fill's own to
    /// judge; an invalid key, a panic or a missing runtime are not
    /// retryable.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Overloaded { .. } | Self::Timeout { .. } | Self::Aborted => true,
            Self::Store(error) => error.is_retryable(),
            _ => false,
        }
    }

    /// Whether the key was rejected.
    pub fn is_invalid_key(&self) -> bool {
        matches!(self, Self::InvalidKey(_))
    }

    /// Whether the fill returned an error.
    pub fn is_fill_error(&self) -> bool {
        matches!(self, Self::Fill(_))
    }

    /// Whether the key holds a cached "not found".
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound)
    }

    /// Whether the fill panicked.
    pub fn is_panic(&self) -> bool {
        matches!(self, Self::FillPanicked { .. })
    }

    /// Whether the shared store failed.
    pub fn is_store(&self) -> bool {
        matches!(self, Self::Store(_))
    }

    /// Whether the store call was skipped because the cache's circuit
    /// breaker is open (a [`Store`](Self::Store) error of kind
    /// [`StoreErrorKind::BreakerOpen`]).
    pub fn is_breaker_open(&self) -> bool {
        matches!(self, Self::Store(e) if e.is_breaker_open())
    }

    /// The fill's error, when the fill returned one.
    pub fn fill_error(&self) -> Option<&Arc<E>> {
        match self {
            Self::Fill(error) => Some(error.arc()),
            _ => None,
        }
    }
}

impl Error {
    /// This error of an operation without a fill (`set`, `invalidate`,
    /// `peek`...) as an `Error<E>`, for a function that also returns
    /// `get_or_fill`'s errors: `cache.invalidate(key).await.map_err(Error::widen)?`.
    ///
    /// (A `From` impl cannot do it: `From<Error> for Error<E>` would
    /// overlap `From<T> for T` at `E = Infallible`.)
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use corral::{Cache, Error};
    ///
    /// #[derive(Debug)]
    /// struct DbError;
    /// impl std::fmt::Display for DbError {
    ///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    ///         f.write_str("db down")
    ///     }
    /// }
    /// impl std::error::Error for DbError {}
    ///
    /// async fn load(id: u64) -> Result<String, DbError> {
    ///     Ok(format!("user {id}"))
    /// }
    ///
    /// async fn rename(users: &Cache<String>, id: u64) -> Result<String, Error<DbError>> {
    ///     let key = format!("user:{id}");
    ///     users.invalidate(&key).await.map_err(Error::widen)?;
    ///     users.get_or_fill(&key, move || load(id)).await
    /// }
    ///
    /// let users = Cache::<String>::builder("users").build().expect("valid");
    /// assert_eq!(rename(&users, 7).await.expect("filled"), "user 7");
    /// # }
    /// ```
    pub fn widen<E>(self) -> Error<E> {
        match self {
            Self::InvalidKey(e) => Error::InvalidKey(e),
            Self::Fill(never) => match *never.arc().as_ref() {},
            Self::FillPanicked { message } => Error::FillPanicked { message },
            Self::Timeout { after } => Error::Timeout { after },
            Self::Aborted => Error::Aborted,
            Self::NotFound => Error::NotFound,
            Self::Encode { message } => Error::Encode { message },
            Self::Store(e) => Error::Store(e),
            Self::NoRuntime => Error::NoRuntime,
            Self::Overloaded { waited } => Error::Overloaded { waited },
        }
    }
}

impl<E: fmt::Display> fmt::Display for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidKey(_) => f.write_str("key rejected"),
            // The fill's error is the source; a message has none, so it
            // is said here.
            Self::Fill(e) => match e.cause() {
                Some(_) => f.write_str("fill failed"),
                None => write!(f, "fill failed: {e}"),
            },
            Self::FillPanicked { message } => write!(f, "fill panicked: {message}"),
            Self::Timeout { after } => write!(f, "fill timed out after {after:?}"),
            Self::Aborted => f.write_str("fill aborted before it finished"),
            Self::NotFound => f.write_str("the key is cached as not found"),
            Self::Encode { message } => write!(f, "value not storable: {message}"),
            Self::Store(_) => f.write_str("shared store failed"),
            Self::NoRuntime => f.write_str("corral needs a tokio runtime"),
            Self::Overloaded { waited } => write!(
                f,
                "fill budget full: no permit within {waited:?}, source not called"
            ),
        }
    }
}

/// The source of a [`Fill`](Error::Fill) error is the fill's own error (or
/// the error an `anyhow::Error` or a box points to), so error reporters and
/// `anyhow`'s chain reach it (and can downcast it).
impl<E: fmt::Debug + fmt::Display> std::error::Error for Error<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::InvalidKey(e) => Some(e),
            Self::Store(e) => Some(e),
            Self::Fill(e) => e.cause(),
            _ => None,
        }
    }
}

impl<E> From<InvalidKey> for Error<E> {
    fn from(e: InvalidKey) -> Self {
        Self::InvalidKey(e)
    }
}

impl<E> From<StoreError> for Error<E> {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

/// A builder setting that cannot work.
///
/// When a store refused the setting (a malformed Redis URL, say, or a
/// cluster that did not answer), [`store_error`](Self::store_error) holds
/// the store's typed error, also its [`source`](std::error::Error::source).
#[derive(Debug, Clone)]
pub struct ConfigError {
    message: String,
    store: Option<StoreError>,
}

impl ConfigError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            store: None,
        }
    }

    /// A setting `what` that `error` refused.
    #[cfg_attr(not(all(feature = "config", feature = "redis")), allow(dead_code))]
    pub(crate) fn from_store(what: impl fmt::Display, error: StoreError) -> Self {
        // The store's error is the source, not part of the message.
        Self {
            message: what.to_string(),
            store: Some(error),
        }
    }

    /// The store's error, when a store refused the setting: its
    /// [`kind`](StoreError::kind) tells a malformed URL
    /// ([`Configuration`](StoreErrorKind::Configuration)) from a server that did not
    /// answer ([`Unavailable`](StoreErrorKind::Unavailable),
    /// [`Timeout`](StoreErrorKind::Timeout): worth retrying).
    pub fn store_error(&self) -> Option<&StoreError> {
        self.store.as_ref()
    }
}

impl PartialEq for ConfigError {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
    }
}

impl Eq for ConfigError {}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid cache configuration: {}", self.message)
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.store
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

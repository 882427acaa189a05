//! How redis-rs errors and timeouts become [`StoreError`]s: their kind
//! (timeout, unavailable, denied, protocol) and a message that names the
//! call.

use std::future::Future;
use std::time::Duration;

use ::redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use crate::data::error::{StoreError, StoreErrorKind};

/// Runs `call` for at most `timeout`, mapping a redis-rs error or the
/// timeout to a [`StoreError`].
pub(super) async fn bounded<T>(
    timeout: Duration,
    what: &str,
    call: impl Future<Output = Result<T, RedisError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(store_error(what, &e)),
        Err(_) => Err(timed_out(what, timeout)),
    }
}

/// The error of a call `what` that got no answer within `timeout`.
pub(super) fn timed_out(what: &str, timeout: Duration) -> StoreError {
    StoreError::new(
        StoreErrorKind::Timeout,
        format!("redis {what}: no answer within {timeout:?}"),
    )
}

/// Classifies a redis-rs error: timeouts, a client configuration it
/// refuses (a malformed URL), unreachable or not-ready servers (refused,
/// reset, loading, cluster down) and everything else.
pub(super) fn store_error(what: &str, e: &RedisError) -> StoreError {
    if let Some(refusal) = refusal(e) {
        return StoreError::new(
            StoreErrorKind::Denied,
            format!("redis {what}: {refusal}: {e}"),
        );
    }
    let kind = if e.is_timeout() {
        StoreErrorKind::Timeout
    } else if e.kind() == ErrorKind::InvalidClientConfig {
        // A malformed URL or client setting: no retry fixes it.
        StoreErrorKind::Configuration
    } else if e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_cluster_error()
        || matches!(
            e.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(
                    ServerErrorKind::BusyLoading
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ReadOnly
                )
        )
    {
        StoreErrorKind::Unavailable
    } else {
        StoreErrorKind::Protocol
    };
    StoreError::new(kind, format!("redis {what}: {e}"))
}

/// What refused `e`, if it is an ACL or authentication refusal: `NOPERM`
/// (a key, channel or command outside the user's ACL), a failed `AUTH`
/// (`WRONGPASS`), or a command sent without authenticating (`NOAUTH`).
pub(super) fn refusal(e: &RedisError) -> Option<&'static str> {
    match (e.kind(), e.code()) {
        (ErrorKind::Server(ServerErrorKind::NoPerm), _) | (_, Some("NOPERM")) => {
            Some("refused by Redis ACL (NOPERM: the user may not use this key, channel or command)")
        }
        (ErrorKind::AuthenticationFailed, _) | (_, Some("WRONGPASS" | "NOAUTH")) => {
            Some("authentication refused by Redis (check the user name and password)")
        }
        _ => None,
    }
}

/// A reply of a shape the scripts never send.
pub(super) fn unexpected(what: &str, reply: &Value) -> StoreError {
    let mut shown = format!("{reply:?}");
    if let Some((cut, _)) = shown.char_indices().nth(200) {
        shown.truncate(cut);
        shown.push_str("...");
    }
    StoreError::new(
        StoreErrorKind::Protocol,
        format!("redis {what}: unexpected reply {shown}"),
    )
}

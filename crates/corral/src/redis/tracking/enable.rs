//! Client tracking turned on for each new command connection before it
//! serves a call: RESP3, so invalidations arrive on the connection itself
//! as push messages, then `CLIENT TRACKING on NOLOOP` (with `BCAST` and
//! the namespaces' prefixes in that mode: [`bcast`](super::bcast)).
//!
//! Where the server refuses, the connection is used without tracking and
//! one INFO line says why:
//! - RESP3 (`HELLO 3` unknown: Redis before 6; a proxy that closes the
//!   connection on it): connected again with RESP2, and every later
//!   connection of the store is made with RESP2 at once;
//! - `CLIENT TRACKING` (an ACL without `+client|tracking`, a renamed
//!   command, a managed service without it): the RESP3 connection is kept.

use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::{AsyncConnectionConfig, ProtocolVersion, RedisError, RedisResult, Value};

use super::Tracker;
use crate::data::tracking::Tracking;
use crate::redis::conn::sentinel::Source;
use crate::sync::lock_std;

/// A command connection made by [`Tracker::connect`].
pub(in crate::redis) struct Made {
    pub(in crate::redis) conn: MultiplexedConnection,
    /// The server reached, when the source names one (a Sentinel's master).
    pub(in crate::redis) server: Option<String>,
    /// Whether the connection in use before had tracking on.
    pub(in crate::redis) was_on: bool,
}

impl Tracker {
    /// A command connection to `source`'s server, each step bounded by
    /// `timeout`, with tracking on where the settings ask for it and the
    /// server allows it; `base` is the connection config (RESP2, no push
    /// sender).
    pub(in crate::redis) async fn connect(
        &self,
        source: &Source,
        base: &AsyncConnectionConfig,
        timeout: Duration,
    ) -> RedisResult<Made> {
        let shared = &self.shared;
        if shared.mode == Tracking::Off || shared.resp2.load(std::sync::atomic::Ordering::Acquire) {
            let (conn, server) = source
                .connect(base, timeout, ProtocolVersion::RESP2)
                .await?;
            let was_on = shared.on.swap(false, std::sync::atomic::Ordering::AcqRel);
            return Ok(Made {
                conn,
                server,
                was_on,
            });
        }
        let resp3 = base.clone().set_push_sender(self.push_sender());
        let (mut conn, server) = match source
            .connect(&resp3, timeout, ProtocolVersion::RESP3)
            .await
        {
            Ok(made) => made,
            Err(error) if !refused_resp3(&error) => return Err(error),
            Err(error) => {
                let made = source
                    .connect(base, timeout, ProtocolVersion::RESP2)
                    .await?;
                shared
                    .resp2
                    .store(true, std::sync::atomic::Ordering::Release);
                self.off(format!("the server refused RESP3 (HELLO 3: {error})"));
                self.broadcast_off();
                let was_on = shared.on.swap(false, std::sync::atomic::Ordering::AcqRel);
                return Ok(Made {
                    conn: made.0,
                    server: made.1,
                    was_on,
                });
            }
        };
        let on = self.enable(&mut conn, timeout).await?;
        let was_on = shared.on.swap(on, std::sync::atomic::Ordering::AcqRel);
        Ok(Made {
            conn,
            server,
            was_on,
        })
    }

    /// Turns tracking on on `conn`, a new connection, as the mode asks:
    /// whether the server took it. A refusal is said once; no answer
    /// within `timeout`, or a broken connection, is an error (the
    /// connection is not used).
    async fn enable(
        &self,
        conn: &mut MultiplexedConnection,
        timeout: Duration,
    ) -> RedisResult<bool> {
        if self.shared.mode == Tracking::Broadcast {
            return self.enable_broadcast(conn, timeout).await;
        }
        self.send_tracking(conn, &Self::command(), timeout).await
    }

    /// Sends `command` (a `CLIENT TRACKING`) on `conn`: whether the server
    /// took it, as [`enable`](Self::enable) says.
    pub(super) async fn send_tracking(
        &self,
        conn: &mut MultiplexedConnection,
        command: &::redis::Cmd,
        timeout: Duration,
    ) -> RedisResult<bool> {
        let reply = tokio::time::timeout(timeout, command.query_async::<Value>(conn)).await;
        match reply {
            Ok(Ok(_)) => {
                self.on_again();
                Ok(true)
            }
            Ok(Err(error)) if error.is_unrecoverable_error() => Err(error),
            Ok(Err(error)) => {
                self.off(format!("the server refused CLIENT TRACKING ({error})"));
                Ok(false)
            }
            Err(_) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("CLIENT TRACKING: no answer within {timeout:?}"),
            ))),
        }
    }

    /// The `CLIENT TRACKING` command of the default mode.
    fn command() -> ::redis::Cmd {
        let mut command = ::redis::cmd("CLIENT");
        command.arg("TRACKING").arg("ON").arg("NOLOOP");
        command
    }

    /// Tracking is off for `why`: said once (again only if the reason
    /// changes).
    pub(super) fn off(&self, why: String) {
        let mut said = lock_std(&self.shared.off);
        if said.as_deref() != Some(why.as_str()) {
            tracing::info!(
                store = %self.shared.store,
                "redis client tracking off: {why}; in-process copies hear of corral's own \
                 writes only (the backplane), other writers' changes reach them when they expire"
            );
            *said = Some(why);
        }
    }

    /// Tracking is on: said if it was said to be off.
    fn on_again(&self) {
        if lock_std(&self.shared.off).take().is_some() {
            tracing::info!(store = %self.shared.store, "redis client tracking on");
        }
    }
}

/// Whether a failed RESP3 connection attempt was the server (or a proxy in
/// front of it) refusing RESP3 rather than being unreachable: it answered
/// with an error, or closed the connection during the handshake.
fn refused_resp3(error: &RedisError) -> bool {
    answered_with_error(error)
        || (error.is_connection_dropped() && !error.is_timeout() && !error.is_connection_refusal())
}

/// Whether a failed connection attempt was the server answering with an
/// error: not an unreachable, silent or dying one (a timeout, a refused or
/// dropped connection).
pub(super) fn answered_with_error(error: &RedisError) -> bool {
    !error.is_timeout()
        && !error.is_connection_refusal()
        && !error.is_connection_dropped()
        && (error.code().is_some() || matches!(error.kind(), ::redis::ErrorKind::Server(_)))
}

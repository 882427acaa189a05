//! Redis Sentinel: where a standalone store's connections go. A
//! [`Source`] is either one fixed server or the current master of a
//! Sentinel group, asked anew at every (re)connect.
//!
//! Resolving a master: the sentinels are asked in turn
//! `SENTINEL get-master-addr-by-name <name>` (each bounded by the connect
//! timeout); the first address given is the master. The command connection
//! then checks the node's `ROLE` before using it: during a failover a
//! sentinel may still name the old master after it became a replica.
//! Errors name the master and the sentinels asked, never a password.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{MultiplexedConnection, PubSub};
use ::redis::{
    AsyncConnectionConfig, Client, ErrorKind, ProtocolVersion, RedisError, RedisResult, Value,
};

use super::client::{self, speaking, within};
use crate::data::error::{StoreError, StoreErrorKind};
use crate::redact::redact_url;
use crate::redis::RedisConfig;

/// How the masters found through Sentinel are reached: user, password and
/// database (TLS follows the sentinels' URLs). `Debug` hides the password.
#[derive(Clone, Default, PartialEq, Eq)]
pub(in crate::redis) struct MasterAuth {
    pub(in crate::redis) username: Option<String>,
    pub(in crate::redis) password: Option<String>,
    pub(in crate::redis) db: i64,
}

impl fmt::Debug for MasterAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MasterAuth")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("db", &self.db)
            .finish()
    }
}

/// Where a connection goes.
#[derive(Clone)]
pub(in crate::redis) enum Source {
    /// One server, always the same (boxed: a `Client` is large).
    Fixed(Box<Client>),
    /// The current master of a Sentinel group.
    Sentinel(Arc<Sentinels>),
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fixed(_) => f.write_str("Source::Fixed"),
            Self::Sentinel(group) => write!(f, "Source::Sentinel({})", group.target()),
        }
    }
}

impl Source {
    /// Whether a `READONLY` reply makes the connection be made anew at
    /// once: the server it reached was demoted, and the source names (and
    /// checks) the master. A fixed address is connected to anew more
    /// sparingly (see the standalone connection's docs).
    pub(in crate::redis) fn follows_failover(&self) -> bool {
        matches!(self, Self::Sentinel(_))
    }

    /// A command connection to the source's server (for Sentinel: the
    /// current master, checked by `ROLE`) speaking `protocol`, and the
    /// server's address when the source names it (a Sentinel's master).
    /// Each step is bounded by `timeout`.
    pub(in crate::redis) async fn connect(
        &self,
        config: &AsyncConnectionConfig,
        timeout: Duration,
        protocol: ProtocolVersion,
    ) -> RedisResult<(MultiplexedConnection, Option<String>)> {
        match self {
            Self::Fixed(client) => {
                let client = speaking(client, protocol)?;
                let conn = within(
                    timeout,
                    client.get_multiplexed_async_connection_with_config(config),
                )
                .await?;
                Ok((conn, None))
            }
            Self::Sentinel(sentinels) => {
                let (client, node) = sentinels.master(timeout).await?;
                let client = speaking(&client, protocol)?;
                let mut conn = within(
                    timeout,
                    client.get_multiplexed_async_connection_with_config(config),
                )
                .await?;
                let role: Value =
                    within(timeout, ::redis::cmd("ROLE").query_async(&mut conn)).await?;
                match role {
                    Value::Array(items) if is_master(items.first()) => Ok((conn, Some(node))),
                    _ => Err(unavailable(format!(
                        "{node}, named master of '{}' by the sentinels, is not a master (a failover is under way)",
                        sentinels.master_name
                    ))),
                }
            }
        }
    }

    /// A pub/sub connection to the source's server, bounded by `timeout`
    /// per step.
    pub(in crate::redis) async fn pubsub(&self, timeout: Duration) -> RedisResult<PubSub> {
        let client = match self {
            Self::Fixed(client) => Client::clone(client),
            Self::Sentinel(sentinels) => sentinels.master(timeout).await?.0,
        };
        within(timeout, client.get_async_pubsub()).await
    }
}

/// A Sentinel group: the sentinels to ask and how to reach its masters.
pub(in crate::redis) struct Sentinels {
    master_name: String,
    /// A client per sentinel, with its URL as shown in errors.
    sentinels: Vec<(Client, String)>,
    /// `redis` or `rediss`: the masters are reached as the sentinels are.
    scheme: &'static str,
    config: RedisConfig,
}

impl Sentinels {
    /// The group `master_name` watched by the sentinels at `urls`.
    pub(in crate::redis) fn new(
        master_name: &str,
        urls: &[String],
        config: &RedisConfig,
    ) -> Result<Self, StoreError> {
        if master_name.is_empty() {
            return Err(StoreError::new(
                StoreErrorKind::Configuration,
                "redis sentinel: the master name is empty",
            ));
        }
        if urls.is_empty() {
            return Err(StoreError::new(
                StoreErrorKind::Configuration,
                format!("redis sentinel: no sentinel URLs given for master '{master_name}'"),
            ));
        }
        let sentinels = urls
            .iter()
            .map(|url| Ok((client::client(url, config)?, redact_url(url))))
            .collect::<Result<Vec<_>, StoreError>>()?;
        let tls = urls[0]
            .get(..9)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss://"));
        Ok(Self {
            master_name: master_name.to_owned(),
            sentinels,
            scheme: if tls { "rediss" } else { "redis" },
            config: config.clone(),
        })
    }

    /// How the group is shown: `sentinel[<name>@<url>,...]`.
    pub(in crate::redis) fn target(&self) -> String {
        let urls: Vec<&str> = self.sentinels.iter().map(|(_, url)| url.as_str()).collect();
        format!("sentinel[{}@{}]", self.master_name, urls.join(","))
    }

    /// `error` without the masters' password.
    pub(in crate::redis) fn scrub(&self, error: StoreError) -> StoreError {
        match &self.config.master.password {
            Some(password) if !password.is_empty() && error.message().contains(password) => {
                StoreError::new(error.kind(), error.message().replace(password, "***"))
            }
            _ => error,
        }
    }

    /// A client for the master the first sentinel that knows the group
    /// names, with its address as shown in errors.
    async fn master(&self, timeout: Duration) -> RedisResult<(Client, String)> {
        let mut unknown = false;
        let mut failures = Vec::new();
        for (sentinel, shown) in &self.sentinels {
            match self.ask(sentinel, timeout).await {
                Ok(Some((host, port))) => return self.client_for(&host, port),
                Ok(None) => unknown = true,
                Err(e) => failures.push(format!("{shown}: {e}")),
            }
        }
        if unknown {
            let asked: Vec<&str> = self.sentinels.iter().map(|(_, url)| url.as_str()).collect();
            let asked = asked.join(", ");
            Err(RedisError::from((
                ErrorKind::MasterNameNotFoundBySentinel,
                "unknown master name",
                format!(
                    "no sentinel knows master '{}' (asked {asked})",
                    self.master_name
                ),
            )))
        } else {
            Err(unavailable(format!(
                "no sentinel answered for master '{}' (asked {})",
                self.master_name,
                failures.join("; ")
            )))
        }
    }

    /// The master's address by `sentinel`, or `None` if it does not know
    /// the group.
    async fn ask(
        &self,
        sentinel: &Client,
        timeout: Duration,
    ) -> RedisResult<Option<(String, u16)>> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let mut conn = within(
            timeout,
            sentinel.get_multiplexed_async_connection_with_config(&config),
        )
        .await?;
        let mut cmd = ::redis::cmd("SENTINEL");
        cmd.arg("get-master-addr-by-name").arg(&self.master_name);
        let reply: Option<(String, u16)> = within(timeout, cmd.query_async(&mut conn)).await?;
        Ok(reply)
    }

    /// A client for the master at `host:port`, with the configured user,
    /// password, database and TLS.
    fn client_for(&self, host: &str, port: u16) -> RedisResult<(Client, String)> {
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let auth = &self.config.master;
        let userinfo = match (&auth.username, &auth.password) {
            (None, None) => String::new(),
            (user, password) => format!(
                "{}:{}@",
                encode(user.as_deref().unwrap_or("")),
                encode(password.as_deref().unwrap_or(""))
            ),
        };
        let shown = format!("{host}:{port}");
        let url = format!("{}://{userinfo}{shown}/{}", self.scheme, auth.db);
        let client = client::client(&url, &self.config).map_err(|e| {
            RedisError::from((
                ErrorKind::InvalidClientConfig,
                "sentinel master",
                self.scrub(e).to_string(),
            ))
        })?;
        Ok((client, shown))
    }
}

/// Whether a `ROLE` reply's first element says `master`.
pub(in crate::redis) fn is_master(role: Option<&Value>) -> bool {
    matches!(role, Some(Value::BulkString(role)) if role.as_slice() == b"master")
        || matches!(role, Some(Value::SimpleString(role)) if role == "master")
}

/// An error classified as the server being unavailable.
fn unavailable(message: String) -> RedisError {
    RedisError::from(io::Error::new(io::ErrorKind::NotConnected, message))
}

/// `text` percent-encoded for a URL's user or password.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_userinfo() {
        assert_eq!(encode("p@ss:w/rd"), "p%40ss%3Aw%2Frd");
        assert_eq!(encode("plain-1.2_~"), "plain-1.2_~");
    }

    #[test]
    fn debug_hides_the_password() {
        let auth = MasterAuth {
            username: Some("app".into()),
            password: Some("hunter2".into()),
            db: 3,
        };
        let shown = format!("{auth:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("app"), "{shown}");
    }
}

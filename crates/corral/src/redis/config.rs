//! [`RedisConfig`]: the timeouts, reconnects, health checks, keepalive,
//! read memory and TLS / Sentinel credentials of a [`RedisStore`].

use std::time::Duration;

#[cfg(feature = "tls")]
use super::conn::client;
use super::conn::sentinel::MasterAuth;
#[cfg(doc)]
use super::RedisStore;
#[cfg(doc)]
use crate::data::error::StoreErrorKind;
use crate::data::tracking::Tracking;

/// The first delay between reconnect attempts.
pub(super) const RECONNECT_MIN_DELAY: Duration = Duration::from_millis(50);

/// Settings of a [`RedisStore`].
///
/// ```
/// use std::time::Duration;
///
/// let config = corral::RedisConfig::default().op_timeout(Duration::from_millis(250));
/// assert_eq!(config.op_timeout, Duration::from_millis(250));
/// assert_eq!(config.connect_timeout, Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisConfig {
    /// The longest one call may take, from sending the command to its reply
    /// (including a `NOSCRIPT` retry and waiting for a reconnect); the call
    /// then fails with [`StoreErrorKind::Timeout`]. Also a cluster
    /// connection's own response timeout, and the subscriber's bound on
    /// `SUBSCRIBE` and `PING`. Default: **1 s**.
    ///
    /// A call that timed out may still take effect when a slow server gets
    /// to it; the fences keep that safe (a late commit whose fence moved is
    /// refused).
    pub op_timeout: Duration,
    /// The longest one connection attempt may take (the initial connect, a
    /// reconnect, the subscriber's connect). Default: **1 s**.
    pub connect_timeout: Duration,
    /// The longest pause between reconnect attempts (they start at 50 ms
    /// and double, with jitter); also how old a connection to one address
    /// must be before a demotion makes the store connect anew (see the
    /// [`RedisStore`] docs, "Failover behind one address"). Default:
    /// **1 s**.
    pub reconnect_max_delay: Duration,
    /// How often a health check asks the command connection (standalone)
    /// its server's `ROLE` (`PING` once refused) and `PING`s the subscriber
    /// connection, each check bounded by [`op_timeout`](Self::op_timeout):
    /// a connection that gives no answer is replaced, one whose server
    /// became a replica is left (see the [`RedisStore`] docs, "Dead
    /// connections"). The first check a connection carrying invalidations
    /// leaves unanswered also drops what the caches' L1s hold on the
    /// store's word, within this interval and the operation timeout of a
    /// silence (see "Coherence"). One check per connection per interval, whatever the
    /// traffic; the reads and writes themselves pay nothing for it.
    /// Default: **1 s**.
    pub health_interval: Duration,
    /// TCP keepalive on every TCP connection the store opens (commands,
    /// cluster nodes, the subscriber): the first probe after this long
    /// without traffic, then one every third of it, three in all; and on
    /// Linux `TCP_USER_TIMEOUT` of twice it, so the kernel closes a
    /// connection whose peer stopped acknowledging within about twice
    /// this. A second line of defence behind
    /// [`health_interval`](Self::health_interval) (which finds a silent
    /// connection much sooner), and the only one for a cluster's node
    /// connections. The kernel takes these in whole seconds: `idle` is
    /// rounded down to whole seconds, the probe interval is a third of
    /// that rounded down, and neither is below 1 s (so 1 s and 2 s probe
    /// every second, with a user timeout of 2 s and 4 s). `None` leaves
    /// the operating system's defaults (no keepalive, as a rule). Default:
    /// **10 s**.
    pub tcp_keepalive: Option<Duration>,
    /// How many keys the store remembers the expiry of, so that reading a
    /// value already read (the same write) is a plain `GET` where the value
    /// does not name its expiry itself, and whether a key holds a value,
    /// which picks a flight's first request (see the [`RedisStore`] docs,
    /// "Round trips"). 0: every read of a value that names no expiry sends
    /// `PTTL` with its `GET`, and no key is recalled (each flight's first
    /// request is chosen as for a key never read). Every key takes 16 bytes
    /// in the table of keys holding a value (allocated in full); a key whose
    /// value names no expiry also takes about 230 in the table of expiries
    /// (its slot, and the generation's token, shared with the values read
    /// of that write), whatever the values' size. On one server whose clock
    /// the store reads, corral's own values name their expiry. Default:
    /// **65,536** (1 MiB, and up to about 14 MiB more).
    pub read_memory: usize,
    /// How changes made outside this process reach the caches' in-process
    /// copies ([`Tracking`]). Default: **[`Tracking::Keys`]**.
    pub tracking: Tracking,
    /// TLS material for `rediss://` connections (feature `tls`): see
    /// [`tls_root_ca`](Self::tls_root_ca) and
    /// [`tls_client_auth`](Self::tls_client_auth). Its `Debug` output shows
    /// sizes, never bytes.
    #[cfg(feature = "tls")]
    pub(super) tls: client::TlsMaterial,
    /// How the masters of a Sentinel group are reached (see
    /// [`master_auth`](Self::master_auth)); its `Debug` hides the password.
    pub(super) master: MasterAuth,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            op_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            reconnect_max_delay: Duration::from_secs(1),
            health_interval: Duration::from_secs(1),
            tcp_keepalive: Some(Duration::from_secs(10)),
            read_memory: 1 << 16,
            tracking: Tracking::Keys,
            #[cfg(feature = "tls")]
            tls: client::TlsMaterial::default(),
            master: MasterAuth::default(),
        }
    }
}

impl RedisConfig {
    /// Sets [`op_timeout`](Self::op_timeout) (at least 1 ms is used).
    #[must_use]
    pub fn op_timeout(mut self, timeout: Duration) -> Self {
        self.op_timeout = timeout;
        self
    }

    /// Sets [`connect_timeout`](Self::connect_timeout) (at least 1 ms is
    /// used).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`read_memory`](Self::read_memory).
    #[must_use]
    pub fn read_memory(mut self, entries: usize) -> Self {
        self.read_memory = entries;
        self
    }

    /// Sets [`health_interval`](Self::health_interval) (at least 10 ms is
    /// used).
    #[must_use]
    pub fn health_interval(mut self, interval: Duration) -> Self {
        self.health_interval = interval;
        self
    }

    /// Sets [`tcp_keepalive`](Self::tcp_keepalive) (whole seconds, at
    /// least 1 s, are used; `None`: the operating system's defaults).
    #[must_use]
    pub fn tcp_keepalive(mut self, idle: Option<Duration>) -> Self {
        self.tcp_keepalive = idle;
        self
    }

    /// Sets [`tracking`](Self::tracking).
    #[must_use]
    pub fn tracking(mut self, tracking: Tracking) -> Self {
        self.tracking = tracking;
        self
    }

    /// Sets [`reconnect_max_delay`](Self::reconnect_max_delay).
    #[must_use]
    pub fn reconnect_max_delay(mut self, delay: Duration) -> Self {
        self.reconnect_max_delay = delay;
        self
    }

    /// Trusts the CA certificates in `pem` (one or more PEM blocks) for
    /// `rediss://` connections — the command connection, the subscriber
    /// and every cluster node — *instead of* the built-in webpki roots
    /// (feature `tls`). The server's certificate must name the host of the
    /// URL (a DNS name or an IP address in its subject alternative names).
    ///
    /// An unreadable PEM fails [`RedisStore::connect`] with
    /// [`StoreErrorKind::Protocol`]; giving TLS material and a `redis://`
    /// URL fails it too.
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn tls_root_ca(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root_ca = Some(pem.into().into());
        self
    }

    /// Authenticates to the server with a client certificate chain and its
    /// private key, both PEM (mutual TLS, feature `tls`). Without
    /// [`tls_root_ca`](Self::tls_root_ca), the server is checked against
    /// the webpki roots. The key never appears in `Debug` output or errors.
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn tls_client_auth(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some((certificate_pem.into().into(), key_pem.into().into()));
        self
    }

    /// The user (`None`: the default user) and password that authenticate
    /// the connections to the master found through Sentinel
    /// ([`RedisStore::connect_sentinel`]); the sentinels' own credentials
    /// are in their URLs. The password appears in no `Debug` output or
    /// error. Default: none.
    #[must_use]
    pub fn master_auth(mut self, user: Option<&str>, password: &str) -> Self {
        self.master.username = user.map(str::to_owned);
        self.master.password = Some(password.to_owned());
        self
    }

    /// The database selected on the master found through Sentinel
    /// ([`RedisStore::connect_sentinel`]). Default: **0**.
    #[must_use]
    pub fn master_db(mut self, db: i64) -> Self {
        self.master.db = db;
        self
    }

    /// The settings with every bound at least its floor.
    pub(super) fn normalized(mut self) -> Self {
        let floor = Duration::from_millis(1);
        self.op_timeout = self.op_timeout.max(floor);
        self.connect_timeout = self.connect_timeout.max(floor);
        self.reconnect_max_delay = self.reconnect_max_delay.max(RECONNECT_MIN_DELAY);
        self.health_interval = self.health_interval.max(Duration::from_millis(10));
        self.tcp_keepalive = self
            .tcp_keepalive
            .map(|idle| idle.max(Duration::from_secs(1)));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_are_documented_ones() {
        let config = RedisConfig::default();
        assert_eq!(config.op_timeout, Duration::from_secs(1));
        assert_eq!(config.connect_timeout, Duration::from_secs(1));
        assert_eq!(config.reconnect_max_delay, Duration::from_secs(1));
        let zero = RedisConfig::default()
            .op_timeout(Duration::ZERO)
            .connect_timeout(Duration::ZERO)
            .normalized();
        assert_eq!(zero.op_timeout, Duration::from_millis(1));
        assert_eq!(zero.connect_timeout, Duration::from_millis(1));
    }
}

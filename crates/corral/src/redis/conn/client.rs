//! Building redis-rs clients from a URL and a [`RedisConfig`]: the TLS
//! material (feature `tls`), a clear error for `rediss://` without it, and
//! error messages that never repeat the URL's password.

use std::time::Duration;

use ::redis::cluster::ClusterClientBuilder;
use ::redis::io::tcp::socket2::TcpKeepalive;
use ::redis::io::tcp::TcpSettings;
use ::redis::{Client, IntoConnectionInfo as _, ProtocolVersion, RedisResult};

use crate::data::error::{StoreError, StoreErrorKind};
use crate::redis::errors::store_error;
use crate::redis::RedisConfig;

/// PEM bytes, shared by the clones of a config.
#[cfg(feature = "tls")]
type Pem = std::sync::Arc<[u8]>;

/// PEM material for TLS connections. `Debug` shows only which parts are
/// set and their sizes, never their bytes.
#[cfg(feature = "tls")]
#[derive(Clone, Default, PartialEq, Eq)]
pub(in crate::redis) struct TlsMaterial {
    /// CA certificates (PEM) to trust instead of the webpki roots.
    pub(in crate::redis) root_ca: Option<Pem>,
    /// Client certificate chain and private key (PEM), for mutual TLS.
    pub(in crate::redis) client: Option<(Pem, Pem)>,
}

#[cfg(feature = "tls")]
impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let root_ca = self
            .root_ca
            .as_ref()
            .map(|pem| format!("<{} bytes of PEM>", pem.len()));
        let client = self
            .client
            .as_ref()
            .map(|(cert, _key)| format!("<certificate: {} bytes, key: redacted>", cert.len()));
        f.debug_struct("TlsMaterial")
            .field("root_ca", &root_ca)
            .field("client", &client)
            .finish()
    }
}

#[cfg(feature = "tls")]
impl TlsMaterial {
    fn is_set(&self) -> bool {
        self.root_ca.is_some() || self.client.is_some()
    }

    /// Refuses a CA that holds no PEM certificate at all (redis-rs would
    /// trust nothing and every handshake would fail as "unknown issuer").
    fn check(&self) -> Result<(), StoreError> {
        let has_certificate = |pem: &[u8]| {
            let marker = b"-----BEGIN CERTIFICATE-----";
            pem.windows(marker.len()).any(|window| window == marker)
        };
        match &self.root_ca {
            Some(pem) if !has_certificate(pem) => Err(StoreError::new(
                StoreErrorKind::Configuration,
                "redis connect: tls_root_ca holds no PEM certificate \
                 (-----BEGIN CERTIFICATE-----)",
            )),
            _ => Ok(()),
        }
    }

    fn certificates(&self) -> ::redis::TlsCertificates {
        ::redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| ::redis::ClientTlsConfig {
                    client_cert: cert.to_vec(),
                    client_key: key.to_vec(),
                }),
            root_cert: self.root_ca.as_ref().map(|pem| pem.to_vec()),
        }
    }
}

/// A client for one server (or one cluster seed) at `url`, with the TLS
/// material of `config` when it has some.
pub(in crate::redis) fn client(url: &str, config: &RedisConfig) -> Result<Client, StoreError> {
    check_scheme(url)?;
    let info = url
        .into_connection_info()
        .map_err(|e| scrubbed(url, store_error("connect", &e)))?;
    let settings = tcp_settings(info.tcp_settings().clone(), config);
    let info = info.set_tcp_settings(settings);
    #[cfg(feature = "tls")]
    {
        ensure_crypto_provider();
        if config.tls.is_set() {
            config.tls.check()?;
            // Only the TLS material is read here (no network), so any
            // failure is a configuration mistake.
            return Client::build_with_tls(info, config.tls.certificates()).map_err(|e| {
                let error = store_error("connect", &e);
                scrubbed(
                    url,
                    StoreError::new(StoreErrorKind::Configuration, error.message()),
                )
            });
        }
    }
    Client::open(info).map_err(|e| scrubbed(url, store_error("connect", &e)))
}

/// The kernel's keepalive settings for [`RedisConfig::tcp_keepalive`] =
/// `idle`, in whole seconds (Linux takes keepalive times in seconds and
/// refuses 0): the first probe after `idle` (rounded down, at least 1 s),
/// then one every third of it (rounded down, at least 1 s), and
/// `TCP_USER_TIMEOUT` of twice the idle time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(in crate::redis) struct KeepaliveTimes {
    pub(in crate::redis) idle: Duration,
    pub(in crate::redis) interval: Duration,
    pub(in crate::redis) user_timeout: Duration,
}

impl KeepaliveTimes {
    pub(in crate::redis) fn new(idle: Duration) -> Self {
        let idle = idle.as_secs().max(1);
        Self {
            idle: Duration::from_secs(idle),
            interval: Duration::from_secs((idle / 3).max(1)),
            user_timeout: Duration::from_secs(idle.saturating_mul(2)),
        }
    }
}

/// `client`, speaking `protocol` (a copy of it if it speaks another).
pub(in crate::redis) fn speaking(
    client: &Client,
    protocol: ProtocolVersion,
) -> RedisResult<Client> {
    let info = client.get_connection_info();
    if info.redis_settings().protocol() == protocol {
        return Ok(client.clone());
    }
    let settings = info.redis_settings().clone().set_protocol(protocol);
    Client::open(info.clone().set_redis_settings(settings))
}

/// `call`, or a timeout error after `timeout`.
pub(in crate::redis) async fn within<T>(
    timeout: Duration,
    call: impl std::future::Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or_else(|_| {
            Err(::redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection within {timeout:?}"),
            )))
        })
}

/// `settings` with the keepalive and user timeout of
/// [`RedisConfig::tcp_keepalive`], if set (see [`KeepaliveTimes`]): probes
/// after `idle` without traffic, then every third of it, three in all;
/// unacknowledged data closes the connection after twice `idle` (Linux).
fn tcp_settings(settings: TcpSettings, config: &RedisConfig) -> TcpSettings {
    let Some(idle) = config.tcp_keepalive else {
        return settings;
    };
    let times = KeepaliveTimes::new(idle);
    let keepalive = TcpKeepalive::new().with_time(times.idle);
    #[cfg(target_os = "linux")]
    let (keepalive, settings) = (
        keepalive.with_interval(times.interval).with_retries(3),
        settings.set_user_timeout(times.user_timeout),
    );
    settings.set_keepalive(keepalive)
}

/// A cluster client builder seeded with `urls` and the TLS material of
/// `config`. User name and password come from the first URL.
pub(in crate::redis) fn cluster_builder(
    urls: &[String],
    config: &RedisConfig,
) -> Result<ClusterClientBuilder, StoreError> {
    for url in urls {
        check_scheme(url)?;
    }
    let builder = ClusterClientBuilder::new(urls.iter().map(String::as_str))
        .tcp_settings(tcp_settings(TcpSettings::default(), config));
    #[cfg(feature = "tls")]
    {
        ensure_crypto_provider();
        if config.tls.is_set() {
            return Ok(builder.certs(config.tls.certificates()));
        }
    }
    Ok(builder)
}

/// Refuses `rediss://` when corral was built without TLS, with a message
/// that names the feature (redis-rs's own error does not).
fn check_scheme(url: &str) -> Result<(), StoreError> {
    let tls = url
        .get(..9)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss://"));
    if tls && !cfg!(feature = "tls") {
        return Err(StoreError::new(
            StoreErrorKind::Configuration,
            format!(
                "redis connect: {} is a TLS URL (rediss://); build corral with the `tls` feature",
                crate::redact::redact_url(url)
            ),
        ));
    }
    Ok(())
}

/// `error` with the password of `url` (if any, and if it appears) masked.
pub(in crate::redis) fn scrubbed(url: &str, error: StoreError) -> StoreError {
    match password(url) {
        Some(password) if error.to_string().contains(password) => {
            let message = error.message().replace(password, "***");
            StoreError::new(error.kind(), message)
        }
        _ => error,
    }
}

/// The password part of `scheme://user:password@host...`, if non-empty.
pub(in crate::redis) fn password(url: &str) -> Option<&str> {
    let scheme = url.find("://")?;
    let at = url.rfind('@')?;
    let userinfo = url.get(scheme + 3..at)?;
    let (_user, password) = userinfo.split_once(':')?;
    (!password.is_empty()).then_some(password)
}

/// rustls needs a process-wide crypto provider; redis-rs builds its TLS
/// settings with the default one. corral turns on rustls's `ring` provider,
/// so there is exactly one unless the application enables another one too;
/// then nothing would be the default and building TLS settings would
/// panic. Installs `ring` as the default only when none is installed yet.
#[cfg(feature = "tls")]
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer is fine: one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_passwords() {
        assert_eq!(password("redis://u:p%40ss@h:1/0"), Some("p%40ss"));
        assert_eq!(password("rediss://:secret@h"), Some("secret"));
        assert_eq!(password("redis://user@h"), None);
        assert_eq!(password("redis://h:6379/"), None);
    }

    #[test]
    fn scrubs_passwords_from_errors() {
        let error = StoreError::new(StoreErrorKind::Protocol, "bad redis://u:hunter2@h");
        let clean = scrubbed("redis://u:hunter2@h", error);
        assert!(!clean.to_string().contains("hunter2"), "{clean}");
        assert_eq!(clean.kind(), StoreErrorKind::Protocol);
    }

    #[test]
    fn keepalive_times_are_whole_seconds_never_below_one() {
        let times = |idle_ms, interval, user_timeout| KeepaliveTimes {
            idle: Duration::from_millis(idle_ms),
            interval: Duration::from_secs(interval),
            user_timeout: Duration::from_secs(user_timeout),
        };
        let of = |ms| KeepaliveTimes::new(Duration::from_millis(ms));
        assert_eq!(of(0), times(1_000, 1, 2));
        assert_eq!(of(500), times(1_000, 1, 2));
        assert_eq!(of(1_000), times(1_000, 1, 2));
        assert_eq!(of(1_999), times(1_000, 1, 2));
        assert_eq!(of(2_000), times(2_000, 1, 4));
        assert_eq!(of(3_000), times(3_000, 1, 6));
        assert_eq!(of(10_000), times(10_000, 3, 20));
        assert_eq!(of(10_900), times(10_000, 3, 20));
        assert_eq!(of(60_000), times(60_000, 20, 120));
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn rediss_without_the_feature_names_it() {
        let error = check_scheme("rediss://u:pw@h:1/").err();
        let text = error.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("`tls` feature"), "{text}");
        assert!(!text.contains("pw@"), "{text}");
    }
}

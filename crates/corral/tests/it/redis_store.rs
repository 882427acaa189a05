//! Contract tests of `RedisStore` against a real `redis-server` and a
//! three-master Redis Cluster (DESIGN.md §5): values, leases, fences,
//! notifications, round trips, and faults (frozen, killed and restarted
//! servers). Real time with short TTLs; every wait is bounded. All tests run
//! on tokio's current-thread runtime.
#![cfg(feature = "redis")]

use std::future::Future;
use std::time::{Duration, Instant};

use corral::store::{Commit, Grant, Lease, LeaseRequest, Listener, Lookup, Store, StoreKey};
use corral::{RedisConfig, RedisStore, StoreErrorKind, MAX_KEY_LEN};
use corral_testkit::{log_tail, RedisCluster, RedisServer};

/// Operation timeout of the stores under test.
const OP_TIMEOUT: Duration = Duration::from_millis(300);
/// Slack allowed over `OP_TIMEOUT` for a call that times out.
const SLACK: Duration = Duration::from_millis(250);
/// Bound on any wait that should end promptly (a notification, a reconnect).
const PROMPT: Duration = Duration::from_secs(5);

fn config() -> RedisConfig {
    RedisConfig::default()
        .op_timeout(OP_TIMEOUT)
        .connect_timeout(Duration::from_millis(500))
        .reconnect_max_delay(Duration::from_millis(200))
}

fn request(lease: Duration) -> LeaseRequest {
    LeaseRequest {
        lease_ttl: lease,
        fence_ttl: Duration::from_secs(10),
        grant: Grant::IfNoValue,
    }
}

const LEASE: Duration = Duration::from_secs(5);
const TTL: Duration = Duration::from_secs(30);

fn key(namespace: &str, key: &str) -> StoreKey {
    StoreKey::new(namespace, key)
}

async fn connect(server: &RedisServer) -> RedisStore {
    RedisStore::connect(&server.url(), config())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", log_tail(&server.log())))
}

async fn connect_cluster(cluster: &RedisCluster) -> RedisStore {
    RedisStore::connect_cluster(&cluster.urls(), config())
        .await
        .unwrap_or_else(|e| panic!("connect_cluster: {e}\n{}", cluster.logs()))
}

/// Awaits `future`, failing the test if it takes longer than `limit`.
async fn within<T>(limit: Duration, what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what}: not done within {limit:?}"),
    }
}

async fn grant(store: &RedisStore, k: &StoreKey, lease: Duration) -> Lease {
    match store.get_or_lease(k, &request(lease)).await {
        Ok(Lookup::Granted(lease)) => lease,
        other => panic!("expected a grant for {:?}, got {other:?}", k.key()),
    }
}

async fn value(store: &RedisStore, k: &StoreKey) -> Option<Vec<u8>> {
    store
        .get(k)
        .await
        .unwrap_or_else(|e| panic!("get {:?}: {e}", k.key()))
        .map(|stored| stored.bytes)
}

/// A listener for `k` whose namespace channel is subscribed: a probe key of
/// the namespace is invalidated until the probe's listener wakes (by the
/// subscription's own wake-up or by the published notice) and then read,
/// so any later wake-up of the returned listener comes from a notice about
/// `k`.
async fn subscribed_listener(store: &RedisStore, k: &StoreKey) -> Listener {
    let probe = key(k.namespace(), "probe\u{1f50e}");
    let mut probe_listener = store.listen(&probe);
    within(PROMPT, "namespace subscribed", async {
        loop {
            store
                .invalidate(&probe, corral::store::Origin::new(0))
                .await
                .expect("invalidate probe");
            if tokio::time::timeout(Duration::from_millis(50), probe_listener.changed())
                .await
                .is_ok()
            {
                return;
            }
        }
    })
    .await;
    // On a cluster the probe's own channel may be confirmed before the
    // namespace's other sharded channels; the last confirmation wakes every
    // listener of the store. A read of the namespace waits (a bounded time)
    // for that confirmation, so the returned listener is registered after it.
    store.get(&probe).await.expect("read probe");
    store.listen(k)
}

/// Whether `listener` has a wake-up waiting (without waiting for one).
async fn is_woken(listener: &mut Listener) -> bool {
    tokio::time::timeout(Duration::from_millis(1), listener.changed())
        .await
        .is_ok()
}

// ---------------------------------------------------------------------------
// The contract, written once and run against a server and a cluster.
// ---------------------------------------------------------------------------

async fn check_hit_granted_held(a: &RedisStore, b: &RedisStore, ns: &str) {
    let k = key(ns, "hgh");
    let lease = grant(a, &k, LEASE).await;
    assert_eq!(lease.token().len(), 32, "128-bit hex token");
    match b.get_or_lease(&k, &request(LEASE)).await {
        Ok(Lookup::Held {
            remaining: Some(left),
        }) => {
            assert!(
                left <= LEASE && left > LEASE / 2,
                "lease remaining {left:?}"
            )
        }
        other => panic!("expected held, got {other:?}"),
    }
    assert_eq!(
        a.commit(&k, &lease, b"v1", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Stored)
    );
    match b.get_or_lease(&k, &request(LEASE)).await {
        Ok(Lookup::Hit(stored)) => {
            assert_eq!(stored.bytes, b"v1");
            let left = stored.remaining.unwrap_or_default();
            assert!(left <= TTL && left > TTL / 2, "value remaining {left:?}");
        }
        other => panic!("expected a hit, got {other:?}"),
    }
    // A value that cannot be decoded is overwritten: OverAnyValue grants.
    let ignore = LeaseRequest {
        grant: Grant::OverAnyValue,
        ..request(LEASE)
    };
    let second = match b.get_or_lease(&k, &ignore).await {
        Ok(Lookup::Granted(lease)) => lease,
        other => panic!("expected a grant over the value, got {other:?}"),
    };
    assert_ne!(second.token(), lease.token(), "tokens are fresh per grant");
    assert_eq!(
        b.commit(&k, &second, b"v2", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Stored)
    );
    assert_eq!(value(a, &k).await.as_deref(), Some(&b"v2"[..]));
}

/// A commit wakes the listeners of a caller that found the lease held (and
/// those of a value it replaces); the fill of an absent key no one waits
/// for announces nothing.
async fn check_commit_notifies(a: &RedisStore, b: &RedisStore, ns: &str) {
    let quiet = key(ns, "notify-quiet");
    // A key announced on the same channel (its bucket's, on a cluster),
    // so its message comes after any the commit sent.
    let bucket = |k: &StoreKey| {
        RedisStore::keys_of(k)
            .value
            .split_once('{')
            .map(|(_, b)| b[..4].to_owned())
    };
    let later = (0..)
        .map(|i| key(ns, &format!("notify-later-{i}")))
        .find(|k| bucket(k) == bucket(&quiet))
        .expect("a key in the same bucket");
    let mut unasked = subscribed_listener(b, &quiet).await;
    let mut after = b.listen(&later);
    let lease = grant(a, &quiet, LEASE).await;
    // Granted where no value was: its commit replaces none, so it tells
    // no one unless someone waits.
    assert!(!lease.over_value(), "{lease:?}");
    assert_eq!(
        a.commit(&quiet, &lease, b"v", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Stored)
    );
    a.set(&later, b"later", TTL, corral::store::Origin::new(0))
        .await
        .expect("set");
    within(PROMPT, "the later set heard", after.changed()).await;
    assert!(
        !is_woken(&mut unasked).await,
        "a cold fill no one waited for woke a listener"
    );
    let over = LeaseRequest {
        grant: Grant::OverAnyValue,
        ..request(LEASE)
    };
    let replace = match a.get_or_lease(&quiet, &over).await {
        Ok(Lookup::Granted(lease)) => lease,
        other => panic!("expected a grant over the value, got {other:?}"),
    };
    assert!(replace.over_value(), "{replace:?}");
    assert_eq!(
        a.commit(&quiet, &replace, b"v2", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Stored)
    );
    within(
        PROMPT,
        "listener woken by a replacing commit",
        unasked.changed(),
    )
    .await;

    let k = key(ns, "notify");
    let other = key(ns, "notify-other");
    let mut listener = subscribed_listener(b, &k).await;
    let mut bystander = b.listen(&other);
    let lease = grant(a, &k, LEASE).await;
    assert!(matches!(
        b.get_or_lease(&k, &request(LEASE)).await,
        Ok(Lookup::Held { .. })
    ));
    assert_eq!(
        a.commit(&k, &lease, b"v", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Stored)
    );
    within(PROMPT, "listener woken by commit", listener.changed()).await;
    assert!(
        !is_woken(&mut bystander).await,
        "another key's listener stayed asleep"
    );
    assert_eq!(value(b, &k).await.as_deref(), Some(&b"v"[..]));
}

async fn check_release_and_notify(a: &RedisStore, b: &RedisStore, ns: &str) {
    let k = key(ns, "release");
    let lease = grant(a, &k, LEASE).await;
    let mut listener = subscribed_listener(b, &k).await;
    assert!(matches!(
        b.get_or_lease(&k, &request(LEASE)).await,
        Ok(Lookup::Held { .. })
    ));
    a.release(&k, &lease).await.expect("release");
    within(PROMPT, "listener woken by release", listener.changed()).await;
    let next = grant(b, &k, LEASE).await;
    // The old lease no longer owns anything: releasing it again is a no-op.
    a.release(&k, &lease).await.expect("stale release");
    assert!(matches!(
        a.get_or_lease(&k, &request(LEASE)).await,
        Ok(Lookup::Held { .. })
    ));
    assert_eq!(
        b.commit(
            &k,
            &next,
            b"after-release",
            TTL,
            corral::store::Origin::new(0)
        )
        .await
        .ok(),
        Some(Commit::Stored)
    );
    // Its commit is refused: the release deleted its lease, the fence.
    assert_eq!(
        a.commit(&k, &lease, b"stale", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Refused)
    );
    assert_eq!(value(a, &k).await.as_deref(), Some(&b"after-release"[..]));
}

async fn check_refused_after_invalidate(a: &RedisStore, b: &RedisStore, ns: &str) {
    let k = key(ns, "refused-invalidate");
    let lease = grant(a, &k, LEASE).await;
    let mut listener = subscribed_listener(a, &k).await;
    b.invalidate(&k, corral::store::Origin::new(0))
        .await
        .expect("invalidate");
    within(PROMPT, "listener woken by invalidate", listener.changed()).await;
    assert_eq!(
        a.commit(&k, &lease, b"stale", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Refused)
    );
    assert_eq!(value(a, &k).await, None, "the invalidation won");
    // The invalidation dropped the lease too: the next caller is granted.
    let next = grant(b, &k, LEASE).await;
    assert_eq!(
        b.commit(&k, &next, b"fresh", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Stored)
    );
}

async fn check_refused_after_set(a: &RedisStore, b: &RedisStore, ns: &str) {
    let k = key(ns, "refused-set");
    let lease = grant(a, &k, LEASE).await;
    let mut listener = subscribed_listener(a, &k).await;
    b.set(&k, b"written", TTL, corral::store::Origin::new(0))
        .await
        .expect("set");
    within(PROMPT, "listener woken by set", listener.changed()).await;
    assert_eq!(
        a.commit(&k, &lease, b"stale", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Refused)
    );
    assert_eq!(value(a, &k).await.as_deref(), Some(&b"written"[..]));
    // The set dropped the lease: its renewal fails.
    assert_eq!(a.renew(&k, &lease, &request(LEASE)).await.ok(), Some(false));
}

async fn check_refused_after_lapse(a: &RedisStore, b: &RedisStore, ns: &str) {
    let k = key(ns, "refused-lapse");
    let short = Duration::from_millis(100);
    let lapsed = grant(a, &k, short).await;
    // Sleep past the lease's TTL (Redis expires it by its own clock).
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    let next = grant(b, &k, LEASE).await;
    assert_eq!(
        a.renew(&k, &lapsed, &request(LEASE)).await.ok(),
        Some(false)
    );
    assert_eq!(
        a.commit(&k, &lapsed, b"late", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Refused)
    );
    // The refused commit did not release the next leader's lease.
    assert!(matches!(
        a.get_or_lease(&k, &request(LEASE)).await,
        Ok(Lookup::Held { .. })
    ));
    assert_eq!(
        b.commit(&k, &next, b"next", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Stored)
    );
    assert_eq!(value(a, &k).await.as_deref(), Some(&b"next"[..]));
    // A lapsed leader whose lease key still holds its token may commit
    // (nobody else took over): the fence, not the lease's liveness, decides.
    let k2 = key(ns, "lapse-uncontended");
    let alone = grant(a, &k2, short).await;
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    assert_eq!(
        a.commit(&k2, &alone, b"late-ok", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Stored)
    );
}

async fn check_renew(a: &RedisStore, b: &RedisStore, ns: &str) {
    let k = key(ns, "renew");
    let short = Duration::from_millis(400);
    let lease = grant(a, &k, short).await;
    let intruder = Lease::new("0123456789abcdef0123456789abcdef");
    assert_eq!(
        b.renew(&k, &intruder, &request(LEASE)).await.ok(),
        Some(false)
    );
    assert_eq!(a.renew(&k, &lease, &request(LEASE)).await.ok(), Some(true));
    // Past the original TTL the renewed lease still holds.
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    match b.get_or_lease(&k, &request(LEASE)).await {
        Ok(Lookup::Held {
            remaining: Some(left),
        }) => {
            assert!(left > short, "renewed lease has {left:?} left")
        }
        other => panic!("expected the renewed lease held, got {other:?}"),
    }
    assert_eq!(
        a.commit(&k, &lease, b"renewed", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Stored)
    );
    assert_eq!(
        a.renew(&k, &lease, &request(LEASE)).await.ok(),
        Some(false),
        "committed leases are gone"
    );
    // A lease that lapsed and that no grant took over is its leader's
    // still: renewed, it is live again.
    let k = key(ns, "renew-lapsed");
    let lapsed = grant(a, &k, short).await;
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    assert_eq!(
        a.renew(&k, &lapsed, &request(LEASE)).await.ok(),
        Some(true),
        "a lapsed lease no one took over"
    );
    assert!(
        matches!(
            b.get_or_lease(&k, &request(LEASE)).await,
            Ok(Lookup::Held { .. })
        ),
        "live again"
    );
}

async fn check_set_invalidate(a: &RedisStore, b: &RedisStore, ns: &str) {
    let k = key(ns, "set-invalidate");
    assert_eq!(value(a, &k).await, None);
    a.set(&k, b"one", TTL, corral::store::Origin::new(0))
        .await
        .expect("set");
    assert_eq!(value(b, &k).await.as_deref(), Some(&b"one"[..]));
    b.set(&k, b"two", TTL, corral::store::Origin::new(0))
        .await
        .expect("set again");
    assert_eq!(value(a, &k).await.as_deref(), Some(&b"two"[..]));
    a.invalidate(&k, corral::store::Origin::new(0))
        .await
        .expect("invalidate");
    assert_eq!(value(b, &k).await, None);
    b.invalidate(&k, corral::store::Origin::new(0))
        .await
        .expect("invalidate a missing key");
    // Binary values and a short TTL that Redis expires.
    let binary: Vec<u8> = (0..=255u8).collect();
    a.set(
        &k,
        &binary,
        Duration::from_millis(150),
        corral::store::Origin::new(0),
    )
    .await
    .expect("set binary");
    let stored = b.get(&k).await.expect("get").expect("present");
    assert_eq!(stored.bytes, binary);
    assert!(stored.remaining.unwrap_or_default() <= Duration::from_millis(150));
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(value(b, &k).await, None, "expired by Redis");
}

/// Keys that would break a naive hash tag, and the longest key: full cycle.
async fn check_odd_keys(a: &RedisStore, b: &RedisStore, ns: &str) {
    let longest = "}{".repeat(MAX_KEY_LEN / 2);
    let longest_multibyte = "é".repeat(MAX_KEY_LEN / 2);
    let odd = [
        "plain",
        "{",
        "}",
        "}leading",
        "a{b}c",
        "{}",
        "{tag}rest",
        "}{x}{",
        "ключ {with} spaces:colons",
        longest.as_str(),
        longest_multibyte.as_str(),
    ];
    assert_eq!(longest.len(), MAX_KEY_LEN);
    assert_eq!(longest_multibyte.len(), MAX_KEY_LEN);
    for raw in odd {
        let k = key(ns, raw);
        let mut listener = subscribed_listener(b, &k).await;
        let lease = grant(a, &k, LEASE).await;
        assert!(
            matches!(
                b.get_or_lease(&k, &request(LEASE)).await,
                Ok(Lookup::Held { .. })
            ),
            "{raw:?}"
        );
        assert_eq!(
            a.renew(&k, &lease, &request(LEASE)).await.ok(),
            Some(true),
            "{raw:?}"
        );
        assert_eq!(
            a.commit(
                &k,
                &lease,
                raw.as_bytes(),
                TTL,
                corral::store::Origin::new(0)
            )
            .await
            .ok(),
            Some(Commit::Stored),
            "{raw:?}"
        );
        within(PROMPT, "listener of an odd key", listener.changed()).await;
        assert_eq!(
            value(b, &k).await.as_deref(),
            Some(raw.as_bytes()),
            "{raw:?}"
        );
        b.set(&k, b"set", TTL, corral::store::Origin::new(0))
            .await
            .expect("set");
        a.invalidate(&k, corral::store::Origin::new(0))
            .await
            .expect("invalidate");
        assert_eq!(value(a, &k).await, None, "{raw:?}");
        let next = grant(b, &k, LEASE).await;
        b.release(&k, &next).await.expect("release");
    }
    // Keys are distinct: none of them read another's value.
    for (i, raw) in odd.iter().enumerate() {
        a.set(
            &key(ns, raw),
            i.to_string().as_bytes(),
            TTL,
            corral::store::Origin::new(0),
        )
        .await
        .expect("set");
    }
    for (i, raw) in odd.iter().enumerate() {
        assert_eq!(
            value(b, &key(ns, raw)).await,
            Some(i.to_string().into_bytes()),
            "{raw:?}"
        );
    }
}

/// Namespaces are separate: the same user key in two namespaces.
async fn check_namespaces(a: &RedisStore, b: &RedisStore, ns: &str) {
    let one = key(&format!("{ns}1"), "shared");
    let two = key(&format!("{ns}2"), "shared");
    a.set(&one, b"one", TTL, corral::store::Origin::new(0))
        .await
        .expect("set");
    assert_eq!(value(b, &two).await, None);
    let mut listener = subscribed_listener(b, &two).await;
    let lease = grant(a, &two, LEASE).await;
    assert!(matches!(
        b.get_or_lease(&two, &request(LEASE)).await,
        Ok(Lookup::Held { .. })
    ));
    a.invalidate(&one, corral::store::Origin::new(0))
        .await
        .expect("invalidate");
    assert!(!is_woken(&mut listener).await);
    assert_eq!(
        a.commit(&two, &lease, b"two", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Stored)
    );
    within(
        PROMPT,
        "listener in the second namespace",
        listener.changed(),
    )
    .await;
}

/// A refresh asks for its lease over the generation it read: a commit,
/// `set` or `invalidate` landing in between makes the answer `Changed`.
async fn generations<S: Store>(a: &S, b: &S, ns: &str) {
    let k = key(ns, "generations");
    let over = |generation| LeaseRequest {
        grant: Grant::OverGeneration(generation),
        ..request(LEASE)
    };
    let lease = match a.get_or_lease(&k, &request(LEASE)).await {
        Ok(Lookup::Granted(lease)) => lease,
        other => panic!("expected a grant, got {other:?}"),
    };
    assert_eq!(
        a.commit(&k, &lease, b"v1", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Stored)
    );
    let read = match b.get_or_lease(&k, &request(LEASE)).await {
        Ok(Lookup::Hit(stored)) => stored,
        other => panic!("expected a hit, got {other:?}"),
    };
    // Redis adds the value's expiry where the store reads the server's
    // clock (so a reader needs no `PTTL`).
    assert!(
        read.generation
            .as_deref()
            .is_some_and(|generation| generation.starts_with(lease.token())),
        "a commit keeps its token: {read:?}"
    );
    assert_eq!(
        b.get(&k).await.ok().flatten().map(|s| s.generation),
        Some(read.generation.clone())
    );

    // Over the generation read: granted, and a second refresher over the
    // same generation gets no lease (`Held` where the generation is the
    // value's own, as in Redis; `Changed` where it is the fence, which the
    // grant moved, as in `MemoryStore`).
    let refresh = match b.get_or_lease(&k, &over(read.generation.clone())).await {
        Ok(Lookup::Granted(lease)) => lease,
        other => panic!("expected a grant over the generation read, got {other:?}"),
    };
    assert!(matches!(
        a.get_or_lease(&k, &over(read.generation.clone())).await,
        Ok(Lookup::Held { .. } | Lookup::Changed)
    ));
    assert_eq!(
        b.commit(&k, &refresh, b"v2", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Stored)
    );

    // A generation that moved: by a commit, by a set, by an invalidate.
    assert_eq!(
        a.get_or_lease(&k, &over(read.generation.clone()))
            .await
            .ok(),
        Some(Lookup::Changed)
    );
    let current = b.get(&k).await.ok().flatten().and_then(|s| s.generation);
    a.set(&k, b"v3", TTL, corral::store::Origin::new(0))
        .await
        .expect("set");
    assert_eq!(
        a.get_or_lease(&k, &over(current)).await.ok(),
        Some(Lookup::Changed),
        "set moved it"
    );
    let current = b.get(&k).await.ok().flatten().and_then(|s| s.generation);
    assert!(current.is_some(), "a set writes a new generation");
    a.invalidate(&k, corral::store::Origin::new(0))
        .await
        .expect("invalidate");
    assert_eq!(
        a.get_or_lease(&k, &over(current)).await.ok(),
        Some(Lookup::Changed),
        "invalidate removed it"
    );
    assert_eq!(
        a.get_or_lease(&k, &over(None)).await.ok(),
        Some(Lookup::Changed),
        "no value, no grant"
    );
}

/// A refresh lease granted to another process over the value read, which
/// lapsed while its fence lives on, does not block the next refresh over
/// that value (no livelock until the fence expires); the lapsed leader's
/// late commit is still refused.
/// A lease request right after the store's own plain read found the key
/// absent goes in plain commands (`SET NX`, then the value read again):
/// granted while the key stays absent; held (the script decides once the
/// lease key is taken) for another store; and a hit, its lease handed back,
/// when a value landed between the read and the request.
async fn check_lease_after_a_plain_miss(a: &RedisStore, b: &RedisStore, ns: &str) {
    let k = key(ns, "after-a-miss");
    assert_eq!(value(a, &k).await, None);
    let lease = grant(a, &k, LEASE).await;
    assert!(!lease.over_value(), "the plain lease found no value");
    assert_eq!(value(b, &k).await, None);
    match b.get_or_lease(&k, &request(LEASE)).await {
        Ok(Lookup::Held { remaining: Some(_) }) => {}
        other => panic!("expected the lease held, got {other:?}"),
    }
    let origin = corral::store::Origin::new(0);
    assert_eq!(
        a.commit(&k, &lease, b"filled", TTL, origin).await.ok(),
        Some(Commit::Stored)
    );
    assert_eq!(value(b, &k).await.as_deref(), Some(&b"filled"[..]));

    let k = key(ns, "landed-meanwhile");
    assert_eq!(value(a, &k).await, None);
    b.set(&k, b"landed", TTL, origin).await.expect("set");
    match a.get_or_lease(&k, &request(LEASE)).await {
        Ok(Lookup::Hit(stored)) => {
            assert_eq!(stored.bytes, b"landed");
            assert!(stored.remaining.is_some_and(|left| left <= TTL));
        }
        other => panic!("expected the value that landed, got {other:?}"),
    }
    // The lease taken for nothing is gone: a grant over the value is
    // not held up by it.
    let over_any = LeaseRequest {
        grant: Grant::OverAnyValue,
        ..request(LEASE)
    };
    assert!(
        matches!(b.get_or_lease(&k, &over_any).await, Ok(Lookup::Granted(_))),
        "a lease was left behind"
    );
}

async fn check_refresh_after_lapsed_lease(a: &RedisStore, b: &RedisStore, ns: &str) {
    let k = key(ns, "refresh-after-lapse");
    let over = |generation, lease| LeaseRequest {
        grant: Grant::OverGeneration(generation),
        ..request(lease)
    };
    let first = grant(a, &k, LEASE).await;
    assert_eq!(
        a.commit(&k, &first, b"v1", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Stored)
    );
    let read = b.get(&k).await.expect("get").expect("present").generation;
    assert!(read
        .as_deref()
        .is_some_and(|generation| generation.starts_with(first.token())));

    // The other process's refresh: a short lease, a fence for 10 s.
    let short = Duration::from_millis(100);
    let lapsed = match a.get_or_lease(&k, &over(read.clone(), short)).await {
        Ok(Lookup::Granted(lease)) => lease,
        other => panic!("expected the first refresh granted, got {other:?}"),
    };
    assert!(
        matches!(
            b.get_or_lease(&k, &over(read.clone(), LEASE)).await,
            Ok(Lookup::Held { .. })
        ),
        "while the other refresh lives, this one waits its turn"
    );
    // Sleep past the lease's TTL (it lapses; its key, the fence, stays).
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    let refresh = match b.get_or_lease(&k, &over(read.clone(), LEASE)).await {
        Ok(Lookup::Granted(lease)) => lease,
        other => panic!("a lapsed lease blocked the refresh: {other:?}"),
    };
    assert_eq!(
        a.commit(&k, &lapsed, b"late", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Refused),
        "the lapsed leader's fence moved"
    );
    assert_eq!(
        b.commit(&k, &refresh, b"v2", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Stored)
    );
    let now = a.get(&k).await.expect("get").expect("present");
    assert_eq!(now.bytes, b"v2");
    assert!(now
        .generation
        .as_deref()
        .is_some_and(|generation| generation.starts_with(refresh.token())));
}

async fn check_generations(a: &RedisStore, b: &RedisStore, ns: &str) {
    generations(a, b, ns).await;
}

#[tokio::test]
async fn memory_store_generations() {
    let store = corral::store::MemoryStore::new();
    generations(&store, &store.clone(), "test:v1").await;
}

// ---------------------------------------------------------------------------
// Standalone server.
// ---------------------------------------------------------------------------

macro_rules! standalone_contract {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $name() {
            let server = RedisServer::start();
            let a = connect(&server).await;
            let b = connect(&server).await;
            within(Duration::from_secs(30), stringify!($name), super::$name(&a, &b, "test:v1")).await;
        }
    )*};
}

mod standalone {
    use super::*;

    standalone_contract!(
        check_hit_granted_held,
        check_commit_notifies,
        check_release_and_notify,
        check_refused_after_invalidate,
        check_refused_after_set,
        check_refused_after_lapse,
        check_renew,
        check_set_invalidate,
        check_odd_keys,
        check_namespaces,
        check_generations,
        check_refresh_after_lapsed_lease,
        check_lease_after_a_plain_miss,
    );
}

/// After warm-up, reads are one pipelined `PTTL` + `GET` (no script), an
/// invalidation a pipelined `DEL` + announcement, and every other operation
/// one `EVALSHA`; `get_or_lease` reads first and runs its script only on a
/// miss. No `EVAL`, no `SCRIPT LOAD`, no `NOSCRIPT`
/// retry.
#[tokio::test]
async fn commands_per_operation() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    server.reset_stats();
    let expected = run_every_operation(&store, "stats:v1", true).await;
    let stats = server.command_stats();
    assert_commands(&stats, expected, &server.log());
}

/// The commands [`run_every_operation`] sends.
#[derive(Debug, Clone, Copy)]
struct Commands {
    evalsha: u64,
    /// `PTTL`s: plain reads and the lease script's "hit" and "held" answers.
    reads: u64,
}

/// Runs each store operation once on a fresh key; returns the commands.
/// `plain_leases`: the store asks for a lease over no value in plain
/// commands (`SET NX` + `GET`; it reads the server's clock, so a value
/// found names its expiry: a standalone server), not with the script (a
/// cluster).
async fn run_every_operation(store: &RedisStore, ns: &str, plain_leases: bool) -> Commands {
    let k = key(ns, "ops");
    let lease = grant(store, &k, LEASE).await; // evalsha, or plain
    assert_eq!(
        store.renew(&k, &lease, &request(LEASE)).await.ok(),
        Some(true)
    ); // evalsha
    assert_eq!(
        store
            .commit(&k, &lease, b"v", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Stored)
    ); // evalsha
    assert!(matches!(
        store.get_or_lease(&k, &request(LEASE)).await,
        Ok(Lookup::Hit(_))
    )); // evalsha (a hit: the store recalls the value it wrote, so the
        // script, which reads it with its PTTL, never a lease for nothing)
        // A plain GET: the store remembers the value's expiry from the lease
        // script's answer.
    assert!(value(store, &k).await.is_some()); // read
    store
        .set(&k, b"w", TTL, corral::store::Origin::new(0))
        .await
        .expect("set"); // evalsha
    store
        .invalidate(&k, corral::store::Origin::new(0))
        .await
        .expect("invalidate"); // DEL + PUBLISH, pipelined
    let again = grant(store, &k, LEASE).await; // evalsha, or plain
    store.release(&k, &again).await.expect("release"); // evalsha
                                                       // PTTL: only inside the lease script's answer "hit".
    Commands {
        evalsha: if plain_leases { 5 } else { 7 },
        reads: 1,
    }
}

fn assert_commands(stats: &std::collections::BTreeMap<String, u64>, expected: Commands, log: &str) {
    let context = || format!("commandstats {stats:?}\n{}", log_tail(log));
    assert_eq!(
        stats.get("evalsha").copied(),
        Some(expected.evalsha),
        "{}",
        context()
    );
    // `GET` also runs inside the scripts, and `PTTL` inside the lease
    // script when it answers "hit" or "held".
    assert_eq!(
        stats.get("pttl").copied(),
        Some(expected.reads),
        "{}",
        context()
    );
    for name in [
        "eval",
        "eval_ro",
        "evalsha_ro",
        "script|load",
        "script|exists",
        "multi",
        "exec",
    ] {
        assert_eq!(stats.get(name), None, "{name} after warm-up: {}", context());
    }
}

/// The Redis key holding the value of `user` in `namespace`.
fn value_key(namespace: &str, user: &str) -> String {
    corral::RedisStore::keys_of(&corral::store::StoreKey::new(namespace, user)).value
}

/// Bytes in Redis that are not a well-framed value — foreign, truncated,
/// framed with a bad token, framed around garbage — are a miss the cache
/// counts as a decode failure, and the next fill overwrites them (its
/// refresh asks over the generation read: none, or the frame's). An
/// unframed envelope (as written before values were framed) is served, with
/// no generation, and can be refreshed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unframed_bytes_are_a_counted_miss_and_overwritten() {
    use corral::Cache;

    let server = RedisServer::start();
    let store = connect(&server).await;
    let cache = Cache::<String>::builder("foreign")
        .store(store.clone())
        .l1(false)
        .ttl(Duration::from_secs(60))
        .build()
        .expect("cache");
    let client = redis::Client::open(server.url()).expect("client");
    let mut raw = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let token = "0123456789abcdef0123456789abcdef";
    let tagged = |n: u8, rest: &[&[u8]]| [&[0xC0, n][..], &rest.concat()].concat();
    let cases: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        ("empty", Vec::new(), None),
        ("foreign text", b"{\"json\": true}".to_vec(), None),
        ("tag alone", vec![0xC0], None),
        ("zero-length token", tagged(0, &[b"rest"]), None),
        ("token past the end", tagged(40, &[token.as_bytes()]), None),
        ("upper-case token", tagged(4, &[b"ABCD", b"rest"]), None),
        ("non-hex token", tagged(4, &[b"wxyz", b"rest"]), None),
        (
            "non-UTF-8 token",
            tagged(2, &[&[0xff, 0xfe], b"rest"]),
            None,
        ),
        (
            "framed garbage",
            tagged(32, &[token.as_bytes(), b"not an envelope"]),
            Some(token),
        ),
    ];
    for (i, (what, bytes, generation)) in cases.iter().enumerate() {
        let user = format!("k{i}");
        let name = value_key(cache.namespace(), &user);
        let () = redis::cmd("SET")
            .arg(&name)
            .arg(bytes.as_slice())
            .arg("EX")
            .arg(60)
            .query_async(&mut raw)
            .await
            .expect("SET");
        let k = StoreKey::new(cache.namespace(), &user);
        let read = store.get(&k).await.expect("get").expect("present");
        assert_eq!(read.generation.as_deref(), *generation, "{what}");
        if generation.is_none() {
            assert_eq!(&read.bytes, bytes, "{what}: unframed bytes pass whole");
        }
        assert_eq!(cache.peek(&user).await.expect("get"), None, "{what}");
        let filled = cache
            .get_or_fill(&user, move || async move {
                Ok::<_, std::io::Error>(format!("filled {i}"))
            })
            .await
            .expect("fill over foreign bytes");
        assert_eq!(filled, format!("filled {i}"), "{what}");
        assert_eq!(
            cache.peek(&user).await.expect("get"),
            Some(format!("filled {i}")),
            "{what}: overwritten"
        );
        let now = store.get(&k).await.expect("get").expect("present");
        assert!(
            now.generation.is_some(),
            "{what}: the fill framed its value"
        );
        assert_ne!(now.generation.as_deref(), *generation, "{what}");
    }
    let stats = cache.stats();
    assert_eq!(
        stats.decode_failures,
        2 * cases.len() as u64,
        "one by get, one by get_or_fill, per case: {stats:?}"
    );

    // An unframed envelope is served as is, without a generation, and a
    // refresh over "no generation" replaces it.
    cache.set("framed", "legacy".to_owned()).await.expect("set");
    let framed: Vec<u8> = redis::cmd("GET")
        .arg(value_key(cache.namespace(), "framed"))
        .query_async(&mut raw)
        .await
        .expect("GET");
    let envelope = &framed[2 + usize::from(framed[1])..];
    let () = redis::cmd("SET")
        .arg(value_key(cache.namespace(), "legacy"))
        .arg(envelope)
        .arg("EX")
        .arg(60)
        .query_async(&mut raw)
        .await
        .expect("SET");
    assert_eq!(
        cache.peek("legacy").await.expect("get"),
        Some("legacy".to_owned())
    );
    let k = StoreKey::new(cache.namespace(), "legacy");
    let read = store.get(&k).await.expect("get").expect("present");
    assert_eq!((read.bytes.as_slice(), read.generation), (envelope, None));
    let over_none = LeaseRequest {
        grant: Grant::OverGeneration(None),
        ..request(LEASE)
    };
    let lease = match store.get_or_lease(&k, &over_none).await {
        Ok(Lookup::Granted(lease)) => lease,
        other => panic!("expected a refresh over no generation, got {other:?}"),
    };
    assert_eq!(
        store
            .commit(&k, &lease, b"refreshed", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Stored)
    );
    let now = store.get(&k).await.expect("get").expect("present");
    assert_eq!(now.bytes, b"refreshed");
    assert!(now
        .generation
        .as_deref()
        .is_some_and(|generation| generation.starts_with(lease.token())));
    assert_eq!(cache.stats().decode_failures, 2 * cases.len() as u64);
}

/// A frozen server: every call reports a timeout within the op timeout;
/// once thawed, calls work again.
#[tokio::test]
async fn frozen_server_times_out_promptly() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let k = key("frozen:v1", "k");
    let lease = grant(&store, &k, LEASE).await;
    server.freeze();
    let started = Instant::now();
    let mut worst = Duration::ZERO;
    for op in 0..7 {
        let begun = Instant::now();
        let result = match op {
            0 => store.get_or_lease(&k, &request(LEASE)).await.map(drop),
            1 => store.get(&k).await.map(drop),
            2 => store.renew(&k, &lease, &request(LEASE)).await.map(drop),
            3 => store
                .commit(&k, &lease, b"v", TTL, corral::store::Origin::new(0))
                .await
                .map(drop),
            4 => store.release(&k, &lease).await,
            5 => {
                store
                    .set(&k, b"v", TTL, corral::store::Origin::new(0))
                    .await
            }
            _ => store.invalidate(&k, corral::store::Origin::new(0)).await,
        };
        let took = begun.elapsed();
        worst = worst.max(took);
        let error = result.expect_err("a frozen server cannot answer");
        assert_eq!(error.kind(), StoreErrorKind::Timeout, "op {op}: {error}");
        assert!(took <= OP_TIMEOUT + SLACK, "op {op} took {took:?}");
    }
    // listen() never waits for Redis.
    let begun = Instant::now();
    let _listener = store.listen(&key("frozen:v2", "k"));
    assert!(begun.elapsed() < Duration::from_millis(50));
    server.thaw();
    let recovered = recover(&store, &k).await;
    eprintln!(
        "frozen: 7 calls timed out in {:?} (worst {worst:?}, op timeout {OP_TIMEOUT:?}); \
         recovered {recovered:?} after thaw",
        started.elapsed()
    );
}

/// Retries `get` until it succeeds (at most [`PROMPT`]); returns the time.
async fn recover(store: &RedisStore, k: &StoreKey) -> Duration {
    let begun = Instant::now();
    let mut last = None;
    while begun.elapsed() < PROMPT {
        match store.get(k).await {
            Ok(_) => return begun.elapsed(),
            Err(e) => {
                assert!(
                    matches!(
                        e.kind(),
                        StoreErrorKind::Timeout | StoreErrorKind::Unavailable
                    ),
                    "{e}"
                );
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    panic!("store did not recover within {PROMPT:?}; last error: {last:?}");
}

/// A killed server: calls fail (unavailable or timeout) promptly; after a
/// restart they work again by themselves, the subscriber reconnects and
/// wakes its listeners, the scripts are cached again with one `EVAL` each,
/// and a commit with a token granted before the restart is refused.
#[tokio::test]
async fn killed_and_restarted_server() {
    let mut server = RedisServer::start();
    let store = connect(&server).await;
    let other = connect(&server).await;
    let k = key("kill:v1", "k");
    let old = grant(&store, &k, LEASE).await;
    let mut listener = subscribed_listener(&other, &k).await;

    server.kill();
    for attempt in 0..3 {
        let begun = Instant::now();
        let error = store.get(&k).await.expect_err("the server is dead");
        let took = begun.elapsed();
        assert!(
            matches!(
                error.kind(),
                StoreErrorKind::Unavailable | StoreErrorKind::Timeout
            ),
            "attempt {attempt}: {error}"
        );
        assert!(
            took <= OP_TIMEOUT + SLACK,
            "attempt {attempt} took {took:?}"
        );
        let error = store
            .set(&k, b"v", TTL, corral::store::Origin::new(0))
            .await
            .expect_err("writes report failure");
        assert!(matches!(
            error.kind(),
            StoreErrorKind::Unavailable | StoreErrorKind::Timeout
        ));
    }
    assert!(
        !is_woken(&mut listener).await,
        "no wake-up while Redis is down"
    );

    let restart = Instant::now();
    server.restart();
    let restarted_in = restart.elapsed();
    let recovered = recover(&store, &k).await;
    let woken = Instant::now();
    within(
        PROMPT,
        "listener woken after the subscriber reconnected",
        listener.changed(),
    )
    .await;
    let woken_after = woken.elapsed() + recovered;
    eprintln!(
        "killed: server restarted in {restarted_in:?}; calls worked again {recovered:?} later; \
         subscriber woke its listener within {woken_after:?} of the restart"
    );

    // Data is gone, and so is the fence of the old grant.
    assert_eq!(
        store
            .commit(&k, &old, b"pre-restart", TTL, corral::store::Origin::new(0))
            .await
            .ok(),
        Some(Commit::Refused)
    );
    assert_eq!(value(&store, &k).await, None);

    // The restarted server lost its script cache: each script costs one
    // EVAL (after one NOSCRIPT), then EVALSHA only.
    run_every_operation(&store, "kill:v2", true).await;
    server.reset_stats();
    let expected = run_every_operation(&store, "kill:v3", true).await;
    assert_commands(&server.command_stats(), expected, &server.log());
}

/// While a killed server is down, calls fail at once as unavailable: they
/// do not wait out the operation timeout (30 s here). After the restart,
/// many concurrent callers share one new connection: the server sees a
/// handful of connections, not one per call.
#[tokio::test]
async fn calls_to_a_dead_server_fail_at_once_and_share_one_reconnection() {
    let mut server = RedisServer::start();
    let patient = config().op_timeout(Duration::from_secs(30));
    let store = RedisStore::connect(&server.url(), patient)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    let k = key("dead:v1", "k");
    value(&store, &k).await;

    server.kill();
    for call in 0..50 {
        let error = store.get(&k).await.expect_err("the server is dead");
        assert_eq!(
            error.kind(),
            StoreErrorKind::Unavailable,
            "call {call}: {error}"
        );
    }

    server.restart();
    recover(&store, &k).await;
    let reads = (0..200).map(|_| store.get(&k));
    for read in futures_util::future::join_all(reads).await {
        read.expect("the server is back");
    }
    let stats = server.cli(&["INFO", "stats"]);
    let connections: u64 = stats
        .lines()
        .find_map(|line| line.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO stats has total_connections_received");
    // The store's command connection, its subscriber, this `redis-cli`,
    // and a retry or two that raced with the restart.
    assert!(
        connections <= 6,
        "{connections} connections since the restart"
    );
}

/// The subscriber task and both connections end when the last store clone
/// is dropped.
#[tokio::test]
async fn dropping_the_store_closes_its_connections() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let clone = store.clone();
    let k = key("drop:v1", "k");
    let listener = subscribed_listener(&store, &k).await;
    assert_eq!(
        subscribers(&server),
        1,
        "{}",
        server.cli(&["CLIENT", "LIST"])
    );
    drop(store);
    assert!(clone.get(&k).await.is_ok(), "a clone keeps working");
    drop((clone, listener));
    let begun = Instant::now();
    loop {
        // Only redis-cli's own connection is left.
        let clients = server.cli(&["CLIENT", "LIST"]);
        if clients.lines().count() == 1 {
            break;
        }
        assert!(
            begun.elapsed() < PROMPT,
            "connections left open:\n{clients}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `attach` subscribes a namespace before any listener exists.
#[tokio::test]
async fn attach_subscribes_the_namespace_channel() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    store.attach("attached:v1");
    store.attach("attached:v1");
    let begun = Instant::now();
    loop {
        let numsub = server.cli(&["PUBSUB", "NUMSUB", "corral:attached:v1:filled"]);
        if numsub.lines().nth(1) == Some("1") {
            break;
        }
        assert!(begun.elapsed() < PROMPT, "not subscribed: {numsub:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!("attach: subscribed within {:?}", begun.elapsed());
    assert_eq!(
        subscribers(&server),
        1,
        "one subscriber connection per store"
    );
}

/// Number of clients subscribed to at least one channel.
fn subscribers(server: &RedisServer) -> usize {
    server
        .cli(&["CLIENT", "LIST"])
        .lines()
        .filter(|line| {
            line.split(' ')
                .any(|field| field.starts_with("sub=") && field != "sub=0")
        })
        .count()
}

/// A store that cannot connect reports it.
#[tokio::test]
async fn connect_to_nothing_fails() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let begun = Instant::now();
    let error = RedisStore::connect(&url, config())
        .await
        .expect_err("nothing listens");
    assert!(
        matches!(
            error.kind(),
            StoreErrorKind::Unavailable | StoreErrorKind::Timeout
        ),
        "{error}"
    );
    assert!(
        begun.elapsed() < Duration::from_secs(2),
        "{:?}",
        begun.elapsed()
    );
    let bad = RedisStore::connect("not a url", config())
        .await
        .expect_err("bad url");
    assert_eq!(bad.kind(), StoreErrorKind::Configuration, "{bad}");
    assert!(!bad.is_retryable(), "{bad}");
    let none = RedisStore::connect_cluster(&[], config())
        .await
        .expect_err("no nodes");
    assert_eq!(none.kind(), StoreErrorKind::Configuration, "{none}");
    assert!(!none.is_retryable(), "{none}");
}

/// Outside a tokio runtime `connect` reports an error instead of panicking.
#[test]
fn connect_outside_a_runtime_is_an_error() {
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    let mut connect = pin!(RedisStore::connect("redis://127.0.0.1:1/", config()));
    match connect
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(Err(e)) => {
            assert_eq!(e.kind(), StoreErrorKind::Configuration, "{e}");
            assert!(!e.is_retryable() && e.is_configuration(), "{e}");
        }
        Poll::Ready(Ok(store)) => panic!("connected without a runtime: {store:?}"),
        Poll::Pending => panic!("connect waited outside a runtime"),
    }
}

/// `connect_lazy` outside a tokio runtime is a programming error, not an
/// outage: not retryable.
#[test]
fn connect_lazy_outside_a_runtime_is_a_configuration_error() {
    let error = RedisStore::connect_lazy("redis://127.0.0.1:1/", config())
        .expect_err("no runtime to connect on");
    assert_eq!(error.kind(), StoreErrorKind::Configuration, "{error}");
    assert!(!error.is_retryable(), "{error}");
    assert!(error.to_string().contains("tokio runtime"), "{error}");
}

// ---------------------------------------------------------------------------
// Cluster: the whole contract on one three-master cluster.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn cluster_contract() {
    let cluster = RedisCluster::start();
    let a = connect_cluster(&cluster).await;
    let b = connect_cluster(&cluster).await;
    let ns = "cluster:v1";
    let begun = Instant::now();
    within(Duration::from_secs(60), "cluster contract", async {
        check_hit_granted_held(&a, &b, ns).await;
        check_commit_notifies(&a, &b, ns).await;
        check_release_and_notify(&a, &b, ns).await;
        check_refused_after_invalidate(&a, &b, ns).await;
        check_refused_after_set(&a, &b, ns).await;
        check_refused_after_lapse(&a, &b, ns).await;
        check_renew(&a, &b, ns).await;
        check_set_invalidate(&a, &b, ns).await;
        check_odd_keys(&a, &b, ns).await;
        check_namespaces(&a, &b, ns).await;
        check_generations(&a, &b, ns).await;
        check_refresh_after_lapsed_lease(&a, &b, ns).await;
        check_lease_after_a_plain_miss(&a, &b, ns).await;
    })
    .await;
    eprintln!("cluster contract ran in {:?}", begun.elapsed());

    // Notices reach a subscriber on one node from keys on every node.
    let mut listeners = Vec::new();
    for i in 0..24 {
        let k = key("spread:v1", &format!("key-{i}"));
        let listener = subscribed_listener(&b, &k).await;
        listeners.push((k, listener));
    }
    for (k, listener) in &mut listeners {
        let lease = grant(&a, k, LEASE).await;
        assert!(matches!(
            b.get_or_lease(k, &request(LEASE)).await,
            Ok(Lookup::Held { .. })
        ));
        assert_eq!(
            a.commit(k, &lease, b"v", TTL, corral::store::Origin::new(0))
                .await
                .ok(),
            Some(Commit::Stored)
        );
        within(PROMPT, "cross-node notice", listener.changed()).await;
    }
    let owners: std::collections::BTreeSet<u16> =
        listeners.iter().map(|(k, _)| owner(&cluster, k)).collect();
    assert_eq!(
        owners.len(),
        3,
        "the keys spread over every master: {owners:?}"
    );

    cluster.reset_stats();
    let expected = run_every_operation(&a, "cluster-stats:v1", false).await;
    assert_commands(&cluster.command_stats(), expected, &cluster.logs());

    cluster_reads_go_to_the_owner(&cluster, &a).await;
}

/// Plain reads (pipelined `PTTL` + `GET`, no script) of keys with braces
/// reach the master owning their slot, on every master.
async fn cluster_reads_go_to_the_owner(cluster: &RedisCluster, store: &RedisStore) {
    let ns = "cluster-reads:v1";
    let mut raws: Vec<String> = ["{", "}", "}leading", "a{b}c", "{}", "{tag}rest", "}{x}{"]
        .iter()
        .map(|raw| (*raw).to_owned())
        .collect();
    raws.extend((0..12).map(|i| format!("{{brace-{i}}}")));
    for raw in &raws {
        store
            .set(
                &key(ns, raw),
                raw.as_bytes(),
                TTL,
                corral::store::Origin::new(0),
            )
            .await
            .expect("set");
    }
    cluster.reset_stats();
    for raw in &raws {
        let k = key(ns, raw);
        let read = store.get(&k).await.expect("get").expect("present");
        assert_eq!(read.bytes, raw.as_bytes(), "{raw:?}");
        assert!(
            read.generation.is_some(),
            "{raw:?}: a set writes a generation"
        );
        let left = read.remaining.unwrap_or_default();
        assert!(left <= TTL && left > TTL / 2, "{raw:?}: {left:?}");
        match store.get_or_lease(&k, &request(LEASE)).await {
            Ok(Lookup::Hit(hit)) => {
                assert_eq!(hit.bytes, read.bytes, "{raw:?}");
                assert_eq!(hit.generation, read.generation, "{raw:?}");
            }
            other => panic!("{raw:?}: expected a hit, got {other:?}"),
        }
    }
    let mut owned = std::collections::BTreeMap::<u16, u64>::new();
    for raw in &raws {
        *owned.entry(owner(cluster, &key(ns, raw))).or_default() += 1;
    }
    assert_eq!(
        owned.len(),
        3,
        "the keys spread over every master: {owned:?}"
    );
    for node in cluster.nodes() {
        let stats = node.command_stats();
        let owned_here = owned.get(&node.port()).copied().unwrap_or(0);
        // Per key it owns: a plain read (a lone GET: the store wrote the
        // value, so it knows its expiry) and the lease script, which answers
        // "hit" (with its own PTTL).
        assert_eq!(
            stats.get("pttl").copied().unwrap_or(0),
            owned_here,
            "node {}: {stats:?}",
            node.port()
        );
        assert_eq!(
            stats.get("evalsha").copied().unwrap_or(0),
            owned_here,
            "node {}: {stats:?}",
            node.port()
        );
    }
}

/// The port of the master holding `k`'s value key (found by asking each
/// node whether it holds the key).
fn owner(cluster: &RedisCluster, k: &StoreKey) -> u16 {
    for node in cluster.nodes() {
        let keys = node.cli(&["--raw", "KEYS", &format!("corral:v:{}:*", k.namespace())]);
        if keys
            .lines()
            .any(|line| line.ends_with(&format!("}}:{}", k.key())))
        {
            return node.port();
        }
    }
    panic!("no node holds {:?}", k.key());
}

//! The Redis commands a cache sends, recorded one by one with `MONITOR`
//! against a real `redis-server` and named in each test.

use std::time::{Duration, Instant};

use corral::{Cache, RedisConfig, RedisStore};
use corral_testkit::{until, Executed, Gate, Monitor, RedisServer};

use crate::support::l1_cache;

/// What a lease request's script did: its own commands tell.
fn lease_answer(command: &Executed) -> &'static str {
    let calls: Vec<&str> = command
        .lua
        .iter()
        .filter_map(|call| call.first().map(String::as_str))
        .collect();
    match calls.as_slice() {
        // `GET value`, `TOUCH` of the clear version guarding it when its
        // turn is due (`redis/read/touches.rs`), `PTTL value`.
        ["GET", "TOUCH", "PTTL"] | ["GET", "PTTL"] => "hit",
        // `GET value`, `SET lease NX` (refused), `PTTL lease`, `GET lease`,
        // `SET` of the waiters mark (the fill's end is announced to it).
        ["GET", "SET", "PTTL", "GET", "SET"] => "held",
        // `GET value`, `SET lease NX`.
        ["GET", "SET"] => "granted",
        _ => "something else",
    }
}

const CALLERS: usize = 100_000;

/// A new cache with an L1 on a new Redis store (as another process would
/// have), once `subscribers` stores subscribed to its namespace's channel
/// (the subscribers' traffic is not recorded anyway; waiting makes the
/// start of the test the same every run). Its leases live 30 s and a
/// waiter re-checks every 30 s: no renewal or poll runs during a test.
async fn new_cache(server: &RedisServer, name: &str, subscribers: usize) -> Cache<String> {
    let store = RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect");
    let cache = Cache::<String>::builder(name)
        .store(store)
        .l1(true)
        .ttl(Duration::from_secs(60))
        .lease_ttl(Duration::from_secs(30))
        .poll_interval(Duration::from_secs(30))
        .fill_timeout(Duration::from_secs(60))
        .build()
        .expect("config");
    let channel = format!("corral:{}:filled", cache.namespace());
    let want = subscribers.to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.cli(&["PUBSUB", "NUMSUB", &channel]).lines().nth(1) != Some(want.as_str()) {
        assert!(Instant::now() < deadline, "the store never subscribed");
        tokio::task::yield_now().await;
    }
    cache
}

/// A client command by what it is: a script by the work its own commands
/// did (corral's scripts are private), anything else by its name.
fn named(command: &Executed) -> String {
    if !matches!(command.name().as_str(), "EVALSHA" | "EVAL") {
        return command.name();
    }
    // EVALSHA sha numkeys key... arg...
    let first_key = command.args.get(3).map(String::as_str).unwrap_or("");
    let first_call = command.lua.first().map(Vec::as_slice).unwrap_or(&[]);
    let reads_first_key =
        first_call.len() == 2 && first_call[0] == "GET" && first_call[1] == first_key;
    let script = if first_key.starts_with("corral:t:") {
        // Reads (or creates) tag versions: keys `corral:t:<ns>:{<ns>}:<tag>`.
        "TAG_VERSIONS"
    } else if reads_first_key && first_key.starts_with("corral:v:") {
        // Reads the value key first: the lease request (mode 0).
        "GET_OR_LEASE"
    } else if first_call.len() == 2
        && first_call[0] == "GET"
        && first_call[1].starts_with("corral:g:")
        && command.args.get(2).is_some_and(|keys| keys == "1")
    {
        // Declares the value alone and reads the lease (named in its
        // arguments) first: the commit (a release and a renewal declare
        // three keys, the write reads no lease).
        "COMMIT"
    } else if first_call.len() == 2
        && first_call[0] == "GET"
        && first_call[1].starts_with("corral:g:")
        && command.args.get(2).is_some_and(|keys| keys == "3")
    {
        // Declares value, lease and waiters mark and reads the lease
        // first: the release deletes, the renewal extends.
        if command
            .lua
            .iter()
            .any(|call| call.first().is_some_and(|c| c == "DEL"))
        {
            "RELEASE"
        } else {
            "RENEW"
        }
    } else {
        "another script"
    };
    script.to_owned()
}

/// Whether `set` and `get` are the plain lease request (`redis/grant.rs`):
/// `SET <lease> <token>.<hold> NX PX <fence>`, then `GET` of the value.
fn plain_lease(set: &Executed, get: &Executed) -> bool {
    set.name() == "SET"
        && set
            .args
            .get(1)
            .is_some_and(|key| key.starts_with("corral:g:"))
        && set.args.iter().any(|arg| arg == "NX")
        && get.name() == "GET"
        && get
            .args
            .get(1)
            .is_some_and(|key| key.starts_with("corral:v:"))
        && set.client == get.client
}

fn names(commands: &[Executed]) -> Vec<String> {
    commands.iter().map(named).collect()
}

/// The commands recorded since the last call, but the `TOUCH`es of clear
/// versions a read sends only when their turn is due
/// (`redis/read/touches.rs`).
fn untouched(monitor: &mut Monitor<'_>) -> Vec<Executed> {
    monitor
        .commands()
        .into_iter()
        .filter(|command| command.name() != "TOUCH")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_callers_on_a_cold_key_cost_one_fill_a_plain_lease_and_the_commit() {
    let server = RedisServer::start();
    let cache = new_cache(&server, "herd", 1).await;
    let mut monitor = server.monitor();

    let gate = Gate::new();
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (cache, gate) = (cache.clone(), gate.clone());
            tokio::spawn(async move {
                cache
                    .get_or_fill("cold", move || async move {
                        gate.wait().await;
                        Ok::<_, String>("v".to_owned())
                    })
                    .await
            })
        })
        .collect();
    until("every caller joined the flight", || {
        cache.stats().coalesced == CALLERS as u64 - 1
    })
    .await;
    gate.open();
    for caller in callers {
        assert_eq!(caller.await.expect("task").expect("value"), "v");
    }
    assert_eq!(cache.stats().fills, 1, "one fill");

    let commands = monitor.commands();
    assert_eq!(
        names(&commands),
        [
            // The flight's first step is the lease request, in plain
            // commands pipelined in one round trip (nothing learnt yet:
            // such requests are taken to find no value): `SET <lease> NX`
            // grants the lease, the `GET` finds the value absent.
            "SET",
            "GET",
            // The new cache does not know its namespace's clear version
            // yet: the fill's entry is stamped with it, read before the
            // fill runs.
            "TAG_VERSIONS",
            // The fenced write of the fill's value, the unlock and the
            // notification, in one script.
            "COMMIT",
        ],
        "{commands:#?}"
    );
    assert!(plain_lease(&commands[0], &commands[1]), "{commands:#?}");
    let commit = &commands[3];
    assert!(
        commit.ran("SET", &commit.args[3]),
        "the value key was written: {commit:?}"
    );
    assert_eq!(commit.args[2], "1", "the commit declares the value alone");

    // Every caller was answered from the flight: the value is in the L1,
    // and the next read sends nothing.
    let again = cache
        .get_or_fill("cold", || async { Ok::<_, String>("again".to_owned()) })
        .await;
    assert_eq!(again.expect("value"), "v");
    assert_eq!(names(&monitor.commands()), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_another_process_behind_an_l1_costs_three_lease_requests() {
    let server = RedisServer::start();
    let leader = new_cache(&server, "shared", 1).await;
    // Another store: another connection, as another process has.
    let waiter = new_cache(&server, "shared", 2).await;
    let mut monitor = server.monitor();

    let (started, gate) = (Gate::new(), Gate::new());
    let filling = {
        let (leader, started, gate) = (leader.clone(), started.clone(), gate.clone());
        tokio::spawn(async move {
            leader
                .get_or_fill("k", move || async move {
                    started.open();
                    gate.wait().await;
                    Ok::<_, String>("from the leader".to_owned())
                })
                .await
        })
    };
    // The fill runs once its entry's stamps were read.
    started.wait().await;
    let commands = monitor.commands();
    assert_eq!(
        names(&commands),
        [
            // Granted in plain commands: the key is absent.
            "SET",
            "GET",
            // The leader's cache is new: its clear version, read once.
            "TAG_VERSIONS",
        ],
        "{commands:#?}"
    );
    assert!(plain_lease(&commands[0], &commands[1]), "{commands:#?}");

    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            waiter
                .get_or_fill("k", || async { Ok::<_, String>("never".to_owned()) })
                .await
        })
    };
    until("the waiter found the lease held", || {
        waiter.stats().lease_waits == 1
    })
    .await;
    let commands = monitor.commands();
    // The waiter's flight's first request, in plain commands, finds the
    // lease held (`SET NX` refused) and no value; the script then answers
    // "held" and sets the waiters mark atomically. It waits for the
    // leader's notification (no poll within 30 s).
    assert_eq!(
        names(&commands),
        ["SET", "GET", "GET_OR_LEASE"],
        "{commands:#?}"
    );
    assert!(plain_lease(&commands[0], &commands[1]), "{commands:#?}");
    assert_eq!(lease_answer(&commands[2]), "held", "{commands:#?}");
    let waiter_client = commands[2].client.clone();
    assert_eq!(commands[0].client, waiter_client, "{commands:#?}");

    gate.open();
    let value = filling.await.expect("task").expect("value");
    assert_eq!(value, "from the leader");
    let value = waiting.await.expect("task").expect("value");
    assert_eq!(value, "from the leader");
    let commands = monitor.commands();
    assert_eq!(
        names(&commands),
        [
            // The leader's fenced write, unlock and notification.
            "COMMIT",
            // Woken by it, the waiter asks again, with the script (the
            // key is awaited: its value is most likely there), and finds
            // the value.
            "GET_OR_LEASE",
            // The waiter's cache is new too: the clear version the entry
            // is stamped with is checked against the current one, read
            // once.
            "TAG_VERSIONS",
        ],
        "{commands:#?}"
    );
    assert_ne!(commands[0].client, waiter_client, "the leader commits");
    assert_eq!(commands[1].client, waiter_client, "{commands:#?}");
    assert_eq!(commands[2].client, waiter_client, "{commands:#?}");
    assert_eq!(lease_answer(&commands[1]), "hit", "{commands:#?}");
    assert_eq!(leader.stats().fills + waiter.stats().fills, 1, "one fill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l1_miss_on_a_value_the_store_recalls_is_one_plain_get() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect");
    let filler = l1_cache(&store, "recall");
    let fill = || async { Ok::<_, String>("v".to_owned()) };
    assert_eq!(filler.get_or_fill("k", fill).await.expect("fill"), "v");
    // Another process's store.
    let elsewhere = RedisStore::connect(&server.url(), RedisConfig::default())
        .await
        .expect("connect");
    let mut monitor = server.monitor();

    // Two caches of the other store (each with its own L1, as after a
    // restart or an eviction): the first misses its L1 on a key that store
    // has neither read nor written, the second on one it has read.
    let first = l1_cache(&elsewhere, "recall");
    let never = || async { Ok::<_, String>("never".to_owned()) };
    assert_eq!(first.get_or_fill("k", never).await.expect("hit"), "v");
    let commands = monitor.commands();
    assert_eq!(
        names(&commands),
        [
            // Not recalled, and the store has learnt nothing: the lease
            // request in plain commands, which finds the value (whose
            // frame names its expiry) under a lease taken for nothing: the
            // lease goes back. (The store now asks such keys with the
            // script: a quarter of its plain requests found a value.)
            "SET",
            "GET",
            "RELEASE",
            // The new cache's clear version, to check the entry's stamp.
            "TAG_VERSIONS",
        ],
        "{commands:#?}"
    );
    assert!(plain_lease(&commands[0], &commands[1]), "{commands:#?}");

    let second = l1_cache(&elsewhere, "recall");
    assert_eq!(second.get_or_fill("k", never).await.expect("hit"), "v");
    // Pipelined with the read, the touch of the clear version guarding the
    // entry when its turn is due (`redis/read/touches.rs`); left out here.
    let commands = untouched(&mut monitor);
    assert_eq!(
        names(&commands),
        [
            // Recalled: a plain read, without its `PTTL` (the expiry is
            // remembered), and no script.
            "GET",
            // This cache's clear version.
            "TAG_VERSIONS",
        ],
        "{commands:#?}"
    );
    assert_eq!(second.stats().l2_hits, 1);

    // A new cache of the filler's store: the store wrote the value, so it
    // knows its expiry from the commit and reads it plainly at once.
    let third = l1_cache(&store, "recall");
    assert_eq!(third.get_or_fill("k", never).await.expect("hit"), "v");
    let commands = untouched(&mut monitor);
    assert_eq!(names(&commands), ["GET", "TAG_VERSIONS"], "{commands:#?}");
    assert_eq!(third.stats().l2_hits, 1);
    assert_eq!(
        [&filler, &first, &second, &third]
            .iter()
            .map(|cache| cache.stats().fills)
            .sum::<u64>(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_where_reads_mostly_hit_is_a_plain_read_a_plain_lease_and_the_commit() {
    let server = RedisServer::start();
    let filler = new_cache(&server, "warm", 1).await;
    for i in 0..16 {
        let key = format!("k{i}");
        let fill = || async { Ok::<_, String>("v".to_owned()) };
        assert_eq!(filler.get_or_fill(&key, fill).await.expect("fill"), "v");
    }
    // Another process's cache: its first sixteen reads of keys it does not
    // recall all hit, so it reads such keys plainly first from then on.
    let reader = new_cache(&server, "warm", 2).await;
    for i in 0..16 {
        let key = format!("k{i}");
        let never = || async { Ok::<_, String>("never".to_owned()) };
        assert_eq!(reader.get_or_fill(&key, never).await.expect("hit"), "v");
    }
    // Its first fill also reads the version that tells a tag moved during
    // a fill (the versions script), once.
    let first = || async { Ok::<_, String>("first".to_owned()) };
    assert_eq!(
        reader.get_or_fill("first", first).await.expect("fill"),
        "first"
    );
    let mut monitor = server.monitor();
    let fill = || async { Ok::<_, String>("cold".to_owned()) };
    assert_eq!(
        reader.get_or_fill("cold", fill).await.expect("fill"),
        "cold"
    );
    // A plain read may carry the `TOUCH` of the clear version guarding the
    // entry (when its turn is due: `redis/read/touches.rs`); left out here.
    let commands = untouched(&mut monitor);
    assert_eq!(
        names(&commands),
        [
            // The plain read, which finds the key absent: a lone `GET`
            // (a value found would name its expiry).
            "GET",
            // The lease in plain commands, one pipeline: `SET NX` wrote the
            // lease key, so the `GET` after it that finds no value means
            // no commit can land before this one.
            "SET", "GET", // The fenced write, unlock and notification.
            "COMMIT",
        ],
        "{commands:#?}"
    );
    assert!(
        commands[1].args.iter().any(|arg| arg == "NX"),
        "{commands:#?}"
    );
    assert!(
        commands[1].args[1].starts_with("corral:g:"),
        "{commands:#?}"
    );
    assert_eq!(commands[2].args[1], commands[0].args[1], "the value read");
    assert_eq!(reader.stats().fills, 2);
}

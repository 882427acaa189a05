//! Tags on every write path: entries written by `set`, `set_with_ttl`, a
//! fill with tags in its options, a fill that declares tags in its
//! [`Answer`], and a batch (options and per-value answers) are all dropped
//! by an invalidation of their tag, in every process sharing a real Redis;
//! and a write without tags leaves the entry carrying none.
//!
//! The test binary re-runs itself as worker processes (the ignored test
//! `tag_worker`), each with an L1 and the backplane on one Redis.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::clock::TokioClock;
use corral::store::MemoryStore;
use corral::{Answer, Cache, FillOptions, RedisConfig, RedisStore, WriteOptions};
use corral_testkit::{RedisServer, Worker};
use tokio::sync::Notify;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("worker needs {name}"))
}

// ---------------------------------------------------------------- worker side

/// `-` for no tag.
fn tags_of(word: &str) -> Vec<String> {
    if word == "-" {
        Vec::new()
    } else {
        vec![word.to_owned()]
    }
}

/// A worker: one cache with an L1 and the backplane on a Redis store;
/// commands on stdin, one at a time, answered with `@` lines.
#[test]
#[ignore = "a worker process for the tag tests, started by them"]
fn tag_worker() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let cache = runtime.block_on(async {
        let store = RedisStore::connect(&env("CORRAL_WORKER_URL"), RedisConfig::default())
            .await
            .expect("connect");
        Cache::<String>::builder("tag-writes")
            .store(store)
            .l1(true)
            .ttl(Duration::from_secs(600))
            .build()
            .expect("config")
    });
    println!("@ready");
    let stdin = std::io::stdin();
    let mut line = String::new();
    while stdin.read_line(&mut line).unwrap_or(0) > 0 {
        let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        runtime.block_on(command(&cache, &words));
        line.clear();
    }
}

async fn command(cache: &Cache<String>, words: &[&str]) {
    match words {
        // set <key> <value> <tag|->
        ["set", key, value, tag] => {
            let options = WriteOptions::new().tags(tags_of(tag));
            cache
                .set(key, (*value).to_owned())
                .options(options)
                .await
                .expect("set");
            println!("@ok");
        }
        // set_ttl <key> <value> <tag|->
        ["set_ttl", key, value, tag] => {
            let options = WriteOptions::new().tags(tags_of(tag));
            cache
                .set_with_ttl(key, (*value).to_owned(), Duration::from_secs(600))
                .options(options)
                .await
                .expect("set_with_ttl");
            println!("@ok");
        }
        // fill <key> <value> <tag>: the tag in the call's options.
        ["fill", key, value, tag] => {
            let value = (*value).to_owned();
            let got = cache
                .get_or_fill(key, move || async move { Ok::<_, std::io::Error>(value) })
                .options(FillOptions::new().tags(tags_of(tag)))
                .await
                .expect("fill");
            println!("@got {got}");
        }
        // answer <key> <value> <tag>: the tag declared by the fill's answer.
        ["answer", key, value, tag] => {
            let (value, tag) = ((*value).to_owned(), (*tag).to_owned());
            let got = cache
                .get_or_fill_answer(key, move || async move {
                    Ok::<_, std::io::Error>(Answer::value(value).tags([tag]))
                })
                .await
                .expect("fill");
            println!("@got {}", got.value.unwrap_or_default());
        }
        // batch <tag in options|-> <tag per answer|-> <value> <key>...
        ["batch", option_tag, answer_tag, value, keys @ ..] => {
            let (value, answer_tag) = ((*value).to_owned(), tags_of(answer_tag));
            let batch = cache
                .get_many_or_fill_answers(keys, move |keys| {
                    let (value, answer_tag) = (value.clone(), answer_tag.clone());
                    async move {
                        let found: HashMap<String, Answer<String>> = keys
                            .into_iter()
                            .map(|key| (key, Answer::value(value.clone()).tags(&answer_tag)))
                            .collect();
                        Ok::<_, std::io::Error>(found)
                    }
                })
                .options(FillOptions::new().tags(tags_of(option_tag)))
                .await;
            for (key, got) in batch.iter() {
                assert!(got.is_ok(), "{key}: {got:?}");
            }
            println!("@ok");
        }
        // invalidate <tag>
        ["invalidate", tag] => {
            cache.invalidate_tag(tag).await.expect("invalidate");
            println!("@ok");
        }
        // read <key>: one read, answered with the value or `-`.
        ["read", key] => {
            let value = cache.peek(key).await.expect("read");
            println!("@read {}", value.as_deref().unwrap_or("-"));
        }
        // gone <key>: reads until the key is a miss (the backplane message
        // arrived), for at most 10 s; answers `@gone yes|no`.
        ["gone", key] => {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if cache.peek(key).await.expect("read").is_none() {
                    println!("@gone yes");
                    break;
                }
                if Instant::now() > deadline {
                    println!("@gone no");
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
        _ => panic!("unknown worker command {words:?}"),
    }
}

// ---------------------------------------------------------------- test side

async fn ask(worker: &mut Worker, command: &str, answer: &str) -> String {
    worker.send(command).await;
    worker.expect(answer).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_written_through_every_path_are_invalidated_by_their_tag_in_every_process() {
    let server = RedisServer::start();
    let env = [("CORRAL_WORKER_URL", server.url())];
    let mut a = Worker::start(
        &crate::support::test_name(module_path!(), "tag_worker"),
        &env,
    )
    .await;
    let mut b = Worker::start(
        &crate::support::test_name(module_path!(), "tag_worker"),
        &env,
    )
    .await;

    // Every write path, in process A, tags its entry `tenant:acme`.
    ask(&mut a, "set user:1 v1 tenant:acme", "@ok").await;
    ask(&mut a, "set_ttl user:2 v2 tenant:acme", "@ok").await;
    ask(&mut a, "fill user:3 v3 tenant:acme", "@got").await;
    ask(&mut a, "answer user:4 v4 tenant:acme", "@got").await;
    ask(&mut a, "batch tenant:acme - v5 user:5 user:6", "@ok").await;
    ask(&mut a, "batch - tenant:acme v7 user:7 user:8", "@ok").await;
    // Not of the tenant: written through the same paths with another tag.
    ask(&mut a, "set other:1 o1 tenant:zeta", "@ok").await;
    ask(&mut a, "answer other:2 o2 tenant:zeta", "@got").await;
    ask(&mut a, "batch - tenant:zeta o3 other:3", "@ok").await;
    // Filled with the tag, then rewritten without it: carries none.
    ask(&mut a, "fill user:9 old tenant:acme", "@got").await;
    ask(&mut a, "set user:9 new -", "@ok").await;

    let acme = [
        "user:1", "user:2", "user:3", "user:4", "user:5", "user:6", "user:7", "user:8",
    ];
    let others = ["other:1", "other:2", "other:3", "user:9"];
    // Both processes hold every entry in their L1.
    for worker in [&mut a, &mut b] {
        for key in acme.iter().chain(&others) {
            let value = ask(worker, &format!("read {key}"), "@read").await;
            assert_ne!(value, "-", "{key} was written");
        }
    }

    // The tenant is invalidated in process B.
    ask(&mut b, "invalidate tenant:acme", "@ok").await;
    for (name, worker) in [("B", &mut b), ("A", &mut a)] {
        for key in acme {
            let gone = ask(worker, &format!("gone {key}"), "@gone").await;
            assert_eq!(gone, "yes", "{key} still served in process {name}");
        }
        for key in others {
            let value = ask(worker, &format!("read {key}"), "@read").await;
            assert_ne!(
                value, "-",
                "{key} carries no tenant:acme, in process {name}"
            );
        }
    }
    assert_eq!(ask(&mut a, "read user:9", "@read").await, "new");
}

// ------------------------------------------------ in-process: the fence

/// A fill that declares its tags in its answer reads their versions only
/// after it ran: if any tag was invalidated meanwhile (it may have been one
/// of them, over data the fill had already read), the answer reaches its
/// callers but is not stored.
#[tokio::test(start_paused = true)]
async fn an_answer_tagged_after_an_invalidation_during_its_fill_is_not_stored() {
    let store = MemoryStore::new();
    let build = || {
        Cache::<String>::builder("answer-fence")
            .store(store.clone())
            .clock(TokioClock::new())
            .ttl(Duration::from_secs(60))
            .build()
            .expect("config")
    };
    let (filler, writer) = (build(), build());
    let (loaded, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let fills = Arc::new(AtomicUsize::new(0));
    let fill = {
        let (loaded, release, fills) = (loaded.clone(), release.clone(), fills.clone());
        move || async move {
            fills.fetch_add(1, SeqCst);
            // The data is read here, then the writer changes it and
            // invalidates its tenant before the fill declares the tag.
            loaded.notify_one();
            release.notified().await;
            Ok::<_, std::io::Error>(Answer::value("old".to_owned()).tags(["tenant:acme"]))
        }
    };
    let filling = tokio::spawn({
        let filler = filler.clone();
        async move { filler.get_or_fill_answer("user:1", fill).await }
    });
    loaded.notified().await;
    writer
        .invalidate_tag("tenant:acme")
        .await
        .expect("invalidate");
    release.notify_one();
    let got = filling.await.expect("task").expect("fill");
    assert_eq!(
        got.value.as_deref(),
        Some("old"),
        "the callers get the answer"
    );
    assert_eq!(filler.stats().commits_refused, 1);
    assert_eq!(
        filler.peek("user:1").await.expect("read"),
        None,
        "not stored"
    );
    assert_eq!(
        writer.peek("user:1").await.expect("read"),
        None,
        "not stored"
    );

    // Without an invalidation meanwhile, the answer is stored under its tag.
    let stored = filler
        .get_or_fill_answer("user:1", || async {
            Ok::<_, std::io::Error>(Answer::value("new".to_owned()).tags(["tenant:acme"]))
        })
        .await
        .expect("fill");
    assert_eq!(stored.value.as_deref(), Some("new"));
    assert_eq!(
        writer.peek("user:1").await.expect("read").as_deref(),
        Some("new")
    );
    writer
        .invalidate_tag("tenant:acme")
        .await
        .expect("invalidate");
    assert_eq!(filler.peek("user:1").await.expect("read"), None);
}

//! Sharded pub/sub on a Redis Cluster (three masters, one replica each): a
//! cluster store announces each change with `SPUBLISH` on a channel in the
//! changed key's own slot, so only the nodes of that key's shard handle the
//! message. Counted from every node's `CLUSTER INFO` message counters, side
//! by side with the plain `PUBLISH` a store sent before (broadcast to every
//! node of the cluster).
#![cfg(feature = "redis")]

use std::time::Duration;

use corral::{Cache, RedisConfig, RedisStore};
use corral_testkit::{until, RedisCluster};

use crate::support::read_until;

const PUBLISH: &str = "cluster_stats_messages_publish_received";
const PUBLISHSHARD: &str = "cluster_stats_messages_publishshard_received";

async fn store(cluster: &RedisCluster) -> RedisStore {
    RedisStore::connect_cluster(&cluster.urls(), RedisConfig::default())
        .await
        .unwrap_or_else(|e| panic!("connect_cluster: {e}\n{}", cluster.logs()))
}

fn tier(store: &RedisStore) -> Cache<String> {
    Cache::<String>::builder("fanout")
        .store(store.clone())
        .ttl(Duration::from_secs(60))
        .l1(true)
        .build()
        .expect("config")
}

/// Each node's pub/sub messages received over the cluster bus:
/// `(publish, publishshard)`.
fn received(cluster: &RedisCluster) -> Vec<(u64, u64)> {
    (0..cluster.nodes().len())
        .map(|node| {
            (
                cluster.cluster_info(node, PUBLISH),
                cluster.cluster_info(node, PUBLISHSHARD),
            )
        })
        .collect()
}

/// Publishes a plain message from every node and waits until every node
/// received the others' (N-1 each); returns the counters then. Each link of
/// the cluster bus is one ordered connection, so every message any node
/// sent before has arrived too.
async fn settled(cluster: &RedisCluster) -> Vec<(u64, u64)> {
    let nodes = cluster.nodes().len() as u64;
    let before = tokio::task::block_in_place(|| received(cluster));
    for node in cluster.nodes() {
        let answer = node.cli(&["PUBLISH", "corral:probe:v0:filled", "probe"]);
        assert!(answer.parse::<u64>().is_ok(), "PUBLISH answered {answer:?}");
    }
    until("every node received every other node's probe", || {
        let now = received(cluster);
        now.iter()
            .zip(&before)
            .all(|(now, before)| now.0 >= before.0 + nodes - 1)
    })
    .await;
    tokio::task::block_in_place(|| received(cluster))
}

/// A name in `key`'s slot (its value key, in any namespace).
fn slot_name(key: &str) -> String {
    RedisStore::keys_of(&corral::store::StoreKey::new("any:v1", key)).value
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_is_handled_by_the_nodes_of_its_keys_shard_only() {
    let cluster = tokio::task::block_in_place(RedisCluster::start_with_replicas);
    let (one, two) = (store(&cluster).await, store(&cluster).await);
    let (writer, reader) = (tier(&one), tier(&two));

    // Both subscribers are up: a change made through one store evicts the
    // other's L1 copy.
    let key = "user:42";
    writer.set(key, "v1".into()).await.expect("set");
    assert_eq!(reader.peek(key).await.expect("read").as_deref(), Some("v1"));
    writer.set(key, "v2".into()).await.expect("set");
    read_until(&reader, key, Some("v2")).await;
    // A first fill in the key's bucket creates (and announces, in its own
    // slot) the bucket's copy of the version that tag invalidations move:
    // before the count starts.
    let bucket = |name: &str| name.split_once('{').map(|(_, tag)| tag[..4].to_owned());
    let warm_up = (0..)
        .map(|i| format!("warm-up-{i}"))
        .find(|other| bucket(&slot_name(other)) == bucket(&slot_name(key)))
        .expect("a key in the same bucket");
    writer
        .get_or_fill(&warm_up, || async { Ok::<_, String>("w".to_owned()) })
        .await
        .expect("fill");

    let shard = tokio::task::block_in_place(|| cluster.shard_of(&slot_name(key)));
    assert_eq!(shard.len(), 2, "a master and its replica: {shard:?}");
    let before = settled(&cluster).await;
    let heard = reader.stats().backplane_messages;

    // One invalidation, a fill of the absent key no one else waits for
    // (which announces nothing), and one set of the key.
    writer.invalidate(key).await.expect("invalidate");
    let filled = writer
        .get_or_fill(key, || async { Ok::<_, String>("v3".to_owned()) })
        .await
        .expect("fill");
    assert_eq!(filled, "v3");
    writer.set(key, "v4".into()).await.expect("set");
    until("the reader heard both changes", || {
        reader.stats().backplane_messages >= heard + 2
    })
    .await;
    let after = settled(&cluster).await;

    let nodes = cluster.nodes().len();
    let (mut inside, mut outside) = (0, 0);
    for node in 0..nodes {
        let sharded = after[node].1 - before[node].1;
        // Every node received one plain probe from each other node: what a
        // plain PUBLISH costs, the way every change was announced before.
        let plain = after[node].0 - before[node].0;
        eprintln!("node {node}: {sharded} sharded message(s) received");
        assert_eq!(plain, nodes as u64 - 1, "node {node}: the probes only");
        if shard.contains(&node) {
            inside += sharded;
        } else {
            outside += sharded;
        }
    }
    assert_eq!(
        outside, 0,
        "nodes outside the key's shard handled none of its messages"
    );
    assert_eq!(
        inside, 2,
        "the shard's replica got the invalidation and the set, not the quiet fill"
    );
    eprintln!(
        "per change: SPUBLISH reached {} node(s) besides the master (its replica), 0 outside \
         the shard; a plain PUBLISH reaches {} nodes (N-1), {} of them outside the shard",
        shard.len() - 1,
        nodes - 1,
        nodes - shard.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_evictions_tags_and_clear_work_over_sharded_channels() {
    let cluster = tokio::task::block_in_place(RedisCluster::start);
    let (one, two) = (store(&cluster).await, store(&cluster).await);
    let (a, b) = (tier(&one), tier(&two));

    // Keys in every shard: each is evicted from the other L1 by a write.
    for i in 0..12 {
        let key = format!("k{i}");
        a.set(&key, "old".into()).await.expect("set");
        assert_eq!(b.peek(&key).await.expect("read").as_deref(), Some("old"));
        a.set(&key, "new".into()).await.expect("set");
        read_until(&b, &key, Some("new")).await;
    }

    // A tag invalidation and a clear reach the other cache's L1.
    let tagged = corral::FillOptions::new().tags(["team:7"]);
    let filled = a
        .get_or_fill("member", || async { Ok::<_, String>("ada".to_owned()) })
        .options(tagged.clone())
        .await
        .expect("fill");
    assert_eq!(filled, "ada");
    let read = b
        .get_or_fill("member", || async { Ok::<_, String>("unused".to_owned()) })
        .options(tagged)
        .await
        .expect("read");
    assert_eq!(read, "ada");
    a.invalidate_tag("team:7").await.expect("invalidate tag");
    read_until(&b, "member", None).await;

    a.set("kept", "x".into()).await.expect("set");
    assert_eq!(b.peek("kept").await.expect("read").as_deref(), Some("x"));
    a.clear().await.expect("clear");
    read_until(&b, "kept", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_slot_takes_its_subscriptions_along() {
    let cluster = tokio::task::block_in_place(RedisCluster::start);
    let (one, two) = (store(&cluster).await, store(&cluster).await);
    let (a, b) = (tier(&one), tier(&two));
    let key = "user:7";
    a.set(key, "v1".into()).await.expect("set");
    assert_eq!(b.peek(key).await.expect("read").as_deref(), Some("v1"));

    // The key's slot moves to another master; its old owner drops the
    // subscriptions of the slot's channel. The subscriber subscribes it
    // again at the new owner, which counts as possible message loss.
    let name = slot_name(key);
    let (slot, from) =
        tokio::task::block_in_place(|| (cluster.slot_of(&name), cluster.master_of(&name)));
    let resets = b.stats().backplane_resets;
    tokio::task::block_in_place(|| cluster.move_slot(slot, (from + 1) % 3));
    until("the subscription followed the slot", || {
        b.stats().backplane_resets > resets
    })
    .await;

    // A change announced at the new owner reaches the other L1.
    assert_eq!(b.peek(key).await.expect("read").as_deref(), Some("v1"));
    let written = std::sync::atomic::AtomicBool::new(false);
    corral_testkit::until_repeating(
        "a write reaches the slot's new owner",
        || async {
            if a.set(key, "v2".into()).await.is_ok() {
                written.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        },
        || written.load(std::sync::atomic::Ordering::SeqCst),
    )
    .await;
    read_until(&b, key, Some("v2")).await;
}

//! Counters that mean what their docs say: a lease wait is one wait,
//! however many polls it takes; a backplane reset is a possible loss of
//! messages, never a healthy start.

use std::time::Duration;

use corral::{Cache, MemoryStore};
use tokio::sync::oneshot;

#[tokio::test(start_paused = true)]
async fn one_wait_for_another_fill_is_counted_once() {
    let store = MemoryStore::new();
    let build = || {
        Cache::<String>::builder("waits")
            .store(store.clone())
            .poll_interval(Duration::from_millis(50))
            .build()
            .expect("valid config")
    };
    let (leader, waiter) = (build(), build());
    let (started, filling) = oneshot::channel();
    let leading = tokio::spawn({
        let leader = leader.clone();
        async move {
            leader
                .get_or_fill("k", || async move {
                    let _ = started.send(());
                    // 20 poll intervals of the waiter.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok::<_, std::io::Error>("from the leader".to_owned())
                })
                .await
        }
    });
    filling.await.expect("the leader's fill started");
    let value = waiter
        .get_or_fill("k", || async {
            Ok::<_, std::io::Error>("from the waiter".to_owned())
        })
        .await
        .expect("value");
    assert_eq!(value, "from the leader");
    assert_eq!(
        leading.await.expect("joined").expect("value"),
        "from the leader"
    );
    let stats = waiter.stats();
    assert_eq!(stats.fills, 0, "{stats:?}");
    assert_eq!(stats.lease_waits, 1, "{stats:?}");
}

//! The breaker's tests, through the guarded call that admits and records
//! store calls (a module of `call`, which stands above the breaker).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::Guarded;
use crate::data::error::{StoreError, StoreErrorKind};
use crate::tier::breaker::*;
use crate::tier::pulse::Pulse;

/// Runs one store call through `breaker` (if any) under `timeout` (if
/// any), as a cache's calls outside a flight run: refused at once while
/// the breaker is open, its outcome recorded otherwise, in the breaker
/// and in the store's `pulse`.
fn guarded<'a, T, F>(
    breaker: Option<&'a Breaker>,
    pulse: &'a Pulse,
    timeout: Option<Duration>,
    call: F,
) -> Guarded<'a, F>
where
    F: Future<Output = Result<T, StoreError>>,
{
    Guarded::new(breaker, pulse, timeout, call)
}

const COOL_DOWN: Duration = Duration::from_secs(5);

fn breaker(failures: u32) -> Breaker {
    Breaker::new(
        "unit".into(),
        BreakerSettings {
            failures,
            cool_down: COOL_DOWN,
        },
    )
}

fn timeout() -> Result<(), StoreError> {
    Err(StoreError::new(StoreErrorKind::Timeout, "t"))
}

fn unavailable() -> Result<(), StoreError> {
    Err(StoreError::new(StoreErrorKind::Unavailable, "u"))
}

fn answered() -> Result<(), StoreError> {
    Ok(())
}

fn call(breaker: &Breaker, result: Result<(), StoreError>) -> Result<(), StoreError> {
    let pass = breaker.admit(false)?;
    pass.ended(failed(&result));
    result
}

fn refused(result: &Result<(), StoreError>) -> bool {
    matches!(result, Err(e) if e.kind() == StoreErrorKind::BreakerOpen)
}

fn open(breaker: &Breaker, failures: u32) {
    for _ in 0..failures {
        assert!(!refused(&call(breaker, timeout())));
    }
    assert!(!breaker.is_closed());
    assert_eq!(breaker.opened(), 1);
}

#[tokio::test(start_paused = true)]
async fn opens_after_consecutive_failures_only() {
    let breaker = breaker(3);
    // An answer, or an error the store answered with, resets the count.
    for _ in 0..5 {
        call(&breaker, timeout()).ok();
        call(&breaker, unavailable()).ok();
        call(&breaker, answered()).ok();
        call(&breaker, timeout()).ok();
        call(
            &breaker,
            Err(StoreError::new(StoreErrorKind::Protocol, "p")),
        )
        .ok();
    }
    assert!(breaker.is_closed());
    assert_eq!(breaker.opened(), 0);
    open(&breaker, 3);
    assert!(refused(&call(&breaker, answered())));
    assert_eq!(breaker.skipped(), 1);
}

#[tokio::test(start_paused = true)]
async fn refuses_for_the_cool_down_then_lets_one_probe_through() {
    let breaker = breaker(2);
    open(&breaker, 2);
    tokio::time::advance(COOL_DOWN - Duration::from_millis(1)).await;
    assert!(refused(&call(&breaker, answered())), "still cooling down");
    tokio::time::advance(Duration::from_millis(1)).await;
    let probe = breaker.admit(false).expect("the probe");
    assert!(matches!(probe, Pass::Probe(_)));
    for _ in 0..10 {
        assert!(
            refused(&breaker.admit(false).map(|_| ())),
            "one probe at a time"
        );
    }
    assert_eq!(breaker.skipped(), 11);
    probe.ended(false);
    assert!(breaker.is_closed());
    assert!(matches!(breaker.admit(false), Ok(Pass::Closed(_))));
    // Closed afresh: the count starts again from zero.
    call(&breaker, timeout()).ok();
    assert!(breaker.is_closed());
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_opens_for_another_cool_down() {
    let breaker = breaker(1);
    open(&breaker, 1);
    tokio::time::advance(COOL_DOWN).await;
    assert!(!refused(&call(&breaker, unavailable())), "the probe ran");
    assert_eq!(breaker.opened(), 1, "still the one opening");
    tokio::time::advance(COOL_DOWN - Duration::from_millis(1)).await;
    assert!(refused(&call(&breaker, answered())));
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(!refused(&call(&breaker, answered())), "the next probe");
    assert!(breaker.is_closed());
    assert_eq!(breaker.opened(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_probe_hands_the_probe_to_the_next_call() {
    let breaker = breaker(1);
    open(&breaker, 1);
    tokio::time::advance(COOL_DOWN).await;
    drop(breaker.admit(false).expect("the probe"));
    let next = breaker.admit(false).expect("the next call probes");
    assert!(matches!(next, Pass::Probe(_)));
    next.ended(false);
    assert!(breaker.is_closed());
}

#[tokio::test(start_paused = true)]
async fn late_outcomes_of_calls_let_through_before_it_opened_change_nothing() {
    let breaker = breaker(2);
    let late_failure = breaker.admit(false).expect("closed");
    let late_answer = breaker.admit(false).expect("closed");
    open(&breaker, 2);
    late_failure.ended(true);
    late_answer.ended(false);
    assert!(!breaker.is_closed());
    assert_eq!(breaker.opened(), 1);
    tokio::time::advance(COOL_DOWN).await;
    assert!(matches!(breaker.admit(false), Ok(Pass::Probe(_))));
}

#[tokio::test(start_paused = true)]
async fn guarded_calls_skip_the_call_and_its_timeout_while_open() {
    let breaker = breaker(1);
    let pulse = Pulse::new();
    let hang = || std::future::pending::<Result<(), StoreError>>();
    let started = Instant::now();
    let first = guarded(Some(&breaker), &pulse, Some(Duration::from_secs(1)), hang()).await;
    assert!(first.expect_err("timed out").is_timeout());
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    let started = Instant::now();
    let second = guarded(Some(&breaker), &pulse, Some(Duration::from_secs(1)), hang()).await;
    assert!(second.expect_err("refused").is_breaker_open());
    assert_eq!(started.elapsed(), Duration::ZERO, "no timeout paid");
    // A probe cancelled mid-call leaves the probe to the next call.
    tokio::time::advance(COOL_DOWN).await;
    let cancelled = tokio::time::timeout(
        Duration::from_millis(10),
        guarded(Some(&breaker), &pulse, Some(Duration::from_secs(1)), hang()),
    )
    .await;
    assert!(cancelled.is_err());
    let answered = guarded(Some(&breaker), &pulse, None, async { Ok(()) }).await;
    assert!(answered.is_ok());
    assert!(breaker.is_closed());
}

#[tokio::test(start_paused = true)]
async fn calls_that_time_out_while_others_are_answered_do_not_open_it() {
    // A long queue: each call waits behind the ones before it and the
    // last ones time out, while the store answers the others.
    let breaker = breaker(2);
    let pulse = Pulse::new();
    let timeout = Some(Duration::from_millis(100));
    let queued = (0u64..20).map(|place| {
        let (breaker, pulse) = (&breaker, &pulse);
        async move {
            let call = async move {
                tokio::time::sleep(Duration::from_millis(10 * place + 5)).await;
                Ok::<(), StoreError>(())
            };
            guarded(Some(breaker), pulse, timeout, call).await
        }
    });
    let results = futures_util::future::join_all(queued).await;
    assert_eq!(
        results.iter().filter(|r| r.is_err()).count(),
        10,
        "the tail timed out"
    );
    assert!(breaker.is_closed());
    assert_eq!(breaker.opened(), 0);
    // A store that answers nothing opens it.
    let hang = || std::future::pending::<Result<(), StoreError>>();
    for _ in 0..2 {
        let _ = guarded(Some(&breaker), &pulse, timeout, hang()).await;
    }
    assert!(!breaker.is_closed());
    assert_eq!(breaker.opened(), 1);
    assert_eq!(pulse.silence(), Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn an_eager_call_probes_an_open_breaker_before_its_cool_down() {
    let breaker = breaker(1);
    open(&breaker, 1);
    assert!(refused(&breaker.admit(false).map(|_| ())), "cooling down");
    let probe = breaker.admit(true).expect("an eager call probes");
    assert!(matches!(probe, Pass::Probe(_)));
    assert!(
        refused(&breaker.admit(true).map(|_| ())),
        "one probe at a time"
    );
    probe.ended(true);
    assert!(breaker.is_open(), "its failure keeps it open");
    assert_eq!(breaker.opened(), 1, "one opening however many probes fail");
    let probe = breaker.admit(true).expect("the next eager call probes");
    probe.ended(false);
    assert!(breaker.is_closed());
}

#[tokio::test(start_paused = true)]
async fn the_store_heard_again_closes_it_at_once() {
    let breaker = breaker(1);
    open(&breaker, 1);
    breaker.store_heard();
    assert!(breaker.is_closed());
    assert!(matches!(breaker.admit(false), Ok(Pass::Closed(_))));
    assert_eq!(breaker.opened(), 1);
}

//! The fill itself: run in time (the fallback served at the soft timeout),
//! its lease renewed while it runs, its error and panic typed.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;

use super::{Leader, LeaseGuard};
use crate::clock::sleep_until_some;
use crate::data::freshness::Answer;
use crate::state::flight::Failure;
use crate::state::inner::Inner;
use crate::stats::Counters;

impl<V> Leader<V>
where
    V: Clone + Send + Sync + 'static,
{
    /// Runs the fill (renewing its lease) until the hard deadline, serving
    /// the fallback to the callers at the soft timeout. The fill is dropped
    /// when this returns: at the hard timeout it is stopped, and nothing it
    /// would have produced is stored.
    pub(super) async fn fill_in_time<F, Fut, E>(
        &mut self,
        fill: F,
        lease: Option<&LeaseGuard>,
    ) -> Result<Result<Answer<V>, Failure>, tokio::time::error::Elapsed>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Answer<V>, E>> + Send + 'static,
        E: Send + Sync + 'static,
    {
        let fill_started = Instant::now();
        let leases = lease.as_slice();
        // The fill renews through its own handle: serving the fallback at
        // the soft timeout borrows the leader meanwhile.
        let inner = Weak::clone(&self.inner);
        let filling = while_renewing(&inner, call_fill(&inner, fill), leases);
        tokio::pin!(filling);
        let deadline = self.clock.deadline;
        let soft = self
            .clock
            .soft_deadline()
            .filter(|_| self.fallback.is_some() && !self.flight.has_published());
        let result = tokio::select! {
            result = tokio::time::timeout_at(deadline, &mut filling) => result,
            () = sleep_until_some(soft) => {
                self.soft_timed_out();
                tokio::time::timeout_at(deadline, &mut filling).await
            }
        };
        let took = fill_started.elapsed();
        #[cfg(feature = "metrics")]
        if let Some(cache) = self.inner.upgrade() {
            crate::stats::export::fill_took(cache.name(), took);
        }
        match &result {
            Ok(Ok(_)) => tracing::debug!(took_ms = took.as_millis(), "fill returned a value"),
            Ok(Err(_)) => {}
            Err(_) => tracing::warn!(
                timeout_ms = self.clock.fill_timeout.as_millis(),
                "fill passed the hard timeout: stopped, nothing stored"
            ),
        }
        result
    }
}

/// Runs `work` (a fill, say) while renewing `leases` (one for a single
/// key, one per key for a batch) every third of their TTL. A lost or
/// failed renewal does not stop the work: the fenced commit still protects
/// newer data.
///
/// A plain function returning a named future: it holds `work` once and a
/// timer, and the renewals are made (boxed) only once the first third of
/// the TTL passed, so a fill quicker than that allocates nothing for them.
pub(crate) fn while_renewing<'a, V, W>(
    inner: &'a Weak<Inner<V>>,
    work: W,
    leases: &'a [&'a LeaseGuard],
) -> WhileRenewing<'a, V, W>
where
    V: Clone + Send + Sync + 'static,
    W: Future,
{
    let period = leases.first().map(|first| renewal_period(first));
    WhileRenewing {
        work,
        first_renewal: period.map(tokio::time::sleep),
        leases: (inner, leases),
        renewing: None,
    }
}

/// How often a lease is renewed.
fn renewal_period(lease: &LeaseGuard) -> Duration {
    (lease.lease_ttl() / 3).max(Duration::from_millis(10))
}

pin_project_lite::pin_project! {
    /// The future of [`while_renewing`].
    pub(crate) struct WhileRenewing<'a, V, W> {
        #[pin]
        work: W,
        // Until the first renewal is due (`None`: nothing to renew, or
        // the renewals started).
        #[pin]
        first_renewal: Option<tokio::time::Sleep>,
        leases: (&'a Weak<Inner<V>>, &'a [&'a LeaseGuard]),
        renewing: Option<Pin<Box<dyn Future<Output = ()> + Send + 'a>>>,
    }
}

impl<V, W> Future for WhileRenewing<'_, V, W>
where
    V: Clone + Send + Sync + 'static,
    W: Future,
{
    type Output = W::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<W::Output> {
        let mut this = self.project();
        // The work first: its answer ends the renewals.
        if let Poll::Ready(done) = this.work.poll(cx) {
            return Poll::Ready(done);
        }
        let due = this
            .first_renewal
            .as_mut()
            .as_pin_mut()
            .map(|first| first.poll(cx));
        if let Some(Poll::Ready(())) = due {
            this.first_renewal.set(None);
            let (inner, leases) = *this.leases;
            *this.renewing = Some(Box::pin(keep_renewed(inner, leases)));
        }
        if let Some(renewing) = this.renewing {
            if renewing.as_mut().poll(cx).is_ready() {
                *this.renewing = None;
            }
        }
        Poll::Pending
    }
}

/// Renews `leases` (all asked with one request's TTLs) now and then every
/// third of their TTL, concurrently; returns once none is owned any more.
/// A lease whose renewal failed (the store did not answer) is tried again
/// next time.
async fn keep_renewed<V>(inner: &Weak<Inner<V>>, leases: &[&LeaseGuard]) {
    let Some(first) = leases.first() else {
        return;
    };
    let period = renewal_period(first);
    let mut owned = leases.to_vec();
    loop {
        let renewals = owned.iter().map(|lease| lease.renew());
        let renewed = futures_util::future::join_all(renewals).await;
        let Some(cache) = inner.upgrade() else {
            return;
        };
        let mut still = Vec::with_capacity(owned.len());
        for (lease, renewed) in owned.into_iter().zip(renewed) {
            match renewed {
                Ok(true) => {
                    Counters::bump(&cache.counters().lease_renewals);
                    still.push(lease);
                }
                Ok(false) => {}
                Err(error) => {
                    cache.counters().store_failed(&error);
                    still.push(lease);
                }
            }
        }
        owned = still;
        if owned.is_empty() {
            return;
        }
        drop(cache);
        tokio::time::sleep(period).await;
    }
}

/// Runs the fill, turning its error and panic into a typed [`Failure`].
pub(crate) async fn call_fill<V, T, F, Fut, E>(
    inner: &Weak<Inner<V>>,
    fill: F,
) -> Result<T, Failure>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    E: Send + Sync + 'static,
{
    let result = AssertUnwindSafe(async move { fill().await })
        .catch_unwind()
        .await;
    let failure = match result {
        Ok(Ok(answer)) => return Ok(answer),
        Ok(Err(error)) => {
            match inner.upgrade() {
                Some(cache) => {
                    Counters::bump(&cache.counters().fill_errors);
                    cache.fill_failed(std::any::type_name::<E>());
                }
                None => tracing::warn!(
                    error_type = std::any::type_name::<E>(),
                    "fill returned an error: nothing stored"
                ),
            }
            Failure::Fill(Arc::new(error))
        }
        Err(panic) => {
            if let Some(cache) = inner.upgrade() {
                Counters::bump(&cache.counters().fill_panics);
            }
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_owned());
            tracing::error!(panic = %message, "fill panicked: nothing stored");
            Failure::Panicked(message.into())
        }
    };
    Err(failure)
}

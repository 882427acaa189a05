//! The subscriber task of one server (or a Sentinel group's master): one
//! connection, `SUBSCRIBE` of each namespace's channel.

use std::collections::BTreeSet;
use std::sync::Arc;

use ::redis::aio::{PubSubSink, PubSubStream};
use ::redis::{Msg, Value};
use futures_util::StreamExt as _;
use tokio::sync::{mpsc, watch};
use tokio::time::MissedTickBehavior;

use super::super::keys;
use super::shared::{drain_until_closed, Settings, Shared, MIN_BACKOFF};
use crate::backoff::Backoff;
use crate::redis::conn::sentinel::Source;

/// Why a session with one connection ended.
enum Ended {
    /// The store was dropped.
    StoreDropped,
    /// The connection failed; `established` tells whether it had been
    /// subscribed (then the backoff starts again from the minimum).
    Lost { established: bool },
}

pub(super) struct Task {
    shared: Arc<Shared>,
    requests: mpsc::UnboundedReceiver<Arc<str>>,
    /// The server, asked anew at each connect.
    source: Source,
    /// Ticks when the command connection left a server demoted to a
    /// replica: the subscriber must leave it too.
    moves: watch::Receiver<u64>,
    settings: Settings,
}

impl Task {
    /// The task of `shared` on `source`'s server, taking requests from
    /// `requests`, connecting anew when `moves` ticks.
    pub(super) fn new(
        shared: Arc<Shared>,
        requests: mpsc::UnboundedReceiver<Arc<str>>,
        source: Source,
        moves: watch::Receiver<u64>,
        settings: Settings,
    ) -> Self {
        Self {
            shared,
            requests,
            source,
            moves,
            settings,
        }
    }

    pub(super) async fn run(mut self) {
        // No connection until something is to be subscribed (the request's
        // channel is in the shared set, which the session subscribes).
        if self.shared.channels().is_empty() && self.requests.recv().await.is_none() {
            return;
        }
        let mut backoff = Backoff::new(MIN_BACKOFF, MIN_BACKOFF, self.settings.max_backoff);
        loop {
            let ended = self.session().await;
            self.shared.interrupted();
            match ended {
                Ended::StoreDropped => return,
                Ended::Lost { established } => {
                    if established {
                        backoff.reset();
                    }
                    tracing::debug!(
                        store = %self.settings.store,
                        "corral: redis subscriber connection lost; reconnecting"
                    );
                }
            }
            let pause = backoff.next_pause();
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = drain_until_closed(&mut self.requests) => return,
            }
        }
    }

    /// Connects, subscribes every channel asked for so far, wakes every
    /// listener, then dispatches messages and new subscriptions until the
    /// connection fails, the command connection moves off a demoted
    /// server, or the store is dropped.
    async fn session(&mut self) -> Ended {
        let (mut sink, mut stream, mut current) = match self.open().await {
            Ok(opened) => opened,
            Err(ended) => return ended,
        };
        let mut ping = tokio::time::interval(self.settings.health_interval);
        ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ping.tick().await;
        loop {
            tokio::select! {
                request = self.requests.recv() => match request {
                    None => return Ended::StoreDropped,
                    Some(channel) if current.contains(&channel) => {}
                    Some(channel) => {
                        match self.subscribe(&mut sink, &[channel]).await {
                            Some(subscribed) => {
                                current.extend(subscribed.iter().cloned());
                                self.shared.subscribed(&subscribed);
                            }
                            None => return Ended::Lost { established: true },
                        }
                    }
                },
                message = stream.next() => match message {
                    None => return Ended::Lost { established: true },
                    Some(message) => self.dispatch(&message),
                },
                moved = self.moves.changed() => {
                    // The command connection ends only with the store.
                    if moved.is_err() {
                        return Ended::StoreDropped;
                    }
                    tracing::warn!(
                        store = %self.settings.store,
                        "corral: redis server became a replica: the subscriber connects anew"
                    );
                    return Ended::Lost { established: true };
                }
                _ = ping.tick() => {
                    let pong = tokio::time::timeout(self.settings.op_timeout, sink.ping::<Value>()).await;
                    if !matches!(pong, Ok(Ok(_))) {
                        return Ended::Lost { established: true };
                    }
                }
            }
        }
    }

    /// Connects and subscribes every channel asked for so far (not
    /// denied), waking every listener: the connection's two halves and the
    /// channels it holds.
    async fn open(&mut self) -> Result<(PubSubSink, PubSubStream, BTreeSet<Arc<str>>), Ended> {
        // Seen before connecting: a move while this connects may have left
        // it on the old server, and makes it connect again.
        self.moves.borrow_and_update();
        let connect = self.source.pubsub(self.settings.connect_timeout);
        let pubsub = tokio::select! {
            connected = connect => match connected {
                Ok(pubsub) => Some(pubsub),
                Err(_) => {
                    self.shared.set_failing(true);
                    None
                }
            },
            () = drain_until_closed(&mut self.requests) => return Err(Ended::StoreDropped),
        };
        let Some(pubsub) = pubsub else {
            return Err(Ended::Lost { established: false });
        };
        self.shared.set_failing(false);
        let (mut sink, stream) = pubsub.split();

        let wanted: Vec<Arc<str>> = {
            let denied = self.shared.denied();
            let channels = self.shared.channels();
            channels.difference(&denied).cloned().collect()
        };
        let subscribed = if wanted.is_empty() {
            Vec::new()
        } else {
            match self.subscribe(&mut sink, &wanted).await {
                Some(subscribed) => subscribed,
                None => return Err(Ended::Lost { established: false }),
            }
        };
        // Each channel is subscribed once per connection: a request queued
        // before the connection was made is already in `wanted`.
        let current: BTreeSet<Arc<str>> = subscribed.iter().cloned().collect();
        self.shared.subscribed(&subscribed);
        Ok((sink, stream, current))
    }

    /// Subscribes `channels` and returns those Redis confirmed in time, or
    /// `None` when the connection is not usable (an error or no answer).
    ///
    /// A channel the ACL refuses (`NOPERM`) is not an outage: it is logged,
    /// remembered as denied (never asked for again; its waiters poll) and
    /// left out, and the others are subscribed one by one (Redis refuses a
    /// whole `SUBSCRIBE` if one of its channels is denied).
    async fn subscribe(
        &self,
        sink: &mut PubSubSink,
        channels: &[Arc<str>],
    ) -> Option<Vec<Arc<str>>> {
        match self.subscribe_all(sink, channels).await? {
            Ok(()) => return Some(channels.to_vec()),
            Err(refusal) if channels.len() == 1 => {
                self.shared.deny(&channels[0], &refusal);
                return Some(Vec::new());
            }
            Err(_) => {}
        }
        let mut subscribed = Vec::with_capacity(channels.len());
        for channel in channels {
            match self
                .subscribe_all(sink, std::slice::from_ref(channel))
                .await?
            {
                Ok(()) => subscribed.push(Arc::clone(channel)),
                Err(refusal) => self.shared.deny(channel, &refusal),
            }
        }
        Some(subscribed)
    }

    /// One `SUBSCRIBE` of `channels`: `None` if the connection failed or
    /// did not answer in time, `Some(Err(message))` if the ACL refused it.
    async fn subscribe_all(
        &self,
        sink: &mut PubSubSink,
        channels: &[Arc<str>],
    ) -> Option<Result<(), String>> {
        let names: Vec<&str> = channels.iter().map(|c| &**c).collect();
        match tokio::time::timeout(self.settings.op_timeout, sink.subscribe(names)).await {
            Ok(Ok(())) => Some(Ok(())),
            Ok(Err(e)) if super::super::errors::refusal(&e).is_some() => Some(Err(e.to_string())),
            Ok(Err(_)) | Err(_) => None,
        }
    }

    /// Wakes the waiters of the key a message names and hands backplane
    /// messages to the channel's sinks. Messages of another shape are
    /// ignored.
    fn dispatch(&self, message: &Msg) {
        let channel = message.get_channel_name();
        if let Some(namespace) = keys::namespace_of(channel) {
            self.shared
                .deliver(channel, namespace, message.get_payload_bytes());
        }
    }
}

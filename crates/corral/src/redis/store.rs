//! `impl Store for RedisStore`: each operation one round trip (a script
//! for writes and leases, see [`scripts`](super::scripts)), announced on
//! the key's channel; and the names and tokens the operations use.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use ::redis::Value;

use super::conn::cluster;
use super::conn::{answered, Connection};
use super::errors::{bounded, unexpected};
use super::keys::{self, KeyNames};
use super::read::{remaining, stored, Ahead};
use super::{frame, grant, millis, scripts, RedisStore};
use crate::data::error::StoreError;
use crate::store::{
    is_version, new_version, BoxFuture, ChangeSink, Commit, Grant, Lease, LeaseRequest, Listener,
    Lookup, Origin, Store, StoreKey, Stored,
};
use crate::sync::lock_std;

impl RedisStore {
    /// The verb and channel announcing a change in `namespace`: on a
    /// cluster, `SPUBLISH` on `sharded` (a channel in the changed keys'
    /// slot, so the message stays in their shard); otherwise `PUBLISH` on
    /// the namespace's channel.
    fn announcement(
        &self,
        namespace: &str,
        sharded: impl FnOnce() -> String,
    ) -> (&'static [u8], String) {
        match self.inner.connection {
            Connection::Cluster(_) => (b"SPUBLISH", sharded()),
            Connection::Standalone(_) => (b"PUBLISH", keys::channel(namespace)),
        }
    }

    /// [`announcement`](Self::announcement) of a change of the key named
    /// `names`: on its bucket's channel.
    fn key_channel(&self, namespace: &str, names: &KeyNames) -> (&'static [u8], String) {
        self.announcement(namespace, || keys::bucket_channel(namespace, names.bucket))
    }

    /// [`announcement`](Self::announcement) of a tag or clear change: on
    /// the namespace's tag channel (in the slot of its tag keys).
    fn tag_channel(&self, namespace: &str) -> (&'static [u8], String) {
        self.announcement(namespace, || keys::tag_channel(namespace))
    }

    /// The key of the copy of `tag`'s version at `home` in `namespace`:
    /// one per bucket on a cluster (in the slot of the entries it guards),
    /// the one key of the tag on one server.
    fn version_key(&self, namespace: &str, home: u32, tag: &str) -> String {
        match self.inner.connection {
            Connection::Cluster(_) => keys::copy_key(namespace, home, tag),
            Connection::Standalone(_) => keys::tag_key(namespace, tag),
        }
    }

    /// The name of the clear version's copy guarding the entry of value
    /// `name` that a script reading or writing it touches: given only when
    /// its turn is due (see `read/touches.rs`), else empty.
    fn clear_copy_due(&self, name: &keys::ValueName<'_>) -> String {
        if self.inner.reads.touch(name).is_none() {
            return String::new();
        }
        let key = name.key();
        self.version_key(key.namespace(), self.version_home(key), "")
    }

    /// Remembers the expiry of the value this store just wrote (`id`, as
    /// [`ValueName::id`](keys::ValueName::id)) with `generation` and `ttl`,
    /// the write sent at `asked`: its time to live began after that, so the
    /// deadline errs early, as a read's does, and the next plain read of it
    /// needs no `PTTL`.
    fn learn_written(&self, id: u64, generation: &str, ttl: Duration, asked: Instant) {
        let deadline = asked + Duration::from_millis(super::ms(ttl));
        if frame::expiry_of(generation).is_some() {
            // Its readers learn the expiry from its frame.
            self.inner.expiries.recall(id, deadline);
        } else {
            self.inner
                .expiries
                .learn_deadline(id, &Arc::from(generation), deadline);
        }
    }

    /// The generation a write of `token` living `ttl`, sent at `at`, frames
    /// its value with: the token, and the value's expiry on the server's
    /// clock where this store has a reading of it (see
    /// [`frame::with_expiry`]), so that its readers need no `PTTL`.
    fn generation_of(&self, token: &str, ttl: Duration, at: Instant) -> String {
        match self.inner.connection.server_clock() {
            Some(clock) => frame::with_expiry(token, clock.expiry(super::ms(ttl), at)),
            None => token.to_owned(),
        }
    }

    /// A fresh random lease token: 128 bits as 32 hex digits.
    fn token(&self) -> String {
        crate::store::new_token(&mut lock_std(&self.inner.rng))
    }

    async fn run(
        &self,
        lua: &scripts::Lua,
        names: &KeyNames,
        args: &[&[u8]],
    ) -> Result<Value, StoreError> {
        self.inner
            .connection
            .invoke(lua, names, args, self.inner.config.op_timeout)
            .await
    }
}

/// A version returned by [`scripts::TAG_VERSIONS`]; `None` if it is not one.
fn tag_version(reply: &Value) -> Option<Arc<str>> {
    match reply {
        Value::BulkString(version) if is_version(version) => {
            std::str::from_utf8(version).ok().map(Arc::from)
        }
        _ => None,
    }
}

/// The tail of a backplane message about `key` from `origin`; the scripts
/// put the kind letter in front.
fn message(origin: Origin, key: &str) -> String {
    let mut message = String::with_capacity(18 + key.len());
    push_message(&mut message, origin, key);
    message
}

/// The announcement of a change of `kind` (see [`scripts`]) that a script
/// would publish with [`message`], for plain commands.
fn announced(kind: char, origin: Origin, key: &str) -> String {
    let mut message = String::with_capacity(19 + key.len());
    message.push(kind);
    push_message(&mut message, origin, key);
    message
}

fn push_message(message: &mut String, origin: Origin, key: &str) {
    message.push('|');
    origin.push_hex(message);
    message.push('|');
    message.push_str(key);
}

fn int(what: &str, reply: &Value) -> Result<i64, StoreError> {
    match reply {
        Value::Int(n) => Ok(*n),
        other => Err(unexpected(what, other)),
    }
}

impl Store for RedisStore {
    fn get_or_lease<'a>(
        &'a self,
        key: &'a StoreKey,
        request: &'a LeaseRequest,
    ) -> BoxFuture<'a, Result<Lookup, StoreError>> {
        Box::pin(async move {
            let (mode, expected): (&[u8], &[u8]) = match &request.grant {
                Grant::IfNoValue => (b"0", b""),
                Grant::OverAnyValue => (b"1", b""),
                Grant::OverGeneration(generation) => {
                    (b"2", generation.as_deref().map_or(&b""[..], str::as_bytes))
                }
            };
            let ahead = self.ahead_of_backplane(key.namespace()).await;
            let names = KeyNames::new(key);
            let token = self.token();
            let grant = grant::lease_value(&token, request);
            let fence_ms = millis(request.fence_ttl);
            let value_name = keys::ValueName::new(key);
            let id = value_name.id();
            // Plain commands for a key just read absent, and for others
            // while such requests mostly find no value and a value found
            // would name its expiry (see `grant`); not for a key likely
            // present: one this store recalls, or a waiter's.
            let absences = &self.inner.absences;
            let if_no_value = request.grant == Grant::IfNoValue;
            let noted = if_no_value && absences.take(id);
            let unnoted = if_no_value
                && !noted
                && !absences.take_awaited(id)
                && !self.inner.expiries.is_live(id);
            let mut learn = unnoted;
            if noted
                || (unnoted
                    && self.inner.connection.server_clock().is_some()
                    && absences.plain_unnoted())
            {
                let plainly = self.lease_plainly(key, &names, &token, &grant, &fence_ms);
                match plainly.await? {
                    Ok(lookup) => {
                        let hit = matches!(lookup, Lookup::Hit(_));
                        if unnoted {
                            absences.found_unnoted(hit);
                        }
                        // A grant, like the script's, reads nothing kept.
                        if hit {
                            self.went_ahead(ahead, &Ok::<(), ()>(()));
                        }
                        return Ok(lookup);
                    }
                    Err(present) if unnoted => {
                        absences.found_unnoted(present);
                        learn = false;
                    }
                    Err(_) => {}
                }
            }
            let clear = self.clear_copy_due(&value_name);
            let asked = Instant::now();
            let reply = self
                .inner
                .connection
                .invoke_on(
                    &scripts::GET_OR_LEASE,
                    &[&names.value],
                    &[
                        grant.as_bytes(),
                        fence_ms.as_bytes(),
                        mode,
                        expected,
                        names.lease.as_bytes(),
                        names.waiters.as_bytes(),
                        clear.as_bytes(),
                    ],
                    self.inner.config.op_timeout,
                )
                .await?;
            if learn {
                let present =
                    matches!(&reply, Value::Array(items) if items.first() == Some(&Value::Int(1)));
                absences.found_unnoted(present);
            }
            match reply {
                Value::Array(mut items) => match items.as_mut_slice() {
                    [Value::Int(1), Value::BulkString(bytes), pttl] => {
                        let found = stored(std::mem::take(bytes), pttl);
                        // Remembered as a plain read's is: the next read of
                        // this value may be a plain GET.
                        self.inner.expiries.learn_read(id, &found, asked);
                        let hit = Ok(Lookup::Hit(found));
                        self.went_ahead(ahead, &hit);
                        hit
                    }
                    [Value::Int(2)] if request.grant == Grant::IfNoValue => {
                        Ok(Lookup::Granted(Lease::over_no_value(token)))
                    }
                    [Value::Int(2)] => Ok(Lookup::Granted(Lease::new(token))),
                    [Value::Int(3), pttl] => {
                        if if_no_value {
                            absences.note_awaited(id);
                        }
                        Ok(Lookup::Held {
                            remaining: remaining(pttl),
                        })
                    }
                    [Value::Int(4)] => Ok(Lookup::Changed),
                    _ => Err(unexpected("get_or_lease", &Value::Array(items))),
                },
                other => Err(unexpected("get_or_lease", &other)),
            }
        })
    }

    /// A key whose value this store read or wrote and whose time to live,
    /// as remembered from then, is not over.
    fn recalls(&self, key: &StoreKey) -> bool {
        let id = keys::ValueName::new(key).id();
        self.inner.expiries.is_live(id)
    }

    fn get<'a>(&'a self, key: &'a StoreKey) -> BoxFuture<'a, Result<Option<Stored>, StoreError>> {
        Box::pin(self.read(key))
    }

    fn get_many<'a>(
        &'a self,
        keys: &'a [StoreKey],
    ) -> BoxFuture<'a, Result<Vec<Option<Stored>>, StoreError>> {
        Box::pin(async move {
            let ahead = match keys.first() {
                Some(key) => self.ahead_of_backplane(key.namespace()).await,
                None => Ahead::default(),
            };
            let found = self.read_many(keys).await;
            self.went_ahead(ahead, &found);
            found
        })
    }

    fn renew<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
        request: &'a LeaseRequest,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let names = KeyNames::new(key);
            let lease_ms = millis(request.lease_ttl);
            let fence_ms = millis(request.fence_ttl);
            let reply = self
                .run(
                    &scripts::RENEW,
                    &names,
                    &[
                        lease.token().as_bytes(),
                        lease_ms.as_bytes(),
                        fence_ms.as_bytes(),
                    ],
                )
                .await?;
            Ok(int("renew", &reply)? == 1)
        })
    }

    fn commit<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
        bytes: &'a [u8],
        ttl: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<Commit, StoreError>> {
        Box::pin(async move {
            let names = KeyNames::new(key);
            let (verb, channel) = self.key_channel(key.namespace(), &names);
            let message = message(origin, key.key());
            let ttl_ms = millis(ttl);
            let asked = Instant::now();
            let generation = self.generation_of(lease.token(), ttl, asked);
            let framed = frame::frame(&generation, bytes);
            let value_name = keys::ValueName::new(key);
            let clear = self.clear_copy_due(&value_name);
            let over_value: &[u8] = if lease.over_value() { b"1" } else { b"0" };
            let reply = self
                .inner
                .connection
                .invoke_on(
                    &scripts::COMMIT,
                    &[&names.value],
                    &[
                        lease.token().as_bytes(),
                        &framed,
                        ttl_ms.as_bytes(),
                        names.lease.as_bytes(),
                        names.waiters.as_bytes(),
                        clear.as_bytes(),
                        over_value,
                        verb,
                        channel.as_bytes(),
                        message.as_bytes(),
                    ],
                    self.inner.config.op_timeout,
                )
                .await?;
            Ok(if int("commit", &reply)? == 1 {
                self.learn_written(value_name.id(), &generation, ttl, asked);
                Commit::Stored
            } else {
                Commit::Refused
            })
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a StoreKey,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let names = KeyNames::new(key);
            let (verb, channel) = self.key_channel(key.namespace(), &names);
            let message = message(Origin::new(0), key.key());
            let reply = self
                .run(
                    &scripts::RELEASE,
                    &names,
                    &[
                        lease.token().as_bytes(),
                        verb,
                        channel.as_bytes(),
                        message.as_bytes(),
                    ],
                )
                .await?;
            int("release", &reply).map(drop)
        })
    }

    fn set<'a>(
        &'a self,
        key: &'a StoreKey,
        bytes: &'a [u8],
        ttl: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // The writer keeps the value in its L1: after the first
            // subscription, like a read.
            let ahead = self.ahead_of_backplane(key.namespace()).await;
            let names = KeyNames::new(key);
            let (verb, channel) = self.key_channel(key.namespace(), &names);
            let message = message(origin, key.key());
            let ttl_ms = millis(ttl);
            let asked = Instant::now();
            let generation = self.generation_of(&self.token(), ttl, asked);
            let framed = frame::frame(&generation, bytes);
            let value_name = keys::ValueName::new(key);
            let clear = self.clear_copy_due(&value_name);
            let reply = self
                .inner
                .connection
                .invoke_on(
                    &scripts::SET,
                    &[&names.value],
                    &[
                        &framed,
                        ttl_ms.as_bytes(),
                        names.lease.as_bytes(),
                        names.waiters.as_bytes(),
                        clear.as_bytes(),
                        verb,
                        channel.as_bytes(),
                        message.as_bytes(),
                    ],
                    self.inner.config.op_timeout,
                )
                .await?;
            let written = int("set", &reply).map(drop);
            if written.is_ok() {
                self.learn_written(value_name.id(), &generation, ttl, asked);
            }
            self.went_ahead(ahead, &written);
            written
        })
    }

    fn invalidate<'a>(
        &'a self,
        key: &'a StoreKey,
        origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // Plain commands, pipelined: `DEL` of the three keys is atomic
            // by itself, and the announcement follows it on the connection,
            // so whoever hears it finds them gone. (A fill that lands in
            // between is evicted by the announcement: a miss, never a stale
            // copy.)
            let names = KeyNames::new(key);
            // The value is gone: no longer recalled, whoever answers first.
            self.inner.expiries.forget(keys::ValueName::new(key).id());
            let (verb, channel) = self.key_channel(key.namespace(), &names);
            let mut pipe = ::redis::Pipeline::with_capacity(2);
            pipe.cmd("DEL")
                .arg(&names.value)
                .arg(&names.lease)
                .arg(&names.waiters);
            let mut publish = ::redis::Cmd::new();
            publish
                .arg(verb)
                .arg(&channel)
                .arg(announced('i', origin, key.key()));
            pipe.add_command(publish);
            pipe.ignore_errors();
            let timeout = crate::store::stretched(self.inner.config.op_timeout);
            let connection = &self.inner.connection;
            match connection
                .pipelined_as(&pipe, timeout, "invalidate")
                .await?
            {
                Value::Array(replies) if replies.len() == 2 => {
                    for reply in replies {
                        answered(reply)?;
                    }
                    Ok(())
                }
                other => Err(unexpected("invalidate", &other)),
            }
        })
    }

    /// On a cluster, `key`'s bucket: each bucket holds its own copy of the
    /// versions, in its slot (a shard holds the copies that guard its own
    /// entries). On one server, 0: one copy.
    fn version_home(&self, key: &StoreKey) -> u32 {
        match self.inner.connection {
            Connection::Cluster(_) => keys::bucket_of(key),
            Connection::Standalone(_) => 0,
        }
    }

    fn tag_versions<'a>(
        &'a self,
        namespace: &'a str,
        home: u32,
        tags: &'a [Arc<str>],
        retention: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<Vec<Arc<str>>, StoreError>> {
        Box::pin(async move {
            if tags.is_empty() {
                return Ok(Vec::new());
            }
            let ahead = self.ahead_of_backplane(namespace).await;
            let names: Vec<String> = tags
                .iter()
                .map(|tag| self.version_key(namespace, home, tag))
                .collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let fresh: Vec<Arc<str>> = {
                let mut rng = lock_std(&self.inner.rng);
                tags.iter().map(|_| new_version(&mut rng)).collect()
            };
            let retention_ms = millis(retention);
            // A copy created anew is announced in its own slot.
            let (verb, channel) = self.announcement(namespace, || {
                keys::bucket_channel(namespace, keys::home_tag(home))
            });
            let origin = origin.to_hex();
            let mut args: Vec<&[u8]> = vec![
                retention_ms.as_bytes(),
                verb,
                channel.as_bytes(),
                origin.as_bytes(),
            ];
            for (tag, version) in tags.iter().zip(&fresh) {
                args.push(tag.as_bytes());
                args.push(version.as_bytes());
            }
            let reply = self
                .inner
                .connection
                .invoke_on(
                    &scripts::TAG_VERSIONS,
                    &names,
                    &args,
                    self.inner.config.op_timeout,
                )
                .await?;
            let versions = match &reply {
                Value::Array(items) if items.len() == tags.len() => {
                    items.iter().map(tag_version).collect::<Option<Vec<_>>>()
                }
                _ => None,
            };
            let versions = versions.ok_or_else(|| unexpected("tag versions", &reply));
            self.went_ahead(ahead, &versions);
            versions
        })
    }

    fn invalidate_tag<'a>(
        &'a self,
        namespace: &'a str,
        tag: &'a str,
        retention: Duration,
        origin: Origin,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let (verb, channel) = self.tag_channel(namespace);
            let kind = if tag.is_empty() { 'x' } else { 't' };
            let message = format!("{kind}|{}|{tag}", origin.to_hex());
            let version = new_version(&mut lock_std(&self.inner.rng));
            let retention_ms = millis(retention);
            if let Connection::Cluster(cluster) = &self.inner.connection {
                let timeout = self.inner.config.op_timeout;
                let copies: Vec<String> = (0..keys::BUCKETS as u32)
                    .map(|home| keys::copy_key(namespace, home, tag))
                    .collect();
                let moves = cluster::MoveCopies {
                    copies: &copies,
                    version: &version,
                    retention_ms: &retention_ms,
                };
                bounded(timeout, "invalidate tag", cluster.move_copies(moves)).await?;
                let mut announce = ::redis::cmd("SPUBLISH");
                announce.arg(&channel).arg(&message);
                bounded(timeout, "invalidate tag", cluster.query(&announce)).await?;
                return Ok(());
            }
            let key = keys::tag_key(namespace, tag);
            let reply = self
                .inner
                .connection
                .invoke_on(
                    &scripts::INVALIDATE_TAG,
                    &[key.as_str()],
                    &[
                        version.as_bytes(),
                        retention_ms.as_bytes(),
                        verb,
                        channel.as_bytes(),
                        message.as_bytes(),
                    ],
                    self.inner.config.op_timeout,
                )
                .await?;
            int("invalidate tag", &reply).map(drop)
        })
    }

    fn backplane(&self, namespace: &str, sink: Weak<dyn ChangeSink>) -> bool {
        self.inner.tracker.attach(namespace);
        self.inner
            .subscriber
            .attach_sink(&keys::channel(namespace), sink);
        true
    }

    fn call_bound(&self) -> Option<Duration> {
        Some(self.inner.config.op_timeout)
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.inner.connection.ping(self.inner.config.op_timeout))
    }

    fn attach(&self, namespace: &str) {
        self.inner.subscriber.subscribe(&keys::channel(namespace));
    }

    fn listen(&self, key: &StoreKey) -> Listener {
        let channel = keys::channel(key.namespace());
        let id = keys::listener_id(key.namespace(), key.key());
        self.inner.subscriber.listen(&channel, id.into())
    }
}

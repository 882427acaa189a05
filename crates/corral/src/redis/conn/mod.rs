//! The command connection (standalone or cluster), script invocation under
//! the operation timeout, and the mapping of redis-rs errors to
//! [`StoreError`].

pub(in crate::redis) mod client;
pub(in crate::redis) mod cluster;
pub(in crate::redis) mod sentinel;
pub(in crate::redis) mod standalone;

use std::fmt;
use std::time::Duration;

use ::redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};

use self::cluster::Cluster;
use self::standalone::Standalone;
use crate::data::error::StoreError;
use crate::redis::clock::ServerClock;
use crate::redis::errors::{bounded, store_error, unexpected};
use crate::redis::keys::{ClearCopy, KeyNames, ValueName};
use crate::redis::scripts::{self, Lua};

/// A multiplexed command connection that reconnects by itself. Clones share
/// the connection.
#[derive(Clone)]
pub(in crate::redis) enum Connection {
    /// One server, reconnecting by itself.
    Standalone(Standalone),
    /// A cluster: one multiplexed connection per node, routed by slot,
    /// rebuilt when its calls keep failing.
    Cluster(Cluster),
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Standalone(_) => f.write_str("Connection::Standalone"),
            Self::Cluster(_) => f.write_str("Connection::Cluster"),
        }
    }
}

impl Connection {
    /// Sends one command and reads its reply (server errors become `Err`).
    async fn query(&self, cmd: &Cmd) -> Result<Value, RedisError> {
        match self {
            Self::Standalone(conn) => conn.query(cmd).await,
            Self::Cluster(conn) => conn.query(cmd).await,
        }
    }

    /// Reads a value key's remaining time to live and its bytes: `PTTL`
    /// then `GET`, pipelined in one round trip, no script. On a cluster both
    /// commands name the same key, so they go to its slot's node together.
    ///
    /// The two commands are not atomic: a write may land between them.
    /// `PTTL` goes first so that such a race can only make the value read
    /// look *older* than it is, never younger: the bytes then belong to a
    /// write made after the `PTTL` (at most the gap between the commands
    /// ago), paired with an older value's remaining time, or with "absent"
    /// (`None`, read as age 0 — true within that gap). Looking older costs
    /// at most an early refresh, which asks over the generation read and so
    /// cannot overwrite anything newer.
    ///
    /// Returns the raw `PTTL` and `GET` replies. With `touch`, the pipeline
    /// also touches the entry's clear version ([`touch`](Self::touch)).
    pub(in crate::redis) async fn read(
        &self,
        value_key: ValueName<'_>,
        touch: Option<ClearCopy<'_>>,
        timeout: Duration,
    ) -> Result<(Value, Value), StoreError> {
        let mut pipe = ::redis::pipe();
        pipe.cmd("PTTL").arg(value_key).cmd("GET").arg(value_key);
        if let Some(copy) = touch {
            self.touch(&mut pipe, copy);
        }
        pipe.ignore_errors();
        match self.pipelined(&pipe, timeout).await? {
            Value::Array(items) => match <[Value; 2]>::try_from(items) {
                Ok([pttl, value]) => Ok((answered(pttl)?, answered(value)?)),
                Err(items) => Err(unexpected("read", &Value::Array(items))),
            },
            other => Err(unexpected("read", &other)),
        }
    }

    /// A plain `GET` of a value key, bounded by `timeout`; with `touch`,
    /// pipelined with the [`touch`](Self::touch) of its clear version.
    pub(in crate::redis) async fn get(
        &self,
        value_key: ValueName<'_>,
        touch: Option<ClearCopy<'_>>,
        timeout: Duration,
    ) -> Result<Value, StoreError> {
        let mut get = Cmd::with_capacity(2, 3 + value_key.len());
        get.arg("GET").arg(value_key);
        let Some(copy) = touch else {
            return bounded(timeout, "read", async {
                match self.query(&get).await {
                    Err(e) if wrong_type(&e) => Ok(foreign()),
                    reply => reply,
                }
            })
            .await;
        };
        let mut pipe = ::redis::Pipeline::with_capacity(2);
        pipe.add_command(get);
        self.touch(&mut pipe, copy);
        pipe.ignore_errors();
        match self.pipelined(&pipe, timeout).await? {
            Value::Array(mut items) if items.len() == 1 => {
                answered(items.pop().unwrap_or_default())
            }
            other => Err(unexpected("read", &other)),
        }
    }

    /// Adds to `pipe` a `TOUCH` of the clear version's copy that guards
    /// the entries read (its reply dropped; refused by an ACL, it is
    /// dropped too), so under an `allkeys-*` eviction policy the version is
    /// never colder than the entries read with it. On a cluster the copy
    /// is in the entries' slot: the pipeline stays on one node.
    pub(in crate::redis) fn touch(
        &self,
        pipe: &mut ::redis::Pipeline,
        copy: impl ::redis::ToSingleRedisArg,
    ) {
        pipe.cmd("TOUCH").arg(copy).ignore();
    }

    /// The standalone connection's epoch (see [`Standalone::epoch`]);
    /// `None` on a cluster or while reconnecting.
    pub(in crate::redis) fn epoch(&self) -> Option<u64> {
        match self {
            Self::Standalone(conn) => conn.epoch(),
            Self::Cluster(_) => None,
        }
    }

    /// The standalone connection's reading of its server's clock (see
    /// [`ServerClock`]); `None` on a cluster (each node keeps its own
    /// clock), while reconnecting, or where the server gave none.
    pub(in crate::redis) fn server_clock(&self) -> Option<ServerClock> {
        match self {
            Self::Standalone(conn) => conn.server_clock(),
            Self::Cluster(_) => None,
        }
    }

    /// Whether this is a cluster connection (version copies per bucket).
    pub(in crate::redis) fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// `items` in the groups one pipeline may carry: on a cluster, one per
    /// hash slot (`slot` of each item), in slot order; on one server, all
    /// of them.
    pub(in crate::redis) fn by_slot<T>(
        &self,
        items: Vec<T>,
        slot: impl Fn(&T) -> u16,
    ) -> Vec<Vec<T>> {
        match self {
            Self::Standalone(_) => vec![items],
            Self::Cluster(_) => {
                let mut groups: std::collections::BTreeMap<u16, Vec<T>> = Default::default();
                for item in items {
                    groups.entry(slot(&item)).or_default().push(item);
                }
                groups.into_values().collect()
            }
        }
    }

    /// Sends `pipe` of reads and reads its replies, bounded by `timeout`.
    pub(in crate::redis) async fn pipelined(
        &self,
        pipe: &::redis::Pipeline,
        timeout: Duration,
    ) -> Result<Value, StoreError> {
        self.pipelined_as(pipe, timeout, "read").await
    }

    /// Sends `pipe` (the commands of `what`, as errors name it) and reads
    /// its replies, bounded by `timeout`.
    pub(in crate::redis) async fn pipelined_as(
        &self,
        pipe: &::redis::Pipeline,
        timeout: Duration,
        what: &'static str,
    ) -> Result<Value, StoreError> {
        bounded(timeout, what, async {
            match self {
                Self::Standalone(conn) => conn.query_pipeline(pipe).await,
                Self::Cluster(conn) => conn.query_pipeline(pipe).await,
            }
        })
        .await
    }

    /// Loads every script (`SCRIPT LOAD`; on a cluster, on every master), so
    /// steady state sends only `EVALSHA`.
    pub(in crate::redis) async fn load_scripts(&self, timeout: Duration) -> Result<(), StoreError> {
        bounded(timeout, "SCRIPT LOAD", async {
            for lua in scripts::all() {
                let mut load = ::redis::cmd("SCRIPT");
                load.arg("LOAD").arg(lua.source());
                self.query(&load).await?;
            }
            Ok(())
        })
        .await
    }

    /// Runs `lua` on the keys of `names` (value, lease, waiters) with `args`: `EVALSHA`, or —
    /// when the server lost its script cache (a restart, `SCRIPT FLUSH`, a
    /// failover) — `EVAL` with the source, which also caches it again. The
    /// whole exchange is bounded by `timeout`.
    pub(in crate::redis) async fn invoke(
        &self,
        lua: &Lua,
        names: &KeyNames,
        args: &[&[u8]],
        timeout: Duration,
    ) -> Result<Value, StoreError> {
        let keys = [
            names.value.as_str(),
            names.lease.as_str(),
            names.waiters.as_str(),
        ];
        self.invoke_on(lua, &keys, args, timeout).await
    }

    /// [`invoke`](Self::invoke) on any keys (all in one hash slot).
    pub(in crate::redis) async fn invoke_on(
        &self,
        lua: &Lua,
        keys: &[&str],
        args: &[&[u8]],
        timeout: Duration,
    ) -> Result<Value, StoreError> {
        // A flight's calls may wait longer than the store's timeout.
        let timeout = crate::store::stretched(timeout);
        bounded(timeout, "script", async {
            let evalsha = eval_cmd("EVALSHA", lua.hash().as_bytes(), keys, args);
            match self.query(&evalsha).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    let eval = eval_cmd("EVAL", lua.source().as_bytes(), keys, args);
                    self.query(&eval).await
                }
                reply => reply,
            }
        })
        .await
    }

    /// `PING`, bounded by `timeout` (on a cluster, to any one node).
    pub(in crate::redis) async fn ping(&self, timeout: Duration) -> Result<(), StoreError> {
        bounded(timeout, "PING", self.query(&::redis::cmd("PING")))
            .await
            .map(drop)
    }
}

/// `verb script numkeys keys.. args..`, built in buffers sized for it up
/// front (growing them argument by argument reallocates each a few times).
fn eval_cmd(verb: &str, script: &[u8], keys: &[&str], args: &[&[u8]]) -> Cmd {
    let arg_count = 3 + keys.len() + args.len();
    let data = verb.len()
        + script.len()
        + 20
        + keys.iter().map(|key| key.len()).sum::<usize>()
        + args.iter().map(|arg| arg.len()).sum::<usize>();
    let mut cmd = Cmd::with_capacity(arg_count, data);
    cmd.arg(verb).arg(script).arg(keys.len());
    for key in keys {
        cmd.arg(key.as_bytes());
    }
    for arg in args {
        cmd.arg(*arg);
    }
    cmd
}

/// What a read of a value key holding another Redis type answers: empty
/// bytes, which are unframed (no generation) and never decode — a miss the
/// cache counts, which the next commit overwrites (`SET` replaces any type).
/// The scripts read such a key the same way (`lua_read`).
fn foreign() -> Value {
    Value::BulkString(Vec::new())
}

/// Whether `e` is Redis' `WRONGTYPE`: the key holds another type.
fn wrong_type(e: &RedisError) -> bool {
    e.code() == Some("WRONGTYPE")
}

/// One reply of a pipeline sent with `ignore_errors`: a `WRONGTYPE` error
/// is [`foreign`] data; any other error is classified as the whole
/// pipeline's would be.
pub(in crate::redis) fn answered(reply: Value) -> Result<Value, StoreError> {
    match reply {
        Value::ServerError(error) => {
            let error = RedisError::from(error);
            if wrong_type(&error) {
                Ok(foreign())
            } else {
                Err(store_error("read", &error))
            }
        }
        reply => Ok(reply),
    }
}

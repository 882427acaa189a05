//! The lease request of a key in plain commands, no script: asked for a
//! key a plain read just found absent (a namespace whose reads mostly
//! hit; which keys: [`Absences`]), and for every key where values name
//! their expiry on the server's clock (a standalone server or Sentinel:
//! see [`clock`](super::clock)), so that a cold miss costs the server a
//! `SET` and a `GET`, not a script, in the same one round trip.
//!
//! [`Absences`]: super::read::absences::Absences
//!
//! `SET <lease> <token>.<hold> NX PX <fence>`, then `GET` of the value,
//! pipelined in one round trip (on a cluster both name keys of one hash
//! slot).
//!
//! Why `SET` goes first. Once `SET ... NX` has written the lease key, no
//! other leader's key exists (neither live nor fencing), so no commit can
//! land until this one: a `GET` after it that finds the value absent means
//! absent until this lease ends, and a `GET` that finds it present sees
//! every commit made before the grant. Read first, a commit landing between
//! the read and the grant would be filled again.
//!
//! What each answer means:
//! - granted, no value: the grant ([`Lease::over_no_value`]). The usual
//!   cold miss: a `SET` and a `GET`, no `PTTL`, no `TOUCH` (the commit
//!   touches when its turn is due).
//! - a value, granted or not: a hit, when the value names its expiry
//!   (else the script reads it with its `PTTL`). A lease taken for nothing
//!   goes back first ([`RELEASE`](super::scripts::RELEASE), which wakes
//!   anyone who began waiting for it): a round trip and a script that only
//!   a hit among keys that mostly miss pays (a cache asks this way first
//!   only while fewer than a quarter of such reads hit: see `FirstReads`;
//!   and the store goes back to the script past a quarter: see
//!   [`Absences`]).
//! - not granted, no value: the lease key exists — live, lapsed but
//!   fencing, or broken — and
//!   [`scripts::GET_OR_LEASE`](super::scripts::GET_OR_LEASE) answers, as
//!   it did before (held, with the waiters mark set atomically; or taken
//!   over).

use ::redis::Value;

use super::conn::answered;
use super::errors::unexpected;
use super::keys::{KeyNames, ValueName};
use super::RedisStore;
use crate::data::error::StoreError;
use crate::store::{Lease, LeaseRequest, Lookup, Store, StoreKey};

/// What a lease key holds once granted: `<token>.<hold>`, the hold being
/// the fence's time beyond the lease's in milliseconds (see
/// [`scripts`](super::scripts)). Written here alone, for the lease script
/// and the plain request.
pub(super) fn lease_value(token: &str, request: &LeaseRequest) -> String {
    let hold = super::ms(request.fence_ttl).saturating_sub(super::ms(request.lease_ttl));
    let mut grant = String::with_capacity(token.len() + 21);
    grant.push_str(token);
    grant.push('.');
    crate::data::key::push_decimal(&mut grant, hold);
    grant
}

impl RedisStore {
    /// [`Grant::IfNoValue`](crate::store::Grant::IfNoValue) without a
    /// script: `Ok(lookup)` is a grant or a hit. `Err(present)`: the
    /// script must decide (the lease key exists, or a value that names no
    /// expiry is present, and this request's lease, if it took one, was
    /// released); `present` tells whether a value was found.
    pub(super) async fn lease_plainly(
        &self,
        key: &StoreKey,
        names: &KeyNames,
        token: &str,
        grant: &str,
        fence_ms: &str,
    ) -> Result<Result<Lookup, bool>, StoreError> {
        let mut pipe = ::redis::Pipeline::with_capacity(2);
        pipe.cmd("SET")
            .arg(&names.lease)
            .arg(grant)
            .arg("NX")
            .arg("PX")
            .arg(fence_ms);
        pipe.cmd("GET").arg(&names.value);
        pipe.ignore_errors();
        let timeout = crate::store::stretched(self.inner.config.op_timeout);
        let replies = match self.inner.connection.pipelined(&pipe, timeout).await? {
            Value::Array(items) => <[Value; 2]>::try_from(items)
                .map_err(|items| unexpected("get_or_lease", &Value::Array(items)))?,
            other => return Err(unexpected("get_or_lease", &other)),
        };
        let [set, value] = replies;
        let granted = match answered(set)? {
            Value::Okay => true,
            Value::Nil => false,
            other => return Err(unexpected("get_or_lease", &other)),
        };
        let bytes = match answered(value)? {
            Value::Nil if granted => {
                return Ok(Ok(Lookup::Granted(Lease::over_no_value(token.to_owned()))))
            }
            Value::Nil => return Ok(Err(false)),
            Value::BulkString(bytes) => bytes,
            other => return Err(unexpected("get_or_lease", &other)),
        };
        if granted {
            // Present after all: the lease, taken for nothing, goes back.
            self.release(key, &Lease::new(token.to_owned())).await?;
        }
        let id = ValueName::new(key).id();
        Ok(self.named_value(id, bytes).map(Lookup::Hit).ok_or(true))
    }
}

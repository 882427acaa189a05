//! The lease request of a key a plain read just found absent, in plain
//! commands: the miss of a namespace whose reads mostly hit needs no script
//! to take its lease. (Which keys: [`Absences`].)
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
//! What the script still decides. A lease key that exists — live, lapsed
//! but fencing, or broken — makes `SET ... NX` write nothing: then
//! [`scripts::GET_OR_LEASE`](super::scripts::GET_OR_LEASE) answers, as it
//! did before (held, with the waiters mark set atomically; or taken over).
//! A value found present under the fresh lease (it landed since the read)
//! is rare: the lease is released (waking anyone who began waiting for it)
//! and the script answers too, with the value and its time to live (and
//! the touch of the clear version a hit makes). So the usual miss pays a
//! `SET` and a `GET`, no `PTTL` and no `TOUCH` (the commit touches when
//! its turn is due).
//!
//! Its grant is [`Lease::over_no_value`]: the `GET` under the new lease
//! found none.

use ::redis::Value;

use super::conn::answered;
use super::errors::unexpected;
use super::keys::KeyNames;
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
    /// script, for a key lately read absent: `Some` is always a grant.
    /// `None`: the script must decide (the lease key exists, or a value
    /// landed and this request's lease was released).
    pub(super) async fn lease_plainly(
        &self,
        key: &StoreKey,
        names: &KeyNames,
        token: &str,
        grant: &str,
        fence_ms: &str,
    ) -> Result<Option<Lookup>, StoreError> {
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
        match (answered(set)?, answered(value)?) {
            (Value::Nil, _) => Ok(None),
            (Value::Okay, Value::Nil) => Ok(Some(Lookup::Granted(Lease::over_no_value(
                token.to_owned(),
            )))),
            (Value::Okay, Value::BulkString(_)) => {
                // Present after all: the lease, taken for nothing, goes
                // back, and the script reads the value with its expiry.
                self.release(key, &Lease::new(token.to_owned())).await?;
                Ok(None)
            }
            (set, value) => Err(unexpected("get_or_lease", &Value::Array(vec![set, value]))),
        }
    }
}

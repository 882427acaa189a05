//! The Lua scripts: one per store operation that writes or takes a lease,
//! each one round trip. (A plain read needs no script: see
//! [`Connection::read`](super::conn::Connection::read); nor does an
//! invalidation: a `DEL` of its three keys, then its announcement,
//! pipelined; nor, mostly, a lease request over no value: a `SET NX` and a
//! `GET`, pipelined, see [`grant`](super::grant).)
//!
//! The per-key scripts that keep a lease (`RENEW`, `RELEASE`) take the
//! same three keys — `KEYS[1]` value, `KEYS[2]` lease, `KEYS[3]` waiters
//! mark, all in one hash slot — so cluster routing sees them; the lease
//! request, the commit and the write, which read keys the caller keeps
//! tracked, declare the value alone and name the others in arguments (see
//! `GET_OR_LEASE` and `COMMIT`).
//!
//! **The lease is its own fence.** The lease key holds `<token>.<hold>`
//! and lives `lease_ttl + hold` from its grant (or last renewal), `hold`
//! being the leader's fill timeout in milliseconds. It is *live* (it
//! blocks other grants) while more than `hold` is left of it, and it
//! *fences* (its leader may still commit) for as long as it exists with
//! the leader's token: a leader whose renewal was lost may commit until its
//! hard timeout, unless another grant took the key over. A commit, a
//! release, a write and an invalidation delete it, so no other write lands
//! under an old token; no key outlives a fill. A script that changes a
//! key announces it (`announce`, below): `ARGV[#ARGV-2]` is the verb
//! (`PUBLISH` on one server, `SPUBLISH` on a cluster), `ARGV[#ARGV-1]`
//! the channel (the namespace's, or on a cluster the sharded channel of
//! the key's bucket, in the key's slot), and the message is a one-letter kind followed by
//! `ARGV[#ARGV]` (`|<origin>|<key>`), so waiters of the key wake up and
//! other caches' L1s evict it. Kinds: `c` committed fill, `r`
//! released or refused (wakes waiters only), `s` set, `i` invalidated, `t`
//! tag invalidated, `x` cleared. Times are milliseconds, at least 1.
//!
//! **Who hears of a fill.** A fill's end concerns two kinds of process:
//! those waiting for it, and those that may keep the value it replaces.
//! A caller that finds the lease held (and will wait) sets the waiters
//! mark; a commit over a present value may replace a copy kept anywhere.
//! So `COMMIT` announces only when the mark was set or its lease was
//! granted where a value may be present ([`Lease::over_value`]), and
//! `RELEASE` (and a refused commit) only when the mark is set: the fill of
//! a key that was absent at its grant, with no one waiting elsewhere, the
//! usual cold miss, tells no one. (An L1 keeps a copy no longer than its
//! value lives in the store, so an absent value has no copy to evict; and
//! every cache's write of the key meanwhile drops the lease, so the commit
//! is refused.) The grant knows what the commit would otherwise read again.
//!
//! [`Lease::over_value`]: crate::store::Lease::over_value
//!
//! **The clear version's touches.** An argument naming the clear
//! version's copy may be empty: the script then does not touch it. The
//! store names it only when its turn is due (see `read/touches.rs`), as
//! for the plain reads' touches: one touch per copy per interval keeps it
//! as warm as the entries under it, at Redis's one-second idle resolution.
//!
//! A write ends the server's client tracking of the key for the writer
//! too, so a script that writes a key its caller goes on keeping (`COMMIT`
//! and `SET`: the value, in the caller's L1; `TAG_VERSIONS`: a version)
//! reads it last (`EXISTS`, ignored if the ACL refuses it), which tracks
//! it again: a later change by anyone still reaches the caller.

use std::sync::LazyLock;

use ::redis::Script;

use super::frame::lua_generation;

/// A Lua script: its source (sent with `EVAL` when a server lacks it) and
/// its SHA1 (sent with `EVALSHA`).
#[derive(Debug)]
pub(super) struct Lua {
    source: &'static str,
    script: Script,
}

impl Lua {
    fn new(source: &'static str) -> Self {
        Self {
            source,
            script: Script::new(source),
        }
    }

    /// The Lua source.
    pub(super) fn source(&self) -> &'static str {
        self.source
    }

    /// The SHA1 of the source, as `EVALSHA` wants it.
    pub(super) fn hash(&self) -> &str {
        self.script.get_hash()
    }
}

/// `read(key)`: a key's string value, `false` when it is absent, and `''`
/// when it holds another Redis type (foreign data, e.g. a hash someone
/// wrote over a value key): read like unframed bytes — undecodable, no
/// generation — never a `WRONGTYPE` error. The per-key scripts read every
/// key through it.
macro_rules! lua_read {
    () => {
        r"
local function read(key)
  local value = redis.pcall('GET', key)
  if type(value) == 'table' then
    return ''
  end
  return value
end
"
    };
}

/// `owns(key)`: the hold of the lease in the lease key `key` if it is the
/// lease of token `ARGV[1]`, else `nil`.
macro_rules! lua_owns {
    () => {
        r"
local function owns(key)
  local held = read(key)
  if held and string.sub(held, 1, #ARGV[1] + 1) == ARGV[1] .. '.' then
    return tonumber(string.sub(held, #ARGV[1] + 2))
  end
  return nil
end
"
    };
}

/// `announce(kind)`: publishes `kind .. ARGV[#ARGV]` on the channel
/// `ARGV[#ARGV-1]` with the verb `ARGV[#ARGV-2]` (`PUBLISH` or `SPUBLISH`).
macro_rules! lua_announce {
    () => {
        r"
local function announce(kind)
  redis.call(ARGV[#ARGV - 2], ARGV[#ARGV - 1], kind .. ARGV[#ARGV])
end
"
    };
}

/// Value if present (when the mode says so), else a lease grant, else
/// "held"; for a refresh, a grant only over the generation it read.
///
/// One key, `KEYS[1]`, the value. ARGV: the lease key's contents to grant
/// (`<token>.<hold>`, as [`lease_value`](super::grant::lease_value)
/// writes them for the plain request too), fence_ms (the lease's time plus
/// the hold), mode (`0` grant only without a value, `1` grant over any
/// value, `2` grant only over a present value whose embedded generation is
/// ARGV[4], the empty string meaning "unframed, no generation"), expected
/// generation, then the names of the lease, the waiters mark and the
/// clear version's copy (empty: no touch). Returns `{1, bytes, pttl}`
/// (hit), `{2}` (granted), `{3, pttl}` (held, with the lease's time left)
/// or `{4}` (changed).
///
/// Why the other keys are arguments. A script that writes nothing (a hit)
/// makes the server's client tracking remember every key it declares, for
/// the caller: declared, the lease and the mark would be tracked on
/// every hit — doubling the script's server time (17 against 8 µs a hit,
/// Redis 7.0) — and each later fill of the key would send the caller an
/// invalidation of each, which it ignores. They share the value's hash
/// slot (its bucket's tag), so a cluster node serves them all; the clear
/// version's copy is that bucket's own on a cluster.
///
/// Mode 2 invariants. Every write embeds a generation no other write
/// shares (`COMMIT` its lease token, fresh per grant; `SET` a fresh random
/// token) and an invalidation deletes the value, so "present with the
/// expected generation" means "no write and no invalidation since the caller read
/// it": any of them landing in between answers `{4}`. A lease granted
/// elsewhere over the same value is either live (`{3}`, the refresh stands
/// down) or lapsed, and then it must not block this grant, which takes the
/// key over with the new token — so the lapsed leader's late commit is
/// refused by `COMMIT`'s token check.
///
/// The clear version's copy guards the entry: a hit touches it when its
/// turn is due (see `Connection::touch`), so it is never colder than the
/// entries it serves.
/// A caller that finds the lease held and will wait for it (modes `0` and
/// `1`; a refresh stands down) sets the waiters mark for at least as long
/// as the lease key and its own fence time: the fill's end is announced
/// to it.
///
/// A value key of another type reads as `''` (see `lua_read`): a hit the
/// cache cannot decode, then a grant over "no generation", and `COMMIT`'s
/// `SET` replaces it. A lease key that is broken — no expiry (`PTTL` -1),
/// or contents that are not a lease (another type, or not lowercase hex
/// digits, a dot and a hold in digits, 96 bytes at most) — was not
/// written by a grant:
/// it is taken over as if absent, so it cannot hold the key until
/// `fill_timeout`.
pub(super) static GET_OR_LEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        lua_generation!(),
        lua_read!(),
        r"
local grant, fence = ARGV[1], ARGV[2]
local lease, waiters, clear = ARGV[5], ARGV[6], ARGV[7]
if ARGV[3] == '0' then
  local value = read(KEYS[1])
  if value then
    if clear ~= '' then
      redis.pcall('TOUCH', clear)
    end
    return {1, value, redis.call('PTTL', KEYS[1])}
  end
elseif ARGV[3] == '2' then
  local value = read(KEYS[1])
  if not value or generation(value) ~= ARGV[4] then
    return {4}
  end
end
if not redis.call('SET', lease, grant, 'NX', 'PX', fence) then
  local pttl = redis.call('PTTL', lease)
  local held = read(lease)
  local hold = held and #held <= 96 and tonumber(string.match(held, '^[0-9a-f]+%.(%d+)$'))
  if pttl ~= -1 and hold and pttl > hold then
    if ARGV[3] ~= '2' then
      redis.call('SET', waiters, '1', 'PX', math.max(pttl, tonumber(fence)))
    end
    return {3, pttl - hold}
  end
  redis.call('SET', lease, grant, 'PX', fence)
end
return {2}
"
    ))
});

/// Extends the lease its caller owns to `lease_ms` from now (plus its
/// hold); a waiters mark lives at least `fence_ms` from now. A lapsed lease
/// that no grant took over is owned still, and is live again.
///
/// ARGV: token, lease_ms, fence_ms. Returns 1 (renewed) or 0 (not owned).
pub(super) static RENEW: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        lua_read!(),
        lua_owns!(),
        r"
local hold = owns(KEYS[2])
if not hold then
  return 0
end
redis.call('PEXPIRE', KEYS[2], hold + tonumber(ARGV[2]))
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
return 1
",
    ))
});

/// Fenced write (stored only while the lease key holds the caller's
/// token, live or lapsed), unlock and notification: a stored value is
/// announced when someone waits (the mark, which it clears) or the lease
/// was granted where a value may be present; a refused one when someone
/// waits. A stored value touches the clear version's copy guarding it (as
/// `GET_OR_LEASE` does) when it is named.
///
/// One key, `KEYS[1]`, the value; the others are arguments, as for
/// `GET_OR_LEASE`: on Redis 7.0 every read inside a script makes client
/// tracking remember every key the script declares, so declared, the lease
/// and the mark were remembered at each of the four reads and then
/// invalidated by the `DEL` (19.7–23.9 against 16.3–19.5 µs a commit in
/// three runs each of `service_bench --space 20x --mix read`).
///
/// ARGV: token, bytes (framed with the token as generation), ttl_ms, the
/// names of the lease, the waiters mark and the clear version's copy
/// (empty: no touch), `1` if the lease was granted where a value may be
/// present (else `0`), verb, channel, message. Returns 1 (stored) or 0
/// (refused: the lease key was taken over, deleted or expired).
pub(super) static COMMIT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        lua_read!(),
        lua_owns!(),
        lua_announce!(),
        r"
local lease, waiters, clear = ARGV[4], ARGV[5], ARGV[6]
if owns(lease) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  if clear ~= '' then
    redis.pcall('TOUCH', clear)
  end
  redis.pcall('EXISTS', KEYS[1])
  if redis.call('DEL', lease, waiters) == 2 or ARGV[7] == '1' then
    announce('c')
  end
  return 1
end
if redis.call('EXISTS', waiters) == 1 then
  announce('r')
end
return 0
",
    ))
});

/// Owner-checked release of the lease, and notification of the waiters,
/// if any (clearing their mark: woken, they ask again).
///
/// ARGV: token, verb, channel, message. Returns 0.
pub(super) static RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        lua_read!(),
        lua_owns!(),
        lua_announce!(),
        r"
if owns(KEYS[2]) then
  redis.call('DEL', KEYS[2])
end
if redis.call('DEL', KEYS[3]) == 1 then
  announce('r')
end
return 0
",
    ))
});

/// Unconditional write that drops the lease (so no fill in flight commits
/// over it) and the waiters mark (the announcement wakes them), touching
/// the clear version's copy when named (as `COMMIT` does). One key
/// declared, the value, for the reason `COMMIT` gives.
///
/// ARGV: bytes (framed with a new token as generation), ttl_ms, the names
/// of the lease, the waiters mark and the clear version's copy (empty: no
/// touch), verb, channel, message. Returns 0.
pub(super) static SET: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        lua_announce!(),
        r"
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', ARGV[3], ARGV[4])
if ARGV[5] ~= '' then
  redis.pcall('TOUCH', ARGV[5])
end
redis.pcall('EXISTS', KEYS[1])
announce('s')
return 0
",
    ))
});

/// Moves a tag (or, for the empty tag, the namespace's clear version) to a
/// new version and announces it, on one server. One key: `KEYS[1]` the
/// tag's version key. (A cluster moves each bucket's copy with a plain
/// `SET ... XX`, then announces.)
///
/// ARGV: new version, retention_ms, verb, channel, message (with its kind
/// letter). Returns 0.
pub(super) static INVALIDATE_TAG: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        lua_announce!(),
        r"
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
announce('')
return 0
",
    ))
});

/// The versions of tags (or, for the empty tag, the namespace's clear
/// version), creating each one that is absent or not a version (empty,
/// over 64 bytes, not printable ASCII, another type): a created version is
/// announced as an invalidation, so an entry stamped with a version the
/// store lost never matches again. Every version read or created is kept
/// for at least the retention from now: a tag in use keeps its version. Its
/// expiry is moved (to one and a half retentions) only once less than the
/// retention is left, so that reading a version rarely changes its key:
/// every change, an expiry moved too, makes the server's client tracking
/// tell every process that read the key, which then drops what the
/// version guards. Each key is read last, which tracks it again for the
/// caller. `KEYS`: the tags' version keys (on a cluster, the copies of one
/// bucket, in its slot; the announcement goes on that bucket's channel).
///
/// ARGV: retention_ms, verb, channel, origin (hex), then for each key its
/// tag and a new random version to create it with. Returns the versions, in
/// order.
pub(super) static TAG_VERSIONS: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        lua_read!(),
        r"
local retention = tonumber(ARGV[1])
local kept = retention + math.floor(retention / 2)
local versions = {}
for i, key in ipairs(KEYS) do
  local version = read(key)
  if not version or #version == 0 or #version > 64 or string.find(version, '[^!-~]') then
    local tag = ARGV[3 + 2 * i]
    version = ARGV[4 + 2 * i]
    redis.call('SET', key, version, 'PX', kept)
    local kind = 't'
    if tag == '' then
      kind = 'x'
    end
    redis.call(ARGV[2], ARGV[3], kind .. '|' .. ARGV[4] .. '|' .. tag)
    redis.pcall('EXISTS', key)
  elseif redis.call('PTTL', key) < retention then
    redis.call('PEXPIRE', key, kept)
    redis.pcall('EXISTS', key)
  end
  versions[i] = version
end
return versions
",
    ))
});

/// Every script, for loading them all at connect.
pub(super) fn all() -> [&'static Lua; 7] {
    [
        &*TAG_VERSIONS,
        &*INVALIDATE_TAG,
        &*GET_OR_LEASE,
        &*RENEW,
        &*COMMIT,
        &*RELEASE,
        &*SET,
    ]
}

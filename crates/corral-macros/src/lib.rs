//! The `#[cached]` attribute of [corral](https://docs.rs/corral-cache): an
//! `async fn` whose body is a corral fill. Use it as `corral::cached`
//! (feature `macros`, on by default); this crate is its implementation.

#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![forbid(unsafe_code)]

mod args;
mod expand;
mod signature;
mod template;

use proc_macro::TokenStream;

/// Reads an `async fn`'s result through a `corral::Cache`: its body becomes
/// the fill of [`Cache::get_or_fill`], so concurrent calls with the same key
/// run the body **once** — across tasks, and across processes sharing the
/// cache's store (Redis included) — and every caller gets that one result.
///
/// ```
/// use std::sync::LazyLock;
/// use corral::Cache;
///
/// static USERS: LazyLock<Cache<String>> =
///     LazyLock::new(|| Cache::builder("users").build().expect("valid config"));
///
/// #[derive(Debug)]
/// struct DbError;
/// impl std::fmt::Display for DbError {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("db down")
///     }
/// }
/// impl std::error::Error for DbError {}
///
/// /// The user's name, from the database at most once per TTL.
/// #[corral::cached(cache = USERS, key = "user:{id}")]
/// pub async fn user_name(id: u64) -> Result<String, DbError> {
///     Ok(format!("user {id}")) // query the database here
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // The return type became `Result<String, corral::Error<DbError>>`.
/// let name: Result<String, corral::Error<DbError>> = user_name(42).await;
/// assert_eq!(name.expect("filled"), "user 42");
/// assert_eq!(USERS.peek("user:42").await.expect("peek").as_deref(), Some("user 42"));
/// # }
/// ```
///
/// # The return type changes
///
/// | written | becomes |
/// |---|---|
/// | `async fn f(..) -> Result<V, E>` | `async fn f(..) -> Result<V, corral::Error<E>>` |
/// | `async fn f(..) -> V` | `async fn f(..) -> Result<V, corral::Error>` |
/// | `async fn f(..) -> Result<Option<V>, E>` | `async fn f(..) -> Result<Option<V>, corral::Error<E>>`, through a `Cache<V>` |
///
/// A function answering `Option<V>` reads through a `Cache<V>` (not a
/// `Cache<Option<V>>`): a `None` is cached as "not found" for the cache's
/// [`negative_ttl`], not for the TTL of values, as
/// [`Cache::get_or_fill_option`] does.
///
/// ```
/// use std::sync::LazyLock;
/// use std::time::Duration;
/// use corral::Cache;
///
/// static USERS: LazyLock<Cache<String>> = LazyLock::new(|| {
///     Cache::builder("users")
///         .negative_ttl(Duration::from_secs(5))
///         .build()
///         .expect("valid config")
/// });
///
/// #[corral::cached(cache = USERS, key = "user:{id}")]
/// async fn find_user(id: u64) -> Result<Option<String>, std::io::Error> {
///     Ok((id == 42).then(|| "Ada".to_owned()))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// assert_eq!(find_user(42).await.expect("found").as_deref(), Some("Ada"));
/// assert_eq!(find_user(7).await.expect("looked up"), None);
/// # }
/// ```
///
/// A call can fail in ways the body cannot: the flight passes the cache's
/// hard `fill_timeout` ([`Error::Timeout`]), the body panics
/// ([`Error::FillPanicked`]), the formatted key is invalid
/// ([`Error::InvalidKey`]), or the key holds a cached "not found". And a
/// call that joins another caller's flight gets the **leader's** error,
/// shared by every coalesced caller as [`Error::Fill`]`(Arc<E>)` — so `E`
/// need not be `Clone`, and the caller cannot get it by value. Only `Ok`
/// values are cached: after an `Err`, the next call runs the body again.
/// A `-> V` body cannot fail, but the call still can (timeouts, panics).
///
/// # Arguments
///
/// - `cache = <expr>` (required): an expression that evaluates to something
///   usable as `&corral::Cache<V>` — a `static USERS: LazyLock<Cache<V>>`, a
///   field of an argument (`state.users`), a `Cache<V>` argument. Nothing
///   is created behind your back: the cache (and its TTL, store, stats)
///   is yours. An expression that names an argument is evaluated into a
///   clone of the handle (an `Arc` clone), so the argument can still be
///   moved into the fill.
/// - `key = "user:{id}"`: the key, a template over the argument names, each
///   formatted with `Display` (`{{` and `}}` for literal braces; no format
///   specs). The default is `"<fn name>:{arg1}:{arg2}..."` over every
///   argument. Keys are only formatted, never hashed, so they are the same
///   in every build and process. Arguments left out of the template (a
///   database handle, say) do not tell calls apart: calls that differ only
///   in them share one key and one fill. Two functions sharing a cache need keys
///   that cannot collide (the default's function name sees to it); and
///   since `Display` output is joined as is, `"{a}:{b}"` gives the same key
///   for `("x:y", "z")` and `("x", "y:z")` — keep such arguments last, or
///   free of the separator.
/// - `options = <expr>`: a `corral::FillOptions` (TTL, hard timeout, tags;
///   it may use the arguments), passed to the call's
///   [`GetOrFill::options`]. It is built only by a call that misses the
///   in-process tier, so tags made with `format!` cost a hit nothing.
/// - `ttl = <expr>`: a `Duration`, short for
///   `options = corral::FillOptions::new().ttl(<expr>)`.
///
/// # What the function may look like
///
/// The body becomes a `'static` future that runs on its own task (a caller
/// that is cancelled does not cancel it), so:
///
/// - it is an `async fn` without `self`: take what it needs by value (an
///   `Arc<Db>` argument, or a `static`);
/// - its arguments are owned (`String` rather than `&str`, `Arc<T>` rather
///   than `&T`; `&'static` is fine), plain names (no patterns), no `impl
///   Trait`, and the function is not generic (instantiations would share
///   keys);
/// - the body's future is `Send`; `V` is the cache's value type and `E` is
///   a `std::error::Error + Send + Sync + 'static`, an `anyhow::Error`, a
///   `Box<dyn Error + Send + Sync>` or a `String` (see [`FillCause`]).
///
/// Each of these is a compile error pointing at the offending part, as are
/// unknown attribute arguments and a template that names an unknown
/// argument. The function keeps its doc comments, attributes and
/// visibility.
///
/// [`Cache::get_or_fill`]: https://docs.rs/corral-cache/latest/corral/struct.Cache.html#method.get_or_fill
/// [`Cache::get_or_fill_option`]: https://docs.rs/corral-cache/latest/corral/struct.Cache.html#method.get_or_fill_option
/// [`negative_ttl`]: https://docs.rs/corral-cache/latest/corral/struct.CacheBuilder.html#method.negative_ttl
/// [`FillCause`]: https://docs.rs/corral-cache/latest/corral/trait.FillCause.html
/// [`GetOrFill::options`]: https://docs.rs/corral-cache/latest/corral/struct.GetOrFill.html#method.options
/// [`Error::Timeout`]: https://docs.rs/corral-cache/latest/corral/enum.Error.html#variant.Timeout
/// [`Error::FillPanicked`]: https://docs.rs/corral-cache/latest/corral/enum.Error.html#variant.FillPanicked
/// [`Error::InvalidKey`]: https://docs.rs/corral-cache/latest/corral/enum.Error.html#variant.InvalidKey
/// [`Error::Fill`]: https://docs.rs/corral-cache/latest/corral/enum.Error.html#variant.Fill
#[proc_macro_attribute]
pub fn cached(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(attr.into(), item.into()).into()
}

//! A fill's own error as every caller of its flight receives it:
//! [`FillError`], shared and typed, which knows how to show itself as the
//! [`source`](std::error::Error::source) of a corral [`Error`](crate::Error)
//! whatever its type — a `std::error::Error`, an `anyhow::Error`, a
//! `Box<dyn Error + Send + Sync>` or a plain message.
//!
//! Rust cannot ask "is `E` an error?" in generic code, and `anyhow::Error`
//! and boxed errors are not `std::error::Error`. So the answer is taken
//! where `E` is concrete, at the call (`get_or_fill` and its kin), through
//! [`FillCause`], and travels with the error as a function.

use std::error::Error as StdError;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// What a fill may fail with. Implemented for every
/// [`std::error::Error`] (`+ Send + Sync + 'static`), for every pointer to
/// one (`anyhow::Error`, `Box<dyn Error + Send + Sync>`: types that
/// dereference to `dyn Error + Send + Sync`), and for messages (`String`,
/// `&'static str`).
///
/// The marker `M` tells these impls apart; it is inferred and never named.
pub trait FillCause<M>: Send + Sync + 'static {
    /// The error as the source of a corral [`Error`](crate::Error): itself,
    /// the error it points to, or nothing for a message (which the
    /// `Error`'s `Display` then shows).
    fn cause(&self) -> Option<&(dyn StdError + 'static)>;
}

/// The markers of [`FillCause`]'s impls.
#[doc(hidden)]
pub mod marker {
    /// `E: std::error::Error`.
    #[derive(Debug)]
    pub enum IsError {}
    /// `E: Deref<Target = dyn Error + Send + Sync>`.
    #[derive(Debug)]
    pub enum PointsToError {}
    /// A message: `String`, `&'static str`.
    #[derive(Debug)]
    pub enum Message {}
}

impl<E: StdError + Send + Sync + 'static> FillCause<marker::IsError> for E {
    fn cause(&self) -> Option<&(dyn StdError + 'static)> {
        Some(self)
    }
}

impl<E> FillCause<marker::PointsToError> for E
where
    E: Deref<Target = dyn StdError + Send + Sync + 'static> + Send + Sync + 'static,
{
    fn cause(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&**self)
    }
}

impl FillCause<marker::Message> for String {
    fn cause(&self) -> Option<&(dyn StdError + 'static)> {
        None
    }
}

impl FillCause<marker::Message> for &'static str {
    fn cause(&self) -> Option<&(dyn StdError + 'static)> {
        None
    }
}

/// How a [`FillError`] shows its error as a `std::error::Error`.
pub(crate) type CauseFn<E> = for<'e> fn(&'e E) -> Option<&'e (dyn StdError + 'static)>;

/// The cause function of `E`, taken where `E` is concrete.
pub(crate) fn cause_fn<E: FillCause<M>, M>() -> CauseFn<E> {
    <E as FillCause<M>>::cause
}

/// The error a fill returned, shared by every caller of its flight (the
/// leader's error, never a copy or a string): it dereferences to `E`, and
/// [`arc`](Self::arc) gives the `Arc<E>` itself.
pub struct FillError<E> {
    error: Arc<E>,
    cause: CauseFn<E>,
}

impl<E> FillError<E> {
    /// Wraps a fill's error (for tests and custom fills; corral wraps the
    /// errors of the fills it runs).
    pub fn new<M>(error: E) -> Self
    where
        E: FillCause<M>,
    {
        Self::with_cause(Arc::new(error), cause_fn::<E, M>())
    }

    pub(crate) fn with_cause(error: Arc<E>, cause: CauseFn<E>) -> Self {
        Self { error, cause }
    }

    /// The shared error.
    pub fn arc(&self) -> &Arc<E> {
        &self.error
    }

    /// The shared error, taken out.
    pub fn into_arc(self) -> Arc<E> {
        self.error
    }

    /// The error as a `std::error::Error`: the error itself, the error an
    /// `anyhow::Error` or a box points to, or `None` for a message.
    pub fn cause(&self) -> Option<&(dyn StdError + 'static)> {
        (self.cause)(&self.error)
    }
}

impl<E> Deref for FillError<E> {
    type Target = E;

    fn deref(&self) -> &E {
        &self.error
    }
}

impl<E> Clone for FillError<E> {
    fn clone(&self) -> Self {
        Self {
            error: Arc::clone(&self.error),
            cause: self.cause,
        }
    }
}

impl<E: fmt::Debug> fmt::Debug for FillError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl<E: fmt::Display> fmt::Display for FillError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

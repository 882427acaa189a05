//! What a `#[cached]` function may look like, and the errors for the rest.

use proc_macro2::Ident;
use syn::visit::Visit;
use syn::{
    FnArg, GenericArgument, Lifetime, Pat, PathArguments, ReturnType, Signature, Type,
    TypeImplTrait, TypeReference,
};

/// What the function returns.
pub(crate) struct Output {
    /// The cached value's type `V`.
    pub(crate) value: Type,
    /// `E` of a `-> Result<V, E>`; `None` for an infallible `-> V`.
    pub(crate) error: Option<Type>,
    /// The return type as written.
    pub(crate) written: Type,
}

/// A checked signature: its argument names and its output.
pub(crate) struct Checked {
    pub(crate) args: Vec<Ident>,
    pub(crate) output: Option<Output>,
}

/// Checks `sig`, pushing an error (with its span) for every unsupported part.
pub(crate) fn check(sig: &Signature, errors: &mut Vec<syn::Error>) -> Checked {
    let fail = |errors: &mut Vec<syn::Error>, spanned: &dyn quote::ToTokens, message: &str| {
        errors.push(syn::Error::new_spanned(spanned, message));
    };
    if sig.asyncness.is_none() {
        fail(
            errors,
            &sig.fn_token,
            "#[cached] applies to an `async fn`: its body becomes the cache's fill future; \
             write `async fn`",
        );
    }
    if let Some(constness) = &sig.constness {
        fail(errors, constness, "#[cached] cannot apply to a `const fn`");
    }
    if let Some(unsafety) = &sig.unsafety {
        fail(errors, unsafety, "#[cached] cannot apply to an `unsafe fn`");
    }
    if let Some(abi) = &sig.abi {
        fail(errors, abi, "#[cached] cannot apply to an `extern` fn");
    }
    if let Some(variadic) = &sig.variadic {
        fail(errors, variadic, "#[cached] cannot apply to a variadic fn");
    }
    for param in &sig.generics.params {
        let message = match param {
            syn::GenericParam::Lifetime(_) => {
                "#[cached] functions take no lifetime parameters: the fill runs on its own \
                 task and must be `'static`, so arguments are moved into it; take owned \
                 arguments such as `String` or `Arc<T>`"
            }
            _ => {
                "#[cached] functions cannot be generic: every instantiation would share the \
                 same keys; write a non-generic function for each type"
            }
        };
        fail(errors, param, message);
    }
    if let Some(clause) = &sig.generics.where_clause {
        fail(
            errors,
            clause,
            "#[cached] functions take no `where` clause (they cannot be generic)",
        );
    }

    let mut args = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(receiver) => fail(
                errors,
                receiver,
                "#[cached] cannot take `self`: the fill runs on its own task after the call \
                 returns and must own what it uses; write a free function (or an associated \
                 fn without `self`) taking what it needs by value, e.g. \
                 `async fn load(db: Arc<Db>, id: u64)`",
            ),
            FnArg::Typed(typed) => {
                match &*typed.pat {
                    Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => {
                        args.push(pat.ident.clone());
                    }
                    other => fail(
                        errors,
                        other,
                        "#[cached] needs a plain name for each argument (`id: u64`), not a \
                         pattern: the names are moved into the fill and used in the key",
                    ),
                }
                let mut borrows = Borrows { errors: Vec::new() };
                borrows.visit_type(&typed.ty);
                errors.extend(borrows.errors);
            }
        }
    }
    let output = output(&sig.output, sig, errors);
    Checked { args, output }
}

fn output(output: &ReturnType, sig: &Signature, errors: &mut Vec<syn::Error>) -> Option<Output> {
    let ReturnType::Type(_, written) = output else {
        errors.push(syn::Error::new(
            sig.paren_token.span.close(),
            "a #[cached] function returns the value to cache: add `-> V` or `-> Result<V, E>`",
        ));
        return None;
    };
    let mut impls = ImplTraits { errors: Vec::new() };
    impls.visit_type(written);
    if !impls.errors.is_empty() {
        errors.extend(impls.errors);
        return None;
    }
    let Type::Path(path) = &**written else {
        return Some(Output {
            value: (**written).clone(),
            error: None,
            written: (**written).clone(),
        });
    };
    let last = path.path.segments.last()?;
    if last.ident != "Result" || path.qself.is_some() {
        return Some(Output {
            value: (**written).clone(),
            error: None,
            written: (**written).clone(),
        });
    }
    let types: Vec<&Type> = match &last.arguments {
        PathArguments::AngleBracketed(generics) => generics
            .args
            .iter()
            .filter_map(|arg| match arg {
                GenericArgument::Type(ty) => Some(ty),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    match types.as_slice() {
        [value, error] => Some(Output {
            value: (*value).clone(),
            error: Some((*error).clone()),
            written: (**written).clone(),
        }),
        _ => {
            errors.push(syn::Error::new_spanned(
                written,
                "#[cached] needs the error type spelled out, `-> Result<V, E>`, to return \
                 `Result<V, corral::Error<E>>`: a `Result` alias hides it",
            ));
            None
        }
    }
}

/// Finds borrowed or `impl Trait` argument types.
struct Borrows {
    errors: Vec<syn::Error>,
}

impl<'ast> Visit<'ast> for Borrows {
    fn visit_type_reference(&mut self, reference: &'ast TypeReference) {
        if !is_static(reference.lifetime.as_ref()) {
            self.errors.push(syn::Error::new_spanned(
                reference,
                "#[cached] functions cannot take references: the fill runs on its own task \
                 and must be `'static`, so arguments are moved into it; take an owned type \
                 (`String` for `&str`, `Vec<T>` or `Arc<[T]>` for `&[T]`, `Arc<T>` for `&T`)",
            ));
            return;
        }
        self.visit_type(&reference.elem);
    }

    fn visit_lifetime(&mut self, lifetime: &'ast Lifetime) {
        if !is_static(Some(lifetime)) {
            self.errors.push(syn::Error::new_spanned(
                lifetime,
                "#[cached] functions cannot take borrowed arguments: the fill runs on its own \
                 task and must be `'static`; take an owned type (`String`, `Arc<T>`)",
            ));
        }
    }

    fn visit_type_impl_trait(&mut self, impl_trait: &'ast TypeImplTrait) {
        self.errors.push(impl_trait_error(impl_trait, "arguments"));
    }

    // Borrows in function pointer and `Fn(..)` signatures are higher-ranked,
    // not borrows of the caller's data.
    fn visit_type_bare_fn(&mut self, _: &'ast syn::TypeBareFn) {}

    fn visit_parenthesized_generic_arguments(
        &mut self,
        _: &'ast syn::ParenthesizedGenericArguments,
    ) {
    }
}

/// Finds `impl Trait` in the return type.
struct ImplTraits {
    errors: Vec<syn::Error>,
}

impl<'ast> Visit<'ast> for ImplTraits {
    fn visit_type_impl_trait(&mut self, impl_trait: &'ast TypeImplTrait) {
        self.errors
            .push(impl_trait_error(impl_trait, "return types"));
    }
}

fn impl_trait_error(impl_trait: &TypeImplTrait, place: &str) -> syn::Error {
    syn::Error::new_spanned(
        impl_trait,
        format!(
            "#[cached] does not support `impl Trait` {place}: the cache stores and moves \
             concrete types; name the type"
        ),
    )
}

fn is_static(lifetime: Option<&Lifetime>) -> bool {
    lifetime.is_some_and(|lifetime| lifetime.ident == "static")
}

/// `T` when `ty` is written `Option<T>` (any path ending in `Option`).
pub(crate) fn option_inner(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = ty else {
        return None;
    };
    let last = path.path.segments.last()?;
    if last.ident != "Option" || path.qself.is_some() {
        return None;
    }
    let PathArguments::AngleBracketed(generics) = &last.arguments else {
        return None;
    };
    match generics.args.iter().collect::<Vec<_>>().as_slice() {
        [GenericArgument::Type(inner)] => Some(inner),
        _ => None,
    }
}

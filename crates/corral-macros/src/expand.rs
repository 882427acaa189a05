//! The expansion: the function body becomes the fill of a `get_or_fill`.

use proc_macro2::{Ident, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{Item, ItemFn};

use crate::args::Args;
use crate::signature::{self, Output};
use crate::template::{self, Key};

/// Expands `#[cached(attr)] item`. On any error: the errors, then `item`
/// unchanged (so the rest of the crate still resolves its name).
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let func = match syn::parse2::<Item>(item.clone()) {
        Ok(Item::Fn(func)) => func,
        Ok(other) => {
            let error = syn::Error::new_spanned(other, "#[cached] applies to an `async fn`");
            return error.to_compile_error();
        }
        Err(error) => {
            let error = error.to_compile_error();
            return quote!(#error #item);
        }
    };
    match expand_fn(attr, &func) {
        Ok(expanded) => expanded,
        Err(error) => {
            let error = error.to_compile_error();
            quote!(#error #func)
        }
    }
}

fn expand_fn(attr: TokenStream, func: &ItemFn) -> syn::Result<TokenStream> {
    let args: Args = syn::parse2(attr)?;
    let mut errors = args.errors.clone();
    let checked = signature::check(&func.sig, &mut errors);
    let cache = args.require_cache();
    if let Err(error) = &cache {
        errors.push(error.clone());
    }
    if let Err(error) = args.check_exclusive() {
        errors.push(error);
    }
    let key = match &args.key {
        Some(template) => template::parse(template, &checked.args),
        None => Ok(template::default_key(
            &template::arg_name(&func.sig.ident),
            &checked.args,
        )),
    };
    if let Err(error) = &key {
        errors.push(error.clone());
    }
    let mut errors = errors.into_iter();
    if let Some(mut first) = errors.next() {
        first.extend(errors);
        return Err(first);
    }
    let (Ok(cache), Ok(key), Some(output)) = (cache, key, checked.output) else {
        // Each of these pushed an error above.
        return Err(syn::Error::new(
            Span::call_site(),
            "invalid #[cached] function",
        ));
    };
    Ok(generate(func, &args, cache, &key, &output, &checked.args))
}

fn generate(
    func: &ItemFn,
    args: &Args,
    cache: &syn::Expr,
    key: &Key,
    output: &Output,
    arg_names: &[Ident],
) -> TokenStream {
    let hygienic = |name: &str| Ident::new(name, Span::mixed_site());
    let (key_var, cache_var, owned_var, fill_var, out_var, options_var) = (
        hygienic("__corral_key"),
        hygienic("__corral_cache"),
        hygienic("__corral_owned_cache"),
        hygienic("__corral_fill"),
        hygienic("__corral_out"),
        hygienic("__corral_options"),
    );
    let Output {
        value,
        error,
        written,
    } = output;
    // `Option<V>` reads through a `Cache<V>`: `None` is cached as "not
    // found" for the cache's negative TTL.
    let (cached, method, found) = match signature::option_inner(value) {
        Some(inner) => (
            inner,
            quote!(get_or_fill_option),
            quote!(::core::option::Option::Some),
        ),
        None => (value, quote!(get_or_fill), TokenStream::new()),
    };

    let mut sig = func.sig.clone();
    sig.output = match error {
        Some(error) => syn::parse_quote!(
            -> ::core::result::Result<#value, ::corral::Error<#error>>
        ),
        None => syn::parse_quote!(-> ::core::result::Result<#value, ::corral::Error>),
    };
    let attrs = &func.attrs;
    let vis = &func.vis;
    let block = &func.block;

    let format = &key.format;
    let key_args = &key.args;
    let make_key = quote! {
        let #key_var: ::std::string::String = ::std::format!(#format #(, #key_args)*);
    };

    // The fill moves the arguments it uses; a cache expression naming an
    // argument (`state.users`) must not borrow it across the call, so the
    // cache handle is cloned first (one `Arc` clone). Otherwise it is borrowed.
    // Spanned at the expression: a cache of the wrong value type is
    // reported there.
    let cache_ref = quote_spanned!(cache.span()=> &(#cache));
    let borrow_cache = if mentions_any(cache.to_token_stream(), arg_names) {
        quote! {
            let #owned_var: ::corral::Cache<#cached> =
                <::corral::Cache<#cached> as ::core::clone::Clone>::clone(#cache_ref);
            let #cache_var: &::corral::Cache<#cached> = &#owned_var;
        }
    } else {
        quote! {
            let #cache_var: &::corral::Cache<#cached> = #cache_ref;
        }
    };

    // The body runs as its own async block, so `return` and `?` behave as in
    // the function it was written in; its result is typed by the written
    // return type.
    let fill_result = match error {
        Some(_) => quote!(#out_var),
        None => quote! {
            ::core::result::Result::<#value, ::core::convert::Infallible>::Ok(#out_var)
        },
    };
    let make_fill = quote! {
        let #fill_var = move || async move {
            let #out_var: #written = async move #block.await;
            #fill_result
        };
    };

    let options = match (&args.options, &args.ttl) {
        (Some(options), _) => Some(quote!(#options)),
        (None, Some((_, ttl))) => Some(quote!(::corral::FillOptions::new().ttl(#ttl))),
        (None, None) => None,
    };
    // Options are built only by a call that misses: a hit answers before
    // (the options may use the arguments, which the fill then moves).
    let (make_options, call) = match options {
        Some(options) => (
            quote! {
                if let ::core::option::Option::Some(#out_var) =
                    ::corral::Cache::get_local(#cache_var, &#key_var)
                {
                    return ::core::result::Result::Ok(#found(#out_var));
                }
                let #options_var: ::corral::FillOptions = #options;
            },
            quote! {
                ::corral::Cache::#method(#cache_var, &#key_var, #fill_var)
                    .options(#options_var)
                    .await
            },
        ),
        None => (
            TokenStream::new(),
            quote! { ::corral::Cache::#method(#cache_var, &#key_var, #fill_var).await },
        ),
    };

    quote! {
        #(#attrs)*
        #vis #sig {
            #make_key
            #borrow_cache
            #make_options
            #make_fill
            #call
        }
    }
}

/// Whether `tokens` contain one of `names` as an identifier.
fn mentions_any(tokens: TokenStream, names: &[Ident]) -> bool {
    tokens.into_iter().any(|tree| match tree {
        TokenTree::Ident(ident) => names.contains(&ident),
        TokenTree::Group(group) => mentions_any(group.stream(), names),
        TokenTree::Punct(_) | TokenTree::Literal(_) => false,
    })
}

//! The attribute's arguments: `cache = <expr>, key = "...", options = <expr>, ttl = <expr>`.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Token};

/// The parsed arguments of one `#[cached(...)]`.
pub(crate) struct Args {
    /// The cache the function reads through (required).
    pub(crate) cache: Option<Expr>,
    /// The key template.
    pub(crate) key: Option<LitStr>,
    /// Per-call `FillOptions`.
    pub(crate) options: Option<Expr>,
    /// A TTL: shorthand for `FillOptions::new().ttl(..)`.
    pub(crate) ttl: Option<(Ident, Expr)>,
    /// Problems found while parsing that did not stop it.
    pub(crate) errors: Vec<syn::Error>,
}

const EXPECTED: &str =
    "expected `cache = <expr>`, `key = \"...\"`, `options = <expr>` or `ttl = <expr>`";

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Args {
            cache: None,
            key: None,
            options: None,
            ttl: None,
            errors: Vec::new(),
        };
        while !input.is_empty() {
            let name = Ident::parse_any(input)?;
            input.parse::<Token![=]>()?;
            let value: Expr = input.parse()?;
            args.accept(name, value);
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(args)
    }
}

impl Args {
    fn accept(&mut self, name: Ident, value: Expr) {
        let duplicate = match name.to_string().as_str() {
            "cache" => self.cache.replace(value).is_some(),
            "options" => self.options.replace(value).is_some(),
            "ttl" => self.ttl.replace((name.clone(), value)).is_some(),
            "key" => match value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(template),
                    ..
                }) => self.key.replace(template).is_some(),
                other => {
                    self.errors.push(syn::Error::new_spanned(
                        other,
                        "`key` takes a string literal template over the arguments, \
                         e.g. `key = \"user:{id}\"`",
                    ));
                    false
                }
            },
            other => {
                self.errors.push(syn::Error::new(
                    name.span(),
                    format!("unknown argument `{other}` of #[cached]: {EXPECTED}"),
                ));
                false
            }
        };
        if duplicate {
            self.errors.push(syn::Error::new(
                name.span(),
                format!("`{name}` is given twice"),
            ));
        }
    }

    /// The cache expression, or the error that it is missing.
    pub(crate) fn require_cache(&self) -> syn::Result<&Expr> {
        self.cache.as_ref().ok_or_else(|| {
            syn::Error::new(
                Span::call_site(),
                "#[cached] needs `cache = <expr>`: the `corral::Cache<V>` this function \
                 reads through, e.g. `#[cached(cache = USERS)]` with \
                 `static USERS: LazyLock<Cache<User>>`",
            )
        })
    }

    /// An error when both `options` and `ttl` are given.
    pub(crate) fn check_exclusive(&self) -> syn::Result<()> {
        match (&self.options, &self.ttl) {
            (Some(_), Some((ttl, _))) => Err(syn::Error::new(
                ttl.span(),
                "give either `options` or `ttl`: `ttl = d` is short for \
                 `options = corral::FillOptions::new().ttl(d)`; set the TTL in `options`",
            )),
            _ => Ok(()),
        }
    }
}

//! Key templates: `"user:{id}"` becomes `format!("user:{}", id)`.
//!
//! Keys come from formatting alone, so they are the same in every build and
//! every process sharing a store (no hashing).

use proc_macro2::{Ident, Literal};
use syn::LitStr;

/// A template checked against the argument names: the format string to pass
/// to `format!` and the arguments it formats, in order.
pub(crate) struct Key {
    /// The `format!` string (`{}` placeholders, braces escaped).
    pub(crate) format: Literal,
    /// The arguments in placeholder order (the function's own idents).
    pub(crate) args: Vec<Ident>,
}

/// The key of a function without a `key` argument: `"<fn_name>:{arg1}:{arg2}..."`.
pub(crate) fn default_key(fn_name: &str, args: &[Ident]) -> Key {
    let mut format = fn_name.to_owned();
    for _ in args {
        format.push_str(":{}");
    }
    Key {
        format: Literal::string(&format),
        args: args.to_vec(),
    }
}

/// Parses `template`, whose placeholders must name arguments in `args`.
///
/// Supported: `{name}` (formatted with `Display`), `{{` and `}}` for literal
/// braces. Errors point at the template.
pub(crate) fn parse(template: &LitStr, args: &[Ident]) -> syn::Result<Key> {
    let text = template.value();
    let fail = |message: String| Err(syn::Error::new(template.span(), message));
    if text.is_empty() {
        return fail("the key template is empty: keys are 1 to 1024 bytes".to_owned());
    }
    if text.chars().any(char::is_control) {
        return fail("the key template contains a control character, which keys cannot".to_owned());
    }
    let mut format = String::with_capacity(text.len());
    let mut used = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                format.push_str("{{");
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                format.push_str("}}");
            }
            '}' => {
                return fail(
                    "unmatched `}` in the key template (write `}}` for a literal brace)".to_owned(),
                )
            }
            '{' => {
                let mut name = String::new();
                let mut closed = false;
                for c in chars.by_ref() {
                    if c == '}' {
                        closed = true;
                        break;
                    }
                    name.push(c);
                }
                if !closed {
                    return fail(
                        "unclosed `{` in the key template (write `{{` for a literal brace)"
                            .to_owned(),
                    );
                }
                let name = name.trim();
                if name.is_empty() {
                    return fail(format!(
                        "empty `{{}}` in the key template: name an argument, e.g. `{{{}}}`",
                        args.first()
                            .map_or_else(|| "id".to_owned(), ToString::to_string)
                    ));
                }
                if name.contains(':') {
                    return fail(format!(
                        "`{{{name}}}`: key placeholders take no format spec; arguments are \
                         formatted with `Display`, write `{{{}}}`",
                        name.split(':').next().unwrap_or_default().trim()
                    ));
                }
                let Some(arg) = args.iter().find(|arg| arg_name(arg) == name) else {
                    return fail(unknown(name, args));
                };
                format.push_str("{}");
                used.push(arg.clone());
            }
            c => format.push(c),
        }
    }
    let mut format = Literal::string(&format);
    format.set_span(template.span());
    Ok(Key { format, args: used })
}

/// An argument's name as written in a template (`r#type` is `type`).
pub(crate) fn arg_name(arg: &Ident) -> String {
    let name = arg.to_string();
    name.strip_prefix("r#").map(str::to_owned).unwrap_or(name)
}

fn unknown(name: &str, args: &[Ident]) -> String {
    if args.is_empty() {
        return format!("the key template names `{name}`, but the function takes no arguments");
    }
    let names: Vec<String> = args
        .iter()
        .map(|arg| format!("`{}`", arg_name(arg)))
        .collect();
    format!(
        "the key template names `{name}`, which is not an argument of this function \
         (its arguments: {})",
        names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proc_macro2::Span;

    fn idents(names: &[&str]) -> Vec<Ident> {
        names
            .iter()
            .map(|name| match name.strip_prefix("r#") {
                Some(raw) => Ident::new_raw(raw, Span::call_site()),
                None => Ident::new(name, Span::call_site()),
            })
            .collect()
    }

    fn parsed(template: &str, args: &[&str]) -> Result<(String, Vec<String>), String> {
        let template = LitStr::new(template, Span::call_site());
        parse(&template, &idents(args))
            .map(|key| {
                let format = key.format.to_string();
                let used = key.args.iter().map(ToString::to_string).collect();
                (format, used)
            })
            .map_err(|error| error.to_string())
    }

    #[test]
    fn placeholders_become_positional_arguments_in_order() {
        assert_eq!(
            parsed("org:{org}:user:{id}:{org}", &["id", "org"]),
            Ok((
                "\"org:{}:user:{}:{}\"".to_owned(),
                vec!["org".to_owned(), "id".to_owned(), "org".to_owned()]
            ))
        );
        assert_eq!(
            parsed("{{literal}}:{ id }", &["id"]),
            Ok(("\"{{literal}}:{}\"".to_owned(), vec!["id".to_owned()]))
        );
        assert_eq!(
            parsed("constant", &["id"]),
            Ok(("\"constant\"".to_owned(), vec![]))
        );
    }

    #[test]
    fn raw_identifiers_are_named_without_their_prefix() {
        assert_eq!(
            parsed("kind:{type}", &["r#type"]),
            Ok(("\"kind:{}\"".to_owned(), vec!["r#type".to_owned()]))
        );
    }

    #[test]
    fn malformed_templates_are_rejected() {
        for (template, fragment) in [
            ("", "empty"),
            ("a\nb", "control character"),
            ("user:{}", "empty `{}`"),
            ("user:{id", "unclosed `{`"),
            ("user:id}", "unmatched `}`"),
            ("user:{id:?}", "no format spec"),
            ("user:{name}", "names `name`, which is not an argument"),
        ] {
            let error = parsed(template, &["id"]).expect_err(template);
            assert!(error.contains(fragment), "{template}: {error}");
        }
        let error = parsed("{id}", &[]).expect_err("no arguments");
        assert!(error.contains("takes no arguments"), "{error}");
    }

    #[test]
    fn the_default_key_is_the_name_then_every_argument() {
        let key = default_key("load_user", &idents(&["org", "id"]));
        assert_eq!(key.format.to_string(), "\"load_user:{}:{}\"");
        assert_eq!(key.args.len(), 2);
        assert_eq!(default_key("config", &[]).format.to_string(), "\"config\"");
    }
}

//! Redis URLs without their secrets, for `Debug` output, errors and logs.

/// `url` with every password replaced by `***`: the password of its
/// userinfo (`scheme://user:password@host`) and the value of a `pass` or
/// `password` query parameter (`unix:///path?pass=...`). A user name alone
/// is kept.
///
/// The userinfo ends at the **last** `@` of the URL, so a password holding
/// any byte — `@`, `/`, `?`, `#`, `:` unencoded — is hidden whole; a query
/// that holds an `@` after a password is hidden with it (hiding too much
/// is the safe side). The query (after the first `?` behind that `@`) has
/// its `pass`/`password` values hidden.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme) = url.find("://").map(|at| at + 3) else {
        return redact_query(url);
    };
    let (userinfo_end, rest) = match url[scheme..].rfind('@') {
        Some(at) => (Some(scheme + at), &url[scheme + at..]),
        None => (None, &url[scheme..]),
    };
    let mut out = String::with_capacity(url.len());
    out.push_str(&url[..scheme]);
    if let Some(end) = userinfo_end {
        match url[scheme..end].split_once(':') {
            Some((user, _password)) => {
                out.push_str(user);
                out.push_str(":***");
            }
            None => out.push_str(&url[scheme..end]),
        }
    }
    out.push_str(&redact_query(rest));
    out
}

/// `text` with the values of `pass` and `password` query parameters (after
/// its first `?`) replaced by `***`.
fn redact_query(text: &str) -> String {
    let Some((base, query)) = text.split_once('?') else {
        return text.to_owned();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _))
                if name.eq_ignore_ascii_case("pass") || name.eq_ignore_ascii_case("password") =>
            {
                format!("{name}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{base}?{}", pairs.join("&"))
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_are_redacted() {
        let cases = [
            ("redis://127.0.0.1:6379/", "redis://127.0.0.1:6379/"),
            ("redis://user:secret@host:1/0", "redis://user:***@host:1/0"),
            ("redis://:secret@host", "redis://:***@host"),
            ("redis://user@host", "redis://user@host"),
            ("rediss://u:p@w@h/1", "rediss://u:***@h/1"),
            (
                "rediss://u:p@ss@host:1/#insecure",
                "rediss://u:***@host:1/#insecure",
            ),
            ("redis://u:pa/ss@h/1", "redis://u:***@h/1"),
            (
                "redis://u:secret@h/0?protocol=3",
                "redis://u:***@h/0?protocol=3",
            ),
            (
                "unix:///tmp/redis.sock?db=1&pass=secret&user=u",
                "unix:///tmp/redis.sock?db=1&pass=***&user=u",
            ),
            ("redis://h/?Password=secret", "redis://h/?Password=***"),
            ("redis://u:p?ss@h:1/0", "redis://u:***@h:1/0"),
            (
                "redis://u:p#s?s@h:1/0?pass=x",
                "redis://u:***@h:1/0?pass=***",
            ),
            ("redis://:?#@/:@h", "redis://:***@h"),
            ("not a url", "not a url"),
        ];
        for (url, redacted) in cases {
            assert_eq!(redact_url(url), redacted, "{url}");
        }
    }
}

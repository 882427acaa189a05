//! Redis URLs without their secrets, for `Debug` output, errors and logs.

/// `url` with every password replaced by `***`: the password of its
/// userinfo (`scheme://user:password@host`, up to the last `@` before the
/// query, so a password holding `@` or `/` is hidden whole) and the value
/// of a `pass` or `password` query parameter (`unix:///path?pass=...`).
/// A user name alone is kept.
pub(crate) fn redact_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let mut out = match (base.find("://"), base.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme + 3 => {
            let userinfo = &base[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _password)) => {
                    format!("{}{user}:***{}", &base[..scheme + 3], &base[at..])
                }
                None => base.to_owned(),
            }
        }
        _ => base.to_owned(),
    };
    if let Some(query) = query {
        out.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _))
                    if name.eq_ignore_ascii_case("pass")
                        || name.eq_ignore_ascii_case("password") =>
                {
                    format!("{name}=***")
                }
                _ => pair.to_owned(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    out
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
            ("not a url", "not a url"),
        ];
        for (url, redacted) in cases {
            assert_eq!(redact_url(url), redacted, "{url}");
        }
    }
}

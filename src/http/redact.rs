//! URLs fit to print: no query string, fragment or credentials.
//!
//! Presigned URLs carry their signature in the query string, so it must never
//! reach an error message or a log line.

use url::Url;

/// `scheme://host:port/path`, with the query string, fragment and user
/// information removed. A query string is replaced by `?…` so a reader can
/// tell there was one.
pub fn redact(url: &Url) -> String {
    let mut shown = url.clone();
    let had_query = shown.query().is_some_and(|q| !q.is_empty());
    shown.set_query(None);
    shown.set_fragment(None);
    // Both fail only for URLs that cannot have credentials, which is fine.
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    let mut s = String::from(shown);
    if had_query {
        s.push_str("?…");
    }
    s
}

/// Whether two URLs share an origin: scheme, host and port.
pub fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_query_fragment_and_credentials() {
        let u =
            Url::parse("https://user:pw@h.example:8443/a/b.nwb?X-Amz-Signature=abc#frag").unwrap();
        let r = redact(&u);
        assert_eq!(r, "https://h.example:8443/a/b.nwb?…");
        assert!(!r.contains("abc") && !r.contains("pw") && !r.contains("user"));
    }

    #[test]
    fn origin_includes_the_port() {
        let a = Url::parse("http://h:80/x").unwrap();
        assert!(same_origin(&a, &Url::parse("http://h/y").unwrap()));
        assert!(!same_origin(&a, &Url::parse("http://h:81/x").unwrap()));
        assert!(!same_origin(&a, &Url::parse("https://h/x").unwrap()));
        assert!(!same_origin(&a, &Url::parse("http://g/x").unwrap()));
    }
}

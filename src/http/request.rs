//! What one ranged `GET` asks, decided without I/O: the bytes it wants, the
//! checks it asks the server to make first, and the rules every hop of its
//! redirects must keep (plain `http` refused where asked, no downgrade from
//! `https`, a bounded number of hops).

use std::ops::Range;

use url::Url;

use super::redact::redact;
use super::retry::Failure;
use crate::error::{Error, ErrorKind};

/// The bytes one request asks for.
#[derive(Debug, Clone)]
pub(super) enum Want {
    /// These bytes (never empty).
    Bytes(Range<u64>),
    /// The last this many bytes, whatever the size (a suffix range).
    Last(u64),
}

impl From<&Want> for crate::trace::Requested {
    fn from(want: &Want) -> Self {
        match want {
            Want::Bytes(r) => crate::trace::Requested::Bytes(r.clone()),
            Want::Last(n) => crate::trace::Requested::Last(*n),
        }
    }
}

impl std::fmt::Display for Want {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Want::Bytes(r) => write!(f, "{}-{}", r.start, r.end - 1),
            Want::Last(n) => write!(f, "-{n}"),
        }
    }
}

/// What a request asks the server to check first (the `If-` headers).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Precondition<'a> {
    /// Only this version (a strong ETag): a changed file fails the request.
    Match(&'a str),
    /// Nothing if the file still has this ETag: `304 Not Modified`.
    NoneMatch(&'a str),
}

/// Whether `status` is a redirect the transport follows itself.
pub(super) fn is_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 303 | 307 | 308)
}

/// The rules of where requests may go.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rules {
    pub https_only: bool,
    pub allow_redirect_to_http: bool,
    pub max_redirects: u32,
}

impl Rules {
    /// Whether moving from `from` to `to` (a redirect, a provider's fresh
    /// URL) is a downgrade from `https` to plain `http` the builder did not
    /// allow: its bytes would travel in the clear, and be cached under the
    /// `https` name as if they had come over TLS.
    pub fn refuses_downgrade(&self, from: &Url, to: &Url) -> bool {
        from.scheme() == "https" && to.scheme() == "http" && !self.allow_redirect_to_http
    }

    /// Whether a request may go to `url` at all.
    pub fn check_target(&self, url: &Url) -> Result<(), Failure> {
        if self.https_only && url.scheme() != "https" {
            return Err(Failure::fatal(Error::new(
                ErrorKind::InvalidUrl,
                format!("refusing plain HTTP to {} (https_only is set)", redact(url)),
            )));
        }
        Ok(())
    }

    /// Where the redirect number `hops` (1-based) from `from` leads, given
    /// its status and `Location`.
    pub fn next_hop(
        &self,
        hops: u32,
        status: u16,
        location: Option<&str>,
        from: &Url,
    ) -> Result<Url, Failure> {
        if hops > self.max_redirects {
            return Err(Failure::fatal(Error::new(
                ErrorKind::Redirect,
                format!("more than {} redirects", self.max_redirects),
            )));
        }
        let next = location
            .and_then(|loc| from.join(loc).ok())
            .filter(|u| matches!(u.scheme(), "http" | "https"));
        let Some(next) = next else {
            return Err(Failure::fatal(Error::new(
                ErrorKind::Redirect,
                format!("HTTP {status} redirect without a usable Location"),
            )));
        };
        // (Under https_only the next request refuses it, as any http.)
        if !self.https_only && self.refuses_downgrade(from, &next) {
            return Err(Failure::fatal(Error::new(
                ErrorKind::Redirect,
                format!(
                    "refusing a redirect from https to plain http ({}); \
                     Builder::allow_redirect_to_http allows it",
                    redact(&next)
                ),
            )));
        }
        Ok(next)
    }

    /// Whether a fresh URL from a URL provider, replacing `original`, may be
    /// used.
    pub fn accepts_renewed(&self, original: &Url, fresh: &Url) -> bool {
        matches!(fresh.scheme(), "http" | "https")
            && !(self.https_only && fresh.scheme() != "https")
            && !self.refuses_downgrade(original, fresh)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(https_only: bool, allow_redirect_to_http: bool) -> Rules {
        Rules {
            https_only,
            allow_redirect_to_http,
            max_redirects: 2,
        }
    }

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn kind(r: Result<Url, Failure>) -> Option<ErrorKind> {
        r.err().map(|f| f.error.kind())
    }

    #[test]
    fn a_redirect_is_followed_within_the_rules() {
        let from = url("https://a.example/f?sig=1");
        let r = rules(false, false);
        let hop = r.next_hop(1, 302, Some("/g"), &from).unwrap();
        assert_eq!(hop.as_str(), "https://a.example/g");
        let redirect = Some(ErrorKind::Redirect);
        assert_eq!(
            kind(r.next_hop(3, 302, Some("/g"), &from)),
            redirect,
            "too many"
        );
        assert_eq!(
            kind(r.next_hop(1, 302, None, &from)),
            redirect,
            "no Location"
        );
        assert_eq!(kind(r.next_hop(1, 302, Some("ftp://b/x"), &from)), redirect);
        let down = Some("http://b.example/f");
        assert_eq!(
            kind(r.next_hop(1, 301, down, &from)),
            redirect,
            "a downgrade"
        );
        assert!(rules(false, true).next_hop(1, 301, down, &from).is_ok());
        // Under https_only the hop is taken, and its request refused.
        assert!(rules(true, false).next_hop(1, 301, down, &from).is_ok());
        let refused = rules(true, false).check_target(&url("http://b.example/f"));
        assert_eq!(
            refused.err().map(|f| f.error.kind()),
            Some(ErrorKind::InvalidUrl)
        );
        assert!(is_redirect(307) && !is_redirect(304) && !is_redirect(206));
    }

    #[test]
    fn a_renewed_url_keeps_the_rules() {
        let original = url("https://a.example/f");
        let r = rules(false, false);
        assert!(r.accepts_renewed(&original, &url("https://b.example/f?x=2")));
        assert!(!r.accepts_renewed(&original, &url("http://b.example/f")));
        assert!(!r.accepts_renewed(&original, &url("file:///etc/passwd")));
        assert!(rules(false, true).accepts_renewed(&original, &url("http://b.example/f")));
        let plain = url("http://a.example/f");
        assert!(!rules(true, true).accepts_renewed(&plain, &url("http://b.example/f")));
    }
}

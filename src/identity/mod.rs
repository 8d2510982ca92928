//! Which version of a remote file was opened: what every later answer, and
//! every block kept on disk, is checked against.
//!
//! The transport learns it at open and pins each request to it; the disk
//! cache writes it beside every block and reads a block only for the same
//! version. How long a version confirmed by the server may be trusted
//! without asking again is [`freshness`]'s.

pub(crate) mod freshness;

/// The version of a file: its size and the validators the server gave.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Identity {
    pub size: u64,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
}

impl Identity {
    /// The ETag, if it is strong: only a strong one may pin a range
    /// (`If-Match`).
    pub(crate) fn strong_etag(&self) -> Option<&str> {
        self.etag.as_deref().filter(|e| !e.starts_with("W/"))
    }

    /// Whether a `304 Not Modified` that carries `etag` confirms this
    /// version: only if this version has a strong ETag and the `304` says
    /// it again. A `304` proves only what its validators say: one without
    /// an ETag, or with another, confirms nothing (RFC 9110 has a `304`
    /// carry the ETag a `200` would).
    pub(crate) fn confirmed_by(&self, etag: Option<&str>) -> bool {
        self.strong_etag().is_some_and(|mine| Some(mine) == etag)
    }

    /// Whether an answer carrying these validators is of another version.
    /// A validator the server leaves out is not a change; a different one
    /// is.
    pub(crate) fn differs_from(&self, etag: Option<&str>, last_modified: Option<&str>) -> bool {
        let differs = |pinned: &Option<String>, now: Option<&str>| match (pinned, now) {
            (Some(pinned), Some(now)) => pinned != now,
            _ => false,
        };
        differs(&self.etag, etag) || differs(&self.last_modified, last_modified)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(etag: Option<&str>, last_modified: Option<&str>) -> Identity {
        Identity {
            size: 9,
            etag: etag.map(str::to_owned),
            last_modified: last_modified.map(str::to_owned),
        }
    }

    #[test]
    fn a_304_confirms_only_the_strong_etag_it_carries() {
        let strong = of(Some("\"a\""), None);
        assert!(strong.confirmed_by(Some("\"a\"")));
        assert!(!strong.confirmed_by(Some("\"b\"")), "another ETag");
        assert!(!strong.confirmed_by(Some("W/\"a\"")), "a weak one");
        assert!(!strong.confirmed_by(None), "none");
        let dated = of(None, Some("Mon, 30 Nov 2026 00:00:00 GMT"));
        assert!(
            !dated.confirmed_by(None),
            "a date is never confirmed by a 304"
        );
        assert!(!dated.confirmed_by(Some("\"a\"")));
        let weak = of(Some("W/\"a\""), Some("Mon"));
        assert!(!weak.confirmed_by(Some("W/\"a\"")));
    }
}

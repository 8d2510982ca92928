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

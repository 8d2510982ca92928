//! AWS credentials: one set of keys, shown nowhere.

use std::fmt;
use std::time::SystemTime;

use crate::error::{Error, ErrorKind, Result};

/// One set of AWS credentials. `Debug` shows where they came from and when
/// they expire, never a key.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub key_id: String,
    pub secret: String,
    pub token: Option<String>,
    pub expires: Option<SystemTime>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("keys", &"hidden")
            .field("session_token", &self.token.as_ref().map(|_| "hidden"))
            .field("expires", &self.expires)
            .finish()
    }
}

impl Credentials {
    /// Checks that the keys can be sent (in a header, and so signed).
    pub fn checked(self, from: &str) -> Result<Credentials> {
        let printable =
            |s: &str| !s.is_empty() && s.len() <= 4096 && s.bytes().all(|b| b.is_ascii_graphic());
        let token_ok = self
            .token
            .as_deref()
            .is_none_or(|t| t.len() <= 16 * 1024 && t.bytes().all(|b| b.is_ascii_graphic()));
        if printable(&self.key_id) && printable(&self.secret) && token_ok {
            Ok(self)
        } else {
            Err(credentials_error(format!(
                "the AWS credentials from {from} are empty or not printable text"
            )))
        }
    }
}

pub(crate) fn credentials_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Credentials, message)
}

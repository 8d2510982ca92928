//! The error numbers the driver's messages carry, as a local file's do.

use crate::error::{Error, ErrorKind};

/// The POSIX error number of `error`'s kind, for the driver's messages to
/// carry as `errno = N`: h5py turns that into the matching `OSError` subclass
/// (`FileNotFoundError` for a missing file, `TimeoutError`, ...), as it does
/// for the errors of local files.
pub fn errno_of(error: &Error) -> Option<i32> {
    #[cfg(unix)]
    {
        use rustix::io::Errno;
        use std::io::ErrorKind as Io;
        let errno = match error.kind() {
            ErrorKind::HttpStatus(404 | 410) => Errno::NOENT,
            ErrorKind::HttpStatus(401 | 403) | ErrorKind::Credentials => Errno::ACCESS,
            ErrorKind::Timeout => Errno::TIMEDOUT,
            // Not EINTR: a stop is for good, and EINTR asks to be retried.
            ErrorKind::Interrupted => Errno::CANCELED,
            ErrorKind::RemoteChanged => Errno::STALE,
            ErrorKind::Network => match error.io_kind() {
                Io::ConnectionRefused => Errno::CONNREFUSED,
                Io::ConnectionReset => Errno::CONNRESET,
                Io::BrokenPipe => Errno::PIPE,
                Io::HostUnreachable => Errno::HOSTUNREACH,
                Io::NetworkUnreachable => Errno::NETUNREACH,
                _ => Errno::CONNABORTED,
            },
            _ => return None,
        };
        Some(errno.raw_os_error())
    }
    #[cfg(not(unix))]
    {
        let _ = error;
        None
    }
}

/// `message`, with `error`'s error number at its end if it has one.
pub(crate) fn with_errno(message: String, error: &Error) -> String {
    match errno_of(error) {
        Some(n) => format!("{message} (errno = {n})"),
        None => message,
    }
}

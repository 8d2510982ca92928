//! Trying a failed request again: the policy as data ([`RetryPolicy`]), why
//! an attempt failed ([`Failure`]), and the loop that decides between trying
//! again after a backoff, resolving a refused redirect target again, renewing
//! the URL, and giving up.

use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::{Transport, UrlProvider, redact::redact};
use crate::error::{Error, ErrorKind};
use crate::process::workers;
use crate::stats::Counters;

/// How failed requests are retried, as plain data.
///
/// Connection failures, timeouts, `5xx` statuses, `429 Too Many Requests` and
/// bodies cut short are retried; a body cut short resumes from its first
/// missing byte. Other `4xx` statuses and inconsistent answers fail at once.
/// Waits grow exponentially from [`initial_backoff`](RetryPolicy::initial_backoff)
/// up to [`max_backoff`](RetryPolicy::max_backoff), each with random jitter of
/// up to half its length, so that many clients do not retry in lockstep. A
/// `Retry-After` header given in seconds replaces the computed wait, capped at
/// [`max_retry_after`](RetryPolicy::max_retry_after). No wait ever runs past
/// the read's overall deadline.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use remfile::{RemoteFile, RetryPolicy};
///
/// let patient = RetryPolicy::default()
///     .max_retries(10)
///     .initial_backoff(Duration::from_millis(500));
/// let builder = RemoteFile::builder().retry_policy(patient);
/// let impatient = RemoteFile::builder().retry_policy(RetryPolicy::never());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    max_retries: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
    max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// 5 retries, backing off from 200 ms to at most 10 s, honouring
    /// `Retry-After` up to 30 s.
    fn default() -> Self {
        RetryPolicy {
            max_retries: 5,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            max_retry_after: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries: every failure is reported at once.
    pub fn never() -> RetryPolicy {
        RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        }
    }

    /// How many times a failed request is repeated (so at most `n + 1` attempts).
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// The wait before the first retry; each further retry doubles it.
    pub fn initial_backoff(mut self, d: Duration) -> Self {
        self.initial_backoff = d;
        self
    }

    /// The longest computed wait between two attempts.
    pub fn max_backoff(mut self, d: Duration) -> Self {
        self.max_backoff = d;
        self
    }

    /// The longest wait a server's `Retry-After` header can impose; a longer
    /// demand is cut to this.
    pub fn max_retry_after(mut self, d: Duration) -> Self {
        self.max_retry_after = d;
        self
    }

    /// The configured number of retries.
    pub fn retries(&self) -> u32 {
        self.max_retries
    }

    /// The wait before retry number `retry` (1-based), given `jitter` in
    /// `[0, 1)` and the wait the server asked for (`Retry-After`), if any.
    pub(crate) fn delay(&self, retry: u32, jitter: f64, retry_after: Option<Duration>) -> Duration {
        if let Some(asked) = retry_after {
            return asked.min(self.max_retry_after);
        }
        let exp = retry.saturating_sub(1).min(30);
        let base = self
            .initial_backoff
            .saturating_mul(1u32 << exp)
            .min(self.max_backoff);
        let jitter = jitter.clamp(0.0, 1.0);
        base.mul_f64(1.0 - jitter / 2.0)
    }
}

/// A random number in `[0, 1)` for jitter, without a dependency on `rand`.
pub(crate) fn jitter() -> f64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Why one attempt failed, and whether to try again.
pub(super) struct Failure {
    pub error: Error,
    pub retry: Retry,
    /// The wait the server asked for before trying again (`Retry-After`).
    pub retry_after: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    No,
    Yes,
    /// 401 or 403: resolve a remembered redirect again, or renew the URL
    /// or the keys.
    Denied,
    /// The file is elsewhere (a bucket's region): try there at once.
    Moved,
    /// The keys the request was signed with expired: renew them and try
    /// again, once.
    Renew,
}

impl Failure {
    /// The one place a verdict is made: what the loop does with `error`, and
    /// what [`Error::is_retryable`] tells the caller, agree.
    pub fn new(error: Error, retry: Retry, retry_after: Option<Duration>) -> Failure {
        Failure {
            error: error.with_verdict(retry == Retry::Yes),
            retry,
            retry_after,
        }
    }

    pub fn fatal(error: Error) -> Failure {
        Failure::new(error, Retry::No, None)
    }

    pub fn transient(error: Error) -> Failure {
        Failure::new(error, Retry::Yes, None)
    }

    /// The loop stops here (its time is up), but trying again later could
    /// help: the error keeps the verdict of its kind.
    pub fn give_up(error: Error) -> Failure {
        Failure {
            error,
            retry: Retry::No,
            retry_after: None,
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        if e.is_retryable() {
            Failure::transient(e)
        } else {
            Failure::fatal(e)
        }
    }
}

/// Which attempt this is (1-based), and the count of sequential requests
/// so far, which every request sent adds to.
pub(super) struct Try<'a> {
    pub number: u32,
    pub in_sequence: &'a mut u32,
}

/// What one retrying call has done so far.
#[derive(Default)]
struct Attempts {
    made: u32,
    retries: u32,
    reresolved: bool,
    renewed: bool,
    moved: bool,
}

const EXPIRED_HINT: &str =
    "the URL may have expired (presigned URLs do); open a freshly signed one";

impl Transport {
    /// Runs `attempt` (one request for `range`, holding a connection permit)
    /// until it succeeds, the policy gives up, or `deadline` passes.
    pub(super) fn with_retries<T>(
        &self,
        range: Range<u64>,
        deadline: Instant,
        in_sequence: &mut u32,
        mut attempt: impl FnMut(&Self, Try<'_>) -> Result<T, Failure>,
    ) -> Result<T, Error> {
        let mut so_far = Attempts::default();
        loop {
            so_far.made += 1;
            // Background work of a closed file waits for no connection.
            workers::check_file_open().map_err(|e| e.with_attempts(so_far.made - 1))?;
            let permit = self
                .connection(deadline)
                .map_err(|e| e.with_attempts(so_far.made - 1))?;
            // A read that was stopped makes no further request, nor a
            // file closed meanwhile.
            crate::wait::check_stopped()
                .and_then(|()| workers::check_file_open())
                .map_err(|e| e.with_attempts(so_far.made - 1))?;
            let outcome = attempt(
                self,
                Try {
                    number: so_far.made,
                    in_sequence,
                },
            );
            drop(permit);
            let mut failure = match outcome {
                Ok(v) => return Ok(v),
                Err(f) => f,
            };
            // Before it is logged (a retry's warning shows it).
            failure.error = self.scrubbed(failure.error);
            // A request ended by a stop failed for no fault of the server's:
            // the stop's error, and no retry.
            crate::wait::check_stopped().map_err(|e| e.with_attempts(so_far.made))?;
            let moved = failure.retry == Retry::Moved;
            let again = match failure.retry {
                Retry::No => Err(failure.error),
                Retry::Denied => self.after_denial(&mut so_far, failure.error),
                Retry::Yes => self.back_off(&mut so_far, &range, deadline, failure),
                // Once: a service that keeps moving the file is wrong.
                Retry::Moved if !so_far.moved => {
                    so_far.moved = true;
                    Ok(())
                }
                Retry::Moved => Err(failure.error),
                Retry::Renew => self.renew_keys(&mut so_far, failure.error),
            };
            if let Err(e) = again {
                // A stop met while renewing keys or re-resolving says so.
                crate::wait::check_stopped().map_err(|e| e.with_attempts(so_far.made))?;
                return Err(e.with_attempts(so_far.made));
            }
            // Sending a request where the file is is no retry.
            if !moved {
                Counters::add(&self.counters.retries, 1);
            }
        }
    }

    /// After a 401 or 403: a remembered redirect target is resolved again
    /// from the original URL once, then a URL that worked before is renewed
    /// by the provider once. `Ok` means try again.
    fn after_denial(&self, so_far: &mut Attempts, refusal: Error) -> Result<(), Error> {
        let original = self.original.read().clone();
        if *self.target.read() != original && !so_far.reresolved {
            so_far.reresolved = true;
            tracing::warn!(
                url = %self.redacted, status = ?refusal.status(),
                "redirect target refused access; resolving the original URL again"
            );
            *self.target.write() = original;
            return Ok(());
        }
        if let Some(service) = &self.service {
            return Err(refusal.with_hint(service.refusal_hint()));
        }
        if let Some(provider) = &self.url_provider {
            if !so_far.renewed && self.opened.load(Relaxed) {
                so_far.renewed = true;
                return self.renew(provider.as_ref(), &refusal);
            }
        }
        if so_far.reresolved || original.query().is_some() {
            Err(refusal.with_hint(EXPIRED_HINT))
        } else {
            Err(refusal)
        }
    }

    /// After a refusal of expired keys: new ones, once. `Ok` means try again.
    fn renew_keys(&self, so_far: &mut Attempts, refusal: Error) -> Result<(), Error> {
        let Some(service) = &self.service else {
            return Err(refusal);
        };
        if !so_far.renewed && service.renew() {
            so_far.renewed = true;
            tracing::warn!(url = %self.redacted, "expired credentials refused; trying again with renewed ones");
            return Ok(());
        }
        Err(refusal.with_hint(service.refusal_hint()))
    }

    /// Waits before the next attempt after a transient failure, if the policy
    /// and the deadline allow one. `Ok` means try again.
    fn back_off(
        &self,
        so_far: &mut Attempts,
        range: &Range<u64>,
        deadline: Instant,
        failure: Failure,
    ) -> Result<(), Error> {
        if so_far.retries >= self.retry.retries() {
            return Err(failure.error);
        }
        so_far.retries += 1;
        let delay = self
            .retry
            .delay(so_far.retries, jitter(), failure.retry_after);
        if Instant::now()
            .checked_add(delay)
            .is_none_or(|t| t >= deadline)
        {
            return Err(failure.error);
        }
        tracing::warn!(
            url = %self.redacted,
            range = %format_args!("{}-{}", range.start, range.end.saturating_sub(1)),
            attempt = so_far.made,
            delay_ms = delay.as_millis() as u64,
            error = %failure.error,
            "retrying request"
        );
        // A stop ends the pause, with the stop's error.
        crate::wait::sleep_until(Instant::now() + delay)?;
        if Instant::now() >= deadline {
            // The last real failure says more than "deadline passed".
            return Err(failure.error);
        }
        Ok(())
    }

    /// Sends this and later requests to `url`, where a service says the file
    /// is.
    pub(super) fn move_to(&self, url: url::Url) {
        tracing::debug!(url = %redact(&url), "the service moved the file's requests");
        *self.original.write() = url.clone();
        *self.target.write() = url;
    }

    /// Replaces the URL with a fresh one from the provider. The next request
    /// checks, as every response is checked, that it serves the same file.
    /// A provider that fails leaves the `refusal` standing, with its reason.
    fn renew(&self, provider: &UrlProvider, refusal: &Error) -> Result<(), Error> {
        let fresh = provider().map_err(|e| {
            let status = refusal
                .status()
                .map_or(String::new(), |s| format!(" (HTTP {s})"));
            Error::new(
                refusal.kind(),
                format!("access was refused{status}, and the URL provider failed: {e}"),
            )
            .with_url(&self.redacted)
        })?;
        let url = url::Url::parse(&fresh).map_err(|e| {
            Error::new(
                ErrorKind::InvalidUrl,
                format!("the URL provider gave an invalid URL: {e}"),
            )
        })?;
        let downgrade = self.refuses_downgrade(&self.original.read(), &url);
        if !matches!(url.scheme(), "http" | "https")
            || (self.https_only && url.scheme() != "https")
            || downgrade
        {
            return Err(Error::new(
                ErrorKind::InvalidUrl,
                format!("the URL provider gave an unusable URL {}", redact(&url)),
            ));
        }
        tracing::warn!(url = %redact(&url), "access refused; continuing with a fresh URL from the provider");
        *self.original.write() = url.clone();
        *self.target.write() = url;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy::default()
            .initial_backoff(Duration::from_millis(100))
            .max_backoff(Duration::from_millis(500));
        let got: Vec<_> = (1..=5).map(|n| p.delay(n, 0.0, None).as_millis()).collect();
        assert_eq!(got, [100, 200, 400, 500, 500]);
        assert_eq!(p.delay(40, 0.0, None), Duration::from_millis(500));
    }

    #[test]
    fn jitter_shortens_by_at_most_half() {
        let p = RetryPolicy::default().initial_backoff(Duration::from_millis(100));
        assert_eq!(p.delay(1, 0.999_999, None).as_millis(), 50);
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j));
        }
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let p = RetryPolicy::default().max_retry_after(Duration::from_secs(30));
        let secs = Duration::from_secs;
        assert_eq!(p.delay(1, 0.5, Some(secs(2))), secs(2));
        assert_eq!(p.delay(1, 0.5, Some(Duration::ZERO)), Duration::ZERO);
        assert_eq!(p.delay(1, 0.0, Some(secs(86400))), secs(30));
    }
}

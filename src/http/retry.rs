//! Trying a failed request again, decided without I/O: the policy as data
//! ([`RetryPolicy`]), why an attempt failed ([`Failure`]), and what to do
//! next ([`Attempts::after`]): pause and try again, resolve a refused
//! redirect target again, renew the URL or the keys, or give up. The
//! transport's loop carries the decisions out.

use std::time::Duration;

use crate::error::Error;

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
#[derive(Debug)]
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

/// Why a call gave up, as far as the user can do something about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hint {
    None,
    /// A refusal of a URL with a query (a presigned one) or one that was
    /// resolved again: it may have expired.
    Expired,
    /// The storage service's own advice on a refusal (its keys).
    Service,
}

/// The message of [`Hint::Expired`].
pub(super) const EXPIRED_HINT: &str =
    "the URL may have expired (presigned URLs do); open a freshly signed one";

/// What the loop does after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Stop, with the attempt's error.
    GiveUp(Hint),
    /// Try again at once: the service says the file is elsewhere, and the
    /// transport moved its requests there.
    Now,
    /// Send the next request to the original URL, not where it redirected.
    Reresolve,
    /// Ask the URL provider for a fresh URL, then try again.
    RenewUrl,
    /// Ask the service for fresh keys; with none, give up with its hint.
    RenewKeys,
    /// Pause this long (within the deadline), then try again.
    BackOff(Duration),
}

/// What the transport is when an attempt fails: the part of its state the
/// decision reads.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Situation {
    /// Requests go where the original URL redirected to, not to it.
    pub redirected: bool,
    /// A storage service (S3) signs the requests.
    pub service: bool,
    /// A URL provider can renew the URL: it has one, and the URL worked.
    pub renewable_url: bool,
    /// The original URL has a query (a presigned one's signature).
    pub query: bool,
}

/// What one retrying call has done so far: the retry loop's decisions,
/// apart from its requests and its pauses, so that they are tested without
/// a socket or a clock.
#[derive(Debug, Default)]
pub(super) struct Attempts {
    /// Attempts begun.
    pub made: u32,
    retries: u32,
    reresolved: bool,
    renewed: bool,
    moved: bool,
}

impl Attempts {
    /// What to do after the attempt failed as `failure` says, with
    /// `time_left` before the call's deadline; `jitter` in `[0, 1)`.
    pub fn after(
        &mut self,
        failure: &Failure,
        situation: Situation,
        policy: &RetryPolicy,
        jitter: f64,
        time_left: Duration,
    ) -> Next {
        match failure.retry {
            Retry::No => Next::GiveUp(Hint::None),
            Retry::Denied => self.after_denial(situation),
            Retry::Yes => {
                if self.retries >= policy.retries() {
                    return Next::GiveUp(Hint::None);
                }
                self.retries += 1;
                let delay = policy.delay(self.retries, jitter, failure.retry_after);
                if delay >= time_left {
                    return Next::GiveUp(Hint::None);
                }
                Next::BackOff(delay)
            }
            // Once: a service that keeps moving the file is wrong.
            Retry::Moved if !self.moved => {
                self.moved = true;
                Next::Now
            }
            Retry::Moved => Next::GiveUp(Hint::None),
            Retry::Renew if !situation.service => Next::GiveUp(Hint::None),
            Retry::Renew if !self.renewed => {
                self.renewed = true;
                Next::RenewKeys
            }
            Retry::Renew => Next::GiveUp(Hint::Service),
        }
    }

    /// After a 401 or 403: a remembered redirect target is resolved again
    /// from the original URL once, then a URL that worked before is renewed
    /// by the provider once.
    fn after_denial(&mut self, situation: Situation) -> Next {
        if situation.redirected && !self.reresolved {
            self.reresolved = true;
            return Next::Reresolve;
        }
        if situation.service {
            return Next::GiveUp(Hint::Service);
        }
        if situation.renewable_url && !self.renewed {
            self.renewed = true;
            return Next::RenewUrl;
        }
        if self.reresolved || situation.query {
            Next::GiveUp(Hint::Expired)
        } else {
            Next::GiveUp(Hint::None)
        }
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

    fn failure(retry: Retry) -> Failure {
        let error = Error::new(crate::error::ErrorKind::HttpStatus(503), "HTTP 503");
        Failure::new(error, retry, None)
    }

    /// The decisions of a call whose attempts all fail as `retries` say.
    fn decide(retries: &[Retry], situation: Situation, policy: &RetryPolicy) -> Vec<Next> {
        let mut so_far = Attempts::default();
        let long = Duration::from_secs(3600);
        retries
            .iter()
            .map(|&r| so_far.after(&failure(r), situation, policy, 0.0, long))
            .collect()
    }

    #[test]
    fn transient_failures_back_off_until_the_policy_gives_up() {
        let p = RetryPolicy::default()
            .max_retries(2)
            .initial_backoff(Duration::from_millis(100));
        let ms = Duration::from_millis;
        assert_eq!(
            decide(&[Retry::Yes; 3], Situation::default(), &p),
            [
                Next::BackOff(ms(100)),
                Next::BackOff(ms(200)),
                Next::GiveUp(Hint::None)
            ]
        );
        assert_eq!(
            decide(&[Retry::Yes], Situation::default(), &RetryPolicy::never()),
            [Next::GiveUp(Hint::None)]
        );
        assert_eq!(
            decide(&[Retry::No], Situation::default(), &p),
            [Next::GiveUp(Hint::None)]
        );
    }

    #[test]
    fn no_pause_runs_past_the_deadline() {
        let p = RetryPolicy::default().initial_backoff(Duration::from_millis(100));
        let mut so_far = Attempts::default();
        let f = failure(Retry::Yes);
        let next = so_far.after(
            &f,
            Situation::default(),
            &p,
            0.0,
            Duration::from_millis(100),
        );
        assert_eq!(next, Next::GiveUp(Hint::None));
        let asked = Failure::new(f.error, Retry::Yes, Some(Duration::from_secs(20)));
        let next = so_far.after(
            &asked,
            Situation::default(),
            &p,
            0.0,
            Duration::from_secs(21),
        );
        assert_eq!(
            next,
            Next::BackOff(Duration::from_secs(20)),
            "Retry-After, within the time"
        );
    }

    #[test]
    fn a_refusal_resolves_a_redirect_again_then_renews_the_url_once() {
        let p = RetryPolicy::default();
        let both = Situation {
            redirected: true,
            renewable_url: true,
            ..Situation::default()
        };
        assert_eq!(
            decide(&[Retry::Denied; 3], both, &p),
            [Next::Reresolve, Next::RenewUrl, Next::GiveUp(Hint::Expired)]
        );
        // A URL never opened is not renewed; a presigned one may have expired.
        let presigned = Situation {
            query: true,
            ..Situation::default()
        };
        assert_eq!(
            decide(&[Retry::Denied], presigned, &p),
            [Next::GiveUp(Hint::Expired)]
        );
        assert_eq!(
            decide(&[Retry::Denied], Situation::default(), &p),
            [Next::GiveUp(Hint::None)]
        );
    }

    #[test]
    fn a_service_renews_its_keys_once_and_moves_the_file_once() {
        let p = RetryPolicy::default();
        let s3 = Situation {
            service: true,
            ..Situation::default()
        };
        assert_eq!(
            decide(&[Retry::Renew, Retry::Renew], s3, &p),
            [Next::RenewKeys, Next::GiveUp(Hint::Service)]
        );
        assert_eq!(
            decide(&[Retry::Denied], s3, &p),
            [Next::GiveUp(Hint::Service)]
        );
        assert_eq!(
            decide(&[Retry::Moved, Retry::Moved], s3, &p),
            [Next::Now, Next::GiveUp(Hint::None)]
        );
        assert_eq!(
            decide(&[Retry::Renew], Situation::default(), &p),
            [Next::GiveUp(Hint::None)],
            "no keys to renew without a service"
        );
    }
}

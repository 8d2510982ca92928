//! When and how long to wait before trying a failed request again.

use std::time::Duration;

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
    /// `[0, 1)` and the server's `Retry-After` value, if any.
    pub(crate) fn delay(&self, retry: u32, jitter: f64, retry_after: Option<&str>) -> Duration {
        if let Some(secs) = retry_after.and_then(parse_retry_after_secs) {
            return Duration::from_secs(secs).min(self.max_retry_after);
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

/// `Retry-After` as delay-seconds. An HTTP-date is not honoured (the computed
/// backoff applies instead): clocks of client and server often disagree.
fn parse_retry_after_secs(value: &str) -> Option<u64> {
    let v = value.trim();
    if v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
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
        assert_eq!(p.delay(1, 0.5, Some("2")), Duration::from_secs(2));
        assert_eq!(p.delay(1, 0.5, Some(" 0 ")), Duration::ZERO);
        assert_eq!(p.delay(1, 0.0, Some("86400")), Duration::from_secs(30));
        assert_eq!(
            p.delay(1, 0.0, Some("99999999999999999999999")),
            p.delay(1, 0.0, None),
            "an overflowing value falls back to backoff"
        );
        assert_eq!(
            p.delay(1, 0.0, Some("Wed, 21 Oct 2015 07:28:00 GMT")),
            p.delay(1, 0.0, None)
        );
    }
}

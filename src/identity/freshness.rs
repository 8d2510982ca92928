//! How long a version of a file that the server confirmed may be trusted
//! without asking it again: what its `Cache-Control` (and `Age`) said, and
//! the decision a warm open makes from that, the builder's options and the
//! time since. Pure functions.
//!
//! A warm open through the disk cache asks the server whether the version
//! on disk is still the file's (one request, a `304` without a body). A
//! server that says how long its answer stays good saves that request:
//! `Cache-Control: immutable` (the object at this URL never changes, as
//! content-addressed blobs do) or `max-age=N`. Anything unclear — no
//! header, `no-cache`, `no-store`, a value that does not parse, two
//! `max-age`s that disagree — means ask: a request too many costs a round
//! trip, a version trusted wrongly costs the user a stale file.

use std::time::Duration;

/// The longest a `max-age` is trusted: a year. Larger values (up to the
/// 2^31 s RFC 9111 lets a cache stop at, or any number of digits) are
/// clamped to it; a server that means "forever" says `immutable`.
pub(crate) const MAX_FRESH: Duration = Duration::from_secs(365 * 24 * 3600);

/// The most bytes of `Cache-Control` looked at, and the most directives:
/// a real header has a handful; what lies beyond is not read.
const MAX_HEADER_LEN: usize = 4096;
const MAX_DIRECTIVES: usize = 64;

/// For how long a confirmed version may be trusted without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Freshness {
    /// Ask at every open: the server said nothing, or to ask.
    #[default]
    Ask,
    /// Trusted for this long after it was confirmed (a `max-age`, less the
    /// answer's `Age`; never zero, at most [`MAX_FRESH`]).
    For(Duration),
    /// Trusted for good: the server said the object never changes.
    Forever,
}

/// The freshness of an answer whose `Cache-Control` values (every header
/// line, in order) are `cache_control`, and whose `Age` is `age` (seconds
/// it spent in caches on the way, which count against its `max-age`).
///
/// `no-cache` or `no-store` → [`Freshness::Ask`], whatever else is said;
/// then `immutable` → [`Freshness::Forever`] (unless `max-age=0` says the
/// answer is stale at once); then `max-age=N` → [`Freshness::For`] `N − Age`
/// seconds (clamped to [`MAX_FRESH`]), or ask if that is none. `s-maxage`
/// is for shared caches and `must-revalidate` matters only once stale:
/// both are left aside. Directives are matched in any case; a `max-age`
/// that is not whole seconds, or two that disagree, mean ask.
pub(crate) fn from_headers<'a>(
    cache_control: impl IntoIterator<Item = &'a str>,
    age: Option<&str>,
) -> Freshness {
    let mut immutable = false;
    let mut max_age: Option<Option<u64>> = None;
    let mut budget = MAX_HEADER_LEN;
    let directives = cache_control
        .into_iter()
        .map_while(|line| {
            // Cut at a character boundary: the rest of a long header is
            // never read.
            let taken = (budget > 0).then(|| floor_char_boundary(line, budget))?;
            budget -= taken.len();
            Some(taken)
        })
        .flat_map(|line| line.split(','))
        .take(MAX_DIRECTIVES);
    for directive in directives {
        let (name, value) = match directive.split_once('=') {
            Some((n, v)) => (n.trim(), Some(v.trim().trim_matches('"'))),
            None => (directive.trim(), None),
        };
        if name.eq_ignore_ascii_case("no-cache") || name.eq_ignore_ascii_case("no-store") {
            return Freshness::Ask;
        } else if name.eq_ignore_ascii_case("immutable") {
            immutable = true;
        } else if name.eq_ignore_ascii_case("max-age") {
            let seconds = value.and_then(seconds);
            match max_age {
                Some(earlier) if earlier != seconds => return Freshness::Ask,
                _ => max_age = Some(seconds),
            }
        }
    }
    let max_age = match max_age {
        // Unparsable: the answer's lifetime is unknown.
        Some(None) => return Freshness::Ask,
        Some(Some(s)) => Some(s),
        None => None,
    };
    if immutable && max_age != Some(0) {
        return Freshness::Forever;
    }
    // An `Age` that does not parse is ignored, as RFC 9111 says.
    let age = age.and_then(seconds).unwrap_or(0);
    match max_age.map(|m| m.saturating_sub(age)) {
        Some(left) if left > 0 => Freshness::For(Duration::from_secs(left).min(MAX_FRESH)),
        _ => Freshness::Ask,
    }
}

/// Delta-seconds: ASCII digits only; more than fit are the largest number
/// (RFC 9111, 1.2.2), which is clamped later anyway.
fn seconds(text: &str) -> Option<u64> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().unwrap_or(u64::MAX))
}

/// The longest start of `text` at most `max` bytes long that ends at a
/// character boundary.
fn floor_char_boundary(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// What a warm open trusts without asking, from the builder's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Trust {
    /// [`Builder::immutable`](crate::options::Builder::immutable): every version on
    /// disk, for good.
    pub immutable: bool,
    /// [`Builder::revalidate_after`](crate::options::Builder::revalidate_after).
    pub revalidate_after: Duration,
}

/// Whether a version confirmed `since` ago (`None`: when is unknown, such
/// as a time in the future) with `freshness` is trusted without asking.
pub(crate) fn is_trusted(trust: Trust, freshness: Freshness, since: Option<Duration>) -> bool {
    if trust.immutable || freshness == Freshness::Forever {
        return true;
    }
    let Some(since) = since else {
        return false;
    };
    let fresh_for = match freshness {
        Freshness::For(d) => d,
        Freshness::Ask | Freshness::Forever => Duration::ZERO,
    };
    since < trust.revalidate_after.max(fresh_for)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(cache_control: &str) -> Freshness {
        from_headers([cache_control], None)
    }

    fn secs(s: u64) -> Freshness {
        Freshness::For(Duration::from_secs(s))
    }

    #[test]
    fn what_a_server_says_is_read() {
        assert_eq!(of("immutable"), Freshness::Forever);
        assert_eq!(
            of("public, max-age=31536000, immutable"),
            Freshness::Forever
        );
        assert_eq!(of("max-age=3600"), secs(3600));
        assert_eq!(of("Max-Age=\"60\", private"), secs(60), "any case, quoted");
        assert_eq!(of(" max-age = 60 "), secs(60), "spaces");
        assert_eq!(of("must-revalidate, max-age=60"), secs(60));
        assert_eq!(of("s-maxage=600"), Freshness::Ask, "for shared caches");
        assert_eq!(of("public"), Freshness::Ask);
        assert_eq!(of(""), Freshness::Ask);
        assert_eq!(from_headers([], None), Freshness::Ask);
    }

    #[test]
    fn anything_that_says_ask_or_is_unclear_asks() {
        for ask in [
            "max-age=0",
            "no-cache",
            "no-store",
            "no-cache, max-age=3600",
            "immutable, no-store",
            "max-age=3600, NO-CACHE=\"Set-Cookie\"",
            "must-revalidate, max-age=0",
            "immutable, max-age=0",
            "max-age=",
            "max-age=-1",
            "max-age=1.5",
            "max-age=12abc",
            "max-age=60, max-age=120",
        ] {
            assert_eq!(of(ask), Freshness::Ask, "{ask}");
        }
        assert_eq!(of("max-age=60, max-age=60"), secs(60), "agreeing twice");
    }

    #[test]
    fn every_header_line_counts() {
        assert_eq!(from_headers(["public", "max-age=60"], None), secs(60));
        assert_eq!(
            from_headers(["max-age=60", "no-cache"], None),
            Freshness::Ask
        );
        assert_eq!(
            from_headers(["max-age=60", "immutable"], None),
            Freshness::Forever
        );
    }

    #[test]
    fn the_age_an_answer_spent_in_caches_counts_against_it() {
        assert_eq!(from_headers(["max-age=3600"], Some("600")), secs(3000));
        assert_eq!(from_headers(["max-age=3600"], Some("3600")), Freshness::Ask);
        assert_eq!(
            from_headers(["max-age=3600"], Some("99999")),
            Freshness::Ask
        );
        assert_eq!(from_headers(["max-age=3600"], Some("soon")), secs(3600));
        assert_eq!(
            from_headers(["immutable"], Some("99999")),
            Freshness::Forever
        );
    }

    #[test]
    fn absurd_values_are_clamped() {
        assert_eq!(of("max-age=2147483648"), Freshness::For(MAX_FRESH));
        let digits = format!("max-age={}", "9".repeat(400));
        assert_eq!(of(&digits), Freshness::For(MAX_FRESH));
    }

    #[test]
    fn hostile_headers_are_bounded_and_never_panic() {
        let long = format!("{}max-age=60", "x,".repeat(10_000));
        assert_eq!(of(&long), Freshness::Ask, "past the directives read");
        let wide = format!("{}, max-age=60", "é".repeat(3000));
        assert_eq!(of(&wide), Freshness::Ask, "past the bytes read");
        let lines = vec!["public"; 100_000];
        assert_eq!(from_headers(lines, None), Freshness::Ask);
        for odd in [
            "=",
            ",,,",
            "max-age",
            "=60",
            "\"",
            "max-age=\"",
            "immutable=",
        ] {
            let _ = of(odd);
        }
        assert_eq!(floor_char_boundary("aé", 2), "a");
    }

    const NEVER: Trust = Trust {
        immutable: false,
        revalidate_after: Duration::ZERO,
    };

    fn ago(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    #[test]
    fn a_version_is_trusted_as_the_user_or_the_server_said() {
        assert!(!is_trusted(NEVER, Freshness::Ask, ago(0)));
        assert!(is_trusted(NEVER, Freshness::Forever, ago(u64::MAX)));
        assert!(is_trusted(NEVER, Freshness::Forever, None));
        assert!(is_trusted(NEVER, secs(3600), ago(3599)));
        assert!(
            !is_trusted(NEVER, secs(3600), ago(3600)),
            "older than max-age"
        );
        assert!(
            !is_trusted(NEVER, secs(3600), None),
            "confirmed when is unknown"
        );
        let immutable = Trust {
            immutable: true,
            ..NEVER
        };
        assert!(is_trusted(immutable, Freshness::Ask, None));
        let a_day = Trust {
            revalidate_after: Duration::from_secs(86_400),
            ..NEVER
        };
        assert!(is_trusted(a_day, Freshness::Ask, ago(3600)));
        assert!(!is_trusted(a_day, Freshness::Ask, ago(86_400)));
        assert!(is_trusted(a_day, secs(200_000), ago(100_000)), "the longer");
    }
}

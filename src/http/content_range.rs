//! Parsing of `Content-Range` response headers (RFC 9110, section 14.4).

/// A parsed `Content-Range` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentRange {
    /// `bytes first-last/total`, `total` being `None` for `*`.
    Bytes {
        /// First byte sent.
        first: u64,
        /// Last byte sent, inclusive.
        last: u64,
        /// The whole file's size, if the server said.
        total: Option<u64>,
    },
    /// `bytes */total`, sent with `416 Range Not Satisfiable`.
    Unsatisfied {
        /// The whole file's size.
        total: u64,
    },
}

/// Parses a `Content-Range` value strictly: digits only, no overflow, `first <=
/// last < total`. Returns `None` for anything else.
pub fn parse(value: &str) -> Option<ContentRange> {
    let rest = value.trim().strip_prefix("bytes")?;
    let rest = rest.strip_prefix(' ')?.trim_start();
    let (span, total) = rest.split_once('/')?;
    let total = match total.trim() {
        "*" => None,
        t => Some(number(t)?),
    };
    if span.trim() == "*" {
        return total.map(|total| ContentRange::Unsatisfied { total });
    }
    let (first, last) = span.trim().split_once('-')?;
    let (first, last) = (number(first)?, number(last)?);
    if first > last || total.is_some_and(|t| last >= t) {
        return None;
    }
    Some(ContentRange::Bytes { first, last, total })
}

fn number(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_forms_servers_send() {
        assert_eq!(
            parse("bytes 0-99/1000"),
            Some(ContentRange::Bytes {
                first: 0,
                last: 99,
                total: Some(1000)
            })
        );
        assert_eq!(
            parse("bytes 5-5/*"),
            Some(ContentRange::Bytes {
                first: 5,
                last: 5,
                total: None
            })
        );
        assert_eq!(
            parse("bytes */0"),
            Some(ContentRange::Unsatisfied { total: 0 })
        );
        assert_eq!(
            parse("bytes */77"),
            Some(ContentRange::Unsatisfied { total: 77 })
        );
    }

    #[test]
    fn rejects_malformed_values() {
        for bad in [
            "",
            "bytes",
            "bytes 0-99",
            "items 0-99/100",
            "bytes 99-0/100",
            "bytes 0-100/100",
            "bytes -1-5/10",
            "bytes 0-x/10",
            "bytes 0-5/ten",
            "bytes +1-5/10",
            "bytes 0-99999999999999999999999/1",
            "bytes 0-5/99999999999999999999999",
            "bytes */*",
            "bytes 0 - 5/10",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn never_panics(s in ".{0,40}") {
            let _ = parse(&s);
        }

        #[test]
        fn round_trips(first in 0u64..u64::MAX / 2, len in 0u64..1 << 40, extra in 1u64..1 << 20) {
            let last = first + len;
            let total = last + extra;
            prop_assert_eq!(
                parse(&format!("bytes {first}-{last}/{total}")),
                Some(ContentRange::Bytes { first, last, total: Some(total) })
            );
        }
    }
}

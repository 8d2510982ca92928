//! The one parser of a request's `Range` header (RFC 9110 §14.1.2) that
//! every test server uses, and what a range selects of a file.
//!
//! Test servers serve one range of bytes: `bytes=first-last`,
//! `bytes=first-` and `bytes=-len`. Anything else is an error of its own
//! kind ([`RangeError`]), which each server answers as it chooses (`400`,
//! mostly).

use std::ops::Range;

/// One range of bytes a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// `bytes=first-last`, both inclusive (`first <= last`).
    Closed {
        /// The first byte's position.
        first: u64,
        /// The last byte's position (inclusive).
        last: u64,
    },
    /// `bytes=first-`: from `first` to the end.
    From(u64),
    /// `bytes=-len`: the last `len` bytes.
    Suffix(u64),
}

/// Why a `Range` value is not one range of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeError {
    /// Not in the `bytes` unit (or no `=` at all).
    NotBytes,
    /// More than one range (`bytes=0-1,5-9`): test servers serve one.
    Multiple,
    /// A position that is not a decimal number (a sign, a space, a
    /// letter), a missing `-`, or no position at all.
    Malformed,
    /// A position past `u64::MAX`.
    Overflow,
    /// `last` before `first` (`bytes=9-5`).
    Reversed,
}

/// Parses a `Range` header's value.
pub fn parse(value: &str) -> Result<ByteRange, RangeError> {
    let (unit, spec) = value.trim().split_once('=').ok_or(RangeError::NotBytes)?;
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return Err(RangeError::NotBytes);
    }
    let spec = spec.trim();
    if spec.contains(',') {
        return Err(RangeError::Multiple);
    }
    let (first, last) = spec.split_once('-').ok_or(RangeError::Malformed)?;
    match (first, last) {
        ("", "") => Err(RangeError::Malformed),
        ("", len) => Ok(ByteRange::Suffix(position(len)?)),
        (first, "") => Ok(ByteRange::From(position(first)?)),
        (first, last) => {
            let (first, last) = (position(first)?, position(last)?);
            if last < first {
                return Err(RangeError::Reversed);
            }
            Ok(ByteRange::Closed { first, last })
        }
    }
}

/// A position: ASCII digits only (`u64::from_str` would take a `+`).
fn position(digits: &str) -> Result<u64, RangeError> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RangeError::Malformed);
    }
    // Digits only: the one way left to fail is overflow.
    digits.parse().map_err(|_| RangeError::Overflow)
}

impl ByteRange {
    /// The bytes this range selects of a file of `size` bytes, clamped to
    /// it; `None` if it selects none (it starts at or past the end, it is
    /// a suffix of 0 bytes, or the file is empty): unsatisfiable, a `416`.
    pub fn resolve(self, size: u64) -> Option<Range<u64>> {
        let bytes = match self {
            ByteRange::Closed { first, last } => first..last.saturating_add(1).min(size),
            ByteRange::From(first) => first..size,
            ByteRange::Suffix(len) => size - len.min(size)..size,
        };
        (bytes.start < bytes.end).then_some(bytes)
    }
}

/// What a request's `Range` header selects of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// No `Range` header: the whole file (a `200`).
    Whole,
    /// These bytes (a `206`), never empty.
    Part(Range<u64>),
    /// A range that selects nothing of the file (a `416`).
    Unsatisfiable,
    /// A header that is not one range of bytes.
    Invalid(RangeError),
}

/// What `header` (a request's `Range` value, if it has one) selects of a
/// file of `size` bytes.
pub fn select(header: Option<&str>, size: u64) -> Selection {
    let Some(value) = header else {
        return Selection::Whole;
    };
    match parse(value) {
        Err(e) => Selection::Invalid(e),
        Ok(range) => match range.resolve(size) {
            Some(bytes) => Selection::Part(bytes),
            None => Selection::Unsatisfiable,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_parse() {
        assert_eq!(
            parse("bytes=0-9"),
            Ok(ByteRange::Closed { first: 0, last: 9 })
        );
        assert_eq!(parse("bytes=5-"), Ok(ByteRange::From(5)));
        assert_eq!(parse("bytes=-30"), Ok(ByteRange::Suffix(30)));
        assert_eq!(
            parse("bytes=7-7"),
            Ok(ByteRange::Closed { first: 7, last: 7 })
        );
        // The unit is case-insensitive; space around the value is not part
        // of it.
        assert_eq!(
            parse("  Bytes=1-2 "),
            Ok(ByteRange::Closed { first: 1, last: 2 })
        );
    }

    #[test]
    fn the_largest_positions_parse_and_one_more_overflows() {
        let max = u64::MAX;
        assert_eq!(
            parse(&format!("bytes={max}-{max}")),
            Ok(ByteRange::Closed {
                first: max,
                last: max
            })
        );
        assert_eq!(parse(&format!("bytes=-{max}")), Ok(ByteRange::Suffix(max)));
        for hostile in [
            "bytes=0-18446744073709551616",
            "bytes=18446744073709551616-",
            "bytes=-18446744073709551616",
            "bytes=0-99999999999999999999999999999999999999",
        ] {
            assert_eq!(parse(hostile), Err(RangeError::Overflow), "{hostile}");
        }
    }

    #[test]
    fn reversed_multiple_and_other_units_are_refused() {
        assert_eq!(parse("bytes=9-5"), Err(RangeError::Reversed));
        assert_eq!(parse("bytes=0-1,5-9"), Err(RangeError::Multiple));
        assert_eq!(parse("bytes=0-1,"), Err(RangeError::Multiple));
        assert_eq!(parse("bytes=-5,-6"), Err(RangeError::Multiple));
        assert_eq!(parse("items=0-9"), Err(RangeError::NotBytes));
        assert_eq!(parse("bytes 0-9"), Err(RangeError::NotBytes));
        assert_eq!(parse(""), Err(RangeError::NotBytes));
    }

    #[test]
    fn anything_but_digits_is_malformed() {
        for hostile in [
            "bytes=",
            "bytes=-",
            "bytes=5",
            "bytes=--5",
            "bytes=1-2-3",
            "bytes=+1-2",
            "bytes=1-+2",
            "bytes=-+5",
            "bytes=x-9",
            "bytes=0x10-0x20",
            "bytes=1 -2",
            "bytes=1- 2",
            "bytes=1.5-2",
            "bytes=-1e3",
            "bytes=١-٢",
        ] {
            assert_eq!(parse(hostile), Err(RangeError::Malformed), "{hostile}");
        }
    }

    #[test]
    fn a_range_is_clamped_to_the_file() {
        let closed = |first, last| ByteRange::Closed { first, last };
        assert_eq!(closed(0, 9).resolve(100), Some(0..10));
        assert_eq!(closed(90, 199).resolve(100), Some(90..100));
        assert_eq!(closed(0, u64::MAX).resolve(100), Some(0..100));
        assert_eq!(closed(99, 99).resolve(100), Some(99..100));
        assert_eq!(ByteRange::From(95).resolve(100), Some(95..100));
        assert_eq!(ByteRange::Suffix(30).resolve(100), Some(70..100));
        assert_eq!(ByteRange::Suffix(300).resolve(100), Some(0..100));
        assert_eq!(ByteRange::Suffix(u64::MAX).resolve(100), Some(0..100));
    }

    #[test]
    fn a_range_past_the_end_or_of_nothing_is_unsatisfiable() {
        let closed = |first, last| ByteRange::Closed { first, last };
        assert_eq!(closed(100, 200).resolve(100), None);
        assert_eq!(closed(u64::MAX, u64::MAX).resolve(100), None);
        assert_eq!(ByteRange::From(100).resolve(100), None);
        assert_eq!(ByteRange::Suffix(0).resolve(100), None);
        assert_eq!(closed(0, 0).resolve(0), None);
        assert_eq!(ByteRange::Suffix(5).resolve(0), None);
    }

    #[test]
    fn a_header_selects_all_part_or_nothing() {
        assert_eq!(select(None, 10), Selection::Whole);
        assert_eq!(select(Some("bytes=2-4"), 10), Selection::Part(2..5));
        assert_eq!(select(Some("bytes=-3"), 10), Selection::Part(7..10));
        assert_eq!(select(Some("bytes=10-"), 10), Selection::Unsatisfiable);
        assert_eq!(
            select(Some("bytes=4-2"), 10),
            Selection::Invalid(RangeError::Reversed)
        );
    }
}

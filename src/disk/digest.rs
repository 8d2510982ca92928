//! What the disk cache writes of a file in place of its URL and validators:
//! SHA-256 digests, and the validators sealed by a key only the URL gives.
//!
//! A URL may carry credentials the crate cannot tell from names (an
//! `access_token`, an `api_key`, a token under any name), and a directory
//! outlives the process: it is backed up, synced, shared on a cluster's
//! filesystem. So no text of a URL, a cache key or a header is ever
//! written there; SHA-256 digests of it are (preimage resistant: a digest
//! gives nothing of a token back, and no two names share one). Each digest
//! is of a domain (what it is for) and parts, each preceded by its length,
//! so that no two different inputs are read as one.
//!
//! A warm open needs the validator of the version seen last (to ask
//! `If-None-Match`, and to pin the reads after it with `If-Match`): it is
//! [`seal`]ed with a key made of the file's name, so that the directory
//! alone does not give it, only the directory and the URL together.

use sha2::{Digest as _, Sha256};

/// A SHA-256 digest.
pub(crate) type Digest = [u8; 32];

/// SHA-256 of `domain` then each of `parts`, each preceded by its length.
pub(crate) fn of(domain: &str, parts: &[&[u8]]) -> Digest {
    let mut hash = Sha256::new();
    for part in std::iter::once(domain.as_bytes()).chain(parts.iter().copied()) {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    hash.finalize().into()
}

/// `digest` as 64 lower-case hexadecimal digits (a name in the directory).
pub(crate) fn hex(digest: &Digest) -> String {
    use std::fmt::Write;
    digest.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Whether `name` is a [`hex`] digest's.
pub(crate) fn is_hex(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The digest [`hex`] wrote as `text`; `None` for anything else.
pub(crate) fn from_hex(text: &str) -> Option<Digest> {
    if !is_hex(text) {
        return None;
    }
    let mut digest = [0u8; 32];
    for (byte, pair) in digest.iter_mut().zip(text.as_bytes().chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(digest)
}

/// `plain` sealed with `key` (parts, as [`of`] takes them): a tag, the
/// digest of the key and `plain`, then `plain` XOR a keystream made of the
/// key and the tag (SHA-256 in counter mode). Without the key, it gives
/// nothing but its length; the same `plain` under the same key seals the
/// same (nothing else repeats: the tag differs with `plain`); [`unseal`]
/// with another key or of damaged bytes gives `None`.
pub(crate) fn seal(key: &[&[u8]], plain: &[u8]) -> Vec<u8> {
    let tag = tag(key, plain);
    let mut out = tag.to_vec();
    out.extend(xor_stream(key, &tag, plain));
    out
}

/// What [`seal`] sealed with `key`, if `sealed` is that, intact.
pub(crate) fn unseal(key: &[&[u8]], sealed: &[u8]) -> Option<Vec<u8>> {
    let (tag, body) = sealed.split_at_checked(32)?;
    let tag: Digest = tag.try_into().ok()?;
    let plain = xor_stream(key, &tag, body);
    (self::tag(key, &plain) == tag).then_some(plain)
}

fn tag(key: &[&[u8]], plain: &[u8]) -> Digest {
    let mut parts = key.to_vec();
    parts.push(plain);
    of("remfile seal tag", &parts)
}

/// `bytes` XOR the keystream of `key` and `tag`.
fn xor_stream(key: &[&[u8]], tag: &Digest, bytes: &[u8]) -> Vec<u8> {
    bytes
        .chunks(32)
        .zip(0u64..)
        .flat_map(|(chunk, counter)| {
            let counter = counter.to_le_bytes();
            let mut parts = key.to_vec();
            parts.extend([&tag[..], &counter[..]]);
            let stream = of("remfile seal stream", &parts);
            chunk
                .iter()
                .zip(stream)
                .map(|(b, s)| b ^ s)
                .collect::<Vec<u8>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_never_run_together() {
        assert_ne!(of("d", &[b"ab", b"c"]), of("d", &[b"a", b"bc"]));
        assert_ne!(of("d", &[b"a"]), of("e", &[b"a"]));
        assert_eq!(of("d", &[b"a"]), of("d", &[b"a"]));
        let h = hex(&of("d", &[]));
        assert!(is_hex(&h), "{h}");
        assert!(!is_hex("0123456789abcdef"), "an earlier version's name");
    }

    #[test]
    fn a_sealed_text_opens_with_its_key_only_and_shows_nothing_of_it() {
        let key: [&[u8]; 2] = [b"url https://h/f", b"id=1"];
        let plain = b"etag \"a-long-validator-longer-than-one-block-of-stream\"\nsize 9";
        let sealed = seal(&key, plain);
        assert_eq!(sealed.len(), 32 + plain.len());
        assert_eq!(unseal(&key, &sealed).as_deref(), Some(&plain[..]));
        assert!(!sealed.windows(4).any(|w| w == b"etag" || w == b"size"));
        assert_eq!(unseal(&[b"url https://h/f", b"id=2"], &sealed), None);
        let mut damaged = sealed.clone();
        damaged[40] ^= 1;
        assert_eq!(unseal(&key, &damaged), None);
        assert_eq!(unseal(&key, &sealed[..31]), None);
        assert_eq!(sealed, seal(&key, plain), "the same text seals the same");
    }
}

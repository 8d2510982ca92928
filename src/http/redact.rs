//! Texts fit to print: URLs without query string, fragment or credentials,
//! and servers' error bodies without credentials or control characters.
//!
//! Presigned URLs carry their signature in the query string, so it must never
//! reach an error message or a log line. Error bodies are the server's
//! words, and both careless and hostile: S3's `SignatureDoesNotMatch`
//! echoes the access key id and the string that was signed, and a hostile
//! server can put terminal escapes or line breaks into what lands in logs.

use url::Url;

/// `scheme://host:port/path`, with the query string, fragment and user
/// information removed. A query string is replaced by `?…` so a reader can
/// tell there was one.
pub fn redact(url: &Url) -> String {
    let mut shown = url.clone();
    let had_query = shown.query().is_some_and(|q| !q.is_empty());
    shown.set_query(None);
    shown.set_fragment(None);
    // Both fail only for URLs that cannot have credentials, which is fine.
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    let mut s = String::from(shown);
    if had_query {
        s.push_str("?…");
    }
    s
}

/// XML elements of error bodies (S3's and its imitators') whose content is
/// a credential or what was signed with one. A name matches the elements
/// it begins (S3 numbers its echoed session tokens: `<Token-0>`), written
/// with attributes or not.
const SECRET_ELEMENTS: [&str; 5] = [
    "AWSAccessKeyId",
    "StringToSign",
    "CanonicalRequest",
    "SignatureProvided",
    "Token",
];

/// Query parameters (of URLs a body names, or standing alone, plain or
/// percent-encoded) whose values are signatures or credentials; matched
/// without regard to case.
const SECRET_PARAMETERS: [&str; 6] = [
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "signature",
    "awsaccesskeyid",
    "sig",
];

/// The first `max` bytes (or fewer, at a character boundary) of an error
/// body as one line of printable text: the content of [`SECRET_ELEMENTS`],
/// URLs' query strings, the values of [`SECRET_PARAMETERS`] and anything
/// shaped like an AWS access key id replaced by `…`; control characters
/// (terminal escapes, line breaks) become spaces, runs of white space one,
/// and invisible format characters (bidirectional controls, zero-width
/// ones) vanish.
pub fn printable_excerpt(body: &[u8], max: usize) -> String {
    let mut text = String::from_utf8_lossy(body).into_owned();
    for name in SECRET_ELEMENTS {
        text = hide_elements(&text, name);
    }
    text = hide_queries(&text);
    for name in SECRET_PARAMETERS {
        text = hide_parameter(&text, &format!("{name}="));
        text = hide_parameter(&text, &format!("{name}%3d"));
    }
    text = hide_key_ids(&text);
    let mut line = String::with_capacity(text.len().min(max));
    for c in text.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if is_invisible_format(c) || (c.is_whitespace() && line.ends_with(' ')) {
            continue;
        }
        let c = if c.is_whitespace() { ' ' } else { c };
        if line.len() + c.len_utf8() > max {
            break;
        }
        line.push(c);
    }
    line.trim().to_owned()
}

/// Unicode's format characters (category `Cf`) that can hide or reorder
/// text: bidirectional controls, zero-width characters, the soft hyphen,
/// the byte order mark, interlinear annotation.
fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
}

/// `text` with the content of every element whose name begins with `name`
/// replaced by `…`; an element left open (the body cut short) hides the
/// rest.
fn hide_elements(text: &str, name: &str) -> String {
    let open = format!("<{name}");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&open) {
        let tag = &rest[at + 1..];
        let tag_name_len = tag
            .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
            .unwrap_or(tag.len());
        let Some(tag_end) = tag.find('>') else {
            out.push_str(&rest[..at]);
            out.push_str("<…");
            return out;
        };
        let after_tag = at + 1 + tag_end + 1;
        out.push_str(&rest[..after_tag]);
        if tag[..tag_end].ends_with('/') {
            // An empty element: nothing to hide.
            rest = &rest[after_tag..];
            continue;
        }
        out.push('…');
        let close = format!("</{}", &tag[..tag_name_len]);
        match rest[after_tag..].find(&close) {
            Some(end) => rest = &rest[after_tag + end..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// `text` with the query string of every `http(s)://` URL in it replaced by
/// `?…`.
fn hide_queries(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(found) = lower[at..].find("http").map(|i| at + i) {
        let url_len = text[found..]
            .find(|c: char| c.is_whitespace() || c.is_control() || "<>\"'`".contains(c))
            .unwrap_or(text.len() - found);
        let url = &text[found..found + url_len];
        out.push_str(&text[at..found]);
        match url.find('?') {
            Some(q) if url.contains("://") => {
                out.push_str(&url[..q]);
                out.push_str("?…");
            }
            _ => out.push_str(url),
        }
        // At least "http" itself: no delimiter is among its letters.
        at = found + url_len;
    }
    out.push_str(&text[at..]);
    out
}

/// `text` with the value after every `name` (a `key=` of lower-case ASCII)
/// replaced by `…`.
fn hide_parameter(text: &str, name: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(found) = lower[at..].find(name).map(|i| at + i) {
        let value = found + name.len();
        let end = text[value..]
            .find(|c: char| c.is_whitespace() || c.is_control() || "&<>\"'`".contains(c))
            .map_or(text.len(), |i| value + i);
        out.push_str(&text[at..value]);
        if end > value {
            out.push('…');
        }
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// `text` with every run shaped like an AWS access key id (`AKIA` or `ASIA`
/// and sixteen more capitals or digits, not followed by a seventeenth)
/// replaced by `…`, wherever it starts (after `%3D`, say).
fn hide_key_ids(text: &str) -> String {
    let is_part = |b: u8| b.is_ascii_uppercase() || b.is_ascii_digit();
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let mut i = 0;
    while i + 20 <= bytes.len() {
        let ends_word = bytes.get(i + 20).is_none_or(|b| !b.is_ascii_alphanumeric());
        if ends_word
            && (bytes[i..].starts_with(b"AKIA") || bytes[i..].starts_with(b"ASIA"))
            && bytes[i..i + 20].iter().all(|&b| is_part(b))
        {
            out.push_str(&text[at..i]);
            out.push('…');
            i += 20;
            at = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&text[at..]);
    out
}

/// Whether two URLs share an origin: scheme, host and port.
pub fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_query_fragment_and_credentials() {
        let u =
            Url::parse("https://user:pw@h.example:8443/a/b.nwb?X-Amz-Signature=abc#frag").unwrap();
        let r = redact(&u);
        assert_eq!(r, "https://h.example:8443/a/b.nwb?…");
        assert!(!r.contains("abc") && !r.contains("pw") && !r.contains("user"));
    }

    #[test]
    fn an_s3_refusal_keeps_its_reason_and_loses_its_credentials() {
        let body = "<?xml version=\"1.0\"?>\n<Error><Code>SignatureDoesNotMatch</Code>\
            <Message>The request signature we calculated does not match</Message>\
            <AWSAccessKeyId>AKIAIOSFODNN7EXAMPLE</AWSAccessKeyId>\
            <StringToSign>AWS4-HMAC-SHA256\n20261202T000000Z\nSECRETSCOPE</StringToSign>\
            <SignatureProvided>deadbeef</SignatureProvided>\
            <CanonicalRequest>GET\n/key\nX-Amz-Credential=AKIA</CanonicalRequest>\
            <Resource>https://b.s3.amazonaws.com/key?X-Amz-Signature=SIG1</Resource>\
            <Hint>see X-Amz-Security-Token=TOK1&amp; and ASIAABCDEFGHIJKLMNOP</Hint></Error>";
        let shown = printable_excerpt(body.as_bytes(), 4096);
        assert!(shown.contains("SignatureDoesNotMatch"), "{shown}");
        assert!(shown.contains("does not match"), "{shown}");
        assert!(
            shown.contains("https://b.s3.amazonaws.com/key?…"),
            "{shown}"
        );
        for secret in [
            "AKIAIOSFODNN7EXAMPLE",
            "SECRETSCOPE",
            "deadbeef",
            "SIG1",
            "TOK1",
            "ASIAABCDEFGHIJKLMNOP",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(!shown.contains('\n'), "{shown}");
    }

    #[test]
    fn an_excerpt_is_one_line_of_printable_text_within_its_length() {
        let hostile = "ok\x1b[31mred\x1b[0m\r\nFAKE LOG LINE\u{202E}txt.exe\t\0end";
        let shown = printable_excerpt(hostile.as_bytes(), 4096);
        assert_eq!(shown, "ok [31mred [0m FAKE LOG LINEtxt.exe end");
        assert!(shown.chars().all(|c| !c.is_control()));
        let long = "é".repeat(600);
        let cut = printable_excerpt(long.as_bytes(), 513);
        assert_eq!(cut.len(), 512, "cut at a character boundary");
        assert_eq!(
            printable_excerpt(b"\xff\xfebad", 100),
            "\u{FFFD}\u{FFFD}bad"
        );
        // An element cut short hides what follows it.
        let cut_short = printable_excerpt(b"<Code>X</Code><StringToSign>abc", 100);
        assert_eq!(cut_short, "<Code>X</Code><StringToSign>…");
        let cut_in_tag = printable_excerpt(b"<Code>X</Code><StringToSign a=\"SECRET", 100);
        assert_eq!(cut_in_tag, "<Code>X</Code><…");
        assert_eq!(
            printable_excerpt(b"see http and https://h/p?q=1 done", 100),
            "see http and https://h/p?… done"
        );
    }

    #[test]
    fn numbered_attributed_and_encoded_secrets_are_hidden_too() {
        let body = "<Code>ExpiredToken</Code><Token-0>SESSIONTOKEN</Token-0>\
            <StringToSign kind=\"v4\">SIGNED</StringToSign ><Token/>\
            <Resource>/k%3FX-Amz-Credential%3DAKIAIOSFODNN7EXAMPLE%2F2026</Resource>\
            <Hint>x%3DAKIAIOSFODNN7EXAMPLE%2F</Hint><Id>AKIAIOSFODNN7EXAMPLEXTRA</Id>";
        let shown = printable_excerpt(body.as_bytes(), 4096);
        for secret in ["SESSIONTOKEN", "SIGNED", "AKIAIOSFODNN7EXAMPLE%"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("ExpiredToken"), "{shown}");
        assert!(shown.contains("<Token/>"), "{shown}");
        assert!(
            shown.contains("AKIAIOSFODNN7EXAMPLEXTRA"),
            "a longer word is no key id: {shown}"
        );
    }

    #[test]
    fn invisible_format_characters_vanish() {
        let shown = printable_excerpt(
            "a\u{061C}b\u{200B}c\u{FEFF}d\u{2067}e\u{00AD}f".as_bytes(),
            100,
        );
        assert_eq!(shown, "abcdef");
    }

    #[test]
    fn origin_includes_the_port() {
        let a = Url::parse("http://h:80/x").unwrap();
        assert!(same_origin(&a, &Url::parse("http://h/y").unwrap()));
        assert!(!same_origin(&a, &Url::parse("http://h:81/x").unwrap()));
        assert!(!same_origin(&a, &Url::parse("https://h/x").unwrap()));
        assert!(!same_origin(&a, &Url::parse("http://g/x").unwrap()));
    }
}

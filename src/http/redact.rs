//! Texts fit to print: URLs without query string, fragment or credentials,
//! and servers' error bodies without credentials or control characters.
//!
//! Presigned URLs carry their signature in the query string, so it must never
//! reach an error message or a log line. Error bodies are the server's
//! words, and both careless and hostile: S3's `SignatureDoesNotMatch`
//! echoes the access key id and the string that was signed, an API's error
//! may echo the request (its `Authorization` header, its `access_token`, a
//! JSON body's `"refresh_token"`), and a hostile server can put terminal
//! escapes or line breaks into what lands in logs.

use std::ops::Range;

use url::Url;

use super::secrets::{Secrets, redact_values};

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

/// Parts of names (of JSON fields, form fields, query parameters and
/// headers, without regard to case) that mark their values as secret:
/// `access_token`, `refresh_token`, `WebIdentityToken`, `client_secret`,
/// `password`, `api_key`, `X-Api-Key`, `Authorization`, `Cookie`…
const SECRET_NAME_PARTS: [&str; 8] = [
    "token",
    "secret",
    "password",
    "passwd",
    "key",
    "authorization",
    "credential",
    "cookie",
];

/// The first `max` bytes (or fewer, at a character boundary) of an error
/// body as one line of printable text: the content of [`SECRET_ELEMENTS`],
/// URLs' query strings, the values of [`SECRET_PARAMETERS`], of every
/// field, parameter or header whose name holds one of
/// [`SECRET_NAME_PARTS`] (`"access_token": "…"`, `api_key=…`,
/// `Authorization: …`), the credentials after `Bearer`, and anything
/// shaped like an AWS access key id replaced by `…`; control characters
/// (terminal escapes, line breaks) become spaces, runs of white space one,
/// and invisible format characters (bidirectional controls, zero-width
/// ones) vanish.
pub fn printable_excerpt(body: &[u8], max: usize) -> String {
    printable_excerpt_without(body, &Secrets::new(), max)
}

/// As [`printable_excerpt`], with every value `known` holds hidden first
/// (see [`redact_values`]): the request's own values, in whatever words
/// the server echoed them, before the rules by name.
pub(crate) fn printable_excerpt_without(body: &[u8], known: &Secrets, max: usize) -> String {
    let text = String::from_utf8_lossy(body);
    let mut text = redact_values(&text, known).into_owned();
    for name in SECRET_ELEMENTS {
        text = hide_elements(&text, name);
    }
    text = hide_queries(&text);
    for name in SECRET_PARAMETERS {
        text = hide_parameter(&text, &format!("{name}="));
        text = hide_parameter(&text, &format!("{name}%3d"));
    }
    text = hide_json_fields(&text);
    text = hide_named_parameters(&text);
    text = hide_headers(&text);
    text = hide_bearer(&text);
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
/// `?…`, and its user information (`user:password@`) by `…@`.
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
        let url = match url.find("://") {
            Some(scheme_end) => {
                let authority = &url[scheme_end + 3..];
                let authority_len = authority.find(['/', '?', '#']).unwrap_or(authority.len());
                match authority[..authority_len].rfind('@') {
                    Some(at_sign) => {
                        out.push_str(&url[..scheme_end + 3]);
                        out.push('…');
                        &url[scheme_end + 3 + at_sign..]
                    }
                    None => url,
                }
            }
            None => url,
        };
        match url.find('?') {
            Some(q) if url.contains("://") || url.starts_with('@') => {
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

/// Whether a field, parameter or header called `name` holds a secret.
fn is_secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SECRET_NAME_PARTS.iter().any(|part| lower.contains(part))
}

/// Characters of a name: of a form field, a query parameter, a header.
fn is_name_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.')
}

/// Where a value standing alone (a parameter's, a token after `Bearer`)
/// that starts at `from` ends: at white space, a control character, a
/// quote, an angle bracket or `&`.
fn bare_value_end(text: &str, from: usize) -> usize {
    text[from..]
        .find(|c: char| c.is_whitespace() || c.is_control() || "&<>\"'`".contains(c))
        .map_or(text.len(), |i| from + i)
}

/// `text` with every value `next` finds replaced by `…`. From a position,
/// `next` gives where the next place it looked at ends (where to look on
/// from) and the secret value there, if any; `None` once there is no place
/// left.
fn hide_values(
    text: &str,
    mut next: impl FnMut(usize) -> Option<(usize, Option<Range<usize>>)>,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut shown = 0;
    let mut i = 0;
    while let Some((end, value)) = next(i) {
        i = end;
        let Some(value) = value.filter(|v| v.start >= shown && v.end > v.start) else {
            continue;
        };
        out.push_str(&text[shown..value.start]);
        out.push('…');
        shown = value.end;
        i = i.max(value.end);
    }
    out.push_str(&text[shown..]);
    out
}

/// Where the white space (spaces and tabs) that starts at `from` ends.
fn skip_blanks(text: &str, from: usize) -> usize {
    let rest = &text[from..];
    from + (rest.len() - rest.trim_start_matches([' ', '\t']).len())
}

/// The name of letters, digits, `_`, `-` and `.` that ends at `end`.
fn name_before(text: &str, end: usize) -> &str {
    let start = text[..end]
        .bytes()
        .rposition(|c| !is_name_char(c))
        .map_or(0, |p| p + 1);
    &text[start..end]
}

/// `text` with the value of every JSON (or Python-printed) field whose name
/// [`is_secret_name`] replaced by `…`: a string's content (up to its
/// closing quote, or the end of a body cut short), a list's, or a number's
/// or word's. An object is left as it is: its own fields are looked at.
fn hide_json_fields(text: &str) -> String {
    hide_values(text, |from| {
        let colon = from + text[from..].find(':')?;
        // The name: a quoted string just before the colon.
        let before = text[..colon].trim_end();
        let quote = before.bytes().last().filter(|q| matches!(q, b'"' | b'\''));
        let name = quote.and_then(|q| {
            let name_end = before.len() - 1;
            let name_start = before[..name_end].rfind(q as char)?;
            Some(&before[name_start + 1..name_end])
        });
        if !name.is_some_and(is_secret_name) {
            return Some((colon + 1, None));
        }
        let start = skip_blanks(text, colon + 1);
        let value = match text.as_bytes().get(start) {
            Some(&q @ (b'"' | b'\'')) => start + 1..string_end(text, start + 1, q),
            Some(b'[') => start + 1..text[start..].find(']').map_or(text.len(), |e| start + e),
            Some(b'{') | None => return Some((colon + 1, None)),
            Some(_) => {
                start
                    ..text[start..]
                        .find(|c: char| c.is_whitespace() || ",}]".contains(c))
                        .map_or(text.len(), |e| start + e)
            }
        };
        Some((colon + 1, Some(value)))
    })
}

/// Where the string whose content starts at `from`, quoted by `quote`,
/// ends: at its closing quote (one not escaped by a backslash), or the end
/// of `text`.
fn string_end(text: &str, from: usize, quote: u8) -> usize {
    let bytes = text.as_bytes();
    let mut j = from;
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j += 2,
            b if b == quote => return j,
            _ => j += 1,
        }
    }
    text.len()
}

/// `text` with the value of every `name=value` (or `name%3Dvalue`, encoded
/// once) whose name [`is_secret_name`] replaced by `…`: form fields
/// (`WebIdentityToken=…`), query parameters of URLs given without their
/// scheme (`/f?access_token=…`), settings.
fn hide_named_parameters(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    hide_values(text, |from| {
        let sign = from + lower[from..].find(['=', '%'])?;
        let len = match lower.as_bytes()[sign..].starts_with(b"%3d") {
            true => 3,
            false if lower.as_bytes()[sign] == b'=' => 1,
            false => return Some((sign + 1, None)),
        };
        let name = name_before(text, sign);
        let value_start = sign + len;
        let secret = !name.is_empty() && is_secret_name(name);
        let value = secret.then(|| value_start..bare_value_end(text, value_start));
        Some((value_start, value))
    })
}

/// `text` with the value of every header echoed as `Name: value` whose name
/// [`is_secret_name`] replaced by `…`, up to the end of its line (or a
/// quote or angle bracket): `Authorization: Basic …`, `X-Api-Key: …`. A
/// name in camel case (`NoSuchKey: the key does not exist`, `InvalidToken:
/// …`) is an error code, not a header, and keeps its message.
fn hide_headers(text: &str) -> String {
    hide_values(text, |from| {
        let colon = from + text[from..].find(':')?;
        let name = name_before(text, colon);
        let camel = name
            .as_bytes()
            .windows(2)
            .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
        if name.is_empty() || camel || !is_secret_name(name) {
            return Some((colon + 1, None));
        }
        let start = skip_blanks(text, colon + 1);
        let line_end = text[start..]
            .find(|c: char| c.is_control() || "<>\"'`".contains(c))
            .map_or(text.len(), |e| start + e);
        Some((
            colon + 1,
            Some(start..start + text[start..line_end].trim_end().len()),
        ))
    })
}

/// `text` with the credentials after every `Bearer` (as a word, then white
/// space) replaced by `…`: an `Authorization` header echoed in any shape.
fn hide_bearer(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    hide_values(text, |from| {
        let found = from + lower[from..].find("bearer")?;
        let end = found + "bearer".len();
        let word = found == 0 || !text.as_bytes()[found - 1].is_ascii_alphanumeric();
        let start = skip_blanks(text, end);
        let value = (word && start > end).then(|| start..bare_value_end(text, start));
        Some((end, value))
    })
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
        assert_eq!(
            printable_excerpt(b"at http://me:PW@h:81/p?q=1 and https://u@h/@x", 100),
            "at http://…@h:81/p?… and https://…@h/@x"
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

    /// Whether `shown` has none of `secrets`, and all of `kept`.
    fn check(shown: &str, secrets: &[&str], kept: &[&str]) {
        for secret in secrets {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        for word in kept {
            assert!(shown.contains(word), "{word} not in {shown}");
        }
    }

    #[test]
    fn an_echoed_authorization_header_loses_its_credentials() {
        let body = "request failed\r\nAuthorization: Bearer eyJhbGciOi.PAYLOAD.SIG1\r\n\
            X-Api-Key: KEY1\r\nProxy-Authorization: Basic dXNlcjpQVzE=\r\nAccept: */*\r\n\
            hint: send bearer TOKEN2 again; WWW-Authenticate: Bearer realm=\"api\"";
        let shown = printable_excerpt(body.as_bytes(), 4096);
        check(
            &shown,
            &["PAYLOAD", "SIG1", "KEY1", "dXNlcjpQVzE", "TOKEN2"],
            &[
                "request failed",
                "Authorization: …",
                "X-Api-Key: …",
                "Accept: */*",
            ],
        );
        assert!(shown.contains("bearer … again"), "{shown}");
    }

    #[test]
    fn json_fields_named_as_secrets_lose_their_values() {
        let body = r#"{"error":"invalid_grant","access_token": "AT1","refresh_token":"RT1",
            "id_token" : "IT1", "Token":"T\"1", "client_secret":"CS1","password":"PW1",
            "api_key":"AK1","apiKey":12345,"SecretAccessKey":"SAK1","tokens":["L1","L2"],
            "Credentials":{"SessionToken":"ST1","Expiration":"2026-12-01"},
            "message":"the token expired","scope":"read"}"#;
        let shown = printable_excerpt(body.as_bytes(), 4096);
        check(
            &shown,
            &[
                "AT1", "RT1", "IT1", "T\\\"1", "CS1", "PW1", "AK1", "12345", "SAK1", "L1", "L2",
                "ST1",
            ],
            &[
                "invalid_grant",
                "the token expired",
                "2026-12-01",
                "read",
                r#""access_token": "…""#,
            ],
        );
        // Printed by Python, and cut short inside a value.
        let shown = printable_excerpt(b"{'password': 'PW2', 'user': 'me'} {\"token\":\"CUT", 100);
        check(&shown, &["PW2", "CUT"], &["'user': 'me'"]);
    }

    #[test]
    fn form_fields_and_parameters_named_as_secrets_lose_their_values() {
        let body = "Action=AssumeRoleWithWebIdentity&WebIdentityToken=WIT1&RoleArn=arn:aws:iam::1:role/r \
            sent /f?access_token=AT2&api_key=AK2&id=7 and grant_type=refresh_token&refresh_token=RT2 \
            or access_token%3DAT3%26x and client_secret=CS2";
        let shown = printable_excerpt(body.as_bytes(), 4096);
        check(
            &shown,
            &["WIT1", "AT2", "AK2", "RT2", "AT3", "CS2"],
            &[
                "AssumeRoleWithWebIdentity",
                "RoleArn=arn:aws:iam::1:role/r",
                "id=7",
                "grant_type=refresh_token",
            ],
        );
    }

    #[test]
    fn error_codes_and_messages_that_name_secrets_are_kept() {
        let body = "<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message>\
            <Key>data/f.nwb</Key></Error> NoSuchKey: The specified key does not exist. \
            InvalidToken: The provided token is malformed. keyword search";
        let shown = printable_excerpt(body.as_bytes(), 4096);
        check(
            &shown,
            &[],
            &[
                "<Key>data/f.nwb</Key>",
                "NoSuchKey: The specified key does not exist.",
                "InvalidToken: The provided token is malformed.",
            ],
        );
        // Names and values in other scripts are cut at characters.
        let shown = printable_excerpt("é key=ü€ token: 日本 ok".as_bytes(), 4096);
        assert_eq!(shown, "é key=… token: …");
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
    fn the_request_s_values_go_before_the_cut_and_the_name_rules() {
        let mut known = Secrets::new();
        known.add("VALUE-0123456789");
        // Cut inside the value: none of it shows, not even its start.
        let body = format!("{}VALUE-0123456789 and more", "x".repeat(95));
        let shown = printable_excerpt_without(body.as_bytes(), &known, 102);
        assert_eq!(shown, format!("{}… and", "x".repeat(95)));
        // The name rules still run after it.
        let body = b"said VALUE-0123456789 with api_key=OTHER and [2J";
        let shown = printable_excerpt_without(body, &known, 100);
        assert_eq!(shown, "said … with api_key=… and [2J");
        assert!(printable_excerpt(body, 100).contains("VALUE-0123456789"));
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

//! Redaction by value: the exact values a request carried (its URL's query
//! values and user information, the caller's header values, S3's keys),
//! hidden wherever a server's text repeats them.
//!
//! The name rules of [`redact`](super::redact) hide what stands after a
//! name they know (`token=`, `Authorization:`); a server that echoes the
//! request in its own words (`GET /f?hmac=…`, `Token … is not valid`), or
//! under a name no rule knows, slips past them. The values themselves are
//! known to the crate, so they are looked for as they are, percent-encoded
//! and in base64, before the name rules run.
//!
//! Values shorter than [`MIN_SECRET_LEN`] bytes are not looked for: `id=1`
//! or `page=2` would blank out every `1` or `2` of an error message, and so
//! short a value keeps nothing secret anyway. The work is bounded whatever
//! a URL or a server says: at most [`MAX_VALUES`] values of at most
//! [`MAX_VALUE_LEN`] bytes, [`MAX_TOTAL_LEN`] in all, each looked for in a
//! few forms with a linear-time substring search.

use std::borrow::Cow;
use std::fmt;

use url::Url;

/// The shortest value looked for, in bytes. Shorter ones (`id=1`, a
/// `Bearer` or `Basic` scheme name, a username like `admin`) are too likely
/// to stand for something else in a server's text.
pub(crate) const MIN_SECRET_LEN: usize = 8;

/// The most values looked for: a URL of thousands of query parameters (one
/// a redirect gave, say) costs no more than this many.
pub(crate) const MAX_VALUES: usize = 64;

/// The longest value looked for, in bytes: AWS's session tokens, the
/// longest credentials the crate sends, are at most this long. A longer
/// value is looked for by its first this many bytes.
pub(crate) const MAX_VALUE_LEN: usize = 16 * 1024;

/// The most bytes of values looked for in all.
pub(crate) const MAX_TOTAL_LEN: usize = 64 * 1024;

/// What takes a hidden value's place, as in the name rules.
const HIDDEN: char = '…';

/// One form of a value as it may stand in a text.
#[derive(Clone, PartialEq, Eq)]
struct Form {
    text: String,
    /// A base64 form: the `=` padding after it is hidden with it.
    padded: bool,
}

/// The values a request carried that no error text may show: built from a
/// transport's URL, the caller's headers and a service's keys, then given
/// to [`redact_values`]. Its `Debug` shows how many values it holds, never
/// one of them.
#[derive(Clone, Default)]
pub(crate) struct Secrets {
    /// The values taken, as given (to tell a value given twice).
    values: Vec<String>,
    /// Their bytes in all.
    total: usize,
    /// Every form of every value, each once.
    forms: Vec<Form>,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secrets")
            .field("values", &self.values.len())
            .finish()
    }
}

impl Secrets {
    /// No values: text passes through [`redact_values`] as it is.
    pub fn new() -> Secrets {
        Secrets::default()
    }

    /// Whether no value is looked for.
    pub fn is_empty(&self) -> bool {
        self.forms.is_empty()
    }

    /// Looks for `value` too, unless it is shorter than [`MIN_SECRET_LEN`],
    /// known already, or the bounds are reached; a value longer than
    /// [`MAX_VALUE_LEN`] is looked for by its start.
    pub fn add(&mut self, value: &str) {
        if value.len() < MIN_SECRET_LEN || self.values.len() >= MAX_VALUES {
            return;
        }
        let cut = cut_at_char(value, MAX_VALUE_LEN);
        let cut_short = cut < value.len();
        let value = &value[..cut];
        if self.total + value.len() > MAX_TOTAL_LEN || self.values.iter().any(|v| v == value) {
            return;
        }
        self.total += value.len();
        self.values.push(value.to_owned());
        self.push_form(value.to_owned(), false);
        for (lower, plus) in [(false, false), (true, false), (false, true), (true, true)] {
            self.push_form(percent_encoded(value, lower, plus), false);
        }
        // As a JSON string escapes it: PHP's json_encode writes `/` as
        // `\/`, .NET's System.Text.Json writes `+` as `\u002B` (a base64
        // token echoed in a JSON error message).
        self.push_form(value.replace('/', "\\/"), false);
        self.push_form(value.replace('+', "\\u002B"), false);
        self.push_form(value.replace('+', "\\u002b"), false);
        // The base64 of a value cut short ends at its last whole group of
        // three bytes: the characters after it depend on what was cut.
        let whole = match cut_short {
            true => value.len() - value.len() % 3,
            false => value.len(),
        };
        let bytes = &value.as_bytes()[..whole];
        self.push_form(base64(bytes, STANDARD), true);
        self.push_form(base64(bytes, URL_SAFE), true);
    }

    /// Looks for `text` too, unless it is as short as a value too short to
    /// look for, or looked for already (a value without a character to
    /// encode is its own percent-encoded form).
    fn push_form(&mut self, text: String, padded: bool) {
        let form = Form { text, padded };
        if form.text.len() >= MIN_SECRET_LEN && !self.forms.contains(&form) {
            self.forms.push(form);
        }
    }

    /// Looks for what `url` sends: its username and password (and the two
    /// as `user:password`, which Basic authentication sends in base64),
    /// and the value of every query parameter, decoded and as written.
    pub fn add_url(&mut self, url: &Url) {
        let decoded = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        let (user, password) = (url.username(), url.password());
        if let Some(password) = password {
            self.add(&format!("{}:{}", decoded(user), decoded(password)));
            self.add(&decoded(password));
            self.add(password);
        }
        self.add(&decoded(user));
        self.add(user);
        let Some(query) = url.query() else {
            return;
        };
        for pair in query.split('&').take(MAX_VALUES) {
            let Some((_, written)) = pair.split_once('=') else {
                continue;
            };
            self.add(written);
            self.add(&decoded(written));
            let plus_as_space = written.replace('+', " ");
            self.add(&decoded(&plus_as_space));
        }
    }

    /// Looks for a header value the caller gave: the whole of it, and each
    /// of its words (split at white space, `,` and `;`, and a `name=value`
    /// word's value), but a first word followed by others, which names a
    /// scheme (`Bearer`, `Basic`, `token`).
    pub fn add_header_value(&mut self, value: &str) {
        self.add(value.trim());
        let mut words = value.split_whitespace().peekable();
        let first = words.next();
        let scheme = first.filter(|w| {
            words.peek().is_some() && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
        let rest = first.into_iter().filter(|_| scheme.is_none()).chain(words);
        for word in rest.flat_map(|w| w.split([',', ';'])) {
            self.add(word);
            if let Some((_, after)) = word.split_once('=') {
                self.add(after);
            }
        }
    }

    /// Looks for every value `other` looks for too, within the bounds.
    pub fn extend(&mut self, other: &Secrets) {
        for value in &other.values {
            self.add(value);
        }
    }
}

/// `text` with every occurrence of every form of every value of `secrets`
/// (as it is, percent-encoded with upper- or lower-case hex digits, with
/// `+` or `%20` for a space, in standard or URL-safe base64 with or
/// without its padding) replaced by `…`; occurrences that overlap or touch
/// become one `…`. Borrowed when nothing was found.
pub(crate) fn redact_values<'a>(text: &'a str, secrets: &Secrets) -> Cow<'a, str> {
    if secrets.is_empty() || text.len() < MIN_SECRET_LEN {
        return Cow::Borrowed(text);
    }
    // Which bytes are hidden: each form's occurrences (which do not overlap
    // one another) mark at most the text's length, so the work is linear
    // in the text for each form.
    let mut hidden: Vec<bool> = Vec::new();
    for form in &secrets.forms {
        for (at, found) in text.match_indices(form.text.as_str()) {
            let mut end = at + found.len();
            if form.padded {
                end += text.as_bytes()[end..]
                    .iter()
                    .take(2)
                    .take_while(|&&b| b == b'=')
                    .count();
            }
            if hidden.is_empty() {
                hidden = vec![false; text.len()];
            }
            hidden[at..end].fill(true);
        }
    }
    if hidden.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut start = 0;
    while start < text.len() {
        let is_hidden = hidden[start];
        let len = hidden[start..]
            .iter()
            .take_while(|&&h| h == is_hidden)
            .count();
        let end = start + len;
        // Runs begin and end where a value's occurrence does (or after
        // ASCII padding): at character boundaries.
        match (is_hidden, text.get(start..end)) {
            (true, _) => out.push(HIDDEN),
            (false, Some(shown)) => out.push_str(shown),
            (false, None) => out.push(HIDDEN),
        }
        start = end;
    }
    Cow::Owned(out)
}

/// The largest character boundary of `s` at or below `max`.
fn cut_at_char(s: &str, max: usize) -> usize {
    let mut cut = s.len().min(max);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    cut
}

/// `value` with every byte but RFC 3986's unreserved ones (letters, digits,
/// `-`, `.`, `_`, `~`) percent-encoded, in upper- or `lower`-case hex, a
/// space as `+` where `plus` (form encoding).
fn percent_encoded(value: &str, lower: bool, plus: bool) -> String {
    let digits: &[u8; 16] = if lower {
        b"0123456789abcdef"
    } else {
        b"0123456789ABCDEF"
    };
    let mut out = String::with_capacity(value.len());
    for &b in value.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else if b == b' ' && plus {
            out.push('+');
        } else {
            out.push('%');
            out.push(digits[usize::from(b >> 4)] as char);
            out.push(digits[usize::from(b & 15)] as char);
        }
    }
    out
}

/// Standard base64's alphabet.
const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
/// URL-safe base64's alphabet.
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// `bytes` in base64 of `alphabet`, without padding: padded or not, a text
/// holds this form ([`redact_values`] hides the padding after it).
fn base64(bytes: &[u8], alphabet: &[u8; 64]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let b = [
            group[0],
            group.get(1).copied().unwrap_or(0),
            group.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=group.len() {
            out.push(alphabet[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(values: &[&str]) -> Secrets {
        let mut s = Secrets::new();
        for v in values {
            s.add(v);
        }
        s
    }

    #[test]
    fn base64_agrees_with_the_standard() {
        assert_eq!(base64(b"", STANDARD), "");
        assert_eq!(base64(b"f", STANDARD), "Zg");
        assert_eq!(base64(b"fo", STANDARD), "Zm8");
        assert_eq!(base64(b"foo", STANDARD), "Zm9v");
        assert_eq!(base64(b"user:pass", STANDARD), "dXNlcjpwYXNz");
        assert_eq!(base64(b"\xfb\xff\xfe", STANDARD), "+//+");
        assert_eq!(base64(b"\xfb\xff\xfe", URL_SAFE), "-__-");
    }

    #[test]
    fn a_value_is_hidden_as_it_is() {
        let s = known(&["DEADBEEF1234"]);
        assert_eq!(
            redact_values("GET /e1?hmac=DEADBEEF1234 HTTP/1.1", &s),
            "GET /e1?hmac=… HTTP/1.1"
        );
        assert_eq!(
            redact_values("DEADBEEF1234DEADBEEF1234 and DEADBEEF123", &s),
            "… and DEADBEEF123",
            "repeated, and a prefix kept"
        );
        assert!(matches!(
            redact_values("nothing here at all", &s),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn percent_encoded_forms_are_hidden_in_either_case_and_with_plus() {
        let s = known(&["a/b c+d=é"]);
        for text in [
            "x a%2Fb%20c%2Bd%3D%C3%A9 y",
            "x a%2fb%20c%2bd%3d%c3%a9 y",
            "x a%2Fb+c%2Bd%3D%C3%A9 y",
            "x a%2fb+c%2bd%3d%c3%a9 y",
            "x a/b c+d=é y",
        ] {
            assert_eq!(redact_values(text, &s), "x … y", "{text}");
        }
    }

    #[test]
    fn base64_forms_are_hidden_with_or_without_padding() {
        // "user:hunter2secret" and a value whose base64 differs between
        // the standard and URL-safe alphabets.
        let s = known(&["user:hunter2secret", ">>>???ab"]);
        for text in [
            "Basic dXNlcjpodW50ZXIyc2VjcmV0 !",
            "Basic dXNlcjpodW50ZXIyc2VjcmV0= !",
        ] {
            assert_eq!(redact_values(text, &s), "Basic … !", "{text}");
        }
        let tricky = b">>>???ab";
        let std = base64(tricky, STANDARD);
        let url = base64(tricky, URL_SAFE);
        assert_ne!(std, url);
        for text in [
            format!("a {std} b"),
            format!("a {url} b"),
            format!("a {std}== b"),
            format!("a {url}= b"),
        ] {
            assert_eq!(redact_values(&text, &s), "a … b", "{text}");
        }
    }

    #[test]
    fn json_escaped_forms_are_hidden() {
        // A base64 token as PHP's json_encode (`\/`) and .NET's
        // System.Text.Json (`\u002B`) echo it in an error message.
        let s = known(&["AbCd/EfGh+IjKl"]);
        for text in [
            r#"{"message":"invalid token AbCd\/EfGh+IjKl"}"#,
            r#"{"message":"invalid token AbCd/EfGh\u002BIjKl"}"#,
            r#"{"message":"invalid token AbCd/EfGh\u002bIjKl"}"#,
        ] {
            assert_eq!(
                redact_values(text, &s),
                r#"{"message":"invalid token …"}"#,
                "{text}"
            );
        }
    }

    #[test]
    fn short_values_are_not_looked_for() {
        let mut s = known(&["1", "admin", "Bearer", "seven77"]);
        assert!(s.is_empty());
        let text = "id=1 admin Bearer seven77";
        assert_eq!(redact_values(text, &s), text);
        s.add("eight888");
        assert_eq!(redact_values("id=1 eight888", &s), "id=1 …");
        assert_eq!(MIN_SECRET_LEN, 8);
    }

    #[test]
    fn overlapping_and_touching_values_become_one_mark() {
        let s = known(&["ABCDEFGH12", "EFGH1234XY", "ZZZZZZZZ"]);
        assert_eq!(redact_values("<ABCDEFGH1234XY>", &s), "<…>");
        assert_eq!(redact_values("<ABCDEFGH12ZZZZZZZZ>", &s), "<…>");
        // One value inside another.
        let s = known(&["SECRETSECRET99", "SECRET99"]);
        assert_eq!(redact_values("a SECRET99 b SECRETSECRET99", &s), "a … b …");
    }

    #[test]
    fn non_ascii_text_around_values_stays_whole() {
        let s = known(&["geheimnis-wert"]);
        assert_eq!(redact_values("é日geheimnis-wert本€", &s), "é日…本€");
    }

    #[test]
    fn a_url_gives_its_query_values_and_user_information() {
        let url = Url::parse(
            "https://user:hunter2secret@h.example/e1?hmac=DEADBEEF1234&id=1&q=two+words%21",
        )
        .unwrap();
        let mut s = Secrets::new();
        s.add_url(&url);
        let text = "hunter2secret dXNlcjpodW50ZXIyc2VjcmV0 hmac=DEADBEEF1234 \
                    id=1 two words! two+words%21 user";
        assert_eq!(redact_values(text, &s), "… … hmac=… id=1 … … user");
    }

    #[test]
    fn a_header_value_is_hidden_whole_and_by_its_words() {
        let mut s = Secrets::new();
        s.add_header_value("token ghp_SECRETVALUE12345");
        s.add_header_value("session=COOKIEVALUE1; theme=dark-mode-on");
        let text = "Token ghp_SECRETVALUE12345 is not valid; token ghp_SECRETVALUE12345; \
                    got COOKIEVALUE1 and dark-mode-on; token ghp_…";
        assert_eq!(
            redact_values(text, &s),
            "Token … is not valid; …; got … and …; token ghp_…"
        );
    }

    #[test]
    fn the_bounds_hold_for_hostile_values() {
        let mut s = Secrets::new();
        for i in 0..10_000 {
            s.add(&format!("value-{i:08}"));
        }
        assert_eq!(s.values.len(), MAX_VALUES);
        let mut s = Secrets::new();
        let long = "x".repeat(1 << 20);
        s.add(&long);
        assert_eq!(s.total, MAX_VALUE_LEN);
        for _ in 0..10 {
            s.add(&"y".repeat(MAX_VALUE_LEN));
        }
        assert!(s.total <= MAX_TOTAL_LEN);
        // A query of a hundred thousand parameters.
        let query: String = (0..100_000).map(|i| format!("p{i}=v{i:010}&")).collect();
        let url = Url::parse(&format!("https://h/?{query}")).unwrap();
        let mut s = Secrets::new();
        s.add_url(&url);
        assert!(s.values.len() <= MAX_VALUES);
    }

    #[test]
    fn a_long_body_costs_linear_work() {
        // Values that match everywhere in a body of one repeated letter,
        // and values that almost match everywhere.
        let mut s = Secrets::new();
        for n in 0..MAX_VALUES {
            let value = format!("{}{}", "a".repeat(MIN_SECRET_LEN + n), "b");
            s.add(&value);
        }
        let body = "a".repeat(64 * 1024);
        let started = std::time::Instant::now();
        assert_eq!(redact_values(&body, &s), body);
        let mut s = Secrets::new();
        for n in 0..MAX_VALUES {
            s.add(&"a".repeat(MIN_SECRET_LEN + n));
        }
        assert_eq!(redact_values(&body, &s), "…");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_value_cut_short_is_hidden_by_its_start() {
        let mut s = Secrets::new();
        let long: String = (0..MAX_VALUE_LEN + 100)
            .map(|i| (b'a' + (i % 26) as u8) as char)
            .collect();
        s.add(&long);
        let shown = redact_values(&format!("<{long}>"), &s).into_owned();
        assert!(shown.starts_with("<…"), "{shown}");
        assert!(shown.len() < 200, "{}", shown.len());
        let b64 = base64(long.as_bytes(), STANDARD);
        let shown = redact_values(&format!("<{b64}>"), &s).into_owned();
        assert!(shown.starts_with("<…"), "{shown}");
        assert!(shown.len() < 200, "{}", shown.len());
    }

    #[test]
    fn debug_names_no_value() {
        let s = known(&["DEADBEEF1234"]);
        let shown = format!("{s:?}");
        assert!(!shown.contains("DEADBEEF"), "{shown}");
        assert_eq!(shown, "Secrets { values: 1 }");
    }
}

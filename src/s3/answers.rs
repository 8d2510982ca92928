//! What a credential service's answer says (STS's XML, the container and
//! instance metadata services' JSON), and when temporary keys are due for
//! renewal (the `keys` module renews them): pure functions.

use std::time::{Duration, SystemTime};

use aws_smithy_types::DateTime;
use aws_smithy_types::date_time::Format;

use super::credentials::{Credentials, credentials_error};
use crate::error::Result;
use crate::http::redact::printable_excerpt_without;
use crate::http::secrets::Secrets;

/// The longest before expiry that temporary keys are renewed: SDKs renew
/// 5 to 15 minutes ahead.
const RENEW_AHEAD: Duration = Duration::from_secs(5 * 60);

/// Whether keys loaded at `loaded` and expiring at `expires` are to be
/// renewed at `now`: within [`RENEW_AHEAD`] of their expiry, or of half their
/// lifetime for keys that live less than ten minutes, so that a request
/// signed with them cannot arrive after they expired.
pub(crate) fn due_for_renewal(
    loaded: SystemTime,
    expires: Option<SystemTime>,
    now: SystemTime,
) -> bool {
    let Some(expires) = expires else {
        return false;
    };
    let lifetime = expires.duration_since(loaded).unwrap_or_default();
    let ahead = RENEW_AHEAD.min(lifetime / 2);
    now.checked_add(ahead).is_none_or(|t| t >= expires)
}

/// The text of the first `<name>` element of an XML answer, its entities
/// decoded: enough for STS's fixed answers, which name each field once.
fn xml_text<'a>(xml: &'a str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = xml.find(&open)? + open.len();
    let len = xml[start..].find(&close)?;
    let raw: &'a str = &xml[start..start + len];
    Some(
        raw.trim()
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
}

/// An expiry time as the services write it (`2026-12-02T15:04:05Z`).
fn expiry(text: &str) -> Option<SystemTime> {
    let t = DateTime::from_str(text.trim(), Format::DateTime).ok()?;
    SystemTime::try_from(t).ok()
}

/// The credentials in STS's answer to `AssumeRoleWithWebIdentity`.
pub(crate) fn from_sts_answer(xml: &str) -> Result<Credentials> {
    // No excerpt of the answer: it holds the keys.
    let field = |name: &str| {
        xml_text(xml, name).ok_or_else(|| credentials_error(format!("STS's answer has no {name}")))
    };
    let creds = Credentials {
        key_id: field("AccessKeyId")?,
        secret: field("SecretAccessKey")?,
        token: Some(field("SessionToken")?),
        expires: Some(expiry(&field("Expiration")?).ok_or_else(|| {
            credentials_error("STS's answer has an Expiration that is not a date")
        })?),
    };
    creds.checked("STS")
}

/// What an STS error answer says (`<Code>`: `<Message>`), fit to print,
/// without the values `sent` holds (the web identity token: STS may quote
/// it).
pub(crate) fn sts_refusal(xml: &str, sent: &Secrets) -> String {
    let shown = |text: &str, max| printable_excerpt_without(text.as_bytes(), sent, max);
    match (xml_text(xml, "Code"), xml_text(xml, "Message")) {
        (Some(code), Some(message)) => shown(&format!("{code}: {message}"), 300),
        (Some(code), None) => shown(&code, 100),
        _ => shown(xml, 200),
    }
}

/// The credentials in a JSON answer of the container credentials service
/// or the instance metadata service (`AccessKeyId`, `SecretAccessKey`,
/// `Token`, `Expiration`); an error names the service's code, without the
/// values `sent` holds (the token the request carried).
pub(crate) fn from_json_answer(json: &str, from: &str, sent: &Secrets) -> Result<Credentials> {
    let value: serde_json::Value = serde_json::from_str(json).map_err(|_| {
        credentials_error(format!("{from} answered with something other than JSON"))
    })?;
    if let Some(code) = value.get("Code").and_then(|c| c.as_str()) {
        if code != "Success" {
            return Err(credentials_error(format!(
                "{from} answered {}",
                printable_excerpt_without(code.as_bytes(), sent, 100)
            )));
        }
    }
    let text = |name: &str| value.get(name).and_then(|v| v.as_str()).map(str::to_owned);
    let missing = |name: &str| credentials_error(format!("{from}'s answer has no {name}"));
    let expires = match text("Expiration") {
        None => None,
        Some(t) => Some(expiry(&t).ok_or_else(|| {
            credentials_error(format!(
                "{from}'s answer has an Expiration that is not a date"
            ))
        })?),
    };
    Credentials {
        key_id: text("AccessKeyId").ok_or_else(|| missing("AccessKeyId"))?,
        secret: text("SecretAccessKey").ok_or_else(|| missing("SecretAccessKey"))?,
        token: text("Token"),
        expires,
    }
    .checked(from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    const STS_ANSWER: &str = "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\
        <AssumeRoleWithWebIdentityResult><Credentials>\
        <AccessKeyId>ASIAEXAMPLE</AccessKeyId><SecretAccessKey>s/e&amp;cret</SecretAccessKey>\
        <SessionToken>tok+en==</SessionToken><Expiration>2026-12-02T15:04:05Z</Expiration>\
        </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";

    #[test]
    fn an_sts_answer_gives_temporary_keys() {
        let c = from_sts_answer(STS_ANSWER).unwrap();
        assert_eq!(c.key_id, "ASIAEXAMPLE");
        assert_eq!(c.secret, "s/e&cret");
        assert_eq!(c.token.as_deref(), Some("tok+en=="));
        let at = c
            .expires
            .unwrap()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap();
        assert_eq!(at.as_secs(), 1_796_223_845);
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("ASIA") && !shown.contains("e&cret") && !shown.contains("tok+en"),
            "{shown}"
        );
        let e = from_sts_answer("<x><AccessKeyId>A</AccessKeyId></x>").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Credentials);
        let no_expiry = STS_ANSWER.replace("<Expiration>2026-12-02T15:04:05Z</Expiration>", "");
        let e = from_sts_answer(&no_expiry).unwrap_err().to_string();
        assert!(
            e.contains("Expiration") && !e.contains("cret") && !e.contains("tok+en"),
            "{e}"
        );
        let refusal = "<ErrorResponse><Error><Code>AccessDenied</Code><Message>Not authorized</Message></Error></ErrorResponse>";
        assert_eq!(
            sts_refusal(refusal, &Secrets::new()),
            "AccessDenied: Not authorized"
        );
    }

    #[test]
    fn json_answers_give_keys_or_say_why_not() {
        let ok = r#"{"Code":"Success","AccessKeyId":"ASIA1","SecretAccessKey":"s","Token":"t","Expiration":"2026-12-02T15:04:05Z"}"#;
        let c = from_json_answer(ok, "IMDS", &Secrets::new()).unwrap();
        assert_eq!(
            (c.key_id.as_str(), c.token.as_deref()),
            ("ASIA1", Some("t"))
        );
        assert!(c.expires.is_some());
        for bad in [
            "not json",
            r#"{"Code":"AssumeRoleUnauthorizedAccess"}"#,
            r#"{"AccessKeyId":"A"}"#,
            r#"{"AccessKeyId":"A","SecretAccessKey":"s","Expiration":"soon"}"#,
            r#"{"AccessKeyId":"A B","SecretAccessKey":"s"}"#,
        ] {
            let e = from_json_answer(bad, "IMDS", &Secrets::new()).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Credentials, "{bad}");
        }
    }

    #[test]
    fn a_refusal_quoting_the_token_sent_shows_none_of_it() {
        let mut sent = Secrets::new();
        sent.add("eyJhbGciOiJSUzI1NiJ9.PAYLOAD.SIG");
        let refusal = "<ErrorResponse><Error><Code>InvalidIdentityToken</Code>\
            <Message>Token eyJhbGciOiJSUzI1NiJ9.PAYLOAD.SIG is expired</Message></Error></ErrorResponse>";
        assert_eq!(
            sts_refusal(refusal, &sent),
            "InvalidIdentityToken: Token … is expired"
        );
        let e = from_json_answer(
            r#"{"Code":"bad token eyJhbGciOiJSUzI1NiJ9.PAYLOAD.SIG"}"#,
            "the container credentials service",
            &sent,
        )
        .unwrap_err()
        .to_string();
        assert!(!e.contains("PAYLOAD") && e.contains("bad token …"), "{e}");
    }

    #[test]
    fn keys_are_renewed_ahead_of_their_expiry() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let hour = Some(t0 + Duration::from_secs(3600));
        let at = |s| t0 + Duration::from_secs(s);
        assert!(!due_for_renewal(t0, None, at(1 << 40)));
        assert!(!due_for_renewal(t0, hour, at(3600 - 301)));
        assert!(due_for_renewal(t0, hour, at(3600 - 300)));
        // Keys that live 4 s are renewed after 2.
        let short = Some(t0 + Duration::from_secs(4));
        assert!(!due_for_renewal(t0, short, at(1)));
        assert!(due_for_renewal(t0, short, at(2)));
        assert!(due_for_renewal(t0, Some(t0), t0));
    }
}

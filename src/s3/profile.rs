//! AWS's shared configuration files, `~/.aws/credentials` and
//! `~/.aws/config`: one profile's settings read from their text. Pure.
//!
//! The credentials file names a profile `[name]`, the config file
//! `[profile name]` (or `[default]`); a setting in the credentials file wins
//! over the same one in the config file, as in the AWS SDKs.

use std::collections::BTreeMap;

/// One profile's settings, names in lowercase.
pub(crate) type Profile = BTreeMap<String, String>;

/// Which of the two files a text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileKind {
    Credentials,
    Config,
}

/// The settings of profile `name` in the text of one file (`None` if the
/// file has no such section).
pub(crate) fn section(text: &str, kind: FileKind, name: &str) -> Option<Profile> {
    let mut found = None::<Profile>;
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            let header = header.split(']').next().unwrap_or_default().trim();
            inside = names(header, kind) == Some(name);
            if inside && found.is_none() {
                found = Some(Profile::new());
            }
            continue;
        }
        if !inside {
            continue;
        }
        // An indented line continues a nested setting (`s3 =` then
        // `  addressing_style = path`); only top-level ones are read.
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if let Some(settings) = found.as_mut() {
            let value = value.split(" #").next().unwrap_or_default().trim();
            settings.insert(key.trim().to_ascii_lowercase(), value.to_owned());
        }
    }
    found
}

/// The profile a section header names, if it names one in this kind of file.
fn names(header: &str, kind: FileKind) -> Option<&str> {
    match kind {
        FileKind::Credentials => Some(header),
        FileKind::Config if header == "default" => Some("default"),
        FileKind::Config => header
            .strip_prefix("profile")
            .and_then(|rest| rest.starts_with(char::is_whitespace).then(|| rest.trim())),
    }
}

/// Profile `name` from both files: the credentials file's settings over
/// the config file's. `None` if neither has it.
pub(crate) fn merged(
    credentials: Option<&str>,
    config: Option<&str>,
    name: &str,
) -> Option<Profile> {
    let from_config = config.and_then(|t| section(t, FileKind::Config, name));
    let from_credentials = credentials.and_then(|t| section(t, FileKind::Credentials, name));
    match (from_config, from_credentials) {
        (None, None) => None,
        (a, b) => {
            let mut profile = a.unwrap_or_default();
            profile.extend(b.unwrap_or_default());
            Some(profile)
        }
    }
}

/// Settings of a profile that ask for a way of getting credentials this
/// crate does not have, with what to do instead.
pub(crate) const UNSUPPORTED: [(&str, &str); 5] = [
    ("role_arn", "assuming a role from a profile"),
    ("credential_process", "running a credential process"),
    ("sso_session", "AWS IAM Identity Center (SSO)"),
    ("sso_start_url", "AWS IAM Identity Center (SSO)"),
    (
        "web_identity_token_file",
        "a web identity token named in a profile (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN in the environment work)",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    const CREDENTIALS: &str = "\
# keys
[default]
aws_access_key_id = AKIADEFAULT
aws_secret_access_key=secretdefault

[lab]
aws_access_key_id = AKIALAB
aws_secret_access_key = secretlab
aws_session_token = tokenlab
";

    const CONFIG: &str = "\
[default]
region = us-west-2

[profile lab]
region = eu-central-1
aws_access_key_id = AKIAFROMCONFIG
s3 =
  addressing_style = path

[profilex]
region = nowhere
";

    #[test]
    fn a_profile_is_both_files_with_the_credentials_file_winning() {
        let lab = merged(Some(CREDENTIALS), Some(CONFIG), "lab").unwrap();
        assert_eq!(lab["aws_access_key_id"], "AKIALAB");
        assert_eq!(lab["aws_session_token"], "tokenlab");
        assert_eq!(lab["region"], "eu-central-1");
        let default = merged(Some(CREDENTIALS), Some(CONFIG), "default").unwrap();
        assert_eq!(default["aws_secret_access_key"], "secretdefault");
        assert_eq!(default["region"], "us-west-2");
        assert!(merged(Some(CREDENTIALS), Some(CONFIG), "x").is_none());
        assert!(
            merged(None, Some(CONFIG), "profilex").is_none(),
            "[profilex] is no profile"
        );
        assert!(merged(None, None, "default").is_none());
    }

    #[test]
    fn the_config_file_needs_the_profile_prefix() {
        assert!(section("[lab]\nregion=x\n", FileKind::Config, "lab").is_none());
        let p = section(
            "[profile   lab ]\nregion = x # comment\n",
            FileKind::Config,
            "lab",
        )
        .unwrap();
        assert_eq!(p["region"], "x");
    }
}

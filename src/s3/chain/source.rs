//! Where a set of keys comes from: what the chain found, kept to ask it
//! again at each renewal (the asking is the chain's [`load`](super::load)).

use std::path::PathBuf;

use url::Url;

use super::super::credentials::Credentials;
use crate::http::redact::redact;

/// How keys are got. `Debug` shows its name only (it may hold keys or a
/// token).
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// Keys known already: given to the builder, in the environment or a
    /// profile (named by `from`).
    Given { keys: Credentials, from: String },
    /// STS's `AssumeRoleWithWebIdentity` for the token in a file.
    WebIdentity {
        token_file: PathBuf,
        role_arn: String,
        session_name: String,
        sts: Url,
    },
    /// The container credentials service (ECS, EKS Pod Identity).
    Container {
        url: Url,
        authorization: Option<String>,
        authorization_file: Option<PathBuf>,
    },
    /// EC2's instance metadata service, IMDSv2.
    InstanceMetadata { endpoint: Url },
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl Source {
    /// What the source is called in messages.
    pub fn name(&self) -> String {
        match self {
            Source::Given { from, .. } => from.clone(),
            Source::WebIdentity { .. } => {
                "a web identity token (AWS_WEB_IDENTITY_TOKEN_FILE, via STS)".into()
            }
            Source::Container { url, .. } => {
                format!("the container credentials service at {}", redact(url))
            }
            Source::InstanceMetadata { .. } => "EC2 instance metadata (IMDSv2)".into(),
        }
    }
}

//! Keys given outright, the chain's first links: to the builder, in the
//! environment (`AWS_ACCESS_KEY_ID`…), or in a profile of the shared files
//! (`~/.aws/credentials`, `~/.aws/config`).

use std::path::PathBuf;
use std::sync::Arc;

use super::super::credentials::{Credentials, credentials_error};
use super::super::keys::Keys;
use super::super::profile::{self, Profile};
use super::{Ask, Env, Source, read_small};
use crate::error::Result;

/// The profile the chain reads: its name, whether one was named (by option
/// or `AWS_PROFILE`), and its settings if it exists.
pub(super) struct ProfileAsked {
    name: String,
    named: bool,
    profile: Option<Profile>,
}

impl ProfileAsked {
    /// The profile's `region`, which the bucket's region falls back on.
    pub(super) fn region(&self) -> Option<String> {
        self.profile.as_ref().and_then(|p| p.get("region").cloned())
    }
}

/// The profile asked for, read. Without a search for keys, the profile
/// only may give a region: a profile that cannot be read gives none.
pub(super) fn profile_asked(ask: &Ask<'_>, env: &dyn Env) -> Result<ProfileAsked> {
    let named = ask
        .profile
        .map(str::to_owned)
        .or_else(|| env.var("AWS_PROFILE"));
    let name = named.clone().unwrap_or_else(|| "default".into());
    let searching = !ask.anonymous && ask.keys.is_none();
    let profile = match read_profile(env, &name) {
        Ok(profile) => profile,
        Err(_) if !searching => None,
        Err(e) => return Err(e),
    };
    if searching && named.is_some() && profile.is_none() {
        return Err(credentials_error(format!(
            "the AWS profile {name:?} is in neither {} nor {}",
            shown(&credentials_file(env)),
            shown(&config_file(env)),
        )));
    }
    Ok(ProfileAsked {
        name,
        named: named.is_some(),
        profile,
    })
}

/// Keys known without asking a service: the builder's, the environment's
/// (unless a profile is asked for by option), the profile's.
pub(super) fn known_keys(
    ask: &Ask<'_>,
    env: &dyn Env,
    asked: &ProfileAsked,
) -> Result<Option<Arc<Keys>>> {
    let given = |keys: Credentials, from: String| -> Result<Option<Arc<Keys>>> {
        let source = Source::Given {
            keys: keys.checked(&from)?,
            from,
        };
        Ok(Some(Arc::new(Keys::new(source, None, super::load))))
    };
    if let Some(keys) = ask.keys {
        return given(keys.clone(), "the builder's S3 options".into());
    }
    if ask.profile.is_none() {
        if let Some(keys) = environment_keys(env)? {
            return given(keys, "AWS_ACCESS_KEY_ID in the environment".into());
        }
    }
    let Some(profile) = &asked.profile else {
        return Ok(None);
    };
    let name = &asked.name;
    if let Some(keys) = profile_keys(profile, name)? {
        return given(keys, format!("the AWS profile {name:?}"));
    }
    if asked.named {
        return Err(credentials_error(format!(
            "the AWS profile {name:?} has no aws_access_key_id and aws_secret_access_key"
        )));
    }
    Ok(None)
}

/// The environment's keys, if it has both halves: a lone id or secret is
/// not a set of keys, and the chain goes on.
fn environment_keys(env: &dyn Env) -> Result<Option<Credentials>> {
    let (Some(id), Some(secret)) = (
        env.var("AWS_ACCESS_KEY_ID"),
        env.var("AWS_SECRET_ACCESS_KEY"),
    ) else {
        return Ok(None);
    };
    Credentials {
        key_id: id,
        secret,
        token: env.var("AWS_SESSION_TOKEN"),
        expires: None,
    }
    .checked("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
    .map(Some)
}

/// A path for messages, or why there is none.
fn shown(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map_or("(no home directory)".into(), |p| p.display().to_string())
}

fn credentials_file(env: &dyn Env) -> Option<PathBuf> {
    env.var("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| env.home().map(|h| h.join(".aws/credentials")))
}

fn config_file(env: &dyn Env) -> Option<PathBuf> {
    env.var("AWS_CONFIG_FILE")
        .map(PathBuf::from)
        .or_else(|| env.home().map(|h| h.join(".aws/config")))
}

/// The profile `name` from both shared files; a file not there reads as
/// empty, as the SDKs take it.
fn read_profile(env: &dyn Env, name: &str) -> Result<Option<Profile>> {
    let read = |path: Option<PathBuf>, what| match path {
        Some(p) => read_small(&p, what),
        None => Ok(None),
    };
    let credentials = read(credentials_file(env), "the AWS credentials file")?;
    let config = read(config_file(env), "the AWS config file")?;
    Ok(profile::merged(
        credentials.as_deref(),
        config.as_deref(),
        name,
    ))
}

/// The static keys of a profile; an error if it asks for a way of getting
/// keys this crate does not have.
fn profile_keys(profile: &Profile, name: &str) -> Result<Option<Credentials>> {
    let id = profile.get("aws_access_key_id");
    let secret = profile.get("aws_secret_access_key");
    if let (Some(id), Some(secret)) = (id, secret) {
        return Ok(Some(Credentials {
            key_id: id.clone(),
            secret: secret.clone(),
            token: profile.get("aws_session_token").cloned(),
            expires: None,
        }));
    }
    if let Some((key, what)) = profile::UNSUPPORTED
        .iter()
        .find(|(key, _)| profile.contains_key(*key))
    {
        return Err(credentials_error(format!(
            "the AWS profile {name:?} sets {key}: remfile does not support {what}; \
             give keys instead (aws_access_key_id and aws_secret_access_key, or the \
             AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN variables, \
             which `aws configure export-credentials --format env` prints)"
        )));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::super::find;
    use super::super::test_env::{ask, env, soon};
    use super::*;

    fn dir_with(files: &[(&str, &str)]) -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "remfile-chain-{}-{}",
            crate::sync::this_process(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn the_environment_comes_first_then_the_profile() {
        let dir = dir_with(&[
            (
                "c",
                "[default]\naws_access_key_id=AKIAFILE\naws_secret_access_key=s\n[other]\naws_access_key_id=AKIAOTHER\naws_secret_access_key=s\n",
            ),
            ("cfg", "[default]\nregion=eu-west-2\n"),
        ]);
        let c = dir.join("c").display().to_string();
        let cfg = dir.join("cfg").display().to_string();
        let files = [
            ("AWS_SHARED_CREDENTIALS_FILE", c.as_str()),
            ("AWS_CONFIG_FILE", cfg.as_str()),
        ];
        let mut vars = files.to_vec();
        vars.extend([
            ("AWS_ACCESS_KEY_ID", "AKIAENV"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("AWS_SESSION_TOKEN", "t"),
        ]);
        let found = find(&ask(), &env(&vars)).unwrap();
        let keys = found.keys.unwrap().get(&soon()).unwrap();
        assert_eq!(
            (keys.key_id.as_str(), keys.token.as_deref()),
            ("AKIAENV", Some("t"))
        );
        assert_eq!(found.profile_region.as_deref(), Some("eu-west-2"));

        let key_id = |ask: &Ask<'_>, vars: &[(&'static str, &str)]| {
            find(ask, &env(vars))
                .unwrap()
                .keys
                .unwrap()
                .get(&soon())
                .unwrap()
                .key_id
        };
        assert_eq!(key_id(&ask(), &files), "AKIAFILE");
        let mut named = files.to_vec();
        named.push(("AWS_PROFILE", "other"));
        assert_eq!(key_id(&ask(), &named), "AKIAOTHER");
        // A profile asked for by option wins over the environment's keys.
        let by_option = Ask {
            profile: Some("other"),
            ..ask()
        };
        assert_eq!(key_id(&by_option, &vars), "AKIAOTHER");
        let missing = Ask {
            profile: Some("nope"),
            ..ask()
        };
        let e = find(&missing, &env(&files)).unwrap_err();
        assert!(e.to_string().contains("\"nope\" is in neither"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_profile_that_assumes_a_role_says_it_is_not_supported() {
        let dir = dir_with(&[(
            "cfg",
            "[profile admin]\nrole_arn = arn:aws:iam::1:role/x\nsource_profile = default\n",
        )]);
        let cfg = dir.join("cfg").display().to_string();
        let vars = [
            ("AWS_CONFIG_FILE", cfg.as_str()),
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
            ("AWS_PROFILE", "admin"),
        ];
        let e = find(&ask(), &env(&vars)).unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Credentials);
        let text = e.to_string();
        assert!(
            text.contains("role_arn") && text.contains("does not support"),
            "{text}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}

//! The standard AWS credential chain, synchronous: keys given to the
//! builder, then the environment (`AWS_ACCESS_KEY_ID`…), then the shared
//! files' profile (`AWS_PROFILE`), then a web identity token
//! (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`, exchanged at STS), then
//! the container credentials service (`AWS_CONTAINER_CREDENTIALS_*_URI`),
//! then EC2's instance metadata service (IMDSv2, its token first). The first
//! link that applies gives the keys; none applying means unsigned requests.
//!
//! Keys from a service are shared by every file of the process that found
//! the same source, and renewed by [`Keys`] before they expire (see the
//! `keys` module: no load runs under a lock a signing thread waits on, and
//! a forked child loads its own).
//!
//! | module | its one job |
//! |---|---|
//! | `mod.rs` | the chain's order, the sources it finds, their shared keys |
//! | `given` | keys given outright: the builder's, the environment's, a profile's |
//! | `web_identity` | a web identity token exchanged at STS |
//! | `container` | the container credentials service (ECS, EKS Pod Identity) |
//! | `instance` | EC2's instance metadata service (IMDSv2), and its absence remembered |
//! | `service` | what the services share: their agents, a bounded answer, a URL setting |

mod container;
mod given;
mod instance;
mod service;
pub(crate) mod source;
#[cfg(test)]
mod test_env;
mod web_identity;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use self::source::Source;
use super::credentials::{Credentials, credentials_error};
use super::keys::{self, Keys};
use crate::error::Result;

/// Where the chain reads its variables and the home directory: the process's
/// environment, or a fixed one in tests.
pub(crate) trait Env {
    /// The variable's value, if it is set and not empty.
    fn var(&self, name: &str) -> Option<String>;
    fn home(&self) -> Option<PathBuf>;
}

/// The process's own environment.
pub(crate) struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.trim().is_empty())
    }

    fn home(&self) -> Option<PathBuf> {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
    }
}

/// Asks the source for keys: a network call for every source but
/// [`Source::Given`]; renewals call it again.
pub(crate) fn load(source: &Source) -> Result<Credentials> {
    match source {
        Source::Given { keys, .. } => Ok(keys.clone()),
        Source::WebIdentity {
            token_file,
            role_arn,
            session_name,
            sts,
        } => web_identity::assume_role(token_file, role_arn, session_name, sts),
        Source::Container {
            url,
            authorization,
            authorization_file,
        } => container::credentials(url, authorization.as_deref(), authorization_file.as_deref()),
        Source::InstanceMetadata { endpoint } => instance::credentials(endpoint),
    }
}

/// What the chain found.
#[derive(Debug)]
pub(crate) struct Found {
    /// The keys, or `None` for unsigned requests.
    pub keys: Option<Arc<Keys>>,
    /// The profile's `region`, if a profile was read.
    pub profile_region: Option<String>,
}

/// What the chain is asked for: explicit keys, a profile name.
pub(crate) struct Ask<'a> {
    pub keys: Option<&'a Credentials>,
    pub profile: Option<&'a str>,
    pub anonymous: bool,
}

/// Walks the chain, in the order of the module's documentation.
pub(crate) fn find(ask: &Ask<'_>, env: &dyn Env) -> Result<Found> {
    let asked = given::profile_asked(ask, env)?;
    let profile_region = asked.region();
    let keys = if ask.anonymous {
        None
    } else if let Some(keys) = given::known_keys(ask, env, &asked)? {
        Some(keys)
    } else {
        service_keys(env, profile_region.as_deref())?
    };
    Ok(Found {
        keys,
        profile_region,
    })
}

/// Keys from a service: a web identity exchanged at STS, the container
/// service, EC2's instance metadata.
fn service_keys(env: &dyn Env, profile_region: Option<&str>) -> Result<Option<Arc<Keys>>> {
    if let Some(source) = web_identity::source(env, profile_region)? {
        return load_shared(source).map(Some);
    }
    if let Some(source) = container::source(env)? {
        return load_shared(source).map(Some);
    }
    instance::keys(env)
}

/// The longest a load of keys lasts: STS's agent gives up after
/// [`web_identity::STS_TIMEOUT`], the other services' sooner. A caller with
/// no valid keys waits for another thread's load this long at most.
pub(crate) const LONGEST_LOAD: Duration =
    Duration::from_secs(web_identity::STS_TIMEOUT.as_secs() + 5);

/// The process's keys for `source`, loaded now so that a source that
/// applies yet gives nothing fails the open rather than its first read.
fn load_shared(source: Source) -> Result<Arc<Keys>> {
    let keys = keys::shared(source, None, load);
    // The open's stop, declared around it.
    keys.get(&crate::wait::Stop::here().until(Instant::now() + LONGEST_LOAD))?;
    Ok(keys)
}

/// The longest shared configuration or token file read.
const MAX_FILE_LEN: u64 = 1 << 20;

/// A small text file's content; `None` if it does not exist. Bounded, as a
/// path set wrongly may name anything.
fn read_small(path: &Path, what: &str) -> Result<Option<String>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(credentials_error(format!(
                "cannot read {what} {}: {e}",
                path.display()
            )));
        }
    };
    let mut text = String::new();
    file.take(MAX_FILE_LEN)
        .read_to_string(&mut text)
        .map_err(|e| credentials_error(format!("cannot read {what} {}: {e}", path.display())))?;
    Ok(Some(text))
}

/// For messages: what was looked for when no keys were found.
pub(crate) const SEARCHED: &str = "no AWS credentials were found (none given, no AWS_ACCESS_KEY_ID, \
    no keys in the profile, no web identity, container or instance credentials), so the request \
    was sent unsigned; give credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, \
    or S3Options::credentials)";

#[cfg(test)]
mod tests {
    use super::super::fake::{Gate, Service, in_an_hour, json_keys};
    use super::test_env::{FakeEnv, ask, env, env_without_files, token_of};
    use super::*;

    #[test]
    fn nothing_found_is_unsigned_and_anonymous_skips_the_chain() {
        let vars = [
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
            ("AWS_CONFIG_FILE", "/nonexistent"),
        ];
        assert!(find(&ask(), &env(&vars)).unwrap().keys.is_none());
        let mut with_keys = vars.to_vec();
        with_keys.extend([("AWS_ACCESS_KEY_ID", "A"), ("AWS_SECRET_ACCESS_KEY", "s")]);
        assert!(
            find(
                &Ask {
                    anonymous: true,
                    ..ask()
                },
                &env(&with_keys)
            )
            .unwrap()
            .keys
            .is_none()
        );
    }

    /// Runs `f` in a child forked from this process; whether it returned
    /// true and the child ended within a minute (it is killed otherwise).
    #[allow(unsafe_code)]
    fn in_a_child(f: impl FnOnce() -> bool) -> bool {
        // SAFETY: the child runs `f` and ends with `_exit`, never going back
        // into the test harness; glibc's malloc is fork-safe, and the locks
        // `f` takes are what the test is about.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(false);
            // SAFETY: ends the child without running the parent's exit code.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let (done, ended) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut status = 0;
            // SAFETY: waits for the child this test made.
            let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
            let _ = done
                .send(waited == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        });
        match ended.recv_timeout(Duration::from_secs(60)) {
            Ok(ok) => ok,
            Err(_) => {
                // SAFETY: the child is this test's, and hung.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                false
            }
        }
    }

    fn container_vars(url: &str) -> FakeEnv {
        env_without_files(&[("AWS_CONTAINER_CREDENTIALS_FULL_URI", url)])
    }

    #[test]
    fn a_child_forked_while_keys_load_gets_keys_of_its_own() {
        let gate = Gate::new();
        let held = gate.clone();
        let service = Service::new(move |asked| {
            if asked.n == 1 {
                held.hold();
            }
            json_keys(&format!("fork{}", asked.n), in_an_hour())
        });
        let url = service.url("/fork-creds");
        let loader = {
            let url = url.clone();
            std::thread::spawn(move || token_of(find(&ask(), &container_vars(&url))))
        };
        gate.arrived();
        let child = in_a_child(|| token_of(find(&ask(), &container_vars(&url))).is_some());
        gate.open();
        assert!(child, "the child hung or got no keys");
        assert_eq!(loader.join().unwrap().as_deref(), Some("fork1"));
        // The parent's keys are shared by its files as before.
        assert_eq!(
            token_of(find(&ask(), &container_vars(&url))).as_deref(),
            Some("fork1")
        );
        assert_eq!(
            service.asked().len(),
            2,
            "the parent's load and the child's"
        );
    }
}

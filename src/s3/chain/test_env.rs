//! A fixed environment for the chain's tests, and what they ask with.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{Ask, Env, Found};
use crate::error::Result;

pub(super) struct FakeEnv(HashMap<&'static str, String>, Option<PathBuf>);

impl Env for FakeEnv {
    fn var(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }
    fn home(&self) -> Option<PathBuf> {
        self.1.clone()
    }
}

/// `vars` and no home; instance metadata off unless `vars` turn it on, so
/// that a test run on EC2 finds no keys there.
pub(super) fn env(vars: &[(&'static str, &str)]) -> FakeEnv {
    let mut all: HashMap<_, _> = vars.iter().map(|(k, v)| (*k, v.to_string())).collect();
    all.entry("AWS_EC2_METADATA_DISABLED")
        .or_insert_with(|| "true".into());
    FakeEnv(all, None)
}

/// As [`env`], with no shared files: the profile a test machine's user has
/// set up must not give keys first.
pub(super) fn env_without_files(vars: &[(&'static str, &str)]) -> FakeEnv {
    let mut all = vars.to_vec();
    all.extend([
        ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
        ("AWS_CONFIG_FILE", "/nonexistent"),
    ]);
    env(&all)
}

pub(super) fn soon() -> crate::wait::Stop {
    crate::wait::Stop::here().until(Instant::now() + Duration::from_secs(60))
}

pub(super) fn ask() -> Ask<'static> {
    Ask {
        keys: None,
        profile: None,
        anonymous: false,
    }
}

pub(super) fn token_of(found: Result<Found>) -> Option<String> {
    found.ok()?.keys?.get(&soon()).ok()?.token
}

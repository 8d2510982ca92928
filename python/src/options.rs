//! The configuration string: checked before HDF5 sees it, and its keys
//! listed for the package.

use pyo3::prelude::*;
use remfile::hdf5::driver::{self, config};

use crate::errors::config_error;

/// Parses the configuration string and checks its values' ranges, or says
/// what is wrong with it (the key first).
pub(crate) fn parse(options: &str) -> PyResult<config::Config> {
    let parsed = config::parse(options).map_err(config_error)?;
    driver::check(&parsed).map_err(config_error)?;
    Ok(parsed)
}

/// Checks a configuration string: a `ValueError` naming the key that is
/// wrong, before HDF5 sees it.
#[pyfunction]
pub(crate) fn check_options(options: &str) -> PyResult<()> {
    parse(options).map(drop)
}

/// The keys a configuration string may hold, in the order the
/// documentation lists them: each one's name, the kind of its value, its
/// default (as the string writes it), what it sets, the other names it
/// answers to, the title of its group, and whether its value is a secret.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub(crate) fn option_keys() -> Vec<(
    &'static str,
    &'static str,
    Option<String>,
    &'static str,
    Vec<&'static str>,
    &'static str,
    bool,
)> {
    config::KEYS
        .iter()
        .map(|k| {
            (
                k.name,
                k.kind().name(),
                k.default_value(),
                k.help,
                k.aliases.to_vec(),
                k.group.title(),
                k.is_secret(),
            )
        })
        .collect()
}

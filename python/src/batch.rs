//! Many files' metadata fetched at once, ahead of the driver's opens of
//! them: the [`Files`] batch, and its progress as a dict.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use remfile::hdf5::driver;

use crate::errors::config_error;
use crate::host::from_python;

/// The metadata of many files being fetched at once, for the driver's
/// opens of them with the same options (see `remfile_hdf5.prefetch_files`).
#[pyclass(frozen, module = "remfile_hdf5._native")]
pub(crate) struct Files {
    batch: driver::many::Batch,
}

fn progress_dict<'py>(py: Python<'py>, p: &driver::many::Progress) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("files", p.files)?;
    out.set_item("crawled", p.crawled)?;
    out.set_item("opened", p.opened)?;
    out.set_item("failed", p.failed)?;
    out.set_item("dropped", p.dropped)?;
    out.set_item("pending", p.pending)?;
    out.set_item("waiting_for_opens", p.waiting_for_opens)?;
    out.set_item("bytes_ahead", p.bytes_ahead)?;
    Ok(out)
}

#[pymethods]
impl Files {
    /// Starts fetching the metadata of `urls`, opened with the settings of
    /// the configuration string `options`.
    #[new]
    fn new(urls: Vec<String>, options: &str) -> PyResult<Files> {
        let batch = driver::many::prefetch_files(urls, options).map_err(config_error)?;
        Ok(Files { batch })
    }

    /// How far the batch has gone.
    fn progress<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        progress_dict(py, &self.batch.progress())
    }

    /// Waits until the batch is settled, or `timeout` seconds (if given).
    fn wait<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyDict>> {
        let timeout = match timeout {
            None => None,
            Some(t) if t.is_finite() && t >= 0.0 => {
                Some(std::time::Duration::from_secs_f64(t.min(1e9)))
            }
            Some(t) => {
                return Err(PyValueError::new_err(format!(
                    "timeout must be a number of seconds >= 0, not {t}"
                )));
            }
        };
        let batch = self.batch.clone();
        let progress = from_python(py, move || batch.wait(timeout))?;
        progress_dict(py, &progress)
    }

    /// The files that failed here: `(url, message)` pairs.
    fn errors(&self) -> Vec<(String, String)> {
        self.batch
            .errors()
            .into_iter()
            .map(|(url, e)| (url, e.to_string()))
            .collect()
    }

    /// Stops the batch and lets go of the files it holds for their opens.
    fn cancel(&self) {
        self.batch.cancel();
    }
}

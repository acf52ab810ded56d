//! `dpbandits.replay`: offline evaluation on logged feedback (`dpbandits::offline`,
//! docs/offline.md). The Python wrapper (`python/dpbandits/_api.py`) turns the JSON report
//! into a pandas DataFrame; the numbers are those of `dpbandits replay` with the same arguments.

use dpbandits::offline::{self, Format, Rejection, ReplayOptions, Target, obd::Slot};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

fn err(e: dpbandits::Error) -> PyErr {
    match e {
        dpbandits::Error::Io { .. } => PyOSError::new_err(e.to_string()),
        e => PyValueError::new_err(e.to_string()),
    }
}

/// The replay report as JSON text (the CLI's `--json`). `params`: `key=value` strings (the
/// CLI's `--param`); `target`: a fixed policy's action probabilities instead of a kind.
#[pyfunction]
#[pyo3(signature = (log, format, kind, params, target, position, arms, seed, confidence, rejection, replays = 10, switch_tau = 100.0))]
#[allow(clippy::too_many_arguments)]
fn replay_json(
    log: std::path::PathBuf,
    format: &str,
    kind: Option<String>,
    params: Vec<String>,
    target: Option<Vec<f64>>,
    position: &str,
    arms: Option<usize>,
    seed: u64,
    confidence: f64,
    rejection: &str,
    replays: u32,
    switch_tau: f64,
) -> PyResult<String> {
    let ctx = |flag: &str, e: dpbandits::Error| PyValueError::new_err(format!("{flag}: {e}"));
    let format = Format::parse(format).map_err(|e| ctx("format", e))?;
    let slot = Slot::parse(position).map_err(|e| ctx("position", e))?;
    let rejection = Rejection::parse(rejection).map_err(|e| ctx("rejection", e))?;
    let target = match (kind, target) {
        (Some(kind), None) => Target::Kind {
            params: dpbandits::audit::parse_params(params.iter().map(String::as_str))
                .map_err(|e| ctx("params", e))?,
            kind,
        },
        (None, Some(probs)) => {
            let name = probs
                .iter()
                .map(f64::to_string)
                .collect::<Vec<_>>()
                .join(",");
            Target::Fixed(
                offline::FixedTarget::new(format!("target({name})"), probs)
                    .map_err(|e| ctx("target", e))?,
            )
        }
        _ => {
            return Err(PyValueError::new_err(
                "give kind= (a registry kind) or target= (action probabilities), not both",
            ));
        }
    };
    let data = offline::load(&log, format, slot, arms).map_err(err)?;
    let opts = ReplayOptions {
        seed,
        confidence,
        rejection,
        replays,
        switch_tau,
    };
    let report = offline::evaluate(&data, &target, &opts).map_err(err)?;
    serde_json::to_string(&report).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Add the replay functions to `_native`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(replay_json, m)?)
}

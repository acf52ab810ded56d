//! Conversions at the Python boundary shared by the binding's files: Python values as TOML
//! tables and counts, library errors as Python exceptions, JSON to Python. A leaf: it uses no
//! other file of the crate.

use dpbandits::Error;
use dpbandits::config::Setting;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use std::sync::Mutex;

/// A library error as a Python exception: `OSError` for I/O, `ValueError` for everything else
/// (the message names the field, the value and what is allowed).
pub(crate) fn err(e: Error) -> PyErr {
    match e {
        Error::Io { .. } => PyOSError::new_err(e.to_string()),
        e => PyValueError::new_err(e.to_string()),
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A Python value as a TOML value (the parameter tables of the registry are TOML tables).
pub(crate) fn to_toml(field: &str, v: &Bound<'_, PyAny>) -> PyResult<toml::Value> {
    let bad = |what: &str| {
        PyValueError::new_err(format!(
            "{field} = {}: expected {what}",
            v.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    };
    if v.is_instance_of::<PyBool>() {
        return Ok(toml::Value::Boolean(v.extract()?));
    }
    if v.is_instance_of::<PyInt>() {
        return Ok(toml::Value::Integer(
            v.extract().map_err(|_| bad("an integer in i64 range"))?,
        ));
    }
    if v.is_instance_of::<PyFloat>() {
        return Ok(toml::Value::Float(v.extract()?));
    }
    if v.is_instance_of::<PyString>() {
        return Ok(toml::Value::String(v.extract()?));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        return Ok(toml::Value::Table(dict_to_table(field, d)?));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let mut out = vec![];
        for (i, x) in v.try_iter()?.enumerate() {
            out.push(to_toml(&format!("{field}[{i}]"), &x?)?);
        }
        return Ok(toml::Value::Array(out));
    }
    // numpy scalars and arrays: through their Python equivalents.
    if v.hasattr("tolist")? {
        return to_toml(field, &v.call_method0("tolist")?);
    }
    Err(bad("a bool, int, float, str, list or dict (a TOML value)"))
}

pub(crate) fn dict_to_table(prefix: &str, d: &Bound<'_, PyDict>) -> PyResult<toml::Table> {
    let mut t = toml::Table::new();
    for (k, v) in d.iter() {
        let k: String = k
            .extract()
            .map_err(|_| PyValueError::new_err(format!("{prefix}: keys must be strings")))?;
        let field = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        if v.is_none() {
            continue;
        }
        t.insert(k, to_toml(&field, &v)?);
    }
    Ok(t)
}

/// The setting's identifier (`finite_armed`, `linear`, `contextual`, `bai`: its serde name).
pub(crate) fn setting_id(s: Setting) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| s.to_string())
}

pub(crate) fn json_to_py<'py>(
    py: Python<'py>,
    v: &impl serde::Serialize,
) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(v).map_err(|e| PyValueError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

/// A non-negative integer argument (`seed`, `arm`): an int or a numpy integer; a negative or
/// too large value is a `ValueError` naming `field`, a non-integer a `TypeError`.
pub(crate) fn index(field: &str, v: &Bound<'_, PyAny>, max: u64) -> PyResult<u64> {
    let repr = || v.repr().map(|r| r.to_string()).unwrap_or_default();
    if v.is_instance_of::<PyBool>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{field} = {}: expected an integer",
            repr()
        )));
    }
    match v.extract::<i128>() {
        Ok(n) if (0..=i128::from(max)).contains(&n) => Ok(n as u64),
        Ok(_) => Err(PyValueError::new_err(format!(
            "{field} = {}: expected an integer in [0, {max}]",
            repr()
        ))),
        Err(_) => Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{field} = {}: expected an integer",
            repr()
        ))),
    }
}

/// A count (`runs`, `horizon`): an int, a numpy integer or an integral float (`1e5`).
pub(crate) fn count(field: &str, v: &Bound<'_, PyAny>) -> PyResult<u64> {
    let bad = || {
        PyValueError::new_err(format!(
            "{field} = {}: expected an integer >= 1 (an integral float such as 1e5 is accepted)",
            v.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    };
    if v.is_instance_of::<PyBool>() {
        return Err(bad());
    }
    if let Ok(n) = v.extract::<i64>() {
        return u64::try_from(n).ok().filter(|n| *n >= 1).ok_or_else(bad);
    }
    match v.extract::<f64>() {
        Ok(x) if x.fract() == 0.0 && (1.0..=9.007_199_254_740_992e15).contains(&x) => Ok(x as u64),
        Ok(_) => Err(bad()),
        Err(_) => Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{field} = {}: expected an integer >= 1",
            v.repr().map(|r| r.to_string()).unwrap_or_default()
        ))),
    }
}

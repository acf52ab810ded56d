//! `dpbandits._native`: the Python binding of the dpbandits core (PyO3, abi3 for CPython >= 3.9).
//!
//! The Python package (`python/dpbandits/`) re-exports [`Policy`] and wraps [`Experiment`] /
//! [`Outcome`] into `dpbandits.run(...)` and its result (pandas, executors). Everything here is a
//! thin shell over the library: parameters go through the registry's parsers (the CLI's errors,
//! raised as `ValueError`), experiments through `Plan`, `durable::run_shard` / `assemble` /
//! `save` (the CLI's shard logic), summaries through `experiment::SummaryTable`.
//!
//! # The GIL
//! Simulations run with the GIL released (`Python::detach`) on a rayon pool of `threads`
//! workers; the calling thread wakes every 0.1 s to report progress (under the GIL) and to check
//! for Ctrl-C. A Python environment's `pull`/`pull_sum` are called back under the GIL, so such
//! experiments run on the calling thread, which holds it (the calls would serialize on the GIL
//! anyway; a callback from another thread would also create a Python thread state each time; one
//! thread keeps a shared environment object's call order deterministic).

use dpbandits::bai::{BaiAlgorithm, BaiStep};
use dpbandits::config::Setting;
use dpbandits::contextual::{ActionSet, ContextualPolicy};
use dpbandits::experiment::durable::{self, Existing, JobRow, Shard};
use dpbandits::experiment::{ExperimentSpec, Limits, Outcome as Runs, Plan, SummaryTable};
use dpbandits::finite::{EnvConfig, Environment};
use dpbandits::linear::LinearPolicy;
use dpbandits::registry::{self, Built, Restored};
use dpbandits::snapshot::Snapshot;
use dpbandits::{Error, finite};
use nalgebra::DVector;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray2};
use pyo3::conversion::FromPyObjectOwned;
use pyo3::exceptions::{PyKeyboardInterrupt, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

mod replay;

/// A library error as a Python exception: `OSError` for I/O, `ValueError` for everything else
/// (the message names the field, the value and what is allowed).
fn err(e: Error) -> PyErr {
    match e {
        Error::Io { .. } => PyOSError::new_err(e.to_string()),
        e => PyValueError::new_err(e.to_string()),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A Python value as a TOML value (the parameter tables of the registry are TOML tables).
fn to_toml(field: &str, v: &Bound<'_, PyAny>) -> PyResult<toml::Value> {
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

fn dict_to_table(prefix: &str, d: &Bound<'_, PyDict>) -> PyResult<toml::Table> {
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
fn setting_id(s: Setting) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| s.to_string())
}

fn json(v: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_default()
}

fn json_to_py<'py>(py: Python<'py>, v: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(v).map_err(|e| PyValueError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

// ---------------------------------------------------------------------------------------------
// Online policies

/// The running policy, of its setting.
#[derive(Debug)]
enum Running {
    Finite(Box<dyn finite::Policy>),
    Linear(Box<dyn LinearPolicy>),
    Contextual(Box<dyn ContextualPolicy>),
    Bai(Box<dyn BaiAlgorithm>),
}

#[derive(Debug)]
struct State {
    policy: Running,
    /// Rounds (samples, for BAI) observed so far: the `t` of the next `choose`.
    t: u64,
    /// BAI: the stopping rule fired.
    stopped: bool,
    /// Contextual: the action set of the open `choose` (`k`, `d`, features). BAI: the open
    /// request (arm, samples requested, rewards observed so far).
    pending: Option<(usize, usize, Vec<f64>)>,
    /// BAI: the claim of the configuration (runs do not carry it).
    bai_guarantee: Option<serde_json::Value>,
}

/// What `Policy.snapshot()` returns: the library snapshot (CBOR) plus the online counters.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    format: String,
    version: u32,
    t: u64,
    stopped: bool,
    pending: Option<(usize, usize, Vec<f64>)>,
    bai_guarantee: Option<serde_json::Value>,
    #[serde(with = "bytes")]
    snapshot: Vec<u8>,
}

mod bytes {
    pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// The `format` of the envelope. `restore` tries the envelope first, then a library snapshot
/// (CBOR or JSON, `Snapshot::decode`).
const ENVELOPE: &str = "dpbandits-python-policy";
/// Raised when the envelope's fields change.
const ENVELOPE_VERSION: u32 = 1;

/// A policy of any registry kind, for real rewards, one decision at a time.
///
/// `Policy(kind, *, seed=0, **params)` with the setting's own arguments: finite-armed
/// `arms=K`; linear `arms=` a `K x d` array of arm vectors; contextual `dim=d, horizon=T`;
/// BAI `arms=K, delta=`. The other keyword arguments are the kind's parameters (as in an
/// experiment file's `[[policy]]` table; `dpbandits list` or `dpbandits.kinds()`).
#[pyclass(module = "dpbandits", name = "Policy")]
pub struct Policy {
    kind: String,
    setting: Setting,
    state: Mutex<State>,
}

fn take<'py, T: FromPyObjectOwned<'py>>(
    kw: &Bound<'py, PyDict>,
    key: &str,
    kind: &str,
    what: &str,
) -> PyResult<T> {
    let v = kw.get_item(key)?.ok_or_else(|| {
        PyValueError::new_err(format!("{key} = (missing): {kind} needs {key}, {what}"))
    })?;
    kw.del_item(key)?;
    v.extract().map_err(|_| {
        PyValueError::new_err(format!(
            "{key} = {}: expected {what}",
            v.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })
}

impl Policy {
    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut lock(&self.state))
    }

    fn snapshot_bytes(&self) -> PyResult<Vec<u8>> {
        let s = lock(&self.state);
        let snap = match &s.policy {
            Running::Finite(p) => p.snapshot(),
            Running::Linear(p) => p.snapshot(),
            Running::Contextual(p) => p.snapshot(),
            Running::Bai(p) => p.snapshot(),
        }
        .map_err(err)?;
        let env = Envelope {
            format: ENVELOPE.into(),
            version: ENVELOPE_VERSION,
            t: s.t,
            stopped: s.stopped,
            pending: s.pending.clone(),
            bai_guarantee: s.bai_guarantee.clone(),
            snapshot: snap.to_cbor().map_err(err)?,
        };
        let mut out = vec![];
        ciborium::into_writer(&env, &mut out).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(out)
    }
}

#[pymethods]
impl Policy {
    #[new]
    #[pyo3(signature = (kind, *, seed = 0, **params))]
    fn new(
        py: Python<'_>,
        kind: &str,
        seed: u64,
        params: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let kw = match params {
            Some(d) => d.copy()?,
            None => PyDict::new(py),
        };
        Policy::new_with(kind, seed, &kw)
    }

    /// The registry kind.
    #[getter]
    fn kind(&self) -> &str {
        &self.kind
    }

    /// `finite_armed`, `linear`, `contextual` or `bai`.
    #[getter]
    fn setting(&self) -> String {
        setting_id(self.setting)
    }

    /// Rounds (BAI: samples) observed so far.
    #[getter]
    fn t(&self) -> u64 {
        self.with(|s| s.t)
    }

    /// The privacy claim as a dict (notion, model, adjacency, budget, mechanism, boundary and
    /// the noise grade: `simulation-grade`, `deployment-grade` or `not-applicable`).
    #[getter]
    fn guarantee<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let g = self.with(|s| -> PyResult<serde_json::Value> { Ok(match &s.policy {
            Running::Finite(p) => json(&p.guarantee()),
            Running::Linear(p) => json(&p.guarantee()),
            Running::Contextual(p) => json(&p.guarantee()),
            Running::Bai(_) => s.bai_guarantee.clone().ok_or_else(|| PyValueError::new_err("guarantee: unknown for a BAI run restored from a library snapshot (its claim is in the experiment's manifest)"))?,
        })})?;
        json_to_py(py, &g)
    }

    /// The next arm (finite-armed, linear, BAI) or action index (contextual: `actions` is the
    /// round's `k x d` array of action features). BAI: `None` once the stopping rule fired.
    #[pyo3(signature = (actions = None))]
    fn choose(&self, actions: Option<PyReadonlyArray2<'_, f64>>) -> PyResult<Option<usize>> {
        let mut guard = lock(&self.state);
        let s = &mut *guard;
        let t = s.t;
        match (&mut s.policy, actions) {
            (Running::Finite(p), None) => Ok(Some(p.choose(t).arm)),
            (Running::Linear(p), None) => Ok(Some(p.choose(t).map_err(err)?.arm)),
            (Running::Bai(p), None) => {
                // A request of n samples is served one sample per choose/observe; the rewards
                // are buffered and observed as one sum when the request is complete (the
                // algorithm committed to all n whatever their values, and a shorter sum means
                // "truncated by the sample cap" to it).
                if let Some((arm, n, got)) = &s.pending
                    && got.len() < *n
                {
                    return Ok(Some(*arm));
                }
                match p.next(t) {
                    BaiStep::Sample { arm, n } => {
                        let n = usize::try_from(n).unwrap_or(usize::MAX);
                        s.pending = Some((arm, n, vec![]));
                        Ok(Some(arm))
                    }
                    BaiStep::Stop => {
                        s.stopped = true;
                        Ok(None)
                    }
                }
            }
            (Running::Contextual(p), Some(a)) => {
                let a = a.as_array();
                let (k, d) = (a.nrows(), a.ncols());
                if k == 0 || d == 0 {
                    return Err(PyValueError::new_err(format!(
                        "actions: a {k} x {d} array: expected a k x d array with k >= 1 actions of dimension d >= 1"
                    )));
                }
                let features: Vec<f64> = a.iter().copied().collect();
                let arm = p.choose(
                    t,
                    &ActionSet {
                        d,
                        k,
                        features: &features,
                    },
                );
                s.pending = Some((k, d, features));
                Ok(Some(arm))
            }
            (Running::Contextual(_), None) => Err(PyValueError::new_err(
                "actions = None: a contextual policy chooses among the round's actions; pass a k x d numpy array",
            )),
            (_, Some(_)) => Err(PyValueError::new_err(format!(
                "actions: {} is a {} policy, which takes no action set",
                self.kind, self.setting
            ))),
        }
    }

    /// Observe the reward of the arm (action) last chosen. Raises `ValueError` for a reward the
    /// policy's boundary refuses or a call outside the protocol (another arm, no open choice);
    /// the policy is then unchanged.
    fn observe(&self, arm: usize, reward: f64) -> PyResult<()> {
        let mut s = lock(&self.state);
        let st = &mut *s;
        match &mut st.policy {
            Running::Finite(p) => p.observe(arm, reward).map_err(err)?,
            Running::Linear(p) => {
                let sum = p.boundary().single(reward).map_err(err)?;
                p.observe_batch(arm, &sum).map_err(err)?
            }
            Running::Bai(p) => {
                let b = p.boundary();
                let Some((want, n, got)) = &mut st.pending else {
                    return Err(PyValueError::new_err(
                        "observe: no open request; call choose() first",
                    ));
                };
                if arm != *want {
                    return Err(PyValueError::new_err(format!(
                        "arm = {arm}: expected {want}, the arm of the open request (protocol)"
                    )));
                }
                b.single(reward).map_err(err)?;
                got.push(reward);
                if got.len() == *n {
                    let sum = b.sum_of(got.iter().copied()).map_err(err)?;
                    p.observe(arm, &sum).map_err(err)?;
                    st.pending = None;
                }
            }
            Running::Contextual(p) => {
                let Some((k, d, features)) = &st.pending else {
                    return Err(PyValueError::new_err(
                        "observe: no open choice; call choose(actions) first",
                    ));
                };
                p.observe(
                    &ActionSet {
                        d: *d,
                        k: *k,
                        features,
                    },
                    arm,
                    reward,
                )
                .map_err(err)?;
                st.pending = None;
            }
        }
        st.t += 1;
        Ok(())
    }

    /// BAI: the current recommendation (the best arm once `stopped`).
    fn recommend(&self) -> PyResult<usize> {
        self.with(|s| match &s.policy {
            Running::Bai(p) => Ok(p.recommendation()),
            _ => Err(PyValueError::new_err(format!(
                "recommend: {} is a {} policy; only BAI algorithms recommend",
                self.kind, self.setting
            ))),
        })
    }

    /// BAI: whether the stopping rule fired (seen by the last `choose`).
    #[getter]
    fn stopped(&self) -> bool {
        self.with(|s| s.stopped)
    }

    /// The complete state as bytes (sensitive data: raw reward sums and the noise generators'
    /// state). Raises `ValueError` for a policy whose state cannot be captured.
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, &self.snapshot_bytes()?))
    }

    /// A policy from `snapshot()` bytes (or a library snapshot, CBOR or JSON, with `t` the
    /// rounds it had observed); it continues bit-identically.
    #[staticmethod]
    #[pyo3(signature = (data, t = None))]
    fn restore(data: &[u8], t: Option<u64>) -> PyResult<Policy> {
        let (snap, t, stopped, pending, bai_guarantee) = match ciborium::from_reader::<Envelope, _>(
            data,
        ) {
            Ok(e) if e.format == ENVELOPE => {
                if e.version != ENVELOPE_VERSION {
                    return Err(PyValueError::new_err(format!(
                        "snapshot version = {}: expected {ENVELOPE_VERSION}",
                        e.version
                    )));
                }
                (
                    Snapshot::from_cbor(&e.snapshot).map_err(err)?,
                    e.t,
                    e.stopped,
                    e.pending,
                    e.bai_guarantee,
                )
            }
            _ => (
                Snapshot::decode(data).map_err(err)?,
                t.ok_or_else(|| {
                    PyValueError::new_err(
                        "t = None: a library snapshot does not record the rounds observed; pass t",
                    )
                })?,
                false,
                None,
                None,
            ),
        };
        let kind = snap.kind().to_string();
        let setting = snap.setting();
        let policy = match registry::restore(&snap).map_err(err)? {
            Restored::Finite(p) => Running::Finite(p),
            Restored::Linear(p) => Running::Linear(p),
            Restored::Contextual(p) => Running::Contextual(p),
            Restored::Bai(p) => Running::Bai(p),
            _ => return Err(PyValueError::new_err("snapshot: unknown setting")),
        };
        Ok(Policy {
            kind,
            setting,
            state: Mutex::new(State {
                policy,
                t,
                stopped,
                pending,
                bai_guarantee,
            }),
        })
    }

    /// Pickling goes through `snapshot()`/`restore()`: a policy that cannot be snapshotted
    /// cannot be pickled, with the snapshot's error.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let bytes = slf
            .borrow()
            .snapshot_bytes()
            .map_err(|e| PyValueError::new_err(format!("cannot pickle this policy: {e}")))?;
        let restore = py.get_type::<Policy>().getattr("restore")?;
        PyTuple::new(
            py,
            [
                restore,
                PyTuple::new(py, [PyBytes::new(py, &bytes)])?.into_any(),
            ],
        )
    }

    fn __repr__(&self) -> String {
        format!(
            "Policy({:?}, setting={}, t={})",
            self.kind,
            setting_id(self.setting),
            self.t()
        )
    }
}

impl Policy {
    fn new_with(kind: &str, seed: u64, kw: &Bound<'_, PyDict>) -> PyResult<Self> {
        let entry = registry::policy(kind).map_err(err)?;
        let setting = entry.setting();
        let mut bai_guarantee = None;
        let policy = match setting {
            Setting::FiniteArmed => {
                let k: usize = take(kw, "arms", kind, "the number of arms, an integer >= 2")?;
                let Built::Finite(cfg) = entry.build(dict_to_table("", kw)?).map_err(err)? else {
                    unreachable!("a finite-armed entry builds a finite-armed config")
                };
                Running::Finite(cfg.build(k, seed).map_err(err)?)
            }
            Setting::Linear => {
                let arms = kw.get_item("arms")?.ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "arms = (missing): {kind} needs arms, a K x d array of arm vectors"
                    ))
                })?;
                kw.del_item("arms")?;
                let a: PyReadonlyArray2<'_, f64> = arms.extract().map_err(|_| {
                    PyValueError::new_err(
                        "arms: expected a K x d numpy array of float64 arm vectors",
                    )
                })?;
                let vecs: Vec<DVector<f64>> = a
                    .as_array()
                    .rows()
                    .into_iter()
                    .map(|r| DVector::from_iterator(r.len(), r.iter().copied()))
                    .collect();
                let Built::Linear(cfg) = entry.build(dict_to_table("", kw)?).map_err(err)? else {
                    unreachable!("a linear entry builds a linear config")
                };
                Running::Linear(cfg.build(&vecs, seed).map_err(err)?)
            }
            Setting::Contextual => {
                let d: usize = take(kw, "dim", kind, "the dimension, an integer >= 1")?;
                let h: u64 = take(kw, "horizon", kind, "the horizon T, an integer >= 1")?;
                let Built::Contextual(cfg) = entry.build(dict_to_table("", kw)?).map_err(err)?
                else {
                    unreachable!("a contextual entry builds a contextual config")
                };
                Running::Contextual(cfg.build(d, h, seed).map_err(err)?)
            }
            Setting::Bai => {
                let k: usize = take(kw, "arms", kind, "the number of arms, an integer >= 2")?;
                let delta: f64 = take(kw, "delta", kind, "the risk, a number in (0, 1)")?;
                let Built::Bai(cfg) = entry.build(dict_to_table("", kw)?).map_err(err)? else {
                    unreachable!("a BAI entry builds a BAI config")
                };
                bai_guarantee = serde_json::to_value(cfg.guarantee()).ok();
                Running::Bai(cfg.prepare(k, delta).map_err(err)?.start(seed))
            }
            _ => return Err(PyValueError::new_err(format!("{kind}: unknown setting"))),
        };
        Ok(Policy {
            kind: kind.to_string(),
            setting,
            state: Mutex::new(State {
                policy,
                t: 0,
                stopped: false,
                pending: None,
                bai_guarantee,
            }),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Python environments

/// A finite-armed environment written in Python: an object with `means` (the arms' mean
/// rewards, for the regret) and `pull(arm, t)`, optionally `pull_sum(arm, t, n)` (the exact sum
/// of `n` rewards, used by the episode fast path) and `reward_range = (lo, hi)` (rewards inside a
/// private policy's boundary let the run loop draw whole episodes with `pull_sum`; without it
/// rewards are admitted one by one). Or a callable `make(seed)` returning such an object: it is
/// called once per run with the run's environment seed.
#[derive(Debug)]
struct PyEnvConfig {
    obj: Py<PyAny>,
    factory: bool,
    means: Vec<f64>,
    range: (f64, f64),
    /// The first Python exception raised by a callback (a run that hit one fails; `run` raises it).
    error: Arc<Mutex<Option<PyErr>>>,
}

fn env_attrs(obj: &Bound<'_, PyAny>) -> PyResult<(Vec<f64>, (f64, f64))> {
    if !obj.hasattr("pull")? {
        return Err(PyValueError::new_err(
            "env: expected an object with pull(arm, t) and means (or a callable make(seed) returning one)",
        ));
    }
    let means: Vec<f64> = obj
        .getattr("means")
        .and_then(|m| m.call_method0("__iter__").and_then(|_| m.extract()))
        .or_else(|_| obj.getattr("means")?.call_method0("tolist")?.extract())
        .map_err(|_| {
            PyValueError::new_err(
                "env.means: expected a sequence of the arms' mean rewards (floats)",
            )
        })?;
    if means.len() < 2 || means.iter().any(|m| !m.is_finite()) {
        return Err(PyValueError::new_err(format!(
            "env.means = {means:?}: expected at least 2 finite means"
        )));
    }
    let range = match obj.getattr("reward_range") {
        Ok(r) => r.extract::<(f64, f64)>().map_err(|_| {
            PyValueError::new_err("env.reward_range: expected a pair (lo, hi) of floats")
        })?,
        Err(_) => (f64::NEG_INFINITY, f64::INFINITY),
    };
    Ok((means, range))
}

impl EnvConfig for PyEnvConfig {
    fn kind(&self) -> &'static str {
        "python"
    }
    fn num_arms(&self) -> usize {
        self.means.len()
    }
    fn reward_range(&self) -> (f64, f64) {
        self.range
    }
    fn means(&self) -> Vec<f64> {
        self.means.clone()
    }
    fn build(&self, seed: u64) -> dpbandits::Result<Box<dyn Environment>> {
        Python::attach(|py| {
            let obj = if self.factory {
                let o = self
                    .obj
                    .bind(py)
                    .call1((seed,))
                    .map_err(|e| Error::Config(format!("env factory (seed {seed}): {e}")))?;
                let (means, range) = env_attrs(&o)
                    .map_err(|e| Error::Config(format!("env factory (seed {seed}): {e}")))?;
                if means != self.means || range != self.range {
                    return Err(Error::Config(format!(
                        "env factory (seed {seed}): means/reward_range differ from the first instance's"
                    )));
                }
                o.unbind()
            } else {
                self.obj.clone_ref(py)
            };
            let has_sum = obj.bind(py).hasattr("pull_sum").unwrap_or(false);
            Ok(Box::new(PyEnv {
                obj,
                has_sum,
                means: self.means.clone(),
                best: self.means.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                range: self.range,
                error: self.error.clone(),
            }) as Box<dyn Environment>)
        })
    }
    fn describe(&self) -> serde_json::Value {
        serde_json::json!({"kind": "python", "means": self.means, "reward_range": [self.range.0, self.range.1]})
    }
}

#[derive(Debug)]
struct PyEnv {
    obj: Py<PyAny>,
    has_sum: bool,
    means: Vec<f64>,
    best: f64,
    range: (f64, f64),
    error: Arc<Mutex<Option<PyErr>>>,
}

impl PyEnv {
    /// The declared `reward_range` is a promise the run loop relies on (a sum drawn by
    /// `pull_sum` from an environment whose range lies inside a private policy's boundary is not
    /// clipped again): a value outside `n * reward_range` fails the run with an error naming it,
    /// instead of silently voiding the privacy guarantee.
    fn in_range(&self, method: &str, x: f64, n: u64) -> f64 {
        let (lo, hi) = (self.range.0 * n as f64, self.range.1 * n as f64);
        if x.is_nan() || (lo <= x && x <= hi) {
            return x;
        }
        lock(&self.error).get_or_insert_with(|| {
            PyValueError::new_err(format!(
                "env.{method} returned {x} for n = {n}: outside n * reward_range = [{lo}, {hi}] \
                 (the declared reward_range must hold for every reward)"
            ))
        });
        f64::NAN
    }

    /// Call `name(args)` under the GIL; an exception or a non-float result is kept and NaN
    /// returned (the policy's boundary refuses NaN, so the run fails and `run` raises it).
    fn call(
        &self,
        f: impl for<'py> FnOnce(&Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>>,
    ) -> f64 {
        Python::attach(
            |py| match f(self.obj.bind(py)).and_then(|r| r.extract::<f64>()) {
                Ok(x) => x,
                Err(e) => {
                    lock(&self.error).get_or_insert(e);
                    f64::NAN
                }
            },
        )
    }
}

impl Environment for PyEnv {
    fn num_arms(&self) -> usize {
        self.means.len()
    }
    fn mean(&self, arm: usize, _t: u64) -> f64 {
        self.means[arm]
    }
    fn best_mean(&self, _t: u64) -> f64 {
        self.best
    }
    fn pull(&mut self, arm: usize, t: u64) -> f64 {
        let x = self.call(|o| o.call_method1("pull", (arm, t)));
        self.in_range("pull", x, 1)
    }
    fn pull_sum(&mut self, arm: usize, t: u64, n: u64) -> f64 {
        if self.has_sum {
            let x = self.call(|o| o.call_method1("pull_sum", (arm, t, n)));
            self.in_range("pull_sum", x, n)
        } else {
            (0..n).map(|i| self.pull(arm, t + i)).sum()
        }
    }
    fn reward_range(&self) -> (f64, f64) {
        self.range
    }
}

// ---------------------------------------------------------------------------------------------
// Experiments

/// A planned experiment: `Experiment(spec, runs=None, horizon=None, env=None)` with `spec` TOML
/// text or a dict of the TOML's structure; `runs`/`horizon` are the CLI's `--runs/--horizon`
/// (`ExperimentSpec::with_overrides`).
#[pyclass(module = "dpbandits._native")]
pub struct Experiment {
    plan: Arc<Plan>,
    canonical: String,
    env_error: Option<Arc<Mutex<Option<PyErr>>>>,
}

fn spec_of(spec: &Bound<'_, PyAny>) -> PyResult<ExperimentSpec> {
    if let Ok(text) = spec.extract::<String>() {
        return ExperimentSpec::from_toml(&text).map_err(err);
    }
    if let Ok(d) = spec.cast::<PyDict>() {
        let t = dict_to_table("", d)?;
        let text = toml::to_string(&t).map_err(|e| PyValueError::new_err(format!("spec: {e}")))?;
        return ExperimentSpec::from_toml(&text).map_err(err);
    }
    Err(PyValueError::new_err(
        "spec: expected TOML text or a dict with the experiment file's structure",
    ))
}

/// A rayon pool of `threads` workers (default: rayon's default, the number of cores).
fn pool(threads: Option<usize>) -> PyResult<rayon::ThreadPool> {
    if threads == Some(0) {
        return Err(PyValueError::new_err(
            "threads = 0: expected an integer >= 1 (or None: all cores)",
        ));
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()
        .map_err(|e| PyValueError::new_err(format!("threads: {e}")))
}

#[pymethods]
impl Experiment {
    #[new]
    #[pyo3(signature = (spec, runs = None, horizon = None, env = None))]
    fn new(
        spec: &Bound<'_, PyAny>,
        runs: Option<u64>,
        horizon: Option<u64>,
        env: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut spec = spec_of(spec)?;
        spec.with_overrides(runs, horizon).map_err(err)?;
        let canonical = durable::canonical(&spec).map_err(err)?;
        let (plan, env_error) = match env {
            None => (Plan::new(spec).map_err(err)?, None),
            Some(obj) => {
                let factory = !obj.hasattr("pull")? && obj.is_callable();
                let probe = if factory {
                    obj.call1((0u64,))?
                } else {
                    obj.clone()
                };
                let (means, range) = env_attrs(&probe)?;
                let error = Arc::new(Mutex::new(None));
                let cfg = PyEnvConfig {
                    obj: obj.clone().unbind(),
                    factory,
                    means,
                    range,
                    error: error.clone(),
                };
                (
                    Plan::with_finite_env(spec, Box::new(cfg), &Limits::default()).map_err(err)?,
                    Some(error),
                )
            }
        };
        Ok(Experiment {
            plan: Arc::new(plan),
            canonical,
            env_error,
        })
    }

    /// The resolved experiment as TOML (after the overrides): what executors ship to workers.
    #[getter]
    fn canonical(&self) -> &str {
        &self.canonical
    }

    /// The experiment's name.
    #[getter]
    fn name(&self) -> &str {
        &self.plan.spec.name
    }

    /// Number of jobs (`(cell, run)` or `(group, run)`).
    #[getter]
    fn jobs(&self) -> u64 {
        self.plan.jobs()
    }

    /// Whether the environment is a Python object (such plans run in this process only).
    #[getter]
    fn python_env(&self) -> bool {
        self.env_error.is_some()
    }

    /// Run shard `index/count` (jobs `j mod count = index`) with the GIL released, on `threads`
    /// workers; `progress(done, total)` is called from this thread about every 0.1 s and at the
    /// end. Returns `[(job, row bytes (f64 little-endian) or None, error or None)]` in job order.
    #[pyo3(signature = (index = 0, count = 1, threads = None, progress = None))]
    fn run_shard<'py>(
        &self,
        py: Python<'py>,
        index: u64,
        count: u64,
        threads: Option<usize>,
        progress: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        if count == 0 || index >= count {
            return Err(PyValueError::new_err(format!(
                "shard = {index}/{count}: expected 0 <= index < count"
            )));
        }
        let shard = Shard { index, count };
        let threads = if self.python_env() { Some(1) } else { threads };
        let pool = pool(threads)?;
        let total = shard.len(self.plan.jobs());
        let done = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let plan = self.plan.clone();
        let progress = progress.map(Bound::unbind);
        let mut interrupted: Option<PyErr> = None;
        let mut callback_error: Option<PyErr> = None;
        let mut report = |py: Python<'_>, n: u64, last: &mut u64| {
            if let Err(e) = py.check_signals() {
                stop.store(true, Ordering::SeqCst);
                interrupted.get_or_insert(e);
            }
            if let Some(cb) = &progress
                && n != *last
                && callback_error.is_none()
                && let Err(e) = cb.bind(py).call1((n, total))
            {
                stop.store(true, Ordering::SeqCst);
                callback_error = Some(e);
            }
            *last = n;
        };
        let rows = if self.python_env() {
            // A Python environment calls back into Python for every reward: run the jobs here,
            // on the calling thread, which holds the GIL (each callback is then a plain call;
            // from another thread it would take and release the GIL, and create a Python
            // thread state, every time).
            let jobs = dpbandits::sim::JobSet::new(&plan.cells, plan.spec.runs);
            let mut last = u64::MAX;
            let mut rows = vec![];
            for j in (0..jobs.len()).filter(|&j| shard.owns(j)) {
                if stop.load(Ordering::SeqCst) {
                    rows.push((j, None));
                    continue;
                }
                rows.push((j, Some(jobs.run(j))));
                report(py, rows.len() as u64, &mut last);
            }
            rows
        } else {
            py.detach(|| {
                std::thread::scope(|s| {
                    let (tx, rx) = std::sync::mpsc::channel::<()>();
                    let (pool, plan, done, stop) = (&pool, &plan, &done, &stop);
                    let worker = s.spawn(move || {
                        let rows = pool.install(|| {
                            durable::run_shard(
                                plan,
                                shard,
                                &|| {
                                    done.fetch_add(1, Ordering::Relaxed);
                                },
                                stop,
                            )
                        });
                        let _ = tx.send(());
                        rows
                    });
                    let mut last = u64::MAX;
                    loop {
                        // Wake at the end of the run, or every 0.1 s for progress and Ctrl-C.
                        let finished = !matches!(
                            rx.recv_timeout(std::time::Duration::from_millis(100)),
                            Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                        );
                        let n = done.load(Ordering::Relaxed);
                        Python::attach(|py| report(py, n, &mut last));
                        if finished {
                            break;
                        }
                    }
                    worker.join().unwrap_or_default()
                })
            })
        };
        if let Some(e) = interrupted.or(callback_error) {
            return Err(e);
        }
        if let Some(e) = self.env_error.as_ref().and_then(|e| lock(e).take()) {
            return Err(e);
        }
        if rows.iter().any(|r| r.1.is_none()) {
            return Err(PyKeyboardInterrupt::new_err(
                "run stopped before every job ran",
            ));
        }
        let out = PyList::empty(py);
        for (job, res) in rows {
            let item = match res.expect("checked above") {
                Ok(row) => {
                    let b: Vec<u8> = row.iter().flat_map(|x| x.to_le_bytes()).collect();
                    (job, Some(PyBytes::new(py, &b)), None::<String>)
                }
                Err(e) => (job, None, Some(e.to_string())),
            };
            out.append(item)?;
        }
        Ok(out)
    }

    /// The result from the rows of every shard (`run_shard`'s lists, concatenated in any
    /// order): byte-identical to a local run.
    fn assemble(&self, rows: Vec<(u64, Option<Vec<u8>>, Option<String>)>) -> PyResult<Outcome> {
        let mut results = Vec::with_capacity(rows.len());
        let mut ok: Vec<JobRow> = vec![];
        for (job, bytes, e) in rows {
            match (bytes, e) {
                (Some(b), _) => {
                    if b.len() % 8 != 0 {
                        return Err(PyValueError::new_err(format!(
                            "job {job}: a row of {} bytes (expected f64 values)",
                            b.len()
                        )));
                    }
                    let row: Vec<f64> = b
                        .chunks_exact(8)
                        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                        .collect();
                    ok.push((job, row.clone()));
                    results.push((job, Ok(row)));
                }
                (None, e) => results.push((job, Err(e.unwrap_or_else(|| "no result".into())))),
            }
        }
        let runs = durable::assemble(&self.plan, results).map_err(err)?;
        ok.sort_by_key(|r| r.0);
        Ok(Outcome {
            plan: self.plan.clone(),
            runs,
            rows: ok,
        })
    }
}

/// The runs of an experiment (what `dpbandits.run` wraps as its result).
#[pyclass(module = "dpbandits._native")]
pub struct Outcome {
    plan: Arc<Plan>,
    runs: Runs,
    rows: Vec<JobRow>,
}

#[pymethods]
impl Outcome {
    /// The tidy summary table as CSV text (the CLI's `summary.csv`, byte for byte).
    fn summary_csv(&self) -> PyResult<String> {
        SummaryTable::of(&self.plan, &self.runs)
            .to_csv()
            .map_err(err)
    }

    /// The manifest as JSON text (the CLI's `manifest.json` without the run-folder fields
    /// `status`, `config_hash` and `jobs`).
    fn manifest_json(&self) -> PyResult<String> {
        let m = dpbandits::experiment::manifest(&self.plan, &self.runs).map_err(err)?;
        serde_json::to_string_pretty(&m).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// `[(label, kind, values)]` per cell in cell order: `values` a runs x width float64 array
    /// (regret at each checkpoint; BAI: the outcome fields), or the error string of a failed cell.
    fn runs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for (c, r) in self.plan.cells.iter().zip(&self.runs.cells) {
            let v: Bound<'py, PyAny> = match r {
                Ok(runs) => {
                    let w = runs.first().map_or(c.width(), Vec::len);
                    let flat: Vec<f64> = runs.iter().flatten().copied().collect();
                    PyArray1::from_vec(py, flat)
                        .reshape([runs.len(), w])?
                        .into_any()
                }
                Err(e) => PyString::new(py, &e.to_string()).into_any(),
            };
            out.append((c.label(), c.kind(), v))?;
        }
        Ok(out)
    }

    /// The checkpoint grid (regret settings) or the BAI outcome field names.
    fn columns(&self) -> Vec<String> {
        if self.plan.setting == Setting::Bai {
            dpbandits::bai::OUTCOME_FIELDS
                .iter()
                .map(|s| s.to_string())
                .collect()
        } else {
            self.plan
                .grid
                .points()
                .iter()
                .map(|t| t.to_string())
                .collect()
        }
    }

    /// Write the CLI's folder (journal, manifest, summary, plots) into `dir`; `force` clears a
    /// folder holding another run. Returns the files written.
    #[pyo3(signature = (dir, force = false))]
    fn save(&self, py: Python<'_>, dir: std::path::PathBuf, force: bool) -> PyResult<Vec<String>> {
        let (plan, rows) = (self.plan.clone(), self.rows.clone());
        let files = py
            .detach(|| {
                durable::save(
                    &dir,
                    &plan,
                    rows,
                    Existing {
                        resume: false,
                        force,
                    },
                )
            })
            .map_err(err)?;
        Ok(files.iter().map(|p| p.display().to_string()).collect())
    }
}

/// Every registry kind: `[(kind, setting, paper name, example parameters as TOML)]`.
#[pyfunction]
fn kinds() -> Vec<(String, String, String, String)> {
    registry::POLICIES
        .iter()
        .map(|e| {
            (
                e.kind().to_string(),
                setting_id(e.setting()),
                e.info.name.to_string(),
                e.info.example.to_string(),
            )
        })
        .collect()
}

/// The crate version.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    replay::register(m)?;
    m.add_class::<Policy>()?;
    m.add_class::<Experiment>()?;
    m.add_class::<Outcome>()?;
    m.add_function(wrap_pyfunction!(kinds, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    Ok(())
}

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

use dpbandits::Error;
use dpbandits::config::Setting;
use dpbandits::contextual::ActionSet;
use dpbandits::experiment::durable::{self, Existing, JobRow, Shard};
use dpbandits::experiment::{ExperimentSpec, Limits, Outcome as Runs, Plan, SummaryTable};
use dpbandits::finite::{EnvConfig, Environment};
use dpbandits::registry;
use dpbandits::session::{Decision, SESSION_FORMAT, Session, WhilePending};
use dpbandits::snapshot::Snapshot;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray2};
use pyo3::exceptions::{PyKeyboardInterrupt, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

mod convert;
mod env;
mod replay;
mod user;

use convert::{count, dict_to_table, err, index, json_to_py, lock, setting_id};

fn json(v: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Online policies

/// A policy of any registry kind, for real rewards, one decision at a time: a
/// [`Session`] (the core's online object, which validates every input and owns the protocol
/// order, the open commitment and the snapshot) behind a mutex.
///
/// `Policy(kind, *, seed=0, while_pending="wait", **params)` with the setting's own arguments:
/// finite-armed `arms=K`; linear `arms=` a `K x d` array of arm vectors; contextual
/// `dim=d, horizon=T`; BAI `arms=K, delta=`. The other keyword arguments are the kind's
/// parameters (as in an experiment file's `[[policy]]` table; `dpbandits list` or
/// `dpbandits.kinds()`). `while_pending="pipeline"` serves decisions while earlier ones wait for
/// their rewards ([`WhilePending::Pipeline`], every kind); decisions are then named by their id
/// (`decide`, `observe_decision`: 1-based, the decision service's `decision_id`).
#[pyclass(module = "dpbandits", name = "Policy")]
pub struct Policy {
    session: Mutex<Session>,
    /// The claim an old (`dpbandits-python-policy`) BAI snapshot carried: a session restored
    /// from it knows its policy, not its parameters.
    legacy_guarantee: Option<serde_json::Value>,
    /// A contextual policy's horizon `T` (its confidence radius uses it): it makes `T`
    /// decisions, and `choose` past them raises. `None`: other settings, or restored from a
    /// snapshot (which does not record it).
    horizon: Option<u64>,
}

impl Policy {
    fn of(session: Session) -> Self {
        Policy {
            session: Mutex::new(session),
            legacy_guarantee: None,
            horizon: None,
        }
    }

    fn session(&self) -> std::sync::MutexGuard<'_, Session> {
        lock(&self.session)
    }

    fn snapshot_bytes(&self) -> PyResult<Vec<u8>> {
        self.session().snapshot().map_err(err)
    }

    /// One decision (an action set for a contextual session) as the core makes it, with its
    /// index (0-based, in decision order) when it is a decision to play.
    fn decide_indexed(&self, actions: Option<&Bound<'_, PyAny>>) -> PyResult<Option<(u64, usize)>> {
        let set = actions.map(action_set).transpose()?;
        let mut s = self.session();
        let index = s.issued();
        if let Some(h) = self.horizon
            && index >= h
        {
            return Err(PyValueError::new_err(format!(
                "t = {index}: this contextual policy was built for horizon = {h} (the horizon \
                 enters its confidence radius, so its guarantees stop there): it makes {h} \
                 decisions; build a new Policy with a larger horizon= to go on"
            )));
        }
        let decision = match &set {
            None => s.decide(),
            Some((k, d, features)) => s.decide_with(&ActionSet {
                d: *d,
                k: *k,
                features,
            }),
        };
        Ok(match decision.map_err(err)? {
            Decision::Play { arm, .. } => Some((index, arm)),
            Decision::Stop { .. } => None,
        })
    }
}

/// A reward argument as a float (an int, a float or a numpy scalar; the session checks its
/// value: NaN and, per the kind's boundary, out-of-range rewards are refused).
fn reward_of(reward: &Bound<'_, PyAny>) -> PyResult<f64> {
    reward.extract().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "reward = {}: expected a number (a float, an int or a numpy scalar)",
            reward.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })
}

/// `while_pending` as the session's mode: `"wait"` or `"pipeline"`, anything else a
/// `ValueError` naming the field, the value and what is allowed.
fn while_pending_of(v: &Bound<'_, PyAny>) -> PyResult<WhilePending> {
    match v.extract::<String>() {
        Ok(text) => WhilePending::parse(&text).map_err(err),
        Err(_) => Err(PyValueError::new_err(format!(
            "while_pending = {}: expected \"wait\" (default) or \"pipeline\"",
            v.repr().map(|r| r.to_string()).unwrap_or_default()
        ))),
    }
}

/// The name of a [`WhilePending`] mode, as `Policy(while_pending=...)` takes it.
fn while_pending_name(mode: WhilePending) -> &'static str {
    match mode {
        WhilePending::Wait => "wait",
        WhilePending::Pipeline => "pipeline",
    }
}

/// The `dpbandits.Decision` named tuple `(decision_id, arm)` (defined in Python, for its type).
fn decision_tuple<'py>(py: Python<'py>, id: u64, arm: usize) -> PyResult<Bound<'py, PyAny>> {
    static DECISION: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    let class = DECISION.get_or_try_init(py, || {
        Ok::<_, PyErr>(
            py.import("dpbandits._decision")?
                .getattr("Decision")?
                .unbind(),
        )
    })?;
    class.bind(py).call1((id, arm))
}

/// A round's action set as `(k, d, row-major features)`: a float64 2-D numpy array as it is,
/// anything else through `numpy.asarray(actions, dtype=float64)`; the session checks the shape
/// against the policy, the entries and the norms.
fn action_set(actions: &Bound<'_, PyAny>) -> PyResult<(usize, usize, Vec<f64>)> {
    let bad = |what: &str| {
        PyValueError::new_err(format!(
            "actions = {}: expected {what}",
            actions.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    };
    let converted;
    let array: PyReadonlyArray2<'_, f64> = match actions.extract() {
        Ok(a) => a,
        Err(_) => {
            let py = actions.py();
            let kw = PyDict::new(py);
            kw.set_item("dtype", "float64")?;
            converted = py
                .import("numpy")?
                .getattr("asarray")?
                .call((actions,), Some(&kw))
                .map_err(|_| bad("a k x d array of numbers"))?;
            converted
                .extract()
                .map_err(|_| bad("a 2-D k x d array of numbers (one row per action)"))?
        }
    };
    let a = array.as_array();
    Ok((a.nrows(), a.ncols(), a.iter().copied().collect()))
}

#[pymethods]
impl Policy {
    #[new]
    #[pyo3(signature = (kind, *, seed = None, while_pending = None, **params))]
    fn new(
        kind: &str,
        seed: Option<&Bound<'_, PyAny>>,
        while_pending: Option<&Bound<'_, PyAny>>,
        params: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let seed = seed.map_or(Ok(0), |s| index("seed", s, u64::MAX))?;
        let mode = while_pending.map_or(Ok(WhilePending::Wait), while_pending_of)?;
        // The keyword arguments are the session's table: the problem's keys (numpy arrays and
        // lists of arm vectors as TOML arrays) and the kind's parameters.
        let table = match params {
            Some(d) => dict_to_table("", d)?,
            None => toml::Table::new(),
        };
        if let Some(a) = table.get("arms").and_then(toml::Value::as_integer)
            && a < 2
        {
            return Err(PyValueError::new_err(format!(
                "arms = {a}: expected an integer >= 2 (a bandit needs at least two arms)"
            )));
        }
        let horizon = table.get("horizon").and_then(|v| {
            v.as_integer()
                .or_else(|| v.as_float().filter(|f| f.fract() == 0.0).map(|f| f as i64))
        });
        let mut session = Session::from_table(kind, table, seed).map_err(err)?;
        session.set_while_pending(mode).map_err(err)?;
        let contextual = session.setting() == Setting::Contextual;
        Ok(Policy {
            horizon: horizon
                .filter(|_| contextual)
                .and_then(|h| u64::try_from(h).ok()),
            ..Policy::of(session)
        })
    }

    /// What the policy does when every round of its open commitment is decided and rewards are
    /// pending: `"wait"` (no decision until a reward arrives) or `"pipeline"` (decisions go on).
    #[getter]
    fn while_pending(&self) -> &'static str {
        while_pending_name(self.session().while_pending())
    }

    /// The ids (1-based, as `decide` returns them) of the decisions waiting for their reward,
    /// oldest first.
    #[getter]
    fn pending(&self) -> Vec<u64> {
        self.session().pending_decisions().map(|i| i + 1).collect()
    }

    /// The registry kind.
    #[getter]
    fn kind(&self) -> String {
        self.session().kind().to_string()
    }

    /// `finite_armed`, `linear`, `contextual` or `bai`.
    #[getter]
    fn setting(&self) -> String {
        setting_id(self.session().setting())
    }

    /// Rounds (BAI: samples) observed so far.
    #[getter]
    fn t(&self) -> u64 {
        self.session().t()
    }

    /// The privacy claim as a dict (notion, model, adjacency, budget, mechanism, boundary and
    /// the noise grade: `simulation-grade`, `deployment-grade` or `not-applicable`).
    #[getter]
    fn guarantee<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let g = match (self.session().guarantee(), &self.legacy_guarantee) {
            (Ok(g), _) => json(g),
            (Err(_), Some(g)) => g.clone(),
            (Err(e), None) => return Err(err(e)),
        };
        json_to_py(py, &g)
    }

    /// The next arm (finite-armed, linear, BAI) or action index (contextual: `actions` is the
    /// round's `k x d` array of action features, checked first: shape, finite entries, the
    /// kind's norm bound). BAI: `None` once the stopping rule fired. Raises `ValueError` (naming
    /// `actions`, or the protocol: a round that waits for its reward) and then changes nothing.
    #[pyo3(signature = (actions = None))]
    fn choose(&self, actions: Option<&Bound<'_, PyAny>>) -> PyResult<Option<usize>> {
        Ok(self.decide_indexed(actions)?.map(|(_, arm)| arm))
    }

    /// The next decision with its id: a `dpbandits.Decision(decision_id, arm)` named tuple, the
    /// id 1-based in decision order (the decision service's `decision_id`), for
    /// `observe_decision`. As `choose` otherwise (contextual `actions`; BAI: `None` once the
    /// stopping rule fired; the same errors).
    #[pyo3(signature = (actions = None))]
    fn decide<'py>(
        &self,
        py: Python<'py>,
        actions: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.decide_indexed(actions)?
            .map(|(index, arm)| decision_tuple(py, index + 1, arm))
            .transpose()
    }

    /// Observe the reward of a chosen round of `arm` (contextual: the chosen action's index).
    /// Raises `ValueError` for a reward the policy's boundary refuses or a call outside the
    /// protocol (another arm, no chosen round waiting); the policy is then unchanged.
    fn observe(&self, arm: &Bound<'_, PyAny>, reward: &Bound<'_, PyAny>) -> PyResult<()> {
        let arm = index("arm", arm, usize::MAX as u64)? as usize;
        let reward = reward_of(reward)?;
        self.session().observe(arm, reward).map_err(err)
    }

    /// Observe the reward of decision `decision_id` (as `decide` returned it), in any order.
    /// Raises `ValueError` naming `decision_id` for a decision already observed (each reward is
    /// taken once) or never issued, and as `observe` for the reward; the policy is then
    /// unchanged.
    fn observe_decision(
        &self,
        decision_id: &Bound<'_, PyAny>,
        reward: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let id = index("decision_id", decision_id, u64::MAX)?;
        let reward = reward_of(reward)?;
        let mut s = self.session();
        let waiting = id >= 1 && s.pending_arm(id - 1).is_some();
        if !waiting {
            let why = if id == 0 {
                "ids start at 1".to_string()
            } else if id <= s.issued() {
                format!("decision {id} was already observed (each decision's reward is taken once)")
            } else {
                format!("decision {id} was not issued ({} so far)", s.issued())
            };
            return Err(PyValueError::new_err(format!(
                "decision_id = {id}: expected the id of a decision waiting for its reward \
                 (pending: {}): {why}",
                pending_ids(&s)
            )));
        }
        s.observe_decision(id - 1, reward).map_err(err)
    }

    /// The closing report as a dict: per-arm estimates and intervals at confidence `level` from
    /// the policy's released statistics only (no budget spent; `estimates` is `None` for a kind
    /// that keeps no released means, `why_no_estimates` says so). docs/service.md "Closing and
    /// the report" gives the method.
    #[pyo3(signature = (level = 0.95))]
    fn report<'py>(&self, py: Python<'py>, level: f64) -> PyResult<Bound<'py, PyAny>> {
        let r = self.session().report(level).map_err(err)?;
        json_to_py(py, &r)
    }

    /// BAI: the current recommendation (the best arm once `stopped`).
    fn recommend(&self) -> PyResult<usize> {
        let s = self.session();
        s.recommendation().ok_or_else(|| {
            PyValueError::new_err(format!(
                "recommend: {} is a {} policy; only BAI algorithms recommend",
                s.kind(),
                setting_id(s.setting())
            ))
        })
    }

    /// BAI: whether the stopping rule fired (seen by a `choose`).
    #[getter]
    fn stopped(&self) -> bool {
        self.session().stopped().is_some()
    }

    /// The complete state as bytes: the core session's snapshot (sensitive data: raw reward
    /// sums and the noise generators' state). Raises `ValueError` for a policy whose state
    /// cannot be captured.
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, &self.snapshot_bytes()?))
    }

    /// A policy from `snapshot()` bytes (a session snapshot; it continues bit-identically).
    /// Also reads the snapshots of earlier versions of this package (`dpbandits-python-policy`
    /// version 1) and bare library snapshots (CBOR or JSON) with `t` the rounds they had
    /// observed.
    #[staticmethod]
    #[pyo3(signature = (data, t = None))]
    fn restore(data: &[u8], t: Option<u64>) -> PyResult<Policy> {
        match cbor_format(data).as_deref() {
            Some(SESSION_FORMAT) => {
                let s = Session::restore(data).map_err(err)?;
                if let Some(t) = t
                    && t != s.t()
                {
                    return Err(PyValueError::new_err(format!(
                        "t = {t}: the snapshot records t = {}; pass t only with a library snapshot",
                        s.t()
                    )));
                }
                Ok(Policy::of(s))
            }
            Some(legacy::FORMAT) => legacy::restore(data),
            _ => {
                let snap = Snapshot::decode(data).map_err(err)?;
                let t = t.ok_or_else(|| {
                    PyValueError::new_err(
                        "t = None: a library snapshot does not record the rounds observed; pass t",
                    )
                })?;
                Ok(Policy::of(
                    Session::from_policy_snapshot(&snap, t).map_err(err)?,
                ))
            }
        }
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
        let s = self.session();
        let pipelined = match s.while_pending() {
            WhilePending::Wait => String::new(),
            WhilePending::Pipeline => {
                format!(", while_pending=\"pipeline\", pending={}", s.pending())
            }
        };
        format!(
            "Policy({:?}, setting={}, t={}{pipelined})",
            s.kind(),
            setting_id(s.setting()),
            s.t()
        )
    }
}

/// The pending decisions' ids for a message: all of them, or the first few and a count.
fn pending_ids(s: &Session) -> String {
    let n = s.pending();
    let ids: Vec<String> = s
        .pending_decisions()
        .take(8)
        .map(|i| (i + 1).to_string())
        .collect();
    match n {
        0 => "none".into(),
        n if n > 8 => format!("{}, ... ({n} in all)", ids.join(", ")),
        _ => ids.join(", "),
    }
}

/// The `format` field of a CBOR map (`None` for anything else: a library snapshot, garbage).
fn cbor_format(data: &[u8]) -> Option<String> {
    match ciborium::from_reader::<ciborium::Value, _>(data).ok()? {
        ciborium::Value::Map(entries) => entries.into_iter().find_map(|(k, v)| {
            (k.as_text() == Some("format"))
                .then(|| v.into_text().ok())
                .flatten()
        }),
        _ => None,
    }
}

/// The snapshots this package wrote before the policy held a core session: the library snapshot
/// plus the online counters. Read for old pickles, converted into a session.
mod legacy {
    use super::{Policy, err};
    use dpbandits::config::Setting;
    use dpbandits::session::{Decision, Session};
    use dpbandits::snapshot::Snapshot;
    use pyo3::exceptions::PyValueError;
    use pyo3::prelude::*;

    pub(super) const FORMAT: &str = "dpbandits-python-policy";
    const VERSION: u32 = 1;

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Envelope {
        format: String,
        version: u32,
        t: u64,
        stopped: bool,
        /// Contextual: the action set of a chosen round (`k`, `d`, features); BAI: the open
        /// request (arm, samples requested, rewards observed so far).
        pending: Option<(usize, usize, Vec<f64>)>,
        bai_guarantee: Option<serde_json::Value>,
        #[serde(deserialize_with = "bytes")]
        snapshot: Vec<u8>,
    }

    fn bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
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

    /// `s` with its BAI stopping rule fired at its current recommendation (a policy does not
    /// necessarily say `Stop` twice; the session keeps the stop): the session's snapshot with
    /// `stopped` set, restored (which checks it).
    fn stopped(s: &Session) -> PyResult<Session> {
        let rec = s
            .recommendation()
            .ok_or_else(|| refuse("stopped, but not a BAI run"))?;
        let mut v: ciborium::Value =
            ciborium::from_reader(&s.snapshot().map_err(err)?[..]).map_err(refuse)?;
        let field = match &mut v {
            ciborium::Value::Map(m) => m
                .iter_mut()
                .find(|(k, _)| k.as_text() == Some("stopped"))
                .map(|(_, v)| v),
            _ => None,
        }
        .ok_or_else(|| refuse("a session snapshot without `stopped`"))?;
        *field = ciborium::Value::Integer(rec.into());
        let mut bytes = vec![];
        ciborium::into_writer(&v, &mut bytes).map_err(refuse)?;
        Session::restore(&bytes).map_err(err)
    }

    fn refuse(msg: impl std::fmt::Display) -> PyErr {
        PyValueError::new_err(format!(
            "snapshot ({FORMAT} version {VERSION}, an earlier version of this package): {msg}"
        ))
    }

    /// The session the old counters describe: the policy restored at `t` (a BAI request's
    /// buffered rewards replayed into the session's reward buffer, a stopped BAI run kept
    /// stopped); a contextual round that was chosen but not observed is dropped with its action
    /// set (choose again), as [`Session::from_policy_snapshot`] does.
    pub(super) fn restore(data: &[u8]) -> PyResult<Policy> {
        let e: Envelope = ciborium::from_reader(data).map_err(refuse)?;
        if e.format != FORMAT || e.version != VERSION {
            return Err(PyValueError::new_err(format!(
                "snapshot format = {:?} version = {}: this package reads {FORMAT:?} version \
                 {VERSION} (earlier versions) and its own session snapshots",
                e.format, e.version
            )));
        }
        let snap = Snapshot::from_cbor(&e.snapshot).map_err(err)?;
        let bai = snap.setting() == Setting::Bai;
        let buffered = match &e.pending {
            Some((arm, n, got)) if bai => Some((*arm, *n, got.clone())),
            _ => None,
        };
        let replay = buffered.as_ref().map_or(0, |b| b.2.len() as u64);
        let t0 =
            e.t.checked_sub(replay)
                .ok_or_else(|| refuse("counters that do not agree (t < buffered rewards)"))?;
        let mut s = Session::from_policy_snapshot(&snap, t0).map_err(err)?;
        if let Some((arm, _n, got)) = buffered {
            for r in got {
                match s.decide().map_err(err)? {
                    Decision::Play { arm: a, .. } if a == arm => {}
                    d => {
                        return Err(refuse(format!(
                            "the open request of arm {arm} did not continue ({d:?})"
                        )));
                    }
                }
                s.observe(arm, r).map_err(err)?;
            }
        }
        if e.stopped {
            s = stopped(&s)?;
        }
        Ok(Policy {
            session: std::sync::Mutex::new(s),
            legacy_guarantee: if bai { e.bai_guarantee } else { None },
            horizon: None,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Python environments

/// A finite-armed environment written in Python: an object with `means` (the arms' mean
/// rewards, for the regret) and `pull(arm, t)`, optionally `pull_sum(arm, t, n)` (the exact sum
/// of `n` rewards, used by the episode fast path), `reward_range = (lo, hi)` (rewards inside a
/// private policy's boundary let the run loop draw whole episodes with `pull_sum`; without it
/// rewards are admitted one by one) and `means_at(t)` (the means at round `t`, 0-based: the
/// regret is then the dynamic regret). Or a callable `make(seed)` returning such an object: it is
/// called once per run with the run's environment seed (and once more, with seed 0, to read
/// `means` and `reward_range` when the experiment is planned).
///
/// Nothing silently wrong: a reward that is NaN, infinite or outside `n * reward_range` fails its
/// run (the cell's error names it); an environment without `means_at` whose `means` attribute
/// changes during a run fails it too (the static regret would be wrong); one that declares
/// `stationary = False` without `means_at` is refused when the experiment is planned.
#[derive(Debug)]
struct PyEnvConfig {
    obj: Py<PyAny>,
    factory: bool,
    means: Vec<f64>,
    range: (f64, f64),
    dynamic: bool,
    /// A Python exception raised by a callback (the run stops; `run` raises it).
    error: user::Raised,
    /// Why the current run fails (a bad reward, means that changed): taken after each job.
    fault: Arc<Mutex<Option<String>>>,
    /// What the current run drew (its stream's fingerprint, a reward outside [0, 1]): written
    /// when the run's environment is dropped, taken after each job.
    note: Arc<Mutex<Option<JobNote>>>,
    /// The experiment's horizon, passed as `horizon=` to a factory that takes it.
    horizon: Option<u64>,
}

/// What one run of a Python environment drew (issue 45): the fingerprint of its stream (every
/// `(arm, t, n, reward)` in order), and the first reward outside `[0, 1]` when no
/// `reward_range` is declared.
#[derive(Debug, Clone, Copy, PartialEq)]
struct JobNote {
    stream: u64,
    outside_unit: Option<(u64, f64)>,
}

/// Whether the callable `f` takes a `horizon` keyword (a parameter of that name, or `**kwargs`).
fn takes_horizon(f: &Bound<'_, PyAny>) -> bool {
    let py = f.py();
    (|| -> PyResult<bool> {
        let sig = py.import("inspect")?.getattr("signature")?.call1((f,))?;
        let params = sig.getattr("parameters")?;
        if params.contains("horizon")? {
            return Ok(true);
        }
        let var_kw = py
            .import("inspect")?
            .getattr("Parameter")?
            .getattr("VAR_KEYWORD")?;
        for p in params.call_method0("values")?.try_iter()? {
            if p?.getattr("kind")?.eq(&var_kw)? {
                return Ok(true);
            }
        }
        Ok(false)
    })()
    .unwrap_or(false)
}

fn means_of(v: &Bound<'_, PyAny>) -> Option<Vec<f64>> {
    v.extract::<Vec<f64>>()
        .ok()
        .or_else(|| v.call_method0("tolist").ok()?.extract().ok())
}

fn env_attrs(obj: &Bound<'_, PyAny>) -> PyResult<(Vec<f64>, (f64, f64), bool)> {
    if !obj.hasattr("pull")? {
        return Err(PyValueError::new_err(
            "env: expected an object with pull(arm, t) and means (or a callable make(seed) returning one)",
        ));
    }
    // A built-in environment (`dpbandits.Environment`) that is stationary is run on its static
    // means, as the file's `[env]` would be (the same regret, byte for byte).
    let native_static = obj
        .cast::<env::BuiltinEnv>()
        .is_ok_and(|e| e.borrow().stationary());
    let dynamic = obj.hasattr("means_at")? && !native_static;
    let means = if dynamic {
        obj.call_method1("means_at", (0u64,))
            .ok()
            .and_then(|m| means_of(&m))
            .ok_or_else(|| {
                PyValueError::new_err(
                    "env.means_at(0): expected a sequence of the arms' mean rewards (floats)",
                )
            })?
    } else {
        obj.getattr("means")
            .ok()
            .and_then(|m| means_of(&m))
            .ok_or_else(|| {
                PyValueError::new_err(
                    "env.means: expected a sequence of the arms' mean rewards (floats); a non-stationary environment gives means_at(t)",
                )
            })?
    };
    if means.len() < 2 || means.iter().any(|m| !m.is_finite()) {
        return Err(PyValueError::new_err(format!(
            "env.means = {means:?}: expected at least 2 finite means"
        )));
    }
    if !dynamic
        && let Ok(st) = obj.getattr("stationary")
        && !st.is_truthy()?
    {
        return Err(PyValueError::new_err(
            "env.stationary = False, but env has no means_at(t): the regret of a non-stationary \
             environment needs its means at every round (give means_at(t) -> the K means at round t, 0-based)",
        ));
    }
    let range = match obj.getattr("reward_range") {
        Ok(r) => {
            let (lo, hi) = r.extract::<(f64, f64)>().map_err(|_| {
                PyValueError::new_err("env.reward_range: expected a pair (lo, hi) of floats")
            })?;
            if lo.is_nan() || hi.is_nan() || lo >= hi {
                return Err(PyValueError::new_err(format!(
                    "env.reward_range = ({lo}, {hi}): expected lo < hi"
                )));
            }
            (lo, hi)
        }
        Err(_) => (f64::NEG_INFINITY, f64::INFINITY),
    };
    Ok((means, range, dynamic))
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
                let f = self.obj.bind(py);
                let called = match self.horizon {
                    Some(h) => {
                        let kw = PyDict::new(py);
                        kw.set_item("horizon", h)
                            .map_err(|e| Error::Config(e.to_string()))?;
                        f.call((seed,), Some(&kw))
                    }
                    None => f.call1((seed,)),
                };
                let o = called.map_err(|e| {
                    let msg = format!("env factory (seed {seed}): {e}");
                    lock(&self.error).get_or_insert(e);
                    Error::Config(msg)
                })?;
                let (means, range, dynamic) = env_attrs(&o)
                    .map_err(|e| Error::Config(format!("env factory (seed {seed}): {e}")))?;
                if means != self.means || range != self.range || dynamic != self.dynamic {
                    return Err(Error::Config(format!(
                        "env factory (seed {seed}): means/reward_range/means_at differ from the first instance's"
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
                dynamic: self.dynamic,
                cache: std::cell::RefCell::new(std::collections::VecDeque::new()),
                stream: 0xcbf2_9ce4_8422_2325,
                outside_unit: None,
                declared: self.range.0.is_finite() && self.range.1.is_finite(),
                note: self.note.clone(),
                means: self.means.clone(),
                best: self.means.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                range: self.range,
                error: self.error.clone(),
                fault: self.fault.clone(),
            }) as Box<dyn Environment>)
        })
    }
    fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "python",
            "means": self.means,
            "reward_range": [self.range.0, self.range.1],
            "regret": if self.dynamic { "dynamic (means_at(t))" } else { "static (means, checked unchanged after every pull)" },
        })
    }
}

#[derive(Debug)]
struct PyEnv {
    obj: Py<PyAny>,
    has_sum: bool,
    dynamic: bool,
    /// `means_at(t)` of the rounds asked since the start of the current regret span:
    /// `(t, means, best)`, increasing `t` (so `means_at(t)` is asked at most once per round).
    cache: std::cell::RefCell<std::collections::VecDeque<(u64, Vec<f64>, f64)>>,
    /// FNV-1a over `(arm, t, n, reward bits)` of every draw ([`JobNote`]).
    stream: u64,
    /// The first reward (or per-reward mean of a sum) outside `[0, 1]`, when `declared` is false.
    outside_unit: Option<(u64, f64)>,
    /// Whether `reward_range` is declared (finite).
    declared: bool,
    note: Arc<Mutex<Option<JobNote>>>,
    means: Vec<f64>,
    best: f64,
    range: (f64, f64),
    error: user::Raised,
    fault: Arc<Mutex<Option<String>>>,
}

impl Drop for PyEnv {
    fn drop(&mut self) {
        *lock(&self.note) = Some(JobNote {
            stream: self.stream,
            outside_unit: self.outside_unit,
        });
    }
}

impl PyEnv {
    fn fail(&self, msg: impl FnOnce() -> String) {
        lock(&self.fault).get_or_insert_with(msg);
    }

    /// Record a draw in the stream's fingerprint and, without a declared range, the first
    /// reward outside `[0, 1]` (a sum of `n`: outside `[0, n]`).
    fn record(&mut self, arm: usize, t: u64, n: u64, x: f64) {
        for v in [arm as u64, t, n, x.to_bits()] {
            for b in v.to_le_bytes() {
                self.stream = (self.stream ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        if !self.declared && self.outside_unit.is_none() && !(0.0..=n as f64).contains(&x) {
            self.outside_unit = Some((t, x / n.max(1) as f64));
        }
    }

    /// The declared `reward_range` is a promise the run loop relies on (a sum drawn by
    /// `pull_sum` from an environment whose range lies inside a private policy's boundary is not
    /// clipped again): a value outside `n * reward_range`, NaN or infinite fails the run with an
    /// error naming it, instead of silently voiding the privacy guarantee or the regret. Returns
    /// a value the run can go on with (the run's result is replaced by the error).
    fn in_range(&self, method: &str, x: f64, t: u64, n: u64) -> f64 {
        let (lo, hi) = (self.range.0 * n as f64, self.range.1 * n as f64);
        if x.is_finite() && lo <= x && x <= hi {
            return x;
        }
        self.fail(|| {
            if x.is_finite() {
                format!(
                    "env.{method} returned {x} at t = {t} for n = {n}: outside n * reward_range = [{lo}, {hi}] \
                     (the declared reward_range must hold for every reward)"
                )
            } else {
                format!(
                    "env.{method} returned {x} at t = {t} for n = {n}: expected a finite reward (NaN and inf are refused)"
                )
            }
        });
        let safe = if lo.is_finite() { lo } else { 0.0f64.min(hi) };
        if safe.is_finite() { safe } else { 0.0 }
    }

    /// Without `means_at`, the regret is computed from `means` as read when the run began: if the
    /// attribute changes during the run, that figure would be wrong, so the run fails.
    fn check_means(&self, t: u64) {
        if self.dynamic || lock(&self.fault).is_some() {
            return;
        }
        let now = Python::attach(|py| {
            self.obj
                .bind(py)
                .getattr("means")
                .ok()
                .and_then(|m| means_of(&m))
        });
        if now.as_deref() != Some(&self.means[..]) {
            self.fail(|| {
                format!(
                    "env.means changed during the run (at t = {t}: {:?}, was {:?}): the regret \
                     would be computed from stale means; a non-stationary environment gives \
                     means_at(t) (the dynamic regret)",
                    now.unwrap_or_default(),
                    self.means
                )
            });
        }
    }

    /// `means_at(t)` and its maximum, cached for the rounds since the start of the current
    /// regret span (the run loop asks rounds in increasing order; the regret of an episode split
    /// at a checkpoint asks its first rounds twice): `means_at(t)` is called at most once per
    /// round.
    fn at(&self, t: u64) -> (Vec<f64>, f64) {
        if let Some((_, m, b)) = self.cache.borrow().iter().rev().find(|(ct, ..)| *ct == t) {
            return (m.clone(), *b);
        }
        let got = Python::attach(
            |py| match self.obj.bind(py).call_method1("means_at", (t,)) {
                Ok(v) => means_of(&v).ok_or(None),
                Err(e) => Err(Some(e)),
            },
        );
        let m = match got {
            Ok(m) if m.len() == self.means.len() && m.iter().all(|x| x.is_finite()) => m,
            Ok(m) => {
                self.fail(|| {
                    format!(
                        "env.means_at({t}) = {m:?}: expected {} finite means",
                        self.means.len()
                    )
                });
                self.means.clone()
            }
            Err(e) => {
                match e {
                    Some(e) => {
                        lock(&self.error).get_or_insert(e);
                    }
                    None => {
                        self.fail(|| format!("env.means_at({t}): expected a sequence of floats"))
                    }
                }
                self.means.clone()
            }
        };
        let b = m.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut cache = self.cache.borrow_mut();
        if cache.back().is_some_and(|(ct, ..)| *ct > t) || cache.len() >= 1 << 20 {
            cache.clear();
        }
        cache.push_back((t, m.clone(), b));
        (m, b)
    }

    /// Forget the cached rounds before `t` (the start of a regret span).
    fn forget_before(&self, t: u64) {
        let mut cache = self.cache.borrow_mut();
        while cache.front().is_some_and(|(ct, ..)| *ct < t) {
            cache.pop_front();
        }
    }

    /// Call `name(args)` under the GIL; an exception or a non-float result is kept and NaN
    /// returned (the run stops; `run` raises the exception).
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
    fn mean(&self, arm: usize, t: u64) -> f64 {
        if self.dynamic {
            self.at(t).0[arm]
        } else {
            self.means[arm]
        }
    }
    fn best_mean(&self, t: u64) -> f64 {
        if self.dynamic {
            self.at(t).1
        } else {
            self.best
        }
    }
    fn pull(&mut self, arm: usize, t: u64) -> f64 {
        let x = self.call(|o| o.call_method1("pull", (arm, t)));
        if lock(&self.error).is_some() {
            return f64::NAN;
        }
        let x = self.in_range("pull", x, t, 1);
        self.check_means(t);
        self.record(arm, t, 1, x);
        x
    }
    fn pull_sum(&mut self, arm: usize, t: u64, n: u64) -> f64 {
        if self.has_sum {
            let x = self.call(|o| o.call_method1("pull_sum", (arm, t, n)));
            if lock(&self.error).is_some() {
                return f64::NAN;
            }
            let x = self.in_range("pull_sum", x, t, n);
            self.check_means(t);
            self.record(arm, t, n, x);
            x
        } else {
            (0..n).map(|i| self.pull(arm, t + i)).sum()
        }
    }
    fn reward_range(&self) -> (f64, f64) {
        self.range
    }
    fn regret(&self, arm: usize, t: u64, n: u64) -> f64 {
        if self.dynamic {
            self.forget_before(t);
            (t..t + n)
                .map(|s| {
                    let (m, b) = self.at(s);
                    b - m[arm]
                })
                .sum()
        } else {
            (self.best - self.means[arm]) * n as f64
        }
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
    /// A Python exception raised by a callback (environment or user policy): `run_shard` raises it.
    raised: user::Raised,
    /// The failure of the current job of a Python environment (a bad reward, changed means).
    fault: Option<Arc<Mutex<Option<String>>>>,
    /// Whether Python code runs inside the jobs (a Python environment or user policies): such
    /// plans run on the calling thread, which holds the GIL.
    callbacks: bool,
    /// What the current job of a Python environment drew ([`JobNote`]).
    note: Option<Arc<Mutex<Option<JobNote>>>>,
    /// The notes of the jobs run so far, by job.
    notes: Mutex<std::collections::BTreeMap<u64, JobNote>>,
    /// Warnings known when the experiment is planned (a Python environment that cannot rescale).
    plan_warnings: Vec<String>,
    /// Why the saved folder's `experiment.toml` does not reproduce it (empty: it does).
    not_reproducing: Vec<String>,
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
    #[pyo3(signature = (spec, runs = None, horizon = None, env = None, policies = None))]
    fn new(
        spec: &Bound<'_, PyAny>,
        runs: Option<&Bound<'_, PyAny>>,
        horizon: Option<&Bound<'_, PyAny>>,
        env: Option<&Bound<'_, PyAny>>,
        policies: Option<Vec<(usize, String, Bound<'_, PyAny>)>>,
    ) -> PyResult<Self> {
        let runs = runs.map(|v| count("runs", v)).transpose()?;
        let horizon = horizon.map(|v| count("horizon", v)).transpose()?;
        let mut spec = spec_of(spec)?;
        let written_horizon = spec.horizon;
        spec.with_overrides(runs, horizon).map_err(err)?;
        let mut plan_warnings = vec![];
        let mut not_reproducing = vec![];
        let canonical = durable::canonical(&spec).map_err(err)?;
        let raised: user::Raised = Arc::new(Mutex::new(None));
        let mut custom = vec![];
        for (i, label, factory) in policies.unwrap_or_default() {
            let h = takes_horizon(&factory).then_some(spec.horizon);
            not_reproducing.push(format!(
                "policy {label} is a Python user policy (kind = \"python\" in experiment.toml): its code is not in the folder; rerun from Python"
            ));
            custom.push((
                i,
                Box::new(user::PyPolicyConfig::new(label, factory, raised.clone())?.with_horizon(h))
                    as Box<dyn dpbandits::finite::PolicyConfig>,
            ));
        }
        let callbacks = env.is_some() || !custom.is_empty();
        let (env, fault, note) = match env {
            None => (None, None, None),
            Some(obj) => {
                // A class is a factory (`env=MyEnv`: MyEnv(seed) per run), as is any callable
                // without `pull`.
                let factory = obj.is_instance_of::<pyo3::types::PyType>()
                    || (!obj.hasattr("pull")? && obj.is_callable());
                let env_horizon = (factory && takes_horizon(obj)).then_some(spec.horizon);
                let probe = match env_horizon {
                    Some(h) => {
                        let kw = PyDict::new(obj.py());
                        kw.set_item("horizon", h)?;
                        obj.call((0u64,), Some(&kw))?
                    }
                    None if factory => obj.call1((0u64,))?,
                    None => obj.clone(),
                };
                let (means, range, dynamic) = env_attrs(&probe)?;
                if dynamic && env_horizon.is_none() && spec.horizon != written_horizon {
                    plan_warnings.push(format!(
                        "env: horizon = {} rescales the spec's schedule (written for {written_horizon}), but the Python environment {} cannot be rescaled: its means_at(t) schedule stays as written, so a change it places after t = {} never happens; give a factory make(seed, horizon) that places its changes by the horizon it receives",
                        spec.horizon,
                        obj.repr().map(|r| r.to_string()).unwrap_or_default(),
                        spec.horizon
                    ));
                }
                not_reproducing.push(format!(
                    "the environment that ran is a Python object ({}), not the [env] table of experiment.toml; rerun from Python with the same env=",
                    obj.repr().map(|r| r.to_string()).unwrap_or_default()
                ));
                let fault = Arc::new(Mutex::new(None));
                let note = Arc::new(Mutex::new(None));
                let cfg = PyEnvConfig {
                    obj: obj.clone().unbind(),
                    factory,
                    means,
                    range,
                    dynamic,
                    error: raised.clone(),
                    fault: fault.clone(),
                    note: note.clone(),
                    horizon: env_horizon,
                };
                (
                    Some(Box::new(cfg) as Box<dyn EnvConfig>),
                    Some(fault),
                    Some(note),
                )
            }
        };
        let plan = if env.is_none() && custom.is_empty() {
            Plan::new(spec)
        } else {
            Plan::with_custom(spec, env, custom, &Limits::default())
        }
        .map_err(err)?;
        Ok(Experiment {
            plan: Arc::new(plan),
            canonical,
            raised,
            fault,
            callbacks,
            note,
            notes: Mutex::new(Default::default()),
            plan_warnings,
            not_reproducing,
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
        self.fault.is_some()
    }

    /// Whether Python code runs inside the jobs (a Python environment or user policies).
    #[getter]
    fn callbacks(&self) -> bool {
        self.callbacks
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
        let threads = if self.callbacks { Some(1) } else { threads };
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
        let rows = if self.callbacks {
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
                let mut row = jobs.run(j);
                if let Some(msg) = self.fault.as_ref().and_then(|f| lock(f).take()) {
                    row = Err(Error::Config(msg));
                }
                if let Some(n) = self.note.as_ref().and_then(|f| lock(f).take()) {
                    lock(&self.notes).insert(j, n);
                }
                rows.push((j, Some(row)));
                report(py, rows.len() as u64, &mut last);
                if lock(&self.raised).is_some() {
                    stop.store(true, Ordering::SeqCst);
                }
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
        if let Some(e) = lock(&self.raised).take() {
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
        let mut warnings = self.plan_warnings.clone();
        warnings.extend(self.note_warnings());
        Ok(Outcome {
            plan: self.plan.clone(),
            runs,
            rows: ok,
            warnings,
            not_reproducing: self.not_reproducing.clone(),
        })
    }
}

impl Experiment {
    /// Per cell, from the jobs' [`JobNote`]s: runs that drew identical environment streams (not
    /// independent: an env factory that ignores its seed, one seeded object for every run), and
    /// runs of a registry kind that drew rewards outside `[0, 1]` without a declared
    /// `reward_range` (the kinds assume rewards in [0, 1]; the private ones clip to their
    /// boundary). One warning per cell and problem.
    fn note_warnings(&self) -> Vec<String> {
        let notes = lock(&self.notes);
        if notes.is_empty() {
            return vec![];
        }
        let jobs = dpbandits::sim::JobSet::new(&self.plan.cells, self.plan.spec.runs);
        let mut per_cell: std::collections::BTreeMap<usize, Vec<(u64, JobNote)>> =
            Default::default();
        for (&j, n) in notes.iter() {
            if let Some(&c) = jobs.cells_of(j).first() {
                per_cell.entry(c).or_default().push((j % jobs.runs(), *n));
            }
        }
        let mut out = vec![];
        for (c, runs) in per_cell {
            let cell = &self.plan.cells[c];
            let label = cell.label();
            let mut first: std::collections::HashMap<u64, u64> = Default::default();
            let mut same = vec![];
            for (r, n) in &runs {
                match first.get(&n.stream) {
                    Some(&r0) => same.push((r0, *r)),
                    None => {
                        first.insert(n.stream, *r);
                    }
                }
            }
            if !same.is_empty() {
                let pairs: Vec<String> = same
                    .iter()
                    .take(3)
                    .map(|(a, b)| format!("{a} and {b}"))
                    .collect();
                out.push(format!(
                    "{label}: runs {}{} drew identical environment streams (the same rewards for the same arms at the same rounds): the runs are not independent, and std/sem understate the spread; the env factory must use its seed (make(seed) gets a different one per run; an Environment(..., master_seed=...) built the same for every run repeats one stream)",
                    pairs.join(", "),
                    if same.len() > 3 { format!(" (and {} more)", same.len() - 3) } else { String::new() }
                ));
            }
            if cell.kind() != "python" {
                let outside: Vec<&(u64, JobNote)> = runs
                    .iter()
                    .filter(|(_, n)| n.outside_unit.is_some())
                    .collect();
                if let Some((r, n)) = outside.first() {
                    let (t, x) = n.outside_unit.expect("filtered");
                    out.push(format!(
                        "{label}: {} of {} runs drew rewards outside [0, 1] (run {r}: {x} at t = {t}) from an environment without reward_range: {} assumes rewards in [0, 1] (private kinds clip to their boundary), so its confidence bounds and regret are off; declare env.reward_range = (lo, hi) and rescale the rewards to [0, 1]",
                        outside.len(),
                        runs.len(),
                        cell.kind()
                    ));
                }
            }
        }
        out
    }
}

/// The runs of an experiment (what `dpbandits.run` wraps as its result).
#[pyclass(module = "dpbandits._native")]
pub struct Outcome {
    plan: Arc<Plan>,
    runs: Runs,
    rows: Vec<JobRow>,
    /// What the result carries besides its numbers (not independent runs, rewards outside the
    /// kinds' range, a Python environment that could not be rescaled).
    warnings: Vec<String>,
    /// Why the saved `experiment.toml` does not reproduce the folder.
    not_reproducing: Vec<String>,
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
        let mut m = dpbandits::experiment::manifest(&self.plan, &self.runs).map_err(err)?;
        self.annotate(&mut m);
        serde_json::to_string_pretty(&m).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// The warnings the result carries (issue 45): runs that are not independent, rewards
    /// outside the kinds' range without a declared `reward_range`, a Python environment that a
    /// `horizon=` override could not rescale.
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
    }

    /// Why the saved folder's `experiment.toml` does not reproduce it (empty: it does).
    #[getter]
    fn not_reproducing(&self) -> Vec<String> {
        self.not_reproducing.clone()
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
            // The CLI's flags named as save()'s argument.
            .map_err(|e| {
                PyValueError::new_err(
                    e.to_string()
                        .replace("--force clears", "save(..., force=True) clears")
                        .replace("--resume/--force", "force=True")
                        .replace("choose another --out", "choose another folder"),
                )
            })?;
        // The lock only guards a running process: a saved folder is complete.
        let _ = std::fs::remove_file(dir.join(durable::LOCK));
        let files: Vec<std::path::PathBuf> = files
            .into_iter()
            .filter(|p| p.file_name() != Some(std::ffi::OsStr::new(durable::LOCK)))
            .collect();
        if !self.not_reproducing.is_empty() || !self.warnings.is_empty() {
            self.mark_saved(&dir)?;
        }
        Ok(files.iter().map(|p| p.display().to_string()).collect())
    }
}

impl Outcome {
    /// The manifest's `not_reproducing` and `warnings` (absent when empty: the CLI's bytes).
    fn annotate(&self, m: &mut serde_json::Value) {
        if let Some(obj) = m.as_object_mut() {
            if !self.not_reproducing.is_empty() {
                obj.insert("not_reproducing".into(), json(&self.not_reproducing));
            }
            if !self.warnings.is_empty() {
                obj.insert("warnings".into(), json(&self.warnings));
            }
        }
    }

    /// A saved folder that `experiment.toml` does not reproduce says so: a header in
    /// `experiment.toml` naming why, and `not_reproducing` (and the result's `warnings`) in
    /// `manifest.json`.
    fn mark_saved(&self, dir: &std::path::Path) -> PyResult<()> {
        let io = |e: std::io::Error| pyo3::exceptions::PyOSError::new_err(e.to_string());
        if !self.not_reproducing.is_empty() {
            let path = dir.join(dpbandits::experiment::report::EXPERIMENT);
            if let Ok(text) = std::fs::read_to_string(&path) {
                let mut head = String::from(
                    "# NOT REPRODUCING: `dpbandits run` on this file does not reproduce this folder:\n",
                );
                for why in &self.not_reproducing {
                    head += &format!("# - {why}\n");
                }
                std::fs::write(&path, head + &text).map_err(io)?;
            }
        }
        let mpath = dir.join(durable::MANIFEST);
        let text = std::fs::read_to_string(&mpath).map_err(io)?;
        let mut m: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| PyValueError::new_err(e.to_string()))?;
        self.annotate(&mut m);
        let text =
            serde_json::to_string_pretty(&m).map_err(|e| PyValueError::new_err(e.to_string()))?;
        std::fs::write(&mpath, text + "\n").map_err(io)?;
        Ok(())
    }
}

/// Every registry environment: `[(kind, setting, description, source file)]`.
#[pyfunction]
fn environments() -> Vec<(String, String, String, String)> {
    registry::ENVIRONMENTS
        .iter()
        .map(|e| {
            (
                e.info.kind.to_string(),
                setting_id(e.info.setting),
                e.info.description.to_string(),
                e.info.source.to_string(),
            )
        })
        .collect()
}

/// Every registry kind: `[(kind, setting, paper name, example parameters as TOML, parameters)]`
/// (`parameters`: the `# Parameters` section of its module documentation, as `dpbandits list`
/// prints it: each parameter with its range and default).
#[pyfunction]
fn kinds() -> Vec<(String, String, String, String, String)> {
    registry::POLICIES
        .iter()
        .map(|e| {
            (
                e.kind().to_string(),
                setting_id(e.setting()),
                e.info.name.to_string(),
                e.info.example.to_string(),
                e.parameters(),
            )
        })
        .collect()
}

/// The number of `[[policy]]` tables of TOML text (where `run(policies=...)` appends its own).
#[pyfunction]
fn policy_count(text: &str) -> PyResult<usize> {
    let t: toml::Table =
        toml::from_str(text).map_err(|e| PyValueError::new_err(format!("spec: {e}")))?;
    Ok(t.get("policy")
        .and_then(|p| p.as_array())
        .map_or(0, Vec::len))
}

/// The seed of the `numpy.random.Generator(PCG64(seed))` a user policy labelled `label` gets in
/// run `run` of an experiment with `master_seed` (`rng::POLICY_RUN` then `rng::POLICY_USER`).
#[pyfunction]
fn user_policy_seed(master_seed: u64, label: &str, run: u64) -> u64 {
    dpbandits::rng::user_policy_seed(dpbandits::rng::policy_seed(master_seed, label, run))
}

/// The empirical privacy audit (`dpbandits audit`; docs/privacy.md): of the registry `kind` with
/// `params` (`key=value` items, the CLI's `--param`), or of the user policy `factory` (labelled
/// `label`; black-box on its decisions, `dpbandits::audit::audit_custom`). Returns the CLI's
/// `--json` report as JSON text. A registry kind runs on `threads` rayon workers with the GIL
/// released; a user policy on this thread (each decision is a Python call).
#[pyfunction]
#[pyo3(signature = (kind, params, factory, label, runs, seed, deltas, noise_multiplier, confidence, horizon, arms, scenarios, threads))]
#[allow(clippy::too_many_arguments)]
fn audit_json(
    py: Python<'_>,
    kind: Option<String>,
    params: Vec<String>,
    factory: Option<Bound<'_, PyAny>>,
    label: Option<String>,
    runs: u64,
    seed: u64,
    deltas: Vec<f64>,
    noise_multiplier: f64,
    confidence: f64,
    horizon: Option<u64>,
    arms: usize,
    scenarios: Vec<String>,
    threads: Option<usize>,
) -> PyResult<String> {
    use dpbandits::audit::{self, AuditOptions, Scenario};
    let mut opts = AuditOptions::default();
    opts.runs = runs;
    opts.seed = seed;
    opts.deltas = deltas;
    opts.noise_multiplier = noise_multiplier;
    opts.confidence = confidence;
    opts.horizon = horizon;
    opts.arms = arms;
    if !scenarios.is_empty() {
        opts.scenarios = scenarios
            .iter()
            .map(|s| Scenario::parse(s))
            .collect::<dpbandits::Result<_>>()
            .map_err(err)?;
    }
    let report = match (kind, factory) {
        (Some(kind), None) => {
            let table = audit::parse_params(params.iter().map(String::as_str)).map_err(err)?;
            let pool = pool(threads)?;
            py.detach(|| pool.install(|| audit::audit(&kind, &table, &opts)))
                .map_err(err)?
        }
        (None, Some(f)) => {
            let raised: user::Raised = Arc::new(Mutex::new(None));
            let label = label.unwrap_or_else(|| "user_policy".into());
            let cfg = user::PyPolicyConfig::new(label, f, raised.clone())?;
            // One worker, which takes the GIL once for the whole audit (every decision is a
            // Python call; nested `attach` calls are then cheap).
            let pool = pool(Some(1))?;
            let r = py.detach(|| {
                pool.install(|| Python::attach(|_| audit::audit_custom(Box::new(cfg), &opts)))
            });
            if let Some(e) = lock(&raised).take() {
                return Err(e);
            }
            r.map_err(err)?
        }
        _ => {
            return Err(PyValueError::new_err(
                "audit: give a registry kind (a str) or a user policy (a callable make(arms, rng)), not both",
            ));
        }
    };
    serde_json::to_string(&report).map_err(|e| PyValueError::new_err(e.to_string()))
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
    m.add_class::<env::BuiltinEnv>()?;
    m.add_class::<Experiment>()?;
    m.add_class::<Outcome>()?;
    m.add_function(wrap_pyfunction!(kinds, m)?)?;
    m.add_function(wrap_pyfunction!(environments, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(policy_count, m)?)?;
    m.add_function(wrap_pyfunction!(user_policy_seed, m)?)?;
    m.add_function(wrap_pyfunction!(audit_json, m)?)?;
    Ok(())
}

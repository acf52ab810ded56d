//! `dpbandits.Environment`: a built-in environment of any setting as a Python object, drawing
//! exactly the rewards (and, contextual, the action sets) the CLI's run `run` draws.
//!
//! The streams are the run loop's: the registry parses the `[env]` table, `instantiate` draws
//! the instance from the master seed (as the planner does), and run `run`'s environment comes
//! from [`rng::env_run_seed`]`(master_seed, run)` (finite-armed, linear's rewards, BAI) or from
//! `build(master_seed, run)` (linear arms, contextual). So a hand-written Python loop, or a
//! Python environment that wraps a built-in one, sees the same data as `dpbandits run` (a test
//! compares the rewards a user policy observes inside `run()` with this object's).

use crate::convert::{count, dict_to_table, err, index, json_to_py, lock, setting_id};
use dpbandits::bai::BaiEnvironment;
use dpbandits::config::Setting;
use dpbandits::contextual::ContextualEnvironment;
use dpbandits::finite::Environment as FiniteEnvironment;
use dpbandits::registry::{self, EnvBuilt};
use dpbandits::rng;
use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Mutex;

/// The environment of one run, of its setting.
#[derive(Debug)]
enum Inner {
    /// Finite-armed (and linear's reward side): a finite environment; `arms` for linear.
    Finite {
        env: Box<dyn FiniteEnvironment>,
        arms: Option<(usize, Vec<f64>)>,
        stationary: bool,
    },
    /// Contextual: the round `t` the action set was drawn for (`None` before `next_round`).
    Contextual {
        env: Box<dyn ContextualEnvironment>,
        round: Option<u64>,
    },
    /// BAI: the instance's means.
    Bai {
        env: Box<dyn BaiEnvironment>,
        means: Vec<f64>,
        delta: f64,
    },
}

/// A built-in environment of run `run` of an experiment with master seed `master_seed`: the same
/// random streams as the CLI (see the module documentation).
///
/// `Environment(kind, *, master_seed=0, run=0, horizon=None, seed=None, **params)`: `kind` and
/// `params` are an experiment file's `[env]` table (`dpbandits list`); `horizon` is needed by
/// environments that place breakpoints (`piecewise`); `seed` overrides the run's environment
/// seed (it is what `dpbandits.run(spec, env=make)` passes to `make(seed)`, so
/// `env=lambda seed: Environment(..., seed=seed)` reproduces the file's `[env]`).
/// `Environment.from_spec(spec, run=0)` takes the `[env]` table, master seed and horizon of a spec.
#[pyclass(module = "dpbandits", name = "Environment")]
pub struct BuiltinEnv {
    inner: Mutex<Inner>,
    kind: String,
    setting: Setting,
    master_seed: u64,
    run: u64,
    seed: Option<u64>,
    describe: serde_json::Value,
}

fn not_for(method: &str, kind: &str, setting: Setting, use_instead: &str) -> PyErr {
    PyValueError::new_err(format!(
        "{method}: environment {kind} is {}; {use_instead}",
        setting_id(setting)
    ))
}

impl BuiltinEnv {
    fn build(
        kind: &str,
        table: toml::Table,
        master_seed: u64,
        run: u64,
        horizon: Option<u64>,
        seed: Option<u64>,
    ) -> PyResult<Self> {
        let entry = registry::environment(kind).map_err(err)?;
        let built = entry
            .build(table)
            .map_err(|e| PyValueError::new_err(format!("env ({kind}): {e}")))?;
        let env_seed = seed.unwrap_or_else(|| rng::env_run_seed(master_seed, run));
        let (inner, describe) = match built {
            EnvBuilt::Finite(mut cfg) => {
                cfg.instantiate(master_seed, horizon.unwrap_or(0))
                    .map_err(|e| match horizon {
                        None => PyValueError::new_err(format!(
                            "horizon = None: environment {kind} places or checks its breakpoints \
                             against the experiment's horizon: pass horizon=T ({e})"
                        )),
                        Some(_) => PyValueError::new_err(format!("env ({kind}): {e}")),
                    })?;
                let env = cfg.build(env_seed).map_err(err)?;
                // Piecewise environments change their means at breakpoints; the others never.
                let describe = cfg.describe();
                let stationary = describe
                    .get("breakpoints")
                    .and_then(|b| b.as_array())
                    .is_none_or(|b| b.is_empty());
                (
                    Inner::Finite {
                        env,
                        arms: None,
                        stationary,
                    },
                    describe,
                )
            }
            EnvBuilt::Linear(mut cfg) => {
                cfg.instantiate(master_seed)
                    .map_err(|e| PyValueError::new_err(format!("env ({kind}): {e}")))?;
                let (arms, env) = cfg.build(master_seed, run).map_err(err)?;
                let d = arms.first().map_or(0, |a| a.len());
                let flat = arms.iter().flat_map(|a| a.iter().copied()).collect();
                (
                    Inner::Finite {
                        env,
                        arms: Some((d, flat)),
                        stationary: true,
                    },
                    cfg.describe(),
                )
            }
            EnvBuilt::Contextual(mut cfg) => {
                cfg.instantiate(master_seed)
                    .map_err(|e| PyValueError::new_err(format!("env ({kind}): {e}")))?;
                let env = cfg.build(master_seed, run).map_err(err)?;
                (Inner::Contextual { env, round: None }, cfg.describe())
            }
            EnvBuilt::Bai(cfg) => {
                let env = cfg.build(env_seed);
                (
                    Inner::Bai {
                        env,
                        means: cfg.instance().means().to_vec(),
                        delta: cfg.delta(),
                    },
                    cfg.describe(),
                )
            }
        };
        Ok(BuiltinEnv {
            inner: Mutex::new(inner),
            kind: kind.to_string(),
            setting: entry.setting(),
            master_seed,
            run,
            seed,
            describe,
        })
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    fn arm(&self, arm: &Bound<'_, PyAny>, k: usize) -> PyResult<usize> {
        Self::index_below("arm", arm, k)
    }

    fn index_below(field: &str, arm: &Bound<'_, PyAny>, k: usize) -> PyResult<usize> {
        let a = index(field, arm, usize::MAX as u64)? as usize;
        if a >= k {
            return Err(PyValueError::new_err(format!(
                "{field} = {a}: expected an index in [0, {}] ({k} choices)",
                k - 1
            )));
        }
        Ok(a)
    }
}

#[pymethods]
impl BuiltinEnv {
    #[new]
    #[pyo3(signature = (kind, *, master_seed = None, run = None, horizon = None, seed = None, **params))]
    fn new(
        kind: &str,
        master_seed: Option<&Bound<'_, PyAny>>,
        run: Option<&Bound<'_, PyAny>>,
        horizon: Option<&Bound<'_, PyAny>>,
        seed: Option<&Bound<'_, PyAny>>,
        params: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let master_seed = master_seed.map_or(Ok(0), |s| index("master_seed", s, u64::MAX))?;
        let run = run.map_or(Ok(0), |s| index("run", s, u64::MAX))?;
        let horizon = horizon.map(|h| count("horizon", h)).transpose()?;
        let seed = seed.map(|s| index("seed", s, u64::MAX)).transpose()?;
        let table = match params {
            Some(d) => dict_to_table("", d)?,
            None => toml::Table::new(),
        };
        Self::build(kind, table, master_seed, run, horizon, seed)
    }

    /// The environment of run `run` of an experiment spec (a path to a TOML file, TOML text or a
    /// dict, as for `dpbandits.run`): its `[env]` table, `master_seed` (default 0) and `horizon`
    /// (the other fields are not read).
    #[staticmethod]
    #[pyo3(signature = (spec, run = None))]
    fn from_spec(spec: &Bound<'_, PyAny>, run: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let run = run.map_or(Ok(0), |s| index("run", s, u64::MAX))?;
        let (env, master_seed, horizon) = if let Ok(d) = spec.cast::<PyDict>() {
            let env = d.get_item("env")?.ok_or_else(|| {
                PyValueError::new_err(
                    "spec: env missing: expected the [env] table of an experiment",
                )
            })?;
            let env = env.cast::<PyDict>().map_err(|_| {
                PyValueError::new_err("spec.env: expected a dict (the [env] table)")
            })?;
            let env = dict_to_table("env", env)?;
            let master_seed = match d.get_item("master_seed")? {
                Some(s) => index("master_seed", &s, u64::MAX)?,
                None => 0,
            };
            let horizon = match d.get_item("horizon")? {
                Some(h) => Some(count("horizon", &h)?),
                None => None,
            };
            (env, master_seed, horizon)
        } else if let Ok(text) = spec.extract::<String>() {
            let text = if !text.contains('\n')
                && (text.ends_with(".toml") || std::path::Path::new(&text).exists())
            {
                std::fs::read_to_string(&text).map_err(|e| {
                    pyo3::exceptions::PyOSError::new_err(format!("spec = {text:?}: {e}"))
                })?
            } else {
                text
            };
            let mut t: toml::Table =
                toml::from_str(&text).map_err(|e| PyValueError::new_err(format!("spec: {e}")))?;
            let env = match t.remove("env") {
                Some(toml::Value::Table(e)) => e,
                _ => {
                    return Err(PyValueError::new_err(
                        "spec: [env] missing: expected the [env] table of an experiment file",
                    ));
                }
            };
            let int = |field: &str| -> PyResult<Option<u64>> {
                match t.get(field) {
                    None => Ok(None),
                    Some(toml::Value::Integer(n)) if *n >= 0 => Ok(Some(*n as u64)),
                    Some(v) => Err(PyValueError::new_err(format!(
                        "{field} = {v}: expected a non-negative integer"
                    ))),
                }
            };
            (env, int("master_seed")?.unwrap_or(0), int("horizon")?)
        } else {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "spec: expected a path to a TOML file, TOML text or a dict",
            ));
        };
        let mut table = env;
        let kind = match table.remove("kind") {
            Some(toml::Value::String(k)) => k,
            other => {
                return Err(PyValueError::new_err(format!(
                    "env.kind = {}: expected the environment's kind (dpbandits list)",
                    other.map_or("missing".to_string(), |v| v.to_string())
                )));
            }
        };
        Self::build(&kind, table, master_seed, run, horizon, None)
    }

    /// The registry kind.
    #[getter]
    fn kind(&self) -> String {
        self.kind.clone()
    }

    /// `finite_armed`, `linear`, `contextual` or `bai`.
    #[getter]
    fn setting(&self) -> String {
        setting_id(self.setting)
    }

    /// The master seed the instance was drawn from.
    #[getter]
    fn master_seed(&self) -> u64 {
        self.master_seed
    }

    /// The run whose streams this object draws.
    #[getter]
    fn run(&self) -> u64 {
        self.run
    }

    /// The run's environment seed (`seed=` if given, else derived from `master_seed` and `run`).
    #[getter]
    fn seed(&self) -> u64 {
        self.seed
            .unwrap_or_else(|| rng::env_run_seed(self.master_seed, self.run))
    }

    /// Instance facts as in the experiment's manifest (e.g. drawn arms, theta*, segments).
    fn describe<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_to_py(py, &self.describe)
    }

    /// Number of arms (finite-armed, linear, BAI).
    #[getter]
    fn num_arms(&self) -> PyResult<usize> {
        match &*self.inner() {
            Inner::Finite { env, .. } => Ok(env.num_arms()),
            Inner::Bai { means, .. } => Ok(means.len()),
            Inner::Contextual { .. } => Err(not_for(
                "num_arms",
                &self.kind,
                self.setting,
                "each round's action set is next_round(t)",
            )),
        }
    }

    /// The arms' means at round 0 (finite-armed, linear, BAI); `means_at(t)` for a
    /// non-stationary environment.
    #[getter]
    fn means(&self) -> PyResult<Vec<f64>> {
        match &*self.inner() {
            Inner::Finite { env, .. } => Ok((0..env.num_arms()).map(|a| env.mean(a, 0)).collect()),
            Inner::Bai { means, .. } => Ok(means.clone()),
            Inner::Contextual { .. } => Err(not_for(
                "means",
                &self.kind,
                self.setting,
                "the current round's expected rewards are expected_rewards()",
            )),
        }
    }

    /// Whether the means never change (`False` for a piecewise environment with breakpoints).
    #[getter]
    pub(crate) fn stationary(&self) -> bool {
        match &*self.inner() {
            Inner::Finite { stationary, .. } => *stationary,
            _ => true,
        }
    }

    /// The arms' means at round `t` (0-based; finite-armed and linear).
    fn means_at(&self, t: &Bound<'_, PyAny>) -> PyResult<Vec<f64>> {
        let t = index("t", t, u64::MAX)?;
        match &*self.inner() {
            Inner::Finite { env, .. } => Ok((0..env.num_arms()).map(|a| env.mean(a, t)).collect()),
            _ => Err(not_for(
                "means_at",
                &self.kind,
                self.setting,
                "means_at is for finite-armed and linear environments",
            )),
        }
    }

    /// An interval containing every reward.
    #[getter]
    fn reward_range(&self) -> (f64, f64) {
        match &*self.inner() {
            Inner::Finite { env, .. } => env.reward_range(),
            Inner::Bai { env, .. } => env.reward_range(),
            Inner::Contextual { .. } => (f64::NEG_INFINITY, f64::INFINITY),
        }
    }

    /// Linear: the arm vectors, a `K x d` array.
    #[getter]
    fn arms<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<f64>>> {
        match &*self.inner() {
            Inner::Finite {
                arms: Some((d, flat)),
                ..
            } => {
                let k = flat.len() / d.max(&1);
                let a = PyArray1::from_slice(py, flat);
                a.reshape([k, *d])
            }
            _ => Err(not_for(
                "arms",
                &self.kind,
                self.setting,
                "arm vectors belong to linear environments",
            )),
        }
    }

    /// One reward of `arm` at round `t` (finite-armed, linear).
    fn pull(&self, arm: &Bound<'_, PyAny>, t: &Bound<'_, PyAny>) -> PyResult<f64> {
        let t = index("t", t, u64::MAX)?;
        let mut g = self.inner();
        match &mut *g {
            Inner::Finite { env, .. } => {
                let a = self.arm(arm, env.num_arms())?;
                Ok(env.pull(a, t))
            }
            Inner::Bai { .. } => Err(not_for(
                "pull(arm, t)",
                &self.kind,
                self.setting,
                "a BAI environment draws pull_sum(arm, n) (rounds are samples)",
            )),
            Inner::Contextual { .. } => Err(not_for(
                "pull",
                &self.kind,
                self.setting,
                "call next_round(t), then reward(i)",
            )),
        }
    }

    /// The sum of `n` rewards of `arm`: finite-armed and linear `pull_sum(arm, t, n)` (rounds
    /// `t..t+n`, drawn as the run loop draws an episode), BAI `pull_sum(arm, n)`.
    #[pyo3(signature = (arm, t_or_n, n = None))]
    fn pull_sum(
        &self,
        arm: &Bound<'_, PyAny>,
        t_or_n: &Bound<'_, PyAny>,
        n: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<f64> {
        let mut g = self.inner();
        match (&mut *g, n) {
            (Inner::Finite { env, .. }, Some(n)) => {
                let a = self.arm(arm, env.num_arms())?;
                let t = index("t", t_or_n, u64::MAX)?;
                let n = index("n", n, u64::MAX)?;
                Ok(env.pull_sum(a, t, n))
            }
            (Inner::Bai { env, means, .. }, None) => {
                let a = self.arm(arm, means.len())?;
                let n = index("n", t_or_n, u64::MAX)?;
                Ok(env.pull_sum(a, n))
            }
            (Inner::Finite { .. }, None) => Err(PyValueError::new_err(
                "pull_sum(arm, t, n): a finite-armed or linear environment takes the first round t and the count n",
            )),
            (Inner::Bai { .. }, Some(_)) => Err(PyValueError::new_err(
                "pull_sum(arm, n): a BAI environment has no rounds, only the count n",
            )),
            (Inner::Contextual { .. }, _) => Err(not_for(
                "pull_sum",
                &self.kind,
                self.setting,
                "call next_round(t), then reward(i)",
            )),
        }
    }

    /// The largest mean at round `t` (finite-armed, linear); contextual: of the current round.
    #[pyo3(signature = (t = None))]
    fn best_mean(&self, t: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
        let t = t.map_or(Ok(0), |t| index("t", t, u64::MAX))?;
        match &*self.inner() {
            Inner::Finite { env, .. } => Ok(env.best_mean(t)),
            Inner::Contextual {
                env,
                round: Some(_),
            } => Ok(env.best_mean()),
            Inner::Contextual { round: None, .. } => Err(PyValueError::new_err(
                "best_mean: no round drawn yet: call next_round(t) first",
            )),
            Inner::Bai { means, .. } => Ok(means.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
        }
    }

    /// BAI: the best arm; `delta`: the risk of the `[env]` table.
    #[getter]
    fn best_arm(&self) -> PyResult<usize> {
        match &*self.inner() {
            Inner::Bai { env, .. } => Ok(env.best_arm()),
            _ => Err(not_for(
                "best_arm",
                &self.kind,
                self.setting,
                "best_mean(t) gives the best mean",
            )),
        }
    }

    /// BAI: the risk `delta` of the `[env]` table.
    #[getter]
    fn delta(&self) -> PyResult<f64> {
        match &*self.inner() {
            Inner::Bai { delta, .. } => Ok(*delta),
            _ => Err(not_for(
                "delta",
                &self.kind,
                self.setting,
                "only BAI environments carry a risk delta",
            )),
        }
    }

    /// Contextual: the dimension `d`.
    #[getter]
    fn dim(&self) -> PyResult<usize> {
        match &*self.inner() {
            Inner::Contextual { env, .. } => Ok(env.dim()),
            Inner::Finite {
                arms: Some((d, _)), ..
            } => Ok(*d),
            _ => Err(not_for(
                "dim",
                &self.kind,
                self.setting,
                "only linear and contextual environments have a dimension",
            )),
        }
    }

    /// Contextual: draw round `t`'s action set and reward noise (rounds in increasing order, as
    /// the run loop does) and return the action set, a `k x d` array.
    fn next_round<'py>(
        &self,
        py: Python<'py>,
        t: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let t = index("t", t, u64::MAX)?;
        let mut g = self.inner();
        match &mut *g {
            Inner::Contextual { env, round } => {
                if let Some(r) = *round
                    && t <= r
                {
                    return Err(PyValueError::new_err(format!(
                        "next_round: t = {t}: expected t > {r} (rounds are drawn in increasing order, as in the run loop)"
                    )));
                }
                env.next_round(t);
                *round = Some(t);
                let a = env.actions();
                PyArray1::from_slice(py, a.features).reshape([a.k, a.d])
            }
            _ => Err(not_for(
                "next_round",
                &self.kind,
                self.setting,
                "only contextual environments draw action sets",
            )),
        }
    }

    /// Contextual: the current round's expected rewards `<theta*, a_i>`.
    fn expected_rewards(&self) -> PyResult<Vec<f64>> {
        match &*self.inner() {
            Inner::Contextual {
                env,
                round: Some(_),
            } => Ok(env.means().to_vec()),
            Inner::Contextual { round: None, .. } => Err(PyValueError::new_err(
                "expected_rewards: no round drawn yet: call next_round(t) first",
            )),
            _ => Err(not_for(
                "expected_rewards",
                &self.kind,
                self.setting,
                "use means_at(t)",
            )),
        }
    }

    /// Contextual: the reward of action `i` in the current round (`<theta*, a_i> + eta_t`).
    fn reward(&self, i: &Bound<'_, PyAny>) -> PyResult<f64> {
        match &*self.inner() {
            Inner::Contextual {
                env,
                round: Some(_),
            } => {
                let k = env.actions().k;
                let i = Self::index_below("i", i, k)?;
                Ok(env.reward(i))
            }
            Inner::Contextual { round: None, .. } => Err(PyValueError::new_err(
                "reward: no round drawn yet: call next_round(t) first",
            )),
            _ => Err(not_for(
                "reward",
                &self.kind,
                self.setting,
                "use pull(arm, t)",
            )),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Environment({:?}, setting={}, master_seed={}, run={})",
            self.kind,
            setting_id(self.setting),
            self.master_seed,
            self.run
        )
    }
}

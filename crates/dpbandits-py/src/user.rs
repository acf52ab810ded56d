//! Policies written in Python, run by the engine next to the registry kinds.
//!
//! A user policy is a factory `make(arms, rng)` (usually a class) returning an object with
//! `choose() -> arm` and `observe(arm, reward)`; `rng` is a `numpy.random.Generator(PCG64(s))`
//! with `s = rng::user_policy_seed(policy seed of the run)` (the named derivation
//! `POLICY_USER` below `POLICY_RUN`, keyed by the policy's label like every registry kind). An
//! optional `guarantee` attribute of the factory (a dict) is the claim written to the manifest.
//!
//! The protocol checks of the online session apply: the arm must be an integer in `0..K` (else
//! the cell fails, naming the value), and every reward passes the claimed boundary (or the
//! numeric boundary of non-private policies) through a [`Gate`] before `observe` sees it. A
//! Python exception in `choose`/`observe` stops the run and `run` re-raises it.

use dpbandits::Error;
use dpbandits::finite::{Policy as FinitePolicy, PolicyConfig, Pull};
use dpbandits::privacy::{
    BoundaryMode, Budget, NoiseGrade, PrivacyGuarantee, RewardBoundary, TrustModel,
};
use dpbandits::protocol::Gate;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::{Arc, Mutex};

/// The mutex's value, also after a panic elsewhere (this file imports nothing from lib.rs).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The first Python exception raised by a callback of a run (the run stops; `run` raises it).
pub type Raised = Arc<Mutex<Option<PyErr>>>;

/// One user policy of a spec: its label, factory and claim.
#[derive(Debug)]
pub struct PyPolicyConfig {
    label: String,
    factory: Py<PyAny>,
    guarantee: PrivacyGuarantee,
    raised: Raised,
    /// Passed as `horizon=` to a factory that takes it.
    horizon: Option<u64>,
    /// Every object the factory returned (kept alive, so that identity means the same
    /// object): a factory returning one object twice would share its state across runs.
    made: Mutex<Vec<Py<PyAny>>>,
}

fn num(d: &Bound<'_, PyDict>, key: &str) -> PyResult<Option<f64>> {
    match d.get_item(key)? {
        None => Ok(None),
        Some(v) => {
            let x: f64 = v.extract().map_err(|_| {
                PyValueError::new_err(format!("guarantee.{key} = {v}: expected a number"))
            })?;
            if !(x.is_finite() && x > 0.0) {
                return Err(PyValueError::new_err(format!(
                    "guarantee.{key} = {x}: expected a finite number > 0"
                )));
            }
            Ok(Some(x))
        }
    }
}

/// The claim of a user policy from its `guarantee` dict (`epsilon`, `delta`, `rho`, `notion`,
/// `boundary = (lo, hi)`): marked as a user's claim, unverified (`dpbandits.audit` tests it).
fn claim(label: &str, g: Option<Bound<'_, PyAny>>) -> PyResult<PrivacyGuarantee> {
    let Some(g) = g.filter(|g| !g.is_none()) else {
        return Ok(PrivacyGuarantee::non_private());
    };
    let d = g.cast::<PyDict>().map_err(|_| {
        PyValueError::new_err(format!(
            "policy {label}: guarantee = {g}: expected a dict (epsilon, delta, rho, notion, boundary)"
        ))
    })?;
    for k in d.keys() {
        let k: String = k.extract()?;
        if !["epsilon", "delta", "rho", "notion", "boundary"].contains(&k.as_str()) {
            return Err(PyValueError::new_err(format!(
                "policy {label}: guarantee.{k}: unknown key (expected epsilon, delta, rho, notion, boundary)"
            )));
        }
    }
    let budget = match (num(d, "epsilon")?, num(d, "delta")?, num(d, "rho")?) {
        (None, None, None) => Budget::NonPrivate,
        (Some(epsilon), None, None) => Budget::PureDp { epsilon },
        (Some(epsilon), Some(delta), None) => Budget::ApproxDp { epsilon, delta },
        (None, None, Some(rho)) => Budget::Zcdp { rho },
        _ => {
            return Err(PyValueError::new_err(format!(
                "policy {label}: guarantee: expected epsilon, epsilon and delta, or rho"
            )));
        }
    };
    if matches!(budget, Budget::NonPrivate) {
        return Ok(PrivacyGuarantee::non_private());
    }
    let boundary = match d.get_item("boundary")? {
        None => RewardBoundary::unit(BoundaryMode::Clip),
        Some(b) => {
            // A tuple, a list or any sequence of two numbers (a numpy array too).
            let pair: Option<(f64, f64)> = b.extract::<(f64, f64)>().ok().or_else(|| {
                let v: Vec<f64> = b
                    .try_iter()
                    .ok()?
                    .map(|x| x.and_then(|x| x.extract::<f64>()))
                    .collect::<PyResult<_>>()
                    .ok()?;
                (v.len() == 2).then(|| (v[0], v[1]))
            });
            let (lo, hi): (f64, f64) = pair.ok_or_else(|| {
                PyValueError::new_err(format!(
                    "policy {label}: guarantee.boundary = {b}: expected a pair (lo, hi)"
                ))
            })?;
            RewardBoundary::new(lo, hi, BoundaryMode::Clip)
                .map_err(|e| PyValueError::new_err(format!("policy {label}: guarantee.{e}")))?
        }
    };
    let notion = match d.get_item("notion")? {
        Some(n) => n.str()?.to_string(),
        None => "differential privacy".into(),
    };
    Ok(PrivacyGuarantee {
        notion: format!("{notion} (claimed by a user policy, unverified)"),
        model: TrustModel::Central,
        adjacency: dpbandits::privacy::REWARD_ADJACENCY.into(),
        budget,
        mechanism: "user-written (dpbandits.audit tests the claim on its decisions)".into(),
        boundary: Some(boundary),
        noise: NoiseGrade::Simulation,
    })
}

impl PyPolicyConfig {
    /// The configuration of `factory` labelled `label`; reads its `guarantee` attribute.
    pub fn new(label: String, factory: Bound<'_, PyAny>, raised: Raised) -> PyResult<Self> {
        if !factory.is_callable() {
            return Err(PyValueError::new_err(format!(
                "policy {label}: {}: expected a callable make(arms, rng) (e.g. a class) returning \
                 an object with choose() and observe(arm, reward)",
                factory.repr()?
            )));
        }
        let guarantee = claim(&label, factory.getattr("guarantee").ok())?;
        Ok(PyPolicyConfig {
            label,
            factory: factory.unbind(),
            guarantee,
            raised,
            horizon: None,
            made: Mutex::new(vec![]),
        })
    }

    /// The factory is called with `horizon=h` too (it takes a `horizon` keyword).
    pub fn with_horizon(mut self, horizon: Option<u64>) -> Self {
        self.horizon = horizon;
        self
    }
}

impl PolicyConfig for PyPolicyConfig {
    fn kind(&self) -> &'static str {
        "python"
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        vec![]
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        self.guarantee.clone()
    }
    fn label(&self) -> String {
        self.label.clone()
    }
    fn build(&self, k: usize, seed: u64) -> dpbandits::Result<Box<dyn FinitePolicy>> {
        Python::attach(|py| {
            let made = (|| -> PyResult<Bound<'_, PyAny>> {
                let np = py.import("numpy.random")?;
                let bits = np
                    .getattr("PCG64")?
                    .call1((dpbandits::rng::user_policy_seed(seed),))?;
                let rng = np.getattr("Generator")?.call1((bits,))?;
                match self.horizon {
                    Some(h) => {
                        let kw = PyDict::new(py);
                        kw.set_item("horizon", h)?;
                        self.factory.bind(py).call((k, rng), Some(&kw))
                    }
                    None => self.factory.bind(py).call1((k, rng)),
                }
            })();
            let obj = match made {
                Ok(o) => o,
                Err(e) => {
                    let msg = format!("policy {}: make(arms, rng) raised {e}", self.label);
                    lock(&self.raised).get_or_insert(e);
                    return Err(Error::Config(msg));
                }
            };
            {
                let mut made = lock(&self.made);
                if made.iter().any(|o| o.bind(py).is(&obj)) {
                    return Err(Error::Config(format!(
                        "policy {}: make(arms, rng) returned an object it had already returned for \
                         an earlier run ({}): runs would share its state and not be independent; \
                         return a new object per call (e.g. pass the class, not `lambda arms, rng: \
                         shared`)",
                        self.label,
                        obj.repr().map(|r| r.to_string()).unwrap_or_default()
                    )));
                }
                made.push(obj.clone().unbind());
            }
            for m in ["choose", "observe"] {
                if !obj.hasattr(m).unwrap_or(false) {
                    return Err(Error::Config(format!(
                        "policy {}: the object make(arms, rng) returned has no {m}() (a policy \
                         has choose() -> arm and observe(arm, reward))",
                        self.label
                    )));
                }
            }
            let boundary = self
                .guarantee
                .boundary
                .unwrap_or_else(RewardBoundary::numeric);
            Ok(Box::new(PyPolicy {
                obj: obj.unbind(),
                k,
                label: self.label.clone(),
                guarantee: self.guarantee.clone(),
                gate: Gate::new(boundary),
                fault: None,
                raised: self.raised.clone(),
            }) as Box<dyn FinitePolicy>)
        })
    }
}

/// One run of a user policy.
#[derive(Debug)]
struct PyPolicy {
    obj: Py<PyAny>,
    k: usize,
    label: String,
    guarantee: PrivacyGuarantee,
    gate: Gate,
    /// Why the run must stop (an invalid arm, an exception): the next `observe` returns it.
    fault: Option<String>,
    raised: Raised,
}

impl FinitePolicy for PyPolicy {
    fn num_arms(&self) -> usize {
        self.k
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        self.guarantee.clone()
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
    fn choose(&mut self, t: u64) -> Pull {
        if let Some(c) = self.gate.open() {
            return Pull {
                arm: c.arm,
                steps: c.left,
            };
        }
        let arm = Python::attach(|py| {
            let r = match self.obj.bind(py).call_method0("choose") {
                Ok(r) => r,
                Err(e) => {
                    self.fault = Some(format!("policy {}: choose() raised {e}", self.label));
                    lock(&self.raised).get_or_insert(e);
                    return 0;
                }
            };
            let ok = if r.is_instance_of::<pyo3::types::PyBool>() {
                None
            } else {
                r.extract::<i64>()
                    .ok()
                    .filter(|a| *a >= 0 && (*a as u64) < self.k as u64)
            };
            match ok {
                Some(a) => a as usize,
                None => {
                    let v = r.repr().map(|s| s.to_string()).unwrap_or_default();
                    self.fault = Some(format!(
                        "policy {}: choose() returned arm = {v} at t = {t}: expected an integer \
                         arm in 0..={} (the session's protocol check)",
                        self.label,
                        self.k - 1
                    ));
                    0
                }
            }
        });
        self.gate.commit(arm, 1);
        Pull { arm, steps: 1 }
    }
    fn observe(&mut self, arm: usize, reward: f64) -> dpbandits::Result<()> {
        if let Some(f) = &self.fault {
            return Err(Error::Protocol(f.clone()));
        }
        let mut gate = self.gate;
        let r = gate.admit(arm, reward)?;
        Python::attach(|py| {
            self.obj
                .bind(py)
                .call_method1("observe", (arm, r))
                .map(|_| ())
                .map_err(|e| {
                    let msg = format!("policy {}: observe() raised {e}", self.label);
                    lock(&self.raised).get_or_insert(e);
                    Error::Protocol(msg)
                })
        })?;
        self.gate = gate;
        Ok(())
    }
}

//! From a spec to buildable cells: one planner loop for every setting.

use super::ExperimentSpec;
use crate::bai::{BaiCell, BaiConfig, BaiEnvConfig};
use crate::config::{BySetting, Setting};
use crate::contextual::{ContextualEnvConfig, ContextualGroup, ContextualPolicyConfig};
use crate::error::{Error, Result, ResultExt};
use crate::experiment::TrialSpec;
use crate::experiment::trial::{TrialCell, TrialEnv, TrialPolicy};
use crate::finite::{EnvConfig, FiniteCell, PolicyConfig};
use crate::linear::{LinearCell, LinearEnvConfig, LinearPolicyConfig};
use crate::registry::{self, EnvBuilt, Parse};
use crate::sim::{Cell, CheckpointGrid};
use std::path::Path;
use std::sync::Arc;

/// A validated experiment, ready to run.
#[derive(Debug)]
pub struct Plan {
    /// The file as written.
    pub spec: ExperimentSpec,
    /// The setting (from the environment kind).
    pub setting: Setting,
    /// Checkpoints (log grid plus figure horizons).
    pub grid: Arc<CheckpointGrid>,
    /// One cell per expanded policy configuration, in file order.
    pub cells: Vec<Box<dyn Cell>>,
    /// Environment facts for the manifest.
    pub env_info: serde_json::Value,
    /// BAI: characteristic times and lower bounds for every `epsilon` of the cells, plus
    /// `eps = inf` last (empty in the regret settings).
    pub bounds: Vec<crate::bai::Bounds>,
}

/// The environment and the policies of its setting (each with the index of its `[[policy]]`
/// table): a policy of another setting cannot be added (see [`Problem::add`]).
type Problem = BySetting<
    Group<dyn EnvConfig, dyn PolicyConfig>,
    Group<dyn LinearEnvConfig, dyn LinearPolicyConfig>,
    Group<dyn ContextualEnvConfig, dyn ContextualPolicyConfig>,
    Group<dyn BaiEnvConfig, dyn BaiConfig>,
>;

/// One environment and its policies, in file order.
struct Group<E: ?Sized, P: ?Sized> {
    env: Box<E>,
    policies: Vec<(usize, Box<P>)>,
}

impl<E: ?Sized, P: ?Sized> Group<E, P> {
    fn new(env: Box<E>) -> Self {
        Group {
            env,
            policies: vec![],
        }
    }

    /// Parse every sweep point of `policy[i]` (`table` without `kind`) with `parse`.
    fn add(
        &mut self,
        i: usize,
        table: &toml::Table,
        horizon: u64,
        parse: fn(toml::Table) -> Result<Box<P>>,
        at: impl Fn() -> String + Copy,
    ) -> Result<()> {
        for mut t in expand_sweep(table).at(at)? {
            per_horizon(&mut t, horizon);
            self.policies.push((i, parse(t).at(at)?));
        }
        Ok(())
    }
}

impl Problem {
    fn new(env: EnvBuilt) -> Self {
        match env {
            EnvBuilt::Finite(e) => Problem::Finite(Group::new(e)),
            EnvBuilt::Linear(e) => Problem::Linear(Group::new(e)),
            EnvBuilt::Contextual(e) => Problem::Contextual(Group::new(e)),
            EnvBuilt::Bai(e) => Problem::Bai(Group::new(e)),
        }
    }

    /// Add the configurations of `policy[i]` (kind `kind`, `table` without `kind`), whose
    /// parser is `parse`.
    ///
    /// # Errors
    /// A kind of another setting than the environment's (a user error naming the field), then
    /// any parameter of the table.
    fn add(
        &mut self,
        i: usize,
        kind: &str,
        env_kind: &str,
        parse: Parse,
        table: &toml::Table,
        horizon: u64,
    ) -> Result<()> {
        let at = || format!("policy[{i}] ({kind})");
        match (self, parse) {
            (Problem::Finite(g), Parse::Finite(p)) => g.add(i, table, horizon, p, at),
            (Problem::Linear(g), Parse::Linear(p)) => g.add(i, table, horizon, p, at),
            (Problem::Contextual(g), Parse::Contextual(p)) => g.add(i, table, horizon, p, at),
            (Problem::Bai(g), Parse::Bai(p)) => g.add(i, table, horizon, p, at),
            (problem, parse) => Err(Error::Config(format!(
                "policy[{i}].kind = \"{kind}\": a {} kind, but the environment \"{env_kind}\" is {}",
                parse.setting(),
                problem.setting()
            ))),
        }
    }
}

impl Plan {
    /// Read and plan a file.
    ///
    /// # Errors
    /// I/O, and any field of the file, with its name and value.
    pub fn from_file(path: &Path) -> Result<Plan> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
            path: path.display().to_string(),
            error: e,
        })?;
        Plan::from_toml(&text).map_err(|e| e.at(path.display().to_string()))
    }

    /// Plan TOML text.
    ///
    /// # Errors
    /// Any field of the file, with its name and value.
    pub fn from_toml(text: &str) -> Result<Plan> {
        Plan::new(ExperimentSpec::from_toml(text)?)
    }

    /// Plan a parsed spec within the default [`Limits`].
    ///
    /// # Errors
    /// Any field of the spec, with its name and value; a plan beyond the limits.
    pub fn new(spec: ExperimentSpec) -> Result<Plan> {
        Plan::with_limits(spec, &Limits::default())
    }

    /// Plan a parsed spec within `limits` (checked before anything big is allocated: the
    /// checkpoint count before the grid, the configuration count before the sweeps are expanded,
    /// the memory and work estimates before any job runs).
    ///
    /// # Errors
    /// Any field of the spec, with its name and value; a plan beyond the limits.
    pub fn with_limits(spec: ExperimentSpec, limits: &Limits) -> Result<Plan> {
        Plan::build(spec, limits, None, vec![])
    }

    /// Plan a parsed spec whose finite-armed environment is `env` (e.g. an environment written
    /// in Python) instead of the `[env]` table's registry kind; the `[env]` table is kept as
    /// written (for the manifest and the config hash).
    ///
    /// # Errors
    /// As [`Plan::with_limits`]; a policy of another setting than finite-armed.
    pub fn with_finite_env(
        spec: ExperimentSpec,
        env: Box<dyn EnvConfig>,
        limits: &Limits,
    ) -> Result<Plan> {
        Plan::build(spec, limits, Some(env), vec![])
    }

    /// Plan a parsed spec with an optional custom finite-armed environment (as
    /// [`Plan::with_finite_env`]) and custom finite-armed policy configurations (e.g. policies
    /// written in Python): `policies[j] = (i, config)` takes the place of the `[[policy]]` table
    /// `i` (which is kept as written, for the manifest and the config hash, and is not parsed).
    ///
    /// # Errors
    /// As [`Plan::with_limits`]; a custom policy in another setting than finite-armed, or an
    /// index that is not a `[[policy]]` table.
    pub fn with_custom(
        spec: ExperimentSpec,
        env: Option<Box<dyn EnvConfig>>,
        policies: Vec<(usize, Box<dyn PolicyConfig>)>,
        limits: &Limits,
    ) -> Result<Plan> {
        Plan::build(spec, limits, env, policies)
    }

    fn build(
        spec: ExperimentSpec,
        limits: &Limits,
        custom: Option<Box<dyn EnvConfig>>,
        mut custom_policies: Vec<(usize, Box<dyn PolicyConfig>)>,
    ) -> Result<Plan> {
        let points = spec.checkpoints.points as u64 + spec.checkpoints.extra.len() as u64;
        if points > limits.max_checkpoints {
            return Err(Error::param(
                "checkpoints.points",
                spec.checkpoints.points,
                format!(
                    "at most {} checkpoints including checkpoints.extra (each run stores one value per checkpoint; {})",
                    limits.max_checkpoints, LIFT
                ),
            ));
        }
        let configurations: u64 = spec
            .policy
            .iter()
            .map(|t| sweep_size(&without_kind(t)))
            .fold(0u64, u64::saturating_add);
        if configurations > limits.max_cells {
            return Err(Error::param(
                "policy",
                format!("{configurations} configurations (sweep axes multiply)"),
                format!("at most {} configurations ({})", limits.max_cells, LIFT),
            ));
        }
        let mut extra = spec.checkpoints.extra.clone();
        for f in &spec.figure {
            extra.extend(f.horizons());
        }
        let grid = Arc::new(
            CheckpointGrid::log(spec.horizon, spec.checkpoints.points, &extra)
                .at(|| "checkpoints".into())?,
        );
        let (env_kind, mut problem) = match custom {
            Some(e) => (e.kind().to_string(), Problem::Finite(Group::new(e))),
            None => {
                let env_kind = env_kind(&spec.env)?;
                let entry = registry::environment(&env_kind).at(|| "env".into())?;
                let env = entry
                    .build(without_kind(&spec.env))
                    .at(|| format!("env ({env_kind})"))?;
                (env_kind, Problem::new(env))
            }
        };
        let setting = problem.setting();
        let at_env = || format!("env ({env_kind})");
        match &mut problem {
            Problem::Finite(g) => g
                .env
                .instantiate(spec.master_seed, spec.horizon)
                .at(at_env)?,
            Problem::Linear(g) => g.env.instantiate(spec.master_seed).at(at_env)?,
            Problem::Contextual(g) => g.env.instantiate(spec.master_seed).at(at_env)?,
            Problem::Bai(_) => {
                if !spec.figure.is_empty() || spec.comparison.is_some() {
                    return Err(Error::param(
                        "figure",
                        "(given)",
                        "no [[figure]] or [comparison] in a BAI experiment (its figure is the stopping time against epsilon)",
                    ));
                }
            }
        }

        if let Some(t) = &spec.trial {
            t.validate()?;
            if !custom_policies.is_empty() {
                return Err(Error::Config(
                    "trial: a simulated trial drives registry kinds through the core session; custom policies are not supported".into(),
                ));
            }
        }
        // The one planner loop: every [[policy]] table, every sweep point, in file order.
        if let Some((i, _)) = custom_policies
            .iter()
            .find(|(i, _)| *i >= spec.policy.len())
        {
            return Err(Error::Config(format!(
                "policy[{i}]: a custom policy for a [[policy]] table the spec does not have"
            )));
        }
        for (i, table) in spec.policy.iter().enumerate() {
            if let Some(j) = custom_policies.iter().position(|(c, _)| *c == i) {
                let (_, cfg) = custom_policies.remove(j);
                match &mut problem {
                    Problem::Finite(g) => g.policies.push((i, cfg)),
                    other => {
                        return Err(Error::Config(format!(
                            "policy[{i}] ({}): a custom policy is finite-armed, but the environment \"{env_kind}\" is {}",
                            cfg.label(),
                            other.setting()
                        )));
                    }
                }
                continue;
            }
            let kind = policy_kind(table, i)?;
            let entry = registry::policy(&kind).at(|| format!("policy[{i}]"))?;
            problem.add(
                i,
                &kind,
                &env_kind,
                entry.parse,
                &without_kind(table),
                spec.horizon,
            )?;
        }

        let bounds = match &problem {
            Problem::Bai(g) => bai_bounds(g.env.as_ref(), &g.policies)?,
            _ => vec![],
        };
        let (cells, env_info) = cells(problem, &spec, &grid)?;
        let mut seen = std::collections::HashSet::new();
        for c in &cells {
            if !seen.insert(c.label()) {
                return Err(Error::Config(format!(
                    "policy {} appears twice; each configuration may be listed once",
                    c.label()
                )));
            }
        }
        let plan = Plan {
            setting,
            grid,
            cells,
            env_info,
            bounds,
            spec,
        };
        for (i, f) in plan.spec.figure.iter().enumerate() {
            f.validate(&plan).at(|| format!("figure[{i}]"))?;
        }
        if let Some(c) = &plan.spec.comparison {
            c.validate(&plan.cells).at(|| "comparison".into())?;
        }
        let memory = plan.memory_estimate();
        if memory > limits.max_memory_bytes {
            return Err(Error::param(
                "runs",
                plan.spec.runs,
                format!(
                    "a plan whose results fit in {} (configurations x runs x values per run x 8 bytes = {}; reduce runs, checkpoints.points or the sweep; {})",
                    bytes(limits.max_memory_bytes),
                    bytes(memory),
                    LIFT
                ),
            ));
        }
        let work = plan.work();
        if plan.setting != Setting::Bai && work.steps > limits.max_steps {
            return Err(Error::param(
                "horizon",
                plan.spec.horizon,
                format!(
                    "a plan of at most {:.1e} simulated rounds (this one: horizon x runs x configurations = {:.1e} rounds; policies that commit to episodes may need far fewer, but a per-step policy needs them all; {})",
                    limits.max_steps, work.steps, LIFT
                ),
            ));
        }
        Ok(plan)
    }

    /// Bytes the results of all runs take in memory (and about as much in the journal).
    pub fn memory_estimate(&self) -> u64 {
        self.cells
            .iter()
            .map(|c| c.width() as u64 * 8 * self.spec.runs)
            .fold(0, u64::saturating_add)
    }

    /// An estimate of the work of the whole plan: simulated rounds (regret settings: at most
    /// `horizon` per run and configuration, exactly that for per-step simulation) or samples (BAI:
    /// the lower bound `T*_eps ln(1/delta)` on the expected stopping time, capped by the horizon).
    pub fn work(&self) -> Work {
        let runs = self.spec.runs as f64;
        let h = self.spec.horizon as f64;
        if self.setting == Setting::Bai {
            let steps = self
                .cells
                .iter()
                .map(|c| {
                    let eps = c
                        .params()
                        .iter()
                        .find(|(k, _)| *k == "epsilon")
                        .map_or(f64::INFINITY, |p| p.1);
                    let lb = self
                        .bounds
                        .iter()
                        .find(|b| b.epsilon == eps)
                        .map_or(h, |b| b.lower_bound);
                    lb.min(h) * runs
                })
                .sum();
            Work {
                steps,
                unit: "samples (sum of the lower bounds on the expected stopping times)",
            }
        } else {
            Work {
                steps: h * runs * self.cells.len() as f64,
                unit: "rounds at most (horizon x runs x configurations)",
            }
        }
    }

    /// Number of jobs ([`crate::sim::JobSet`]: one per `(cell, run)`, or per `(group, run)` for
    /// grouped cells).
    pub fn jobs(&self) -> u64 {
        crate::sim::JobSet::new(&self.cells, self.spec.runs).len()
    }
}

/// What a plan may ask for before it is refused (`dpbandits run --allow-large` lifts all).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Configurations (cells) after sweep expansion.
    pub max_cells: u64,
    /// Checkpoints per run (`checkpoints.points` + `checkpoints.extra`).
    pub max_checkpoints: u64,
    /// Bytes of all results ([`Plan::memory_estimate`]).
    pub max_memory_bytes: u64,
    /// Simulated rounds of a regret plan ([`Plan::work`]); BAI plans are bounded by their
    /// stopping rule and sample cap instead.
    pub max_steps: f64,
}

impl Default for Limits {
    /// 10,000 configurations, 100,000 checkpoints, 2 GiB of results, 1e13 simulated rounds
    /// (about a day of one core at 1e8 rounds per second).
    fn default() -> Self {
        Limits {
            max_cells: 10_000,
            max_checkpoints: 100_000,
            max_memory_bytes: 2 << 30,
            max_steps: 1e13,
        }
    }
}

impl Limits {
    /// No limit.
    pub fn none() -> Self {
        Limits {
            max_cells: u64::MAX,
            max_checkpoints: u64::MAX,
            max_memory_bytes: u64::MAX,
            max_steps: f64::INFINITY,
        }
    }
}

const LIFT: &str = "a safety limit; `dpbandits run --allow-large` lifts it";

/// An estimate of a plan's work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Work {
    /// Rounds or samples.
    pub steps: f64,
    /// What `steps` counts.
    pub unit: &'static str,
}

fn bytes(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    }
}

/// A policy parameter written `"1/T"` (e.g. DP-SE's `beta`) is `1 / horizon`, so that it follows
/// `--horizon`.
fn per_horizon(t: &mut toml::Table, horizon: u64) {
    for (_, v) in t.iter_mut() {
        if v.as_str().is_some_and(|s| s.replace(' ', "") == "1/T") {
            *v = toml::Value::Float(1.0 / horizon as f64);
        }
    }
}

/// Number of tables [`expand_sweep`] makes of `t`, without making them.
fn sweep_size(t: &toml::Table) -> u64 {
    t.values()
        .map(|v| match v {
            toml::Value::Array(a) if a.iter().all(is_scalar) => (a.len() as u64).max(1),
            _ => 1,
        })
        .fold(1u64, u64::saturating_mul)
}

/// The cells of each setting and the environment facts for the manifest.
fn cells(
    problem: Problem,
    spec: &ExperimentSpec,
    grid: &Arc<CheckpointGrid>,
) -> Result<(Vec<Box<dyn Cell>>, serde_json::Value)> {
    match problem {
        Problem::Finite(Group { env, policies }) => {
            let env: Arc<dyn EnvConfig> = Arc::from(env);
            let mut cells: Vec<Box<dyn Cell>> = vec![];
            if let Some(t) = &spec.trial {
                let configs = policies.into_iter().map(|(i, cfg)| {
                    let p = TrialPolicy::new(
                        cfg.kind(),
                        cfg.label(),
                        cfg.params(),
                        cfg.guarantee(),
                        serde_json::Value::Null,
                    );
                    (i, p)
                });
                cells = trial_cells(TrialEnv::Finite(env.clone()), configs, t, spec, grid)?;
            } else {
                for (i, cfg) in policies {
                    let kind = cfg.kind();
                    let cell = FiniteCell::new(
                        env.clone(),
                        cfg,
                        grid.clone(),
                        spec.master_seed,
                        spec.simulation,
                    )
                    .at(|| format!("policy[{i}] ({kind})"))?;
                    cells.push(Box::new(cell));
                }
            }
            let (lo, hi) = env.reward_range();
            let info = serde_json::json!({
                "kind": env.kind(),
                "arms": env.num_arms(),
                "means": env.means(),
                "reward_range": [lo, hi],
                "instance": env.describe(),
                "seed_derivation": if spec.trial.is_some() {
                    crate::rng::describe(&[
                        crate::rng::ENV_RUN,
                        crate::rng::ENV_ARM,
                        crate::rng::TRIAL_ARRIVALS,
                        crate::rng::TRIAL_DELAYS,
                        crate::rng::TRIAL_DROPOUTS,
                    ])
                } else {
                    crate::rng::describe(&[crate::rng::ENV_RUN, crate::rng::ENV_ARM])
                },
            });
            Ok((cells, info))
        }
        Problem::Linear(Group { env, policies }) => {
            let env: Arc<dyn LinearEnvConfig> = Arc::from(env);
            let mut cells: Vec<Box<dyn Cell>> = vec![];
            if let Some(t) = &spec.trial {
                let configs = policies.into_iter().map(|(i, cfg)| {
                    let p = TrialPolicy::new(
                        cfg.kind(),
                        cfg.label(),
                        cfg.params(),
                        cfg.guarantee(),
                        cfg.describe(),
                    );
                    (i, p)
                });
                let cells = trial_cells(TrialEnv::Linear(env.clone()), configs, t, spec, grid)?;
                return Ok((cells, with_trial_seeds(env.describe())));
            }
            for (_, cfg) in policies {
                cells.push(Box::new(LinearCell::new(
                    env.clone(),
                    cfg,
                    grid.clone(),
                    spec.master_seed,
                )));
            }
            Ok((cells, env.describe()))
        }
        Problem::Contextual(Group { env, policies }) => {
            let mut configs: Vec<Box<dyn ContextualPolicyConfig>> = vec![];
            let policies_index: Vec<usize> = policies.iter().map(|(i, _)| *i).collect();
            for (i, cfg) in policies {
                // Build once to surface dimension errors at plan time.
                cfg.build(env.dim(), spec.horizon, 0)
                    .at(|| format!("policy[{i}] ({})", cfg.kind()))?;
                configs.push(cfg);
            }
            if let Some(t) = &spec.trial {
                let env: Arc<dyn ContextualEnvConfig> = Arc::from(env);
                let configs = configs.into_iter().zip(policies_index).map(|(cfg, i)| {
                    let p = TrialPolicy::new(
                        cfg.kind(),
                        cfg.label(),
                        cfg.params(),
                        cfg.guarantee(),
                        serde_json::Value::Null,
                    );
                    (i, p)
                });
                let cells = trial_cells(TrialEnv::Contextual(env.clone()), configs, t, spec, grid)?;
                return Ok((cells, with_trial_seeds(env.describe())));
            }
            let info = env.describe();
            let group = Arc::new(ContextualGroup::new(
                env,
                configs,
                grid.clone(),
                spec.master_seed,
            ));
            Ok((group.cells(), info))
        }
        Problem::Bai(Group { env, policies }) => {
            let env: Arc<dyn BaiEnvConfig> = Arc::from(env);
            let mut cells: Vec<Box<dyn Cell>> = vec![];
            if let Some(t) = &spec.trial {
                let mut configs = vec![];
                for (i, cfg) in policies {
                    // The facts a BAI cell writes (the summary reads the threshold from them).
                    let mut facts = serde_json::json!({
                        "threshold": cfg.threshold_name(),
                        "threshold_proved_delta_correct": cfg.threshold_proved(),
                    });
                    if let serde_json::Value::Object(more) = cfg.describe() {
                        for (key, x) in more {
                            facts[key] = x;
                        }
                    }
                    let p = TrialPolicy::new(
                        cfg.kind(),
                        cfg.label(),
                        vec![("epsilon", cfg.epsilon())],
                        cfg.guarantee(),
                        facts,
                    );
                    configs.push((i, p));
                }
                let cells = trial_cells(TrialEnv::Bai(env.clone()), configs, t, spec, grid)?;
                return Ok((cells, with_trial_seeds(env.describe())));
            }
            for (i, cfg) in policies {
                let kind = cfg.kind();
                let cell = BaiCell::new(cfg, env.clone(), spec.master_seed, spec.horizon)
                    .at(|| format!("policy[{i}] ({kind})"))?;
                cells.push(Box::new(cell));
            }
            Ok((cells, env.describe()))
        }
    }
}

/// The trial cells of `policies` (each with the index of its `[[policy]]` table; their tables
/// are filled here from the spec, one per sweep point in the planner's order): a cell per
/// policy and strategy, policy by policy.
fn trial_cells(
    env: TrialEnv,
    policies: impl IntoIterator<Item = (usize, TrialPolicy)>,
    t: &TrialSpec,
    spec: &ExperimentSpec,
    grid: &Arc<CheckpointGrid>,
) -> Result<Vec<Box<dyn Cell>>> {
    let trial = Arc::new(t.clone());
    // The expanded tables, in the planner's order (file order, sweep order).
    let mut tables = vec![];
    for (i, table) in spec.policy.iter().enumerate() {
        for mut t in expand_sweep(&without_kind(table))? {
            per_horizon(&mut t, spec.horizon);
            tables.push((i, t));
        }
    }
    let mut cells: Vec<Box<dyn Cell>> = vec![];
    for ((i, mut policy), (j, table)) in policies.into_iter().zip(tables) {
        debug_assert_eq!(i, j);
        policy.table = table;
        let kind = policy.kind;
        for &strategy in &t.strategies {
            cells.push(Box::new(
                TrialCell::new(
                    env.clone(),
                    policy.clone(),
                    strategy,
                    trial.clone(),
                    grid.clone(),
                    spec.master_seed,
                )
                .at(|| format!("policy[{i}] ({kind}), trial.strategies"))?,
            ));
        }
    }
    Ok(cells)
}

/// An environment's manifest facts with the trial's streams.
fn with_trial_seeds(mut info: serde_json::Value) -> serde_json::Value {
    if let serde_json::Value::Object(m) = &mut info {
        m.insert(
            "trial_seed_derivation".into(),
            crate::rng::describe(&[
                crate::rng::TRIAL_ARRIVALS,
                crate::rng::TRIAL_DELAYS,
                crate::rng::TRIAL_DROPOUTS,
            ])
            .into(),
        );
    }
    info
}

/// The characteristic times of a BAI problem for every `epsilon` of its cells (in first-seen
/// order), then `eps = inf`.
fn bai_bounds(
    env: &dyn BaiEnvConfig,
    policies: &[(usize, Box<dyn BaiConfig>)],
) -> Result<Vec<crate::bai::Bounds>> {
    let mut eps: Vec<f64> = vec![];
    for (_, c) in policies {
        if c.epsilon().is_finite() && !eps.contains(&c.epsilon()) {
            eps.push(c.epsilon());
        }
    }
    eps.push(f64::INFINITY);
    eps.iter()
        .map(|&e| crate::bai::Bounds::compute(env.instance(), e, env.delta()))
        .collect::<Result<Vec<_>>>()
        .at(|| "env".into())
}

fn env_kind(t: &toml::Table) -> Result<String> {
    match t.get("kind") {
        Some(toml::Value::String(s)) => Ok(s.clone()),
        Some(v) => Err(Error::param(
            "env.kind",
            v,
            "a string naming an environment (see `dpbandits list`)",
        )),
        None => Err(Error::param(
            "env.kind",
            "(missing)",
            "a string naming an environment (see `dpbandits list`)",
        )),
    }
}

/// A copy of `t` without its `kind` key.
pub(crate) fn without_kind(t: &toml::Table) -> toml::Table {
    let mut t = t.clone();
    t.remove("kind");
    t
}

/// Expand a `[[policy]]` table into one table per sweep point. Any array whose elements are all
/// numbers, strings or booleans is a sweep axis; the cartesian product is taken in key order.
///
/// # Errors
/// An empty list.
pub fn expand_sweep(t: &toml::Table) -> Result<Vec<toml::Table>> {
    let mut out = vec![toml::Table::new()];
    for (k, v) in t {
        let values: Vec<toml::Value> = match v {
            toml::Value::Array(a) if a.iter().all(is_scalar) => {
                if a.is_empty() {
                    return Err(Error::param(
                        k.as_str(),
                        "[]",
                        "a value, or a non-empty list of values to sweep over",
                    ));
                }
                a.clone()
            }
            other => vec![other.clone()],
        };
        out = out
            .into_iter()
            .flat_map(|base| {
                values.iter().map(move |val| {
                    let mut b = base.clone();
                    b.insert(k.clone(), val.clone());
                    b
                })
            })
            .collect();
    }
    Ok(out)
}

fn is_scalar(v: &toml::Value) -> bool {
    matches!(
        v,
        toml::Value::Integer(_)
            | toml::Value::Float(_)
            | toml::Value::String(_)
            | toml::Value::Boolean(_)
    )
}

/// The `kind` string of a `[[policy]]` table.
fn policy_kind(t: &toml::Table, i: usize) -> Result<String> {
    match t.get("kind") {
        Some(toml::Value::String(s)) => Ok(s.clone()),
        other => Err(Error::param(
            format!("policy[{i}].kind"),
            other.map_or("(missing)".to_string(), |v| v.to_string()),
            "a string naming an algorithm (see `dpbandits list`)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_expansion() {
        let t: toml::Table =
            toml::from_str("kind = 'adac_ucb'\nrho = [0.1, 1.0]\nbeta = [1, 2]").unwrap();
        let v = expand_sweep(&t).unwrap();
        assert_eq!(v.len(), 4);
        assert_eq!(v[0]["rho"].as_float(), Some(0.1));
        assert_eq!(v[1]["beta"].as_integer(), Some(2));
        let t: toml::Table = toml::from_str("rho = []").unwrap();
        assert!(expand_sweep(&t).is_err());
        for text in [
            "kind = 'x'\nrho = [0.1, 1.0]\nbeta = [1, 2, 3]",
            "rho = 1.0",
            "a = [[1], [2]]",
        ] {
            let t: toml::Table = toml::from_str(text).unwrap();
            let t = without_kind(&t);
            assert_eq!(
                sweep_size(&t),
                expand_sweep(&t).unwrap().len() as u64,
                "{text}"
            );
        }
    }

    /// The paper experiments are well inside the default limits (and their estimates are what
    /// the files say).
    #[test]
    fn every_experiment_file_plans_within_the_default_limits() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            // A trial design file (`[design]`) is `dpbandits design`'s, checked by its own tests.
            let design = std::fs::read_to_string(&p)
                .is_ok_and(|t| t.lines().any(|l| l.trim() == "[design]"));
            if p.extension().is_some_and(|x| x == "toml") && !design {
                let plan = Plan::from_file(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                assert!(plan.work().steps > 0.0);
                assert!(plan.memory_estimate() < Limits::default().max_memory_bytes);
                n += 1;
            }
        }
        assert!(n >= 10);
        let text = std::fs::read_to_string(dir.join("fig4a.toml")).unwrap();
        let plan = Plan::from_toml(&text).unwrap();
        let limits = Limits {
            max_cells: plan.cells.len() as u64 - 1,
            ..Limits::default()
        };
        let e = Plan::with_limits(plan.spec.clone(), &limits)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("policy = ") && e.contains("--allow-large"),
            "{e}"
        );
        let limits = Limits {
            max_memory_bytes: plan.memory_estimate() - 1,
            ..Limits::default()
        };
        let e = Plan::with_limits(plan.spec.clone(), &limits)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("runs = 100") && e.contains("bytes"), "{e}");
    }
}

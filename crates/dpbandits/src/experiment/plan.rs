//! From a spec to buildable cells.

use super::ExperimentSpec;
use crate::error::{Error, Result, ResultExt};
use crate::registry::{self, EnvParser, Setting};
use crate::sim::{Cell, CheckpointGrid};
use std::path::Path;

/// A validated experiment, ready to run.
#[derive(Debug)]
pub struct Plan {
    /// The file as written.
    pub spec: ExperimentSpec,
    /// The setting (from the environment kind).
    pub setting: Setting,
    /// Checkpoints (log grid plus figure horizons).
    pub grid: CheckpointGrid,
    /// One cell per expanded policy configuration.
    pub cells: Vec<Box<dyn Cell>>,
    /// Environment facts for the manifest.
    pub env_info: serde_json::Value,
}

impl Plan {
    /// Read and plan a file.
    pub fn from_file(path: &Path) -> Result<Plan> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
            path: path.display().to_string(),
            error: e,
        })?;
        Plan::from_toml(&text).map_err(|e| e.at(path.display().to_string()))
    }

    /// Plan TOML text.
    pub fn from_toml(text: &str) -> Result<Plan> {
        Plan::new(ExperimentSpec::from_toml(text)?)
    }

    /// Plan a parsed spec.
    pub fn new(spec: ExperimentSpec) -> Result<Plan> {
        let mut extra = spec.checkpoints.extra.clone();
        for f in &spec.figure {
            extra.extend(f.horizons());
        }
        let grid = CheckpointGrid::log(spec.horizon, spec.checkpoints.points, &extra)
            .at(|| "checkpoints".into())?;
        let kind = env_kind(&spec.env)?;
        let entry = registry::environment(&kind).at(|| "env".into())?;
        let (cells, env_info) = match entry.parse {
            EnvParser::Finite(parse) => {
                let env = parse(without_kind(&spec.env)).at(|| format!("env ({kind})"))?;
                super::finite::plan(&spec, env)?
            }
            EnvParser::Linear(parse) => {
                let env = parse(without_kind(&spec.env)).at(|| format!("env ({kind})"))?;
                super::linear::plan(&spec, env)?
            }
            EnvParser::Contextual(parse) => {
                let env = parse(without_kind(&spec.env)).at(|| format!("env ({kind})"))?;
                super::contextual::plan(&spec, env)?
            }
        };
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
            setting: entry.setting,
            grid,
            cells,
            env_info,
            spec,
        };
        for (i, f) in plan.spec.figure.iter().enumerate() {
            f.validate(&plan).at(|| format!("figure[{i}]"))?;
        }
        if let Some(c) = &plan.spec.comparison {
            c.validate(&plan.cells).at(|| "comparison".into())?;
        }
        Ok(plan)
    }
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
pub(crate) fn policy_kind(t: &toml::Table, i: usize) -> Result<String> {
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
    }
}

//! The experiment file as written.

use super::FigureSpec;
use crate::error::{Error, Result};
use crate::sim::SimMode;
use serde::{Deserialize, Serialize};

/// `[checkpoints]`: where regret is recorded.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSpec {
    /// Number of log-spaced points from 1 to the horizon (default 200).
    #[serde(default = "default_points", deserialize_with = "whole_usize")]
    pub points: usize,
    /// Extra rounds to include exactly.
    #[serde(default)]
    pub extra: Vec<u64>,
}

fn default_points() -> usize {
    200
}

/// A count written as an integer (`10_000_000`) or as a whole float (`1e7`).
fn whole<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<u64, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a whole number >= 0 (e.g. 10_000_000 or 1e7)")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<u64, E> {
            u64::try_from(v).map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<u64, E> {
            if v >= 0.0 && v.fract() == 0.0 && v < 18_446_744_073_709_551_616.0 {
                Ok(v as u64)
            } else {
                Err(E::invalid_value(serde::de::Unexpected::Float(v), &self))
            }
        }
    }
    d.deserialize_any(V)
}

fn whole_usize<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<usize, D::Error> {
    let v = whole(d)?;
    usize::try_from(v).map_err(|_| {
        serde::de::Error::invalid_value(serde::de::Unexpected::Unsigned(v), &"a smaller count")
    })
}

impl Default for CheckpointSpec {
    fn default() -> Self {
        CheckpointSpec {
            points: default_points(),
            extra: vec![],
        }
    }
}

/// A whole experiment file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSpec {
    /// Name (letters, digits, `-`, `_`, `.`); the default output folder is `results/<name>`.
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// The one master seed every random stream derives from.
    pub master_seed: u64,
    /// Horizon T (>= 1).
    #[serde(deserialize_with = "whole")]
    pub horizon: u64,
    /// Independent runs per policy (>= 1).
    #[serde(deserialize_with = "whole")]
    pub runs: u64,
    /// `episodes` (default, exact episode sums) or `steps`.
    #[serde(default)]
    pub simulation: SimMode,
    /// Checkpoint grid.
    #[serde(default)]
    pub checkpoints: CheckpointSpec,
    /// The environment: `kind` plus its parameters.
    pub env: toml::Table,
    /// The policies: each a `kind` plus parameters; lists of numbers are sweep axes.
    pub policy: Vec<toml::Table>,
    /// Figures beyond the default regret plot.
    #[serde(default)]
    pub figure: Vec<FigureSpec>,
    /// Equal-privacy comparison: budget conversions in the manifest and a comparison table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparison: Option<super::ComparisonSpec>,
    /// Set by [`ExperimentSpec::with_overrides`] (`--runs`, `--horizon`): what was changed from
    /// the file, printed on every figure and in `report.html` (a quick look is not the paper's
    /// setting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<String>,
}

impl ExperimentSpec {
    /// Parse TOML text.
    pub fn from_toml(text: &str) -> Result<Self> {
        let spec: ExperimentSpec = toml::from_str(text)
            .map_err(|e| Error::Config(e.to_string().trim_end().to_string()))?;
        spec.check_scalars()?;
        Ok(spec)
    }

    fn check_scalars(&self) -> Result<()> {
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            || self.name.starts_with('.')
        {
            return Err(Error::param(
                "name",
                format!("\"{}\"", self.name),
                "a non-empty name of letters, digits, '-', '_' or '.' (it names the output folder)",
            ));
        }
        if self.horizon == 0 {
            return Err(Error::param("horizon", 0, "an integer >= 1 (T)"));
        }
        if self.runs == 0 {
            return Err(Error::param("runs", 0, "an integer >= 1"));
        }
        if self.policy.is_empty() {
            return Err(Error::param(
                "policy",
                "(none)",
                "at least one [[policy]] table",
            ));
        }
        Ok(())
    }

    /// Apply the `--runs` / `--horizon` overrides of a quick look (the CLI's flags and the
    /// Python `run(..., runs=, horizon=)` arguments go through here, so they cannot differ).
    ///
    /// A new horizon `h` (file: `H`) rescales everything the file gives in absolute rounds, so
    /// that the quick look is the same experiment shrunk: the environment's `breakpoints`
    /// (`b -> round((b - 1) h / H) + 1`; refused with a hint when two would merge) and the extra
    /// checkpoints (same map). `gap_vs_param` horizons beyond `h` are dropped (`h` is used when
    /// none is left). Policy parameters in rounds (windows) are not rescaled: the note says so.
    /// For a BAI file the horizon is the sample cap, and `--horizon` sets it.
    pub fn with_overrides(&mut self, runs: Option<u64>, horizon: Option<u64>) -> Result<()> {
        let mut changed = vec![];
        if let Some(r) = runs {
            if r == 0 {
                return Err(Error::param("runs", 0, "an integer >= 1"));
            }
            if r != self.runs {
                changed.push(format!("runs = {r} (file: {})", self.runs));
            }
            self.runs = r;
        }
        if let Some(h) = horizon {
            if h == 0 {
                return Err(Error::param("horizon", 0, "an integer >= 1 (T)"));
            }
            let old = self.horizon;
            let bai = self.env.get("kind").and_then(|k| k.as_str()) == Some("bai_bernoulli");
            if h != old {
                let scale = |b: u64| -> u64 {
                    if b == 0 {
                        return 0;
                    }
                    (((b - 1) as f64 * h as f64 / old as f64).round() as u64 + 1).min(h.max(1))
                };
                if let Some(toml::Value::Array(bs)) = self.env.get_mut("breakpoints") {
                    let mut scaled = vec![];
                    for (i, b) in bs.iter().enumerate() {
                        let v = b
                            .as_integer()
                            .and_then(|v| u64::try_from(v).ok())
                            .or_else(|| b.as_float().filter(|f| f.fract() == 0.0 && *f >= 0.0).map(|f| f as u64))
                            .ok_or_else(|| Error::param(format!("env.breakpoints[{i}]"), b, "a round number"))?;
                        let s = scale(v);
                        if s < 2 || scaled.last().is_some_and(|&p| s <= p) {
                            return Err(Error::param(
                                "horizon",
                                h,
                                format!(
                                    "a horizon large enough to keep the file's breakpoints apart \
                                     (rescaled from T = {old}, breakpoint {v} would become {s}); \
                                     try --horizon {} or more, or give `breakpoint_fractions`",
                                    old / 100
                                ),
                            ));
                        }
                        scaled.push(s);
                    }
                    *bs = scaled
                        .iter()
                        .map(|&v| toml::Value::Integer(v as i64))
                        .collect();
                    changed.push(format!("env.breakpoints rescaled to {scaled:?}"));
                }
                let mut extra: Vec<u64> = self.checkpoints.extra.iter().map(|&x| scale(x)).collect();
                extra.retain(|&x| x >= 1 && x <= h);
                extra.dedup();
                self.checkpoints.extra = extra;
                if bai {
                    changed.push(format!("sample cap (horizon) = {h} (file: {old})"));
                } else {
                    changed.push(format!("horizon = {h} (file: {old})"));
                    let windows: Vec<&str> = self
                        .policy
                        .iter()
                        .flat_map(|t| t.keys())
                        .filter(|k| ["window", "gamma", "tau"].contains(&k.as_str()))
                        .map(|k| k.as_str())
                        .collect();
                    if !windows.is_empty() {
                        changed.push("window/discount parameters tuned for the file's horizon are not rescaled".into());
                    }
                }
            }
            self.horizon = h;
            for f in &mut self.figure {
                if let FigureSpec::GapVsParam { horizons, .. } = f {
                    horizons.retain(|&x| x <= h);
                    if horizons.is_empty() {
                        horizons.push(h);
                    }
                }
            }
        }
        if !changed.is_empty() {
            let mut all: Vec<String> = self.overrides.iter().cloned().collect();
            all.push(format!("quick look, not the file's setting: {}", changed.join("; ")));
            self.overrides = Some(all.join(" / "));
        }
        Ok(())
    }
}

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
    #[serde(default, deserialize_with = "whole_vec")]
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

/// A list of counts, each as in `whole`.
pub(super) fn whole_vec<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<u64>, D::Error> {
    #[derive(Deserialize)]
    struct W(#[serde(deserialize_with = "whole")] u64);
    Ok(Vec::<W>::deserialize(d)?.into_iter().map(|w| w.0).collect())
}

/// Parse a count as written on a command line or in a file: `1000000`, `1_000_000`, `1e6`,
/// `2.5e6` (a whole number >= 0; at most `u64::MAX`).
///
/// # Errors
/// A message naming the value and what is allowed.
pub fn parse_count(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim().replace('_', "");
    let bad = || format!("'{s}': expected a whole number >= 0, e.g. 100000, 100_000 or 1e5");
    if t.is_empty() || t.starts_with(['_', '-', '+']) || s.trim().starts_with('_') {
        return Err(bad());
    }
    if let Ok(v) = t.parse::<u64>() {
        return Ok(v);
    }
    if !t.contains(['e', 'E', '.']) || t.contains(['i', 'n', 'N']) {
        return Err(bad());
    }
    let f: f64 = t.parse().map_err(|_| bad())?;
    if f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f < 18_446_744_073_709_551_616.0 {
        // exact for every whole float below 2^64; beyond 2^53 floats are spaced > 1 apart, so
        // `1e17` means exactly 10^17 only if written as an integer: refuse the ambiguous ones
        if f > 9_007_199_254_740_992.0 {
            return Err(format!(
                "'{s}': a count above 2^53 written in scientific notation is not exact; write it in full (e.g. 1_000_000_000_000_000_000)"
            ));
        }
        Ok(f as u64)
    } else {
        Err(bad())
    }
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
    /// A simulated trial with delayed outcomes (`[trial]`, finite-armed only;
    /// `experiment/trial.rs`): the horizon is the number of patients, and every policy is run
    /// under each of the strategies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<super::TrialSpec>,
    /// Set by [`ExperimentSpec::with_overrides`] (`--runs`, `--horizon`): what was changed from
    /// the file, printed on every figure and in `report.html` (a quick look is not the paper's
    /// setting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<String>,
}

impl ExperimentSpec {
    /// Parse TOML text.
    pub fn from_toml(text: &str) -> Result<Self> {
        let spec: ExperimentSpec = toml::from_str(text).map_err(|e| {
            figure_error(text)
                .unwrap_or_else(|| Error::Config(e.to_string().trim_end().to_string()))
        })?;
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
                            .or_else(|| {
                                b.as_float()
                                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                                    .map(|f| f as u64)
                            })
                            .ok_or_else(|| {
                                Error::param(format!("env.breakpoints[{i}]"), b, "a round number")
                            })?;
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
                let mut extra: Vec<u64> =
                    self.checkpoints.extra.iter().map(|&x| scale(x)).collect();
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
            all.push(format!(
                "quick look, not the file's setting: {}",
                changed.join("; ")
            ));
            self.overrides = Some(all.join(" / "));
        }
        Ok(())
    }
}

/// A `[[figure]]` table that does not parse, named by its key (issue 45). A figure is an
/// internally tagged enum, which serde reads from a buffer without positions, so the TOML error
/// points at the table's header and names no field: here each key of the first failing table is
/// left out in turn, and the key whose absence cures the error (or turns it into "missing
/// field") is the one named, with its line: `figure[0].horizons = -10000 (line 11): invalid
/// type: ...`. `None` when no figure table is at fault (the TOML error stands).
fn figure_error(text: &str) -> Option<Error> {
    let doc: toml::Table = text.parse().ok()?;
    let figures = doc.get("figure")?.as_array()?;
    for (i, f) in figures.iter().enumerate() {
        let table = f.as_table()?;
        let parse = |t: &toml::Table| {
            toml::Value::Table(t.clone())
                .try_into::<super::figures::FigureSpec>()
                .err()
                .map(|e| e.to_string().trim_end().to_string())
        };
        let Some(whole) = parse(table) else {
            continue;
        };
        for (key, value) in table.iter().filter(|(k, _)| k.as_str() != "kind") {
            let mut without = table.clone();
            without.remove(key);
            let cured = match parse(&without) {
                None => true,
                Some(e) => e.contains(&format!("missing field `{key}`")),
            };
            if cured {
                // The value as written (a float's Display would spell 1e300 out in full).
                let (written, line) = match figure_key_line(text, i, key) {
                    Some((l, raw)) => (raw, format!(" (line {l})")),
                    None => (value.to_string(), String::new()),
                };
                return Some(Error::Config(format!(
                    "figure[{i}].{key} = {written}{line}: {whole}"
                )));
            }
        }
        return Some(Error::Config(format!("figure[{i}]: {whole}")));
    }
    None
}

/// The 1-based line of `key = ...` in the `i`-th `[[figure]]` table of `text`, and the value as
/// written there (up to a comment).
fn figure_key_line(text: &str, i: usize, key: &str) -> Option<(usize, String)> {
    let mut seen = 0usize;
    let mut inside = false;
    for (n, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.starts_with('[') {
            inside = l.starts_with("[[figure]]") && {
                seen += 1;
                seen == i + 1
            };
            continue;
        }
        if inside
            && let Some(rest) = l.strip_prefix(key)
            && let Some(raw) = rest.trim_start().strip_prefix('=')
        {
            let raw = raw.split(" #").next().unwrap_or(raw).trim();
            return Some((n + 1, raw.to_string()));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        assert_eq!(parse_count("1e7"), Ok(10_000_000));
        assert_eq!(parse_count("1E7"), Ok(10_000_000));
        assert_eq!(parse_count("1_000_000"), Ok(1_000_000));
        assert_eq!(parse_count("2.5e6"), Ok(2_500_000));
        assert_eq!(parse_count("100000"), Ok(100_000));
        assert_eq!(parse_count("1e15"), Ok(1_000_000_000_000_000));
        for bad in ["1.5", "-1", "1e-3", "abc", "", "inf", "nan", "1e30", "_1"] {
            let e = parse_count(bad).unwrap_err();
            assert!(
                e.contains(bad) && e.contains("expected") || e.contains("2^53"),
                "{bad}: {e}"
            );
        }
        let spec = ExperimentSpec::from_toml(
            "name = \"x\"\nmaster_seed = 1\nhorizon = 1e6\nruns = 1e1\n[checkpoints]\nextra = [2.5e5, 500_000]\n[env]\nkind = \"bernoulli\"\nmeans = [0.5, 0.4]\n[[policy]]\nkind = \"ucb1\"\n",
        )
        .unwrap();
        assert_eq!((spec.horizon, spec.runs), (1_000_000, 10));
        assert_eq!(spec.checkpoints.extra, vec![250_000, 500_000]);
    }

    /// `--horizon` rescales absolute breakpoints and extra checkpoints, refuses when they would
    /// merge (naming a horizon that works), sets the BAI cap, and leaves a note.
    #[test]
    fn horizon_override() {
        let text = "name = \"x\"\nmaster_seed = 1\nhorizon = 1_000_000\nruns = 20\n[checkpoints]\nextra = [250_001]\n[env]\nkind = \"piecewise_bernoulli\"\nmeans = [[0.8, 0.2], [0.2, 0.8]]\nbreakpoints = [250_001]\n[[policy]]\nkind = \"sw_ucb\"\nwindow = 4292\n";
        let mut s = ExperimentSpec::from_toml(text).unwrap();
        s.with_overrides(Some(10), Some(100_000)).unwrap();
        assert_eq!(
            s.env["breakpoints"].as_array().unwrap()[0].as_integer(),
            Some(25_001)
        );
        assert_eq!(s.checkpoints.extra, vec![25_001]);
        let note = s.overrides.clone().unwrap();
        assert!(
            note.contains("runs = 10 (file: 20)") && note.contains("not rescaled"),
            "{note}"
        );
        let mut s = ExperimentSpec::from_toml(text).unwrap();
        let e = s.with_overrides(None, Some(1)).unwrap_err().to_string();
        assert!(
            e.contains("horizon = 1") && e.contains("--horizon 10000"),
            "{e}"
        );
        let bai = "name = \"b\"\nmaster_seed = 1\nhorizon = 1e12\nruns = 20\n[env]\nkind = \"bai_bernoulli\"\nmeans = [0.5, 0.4]\ndelta = 0.1\n[[policy]]\nkind = \"eb_tci\"\n";
        let mut s = ExperimentSpec::from_toml(bai).unwrap();
        s.with_overrides(None, Some(1000)).unwrap();
        assert_eq!(s.horizon, 1000);
        assert!(s.overrides.unwrap().contains("sample cap (horizon) = 1000"));
        // no override, no note
        let mut s = ExperimentSpec::from_toml(text).unwrap();
        s.with_overrides(Some(20), Some(1_000_000)).unwrap();
        assert!(s.overrides.is_none());
    }

    /// Issue 45: an error inside a `[[figure]]` table names the key and its line.
    #[test]
    fn figure_errors_name_the_key() {
        let base = "name = \"f\"\nmaster_seed = 1\nhorizon = 1000\nruns = 2\n[env]\nkind = \"bernoulli\"\nmeans = [0.5, 0.4]\n[[policy]]\nkind = \"ucb1\"\n[[figure]]\nkind = \"gap_vs_param\"\nprivate = \"ucb1\"\nbaseline = \"ucb1\"\n";
        for (extra, want) in [
            (
                "horizons = -10000\n",
                "figure[0].horizons = -10000 (line 14): ",
            ),
            (
                "horizons = [100]\nparam = 1e300\n",
                "figure[0].param = 1e300 (line 15): ",
            ),
        ] {
            let e = ExperimentSpec::from_toml(&format!("{base}{extra}"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(want), "{e}");
        }
        let ok = ExperimentSpec::from_toml(&format!("{base}horizons = [100]\n"));
        assert!(ok.is_ok());
    }
}

//! User-supplied arm features (`kind = "contextual_file"`): replay a real feature set as the
//! decision sets of a linear contextual bandit.
//!
//! # File formats
//! A feature file holds `n` contexts; context `c` is a decision set of `k_c >= 1` actions in `R^d`.
//! * **NPY** (`.npy`, NumPy format 1.0/2.0/3.0): one C-ordered array of shape `(n, K, d)`
//!   (`n` contexts of `K` actions each), dtype little-endian `float64` (`<f8`) or `float32` (`<f4`).
//! * **CSV** (`.csv`): one line per action, `context,f_1,...,f_d`. `context` is the 0-based context
//!   index; the lines of one context are consecutive and contexts appear in order 0, 1, 2, ...
//!   without gaps (a gap would be an empty action set). Decision sets may have different sizes.
//!   Blank lines and lines starting with `#` are ignored; a first line whose first field is not a
//!   number is a header and is skipped.
//!
//! Every feature must be finite. Any violation is an error naming the file, the line or index, the
//! field and the value.
//!
//! # Replay rule
//! Round `t` (0-based) uses context `t mod n` with `order = "cycle"` (default: every run sees the
//! same sequence, only the reward noise differs), or a context drawn uniformly with replacement
//! from `Stream::Context` (path `[0, run]`) with `order = "sample"`.
//!
//! # Rewards
//! `r_t = <theta*, a_t> + eta_t`, `eta_t ~ N(0, noise_sd^2)` from `Stream::Env` (path `[0, run]`),
//! one draw per round shared by all actions (common random numbers). `theta` is given, or drawn
//! uniformly on the unit sphere from `Stream::Instance` of the master seed. `unit_ball = true`
//! projects every action onto the unit ball at load time (Assumption 1).

use super::gaussian::{check_dim, check_theta, uniform_sphere};
use super::{ActionSet, ContextualEnvConfig, ContextualEnvironment};
use crate::config::{EnvInfo, Setting};
use crate::error::{Error, Result};
use crate::rng::SimRng;
use rand::RngExt;
use serde::Deserialize;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Registry record of the `contextual_file` environment.
pub const CONTEXTUAL_FILE: EnvInfo = EnvInfo {
    kind: "contextual_file",
    setting: Setting::Contextual,
    description: "decision sets replayed from a feature file (.npy of shape (n, K, d), or .csv lines 'context,f_1..f_d'), Gaussian reward noise",
    source: file!(),
};

/// How rounds map to the contexts of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextOrder {
    /// Round `t` uses context `t mod n`.
    #[default]
    Cycle,
    /// Each round draws a context uniformly (with replacement) from the context stream.
    Sample,
}

/// Decision sets loaded from a file: `n` contexts, row-major features.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureTable {
    d: usize,
    /// `features[starts[c]*d .. starts[c+1]*d]` are the actions of context `c`.
    features: Vec<f64>,
    starts: Vec<usize>,
}

impl FeatureTable {
    /// Build from contexts given as lists of actions; checks shape and finiteness.
    /// `source` names the data in errors.
    pub fn from_contexts(source: &str, contexts: &[Vec<Vec<f64>>]) -> Result<Self> {
        let Some(d) = contexts.first().and_then(|c| c.first()).map(Vec::len) else {
            return Err(Error::param(
                source,
                "no contexts",
                "at least one context with at least one action",
            ));
        };
        let mut features = vec![];
        let mut starts = vec![0];
        for (c, acts) in contexts.iter().enumerate() {
            if acts.is_empty() {
                return Err(empty_set(source, c));
            }
            for (i, a) in acts.iter().enumerate() {
                if a.len() != d {
                    return Err(Error::param(
                        format!("{source}: context {c}, action {i}"),
                        format!("{} features", a.len()),
                        format!("d = {d} features, like the first action"),
                    ));
                }
                for (j, &x) in a.iter().enumerate() {
                    finite_feature(source, c, i, j, x)?;
                }
                features.extend_from_slice(a);
            }
            starts.push(starts.last().copied().unwrap_or(0) + acts.len());
        }
        Self::checked(source, d, features, starts)
    }

    fn checked(source: &str, d: usize, features: Vec<f64>, starts: Vec<usize>) -> Result<Self> {
        check_dim(d).map_err(|e| e.at(source))?;
        Ok(FeatureTable {
            d,
            features,
            starts,
        })
    }

    /// Load a `.npy` or `.csv` file (see the module docs for the formats).
    pub fn load(path: &Path) -> Result<Self> {
        let src = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| Error::Io {
            path: src.clone(),
            error: e,
        })?;
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("npy") => parse_npy(&src, &bytes),
            Some(e) if e.eq_ignore_ascii_case("csv") => {
                let text = String::from_utf8(bytes)
                    .map_err(|_| Error::param(&src, "non-UTF-8 bytes", "a UTF-8 text CSV file"))?;
                parse_csv(&src, &text)
            }
            other => Err(Error::param(
                "path",
                format!("\"{src}\" (extension {:?})", other.unwrap_or("")),
                "a .npy file of shape (n, K, d) or a .csv file with lines 'context,f_1,...,f_d'",
            )),
        }
    }

    /// Dimension.
    pub fn dim(&self) -> usize {
        self.d
    }
    /// Number of contexts.
    pub fn contexts(&self) -> usize {
        self.starts.len() - 1
    }
    /// Largest decision-set size.
    pub fn max_actions(&self) -> usize {
        self.starts
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(0)
    }
    /// The decision set of context `c`.
    pub fn actions(&self, c: usize) -> ActionSet<'_> {
        let (a, b) = (self.starts[c], self.starts[c + 1]);
        ActionSet {
            d: self.d,
            k: b - a,
            features: &self.features[a * self.d..b * self.d],
        }
    }

    fn project_to_unit_ball(&mut self) {
        for a in self.features.chunks_exact_mut(self.d) {
            let n = a.iter().map(|x| x * x).sum::<f64>().sqrt();
            if n > 1.0 {
                a.iter_mut().for_each(|x| *x /= n);
            }
        }
    }
}

fn empty_set(source: &str, c: usize) -> Error {
    Error::param(
        format!("{source}: context {c}"),
        "an empty action set",
        "at least one action per context",
    )
}

fn finite_feature(source: &str, c: usize, i: usize, j: usize, x: f64) -> Result<()> {
    if x.is_finite() {
        Ok(())
    } else {
        Err(Error::param(
            format!("{source}: context {c}, action {i}, feature {j}"),
            x,
            "a finite number",
        ))
    }
}

fn parse_csv(src: &str, text: &str) -> Result<FeatureTable> {
    let mut d: Option<usize> = None;
    let mut features = vec![];
    let mut starts = vec![0usize];
    let mut current: Option<usize> = None;
    let mut count = 0usize;
    let mut seen_data = false;
    for (ln, line) in text.lines().enumerate() {
        let line_no = ln + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if !seen_data && fields[0].parse::<f64>().is_err() {
            seen_data = true; // header
            continue;
        }
        seen_data = true;
        let at = |field: &str| format!("{src}: line {line_no}, {field}");
        let ctx: usize = fields[0].parse().map_err(|_| {
            Error::param(
                at("context"),
                format!("\"{}\"", fields[0]),
                "a 0-based integer context index",
            )
        })?;
        let nf = fields.len() - 1;
        match d {
            None if nf == 0 => {
                return Err(Error::param(
                    at("features"),
                    "none",
                    "at least one feature after the context index",
                ));
            }
            None => d = Some(nf),
            Some(d) if d != nf => {
                return Err(Error::param(
                    at("features"),
                    format!("{nf} features"),
                    format!("d = {d} features, like the first data line"),
                ));
            }
            _ => {}
        }
        let expected_next = current.map_or(0, |c| c + 1);
        if current != Some(ctx) {
            if ctx != expected_next {
                if ctx > expected_next {
                    return Err(empty_set(src, expected_next).at(at("context")));
                }
                return Err(Error::param(
                    at("context"),
                    ctx,
                    format!(
                        "context {} or {} (lines of a context are consecutive, contexts in order 0, 1, 2, ...)",
                        current.unwrap_or(0),
                        expected_next
                    ),
                ));
            }
            if current.is_some() {
                starts.push(starts.last().copied().unwrap_or(0) + count);
            }
            current = Some(ctx);
            count = 0;
        }
        for (j, f) in fields[1..].iter().enumerate() {
            let x: f64 = f.parse().map_err(|_| {
                Error::param(at(&format!("feature {j}")), format!("\"{f}\""), "a number")
            })?;
            if !x.is_finite() {
                return Err(Error::param(
                    at(&format!("feature {j}")),
                    x,
                    "a finite number",
                ));
            }
            features.push(x);
        }
        count += 1;
    }
    let (Some(d), Some(_)) = (d, current) else {
        return Err(Error::param(
            src,
            "no data lines",
            "lines 'context,f_1,...,f_d' (at least one context with one action)",
        ));
    };
    starts.push(starts.last().copied().unwrap_or(0) + count);
    FeatureTable::checked(src, d, features, starts)
}

fn parse_npy(src: &str, b: &[u8]) -> Result<FeatureTable> {
    let bad = |what: &str| {
        Error::param(
            src,
            what.to_string(),
            "a NumPy .npy file (format 1.0-3.0) holding one C-ordered float64/float32 array of shape (n, K, d)",
        )
    };
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err(bad("no NPY magic string"));
    }
    let (hlen, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        v => return Err(bad(&format!("NPY format version {v}"))),
    };
    let header = b
        .get(start..start + hlen)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| bad("a truncated or non-text header"))?;
    let field = |key: &str| -> Option<&str> {
        let i = header.find(&format!("'{key}'"))?;
        let rest = &header[i + key.len() + 2..];
        let rest = rest[rest.find(':')? + 1..].trim_start();
        Some(rest)
    };
    let descr = field("descr").ok_or_else(|| bad("a header without 'descr'"))?;
    let descr = descr
        .trim_start_matches(['\'', '"'])
        .split(['\'', '"'])
        .next()
        .unwrap_or("");
    let width = match descr {
        "<f8" | "f8" => 8,
        "<f4" | "f4" => 4,
        other => {
            return Err(Error::param(
                format!("{src}: dtype"),
                format!("'{other}'"),
                "little-endian float64 ('<f8') or float32 ('<f4')",
            ));
        }
    };
    let fortran = field("fortran_order").ok_or_else(|| bad("a header without 'fortran_order'"))?;
    if fortran.starts_with("True") {
        return Err(Error::param(
            format!("{src}: fortran_order"),
            "True",
            "False (C order; save with numpy.ascontiguousarray)",
        ));
    }
    let shape = field("shape").ok_or_else(|| bad("a header without 'shape'"))?;
    let shape = &shape[1..shape.find(')').ok_or_else(|| bad("a malformed shape"))?];
    let dims: Vec<usize> = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse::<usize>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| bad("a malformed shape"))?;
    let [n, k, d] = dims[..] else {
        return Err(Error::param(
            format!("{src}: shape"),
            format!("({shape})"),
            "a 3-D array of shape (n_contexts, K, d)",
        ));
    };
    if n == 0 {
        return Err(Error::param(
            format!("{src}: shape"),
            format!("({shape})"),
            "at least one context (n >= 1)",
        ));
    }
    if k == 0 {
        return Err(empty_set(src, 0).at(format!("{src}: shape ({shape})")));
    }
    if d == 0 {
        return Err(Error::param(
            format!("{src}: shape"),
            format!("({shape})"),
            "at least one feature (d >= 1)",
        ));
    }
    let count = n * k * d;
    let data = &b[start + hlen..];
    if data.len() != count * width {
        return Err(Error::param(
            format!("{src}: data"),
            format!("{} bytes", data.len()),
            format!(
                "{} bytes for shape ({n}, {k}, {d}) of {descr}",
                count * width
            ),
        ));
    }
    let mut features = Vec::with_capacity(count);
    for (idx, chunk) in data.chunks_exact(width).enumerate() {
        let x = if width == 8 {
            f64::from_le_bytes(chunk.try_into().expect("8 bytes"))
        } else {
            f64::from(f32::from_le_bytes(chunk.try_into().expect("4 bytes")))
        };
        finite_feature(src, idx / (k * d), (idx / d) % k, idx % d, x)?;
        features.push(x);
    }
    let starts = (0..=n).map(|c| c * k).collect();
    FeatureTable::checked(src, d, features, starts)
}

/// `kind = "contextual_file"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextualFileConfig {
    /// Feature file (`.npy` or `.csv`); a relative path is relative to the working directory.
    pub path: PathBuf,
    /// Replay rule (default `cycle`).
    #[serde(default)]
    pub order: ContextOrder,
    /// theta*, length `d` (default: uniform on the unit sphere, from the master seed).
    #[serde(default)]
    pub theta: Option<Vec<f64>>,
    /// Standard deviation of the Gaussian reward noise (default 1).
    #[serde(default = "one")]
    pub noise_sd: f64,
    /// Project every action onto the unit ball at load time (default false).
    #[serde(default)]
    pub unit_ball: bool,
    #[serde(skip)]
    table: Option<Arc<FeatureTable>>,
    #[serde(skip)]
    means: Option<Arc<Vec<f64>>>,
    #[serde(skip)]
    best: Option<Arc<Vec<f64>>>,
    #[serde(skip)]
    theta_star: Vec<f64>,
}

fn one() -> f64 {
    1.0
}

impl ContextualFileConfig {
    /// A configuration replaying an already loaded table.
    pub fn from_table(table: FeatureTable, theta: Option<Vec<f64>>) -> Self {
        ContextualFileConfig {
            path: PathBuf::from("(in memory)"),
            order: ContextOrder::Cycle,
            theta,
            noise_sd: 1.0,
            unit_ball: false,
            table: Some(Arc::new(table)),
            means: None,
            best: None,
            theta_star: vec![],
        }
    }

    /// Check the fields and load the file (if not loaded yet).
    pub fn validate(&mut self) -> Result<()> {
        if !(self.noise_sd.is_finite() && self.noise_sd >= 0.0) {
            return Err(Error::param(
                "noise_sd",
                self.noise_sd,
                "a finite number >= 0",
            ));
        }
        if self.table.is_none() {
            let mut t = FeatureTable::load(&self.path)?;
            if self.unit_ball {
                t.project_to_unit_ball();
            }
            self.table = Some(Arc::new(t));
        }
        let d = self.table.as_ref().map_or(0, |t| t.dim());
        if let Some(th) = &self.theta {
            check_theta(th, d)?;
        }
        Ok(())
    }

    /// The loaded table.
    pub fn table(&self) -> Option<&FeatureTable> {
        self.table.as_deref()
    }
}

impl ContextualEnvConfig for ContextualFileConfig {
    fn kind(&self) -> &'static str {
        CONTEXTUAL_FILE.kind
    }
    fn dim(&self) -> usize {
        self.table.as_ref().map_or(0, |t| t.dim())
    }
    fn max_actions(&self) -> usize {
        self.table.as_ref().map_or(0, |t| t.max_actions())
    }
    fn instantiate(&mut self, master_seed: u64) -> Result<()> {
        self.validate()?;
        let table = self.table.clone().expect("validated");
        let d = table.dim();
        self.theta_star = match &self.theta {
            Some(t) => t.clone(),
            None => uniform_sphere(master_seed, d),
        };
        let mut means = Vec::with_capacity(table.features.len() / d);
        let mut best = Vec::with_capacity(table.contexts());
        for c in 0..table.contexts() {
            let acts = table.actions(c);
            let mut b = f64::NEG_INFINITY;
            for i in 0..acts.k {
                let m: f64 = acts
                    .action(i)
                    .iter()
                    .zip(&self.theta_star)
                    .map(|(x, t)| x * t)
                    .sum();
                b = b.max(m);
                means.push(m);
            }
            best.push(b);
        }
        self.means = Some(Arc::new(means));
        self.best = Some(Arc::new(best));
        Ok(())
    }
    fn theta(&self) -> &[f64] {
        &self.theta_star
    }
    fn build(&self, master_seed: u64, run: u64) -> Result<Box<dyn ContextualEnvironment>> {
        let (Some(table), Some(means), Some(best)) = (&self.table, &self.means, &self.best) else {
            return Err(Error::Config(
                "contextual_file: instantiate() must be called before build()".into(),
            ));
        };
        Ok(Box::new(ContextualFile {
            table: table.clone(),
            means: means.clone(),
            best: best.clone(),
            order: self.order,
            noise_sd: self.noise_sd,
            contexts: crate::rng::context_rng(master_seed, run),
            rewards: crate::rng::context_reward_rng(master_seed, run),
            current: 0,
            eta: 0.0,
        }))
    }
    fn action_norm_bound(&self) -> Option<f64> {
        let t = self.table.as_ref()?;
        let m = t
            .features
            .chunks_exact(t.d)
            .map(|a| a.iter().map(|x| x * x).sum::<f64>().sqrt())
            .fold(0.0f64, f64::max);
        Some(m)
    }
    fn describe(&self) -> serde_json::Value {
        let t = self.table.as_deref();
        json!({
            "kind": self.kind(),
            "path": self.path.display().to_string(),
            "contexts": t.map(|t| t.contexts()),
            "d": t.map(|t| t.dim()),
            "max_actions": t.map(|t| t.max_actions()),
            "order": format!("{:?}", self.order).to_lowercase(),
            "unit_ball": self.unit_ball,
            "max_action_norm": self.action_norm_bound(),
            "reward_noise": format!("N(0, {}^2), one draw per round shared by all actions (common random numbers)", self.noise_sd),
            "theta_star": self.theta_star,
            "theta_source": if self.theta.is_some() { "given" } else { "uniform on the unit sphere: derive_seed(master_seed, Instance, [0]) (rng::instance::CONTEXTUAL_THETA)" },
        })
    }
}

/// The replay environment of one run.
#[derive(Debug, Clone)]
pub struct ContextualFile {
    table: Arc<FeatureTable>,
    means: Arc<Vec<f64>>,
    best: Arc<Vec<f64>>,
    order: ContextOrder,
    noise_sd: f64,
    contexts: SimRng,
    rewards: SimRng,
    current: usize,
    eta: f64,
}

impl ContextualEnvironment for ContextualFile {
    fn dim(&self) -> usize {
        self.table.d
    }
    #[inline]
    fn next_round(&mut self, t: u64) {
        let n = self.table.contexts();
        self.current = match self.order {
            ContextOrder::Cycle => (t % n as u64) as usize,
            ContextOrder::Sample => self.contexts.random_range(0..n),
        };
        let z: f64 =
            rand_distr::Distribution::sample(&rand_distr::StandardNormal, &mut self.rewards);
        self.eta = self.noise_sd * z;
    }
    fn actions(&self) -> ActionSet<'_> {
        self.table.actions(self.current)
    }
    fn means(&self) -> &[f64] {
        let (a, b) = (
            self.table.starts[self.current],
            self.table.starts[self.current + 1],
        );
        &self.means[a..b]
    }
    fn best_mean(&self) -> f64 {
        self.best[self.current]
    }
    fn noise(&self) -> f64 {
        self.eta
    }
}

impl crate::config::Config for ContextualFileConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        ContextualFileConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_roundtrip_and_errors() {
        let t = parse_csv("f.csv", "context,x,y\n0,1,0\n0,0,1\n1,0.5,0.5\n").unwrap();
        assert_eq!((t.dim(), t.contexts(), t.max_actions()), (2, 2, 2));
        assert_eq!(t.actions(1).features, &[0.5, 0.5]);
        let e = parse_csv("f.csv", "0,1,0\n2,0,1\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("context 1") && e.contains("empty action set"),
            "{e}"
        );
        let e = parse_csv("f.csv", "0,1,0\n0,1\n").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("1 features"), "{e}");
        let e = parse_csv("f.csv", "0,1,NaN\n").unwrap_err().to_string();
        assert!(e.contains("feature 1") && e.contains("NaN"), "{e}");
        let e = parse_csv("f.csv", "# nothing\n").unwrap_err().to_string();
        assert!(e.contains("no data lines"), "{e}");
        let e = parse_csv("f.csv", "0,1,2\n1,1,x\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 2, feature 1") && e.contains("\"x\""),
            "{e}"
        );
    }
}

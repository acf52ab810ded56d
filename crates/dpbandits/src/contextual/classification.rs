//! A labelled classification dataset as a contextual bandit (`kind = "contextual_classification"`):
//! the supervised-to-bandit conversion (Dudik, Langford & Li 2011, "Doubly Robust Policy
//! Evaluation and Learning"; Bietti, Agarwal & Langford 2021, "A Contextual Bandit Bake-off").
//!
//! # File format
//! The layout scikit-learn ships in `sklearn/datasets/data/*.csv` (iris, wine_data,
//! breast_cancer; `scripts/fetch-sklearn-data` fetches them): a first line
//! `n_samples,n_features,class_name_0,...` then `n_samples` lines `x_1,...,x_p,label` with a
//! 0-based integer label. Blank lines and lines starting with `#` are ignored. Every feature must be
//! finite, every label in `0..K` (`K` = the number of class names), each line `p + 1` fields, and
//! the number of lines `n_samples`: any violation is an error naming the file, the line and the
//! field.
//!
//! # Conversion (exact encoding)
//! * one arm per class (`K` arms); round `t` draws one example `(x, y)` uniformly with replacement
//!   from `Stream::Context` (path `[0, run]`), the same examples for every policy of a run
//!   (common random numbers);
//! * context `u = (1, z) / ||(1, z)||`, `z` the features z-scored over the dataset (population
//!   standard deviation; a constant feature is left at 0), so `||u|| = 1`;
//! * disjoint action features: the action of class `c` is `u` in block `c` of a `K (p + 1)`
//!   vector, zeros elsewhere (`d = K (p + 1)`; `||a|| = 1`);
//! * reward `1{c = y}`, without noise; the best action earns 1, so regret counts the wrong
//!   classes played (reward = T - regret). Rewards lie in `[0, 1]` and actions in the unit ball:
//!   Assumption 1 of AdaC-OFUL holds exactly. The linear reward model is misspecified (as in the
//!   bake-off); [`ContextualEnvConfig::theta`] is empty.

use super::gaussian::check_dim;
use super::{ActionSet, ContextualEnvConfig, ContextualEnvironment};
use crate::config::{EnvInfo, Setting};
use crate::error::{Error, Result};
use crate::rng::SimRng;
use rand::RngExt;
use serde::Deserialize;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

/// Registry record of the `contextual_classification` environment.
pub const CONTEXTUAL_CLASSIFICATION: EnvInfo = EnvInfo {
    kind: "contextual_classification",
    setting: Setting::Contextual,
    description: "a labelled classification dataset (scikit-learn CSV layout) as a contextual bandit: one arm per class, disjoint unit-norm features, reward 1 for the true class",
    source: file!(),
};

/// A labelled dataset, already encoded: `n` examples, `K` classes, `p` raw features.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelledData {
    /// Encoded contexts `u` (length `p + 1` each, unit norm), row-major.
    contexts: Vec<f64>,
    labels: Vec<usize>,
    classes: usize,
    p: usize,
}

impl LabelledData {
    /// Parse the scikit-learn CSV layout (see the module docs); `src` names the data in errors.
    pub fn parse(src: &str, text: &str) -> Result<Self> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
        let Some((hl, header)) = lines.next() else {
            return Err(Error::param(
                src,
                "no lines",
                "a header 'n_samples,n_features,class names...' then one line per example",
            ));
        };
        let h: Vec<&str> = header.split(',').map(str::trim).collect();
        let num = |i: usize, what: &str| -> Result<usize> {
            h.get(i)
                .and_then(|s| s.parse::<usize>().ok())
                .ok_or_else(|| {
                    Error::param(
                        format!("{src}: line {hl}, {what}"),
                        format!("\"{}\"", h.get(i).copied().unwrap_or("")),
                        "a positive integer (header 'n_samples,n_features,class names...')",
                    )
                })
        };
        let n = num(0, "n_samples")?;
        let p = num(1, "n_features")?;
        let classes = h.len().saturating_sub(2);
        if n == 0 || p == 0 || classes < 2 {
            return Err(Error::param(
                format!("{src}: line {hl}, header"),
                format!("\"{header}\""),
                "n_samples >= 1, n_features >= 1 and at least two class names",
            ));
        }
        let mut raw = Vec::with_capacity(n * p);
        let mut labels = Vec::with_capacity(n);
        for (ln, line) in lines {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            if f.len() != p + 1 {
                return Err(Error::param(
                    format!("{src}: line {ln}"),
                    format!("{} fields", f.len()),
                    format!(
                        "{} fields (n_features = {p} features, then the label)",
                        p + 1
                    ),
                ));
            }
            for (j, s) in f[..p].iter().enumerate() {
                let x: f64 = s
                    .parse()
                    .ok()
                    .filter(|x: &f64| x.is_finite())
                    .ok_or_else(|| {
                        Error::param(
                            format!("{src}: line {ln}, feature {j}"),
                            format!("\"{s}\""),
                            "a finite number",
                        )
                    })?;
                raw.push(x);
            }
            let y: usize = f[p].parse().ok().filter(|&y| y < classes).ok_or_else(|| {
                Error::param(
                    format!("{src}: line {ln}, label"),
                    format!("\"{}\"", f[p]),
                    format!("an integer class index in 0..{classes}"),
                )
            })?;
            labels.push(y);
        }
        if labels.len() != n {
            return Err(Error::param(
                format!("{src}: examples"),
                labels.len(),
                format!("n_samples = {n} (the header's count)"),
            ));
        }
        check_dim(classes * (p + 1)).map_err(|e| e.at(src))?;
        Ok(Self::encode(&raw, labels, classes, p))
    }

    fn encode(raw: &[f64], labels: Vec<usize>, classes: usize, p: usize) -> Self {
        let n = labels.len() as f64;
        let mut mean = vec![0.0; p];
        for row in raw.chunks_exact(p) {
            row.iter().zip(&mut mean).for_each(|(x, m)| *m += x);
        }
        mean.iter_mut().for_each(|m| *m /= n);
        let mut var = vec![0.0; p];
        for row in raw.chunks_exact(p) {
            for ((x, m), v) in row.iter().zip(&mean).zip(&mut var) {
                *v += (x - m) * (x - m);
            }
        }
        let sd: Vec<f64> = var.iter().map(|v| (v / n).sqrt()).collect();
        let mut contexts = Vec::with_capacity(labels.len() * (p + 1));
        for row in raw.chunks_exact(p) {
            let start = contexts.len();
            contexts.push(1.0);
            for ((x, m), s) in row.iter().zip(&mean).zip(&sd) {
                contexts.push(if *s > 0.0 { (x - m) / s } else { 0.0 });
            }
            let u = &mut contexts[start..];
            let norm = u.iter().map(|x| x * x).sum::<f64>().sqrt();
            u.iter_mut().for_each(|x| *x /= norm);
        }
        LabelledData {
            contexts,
            labels,
            classes,
            p,
        }
    }

    /// Number of examples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }
    /// Whether there are no examples (never, after [`LabelledData::parse`]).
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
    /// Number of classes (arms).
    pub fn classes(&self) -> usize {
        self.classes
    }
    /// Dimension of the action features, `K (p + 1)`.
    pub fn dim(&self) -> usize {
        self.classes * (self.p + 1)
    }
}

/// Configuration of `contextual_classification`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextualClassificationConfig {
    /// The dataset file (scikit-learn CSV layout), relative to the working directory.
    pub path: PathBuf,
    /// A name for outputs (default: the file name).
    #[serde(default)]
    pub dataset: Option<String>,
    #[serde(skip)]
    data: Option<Arc<LabelledData>>,
}

impl ContextualClassificationConfig {
    /// From an already parsed dataset (tests, Python).
    pub fn from_data(data: LabelledData) -> Self {
        ContextualClassificationConfig {
            path: PathBuf::from("(in memory)"),
            dataset: None,
            data: Some(Arc::new(data)),
        }
    }

    /// Load and encode the file (once).
    pub fn validate(&mut self) -> Result<()> {
        if self.data.is_none() {
            let src = self.path.display().to_string();
            let text = std::fs::read_to_string(&self.path).map_err(|e| Error::Io {
                path: format!(
                    "{src} (env.path; the scikit-learn datasets are fetched by scripts/fetch-sklearn-data)"
                ),
                error: e,
            })?;
            self.data = Some(Arc::new(LabelledData::parse(&src, &text)?));
        }
        Ok(())
    }
}

impl ContextualEnvConfig for ContextualClassificationConfig {
    fn kind(&self) -> &'static str {
        CONTEXTUAL_CLASSIFICATION.kind
    }
    fn dim(&self) -> usize {
        self.data.as_ref().map_or(0, |d| d.dim())
    }
    fn max_actions(&self) -> usize {
        self.data.as_ref().map_or(0, |d| d.classes())
    }
    fn instantiate(&mut self, _master_seed: u64) -> Result<()> {
        self.validate()
    }
    fn theta(&self) -> &[f64] {
        &[]
    }
    fn build(&self, master_seed: u64, run: u64) -> Result<Box<dyn ContextualEnvironment>> {
        let Some(data) = &self.data else {
            return Err(Error::Config(
                "contextual_classification: instantiate() must be called before build()".into(),
            ));
        };
        let k = data.classes();
        Ok(Box::new(ContextualClassification {
            data: data.clone(),
            examples: crate::rng::context_rng(master_seed, run),
            features: vec![0.0; k * data.dim()],
            means: vec![0.0; k],
        }))
    }
    fn action_norm_bound(&self) -> Option<f64> {
        Some(1.0)
    }
    fn describe(&self) -> serde_json::Value {
        let d = self.data.as_deref();
        json!({
            "kind": self.kind(),
            "path": self.path.display().to_string(),
            "dataset": self.dataset,
            "examples": d.map(|d| d.len()),
            "classes": d.map(|d| d.classes()),
            "d": d.map(|d| d.dim()),
            "encoding": "u = (1, z)/||(1, z)||, z = features z-scored over the dataset; action c = u in block c of K (p + 1) (disjoint), ||a|| = 1",
            "reward": "1 if the action's class is the example's label, else 0 (no noise); examples drawn uniformly with replacement: Stream::Context [0, run]",
        })
    }
}

impl crate::config::Config for ContextualClassificationConfig {
    fn validate(&mut self) -> Result<()> {
        ContextualClassificationConfig::validate(self)
    }
}

/// One run of the classification bandit.
#[derive(Debug, Clone)]
pub struct ContextualClassification {
    data: Arc<LabelledData>,
    examples: SimRng,
    features: Vec<f64>,
    means: Vec<f64>,
}

impl ContextualEnvironment for ContextualClassification {
    fn dim(&self) -> usize {
        self.data.dim()
    }
    fn next_round(&mut self, _t: u64) {
        let data = &self.data;
        let i = self.examples.random_range(0..data.len());
        let q = data.p + 1;
        let u = &data.contexts[i * q..(i + 1) * q];
        let d = data.dim();
        self.features.fill(0.0);
        for c in 0..data.classes {
            self.features[c * d + c * q..c * d + (c + 1) * q].copy_from_slice(u);
        }
        self.means.fill(0.0);
        self.means[data.labels[i]] = 1.0;
    }
    fn actions(&self) -> ActionSet<'_> {
        ActionSet {
            d: self.data.dim(),
            k: self.data.classes,
            features: &self.features,
        }
    }
    fn means(&self) -> &[f64] {
        &self.means
    }
    fn best_mean(&self) -> f64 {
        1.0
    }
    fn noise(&self) -> f64 {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_encode_and_errors() {
        let d = LabelledData::parse("f.csv", "3,2,a,b\n1,2,0\n3,2,1\n5,2,1\n").unwrap();
        assert_eq!((d.len(), d.classes(), d.dim()), (3, 2, 6));
        // feature 0: mean 3, sd sqrt(8/3); feature 1 constant -> 0.
        let z = -2.0 / (8.0f64 / 3.0).sqrt();
        let n = (1.0 + z * z).sqrt();
        assert!((d.contexts[0] - 1.0 / n).abs() < 1e-12 && (d.contexts[1] - z / n).abs() < 1e-12);
        assert_eq!(d.contexts[2], 0.0);
        let cfg = ContextualClassificationConfig::from_data(d);
        let mut env = cfg.build(7, 0).unwrap();
        for t in 0..20 {
            env.next_round(t);
            let a = env.actions();
            assert_eq!((a.k, a.d), (2, 6));
            for i in 0..2 {
                let norm: f64 = a.action(i).iter().map(|x| x * x).sum();
                assert!((norm - 1.0).abs() < 1e-12);
                assert!(
                    a.action(i)[(1 - i) * 3..(2 - i) * 3]
                        .iter()
                        .all(|&x| x == 0.0)
                );
            }
            assert_eq!(env.means().iter().sum::<f64>(), 1.0);
        }
        for (text, want) in [
            ("3,2,a,b\n1,2,0\n", "n_samples = 3"),
            ("2,2,a,b\n1,2,0\n1,x,1\n", "line 3, feature 1"),
            ("2,2,a,b\n1,2,0\n1,2,2\n", "line 3, label"),
            ("2,2,a,b\n1,2\n", "2 fields"),
            ("2,2,a\n1,2,0\n", "two class names"),
            ("", "no lines"),
        ] {
            let e = LabelledData::parse("f.csv", text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}

//! Piecewise-stationary Bernoulli arms, optionally with corrupted feedback.
//!
//! Time splits into `L_T` segments; segment `i` starts at a *breakpoint* (1-based round; the
//! first segment starts at round 1, spec ldp §1.1) and has its own means. Regret is the dynamic
//! pseudo-regret `sum_t mu*_t - mu_{a_t, t}` on the TRUE means; [`Environment::regret`] over a span
//! that crosses breakpoints is summed exactly segment by segment.
//!
//! # Corrupt feedback (`kind = "corrupt_bernoulli"`, or a `feedback` table)
//! The learner sees only the output of a per-arm randomized response (spec ldp §1.3): `pull`
//! returns the feedback bit, while regret stays on the true means. RR of a Bernoulli(mu) reward is
//! Bernoulli(g(mu)), so [`Environment::pull_sum`] is exact: one Binomial per segment crossed. Here
//! the channel belongs to the environment (the general corrupt-bandit setting of Gajane, Urvoy &
//! Kaufmann 2018); policies run on it claim no privacy themselves. For a private *learner* use the
//! policy-side wrapper (`ldp`, `kl_ucb_cf`, `sw_klucb_cf`).
//!
//! # Configuration
//! * `means = [[...], [...]]`: one row per segment (each row K means in [0, 1]);
//! * `breakpoints = [b_2, ..., b_L]`: 1-based start rounds of segments 2..L, strictly increasing,
//!   in `2..=T`; or `breakpoint_fractions = [...]` in (0, 1) (round `floor(f T) + 1`);
//! * or `random = { segments = L, arms = K, seed = 0, lo = 0.1, hi = 0.9, min_gap = 0.2 }`: means
//!   drawn Uniform[lo, hi] from `Stream::Instance` (seeded by `seed`), redrawn until the best arm
//!   differs from the previous segment's and the top gap is at least `min_gap` (spec ldp §6.2 E2);
//!   equally spaced breakpoints. The generated instance is written to the manifest.
//! * `feedback = { epsilon = 1.0 }` or `feedback = { per_arm = { p00 = [...], p11 = [...] } }`.

use super::{EnvConfig, Environment};
use crate::config::{EnvInfo, Setting};
use crate::error::{Error, Result, check};
use crate::privacy::{PerArmChannel, RandomizedResponse, channels_for};
use crate::rng::SimRng;
use rand::RngExt;
use rand_distr::{Binomial, Distribution};
use serde::Deserialize;
use serde_json::json;

/// Registry record of the `piecewise_bernoulli` environment.
pub const PIECEWISE_BERNOULLI: EnvInfo = EnvInfo {
    kind: "piecewise_bernoulli",
    setting: Setting::FiniteArmed,
    description: "piecewise-stationary Bernoulli arms: means per segment, breakpoints given (or as fractions of T) or a seeded random instance; dynamic regret, exact across breakpoints",
    source: file!(),
};

/// Registry record of the `corrupt_bernoulli` environment.
pub const CORRUPT_BERNOULLI: EnvInfo = EnvInfo {
    kind: "corrupt_bernoulli",
    setting: Setting::FiniteArmed,
    description: "piecewise-stationary Bernoulli arms whose learner sees only randomized-response feedback (per-arm p00, p11 or epsilon); regret on the true means",
    source: file!(),
};

/// `random = {...}`: a seeded random instance with equally spaced breakpoints.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomSegments {
    /// Number of segments `L_T >= 1`.
    pub segments: u64,
    /// Number of arms `K >= 2`.
    pub arms: usize,
    /// Lowest mean (default 0.1).
    #[serde(default = "lo")]
    pub lo: f64,
    /// Highest mean (default 0.9).
    #[serde(default = "hi")]
    pub hi: f64,
    /// Minimum gap between the best and second-best arm (default 0.2).
    #[serde(default = "gap")]
    pub min_gap: f64,
}

fn lo() -> f64 {
    0.1
}
fn hi() -> f64 {
    0.9
}
fn gap() -> f64 {
    0.2
}

/// `feedback = {...}`: the corruption channel of every arm.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedbackChannel {
    /// One privacy level for all arms.
    #[serde(default)]
    pub epsilon: Option<f64>,
    /// Per-arm levels or RR parameters.
    #[serde(default)]
    pub per_arm: Option<PerArmChannel>,
}

/// Configuration of `piecewise_bernoulli` / `corrupt_bernoulli`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PiecewiseConfig {
    /// Means, one row per segment.
    #[serde(default)]
    pub means: Option<Vec<Vec<f64>>>,
    /// 1-based start rounds of segments 2..L.
    #[serde(default)]
    pub breakpoints: Option<Vec<u64>>,
    /// Breakpoints as fractions of the horizon.
    #[serde(default)]
    pub breakpoint_fractions: Option<Vec<f64>>,
    /// A random instance instead of `means`.
    #[serde(default)]
    pub random: Option<RandomSegments>,
    /// Corrupt the feedback.
    #[serde(default)]
    pub feedback: Option<FeedbackChannel>,
    /// Set by the registry: `corrupt_bernoulli` (feedback required).
    #[serde(skip)]
    pub corrupt_kind: bool,
    #[serde(skip)]
    rows: Vec<Vec<f64>>,
    #[serde(skip)]
    resolved: Option<(Vec<u64>, Vec<Vec<f64>>)>,
}

impl PiecewiseConfig {
    /// Check what can be checked without the horizon; generates a random instance's means.
    pub fn validate(&mut self) -> Result<()> {
        let rows = match (&self.means, &self.random) {
            (Some(m), None) => m.clone(),
            (None, Some(r)) => {
                if self.breakpoints.is_some() || self.breakpoint_fractions.is_some() {
                    return Err(Error::param(
                        "breakpoints",
                        "(given with random)",
                        "no breakpoints with `random` (its breakpoints are equally spaced)",
                    ));
                }
                // Checked (and K fixed) here; the instance itself is drawn from the master seed
                // by `EnvConfig::instantiate`.
                random_means(r, 0)?
            }
            (Some(_), Some(_)) => {
                return Err(Error::param(
                    "random",
                    "(given with means)",
                    "either `means` or `random`, not both",
                ));
            }
            (None, None) => {
                return Err(Error::param(
                    "means",
                    "(missing)",
                    "one row of arm means per segment, e.g. [[0.8, 0.2], [0.2, 0.8]] (or a `random` table)",
                ));
            }
        };
        if rows.is_empty() {
            return Err(Error::param("means", "[]", "at least one segment"));
        }
        let k = rows[0].len();
        for (i, r) in rows.iter().enumerate() {
            check::unit_means(&format!("means[{i}]"), r)?;
            if r.len() != k {
                return Err(Error::param(
                    format!("means[{i}]"),
                    format!("{r:?}"),
                    format!("K = {k} means, like means[0]"),
                ));
            }
        }
        let l = rows.len();
        if let Some(b) = &self.breakpoints {
            if self.breakpoint_fractions.is_some() {
                return Err(Error::param(
                    "breakpoint_fractions",
                    "(given with breakpoints)",
                    "either breakpoints or breakpoint_fractions",
                ));
            }
            count_check("breakpoints", b.len(), l)?;
            check_increasing(b, u64::MAX)?;
        } else if let Some(f) = &self.breakpoint_fractions {
            count_check("breakpoint_fractions", f.len(), l)?;
            for (i, &x) in f.iter().enumerate() {
                check::open_unit(&format!("breakpoint_fractions[{i}]"), x)?;
                if i > 0 && x <= f[i - 1] {
                    return Err(Error::param(
                        format!("breakpoint_fractions[{i}]"),
                        x,
                        format!(
                            "a fraction > breakpoint_fractions[{}] = {} (strictly increasing)",
                            i - 1,
                            f[i - 1]
                        ),
                    ));
                }
            }
        } else if l > 1 && self.random.is_none() {
            count_check("breakpoints", 0, l)?;
        }
        let _ = self.channels(k)?;
        if self.corrupt_kind && self.feedback.is_none() {
            return Err(Error::param(
                "feedback",
                "(missing)",
                "a corruption channel, e.g. feedback = { epsilon = 1.0 } (or use kind = \"piecewise_bernoulli\")",
            ));
        }
        self.rows = rows;
        Ok(())
    }

    fn channels(&self, k: usize) -> Result<Option<Vec<RandomizedResponse>>> {
        match &self.feedback {
            None => Ok(None),
            Some(f) => channels_for(k, f.epsilon, f.per_arm.as_ref())
                .map(Some)
                .map_err(|e| e.at("feedback")),
        }
    }

    fn rows(&self) -> &[Vec<f64>] {
        &self.rows
    }

    /// Breakpoints (1-based) and rows, once the horizon is known.
    pub fn resolve(&self, horizon: u64) -> Result<(Vec<u64>, Vec<Vec<f64>>)> {
        let rows = self.rows().to_vec();
        let l = rows.len() as u64;
        let b: Vec<u64> = if let Some(b) = &self.breakpoints {
            b.clone()
        } else if let Some(f) = &self.breakpoint_fractions {
            f.iter()
                .map(|&x| (x * horizon as f64).floor() as u64 + 1)
                .collect()
        } else {
            (1..l).map(|i| i * horizon / l + 1).collect()
        };
        check_increasing(&b, horizon)?;
        Ok((b, rows))
    }
}

fn count_check(field: &str, n: usize, segments: usize) -> Result<()> {
    if n + 1 == segments {
        Ok(())
    } else {
        Err(Error::param(
            field,
            format!("{n} entries"),
            format!(
                "L_T - 1 = {} entries (one per row of means after the first)",
                segments - 1
            ),
        ))
    }
}

/// 1-based breakpoints: strictly increasing, in `2..=horizon`.
fn check_increasing(b: &[u64], horizon: u64) -> Result<()> {
    for (i, &x) in b.iter().enumerate() {
        if x < 2 {
            return Err(Error::param(
                format!("breakpoints[{i}]"),
                x,
                "a round >= 2 (1-based; the first segment starts at round 1)",
            ));
        }
        if i > 0 && x <= b[i - 1] {
            return Err(Error::param(
                format!("breakpoints[{i}]"),
                x,
                format!(
                    "a round > breakpoints[{}] = {} (strictly increasing)",
                    i - 1,
                    b[i - 1]
                ),
            ));
        }
        if x > horizon {
            return Err(Error::param(
                format!("breakpoints[{i}]"),
                x,
                format!("a round <= the horizon T = {horizon}"),
            ));
        }
    }
    Ok(())
}

fn random_means(r: &RandomSegments, master_seed: u64) -> Result<Vec<Vec<f64>>> {
    check::at_least("random.segments", r.segments, 1)?;
    check::at_least("random.arms", r.arms as u64, 2)?;
    check::unit("random.lo", r.lo)?;
    check::unit("random.hi", r.hi)?;
    if r.lo >= r.hi {
        return Err(Error::param(
            "random.hi",
            r.hi,
            format!("a number > lo = {}", r.lo),
        ));
    }
    if !(r.min_gap >= 0.0 && r.min_gap < 0.5 * (r.hi - r.lo)) {
        return Err(Error::param(
            "random.min_gap",
            r.min_gap,
            format!("a number in [0, (hi - lo)/2 = {})", 0.5 * (r.hi - r.lo)),
        ));
    }
    let mut rng =
        crate::rng::instance_rng(master_seed, &[crate::rng::instance::PIECEWISE_SEGMENTS]);
    let mut rows: Vec<Vec<f64>> = vec![];
    let mut prev_best = usize::MAX;
    for _ in 0..r.segments {
        let mut row;
        let mut tries = 0;
        loop {
            row = (0..r.arms)
                .map(|_| r.lo + (r.hi - r.lo) * rng.random::<f64>())
                .collect::<Vec<f64>>();
            let best = crate::finite::argmax(row.iter().copied());
            let second = row
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != best)
                .map(|(_, &m)| m)
                .fold(f64::NEG_INFINITY, f64::max);
            tries += 1;
            if best != prev_best && row[best] - second >= r.min_gap {
                prev_best = best;
                break;
            }
            if tries > 100_000 {
                return Err(Error::param(
                    "random.min_gap",
                    r.min_gap,
                    "a gap that random means can reach",
                ));
            }
        }
        // round to 4 decimals so the published instance is exactly what is simulated
        rows.push(row.iter().map(|m| (m * 1e4).round() / 1e4).collect());
    }
    Ok(rows)
}

impl EnvConfig for PiecewiseConfig {
    fn kind(&self) -> &'static str {
        if self.corrupt_kind {
            CORRUPT_BERNOULLI.kind
        } else {
            PIECEWISE_BERNOULLI.kind
        }
    }
    fn num_arms(&self) -> usize {
        self.rows().first().map_or(0, Vec::len)
    }
    fn reward_range(&self) -> (f64, f64) {
        (0.0, 1.0)
    }
    fn means(&self) -> Vec<f64> {
        self.rows().first().cloned().unwrap_or_default()
    }
    fn instantiate(&mut self, master_seed: u64, horizon: u64) -> Result<()> {
        if let Some(r) = &self.random {
            self.rows = random_means(r, master_seed)?;
        }
        self.resolved = Some(self.resolve(horizon)?);
        Ok(())
    }
    fn describe(&self) -> serde_json::Value {
        let Some((b, rows)) = &self.resolved else {
            return serde_json::Value::Null;
        };
        let mut starts = vec![1];
        starts.extend(b);
        let channels = self.channels(self.num_arms()).ok().flatten();
        json!({
            "segments": rows.len(),
            "breakpoints": b,
            "segment_starts": starts,
            "means": rows,
            "feedback": channels.map(|c| c.iter().map(|r| json!({"p00": r.p00(), "p11": r.p11(), "epsilon": r.epsilon()})).collect::<Vec<_>>()),
        })
    }
    fn build(&self, seed: u64) -> Result<Box<dyn Environment>> {
        let (b, rows) = match &self.resolved {
            Some(r) => r.clone(),
            None if self.breakpoint_fractions.is_none() && self.random.is_none() => {
                self.resolve(u64::MAX)?
            }
            None => {
                return Err(Error::param(
                    "horizon",
                    "(not set)",
                    "instantiate(master_seed, T) before building an environment with fractional or random breakpoints",
                ));
            }
        };
        let ch = self.channels(self.num_arms())?;
        Ok(Box::new(PiecewiseBernoulli::new(rows, &b, ch, seed)?))
    }
}

/// Piecewise-stationary Bernoulli arms (optionally with corrupted feedback).
#[derive(Debug, Clone)]
pub struct PiecewiseBernoulli {
    /// 0-based first round of each segment (`starts[0] = 0`).
    starts: Vec<u64>,
    means: Vec<Vec<f64>>,
    best: Vec<f64>,
    feedback: Option<Vec<RandomizedResponse>>,
    rngs: Vec<SimRng>,
}

impl PiecewiseBernoulli {
    /// Segments with the given means (rows) and 1-based `breakpoints` (segment starts after the
    /// first); `feedback` corrupts what `pull` returns; `seed` keys the per-arm streams.
    pub fn new(
        means: Vec<Vec<f64>>,
        breakpoints: &[u64],
        feedback: Option<Vec<RandomizedResponse>>,
        seed: u64,
    ) -> Result<Self> {
        let mut cfg = PiecewiseConfig {
            means: Some(means),
            breakpoints: Some(breakpoints.to_vec()),
            ..Default::default()
        };
        cfg.validate()?;
        let means = cfg.rows;
        let k = means[0].len();
        if let Some(f) = &feedback
            && f.len() != k
        {
            return Err(Error::param(
                "feedback",
                format!("{} channels", f.len()),
                format!("one channel per arm (K = {k})"),
            ));
        }
        let mut starts = vec![0];
        starts.extend(breakpoints.iter().map(|b| b - 1));
        Ok(PiecewiseBernoulli {
            best: means.iter().map(|r| super::best(r)).collect(),
            starts,
            means,
            feedback,
            rngs: (0..k as u64)
                .map(|a| crate::rng::arm_rng(seed, a as usize))
                .collect(),
        })
    }

    #[inline]
    fn segment(&self, t: u64) -> usize {
        self.starts.partition_point(|&s| s <= t) - 1
    }

    /// End (exclusive, 0-based) of segment `i`.
    #[inline]
    fn end(&self, i: usize) -> u64 {
        self.starts.get(i + 1).copied().unwrap_or(u64::MAX)
    }

    /// Mean of what `pull` returns for `arm` in segment `i` (the feedback mean if corrupted).
    fn observed_mean(&self, arm: usize, i: usize) -> f64 {
        let mu = self.means[i][arm];
        match &self.feedback {
            Some(f) => f[arm].mean_map(mu).clamp(0.0, 1.0),
            None => mu,
        }
    }
}

impl Environment for PiecewiseBernoulli {
    fn reward_range(&self) -> (f64, f64) {
        (0.0, 1.0)
    }
    fn num_arms(&self) -> usize {
        self.rngs.len()
    }
    fn mean(&self, arm: usize, t: u64) -> f64 {
        self.means[self.segment(t)][arm]
    }
    fn best_mean(&self, t: u64) -> f64 {
        self.best[self.segment(t)]
    }
    #[inline]
    fn pull(&mut self, arm: usize, t: u64) -> f64 {
        let mu = self.means[self.segment(t)][arm];
        let u: f64 = self.rngs[arm].random();
        let bit = u < mu;
        let bit = match &self.feedback {
            Some(f) => f[arm].respond(bit, &mut self.rngs[arm]),
            None => bit,
        };
        if bit { 1.0 } else { 0.0 }
    }
    /// Exact: one Binomial(overlap, mean) per segment crossed (RR of Bernoulli(mu) is
    /// Bernoulli(g(mu))).
    fn pull_sum(&mut self, arm: usize, t: u64, n: u64) -> f64 {
        let (mut s, end) = (t, t.saturating_add(n));
        let mut total = 0.0;
        let mut i = self.segment(t);
        while s < end {
            let e = self.end(i).min(end);
            let q = self.observed_mean(arm, i);
            let b = Binomial::new(e - s, q).expect("q in [0, 1]");
            total += b.sample(&mut self.rngs[arm]) as f64;
            s = e;
            i += 1;
        }
        total
    }
    /// Exact over spans crossing breakpoints.
    fn regret(&self, arm: usize, t: u64, n: u64) -> f64 {
        let (mut s, end) = (t, t.saturating_add(n));
        let mut total = 0.0;
        let mut i = self.segment(t);
        while s < end {
            let e = self.end(i).min(end);
            total += (self.best[i] - self.means[i][arm]) * (e - s) as f64;
            s = e;
            i += 1;
        }
        total
    }
}

impl crate::config::Config for PiecewiseConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        PiecewiseConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rotating() -> PiecewiseBernoulli {
        PiecewiseBernoulli::new(
            vec![
                vec![0.8, 0.5, 0.2],
                vec![0.2, 0.8, 0.5],
                vec![0.5, 0.2, 0.8],
            ],
            &[11, 21],
            None,
            1,
        )
        .unwrap()
    }

    #[test]
    fn regret_across_breakpoints_is_exact() {
        let env = rotating();
        for arm in 0..3 {
            for t in 0..30 {
                for n in 0..25 {
                    let direct: f64 = (t..t + n)
                        .map(|s| env.best_mean(s) - env.mean(arm, s))
                        .sum();
                    assert!((env.regret(arm, t, n) - direct).abs() < 1e-12);
                }
            }
        }
        assert_eq!(env.mean(0, 9), 0.8);
        assert_eq!(env.mean(0, 10), 0.2);
        assert_eq!(env.mean(0, 20), 0.5);
        assert_eq!(env.best_mean(25), 0.8);
    }

    /// Episode sums: mean of pull_sum over a span crossing breakpoints, with and without
    /// corruption, equals the sum of (feedback) means; 20k repetitions, 5 s.e. tolerance
    /// (false-failure rate < 1e-6 per case).
    #[test]
    fn pull_sum_has_exact_mean() {
        let g = RandomizedResponse::for_ldp(1.0).unwrap();
        for fb in [None, Some(vec![g; 3])] {
            let mut env = PiecewiseBernoulli::new(
                vec![vec![0.8, 0.5, 0.2], vec![0.2, 0.8, 0.5]],
                &[11],
                fb.clone(),
                4,
            )
            .unwrap();
            let reps = 20_000;
            let (mut s, mut s2) = (0.0, 0.0);
            for _ in 0..reps {
                let x = env.pull_sum(0, 5, 12);
                s += x;
                s2 += x * x;
            }
            let m = |mu: f64| fb.as_ref().map_or(mu, |_| g.mean_map(mu));
            let want = 5.0 * m(0.8) + 7.0 * m(0.2);
            let mean = s / reps as f64;
            let var = s2 / reps as f64 - mean * mean;
            assert!(
                (mean - want).abs() < 5.0 * (var / reps as f64).sqrt(),
                "{mean} vs {want}"
            );
        }
    }

    /// Issue 6 "Done when" 3: breakpoints out of order or beyond T, window/means errors.
    #[test]
    fn bad_breakpoints() {
        let mk = |b: Vec<u64>| PiecewiseConfig {
            means: Some(vec![vec![0.1, 0.9], vec![0.9, 0.1], vec![0.5, 0.2]]),
            breakpoints: Some(b),
            ..Default::default()
        };
        let e = mk(vec![500, 400]).validate().unwrap_err().to_string();
        assert_eq!(
            e,
            "breakpoints[1] = 400: expected a round > breakpoints[0] = 500 (strictly increasing)"
        );
        let e = mk(vec![1, 400]).validate().unwrap_err().to_string();
        assert!(
            e.starts_with("breakpoints[0] = 1: expected a round >= 2"),
            "{e}"
        );
        let e = mk(vec![5]).validate().unwrap_err().to_string();
        assert!(
            e.starts_with("breakpoints = 1 entries: expected L_T - 1 = 2"),
            "{e}"
        );
        let mut c = mk(vec![500, 2_000_000]);
        c.validate().unwrap();
        let e = c.instantiate(0, 1_000_000).unwrap_err().to_string();
        assert_eq!(
            e,
            "breakpoints[1] = 2000000: expected a round <= the horizon T = 1000000"
        );
        let mut c = mk(vec![500, 600]);
        c.means.as_mut().unwrap()[1].push(0.3);
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("means[1] = [0.9, 0.1, 0.3]: expected K = 2"),
            "{e}"
        );
        let mut c = mk(vec![500, 600]);
        c.feedback = Some(FeedbackChannel {
            per_arm: Some(PerArmChannel {
                p00: Some(vec![0.5, 0.6]),
                p11: Some(vec![0.5, 0.6]),
                epsilon: None,
            }),
            epsilon: None,
        });
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("p00 + p11 = 1: expected a sum > 1"), "{e}");
    }

    #[test]
    fn random_instance_is_seeded_and_valid() {
        let mut c = PiecewiseConfig {
            random: Some(RandomSegments {
                segments: 8,
                arms: 5,
                lo: 0.1,
                hi: 0.9,
                min_gap: 0.2,
            }),
            ..Default::default()
        };
        c.validate().unwrap();
        c.instantiate(3, 1000).unwrap();
        let d = c.describe();
        assert_eq!(d["breakpoints"], json!([126, 251, 376, 501, 626, 751, 876]));
        let rows = c.rows().to_vec();
        let mut prev = usize::MAX;
        for r in &rows {
            let b = crate::finite::argmax(r.iter().copied());
            assert_ne!(b, prev);
            prev = b;
        }
        // The instance follows the master seed: the same seed redraws it, another one does not.
        let mut c2 = c.clone();
        c2.validate().unwrap();
        c2.instantiate(3, 1000).unwrap();
        assert_eq!(c2.rows(), &rows[..]);
        c2.instantiate(4, 1000).unwrap();
        assert_ne!(c2.rows(), &rows[..]);
    }
}

//! LinPriv: reward-private linear UCB whose reward statistic is released continually by the
//! tree-based mechanism (Neel & Roth 2018), in the zCDP form the comparison table uses.
//!
//! # Algorithm
//! Neel & Roth (ICML 2018), "Mitigating bias in adaptive data gathering via differential
//! privacy", Sec. 4 (LinPriv: "reward-private linear UCB"); the zCDP paper discusses it in
//! Sec. V-B2 remark 3 and App. F-C (its regret: `O~(d sqrt T + K d sqrt T / epsilon)` once the
//! elliptical-potential step is corrected, not the claimed `O~(d sqrt T + K d ln T / epsilon)`).
//! Contexts are public: the design matrix `V_t = lambda I + sum_{s < t} w_s w_s^T` is exact,
//! `w_s = a_s / max(1, ||a_s||)` the chosen action scaled into the unit ball. The reward
//! statistic `u_t = sum_{s < t} r_s w_s` (rewards clipped to [-1, 1]) is released after every
//! round by the binary mechanism over the horizon's rounds (`privacy/tree.rs`, [`VectorTree`]),
//! `u~_t` = the sum of its cached p-sums. Round `t` plays
//! `argmax_a <theta~_t, a> + (beta_t + gamma_t) ||a||_{V_t^{-1}}` (ties: lowest index), with
//! `theta~_t = V_t^{-1} u~_t`, the self-normalised radius
//! `beta_t = sqrt(lambda) S + sqrt(2 ln(1/delta) + ln(det V_t / lambda^d))` (Abbasi-Yadkori et
//! al. 2011 Thm 2, rewards 1-sub-Gaussian) and the privacy radius
//! `gamma_t = sqrt(m_t) sigma (sqrt(d) + sqrt(2 ln(1/delta))) / sqrt(lambda)` (`m_t` the p-sums in
//! `u~_t`, each `N(0, sigma^2 I)`: a Gaussian vector's norm bound, and `||x||_{V^{-1}} <=
//! ||x|| / sqrt(lambda)`).
//!
//! One adaptation, stated: Neel & Roth keep one parameter per arm (`K` disjoint models, so their
//! bound carries `K`); this library's contextual setting has one `theta*` shared by the actions,
//! so LinPriv keeps one tree for the shared statistic. Their mechanism is Laplace (epsilon-DP);
//! here it is Gaussian at `rho`, the comparison table's currency (the tree's structure and its
//! `ln T` levels, which App. F-C is about, are the same).
//!
//! # Privacy
//! * Notion: rho-zCDP of the action sequence, central trust model, reward-level adjacency
//!   (contexts public, as in Neel & Roth: only rewards are protected).
//! * Mechanism: every round's contribution `r_s w_s` has L2 norm at most 1, so one reward changed
//!   in [-1, 1] moves a p-sum by at most `Delta = 2`; each p-sum is released once with
//!   `N(0, sigma^2 I_d)`, `sigma^2 = Delta^2 L / (2 rho)`, `L = ceil(log2 T) + 1` (Bun & Steinke
//!   Prop. 1.6 at `rho / L`); a reward enters at most `L` p-sums (Chan, Shi & Song Thm 3.5), so
//!   `L` releases at `rho / L` compose to `rho` (Bun & Steinke Lemma 2.3). `theta~`, the radii
//!   and the actions are post-processing of released p-sums and public contexts.
//! * A run longer than the horizon continues on a fresh tree (each reward still in at most `L`
//!   releases).
//! * Noise (`noise`): `simulation` (default) draws `f64` Gaussian noise per coordinate from the
//!   seeded noise stream (simulation-grade); `deployment` keeps each p-sum as an exact integer
//!   vector (rewards on the `2^-grid_bits` grid times the weights on a `2^-39` grid) and releases
//!   it with the multivariate discrete Gaussian at the same per-release rho (CKS20 Thm 4), from an
//!   OS-seeded CSPRNG (deployment-grade, not reproducible).
//!
//! # Parameters
//! `rho > 0` (inf = the non-private limit), `lambda > 0` (default 1: the ridge), `delta` in
//! (0, 1) (default 0.01: the radii's confidence), `s > 0` (default 1: the bound on `||theta*||`),
//! `noise` (`simulation` | `deployment`; finite rho only), `grid_bits` (1..=32, default 20).

use super::{ActionSet, ContextualPolicy, ContextualPolicyConfig, OFUL_BOUNDARY};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Error, Result, check};
use crate::privacy::{
    Budget, DEFAULT_GRID_BITS, NoiseGrade, NoiseKind, NoiseSource, PrivacyGuarantee,
    REWARD_ADJACENCY, RewardBoundary, TrustModel, VectorTree,
};
use crate::protocol::Gate;
use serde::{Deserialize, Serialize};

/// Registry record of `lin_priv`.
pub const LIN_PRIV: AlgorithmInfo = AlgorithmInfo {
    kind: "lin_priv",
    name: "LinPriv",
    setting: Setting::Contextual,
    reference: "Neel & Roth 2018 (ICML), Sec. 4 (LinPriv); tree-based mechanism: Chan, Shi & Song 2011 Alg. 2; zCDP paper App. F-C",
    privacy: "rho-zCDP (central), binary tree mechanism on the reward statistic (Gaussian)",
    example: "rho = 1.0",
    source: file!(),
    doc: include_str!("lin_priv.rs"),
    private: true,
    release_keys: crate::config::NOISE_KEYS,
};

/// The largest action norm LinPriv accepts (longer actions are scaled into the unit ball for
/// the statistics; past this their products lose precision).
pub const LIN_PRIV_MAX_ACTION_NORM: f64 = 1e6;

/// `kind = "lin_priv"`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinPrivConfig {
    /// zCDP budget (`inf` = the non-private limit).
    pub rho: f64,
    /// Ridge `lambda`.
    #[serde(default = "one")]
    pub lambda: f64,
    /// Confidence of the radii.
    #[serde(default = "default_delta")]
    pub delta: f64,
    /// Bound `S` on `||theta*||`.
    #[serde(default = "one")]
    pub s: f64,
    /// Noise path.
    #[serde(default)]
    pub noise: NoiseKind,
    /// Deployment grid `2^-grid_bits`.
    #[serde(default = "default_grid_bits")]
    pub grid_bits: u32,
}

fn one() -> f64 {
    1.0
}
fn default_delta() -> f64 {
    0.01
}
fn default_grid_bits() -> u32 {
    DEFAULT_GRID_BITS
}

impl LinPrivConfig {
    /// LinPriv at `rho` with the defaults.
    pub fn new(rho: f64) -> Self {
        LinPrivConfig {
            rho,
            lambda: 1.0,
            delta: default_delta(),
            s: 1.0,
            noise: NoiseKind::Simulation,
            grid_bits: DEFAULT_GRID_BITS,
        }
    }

    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        check::budget("rho", self.rho)?;
        check::positive("lambda", self.lambda)?;
        check::positive("s", self.s)?;
        if !(self.delta > 0.0 && self.delta < 1.0) {
            return Err(Error::param("delta", self.delta, "a number in (0, 1)"));
        }
        crate::privacy::check_noise(self.noise, self.grid_bits, self.rho.is_finite())
    }
}

impl ContextualPolicyConfig for LinPrivConfig {
    fn kind(&self) -> &'static str {
        LIN_PRIV.kind
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        vec![("rho", self.rho)]
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        guarantee(self, None)
    }
    fn label(&self) -> String {
        crate::privacy::noise_label(
            crate::config::label(self.kind(), &self.params()),
            self.noise,
            self.grid_bits,
        )
    }
    fn build(&self, d: usize, horizon: u64, seed: u64) -> Result<Box<dyn ContextualPolicy>> {
        Ok(Box::new(LinPriv::new(self.clone(), d, horizon, seed)?))
    }
    fn releases_per_round(&self, horizon: u64, t: u64) -> u64 {
        crate::privacy::binary_releases(crate::privacy::levels_for(horizon), t)
    }
    /// Both rates of App. F-C of the zCDP paper, converted by `epsilon -> sqrt(2 rho)`, `O~`
    /// (log factors not drawn), unit constants, `K` = actions per round (Neel & Roth's `K` arms;
    /// our adaptation shares one model, see the module doc, so the `K` of the level is theirs):
    /// the bound is the corrected rate `d sqrt(T) + (K d / sqrt(2 rho)) sqrt(T)` (App. F-C: the
    /// elliptical-potential step bounds the sum of squared norms, so the private sum carries a
    /// `sqrt(T)`), its alternative `original` the published Thm 5 of Neel & Roth 2018,
    /// `d sqrt(T) + (K d / sqrt(2 rho)) ln T`. `rho = inf`: `d sqrt(T)` (the rates agree).
    fn regret_bound(
        &self,
        instance: &crate::config::BoundInstance,
    ) -> Option<crate::config::RegretBound> {
        use crate::config::{BoundTerm, RegretBound};
        let (d, k) = (instance.d as f64, instance.k as f64);
        let term = |coef: f64, t_pow: f64, log_pow: f64| BoundTerm {
            coef,
            t_pow,
            log_pow,
            log_mult: 1.0,
        };
        if self.rho.is_infinite() {
            return Some(RegretBound {
                source: "Azize & Basu 2024, App. F-C (rho = inf; O~, unit constants)",
                formula: format!("d sqrt(T), d = {d}"),
                terms: vec![term(d, 0.5, 0.0)],
                alternatives: vec![],
            });
        }
        let private = k * d / (2.0 * self.rho).sqrt();
        let original = RegretBound {
            source: "Neel & Roth 2018, Thm 5 as published, epsilon -> sqrt(2 rho) (Azize & Basu 2024, App. F-C; O~, unit constants)",
            formula: format!(
                "d sqrt(T) + (K d / sqrt(2 rho)) ln T, d = {d}, K = {k}, rho = {}",
                self.rho
            ),
            terms: vec![term(d, 0.5, 0.0), term(private, 0.0, 1.0)],
            alternatives: vec![],
        };
        Some(RegretBound {
            source: "Azize & Basu 2024, App. F-C (Neel & Roth's Thm 5 corrected), epsilon -> sqrt(2 rho) (O~, unit constants)",
            formula: format!(
                "d sqrt(T) + (K d / sqrt(2 rho)) sqrt(T), d = {d}, K = {k}, rho = {}",
                self.rho
            ),
            terms: vec![term(d + private, 0.5, 0.0)],
            alternatives: vec![("original", original)],
        })
    }
}

fn guarantee(cfg: &LinPrivConfig, horizon: Option<u64>) -> PrivacyGuarantee {
    if cfg.rho.is_infinite() {
        return PrivacyGuarantee::non_private();
    }
    let levels = horizon.map_or("L = ceil(log2 T) + 1 (T the horizon)".to_string(), |h| {
        format!(
            "L = ceil(log2 T) + 1 = {} (T = {h})",
            crate::privacy::levels_for(h)
        )
    });
    let noise = match cfg.noise {
        NoiseKind::Simulation => "f64 Gaussian noise from the seeded noise stream".to_string(),
        NoiseKind::Deployment => format!(
            "multivariate discrete Gaussian (Canonne, Kamath & Steinke 2020, Alg. 3, Thm 4) on \
             each p-sum kept as an exact integer vector (rewards on the 2^-{k} grid, weights on \
             the 2^-39 grid), the same per-release rho; noise from ChaCha20 seeded by the \
             operating system: outputs are not reproducible",
            k = cfg.grid_bits
        ),
    };
    PrivacyGuarantee {
        notion: "rho-zCDP of the action sequence (Bun & Steinke 2016; the zCDP form of Neel & \
                 Roth 2018's epsilon-DP LinPriv, contexts public)"
            .into(),
        model: TrustModel::Central,
        adjacency: REWARD_ADJACENCY.into(),
        budget: Budget::Zcdp { rho: cfg.rho },
        mechanism: format!(
            "binary tree mechanism (Chan, Shi & Song 2011 Alg. 2) over the rounds on u = sum r_s \
             w_s, r_s clipped to [-1,1], w_s = a_s / max(1, ||a_s||) (L2 sensitivity 2): each \
             p-sum released once with N(0, sigma^2 I_d), sigma^2 = 4 L / (2 rho) (Bun & Steinke \
             Prop. 1.6 at rho/L), {levels}; a reward enters at most L p-sums: rho/L x L = rho \
             (Lemma 2.3); theta~ = V^-1 u~ and the index are post-processing (V is public); {noise}"
        ),
        boundary: Some(OFUL_BOUNDARY),
        noise: NoiseGrade::of(cfg.noise),
    }
}

/// LinPriv state.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinPriv {
    cfg: LinPrivConfig,
    d: usize,
    horizon: u64,
    gate: Gate,
    /// `V^{-1}` (row-major), by Sherman-Morrison.
    vinv: Vec<f64>,
    /// `ln(det V / lambda^d)`.
    logdet: f64,
    tree: VectorTree,
    /// `theta~ = V^{-1} u~` (cached after each release).
    theta: Vec<f64>,
    noise: NoiseSource,
}

impl LinPriv {
    /// LinPriv in dimension `d >= 1` over `horizon` rounds.
    ///
    /// # Errors
    /// Bad parameters.
    pub fn new(cfg: LinPrivConfig, d: usize, horizon: u64, seed: u64) -> Result<Self> {
        cfg.validate()?;
        if d == 0 || d > 256 {
            return Err(Error::param("d", d, "an integer in 1..=256"));
        }
        let levels = crate::privacy::levels_for(horizon.max(1));
        let mut vinv = vec![0.0; d * d];
        for i in 0..d {
            vinv[i * d + i] = 1.0 / cfg.lambda;
        }
        Ok(LinPriv {
            gate: Gate::new(OFUL_BOUNDARY),
            vinv,
            logdet: 0.0,
            tree: VectorTree::new(levels, cfg.rho, d)?,
            theta: vec![0.0; d],
            noise: NoiseSource::new(cfg.noise, cfg.grid_bits, seed)?,
            d,
            horizon,
            cfg,
        })
    }

    /// The released statistic `u~` (post-processing of the tree's cached p-sums).
    pub fn released(&self) -> Vec<f64> {
        self.tree.estimate()
    }

    /// Releases made so far (one per observed round).
    pub fn releases(&self) -> u64 {
        self.tree.releases()
    }

    /// `x^T V^{-1} y`.
    fn quad(&self, x: &[f64], y: &[f64]) -> f64 {
        self.vinv
            .chunks_exact(self.d)
            .zip(x)
            .map(|(row, xi)| xi * row.iter().zip(y).map(|(a, b)| a * b).sum::<f64>())
            .sum()
    }

    /// The radius `beta_t + gamma_t` (module docs).
    fn radius(&self) -> f64 {
        let l = (1.0 / self.cfg.delta).ln();
        let beta = self.cfg.lambda.sqrt() * self.cfg.s + (2.0 * l + self.logdet).max(0.0).sqrt();
        let (terms, sigma) = self.tree.noise_terms();
        let gamma = if self.cfg.rho.is_finite() {
            (terms as f64).sqrt() * sigma * ((self.d as f64).sqrt() + (2.0 * l).sqrt())
                / self.cfg.lambda.sqrt()
        } else {
            0.0
        };
        beta + gamma
    }

    /// The report's radius `beta_t + gamma'_t`: the index's `beta_t` and the tree noise's norm
    /// bound with the risk `delta` spent over the releases (`delta 6 / (pi^2 j^2)` at release
    /// `j`), so that the ellipsoid holds at every look, not only at one fixed time.
    fn report_radius(&self) -> f64 {
        let l = (1.0 / self.cfg.delta).ln();
        let beta = self.cfg.lambda.sqrt() * self.cfg.s + (2.0 * l + self.logdet).max(0.0).sqrt();
        if !self.cfg.rho.is_finite() {
            return beta;
        }
        let (terms, sigma) = self.tree.noise_terms();
        let spent = crate::report::spending(self.cfg.delta, self.releases().max(1));
        let lj = (1.0 / spent).ln();
        beta + (terms as f64).sqrt() * sigma * ((self.d as f64).sqrt() + (2.0 * lj).sqrt())
            / self.cfg.lambda.sqrt()
    }

    fn pick(&self, actions: &ActionSet<'_>) -> usize {
        let radius = self.radius();
        let mut best = 0;
        let mut best_v = f64::NEG_INFINITY;
        for i in 0..actions.k {
            let a = actions.action(i);
            let lin: f64 = a.iter().zip(&self.theta).map(|(x, y)| x * y).sum();
            let v = lin + radius * self.quad(a, a).max(0.0).sqrt();
            if v > best_v {
                best = i;
                best_v = v;
            }
        }
        best
    }

    /// Add an admitted round: release the p-sum it completes, update `V^{-1}` and `theta~`.
    fn absorb(&mut self, a: &[f64], reward: f64) -> Result<()> {
        let norm = a.iter().map(|x| x * x).sum::<f64>().sqrt().max(1.0);
        let w: Vec<f64> = a.iter().map(|x| x / norm).collect();
        let r = self
            .noise
            .discretise(OFUL_BOUNDARY.clip(reward), 1, &OFUL_BOUNDARY);
        let one = OFUL_BOUNDARY.single(r)?;
        let mut tree = self.tree.clone();
        tree.push(&one, &w, &mut self.noise, &OFUL_BOUNDARY)?;
        self.tree = tree;
        // Sherman-Morrison: V^{-1} - (V^{-1} w)(V^{-1} w)^T / (1 + w^T V^{-1} w).
        let d = self.d;
        let vw: Vec<f64> = (0..d)
            .map(|i| {
                self.vinv[i * d..(i + 1) * d]
                    .iter()
                    .zip(&w)
                    .map(|(x, y)| x * y)
                    .sum()
            })
            .collect();
        let q: f64 = w.iter().zip(&vw).map(|(x, y)| x * y).sum();
        for i in 0..d {
            for j in 0..d {
                self.vinv[i * d + j] -= vw[i] * vw[j] / (1.0 + q);
            }
        }
        self.logdet += (1.0 + q).ln();
        let u = self.tree.estimate();
        self.theta = (0..d)
            .map(|i| {
                self.vinv[i * d..(i + 1) * d]
                    .iter()
                    .zip(&u)
                    .map(|(x, y)| x * y)
                    .sum()
            })
            .collect();
        Ok(())
    }
}

impl ContextualPolicy for LinPriv {
    fn guarantee(&self) -> PrivacyGuarantee {
        guarantee(&self.cfg, Some(self.horizon))
    }
    fn dim(&self) -> usize {
        self.d
    }
    fn max_action_norm(&self) -> f64 {
        LIN_PRIV_MAX_ACTION_NORM
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
    /// Deterministic: the argmax of the index, ties to the lowest index.
    fn propensity(&self) -> Option<f64> {
        Some(1.0)
    }
    fn choose(&mut self, _t: u64, actions: &ActionSet<'_>) -> usize {
        self.gate.abandon();
        let i = self.pick(actions);
        self.gate.commit(i, 1);
        i
    }
    fn observe(&mut self, actions: &ActionSet<'_>, arm: usize, reward: f64) -> Result<()> {
        if actions.d != self.d || arm >= actions.k {
            return Err(Error::Protocol(format!(
                "observed action {arm} of a decision set of {} actions of dimension {} (the policy has d = {})",
                actions.k, actions.d, self.d
            )));
        }
        let mut gate = self.gate;
        let reward = gate.admit(arm, reward)?;
        self.absorb(actions.action(arm), reward)?;
        self.gate = gate;
        Ok(())
    }
    /// A round observed out of order (pipelined session): the same boundary and statistics as
    /// [`Self::observe`], without the gate's one open round. The tree's positions are the order
    /// in which rewards arrive (public), so the accounting is unchanged.
    fn observe_round(&mut self, action: &[f64], reward: f64) -> Result<()> {
        if action.len() != self.d {
            return Err(Error::Protocol(format!(
                "observed an action of length {} (the policy has d = {})",
                action.len(),
                self.d
            )));
        }
        let reward = self.gate.boundary().admit(reward)?;
        self.absorb(action, reward)
    }
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(Setting::Contextual, LIN_PRIV.kind, self)
    }
    /// The released `theta~ = V^{-1} u~` (the index's own estimate) with the ellipsoid
    /// `||theta - theta~||_V <= beta_t + gamma'_t` (`LinPriv::report_radius`) at level
    /// `1 - 2 delta` (`1 - delta` at `rho = inf`), valid at every look.
    fn released_estimate(&self) -> Option<crate::report::LinearReleased> {
        let private = self.cfg.rho.is_finite();
        let level = 1.0 - if private { 2.0 } else { 1.0 } * self.cfg.delta;
        super::ellipsoid_released(
            &self.theta,
            &self.vinv,
            self.report_radius(),
            level,
            self.releases(),
            self.gate.boundary(),
            format!(
                "lin_priv: the released theta~ = V^-1 u~ (u~ the tree's released reward statistic, \
                 V exact: contexts are public) with the ellipsoid ||theta - theta~||_V <= beta_t + \
                 gamma'_t: beta_t the self-normalised radius (Abbasi-Yadkori, Pal & Szepesvari \
                 2011, Thm 2, time-uniform, risk delta), gamma'_t = sqrt(m) sigma (sqrt d + \
                 sqrt(2 ln(pi^2 j^2 / (6 delta)))) / sqrt(lambda) the tree noise's norm bound at \
                 the j-th release (m p-sums of N(0, sigma^2 I_d); risk spent over releases, \
                 summing to delta: valid at every look); level 1 - 2 delta = {level} (delta = {} of \
                 the configuration, not the requested level; 1 - delta at rho = inf), assuming \
                 rewards <theta*, w> + 1-sub-Gaussian noise, w = a / max(1, ||a||), ||theta*|| <= s \
                 = {}; value intervals <a, theta~> +- (beta_t + gamma'_t) ||a||_(V^-1), simultaneous \
                 over actions and looks, clipped to the reward range; post-processing of released \
                 statistics",
                self.cfg.delta, self.cfg.s
            ),
        )
    }
}

impl crate::config::Config for LinPrivConfig {
    fn validate(&mut self) -> Result<()> {
        LinPrivConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// App. F-C's two rates: the corrected one grows like `sqrt(T)` (log-log slope 1/2), the
    /// published one only by `ln T` in its private term (slope below 1/2 and a lower level);
    /// `rho = inf` keeps `d sqrt(T)` alone.
    #[test]
    fn both_rates_of_app_f_c() {
        let inst = crate::config::BoundInstance {
            k: 10,
            d: 3,
            gaps: vec![],
        };
        let b = LinPrivConfig::new(0.5).regret_bound(&inst).unwrap();
        assert!((b.slope(1e5) - 0.5).abs() < 1e-12);
        // d + K d / sqrt(2 rho) = 3 + 30 = 33
        assert!((b.at(1e4) - 3300.0).abs() < 1e-9);
        let (tag, orig) = &b.alternatives[0];
        assert_eq!(*tag, "original");
        assert!(orig.slope(1e5) < 0.4 && orig.at(1e5) < b.at(1e5) / 5.0);
        let np = LinPrivConfig::new(f64::INFINITY)
            .regret_bound(&inst)
            .unwrap();
        assert!(np.alternatives.is_empty() && (np.at(1e4) - 300.0).abs() < 1e-9);
    }

    /// One release per observed round, cached between rounds; the released statistic is within
    /// a few noise scales of `sum r w` (8 sigma per coordinate over at most L terms: a seeded
    /// run, deterministic); a refused reward changes nothing; the guarantee names the levels.
    #[test]
    fn releases_and_statistic() {
        let mut p = LinPriv::new(LinPrivConfig::new(2.0), 2, 64, 5).unwrap();
        let feats = [1.0, 0.0, 0.0, 1.0];
        let set = ActionSet {
            d: 2,
            k: 2,
            features: &feats,
        };
        let mut truth = [0.0; 2];
        for t in 0..40u64 {
            let i = p.choose(t, &set);
            let before = p.released();
            assert_eq!(p.choose(t, &set), i);
            assert_eq!(p.released(), before);
            let r = if i == 0 { 0.5 } else { -0.25 };
            assert!(p.observe(&set, 1 - i, r).is_err());
            assert!(p.observe(&set, i, f64::NAN).is_err());
            assert_eq!(p.released(), before);
            p.observe(&set, i, r).unwrap();
            truth[i] += r;
            assert_eq!(p.releases(), t + 1);
        }
        let (terms, sigma) = p.tree.noise_terms();
        assert_eq!(terms, 2); // 40 = 0b101000
        assert!((sigma * sigma - 4.0 * 7.0 / 4.0).abs() < 1e-9, "{sigma}");
        let u = p.released();
        for j in 0..2 {
            assert!(
                (u[j] - truth[j]).abs() < 8.0 * sigma * 2f64.sqrt(),
                "{u:?} {truth:?}"
            );
        }
        assert!(p.guarantee().mechanism.contains("L = ceil(log2 T) + 1 = 7"));
        assert_eq!(LinPrivConfig::new(1.0).releases_per_round(64, 0), 7);
    }

    /// Non-private limit learns an easy instance; bad configurations are refused naming the key.
    #[test]
    fn learns_and_validates() {
        let mut p = LinPriv::new(LinPrivConfig::new(f64::INFINITY), 2, 500, 1).unwrap();
        let feats = [1.0, 0.0, 0.0, 1.0];
        let set = ActionSet {
            d: 2,
            k: 2,
            features: &feats,
        };
        let mut best = 0;
        for t in 0..500u64 {
            let i = p.choose(t, &set);
            best += usize::from(i == 0);
            p.observe(&set, i, if i == 0 { 0.8 } else { 0.2 }).unwrap();
        }
        assert!(best > 400, "{best}");
        for (k, v) in [("rho", 0.0), ("lambda", -1.0), ("delta", 1.0), ("s", 0.0)] {
            let mut c = LinPrivConfig::new(1.0);
            match k {
                "rho" => c.rho = v,
                "lambda" => c.lambda = v,
                "delta" => c.delta = v,
                _ => c.s = v,
            }
            let e = c.validate().unwrap_err().to_string();
            assert!(e.starts_with(k), "{e}");
        }
    }
}

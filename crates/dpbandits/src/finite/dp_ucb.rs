//! DP-UCB (Mishra & Thakurta 2015), DP-UCB-Bound and DP-UCB-Hybrid (Tossou & Dimitrakakis
//! 2016): epsilon-DP UCB on per-arm reward sums released continually by the tree-based
//! mechanism, the pure-DP baselines of the zCDP paper's Table II.
//!
//! # Algorithm
//! Every arm `a` keeps a continual counter of its rewards (`privacy/tree.rs`): after each pull
//! the counter releases the one p-sum the new reward completes, and the arm's released sum
//! `S~_a` is the sum of its cached p-sums (post-processing). Pull every arm once; then at round
//! `t` (rounds played) play
//! `argmax_a  S~_a / n_a + sqrt(alpha ln t / n_a) + B_a(t) / n_a` (ties: lowest index),
//! `n_a` the arm's pulls and `B_a(t)` a bound on the counter's noise that holds with
//! probability `>= 1 - t^-4` ([`crate::privacy::noise_bound`]: Chan, Shi & Song 2011 Cor. 2.9,
//! a sum of independent Laplace variables). The kinds differ in the counter and in `B`:
//!
//! * `dp_ucb`: Mishra & Thakurta (UAI 2015), "(Nearly) optimal differentially private stochastic
//!   multi-arm bandits", Algorithm 1 (Private UCB): the **binary (tree-based) mechanism** over
//!   the horizon `T` (`horizon`), `L = ceil(log2 T) + 1` levels, and the bound of a prefix of
//!   all `L` levels (a priori, the same for every count: the tree's worst position). An arm
//!   pulled more than `2^(L-1)` times continues on a fresh tree of the same size (only reachable
//!   when the run is longer than `horizon`).
//! * `dp_ucb_bound`: Tossou & Dimitrakakis (AAAI 2016), "Algorithms for differentially private
//!   multi-armed bandits", DP-UCB-BOUND (Algorithm 1 as we transcribe it): the **hybrid
//!   mechanism** (Chan, Shi & Song Sec. 4; no horizon needed) and its a-priori error bound (the
//!   released blocks plus every level of the current block).
//! * `dp_ucb_hybrid`: the same hybrid counter with the bound of the releases the arm's estimate
//!   actually sums (its binary decomposition: public, a function of `n_a`), the tighter
//!   Laplace-mixture bound Tossou & Dimitrakakis use for their DP-UCB (we call it
//!   DP-UCB-Hybrid, as issue 44 and the comparison table do, to keep it apart from Mishra &
//!   Thakurta's DP-UCB).
//!
//! `alpha = 2` is UCB1's `sqrt(2 ln t / n)` (Auer et al. 2002), the exploration term of all
//! three papers.
//!
//! # Privacy
//! * Notion: epsilon-DP of the action sequence (central trust model, reward-level adjacency):
//!   Mishra & Thakurta Thm 3 / Tossou & Dimitrakakis Thm 3.1, the tree-based mechanism's
//!   guarantee (Chan, Shi & Song Thm 3.5, and Sec. 4 for the hybrid: `privacy/tree.rs`) plus
//!   post-processing (the index reads released sums and public counts only).
//! * Mechanism: per arm, each reward (clipped to [0, 1]: sensitivity 1) enters at most `L`
//!   p-sums, each released with Laplace noise of scale `L / epsilon` (`dp_ucb`); or at most
//!   `k + 1` p-sums of its block's binary mechanism at scale `2 (k + 1) / epsilon` plus its
//!   block's release at scale `2 / epsilon` (the hybrid kinds). Composition over those releases
//!   (basic composition) gives `epsilon`; an arm's rewards enter only that arm's counter
//!   (parallel composition across arms).
//! * zCDP: `epsilon`-DP is `epsilon^2 / 2`-zCDP (Bun & Steinke 2016, Prop. 1.4): these kinds
//!   compare with the zCDP kinds at `rho = epsilon^2 / 2` (`epsilon = sqrt(2 rho)`, Table II's
//!   conversion).
//! * Every p-sum is released once, when it is complete, and cached; the index recomputes only
//!   public terms.
//! * Noise (`noise`): `simulation` (default) draws `f64` Laplace noise from the seeded noise
//!   stream (simulation-grade); `deployment` rounds each reward to the `2^-grid_bits` grid and
//!   adds exact discrete Laplace noise of scale `2^k L / epsilon` (or the hybrid's scales) grid
//!   units to each integer p-sum (geometric mechanism: the same epsilon), from an OS-seeded
//!   CSPRNG (deployment-grade, not reproducible).
//!
//! # Parameters
//! `epsilon > 0` (inf = the non-private limit), `horizon` (`dp_ucb` only, required, >= 1: the
//! tree's size `T`), `alpha > 0` (default 2: the exploration constant), `boundary` (`clip` |
//! `reject`), `noise` (`simulation` | `deployment`; finite epsilon only), `grid_bits` (1..=32,
//! default 20: the deployment grid `2^-grid_bits`).

use super::{Policy, PolicyConfig, Pull, argmax};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Error, Result, check};
use crate::privacy::{
    BinaryCounter, BoundaryMode, Budget, DEFAULT_GRID_BITS, HybridCounter, NoiseGrade, NoiseKind,
    NoiseSource, PrivacyGuarantee, REWARD_ADJACENCY, RewardBoundary, TreeBudget, TrustModel,
};
use crate::protocol::Gate;
use serde::Deserialize;

/// Registry record of `dp_ucb`.
pub const DP_UCB: AlgorithmInfo = AlgorithmInfo {
    kind: "dp_ucb",
    name: "DP-UCB",
    setting: Setting::FiniteArmed,
    reference: "Mishra & Thakurta 2015 (UAI), Alg. 1 (Private UCB); tree-based mechanism: Dwork et al. 2010, Chan, Shi & Song 2011 Alg. 2",
    privacy: "epsilon-DP (central; epsilon^2/2-zCDP), binary tree mechanism per arm",
    example: "epsilon = 2.0\nhorizon = 8",
    source: file!(),
    doc: include_str!("dp_ucb.rs"),
    private: true,
    release_keys: crate::config::PRIVATE_RELEASE,
};

/// Registry record of `dp_ucb_bound`.
pub const DP_UCB_BOUND: AlgorithmInfo = AlgorithmInfo {
    kind: "dp_ucb_bound",
    name: "DP-UCB-Bound",
    setting: Setting::FiniteArmed,
    reference: "Tossou & Dimitrakakis 2016 (AAAI), DP-UCB-BOUND; hybrid mechanism: Chan, Shi & Song 2011 Sec. 4",
    privacy: "epsilon-DP (central; epsilon^2/2-zCDP), hybrid mechanism per arm",
    example: "epsilon = 2.0",
    source: file!(),
    doc: include_str!("dp_ucb.rs"),
    private: true,
    release_keys: crate::config::PRIVATE_RELEASE,
};

/// Registry record of `dp_ucb_hybrid`.
pub const DP_UCB_HYBRID: AlgorithmInfo = AlgorithmInfo {
    kind: "dp_ucb_hybrid",
    name: "DP-UCB-Hybrid",
    setting: Setting::FiniteArmed,
    reference: "Tossou & Dimitrakakis 2016 (AAAI), DP-UCB (hybrid mechanism, Laplace-mixture bound); Chan, Shi & Song 2011 Sec. 4",
    privacy: "epsilon-DP (central; epsilon^2/2-zCDP), hybrid mechanism per arm",
    example: "epsilon = 2.0",
    source: file!(),
    doc: include_str!("dp_ucb.rs"),
    private: true,
    release_keys: crate::config::PRIVATE_RELEASE,
};

/// Which counter and which noise bound (set by the registry from the kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DpUcbVariant {
    /// Mishra & Thakurta: binary mechanism over `horizon`, a-priori bound.
    #[default]
    Tree,
    /// Tossou & Dimitrakakis DP-UCB-BOUND: hybrid mechanism, a-priori bound.
    HybridBound,
    /// Tossou & Dimitrakakis DP-UCB: hybrid mechanism, bound of the estimate's own releases.
    HybridMixture,
}

/// `kind = "dp_ucb"`, `"dp_ucb_bound"` or `"dp_ucb_hybrid"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DpUcbConfig {
    /// Pure-DP budget epsilon (`inf` = the non-private limit).
    pub epsilon: f64,
    /// The tree's horizon `T` (`dp_ucb` only).
    #[serde(default)]
    pub horizon: Option<u64>,
    /// Exploration constant (bonus `sqrt(alpha ln t / n)`).
    #[serde(default = "two")]
    pub alpha: f64,
    /// What to do with rewards outside [0, 1].
    #[serde(default)]
    pub boundary: BoundaryMode,
    /// Noise path: seeded `f64` (simulation, default) or exact discrete on an OS-seeded CSPRNG.
    #[serde(default)]
    pub noise: NoiseKind,
    /// Deployment grid: rewards are rounded to multiples of `2^-grid_bits`.
    #[serde(default = "default_grid_bits")]
    pub grid_bits: u32,
    /// Set by the registry from the kind.
    #[serde(skip)]
    pub variant: DpUcbVariant,
}

fn two() -> f64 {
    2.0
}

fn default_grid_bits() -> u32 {
    DEFAULT_GRID_BITS
}

impl DpUcbConfig {
    /// A configuration of `variant` with `alpha = 2` and clipping (`horizon` for the tree).
    pub fn new(epsilon: f64, variant: DpUcbVariant, horizon: Option<u64>) -> Self {
        DpUcbConfig {
            epsilon,
            horizon,
            alpha: 2.0,
            boundary: BoundaryMode::Clip,
            noise: NoiseKind::Simulation,
            grid_bits: DEFAULT_GRID_BITS,
            variant,
        }
    }

    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        check::budget("epsilon", self.epsilon)?;
        check::positive("alpha", self.alpha)?;
        crate::privacy::check_noise(self.noise, self.grid_bits, self.epsilon.is_finite())?;
        match (self.variant, self.horizon) {
            (DpUcbVariant::Tree, None) => Err(Error::param(
                "horizon",
                "(missing)",
                "the tree's horizon T >= 1 (dp_ucb builds a binary tree of ceil(log2 T) + 1 levels per arm)",
            )),
            (DpUcbVariant::Tree, Some(0)) => Err(Error::param("horizon", 0, "an integer >= 1")),
            (DpUcbVariant::Tree, Some(h)) if h > 1 << 62 => {
                Err(Error::param("horizon", h, "an integer in 1..=2^62"))
            }
            (DpUcbVariant::Tree, Some(_)) | (_, None) => Ok(()),
            (_, Some(h)) => Err(Error::param(
                "horizon",
                h,
                "no horizon: the hybrid mechanism needs none (only dp_ucb takes one)",
            )),
        }
    }

    /// The tree's levels `L` (`dp_ucb`).
    fn levels(&self) -> u32 {
        crate::privacy::levels_for(self.horizon.unwrap_or(1))
    }
}

impl PolicyConfig for DpUcbConfig {
    fn kind(&self) -> &'static str {
        match self.variant {
            DpUcbVariant::Tree => DP_UCB.kind,
            DpUcbVariant::HybridBound => DP_UCB_BOUND.kind,
            DpUcbVariant::HybridMixture => DP_UCB_HYBRID.kind,
        }
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        let mut p = vec![("epsilon", self.epsilon)];
        if let Some(h) = self.horizon {
            p.push(("horizon", h as f64));
        }
        if self.alpha != 2.0 {
            p.push(("alpha", self.alpha));
        }
        p
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        guarantee(self)
    }
    fn label(&self) -> String {
        crate::privacy::noise_label(
            crate::config::label(self.kind(), &self.params()),
            self.noise,
            self.grid_bits,
        )
    }
    fn build(&self, k: usize, seed: u64) -> Result<Box<dyn Policy>> {
        Ok(Box::new(DpUcb::new(k, self.clone(), seed)?))
    }
    /// The tree-based baselines' order, as Azize & Basu 2022 (Table 1) quote Mishra & Thakurta
    /// 2015 and group Tossou & Dimitrakakis 2016 with it (spec ldp §5.6-5.7):
    /// `O(sum_{Delta_a > 0} ln T / Delta_a + ln^2.5 T / epsilon)`, drawn with unit constants
    /// (the papers give orders; we transcribed them, the PDFs were not at hand) and the privacy
    /// term once per suboptimal arm (one tree per arm): `sum_{Delta_a > 0} (ln T / Delta_a +
    /// ln^2.5 T / epsilon)`. `epsilon = inf` drops the privacy term. On an instance with known
    /// gaps only (none otherwise).
    fn regret_bound(
        &self,
        instance: &crate::config::BoundInstance,
    ) -> Option<crate::config::RegretBound> {
        use crate::config::{BoundTerm, RegretBound};
        let gaps: Vec<f64> = instance.gaps.iter().copied().filter(|&g| g > 0.0).collect();
        if gaps.is_empty() {
            return None;
        }
        let term = |coef: f64, log_pow: f64| BoundTerm {
            coef,
            t_pow: 0.0,
            log_pow,
            log_mult: 1.0,
        };
        let mut terms = vec![term(gaps.iter().map(|g| 1.0 / g).sum(), 1.0)];
        if self.epsilon.is_finite() {
            terms.push(term(gaps.len() as f64 / self.epsilon, 2.5));
        }
        Some(RegretBound {
            source: match self.variant {
                DpUcbVariant::Tree => {
                    "Mishra & Thakurta 2015, order as quoted by Azize & Basu 2022 Table 1 (unit constants)"
                }
                _ => {
                    "Tossou & Dimitrakakis 2016, grouped with DP-UCB by Azize & Basu 2022 Table 1 (order; unit constants)"
                }
            },
            formula: format!(
                "sum over Delta_a > 0 of (ln T / Delta_a + ln^2.5 T / epsilon), epsilon = {}",
                self.epsilon
            ),
            terms,
            alternatives: vec![],
        })
    }
    fn releases_per_reward(&self, j: u64) -> u64 {
        match self.variant {
            DpUcbVariant::Tree => crate::privacy::binary_releases(self.levels(), j),
            _ => crate::privacy::hybrid_releases(j),
        }
    }
}

fn guarantee(cfg: &DpUcbConfig) -> PrivacyGuarantee {
    let epsilon = cfg.epsilon;
    if epsilon.is_infinite() {
        return PrivacyGuarantee::non_private();
    }
    let counter = match cfg.variant {
        DpUcbVariant::Tree => {
            let l = cfg.levels();
            format!(
                "binary tree mechanism per arm (Chan, Shi & Song 2011 Alg. 2; Dwork et al. 2010) over \
                 T = {} positions: each reward clipped to [0,1] (sensitivity 1) enters at most \
                 L = ceil(log2 T) + 1 = {l} p-sums, each released once with Laplace noise of scale \
                 L/epsilon (epsilon/L per release, Dwork & Roth Thm 3.6); basic composition over \
                 the L levels (Chan et al. Thm 3.5) gives epsilon; an arm pulled more than 2^(L-1) \
                 times continues on a fresh tree (disjoint releases)",
                cfg.horizon.unwrap_or(1)
            )
        }
        _ => "hybrid mechanism per arm (Chan, Shi & Song 2011 Sec. 4): half the budget releases \
              each block [2^k, 2^(k+1)) of an arm's rewards clipped to [0,1] once with Laplace \
              noise of scale 2/epsilon (logarithmic mechanism), half runs a binary tree mechanism \
              of k + 1 levels within block k, each p-sum released once with Laplace noise of scale \
              2(k+1)/epsilon; a reward enters at most k + 1 p-sums and one block release: \
              epsilon/2 + epsilon/2 = epsilon (basic composition)"
            .to_string(),
    };
    let noise = match cfg.noise {
        NoiseKind::Simulation => "f64 Laplace noise from the seeded noise stream".to_string(),
        NoiseKind::Deployment => format!(
            "discrete Laplace (geometric) mechanism (Ghosh, Roughgarden & Sundararajan 2009; \
             sampler: Canonne, Kamath & Steinke 2020, Alg. 2) on each integer p-sum of rewards \
             rounded to the 2^-{k} grid (sensitivity 2^{k}), scale 2^{k} times the scale above \
             exactly (the same epsilon); noise from ChaCha20 seeded by the operating system: \
             outputs are not reproducible",
            k = cfg.grid_bits
        ),
    };
    PrivacyGuarantee {
        notion: "epsilon-DP of the action sequence (Mishra & Thakurta 2015 Thm 3; Tossou & \
                 Dimitrakakis 2016 Thm 3.1); as zCDP: epsilon^2/2-zCDP (Bun & Steinke 2016, \
                 Prop. 1.4), compared with zCDP kinds at rho = epsilon^2/2"
            .into(),
        model: TrustModel::Central,
        adjacency: REWARD_ADJACENCY.into(),
        budget: Budget::PureDp { epsilon },
        mechanism: format!(
            "{counter}; parallel composition across arms; the index is post-processing of the \
             cached releases and public counts; {noise}"
        ),
        boundary: Some(RewardBoundary::unit(cfg.boundary)),
        noise: NoiseGrade::of(cfg.noise),
    }
}

/// The snapshot form of [`DpUcbConfig`]: every field, including the variant the registry sets.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(remote = "DpUcbConfig", deny_unknown_fields)]
struct DpUcbConfigSnap {
    epsilon: f64,
    horizon: Option<u64>,
    alpha: f64,
    boundary: BoundaryMode,
    noise: NoiseKind,
    grid_bits: u32,
    variant: DpUcbVariant,
}

/// One arm's continual counter.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum Counter {
    Binary(BinaryCounter),
    Hybrid(HybridCounter),
}

/// DP-UCB / DP-UCB-Bound / DP-UCB-Hybrid state.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DpUcb {
    #[serde(with = "DpUcbConfigSnap")]
    cfg: DpUcbConfig,
    boundary: RewardBoundary,
    gate: Gate,
    pulls: Vec<u64>,
    counters: Vec<Counter>,
    noise: NoiseSource,
}

impl DpUcb {
    /// The policy on `k >= 1` arms; `seed` keys its noise stream.
    pub fn new(k: usize, cfg: DpUcbConfig, seed: u64) -> Result<Self> {
        check::arms("K", k)?;
        cfg.validate()?;
        let boundary = if cfg.epsilon.is_finite() {
            RewardBoundary::unit(cfg.boundary)
        } else {
            RewardBoundary::numeric()
        };
        let budget = TreeBudget::PureDp {
            epsilon: cfg.epsilon,
        };
        let counter = match cfg.variant {
            DpUcbVariant::Tree => Counter::Binary(BinaryCounter::new(cfg.levels(), budget, true)?),
            _ => Counter::Hybrid(HybridCounter::new(budget)?),
        };
        let noise = NoiseSource::new(cfg.noise, cfg.grid_bits, seed)?;
        Ok(DpUcb {
            gate: Gate::new(boundary),
            boundary,
            pulls: vec![0; k],
            counters: vec![counter; k],
            noise,
            cfg,
        })
    }

    /// The released reward sum of every arm (post-processing of its counter's cached releases).
    pub fn released_sums(&self) -> Vec<f64> {
        self.counters
            .iter()
            .map(|c| match c {
                Counter::Binary(b) => b.estimate(),
                Counter::Hybrid(h) => h.estimate(),
            })
            .collect()
    }

    /// Releases made so far by every arm's counter.
    pub fn releases(&self) -> u64 {
        self.counters
            .iter()
            .map(|c| match c {
                Counter::Binary(b) => b.releases(),
                Counter::Hybrid(h) => h.releases(),
            })
            .sum()
    }

    /// The privacy term `B_a(t)` of arm `a`'s index (a bound on its released sum's noise with
    /// probability `>= 1 - t^-4`).
    fn privacy_bound(&self, a: usize, t: u64) -> f64 {
        let gamma = (t.max(2) as f64).powi(-4);
        let (family, scales) = match (&self.counters[a], self.cfg.variant) {
            (Counter::Binary(b), _) => (b.family(), b.worst_scales()),
            (Counter::Hybrid(h), DpUcbVariant::HybridBound) => (h.family(), h.worst_scales()),
            (Counter::Hybrid(h), _) => (h.family(), h.scales()),
        };
        crate::privacy::noise_bound(family, &scales, gamma)
    }

    /// The index of arm `a` at round `t` (rounds played); the arm has been pulled.
    fn index(&self, a: usize, sum: f64, t: u64) -> f64 {
        let n = self.pulls[a] as f64;
        let lt = (t.max(1) as f64).ln();
        sum / n + (self.cfg.alpha * lt / n).sqrt() + self.privacy_bound(a, t) / n
    }

    fn decide(&mut self, t: u64) -> Pull {
        if let Some(a) = self.pulls.iter().position(|&n| n == 0) {
            return Pull { arm: a, steps: 1 };
        }
        let sums = self.released_sums();
        let arm = argmax((0..self.pulls.len()).map(|a| self.index(a, sums[a], t)));
        Pull { arm, steps: 1 }
    }
}

impl Policy for DpUcb {
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(Setting::FiniteArmed, self.cfg.kind(), self)
    }
    fn num_arms(&self) -> usize {
        self.pulls.len()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        guarantee(&self.cfg)
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
    /// Each arm's released mean `S~_a / n_a` (its counter's cached p-sums, the index's own
    /// statistic) with the law of its noise, a sum of Laplace draws ([`crate::report::NoiseLaw::LaplaceSum`]):
    /// the estimate after the arm's `n`-th reward is its `n`-th release (its ordinal, for the
    /// spending of the risk over releases).
    fn released_estimates(&self) -> Option<crate::report::Released> {
        let bd = self.gate.boundary();
        let range = (bd.lo, bd.hi);
        let sums = self.released_sums();
        let means = self
            .counters
            .iter()
            .zip(&self.pulls)
            .zip(sums)
            .map(|((c, &n), sum)| {
                (n > 0).then(|| {
                    let scales = match c {
                        Counter::Binary(b) => b.scales(),
                        Counter::Hybrid(h) => h.scales(),
                    };
                    let per_mean: Vec<f64> = scales.iter().map(|b| b / n as f64).collect();
                    crate::report::Release::new(
                        sum / n as f64,
                        n,
                        crate::report::NoiseLaw::laplace_sum(&per_mean),
                    )
                    .with_index(n)
                })
            })
            .collect();
        Some(crate::report::Released {
            means,
            range,
            rounding: crate::report::grid_rounding(self.cfg.noise, self.cfg.grid_bits, range),
            releases_bound: 0,
            target: None,
        })
    }
    fn choose(&mut self, t: u64) -> Pull {
        super::gated_choose(self, |p| &mut p.gate, |p| p.decide(t))
    }
    fn observe(&mut self, arm: usize, reward: f64) -> Result<()> {
        // On a copy of the gate: a refused call (boundary, protocol, mechanism) changes nothing.
        let mut gate = self.gate;
        let r = gate.admit(arm, reward)?;
        // Deployment: onto the reward grid (every p-sum of grid values is then exact).
        let x = self.noise.discretise(r, 1, &self.boundary);
        let one = self.boundary.single(x)?;
        let mut counter = self.counters[arm].clone();
        match &mut counter {
            Counter::Binary(b) => {
                b.push(&one, &mut self.noise, &self.boundary)?;
            }
            Counter::Hybrid(h) => h.push(&one, &mut self.noise, &self.boundary)?,
        }
        self.counters[arm] = counter;
        self.pulls[arm] += 1;
        self.gate = gate;
        Ok(())
    }
}

impl crate::config::Config for DpUcbConfig {
    fn validate(&mut self) -> Result<()> {
        DpUcbConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `variant` at `epsilon`, with the tree's horizon `h` for `dp_ucb`.
    fn cfg(epsilon: f64, variant: DpUcbVariant, h: u64) -> DpUcbConfig {
        let horizon = (variant == DpUcbVariant::Tree).then_some(h);
        DpUcbConfig::new(epsilon, variant, horizon)
    }

    fn run(p: &mut DpUcb, reward: impl Fn(usize, u64) -> f64, horizon: u64) -> Vec<u64> {
        let mut counts = vec![0; p.num_arms()];
        for t in 0..horizon {
            let pull = p.choose(t);
            assert_eq!(pull.steps, 1);
            p.observe(pull.arm, reward(pull.arm, t)).unwrap();
            counts[pull.arm] += 1;
        }
        counts
    }

    /// One release per reward, cached: the released sums change only for the arm just observed,
    /// never while choosing.
    #[test]
    fn one_release_per_reward_and_cached() {
        for v in [
            DpUcbVariant::Tree,
            DpUcbVariant::HybridBound,
            DpUcbVariant::HybridMixture,
        ] {
            let mut p = DpUcb::new(3, cfg(1.0, v, 64), 4).unwrap();
            let mut hybrid_blocks = 0;
            for t in 0..200 {
                let before = p.released_sums();
                let pull = p.choose(t);
                assert_eq!(p.choose(t), pull);
                assert_eq!(p.released_sums(), before);
                let n_before = p.releases();
                p.observe(pull.arm, 0.5).unwrap();
                let after = p.released_sums();
                for a in 0..3 {
                    if a != pull.arm {
                        assert_eq!(after[a], before[a]);
                    }
                }
                let made = p.releases() - n_before;
                assert!(
                    made == 1 || (v != DpUcbVariant::Tree && made == 2),
                    "{made}"
                );
                hybrid_blocks += made - 1;
            }
            if v != DpUcbVariant::Tree {
                assert!(hybrid_blocks > 0);
            }
        }
    }

    /// The kinds learn an easy instance (means 0.9 / 0.1, epsilon = 10): the better arm gets
    /// most pulls.
    #[test]
    fn easy_instance() {
        for v in [
            DpUcbVariant::Tree,
            DpUcbVariant::HybridBound,
            DpUcbVariant::HybridMixture,
        ] {
            let mut p = DpUcb::new(2, cfg(10.0, v, 4000), 7).unwrap();
            let counts = run(
                &mut p,
                |a, t| {
                    if a == 0 {
                        f64::from(t % 10 != 0)
                    } else {
                        f64::from(t % 10 == 0)
                    }
                },
                4000,
            );
            assert!(counts[0] > 3 * counts[1], "{v:?}: {counts:?}");
        }
    }

    /// Rewards are clipped at the privacy boundary; a refused reward changes nothing.
    #[test]
    fn boundary_and_refusals() {
        let cfg = DpUcbConfig::new(1e9, DpUcbVariant::HybridMixture, None);
        let mut p = DpUcb::new(2, cfg, 1).unwrap();
        let pull = p.choose(0);
        assert!(p.observe(1 - pull.arm, 0.5).is_err());
        p.observe(pull.arm, 7.0).unwrap();
        assert!((p.released_sums()[pull.arm] - 1.0).abs() < 1e-6);
        assert!(p.observe(pull.arm, 0.5).is_err(), "no open commitment");
        let mut reject = DpUcbConfig::new(1.0, DpUcbVariant::Tree, Some(8));
        reject.boundary = BoundaryMode::Reject;
        let mut p = DpUcb::new(2, reject, 1).unwrap();
        let pull = p.choose(0);
        let before = p.released_sums();
        assert!(p.observe(pull.arm, 1.5).is_err());
        assert_eq!(p.released_sums(), before);
        p.observe(pull.arm, 1.0).unwrap();
    }

    #[test]
    fn bad_config() {
        let e = DpUcbConfig::new(1.0, DpUcbVariant::Tree, None)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("horizon"), "{e}");
        let e = DpUcbConfig::new(1.0, DpUcbVariant::HybridBound, Some(8))
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("horizon = 8"), "{e}");
        assert!(
            DpUcbConfig::new(0.0, DpUcbVariant::HybridBound, None)
                .validate()
                .is_err()
        );
        let c = DpUcbConfig::new(2.0, DpUcbVariant::Tree, Some(8));
        assert_eq!(c.releases_per_reward(0), 4);
        assert_eq!(c.releases_per_reward(7), 1);
        assert_eq!(
            DpUcbConfig::new(2.0, DpUcbVariant::HybridBound, None).releases_per_reward(3),
            4
        );
        assert!(matches!(c.guarantee().budget, Budget::PureDp { epsilon } if epsilon == 2.0));
        assert!(c.guarantee().notion.contains("epsilon^2/2-zCDP"));
    }
}

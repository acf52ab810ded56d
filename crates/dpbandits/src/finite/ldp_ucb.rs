//! LDP-UCB: UCB on locally privatised rewards (epsilon-local DP), with a Laplace (LDP-UCB-L) or
//! Bernoulli-response (LDP-UCB-B) randomiser on each reward.
//!
//! # Algorithm
//! Ren, Zhou, Liu & Shroff (2020, arXiv:2007.03121), "Multi-Armed Bandits with Local Differential
//! Privacy", Sec. 4 (CTL / CTB mechanisms, LDP-UCB-L and LDP-UCB-B); our spec
//! `ldp-nonstationary-and-baselines.md` §5.9 (forms checked against a public replication).
//! * `mechanism = "laplace"` (LDP-UCB-L, convert-to-Laplace): the user sends `r + Lap(1/epsilon)`.
//!   With `t` the number of rounds played, any arm with `n_a <= 4 ln(t + 1)` is force-pulled
//!   (lowest index first); otherwise play `argmax mu~_a + sqrt(2 ln t / n_a) + sqrt(32 ln t / (epsilon^2 n_a))`.
//! * `mechanism = "bernoulli"` (LDP-UCB-B, convert-to-Bernoulli): the user sends one bit drawn from
//!   `Bernoulli(((e^eps - 1) r + 1) / (e^eps + 1))` (Bernoulli trick followed by optimal randomised
//!   response); the learner runs UCB1 (`sqrt(2 ln t / n_a)`, each arm once first) on the bits.
//!   The bit mean `(1 + (e^eps - 1) mu)/(e^eps + 1)` is increasing in `mu`, so the order of the arms
//!   is preserved.
//!
//! # Privacy
//! * Notion: epsilon-local DP (each user's reward is privatised before the learner sees it),
//!   local trust model; the learner never sees a raw reward.
//! * Laplace: sensitivity 1 on [0, 1], scale `1/epsilon` ([`LaplaceMechanism::for_pure_dp`],
//!   rounded up).
//! * Bernoulli: for `r, r'` in [0, 1] the output probabilities differ by a factor at most
//!   `e^eps` (the extremes `r = 1`, `r' = 0` give exactly `e^eps`). The probabilities are computed
//!   from a working epsilon slightly below `eps` so that floating-point rounding cannot push the
//!   stored ratios above `e^eps` (see `bernoulli_response`; property-tested).
//! * Composition: each reward is randomised once, by its own user; everything the learner does is
//!   post-processing. Because the action sequence is a function of the privatised rewards, the
//!   same policy is also epsilon-DP in the central sense at reward-level adjacency.
//!
//! # Parameters
//! `epsilon > 0` (finite), `mechanism` (`laplace` | `bernoulli`, default `laplace`),
//! `boundary` (`clip` | `reject`), `noise` (`simulation` default | `deployment`: Laplace: each
//! reward rounded to the `2^-grid_bits` grid plus an exact discrete Laplace `Lap_Z(2^k/epsilon)`;
//! Bernoulli: exact coins, `P(1|r) = ((e^eps-1) r + 1)/(e^eps+1)` exactly; OS-keyed ChaCha20,
//! not reproducible; budget unchanged), `grid_bits` (1..=32, default 20).

use super::{Policy, PolicyConfig, Pull, argmax};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Result, check};
use crate::privacy::{
    BoundaryMode, Budget, DEFAULT_GRID_BITS, LaplaceMechanism, NoiseGrade, NoiseKind, NoiseSource,
    PrivacyGuarantee, RewardBoundary, TrustModel,
};
use crate::protocol::Gate;
use rand::RngExt;
use serde::Deserialize;

/// Registry record of `ldp_ucb`.
pub const LDP_UCB: AlgorithmInfo = AlgorithmInfo {
    kind: "ldp_ucb",
    name: "LDP-UCB-L / LDP-UCB-B",
    setting: Setting::FiniteArmed,
    reference: "Ren, Zhou, Liu & Shroff 2020 (arXiv:2007.03121), Sec. 4",
    privacy: "epsilon-local DP: Laplace (CTL) or Bernoulli response (CTB) on each reward",
    example: "epsilon = 1.0",
    source: file!(),
    doc: include_str!("ldp_ucb.rs"),
    private: true,
    release_keys: crate::config::PRIVATE_RELEASE,
};

/// The local randomiser applied to each reward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LocalMechanism {
    /// `r + Lap(1/epsilon)` (CTL, LDP-UCB-L).
    #[default]
    Laplace,
    /// One bit, `Bernoulli(((e^eps - 1) r + 1)/(e^eps + 1))` (CTB, LDP-UCB-B).
    Bernoulli,
}

/// `kind = "ldp_ucb"`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct LdpUcbConfig {
    /// Local-DP budget epsilon (finite, > 0).
    pub epsilon: f64,
    /// The local randomiser.
    #[serde(default)]
    pub mechanism: LocalMechanism,
    /// What to do with rewards outside [0, 1].
    #[serde(default)]
    pub boundary: BoundaryMode,
    /// Noise path (`simulation` default, `deployment`); absent from simulation snapshots.
    #[serde(default, skip_serializing_if = "is_simulation")]
    pub noise: NoiseKind,
    /// Deployment grid `2^-grid_bits` of the Laplace response (default 20; absent from
    /// snapshots when default).
    #[serde(default = "default_grid_bits", skip_serializing_if = "is_default_grid")]
    pub grid_bits: u32,
}

fn default_grid_bits() -> u32 {
    DEFAULT_GRID_BITS
}
fn is_simulation(k: &NoiseKind) -> bool {
    *k == NoiseKind::Simulation
}
fn is_default_grid(b: &u32) -> bool {
    *b == DEFAULT_GRID_BITS
}

impl LdpUcbConfig {
    /// LDP-UCB with clipping.
    pub fn new(epsilon: f64, mechanism: LocalMechanism) -> Self {
        LdpUcbConfig {
            epsilon,
            mechanism,
            boundary: BoundaryMode::Clip,
            noise: NoiseKind::Simulation,
            grid_bits: DEFAULT_GRID_BITS,
        }
    }

    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        match self.mechanism {
            // The Bernoulli response flips with probability 1/(1 + e^eps): beyond
            // LOCAL_EPSILON_MAX the simulated coin is deterministic (and a fair coin was what an
            // unbounded search used to fall back to: audit finding C2).
            LocalMechanism::Bernoulli => check::local_epsilon("epsilon", self.epsilon, false)?,
            LocalMechanism::Laplace => {
                check::finite("epsilon", self.epsilon)?;
                check::budget("epsilon", self.epsilon)?
            }
        };
        crate::privacy::check_noise(self.noise, self.grid_bits, self.epsilon.is_finite())?;
        Ok(())
    }
}

impl PolicyConfig for LdpUcbConfig {
    fn kind(&self) -> &'static str {
        LDP_UCB.kind
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        vec![("epsilon", self.epsilon)]
    }
    fn label(&self) -> String {
        let m = match self.mechanism {
            LocalMechanism::Laplace => "laplace",
            LocalMechanism::Bernoulli => "bernoulli",
        };
        crate::privacy::noise_label(
            format!("ldp_ucb(epsilon={},mechanism={m})", self.epsilon),
            self.noise,
            self.grid_bits,
        )
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        guarantee(self)
    }
    fn build(&self, k: usize, seed: u64) -> Result<Box<dyn Policy>> {
        Ok(Box::new(LdpUcb::new(k, self.clone(), seed)?))
    }
}

fn guarantee(cfg: &LdpUcbConfig) -> PrivacyGuarantee {
    let (epsilon, m, mode) = (cfg.epsilon, cfg.mechanism, cfg.boundary);
    if cfg.noise == NoiseKind::Deployment {
        return PrivacyGuarantee {
            mechanism: match m {
                LocalMechanism::Laplace => format!(
                    "CTL with a discrete Laplace (geometric) response (Ghosh, Roughgarden & \
                     Sundararajan 2009; sampler: Canonne, Kamath & Steinke 2020, Alg. 2): each \
                     reward clipped to [0,1] and rounded to the 2^-{k} grid (integer sensitivity \
                     2^{k}), plus Lap_Z(2^{k}/epsilon) exactly, sent once as (units + noise)/2^{k}; \
                     noise from ChaCha20 seeded by the operating system: outputs are not \
                     reproducible",
                    k = cfg.grid_bits
                ),
                LocalMechanism::Bernoulli => "CTB with exact discrete coins: each reward clipped \
                     to [0,1], b ~ Bernoulli(r) exact for the f64 reward, kept with probability \
                     e^eps/(1+e^eps) exactly (Bernoulli factory on Canonne, Kamath & Steinke \
                     2020 Alg. 1 coins), i.e. P(1|r) = ((e^eps-1) r + 1)/(e^eps+1) exactly; coins \
                     from ChaCha20 seeded by the operating system: outputs are not reproducible"
                    .into(),
            },
            noise: NoiseGrade::Deployment,
            ..guarantee(&LdpUcbConfig {
                noise: NoiseKind::Simulation,
                ..cfg.clone()
            })
        };
    }
    PrivacyGuarantee {
        notion: "epsilon-local DP (Ren, Zhou, Liu & Shroff 2020, Def. 1)".into(),
        model: TrustModel::Local,
        adjacency: "local: any two rewards in [0,1] of one user (implies reward-level central DP \
                    of the action sequence)"
            .into(),
        budget: Budget::PureDp { epsilon },
        mechanism: match m {
            LocalMechanism::Laplace => {
                "CTL: each reward clipped to [0,1] plus Lap(1/epsilon) (sensitivity 1), sent once"
            }
            LocalMechanism::Bernoulli => {
                "CTB: each reward clipped to [0,1] sent as one bit ~ Bernoulli(((e^eps-1) r + 1)/(e^eps+1))"
            }
        }
        .into(),
        boundary: Some(RewardBoundary::unit(mode)),
        noise: NoiseGrade::Simulation,
    }
}

/// `(P(bit = 1 | r = 0), P(bit = 1 | r = 1))` of the Bernoulli response, calibrated so that both
/// worst-case ratios `p1 / p0` and `(1 - p0) / (1 - p1)`, evaluated on the stored doubles (with
/// `1 - p1` exact by Sterbenz's lemma), have a logarithm `<= epsilon`: start from
/// `epsilon (1 - 1e-12)` and lower the working epsilon (doubling the step) until they do. For large
/// epsilon the margin grows because `1 - p1` is only resolved to 2^-53.
fn bernoulli_response(epsilon: f64) -> (f64, f64) {
    let mut step = epsilon * 1e-12;
    // epsilon <= LOCAL_EPSILON_MAX (validated), so p1 < 1 and the first few steps succeed; the
    // search ends in at most ~45 doublings (at e = 0, the fair coin, whose loss is 0).
    loop {
        let e = (epsilon - step).max(0.0);
        let p0 = 1.0 / (e.exp() + 1.0);
        let p1 = 1.0 - p0;
        let lo = 1.0 - p1;
        if (p1 / p0).ln() <= epsilon && (p1 / lo).ln() <= epsilon {
            return (p0, p1);
        }
        step *= 2.0;
    }
}

/// LDP-UCB state.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LdpUcb {
    gate: Gate,
    cfg: LdpUcbConfig,
    boundary: RewardBoundary,
    laplace: LaplaceMechanism,
    /// Bernoulli response: P(bit = 1) = p0 + (p1 - p0) r.
    p0: f64,
    p1: f64,
    counts: Vec<u64>,
    sums: Vec<f64>,
    /// Seeded stream (simulation; the same bytes as the former `SimRng` field) or the OS-keyed
    /// exact path (a marker in snapshots).
    noise: NoiseSource,
}

impl LdpUcb {
    /// LDP-UCB on `k >= 1` arms; `seed` keys the (user-side) randomiser stream.
    pub fn new(k: usize, cfg: LdpUcbConfig, seed: u64) -> Result<Self> {
        check::arms("K", k)?;
        cfg.validate()?;
        let boundary = RewardBoundary::unit(cfg.boundary);
        let (p0, p1) = bernoulli_response(cfg.epsilon);
        let noise = NoiseSource::new(cfg.noise, cfg.grid_bits, seed)?;
        Ok(LdpUcb {
            gate: Gate::new(RewardBoundary::unit(cfg.boundary)),
            laplace: LaplaceMechanism::for_pure_dp(boundary.width(), cfg.epsilon)?,
            p0,
            p1,
            boundary,
            cfg,
            counts: vec![0; k],
            sums: vec![0.0; k],
            noise,
        })
    }

    /// Probability that the bit is 1 for reward `r` (after clipping).
    pub fn bit_probability(&self, r: f64) -> f64 {
        let r = (self.boundary.clip(r) - self.boundary.lo) / self.boundary.width();
        if r >= 1.0 {
            self.p1
        } else {
            self.p0 + (self.p1 - self.p0) * r
        }
    }

    /// The privatised value the learner receives for reward `r` (the user-side randomiser).
    pub fn privatise(&mut self, r: f64) -> f64 {
        let r = self.boundary.clip(r);
        // r is clipped into the unit boundary and epsilon is validated: the calls below cannot
        // fail (their errors are for bad parameters only).
        let p = self.bit_probability(r);
        if let Some(rng) = self.noise.simulation_rng() {
            // The simulation path: the float mechanisms on the seeded stream, as before.
            return match self.cfg.mechanism {
                LocalMechanism::Laplace => self.laplace.release(r, rng),
                LocalMechanism::Bernoulli => f64::from(u8::from(rng.random::<f64>() < p)),
            };
        }
        match self.cfg.mechanism {
            LocalMechanism::Laplace => {
                let rounded = self.noise.discretise(r, 1, &self.boundary);
                let sum = self
                    .boundary
                    .single(rounded)
                    .expect("on the grid, in [0, 1]");
                self.noise
                    .laplace_sum(
                        self.boundary.width(),
                        self.cfg.epsilon,
                        &sum,
                        &self.boundary,
                    )
                    .expect("validated")
                    .0
            }
            LocalMechanism::Bernoulli => {
                let unit = (r - self.boundary.lo) / self.boundary.width();
                let bit = self
                    .noise
                    .local_bit(self.cfg.epsilon, unit)
                    .expect("validated");
                f64::from(u8::from(bit))
            }
        }
    }

    /// Pulls of each arm.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }
}

impl Policy for LdpUcb {
    fn released_estimates(&self) -> Option<crate::report::Released> {
        // Local DP: every privatized reward is public, so the running mean of an arm's `n`
        // privatized rewards is its `n`-th release. Laplace (CTL): `r + Lap(b)`, the average's
        // noise sd `sqrt(2) b / sqrt(n)` (normal approximation); Bernoulli (CTB): bits with mean
        // `p0 + (p1 - p0) mu`, mapped back to `mu` (one bit's range is `1/(p1 - p0)` there).
        let range = (self.boundary.lo, self.boundary.hi);
        let width = self.boundary.width();
        let means = self
            .counts
            .iter()
            .zip(&self.sums)
            .map(|(&n, &s)| {
                if n == 0 {
                    return None;
                }
                let m = s / n as f64;
                let rel = match self.cfg.mechanism {
                    LocalMechanism::Laplace => crate::report::Release::new(
                        m,
                        n,
                        crate::report::NoiseLaw::Gaussian {
                            sd: std::f64::consts::SQRT_2 * self.laplace.scale() / (n as f64).sqrt(),
                        },
                    ),
                    LocalMechanism::Bernoulli => {
                        let gain = self.p1 - self.p0;
                        let mut r = crate::report::Release::new(
                            range.0 + width * (m - self.p0) / gain,
                            n,
                            crate::report::NoiseLaw::Gaussian { sd: 0.0 },
                        );
                        r.spread = Some(width / gain);
                        r
                    }
                };
                Some(rel.with_index(n))
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
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(Setting::FiniteArmed, LDP_UCB.kind, self)
    }
    fn num_arms(&self) -> usize {
        self.counts.len()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        guarantee(&self.cfg)
    }
    fn choose(&mut self, t: u64) -> Pull {
        super::gated_choose(self, |p| &mut p.gate, |p| p.decide(t))
    }
    fn observe(&mut self, arm: usize, reward: f64) -> Result<()> {
        let reward = self.gate.admit(arm, reward)?;
        let x = self.privatise(reward);
        self.counts[arm] += 1;
        self.sums[arm] += x;
        Ok(())
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
}
impl LdpUcb {
    /// The algorithm's choice when no commitment is open.
    fn decide(&mut self, t: u64) -> Pull {
        let ln_t = (t.max(1) as f64).ln();
        let arm = match self.cfg.mechanism {
            LocalMechanism::Laplace => {
                let force = 4.0 * ((t + 1) as f64).ln();
                if let Some(a) = self.counts.iter().position(|&n| n as f64 <= force) {
                    a
                } else {
                    let e2 = self.cfg.epsilon * self.cfg.epsilon;
                    argmax(self.counts.iter().zip(&self.sums).map(|(&n, &s)| {
                        let n = n as f64;
                        s / n + (2.0 * ln_t / n).sqrt() + (32.0 * ln_t / (e2 * n)).sqrt()
                    }))
                }
            }
            LocalMechanism::Bernoulli => {
                if let Some(a) = self.counts.iter().position(|&n| n == 0) {
                    a
                } else {
                    argmax(self.counts.iter().zip(&self.sums).map(|(&n, &s)| {
                        let n = n as f64;
                        s / n + (2.0 * ln_t / n).sqrt()
                    }))
                }
            }
        };
        Pull { arm, steps: 1 }
    }
}

impl crate::config::Config for LdpUcbConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        LdpUcbConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Bernoulli response is epsilon-LDP: the probability ratio over any two rewards is at most
    /// e^eps (checked at the extremes, which are the worst case of an affine map), and its mean is
    /// affine increasing in r.
    #[test]
    fn bernoulli_response_ratio() {
        for eps in [0.01, 0.5, 1.0, 3.0, 10.0] {
            let p = LdpUcb::new(2, LdpUcbConfig::new(eps, LocalMechanism::Bernoulli), 0).unwrap();
            let (a, b) = (p.bit_probability(1.0), p.bit_probability(0.0));
            assert!(a / b <= eps.exp(), "eps {eps}");
            assert!((1.0 - b) / (1.0 - a) <= eps.exp());
            assert!(a / b > eps.exp() * (1.0 - 1e-9));
            assert!(p.bit_probability(0.5) > b && p.bit_probability(0.5) < a);
            assert_eq!(p.bit_probability(7.0), a);
        }
    }

    /// Mean of the privatised values: Laplace is unbiased, Bernoulli has mean g(r) (200k draws;
    /// tolerance > 6 standard errors, false-failure rate < 1e-8).
    #[test]
    fn randomisers_have_the_right_mean() {
        let n = 200_000;
        let mut l = LdpUcb::new(1, LdpUcbConfig::new(1.0, LocalMechanism::Laplace), 1).unwrap();
        let m = (0..n).map(|_| l.privatise(0.3)).sum::<f64>() / n as f64;
        assert!(
            (m - 0.3).abs() < 6.0 * (2.0f64).sqrt() / (n as f64).sqrt(),
            "{m}"
        );
        let mut b = LdpUcb::new(1, LdpUcbConfig::new(1.0, LocalMechanism::Bernoulli), 1).unwrap();
        let g = b.bit_probability(0.3);
        let m = (0..n).map(|_| b.privatise(0.3)).sum::<f64>() / n as f64;
        assert!((m - g).abs() < 6.0 * 0.5 / (n as f64).sqrt(), "{m} vs {g}");
    }

    fn deployment(eps: f64, m: LocalMechanism, grid_bits: u32) -> LdpUcb {
        let mut cfg = LdpUcbConfig::new(eps, m);
        cfg.noise = NoiseKind::Deployment;
        cfg.grid_bits = grid_bits;
        LdpUcb::new(1, cfg, 0).unwrap()
    }

    /// Deployment CTL: the integer noise recovered from 40k OS-seeded responses to r = 0.3 on the
    /// 2^-4 grid (5 units; sensitivity 16, eps = 1 -> Lap_Z(16)) follows Lap_Z(16) (chi-square +
    /// KS at alpha = 1e-6 each: not seedable, false-failure rate <= 2e-6 per run); the same draws
    /// are rejected as Lap_Z(14.4) (a 10% wrong scale).
    #[test]
    fn deployment_laplace_response_is_calibrated() {
        use crate::privacy::discrete::tests::check_pmf;
        let mut p = deployment(1.0, LocalMechanism::Laplace, 4);
        assert_eq!(p.guarantee().noise, NoiseGrade::Deployment);
        assert_eq!(p.guarantee().budget, Budget::PureDp { epsilon: 1.0 });
        let draws: Vec<i128> = (0..40_000)
            .map(|_| {
                let y = p.privatise(0.3) * 16.0 - 5.0;
                assert_eq!(y, y.round());
                y as i128
            })
            .collect();
        check_pmf(
            &draws,
            |y| (-(y.abs() as f64) / 16.0).exp(),
            700,
            "CTL Lap_Z(16)",
        );
        let r = std::panic::catch_unwind(|| {
            check_pmf(&draws, |y| (-(y.abs() as f64) / 14.4).exp(), 700, "x")
        });
        assert!(r.is_err(), "Lap_Z(16) passed as Lap_Z(14.4)");
    }

    /// Deployment CTB: the bits follow `((e^eps - 1) r + 1)/(e^eps + 1)` (Wilson interval at
    /// 1 - 1e-6 of 200k OS-seeded bits per case: false-failure rate <= 1e-6 per case, <= 6e-6
    /// per run) for eps in {0.5, 2} and r in {0, 0.3, 1}; at r in {0, 1} an eps 10% too large
    /// is excluded (power).
    #[test]
    fn deployment_bernoulli_response_is_exact() {
        use crate::privacy::discrete::tests::wilson;
        let law = |eps: f64, r: f64| ((eps.exp() - 1.0) * r + 1.0) / (eps.exp() + 1.0);
        let n = 200_000u64;
        for eps in [0.5, 2.0] {
            let mut p = deployment(eps, LocalMechanism::Bernoulli, 20);
            for r in [0.0, 0.3, 1.0] {
                let k = (0..n).filter(|_| p.privatise(r) == 1.0).count() as u64;
                let (lo, hi) = wilson(k, n, 4.891_638_475_699);
                assert!(
                    lo <= law(eps, r) && law(eps, r) <= hi,
                    "eps {eps} r {r}: {k}"
                );
                if r != 0.3 {
                    let wrong = law(1.1 * eps, r);
                    assert!(!(lo <= wrong && wrong <= hi), "eps {eps} r {r}: power");
                }
            }
        }
    }

    /// The simulation path is the old one draw for draw (same stream, same mechanisms).
    #[test]
    fn simulation_path_is_unchanged() {
        for m in [LocalMechanism::Laplace, LocalMechanism::Bernoulli] {
            let mut p = LdpUcb::new(2, LdpUcbConfig::new(0.7, m), 11).unwrap();
            let mut rng = crate::rng::noise_rng(11);
            let lap = LaplaceMechanism::for_pure_dp(1.0, 0.7).unwrap();
            for i in 0..50 {
                let r = (i % 7) as f64 / 6.0;
                let want = match m {
                    LocalMechanism::Laplace => lap.release(r, &mut rng),
                    LocalMechanism::Bernoulli => {
                        let q = p.bit_probability(r);
                        f64::from(u8::from(rng.random::<f64>() < q))
                    }
                };
                assert_eq!(p.privatise(r), want);
            }
        }
    }

    proptest::proptest! {
        /// Calibrated loss never above the budget: the Bernoulli response's worst-case probability
        /// ratio (r = 1 vs r = 0, both outputs) is <= e^eps in floating point, and the Laplace scale
        /// gives a loss <= eps.
        #[test]
        fn local_loss_never_above_budget(eps in 1e-4f64..20.0) {
            let p = LdpUcb::new(1, LdpUcbConfig::new(eps, LocalMechanism::Bernoulli), 0).unwrap();
            let (a, b) = (p.bit_probability(1.0), p.bit_probability(0.0));
            proptest::prop_assert!((a / b).ln() <= eps);
            proptest::prop_assert!(((1.0 - b) / (1.0 - a)).ln() <= eps);
            proptest::prop_assert!(p.laplace.epsilon_map(1.0) <= eps);
        }
    }

    #[test]
    fn labels_differ_and_config_errors() {
        let a = LdpUcbConfig::new(1.0, LocalMechanism::Laplace);
        let b = LdpUcbConfig::new(1.0, LocalMechanism::Bernoulli);
        assert_ne!(a.label(), b.label());
        assert_eq!(a.guarantee().model, TrustModel::Local);
        assert!(
            LdpUcb::new(
                2,
                LdpUcbConfig::new(f64::INFINITY, LocalMechanism::Laplace),
                0
            )
            .is_err()
        );
    }
}

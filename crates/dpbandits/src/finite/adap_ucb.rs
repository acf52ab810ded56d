//! AdaP-UCB and AdaP-KLUCB: epsilon-DP optimistic indices with adaptive (doubling) episodes,
//! forgetting and one Laplace release per episode.
//!
//! # Algorithm
//! Azize & Basu (NeurIPS 2022, arXiv:2209.02570), "When Privacy Meets Partial Information: A
//! Refined Analysis of Differentially Private Bandits", Algorithm 1 (the AdaP framework) with the
//! AdaP-UCB index (Algorithm 2) and the AdaP-KLUCB index (Algorithm 3); our spec
//! `ldp-nonstationary-and-baselines.md` §5.3.
//! 1. Pull every arm once (each single pull is the arm's first episode).
//! 2. Episode `l` starts at the 1-based round `t_l`. Every arm `a` has a cached private mean
//!    `mu~_a` of the rewards of its **last** episode only (forgetting), of size `n_a` (1 after the
//!    initial pull, `N_a / 2` afterwards; stored explicitly, spec §5.3, tagged PROPOSAL).
//!    * AdaP-UCB: `I_a = mu~_a + sqrt(alpha ln(2 t_l) / (2 n_a)) + alpha ln(t_l) / (epsilon n_a)`
//!      (the `ln(2 t_l)` is what the text the spec was written from shows; spec §5.3 flags a
//!      possible typo for `ln t_l`; the difference is `ln 2` inside a square root).
//!    * AdaP-KLUCB: `mu_breve = clip_[0,1](mu~_a + alpha ln(t_l) / (epsilon n_a))`,
//!      `I_a = max{q in [0,1] : kl(mu_breve, q) <= alpha ln(t_l) / n_a}`.
//! 3. Play `a_l = argmax I_a` (ties: lowest index) until its count doubles (`N_a` rounds).
//! 4. At the end of the episode release `mu~ = mean of the N_a new rewards + Lap(1/(epsilon L))`
//!    (L = the episode length) and forget the older samples.
//!
//! # Privacy
//! * Notion: epsilon-DP of the action sequence ("global" / central DP, Azize & Basu 2022, Def. 2),
//!   central trust model, reward-level adjacency.
//! * Mechanism: Laplace on the mean of one episode's `L` rewards clipped to [0, 1]
//!   (L1-sensitivity `1/L`), scale `b = 1/(epsilon L)`
//!   ([`LaplaceMechanism::for_pure_dp`](crate::privacy::LaplaceMechanism::for_pure_dp), rounded
//!   up so the loss is <= epsilon; Dwork & Roth Thm 3.6).
//! * Composition: every reward enters exactly one released mean, episodes are disjoint and their
//!   boundaries depend only on released statistics, so the joint release is epsilon-DP by parallel
//!   composition (Azize & Basu 2022, Lemma 1); the index and the arm choice are post-processing
//!   (Thm 6). As zCDP this is `epsilon^2/2`-zCDP (Bun & Steinke Prop. 1.4).
//! * Each private mean is sampled once, when its episode ends, and cached; indices recompute only
//!   public terms.
//! * Noise (`noise`): `simulation` (default) draws `f64` Laplace noise from the seeded noise stream
//!   (simulation-grade); `deployment` rounds rewards to the `2^-grid_bits` grid and adds exact
//!   discrete Laplace noise of scale `t = 2^k / epsilon` grid units to the integer episode sum
//!   (geometric mechanism: the same epsilon), from an OS-seeded CSPRNG ([`NoiseSource`];
//!   deployment-grade, not reproducible).
//!
//! # Parameters
//! `epsilon > 0` (inf = non-private limit), `alpha > 0` (theory needs alpha > 3; the paper's
//! experiments use 3.1, the default), `boundary` (`clip` | `reject`), `noise` (`simulation` |
//! `deployment`; finite epsilon only), `grid_bits` (1..=32, default 20: the deployment grid
//! `2^-grid_bits`).

use super::{Episode, InFlight, Pipelined, Policy, PolicyConfig, Pull, argmax};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Result, check};
use crate::math::kl::kl_upper;
use crate::privacy::{
    BoundaryMode, Budget, NoiseGrade, NoiseKind, NoiseSource, PrivacyGuarantee, REWARD_ADJACENCY,
    Release, RewardBoundary, RewardSum, TrustModel,
};
use crate::protocol::Gate;
use serde::Deserialize;

/// Registry record of `adap_ucb`.
pub const ADAP_UCB: AlgorithmInfo = AlgorithmInfo {
    kind: "adap_ucb",
    name: "AdaP-UCB",
    setting: Setting::FiniteArmed,
    reference: "Azize & Basu 2022 (arXiv:2209.02570), Alg. 1-2",
    privacy: "epsilon-DP (central), Laplace mechanism per (arm, episode)",
    example: "epsilon = 1.0",
    source: file!(),
    doc: include_str!("adap_ucb.rs"),
    private: true,
    release_keys: crate::config::PRIVATE_RELEASE,
};

/// Registry record of `adap_klucb`.
pub const ADAP_KLUCB: AlgorithmInfo = AlgorithmInfo {
    kind: "adap_klucb",
    name: "AdaP-KLUCB",
    setting: Setting::FiniteArmed,
    reference: "Azize & Basu 2022 (arXiv:2209.02570), Alg. 1 and 3",
    privacy: "epsilon-DP (central), Laplace mechanism per (arm, episode)",
    example: "epsilon = 1.0",
    source: file!(),
    doc: include_str!("adap_ucb.rs"),
    private: true,
    release_keys: crate::config::PRIVATE_RELEASE,
};

/// Which optimistic index the AdaP framework uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum AdaPIndex {
    /// AdaP-UCB (Algorithm 2).
    #[default]
    Ucb,
    /// AdaP-KLUCB (Algorithm 3).
    KlUcb,
}

/// `kind = "adap_ucb"` or `kind = "adap_klucb"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaPConfig {
    /// Pure-DP budget epsilon (`inf` = the non-private limit).
    pub epsilon: f64,
    /// Optimism parameter alpha (default 3.1, as in the paper's experiments).
    #[serde(default = "default_alpha")]
    pub alpha: f64,
    /// `boundary`, `noise`, `grid_bits`: parsed by the registry ([`Release`]).
    #[serde(default)]
    pub release: Release,
    /// Set by the registry from the kind.
    #[serde(skip)]
    pub index: AdaPIndex,
    /// A deliberately broken variant (auditor mutation tests only; never deserialized).
    #[serde(skip)]
    pub(crate) mutant: Option<crate::privacy::AuditMutant>,
}

fn default_alpha() -> f64 {
    3.1
}

impl AdaPConfig {
    /// AdaP-UCB or AdaP-KLUCB with the paper's alpha = 3.1 and clipping.
    pub fn new(epsilon: f64, index: AdaPIndex) -> Self {
        AdaPConfig {
            epsilon,
            alpha: default_alpha(),
            release: Release::default(),
            index,
            mutant: None,
        }
    }

    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        check::budget("epsilon", self.epsilon)?;
        check::positive("alpha", self.alpha)?;
        Ok(())
    }
}

impl PolicyConfig for AdaPConfig {
    fn kind(&self) -> &'static str {
        match self.index {
            AdaPIndex::Ucb => ADAP_UCB.kind,
            AdaPIndex::KlUcb => ADAP_KLUCB.kind,
        }
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        let mut p = vec![("epsilon", self.epsilon)];
        if self.alpha != default_alpha() {
            p.push(("alpha", self.alpha));
        }
        p
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        crate::privacy::mutant_guarantee(guarantee(self), self.mutant)
    }
    fn release(&self) -> Option<&Release> {
        Some(&self.release)
    }
    fn build(&self, k: usize, seed: u64) -> Result<Box<dyn Policy>> {
        Ok(Box::new(AdaP::new(k, self.clone(), seed)?))
    }
    /// Table II's right column (AdaP-UCB, Azize & Basu 2022, converted by `epsilon ->
    /// sqrt(2 rho)`, i.e. `rho = epsilon^2 / 2`): problem dependent (Thm 7 as Table II writes
    /// it) `sum_{Delta_a > 0} ((8 beta / Delta_a) ln T + 8 sqrt(beta / rho) ln T)` on an instance
    /// with known gaps, else minimax (Thm 12 as Table II writes it, orders: unit constants)
    /// `sqrt(K T ln T) + (K / sqrt(rho)) ln T`; `beta` = the configuration's `alpha` (the paper's
    /// experiments: 3.1). AdaP-UCB only; `epsilon = inf` drops the privacy term.
    fn regret_bound(
        &self,
        instance: &crate::config::BoundInstance,
    ) -> Option<crate::config::RegretBound> {
        use crate::config::{BoundTerm, RegretBound};
        if self.index != AdaPIndex::Ucb {
            return None;
        }
        let (beta, eps) = (self.alpha, self.epsilon);
        let rho = eps * eps / 2.0;
        let term = |coef: f64, t_pow: f64, log_pow: f64| BoundTerm {
            coef,
            t_pow,
            log_pow,
            log_mult: 1.0,
        };
        let gaps: Vec<f64> = instance.gaps.iter().copied().filter(|&g| g > 0.0).collect();
        let (source, formula, mut terms) = if gaps.is_empty() {
            let k = instance.k as f64;
            (
                "Azize & Basu 2022, Thm 12, converted in Azize & Basu 2024 Table II (orders; unit constants)",
                format!(
                    "sqrt(K T ln T) + (K / sqrt(rho)) ln T, rho = epsilon^2/2 = {rho}, K = {k}"
                ),
                vec![term(k.sqrt(), 0.5, 0.5), term(k / rho.sqrt(), 0.0, 1.0)],
            )
        } else {
            let inv: f64 = gaps.iter().map(|g| 1.0 / g).sum();
            (
                "Azize & Basu 2022, Thm 7, converted in Azize & Basu 2024 Table II",
                format!(
                    "sum over Delta_a > 0 of ((8 beta / Delta_a) ln T + 8 sqrt(beta / rho) ln T), beta = alpha = {beta}, rho = epsilon^2/2 = {rho}"
                ),
                vec![
                    term(8.0 * beta * inv, 0.0, 1.0),
                    term(gaps.len() as f64 * 8.0 * (beta / rho).sqrt(), 0.0, 1.0),
                ],
            )
        };
        terms.retain(|t| t.coef > 0.0 && t.coef.is_finite());
        Some(RegretBound {
            source,
            formula,
            terms,
            alternatives: vec![],
        })
    }
}

fn guarantee(cfg: &AdaPConfig) -> PrivacyGuarantee {
    let (epsilon, mode) = (cfg.epsilon, cfg.release.boundary);
    if epsilon.is_infinite() {
        return PrivacyGuarantee::non_private();
    }
    PrivacyGuarantee {
        notion: "epsilon-DP of the action sequence (Azize & Basu 2022, Def. 2; Thm 6)".into(),
        model: TrustModel::Central,
        adjacency: REWARD_ADJACENCY.into(),
        budget: Budget::PureDp { epsilon },
        mechanism: match cfg.release.noise {
            NoiseKind::Simulation => {
                "Laplace mechanism on each (arm, episode) mean of rewards clipped to [0,1]: \
                 scale 1/(epsilon L), L = episode length (Alg. 1); released once per episode and \
                 cached; disjoint episodes compose in parallel (Lemma 1); f64 noise from the seeded \
                 noise stream"
                    .into()
            }
            NoiseKind::Deployment => format!(
                "discrete Laplace (geometric) mechanism (Ghosh, Roughgarden & Sundararajan 2009; \
                 sampler: Canonne, Kamath & Steinke 2020, Alg. 2) on each (arm, episode) integer \
                 sum of L rewards clipped to [0,1] and rounded to the 2^-{k} grid (sensitivity \
                 2^{k}): scale t = 2^{k}/epsilon exactly (the same epsilon as Alg. 1); released \
                 mean (sum + noise) / (2^{k} L), once per episode and cached; disjoint episodes \
                 compose in parallel (Lemma 1); an episode with L > 2^(53-{k}) rewards uses the \
                 grid 2^-k', k' = 53 - ceil(log2 L) (public, keeps sums exact); noise from \
                 ChaCha20 seeded by the operating system: outputs are not reproducible",
                k = cfg.release.grid_bits
            ),
        },
        boundary: Some(RewardBoundary::unit(mode)),
        noise: NoiseGrade::of(cfg.release.noise),
    }
}

/// The snapshot form of [`AdaPConfig`]: every field, including the index the registry sets, in
/// the order snapshots had before the release keys became one [`Release`] (so a snapshot's bytes
/// did not change).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AdaPConfigFields {
    epsilon: f64,
    alpha: f64,
    boundary: BoundaryMode,
    index: AdaPIndex,
    noise: NoiseKind,
    grid_bits: u32,
}

/// `#[serde(with)]` of [`AdaP::cfg`] through [`AdaPConfigFields`] (a restored policy is never a
/// mutant).
struct AdaPConfigSnap;

impl AdaPConfigSnap {
    fn serialize<S: serde::Serializer>(
        c: &AdaPConfig,
        s: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serde::Serialize::serialize(
            &AdaPConfigFields {
                epsilon: c.epsilon,
                alpha: c.alpha,
                boundary: c.release.boundary,
                index: c.index,
                noise: c.release.noise,
                grid_bits: c.release.grid_bits,
            },
            s,
        )
    }
    fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<AdaPConfig, D::Error> {
        let f = <AdaPConfigFields as serde::Deserialize>::deserialize(d)?;
        Ok(AdaPConfig {
            epsilon: f.epsilon,
            alpha: f.alpha,
            release: Release {
                boundary: f.boundary,
                noise: f.noise,
                grid_bits: f.grid_bits,
            },
            index: f.index,
            mutant: None,
        })
    }
}

/// AdaP-UCB / AdaP-KLUCB state.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaP {
    #[serde(with = "AdaPConfigSnap")]
    cfg: AdaPConfig,
    boundary: RewardBoundary,
    pulls: Vec<u64>,
    /// Cached private mean of each arm's last episode.
    released: Vec<Option<f64>>,
    /// Size of that episode (`n_a`).
    last_len: Vec<u64>,
    /// Laplace scale used for each arm's last release.
    last_scale: Vec<f64>,
    episode: Option<Episode>,
    gate: Gate,
    noise: NoiseSource,
    releases: u64,
    /// Raw (sum, count) of each arm's last release: read only by the auditor's mutants.
    raw: Vec<RewardSum>,
    /// Running sum of every clipped reward of each arm (mutant `ForgetlessReleases` only).
    all_sums: Vec<RewardSum>,
    /// Episodes in flight when driven pipelined (`pipeline.rs`; empty otherwise, and then not
    /// in the snapshot).
    #[serde(default, skip_serializing_if = "InFlight::is_empty")]
    ahead: InFlight,
}

impl AdaP {
    /// AdaP on `k >= 1` arms; `seed` keys its noise stream.
    pub fn new(k: usize, cfg: AdaPConfig, seed: u64) -> Result<Self> {
        check::arms("K", k)?;
        cfg.validate()?;
        let boundary = RewardBoundary::unit(cfg.release.boundary);
        let noise = NoiseSource::new(cfg.release.noise, cfg.release.grid_bits, seed)?;
        Ok(AdaP {
            gate: Gate::new(boundary),
            boundary,
            cfg,
            pulls: vec![0; k],
            released: vec![None; k],
            last_len: vec![0; k],
            last_scale: vec![0.0; k],
            episode: None,
            noise,
            releases: 0,
            raw: vec![boundary.empty_sum(); k],
            all_sums: vec![boundary.empty_sum(); k],
            ahead: InFlight::default(),
        })
    }

    /// Total pulls of each arm: the rounds of finished episodes plus the rewards observed so far
    /// in the episode in progress (public: counts, not rewards).
    pub fn pulls(&self) -> Vec<u64> {
        let mut p = self.pulls.clone();
        if let Some(ep) = &self.episode {
            p[ep.arm] += ep.sum.n();
        }
        p
    }

    /// Pulls of each arm in finished episodes only (the counts the index uses; powers of two
    /// after the initial round).
    pub fn finished_pulls(&self) -> &[u64] {
        &self.pulls
    }

    /// Cached private means (`None` before an arm's first episode ends).
    pub fn released_means(&self) -> &[Option<f64>] {
        &self.released
    }

    /// `(episode length, Laplace scale)` of each arm's last release.
    pub fn last_release(&self, arm: usize) -> (u64, f64) {
        (self.last_len[arm], self.last_scale[arm])
    }

    /// Number of private releases so far (one per finished episode).
    pub fn releases(&self) -> u64 {
        self.releases
    }

    fn index(&self, a: usize, t_l: f64) -> f64 {
        let Some(mu) = self.released[a] else {
            return f64::INFINITY;
        };
        let n = self.last_len[a] as f64;
        let eps = self.cfg.epsilon;
        let alpha = self.cfg.alpha;
        let priv_term = if eps.is_infinite() {
            0.0
        } else {
            alpha * t_l.ln() / (eps * n)
        };
        match self.cfg.index {
            AdaPIndex::Ucb => mu + (alpha * (2.0 * t_l).ln() / (2.0 * n)).sqrt() + priv_term,
            AdaPIndex::KlUcb => {
                let breve = (mu + priv_term).clamp(0.0, 1.0);
                kl_upper(breve, alpha * t_l.ln() / n)
            }
        }
    }

    fn finish_episode(&mut self, ep: Episode) -> Result<()> {
        let a = ep.arm;
        self.pulls[a] += ep.len;
        self.all_sums[a].add(&ep.sum)?;
        let previous = self.raw[a];
        self.raw[a] = ep.sum;
        if self.cfg.mutant == Some(crate::privacy::AuditMutant::ForgetlessReleases) {
            // MUTANT: the running mean of every reward of the arm, calibrated as a single release.
            self.raw[a] = self.all_sums[a];
        }
        let mut sum = self.raw[a];
        if self.cfg.mutant == Some(crate::privacy::AuditMutant::TwoEpisodeReleases) {
            // MUTANT: the mean of the last two episodes, calibrated as a single release.
            sum.add(&previous)?;
        }
        let scale = self.release(a, &sum)?;
        self.last_len[a] = ep.len;
        self.last_scale[a] = scale;
        self.releases += 1;
        self.episode = None;
        Ok(())
    }

    /// Release the mean of the rewards of `sum` for arm `a` (Laplace, sensitivity `1/n`);
    /// returns the noise scale.
    fn release(&mut self, a: usize, sum: &RewardSum) -> Result<f64> {
        let l = sum.n() as f64;
        let (mean, scale) = self.noise.laplace_mean(
            self.boundary.width() / l,
            self.cfg.epsilon,
            sum,
            &self.boundary,
        )?;
        self.released[a] = Some(mean);
        Ok(scale)
    }
}

impl Policy for AdaP {
    fn pipelined(&mut self) -> Option<&mut dyn Pipelined> {
        Some(self)
    }
    fn released_estimates(&self) -> Option<crate::report::Released> {
        // The cached releases (each arm's last finished episode, never re-sampled) with their
        // episode length and Laplace scale. Rounding on the deployment path: as AdaC-UCB's.
        let range = (self.boundary.lo, self.boundary.hi);
        let rounding =
            crate::report::grid_rounding(self.cfg.release.noise, self.cfg.release.grid_bits, range);
        let means = (0..self.released.len())
            .map(|a| {
                self.released[a].map(|value| {
                    crate::report::Release::new(
                        value,
                        self.last_len[a],
                        crate::report::NoiseLaw::Laplace {
                            scale: self.last_scale[a],
                        },
                    )
                })
            })
            .collect();
        // Episodes double, as AdaC-UCB's: at most floor(log2 t) + 2 releases per arm.
        let t: u64 = self.pulls.iter().sum::<u64>().max(1);
        Some(crate::report::Released {
            means,
            range,
            rounding,
            releases_bound: u64::from(t.ilog2()) + 2,
            target: None,
        })
    }
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(Setting::FiniteArmed, self.cfg.kind(), self)
    }
    fn num_arms(&self) -> usize {
        self.pulls.len()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        self.cfg.guarantee()
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
    fn choose(&mut self, t: u64) -> Pull {
        if let Some(ep) = self.episode {
            return ep.remaining();
        }
        let (arm, len) = if let Some(a) = self.released.iter().position(Option::is_none) {
            (a, 1)
        } else {
            if self.cfg.mutant == Some(crate::privacy::AuditMutant::ResampleReleases) {
                // MUTANT: fresh noise on every index evaluation.
                for a in 0..self.released.len() {
                    let sum = self.raw[a];
                    let _ = self.release(a, &sum);
                }
            }
            let t_l = t as f64 + 1.0;
            let a = argmax((0..self.pulls.len()).map(|a| self.index(a, t_l)));
            (a, self.pulls[a])
        };
        self.episode = Some(Episode::start(arm, len, &self.boundary));
        self.gate.commit(arm, len);
        Pull { arm, steps: len }
    }
    fn observe(&mut self, arm: usize, reward: f64) -> Result<()> {
        let one = self.gate.boundary().single(reward)?;
        self.observe_batch(arm, &one)
    }
    fn observe_batch(&mut self, arm: usize, sum: &RewardSum) -> Result<()> {
        let (gate, done) = super::episode_step(
            self.gate,
            &self.noise,
            &self.boundary,
            &mut self.episode,
            arm,
            sum,
        )?;
        if let Some(ep) = done {
            self.finish_episode(ep)?;
        }
        self.gate = gate;
        Ok(())
    }
}

/// Pipelined episodes (`pipeline.rs`): the AdaP index on the released statistics, the episode
/// doubling the arm's committed count; `n_a` stays the length of the arm's last released
/// episode.
impl Pipelined for AdaP {
    fn open_ahead(&mut self, first: u64) -> Result<Pull> {
        if self.episode.is_some() {
            return Err(crate::error::Error::Protocol(
                "open_ahead: an episode is open (the policy is driven one episode at a time)"
                    .into(),
            ));
        }
        let t_l = first as f64 + 1.0;
        let (arm, len) = self.ahead.pick(
            &self.pulls,
            |a| self.released[a].is_some(),
            |a| self.index(a, t_l),
        );
        self.ahead
            .open(first, arm, len, &self.pulls, &self.boundary)
    }
    fn settle(&mut self, first: u64, arm: usize, sum: &RewardSum) -> Result<()> {
        let (ep, _) = self
            .ahead
            .settle(first, arm, sum, &self.noise, &self.boundary)?;
        self.finish_episode(ep)
    }
    fn in_flight(&self) -> usize {
        self.ahead.len()
    }
}

impl crate::config::Config for AdaPConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        AdaPConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spec ldp §7.5.3: counts double, every reward enters exactly one release, at most
    /// ceil(log2 T) + 1 releases per arm, Laplace scale = 1/(epsilon n_last).
    #[test]
    fn episodes_and_calibration() {
        for index in [AdaPIndex::Ucb, AdaPIndex::KlUcb] {
            let eps = 0.7;
            let mut p = AdaP::new(3, AdaPConfig::new(eps, index), 5).unwrap();
            let horizon = 50_000u64;
            let mut t = 0;
            let mut per_arm = [0u64; 3];
            let mut observed = 0u64;
            while t < horizon {
                let pull = p.choose(t);
                let before = p.pulls()[pull.arm];
                if before > 0 {
                    assert_eq!(pull.steps, before, "episode doubles the count");
                } else {
                    assert_eq!(pull.steps, 1);
                }
                p.observe_batch(
                    pull.arm,
                    &p.boundary().drawn_sum(0.5 * pull.steps as f64, pull.steps),
                )
                .unwrap();
                observed += pull.steps;
                per_arm[pull.arm] += 1;
                let (len, scale) = p.last_release(pull.arm);
                assert_eq!(len, pull.steps);
                let want = 1.0 / (eps * len as f64);
                assert!(scale >= want && scale < want * (1.0 + 1e-12));
                t += pull.steps;
            }
            // every observed reward is in exactly one finished release
            assert_eq!(p.pulls().iter().sum::<u64>(), observed);
            assert_eq!(p.releases(), per_arm.iter().sum::<u64>());
            let bound = (horizon as f64).log2().ceil() as u64 + 1;
            for n in per_arm {
                assert!(n <= bound, "{n} releases > {bound}");
            }
        }
    }

    /// The cached private mean only changes when its arm finishes an episode.
    #[test]
    fn released_mean_is_cached() {
        let mut p = AdaP::new(2, AdaPConfig::new(0.5, AdaPIndex::Ucb), 1).unwrap();
        for t in 0..3000u64 {
            let pull = p.choose(t);
            let before = p.released_means().to_vec();
            assert_eq!(p.choose(t), pull);
            let rel = p.releases();
            p.observe(pull.arm, (t % 2) as f64).unwrap();
            if p.releases() == rel {
                assert_eq!(p.released_means(), &before[..]);
            } else {
                assert_eq!(p.released_means()[1 - pull.arm], before[1 - pull.arm]);
            }
        }
    }

    #[test]
    fn index_formulas_without_noise() {
        let mut p = AdaP::new(2, AdaPConfig::new(f64::INFINITY, AdaPIndex::Ucb), 0).unwrap();
        p.choose(0);
        p.observe(0, 1.0).unwrap();
        p.choose(1);
        p.observe(1, 0.0).unwrap();
        let t_l: f64 = 3.0;
        let want = 1.0 + (3.1 * (2.0 * t_l).ln() / 2.0).sqrt();
        assert!((p.index(0, t_l) - want).abs() < 1e-12);
        let mut q = AdaP::new(2, AdaPConfig::new(2.0, AdaPIndex::KlUcb), 0).unwrap();
        q.released = vec![Some(0.2), Some(0.3)];
        q.last_len = vec![4, 4];
        let breve = 0.2 + 3.1 * t_l.ln() / (2.0 * 4.0);
        let want = kl_upper(breve, 3.1 * t_l.ln() / 4.0);
        assert!((q.index(0, t_l) - want).abs() < 1e-12);
    }

    #[test]
    fn bad_config() {
        for eps in [0.0, -1.0, f64::NAN] {
            let e = AdaP::new(2, AdaPConfig::new(eps, AdaPIndex::Ucb), 0)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("epsilon = "), "{e}");
        }
        assert!(AdaP::new(0, AdaPConfig::new(1.0, AdaPIndex::Ucb), 0).is_err());
    }
}

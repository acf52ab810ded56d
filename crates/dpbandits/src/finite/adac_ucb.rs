//! AdaC-UCB: rho-zCDP UCB with adaptive (doubling) episodes and forgetting, and its non-private
//! counterpart "UCB with adaptive episodes and forgetting".
//!
//! # Algorithm
//! Azize & Basu (2024), "Concentrated Differential Privacy for Bandits", Algorithm 4 (App. C),
//! index Eq. (14); our spec `zcdp-bandits.md` §2.
//! 1. Pull every arm once (each single pull is the arm's first episode).
//! 2. Each episode `l` starts at round `t_l`; for every arm the index is
//!    `I_a = mu~_a + sqrt((1/(2 n_a) + 1/(rho n_a^2)) beta ln t_l)`, where `mu~_a` is the *released*
//!    noisy mean of the arm's last episode and `n_a` its sample count (see [`InitCount`]).
//! 3. Play `a_l = argmax I_a` (ties: lowest index) for `N_{a_l}` rounds, doubling its count.
//! 4. At the end of the episode release `mu~ = mean of the L new rewards + N(0, 1/(2 rho L^2))` and
//!    forget the arm's older samples.
//!
//! The non-private counterpart (`kind = "adaptive_ucb"`, spec §2.7) is the same schedule with
//! `rho = inf`: no noise and no `1/(rho n^2)` term. It is built from the same code, so the two differ
//! only by the privacy mechanism.
//!
//! # Privacy
//! * Notion: rho-Interactive zCDP (Def. 4), central trust model, reward-level adjacency.
//! * Mechanism: the mean of one episode's `L` rewards, clipped to [0, 1] (sensitivity `1/L`), plus
//!   Gaussian noise of variance `1/(2 rho n^2)` with `n <= L` (Thm 18, Eq. 14). The mechanism is
//!   calibrated by
//!   [`GaussianMechanism::for_zcdp`](crate::privacy::GaussianMechanism::for_zcdp) (rounded up).
//! * Composition: episodes use disjoint rewards and their boundaries depend only on released
//!   statistics (doubling), so Lemma 1 with App. D-B gives rho overall, not rho per episode; the
//!   index is post-processing (Lemmas 3-4).
//! * Each released mean is sampled once when its episode ends and cached ([`NoisyMean`]); the index
//!   recomputes only the public bonus (spec §2.5).
//! * Noise (`noise`): `simulation` (default) draws `f64` Gaussian noise from the seeded noise
//!   stream (simulation-grade); `deployment` rounds rewards to the `2^-grid_bits` grid and adds
//!   exact discrete Gaussian noise to the integer episode sum, `sigma^2 = (2^k L / n)^2 / (2 rho)`
//!   grid units (CKS20 Thm 4: the same rho), from an OS-seeded CSPRNG ([`NoiseSource`];
//!   deployment-grade, not reproducible).
//!
//! # Parameters
//! `rho > 0` (inf = non-private limit), `beta > 0` (theory needs beta > 3; the paper's experiments
//! use 1), `init_count` (`literal` | `actual`), `boundary` (`clip` | `reject`), `noise`
//! (`simulation` | `deployment`; private kind only), `grid_bits` (1..=32, default 20: the
//! deployment grid `2^-grid_bits`).

use super::{Episode, InFlight, Pipelined, Policy, PolicyConfig, Pull, argmax};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Result, check};
use crate::privacy::{
    BoundaryMode, Budget, NoiseGrade, NoiseKind, NoiseSource, NoisyMean, PrivacyGuarantee,
    REWARD_ADJACENCY, Release, RewardBoundary, RewardSum, TrustModel,
};
use crate::protocol::Gate;
use serde::Deserialize;

/// Registry record of `adaptive_ucb`.
pub const ADAPTIVE_UCB: AlgorithmInfo = AlgorithmInfo {
    kind: "adaptive_ucb",
    name: "UCB with adaptive episodes and forgetting",
    setting: Setting::FiniteArmed,
    reference: "Azize & Basu 2024, Sec. VII-A baseline (AdaC-UCB with rho = inf; spec zcdp §2.7)",
    privacy: "none",
    example: "beta = 1.0",
    source: file!(),
    doc: include_str!("adac_ucb.rs"),
    private: false,
    release_keys: crate::config::PRIVATE_RELEASE,
};

/// Registry record of `adac_ucb`.
pub const ADAC_UCB: AlgorithmInfo = AlgorithmInfo {
    kind: "adac_ucb",
    name: "AdaC-UCB",
    setting: Setting::FiniteArmed,
    reference: "Azize & Basu 2024, Algorithm 4, Eq. (14)",
    privacy: "rho-Interactive zCDP (central), Gaussian mechanism per (arm, episode)",
    example: "rho = 1.0",
    source: file!(),
    doc: include_str!("adac_ucb.rs"),
    private: true,
    release_keys: crate::config::PRIVATE_RELEASE,
};

/// Which sample count the index uses right after initialisation (spec zcdp §2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InitCount {
    /// `n_a = N_a / 2` as printed in Eq. (14): 0.5 after the single initial pull (more noise and a
    /// larger bonus for the first episode; conservative). Default.
    #[default]
    Literal,
    /// `n_a` = the actual size of the last episode (1 after initialisation), as in App. D.
    Actual,
}

/// `kind = "adac_ucb"` (private) or `kind = "adaptive_ucb"` (non-private counterpart).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaCUcbConfig {
    /// zCDP budget; `inf` (or the `adaptive_ucb` kind) is the non-private limit.
    pub rho: f64,
    /// Optimism parameter beta (default 1, as in the paper's experiments).
    #[serde(default = "one")]
    pub beta: f64,
    /// Sample count after initialisation.
    #[serde(default)]
    pub init_count: InitCount,
    /// `boundary`, `noise`, `grid_bits`: parsed by the registry ([`Release`]).
    #[serde(default)]
    pub release: Release,
    /// Set by the registry: whether this is the non-private `adaptive_ucb` entry.
    #[serde(skip)]
    pub non_private_kind: bool,
    /// A deliberately broken variant (auditor mutation tests only; never deserialized).
    #[serde(skip)]
    pub(crate) mutant: Option<crate::privacy::AuditMutant>,
}

fn one() -> f64 {
    1.0
}

impl AdaCUcbConfig {
    /// A private configuration with the paper's defaults (beta = 1, literal count, clip).
    pub fn private(rho: f64) -> Self {
        AdaCUcbConfig {
            rho,
            beta: 1.0,
            init_count: InitCount::Literal,
            release: Release::default(),
            non_private_kind: false,
            mutant: None,
        }
    }

    /// The non-private counterpart (beta = 1).
    pub fn non_private() -> Self {
        AdaCUcbConfig {
            non_private_kind: true,
            ..Self::private(f64::INFINITY)
        }
    }

    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        check::budget("rho", self.rho)?;
        check::positive("beta", self.beta)?;
        if self.non_private_kind && self.rho.is_finite() {
            return Err(crate::error::Error::param(
                "rho",
                self.rho,
                "no rho for the non-private adaptive_ucb (use kind = \"adac_ucb\")",
            ));
        }
        Ok(())
    }
}

impl PolicyConfig for AdaCUcbConfig {
    fn kind(&self) -> &'static str {
        if self.non_private_kind {
            ADAPTIVE_UCB.kind
        } else {
            ADAC_UCB.kind
        }
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        let mut p = vec![];
        if !self.non_private_kind {
            p.push(("rho", self.rho));
        }
        if self.beta != 1.0 {
            p.push(("beta", self.beta));
        }
        p
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        crate::privacy::mutant_guarantee(guarantee(self), self.mutant)
    }
    fn release(&self) -> Option<&Release> {
        Some(&self.release)
    }
    /// Table II's AdaC-UCB row: problem dependent (Thm 10, without its `2 beta / (beta - 3)`
    /// constant, as Table II quotes it) on an instance with known gaps, else minimax (Thm 11,
    /// the constants of its proof, without the `3 beta / (beta - 3) sum Delta_a` constant).
    /// Stated for `beta > 3`; drawn at the configuration's `beta`. `rho = inf` (the non-private
    /// counterpart) drops the privacy term.
    fn regret_bound(
        &self,
        instance: &crate::config::BoundInstance,
    ) -> Option<crate::config::RegretBound> {
        use crate::config::{BoundTerm, RegretBound};
        let beta = self.beta;
        let private = (8.0 * (beta / self.rho).sqrt()).min(f64::MAX);
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
                "Azize & Basu 2024, Thm 11 (constants of its proof)",
                format!(
                    "4 sqrt(2 beta K T ln T) + 8 K sqrt(beta ln T / rho), beta = {beta}, K = {k}"
                ),
                vec![
                    term(4.0 * (2.0 * beta * k).sqrt(), 0.5, 0.5),
                    term(k * private, 0.0, 0.5),
                ],
            )
        } else {
            let inv: f64 = gaps.iter().map(|g| 1.0 / g).sum();
            (
                "Azize & Basu 2024, Thm 10 (Table II)",
                format!(
                    "sum over Delta_a > 0 of (8 beta / Delta_a) ln T + 8 sqrt(beta / rho) sqrt(ln T), beta = {beta}"
                ),
                vec![
                    term(8.0 * beta * inv, 0.0, 1.0),
                    term(gaps.len() as f64 * private, 0.0, 0.5),
                ],
            )
        };
        terms.retain(|t| t.coef > 0.0);
        Some(RegretBound {
            source,
            formula,
            terms,
            alternatives: vec![],
        })
    }
    fn build(&self, k: usize, seed: u64) -> Result<Box<dyn Policy>> {
        Ok(Box::new(AdaCUcb::new(k, self.clone(), seed)?))
    }
}

fn guarantee(cfg: &AdaCUcbConfig) -> PrivacyGuarantee {
    let (rho, mode, init) = (cfg.rho, cfg.release.boundary, cfg.init_count);
    if rho.is_infinite() {
        return PrivacyGuarantee::non_private();
    }
    let count = match init {
        InitCount::Literal => {
            "N_a/2 (literal Eq. 14; n = 0.5 after the initial pull, conservative)"
        }
        InitCount::Actual => "episode length (App. D)",
    };
    let mechanism = match cfg.release.noise {
        NoiseKind::Simulation => format!(
            "Gaussian mechanism on each (arm, episode) mean of rewards clipped to [0,1]: \
             sigma^2 = 1/(2 rho n^2) (Eq. 14, Thm 18), n = {count} ; released once per episode and cached; \
             disjoint episodes compose in parallel (Lemma 1, App. D-B); f64 noise from the seeded \
             noise stream"
        ),
        NoiseKind::Deployment => format!(
            "discrete Gaussian mechanism (Canonne, Kamath & Steinke 2020, Alg. 3, Thm 4) on each \
             (arm, episode) integer sum of L rewards clipped to [0,1] and rounded to the 2^-{k} grid \
             (sensitivity 2^{k}): sigma^2 = (2^{k} L / n)^2 / (2 rho) exactly (the same rho as \
             Eq. 14, Thm 18), n = {count}; released mean (sum + noise) / (2^{k} L), once per episode \
             and cached; disjoint episodes compose in parallel (Lemma 1, App. D-B); an episode \
             with L > 2^(53-{k}) rewards uses the grid 2^-k', k' = 53 - ceil(log2 L) (public, keeps \
             sums exact); noise from ChaCha20 seeded by the operating system: outputs are not \
             reproducible",
            k = cfg.release.grid_bits
        ),
    };
    PrivacyGuarantee {
        notion: "rho-Interactive zCDP (Azize & Basu 2024, Def. 4; Thm 12)".into(),
        model: TrustModel::Central,
        adjacency: REWARD_ADJACENCY.into(),
        budget: Budget::Zcdp { rho },
        mechanism,
        boundary: Some(RewardBoundary::unit(mode)),
        noise: NoiseGrade::of(cfg.release.noise),
    }
}

/// The snapshot form of [`AdaCUcbConfig`]: every field, including the registry's kind flag that
/// a parameter table may not set, in the order snapshots had before the release keys became one
/// [`Release`] (so a snapshot's bytes did not change; a kind without earlier snapshots writes
/// `#[serde(flatten)] release: Release` in a `remote` mirror instead, docs/architecture.md).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AdaCUcbConfigFields {
    rho: f64,
    beta: f64,
    init_count: InitCount,
    boundary: BoundaryMode,
    non_private_kind: bool,
    noise: NoiseKind,
    grid_bits: u32,
}

/// `#[serde(with)]` of [`AdaCUcb::cfg`] through [`AdaCUcbConfigFields`] (a restored policy is
/// never a mutant).
struct AdaCUcbConfigSnap;

impl AdaCUcbConfigSnap {
    fn serialize<S: serde::Serializer>(
        c: &AdaCUcbConfig,
        s: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serde::Serialize::serialize(
            &AdaCUcbConfigFields {
                rho: c.rho,
                beta: c.beta,
                init_count: c.init_count,
                boundary: c.release.boundary,
                non_private_kind: c.non_private_kind,
                noise: c.release.noise,
                grid_bits: c.release.grid_bits,
            },
            s,
        )
    }
    fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<AdaCUcbConfig, D::Error> {
        let f = <AdaCUcbConfigFields as serde::Deserialize>::deserialize(d)?;
        Ok(AdaCUcbConfig {
            rho: f.rho,
            beta: f.beta,
            init_count: f.init_count,
            release: Release {
                boundary: f.boundary,
                noise: f.noise,
                grid_bits: f.grid_bits,
            },
            non_private_kind: f.non_private_kind,
            mutant: None,
        })
    }
}

/// AdaC-UCB state (also the non-private counterpart when `rho = inf`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaCUcb {
    #[serde(with = "AdaCUcbConfigSnap")]
    cfg: AdaCUcbConfig,
    boundary: RewardBoundary,
    /// N_a: total pulls.
    pulls: Vec<u64>,
    /// Released (cached) statistic of each arm's last episode.
    released: Vec<Option<NoisyMean>>,
    /// Public bonus coefficient `(1/(2n) + 1/(rho n^2)) beta` of each arm.
    bonus_coeff: Vec<f64>,
    episode: Option<Episode>,
    gate: Gate,
    noise: NoiseSource,
    releases: u64,
    /// Raw (sum, count, index count) of each arm's last release: read only by the auditor's
    /// mutants (the correct policy never touches a raw sum after its release).
    raw: Vec<(RewardSum, f64)>,
    /// Running sum of every clipped reward of each arm (mutant `ForgetlessReleases` only).
    all_sums: Vec<RewardSum>,
    /// Episodes in flight when driven pipelined (`pipeline.rs`; empty otherwise, and then not
    /// in the snapshot).
    #[serde(default, skip_serializing_if = "InFlight::is_empty")]
    ahead: InFlight,
}

impl AdaCUcb {
    /// AdaC-UCB on `k >= 1` arms; `seed` keys its noise stream.
    pub fn new(k: usize, cfg: AdaCUcbConfig, seed: u64) -> Result<Self> {
        check::arms("K", k)?;
        cfg.validate()?;
        let boundary = RewardBoundary::unit(cfg.release.boundary);
        let gate_boundary = if cfg.rho.is_finite() {
            boundary
        } else {
            RewardBoundary::numeric()
        };
        let noise = NoiseSource::new(cfg.release.noise, cfg.release.grid_bits, seed)?;
        Ok(AdaCUcb {
            gate: Gate::new(gate_boundary),
            boundary,
            cfg,
            pulls: vec![0; k],
            released: vec![None; k],
            bonus_coeff: vec![f64::INFINITY; k],
            episode: None,
            noise,
            releases: 0,
            raw: vec![(gate_boundary.empty_sum(), 1.0); k],
            all_sums: vec![gate_boundary.empty_sum(); k],
            ahead: InFlight::default(),
        })
    }

    /// The cached released mean of every arm (`None` before its first episode ends).
    pub fn released_means(&self) -> Vec<Option<f64>> {
        self.released.iter().map(|m| m.map(|m| m.value())).collect()
    }

    /// Released statistics with their noise scale and sample count.
    pub fn released(&self) -> &[Option<NoisyMean>] {
        &self.released
    }

    /// How many private statistics have been released so far (one per finished episode).
    pub fn releases(&self) -> u64 {
        self.releases
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

    /// The count `n_a` used in the index after an episode of length `len` ending at total `pulls`.
    fn index_count(&self, len: u64, pulls: u64) -> f64 {
        match self.cfg.init_count {
            InitCount::Literal => pulls as f64 / 2.0,
            InitCount::Actual => len as f64,
        }
    }

    /// Release the statistic of the finished episode `ep`; `count` is the arm's count at its
    /// end (the textbook: its total pulls; pipelined: its committed count when the episode was
    /// opened plus the episode's length), from which the index count `n` follows.
    fn finish_episode(&mut self, ep: Episode, count: u64) -> Result<()> {
        let a = ep.arm;
        self.pulls[a] += ep.len;
        let n = self.index_count(ep.len, count);
        self.all_sums[a].add(&ep.sum)?;
        self.raw[a] = (ep.sum, n);
        if self.cfg.mutant == Some(crate::privacy::AuditMutant::ForgetlessReleases) {
            // MUTANT: the running mean of every reward of the arm, calibrated as a single release.
            self.raw[a] = (self.all_sums[a], self.pulls[a] as f64);
        }
        let (sum, n_release) = self.raw[a];
        self.released[a] = Some(self.release(&sum, n_release)?);
        let rho_term = if self.cfg.rho.is_infinite() {
            0.0
        } else {
            1.0 / (self.cfg.rho * n * n)
        };
        self.bonus_coeff[a] = (1.0 / (2.0 * n) + rho_term) * self.cfg.beta;
        self.releases += 1;
        self.episode = None;
        Ok(())
    }

    /// Release the mean of the rewards of `sum`, calibrated for sensitivity `1/n`.
    fn release(&mut self, sum: &RewardSum, n: f64) -> Result<NoisyMean> {
        if self.is_private() {
            // Calibrate for sensitivity 1/n with n <= L: at least the noise the true sensitivity
            // 1/L needs.
            self.noise
                .gaussian_mean(self.boundary.width() / n, self.cfg.rho, sum, &self.boundary)
        } else {
            Ok(NoisyMean::non_private(sum.sum(), sum.n()))
        }
    }

    /// The index of Eq. (14) of arm `a` for an episode starting at the 0-based round `t`
    /// (`t_l = t + 1`); infinite for an arm without a release.
    fn index(&self, a: usize, t: u64) -> f64 {
        let log_t = (t as f64 + 1.0).ln();
        self.released[a].map_or(f64::INFINITY, |m| m.value()) + (self.bonus_coeff[a] * log_t).sqrt()
    }

    /// Whether a privacy mechanism is applied (rho finite). The non-private counterpart has no
    /// privacy boundary: it neither clips nor adds noise, exactly like the paper's baseline (its
    /// gate applies only the numeric boundary).
    fn is_private(&self) -> bool {
        self.cfg.rho.is_finite()
    }
}

impl Policy for AdaCUcb {
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
                    let (sum, n) = self.raw[a];
                    if let Ok(m) = self.release(&sum, n) {
                        self.released[a] = Some(m);
                    }
                }
            }
            let a = argmax((0..self.pulls.len()).map(|a| self.index(a, t)));
            (a, self.pulls[a])
        };
        self.episode = Some(Episode::start(arm, len, &self.gate.boundary()));
        self.gate.commit(arm, len);
        Pull { arm, steps: len }
    }
    fn pipelined(&mut self) -> Option<&mut dyn Pipelined> {
        Some(self)
    }
    fn released_estimates(&self) -> Option<crate::report::Released> {
        // The cached releases (the last finished episode of each arm), never re-sampled. On
        // the deployment path the episode sum is rounded to a grid of at most 2^-grid_bits
        // (finer for large episodes, `privacy/noise.rs` `Grid::for_release`): a mean moves by at
        // most half a grid step (plus the f64 rounding of the division). The non-private
        // counterpart neither clips nor bounds its rewards: no interval.
        crate::report::doubling_episodes(
            &self.released,
            &self.pulls,
            (self.boundary.lo, self.boundary.hi),
            &self.cfg.release,
        )
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
            self.finish_episode(ep, self.pulls[ep.arm] + ep.len)?;
        }
        self.gate = gate;
        Ok(())
    }
}

/// Pipelined episodes (`pipeline.rs`): the index of Eq. (14) on the released statistics, the
/// episode doubling the arm's committed count.
impl Pipelined for AdaCUcb {
    fn open_ahead(&mut self, first: u64) -> Result<Pull> {
        if self.episode.is_some() {
            return Err(crate::error::Error::Protocol(
                "open_ahead: an episode is open (the policy is driven one episode at a time)"
                    .into(),
            ));
        }
        let (arm, len) = self.ahead.pick(
            &self.pulls,
            |a| self.released[a].is_some(),
            |a| self.index(a, first),
        );
        self.ahead
            .open(first, arm, len, &self.pulls, &self.gate.boundary())
    }
    fn settle(&mut self, first: u64, arm: usize, sum: &RewardSum) -> Result<()> {
        let (ep, count) = self
            .ahead
            .settle(first, arm, sum, &self.noise, &self.boundary)?;
        self.finish_episode(ep, count)
    }
    fn in_flight(&self) -> usize {
        self.ahead.len()
    }
}

impl crate::config::Config for AdaCUcbConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        AdaCUcbConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_steps(p: &mut AdaCUcb, rewards: impl Fn(usize, u64) -> f64, horizon: u64) {
        for t in 0..horizon {
            let pull = p.choose(t);
            p.observe(pull.arm, rewards(pull.arm, t)).unwrap();
        }
    }

    /// `pulls()` counts every observed reward, also those of the episode in progress (issue 17:
    /// it used to leave them out while documented as total pulls); `finished_pulls()` does not.
    #[test]
    fn pulls_include_the_episode_in_progress() {
        let mut p = AdaCUcb::new(2, AdaCUcbConfig::private(1.0), 1).unwrap();
        let mut observed = [0u64; 2];
        let mut t = 0;
        let mut partial = false;
        while t < 200 {
            let pull = p.choose(t);
            p.observe(pull.arm, 0.5).unwrap();
            observed[pull.arm] += 1;
            t += 1;
            assert_eq!(p.pulls(), observed.to_vec(), "t = {t}");
            partial |= p.pulls() != p.finished_pulls();
        }
        assert!(partial, "some step ended inside an episode");
    }

    /// Spec §8 T7: episode lengths double, counts are powers of two, init pulls each arm once.
    #[test]
    fn episode_structure() {
        let mut p = AdaCUcb::new(3, AdaCUcbConfig::private(1.0), 1).unwrap();
        let mut lens = vec![];
        let mut t = 0;
        while t < 10_000 {
            let pull = p.choose(t);
            let before = p.pulls()[pull.arm];
            lens.push((pull.arm, pull.steps, before));
            p.observe_batch(
                pull.arm,
                &p.boundary().drawn_sum(0.5 * pull.steps as f64, pull.steps),
            )
            .unwrap();
            t += pull.steps;
        }
        assert_eq!(&lens[..3], &[(0, 1, 0), (1, 1, 0), (2, 1, 0)]);
        for &(_, steps, before) in &lens[3..] {
            assert_eq!(steps, before, "an episode doubles the count");
        }
        for &n in p.finished_pulls() {
            assert!(n.is_power_of_two(), "{n}");
        }
        let bound = 3 * ((10_000f64).log2().floor() as usize + 1);
        assert!(lens.len() <= bound);
        assert_eq!(p.releases() as usize, lens.len());
    }

    /// Spec §8 T4: the released mean of an arm changes only when that arm finishes an episode,
    /// never while choosing or observing inside an episode.
    #[test]
    fn released_statistic_is_never_resampled() {
        let mut p = AdaCUcb::new(2, AdaCUcbConfig::private(0.1), 9).unwrap();
        let mut t = 0u64;
        while t < 5000 {
            let pull = p.choose(t);
            let before = p.released_means();
            // choosing again inside the episode releases nothing
            for _ in 0..3 {
                assert_eq!(p.choose(t), pull);
                assert_eq!(p.released_means(), before);
            }
            for i in 0..pull.steps {
                let rel = p.releases();
                p.observe(pull.arm, ((t + i) % 2) as f64).unwrap();
                let after = p.released_means();
                for a in 0..2 {
                    if a != pull.arm || i + 1 < pull.steps {
                        assert_eq!(after[a], before[a], "arm {a} re-sampled at t={}", t + i);
                    }
                }
                if i + 1 < pull.steps {
                    assert_eq!(p.releases(), rel);
                }
            }
            t += pull.steps;
        }
    }

    /// Noise calibration: each released mean has sigma^2 = 1/(2 rho n^2) (spec §2.3, T1), never less
    /// than the true sensitivity 1/L requires (T2).
    #[test]
    fn released_noise_is_calibrated() {
        for (init, n_first) in [(InitCount::Literal, 0.5), (InitCount::Actual, 1.0)] {
            let rho = 0.5;
            let cfg = AdaCUcbConfig {
                init_count: init,
                ..AdaCUcbConfig::private(rho)
            };
            let mut p = AdaCUcb::new(2, cfg, 3).unwrap();
            run_steps(&mut p, |_, _| 1.0, 2);
            let s = p.released()[0].unwrap();
            assert_eq!(s.samples(), 1);
            let want = 1.0 / (2.0 * rho * n_first * n_first);
            assert!((s.sigma().powi(2) - want).abs() < 1e-12 * want);
            run_steps(&mut p, |_, _| 1.0, 200);
            for s in p.released().iter().flatten() {
                let l = s.samples() as f64;
                let n = if s.samples() == 1 { n_first } else { l };
                assert!((s.sigma().powi(2) - 1.0 / (2.0 * rho * n * n)).abs() < 1e-12);
                // realised zCDP loss of the release at the true sensitivity 1/L
                assert!((1.0 / l).powi(2) / (2.0 * s.sigma().powi(2)) <= rho);
            }
        }
    }

    /// The index uses cached means plus the public bonus of Eq. (14).
    #[test]
    fn index_formula() {
        let mut p = AdaCUcb::new(2, AdaCUcbConfig::non_private(), 0).unwrap();
        // init: arm 0 gets 1.0, arm 1 gets 0.0; then arm 0 (higher mean, same bonus)
        run_steps(&mut p, |a, _| if a == 0 { 1.0 } else { 0.0 }, 2);
        assert_eq!(p.choose(2), Pull { arm: 0, steps: 1 });
        // literal count after init: n = 0.5, bonus coeff = 1/(2 * 0.5) = 1
        assert!((p.bonus_coeff[1] - 1.0).abs() < 1e-15);
    }

    /// Rewards outside [0, 1] are clipped before they enter a released statistic, on both paths
    /// (per reward, and per episode sum); the non-private counterpart does not clip.
    #[test]
    fn rewards_are_clipped_at_the_privacy_boundary() {
        // rho = BUDGET_MAX: the noise (sd < 5e-5) does not hide the clipping.
        let mut p = AdaCUcb::new(2, AdaCUcbConfig::private(1e9), 5).unwrap();
        run_steps(&mut p, |a, _| if a == 0 { 7.0 } else { -3.0 }, 2);
        let m = p.released_means();
        assert!(
            (m[0].unwrap() - 1.0).abs() < 1e-3 && m[1].unwrap().abs() < 1e-3,
            "{m:?}"
        );
        let pull = p.choose(2);
        p.observe_batch(
            pull.arm,
            &p.boundary()
                .drawn_sum(100.0 * pull.steps as f64, pull.steps),
        )
        .unwrap();
        assert!((p.released_means()[pull.arm].unwrap() - 1.0).abs() < 1e-3);
        assert_eq!(p.boundary(), RewardBoundary::unit(BoundaryMode::Clip));
        let mut np = AdaCUcb::new(2, AdaCUcbConfig::non_private(), 5).unwrap();
        run_steps(&mut np, |_, _| 7.0, 2);
        assert_eq!(np.released_means(), vec![Some(7.0), Some(7.0)]);
        assert_eq!(np.boundary(), RewardBoundary::numeric());
    }

    #[test]
    fn bad_config() {
        assert!(AdaCUcb::new(0, AdaCUcbConfig::private(1.0), 0).is_err());
        for rho in [0.0, -1.0, f64::NAN] {
            let e = AdaCUcb::new(2, AdaCUcbConfig::private(rho), 0)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("rho = "), "{e}");
        }
        let e = AdaCUcbConfig {
            beta: -1.0,
            ..AdaCUcbConfig::private(1.0)
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("beta = -1"));
    }
}

//! Exercise-UCB: the "one file and one registry line" exercise of a new private finite-armed kind
//! (issue 44). Built only with the crate feature `exercise`, which the test script turns on for
//! every test of the workspace (conformance, deployment noise, white-box audit, the closing
//! report, the CLI's listing, the service): a kind written this way passes them with no edit to
//! any suite, the service, the session or the Python binding.
//!
//! What the file does **not** contain is the point: no `boundary`, `noise` or `grid_bits` field,
//! default, check, label suffix or snapshot copy. The configuration holds one
//! [`Release`](crate::privacy::Release) (`#[serde(default)] pub release: Release`), its
//! `PolicyConfig::release` returns it, and its registry line parses it:
//! `parse: Parse::Finite(private_finite::<finite::ExerciseUcbConfig>)`.
//!
//! # Algorithm
//! AdaC-UCB (Azize & Basu 2024, Algorithm 4) with `beta = 1` and the actual count of App. D:
//! 1. Pull every arm once (each single pull is the arm's first episode).
//! 2. An episode starting at round `t` plays `argmax_a mu~_a + sqrt((1/(2 n_a) + 1/(rho n_a^2))
//!    ln t)`, where `mu~_a` is the released mean of the arm's last episode and `n_a` its length,
//!    for as many rounds as the arm has been pulled (doubling its count).
//! 3. At the end of the episode release `mu~ = mean of its n rewards + N(0, 1/(2 rho n^2))` and
//!    forget the arm's older samples.
//!
//! # Privacy
//! * Notion: rho-Interactive zCDP (Azize & Basu 2024, Def. 4), central, reward-level adjacency.
//! * Mechanism: the mean of one episode's `n` rewards clipped to [0, 1] (sensitivity `1/n`) plus
//!   Gaussian noise of variance `1/(2 rho n^2)` (Thm 18), calibrated by
//!   [`GaussianMechanism::for_zcdp`](crate::privacy::GaussianMechanism::for_zcdp) through the
//!   policy's [`NoiseSource`] (the exact discrete Gaussian on the deployment path, CKS20 Thm 4).
//! * Composition: episodes use disjoint rewards and their boundaries depend on released
//!   statistics only, so the whole run is rho-zCDP (Lemma 1, App. D-B); the index is
//!   post-processing.
//!
//! # Parameters
//! `rho > 0` (inf = the non-private limit), and the release keys every private kind shares
//! (parsed by the registry): `boundary` (`clip` | `reject`), `noise` (`simulation` |
//! `deployment`), `grid_bits` (1..=32, default 20).

use super::{Episode, Policy, PolicyConfig, Pull, argmax};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Result, check};
use crate::privacy::{
    Budget, NoiseGrade, NoiseKind, NoiseSource, NoisyMean, PrivacyGuarantee, REWARD_ADJACENCY,
    Release, RewardBoundary, RewardSum, TrustModel,
};
use crate::protocol::Gate;

/// Registry record of `exercise_ucb`.
pub const EXERCISE_UCB: AlgorithmInfo = AlgorithmInfo {
    kind: "exercise_ucb",
    name: "Exercise-UCB",
    setting: Setting::FiniteArmed,
    reference: "Azize & Basu 2024, Algorithm 4 with App. D's count (issue 44's exercise)",
    privacy: "rho-Interactive zCDP (central), Gaussian mechanism per (arm, episode)",
    example: "rho = 1.0",
    source: file!(),
    doc: include_str!("exercise_ucb.rs"),
    private: true,
    release_keys: crate::config::PRIVATE_RELEASE,
};

/// `kind = "exercise_ucb"`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExerciseUcbConfig {
    /// zCDP budget (`inf`: the non-private limit).
    pub rho: f64,
    /// `boundary`, `noise`, `grid_bits`: parsed by the registry.
    #[serde(default)]
    pub release: Release,
}

impl crate::config::Config for ExerciseUcbConfig {
    fn validate(&mut self) -> Result<()> {
        check::budget("rho", self.rho).map(drop)
    }
}

impl PolicyConfig for ExerciseUcbConfig {
    fn kind(&self) -> &'static str {
        EXERCISE_UCB.kind
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        vec![("rho", self.rho)]
    }
    fn release(&self) -> Option<&Release> {
        Some(&self.release)
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        if self.rho.is_infinite() {
            return PrivacyGuarantee::non_private();
        }
        let mechanism = match self.release.noise {
            NoiseKind::Simulation => "Gaussian mechanism on each (arm, episode) mean of n rewards \
                clipped to [0,1]: sigma^2 = 1/(2 rho n^2) (Thm 18); disjoint episodes compose in \
                parallel (Lemma 1); f64 noise from the seeded noise stream"
                .to_string(),
            NoiseKind::Deployment => format!(
                "discrete Gaussian mechanism (Canonne, Kamath & Steinke 2020, Thm 4) on each \
                 (arm, episode) integer sum of n rewards clipped to [0,1] and rounded to the \
                 2^-{k} grid: sigma^2 = (2^{k})^2 / (2 rho) grid units (the same rho); disjoint \
                 episodes compose in parallel (Lemma 1); noise from ChaCha20 seeded by the \
                 operating system: outputs are not reproducible",
                k = self.release.grid_bits
            ),
        };
        PrivacyGuarantee {
            notion: "rho-Interactive zCDP (Azize & Basu 2024, Def. 4)".into(),
            model: TrustModel::Central,
            adjacency: REWARD_ADJACENCY.into(),
            budget: Budget::Zcdp { rho: self.rho },
            mechanism,
            boundary: Some(self.release.unit_boundary()),
            noise: NoiseGrade::of(self.release.noise),
        }
    }
    fn build(&self, k: usize, seed: u64) -> Result<Box<dyn Policy>> {
        check::arms("K", k)?;
        let private = self.rho.is_finite();
        let boundary = if private {
            self.release.unit_boundary()
        } else {
            RewardBoundary::numeric()
        };
        Ok(Box::new(ExerciseUcb {
            cfg: self.clone(),
            gate: Gate::new(boundary),
            noise: NoiseSource::new(self.release.noise, self.release.grid_bits, seed)?,
            pulls: vec![0; k],
            released: vec![None; k],
            episode: None,
        }))
    }
}

/// Exercise-UCB state.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExerciseUcb {
    cfg: ExerciseUcbConfig,
    gate: Gate,
    noise: NoiseSource,
    /// Pulls of each arm in finished episodes.
    pulls: Vec<u64>,
    /// The released mean of each arm's last episode (cached: released once).
    released: Vec<Option<NoisyMean>>,
    episode: Option<Episode>,
}

impl ExerciseUcb {
    fn index(&self, a: usize, t: u64) -> f64 {
        let Some(m) = self.released[a] else {
            return f64::INFINITY;
        };
        let n = m.samples() as f64;
        let rho_term = if self.cfg.rho.is_finite() {
            1.0 / (self.cfg.rho * n * n)
        } else {
            0.0
        };
        m.value() + ((1.0 / (2.0 * n) + rho_term) * (t as f64 + 1.0).ln()).sqrt()
    }

    fn release(&mut self, sum: &RewardSum) -> Result<NoisyMean> {
        if !self.cfg.rho.is_finite() {
            return Ok(NoisyMean::non_private(sum.sum(), sum.n()));
        }
        let b = self.gate.boundary();
        self.noise
            .gaussian_mean(b.width() / sum.n() as f64, self.cfg.rho, sum, &b)
    }
}

impl Policy for ExerciseUcb {
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(Setting::FiniteArmed, EXERCISE_UCB.kind, self)
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
        let (arm, len) = match self.released.iter().position(Option::is_none) {
            Some(a) => (a, 1),
            None => {
                let a = argmax((0..self.pulls.len()).map(|a| self.index(a, t)));
                (a, self.pulls[a])
            }
        };
        self.episode = Some(Episode::start(arm, len, &self.gate.boundary()));
        self.gate.commit(arm, len);
        Pull { arm, steps: len }
    }
    fn released_estimates(&self) -> Option<crate::report::Released> {
        // The report's hook (issue 43): the cached releases, as AdaC-UCB's. No interval for the
        // non-private counterpart (it neither clips nor bounds its rewards).
        if !self.cfg.rho.is_finite() {
            return None;
        }
        let b = self.gate.boundary();
        crate::report::doubling_episodes(
            &self.released,
            &self.pulls,
            (b.lo, b.hi),
            &self.cfg.release,
        )
    }
    fn observe(&mut self, arm: usize, reward: f64) -> Result<()> {
        let one = self.gate.boundary().single(reward)?;
        self.observe_batch(arm, &one)
    }
    fn observe_batch(&mut self, arm: usize, sum: &RewardSum) -> Result<()> {
        let boundary = self.gate.boundary();
        let (gate, done) = super::episode_step(
            self.gate,
            &self.noise,
            &boundary,
            &mut self.episode,
            arm,
            sum,
        )?;
        if let Some(ep) = done {
            self.released[ep.arm] = Some(self.release(&ep.sum)?);
            self.pulls[ep.arm] += ep.len;
            self.episode = None;
        }
        self.gate = gate;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Episodes double and every release is calibrated for its own length.
    #[test]
    fn episodes_double_and_releases_are_calibrated() {
        let cfg = ExerciseUcbConfig {
            rho: 0.5,
            release: Release::default(),
        };
        let mut p = cfg.build(2, 7).unwrap();
        let mut lens = vec![];
        let mut t = 0;
        while t < 200 {
            let pull = p.choose(t);
            lens.push(pull.steps);
            for _ in 0..pull.steps {
                p.observe(pull.arm, 1.0).unwrap();
            }
            t += pull.steps;
        }
        assert_eq!(&lens[..2], &[1, 1]);
        assert!(lens.iter().all(|l| l.is_power_of_two()), "{lens:?}");
        assert_eq!(cfg.label(), "exercise_ucb(rho=0.5)");
    }
}

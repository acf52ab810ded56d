//! DP-SE: epsilon-DP successive elimination with fresh samples per epoch and one Laplace mean
//! per (arm, epoch).
//!
//! # Algorithm
//! Sajed & Sheffet (ICML 2019, arXiv:1905.09383), "An Optimal Private Stochastic-MAB Algorithm
//! Based on an Optimal Private Stopping Rule", Algorithm 1 (DP-SE); our spec
//! `ldp-nonstationary-and-baselines.md` §5.5.
//! * Active set `S` (initially all arms), epochs `e = 1, 2, ...`, `Delta_e = 2^-e`,
//!   `R_e = ceil(max(32 ln(8|S|e^2/beta) / Delta_e^2, 8 ln(4|S|e^2/beta) / (epsilon Delta_e)))`.
//! * Pull every active arm `R_e` times with fresh samples (earlier epochs are forgotten), release
//!   `mu~_a = epoch mean + Lap(1/(epsilon R_e))`.
//! * With `h_e = sqrt(ln(8|S|e^2/beta) / (2 R_e))` and `c_e = ln(4|S|e^2/beta) / (epsilon R_e)`,
//!   eliminate every `a` with `max_b mu~_b - mu~_a > 2 (h_e + c_e)`.
//! * When one arm is left, play it for ever.
//!
//! Implementation choice: inside an epoch the active arms are pulled in **blocks** (all `R_e`
//! pulls of the first active arm, then the next, ...) rather than round-robin. The released
//! statistics and the elimination decisions have the same distribution either way (i.i.d.
//! rewards; each arm's epoch mean uses exactly `R_e` fresh samples); blocks let the simulator draw
//! each block's sum exactly, so a run costs O(epochs x K). Pseudo-regret at a checkpoint *inside*
//! an epoch depends on the order, the regret at the end of each epoch does not.
//!
//! # Privacy
//! * Notion: epsilon-DP of the action sequence (global DP, Sajed & Sheffet 2019, Def. 2.1),
//!   central trust model, reward-level adjacency.
//! * Mechanism: Laplace on each (arm, epoch) mean of `R_e` rewards clipped to [0, 1]
//!   (L1-sensitivity `1/R_e`), scale `1/(epsilon R_e)` ([`LaplaceMechanism::for_pure_dp`], rounded
//!   up).
//! * Composition: each reward enters exactly one released mean; epoch lengths depend only on
//!   public quantities (`e`, `|S|`, which depends on released means only), so the releases compose
//!   in parallel: epsilon-DP overall. Elimination and play are post-processing. Each released mean
//!   is sampled once at the end of its epoch and cached.
//!
//! # Parameters
//! `epsilon > 0` (inf = non-private successive elimination), `beta` in (0, 1) (failure
//! probability; the paper's regret analysis uses `beta = 1/T`, so DP-SE is not anytime; in an
//! experiment file `beta = "1/T"` is `1/horizon` and follows `--horizon`),
//! `boundary` (`clip` | `reject`), `noise` (`simulation` default | `deployment`: each epoch mean is
//! the integer sum of its `R_e` rewards rounded to the `2^-grid_bits` grid plus an exact discrete
//! Laplace of scale `2^k/epsilon` from an OS-keyed ChaCha20, the same epsilon; `docs/privacy.md`),
//! `grid_bits` (1..=32, default 20).

use super::{Policy, PolicyConfig, Pull};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Error, Result, check};
use crate::privacy::{
    BoundaryMode, Budget, DEFAULT_GRID_BITS, NoiseGrade, NoiseKind, NoiseSource, PrivacyGuarantee,
    REWARD_ADJACENCY, RewardBoundary, RewardSum, TrustModel,
};
use crate::protocol::Gate;
use serde::Deserialize;

/// Registry record of `dp_se`.
pub const DP_SE: AlgorithmInfo = AlgorithmInfo {
    kind: "dp_se",
    name: "DP-SE",
    setting: Setting::FiniteArmed,
    reference: "Sajed & Sheffet 2019 (arXiv:1905.09383), Alg. 1",
    privacy: "epsilon-DP (central), Laplace mechanism per (arm, epoch)",
    example: "epsilon = 1.0\nbeta = 0.001",
    source: file!(),
    doc: include_str!("dp_se.rs"),
    private: true,
    release_keys: crate::config::PRIVATE_RELEASE,
};

/// The commitment length used for "until the end" (2^62 rounds: far beyond any horizon, and
/// `t + FOREVER` cannot overflow for any reachable `t`).
pub const FOREVER: u64 = 1 << 62;

/// `kind = "dp_se"`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct DpSeConfig {
    /// Pure-DP budget epsilon (`inf` = non-private successive elimination).
    pub epsilon: f64,
    /// Failure probability beta in (0, 1); use `1/T`.
    pub beta: f64,
    /// What to do with rewards outside [0, 1].
    #[serde(default)]
    pub boundary: BoundaryMode,
    /// Noise path (`simulation` default, `deployment`); absent from simulation snapshots.
    #[serde(default, skip_serializing_if = "is_simulation")]
    pub noise: NoiseKind,
    /// Deployment grid `2^-grid_bits` (default 20; absent from snapshots when default).
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

impl DpSeConfig {
    /// DP-SE with clipping.
    pub fn new(epsilon: f64, beta: f64) -> Self {
        DpSeConfig {
            epsilon,
            beta,
            boundary: BoundaryMode::Clip,
            noise: NoiseKind::Simulation,
            grid_bits: DEFAULT_GRID_BITS,
        }
    }

    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        check::budget("epsilon", self.epsilon)?;
        check::open_unit("beta", self.beta)?;
        crate::privacy::check_noise(self.noise, self.grid_bits, self.epsilon.is_finite())?;
        Ok(())
    }
}

impl PolicyConfig for DpSeConfig {
    fn kind(&self) -> &'static str {
        DP_SE.kind
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        vec![("epsilon", self.epsilon), ("beta", self.beta)]
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
        Ok(Box::new(DpSe::new(k, self.clone(), seed)?))
    }
}

fn guarantee(cfg: &DpSeConfig) -> PrivacyGuarantee {
    let (epsilon, mode) = (cfg.epsilon, cfg.boundary);
    if epsilon.is_infinite() {
        return PrivacyGuarantee::non_private();
    }
    PrivacyGuarantee {
        notion: "epsilon-DP of the action sequence (Sajed & Sheffet 2019, Def. 2.1; Thm 3.1)"
            .into(),
        model: TrustModel::Central,
        adjacency: REWARD_ADJACENCY.into(),
        budget: Budget::PureDp { epsilon },
        mechanism: match cfg.noise {
            NoiseKind::Simulation => "Laplace mechanism on each (arm, epoch) mean of R_e fresh \
                 rewards clipped to [0,1]: scale 1/(epsilon R_e) (Alg. 1); released once per epoch \
                 and cached; disjoint epochs compose in parallel"
                .into(),
            NoiseKind::Deployment => format!(
                "discrete Laplace (geometric) mechanism (Ghosh, Roughgarden & Sundararajan 2009; \
                 sampler: Canonne, Kamath & Steinke 2020, Alg. 2) on each (arm, epoch) integer \
                 sum of R_e fresh rewards clipped to [0,1] and rounded to the 2^-{k} grid \
                 (sensitivity 2^{k}): scale t = 2^{k}/epsilon exactly (the same epsilon as Alg. \
                 1); released mean (sum + noise) / (2^{k} R_e), once per epoch and cached; \
                 disjoint epochs compose in parallel; noise from ChaCha20 seeded by the operating \
                 system: outputs are not reproducible",
                k = cfg.grid_bits
            ),
        },
        boundary: Some(RewardBoundary::unit(mode)),
        noise: NoiseGrade::of(cfg.noise),
    }
}

/// DP-SE state.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DpSe {
    cfg: DpSeConfig,
    boundary: RewardBoundary,
    /// Active arms, ascending.
    active: Vec<usize>,
    /// Epoch number e (1-based).
    epoch: u32,
    /// R_e of the current epoch.
    r: u64,
    /// Position in `active` of the arm being pulled.
    pos: usize,
    /// Pulls done in the current block.
    done: u64,
    /// Reward sums of the current epoch, per arm.
    sums: Vec<RewardSum>,
    /// Cached private means of the last finished epoch (`None` for arms not in it).
    released: Vec<Option<f64>>,
    gate: Gate,
    /// Seeded stream (simulation) or the OS-keyed exact path (a marker in snapshots).
    noise: NoiseSource,
    releases: u64,
}

impl DpSe {
    /// DP-SE on `k >= 1` arms; `seed` keys its noise stream.
    pub fn new(k: usize, cfg: DpSeConfig, seed: u64) -> Result<Self> {
        check::arms("K", k)?;
        cfg.validate()?;
        let boundary = RewardBoundary::unit(cfg.boundary);
        let noise = NoiseSource::new(cfg.noise, cfg.grid_bits, seed)?;
        let mut p = DpSe {
            gate: Gate::new(boundary),
            boundary,
            cfg,
            active: (0..k).collect(),
            epoch: 1,
            r: 0,
            pos: 0,
            done: 0,
            sums: vec![boundary.empty_sum(); k],
            released: vec![None; k],
            noise,
            releases: 0,
        };
        p.r = p.epoch_length();
        Ok(p)
    }

    /// `ln(8|S|e^2/beta)` and `ln(4|S|e^2/beta)` of the current epoch.
    fn logs(&self) -> (f64, f64) {
        self.logs_at(self.epoch, self.active.len())
    }

    /// `ln(8 s e^2/beta)` and `ln(4 s e^2/beta)` of epoch `e` with `s` active arms.
    fn logs_at(&self, epoch: u32, active: usize) -> (f64, f64) {
        let s = active as f64;
        let e2 = f64::from(epoch).powi(2);
        (
            (8.0 * s * e2 / self.cfg.beta).ln(),
            (4.0 * s * e2 / self.cfg.beta).ln(),
        )
    }

    /// `R_e` (rounded up; capped at `FOREVER`).
    pub fn epoch_length(&self) -> u64 {
        self.length_at(self.epoch, self.active.len())
    }

    /// `R_e` of epoch `e` with `s` active arms.
    fn length_at(&self, epoch: u32, active: usize) -> u64 {
        let delta = 0.5f64.powi(epoch as i32);
        let (l8, l4) = self.logs_at(epoch, active);
        let stat = 32.0 * l8 / (delta * delta);
        let privacy = if self.cfg.epsilon.is_infinite() {
            0.0
        } else {
            8.0 * l4 / (self.cfg.epsilon * delta)
        };
        (stat.max(privacy).ceil() as u64).clamp(1, FOREVER)
    }

    /// The active arms.
    pub fn active(&self) -> &[usize] {
        &self.active
    }

    /// Current epoch number (1-based).
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Cached private means of the last finished epoch.
    pub fn released_means(&self) -> &[Option<f64>] {
        &self.released
    }

    /// Number of private releases so far.
    pub fn releases(&self) -> u64 {
        self.releases
    }

    /// The elimination threshold `2 (h_e + c_e)` of the current epoch.
    pub fn threshold(&self) -> f64 {
        let (l8, l4) = self.logs();
        let r = self.r as f64;
        let h = (l8 / (2.0 * r)).sqrt();
        let c = if self.cfg.epsilon.is_infinite() {
            0.0
        } else {
            l4 / (self.cfg.epsilon * r)
        };
        2.0 * (h + c)
    }

    fn end_epoch(&mut self) -> Result<()> {
        let r = self.r as f64;
        self.released.iter_mut().for_each(|m| *m = None);
        for &a in &self.active {
            debug_assert_eq!(self.sums[a].n(), self.r);
            // Simulation: exactly `Lap(1/(epsilon R_e)).release_mean(..)` (Alg. 1); deployment:
            // the discrete Laplace on the integer grid sum, the same epsilon.
            let (m, _) = self.noise.laplace_mean(
                self.boundary.width() / r,
                self.cfg.epsilon,
                &self.sums[a],
                &self.boundary,
            )?;
            self.released[a] = Some(m);
            self.sums[a] = self.boundary.empty_sum();
            self.releases += 1;
        }
        let best = self
            .active
            .iter()
            .map(|&a| self.released[a].expect("released above"))
            .fold(f64::NEG_INFINITY, f64::max);
        let thr = self.threshold();
        let released = &self.released;
        self.active
            .retain(|&a| best - released[a].expect("released above") <= thr);
        self.epoch = self.epoch.saturating_add(1);
        self.pos = 0;
        self.done = 0;
        self.r = self.epoch_length();
        Ok(())
    }

    /// Add rewards the gate admitted (of the committed arm, inside the block).
    fn record(&mut self, arm: usize, sum: &RewardSum) -> Result<()> {
        if self.active.len() == 1 {
            return Ok(()); // committed: nothing more to learn
        }
        let a = self.active[self.pos];
        if a != arm || self.done + sum.n() > self.r {
            return Err(Error::Protocol(format!(
                "DP-SE observed {} reward(s) of arm {arm} in a block of arm {a} with {} round(s) left",
                sum.n(),
                self.r - self.done
            )));
        }
        let sum = if self.noise.grade() == NoiseGrade::Deployment {
            // The block's total onto the epoch's 2^-k grid (a sum of grid points stays one).
            let s = self.noise.discretise(sum.sum(), self.r, &self.boundary);
            self.boundary.drawn_sum(s, sum.n())
        } else {
            *sum
        };
        self.sums[a].add(&sum)?;
        self.done += sum.n();
        if self.done == self.r {
            self.done = 0;
            self.pos += 1;
            if self.pos == self.active.len() {
                self.end_epoch()?;
            }
        }
        Ok(())
    }
}

impl Policy for DpSe {
    fn released_estimates(&self) -> Option<crate::report::Released> {
        // The cached means of the last finished epoch `e - 1` (the arms active in it, each its
        // release number `e - 1`): `R_{e-1}` fresh rewards (the epoch's length with as many
        // active arms as have a mean) and Laplace noise of scale `width/(epsilon R_{e-1})`.
        let range = (self.boundary.lo, self.boundary.hi);
        let rounding = crate::report::grid_rounding(self.cfg.noise, self.cfg.grid_bits, range);
        let Some(last) = self.epoch.checked_sub(1).filter(|&e| e >= 1) else {
            // Before the first epoch ends: no arm has a release yet (the report says so per arm).
            return Some(crate::report::Released {
                means: vec![None; self.sums.len()],
                range,
                rounding,
                releases_bound: 0,
                target: None,
            });
        };
        let active = self.released.iter().filter(|m| m.is_some()).count();
        let r = self.length_at(last, active.max(1));
        let width = self.boundary.width();
        let scale =
            crate::privacy::LaplaceMechanism::for_pure_dp(width / r as f64, self.cfg.epsilon)
                .ok()?
                .scale();
        Some(crate::report::Released {
            means: self
                .released
                .iter()
                .map(|m| {
                    m.map(|v| {
                        crate::report::Release::new(
                            v,
                            r,
                            crate::report::NoiseLaw::Laplace { scale },
                        )
                        .with_index(u64::from(last))
                    })
                })
                .collect(),
            range,
            rounding,
            releases_bound: 0,
            target: None,
        })
    }
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(Setting::FiniteArmed, DP_SE.kind, self)
    }
    fn num_arms(&self) -> usize {
        self.sums.len()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        guarantee(&self.cfg)
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
    fn choose(&mut self, _t: u64) -> Pull {
        if let Some(c) = self.gate.open() {
            return Pull {
                arm: c.arm,
                steps: c.left,
            };
        }
        let pull = if self.active.len() == 1 {
            // Commit to the last arm for ever (the simulator stops at the horizon).
            Pull {
                arm: self.active[0],
                steps: FOREVER,
            }
        } else {
            Pull {
                arm: self.active[self.pos],
                steps: self.r - self.done,
            }
        };
        self.gate.commit(pull.arm, pull.steps);
        pull
    }
    fn observe(&mut self, arm: usize, reward: f64) -> Result<()> {
        let mut gate = self.gate;
        let r = gate.admit(arm, reward)?;
        self.record(arm, &self.boundary.single(r)?)?;
        self.gate = gate;
        Ok(())
    }
    fn observe_batch(&mut self, arm: usize, sum: &RewardSum) -> Result<()> {
        let mut gate = self.gate;
        gate.admit_sum(arm, sum)?;
        self.record(arm, sum)?;
        self.gate = gate;
        Ok(())
    }
}

impl crate::config::Config for DpSeConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        DpSeConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spec ldp §7.5.4: each active arm is pulled exactly R_e times per epoch (fresh samples),
    /// R_e follows the formula, elimination uses 2 (h_e + c_e).
    #[test]
    fn epochs_and_elimination() {
        let cfg = DpSeConfig::new(1.0, 1e-3);
        let mut p = DpSe::new(3, cfg, 4).unwrap();
        // R_1 with |S| = 3, e = 1, Delta = 1/2
        let want = (32.0 * (8.0 * 3.0 / 1e-3f64).ln() * 4.0)
            .max(8.0 * (4.0 * 3.0 / 1e-3f64).ln() * 2.0)
            .ceil() as u64;
        assert_eq!(p.epoch_length(), want);
        let means = [0.9, 0.5, 0.1];
        let mut t = 0;
        let mut epoch_pulls = vec![0u64; 3];
        while p.active().len() > 1 && t < 10_000_000 {
            let e = p.epoch();
            let r = p.epoch_length();
            let active = p.active().to_vec();
            let thr = p.threshold();
            let pull = p.choose(t);
            epoch_pulls[pull.arm] += pull.steps;
            // deterministic "rewards": the mean times the count
            p.observe_batch(
                pull.arm,
                &p.boundary()
                    .drawn_sum(means[pull.arm] * pull.steps as f64, pull.steps),
            )
            .unwrap();
            t += pull.steps;
            if p.epoch() != e {
                for &a in &active {
                    assert_eq!(epoch_pulls[a], r, "arm {a} in epoch {e}");
                }
                epoch_pulls = vec![0; 3];
                // every eliminated arm was beyond the threshold
                let best = active
                    .iter()
                    .map(|&a| p.released_means()[a].unwrap())
                    .fold(f64::NEG_INFINITY, f64::max);
                for &a in &active {
                    let gap = best - p.released_means()[a].unwrap();
                    assert_eq!(!p.active().contains(&a), gap > thr, "arm {a}");
                }
            }
        }
        assert_eq!(p.active(), &[0]);
        let pull = p.choose(t);
        assert_eq!(pull.arm, 0);
    }

    /// Spec ldp §7.5.4: with epsilon = inf and a huge gap it is plain successive elimination, which
    /// drops the bad arm after the first epoch.
    #[test]
    fn non_private_limit() {
        let mut p = DpSe::new(2, DpSeConfig::new(f64::INFINITY, 1e-3), 0).unwrap();
        assert!(!p.guarantee().is_private());
        let r = p.epoch_length();
        assert_eq!(r, (32.0 * (16.0 / 1e-3f64).ln() * 4.0).ceil() as u64);
        let a = p.choose(0);
        p.observe_batch(a.arm, &p.boundary().drawn_sum(a.steps as f64, a.steps))
            .unwrap();
        let b = p.choose(r);
        p.observe_batch(b.arm, &p.boundary().drawn_sum(0.0, b.steps))
            .unwrap();
        assert_eq!(p.released_means(), &[Some(1.0), Some(0.0)]);
        assert_eq!(p.active(), &[0]);
    }

    #[test]
    fn bad_config() {
        assert!(DpSe::new(2, DpSeConfig::new(1.0, 0.0), 0).is_err());
        assert!(DpSe::new(2, DpSeConfig::new(-1.0, 0.1), 0).is_err());
    }
}

//! DP-SE for fixed-confidence BAI: epsilon-DP successive elimination with fresh samples per
//! epoch and one Laplace mean per (arm, epoch).
//!
//! # Algorithm
//! Sajed & Sheffet, "An Optimal Private Stochastic-MAB Algorithm Based on an Optimal Private
//! Stopping Rule", ICML 2019, Algorithm 1, converted to fixed-confidence BAI as in Azize's thesis
//! (spec dp-bai §4.5; the baseline of Azize et al. 2023 and of Jourdan & Azize 2025, Figure 1).
//! * Active set `S = [K]`; epochs `e = 1, 2, ...`, `Delta_e = 2^-e`,
//!   `R_e = floor(max(32 ln(8|S|e^2/delta) / Delta_e^2, 8 ln(4|S|e^2/delta) / (eps Delta_e))) + 1`
//!   with `|S|` the size of the active set at the start of the epoch.
//! * Pull every active arm `R_e` times with fresh samples (one request of `R_e` samples per arm,
//!   in index order: the released statistics do not depend on the order), release
//!   `mu~_a = epoch mean + Lap(1/(eps R_e))`.
//! * With `h_e = sqrt(ln(8|S|e^2/delta) / (2 R_e))` and `c_e = ln(4|S|e^2/delta) / (eps R_e)`,
//!   remove every `a` with `max_{b in S} mu~_b - mu~_a > 2 (h_e + c_e)`.
//! * Stop when `|S| = 1` and recommend its element.
//!
//! Why it is delta-correct: per (arm, epoch), `P(|mean - mu_a| > h_e) <= 2 e^{-2 R_e h_e^2} =
//! delta / (4|S|e^2)` (Hoeffding) and `P(|Lap(1/(eps R_e))| > c_e) = e^{-eps R_e c_e} =
//! delta / (4|S|e^2)`; a union bound over the arms and epochs gives total probability at most
//! `delta sum_e 1/(2 e^2) = delta pi^2 / 12 < delta` that some released mean is off by more
//! than `h_e + c_e`, and outside that event the best arm is never removed (its gap to any arm is
//! `>= 0`, so a removal would need an error of more than `h_e + c_e` on one of the two means).
//!
//! We follow the thesis, not the DP-BAI code's quirks (spec §4.5): the epoch sum is divided by
//! `R_e` (not the cumulative count) and the max is over the active set only. With `eps = inf`
//! (`c_e = 0`, no noise) it is the non-private successive elimination of Even-Dar et al. (2006)
//! with these constants.
//!
//! # Privacy
//! eps-global DP (central, pure), adjacency: reward tables differing in one row. Each reward
//! enters exactly one epoch mean of one arm (epochs use fresh samples: earlier epochs are
//! forgotten); that mean of `R_e` rewards in `[0, 1]` has L1-sensitivity `1/R_e` and is released
//! once with `Lap(1/(eps R_e))` ([`LaplaceMechanism::for_pure_dp`], scale rounded up), drawn at
//! the end of the arm's epoch request and cached, never re-sampled. The epoch lengths depend only
//! on `e`, `|S|` and public constants, so the releases are over disjoint rewards and compose in
//! parallel (adaptive version: Azize thesis App. C.1.2): eps-DP overall. Elimination, stopping
//! and the recommendation read released means only (post-processing).
//!
//! # Parameters
//! `epsilon` (> 0, inf = non-private; required). `delta` comes from the experiment. `noise`
//! (`simulation` default | `deployment`: each epoch mean is the integer sum of its rewards on the
//! `2^-grid_bits` grid plus an exact discrete Laplace of scale `2^k/eps` from an OS-keyed
//! ChaCha20, the same eps; `docs/privacy.md`), `grid_bits` (1..=32, default 20).

use super::{BaiAlgorithm, BaiConfig, BaiEngine, BaiStep, fmt_num};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Error, Result, check};
use crate::privacy::{
    BoundaryMode, DEFAULT_GRID_BITS, LaplaceMechanism, NoiseKind, NoiseSource, PrivacyGuarantee,
    RewardBoundary, RewardSum,
};
use crate::protocol::Gate;

use serde::Deserialize;
use std::sync::Arc;

/// Registry record of `dp_se_bai`.
pub const DP_SE_BAI: AlgorithmInfo = AlgorithmInfo {
    kind: "dp_se_bai",
    name: "DP-SE for fixed-confidence BAI (private successive elimination)",
    setting: Setting::Bai,
    reference: "Sajed & Sheffet 2019 (ICML), DP-SE converted to fixed-confidence BAI: Azize thesis / spec dp-bai §4.5",
    privacy: "eps-global DP (pure, central), Laplace 1/(eps R_e) per (arm, epoch) mean, fresh samples per epoch",
    example: "epsilon = 1.0",
    source: file!(),
    doc: include_str!("dp_se.rs"),
    private: true,
    release_keys: crate::config::NOISE_KEYS,
};

/// DP-SE (fixed-confidence BAI) configuration.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DpSeBaiConfig {
    /// Privacy budget eps (> 0, inf = non-private).
    pub epsilon: f64,
    /// Noise path (`simulation` default, or `deployment`).
    #[serde(default)]
    pub noise: NoiseKind,
    /// Deployment grid `2^-grid_bits` (default 20).
    #[serde(default = "default_grid_bits")]
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

impl DpSeBaiConfig {
    /// The configuration for `epsilon`.
    pub fn new(epsilon: f64) -> Self {
        DpSeBaiConfig {
            epsilon,
            noise: NoiseKind::Simulation,
            grid_bits: DEFAULT_GRID_BITS,
        }
    }

    /// Validate.
    ///
    /// # Errors
    /// `epsilon` > 0 (inf allowed), not NaN.
    pub fn validate(&self) -> Result<()> {
        check::budget("epsilon", self.epsilon)?;
        crate::privacy::check_noise(self.noise, self.grid_bits, self.epsilon.is_finite())
    }
}

impl BaiConfig for DpSeBaiConfig {
    fn kind(&self) -> &'static str {
        DP_SE_BAI.kind
    }
    fn label(&self) -> String {
        crate::privacy::noise_label(
            format!("dp_se_bai(eps={})", fmt_num(self.epsilon)),
            self.noise,
            self.grid_bits,
        )
    }
    fn epsilon(&self) -> f64 {
        self.epsilon
    }
    fn threshold_name(&self) -> &'static str {
        "elimination"
    }
    fn threshold_proved(&self) -> bool {
        true
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        super::pure_dp_guarantee_noise(
            self.epsilon,
            "Laplace mechanism, scale 1/(eps R_e) (rounded up) on each per-arm epoch mean (sensitivity 1/R_e), fresh samples per epoch, one release per (arm, epoch), elimination as post-processing (Sajed & Sheffet 2019 converted to FC-BAI, Azize thesis; spec dp-bai 4.5)",
            "on each per-arm epoch: the integer sum of its R_e fresh rewards rounded to the 2^k grid (sensitivity 2^k), discrete Laplace scale t = 2^k/eps exactly (the same eps), released mean (sum + noise)/(2^k R_e), one release per (arm, epoch), elimination as post-processing (Sajed & Sheffet 2019 converted to FC-BAI)",
            self.noise,
            self.grid_bits,
        )
    }
    fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "epoch_length": "R_e = floor(max(32 ln(8|S|e^2/delta) 4^e, 8 ln(4|S|e^2/delta) 2^e / eps)) + 1",
            "elimination": "max_S mu~ - mu~_a > 2 (sqrt(ln(8|S|e^2/delta) / (2 R_e)) + ln(4|S|e^2/delta) / (eps R_e))",
        })
    }
    fn prepare(&self, k: usize, delta: f64) -> Result<Arc<dyn BaiEngine>> {
        self.validate()?;
        let mut e = DpSeBai::new(self.epsilon, k, delta)?;
        e.noise = self.noise;
        e.grid_bits = self.grid_bits;
        Ok(Arc::new(e))
    }
}

/// DP-SE for `K` arms and risk `delta`: the [`BaiEngine`] shared by the runs of a cell.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DpSeBai {
    epsilon: f64,
    k: usize,
    delta: f64,
    /// Noise path of the runs (absent from simulation snapshots: their bytes are unchanged).
    #[serde(default, skip_serializing_if = "is_simulation")]
    noise: NoiseKind,
    /// Deployment grid (absent when default).
    #[serde(default = "default_grid_bits", skip_serializing_if = "is_default_grid")]
    grid_bits: u32,
}

/// Largest epoch length (keeps `R_e` finite in `u64`; far beyond any sample cap).
const MAX_EPOCH: f64 = 1.0e18;

impl DpSeBai {
    /// Validate and build.
    ///
    /// # Errors
    /// `epsilon` > 0 (inf allowed), `delta` in (0, 1), `K >= 2`.
    pub fn new(epsilon: f64, k: usize, delta: f64) -> Result<Self> {
        check::budget("epsilon", epsilon)?;
        check::open_unit("delta", delta)?;
        if k < 2 {
            return Err(Error::param("K", k, "at least two arms"));
        }
        Ok(DpSeBai {
            epsilon,
            k,
            delta,
            noise: NoiseKind::Simulation,
            grid_bits: DEFAULT_GRID_BITS,
        })
    }

    /// `ln(8|S|e^2/delta)` (Hoeffding part) and `ln(4|S|e^2/delta)` (Laplace part).
    fn logs(&self, active: usize, e: u32) -> (f64, f64) {
        let se2 = active as f64 * f64::from(e) * f64::from(e) / self.delta;
        ((8.0 * se2).ln(), (4.0 * se2).ln())
    }

    /// Epoch length `R_e` with `active = |S|` arms at the start of epoch `e >= 1`.
    pub fn epoch_len(&self, active: usize, e: u32) -> u64 {
        let gap = (-f64::from(e)).exp2();
        let (lh, ll) = self.logs(active, e);
        let r = (32.0 * lh / (gap * gap)).max(8.0 * ll / (self.epsilon * gap));
        (r.floor() + 1.0).min(MAX_EPOCH) as u64
    }

    /// Elimination margin `2 (h_e + c_e)` for epoch `e` of length `r` with `|S| = active`.
    pub fn margin(&self, active: usize, e: u32, r: u64) -> f64 {
        let (lh, ll) = self.logs(active, e);
        let h = (lh / (2.0 * r as f64)).sqrt();
        let c = ll / (self.epsilon * r as f64);
        2.0 * (h + c)
    }
}

impl BaiEngine for DpSeBai {
    fn start(self: Arc<Self>, seed: u64) -> Box<dyn BaiAlgorithm> {
        Box::new(DpSeRun::new(self, seed))
    }
}

/// One run of DP-SE.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DpSeRun {
    gate: Gate,
    /// Snapshots store the engine's parameters; the restore rebuilds it.
    #[serde(with = "engine_snap")]
    engine: Arc<DpSeBai>,
    /// Privacy noise (seeded stream, or the OS-keyed exact path: a marker in snapshots).
    nrng: NoiseSource,
    /// Active arms, increasing.
    active: Vec<usize>,
    /// Current epoch (>= 1).
    epoch: u32,
    /// `R_e` of the current epoch.
    r: u64,
    /// The Laplace mechanism of the current epoch (sensitivity `1/R_e`; `None` only if the
    /// calibration failed, which validated parameters exclude).
    lap: Option<LaplaceMechanism>,
    /// Active arms requested in the current epoch (`active[..requested]`).
    requested: usize,
    /// Active arms whose epoch mean has been released.
    observed: usize,
    /// Released means `mu~` (the latest epoch of each arm).
    mu: Vec<f64>,
    rel: Vec<u64>,
    noise_draws: u64,
    /// The sample cap truncated a request: no release from it, the run ends.
    truncated: bool,
}

impl DpSeRun {
    /// A fresh run with policy seed `seed` (noise from [`crate::rng::noise_rng`]; DP-SE has no ties to
    /// break at random).
    ///
    /// # Panics
    /// With deployment noise, if the operating system's entropy source fails.
    pub fn new(engine: Arc<DpSeBai>, seed: u64) -> Self {
        let k = engine.k;
        let mut run = DpSeRun {
            gate: Gate::new(RewardBoundary::unit(BoundaryMode::Clip)),
            nrng: NoiseSource::new(engine.noise, engine.grid_bits, seed)
                .expect("OS entropy source failed while starting a deployment-noise DP-SE run"),
            active: (0..k).collect(),
            epoch: 0,
            r: 0,
            lap: None,
            requested: 0,
            observed: 0,
            mu: vec![0.0; k],
            rel: vec![0; k],
            noise_draws: 0,
            truncated: false,
            engine,
        };
        run.start_epoch();
        run
    }

    /// The released means (the latest epoch of each arm; 0 before the first release).
    pub fn released_means(&self) -> &[f64] {
        &self.mu
    }

    /// The active set.
    pub fn active(&self) -> &[usize] {
        &self.active
    }

    /// The current epoch.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    fn start_epoch(&mut self) {
        self.epoch += 1;
        self.r = self.engine.epoch_len(self.active.len(), self.epoch);
        // Sensitivity 1/R_e is finite and positive and eps was validated: cannot fail.
        self.lap = LaplaceMechanism::for_pure_dp(1.0 / self.r as f64, self.engine.epsilon).ok();
        self.requested = 0;
        self.observed = 0;
    }

    /// Remove every active arm whose released mean is more than `2 (h_e + c_e)` below the best
    /// released mean of the active set.
    fn eliminate(&mut self) {
        let margin = self.engine.margin(self.active.len(), self.epoch, self.r);
        let best = self
            .active
            .iter()
            .map(|&a| self.mu[a])
            .fold(f64::NEG_INFINITY, f64::max);
        let mu = &self.mu;
        self.active.retain(|&a| best - mu[a] <= margin);
    }
}

/// The engine of a [`DpSeRun`] in a snapshot: `(epsilon, K, delta)`, validated again by
/// [`DpSeBai::new`] on restore.
mod engine_snap {
    use super::{Arc, DpSeBai};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(e: &Arc<DpSeBai>, s: S) -> Result<S::Ok, S::Error> {
        e.as_ref().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<DpSeBai>, D::Error> {
        let e = DpSeBai::deserialize(d)?;
        let mut fresh = DpSeBai::new(e.epsilon, e.k, e.delta).map_err(serde::de::Error::custom)?;
        crate::privacy::check_noise(e.noise, e.grid_bits, e.epsilon.is_finite())
            .map_err(serde::de::Error::custom)?;
        fresh.noise = e.noise;
        fresh.grid_bits = e.grid_bits;
        Ok(Arc::new(fresh))
    }
}

impl DpSeRun {
    /// The algorithm's next step when no commitment is open.
    fn step(&mut self) -> BaiStep {
        if self.observed == self.active.len() && !self.truncated {
            self.eliminate();
            if self.active.len() <= 1 {
                return BaiStep::Stop;
            }
            self.start_epoch();
        }
        if self.active.len() <= 1 {
            return BaiStep::Stop;
        }
        // Past the truncated request the sim ends the run: ask for anything.
        let i = self.requested.min(self.active.len() - 1);
        self.requested += 1;
        BaiStep::Sample {
            arm: self.active[i],
            n: self.r,
        }
    }
}

impl BaiAlgorithm for DpSeRun {
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(Setting::Bai, DP_SE_BAI.kind, self)
    }
    fn num_arms(&self) -> usize {
        self.engine.k
    }

    fn next(&mut self, _t: u64) -> BaiStep {
        super::gated_next(self, |a| &mut a.gate, Self::step)
    }

    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }

    fn observe(&mut self, arm: usize, sum: &RewardSum) -> Result<()> {
        let (n, mut gate) = (sum.n(), self.gate);
        let sum = gate.admit_sum(arm, sum)?;
        self.gate = gate;
        if n < self.r {
            self.truncated = true;
            return Ok(());
        }
        // The epoch's R_e rewards as a boundary-built sum (rounded onto the release's grid on the
        // deployment path). Simulation: exactly `Lap(1/(eps R_e)).release(sum / R_e)`.
        let unit = self.gate.boundary();
        let pending = unit.drawn_sum(self.nrng.discretise(sum, self.r, &unit), self.r);
        // A failed calibration (excluded by validation) gives NaN: nothing is eliminated and
        // the run is reported capped, never released without noise.
        self.mu[arm] = match self.lap {
            Some(m) => match self.nrng.laplace_mean(
                1.0 / self.r as f64,
                self.engine.epsilon,
                &pending,
                &unit,
            ) {
                Ok((v, _)) => {
                    if m.scale() > 0.0 {
                        self.noise_draws += 1;
                    }
                    v
                }
                Err(_) => f64::NAN,
            },
            None => f64::NAN,
        };
        self.rel[arm] += 1;
        self.observed += 1;
        Ok(())
    }

    fn recommendation(&self) -> usize {
        // The survivor at Stop; at the cap, the best released mean of the active set (lowest
        // index on ties).
        self.active
            .iter()
            .copied()
            .fold(None, |b: Option<usize>, a| match b {
                Some(b) if self.mu[b] >= self.mu[a] => Some(b),
                _ => Some(a),
            })
            .unwrap_or(0)
    }

    fn noise_draws(&self) -> u64 {
        self.noise_draws
    }

    fn releases(&self) -> Vec<u64> {
        self.rel.clone()
    }

    fn released_estimates(&self) -> Option<crate::report::Released> {
        // Arm `a`'s latest release is its epoch `rel[a]` mean (every active arm releases once
        // per epoch), of `R_e` fresh rewards with Laplace noise of scale `1/(eps R_e)`. `R_e`
        // grows with the number of arms active in that epoch, which is at least the number
        // active now: `R_e` at today's count is a lower bound, which widens the interval
        // (smaller n, larger noise scale), so it stays valid.
        let e = &*self.engine;
        let bd = self.gate.boundary();
        let means = (0..self.rel.len())
            .map(|a| {
                let j = self.rel[a];
                if j == 0 || !self.mu[a].is_finite() {
                    return None;
                }
                let r = e.epoch_len(self.active.len().max(1), j as u32);
                let scale =
                    crate::privacy::LaplaceMechanism::for_pure_dp(bd.width() / r as f64, e.epsilon)
                        .ok()?
                        .scale();
                Some(
                    crate::report::Release::new(
                        self.mu[a],
                        r,
                        crate::report::NoiseLaw::Laplace { scale },
                    )
                    .with_index(j),
                )
            })
            .collect();
        Some(crate::report::Released {
            means,
            range: (bd.lo, bd.hi),
            rounding: crate::report::grid_rounding(e.noise, e.grid_bits, (bd.lo, bd.hi)),
            releases_bound: 0,
            target: None,
        })
    }

    fn risk(&self) -> Option<f64> {
        Some(self.engine.delta)
    }
}

impl crate::config::Config for DpSeBaiConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        DpSeBaiConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bai::{BaiInstance, run_one};

    /// `R_e` and the margin against a hand computation (K = 5, delta = 0.01):
    /// * eps = 0.1, e = 1: `32 ln(4000) / 0.25 = 1061.64`, `8 ln(2000) / 0.05 = 1216.14`, so
    ///   `R_1 = 1217` (privacy term dominates);
    /// * eps = 1, e = 3: `32 ln(36000) * 64 = 21486.13`, `8 ln(18000) * 8 = 627.08`, so
    ///   `R_3 = 21487`;
    /// * eps = inf, K = 2, delta = 0.1, e = 2: `32 ln(640) * 16 = 3308.27`, `R_2 = 3309`.
    #[test]
    fn epoch_length_by_hand() {
        let e = DpSeBai::new(0.1, 5, 0.01).unwrap();
        assert_eq!(e.epoch_len(5, 1), 1217);
        let e1 = DpSeBai::new(1.0, 5, 0.01).unwrap();
        assert_eq!(e1.epoch_len(5, 3), 21487);
        let np = DpSeBai::new(f64::INFINITY, 2, 0.1).unwrap();
        assert_eq!(np.epoch_len(2, 2), 3309);
        // margin = 2 (sqrt(ln(4000) / 2434) + ln(2000) / 121.7) = 2 (0.058375 + 0.062456).
        let m = e.margin(5, 1, 1217);
        assert!((m - 0.241662).abs() < 1e-5, "{m}");
        // Non-private: c_e = 0.
        let m = np.margin(2, 2, 3309);
        assert!((m - 2.0 * (640f64.ln() / 6618.0).sqrt()).abs() < 1e-12);
    }

    fn engine(eps: f64, k: usize, delta: f64) -> Arc<DpSeBai> {
        Arc::new(DpSeBai::new(eps, k, delta).unwrap())
    }

    /// Elimination rule on scripted sums (eps = inf, so the released means are the epoch means):
    /// an arm just within `margin` of the best stays, one just beyond it goes; the run stops
    /// when one arm is left and recommends it.
    #[test]
    fn elimination_rule() {
        let eng = engine(f64::INFINITY, 3, 0.1);
        let mut run = DpSeRun::new(eng.clone(), 1);
        let r = eng.epoch_len(3, 1);
        let margin = eng.margin(3, 1, r);
        let means = [0.9, 0.9 - margin + 1e-9, 0.9 - margin - 1e-9];
        for (a, m) in means.iter().enumerate() {
            assert_eq!(run.next(0), BaiStep::Sample { arm: a, n: r });
            run.observe(a, &run.boundary().drawn_sum(m * r as f64, r))
                .unwrap();
        }
        // Decision at the next call: arm 2 removed, epoch 2 starts with |S| = 2.
        let r2 = eng.epoch_len(2, 2);
        assert_eq!(run.next(0), BaiStep::Sample { arm: 0, n: r2 });
        assert_eq!(run.active(), &[0, 1]);
        run.observe(0, &run.boundary().drawn_sum(0.9 * r2 as f64, r2))
            .unwrap();
        assert_eq!(run.next(0), BaiStep::Sample { arm: 1, n: r2 });
        run.observe(1, &run.boundary().drawn_sum(0.1 * r2 as f64, r2))
            .unwrap();
        assert_eq!(run.next(0), BaiStep::Stop);
        assert_eq!(run.recommendation(), 0);
        assert_eq!(run.releases(), vec![2, 2, 1]);
        assert_eq!(run.noise_draws(), 0);
    }

    /// One Laplace draw per (arm, epoch), cached: repeated reads and the elimination step do not
    /// change a released mean; draws = releases; pulls are the sums of the `R_e` of the epochs
    /// each arm took part in.
    #[test]
    fn noise_once_per_arm_epoch() {
        let eng = engine(0.5, 2, 0.1);
        let mut run = DpSeRun::new(eng.clone(), 7);
        let r = eng.epoch_len(2, 1);
        for a in 0..2 {
            assert_eq!(run.next(0), BaiStep::Sample { arm: a, n: r });
            run.observe(a, &run.boundary().drawn_sum(0.5 * r as f64, r))
                .unwrap();
        }
        let before = run.released_means().to_vec();
        assert_eq!(run.noise_draws(), 2);
        assert_ne!(before[0], 0.5, "noise was added");
        let _ = run.recommendation();
        let _ = run.next(0); // eliminates (or not) and requests epoch 2 of arm 0
        assert_eq!(run.released_means(), &before[..]);
        assert_eq!(run.noise_draws(), 2);

        let inst = BaiInstance::new(vec![0.8, 0.5, 0.45]).unwrap();
        let eng: Arc<dyn BaiEngine> = engine(1.0, 3, 0.05);
        let plain = DpSeBai::new(1.0, 3, 0.05).unwrap();
        for run in 0..20 {
            let o = run_one(&eng, &inst, 3, "se", run, u64::MAX).unwrap();
            assert!(!o.capped);
            assert_eq!(o.noise_draws, o.releases.iter().sum::<u64>());
            assert_eq!(o.pulls.iter().sum::<u64>(), o.tau);
            // Arm pulls: R_e of each epoch the arm was active in (|S| from the releases).
            let epochs = *o.releases.iter().max().unwrap();
            let mut want = [0u64; 3];
            for e in 1..=epochs as u32 {
                let s = o.releases.iter().filter(|&&j| j >= u64::from(e)).count();
                for (w, &j) in want.iter_mut().zip(&o.releases) {
                    if j >= u64::from(e) {
                        *w += plain.epoch_len(s, e);
                    }
                }
            }
            assert_eq!(o.pulls, want.to_vec());
        }
    }

    /// Delta-correctness on means [0.9, 0.5], delta = 0.1, 300 runs per eps in {0.5, 5, inf}:
    /// errors <= 58, where P(Bin(300, 0.1) > 58) = 3.8e-7, so a delta-correct algorithm fails
    /// with probability < 4e-7 per eps (the union bound makes the true error far smaller: 0
    /// errors measured).
    #[test]
    fn delta_correct_small_instance() {
        let inst = BaiInstance::new(vec![0.9, 0.5]).unwrap();
        for eps in [0.5, 5.0, f64::INFINITY] {
            let cfg = DpSeBaiConfig::new(eps);
            let eng = cfg.prepare(2, 0.1).unwrap();
            let mut errors = 0;
            for r in 0..300 {
                let o = run_one(&eng, &inst, 17, &cfg.label(), r, 1 << 40).unwrap();
                assert!(!o.capped);
                errors += u32::from(!o.correct);
            }
            assert!(errors <= 58, "eps {eps}: {errors} errors in 300 runs");
        }
    }

    #[test]
    fn bad_input_is_named() {
        let e = DpSeBaiConfig::new(0.0).validate().unwrap_err().to_string();
        assert!(e.contains("epsilon = 0"), "{e}");
        let e = DpSeBaiConfig::new(f64::NAN)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("epsilon = NaN"), "{e}");
        let e = DpSeBaiConfig::new(1.0)
            .prepare(2, 1.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("delta = 1"), "{e}");
        let e = DpSeBaiConfig::new(1.0)
            .prepare(1, 0.1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("K = 1"), "{e}");
        assert_eq!(DpSeBaiConfig::new(0.1).label(), "dp_se_bai(eps=0.1)");
        assert_eq!(
            DpSeBaiConfig::new(f64::INFINITY).label(),
            "dp_se_bai(eps=inf)"
        );
    }
}

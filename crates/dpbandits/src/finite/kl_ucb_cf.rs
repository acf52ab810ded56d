//! kl-UCB-CF and SW-KLUCB-CF: corruption-aware kl-UCB for locally private (corrupt-feedback)
//! bandits, stationary and sliding-window.
//!
//! # Algorithm
//! * kl-UCB-CF: Gajane, Urvoy & Kaufmann (ALT 2018), "Corrupt Bandits for Preserving Local
//!   Privacy": `Index_a(t) = max{q : N_a(t) d(lambda_hat_a(t), g_a(q)) <= f(t)}` on the feedback
//!   statistics (spec ldp §2.3).
//! * SW-KLUCB-CF: Gajane (2023), "Local Differential Privacy for Sequential Decision Making in a
//!   Changing Environment", Algorithm 1: the same index on the last `w` rounds,
//!   `max{q : N_a(t,w) d(lambda_hat_a(t,w), g_a(q)) <= f(t ^ w)}` (spec ldp §2.2), in the two-step
//!   form: a KL confidence bound on the feedback mean (upper for increasing `g_a`, lower for
//!   decreasing), mapped back with `g_a^{-1}`.
//!
//! Conventions (spec ldp §2.4):
//! * `f(x) = ln x + c ln(max(1, ln x))` ("f_safe"): equal to the paper's `ln x + 3 ln ln x` for
//!   `x >= 3` with `c = 3` (the default), non-negative and non-decreasing everywhere, so the index
//!   is defined at every `t` (the paper's f is negative at `x = 2` and undefined at 1).
//! * The window sum starts at `max(1, t - w + 1)` (the seed prints `min`, a typo).
//! * An arm with no pull in the window has index `+inf`; ties among them go to the lowest index
//!   (they all have `N = 0`, so this is "smallest N, then lowest index"). The first K rounds are
//!   the initial pull of each arm.
//! * Arms are compared on the *unclipped* affine extension `g_a^{-1}` (a UCB above `g_a(1)` maps
//!   above 1), so a common increasing `g` makes the same decisions as kl-UCB on the feedback.
//! * Indexes are cached per arm and recomputed only when `(N_a, sum_a, f)` changed: after `t >= w`
//!   the level is constant and each step touches at most two arms, so SW-KLUCB-CF costs O(1) KL
//!   solves per step (the result is bit-identical to recomputing).
//!
//! # Privacy
//! Through [`super::ldp::Ldp`]: each reward is privatized by the user-side randomized response of
//! its arm (`epsilon`, or `per_arm` levels / `(p00, p11)`); the learner ([`CfLearner`]) sees only
//! the bits and knows the channels (they are public). Pure eps-LDP, local model; see
//! [`super::ldp`] for the composition argument.
//!
//! # Parameters
//! `epsilon` (> 0; inf = identity channel) or `per_arm = { epsilon = [...] }` /
//! `per_arm = { p00 = [...], p11 = [...] }` (each `p00 + p11 > 1`); `c >= 0` (default 3);
//! `window >= 1` (SW-KLUCB-CF only; the theory value is [`theory_window`]); `noise`
//! (`simulation` default | `deployment`: the randomizer's coins are exact discrete coins from an
//! OS-keyed ChaCha20, flip probability exactly `1/(1+e^eps)`, budget unchanged; needs `epsilon`
//! or `per_arm.epsilon`), `grid_bits` (1..=32, default 20; recorded, nothing is rounded).

use super::ldp::{Ldp, check_local_noise, config_guarantee, per_arm_label};
use super::window::SlidingWindow;
use super::{Policy, PolicyConfig, Pull, argmax};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Error, Result, check};
use crate::math::kl::{kl_lower, kl_upper};
use crate::privacy::RewardBoundary;
use crate::privacy::{
    DEFAULT_GRID_BITS, NoiseKind, PerArmChannel, PrivacyGuarantee, RandomizedResponse, channels_for,
};
use crate::protocol::Gate;
use serde::Deserialize;

/// Registry record of `kl_ucb_cf`.
pub const KL_UCB_CF: AlgorithmInfo = AlgorithmInfo {
    kind: "kl_ucb_cf",
    name: "kl-UCB-CF",
    setting: Setting::FiniteArmed,
    reference: "Gajane, Urvoy & Kaufmann 2018 (ALT), kl-UCB-CF; f(t) = ln t + c ln max(1, ln t)",
    privacy: "epsilon-local DP (user-side randomized response per arm; Gajane 2023 Cor. 2)",
    example: "epsilon = 1.0",
    source: file!(),
    doc: include_str!("kl_ucb_cf.rs"),
    private: true,
    release_keys: crate::config::NOISE_KEYS,
};

/// Registry record of `sw_klucb_cf`.
pub const SW_KLUCB_CF: AlgorithmInfo = AlgorithmInfo {
    kind: "sw_klucb_cf",
    name: "SW-KLUCB-CF",
    setting: Setting::FiniteArmed,
    reference: "Gajane 2023, Algorithm 1 (index in two-step form, f(t ^ w) with f_safe)",
    privacy: "epsilon-local DP (user-side randomized response per arm; Gajane 2023 Cor. 2)",
    example: "epsilon = 1.0\nwindow = 1000",
    source: file!(),
    doc: include_str!("kl_ucb_cf.rs"),
    private: true,
    release_keys: crate::config::NOISE_KEYS,
};

/// The exploration function `f(x) = ln x + c ln(max(1, ln x))` (spec ldp §2.4 item 1).
#[inline]
pub fn f_safe(x: f64, c: f64) -> f64 {
    let lx = x.max(1.0).ln();
    lx + c * lx.max(1.0).ln()
}

/// Gajane (2023), Sec. 4 theory window `sqrt(4 e T / (L_T + 4))`, rounded up (spec ldp §2.2).
pub fn theory_window(horizon: u64, segments: u64) -> u64 {
    (4.0 * std::f64::consts::E * horizon as f64 / (segments as f64 + 4.0))
        .sqrt()
        .ceil() as u64
}

/// The corruption-aware index of one arm: `g^{-1}` of the KL bound on the feedback mean.
#[inline]
pub fn cf_index(n: u64, sum: f64, level: f64, g: &RandomizedResponse) -> f64 {
    if n == 0 {
        return f64::INFINITY;
    }
    let n = n as f64;
    let lam = sum / n;
    let d = level / n;
    if g.increasing() {
        g.inverse(kl_upper(lam, d))
    } else {
        g.inverse(kl_lower(lam, d))
    }
}

/// The snapshot kind of a bare [`CfLearner`] (the inner policy of the `kl_ucb_cf` and
/// `sw_klucb_cf` kinds; not a registry kind of its own).
pub const CF_LEARNER: &str = "cf_learner";

/// `kind = "kl_ucb_cf"` / `kind = "sw_klucb_cf"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CfConfig {
    /// One privacy level for every arm (optimal symmetric RR).
    #[serde(default)]
    pub epsilon: Option<f64>,
    /// Per-arm privacy levels or RR parameters.
    #[serde(default)]
    pub per_arm: Option<PerArmChannel>,
    /// Weight of `ln ln x` in the exploration function (default 3, the paper's).
    #[serde(default = "three")]
    pub c: f64,
    /// Sliding window `w` (SW-KLUCB-CF only).
    #[serde(default)]
    pub window: Option<u64>,
    /// Set by the registry: SW-KLUCB-CF (`true`) or kl-UCB-CF.
    #[serde(skip)]
    pub windowed: bool,
    /// The randomizer's coins: `simulation` (seeded floats, default) or `deployment` (exact
    /// discrete coins from an OS-keyed ChaCha20; see [`crate::privacy::LocalRandomizer`]).
    #[serde(default)]
    pub noise: NoiseKind,
    /// Recorded in the deployment marker (default 20); randomized response rounds nothing.
    #[serde(default = "default_grid_bits")]
    pub grid_bits: u32,
}

fn default_grid_bits() -> u32 {
    DEFAULT_GRID_BITS
}

fn three() -> f64 {
    3.0
}

impl CfConfig {
    /// kl-UCB-CF at one privacy level.
    pub fn kl_ucb_cf(epsilon: f64) -> Self {
        CfConfig {
            epsilon: Some(epsilon),
            per_arm: None,
            c: 3.0,
            window: None,
            windowed: false,
            noise: NoiseKind::Simulation,
            grid_bits: DEFAULT_GRID_BITS,
        }
    }

    /// SW-KLUCB-CF at one privacy level and window.
    pub fn sw_klucb_cf(epsilon: f64, window: u64) -> Self {
        CfConfig {
            window: Some(window),
            windowed: true,
            ..Self::kl_ucb_cf(epsilon)
        }
    }

    /// Check every parameter (K-dependent checks happen in `build`).
    pub fn validate(&self) -> Result<()> {
        if !(self.c.is_finite() && self.c >= 0.0) {
            return Err(Error::param("c", self.c, "a finite number >= 0"));
        }
        match (self.windowed, self.window) {
            (true, None) => {
                return Err(Error::param(
                    "window",
                    "(missing)",
                    "an integer >= 1 (theory: ceil(sqrt(4 e T / (L_T + 4))))",
                ));
            }
            (true, Some(w)) => {
                check::at_least("window", w, 1)?;
            }
            (false, Some(w)) => {
                return Err(Error::param(
                    "window",
                    w,
                    "no window for kl_ucb_cf (use kind = \"sw_klucb_cf\")",
                ));
            }
            (false, None) => {}
        }
        crate::privacy::check_channel_spec(self.epsilon, self.per_arm.as_ref())?;
        check_local_noise(
            self.epsilon,
            self.per_arm.as_ref(),
            self.noise,
            self.grid_bits,
        )?;
        Ok(())
    }

    fn channels_k(&self, k: usize) -> Result<Vec<RandomizedResponse>> {
        channels_for(k, self.epsilon, self.per_arm.as_ref())
    }
}

impl PolicyConfig for CfConfig {
    fn kind(&self) -> &'static str {
        if self.windowed {
            SW_KLUCB_CF.kind
        } else {
            KL_UCB_CF.kind
        }
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        let mut p = vec![];
        if let Some(e) = self.epsilon {
            p.push(("epsilon", e));
        } else if let Some(e) = self.per_arm.as_ref().and_then(|pa| pa.epsilon.as_ref()) {
            p.push(("epsilon_max", e.iter().copied().fold(0.0, f64::max)));
        }
        if let Some(w) = self.window {
            p.push(("window", w as f64));
        }
        if self.c != 3.0 {
            p.push(("c", self.c));
        }
        p
    }
    fn label(&self) -> String {
        let p: Vec<String> = self
            .params()
            .iter()
            .filter(|(k, _)| *k != "epsilon_max")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let mut inner = p.join(",");
        if let Some(pa) = &self.per_arm {
            inner.push_str(&per_arm_label(pa));
        }
        crate::privacy::noise_label(
            format!("{}({})", self.kind(), inner.trim_start_matches(',')),
            self.noise,
            self.grid_bits,
        )
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        config_guarantee(
            self.epsilon,
            self.per_arm.as_ref(),
            self.noise,
            self.grid_bits,
            self.kind(),
        )
    }
    fn build(&self, k: usize, seed: u64) -> Result<Box<dyn Policy>> {
        check::arms("K", k)?;
        self.validate()?;
        self.channels_k(k)?;
        let randomizer = crate::privacy::randomizer_for(
            k,
            self.epsilon,
            self.per_arm.as_ref(),
            self.noise,
            self.grid_bits,
            seed,
        )?;
        let learner = CfLearner::new(randomizer.channels().to_vec(), self.window, self.c)?;
        Ok(Box::new(
            Ldp::with_randomizer(randomizer, Box::new(learner))?
                .named(self.kind())
                .with_kind(self.kind()),
        ))
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
enum Stats {
    Cumulative { counts: Vec<u64>, sums: Vec<f64> },
    Window(SlidingWindow),
}

/// The learner of kl-UCB-CF (`window = None`) and SW-KLUCB-CF: it receives *feedback* (bits from
/// the corruption channels it is given) and never a raw reward. Non-private on its own; wrapped by
/// [`Ldp`] it is the eps-LDP algorithm. Used directly it also serves corrupt-feedback
/// environments (the channel is then the environment's).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CfLearner {
    gate: Gate,
    channels: Vec<RandomizedResponse>,
    stats: Stats,
    window: Option<u64>,
    c: f64,
    /// Per arm: (level, N, sum, index) of the last computation.
    cache: Vec<(f64, u64, f64, f64)>,
}

impl CfLearner {
    /// A learner for the given channels (one per arm); `window = None` is kl-UCB-CF.
    pub fn new(channels: Vec<RandomizedResponse>, window: Option<u64>, c: f64) -> Result<Self> {
        let k = channels.len();
        check::arms("K", k)?;
        if !(c.is_finite() && c >= 0.0) {
            return Err(Error::param("c", c, "a finite number >= 0"));
        }
        let stats = match window {
            Some(w) => Stats::Window(SlidingWindow::new(k, w)?),
            None => Stats::Cumulative {
                counts: vec![0; k],
                sums: vec![0.0; k],
            },
        };
        Ok(CfLearner {
            gate: Gate::new(RewardBoundary::numeric()),
            channels,
            stats,
            window,
            c,
            cache: vec![(f64::NAN, u64::MAX, f64::NAN, f64::NAN); k],
        })
    }

    fn stats(&self) -> (&[u64], &[f64]) {
        match &self.stats {
            Stats::Cumulative { counts, sums } => (counts, sums),
            Stats::Window(w) => (w.counts(), w.sums()),
        }
    }

    /// Pulls of each arm in the window (all pulls for kl-UCB-CF).
    pub fn counts(&self) -> &[u64] {
        self.stats().0
    }

    /// The current index of every arm at round `t` (unclipped; `+inf` for empty arms).
    pub fn indexes(&mut self, t: u64) -> &[(f64, u64, f64, f64)] {
        let x = match self.window {
            Some(w) => t.min(w),
            None => t,
        }
        .max(1);
        let level = f_safe(x as f64, self.c);
        let (counts, sums) = match &self.stats {
            Stats::Cumulative { counts, sums } => (counts.as_slice(), sums.as_slice()),
            Stats::Window(w) => (w.counts(), w.sums()),
        };
        for (a, slot) in self.cache.iter_mut().enumerate() {
            let (n, s) = (counts[a], sums[a]);
            if slot.0 != level || slot.1 != n || slot.2 != s {
                *slot = (level, n, s, cf_index(n, s, level, &self.channels[a]));
            }
        }
        &self.cache
    }
}

impl Policy for CfLearner {
    fn released_estimates(&self) -> Option<crate::report::Released> {
        // Local DP: the bits are public; arm `a`'s running bit mean after `n` bits is its
        // `n`-th release. The bit mean is `(1 - p00) + (p00 + p11 - 1) mu` (the Bernoulli trick
        // then randomized response), mapped back to `mu` (one bit's range is
        // `1/(p00 + p11 - 1)` there). A sliding window's estimate is of the bits in its
        // window (each still a public release; its ordinal is not kept: index 0, the session
        // bounds it by the rounds played), and of the average mean of those pulls, which is the
        // arm's mean only when it does not drift: the report says so (`target`).
        let (counts, sums, target) = match &self.stats {
            Stats::Cumulative { counts, sums } => (counts.as_slice(), sums.as_slice(), None),
            Stats::Window(w) => (
                w.counts(),
                w.sums(),
                Some(
                    "a sliding window's estimates are of the average mean of each arm's pulls in \
                     the window (the arm's mean only if it did not change within the window)",
                ),
            ),
        };
        let windowed = target.is_some();
        let means = counts
            .iter()
            .zip(sums)
            .zip(&self.channels)
            .map(|((&n, &s), ch)| {
                if n == 0 {
                    return None;
                }
                let gain = ch.p00() + ch.p11() - 1.0;
                let mut r = crate::report::Release::new(
                    (s / n as f64 - (1.0 - ch.p00())) / gain,
                    n,
                    crate::report::NoiseLaw::Gaussian { sd: 0.0 },
                );
                r.spread = Some(1.0 / gain);
                Some(if windowed { r } else { r.with_index(n) })
            })
            .collect();
        Some(crate::report::Released {
            means,
            range: (0.0, 1.0),
            rounding: 0.0,
            releases_bound: 0,
            target,
        })
    }
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(Setting::FiniteArmed, CF_LEARNER, self)
    }
    fn num_arms(&self) -> usize {
        self.channels.len()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        PrivacyGuarantee::non_private()
    }
    fn choose(&mut self, t: u64) -> Pull {
        super::gated_choose(self, |p| &mut p.gate, |p| p.decide(t))
    }
    fn observe(&mut self, arm: usize, reward: f64) -> Result<()> {
        let reward = self.gate.admit(arm, reward)?;
        let feedback = reward;
        let x = if feedback.is_nan() {
            0.0
        } else {
            feedback.clamp(0.0, 1.0)
        };
        match &mut self.stats {
            Stats::Cumulative { counts, sums } => {
                counts[arm] += 1;
                sums[arm] += x;
            }
            Stats::Window(w) => w.push(arm, x),
        }
        Ok(())
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
}
impl CfLearner {
    /// The algorithm's choice when no commitment is open.
    fn decide(&mut self, t: u64) -> Pull {
        if let Some(a) = self.counts().iter().position(|&n| n == 0) {
            return Pull { arm: a, steps: 1 };
        }
        let arm = argmax(self.indexes(t).iter().map(|e| e.3));
        Pull { arm, steps: 1 }
    }
}

impl crate::config::Config for CfConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        CfConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spec ldp §7.3.2.
    #[test]
    fn f_safe_values() {
        assert_eq!(f_safe(1.0, 3.0), 0.0);
        assert!((f_safe(2.0, 3.0) - 2f64.ln()).abs() < 1e-15);
        assert!((f_safe(3.0, 3.0) - 1.380_755_772).abs() < 1e-9);
        assert!((f_safe(368.0, 3.0) - 11.237_047_15).abs() < 1e-8);
        let mut prev = 0.0;
        for x in 1..2000 {
            let v = f_safe(x as f64, 3.0);
            assert!(v >= prev);
            prev = v;
            if x >= 3 {
                let l = (x as f64).ln();
                assert!((v - (l + 3.0 * l.ln())).abs() < 1e-12);
            }
        }
    }

    /// Spec ldp §7.3.4-5: worked indexes for an increasing and a decreasing g.
    #[test]
    fn worked_indexes() {
        let g = RandomizedResponse::for_ldp(1.0).unwrap();
        let level = f_safe(368.0, 3.0);
        let u = kl_upper(0.6, level / 50.0);
        assert!((u - 0.869_203_824_4).abs() < 1e-8, "{u}");
        let idx = cf_index(50, 30.0, level, &g);
        assert!((idx - 1.298_939_876).abs() < 1e-7, "{idx}");
        let g = RandomizedResponse::general(0.2, 0.3).unwrap();
        let level = f_safe(1000.0, 3.0);
        let l = kl_lower(0.55, level / 40.0);
        assert!((l - 0.191_049_217_6).abs() < 1e-8, "{l}");
        let idx = cf_index(40, 22.0, level, &g);
        assert!((idx - 1.217_901_565).abs() < 1e-7, "{idx}");
    }

    /// Spec ldp §7.3.6.
    #[test]
    fn theory_window_values() {
        assert_eq!(theory_window(100_000, 4), 369);
        assert_eq!(theory_window(1_000_000, 4), 1166);
        assert_eq!(theory_window(10_000, 1), 148);
    }

    #[test]
    fn bad_config() {
        let mut c = CfConfig::sw_klucb_cf(1.0, 0);
        let e = c.validate().unwrap_err().to_string();
        assert!(e.starts_with("window = 0: expected an integer >= 1"), "{e}");
        c.window = None;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .starts_with("window = (missing)")
        );
        let c = CfConfig {
            window: Some(5),
            ..CfConfig::kl_ucb_cf(1.0)
        };
        assert!(c.validate().is_err());
        let c = CfConfig::kl_ucb_cf(-1.0);
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .starts_with("epsilon = -1")
        );
        let c = CfConfig {
            epsilon: None,
            per_arm: Some(PerArmChannel {
                p00: Some(vec![0.6, 0.3]),
                p11: Some(vec![0.6, 0.4]),
                epsilon: None,
            }),
            ..CfConfig::kl_ucb_cf(1.0)
        };
        let e = c.build(2, 0).unwrap_err().to_string();
        assert!(e.contains("p00 + p11 = 0.7"), "{e}");
    }
}

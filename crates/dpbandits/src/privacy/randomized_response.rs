//! Binary randomized response (Warner 1965) as an epsilon-local-DP randomizer, and the per-arm
//! local randomizer that sits between a user's reward and the learner.
//!
//! # Mechanism
//! A binary input `x` is reported as `F` with `P(F = 0 | x = 0) = p00` and
//! `P(F = 1 | x = 1) = p11` (Gajane 2023, Sec. 3; spec ldp §1.3). Its mean map is affine:
//! `g(mu) = 1 - p00 + (p00 + p11 - 1) mu`, slope `s = p00 + p11 - 1`.
//!
//! # Privacy map
//! `eps_RR(p00, p11) = max(|ln(p00/(1-p11))|, |ln(p11/(1-p00))|)`: the largest likelihood ratio of
//! one output under two inputs (spec ldp §1.4). The seed paper lists only two of the four ratios,
//! which is wrong for decreasing `g`; we use all four.
//!
//! # Calibration
//! [`RandomizedResponse::for_ldp`] uses the optimal symmetric choice
//! `p00 = p11 = p(eps) = e^eps / (1 + e^eps)` (Gajane 2023, Corollary 2; it maximises
//! `p00 + p11` under eps-LDP), computed as `1/(1 + e^-eps)` (no overflow), then moved *down* one ulp
//! at a time until the privacy map evaluated in floating point is `<= eps`. Consequently a finite
//! `eps` never gives `p = 1`: the largest `p` is `1 - 2^-53` (`eps_RR ~ 36.7`). The spec's "eps >= 37
//! gives p = 1.0" would claim a finite budget for a mechanism with infinite loss; we only give
//! `p = 1` (no corruption) for `eps = inf`.
//!
//! # Rewards in [0, 1]
//! A reward `r in [0, 1]` first goes through the Bernoulli trick (`b ~ Bernoulli(r)`, exact
//! for `r in {0, 1}`, so binary rewards consume no randomness there), then through RR. The chain
//! has mean `g(mu)` and is still `eps_RR`-LDP with respect to `r`: `P(F = 1 | r) = 1 - p00 + s r`
//! is affine in `r`, so the ratio over any two rewards is at most its value at `r in {0, 1}`. With
//! the optimal `p` this is Ren et al.'s (2020) "Bernoulli response". Rewards outside [0, 1] are
//! clipped (NaN -> 0) *before* the randomizer: the privacy boundary is [0, 1], mode clip.

use crate::error::{Error, Result};
use crate::rng::SimRng;
use rand::RngExt;

/// Binary randomized response with `P(0|0) = p00`, `P(1|1) = p11`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RandomizedResponse {
    p00: f64,
    p11: f64,
}

impl RandomizedResponse {
    /// RR with an increasing mean map: `p00, p11` in (0, 1], `p00 + p11 > 1`.
    ///
    /// # Errors
    /// Names the field and value: each probability must be in (0, 1]; `p00 + p11 = 1` carries no
    /// information and `p00 + p11 < 1` is the output-flipped mechanism (use `1 - p00`, `1 - p11`).
    pub fn new(p00: f64, p11: f64) -> Result<Self> {
        check_probabilities(p00, p11)?;
        if p00 + p11 <= 1.0 {
            return Err(Error::param(
                "p00 + p11",
                p00 + p11,
                "a sum > 1 (= 1 makes the feedback independent of the reward; < 1 flips it: use 1 - p00 and 1 - p11)",
            ));
        }
        Ok(RandomizedResponse { p00, p11 })
    }

    /// RR with any non-constant mean map (`p00 + p11 != 1`); `p00 + p11 < 1` gives a decreasing
    /// `g`, which corruption-aware indexes handle with the lower confidence bound.
    pub fn general(p00: f64, p11: f64) -> Result<Self> {
        check_probabilities(p00, p11)?;
        if p00 + p11 == 1.0 {
            return Err(Error::param(
                "p00 + p11",
                p00 + p11,
                "a sum != 1 (= 1 makes the feedback independent of the reward)",
            ));
        }
        Ok(RandomizedResponse { p00, p11 })
    }

    /// The identity channel (no corruption, `eps = inf`).
    pub fn identity() -> Self {
        RandomizedResponse { p00: 1.0, p11: 1.0 }
    }

    /// The optimal eps-LDP randomized response `p00 = p11 = p(eps)` (Gajane 2023, Cor. 2), rounded
    /// so that [`Self::epsilon`] `<= eps`. `eps = inf` gives the identity channel.
    ///
    /// # Errors
    /// `eps` must be in [`super::BUDGET_MIN`, `super::LOCAL_EPSILON_MAX`], or inf.
    pub fn for_ldp(eps: f64) -> Result<Self> {
        // Below BUDGET_MIN, p(eps) rounds to 1/2 (a channel that carries nothing and a debiased
        // index of -inf); above LOCAL_EPSILON_MAX the flip is below the uniforms' resolution.
        crate::error::check::local_epsilon("epsilon", eps, true)?;
        if eps.is_infinite() {
            return Ok(Self::identity());
        }
        let mut p = 1.0 / (1.0 + (-eps).exp());
        while p >= 1.0 || sym_loss(p) > eps {
            p = p.next_down();
        }
        Ok(RandomizedResponse { p00: p, p11: p })
    }

    /// `P(F = 0 | x = 0)`.
    pub fn p00(&self) -> f64 {
        self.p00
    }
    /// `P(F = 1 | x = 1)`.
    pub fn p11(&self) -> f64 {
        self.p11
    }
    /// Slope `s = p00 + p11 - 1` of the mean map (> 0: increasing).
    pub fn slope(&self) -> f64 {
        self.p00 + self.p11 - 1.0
    }
    /// Whether the mean map is increasing.
    pub fn increasing(&self) -> bool {
        self.slope() > 0.0
    }

    /// Privacy map: the eps of eps-LDP, `max |ln P(F=y|x)/P(F=y|x')|` over all outputs and inputs.
    pub fn epsilon(&self) -> f64 {
        let (p00, p11) = (self.p00, self.p11);
        let r = |a: f64, b: f64| -> f64 {
            if a == b {
                0.0
            } else if a == 0.0 || b == 0.0 {
                f64::INFINITY
            } else {
                (a / b).ln().abs()
            }
        };
        r(p00, 1.0 - p11).max(r(p11, 1.0 - p00))
    }

    /// Mean map `g(mu) = 1 - p00 + s mu`.
    #[inline]
    pub fn mean_map(&self, mu: f64) -> f64 {
        (1.0 - self.p00) + self.slope() * mu
    }

    /// Inverse of the mean map on all of R (the affine extension, spec ldp §2.4 item 3).
    #[inline]
    pub fn inverse(&self, y: f64) -> f64 {
        (y - (1.0 - self.p00)) / self.slope()
    }

    /// Report one bit.
    #[inline]
    pub fn respond(&self, bit: bool, rng: &mut SimRng) -> bool {
        let keep = if bit { self.p11 } else { self.p00 };
        let out = if keep >= 1.0 {
            bit
        } else {
            let u: f64 = rng.random();
            if u < keep { bit } else { !bit }
        };
        super::tap::record(super::tap::Family::Bit, f64::from(u8::from(out)));
        out
    }

    /// Report one reward in [0, 1] (clipped, NaN -> 0): Bernoulli trick, then RR.
    #[inline]
    pub fn respond_reward(&self, reward: f64, rng: &mut SimRng) -> bool {
        let r = if reward.is_nan() {
            0.0
        } else {
            reward.clamp(0.0, 1.0)
        };
        let bit = if r >= 1.0 {
            true
        } else if r <= 0.0 {
            false
        } else {
            rng.random::<f64>() < r
        };
        self.respond(bit, rng)
    }
}

fn check_probabilities(p00: f64, p11: f64) -> Result<()> {
    for (f, v) in [("p00", p00), ("p11", p11)] {
        if !(0.0..=1.0).contains(&v) {
            return Err(Error::param(f, v, "a probability in [0, 1]"));
        }
    }
    Ok(())
}

/// `ln(p/(1-p))` evaluated in floating point (the map of symmetric RR).
fn sym_loss(p: f64) -> f64 {
    RandomizedResponse { p00: p, p11: p }.epsilon()
}

/// The user-side randomizer of a locally private learner: one RR channel and one coin stream per
/// arm. The learner only ever receives [`LocalRandomizer::privatize`]'s output bit.
///
/// Coins of arm `a` come from `stream_rng(seed, Noise, [0x5252, a])`, so two learners built with
/// the same seed that see the same per-arm reward sequences receive the same feedback bits (common
/// random numbers for the equivalence tests of spec ldp §7.4).
///
/// **Deployment path** ([`LocalRandomizer::deployment`]): no per-arm coin streams; every reward of
/// arm `a` goes through [`super::NoiseSource::local_bit`] at that arm's `epsilon_a` on one
/// OS-keyed ChaCha20 source, so the flip probabilities are exactly `e^eps_a/(1+e^eps_a)` and the
/// Bernoulli trick is exact for the `f64` reward (see `docs/privacy.md`, "Local randomizers").
/// The channels kept beside it are the float ones of [`RandomizedResponse::for_ldp`] (rounded
/// down by a few ulps), used only by the learner's debiasing (post-processing).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LocalRandomizer {
    channels: Vec<RandomizedResponse>,
    coins: Vec<SimRng>,
    /// The exact coins of the deployment path (absent from simulation snapshots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    exact: Option<ExactCoins>,
}

/// The deployment path of a [`LocalRandomizer`]: each arm's exact `epsilon` and the OS-keyed
/// source (a marker in snapshots, restored with a fresh key).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ExactCoins {
    epsilon: Vec<f64>,
    noise: super::NoiseSource,
}

impl LocalRandomizer {
    /// One channel per arm; `seed` is the policy's seed.
    pub fn new(channels: Vec<RandomizedResponse>, seed: u64) -> Self {
        let coins = (0..channels.len() as u64)
            .map(|a| crate::rng::response_rng(seed, a))
            .collect();
        LocalRandomizer {
            channels,
            coins,
            exact: None,
        }
    }

    /// The deployment path: one level `epsilon[a]` per arm (each finite, in the range of
    /// [`RandomizedResponse::for_ldp`]), exact coins from an OS-keyed source whose snapshot marker
    /// records `grid_bits` (randomized response rounds nothing: the Bernoulli trick is exact for
    /// the `f64` reward itself).
    ///
    /// # Errors
    /// A level outside the allowed range or infinite (naming `epsilon`); `grid_bits` outside
    /// `1..=MAX_GRID_BITS`; the OS entropy source fails.
    pub fn deployment(epsilon: Vec<f64>, grid_bits: u32) -> Result<Self> {
        let channels = epsilon
            .iter()
            .map(|&e| {
                crate::error::check::local_epsilon("epsilon", e, false)?;
                RandomizedResponse::for_ldp(e)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(LocalRandomizer {
            channels,
            coins: Vec::new(),
            exact: Some(ExactCoins {
                epsilon,
                noise: super::NoiseSource::deployment(grid_bits)?,
            }),
        })
    }

    /// The grade of the randomizer's coins.
    pub fn grade(&self) -> super::NoiseGrade {
        match self.exact {
            Some(_) => super::NoiseGrade::Deployment,
            None => super::NoiseGrade::Simulation,
        }
    }

    /// The grid recorded in the deployment marker (the default on the simulation path).
    pub fn grid_bits(&self) -> u32 {
        self.exact
            .as_ref()
            .map_or(super::DEFAULT_GRID_BITS, |x| x.noise.grid_bits())
    }

    /// The exact per-arm levels of the deployment path (`None` on the simulation path).
    pub fn exact_epsilon(&self) -> Option<&[f64]> {
        self.exact.as_ref().map(|x| x.epsilon.as_slice())
    }

    /// The channel of each arm.
    pub fn channels(&self) -> &[RandomizedResponse] {
        &self.channels
    }

    /// The largest per-arm privacy level (the guarantee every user gets).
    pub fn epsilon(&self) -> f64 {
        if let Some(x) = &self.exact {
            return x.epsilon.iter().copied().fold(0.0, f64::max);
        }
        self.channels
            .iter()
            .map(RandomizedResponse::epsilon)
            .fold(0.0, f64::max)
    }

    /// Privatize one reward of `arm`: the feedback bit (as 0.0 or 1.0).
    #[inline]
    pub fn privatize(&mut self, arm: usize, reward: f64) -> f64 {
        if let Some(x) = &mut self.exact {
            let r = if reward.is_nan() {
                0.0
            } else {
                reward.clamp(0.0, 1.0)
            };
            // r in [0, 1] and epsilon[arm] finite and > 0 (checked when built): no error.
            let bit = x
                .noise
                .local_bit(x.epsilon[arm], r)
                .expect("reward clipped to [0, 1], epsilon checked");
            return f64::from(u8::from(bit));
        }
        if self.channels[arm].respond_reward(reward, &mut self.coins[arm]) {
            1.0
        } else {
            0.0
        }
    }
}

/// Per-arm channels from either one eps (`per_arm` = None), per-arm eps, or per-arm (p00, p11).
pub(crate) fn channels_for(
    k: usize,
    epsilon: Option<f64>,
    per_arm: Option<&PerArmChannel>,
) -> Result<Vec<RandomizedResponse>> {
    match (epsilon, per_arm) {
        (Some(e), None) => Ok(vec![RandomizedResponse::for_ldp(e)?; k]),
        (None, Some(pa)) => pa.channels(k),
        (Some(_), Some(_)) => Err(Error::param(
            "per_arm",
            "(given with epsilon)",
            "either epsilon (one level for every arm) or per_arm, not both",
        )),
        (None, None) => Err(Error::param(
            "epsilon",
            "(missing)",
            "a number > 0 (inf gives the non-private limit), or a per_arm table",
        )),
    }
}

/// The exact per-arm levels of the deployment path from either one eps or `per_arm.epsilon`
/// (`k` arms). Explicit `(p00, p11)` channels are refused naming `per_arm`: their level is a
/// floating-point evaluation of `ln(p00/(1-p11))`, which the exact coins could exceed in the last
/// bits, and the deployment path states no budget it cannot prove.
pub(crate) fn exact_levels_for(
    k: usize,
    epsilon: Option<f64>,
    per_arm: Option<&PerArmChannel>,
) -> Result<Vec<f64>> {
    channels_for(k, epsilon, per_arm)?;
    match (epsilon, per_arm) {
        (Some(e), _) => Ok(vec![e; k]),
        (
            None,
            Some(PerArmChannel {
                epsilon: Some(e), ..
            }),
        ) => Ok(e.clone()),
        _ => Err(Error::param(
            "per_arm",
            "(p00, p11 lists)",
            "epsilon or per_arm.epsilon with noise = \"deployment\" (the exact coins implement \
             the optimal symmetric channel of each level; explicit (p00, p11) channels are \
             simulation only)",
        )),
    }
}

/// The user-side randomizer a local kind asks for: the seeded float coins of `channels_for`
/// (simulation, keyed by `seed`) or the exact coins of [`LocalRandomizer::deployment`].
/// Deployment needs every level finite (a finite budget), else it is refused naming `noise`.
pub(crate) fn randomizer_for(
    k: usize,
    epsilon: Option<f64>,
    per_arm: Option<&PerArmChannel>,
    noise: super::NoiseKind,
    grid_bits: u32,
    seed: u64,
) -> Result<LocalRandomizer> {
    match noise {
        super::NoiseKind::Simulation => Ok(LocalRandomizer::new(
            channels_for(k, epsilon, per_arm)?,
            seed,
        )),
        super::NoiseKind::Deployment => {
            let levels = exact_levels_for(k, epsilon, per_arm)?;
            let finite = levels.iter().all(|e| e.is_finite());
            super::check_noise(noise, grid_bits, finite)?;
            LocalRandomizer::deployment(levels, grid_bits)
        }
    }
}

/// Check a channel specification before K is known (per-arm lists against their own length).
pub(crate) fn check_channel_spec(
    epsilon: Option<f64>,
    per_arm: Option<&PerArmChannel>,
) -> Result<()> {
    let k = per_arm
        .and_then(|pa| pa.epsilon.as_ref().or(pa.p00.as_ref()))
        .map_or(1, Vec::len);
    channels_for(k, epsilon, per_arm).map(drop)
}

/// `per_arm = { epsilon = [...] }` or `per_arm = { p00 = [...], p11 = [...] }` (one entry per arm).
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PerArmChannel {
    /// Per-arm privacy levels (optimal symmetric RR each).
    #[serde(default)]
    pub epsilon: Option<Vec<f64>>,
    /// Per-arm `P(0|0)`.
    #[serde(default)]
    pub p00: Option<Vec<f64>>,
    /// Per-arm `P(1|1)`.
    #[serde(default)]
    pub p11: Option<Vec<f64>>,
}

impl PerArmChannel {
    /// Check the lists against their own length (before K is known).
    pub fn check(&self) -> Result<()> {
        let k = self
            .epsilon
            .as_ref()
            .or(self.p00.as_ref())
            .map_or(0, Vec::len);
        self.channels(k).map(drop)
    }

    /// Build and check the channels for `k` arms.
    pub fn channels(&self, k: usize) -> Result<Vec<RandomizedResponse>> {
        let len = |f: &str, v: &Vec<f64>| -> Result<()> {
            if v.len() == k {
                Ok(())
            } else {
                Err(Error::param(
                    format!("per_arm.{f}"),
                    format!("{v:?}"),
                    format!("one entry per arm (K = {k}), got {}", v.len()),
                ))
            }
        };
        match (&self.epsilon, &self.p00, &self.p11) {
            (Some(e), None, None) => {
                len("epsilon", e)?;
                e.iter()
                    .enumerate()
                    .map(|(i, &x)| {
                        RandomizedResponse::for_ldp(x).map_err(|_| {
                            Error::param(
                                format!("per_arm.epsilon[{i}]"),
                                x,
                                "a number > 0 (inf gives the non-private limit)",
                            )
                        })
                    })
                    .collect()
            }
            (None, Some(p0), Some(p1)) => {
                len("p00", p0)?;
                len("p11", p1)?;
                p0.iter()
                    .zip(p1)
                    .enumerate()
                    .map(|(i, (&a, &b))| {
                        RandomizedResponse::new(a, b).map_err(|e| e.at(format!("per_arm arm {i}")))
                    })
                    .collect()
            }
            _ => Err(Error::param(
                "per_arm",
                "(incomplete)",
                "either `epsilon = [...]` or both `p00 = [...]` and `p11 = [...]`",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{Stream, stream_rng};

    /// Spec ldp §7.1.1: the likelihood ratios of the calibrated RR are e^eps up to rounding, never
    /// above, over a wide eps range.
    #[test]
    fn likelihood_ratio_is_exactly_e_eps() {
        for eps in [1e-3, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 8.0, 20.0] {
            let rr = RandomizedResponse::for_ldp(eps).unwrap();
            let p = rr.p00();
            assert_eq!(rr.p00(), rr.p11());
            // P(F=0|0)/P(F=0|1) and P(F=1|1)/P(F=1|0)
            let r0 = rr.p00() / (1.0 - rr.p11());
            let r1 = rr.p11() / (1.0 - rr.p00());
            for r in [r0, r1] {
                assert!(r.ln() <= eps, "eps={eps}: ln ratio {} above budget", r.ln());
                let tol = 2.0 * (p.next_up() - p) / (1.0 - p) + 1e-14;
                assert!(
                    (r / eps.exp() - 1.0).abs() < tol,
                    "eps={eps}: ratio {r} vs e^eps {}",
                    eps.exp()
                );
            }
            assert!(rr.epsilon() <= eps);
            // "Up to rounding": p is one f64 near 1, so the best achievable ratio is limited by
            // ulp(p)/(1-p) (1e-3 relative at eps = 30). Allow two ulps of p.
            let tol = 2.0 * (p.next_up() - p) / (1.0 - p) + 1e-14;
            assert!(
                eps - rr.epsilon() <= tol,
                "eps={eps}: {} (tol {tol})",
                rr.epsilon()
            );
            // spec §1.5 table and tanh identity
            assert!((rr.slope() - (eps / 2.0).tanh()).abs() < 1e-12);
            assert!(p > 0.5 && p < 1.0);
        }
        let rr = RandomizedResponse::for_ldp(1.0).unwrap();
        assert!((rr.p00() - 0.731_058_578_6).abs() < 1e-10);
        let rr = RandomizedResponse::for_ldp(0.1).unwrap();
        assert!((rr.p00() - 0.524_979_187_5).abs() < 1e-10);
    }

    /// Spec ldp §7.1.5 (amended): large eps never reaches p = 1, never NaN; inf is the identity.
    /// Beyond LOCAL_EPSILON_MAX (flip probability below the uniforms' resolution) and below
    /// BUDGET_MIN (p rounds to 1/2: an index of -inf) the channel is refused, naming epsilon.
    #[test]
    fn extreme_eps() {
        for eps in [1e-9, 15.0, 20.0] {
            let rr = RandomizedResponse::for_ldp(eps).unwrap();
            assert!(
                rr.p00() < 1.0 && rr.p00() > 0.5 && !rr.p00().is_nan(),
                "{eps}"
            );
            assert!(rr.epsilon() <= eps);
        }
        for eps in [1e-17, 5e-324, 20.5, 37.0, 800.0, 1e300] {
            let e = RandomizedResponse::for_ldp(eps).unwrap_err().to_string();
            assert!(e.starts_with("epsilon = "), "{e}");
        }
        let id = RandomizedResponse::for_ldp(f64::INFINITY).unwrap();
        assert_eq!((id.p00(), id.p11()), (1.0, 1.0));
        assert_eq!(id.epsilon(), 0.0_f64.max(id.epsilon()));
        let mut rng = stream_rng(1, Stream::Noise, &[]);
        for b in [false, true] {
            assert_eq!(id.respond(b, &mut rng), b);
        }
        assert_eq!(id.mean_map(0.3), 0.3);
        assert_eq!(id.inverse(0.3), 0.3);
        for bad in [0.0, -1.0, f64::NAN] {
            let e = RandomizedResponse::for_ldp(bad).unwrap_err().to_string();
            assert!(e.starts_with("epsilon = "), "{e}");
        }
    }

    /// Spec ldp §7.1.2-3: general eps_RR, mean map and inverse; decreasing maps.
    #[test]
    fn general_rr_and_mean_map() {
        // The spec prints "ln(0.8/0.3) ~ 1.2528"; the value 1.2528 is ln(0.7/0.2) = ln 3.5, the
        // ratio P(F=0|x=0)/P(F=0|x=1) = p00/(1-p11), and that is the largest of the four.
        let rr = RandomizedResponse::general(0.2, 0.3).unwrap();
        assert!((rr.epsilon() - 3.5f64.ln()).abs() < 1e-14);
        assert!((rr.epsilon() - 1.252_762_968).abs() < 1e-9);
        assert!(!rr.increasing());
        let rr = RandomizedResponse::new(0.9, 0.7).unwrap();
        assert!((rr.mean_map(0.0) - 0.1).abs() < 1e-15);
        assert!((rr.mean_map(1.0) - 0.7).abs() < 1e-15);
        for x in [0.0, 0.13, 0.5, 0.99, 1.0] {
            assert!((rr.inverse(rr.mean_map(x)) - x).abs() < 1e-14);
        }
        // the four log-ratios
        let want = [
            (0.9f64 / 0.3).ln(),
            (0.7f64 / 0.1).ln(),
            (0.1f64 / 0.7).ln().abs(),
            (0.3f64 / 0.9).ln().abs(),
        ]
        .into_iter()
        .fold(0.0, f64::max);
        assert!((rr.epsilon() - want).abs() < 1e-14);
    }

    /// Spec §7 / issue "Done when" 3: p00 + p11 <= 1 and probabilities outside [0, 1] are refused
    /// with the field and value in the message.
    #[test]
    fn bad_parameters() {
        let e = RandomizedResponse::new(0.4, 0.6).unwrap_err().to_string();
        assert!(e.starts_with("p00 + p11 = 1: expected a sum > 1"), "{e}");
        let e = RandomizedResponse::new(0.2, 0.3).unwrap_err().to_string();
        assert!(e.starts_with("p00 + p11 = 0.5"), "{e}");
        let e = RandomizedResponse::new(1.2, 0.3).unwrap_err().to_string();
        assert!(e.starts_with("p00 = 1.2"), "{e}");
        let e = RandomizedResponse::general(0.5, 0.5)
            .unwrap_err()
            .to_string();
        assert!(e.contains("p00 + p11 = 1"), "{e}");
        let pa = PerArmChannel {
            epsilon: Some(vec![1.0, 2.0]),
            ..Default::default()
        };
        let e = pa.channels(3).unwrap_err().to_string();
        assert!(e.contains("per_arm.epsilon") && e.contains("K = 3"), "{e}");
    }

    /// The deployment randomizer's releases (the feedback bits themselves) follow the stated law:
    /// for each arm's level eps in {0.5, 1, 3} and rewards r in {0, 0.3, 1}, the two-sided
    /// 1 - 1e-6 Wilson interval of 200k OS-seeded bits contains `(1 + (e^eps - 1) r)/(e^eps + 1)`
    /// (not seedable: false-failure rate <= 1e-6 per case, <= 9e-6 per run), and for r in {0, 1}
    /// it excludes the law of an eps 10% too large (power). The snapshot is the marker and a
    /// restore is again deployment-grade with the same levels.
    #[test]
    fn deployment_randomizer_bits_follow_the_stated_law() {
        use crate::privacy::discrete::tests::wilson;
        let levels = vec![0.5, 1.0, 3.0];
        let mut lr = LocalRandomizer::deployment(levels.clone(), 20).unwrap();
        assert_eq!(lr.grade(), crate::privacy::NoiseGrade::Deployment);
        assert_eq!(lr.epsilon(), 3.0);
        let law = |eps: f64, r: f64| (1.0 + (eps.exp() - 1.0) * r) / (eps.exp() + 1.0);
        let n = 200_000u64;
        for (arm, &eps) in levels.iter().enumerate() {
            for r in [0.0, 0.3, 1.0] {
                let k = (0..n).filter(|_| lr.privatize(arm, r) == 1.0).count() as u64;
                let (lo, hi) = wilson(k, n, 4.891_638_475_699);
                let want = law(eps, r);
                assert!(lo <= want && want <= hi, "eps {eps}, r {r}: {k}/{n}");
                if r != 0.3 {
                    let wrong = law(1.1 * eps, r);
                    assert!(!(lo <= wrong && wrong <= hi), "eps {eps}, r {r}: power");
                }
            }
        }
        let json = serde_json::to_string(&lr).unwrap();
        assert!(json.contains(r#""deployment":{"grid_bits":20}"#), "{json}");
        let back: LocalRandomizer = serde_json::from_str(&json).unwrap();
        assert_eq!(back.exact_epsilon(), Some(&levels[..]));
        assert_eq!(back.grade(), crate::privacy::NoiseGrade::Deployment);
        // The simulation randomizer snapshots exactly as before (no `exact` key).
        let sim = LocalRandomizer::new(vec![RandomizedResponse::for_ldp(1.0).unwrap()], 3);
        assert!(!serde_json::to_string(&sim).unwrap().contains("exact"));
        // Bad levels and explicit channels are refused on the deployment path.
        assert!(LocalRandomizer::deployment(vec![f64::INFINITY], 20).is_err());
        assert!(LocalRandomizer::deployment(vec![1.0], 0).is_err());
        let pa = PerArmChannel {
            p00: Some(vec![0.8]),
            p11: Some(vec![0.7]),
            epsilon: None,
        };
        let e = exact_levels_for(1, None, Some(&pa))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("per_arm = "), "{e}");
    }

    /// Spec ldp §7.1.4: the feedback mean is g(mu), also for non-binary rewards (Bernoulli trick).
    /// 400k draws, tolerance 5 binomial standard errors: false-failure rate < 1e-6 per case.
    #[test]
    fn feedback_mean_is_g_mu() {
        let rr = RandomizedResponse::new(0.8, 0.65).unwrap();
        let mut rng = stream_rng(5, Stream::Noise, &[]);
        let n = 400_000;
        for r in [0.0, 0.3, 1.0] {
            let ones = (0..n).filter(|_| rr.respond_reward(r, &mut rng)).count() as f64;
            let q = rr.mean_map(r);
            let se = (q * (1.0 - q) / n as f64).sqrt();
            assert!((ones / n as f64 - q).abs() < 5.0 * se, "r={r}");
        }
    }
}

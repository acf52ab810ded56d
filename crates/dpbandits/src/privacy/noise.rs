//! Noise sources: the seeded floating-point path for simulation and an exact discrete path for
//! deployment.
//!
//! A private policy owns one [`NoiseSource`] and makes every release through it
//! ([`NoiseSource::gaussian_mean`] for zCDP kinds, [`NoiseSource::laplace_mean`] for pure-DP kinds).
//! The configuration key `noise` chooses the path ([`NoiseKind`]):
//!
//! * **`simulation`** (default): the existing mechanisms ([`GaussianMechanism`],
//!   [`LaplaceMechanism`]) drawing `f64` noise from the policy's seeded [`SimRng`] noise stream.
//!   Reproducible from the master seed, byte-identical to the results before this module existed,
//!   and labelled **simulation-grade** ([`NoiseGrade::Simulation`]) in every guarantee and manifest:
//!   floating-point samplers leak through their bit patterns (Mironov 2012) and a seeded generator
//!   is predictable.
//! * **`deployment`**: rewards are rounded to the grid `2^-k Z` (`k = grid_bits`, default
//!   [`DEFAULT_GRID_BITS`]), so a released sum is an integer number of grid units and its
//!   sensitivity is the integer `Delta = ceil(2^k (hi - lo))` (`2^k` for rewards in [0, 1]); the
//!   noise is an exact discrete Gaussian (zCDP kinds) or discrete Laplace (pure-DP kinds) integer
//!   from [`super::discrete`] (Canonne, Kamath & Steinke 2020, Algorithms 1-3), driven by
//!   ChaCha20 seeded from the operating system (`rand::rngs::SysRng`), never from the master seed.
//!   Outputs are **not reproducible** by design; the guarantee says **deployment-grade**.
//!
//! # Deployment calibration (exact, no rounding of the budget)
//! Let `S = sum_i round(2^k r_i)` be the integer sum of the `n` clipped, rounded rewards of one
//! release, and let `s` be the mean-level sensitivity the algorithm asks for (`1/L`, or more
//! conservatively `1/n_a` with `n_a <= L` for AdaC-UCB's literal count). The integer statistic is
//! released with the sum-level sensitivity `Delta_cal = max(s 2^k n, Delta)` (exact rationals:
//! every `f64` is a dyadic rational), and the released mean is `(S + Y) / (2^k n)`
//! (post-processing). With `rho` and `epsilon` the exact rationals of their `f64` values:
//!
//! * zCDP: `Y ~ N_Z(0, sigma^2)` with `sigma^2 = Delta_cal^2 / (2 rho)`, an exact rational
//!   (CKS20 Algorithm 3 takes `sigma^2` itself). By CKS20 Theorem 4 the discrete Gaussian on an
//!   integer query of sensitivity `Delta` is `Delta^2/(2 sigma^2)`-zCDP, the same as the continuous
//!   one, so the loss is `<= Delta_cal^2 / (2 sigma^2) = rho` **exactly**: the budget is unchanged.
//! * pure DP: `Y ~ Lap_Z(t)` with `t = Delta_cal / epsilon`, an exact rational. The discrete
//!   Laplace (geometric) mechanism is `Delta/t`-DP (Ghosh, Roughgarden & Sundararajan 2009; CKS20
//!   Sec. 2), so the loss is `<= epsilon` exactly: the budget is unchanged.
//!
//! Rounding a reward to the nearest grid point (`floor(2^k r + 1/2)`) is monotone and commutes with
//! integer shifts, so both one reward and one batch sum (`observe_batch`) move the integer sum by at
//! most `Delta` when one reward changes. Grid values are exact in `f64`, and an episode sum of grid
//! values is computed exactly as long as `2^k n max(|lo|, |hi|) <= 2^53` (`n <= 2^33` rewards per
//! release at the default `k = 20`). For a longer release the grid of *that release* is coarsened:
//! `k` is the largest integer `<= grid_bits` satisfying the bound (computed exactly;
//! [`NoiseSource::discretise`] takes the committed release length `n` for this). `k` is a function
//! of public quantities only, the sums stay exact, and the calibration above uses that release's
//! `k`, so the claim is unchanged (only the discretisation bias grows, to `2^-(k+1)`).
//!
//! # Discretisation bias
//! Rounding moves each reward by at most `2^-(k+1)` (4.8e-7 at `k = 20`), so the released mean is
//! biased by at most that much; Bernoulli rewards (0 or 1) lie on the grid and are not moved at all.
//! The noise is symmetric (mean 0) and its variance is at most `sigma^2` (CKS20 Prop. 19 bounds the
//! discrete Gaussian's variance by that of the continuous one), so the index policies' confidence
//! bonuses, computed for the continuous noise, remain valid.

use super::discrete::{Ratio, Signed, discrete_gaussian, discrete_laplace};
use super::{GaussianMechanism, LaplaceMechanism, NoisyMean, RewardBoundary, RewardSum};
use crate::error::{Error, Result};
use crate::rng::SimRng;
use num_bigint::BigUint;
use num_traits::ToPrimitive;
use rand::SeedableRng;
use rand::rngs::{ChaCha20Rng, SysRng};
use rand_distr::Distribution;
use serde::{Deserialize, Serialize};

/// The default grid: rewards are rounded to multiples of `2^-20`.
pub const DEFAULT_GRID_BITS: u32 = 20;
/// The finest grid allowed (`2^-32`): a release of `n` rewards needs `2^k n <= 2^53`.
pub const MAX_GRID_BITS: u32 = 32;

/// Which noise path a private policy uses (configuration key `noise`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoiseKind {
    /// Seeded floating-point noise: reproducible, simulation-grade. Default.
    #[default]
    Simulation,
    /// Exact discrete noise from an OS-seeded CSPRNG on a reward grid: deployment-grade, not
    /// reproducible.
    Deployment,
}

impl<'de> Deserialize<'de> for NoiseKind {
    /// From `"simulation"` or `"deployment"`; anything else is refused naming the key `noise`.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "simulation" => Ok(NoiseKind::Simulation),
            "deployment" => Ok(NoiseKind::Deployment),
            _ => Err(serde::de::Error::custom(format!(
                "noise = {s:?}: expected \"simulation\" (seeded f64 noise, reproducible) or \"deployment\" (exact discrete noise from an OS-seeded CSPRNG)"
            ))),
        }
    }
}

/// The grade of the noise behind a guarantee, written in every manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum NoiseGrade {
    /// No privacy noise (a non-private algorithm).
    #[serde(rename = "not-applicable")]
    NotApplicable,
    /// Floating-point noise from a seeded generator: fine for simulation, not for deployment.
    #[serde(rename = "simulation-grade")]
    Simulation,
    /// Exact discrete noise from an OS-seeded CSPRNG: outputs are not reproducible by design.
    #[serde(rename = "deployment-grade")]
    Deployment,
}

impl NoiseGrade {
    /// The grade of a private policy's noise of kind `kind`.
    pub fn of(kind: NoiseKind) -> Self {
        match kind {
            NoiseKind::Simulation => NoiseGrade::Simulation,
            NoiseKind::Deployment => NoiseGrade::Deployment,
        }
    }

    /// The label used in manifests (`simulation-grade`, `deployment-grade`, `not-applicable`).
    pub fn label(&self) -> &'static str {
        match self {
            NoiseGrade::NotApplicable => "not-applicable",
            NoiseGrade::Simulation => "simulation-grade",
            NoiseGrade::Deployment => "deployment-grade",
        }
    }

    /// Whether runs with this noise are reproducible from the master seed.
    pub fn reproducible(&self) -> bool {
        !matches!(self, NoiseGrade::Deployment)
    }
}

/// Check a `noise` / `grid_bits` pair of a configuration: `grid_bits` in `1..=MAX_GRID_BITS`, and
/// deployment noise only for a private configuration (`private`, i.e. a finite budget).
pub fn check_noise(kind: NoiseKind, grid_bits: u32, private: bool) -> Result<()> {
    if !(1..=MAX_GRID_BITS).contains(&grid_bits) {
        return Err(Error::param(
            "grid_bits",
            grid_bits,
            format!(
                "an integer in 1..={MAX_GRID_BITS} (rewards are rounded to multiples of 2^-grid_bits)"
            ),
        ));
    }
    if kind == NoiseKind::Deployment && !private {
        return Err(Error::param(
            "noise",
            "\"deployment\"",
            "\"simulation\" for a non-private configuration (no noise is drawn; deployment noise needs a finite budget)",
        ));
    }
    Ok(())
}

/// A configuration's label with its noise path: unchanged for simulation noise (so published
/// labels and the streams keyed by them do not move), `label[deployment]` (and the grid if it is
/// not the default) for deployment noise, so both paths of one configuration can share a file.
pub fn noise_label(label: String, kind: NoiseKind, grid_bits: u32) -> String {
    match kind {
        NoiseKind::Simulation => label,
        NoiseKind::Deployment if grid_bits == DEFAULT_GRID_BITS => format!("{label}[deployment]"),
        NoiseKind::Deployment => format!("{label}[deployment,grid_bits={grid_bits}]"),
    }
}

/// The reward grid `2^-k Z` of one release (`k` may be reduced below `grid_bits` for very long
/// releases, see [`Grid::for_release`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Grid {
    k: i32,
}

/// The coarsest grid exponent used (only reached by releases of absurd length or boundaries of
/// absurd magnitude); keeps `2^k` a normal `f64`.
const MIN_GRID_EXPONENT: i32 = -900;

impl Grid {
    /// The grid of a release of `n` rewards in `boundary`: `k = grid_bits`, lowered (one bit at a
    /// time) until `2^k n max(|lo|, |hi|) <= 2^53`, so every partial sum of grid values is an
    /// exact `f64`. `k` depends only on public quantities (`grid_bits`, `n`, the boundary).
    fn for_release(grid_bits: u32, n: u64, boundary: &RewardBoundary) -> Self {
        // m = max(|lo|, |hi|) = mant 2^e exactly; the condition 2^k n m <= 2^53 is
        // n mant <= 2^(53 - k - e), i.e. bits(n mant - 1) <= 53 - k - e (exact, in u128).
        let m = boundary.lo.abs().max(boundary.hi.abs());
        let (mant, e) = decompose(m);
        let p = u128::from(n.max(1)) * u128::from(mant);
        if p == 0 {
            return Grid {
                k: grid_bits as i32,
            };
        }
        let bits = 128 - i64::from((p - 1).leading_zeros());
        let k_max = 53 - e - bits;
        let k = k_max
            .min(i64::from(grid_bits))
            .max(i64::from(MIN_GRID_EXPONENT));
        Grid { k: k as i32 }
    }

    /// `2^k` (exact).
    fn scale(&self) -> f64 {
        2f64.powi(self.k)
    }

    /// `2^k` as an exact rational.
    fn scale_ratio(&self) -> Ratio {
        if self.k >= 0 {
            Ratio::integer(BigUint::from(1u32) << self.k as usize)
        } else {
            Ratio::new(1u32, BigUint::from(1u32) << (-self.k) as usize).expect("2^-k > 0")
        }
    }

    /// `floor(2^k x + 1/2)`, exact for `|2^k x| <= 2^53` (monotone, commutes with integer shifts).
    fn units(&self, x: f64) -> f64 {
        let v = x * self.scale();
        let f = v.floor();
        if v - f >= 0.5 { f + 1.0 } else { f }
    }

    /// `x` rounded to the nearest grid point.
    fn round(&self, x: f64) -> f64 {
        self.units(x) / self.scale()
    }
}

/// The exponent `e` with `2^e <= x < 2^(e+1)` of a finite `x > 0`.
fn decompose_exp(x: f64) -> i32 {
    let (mant, e) = decompose(x);
    (e + i64::from(63 - mant.leading_zeros())) as i32
}

/// `2^m` for `|m| <= 1000` (exact).
fn pow2(m: i32) -> f64 {
    2f64.powi(m)
}

/// `floor(x + 1/2)` (exact for `|x| <= 2^52`).
fn round_half_up(x: f64) -> f64 {
    let f = x.floor();
    if x - f >= 0.5 { f + 1.0 } else { f }
}

/// `x = mant 2^e` for a finite `x > 0` (`mant` odd, or `(0, 0)` for `x = 0`).
fn decompose(x: f64) -> (u64, i64) {
    let bits = x.to_bits();
    let exp_bits = ((bits >> 52) & 0x7ff) as i64;
    let frac = bits & ((1u64 << 52) - 1);
    let (m, e) = if exp_bits == 0 {
        (frac, -1074)
    } else {
        (frac | (1u64 << 52), exp_bits - 1075)
    };
    if m == 0 {
        return (0, 0);
    }
    let tz = m.trailing_zeros();
    (m >> tz, e + i64::from(tz))
}

thread_local! {
    /// The stream of [`with_release_key`] while its closure runs on this thread.
    static RELEASE_STREAM: std::cell::RefCell<Option<ChaCha20Rng>> =
        const { std::cell::RefCell::new(None) };
}

/// Run `f` with every deployment-grade draw made on this thread taken, in draw order, from one
/// ChaCha20 stream keyed by `key`, instead of from each source's own OS-seeded generator.
/// Simulation-grade draws are untouched (their seeded stream is in the snapshot already).
///
/// This is how a store makes a release's randomness durable **before** the release is drawn:
/// it draws a fresh 32-byte key from the operating system for each release, commits it, and
/// draws the release inside this scope. A redo of the same release after a crash (the same
/// stored state, the same rewards, the same key) draws exactly the same noise: the release is
/// drawn once, however often it is computed. The key is as secret as the noise it determines
/// (with it and the release, the exact sum is known): keep it only until the release is
/// stored, then delete it. Reusing a key for two different releases would correlate their
/// noise; the scope is for one release and its redos only.
///
/// Nested scopes: the inner key applies inside the inner closure, the outer one again after it
/// (also when the closure panics).
pub fn with_release_key<R>(key: [u8; 32], f: impl FnOnce() -> R) -> R {
    struct Restore(Option<ChaCha20Rng>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            RELEASE_STREAM.with(|s| *s.borrow_mut() = previous);
        }
    }
    let previous = RELEASE_STREAM.with(|s| s.borrow_mut().replace(ChaCha20Rng::from_seed(key)));
    let _restore = Restore(previous);
    f()
}

/// A deployment source's generator: its own OS-seeded ChaCha20, or the stream of an enclosing
/// [`with_release_key`] scope.
struct DeploymentRng(ChaCha20Rng);

impl DeploymentRng {
    fn with<R>(&mut self, f: impl FnOnce(&mut ChaCha20Rng) -> R) -> R {
        RELEASE_STREAM.with(|s| match s.borrow_mut().as_mut() {
            Some(keyed) => f(keyed),
            None => f(&mut self.0),
        })
    }
}

impl rand::TryRng for DeploymentRng {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> std::result::Result<u32, Self::Error> {
        Ok(self.with(rand::Rng::next_u32))
    }

    fn try_next_u64(&mut self) -> std::result::Result<u64, Self::Error> {
        Ok(self.with(rand::Rng::next_u64))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> std::result::Result<(), Self::Error> {
        self.with(|r| rand::Rng::fill_bytes(r, dst));
        Ok(())
    }
}

impl rand::TryCryptoRng for DeploymentRng {}

/// The OS-seeded generator and grid of the deployment path.
struct Deployment {
    rng: DeploymentRng,
    grid_bits: u32,
}

impl Deployment {
    fn new(grid_bits: u32) -> Result<Self> {
        let rng = ChaCha20Rng::try_from_rng(&mut SysRng).map_err(|e| {
            Error::Config(format!(
                "noise = \"deployment\": the operating system's entropy source failed ({e})"
            ))
        })?;
        Ok(Deployment {
            rng: DeploymentRng(rng),
            grid_bits,
        })
    }

    /// `Delta_cal = max(s 2^k n, ceil(2^k (hi - lo)))` as an exact rational.
    fn calibration_sensitivity(
        grid: Grid,
        sensitivity: f64,
        n: u64,
        boundary: &RewardBoundary,
    ) -> Result<Ratio> {
        let field = |v: f64| Error::param("sensitivity", v, "a finite number >= 0");
        let s = Ratio::from_f64(sensitivity).ok_or_else(|| field(sensitivity))?;
        let requested = s.mul(&Ratio::integer(n)).mul(&grid.scale_ratio());
        let delta = (boundary.width() * grid.scale()).ceil();
        let delta = Ratio::from_f64(delta).ok_or_else(|| field(delta))?;
        Ok(if delta.le(&requested) {
            requested
        } else {
            delta
        })
    }

    /// `(S + Y) / (2^k n)` in `f64` (post-processing of the integer release).
    fn mean(grid: Grid, s: f64, y: &Signed, n: u64) -> f64 {
        let mag = y.1.to_f64().unwrap_or(f64::INFINITY);
        let y = if y.0 { -mag } else { mag };
        (s + y) / (grid.scale() * n as f64)
    }
}

impl Deployment {
    /// The deployment release of a vector-Gaussian statistic held exactly in `acc`
    /// ([`NoiseSource::gaussian_linear`]'s docs): `sigma^2 = max(Delta_Z^2, (2^(k+m)
    /// min_sensitivity)^2) / (2 rho)` with `Delta_Z^2 = ceil(2^k (hi - lo))^2 max_b ||W_b||^2`,
    /// `Y_j ~ N_Z(0, sigma^2)` independently, released `(U + Y) / 2^(k+m)`.
    fn release_linear(
        &mut self,
        rho: f64,
        min_sensitivity: f64,
        acc: &LinearSum,
        boundary: &RewardBoundary,
    ) -> Result<(Vec<f64>, f64)> {
        let grid = Grid { k: acc.k };
        let scale = grid
            .scale_ratio()
            .mul(&Ratio::from_f64(pow2(acc.m)).expect("2^m"));
        let delta_unit = (boundary.width() * grid.scale()).ceil();
        let dz = Ratio::from_f64(delta_unit * delta_unit)
            .expect("finite")
            .mul(&Ratio::integer(BigUint::from(acc.w2max)));
        let req = Ratio::from_f64(min_sensitivity)
            .ok_or_else(|| Error::param("sensitivity", min_sensitivity, "a finite number >= 0"))?
            .mul(&scale);
        let req2 = req.mul(&req);
        let delta2 = if dz.le(&req2) { req2 } else { dz };
        let sigma2 = if rho.is_infinite() {
            Ratio::integer(0u32)
        } else {
            let two_rho = Ratio::from_f64(rho)
                .expect("rho checked finite and > 0")
                .mul(&Ratio::integer(2u32));
            delta2.div(&two_rho).expect("rho > 0")
        };
        let total = scale.to_f64();
        let mut q = Vec::with_capacity(acc.u.len());
        for &uj in &acc.u {
            let y = discrete_gaussian(&sigma2, &mut self.rng);
            let y = super::discrete::signed_to_i128(&y).ok_or_else(|| {
                Error::param("rho", rho, "a budget whose noise fits in 128-bit integers")
            })?;
            let v = uj
                .checked_add(y)
                .ok_or_else(|| Error::param("rho", rho, "a smaller noise scale"))?;
            // Not recorded to the audit tap here: the caller records the released estimate
            // (GOPE: `basis * theta`, AdaC-OFUL: each coordinate of the episode release, as on
            // their simulation paths), so each release is seen once.
            q.push(v as f64 / total);
        }
        Ok((q, sigma2.to_f64().sqrt() / total))
    }
}

/// The exact integer form `U = sum_b S_b W_b` of a vector-Gaussian statistic `sum_b S_b w_b`
/// on the deployment path ([`NoiseSource::gaussian_linear`]'s docs): `S_b` a block's reward sum
/// in units of its release grid `2^-k`, `W_b = round(2^m w_b)` its public weight vector on the
/// grid `2^-m`, and `max_b ||W_b||^2` (the integer L2 sensitivity's factor). Built by
/// [`NoiseSource::linear_sum`] (or internally by `gaussian_linear`), filled by [`Self::push`],
/// released by [`NoiseSource::gaussian_linear_sum`] and emptied by [`Self::clear`]. It holds
/// unreleased private statistics: it travels in snapshots (as decimal strings) like the float
/// statistics beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinearSum {
    /// Reward grid exponent `k` (`2^-k`), fixed by `grid_bits` and the largest block.
    k: i32,
    /// Weight grid exponent `m`: `|W| < 2^40` for `|w| <= wbound`.
    m: i32,
    /// Largest reward count of one block (the grid `k` is valid up to it).
    n_max: u64,
    /// `U`, one integer per coordinate.
    #[serde(with = "decimal_vec")]
    u: Vec<i128>,
    /// `max_b ||W_b||^2` over the blocks pushed since the last [`Self::clear`].
    #[serde(with = "decimal")]
    w2max: u128,
}

impl LinearSum {
    /// The grids of [`NoiseSource::gaussian_linear`]: `k` of a release of `n_max` rewards per
    /// block, `m = 40 - (e + 1)` with `2^e <= wbound < 2^(e+1)` (0 if `wbound = 0`).
    fn on_grid(
        grid_bits: u32,
        r: usize,
        n_max: u64,
        wbound: f64,
        boundary: &RewardBoundary,
    ) -> Self {
        let m: i32 = if wbound > 0.0 && wbound.is_finite() {
            (40 - (decompose_exp(wbound) + 1)).clamp(-1000, 1000)
        } else {
            0
        };
        LinearSum {
            k: Grid::for_release(grid_bits, n_max, boundary).k,
            m,
            n_max,
            u: vec![0; r],
            w2max: 0,
        }
    }

    /// Add the block `S w`: the reward sum `s` (at most `n_max` rewards inside `boundary`) in
    /// grid units, times `w` rounded to the weight grid, exactly.
    ///
    /// # Errors
    /// A sum outside `boundary` or of more than `n_max` rewards; `w` of another length than the
    /// statistic, non-finite, or beyond the weight grid (`|w_j| >= 2^(40 - m)`); an integer
    /// overflow (beyond `2^127`: not reachable by any run). `self` is unchanged on error.
    pub fn push(&mut self, s: &RewardSum, w: &[f64], boundary: &RewardBoundary) -> Result<()> {
        let n = s.releasable(boundary)?;
        if n > self.n_max {
            return Err(Error::param(
                "n",
                n,
                format!(
                    "at most {} rewards in one block of this statistic",
                    self.n_max
                ),
            ));
        }
        let wscale = pow2(self.m);
        if w.len() != self.u.len()
            || w.iter()
                .any(|x| !x.is_finite() || (x * wscale).abs() >= 2f64.powi(40))
        {
            return Err(Error::param(
                "weights",
                format!("{w:?}"),
                format!(
                    "{} finite numbers below {} in magnitude",
                    self.u.len(),
                    2f64.powi(40 - self.m)
                ),
            ));
        }
        let units = Grid { k: self.k }.units(s.sum()) as i128; // |units| <= 2^53: exact
        let overflow = || Error::Protocol("linear statistic beyond 2^127 grid units".into());
        let mut next = self.u.clone();
        let mut w2: u128 = 0;
        for (uj, wj) in next.iter_mut().zip(w) {
            let wi = round_half_up(wj * wscale) as i128; // exact: |.| <= 2^40
            *uj = uj
                .checked_add(units.checked_mul(wi).ok_or_else(overflow)?)
                .ok_or_else(overflow)?;
            w2 = w2
                .checked_add(wi.unsigned_abs() * wi.unsigned_abs())
                .ok_or_else(overflow)?;
        }
        self.u = next;
        self.w2max = self.w2max.max(w2);
        Ok(())
    }

    /// Add the blocks of `other` (a statistic on the same grids and of the same dimension)
    /// exactly: `U += U_other`, `max ||W||^2` the larger of the two. The tree-based vector
    /// release (`privacy/tree.rs`, [`super::VectorTree`]) merges its lower p-sums this way; the
    /// sensitivity argument is unchanged (one reward still moves one block's `S_b`).
    ///
    /// # Errors
    /// Other grids or dimension; an integer overflow. `self` is unchanged on error.
    pub fn absorb(&mut self, other: &LinearSum) -> Result<()> {
        if (self.k, self.m, self.n_max, self.u.len())
            != (other.k, other.m, other.n_max, other.u.len())
        {
            return Err(Error::Protocol(
                "linear statistics on different grids cannot be added".into(),
            ));
        }
        let overflow = || Error::Protocol("linear statistic beyond 2^127 grid units".into());
        let mut next = self.u.clone();
        for (a, b) in next.iter_mut().zip(&other.u) {
            *a = a.checked_add(*b).ok_or_else(overflow)?;
        }
        self.u = next;
        self.w2max = self.w2max.max(other.w2max);
        Ok(())
    }

    /// Empty the statistic (after its release), keeping its grids.
    pub fn clear(&mut self) {
        self.u.iter_mut().for_each(|x| *x = 0);
        self.w2max = 0;
    }

    /// The statistic's dimension `r`.
    pub fn dim(&self) -> usize {
        self.u.len()
    }
}

/// `u128` as a decimal string in snapshots (CBOR and JSON both keep it exactly).
mod decimal {
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(x: &u128, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&x.to_string())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<u128, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// `Vec<i128>` as decimal strings in snapshots.
mod decimal_vec {
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(x: &[i128], s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(x.iter().map(|v| v.to_string()))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<Vec<i128>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|v| v.parse().map_err(serde::de::Error::custom))
            .collect()
    }
}

enum Inner {
    Simulation(SimRng),
    Deployment(Box<Deployment>),
}

/// A private policy's noise: seeded `f64` noise (simulation-grade) or exact discrete noise from
/// an OS-seeded CSPRNG (deployment-grade). See the module docs.
pub struct NoiseSource {
    inner: Inner,
}

impl std::fmt::Debug for NoiseSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a generator's state.
        match &self.inner {
            Inner::Simulation(_) => write!(f, "NoiseSource::Simulation"),
            Inner::Deployment(d) => {
                write!(
                    f,
                    "NoiseSource::Deployment {{ grid_bits: {} }}",
                    d.grid_bits
                )
            }
        }
    }
}

impl Clone for NoiseSource {
    /// A simulation source clones its generator (reproducible); a deployment source draws a
    /// fresh OS seed, so two clones never share noise.
    ///
    /// # Panics
    /// If the operating system's entropy source fails while cloning a deployment source (copying
    /// the generator instead would repeat the noise).
    fn clone(&self) -> Self {
        let inner = match &self.inner {
            Inner::Simulation(r) => Inner::Simulation(r.clone()),
            Inner::Deployment(d) => Inner::Deployment(Box::new(
                Deployment::new(d.grid_bits)
                    .expect("OS entropy source failed while cloning a deployment noise source"),
            )),
        };
        NoiseSource { inner }
    }
}

impl NoiseSource {
    /// The simulation path on the policy's seeded noise stream ([`crate::rng::noise_rng`]).
    pub fn simulation(policy_seed: u64) -> Self {
        NoiseSource {
            inner: Inner::Simulation(crate::rng::noise_rng(policy_seed)),
        }
    }

    /// The deployment path: grid `2^-grid_bits`, ChaCha20 seeded from the OS.
    ///
    /// # Errors
    /// `grid_bits` outside `1..=MAX_GRID_BITS`, or the OS entropy source fails.
    pub fn deployment(grid_bits: u32) -> Result<Self> {
        check_noise(NoiseKind::Deployment, grid_bits, true)?;
        Ok(NoiseSource {
            inner: Inner::Deployment(Box::new(Deployment::new(grid_bits)?)),
        })
    }

    /// The source a configuration asks for: the seed keys the simulation path only.
    pub fn new(kind: NoiseKind, grid_bits: u32, policy_seed: u64) -> Result<Self> {
        match kind {
            NoiseKind::Simulation => Ok(NoiseSource::simulation(policy_seed)),
            NoiseKind::Deployment => NoiseSource::deployment(grid_bits),
        }
    }

    /// The configured grid `2^-grid_bits` of the deployment path (the default for simulation).
    pub fn grid_bits(&self) -> u32 {
        match &self.inner {
            Inner::Simulation(_) => DEFAULT_GRID_BITS,
            Inner::Deployment(d) => d.grid_bits,
        }
    }

    /// The seeded generator of the simulation path (`None` on the deployment path), for a
    /// policy whose simulation path draws from it directly (hot loops that keep their float
    /// mechanisms and streams unchanged).
    pub(crate) fn simulation_rng(&mut self) -> Option<&mut SimRng> {
        match &mut self.inner {
            Inner::Simulation(rng) => Some(rng),
            Inner::Deployment(_) => None,
        }
    }

    /// Deployment path: `u_j + Y_j` with `Y_j ~ N_Z(0, sigma2_j)` drawn independently (CKS20
    /// Alg. 3, exact rationals, no square root taken) from the OS-keyed generator; for a caller
    /// that keeps its statistic as exact integers with its own sensitivity argument (the Gram
    /// tree, `privacy/gram.rs`). Not recorded to the audit tap (the caller records what it
    /// releases).
    ///
    /// # Errors
    /// On the simulation path; `u` and `sigma2` of different lengths; noise or sum beyond `i128`.
    pub(crate) fn discrete_gaussian_add(
        &mut self,
        u: &[i128],
        sigma2: &[Ratio],
    ) -> Result<Vec<i128>> {
        let Inner::Deployment(d) = &mut self.inner else {
            return Err(Error::Config(
                "exact integer noise is drawn on the deployment path only".into(),
            ));
        };
        if u.len() != sigma2.len() {
            return Err(Error::Protocol(
                "one noise variance per integer coordinate".into(),
            ));
        }
        u.iter()
            .zip(sigma2)
            .map(|(&uj, s2)| {
                let y = discrete_gaussian(s2, &mut d.rng);
                super::discrete::signed_to_i128(&y)
                    .and_then(|y| uj.checked_add(y))
                    .ok_or_else(|| Error::Protocol("noisy integer beyond 2^127".into()))
            })
            .collect()
    }

    /// The grade of this source's noise.
    pub fn grade(&self) -> NoiseGrade {
        match self.inner {
            Inner::Simulation(_) => NoiseGrade::Simulation,
            Inner::Deployment(_) => NoiseGrade::Deployment,
        }
    }

    /// Prepare one clipped reward (or a clipped sum of rewards) for a release of `n` rewards in
    /// `boundary` (`n` = the committed episode length): unchanged on the simulation path, rounded
    /// to the nearest point of the release's grid on the deployment path.
    #[inline]
    pub fn discretise(&self, clipped: f64, n: u64, boundary: &RewardBoundary) -> f64 {
        match &self.inner {
            Inner::Simulation(_) => clipped,
            Inner::Deployment(d) => Grid::for_release(d.grid_bits, n, boundary).round(clipped),
        }
    }

    /// Release the mean of `n` rewards whose clipped sum is `sum`, with Gaussian noise calibrated
    /// for `rho`-zCDP at mean-level sensitivity `sensitivity`.
    ///
    /// Simulation: exactly `GaussianMechanism::for_zcdp(sensitivity, rho)?.release_mean(..)`.
    /// Deployment: the discrete Gaussian on the integer sum (module docs), the same `rho`.
    ///
    /// # Errors
    /// Bad `sensitivity` / `rho` (as [`GaussianMechanism::for_zcdp`]); `n = 0` on the deployment
    /// path.
    pub fn gaussian_mean(
        &mut self,
        sensitivity: f64,
        rho: f64,
        sum: &RewardSum,
        boundary: &RewardBoundary,
    ) -> Result<NoisyMean> {
        match &mut self.inner {
            Inner::Simulation(rng) => {
                GaussianMechanism::for_zcdp(sensitivity, rho)?.release_mean(sum, boundary, rng)
            }
            Inner::Deployment(d) => {
                GaussianMechanism::for_zcdp(sensitivity, rho)?; // same parameter checks
                let n = sum.releasable(boundary)?;
                let grid = Grid::for_release(d.grid_bits, n, boundary);
                let s = grid.units(sum.sum());
                let sigma2 = if rho.is_infinite() {
                    Ratio::integer(0u32)
                } else {
                    let delta =
                        Deployment::calibration_sensitivity(grid, sensitivity, n, boundary)?;
                    let two_rho = Ratio::from_f64(rho)
                        .expect("rho checked finite and > 0")
                        .mul(&Ratio::integer(2u32));
                    delta.mul(&delta).div(&two_rho).expect("rho > 0")
                };
                let y = discrete_gaussian(&sigma2, &mut d.rng);
                let sigma = sigma2.to_f64().sqrt() / (grid.scale() * n as f64);
                let value = Deployment::mean(grid, s, &y, n);
                super::tap::record(super::tap::Family::Gaussian, value);
                Ok(NoisyMean::released(value, n, sigma))
            }
        }
    }

    /// Release the *sum* of the rewards of `sum` (not their mean) with Laplace noise calibrated
    /// for `epsilon`-DP at sum-level L1 sensitivity `sensitivity` (1 for rewards in [0, 1], one
    /// reward changed). Returns the released sum and the noise scale at the sum level.
    ///
    /// Simulation: exactly `LaplaceMechanism::for_pure_dp(sensitivity, epsilon)?.release(sum)`,
    /// one `f64` draw from the seeded stream (the DP-TT cumulative increments, the Lazy-DP-TS batch
    /// sums). Deployment: `S = sum of the rounded rewards` in grid units (the caller rounded each
    /// reward or batch with [`NoiseSource::discretise`] for a release of `sum.n()` rewards), the
    /// discrete Laplace `Y ~ Lap_Z(t)` with `t = Delta_cal / epsilon` exactly, `Delta_cal =
    /// max(sensitivity 2^k, ceil(2^k (hi - lo)))`, released `(S + Y) / 2^k`: the geometric
    /// mechanism is `Delta_cal / t = epsilon`-DP exactly (the budget is unchanged).
    ///
    /// # Errors
    /// Bad `sensitivity` / `epsilon` (as [`LaplaceMechanism::for_pure_dp`]); a sum of no rewards
    /// or outside `boundary` on the deployment path.
    pub fn laplace_sum(
        &mut self,
        sensitivity: f64,
        epsilon: f64,
        sum: &RewardSum,
        boundary: &RewardBoundary,
    ) -> Result<(f64, f64)> {
        match &mut self.inner {
            Inner::Simulation(rng) => {
                let mech = LaplaceMechanism::for_pure_dp(sensitivity, epsilon)?;
                Ok((mech.release(sum.sum(), rng), mech.scale()))
            }
            Inner::Deployment(d) => {
                LaplaceMechanism::for_pure_dp(sensitivity, epsilon)?; // same parameter checks
                let n = sum.releasable(boundary)?;
                let grid = Grid::for_release(d.grid_bits, n, boundary);
                let s = grid.units(sum.sum());
                let scale = if epsilon.is_infinite() {
                    Ratio::integer(0u32)
                } else {
                    let delta =
                        Deployment::calibration_sensitivity(grid, sensitivity, 1, boundary)?;
                    let eps = Ratio::from_f64(epsilon).expect("epsilon checked finite and > 0");
                    delta.div(&eps).expect("epsilon > 0")
                };
                let y = discrete_laplace(&scale, &mut d.rng);
                let b = scale.to_f64() / grid.scale();
                let value = Deployment::mean(grid, s, &y, 1);
                super::tap::record(super::tap::Family::Laplace, value);
                Ok((value, b))
            }
        }
    }

    /// Draw one bit that is 1 with probability exactly `e^eps / (1 + e^eps)` for the exact
    /// rational value of `eps >= 0` (the "keep" coin of randomized response with
    /// `p00 = p11 = e^eps/(1+e^eps)`, Warner 1965; Gajane 2023 Cor. 2).
    ///
    /// Deployment: the two-coin Bernoulli factory for `1/(1+q)` with `q = e^-eps` (Goncalves,
    /// Latuszynski & Roberts 2017; a special case of the logistic factory): repeat { a fair coin;
    /// heads -> 1; tails -> a Bernoulli(e^-eps) coin of CKS20 Algorithm 1 (exact for rational eps),
    /// 1 -> 0 }. `P[1] = 1/2 + (1/2)(1 - q) P[1]`, so `P[1] = 1/(1+q) = e^eps/(1+e^eps)` exactly;
    /// at most 2 rounds in expectation. No floating-point number is involved, so the randomizer's
    /// likelihood ratio is `e^eps` exactly: the budget is unchanged.
    ///
    /// Simulation: `u < e^eps/(1+e^eps)` for one seeded uniform `u` (the float path of
    /// [`super::RandomizedResponse::respond`]).
    ///
    /// # Errors
    /// `eps` negative or NaN (`eps = inf` always keeps).
    pub fn keep_coin(&mut self, eps: f64) -> Result<bool> {
        if eps.is_nan() || eps < 0.0 {
            return Err(Error::param("epsilon", eps, "a number >= 0"));
        }
        if eps.is_infinite() {
            return Ok(true);
        }
        match &mut self.inner {
            Inner::Simulation(rng) => {
                use rand::RngExt as _;
                let keep = eps.exp() / (1.0 + eps.exp());
                let u: f64 = rng.random();
                Ok(u < keep)
            }
            Inner::Deployment(d) => {
                let q = Ratio::from_f64(eps).expect("eps checked finite and >= 0");
                Ok(super::discrete::bernoulli_logistic(&q, &mut d.rng))
            }
        }
    }

    /// Draw one bit that is 1 with probability exactly `p` for the exact rational value of the
    /// `f64` `p` in [0, 1] (a dyadic rational `m / 2^e`): deployment draws a uniform integer
    /// below `2^e` from the CSPRNG and compares it with `m` (exact); simulation compares one
    /// seeded uniform with `p`. For randomized response with general `(p00, p11)` the stated
    /// epsilon is computed from these exact values (see `docs/privacy.md`).
    ///
    /// # Errors
    /// `p` outside [0, 1] or NaN.
    pub fn bernoulli(&mut self, p: f64) -> Result<bool> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::param("p", p, "a probability in [0, 1]"));
        }
        match &mut self.inner {
            Inner::Simulation(rng) => {
                use rand::RngExt as _;
                let u: f64 = rng.random();
                Ok(u < p)
            }
            Inner::Deployment(d) => {
                let r = Ratio::from_f64(p).expect("p checked in [0, 1]");
                Ok(super::discrete::bernoulli_ratio(&r, &mut d.rng))
            }
        }
    }

    /// The Bernoulli response of one reward `r` in [0, 1] (Ren et al. 2020's CTB; the Bernoulli
    /// trick followed by optimal randomized response, Gajane 2023 Cor. 2): a bit `b` that is 1
    /// with probability `r` ([`Self::bernoulli`], exact for the dyadic value of the `f64` `r`),
    /// kept with probability `e^eps/(1+e^eps)` and flipped otherwise ([`Self::keep_coin`], exact
    /// for the rational value of `eps`). So `P[1 | r] = (1 + (e^eps - 1) r) / (e^eps + 1)` exactly
    /// on the deployment path: affine in `r`, its likelihood ratio over any two rewards is at most
    /// its value at `r in {0, 1}`, which is `e^eps` exactly (the budget is unchanged; no grid).
    /// On the simulation path the same two coins come from seeded uniforms (reproducible;
    /// existing kinds keep their own, older float coins).
    ///
    /// # Errors
    /// `r` outside [0, 1] or NaN; `eps` negative or NaN.
    pub fn local_bit(&mut self, eps: f64, r: f64) -> Result<bool> {
        let bit = self.bernoulli(r)?;
        let keep = self.keep_coin(eps)?;
        let out = if keep { bit } else { !bit };
        super::tap::record(super::tap::Family::Bit, f64::from(u8::from(out)));
        Ok(out)
    }

    /// Release the vector `q = sum_b S_b w_b` in `R^r` (the vector Gaussian family: `S_b` the
    /// reward sum of block `b`, `w_b` a public weight vector, e.g. `V^{-1/2} a_b`) with Gaussian
    /// noise for `rho`-zCDP, calibrated for at least the L2 sensitivity `min_sensitivity` (the
    /// caller's calibration at the scale of `q`) and at least the true sensitivity of the
    /// released integers. Returns the released vector and the per-coordinate noise scale at the
    /// scale of `q`.
    ///
    /// Simulation: `q` in floating point plus `N(0, sigma^2 I_r)`, `sigma` of
    /// [`GaussianMechanism::for_zcdp`] at `max(min_sensitivity, width max_b ||w_b||)`.
    ///
    /// Deployment (exact; `docs/privacy.md`, "Vector Gaussian family"): each block sum (already
    /// on its release's grid, see [`Self::discretise`]) as an integer `S_b = round(2^k S)`, each
    /// weight vector on its own public grid, `W_b = round(2^m w_b)` (integers below `2^40`, `m`
    /// from `max |w|`), the integer vector `U = sum_b S_b W_b` (exact). One reward changed moves one
    /// `S_b` by at most `D = ceil(2^k (hi - lo))`, so `U` by at most `Delta_Z = D max_b ||W_b||_2`
    /// in L2, exactly. Noise `Y_j ~ N_Z(0, sigma^2)` independently per coordinate with
    /// `sigma^2 = max(Delta_Z^2, (2^(k+m) min_sensitivity)^2) / (2 rho)`, an exact rational (no
    /// square root is taken); released `(U + Y) / 2^(k+m)`. Renyi divergences of product laws add,
    /// and each coordinate's is at most `alpha (mu_j - nu_j)^2 / (2 sigma^2)` (CKS20), so the
    /// release is `Delta_Z^2 / (2 sigma^2) <= rho`-zCDP: the budget is unchanged. The rounding of
    /// the weights only moves the estimator (relative `2^-40`), never the sensitivity argument,
    /// which is about the released integers themselves.
    ///
    /// # Errors
    /// Bad `rho` / `min_sensitivity`; a block outside `boundary`; weight vectors of different
    /// lengths or non-finite weights; noise beyond the range of `i128` (absurd budgets).
    pub fn gaussian_linear(
        &mut self,
        rho: f64,
        min_sensitivity: f64,
        blocks: &[(RewardSum, Vec<f64>)],
        boundary: &RewardBoundary,
    ) -> Result<(Vec<f64>, f64)> {
        let r = blocks.first().map_or(0, |(_, w)| w.len());
        if let Some(i) = blocks
            .iter()
            .position(|(_, w)| w.len() != r || w.iter().any(|x| !x.is_finite()))
        {
            return Err(Error::param(
                format!("weights[{i}]"),
                format!("{:?}", blocks[i].1),
                format!("{r} finite numbers like weights[0]"),
            ));
        }
        let wmax = blocks
            .iter()
            .flat_map(|(_, w)| w.iter())
            .fold(0.0f64, |m, x| m.max(x.abs()));
        match &mut self.inner {
            Inner::Simulation(rng) => {
                let true_s = boundary.width()
                    * blocks
                        .iter()
                        .map(|(_, w)| w.iter().map(|x| x * x).sum::<f64>().sqrt())
                        .fold(0.0, f64::max);
                let mech = GaussianMechanism::for_zcdp(min_sensitivity.max(true_s), rho)?;
                let mut q = vec![0.0; r];
                for (s, w) in blocks {
                    for (qj, wj) in q.iter_mut().zip(w) {
                        *qj += s.sum() * wj;
                    }
                }
                for qj in &mut q {
                    let z: f64 = rand_distr::StandardNormal.sample(rng);
                    *qj += mech.sigma() * z;
                }
                Ok((q, mech.sigma()))
            }
            Inner::Deployment(d) => {
                GaussianMechanism::for_zcdp(min_sensitivity.max(1.0), rho)?; // parameter checks
                let n_max = blocks
                    .iter()
                    .map(|(s, _)| s.releasable(boundary))
                    .collect::<Result<Vec<_>>>()?
                    .into_iter()
                    .max()
                    .unwrap_or(1);
                let mut acc = LinearSum::on_grid(d.grid_bits, r, n_max, wmax, boundary);
                for (s, w) in blocks {
                    acc.push(s, w, boundary)?;
                }
                d.release_linear(rho, min_sensitivity, &acc, boundary)
            }
        }
    }

    /// An empty exact accumulator ([`LinearSum`]) of a vector-Gaussian statistic
    /// `sum_b S_b w_b` in `R^r` for the deployment path, to be filled block by block as the
    /// rewards arrive ([`LinearSum::push`]) and released with [`Self::gaussian_linear_sum`]:
    /// for a statistic whose blocks are too many to keep (AdaC-OFUL's episode sum
    /// `sum_s r_s a_s` has one block per round). `n_max` is the largest reward count of one block
    /// and `wbound` a public bound on `|w_j|` (both fix the grids, as [`Self::gaussian_linear`]
    /// derives them from its blocks). `None` on the simulation path.
    pub fn linear_sum(
        &self,
        r: usize,
        n_max: u64,
        wbound: f64,
        boundary: &RewardBoundary,
    ) -> Option<LinearSum> {
        match &self.inner {
            Inner::Simulation(_) => None,
            Inner::Deployment(d) => {
                Some(LinearSum::on_grid(d.grid_bits, r, n_max, wbound, boundary))
            }
        }
    }

    /// Release the statistic accumulated in `acc` (deployment path): exactly the release of
    /// [`Self::gaussian_linear`] on the same blocks (the same integers, sensitivity, `sigma^2`
    /// and law). Returns the released vector and the per-coordinate noise scale at the scale of
    /// the statistic. Not recorded to the audit tap (the caller records what it releases).
    ///
    /// # Errors
    /// On the simulation path (its callers keep their float mechanism); bad `rho` /
    /// `min_sensitivity`; noise beyond the range of `i128`.
    pub fn gaussian_linear_sum(
        &mut self,
        rho: f64,
        min_sensitivity: f64,
        acc: &LinearSum,
        boundary: &RewardBoundary,
    ) -> Result<(Vec<f64>, f64)> {
        match &mut self.inner {
            Inner::Simulation(_) => Err(Error::Config(
                "an exact linear accumulator is released on the deployment path only".into(),
            )),
            Inner::Deployment(d) => {
                GaussianMechanism::for_zcdp(min_sensitivity.max(1.0), rho)?; // parameter checks
                d.release_linear(rho, min_sensitivity, acc, boundary)
            }
        }
    }

    /// Release the mean of `n` rewards whose clipped sum is `sum`, with Laplace noise calibrated
    /// for `epsilon`-DP at mean-level sensitivity `sensitivity`. Returns the released value and
    /// the noise scale at the mean level (`b` of the Laplace, or `t / (2^k n)` of the discrete
    /// Laplace).
    ///
    /// Simulation: exactly `LaplaceMechanism::for_pure_dp(sensitivity, epsilon)?.release(sum / n)`.
    /// Deployment: the discrete Laplace on the integer sum (module docs), the same `epsilon`.
    ///
    /// # Errors
    /// Bad `sensitivity` / `epsilon` (as [`LaplaceMechanism::for_pure_dp`]); `n = 0` on the
    /// deployment path.
    pub fn laplace_mean(
        &mut self,
        sensitivity: f64,
        epsilon: f64,
        sum: &RewardSum,
        boundary: &RewardBoundary,
    ) -> Result<(f64, f64)> {
        match &mut self.inner {
            Inner::Simulation(rng) => {
                let mech = LaplaceMechanism::for_pure_dp(sensitivity, epsilon)?;
                Ok((mech.release_mean(sum, boundary, rng)?, mech.scale()))
            }
            Inner::Deployment(d) => {
                LaplaceMechanism::for_pure_dp(sensitivity, epsilon)?; // same parameter checks
                let n = sum.releasable(boundary)?;
                let grid = Grid::for_release(d.grid_bits, n, boundary);
                let s = grid.units(sum.sum());
                let scale = if epsilon.is_infinite() {
                    Ratio::integer(0u32)
                } else {
                    let delta =
                        Deployment::calibration_sensitivity(grid, sensitivity, n, boundary)?;
                    let eps = Ratio::from_f64(epsilon).expect("epsilon checked finite and > 0");
                    delta.div(&eps).expect("epsilon > 0")
                };
                let y = discrete_laplace(&scale, &mut d.rng);
                let b = scale.to_f64() / (grid.scale() * n as f64);
                let value = Deployment::mean(grid, s, &y, n);
                super::tap::record(super::tap::Family::Laplace, value);
                Ok((value, b))
            }
        }
    }
}

/// Snapshots ([`crate::snapshot`]) hold the simulation generator's exact state (byte-exact
/// restores). A deployment source is written as a **marker** without any generator state,
/// `{"deployment": {"grid_bits": k}}`, and restores with a **fresh** ChaCha20 key from the
/// operating system: its key never leaves the process.
///
/// # Why a fresh key is sound
/// Every policy with a deployment path (every private kind; e.g. AdaC-UCB, AdaP-UCB/KLUCB,
/// the GOPE kinds, AdaC-OFUL) draws noise only when an
/// episode ends, and caches the released statistic in its state (`released`), which the snapshot
/// holds: nothing already released is ever drawn again after a restore, with this key or another.
/// The noise of a release not yet made is independent of everything before it whatever the key,
/// so the restored policy's future releases have exactly the distribution of the uninterrupted
/// policy's. What a restore cannot know is whether a release was drawn after the snapshot was
/// taken and then lost (a crash before the new state was stored): if that release is redone, the
/// same rewards are released twice with independent noise. Whoever stores snapshots must
/// therefore charge a redone release again (the decision service's ledger does: it writes a
/// release intent before drawing and charges every intent that was not completed, see
/// `docs/service.md`), or publish nothing derived from a release before its snapshot is stored.
impl Serialize for NoiseSource {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match &self.inner {
            Inner::Simulation(rng) => rng.serialize(s),
            Inner::Deployment(d) => NoiseRepr::Deployment {
                deployment: DeploymentMarker {
                    grid_bits: d.grid_bits,
                },
            }
            .serialize(s),
        }
    }
}

/// The marker a deployment source snapshots as (no generator state).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeploymentMarker {
    grid_bits: u32,
}

/// The two snapshot forms: the marker (tried first: it has a key no generator state has) or the
/// simulation generator's state.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum NoiseRepr {
    Deployment { deployment: DeploymentMarker },
    Simulation(SimRng),
}

impl<'de> Deserialize<'de> for NoiseSource {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        match NoiseRepr::deserialize(d)? {
            NoiseRepr::Simulation(rng) => Ok(NoiseSource {
                inner: Inner::Simulation(rng),
            }),
            NoiseRepr::Deployment { deployment } => {
                NoiseSource::deployment(deployment.grid_bits).map_err(serde::de::Error::custom)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy::BoundaryMode;
    use crate::privacy::discrete::tests::check_pmf;

    fn unit() -> RewardBoundary {
        RewardBoundary::unit(BoundaryMode::Clip)
    }

    /// 20 zCDP releases (rho = 1) of one reward 0.5 in [0, 1] from `s`.
    fn draw(s: &mut NoiseSource) -> Vec<f64> {
        let b = unit();
        (0..20)
            .map(|_| {
                s.gaussian_mean(1.0, 1.0, &b.drawn_sum(0.5, 1), &b)
                    .unwrap()
                    .value()
            })
            .collect()
    }

    #[test]
    fn simulation_path_is_the_old_mechanism() {
        let b = unit();
        let mut src = NoiseSource::simulation(42);
        let mut rng = crate::rng::noise_rng(42);
        for n in [1u64, 4, 1000] {
            let m = src
                .gaussian_mean(1.0 / n as f64, 0.3, &b.drawn_sum(0.4 * n as f64, n), &b)
                .unwrap();
            let want = GaussianMechanism::for_zcdp(1.0 / n as f64, 0.3)
                .unwrap()
                .release_mean(&b.drawn_sum(0.4 * n as f64, n), &b, &mut rng)
                .unwrap();
            assert_eq!(m, want);
            let (v, scale) = src
                .laplace_mean(1.0 / n as f64, 0.7, &b.drawn_sum(0.4 * n as f64, n), &b)
                .unwrap();
            let mech = LaplaceMechanism::for_pure_dp(1.0 / n as f64, 0.7).unwrap();
            assert_eq!(v, mech.release(0.4, &mut rng));
            assert_eq!(scale, mech.scale());
        }
        assert_eq!(src.grade(), NoiseGrade::Simulation);
        assert_eq!(src.discretise(0.123_456_789, 4, &b), 0.123_456_789);
    }

    #[test]
    fn grid_rounding() {
        let b = unit();
        let g = Grid { k: 2 };
        assert_eq!(g.round(0.1), 0.0);
        assert_eq!(g.round(0.125), 0.25); // half rounds up
        assert_eq!(g.round(0.3), 0.25);
        assert_eq!(g.round(1.0), 1.0);
        assert_eq!(g.units(-0.125), 0.0);
        assert_eq!(g.units(0.875 + 3.0), 16.0);
        let src = NoiseSource::deployment(20).unwrap();
        assert_eq!(src.grade(), NoiseGrade::Deployment);
        assert_eq!(src.discretise(1.0, 1, &b), 1.0);
        assert_eq!(src.discretise(0.0, 1, &b), 0.0);
        let x = src.discretise(1.0 / 3.0, 1000, &b);
        assert!((x - 1.0 / 3.0).abs() <= 0.5 / (1u64 << 20) as f64);
        assert_eq!(x * (1u64 << 20) as f64, (x * (1u64 << 20) as f64).round());
        // The grid of a release is coarsened only when 2^k n max(|lo|, |hi|) would exceed 2^53.
        assert_eq!(Grid::for_release(20, 1 << 33, &b), Grid { k: 20 });
        assert_eq!(Grid::for_release(20, (1 << 33) + 1, &b), Grid { k: 19 });
        assert_eq!(Grid::for_release(20, 1 << 40, &b), Grid { k: 13 });
        assert_eq!(Grid::for_release(32, 1, &b), Grid { k: 32 });
        assert_eq!(Grid::for_release(20, u64::MAX, &b), Grid { k: -11 });
        let x = src.discretise(1.0 / 3.0, 1 << 40, &b);
        assert_eq!(x * 8192.0, (x * 8192.0).round());
        let wide = RewardBoundary::new(-4.0, 2.0, BoundaryMode::Clip).unwrap();
        assert_eq!(Grid::for_release(20, 1 << 31, &wide), Grid { k: 20 });
        assert_eq!(Grid::for_release(20, 1 << 32, &wide), Grid { k: 19 });
    }

    /// Released deployment means are exact grid fractions `(S + Y) / (2^k n)` whose noise `Y`
    /// follows the calibrated discrete Gaussian (chi-square and KS at alpha = 1e-6, on the OS
    /// generator: the seed is not fixed, so this check fails with probability <= 2e-6 per run).
    #[test]
    fn deployment_gaussian_release_is_calibrated() {
        let b = unit();
        let bits = 4; // coarse grid: Delta = 16, small integers
        let mut src = NoiseSource::deployment(bits).unwrap();
        let (n, rho) = (2u64, 2.0);
        // Delta_cal = max(s 2^k n, 2^k) with s = 1/n: 16; sigma^2 = 256 / 4 = 64.
        let sum = 1.0; // 16 grid units
        let draws: Vec<i128> = (0..40_000)
            .map(|_| {
                let m = src
                    .gaussian_mean(1.0 / n as f64, rho, &b.drawn_sum(sum, n), &b)
                    .unwrap();
                assert_eq!(m.sigma(), 8.0 / 32.0);
                let y = m.value() * 32.0 - 16.0;
                assert_eq!(y, y.round());
                y as i128
            })
            .collect();
        check_pmf(
            &draws,
            |y| (-((y * y) as f64) / 128.0).exp(),
            100,
            "deployment N_Z(0, 64)",
        );
        // The literal count n_a = 0.5 < L = 1 asks for more noise: Delta_cal = 2 * 16.
        let m = src
            .gaussian_mean(2.0, 0.5, &b.drawn_sum(1.0, 1), &b)
            .unwrap();
        assert_eq!(m.sigma(), 32.0 / 16.0);
        // rho = inf: no noise, the exact grid mean.
        let m = src
            .gaussian_mean(1.0, f64::INFINITY, &b.drawn_sum(1.0, 2), &b)
            .unwrap();
        assert_eq!(m.value(), 0.5);
    }

    #[test]
    fn deployment_laplace_release_is_calibrated() {
        let b = unit();
        let mut src = NoiseSource::deployment(3).unwrap();
        // n = 1, s = 1, eps = 0.5: Delta = 8, t = 16.
        let draws: Vec<i128> = (0..40_000)
            .map(|_| {
                let (v, scale) = src
                    .laplace_mean(1.0, 0.5, &b.drawn_sum(0.25, 1), &b)
                    .unwrap();
                assert_eq!(scale, 2.0);
                let y = v * 8.0 - 2.0;
                assert_eq!(y, y.round());
                y as i128
            })
            .collect();
        check_pmf(
            &draws,
            |y| (-(y.abs() as f64) / 16.0).exp(),
            700,
            "deployment Lap_Z(16)",
        );
    }

    /// `laplace_sum` (the DP-TT / Lazy-DP-TS increments): released sums are grid fractions
    /// `(S + Y) / 2^k` whose integer noise follows `Lap_Z(2^k / epsilon)` (chi-square + KS at
    /// alpha = 1e-6 on the OS generator: not seedable, false-failure rate <= 2e-6 per run); the
    /// simulation path is the old `LaplaceMechanism::release` of the sum, draw for draw.
    #[test]
    fn deployment_laplace_sum_is_calibrated() {
        let b = unit();
        let mut src = NoiseSource::deployment(3).unwrap();
        // 5 rewards summing to 2.25 (18 units), sensitivity 1 -> Delta = 8, eps = 0.5 -> t = 16.
        let draws: Vec<i128> = (0..40_000)
            .map(|_| {
                let (v, scale) = src
                    .laplace_sum(1.0, 0.5, &b.drawn_sum(2.25, 5), &b)
                    .unwrap();
                assert_eq!(scale, 2.0);
                let y = v * 8.0 - 18.0;
                assert_eq!(y, y.round());
                y as i128
            })
            .collect();
        check_pmf(
            &draws,
            |y| (-(y.abs() as f64) / 16.0).exp(),
            700,
            "deployment laplace_sum Lap_Z(16)",
        );
        // Power: the same draws are rejected as Lap_Z(14.4) (scale 10% too small).
        let r = std::panic::catch_unwind(|| {
            check_pmf(&draws, |y| (-(y.abs() as f64) / 14.4).exp(), 700, "x")
        });
        assert!(r.is_err(), "Lap_Z(16) passed as Lap_Z(14.4)");
        let mut sim = NoiseSource::simulation(9);
        let mut rng = crate::rng::noise_rng(9);
        let mech = LaplaceMechanism::for_pure_dp(1.0, 0.7).unwrap();
        for _ in 0..5 {
            let (v, _) = sim.laplace_sum(1.0, 0.7, &b.drawn_sum(3.5, 7), &b).unwrap();
            assert_eq!(v, mech.release(3.5, &mut rng));
        }
    }

    /// Mean and variance of standardized draws against N(0, 1): |mean| and |s^2 - 1| within
    /// 5.33 standard errors (two-sided normal tail 1e-7 each; the sample variance of n >= 6000
    /// normal draws is normal to well within that).
    fn standard_normal_moments(z: &[f64]) -> std::result::Result<(), String> {
        let n = z.len() as f64;
        let mean = z.iter().sum::<f64>() / n;
        let var = z.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
        if mean.abs() > 5.33 / n.sqrt() {
            return Err(format!("mean {mean}"));
        }
        if (var - 1.0).abs() > 5.33 * (2.0 / n).sqrt() {
            return Err(format!("variance {var}"));
        }
        Ok(())
    }

    /// The vector Gaussian release: with blocks of known sums and weights, the noise recovered
    /// from 10k OS-seeded releases of a 2-vector, divided by the returned sigma, has mean 0 and
    /// variance 1 (the discrete Gaussian at sigma ~ 2^40 grid units; moments within 5.33 s.e.:
    /// false-failure rate <= 4e-7 per run); the same draws fail as releases of a sigma^2 10% too
    /// small (power). The returned sigma is the calibration's: the requested sensitivity at least,
    /// the integer one when larger. Simulation: the same law with f64 noise, seeded.
    #[test]
    fn deployment_gaussian_linear_is_calibrated() {
        let b = RewardBoundary::new(-1.0, 1.0, super::super::BoundaryMode::Clip).unwrap();
        let blocks = vec![
            (b.drawn_sum(2.25, 5), vec![1.0, 0.5]),
            (b.drawn_sum(-1.0, 2), vec![0.25, -1.0]),
        ];
        let truth = [2.25 - 0.25, 1.125 + 1.0];
        // True L2 sensitivity: width 2 times max ||w_b|| = sqrt(1.25); requested 3 > that.
        for (req, want) in [(3.0, 3.0), (0.1, 2.0 * 1.25f64.sqrt())] {
            let mut src = NoiseSource::deployment(3).unwrap();
            let rho = 0.5;
            let mut z = vec![];
            let mut sigma0 = 0.0;
            for _ in 0..10_000 {
                let (q, sigma) = src.gaussian_linear(rho, req, &blocks, &b).unwrap();
                sigma0 = sigma;
                for (qj, tj) in q.iter().zip(truth) {
                    z.push((qj - tj) / sigma);
                }
            }
            // sigma = Delta / sqrt(2 rho) = Delta at rho = 1/2 (weights rounded to 2^-39: exact here).
            assert!((sigma0 / want - 1.0).abs() < 1e-9, "{sigma0} vs {want}");
            standard_normal_moments(&z).unwrap();
            let wrong: Vec<f64> = z.iter().map(|x| x / 0.9f64.sqrt()).collect();
            assert!(standard_normal_moments(&wrong).is_err(), "power");
        }
        let mut sim = NoiseSource::simulation(5);
        let z: Vec<f64> = (0..5000)
            .flat_map(|_| {
                let (q, s) = sim.gaussian_linear(0.5, 3.0, &blocks, &b).unwrap();
                assert_eq!(s, GaussianMechanism::for_zcdp(3.0, 0.5).unwrap().sigma());
                vec![(q[0] - truth[0]) / s, (q[1] - truth[1]) / s]
            })
            .collect();
        standard_normal_moments(&z).unwrap();
        let bad = vec![
            (b.drawn_sum(0.0, 1), vec![1.0]),
            (b.drawn_sum(0.0, 1), vec![]),
        ];
        assert!(sim.gaussian_linear(0.5, 1.0, &bad, &b).is_err());
    }

    /// The keep coin of randomized response: deployment draws are 1 with probability
    /// e^eps/(1+e^eps) (two-sided 1 - 1e-6 Wilson interval of 400k OS-seeded draws: not
    /// seedable, false-failure rate <= 1e-6 per eps and run) and exclude an eps 10% too large.
    #[test]
    fn deployment_keep_coin_is_exact() {
        use crate::privacy::discrete::tests::wilson;
        let mut src = NoiseSource::deployment(20).unwrap();
        let n = 400_000u64;
        for eps in [0.5, 1.0, 2.0] {
            let k = (0..n).filter(|_| src.keep_coin(eps).unwrap()).count() as u64;
            let (lo, hi) = wilson(k, n, 4.891_638_475_699);
            let want = 1.0 / (1.0 + (-eps).exp());
            assert!(lo <= want && want <= hi, "eps {eps}: {k}/{n}");
            let wrong = 1.0 / (1.0 + (-1.1 * eps).exp());
            assert!(!(lo <= wrong && wrong <= hi), "eps {eps}: power");
        }
        assert!(src.keep_coin(f64::INFINITY).unwrap());
        assert!(src.keep_coin(-1.0).is_err());
        assert!(src.bernoulli(1.5).is_err());
        assert!(src.bernoulli(1.0).unwrap());
        assert!(!src.bernoulli(0.0).unwrap());
    }

    /// The calibration never asks for less than the true sensitivity of the integer sum, even if
    /// the caller's mean-level sensitivity is too small.
    #[test]
    fn calibration_uses_at_least_the_true_sensitivity() {
        let b = unit();
        let mut src = NoiseSource::deployment(10).unwrap();
        let (_, scale) = src
            .laplace_mean(1e-9, 1.0, &b.drawn_sum(3.0, 4), &b)
            .unwrap();
        // t = 2^10 / 1, mean level 2^10 / (2^10 * 4)
        assert_eq!(scale, 0.25);
    }

    #[test]
    fn bad_input_is_an_error() {
        let b = unit();
        let mut src = NoiseSource::deployment(20).unwrap();
        assert!(
            src.gaussian_mean(1.0, 0.0, &b.drawn_sum(0.0, 1), &b)
                .is_err()
        );
        assert!(
            src.gaussian_mean(f64::NAN, 1.0, &b.drawn_sum(0.0, 1), &b)
                .is_err()
        );
        assert!(
            src.laplace_mean(1.0, -1.0, &b.drawn_sum(0.0, 1), &b)
                .is_err()
        );
        assert!(
            src.laplace_mean(1.0, 1.0, &b.drawn_sum(0.0, 0), &b)
                .is_err()
        );
        // 2^20 * 2^40 > 2^53: this release uses the grid 2^-13 (exact sums), with the noise
        // calibrated on that grid: Delta = 2^13, rho = 0.5, sigma = 2^13 units = 1/n at the mean.
        let n = 1u64 << 40;
        let m = src
            .gaussian_mean(1.0 / n as f64, 0.5, &b.drawn_sum(n as f64 / 2.0, n), &b)
            .unwrap();
        assert_eq!(m.sigma(), 1.0 / n as f64);
        assert!((m.value() - 0.5).abs() < 1e-9, "{}", m.value());
        assert_eq!(
            (m.value() * 8192.0 * n as f64).fract(),
            0.0,
            "on the 2^-13 grid"
        );
        // Even u64::MAX rewards in one release stay finite and well-formed.
        let (v, scale) = src
            .laplace_mean(1.0 / u64::MAX as f64, 1.0, &b.drawn_sum(0.0, u64::MAX), &b)
            .unwrap();
        assert!(v.is_finite() && scale > 0.0);
        for bits in [0, 33] {
            let e = NoiseSource::deployment(bits).unwrap_err().to_string();
            assert!(e.starts_with(&format!("grid_bits = {bits}")), "{e}");
        }
        let e = check_noise(NoiseKind::Deployment, 20, false)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("noise = \"deployment\""), "{e}");
    }

    /// Two deployment sources (and a clone) draw independent noise: OS seeding, never the master
    /// seed. (Equal 20-draw sequences from two independent ChaCha20 keys: probability ~ 0.)
    #[test]
    fn deployment_sources_are_independent() {
        let mut a = NoiseSource::deployment(20).unwrap();
        let mut c = a.clone();
        let mut d = NoiseSource::new(NoiseKind::Deployment, 20, 7).unwrap();
        let (x, y, z) = (draw(&mut a), draw(&mut c), draw(&mut d));
        assert_ne!(x, y);
        assert_ne!(x, z);
        assert!(format!("{a:?}").contains("Deployment"));
    }

    /// Inside [`with_release_key`], any deployment source draws the key's stream: a redo of a
    /// release with the stored key (a restored policy, with a fresh OS key of its own) draws the
    /// same noise; another key, or no scope, draws other noise; the scope ends with its closure.
    /// Simulation sources are untouched. (Equal 20-draw sequences from independent keys:
    /// probability ~ 0.)
    #[test]
    fn a_release_key_makes_the_redo_draw_the_same_noise() {
        let key = [7u8; 32];
        let mut first = NoiseSource::deployment(20).unwrap();
        let mut redo = NoiseSource::deployment(20).unwrap();
        let x = with_release_key(key, || draw(&mut first));
        let y = with_release_key(key, || draw(&mut redo));
        assert_eq!(x, y);
        let other = with_release_key([8u8; 32], || draw(&mut redo));
        assert_ne!(x, other);
        // Nested: the inner key inside, the outer stream continues after it.
        let (inner, outer_after) = with_release_key(key, || {
            let head = draw(&mut first);
            let inner = with_release_key([8u8; 32], || draw(&mut first));
            (inner, [head, draw(&mut first)].concat())
        });
        assert_eq!(inner, other);
        let straight = with_release_key(key, || [draw(&mut redo), draw(&mut redo)].concat());
        assert_eq!(outer_after, straight);
        // Outside any scope: each source's own generator again.
        assert_ne!(draw(&mut first), x);
        // Simulation: its own seeded stream, with or without a key.
        let mut s1 = NoiseSource::simulation(3);
        let mut s2 = NoiseSource::simulation(3);
        assert_eq!(with_release_key(key, || draw(&mut s1)), draw(&mut s2));
    }
}

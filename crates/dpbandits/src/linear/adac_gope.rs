//! G-optimal phased elimination (GOPE) and its rho-zCDP versions: AdaC-GOPE (noise on the
//! intermediate statistic), AdaR-GOPE-Var (noise on each per-arm sum of rewards) and output
//! perturbation.
//!
//! # Algorithm
//! Azize & Basu (2024), "Concentrated Differential Privacy for Bandits", Algorithm 2 (AdaC-GOPE),
//! phase length Eq. (4), design Eq. (5); spec `zcdp-bandits.md` §3. Phase `l = 1, 2, ...` on the
//! surviving arms `A_l` (`A_1` = all K arms):
//! 1. G-optimal design `pi_l` on `A_l` ([`super::design`]; support `S_l`, `|S_l| <= r(r+1)/2`).
//! 2. `beta_l = 2^-l`, `delta_{K,l} = delta / (K l (l+1))` (K = initial number of arms),
//!    `c_l = 8r/beta_l^2 ln(4/delta_{K,l}) + 2r/beta_l sqrt(2/rho f(r, delta_{K,l}))`,
//!    `f(r, x) = r + 2 sqrt(r ln(2/x)) + 2 ln(2/x)` (Eq. 4, [`phase_length`]).
//! 3. Play each `a in S_l` exactly `T_l(a) = ceil(c_l pi_l(a))` times, in blocks in support order;
//!    the phase ends after `T_l = sum_a T_l(a)` rounds (`t_{l+1} = t_l + T_l`, spec §3.8).
//! 4. Least squares on this phase's rewards only: `V_l = sum_a T_l(a) a a^T`,
//!    `theta^_l = V_l^{-1} sum_t a_t r_t`.
//! 5. Release `theta~_l` (see *Noise placements*), cached for the phase.
//! 6. Keep `a` iff `max_{b in A_l} <theta~_l, b - a> <= 2 beta_l`. One survivor: commit to it.
//!
//! `r` is the dimension of the span of `A_l`: when the survivors stop spanning `R^d` everything runs
//! in coordinates of an orthonormal basis of their span and `r` replaces `d` (spec §3.8 proposal).
//!
//! # Noise placements ([`NoisePlacement`], spec §3.7)
//! * `gope` ([`NoisePlacement::None`]): non-private; `c_l` without the privacy term and
//!   `theta~ = theta^` — the `rho -> inf` limit of Algorithm 2 (spec §3.6 "PaperLimit", default);
//!   `constants = "textbook"` uses `c_l = 2r/beta_l^2 ln(1/delta_{K,l})` instead
//!   (Lattimore & Szepesvári Alg. 12 as recalled by the spec, [X]).
//! * `adac_gope` ([`NoisePlacement::Intermediate`], Algorithm 2 Step 4, App. E-C3):
//!   `theta~ = theta^ + V^{-1/2} N`, `N ~ N(0, sigma^2 I_r)`, `V^{-1/2}` the symmetric inverse
//!   square root (eigendecomposition). Calibration ([`NoiseCalibration`], spec §3.4):
//!   `literal`: `sigma^2 = 2r/(rho c_l)` as printed; `safe` (default):
//!   `sigma^2 = 2/rho max(r/c_l, g_l^2)`, `g_l^2 = max_{b in A_l} b^T V_l^{-1} b`, which equals
//!   `literal` for an exact design and never under-noises an approximate one.
//! * `adar_gope_var` ([`NoisePlacement::PerArmSums`], App. E-C2 and App. H, "AdaC-GOPE-Var" in
//!   the legend of Fig. 5): `theta~ = theta^ + V^{-1} sum_{a in S_l} a xi_a`,
//!   `xi_a ~ N(0, 2/rho)` i.i.d.; the zCDP form of the concurrent private GOPEs (Hanna et al. 2022;
//!   Li, Zhou & Ji 2022), which add noise to each per-arm sum of rewards.
//! * `gope_output_perturbation` ([`NoisePlacement::Output`], App. E-C1): `theta~ = theta^ + N`,
//!   `sigma^2 = 2/rho max_{a in S_l} ||V_l^{-1} a||_2^2` (spec §3.7 [D]; private, no regret
//!   guarantee in the paper).
//!
//! # Phase lengths ([`PhaseLength`])
//! Eq. (4) is the phase length that makes AdaC-GOPE's released estimate `beta_l`-accurate on every
//! surviving arm with probability `>= 1 - delta_{K,l}` (Thm 13, Cor. 1; spec §3.5): its privacy
//! term bounds `|<V^{-1/2} N, a>| <= ||N|| ||a||_{V^{-1}}` with the chi-square tail `f(r, .)` of
//! Lemma 10 and `g_l^2 <= r/c_l`. The paper does not state a phase length for AdaR-GOPE-Var
//! (spec §3.7 [A]). We give each variant the phase length its **own** noise needs for the same
//! guarantee (`phase_length = "own"`, the default), derived by the same two steps: the Var noise
//! is `eta = V^{-1} A xi` with `A = [a_s]_{s in S_l}` and `xi ~ N(0, 2/rho I_{|S_l|})`, so
//! `|<eta, a>| = |<xi, A^T V^{-1} a>| <= ||xi|| ||A^T V^{-1} a||`, `||xi||^2 <= (2/rho) f(|S_l|, delta_{K,l})`
//! with probability `1 - delta_{K,l}/2` (Lemma 10 in `|S_l|` dimensions), and
//! `||A^T V^{-1} a||^2 = sum_s <s, V^{-1} a>^2 <= |S_l| g_l^4 <= |S_l| (r/c_l)^2` (Cauchy–Schwarz).
//! The noise part is `<= beta_l/2` as soon as
//! `c_l >= 2r/beta_l sqrt(2/rho |S_l| f(|S_l|, delta_{K,l}))`
//! ([`per_arm_sums_privacy_term`]), which replaces Eq. (4)'s privacy term; the non-private term is
//! unchanged. With the concurrent works' support `|S_l| = O(d)` this is the `d^2` privacy term the
//! paper attributes to them (App. E-C2; Hanna et al. 2022, Eq. 18), against AdaC-GOPE's `d`.
//! `phase_length = "eq4"` keeps Eq. (4) for AdaR-GOPE-Var too (the spec's literal reading: "only
//! Step 4 changes"); the variant then has no accuracy guarantee of its own. GOPE, AdaC-GOPE and
//! output perturbation always use Eq. (4) (for them `own` is Eq. (4)).
//!
//! # Privacy
//! * Notion: rho-Interactive zCDP (Def. 4), central trust model, reward-level adjacency; rewards
//!   must lie in `[-1, 1]` (Assumption 1).
//! * Sensitivities (one reward changes by at most 2): `phi_l = V_l^{-1/2} sum a_t r_t` moves by
//!   `2 ||a_j||_{V_l^{-1}} <= 2 g_l` (App. D-C); the vector of per-arm sums by 2 (App. E-C2);
//!   `theta^_l` by `2 ||V_l^{-1} a_j||_2` (App. E-C1). Each is released with the Gaussian mechanism
//!   (Thm 18, `sigma^2 = s^2/(2 rho)`, rounded up by [`GaussianMechanism::for_zcdp`]);
//!   `theta~_l` and the elimination are post-processing (Lemmas 3-4).
//! * Composition: phase boundaries `T_l(a)` are functions of public data and earlier releases; each
//!   reward enters exactly one phase's release; so Lemma 1 with App. D-B gives rho overall.
//! * One release per completed phase, sampled once and cached in [`PhaseRelease`]; an unfinished
//!   (truncated) last phase releases nothing.
//! * Reward boundary: `clip_rewards = true` (default) clips every reward to `[-1, 1]` before it
//!   enters a statistic, so the guarantee holds for any environment. `clip_rewards = false` is the
//!   paper's reproduction mode (its Gaussian rewards are unbounded; no clipping is mentioned, spec
//!   §6 fidelity notes): the guarantee then holds **only** if every reward lies in `[-1, 1]`, and
//!   the reported guarantee says so.
//!
//! # Parameters
//! `rho > 0` (inf = non-private limit; not allowed for `gope`), `delta in (0, 1)` (default 0.001,
//! the paper's experiments), `noise_calibration` (`safe` | `literal`, AdaC-GOPE only),
//! `constants` (`paper_limit` | `textbook`, GOPE only), `clip_rewards` (default true),
//! `design_tolerance` (default 1e-3), `design_max_iterations` (default 200000), `design_solver`
//! (`away_steps` default: support `<= r(r+1)/2`; `frank_wolfe`: plain FW with full support, the
//! paper's likely implementation, for reproducing Figure 5).

use super::design::{Design, DesignOptions, Span, g_optimal};
use super::{LinearPolicy, LinearPolicyConfig};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Error, Result, check};
use crate::finite::Pull;
use crate::privacy::{
    BoundaryMode, Budget, DEFAULT_GRID_BITS, GaussianMechanism, NoiseGrade, NoiseKind, NoiseSource,
    PrivacyGuarantee, REWARD_ADJACENCY, RewardBoundary, RewardSum, TrustModel,
};
use crate::protocol::Gate;
use crate::rng::SimRng;
use nalgebra::{DMatrix, DVector};
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

/// Registry record of `gope`.
pub const GOPE: AlgorithmInfo = AlgorithmInfo {
    kind: "gope",
    name: "GOPE (G-optimal phased elimination)",
    setting: Setting::Linear,
    reference: "Azize & Basu 2024, Sec. VII baseline: Algorithm 2 with rho = inf (spec zcdp §3.6); Lattimore & Szepesvari 2020, Alg. 12",
    privacy: "none",
    example: "delta = 0.001",
    source: file!(),
    doc: include_str!("adac_gope.rs"),
    private: false,
    release_keys: crate::config::NOISE_KEYS,
};

/// Registry record of `adac_gope`.
pub const ADAC_GOPE: AlgorithmInfo = AlgorithmInfo {
    kind: "adac_gope",
    name: "AdaC-GOPE",
    setting: Setting::Linear,
    reference: "Azize & Basu 2024, Algorithm 2, Eq. (4)-(5), App. D-C, E",
    privacy: "rho-Interactive zCDP (central), Gaussian noise V^(-1/2) N on the phase statistic, once per phase",
    example: "rho = 1.0\ndelta = 0.001",
    source: file!(),
    doc: include_str!("adac_gope.rs"),
    private: true,
    release_keys: crate::config::NOISE_KEYS,
};

/// Registry record of `adar_gope_var`.
pub const ADAR_GOPE_VAR: AlgorithmInfo = AlgorithmInfo {
    kind: "adar_gope_var",
    name: "AdaR-GOPE-Var (noise on each per-arm sum of rewards)",
    setting: Setting::Linear,
    reference: "Azize & Basu 2024, App. E-C2 and App. H (Fig. 5); zCDP form of Hanna et al. 2022 / Li, Zhou & Ji 2022; phase length derived for its noise (Thm 13 steps, linear/adac_gope.rs), phase_length = \"eq4\" for Eq. (4)",
    privacy: "rho-Interactive zCDP (central), Gaussian noise N(0, 2/rho) on each per-arm reward sum, once per phase",
    example: "rho = 1.0\ndelta = 0.001",
    source: file!(),
    doc: include_str!("adac_gope.rs"),
    private: true,
    release_keys: crate::config::NOISE_KEYS,
};

/// Registry record of `gope_output_perturbation`.
pub const GOPE_OUTPUT_PERTURBATION: AlgorithmInfo = AlgorithmInfo {
    kind: "gope_output_perturbation",
    name: "GOPE with output perturbation",
    setting: Setting::Linear,
    reference: "Azize & Basu 2024, App. E-C1 (calibration derived in spec zcdp §3.7)",
    privacy: "rho-Interactive zCDP (central), Gaussian noise on theta^ with sensitivity 2 max ||V^(-1) a||, once per phase",
    example: "rho = 1.0\ndelta = 0.001",
    source: file!(),
    doc: include_str!("adac_gope.rs"),
    private: true,
    release_keys: crate::config::NOISE_KEYS,
};

/// Where the privacy noise enters (spec §3.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoisePlacement {
    /// No noise: non-private GOPE.
    #[default]
    None,
    /// AdaC-GOPE: on `phi = V^{-1/2} sum a_t r_t` (App. E-C3).
    Intermediate,
    /// AdaR-GOPE-Var: on each per-arm sum of rewards (App. E-C2, App. H).
    PerArmSums,
    /// Output perturbation: on `theta^` (App. E-C1).
    Output,
}

impl NoisePlacement {
    /// Registry kind of the policy using this placement.
    pub fn kind(self) -> &'static str {
        match self {
            NoisePlacement::None => GOPE.kind,
            NoisePlacement::Intermediate => ADAC_GOPE.kind,
            NoisePlacement::PerArmSums => ADAR_GOPE_VAR.kind,
            NoisePlacement::Output => GOPE_OUTPUT_PERTURBATION.kind,
        }
    }
}

/// AdaC-GOPE noise calibration (spec §3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoiseCalibration {
    /// `sigma^2 = 2/rho max(r/c_l, g_l^2)`: never under-noises an approximate design (default).
    #[default]
    Safe,
    /// `sigma^2 = 2r/(rho c_l)` exactly as printed in Algorithm 2.
    Literal,
}

/// Which phase length `c_l` a variant uses (module docs, *Phase lengths*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseLength {
    /// The phase length the variant's own noise needs for the Thm 13 guarantee (default):
    /// Eq. (4) for AdaC-GOPE, GOPE and output perturbation; Eq. (4) with
    /// [`per_arm_sums_privacy_term`] for AdaR-GOPE-Var.
    #[default]
    Own,
    /// Eq. (4) for every variant (AdaR-GOPE-Var then has AdaC-GOPE's phases; spec §3.7 \[A\]).
    Eq4,
}

/// Non-private phase constants (spec §3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GopeConstants {
    /// `8r/beta^2 ln(4/delta_{K,l})`: the rho -> inf limit of Eq. (4) (default).
    #[default]
    PaperLimit,
    /// `2r/beta^2 ln(1/delta_{K,l})` (textbook GOPE, \[X\]).
    Textbook,
}

/// Configuration of every GOPE variant (the registry sets [`GopeConfig::placement`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GopeConfig {
    /// zCDP budget (inf = non-private limit).
    pub rho: f64,
    /// Failure probability delta in (0, 1).
    #[serde(default = "default_delta")]
    pub delta: f64,
    /// AdaC-GOPE calibration.
    #[serde(default)]
    pub noise_calibration: NoiseCalibration,
    /// Non-private constants (GOPE only).
    #[serde(default)]
    pub constants: GopeConstants,
    /// Clip every reward to [-1, 1] before it enters a statistic.
    #[serde(default = "yes")]
    pub clip_rewards: bool,
    /// Design stopping tolerance eps: stop at `g <= (1 + eps) r`.
    #[serde(default = "default_tol")]
    pub design_tolerance: f64,
    /// Design iteration cap.
    #[serde(default = "default_iters")]
    pub design_max_iterations: usize,
    /// Design solver variant (`away_steps` default, `frank_wolfe` = plain FW, full support).
    #[serde(default)]
    pub design_solver: super::design::DesignSolver,
    /// Phase length (`own` default; `eq4` only for AdaR-GOPE-Var, where it differs).
    #[serde(default)]
    pub phase_length: PhaseLength,
    /// Set by the registry.
    #[serde(skip)]
    pub placement: NoisePlacement,
    /// Noise path (`simulation` default, `deployment`: exact multivariate discrete Gaussian on
    /// the discretised phase statistic, `docs/privacy.md`, "Vector Gaussian family").
    #[serde(default)]
    pub noise: NoiseKind,
    /// Deployment grid `2^-grid_bits` of the rewards (default 20).
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

fn default_delta() -> f64 {
    1e-3
}
fn yes() -> bool {
    true
}
fn default_tol() -> f64 {
    1e-3
}
fn default_iters() -> usize {
    200_000
}

impl GopeConfig {
    /// A configuration with the defaults for `placement` and budget `rho`.
    pub fn new(placement: NoisePlacement, rho: f64) -> Self {
        GopeConfig {
            rho,
            delta: default_delta(),
            noise_calibration: NoiseCalibration::Safe,
            constants: GopeConstants::PaperLimit,
            clip_rewards: true,
            design_tolerance: default_tol(),
            design_max_iterations: default_iters(),
            design_solver: super::design::DesignSolver::AwaySteps,
            phase_length: PhaseLength::Own,
            placement,
            noise: NoiseKind::Simulation,
            grid_bits: DEFAULT_GRID_BITS,
        }
    }

    /// Non-private GOPE.
    pub fn gope() -> Self {
        Self::new(NoisePlacement::None, f64::INFINITY)
    }

    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        check::budget("rho", self.rho)?;
        check::open_unit("delta", self.delta)?;
        crate::privacy::check_noise(self.noise, self.grid_bits, self.is_private())?;
        if self.noise == NoiseKind::Deployment && !self.clip_rewards {
            return Err(Error::param(
                "clip_rewards",
                false,
                "true with noise = \"deployment\" (the integer sensitivity needs rewards in [-1, 1])",
            ));
        }
        self.design_options().validate()?;
        if self.placement == NoisePlacement::None && self.rho.is_finite() {
            return Err(Error::param(
                "rho",
                self.rho,
                "no rho for the non-private gope (use kind = \"adac_gope\")",
            ));
        }
        if self.placement != NoisePlacement::PerArmSums && self.phase_length != PhaseLength::Own {
            return Err(Error::param(
                "phase_length",
                "\"eq4\"",
                format!(
                    "\"own\" for {} (its own phase length is Eq. (4); only adar_gope_var has a choice)",
                    self.kind()
                ),
            ));
        }
        if self.placement != NoisePlacement::None && self.constants != GopeConstants::PaperLimit {
            return Err(Error::param(
                "constants",
                "\"textbook\"",
                "\"paper_limit\" (textbook constants exist only for the non-private gope)",
            ));
        }
        Ok(())
    }

    /// Design solver options.
    pub fn design_options(&self) -> DesignOptions {
        DesignOptions {
            tolerance: self.design_tolerance,
            max_iterations: self.design_max_iterations,
            solver: self.design_solver,
        }
    }

    /// Registry kind.
    pub fn kind(&self) -> &'static str {
        self.placement.kind()
    }

    /// Numeric parameters identifying the configuration.
    pub fn params(&self) -> Vec<(&'static str, f64)> {
        let mut p = vec![];
        if self.placement != NoisePlacement::None {
            p.push(("rho", self.rho));
        }
        if self.delta != default_delta() {
            p.push(("delta", self.delta));
        }
        p
    }

    /// `kind(p=v,...)`, plus `-literal`/`-textbook`/`-fw`/`-eq4` markers for non-default choices
    /// that change the algorithm.
    pub fn label(&self) -> String {
        let mut kind = self.kind().to_string();
        if self.placement == NoisePlacement::Intermediate
            && self.noise_calibration == NoiseCalibration::Literal
        {
            kind.push_str("-literal");
        }
        if self.constants == GopeConstants::Textbook {
            kind.push_str("-textbook");
        }
        if self.design_solver == super::design::DesignSolver::FrankWolfe {
            kind.push_str("-fw");
        }
        if self.phase_length == PhaseLength::Eq4 {
            kind.push_str("-eq4");
        }
        crate::privacy::noise_label(
            crate::config::label(&kind, &self.params()),
            self.noise,
            self.grid_bits,
        )
    }

    /// Whether any noise is added.
    pub fn is_private(&self) -> bool {
        self.placement != NoisePlacement::None && self.rho.is_finite()
    }

    /// The reward boundary `[-1, 1]` when clipping.
    pub fn boundary(&self) -> Option<RewardBoundary> {
        self.clip_rewards.then_some(RewardBoundary {
            lo: -1.0,
            hi: 1.0,
            mode: BoundaryMode::Clip,
        })
    }

    /// The privacy claim.
    pub fn guarantee(&self) -> PrivacyGuarantee {
        if !self.is_private() {
            return PrivacyGuarantee::non_private();
        }
        let mechanism = match self.placement {
            NoisePlacement::Intermediate => format!(
                "Gaussian mechanism on phi_l = V_l^(-1/2) sum a_t r_t (L2 sensitivity 2 g_l), once per phase: \
                 theta~ = theta^ + V_l^(-1/2) N, N ~ N(0, sigma^2 I), sigma^2 = {} (Algorithm 2 Step 4, Eq. 4, Thm 18, App. D-C); \
                 disjoint phases compose in parallel (Lemma 1, App. D-B)",
                match self.noise_calibration {
                    NoiseCalibration::Safe => "2/rho max(d/c_l, g_l^2) (safe calibration, spec zcdp §3.4)",
                    NoiseCalibration::Literal => "2d/(rho c_l) (literal; under-noises if the design is only approximately G-optimal)",
                }
            ),
            NoisePlacement::PerArmSums => "Gaussian mechanism on the vector of per-arm sums of rewards of a phase (L2 sensitivity 2): \
                 xi_a ~ N(0, 2/rho) per support arm, theta~ = theta^ + V_l^(-1) sum_a a xi_a (App. E-C2, App. H, Thm 18); \
                 disjoint phases compose in parallel (Lemma 1)"
                .into(),
            NoisePlacement::Output => "Gaussian mechanism on theta^_l (L2 sensitivity 2 max_a ||V_l^(-1) a||): sigma^2 = 2/rho max_a ||V_l^(-1) a||^2 \
                 (App. E-C1, Thm 18); disjoint phases compose in parallel (Lemma 1)"
                .into(),
            NoisePlacement::None => unreachable!("non-private handled above"),
        };
        let notion = if self.clip_rewards {
            "rho-Interactive zCDP (Azize & Basu 2024, Def. 4; Thm 2)".to_string()
        } else {
            "rho-Interactive zCDP (Azize & Basu 2024, Def. 4; Thm 2), CONDITIONAL: rewards are not clipped \
             (reproduction mode, clip_rewards = false); the guarantee holds only if every reward lies in [-1, 1]"
                .to_string()
        };
        let mechanism = match self.noise {
            NoiseKind::Simulation => mechanism,
            NoiseKind::Deployment => format!(
                "multivariate discrete Gaussian (independent N_Z(0, sigma^2) coordinates; Canonne, \
                 Kamath & Steinke 2020, Alg. 3) on the same phase statistic as the Gaussian \
                 mechanism below, made of integers: each block's reward sum on the 2^-{k} grid \
                 times its public weight vector on its own grid, sigma^2 = max(integer L2 \
                 sensitivity, the calibration below)^2/(2 rho), an exact rational (the same rho); \
                 noise from ChaCha20 seeded by the operating system: outputs are not \
                 reproducible. Calibration as in simulation: {mechanism}",
                k = self.grid_bits
            ),
        };
        PrivacyGuarantee {
            notion,
            model: TrustModel::Central,
            adjacency: REWARD_ADJACENCY.into(),
            budget: Budget::Zcdp { rho: self.rho },
            mechanism,
            boundary: self.boundary(),
            noise: NoiseGrade::of(self.noise),
        }
    }

    /// Build the policy for one run on `arms`; `seed` keys its noise stream.
    pub fn build(&self, arms: &[DVector<f64>], seed: u64) -> Result<PhasedElimination> {
        PhasedElimination::new(arms, self.clone(), seed)
    }

    /// Play one run on `instance` ([`super::simulate_linear`] with environment seed `env_seed` and
    /// policy seed `policy_seed`), writing the regret at the grid's checkpoints into `out`, and
    /// return the policy for its releases.
    ///
    /// # Errors
    /// As [`PhasedElimination::new`] and the design solver.
    pub fn simulate(
        &self,
        instance: &super::LinearInstance,
        env_seed: u64,
        policy_seed: u64,
        grid: &crate::sim::CheckpointGrid,
        out: &mut [f64],
    ) -> Result<PhasedElimination> {
        let mut env = instance.env(env_seed);
        let mut p = self.build(instance.arms(), policy_seed)?;
        super::simulate_linear(&mut env, &mut p, grid, out)?;
        Ok(p)
    }
}

impl LinearPolicyConfig for GopeConfig {
    /// Table II's AdaC-GOPE row (Thm 4 with `delta = 1/T`): `A sqrt(d T ln(KT)) + B (d /
    /// sqrt(rho)) ln^{3/2}(KT)`; the theorem leaves `A` and `B` unspecified, drawn with `A = B =
    /// 1` (the shape). AdaC-GOPE and GOPE (`rho = inf`: the first term). Table II's right
    /// column for AdaR-GOPE-Var (the zCDP form of the per-arm-sum noise of Hanna et al. 2022):
    /// their Eq. 17 converted by `epsilon -> sqrt(2 rho)`, `sqrt(d T ln(KT)) + (d^2 / sqrt(rho))
    /// ln^2(KT)`, orders, unit constants. Output perturbation: none (no regret guarantee in
    /// the paper, App. E-C1).
    fn regret_bound(
        &self,
        instance: &crate::config::BoundInstance,
    ) -> Option<crate::config::RegretBound> {
        use crate::config::{BoundTerm, RegretBound};
        let (d, k) = (instance.d as f64, instance.k as f64);
        if self.placement == NoisePlacement::Output {
            return None;
        }
        if self.placement == NoisePlacement::PerArmSums {
            return Some(RegretBound {
                source: "Hanna et al. 2022, Eq. 17, converted in Azize & Basu 2024 Table II (orders; unit constants)",
                formula: format!("sqrt(d T ln(KT)) + (d^2 / sqrt(rho)) ln^2(KT), d = {d}, K = {k}"),
                terms: vec![
                    BoundTerm {
                        coef: d.sqrt(),
                        t_pow: 0.5,
                        log_pow: 0.5,
                        log_mult: k,
                    },
                    BoundTerm {
                        coef: d * d / self.rho.sqrt(),
                        t_pow: 0.0,
                        log_pow: 2.0,
                        log_mult: k,
                    },
                ],
                alternatives: vec![],
            });
        }
        let mut terms = vec![BoundTerm {
            coef: d.sqrt(),
            t_pow: 0.5,
            log_pow: 0.5,
            log_mult: k,
        }];
        if self.rho.is_finite() {
            terms.push(BoundTerm {
                coef: d / self.rho.sqrt(),
                t_pow: 0.0,
                log_pow: 1.5,
                log_mult: k,
            });
        }
        Some(RegretBound {
            source: "Azize & Basu 2024, Thm 4 (Table II; A = B = 1, unspecified in the paper)",
            formula: format!("sqrt(d T ln(KT)) + (d / sqrt(rho)) ln^1.5(KT), d = {d}, K = {k}"),
            terms,
            alternatives: vec![],
        })
    }
    fn kind(&self) -> &'static str {
        GopeConfig::kind(self)
    }
    fn label(&self) -> String {
        GopeConfig::label(self)
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        GopeConfig::params(self)
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        GopeConfig::guarantee(self)
    }
    fn describe(&self) -> serde_json::Value {
        let path = if self.clip_rewards {
            "per-reward draws, each clipped to [-1, 1] (clip_rewards = true: O(T) per run)"
        } else {
            "one exact N(n <theta,a>, n sigma^2) draw per (phase, support arm) block (clip_rewards = false)"
        };
        serde_json::json!({
            "simulation_path": path,
            "clip_rewards": self.clip_rewards,
            "delta": self.delta,
            "noise_placement": self.placement,
            "noise_calibration": self.noise_calibration,
            "constants": self.constants,
            "design_tolerance": self.design_tolerance,
            "design_solver": self.design_solver,
        })
    }
    fn build(&self, arms: &[DVector<f64>], seed: u64) -> Result<Box<dyn LinearPolicy>> {
        Ok(Box::new(PhasedElimination::new(arms, self.clone(), seed)?))
    }
}

/// A phase is a sequence of blocks `(arm, T_l(arm))`; each block is one commitment, and the last
/// block's observation ends the phase (one release, elimination).
impl LinearPolicy for PhasedElimination {
    fn released_estimate(
        &self,
        level: f64,
    ) -> Option<(crate::report::LinearReleased, Vec<Vec<f64>>)> {
        // The last phase's release: theta~_l = theta^_l + noise, in the span of its arms
        // (orthonormal basis B, d x r). V_l^{1/2} (theta~_l - theta) has covariance at most
        // (s_r^2 + c) I_r: the least-squares error s_r^2 I_r for rewards of variance at most
        // s_r^2 = ((hi - lo)/2)^2 (Popoviciu; normal approximation) and the placement's noise
        // c = `noise_in_metric`. So ||theta~_l - theta||^2_(V_l) <= (s_r^2 + c) f(r, 2 a_l)
        // (Laurent-Massart chi-square tail, `chi2_tail`) with probability 1 - a_l, where phase l
        // spends a_l = (1 - level) 6/(pi^2 l^2): valid over every phase at once, so at the
        // close and at any number of interim looks.
        let rel = self.releases.last()?;
        let bd = self.gate.boundary();
        if !(bd.lo.is_finite() && bd.hi.is_finite()) || rel.information.is_empty() {
            return None;
        }
        let r = rel.rank;
        let d = rel.theta.len();
        let v = DMatrix::from_row_slice(r, r, &rel.information);
        let b = DMatrix::from_row_slice(d, r, &rel.basis);
        let vinv = v.clone().cholesky()?.inverse();
        let alpha = crate::report::spending(1.0 - level, u64::from(rel.phase));
        let sr2 = (bd.width() / 2.0).powi(2);
        let radius2 = (sr2 + rel.noise_in_metric) * chi2_tail(r as f64, 2.0 * alpha);
        let precision = &b * &v * b.transpose() / radius2;
        let shape = &b * vinv * b.transpose() * radius2;
        let proj = &b * b.transpose();
        let rows = |m: &DMatrix<f64>| -> Vec<Vec<f64>> {
            (0..m.nrows())
                .map(|i| (0..m.ncols()).map(|j| m[(i, j)]).collect())
                .collect()
        };
        let released = crate::report::LinearReleased {
            theta: rel.theta.clone(),
            precision: rows(&precision),
            shape: rows(&shape),
            span: (r < d).then(|| rows(&proj)),
            level,
            rewards: rel.samples,
            range: (bd.lo, bd.hi),
            method: format!(
                "{}: the last phase's released theta~_l (phase {}, {} rewards, rank {r}) with the \
                 ellipsoid ||theta - theta~_l||^2_(V_l) <= (((hi-lo)/2)^2 + c) f(r, 2 a_l), V_l the \
                 phase's public information matrix, c the placement's noise in that metric, \
                 f the Laurent-Massart chi-square tail, a_l = (1-level) 6/(pi^2 l^2) spent over \
                 phases (valid at the close and under any number of looks; normal approximation \
                 of the least-squares error; rewards assumed in the boundary); value intervals \
                 <a, theta~_l> +- the ellipsoid's half-width along a (unbounded outside the span), \
                 simultaneous over arms, clipped to the reward range; post-processing of \
                 released statistics",
                self.cfg.kind(),
                rel.phase,
                rel.samples
            ),
        };
        let arms = self
            .arms
            .iter()
            .map(|a| a.iter().copied().collect())
            .collect();
        Some((released, arms))
    }
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(Setting::Linear, self.cfg.kind(), self)
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        self.cfg.guarantee()
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
    fn choose(&mut self, _t: u64) -> Result<Pull> {
        if let Some(c) = self.gate.open() {
            return Ok(Pull {
                arm: c.arm,
                steps: c.left,
            });
        }
        let plan = match &self.current {
            Some(c) => &c.plan,
            None => {
                self.plan_phase()?;
                &self
                    .current
                    .as_ref()
                    .ok_or_else(|| Error::Protocol("no phase planned".into()))?
                    .plan
            }
        };
        let (arm, len) = plan.blocks[self.cursor.0];
        let steps = len - self.cursor.1.n();
        self.gate.commit(arm, steps);
        Ok(Pull { arm, steps })
    }
    fn observe_batch(&mut self, arm: usize, sum: &RewardSum) -> Result<()> {
        let mut gate = self.gate;
        gate.admit_sum(arm, sum)?;
        let Some(cur) = &self.current else {
            return Err(Error::Protocol("observe without a planned phase".into()));
        };
        let (_, len) = cur.plan.blocks[self.cursor.0];
        let blocks = cur.plan.blocks.len();
        let rounded;
        let sum = if self.noise.grade() == NoiseGrade::Deployment {
            // Onto the block's 2^-k grid (a sum of grid points stays one).
            let bd = gate.boundary();
            rounded = bd.drawn_sum(self.noise.discretise(sum.sum(), len, &bd), sum.n());
            &rounded
        } else {
            sum
        };
        self.cursor.1.add(sum)?;
        self.gate = gate;
        if self.cursor.1.n() >= len {
            self.sums.push(self.cursor.1);
            self.cursor = (self.cursor.0 + 1, self.gate.boundary().empty_sum());
            if self.cursor.0 == blocks {
                let sums = std::mem::take(&mut self.sums);
                let done = self.finish_phase(&sums);
                self.sums = sums;
                self.sums.clear();
                self.cursor = (0, self.gate.boundary().empty_sum());
                done?;
            }
        }
        Ok(())
    }
}

/// `f(d, x) = d + 2 sqrt(d ln(2/x)) + 2 ln(2/x)` (chi-square tail, Eq. 4, Thm 13).
pub fn chi2_tail(d: f64, x: f64) -> f64 {
    let l = (2.0 / x).ln();
    d + 2.0 * (d * l).sqrt() + 2.0 * l
}

/// `delta_{K,l} = delta / (K l (l+1))`.
pub fn delta_kl(delta: f64, k: usize, l: u32) -> f64 {
    let l = f64::from(l);
    delta / (k as f64 * l * (l + 1.0))
}

/// The two terms of `c_l` (Eq. 4) in dimension `r`: (non-private term, privacy term). The privacy
/// term is 0 for `rho = inf`.
pub fn phase_length(
    r: usize,
    k: usize,
    l: u32,
    delta: f64,
    rho: f64,
    constants: GopeConstants,
) -> (f64, f64) {
    let beta = 0.5f64.powi(l as i32);
    let dk = delta_kl(delta, k, l);
    let r = r as f64;
    let np = match constants {
        GopeConstants::PaperLimit => 8.0 * r / (beta * beta) * (4.0 / dk).ln(),
        GopeConstants::Textbook => 2.0 * r / (beta * beta) * (1.0 / dk).ln(),
    };
    let pr = if rho.is_infinite() {
        0.0
    } else {
        2.0 * r / beta * (2.0 / rho * chi2_tail(r, dk)).sqrt()
    };
    (np, pr)
}

/// AdaR-GOPE-Var's privacy term of `c_l` in dimension `r` with a design support of `s` arms:
/// `2r/beta_l sqrt(2/rho s f(s, delta_{K,l}))` (module docs, *Phase lengths*; 0 for `rho = inf`).
/// A support spans `R^r`, so `s >= r` and the term is never below Eq. (4)'s
/// `2r/beta_l sqrt(2/rho f(r, delta_{K,l}))` (equal for `s = r = 1`).
pub fn per_arm_sums_privacy_term(
    r: usize,
    s: usize,
    k: usize,
    l: u32,
    delta: f64,
    rho: f64,
) -> f64 {
    if rho.is_infinite() {
        return 0.0;
    }
    let beta = 0.5f64.powi(l as i32);
    let dk = delta_kl(delta, k, l);
    let s = s as f64;
    2.0 * r as f64 / beta * (2.0 / rho * s * chi2_tail(s, dk)).sqrt()
}

/// What a phase plays: blocks `(arm, pulls)` in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhasePlan {
    /// Phase number l (1-based).
    pub phase: u32,
    /// `beta_l = 2^-l`.
    pub beta: f64,
    /// `c_l` (Eq. 4) in dimension `rank`.
    pub c: f64,
    /// Dimension of the span of the surviving arms.
    pub rank: usize,
    /// `(arm, T_l(arm))` for each support arm, ascending arm index. A committed phase has one
    /// block of `u64::MAX` pulls.
    pub blocks: Vec<(usize, u64)>,
    /// Whether this is the final commitment to a single surviving arm.
    pub commit: bool,
    /// The design (`None` when committing).
    pub design: Option<Design>,
}

impl PhasePlan {
    /// `T_l = sum_a T_l(a)`.
    pub fn len(&self) -> u64 {
        self.blocks
            .iter()
            .fold(0u64, |s, &(_, n)| s.saturating_add(n))
    }
    /// Whether the phase has no pulls (never: every support arm is pulled at least once).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The statistic released at the end of a phase (cached; never re-sampled).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseRelease {
    /// Phase number.
    pub phase: u32,
    /// Rounds (rewards) the release consumed: `T_l`.
    pub samples: u64,
    /// Dimension of the span.
    pub rank: usize,
    /// `c_l`.
    pub c: f64,
    /// Noise standard deviation of the mechanism (0 when non-private).
    pub sigma: f64,
    /// The L2 sensitivity the mechanism was calibrated for.
    pub calibrated_sensitivity: f64,
    /// The true L2 sensitivity of the released statistic under the actual `V_l`.
    pub true_sensitivity: f64,
    /// Realised zCDP loss `true_sensitivity^2 / (2 sigma^2)` (inf when non-private).
    pub zcdp_loss: f64,
    /// `g_l^2 = max_{b in A_l} b^T V_l^{-1} b`.
    pub g2: f64,
    /// The released estimate `theta~_l`, in R^d.
    pub theta: Vec<f64>,
    /// Survivors after elimination.
    pub survivors: Vec<usize>,
    /// The phase's information matrix `V_l` in the span basis (`rank x rank`, row-major):
    /// public (a function of the arms and the design). Absent from snapshots written before
    /// the report used it (the report then has no ellipsoid for that phase).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub information: Vec<f64>,
    /// The span basis (`d x rank`, row-major; orthonormal columns).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub basis: Vec<f64>,
    /// `c` with `Cov(V_l^{1/2} (theta~_l - theta^_l)) <= c I` (the placement's noise in the
    /// ellipsoid's metric): intermediate `sigma^2`, per-arm sums `sigma^2 / min_a T_l(a)`, output
    /// `sigma^2 lambda_max(V_l)`, non-private 0.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub noise_in_metric: f64,
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Current {
    plan: PhasePlan,
    /// Coordinates (in the span basis) of every active arm, aligned with `active`.
    coords: Vec<DVector<f64>>,
    basis: DMatrix<f64>,
}

/// The snapshot form of [`GopeConfig`]: every field, including the noise placement the registry
/// sets from the kind.
#[derive(Serialize, Deserialize)]
#[serde(remote = "GopeConfig", deny_unknown_fields)]
struct GopeConfigSnap {
    rho: f64,
    delta: f64,
    noise_calibration: NoiseCalibration,
    constants: GopeConstants,
    clip_rewards: bool,
    design_tolerance: f64,
    design_max_iterations: usize,
    design_solver: super::design::DesignSolver,
    phase_length: PhaseLength,
    placement: NoisePlacement,
    #[serde(default, skip_serializing_if = "is_simulation")]
    noise: NoiseKind,
    #[serde(default = "default_grid_bits", skip_serializing_if = "is_default_grid")]
    grid_bits: u32,
}

/// One run of a GOPE variant.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhasedElimination {
    #[serde(with = "GopeConfigSnap")]
    cfg: GopeConfig,
    arms: Vec<DVector<f64>>,
    active: Vec<usize>,
    phase: u32,
    current: Option<Current>,
    releases: Vec<PhaseRelease>,
    /// Seeded stream (simulation; the same snapshot bytes as the former `SimRng`) or the OS-keyed
    /// exact path (a marker in snapshots).
    noise: NoiseSource,
    gate: Gate,
    /// Position in the current phase: block index and the rewards of that block seen so far, and
    /// the sums of the finished blocks (the [`LinearPolicy`] interface).
    cursor: (usize, RewardSum),
    sums: Vec<RewardSum>,
}

impl PhasedElimination {
    /// A fresh run on `arms` (K >= 1 vectors of one dimension d >= 1).
    pub fn new(arms: &[DVector<f64>], cfg: GopeConfig, seed: u64) -> Result<Self> {
        cfg.validate()?;
        if arms.is_empty() {
            return Err(Error::param("arms", "[]", "at least one arm"));
        }
        let d = arms[0].len();
        if d == 0 {
            return Err(Error::param("d", 0, "an integer >= 1"));
        }
        if let Some(i) = arms.iter().position(|a| a.len() != d) {
            return Err(Error::param(
                format!("arms[{i}]"),
                format!("(dimension {})", arms[i].len()),
                format!("dimension {d} like arms[0]"),
            ));
        }
        if let Some(i) = arms.iter().position(|a| a.iter().any(|x| !x.is_finite())) {
            return Err(Error::param(
                format!("arms[{i}]"),
                format!("{:?}", arms[i].as_slice()),
                "finite coordinates",
            ));
        }
        crate::error::check::arms("K", arms.len())?;
        let boundary = cfg.boundary().unwrap_or_else(RewardBoundary::numeric);
        let noise = NoiseSource::new(cfg.noise, cfg.grid_bits, seed)?;
        Ok(PhasedElimination {
            cfg,
            arms: arms.to_vec(),
            active: (0..arms.len()).collect(),
            phase: 0,
            current: None,
            releases: vec![],
            noise,
            gate: Gate::new(boundary),
            cursor: (0, boundary.empty_sum()),
            sums: vec![],
        })
    }

    /// Surviving arms.
    pub fn active(&self) -> &[usize] {
        &self.active
    }

    /// Released statistics, one per completed phase.
    pub fn releases(&self) -> &[PhaseRelease] {
        &self.releases
    }

    /// The configuration.
    pub fn config(&self) -> &GopeConfig {
        &self.cfg
    }

    /// Plan the next phase (design, `c_l`, `T_l(a)`); depends only on public data and earlier
    /// releases. Calling it again before [`Self::finish_phase`] returns the same plan.
    ///
    /// # Errors
    /// The design solver failed (numerically singular information matrix).
    pub fn plan_phase(&mut self) -> Result<PhasePlan> {
        if let Some(c) = &self.current {
            return Ok(c.plan.clone());
        }
        let l = self.phase + 1;
        let beta = 0.5f64.powi(l as i32);
        let act: Vec<DVector<f64>> = self.active.iter().map(|&a| self.arms[a].clone()).collect();
        let span = Span::of(&act);
        let r = span.rank();
        if self.active.len() == 1 || r == 0 {
            let plan = PhasePlan {
                phase: l,
                beta,
                c: f64::INFINITY,
                rank: r,
                blocks: vec![(self.active[0], u64::MAX)],
                commit: true,
                design: None,
            };
            self.current = Some(Current {
                plan: plan.clone(),
                coords: span.coords,
                basis: span.basis,
            });
            return Ok(plan);
        }
        let design = g_optimal(&span.coords, self.cfg.design_options())?;
        let rho = if self.cfg.placement == NoisePlacement::None {
            f64::INFINITY
        } else {
            self.cfg.rho
        };
        let k = self.arms.len();
        let (np, mut pr) = phase_length(r, k, l, self.cfg.delta, rho, self.cfg.constants);
        if self.cfg.placement == NoisePlacement::PerArmSums
            && self.cfg.phase_length == PhaseLength::Own
        {
            pr = per_arm_sums_privacy_term(r, design.support.len(), k, l, self.cfg.delta, rho);
        }
        let c = np + pr;
        let blocks = design
            .support
            .iter()
            .map(|&i| {
                (
                    self.active[i],
                    (c * design.weights[i]).ceil().max(1.0) as u64,
                )
            })
            .collect();
        let plan = PhasePlan {
            phase: l,
            beta,
            c,
            rank: r,
            blocks,
            commit: false,
            design: Some(design),
        };
        self.current = Some(Current {
            plan: plan.clone(),
            coords: span.coords,
            basis: span.basis,
        });
        Ok(plan)
    }

    /// End the planned phase with the reward sum of each block (aligned with `plan.blocks`; each a
    /// [`RewardSum`] of exactly the block's length, built by a boundary inside this policy's):
    /// least squares, one private release, elimination.
    ///
    /// # Errors
    /// [`Error::Protocol`] without a planned phase, for a committed phase (it never ends), or if
    /// `sums` does not match the blocks; the policy is then unchanged.
    pub fn finish_phase(&mut self, sums: &[RewardSum]) -> Result<()> {
        let Some(planned) = &self.current else {
            return Err(Error::Protocol("finish_phase without plan_phase".into()));
        };
        if planned.plan.commit {
            return Err(Error::Protocol("a committed phase never ends".into()));
        }
        if sums.len() != planned.plan.blocks.len() {
            return Err(Error::Protocol(format!(
                "{} sums for a phase of {} blocks (one sum per block)",
                sums.len(),
                planned.plan.blocks.len()
            )));
        }
        let bd = self.gate.boundary();
        for (i, (s, &(arm, n))) in sums.iter().zip(&planned.plan.blocks).enumerate() {
            if s.n() != n || !s.is_within(&bd) {
                return Err(Error::Protocol(format!(
                    "block {i} (arm {arm}) needs a sum of {n} rewards inside [{}, {}]; got {} rewards in [{}, {}]",
                    bd.lo,
                    bd.hi,
                    s.n(),
                    s.range().0,
                    s.range().1
                )));
            }
        }
        let cur = self
            .current
            .take()
            .ok_or_else(|| Error::Protocol("no phase".into()))?;
        let r = cur.plan.rank;
        let pos = |arm: usize| self.active.iter().position(|&a| a == arm).expect("active");
        let mut v = DMatrix::<f64>::zeros(r, r);
        let mut b = DVector::<f64>::zeros(r);
        let support: Vec<&DVector<f64>> = cur
            .plan
            .blocks
            .iter()
            .map(|&(arm, _)| &cur.coords[pos(arm)])
            .collect();
        for ((&(_, n), s), x) in cur.plan.blocks.iter().zip(sums).zip(&support) {
            let s = s.sum();
            v.ger(n as f64, x, x, 1.0);
            b.axpy(s, x, 1.0);
        }
        let chol = v.clone().cholesky().ok_or_else(|| {
            Error::Config(format!(
                "phase {}: the information matrix of the design is numerically singular",
                self.phase
            ))
        })?;
        let mut theta = chol.solve(&b);
        let g2 = cur
            .coords
            .iter()
            .map(|x| x.dot(&chol.solve(x)))
            .fold(0.0, f64::max);
        let rho = self.cfg.rho;
        let deployment = self.noise.grade() == NoiseGrade::Deployment;
        let (sigma, cal_s, true_s) = match self.cfg.placement {
            _ if !self.cfg.is_private() => (0.0, 0.0, 0.0),
            placement if deployment => {
                let blocks: Vec<(RewardSum, DVector<f64>)> = sums
                    .iter()
                    .zip(&support)
                    .map(|(s, x)| (*s, (*x).clone()))
                    .collect();
                let (t, sigma, cal, true_s) =
                    self.deployment_release(placement, &cur, &v, &chol, g2, &blocks)?;
                theta = t;
                (sigma, cal, true_s)
            }
            NoisePlacement::Intermediate => {
                let lit = r as f64 / cur.plan.c;
                let s2 = match self.cfg.noise_calibration {
                    NoiseCalibration::Safe => lit.max(g2),
                    NoiseCalibration::Literal => lit,
                };
                let cal = 2.0 * s2.sqrt();
                let mech = GaussianMechanism::for_zcdp(cal, rho)?;
                let n = self.gaussian_vec(r, mech.sigma());
                // V^{-1/2} by the symmetric eigendecomposition of V.
                let eig = v.clone().symmetric_eigen();
                let mut inv_sqrt = eig.eigenvectors.clone();
                for (j, &lam) in eig.eigenvalues.iter().enumerate() {
                    inv_sqrt.column_mut(j).scale_mut(1.0 / lam.sqrt());
                }
                let inv_sqrt = &inv_sqrt * eig.eigenvectors.transpose();
                theta += &inv_sqrt * n;
                let true_s = 2.0
                    * support
                        .iter()
                        .map(|x| x.dot(&chol.solve(*x)).sqrt())
                        .fold(0.0, f64::max);
                (mech.sigma(), cal, true_s)
            }
            NoisePlacement::PerArmSums => {
                let mech = GaussianMechanism::for_zcdp(2.0, rho)?;
                let mut w = DVector::<f64>::zeros(r);
                for x in &support {
                    let xi: f64 = StandardNormal.sample(self.sim_rng());
                    w.axpy(mech.sigma() * xi, x, 1.0);
                }
                theta += chol.solve(&w);
                (mech.sigma(), 2.0, 2.0)
            }
            NoisePlacement::Output => {
                let s = 2.0
                    * support
                        .iter()
                        .map(|x| chol.solve(*x).norm())
                        .fold(0.0, f64::max);
                let mech = GaussianMechanism::for_zcdp(s, rho)?;
                theta += self.gaussian_vec(r, mech.sigma());
                (mech.sigma(), s, s)
            }
            NoisePlacement::None => unreachable!("not private"),
        };
        let zcdp_loss = if sigma > 0.0 {
            true_s * true_s / (2.0 * sigma * sigma)
        } else {
            f64::INFINITY
        };
        // Elimination on the released estimate (post-processing).
        let vals: Vec<f64> = cur.coords.iter().map(|x| x.dot(&theta)).collect();
        let best = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let survivors: Vec<usize> = self
            .active
            .iter()
            .zip(&vals)
            .filter(|&(_, &v)| best - v <= 2.0 * cur.plan.beta)
            .map(|(&a, _)| a)
            .collect();
        let released: Vec<f64> = (&cur.basis * &theta).iter().copied().collect();
        let noise_in_metric = match self.cfg.placement {
            _ if sigma == 0.0 => 0.0,
            NoisePlacement::Intermediate => sigma * sigma,
            NoisePlacement::PerArmSums => {
                let min_n = cur.plan.blocks.iter().map(|&(_, n)| n).min().unwrap_or(1);
                sigma * sigma / min_n.max(1) as f64
            }
            NoisePlacement::Output => {
                let lmax = v.clone().symmetric_eigen().eigenvalues.max();
                sigma * sigma * lmax
            }
            NoisePlacement::None => 0.0,
        };
        let information: Vec<f64> = (0..r)
            .flat_map(|i| (0..r).map(move |j| (i, j)))
            .map(|(i, j)| v[(i, j)])
            .collect();
        let d = cur.basis.nrows();
        let basis: Vec<f64> = (0..d)
            .flat_map(|i| (0..r).map(move |j| (i, j)))
            .map(|(i, j)| cur.basis[(i, j)])
            .collect();
        for &x in &released {
            crate::privacy::tap::record(crate::privacy::tap::Family::Gaussian, x);
        }
        self.releases.push(PhaseRelease {
            phase: cur.plan.phase,
            samples: cur.plan.len(),
            rank: r,
            c: cur.plan.c,
            sigma,
            calibrated_sensitivity: cal_s,
            true_sensitivity: true_s,
            zcdp_loss,
            g2,
            theta: released,
            survivors: survivors.clone(),
            information,
            basis,
            noise_in_metric,
        });
        self.active = survivors;
        self.phase = cur.plan.phase;
        Ok(())
    }

    fn gaussian_vec(&mut self, r: usize, sigma: f64) -> DVector<f64> {
        if sigma == 0.0 {
            return DVector::zeros(r);
        }
        let rng = self.sim_rng();
        DVector::from_fn(r, |_, _| {
            let z: f64 = StandardNormal.sample(rng);
            sigma * z
        })
    }

    /// The seeded generator of the simulation path (only called on that path).
    fn sim_rng(&mut self) -> &mut SimRng {
        self.noise
            .simulation_rng()
            .expect("the float mechanisms run on the simulation path only")
    }

    /// The deployment path of a phase release (`docs/privacy.md`, "Vector Gaussian family"):
    /// the placement's statistic as `sum_b S_b w_b` with public weights, released through
    /// [`NoiseSource::gaussian_linear`] at least at the simulation path's calibrated sensitivity.
    /// Returns `(theta~, sigma, calibrated sensitivity, true sensitivity)` at the statistic's
    /// scale.
    fn deployment_release(
        &mut self,
        placement: NoisePlacement,
        cur: &Current,
        v: &DMatrix<f64>,
        chol: &nalgebra::Cholesky<f64, nalgebra::Dyn>,
        g2: f64,
        blocks: &[(RewardSum, DVector<f64>)],
    ) -> Result<(DVector<f64>, f64, f64, f64)> {
        let r = cur.plan.rank;
        let rho = self.cfg.rho;
        let bd = self.gate.boundary();
        let weighted = |w: &dyn Fn(&DVector<f64>) -> DVector<f64>| -> Vec<(RewardSum, Vec<f64>)> {
            blocks
                .iter()
                .map(|(s, x)| (*s, w(x).iter().copied().collect()))
                .collect()
        };
        match placement {
            NoisePlacement::Intermediate => {
                // phi = V^{-1/2} b = sum_b S_b V^{-1/2} x_b; theta~ = V^{-1/2} phi~.
                let lit = r as f64 / cur.plan.c;
                let s2 = match self.cfg.noise_calibration {
                    NoiseCalibration::Safe => lit.max(g2),
                    NoiseCalibration::Literal => lit,
                };
                let cal = 2.0 * s2.sqrt();
                let eig = v.clone().symmetric_eigen();
                let mut inv_sqrt = eig.eigenvectors.clone();
                for (j, &lam) in eig.eigenvalues.iter().enumerate() {
                    inv_sqrt.column_mut(j).scale_mut(1.0 / lam.sqrt());
                }
                let inv_sqrt = &inv_sqrt * eig.eigenvectors.transpose();
                let b = weighted(&|x| &inv_sqrt * x);
                let (phi, sigma) = self.noise.gaussian_linear(rho, cal, &b, &bd)?;
                let true_s = 2.0
                    * blocks
                        .iter()
                        .map(|(_, x)| x.dot(&chol.solve(x)).sqrt())
                        .fold(0.0, f64::max);
                Ok((&inv_sqrt * DVector::from_vec(phi), sigma, cal, true_s))
            }
            NoisePlacement::PerArmSums => {
                // The vector of per-arm sums (weights e_b); theta~ = V^{-1} sum_b s~_b x_b.
                let m = blocks.len();
                let b: Vec<(RewardSum, Vec<f64>)> = blocks
                    .iter()
                    .enumerate()
                    .map(|(i, (s, _))| {
                        let mut e = vec![0.0; m];
                        e[i] = 1.0;
                        (*s, e)
                    })
                    .collect();
                let (noisy, sigma) = self.noise.gaussian_linear(rho, 2.0, &b, &bd)?;
                let mut w = DVector::<f64>::zeros(r);
                for ((_, x), s) in blocks.iter().zip(&noisy) {
                    w.axpy(*s, x, 1.0);
                }
                Ok((chol.solve(&w), sigma, 2.0, 2.0))
            }
            NoisePlacement::Output => {
                // theta^ = sum_b S_b V^{-1} x_b.
                let s = 2.0
                    * blocks
                        .iter()
                        .map(|(_, x)| chol.solve(x).norm())
                        .fold(0.0, f64::max);
                let b = weighted(&|x| chol.solve(x));
                let (theta, sigma) = self.noise.gaussian_linear(rho, s, &b, &bd)?;
                Ok((DVector::from_vec(theta), sigma, s, s))
            }
            NoisePlacement::None => Err(Error::Config("no noise placement".into())),
        }
    }
}

impl crate::config::Config for GopeConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        GopeConfig::validate(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spec §3.2 reference values (d = 3, K = 10, delta = 1e-3), to the printed precision.
    #[test]
    fn phase_length_reference_values() {
        let np = [1083.8, 4757.1, 20093.2];
        let pr = [
            (1.0, [101.1, 209.9, 429.2]),
            (0.1, [319.6, 663.7, 1357.1]),
            (0.01, [1010.7, 2098.8, 4291.6]),
        ];
        for l in 1..=3u32 {
            let (n, _) = phase_length(3, 10, l, 1e-3, f64::INFINITY, GopeConstants::PaperLimit);
            assert!((n - np[l as usize - 1]).abs() < 0.05, "l={l}: {n}");
            for (rho, want) in pr {
                let (n2, p) = phase_length(3, 10, l, 1e-3, rho, GopeConstants::PaperLimit);
                assert_eq!(n2, n);
                assert!(
                    (p - want[l as usize - 1]).abs() < 0.05,
                    "l={l} rho={rho}: {p}"
                );
            }
        }
    }

    /// Spec §3.2 / T8: at most 8 phases fit in T = 1e7; c_l decreases in rho towards the limit.
    #[test]
    fn schedule_fits_eight_phases() {
        for rho in [0.01, 0.1, 1.0, f64::INFINITY] {
            let cum = |n: u32| -> f64 {
                (1..=n)
                    .map(|l| {
                        let (a, b) = phase_length(3, 10, l, 1e-3, rho, GopeConstants::PaperLimit);
                        a + b
                    })
                    .sum()
            };
            assert!(cum(7) > 7.5e6 && cum(7) < 7.9e6, "rho={rho}: {}", cum(7));
            assert!(cum(8) > 1e7);
        }
        let c = |rho| phase_length(3, 10, 2, 1e-3, rho, GopeConstants::PaperLimit).1;
        assert!(c(0.01) > c(0.1) && c(0.1) > c(1.0) && c(1.0) > c(100.0) && c(1e8) < 1.0);
    }

    #[test]
    fn bad_config() {
        let mut c = GopeConfig::new(NoisePlacement::Intermediate, 1.0);
        c.delta = 1.0;
        assert!(c.validate().unwrap_err().to_string().contains("delta = 1"));
        c.delta = 0.0;
        assert!(c.validate().is_err());
        c.delta = 0.1;
        c.rho = -1.0;
        assert!(c.validate().unwrap_err().to_string().contains("rho = -1"));
        let mut g = GopeConfig::gope();
        g.rho = 1.0;
        assert!(g.validate().is_err());
    }
}

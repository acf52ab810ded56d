//! Linear contextual bandits with changing action sets (spec zcdp §1.3): the setting's traits, its
//! environments, its algorithms and its run loop.
//!
//! # Layout
//! * this file: the traits [`ContextualEnvConfig`] / [`ContextualEnvironment`] and
//!   [`ContextualPolicyConfig`] / [`ContextualPolicy`], and [`ActionSet`];
//! * one file per environment: `gaussian.rs` (`contextual_gaussian`, the paper's contexts),
//!   `file.rs` (`contextual_file`, feature files);
//! * one file per paper algorithm family: `adac_oful.rs` (OFUL, RS-OFUL, AdaC-OFUL);
//! * `sim.rs`: the common-random-numbers run loop ([`simulate_contextual`]) and the experiment
//!   cells ([`ContextualCell`], [`ContextualGroup`]).
//!
//! # Adding an algorithm or an environment
//! One file here implementing [`ContextualPolicyConfig`] + [`ContextualPolicy`] (or
//! [`ContextualEnvConfig`] + [`ContextualEnvironment`]), a `mod`/`pub use` line above, one entry in
//! `crate::registry` (feature `experiment`).
//!
//! # The setting
//! Every round `t` the environment reveals a public decision set `A_t` of `k_t` actions in `R^d`
//! (an [`ActionSet`]); the policy picks one, and observes `r_t = <theta*, a_t> + eta_t`. The metric
//! is the pseudo-regret `sum_t max_{a in A_t} <theta*, a - a_t>`. Contexts are public, rewards are
//! private (spec §1.3, Remark 4).
//!
//! # Common random numbers
//! [`simulate_contextual`] draws each round's decision set and reward noise `eta_t` **once** and
//! drives any number of policies on it (the reward of action `a` in round `t` is
//! `<theta*, a> + eta_t` whichever policy plays it). Private and non-private policies therefore face
//! identical data, and generating the contexts (the dominant cost) is shared. Each policy keeps
//! its own noise stream, keyed by its label, so its trajectory does not depend on which other
//! policies are simulated with it.
//!
//! # Hot path
//! Contexts live in one preallocated row-major buffer (`k` rows of `d` features); each round is
//! also given by coordinate, in an [`ActionLanes`] buffer shared by all policies (kept by the
//! environment, [`ContextualEnvironment::lanes`], or transposed by the run loop), so the OFUL
//! family computes its `k` indices by coordinate (vectorised over actions) and takes square
//! roots only for actions that may win. When the environment is linear, the lanes carry a
//! [`LaneReference`] along `theta*` that settles most decisions of a late OFUL-family policy
//! without looking at the actions, and a set of such policies is driven together by the
//! family's batched path (see [`simulate_contextual`]). Nothing in the step loop allocates.

mod adac_oful;
mod file;
mod gaussian;
mod sim;

pub use adac_oful::{
    ADAC_OFUL, MAX_DIM, OFUL, OFUL_BOUNDARY, OFUL_MAX_ACTION_NORM, OfulConfig, OfulKind,
    OfulPolicy, PrivacyMode, RS_OFUL, RadiusMode, SquareOps, chi2_tail, lambda_min_lower_bound,
    restore_oful,
};
pub use file::{CONTEXTUAL_FILE, ContextOrder, ContextualFile, ContextualFileConfig, FeatureTable};
pub use gaussian::{CONTEXTUAL_GAUSSIAN, ContextualGaussian, ContextualGaussianConfig};
pub use sim::{ContextualCell, ContextualGroup, simulate_contextual};

use crate::error::Result;
use crate::privacy::{PrivacyGuarantee, RewardBoundary};
use std::cell::Cell;
use std::fmt::Debug;

/// One round's public decision set: `k` actions of dimension `d`, row-major (`features[i*d + j]`
/// is coordinate `j` of action `i`).
#[derive(Debug, Clone, Copy)]
pub struct ActionSet<'a> {
    /// Dimension.
    pub d: usize,
    /// Number of actions (>= 1).
    pub k: usize,
    /// `k * d` features.
    pub features: &'a [f64],
}

impl<'a> ActionSet<'a> {
    /// Action `i` as a slice of length `d`.
    #[inline]
    pub fn action(&self, i: usize) -> &'a [f64] {
        &self.features[i * self.d..(i + 1) * self.d]
    }
}

/// One round's decision set by coordinate ("lanes"), the transpose of an [`ActionSet`], with
/// every action's squared norm. Actions come in groups of [`LANE_GROUP`]: group `g` is the
/// `(d + 1) * LANE_GROUP` numbers `groups[g * (d + 1) * LANE_GROUP..]`, coordinate `j` of its
/// actions at `j * LANE_GROUP + l` (action `g * LANE_GROUP + l`) and their squared norms
/// ([`norm2`]) at `d * LANE_GROUP + l`. Padding lanes (actions `k..`) have NaN coordinates and
/// squared norm 0, so they can never look like the best action. [`simulate_contextual`] builds
/// it once per round ([`ActionLanes::transpose`]) and shares it among all policies, whose
/// indices then vectorise over actions ([`ContextualPolicy::choose_lanes`]).
#[derive(Debug, Clone)]
pub struct ActionLanes<'a> {
    /// Dimension.
    pub d: usize,
    /// Number of actions.
    pub k: usize,
    /// `ceil(k / LANE_GROUP)` groups of `(d + 1) * LANE_GROUP` numbers.
    pub groups: &'a [f64],
    /// The values `r_i` of the actions along the reference direction (empty without one).
    pub values: &'a [f64],
    /// The round's values along a direction shared by all policies
    /// ([`ActionLanes::transpose_with_reference`]); `None`: not computed.
    pub reference: Option<LaneReference<'a>>,
}

/// The decision set seen along one direction `theta_ref` (the simulator uses the environment's
/// `theta*`), computed once per round and shared by all policies: with `r_i` the computed
/// `sum_j theta_ref[j] a_i[j]` (summed in order: from `0.0` in
/// [`ActionLanes::transpose_with_reference`], from `-0.0` as the Gaussian environment's means;
/// the proofs need only a computed inner product, within `d eps ||theta_ref|| ||a_i||` of the
/// exact one) and `D_i = fl(r_best - r_i)`, `best` is the first
/// maximiser of `r_i`, `gap = r_best - max_{i != best} r_i` (`inf` for one action) and
/// `max_norm = max_i ||a_i||` (the square root of the largest squared norm of
/// [`ActionLanes`]); on demand, once per round ([`ActionLanes::ratio2`]), the slope ratio
/// `min_{i != best} fl(D_i^2) / ||a_best - a_i||^2`.
///
/// A policy whose own index is within a known distance of `r` can then tell from `gap` and
/// `ratio2` alone that `best` is its argmax (the OFUL family: [`OfulPolicy`]); any direction
/// keeps every decision exact, a good one makes the test pass often. A non-finite value
/// anywhere, or `||theta_ref||^2 max_i ||a_i||^2 >= 1e300` (values that could overflow),
/// makes `gap` and `ratio2` NaN, which passes no test.
#[derive(Debug, Clone)]
pub struct LaneReference<'a> {
    /// `theta_ref` (length `d`).
    pub theta: &'a [f64],
    /// First maximiser of `r_i`.
    pub best: usize,
    /// `r_best - max_{i != best} r_i`, or NaN.
    pub gap: f64,
    /// `max_i ||a_i||`.
    pub max_norm: f64,
    /// `r_best`.
    top: f64,
    /// Whether the slope ratio can be computed without overflow (finite `gap`, squared norms
    /// below `1e300`).
    slope_ok: bool,
    /// `ratio2` once computed ([`ActionLanes::ratio2`]; negative: not asked yet this round,
    /// as a ratio of squares is never negative). A plain `f64`, not an `Option`, keeps the
    /// lanes small enough to be moved without a `memcpy` call.
    ratio2: Cell<f64>,
    /// Each action's own ratio `fl(D_i^2) / ||a_best - a_i||^2`, written with `ratio2`
    /// ([`ActionLanes::ratios`]).
    ratios: &'a [Cell<f64>],
}

/// Actions per group of [`ActionLanes`].
pub const LANE_GROUP: usize = 4;

impl<'a> ActionLanes<'a> {
    /// Transpose `actions` into `buf` and compute the squared norms (`buf` is resized and
    /// reused across rounds: no allocation once it has grown to its size).
    pub fn transpose(actions: &ActionSet<'_>, buf: &'a mut Vec<f64>) -> ActionLanes<'a> {
        let (lanes, _) = Self::fill(actions, buf, 0);
        ActionLanes {
            d: actions.d,
            k: actions.features.len() / actions.d.max(1),
            groups: lanes,
            values: &[],
            reference: None,
        }
    }

    /// [`Self::transpose`] with the round's [`LaneReference`] along `theta` (length `d`;
    /// otherwise the lanes come without one). The values `r_i` are kept after the lane groups
    /// in `buf`.
    pub fn transpose_with_reference(
        actions: &ActionSet<'_>,
        buf: &'a mut Vec<f64>,
        theta: &'a [f64],
    ) -> ActionLanes<'a> {
        let d = actions.d;
        let k = actions.features.len() / d.max(1);
        if theta.len() != d || d == 0 || k == 0 {
            return Self::transpose(actions, buf);
        }
        let (lanes, rest) = Self::fill(actions, buf, 2 * k);
        let (values, ratios) = rest.split_at_mut(k);
        for (v, row) in values.iter_mut().zip(actions.features.chunks_exact(d)) {
            let mut s = 0.0;
            for (&t, &x) in theta.iter().zip(row) {
                s += t * x;
            }
            *v = s;
        }
        let scan = scan_reference(d, lanes, values, theta);
        let ratios = Cell::from_mut(ratios).as_slice_of_cells();
        ActionLanes::with_scan(d, lanes, values, theta, scan, ratios)
    }

    /// Lanes with their reference from parts an environment keeps itself
    /// ([`ContextualEnvironment::lanes`]): lane groups as [`Self::transpose`] fills them
    /// ([`fill_lanes`]), the values `r_i` (any computed inner products `<theta, a_i>`, summed in
    /// order), the [`ReferenceScan`] of [`scan_reference`] and room for one ratio per action
    /// (`ratios`, as long as `values`).
    pub fn with_scan(
        d: usize,
        groups: &'a [f64],
        values: &'a [f64],
        theta: &'a [f64],
        scan: ReferenceScan,
        ratios: &'a [Cell<f64>],
    ) -> ActionLanes<'a> {
        assert_eq!(ratios.len(), values.len(), "one ratio per action");
        ActionLanes {
            d,
            k: values.len(),
            groups,
            values,
            reference: Some(LaneReference {
                theta,
                best: scan.best,
                gap: scan.gap,
                max_norm: scan.max_norm,
                top: scan.top,
                slope_ok: scan.slope_ok,
                ratio2: Cell::new(-1.0),
                ratios,
            }),
        }
    }

    /// Size `buf` for the lane groups and `extra` numbers after them, fill the groups and
    /// return both parts.
    fn fill<'b>(
        actions: &ActionSet<'_>,
        buf: &'b mut Vec<f64>,
        extra: usize,
    ) -> (&'b [f64], &'b mut [f64]) {
        let d = actions.d.max(1);
        let k = actions.features.len() / d;
        let size = (d + 1) * LANE_GROUP;
        let groups = k.div_ceil(LANE_GROUP);
        if buf.len() != groups * size + extra {
            buf.clear();
            buf.resize(groups * size + extra, 0.0);
        }
        let (lanes, rest) = buf.split_at_mut(groups * size);
        fill_lanes(d, actions.features, lanes);
        (lanes, rest)
    }

    /// The reference's slope ratio `ratio2` ([`LaneReference`]; NaN without a reference):
    /// `min_{i != best} fl(D_i^2) / ||a_best - a_i||^2` with `D_i = fl(r_best - r_i)` and the
    /// squared distance summed in order from `0.0` (`inf` for one action; a `0/0` term, an
    /// exact tie with `best`, counts as nothing, and `gap` is then 0; NaN for non-finite input
    /// or when values or norms are too large for the squares to stay finite). Computed on the
    /// first call and cached: the policies that need it share one computation per round.
    #[inline]
    pub fn ratio2(&self) -> f64 {
        let Some(r) = &self.reference else {
            return f64::NAN;
        };
        let x = r.ratio2.get();
        if x >= 0.0 || x.is_nan() {
            return x;
        }
        let x = self.compute_ratio2(r);
        r.ratio2.set(x);
        x
    }

    /// Each action's own slope ratio `fl(D_i^2) / ||a_best - a_i||^2` (NaN for `best` and for
    /// exact ties with it), as computed for [`Self::ratio2`] (their minimum); only meaningful
    /// once `ratio2()` has returned a number (not NaN). Empty without a reference.
    #[inline]
    pub fn ratios(&self) -> &[Cell<f64>] {
        self.reference.as_ref().map_or(&[], |r| r.ratios)
    }

    #[inline(never)]
    fn compute_ratio2(&self, r: &LaneReference<'_>) -> f64 {
        if !r.slope_ok {
            return f64::NAN;
        }
        if self.k == 1 {
            r.ratios[0].set(f64::NAN);
            return f64::INFINITY;
        }
        let (g, v, q, best, top) = (self.groups, self.values, r.ratios, r.best, r.top);
        // A literal `d` per arm: the inlined scan's loops get constant bounds.
        match self.d {
            1 => slope_scan(1, g, v, q, best, top),
            2 => slope_scan(2, g, v, q, best, top),
            3 => slope_scan(3, g, v, q, best, top),
            4 => slope_scan(4, g, v, q, best, top),
            5 => slope_scan(5, g, v, q, best, top),
            d => slope_scan(d, g, v, q, best, top),
        }
    }
}

/// The first pass of a [`LaneReference`] ([`scan_reference`]).
#[derive(Debug, Clone, Copy)]
pub struct ReferenceScan {
    best: usize,
    gap: f64,
    max_norm: f64,
    top: f64,
    slope_ok: bool,
}

/// The scan of a [`LaneReference`] over lane groups `groups` (as [`fill_lanes`] fills them)
/// of `values.len()` actions with values `values` along `theta` (length `d`): each action's
/// value and squared norm through a [`ReferenceScanner`], in index order.
pub fn scan_reference(d: usize, groups: &[f64], values: &[f64], theta: &[f64]) -> ReferenceScan {
    const G: usize = LANE_GROUP;
    let size = (d + 1) * G;
    let mut scanner = ReferenceScanner::new();
    for (i, &v) in values.iter().enumerate() {
        scanner.push(i, v, groups[(i / G) * size + d * G + i % G]);
    }
    scanner.finish(d, theta, values.len())
}

/// Fill `buf` (at least `ceil(k / LANE_GROUP) (d + 1) LANE_GROUP` numbers) with the lane
/// groups of the `k` rows of `features` (dimension `d`), as [`ActionLanes::transpose`] does.
pub fn fill_lanes(d: usize, features: &[f64], buf: &mut [f64]) {
    macro_rules! dispatch {
        ($($n:literal)*) => {
            match d {
                $($n => fill_groups::<$n>(features, buf),)*
                _ => fill_groups_dyn(d, features, buf),
            }
        };
    }
    dispatch!(1 2 3 4 5 6 7 8);
}

/// The running part of a [`ReferenceScan`]: the actions pushed in index order with their value
/// `r_i` and squared norm, keeping, branch-free (which action is best is random: a branch on
/// it would be mispredicted), the first maximiser of the values, its value and the largest
/// other value, and the largest and the total squared norm. [`scan_reference`] and the
/// environments that keep their lanes ([`ContextualEnvironment::lanes`]) scan with it.
#[derive(Debug, Clone, Copy)]
pub struct ReferenceScanner {
    best: usize,
    top: f64,
    second: f64,
    max_n2: f64,
    total_n2: f64,
}

impl Default for ReferenceScanner {
    fn default() -> Self {
        Self::new()
    }
}

impl ReferenceScanner {
    /// No action yet.
    pub fn new() -> Self {
        ReferenceScanner {
            best: 0,
            top: f64::NEG_INFINITY,
            second: f64::NEG_INFINITY,
            max_n2: 0.0,
            total_n2: 0.0,
        }
    }

    /// Action `i` (the next index) with value `v` and squared norm `n2`.
    #[inline(always)]
    pub fn push(&mut self, i: usize, v: f64, n2: f64) {
        let better = v > self.top;
        // The old top becomes a candidate for second place when it is beaten.
        let lose = if better { self.top } else { v };
        self.second = if lose > self.second {
            lose
        } else {
            self.second
        };
        self.best = if better { i } else { self.best };
        self.top = if better { v } else { self.top };
        self.max_n2 = if n2 > self.max_n2 { n2 } else { self.max_n2 };
        self.total_n2 += n2;
    }

    /// The scan of the `k` actions pushed, of dimension `d`, along `theta`.
    ///
    /// Non-finite input is detected without a test per action: a finite sum of the squared
    /// norms means finite coordinates, and with `||theta||^2 max ||a||^2 < 1e300` no partial
    /// sum of a value can overflow (each is at most about `1e150`); otherwise `gap` is NaN.
    #[inline(always)]
    pub fn finish(self, d: usize, theta: &[f64], k: usize) -> ReferenceScan {
        let mut th2 = 0.0f64;
        for &t in theta {
            th2 += t * t;
        }
        let finite = self.total_n2.is_finite() && th2.is_finite() && th2 * self.max_n2 < 1e300;
        // The largest norm: the square root is monotone and correctly rounded, so this is the
        // largest of the norms `sqrt(n2_i)`.
        let max_norm = self.max_n2.sqrt();
        let gap = if !finite {
            f64::NAN
        } else if k == 1 {
            f64::INFINITY
        } else {
            self.top - self.second
        };
        // `D_i^2 <= (2 max|r|)^2 <~ 4e300` and `||a_best - a_i||^2 <= 4 d max ||a||^2` stay
        // finite below these limits (no overflow check per action in the slope pass).
        let slope_ok = finite && self.max_n2 < 1e300 && d <= 4096;
        ReferenceScan {
            best: self.best,
            gap,
            max_norm,
            top: self.top,
            slope_ok,
        }
    }
}

/// `ratio2` of [`LaneReference`] (`k = values.len() >= 2`, finite input within the limits of
/// [`ReferenceScanner::finish`]): `D_i = top - values[i]` and the squared distances to `best`
/// from the lane groups. `best` itself gives `0 / 0 = NaN`, passed over like an exact tie
/// (`q < ratio2` is false for NaN).
#[inline(always)]
fn slope_scan(
    d: usize,
    groups: &[f64],
    values: &[f64],
    ratios: &[Cell<f64>],
    best: usize,
    top: f64,
) -> f64 {
    const G: usize = LANE_GROUP;
    let size = (d + 1) * G;
    let (bg, bl) = (best / G, best % G);
    let best_group = &groups[bg * size..(bg + 1) * size];
    let mut ratio2 = f64::INFINITY;
    for ((group, vals), qs) in groups
        .chunks_exact(size)
        .zip(values.chunks(G))
        .zip(ratios.chunks(G))
    {
        let mut dn2 = [0.0f64; G];
        for j in 0..d {
            let ab = best_group[j * G + bl];
            for l in 0..G {
                let df = ab - group[j * G + l];
                dn2[l] += df * df;
            }
        }
        for ((&v, &dn2), slot) in vals.iter().zip(&dn2).zip(qs) {
            let dd = top - v;
            let q = (dd * dd) / dn2;
            slot.set(q);
            ratio2 = if q < ratio2 { q } else { ratio2 };
        }
    }
    ratio2
}

/// [`ActionLanes::transpose`] for dimension `D` (constant loop bounds): the rows of `features`
/// into as many lane groups of `buf` as they fill (the OFUL argmax also uses it on a stack
/// buffer, one block of actions at a time).
#[inline]
pub(crate) fn fill_groups<const D: usize>(features: &[f64], buf: &mut [f64]) {
    const G: usize = LANE_GROUP;
    for (group, rows) in buf
        .chunks_exact_mut((D + 1) * G)
        .zip(features.chunks(D * G))
    {
        let group = &mut group[..(D + 1) * G];
        for l in 0..G {
            match rows.get(l * D..(l + 1) * D) {
                Some(row) => {
                    let mut n2 = 0.0;
                    for j in 0..D {
                        group[j * G + l] = row[j];
                        n2 += row[j] * row[j];
                    }
                    group[D * G + l] = n2;
                }
                None => {
                    for j in 0..D {
                        group[j * G + l] = f64::NAN;
                    }
                    group[D * G + l] = 0.0;
                }
            }
        }
    }
}

/// [`fill_groups`] for any dimension.
fn fill_groups_dyn(d: usize, features: &[f64], buf: &mut [f64]) {
    const G: usize = LANE_GROUP;
    for (group, rows) in buf
        .chunks_exact_mut((d + 1) * G)
        .zip(features.chunks(d * G))
    {
        for l in 0..G {
            match rows.get(l * d..(l + 1) * d) {
                Some(row) => {
                    for (j, &x) in row.iter().enumerate() {
                        group[j * G + l] = x;
                    }
                    group[d * G + l] = norm2(row);
                }
                None => {
                    for j in 0..d {
                        group[j * G + l] = f64::NAN;
                    }
                    group[d * G + l] = 0.0;
                }
            }
        }
    }
}

/// The Euclidean norm `sqrt(sum x_j^2)`, summed in order from `0.0` (the square root of
/// [`norm2`]).
#[inline]
pub fn norm(x: &[f64]) -> f64 {
    norm2(x).sqrt()
}

/// The squared Euclidean norm `sum x_j^2`, summed in order from `0.0` (the squared norms of
/// [`ActionLanes`], which [`ActionLanes::transpose`] computes the same way).
#[inline]
pub fn norm2(x: &[f64]) -> f64 {
    let mut n2 = 0.0;
    for &v in x {
        n2 += v * v;
    }
    n2
}

/// A contextual environment for one run.
pub trait ContextualEnvironment: Send + Debug {
    /// Dimension `d`.
    fn dim(&self) -> usize;
    /// Advance to round `t` (0-based): draw the decision set and the round's reward noise.
    fn next_round(&mut self, t: u64);
    /// The current decision set.
    fn actions(&self) -> ActionSet<'_>;
    /// `<theta*, a_i>` for the current decision set.
    fn means(&self) -> &[f64];
    /// `max_i <theta*, a_i>`.
    fn best_mean(&self) -> f64;
    /// The reward noise `eta_t` of the current round (shared by all actions and policies).
    fn noise(&self) -> f64;
    /// A direction along which the means grow (`theta*` of a linear environment), if any: the
    /// run loop shares the decision set's values along it with the policies
    /// ([`LaneReference`]), which makes their argmax cheaper; decisions never depend on it.
    fn reference_theta(&self) -> Option<&[f64]> {
        None
    }
    /// The current decision set as lanes with its [`LaneReference`] along
    /// [`Self::reference_theta`], if the environment keeps them itself (built while it draws
    /// the round, which saves the run loop a transpose and a pass): they must be what
    /// [`ActionLanes::transpose_with_reference`] gives for [`Self::actions`] and
    /// `reference_theta()`, except that the values may be any computed inner products
    /// `<theta, a_i>` summed in order (for example the means). `None` (the default): the run
    /// loop builds them.
    fn lanes(&self) -> Option<ActionLanes<'_>> {
        None
    }
    /// Reward of action `i` in the current round: `means()[i] + noise()`.
    #[inline]
    fn reward(&self, i: usize) -> f64 {
        self.means()[i] + self.noise()
    }
}

/// A validated contextual environment configuration; builds one environment per run.
pub trait ContextualEnvConfig: Send + Sync + Debug {
    /// Registry kind.
    fn kind(&self) -> &'static str;
    /// Dimension `d`.
    fn dim(&self) -> usize;
    /// Largest decision-set size.
    fn max_actions(&self) -> usize;
    /// Draw the problem instance (e.g. theta*) from the master seed; called once by the planner.
    fn instantiate(&mut self, master_seed: u64) -> Result<()>;
    /// The instance's theta*.
    fn theta(&self) -> &[f64];
    /// Build the environment of run `run` (streams derived from `master_seed`).
    fn build(&self, master_seed: u64, run: u64) -> Result<Box<dyn ContextualEnvironment>>;
    /// Upper bound on `||a||_2` over all actions, if known (`None`: unbounded, e.g. Gaussian).
    fn action_norm_bound(&self) -> Option<f64>;
    /// Facts for the manifest.
    fn describe(&self) -> serde_json::Value;
}

/// A contextual policy for one run.
pub trait ContextualPolicy: Send + Debug {
    /// The privacy claim.
    fn guarantee(&self) -> PrivacyGuarantee;
    /// The dimension `d` of the actions this policy chooses among.
    fn dim(&self) -> usize;
    /// The largest action norm `||a||_2` this policy accepts (its documented bound, or the
    /// numeric bound past which its statistics lose precision): the online session refuses a
    /// longer action before the policy sees it.
    fn max_action_norm(&self) -> f64;
    /// The boundary every reward passes ([`crate::protocol`]).
    fn boundary(&self) -> RewardBoundary;
    /// Choose an action of the decision set; `t` = rounds already played. Opens a one-round
    /// commitment (replacing a round that was never observed: its context is gone).
    fn choose(&mut self, t: u64, actions: &ActionSet<'_>) -> usize;
    /// [`Self::choose`] with the same decision set also given by coordinate (`lanes` is
    /// `actions` transposed, [`ActionLanes::transpose`]): the same action and the same state
    /// change, possibly faster. The default calls [`Self::choose`].
    fn choose_lanes(&mut self, t: u64, actions: &ActionSet<'_>, lanes: &ActionLanes<'_>) -> usize {
        let _ = lanes;
        self.choose(t, actions)
    }
    /// One simulated round: [`Self::choose_lanes`], then [`Self::observe`] of
    /// `means[i] + noise` for the chosen `i`, which is returned (the same action and the same
    /// state change; policies may fuse the two calls). The run loop uses it.
    ///
    /// # Errors
    /// As [`Self::observe`]; the round stays open.
    fn play(
        &mut self,
        t: u64,
        actions: &ActionSet<'_>,
        lanes: &ActionLanes<'_>,
        means: &[f64],
        noise: f64,
    ) -> Result<usize> {
        let i = self.choose_lanes(t, actions, lanes);
        let m = *means.get(i).ok_or_else(|| {
            crate::Error::Protocol(format!(
                "chose action {i} of a round with {} means",
                means.len()
            ))
        })?;
        self.observe(actions, i, m + noise)?;
        Ok(i)
    }
    /// Observe the reward of the chosen action `arm` of `actions` ([`crate::protocol`]).
    ///
    /// # Errors
    /// [`crate::Error::Protocol`] for another action than the chosen one, no open round, or an
    /// action outside `actions`; a reward the boundary refuses. The policy is then unchanged.
    fn observe(&mut self, actions: &ActionSet<'_>, arm: usize, reward: f64) -> Result<()>;
    /// The policy as [`std::any::Any`], for a run loop with a batched path for its family
    /// (the OFUL family: [`simulate_contextual`]); `None` (the default): always driven one
    /// [`Self::play`] call at a time.
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }
    /// Save the complete state (episode in progress, Gram matrix, released statistics,
    /// generators) for a bit-identical restore ([`crate::snapshot`]; restore with
    /// `registry::restore_contextual`). Sensitive data: it holds the unreleased episode
    /// statistic and the noise generator's state.
    ///
    /// # Errors
    /// [`crate::error::Error::Snapshot`] if the state cannot be captured; the default refuses.
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        Err(crate::snapshot::unsupported(&format!("{self:?}")))
    }
}

/// A validated contextual policy configuration (one cell).
pub trait ContextualPolicyConfig: Send + Sync + Debug {
    /// Registry kind.
    fn kind(&self) -> &'static str;
    /// Numeric parameters identifying the cell.
    fn params(&self) -> Vec<(&'static str, f64)>;
    /// The privacy claim.
    fn guarantee(&self) -> PrivacyGuarantee;
    /// Build for dimension `d` and horizon `horizon`; `seed` keys the policy's streams.
    fn build(&self, d: usize, horizon: u64, seed: u64) -> Result<Box<dyn ContextualPolicy>>;
    /// Label `kind(p=v,...)`.
    fn label(&self) -> String {
        crate::config::label(self.kind(), &self.params())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SimRng;
    use rand::{RngExt, SeedableRng};

    /// `transpose_with_reference` against a direct computation: the first maximiser of the values, the
    /// gap to the best other value, the largest norm; NaN gaps for non-finite input.
    #[test]
    fn reference_matches_a_direct_scan() {
        let mut rng = SimRng::seed_from_u64(7);
        let mut buf = Vec::new();
        for round in 0..5000 {
            let d = rng.random_range(1..=7usize);
            let k = rng.random_range(1..=40usize);
            let mut f: Vec<f64> = (0..k * d).map(|_| rng.random_range(-2.0..2.0)).collect();
            if round % 5 == 1 && k > 1 {
                // exact ties
                let (a, b) = (rng.random_range(0..k), rng.random_range(0..k));
                let row = f[a * d..(a + 1) * d].to_vec();
                f[b * d..(b + 1) * d].copy_from_slice(&row);
            }
            if round % 7 == 3 {
                f[rng.random_range(0..k * d)] = [f64::NAN, f64::INFINITY][round % 2];
            }
            // Too large for the slope ratio's squares.
            let huge = round % 11 == 4;
            if huge {
                f[rng.random_range(0..k * d)] = 1e151;
            }
            let theta: Vec<f64> = (0..d).map(|_| rng.random_range(-1.0..1.0)).collect();
            let set = ActionSet { d, k, features: &f };
            let lanes = ActionLanes::transpose_with_reference(&set, &mut buf, &theta);
            let r = lanes.reference.clone().unwrap();
            let vals: Vec<f64> = f
                .chunks_exact(d)
                .map(|a| {
                    let mut s = 0.0;
                    for (x, t) in a.iter().zip(&theta) {
                        s += t * x;
                    }
                    s
                })
                .collect();
            let norms: Vec<f64> = f.chunks_exact(d).map(norm).collect();
            let max_n2 = f.chunks_exact(d).map(norm2).fold(0.0, f64::max);
            let th2 = norm2(&theta);
            let overflow = th2 * max_n2 >= 1e300 || (th2 * max_n2).is_nan();
            if vals.iter().chain(&norms).any(|v| !v.is_finite()) || overflow {
                assert!(r.gap.is_nan(), "round {round}");
                assert!(lanes.ratio2().is_nan(), "round {round}");
                continue;
            }
            let mut best = 0;
            for (i, &v) in vals.iter().enumerate() {
                if v > vals[best] {
                    best = i;
                }
            }
            let second = vals
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != best)
                .map(|(_, &v)| v)
                .fold(f64::NEG_INFINITY, f64::max);
            assert_eq!(r.best, best, "round {round}");
            if k == 1 {
                assert_eq!(r.gap, f64::INFINITY);
            } else {
                assert_eq!(r.gap, vals[best] - second, "round {round}");
            }
            assert_eq!(r.max_norm, norms.iter().copied().fold(0.0, f64::max));
            if huge && max_n2 >= 1e300 {
                assert!(lanes.ratio2().is_nan(), "round {round}");
                continue;
            }
            // The slope ratio against `best`, term by term (`0/0` passed over).
            let mut ratio2 = f64::INFINITY;
            for i in (0..k).filter(|&i| i != best) {
                let dd = vals[best] - vals[i];
                let mut dn2 = 0.0;
                for j in 0..d {
                    let df = f[best * d + j] - f[i * d + j];
                    dn2 += df * df;
                }
                let q = (dd * dd) / dn2;
                if q < ratio2 {
                    ratio2 = q;
                }
            }
            assert_eq!(lanes.ratio2().to_bits(), ratio2.to_bits(), "round {round}");
        }
        // A direction of another length gives no reference.
        let f = [1.0, 2.0];
        let set = ActionSet {
            d: 2,
            k: 1,
            features: &f,
        };
        let lanes = ActionLanes::transpose_with_reference(&set, &mut buf, &[1.0]);
        assert!(lanes.reference.is_none());
    }
}

//! The contextual run loop's fast path: nothing here changes a decision, and nothing here is
//! needed to write an algorithm or an environment ([`super`]'s traits are the whole setting).
//!
//! * **Lanes.** Each round's decision set is also given by coordinate, in an [`ActionLanes`]
//!   buffer shared by all the policies of a run (transposed once per round by the run loop, or
//!   kept by the environment, [`LaneSource::lanes`]), so a policy family can compute its `k`
//!   indices vectorised over actions.
//! * **Shared reference.** When the environment is linear ([`LaneSource::reference_theta`]),
//!   the lanes carry a `LaneReference`: the round's decision set seen along `theta*` (first
//!   maximiser, gap to the runner-up, largest norm, on demand a slope ratio), computed once per
//!   round; the OFUL family uses it to settle most late decisions without looking at the
//!   actions (exact tests, proofs in `oful/argmax.rs`).
//! * **Batched drivers.** A policy family may drive a whole group of its policies itself
//!   ([`BatchFamily`], offered by a configuration through
//!   [`super::ContextualPolicyConfig::batched`]; the OFUL family: `oful/batch.rs`). The run
//!   loop ([`super::simulate_configs`]) uses it only when **every** member of the group offers
//!   the same family and the family accepts the group; a group that mixes in another family's
//!   policy takes the per-policy path ([`super::ContextualPolicy::play`], no lanes), with the
//!   same numbers.
//!
//! Everything is exact: a batched driver produces, bit for bit, the numbers of one
//! [`super::ContextualPolicy::play`] call per policy (each family tests it).

use super::{ActionSet, ContextualPolicy, ContextualPolicyConfig};
use crate::error::Result;
use std::cell::Cell;

/// Optional fast path of an environment for the run loop ([`super::ContextualEnvironment::fast_path`]):
/// environment authors can ignore it; the numbers never depend on it.
pub trait LaneSource {
    /// A direction along which the means grow (`theta*` of a linear environment), if any: the
    /// run loop shares the decision set's values along it with the policies (a
    /// `LaneReference` in the lanes), which makes their argmax cheaper.
    fn reference_theta(&self) -> Option<&[f64]>;
    /// The current decision set as lanes with its reference along [`Self::reference_theta`],
    /// if the environment keeps them itself (built while it draws the round, which saves the
    /// run loop a transpose and a pass): they must be what `ActionLanes::transpose_with_reference`
    /// gives for the current actions and `reference_theta()`, except that the values may be any
    /// computed inner products `<theta, a_i>` summed in order (for example the means). `None`
    /// (the default): the run loop builds them.
    fn lanes(&self) -> Option<ActionLanes<'_>> {
        None
    }
}

/// A policy family with a batched driver for a group of its policies (the OFUL family:
/// `oful/batch.rs`), offered by each of its configurations
/// ([`super::ContextualPolicyConfig::batched`]).
pub trait BatchFamily: Sync {
    /// The family's name; the run loop batches a group only when every member offers the
    /// family of this name.
    fn id(&self) -> &'static str;
    /// The driver of the policies `configs` (all offering this family) for dimension `d`,
    /// horizon `horizon` and policy seeds `seeds` (one per config), as built by each config's
    /// `build(d, horizon, seed)`; `None`: no batched path for this group (the run loop then
    /// plays the policies one at a time).
    ///
    /// # Errors
    /// As the configs' `build`.
    fn driver(
        &self,
        configs: &[&dyn ContextualPolicyConfig],
        d: usize,
        horizon: u64,
        seeds: &[u64],
    ) -> Option<Result<Box<dyn BatchDriver>>>;
}

/// The policies of one run driven together by their family ([`BatchFamily::driver`]).
pub trait BatchDriver: Send {
    /// Which path this is, for the manifest (e.g. `"oful family, batched by pairs"`).
    fn path(&self) -> &'static str;
    /// One round of every policy: `chosen[p]` receives policy `p`'s action, exactly as one
    /// [`ContextualPolicy::play`] call per policy (`lanes` is `actions` by coordinate).
    ///
    /// # Errors
    /// As [`ContextualPolicy::play`] of the first policy whose reward is refused.
    fn play_round(
        &mut self,
        t: u64,
        actions: &ActionSet<'_>,
        lanes: &ActionLanes<'_>,
        means: &[f64],
        noise: f64,
        chosen: &mut [usize],
    ) -> Result<()>;
    /// The policies, in the order of the configs, with every state written back: the
    /// policies one `play` call per round would have left.
    fn into_policies(self: Box<Self>) -> Vec<Box<dyn ContextualPolicy>>;
}

/// One round's decision set by coordinate ("lanes"), the transpose of an [`ActionSet`], with
/// every action's squared norm. Actions come in groups of `LANE_GROUP` (4): group `g` is the
/// `(d + 1) * LANE_GROUP` numbers `groups[g * (d + 1) * LANE_GROUP..]`, coordinate `j` of its
/// actions at `j * LANE_GROUP + l` (action `g * LANE_GROUP + l`) and their squared norms
/// (`norm2`) at `d * LANE_GROUP + l`. Padding lanes (actions `k..`) have NaN coordinates and
/// squared norm 0, so they can never look like the best action. The run loop builds it once
/// per round (`ActionLanes::transpose`) and shares it among the policies of a batched driver
/// ([`BatchDriver::play_round`]), whose indices then vectorise over actions. Crate-internal
/// but for its name: an environment outside the crate returns `None` from
/// [`LaneSource::lanes`].
#[derive(Debug, Clone)]
pub struct ActionLanes<'a> {
    /// Dimension.
    pub(crate) d: usize,
    /// Number of actions.
    pub(crate) k: usize,
    /// `ceil(k / LANE_GROUP)` groups of `(d + 1) * LANE_GROUP` numbers.
    pub(crate) groups: &'a [f64],
    /// The values `r_i` of the actions along the reference direction (empty without one).
    pub(crate) values: &'a [f64],
    /// The round's values along a direction shared by all policies
    /// ([`ActionLanes::transpose_with_reference`]); `None`: not computed.
    pub(crate) reference: Option<LaneReference<'a>>,
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
/// `ratio2` alone that `best` is its argmax (the OFUL family: `oful/argmax.rs`); any direction
/// keeps every decision exact, a good one makes the test pass often. A non-finite value
/// anywhere, or `||theta_ref||^2 max_i ||a_i||^2 >= 1e300` (values that could overflow),
/// makes `gap` and `ratio2` NaN, which passes no test.
#[derive(Debug, Clone)]
pub(crate) struct LaneReference<'a> {
    /// `theta_ref` (length `d`).
    pub(crate) theta: &'a [f64],
    /// First maximiser of `r_i`.
    pub(crate) best: usize,
    /// `r_best - max_{i != best} r_i`, or NaN.
    pub(crate) gap: f64,
    /// `max_i ||a_i||`.
    pub(crate) max_norm: f64,
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
    pub(crate) ratios: &'a [Cell<f64>],
}

/// Actions per group of [`ActionLanes`].
pub(crate) const LANE_GROUP: usize = 4;

impl<'a> ActionLanes<'a> {
    /// Transpose `actions` into `buf` and compute the squared norms (`buf` is resized and
    /// reused across rounds: no allocation once it has grown to its size).
    pub(crate) fn transpose(actions: &ActionSet<'_>, buf: &'a mut Vec<f64>) -> ActionLanes<'a> {
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
    pub(crate) fn transpose_with_reference(
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
    /// ([`LaneSource::lanes`]): lane groups as [`Self::transpose`] fills them
    /// ([`fill_lanes`]), the values `r_i` (any computed inner products `<theta, a_i>`, summed in
    /// order), the [`ReferenceScan`] of [`scan_reference`] and room for one ratio per action
    /// (`ratios`, as long as `values`).
    pub(crate) fn with_scan(
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
    pub(crate) fn ratio2(&self) -> f64 {
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
    pub(crate) fn ratios(&self) -> &[Cell<f64>] {
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
pub(crate) struct ReferenceScan {
    best: usize,
    gap: f64,
    max_norm: f64,
    top: f64,
    slope_ok: bool,
}

/// The scan of a [`LaneReference`] over lane groups `groups` (as [`fill_lanes`] fills them)
/// of `values.len()` actions with values `values` along `theta` (length `d`): each action's
/// value and squared norm through a [`ReferenceScanner`], in index order.
pub(crate) fn scan_reference(
    d: usize,
    groups: &[f64],
    values: &[f64],
    theta: &[f64],
) -> ReferenceScan {
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
pub(crate) fn fill_lanes(d: usize, features: &[f64], buf: &mut [f64]) {
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
/// environments that keep their lanes ([`LaneSource::lanes`]) scan with it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReferenceScanner {
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
    pub(crate) fn new() -> Self {
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
    pub(crate) fn push(&mut self, i: usize, v: f64, n2: f64) {
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
    pub(crate) fn finish(self, d: usize, theta: &[f64], k: usize) -> ReferenceScan {
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

/// The squared Euclidean norm `sum x_j^2`, summed in order from `0.0` (the squared norms of
/// [`ActionLanes`], which [`ActionLanes::transpose`] computes the same way).
#[inline]
pub(crate) fn norm2(x: &[f64]) -> f64 {
    let mut n2 = 0.0;
    for &v in x {
        n2 += v * v;
    }
    n2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SimRng;
    use rand::{RngExt, SeedableRng};

    /// The Euclidean norm, the square root of [`norm2`].
    fn norm(x: &[f64]) -> f64 {
        norm2(x).sqrt()
    }

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

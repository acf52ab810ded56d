//! The OFUL family's batched driver for the contextual run loop ([`BatchFamily`], `lanes.rs`):
//! a group whose configurations are all OFUL-family ones is played by [`OFUL_FAMILY`]'s driver
//! instead of one `play` call per policy, on the round's shared lanes and reference.
//!
//! * RS-OFUL / AdaC-OFUL of dimension `d <= 3` (Figure 4(c)): [`OfulBatch`], one statically
//!   dispatched pass over the policies per round, two at a time ([`Pair`]).
//! * Any other OFUL-family group (plain OFUL, `d > 3`): [`OneByOne`], each policy's own round
//!   on the shared lanes (the exact tests of `argmax.rs`), statically dispatched.
//!
//! Both give, bit for bit, the numbers of one [`ContextualPolicy::play`] call per policy (the
//! tests below). A group that mixes in another family's policy is not offered to this driver:
//! the run loop plays it one policy at a time (`sim.rs`).
//!
//! The family reads its own configurations back from `&dyn ContextualPolicyConfig` (the
//! configuration trait has `Any` as a supertrait); policies carry no downcast.

use super::{OfulConfig, OfulKind, OfulPolicy, SquareOps, contribution, infinity3};
use crate::contextual::lanes::ActionLanes;
use crate::contextual::{
    ActionSet, BatchDriver, BatchFamily, ContextualPolicy, ContextualPolicyConfig,
};
use crate::error::Result;
use crate::privacy::{NoiseKind, RewardBoundary};
use nalgebra::SMatrix;

/// The OFUL family ([`super::OfulConfig::batched`](crate::contextual::ContextualPolicyConfig::batched)).
pub(crate) static OFUL_FAMILY: OfulFamily = OfulFamily;

/// The OFUL family's [`BatchFamily`]: `oful`, `rs_oful`, `adac_oful`.
#[derive(Debug)]
pub(crate) struct OfulFamily;

impl BatchFamily for OfulFamily {
    fn id(&self) -> &'static str {
        "oful"
    }

    fn driver(
        &self,
        configs: &[&dyn ContextualPolicyConfig],
        d: usize,
        horizon: u64,
        seeds: &[u64],
    ) -> Option<Result<Box<dyn BatchDriver>>> {
        let cfgs = configs
            .iter()
            .map(|&c| (c as &dyn std::any::Any).downcast_ref::<OfulConfig>())
            .collect::<Option<Vec<_>>>()?;
        macro_rules! dispatch {
            ($($pairs:literal)*; $($one:literal)*) => {
                match d {
                    $($pairs => Some(driver::<$pairs>(&cfgs, horizon, seeds, true)),)*
                    $($one => Some(driver::<$one>(&cfgs, horizon, seeds, false)),)*
                    _ => None,
                }
            };
        }
        dispatch!(1 2 3; 4 5 6 7 8 9 10 11 12 13 14 15 16)
    }
}

/// The policies of `cfgs` (as their `build`), driven by pairs when `pairs` and [`OfulBatch`]
/// applies, otherwise one by one.
fn driver<const D: usize>(
    cfgs: &[&OfulConfig],
    horizon: u64,
    seeds: &[u64],
    pairs: bool,
) -> Result<Box<dyn BatchDriver>>
where
    SMatrix<f64, D, D>: SquareOps,
{
    let pols = cfgs
        .iter()
        .zip(seeds)
        .map(|(&c, &seed)| OfulPolicy::<D>::new(c.clone(), horizon, seed))
        .collect::<Result<Vec<_>>>()?;
    // Deployment-noise policies keep an exact episode statistic that only their own round
    // (`play_lanes`) feeds: they are played one by one (the pairs' lanes hold float sums only).
    let pairs = pairs && cfgs.iter().all(|c| c.noise == NoiseKind::Simulation);
    if !pairs {
        return Ok(Box::new(OneByOne { pols }));
    }
    Ok(match OfulBatch::new(pols) {
        Ok(batch) => Box::new(batch),
        Err(pols) => Box::new(OneByOne { pols }),
    })
}

/// OFUL-family policies played one after the other, each on the round's shared lanes
/// ([`OfulPolicy::play_lanes`]).
struct OneByOne<const D: usize> {
    pols: Vec<OfulPolicy<D>>,
}

impl<const D: usize> BatchDriver for OneByOne<D>
where
    SMatrix<f64, D, D>: SquareOps,
{
    fn path(&self) -> &'static str {
        "oful family, one policy at a time on shared lanes"
    }
    fn play_round(
        &mut self,
        _t: u64,
        actions: &ActionSet<'_>,
        lanes: &ActionLanes<'_>,
        means: &[f64],
        noise: f64,
        chosen: &mut [usize],
    ) -> Result<()> {
        for (p, c) in self.pols.iter_mut().zip(chosen.iter_mut()) {
            *c = p.play_lanes(actions, lanes, means, noise)?;
        }
        Ok(())
    }
    fn into_policies(self: Box<Self>) -> Vec<Box<dyn ContextualPolicy>> {
        self.pols
            .into_iter()
            .map(|p| Box::new(p) as Box<dyn ContextualPolicy>)
            .collect()
    }
}

impl<const D: usize> BatchDriver for OfulBatch<D>
where
    SMatrix<f64, D, D>: SquareOps,
{
    fn path(&self) -> &'static str {
        "oful family, batched by pairs (d <= 3)"
    }
    #[inline]
    fn play_round(
        &mut self,
        _t: u64,
        actions: &ActionSet<'_>,
        lanes: &ActionLanes<'_>,
        means: &[f64],
        noise: f64,
        chosen: &mut [usize],
    ) -> Result<()> {
        self.round(actions, lanes, means, noise, chosen)
    }
    fn into_policies(mut self: Box<Self>) -> Vec<Box<dyn ContextualPolicy>> {
        self.finish();
        self.pols
            .into_iter()
            .map(|p| Box::new(p) as Box<dyn ContextualPolicy>)
            .collect()
    }
}

/// Policies per [`Pair`]: the two lanes of an SSE2 register.
const LANES: usize = 2;

/// The per-round state of two policies of an [`OfulBatch`] and the per-episode constants
/// their rounds read, lane by lane (lane `l` of pair `b` is policy `2 b + l`): the common
/// round of both (the `det V` test, the reward's products) runs on both lanes at once.
#[derive(Debug, Clone, Copy)]
struct Pair<const D: usize> {
    /// `V`; only the upper triangle (`i <= j`) is kept up to date (see [`OfulBatch`]).
    v: [[[f64; LANES]; D]; D],
    episode: [[f64; LANES]; D],
    played: [u64; LANES],
    threshold: [f64; LANES],
    ref_c: [f64; LANES],
    slope: [[f64; 3]; LANES],
    /// The policy's reward boundary and clipping (an index into [`OfulBatch`]'s classes).
    /// The last pair of an odd number of policies has an idle lane: threshold `inf`, the class
    /// of the other lane, never chosen for, never written back.
    class: [usize; LANES],
}

impl<const D: usize> Pair<D> {
    /// `det V` of both lanes: nalgebra's closed form for `d <= 3` (`Matrix::determinant`) on
    /// the mirrored upper triangle, lane by lane.
    #[inline(always)]
    fn det(&self) -> [f64; LANES] {
        let mut out = [0.0; LANES];
        for (l, out) in out.iter_mut().enumerate() {
            let s = |i: usize, j: usize| self.v[i.min(j)][i.max(j)][l];
            *out = match D {
                1 => s(0, 0),
                2 => s(0, 0) * s(1, 1) - s(1, 0) * s(0, 1),
                _ => {
                    let minor_m12_m23 = s(1, 1) * s(2, 2) - s(2, 1) * s(1, 2);
                    let minor_m11_m23 = s(1, 0) * s(2, 2) - s(2, 0) * s(1, 2);
                    let minor_m11_m22 = s(1, 0) * s(2, 1) - s(2, 0) * s(1, 1);
                    s(0, 0) * minor_m12_m23 - s(0, 1) * minor_m11_m23 + s(0, 2) * minor_m11_m22
                }
            };
        }
        out
    }

    /// Add an action's products to lane `l`: `outer[i][j] = a[j] a[i]` (`i <= j`) and
    /// `ra[j] = r a[j]`.
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // explicit indices over const bounds: unrolled
    fn absorb(&mut self, l: usize, outer: &[[f64; D]; D], ra: &[f64; D]) {
        for i in 0..D {
            for j in i..D {
                self.v[i][j][l] += outer[i][j];
            }
            self.episode[i][l] += ra[i];
        }
        self.played[l] += 1;
    }

    /// [`Self::absorb`] of the same products on both lanes.
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // explicit indices over const bounds: unrolled
    fn absorb_both(&mut self, outer: &[[f64; D]; D], ra: &[f64; D]) {
        for i in 0..D {
            for j in i..D {
                for l in 0..LANES {
                    self.v[i][j][l] += outer[i][j];
                }
            }
            for l in 0..LANES {
                self.episode[i][l] += ra[i];
            }
        }
        for l in 0..LANES {
            self.played[l] += 1;
        }
    }
}

/// The products one admitted reward adds to a policy: `a a^T` (upper triangle, as
/// [`OfulPolicy::absorb`] computes them: `a[j] a[i]`) and `r a`, `r` the contribution.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // explicit indices over const bounds: unrolled
fn products<const D: usize>(clip: bool, a: &[f64; D], reward: f64) -> ([[f64; D]; D], [f64; D]) {
    let r = contribution::<D>(clip, a, reward);
    let mut outer = [[0.0; D]; D];
    let mut ra = [0.0; D];
    for i in 0..D {
        for j in i..D {
            outer[i][j] = a[j] * a[i];
        }
        ra[i] = r * a[i];
    }
    (outer, ra)
}

/// The OFUL-family policies of one run (`d <= 3`, `rs_oful` / `adac_oful`) driven together by
/// pairs: the family's batched driver for Figure 4(c).
///
/// One pass over the policies per round, statically dispatched, with each policy's round
/// state (`V`, the episode sum, the round count) and the per-episode constants its round reads
/// (the switching threshold, the shared-reference constants) side by side in one [`Pair`]
/// record. Per policy, as [`ContextualPolicy::play`]: the `det V` test and, when due, the
/// policy's own [`OfulPolicy::update`] (its state is written back first, the new constants
/// read after); the shared-reference test of [`OfulPolicy::sync_reference`], otherwise the
/// policy's own argmax; the admitted reward's products. The round's reference action is
/// admitted once per (boundary, clipping) class and its products `a a^T`, `r a` computed
/// once for all the policies of the class that chose it.
///
/// Every number is produced by the same operations in the same order as one `play` call per
/// policy: `V` is exactly symmetric (both triangles receive the same products, which commute
/// exactly), so the upper triangle and nalgebra's closed-form determinant on its mirror give
/// the same `det V`; sums are per policy and per entry. Decisions and outputs are therefore
/// bit-identical, which the tests check against the one-at-a-time loop. [`Self::finish`]
/// writes the state back into the policies, which then equal policies played one call at a
/// time (the gate ends with no open commitment, as after `play`). An anomaly (a refused
/// reward) writes every state back and lets that policy's own `play` produce the error and
/// the state of the one-at-a-time loop.
struct OfulBatch<const D: usize> {
    pols: Vec<OfulPolicy<D>>,
    pairs: Vec<Pair<D>>,
    /// The direction the reference constants were computed for (NaN: none yet).
    dir: [f64; D],
    /// The distinct (reward boundary, clipping) pairs of the policies (at most
    /// [`MAX_CLASSES`]; the crate's configurations have two: non-private and guaranteed).
    classes: Vec<(RewardBoundary, bool)>,
}

/// Most distinct (boundary, clipping) pairs in one [`OfulBatch`].
const MAX_CLASSES: usize = 4;

impl<const D: usize> OfulBatch<D>
where
    SMatrix<f64, D, D>: SquareOps,
{
    /// The batch over `pols`, or `pols` back when the batched path does not apply (`d > 3`,
    /// plain OFUL, more than [`MAX_CLASSES`] boundaries, a non-symmetric `V`); the caller then
    /// plays them one at a time.
    fn new(pols: Vec<OfulPolicy<D>>) -> std::result::Result<Self, Vec<OfulPolicy<D>>> {
        if D == 0 || D > 3 || pols.is_empty() {
            return Err(pols);
        }
        let mut classes: Vec<(RewardBoundary, bool)> = Vec::new();
        let mut class = Vec::with_capacity(pols.len());
        for p in &pols {
            let symmetric = (0..D).all(|i| (0..D).all(|j| p.v[(i, j)] == p.v[(j, i)]));
            if p.cfg.kind == OfulKind::Oful || !symmetric {
                return Err(pols);
            }
            let key = (p.gate.boundary(), p.clip);
            class.push(match classes.iter().position(|c| *c == key) {
                Some(c) => c,
                None if classes.len() < MAX_CLASSES => {
                    classes.push(key);
                    classes.len() - 1
                }
                None => return Err(pols),
            });
        }
        let idle = Pair {
            v: [[[0.0; LANES]; D]; D],
            episode: [[0.0; LANES]; D],
            played: [0; LANES],
            threshold: [f64::INFINITY; LANES],
            // An idle lane passes the gap test (so its pair can take the common round) and
            // absorbs what it is given, unread.
            ref_c: [0.0; LANES],
            slope: [infinity3(); LANES],
            class: [0; LANES],
        };
        let mut b = OfulBatch {
            pairs: vec![idle; pols.len().div_ceil(LANES)],
            pols,
            dir: [f64::NAN; D],
            classes,
        };
        for (p, c) in class.into_iter().enumerate() {
            let pair = &mut b.pairs[p / LANES];
            if p % LANES == 0 {
                // Lanes that no later policy fills stay idle with this policy's class, so that
                // the pair can still share the reference action's products.
                pair.class = [c; LANES];
            }
            pair.class[p % LANES] = c;
        }
        for p in 0..b.pols.len() {
            // `play` starts by dropping an unobserved round.
            b.pols[p].gate.abandon();
            b.load(p);
        }
        Ok(b)
    }

    /// Write policy `p`'s round state back into it.
    fn store(&mut self, p: usize) {
        let (pol, h, l) = (&mut self.pols[p], &self.pairs[p / LANES], p % LANES);
        for i in 0..D {
            for j in i..D {
                pol.v[(i, j)] = h.v[i][j][l];
                pol.v[(j, i)] = h.v[i][j][l];
            }
            pol.episode[i] = h.episode[i][l];
        }
        pol.played = h.played[l];
    }

    /// Read policy `p`'s per-episode constants (after an update or for a new direction).
    fn load_constants(&mut self, p: usize) {
        let (pol, h, l) = (&mut self.pols[p], &mut self.pairs[p / LANES], p % LANES);
        if self.dir.iter().all(|x| !x.is_nan()) {
            pol.sync_reference(&self.dir);
        }
        h.threshold[l] = pol.threshold;
        h.ref_c[l] = pol.ref_c;
        h.slope[l] = pol.ref_slope;
    }

    /// Read policy `p`'s whole state (after it was changed through the policy itself).
    fn load(&mut self, p: usize) {
        let (pol, h, l) = (&self.pols[p], &mut self.pairs[p / LANES], p % LANES);
        for i in 0..D {
            for j in 0..D {
                h.v[i][j][l] = pol.v[(i, j)];
            }
            h.episode[i][l] = pol.episode[i];
        }
        h.played[l] = pol.played;
        self.load_constants(p);
    }

    /// Write every policy's state back (call once the run is over, or failed).
    fn finish(&mut self) {
        for p in 0..self.pols.len() {
            self.store(p);
        }
    }

    /// One round of every policy: `chosen[p]` receives policy `p`'s action.
    ///
    /// # Errors
    /// As [`ContextualPolicy::play`] of the first policy whose reward is refused.
    #[allow(clippy::needless_range_loop)] // lanes index several per-lane arrays
    fn round(
        &mut self,
        actions: &ActionSet<'_>,
        lanes: &ActionLanes<'_>,
        means: &[f64],
        noise: f64,
        chosen: &mut [usize],
    ) -> Result<()> {
        let consistent = lanes.d == D && lanes.k * D == actions.features.len();
        let reference = lanes.reference.as_ref().filter(|r| {
            consistent && r.theta.len() == D && r.best < lanes.k && r.ratios.len() == lanes.k
        });
        if let Some(r) = reference
            && r.theta.iter().zip(&self.dir).any(|(a, b)| a != b)
        {
            self.dir.copy_from_slice(r.theta);
            for p in 0..self.pols.len() {
                self.load_constants(p);
            }
        }
        let row = |i: usize| -> Option<&[f64; D]> {
            actions.features.get(i * D..(i + 1) * D)?.try_into().ok()
        };
        // The reference action's reward and products, once per class (`None`: no reference,
        // or refused: every policy then takes its own path below).
        let mut shared = [None; MAX_CLASSES];
        if let Some((r, (a, &m))) =
            reference.and_then(|r| Some((r, row(r.best).zip(means.get(r.best))?)))
        {
            for (c, &(boundary, clip)) in self.classes.iter().enumerate() {
                shared[c] = boundary
                    .admit(m + noise)
                    .ok()
                    .map(|reward| (r.best, products::<D>(clip, a, reward)));
            }
        }
        let n = self.pols.len();
        for b in 0..self.pairs.len() {
            let det = self.pairs[b].det();
            let pair = &self.pairs[b];
            let due = [det[0] > pair.threshold[0], det[1] > pair.threshold[1]];
            // Both lanes' common round: no episode ends, the gap test passes for both and the
            // reference action's products are the same for both (one class).
            if !(due[0] | due[1])
                && let Some(r) = reference
                && pair.class[0] == pair.class[1]
                && let Some((_, (outer, ra))) = &shared[pair.class[0]]
                && (0..LANES).all(|l| r.gap > pair.ref_c[l] * r.max_norm + 1e-300)
            {
                self.pairs[b].absorb_both(outer, ra);
                for c in chosen.iter_mut().skip(b * LANES).take(LANES) {
                    *c = r.best;
                }
                continue;
            }
            for l in 0..LANES {
                let p = b * LANES + l;
                if p >= n {
                    break;
                }
                // Policy by policy, as the one-at-a-time loop: its episode, then its round.
                if due[l] {
                    self.store(p);
                    self.pols[p].update();
                    self.load(p);
                }
                let h = &self.pairs[b];
                let i = match reference {
                    Some(r) => self.pols[p].choose_by_reference(
                        actions.features,
                        lanes,
                        r,
                        h.ref_c[l],
                        h.slope[l],
                    ),
                    None if consistent => self.pols[p].argmax_lanes(actions.features, lanes),
                    None => self.pols[p].argmax(actions.features),
                };
                let class = h.class[l];
                match &shared[class] {
                    Some((s, (outer, ra))) if *s == i => self.pairs[b].absorb(l, outer, ra),
                    _ => {
                        let (boundary, clip) = self.classes[class];
                        let own = row(i).zip(means.get(i)).and_then(|(a, &m)| {
                            let reward = boundary.admit(m + noise).ok()?;
                            Some(products::<D>(clip, a, reward))
                        });
                        match own {
                            Some((outer, ra)) => self.pairs[b].absorb(l, &outer, &ra),
                            None => {
                                // The policy's own round gives the error (and the state) of
                                // the one-at-a-time loop.
                                self.finish();
                                let played = self.pols[p].play_lanes(actions, lanes, means, noise);
                                self.load(p);
                                chosen[p] = played?;
                                continue;
                            }
                        }
                    }
                }
                chosen[p] = i;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PrivacyMode, state_of};
    use super::*;
    use crate::contextual::{ActionSet, ContextualEnvironment, LaneSource};
    use crate::rng::SimRng;

    /// A test environment: Gaussian actions around `1/sqrt(d)`, `theta*` fixed, Gaussian noise,
    /// and (from round `bad_from` on) a NaN reward noise that every boundary refuses.
    #[derive(Debug)]
    struct TestEnv {
        d: usize,
        k: usize,
        theta: Vec<f64>,
        rng: SimRng,
        features: Vec<f64>,
        means: Vec<f64>,
        eta: f64,
        bad_from: u64,
    }

    impl TestEnv {
        fn new(d: usize, k: usize, seed: u64, bad_from: u64) -> Self {
            use rand::SeedableRng;
            let theta: Vec<f64> = (0..d).map(|j| [0.6, -0.48, 0.64][j % 3]).collect();
            TestEnv {
                d,
                k,
                theta,
                rng: SimRng::seed_from_u64(seed),
                features: vec![0.0; d * k],
                means: vec![0.0; k],
                eta: 0.0,
                bad_from,
            }
        }
    }

    impl LaneSource for TestEnv {
        fn reference_theta(&self) -> Option<&[f64]> {
            Some(&self.theta)
        }
    }

    impl ContextualEnvironment for TestEnv {
        fn dim(&self) -> usize {
            self.d
        }
        fn next_round(&mut self, t: u64) {
            use rand_distr::{Distribution, StandardNormal};
            let m = 1.0 / (self.d as f64).sqrt();
            for x in &mut self.features {
                let z: f64 = StandardNormal.sample(&mut self.rng);
                *x = m + 0.3 * z;
            }
            for (i, mean) in self.means.iter_mut().enumerate() {
                let a = &self.features[i * self.d..(i + 1) * self.d];
                *mean = a.iter().zip(&self.theta).map(|(x, t)| x * t).sum();
            }
            let z: f64 = StandardNormal.sample(&mut self.rng);
            self.eta = if t >= self.bad_from { f64::NAN } else { z };
        }
        fn actions(&self) -> ActionSet<'_> {
            ActionSet {
                d: self.d,
                k: self.k,
                features: &self.features,
            }
        }
        fn means(&self) -> &[f64] {
            &self.means
        }
        fn best_mean(&self) -> f64 {
            self.means.iter().copied().fold(f64::NEG_INFINITY, f64::max)
        }
        fn noise(&self) -> f64 {
            self.eta
        }
        fn fast_path(&self) -> Option<&dyn LaneSource> {
            Some(self)
        }
    }

    /// One family set: RS-OFUL and AdaC-OFUL at several rho (or plain OFUL), one mode, and
    /// their seeds.
    fn family(mode: PrivacyMode, plain: bool) -> (Vec<OfulConfig>, Vec<u64>) {
        let mut cfgs = Vec::new();
        for rho in [f64::INFINITY, 0.1, 1.0, 10.0, 1e3] {
            let kind = match (plain, rho.is_infinite()) {
                (true, _) => OfulKind::Oful,
                (false, true) => OfulKind::RsOful,
                (false, false) => OfulKind::AdacOful,
            };
            let mut cfg = OfulConfig::paper(kind, if plain { f64::INFINITY } else { rho });
            cfg.mode = mode;
            cfgs.push(cfg);
        }
        let seeds = (0..cfgs.len() as u64).map(|s| 100 + s).collect();
        (cfgs, seeds)
    }

    fn refs(cfgs: &[OfulConfig]) -> Vec<&dyn ContextualPolicyConfig> {
        cfgs.iter()
            .map(|c| c as &dyn ContextualPolicyConfig)
            .collect()
    }

    /// Regret rows per round, the first error, and the final states.
    type Trace = (Vec<Vec<f64>>, Option<String>, Vec<String>);

    /// The one-at-a-time loop (`play` per policy, no lanes), the specification of the drivers.
    fn one_at_a_time(
        env: &mut dyn ContextualEnvironment,
        mut pols: Vec<Box<dyn ContextualPolicy>>,
        horizon: u64,
    ) -> Trace {
        let mut regret = vec![0.0; pols.len()];
        let mut rows = vec![vec![]; pols.len()];
        let mut err = None;
        'run: for t in 0..horizon {
            env.next_round(t);
            let actions = env.actions();
            for (p, pol) in pols.iter_mut().enumerate() {
                match pol.play(t, &actions, env.means(), env.noise()) {
                    Ok(i) => regret[p] += env.best_mean() - env.means()[i],
                    Err(e) => {
                        err = Some(e.to_string());
                        break 'run;
                    }
                }
                rows[p].push(regret[p]);
            }
        }
        (rows, err, pols.iter().map(|p| state_of(p)).collect())
    }

    /// The same loop through a driver, on lanes with the shared reference.
    fn through_driver(
        env: &mut dyn ContextualEnvironment,
        mut driver: Box<dyn BatchDriver>,
        n: usize,
        horizon: u64,
    ) -> Trace {
        let mut buf = Vec::new();
        let mut regret = vec![0.0; n];
        let mut rows = vec![vec![]; n];
        let mut chosen = vec![0; n];
        let mut err = None;
        let theta = env
            .fast_path()
            .and_then(|f| f.reference_theta())
            .map(<[f64]>::to_vec);
        for t in 0..horizon {
            env.next_round(t);
            let actions = env.actions();
            let lanes = match &theta {
                Some(th) => ActionLanes::transpose_with_reference(&actions, &mut buf, th),
                None => ActionLanes::transpose(&actions, &mut buf),
            };
            if let Err(e) =
                driver.play_round(t, &actions, &lanes, env.means(), env.noise(), &mut chosen)
            {
                err = Some(e.to_string());
                break;
            }
            for (p, &i) in chosen.iter().enumerate() {
                regret[p] += env.best_mean() - env.means()[i];
                rows[p].push(regret[p]);
            }
        }
        let states = driver.into_policies().iter().map(|p| state_of(p)).collect();
        (rows, err, states)
    }

    /// The family's driver (`path` expected) against the one-at-a-time loop: regret bit for
    /// bit (up to the round of the first error), the same error, the same final states.
    fn driver_matches<const D: usize>(
        mode: PrivacyMode,
        plain: bool,
        horizon: u64,
        bad_from: u64,
        path: &str,
    ) {
        let (cfgs, seeds) = family(mode, plain);
        let refs = refs(&cfgs);
        let driver = OFUL_FAMILY
            .driver(&refs, D, horizon, &seeds)
            .expect("a driver")
            .unwrap();
        assert_eq!(driver.path(), path);
        let got = through_driver(
            &mut TestEnv::new(D, 10, 7, bad_from),
            driver,
            refs.len(),
            horizon,
        );
        let pols = refs
            .iter()
            .zip(&seeds)
            .map(|(c, &s)| c.build(D, horizon, s).unwrap())
            .collect();
        let want = one_at_a_time(&mut TestEnv::new(D, 10, 7, bad_from), pols, horizon);
        assert_eq!(got.1, want.1, "d = {D}, {mode:?}: error");
        if want.1.is_none() {
            for (p, (x, y)) in got.0.iter().zip(&want.0).enumerate() {
                assert!(
                    x.len() == y.len() && x.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "d = {D}, {mode:?}, policy {p}: regret differs"
                );
            }
        }
        assert_eq!(got.2, want.2, "d = {D}, {mode:?}: states differ");
    }

    /// The batched drivers are one `play` call per policy: every round's regret bit for bit,
    /// every final state (episodes, Gram matrices, released sums, generators, gates), in both
    /// privacy modes and d = 1, 2, 3 (by pairs), plain OFUL and d = 5 (one by one); and a
    /// refused reward gives the same error and states.
    #[test]
    fn drivers_are_one_play_per_policy() {
        let pairs = "oful family, batched by pairs (d <= 3)";
        let one = "oful family, one policy at a time on shared lanes";
        for mode in [PrivacyMode::Reproduction, PrivacyMode::Guaranteed] {
            driver_matches::<1>(mode, false, 3000, u64::MAX, pairs);
            driver_matches::<2>(mode, false, 3000, u64::MAX, pairs);
            driver_matches::<3>(mode, false, 20_000, u64::MAX, pairs);
            driver_matches::<3>(mode, false, 500, 321, pairs);
            driver_matches::<3>(mode, true, 2000, u64::MAX, one);
            driver_matches::<5>(mode, false, 2000, u64::MAX, one);
            driver_matches::<5>(mode, false, 500, 321, one);
        }
        // Not this family's configurations, or an unsupported dimension: no driver.
        let (cfgs, seeds) = family(PrivacyMode::Guaranteed, false);
        assert!(OFUL_FAMILY.driver(&refs(&cfgs), 17, 10, &seeds).is_none());
    }
}

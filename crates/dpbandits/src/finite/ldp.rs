//! Local DP as a wrapper: any non-private policy becomes an epsilon-LDP learner that only ever sees
//! randomized-response bits.
//!
//! # Algorithm
//! The "corruption-oblivious" LDP baseline: the user-side randomizer of Gajane (2023, Sec. 3;
//! Gajane, Urvoy & Kaufmann 2018) privatizes each reward with randomized response, and an
//! unchanged bandit algorithm (`inner`, e.g. `kl_ucb` or `sw_kl_ucb`) is run on the feedback
//! bits as if they were rewards. With the optimal symmetric RR this is Ren et al.'s (2020)
//! "Bernoulli response" front end. The corruption-*aware* learners are `kl_ucb_cf` and
//! `sw_klucb_cf` ([`super::kl_ucb_cf`]), which are built from this same wrapper.
//!
//! # Why a policy-side wrapper (and not an environment wrapper)
//! The privacy claim must travel with the object the manifest describes (the policy), and one
//! experiment file must be able to hold private and non-private policies on the same reward
//! streams. The wrapper owns the randomizer and its coin streams (policy noise stream); the inner
//! policy is a separate object that receives nothing but `privatize(arm, reward)`, so "the learner
//! never sees a raw reward" holds by construction. (A corrupt-feedback *environment*,
//! `piecewise_bernoulli` with a `feedback` table, is also provided for the general corrupt-bandit
//! setting; there the channel belongs to the environment and the policy claims nothing.)
//!
//! # Privacy
//! * Notion: pure epsilon-local DP (Gajane 2023, Def. of eps-LDP with `<=`), local trust model.
//! * Adjacency: one user's reward: any two rewards in [0, 1] of the same round.
//! * Mechanism: randomized response with `p00 = p11 = e^eps/(1+e^eps)` per arm
//!   ([`crate::privacy::RandomizedResponse::for_ldp`], Gajane 2023 Cor. 2), after the Bernoulli
//!   trick for non-binary rewards; rewards clipped to [0, 1] first (NaN -> 0).
//! * Composition: each user contributes one reward, privatized once by an independent randomizer;
//!   everything the learner does is post-processing of the bits, so the whole interaction is
//!   eps-LDP for every user (eps = the largest per-arm level).
//!
//! # Parameters
//! `inner` (a non-private finite-armed kind), `epsilon` (> 0, inf = no privacy) or a `per_arm`
//! table, `noise` (`simulation` default | `deployment`: exact discrete coins from an OS-keyed
//! ChaCha20, flip probability exactly `1/(1+e^eps)`, budget unchanged; needs `epsilon` or
//! `per_arm.epsilon`), `grid_bits` (1..=32, default 20; recorded, nothing is rounded), and the
//! inner policy's own parameters. The wrapper always commits to single rounds
//! (rewards must be privatized one by one), so it runs in the step loop.

use super::{Policy, PolicyConfig, Pull};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Error, Result};
use crate::privacy::{
    BoundaryMode, Budget, DEFAULT_GRID_BITS, LocalRandomizer, NoiseKind, PerArmChannel,
    PrivacyGuarantee, RandomizedResponse, RewardBoundary, TrustModel, channels_for,
};
use crate::protocol::Gate;
use crate::snapshot::Snapshot;

/// Registry record of `ldp`.
pub const LDP: AlgorithmInfo = AlgorithmInfo {
    kind: "ldp",
    name: "LDP wrapper: any non-private policy on randomized-response feedback",
    setting: Setting::FiniteArmed,
    reference: "Gajane 2023, Sec. 3 (corruption-oblivious baseline); Ren et al. 2020 Bernoulli response",
    privacy: "epsilon-local DP (user-side randomized response per arm)",
    example: "inner = \"kl_ucb\"\nepsilon = 1.0",
    source: file!(),
    doc: include_str!("ldp.rs"),
    private: true,
    release_keys: crate::config::NOISE_KEYS,
};

/// The eps-LDP guarantee of a learner fed by `channels`.
pub fn ldp_guarantee(channels: &[RandomizedResponse], what: &str) -> PrivacyGuarantee {
    let eps = channels
        .iter()
        .map(RandomizedResponse::epsilon)
        .fold(0.0, f64::max);
    if eps == 0.0 {
        return PrivacyGuarantee::non_private();
    }
    let per_arm: Vec<String> = channels
        .iter()
        .map(|c| format!("({}, {})", c.p00(), c.p11()))
        .collect();
    PrivacyGuarantee {
        notion: "epsilon-local DP (Gajane 2023, Sec. 3; Duchi, Jordan & Wainwright 2013)".into(),
        model: TrustModel::Local,
        adjacency: "one user's reward: any two rewards in [0, 1] of the same round".into(),
        budget: Budget::PureDp { epsilon: eps },
        mechanism: format!(
            "user-side randomized response (Warner 1965) per arm, (p00, p11) = [{}], \
             p = e^eps/(1+e^eps) rounded down so ln(p/(1-p)) <= eps (Gajane 2023, Cor. 2); \
             Bernoulli trick for rewards in (0,1); each reward privatized once; the learner ({what}) \
             sees only the bits (post-processing)",
            per_arm.join(", ")
        ),
        boundary: Some(RewardBoundary::unit(BoundaryMode::Clip)),
        noise: crate::privacy::NoiseGrade::Simulation,
    }
}

/// The eps-LDP guarantee of a learner fed by the exact coins of the deployment path
/// ([`LocalRandomizer::deployment`]) at the per-arm levels `levels`: the stated budget is the
/// largest level itself (the coins' likelihood ratio is `e^eps` exactly, no rounding).
pub fn ldp_guarantee_exact(levels: &[f64], what: &str, grid_bits: u32) -> PrivacyGuarantee {
    let eps = levels.iter().copied().fold(0.0, f64::max);
    let per_arm: Vec<String> = levels.iter().map(|e| e.to_string()).collect();
    PrivacyGuarantee {
        notion: "epsilon-local DP (Gajane 2023, Sec. 3; Duchi, Jordan & Wainwright 2013)".into(),
        model: TrustModel::Local,
        adjacency: "one user's reward: any two rewards in [0, 1] of the same round".into(),
        budget: Budget::PureDp { epsilon: eps },
        mechanism: format!(
            "user-side randomized response (Warner 1965) per arm with exact discrete coins, \
             eps per arm = [{}]: Bernoulli trick b ~ Bernoulli(r) exact for the f64 reward, kept \
             with probability e^eps/(1+e^eps) exactly (Bernoulli factory on Canonne, Kamath & \
             Steinke 2020 Alg. 1 coins; Gajane 2023, Cor. 2), so the likelihood ratio is e^eps \
             exactly; each reward privatized once; the learner ({what}) sees only the bits \
             (post-processing); coins from ChaCha20 seeded by the operating system (marker \
             grid_bits = {grid_bits}, unused: nothing is rounded): outputs are not reproducible",
            per_arm.join(", ")
        ),
        boundary: Some(RewardBoundary::unit(BoundaryMode::Clip)),
        noise: crate::privacy::NoiseGrade::Deployment,
    }
}

/// The guarantee of a local kind's configuration before K is known: the levels are those of
/// one arm (a common epsilon) or of the per-arm lists.
pub(crate) fn config_guarantee(
    epsilon: Option<f64>,
    per_arm: Option<&PerArmChannel>,
    noise: NoiseKind,
    grid_bits: u32,
    what: &str,
) -> PrivacyGuarantee {
    let k = match (epsilon, per_arm) {
        (Some(_), _) => 1,
        (None, Some(pa)) => pa.epsilon.as_ref().or(pa.p00.as_ref()).map_or(0, Vec::len),
        _ => 0,
    };
    if noise == NoiseKind::Deployment
        && let Ok(levels) = crate::privacy::exact_levels_for(k, epsilon, per_arm)
    {
        return ldp_guarantee_exact(&levels, what, grid_bits);
    }
    ldp_guarantee(&channels_for(k, epsilon, per_arm).unwrap_or_default(), what)
}

/// `kind = "ldp"`: an inner non-private policy fed with randomized-response bits.
#[derive(Debug)]
pub struct LdpConfig {
    inner: Box<dyn PolicyConfig>,
    epsilon: Option<f64>,
    per_arm: Option<PerArmChannel>,
    noise: NoiseKind,
    grid_bits: u32,
}

impl LdpConfig {
    /// Wrap `inner` (must be non-private) with one level `epsilon` or per-arm channels.
    pub fn new(
        inner: Box<dyn PolicyConfig>,
        epsilon: Option<f64>,
        per_arm: Option<PerArmChannel>,
    ) -> Result<Self> {
        if inner.guarantee().is_private() || inner.kind() == "ldp" {
            return Err(Error::param(
                "inner",
                format!("\"{}\"", inner.kind()),
                "a non-private finite-armed policy (the wrapper adds the privacy)",
            ));
        }
        if let Some(e) = epsilon {
            RandomizedResponse::for_ldp(e)?;
        }
        // Check the channel spec once with a dummy K when it does not depend on K.
        crate::privacy::check_channel_spec(epsilon, per_arm.as_ref())?;
        Ok(LdpConfig {
            inner,
            epsilon,
            per_arm,
            noise: NoiseKind::Simulation,
            grid_bits: DEFAULT_GRID_BITS,
        })
    }

    /// The noise path of the randomizer's coins (`noise`, `grid_bits`; see
    /// [`LocalRandomizer::deployment`]).
    ///
    /// # Errors
    /// `grid_bits` outside its range; deployment noise for a non-private configuration (naming
    /// `noise`) or for explicit `(p00, p11)` channels (naming `per_arm`).
    pub fn with_noise(mut self, noise: NoiseKind, grid_bits: u32) -> Result<Self> {
        check_local_noise(self.epsilon, self.per_arm.as_ref(), noise, grid_bits)?;
        self.noise = noise;
        self.grid_bits = grid_bits;
        Ok(self)
    }
}

/// Check a local kind's `noise` / `grid_bits` against its channel specification.
pub(crate) fn check_local_noise(
    epsilon: Option<f64>,
    per_arm: Option<&PerArmChannel>,
    noise: NoiseKind,
    grid_bits: u32,
) -> Result<()> {
    if noise == NoiseKind::Simulation {
        return crate::privacy::check_noise(noise, grid_bits, true);
    }
    let k = per_arm
        .and_then(|pa| pa.epsilon.as_ref().or(pa.p00.as_ref()))
        .map_or(1, Vec::len);
    let private = match (epsilon, per_arm) {
        (Some(e), _) => e.is_finite(),
        (
            None,
            Some(PerArmChannel {
                epsilon: Some(v), ..
            }),
        ) => v.iter().all(|e| e.is_finite()),
        _ => true,
    };
    crate::privacy::check_noise(noise, grid_bits, private)?;
    crate::privacy::exact_levels_for(k, epsilon, per_arm).map(drop)
}

impl PolicyConfig for LdpConfig {
    fn kind(&self) -> &'static str {
        LDP.kind
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        let mut p = self.inner.params();
        match (self.epsilon, &self.per_arm) {
            (Some(e), _) => p.push(("epsilon", e)),
            (None, Some(pa)) => {
                if let Some(m) = pa
                    .epsilon
                    .as_ref()
                    .map(|v| v.iter().copied().fold(0.0, f64::max))
                {
                    p.push(("epsilon_max", m));
                }
            }
            _ => {}
        }
        p
    }
    fn label(&self) -> String {
        let mut l = format!("ldp(inner={}", self.inner.label());
        if let Some(e) = self.epsilon {
            l.push_str(&format!(",epsilon={e}"));
        }
        if let Some(pa) = &self.per_arm {
            l.push_str(&per_arm_label(pa));
        }
        l.push(')');
        crate::privacy::noise_label(l, self.noise, self.grid_bits)
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        // The budget is known without K for a common eps; for per-arm lists use them directly.
        config_guarantee(
            self.epsilon,
            self.per_arm.as_ref(),
            self.noise,
            self.grid_bits,
            &format!("{} on the feedback bits", self.inner.kind()),
        )
    }
    fn build(&self, k: usize, seed: u64) -> Result<Box<dyn Policy>> {
        crate::error::check::arms("K", k)?;
        let randomizer = crate::privacy::randomizer_for(
            k,
            self.epsilon,
            self.per_arm.as_ref(),
            self.noise,
            self.grid_bits,
            seed,
        )?;
        let inner = self.inner.build(k, crate::rng::inner_policy_seed(seed))?;
        Ok(Box::new(Ldp::with_randomizer(randomizer, inner)?.named(
            &format!("{} on the feedback bits", self.inner.kind()),
        )))
    }
}

/// Text for a per-arm channel table in labels.
pub(crate) fn per_arm_label(pa: &PerArmChannel) -> String {
    let f = |v: &Vec<f64>| {
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(";")
    };
    let mut s = String::new();
    if let Some(e) = &pa.epsilon {
        s.push_str(&format!(",eps=[{}]", f(e)));
    }
    if let Some(p) = &pa.p00 {
        s.push_str(&format!(",p00=[{}]", f(p)));
    }
    if let Some(p) = &pa.p11 {
        s.push_str(&format!(",p11=[{}]", f(p)));
    }
    s
}

/// A locally private learner: user-side randomizer + a learner that sees only the bits.
#[derive(Debug)]
pub struct Ldp {
    gate: Gate,
    randomizer: LocalRandomizer,
    inner: Box<dyn Policy>,
    what: String,
    /// The registry kind this wrapper is (`ldp`, or a kind built on it such as `kl_ucb_cf`).
    kind: String,
    /// Per arm: the public bits sent and how many were 1 (for the report of an inner learner
    /// that keeps no estimate of its own); `None` for a wrapper restored from a snapshot of a
    /// version that did not keep them.
    bits: Option<Vec<(u64, u64)>>,
}

/// The snapshot state of an [`Ldp`] wrapper: the randomizer (channels and coin generators) and
/// the inner policy's own snapshot.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LdpState {
    gate: Gate,
    randomizer: LocalRandomizer,
    what: String,
    inner: Snapshot,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bits: Option<Vec<(u64, u64)>>,
}

impl Ldp {
    /// Wrap `inner`; `seed` keys the randomizer's coins (see [`LocalRandomizer`]).
    pub fn new(
        channels: Vec<RandomizedResponse>,
        inner: Box<dyn Policy>,
        seed: u64,
    ) -> Result<Self> {
        Self::with_randomizer(LocalRandomizer::new(channels, seed), inner)
    }

    /// Wrap `inner` behind a given randomizer (simulation or deployment coins).
    pub fn with_randomizer(randomizer: LocalRandomizer, inner: Box<dyn Policy>) -> Result<Self> {
        if randomizer.channels().len() != inner.num_arms() {
            return Err(Error::param(
                "channels",
                randomizer.channels().len(),
                format!("one channel per arm (K = {})", inner.num_arms()),
            ));
        }
        Ok(Ldp {
            gate: Gate::new(RewardBoundary::unit(BoundaryMode::Clip)),
            what: "the inner learner".into(),
            kind: LDP.kind.into(),
            bits: Some(vec![(0, 0); inner.num_arms()]),
            randomizer,
            inner,
        })
    }

    /// Name the learner in the guarantee's mechanism text (e.g. its kind).
    pub fn named(mut self, what: &str) -> Self {
        self.what = what.to_string();
        self
    }

    /// Report the registry kind `kind` (a kind built on this wrapper) in snapshots.
    pub fn with_kind(mut self, kind: &str) -> Self {
        self.kind = kind.to_string();
        self
    }

    /// Restore a wrapper saved by [`Policy::snapshot`]; `inner` restores the inner policy's
    /// snapshot (the registry's `restore_finite` for `ldp`, the learner's own type for kinds
    /// built on the wrapper).
    ///
    /// # Errors
    /// A snapshot of another kind or a refused state (see [`Snapshot::state`]), or what `inner`
    /// returns.
    pub fn restore_with(
        snap: &Snapshot,
        inner: impl FnOnce(&Snapshot) -> Result<Box<dyn Policy>>,
    ) -> Result<Self> {
        if snap.setting() != Setting::FiniteArmed {
            return Err(Error::Snapshot(format!(
                "setting = {}: expected a finite-armed snapshot",
                snap.setting()
            )));
        }
        let st: LdpState = snap.state()?;
        let inner = inner(&st.inner)?;
        if inner.num_arms() != st.randomizer.channels().len() {
            return Err(Error::Snapshot(format!(
                "the inner policy has {} arms but the randomizer {} channels",
                inner.num_arms(),
                st.randomizer.channels().len()
            )));
        }
        Ok(Ldp {
            gate: st.gate,
            randomizer: st.randomizer,
            inner,
            what: st.what,
            kind: snap.kind().to_string(),
            bits: st.bits,
        })
    }

    /// The user-side randomizer.
    pub fn randomizer(&self) -> &LocalRandomizer {
        &self.randomizer
    }

    /// The learner behind the randomizer.
    pub fn inner(&self) -> &dyn Policy {
        self.inner.as_ref()
    }
}

impl Policy for Ldp {
    fn snapshot(&self) -> Result<Snapshot> {
        let st = LdpState {
            gate: self.gate,
            randomizer: self.randomizer.clone(),
            what: self.what.clone(),
            inner: self.inner.snapshot()?,
            bits: self.bits.clone(),
        };
        Snapshot::new(Setting::FiniteArmed, &self.kind, &st)
    }
    fn num_arms(&self) -> usize {
        self.inner.num_arms()
    }
    fn released_estimates(&self) -> Option<crate::report::Released> {
        // The learner's statistics are of the public bits: a corruption-aware learner
        // (kl-UCB-CF) maps them back to the reward scale; for an oblivious one the wrapper
        // keeps the bits' counts and does the same: arm `a`'s bit mean after `n` bits (its
        // `n`-th release) is `(1 - p00) + (p00 + p11 - 1) (mu - lo) / w`.
        if let Some(r) = self.inner.released_estimates() {
            return Some(r);
        }
        let bd = self.gate.boundary();
        let width = bd.hi - bd.lo;
        let means = self
            .bits
            .as_ref()?
            .iter()
            .zip(self.randomizer.channels())
            .map(|(&(n, ones), ch)| {
                (n > 0).then(|| {
                    let gain = ch.p00() + ch.p11() - 1.0;
                    let m = ones as f64 / n as f64;
                    let mut r = crate::report::Release::new(
                        bd.lo + width * (m - (1.0 - ch.p00())) / gain,
                        n,
                        crate::report::NoiseLaw::Gaussian { sd: 0.0 },
                    );
                    r.spread = Some(width / gain);
                    r.with_index(n)
                })
            })
            .collect();
        Some(crate::report::Released {
            means,
            range: (bd.lo, bd.hi),
            rounding: 0.0,
            releases_bound: 0,
            target: None,
        })
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        match self.randomizer.exact_epsilon() {
            Some(levels) => ldp_guarantee_exact(levels, &self.what, self.randomizer.grid_bits()),
            None => ldp_guarantee(self.randomizer.channels(), &self.what),
        }
    }
    fn choose(&mut self, t: u64) -> Pull {
        super::gated_choose(self, |p| &mut p.gate, |p| p.decide(t))
    }
    fn observe(&mut self, arm: usize, reward: f64) -> Result<()> {
        let reward = self.gate.admit(arm, reward)?;
        let bit = self.randomizer.privatize(arm, reward);
        self.inner.observe(arm, bit)?;
        if let Some(b) = self.bits.as_mut().and_then(|b| b.get_mut(arm)) {
            b.0 += 1;
            b.1 += u64::from(bit > 0.5);
        }
        Ok(())
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
}
impl Ldp {
    /// The algorithm's choice when no commitment is open.
    fn decide(&mut self, t: u64) -> Pull {
        let p = self.inner.choose(t);
        Pull {
            arm: p.arm,
            steps: 1,
        }
    }
}

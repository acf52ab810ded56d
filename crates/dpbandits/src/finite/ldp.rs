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
//! table, and the inner policy's own parameters. The wrapper always commits to single rounds
//! (rewards must be privatized one by one), so it runs in the step loop.

use super::{Policy, PolicyConfig, Pull};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Error, Result};
use crate::privacy::{
    BoundaryMode, Budget, LocalRandomizer, PerArmChannel, PrivacyGuarantee, RandomizedResponse,
    RewardBoundary, TrustModel, channels_for,
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

/// `kind = "ldp"`: an inner non-private policy fed with randomized-response bits.
#[derive(Debug)]
pub struct LdpConfig {
    inner: Box<dyn PolicyConfig>,
    epsilon: Option<f64>,
    per_arm: Option<PerArmChannel>,
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
        })
    }
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
        l
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        // The budget is known without K for a common eps; for per-arm lists use them directly.
        let ch = match (&self.epsilon, &self.per_arm) {
            (Some(e), _) => vec![RandomizedResponse::for_ldp(*e).expect("validated")],
            (None, Some(pa)) => {
                let k = pa.epsilon.as_ref().or(pa.p00.as_ref()).map_or(0, Vec::len);
                pa.channels(k).unwrap_or_default()
            }
            _ => vec![],
        };
        ldp_guarantee(&ch, &format!("{} on the feedback bits", self.inner.kind()))
    }
    fn build(&self, k: usize, seed: u64) -> Result<Box<dyn Policy>> {
        crate::error::check::arms("K", k)?;
        let channels = channels_for(k, self.epsilon, self.per_arm.as_ref())?;
        let inner = self.inner.build(k, crate::rng::inner_policy_seed(seed))?;
        Ok(Box::new(Ldp::new(channels, inner, seed)?.named(&format!(
            "{} on the feedback bits",
            self.inner.kind()
        ))))
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
}

impl Ldp {
    /// Wrap `inner`; `seed` keys the randomizer's coins (see [`LocalRandomizer`]).
    pub fn new(
        channels: Vec<RandomizedResponse>,
        inner: Box<dyn Policy>,
        seed: u64,
    ) -> Result<Self> {
        if channels.len() != inner.num_arms() {
            return Err(Error::param(
                "channels",
                channels.len(),
                format!("one channel per arm (K = {})", inner.num_arms()),
            ));
        }
        Ok(Ldp {
            gate: Gate::new(RewardBoundary::unit(BoundaryMode::Clip)),
            what: "the inner learner".into(),
            kind: LDP.kind.into(),
            randomizer: LocalRandomizer::new(channels, seed),
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
        };
        Snapshot::new(Setting::FiniteArmed, &self.kind, &st)
    }
    fn num_arms(&self) -> usize {
        self.inner.num_arms()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        ldp_guarantee(self.randomizer.channels(), &self.what)
    }
    fn choose(&mut self, t: u64) -> Pull {
        super::gated_choose(self, |p| &mut p.gate, |p| p.decide(t))
    }
    fn observe(&mut self, arm: usize, reward: f64) -> Result<()> {
        let reward = self.gate.admit(arm, reward)?;
        let bit = self.randomizer.privatize(arm, reward);
        self.inner.observe(arm, bit)?;
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

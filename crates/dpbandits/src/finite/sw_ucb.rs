//! Sliding-window UCB (SW-UCB) and sliding-window kl-UCB (SW-kl-UCB): non-private baselines for
//! piecewise-stationary bandits.
//!
//! # Algorithm
//! * SW-UCB: Garivier & Moulines (2008/2011), "On Upper-Confidence Bound Policies for
//!   Non-Stationary Bandit Problems", Sec. 4: `argmax_a Xbar_a(t, tau) + B sqrt(xi ln(t ^ tau) /
//!   N_a(t, tau))` over the last `tau` rounds (spec ldp §5.2). Theory: `tau = 2B sqrt(T ln T /
//!   Upsilon_T)`, `xi > 1/2`.
//! * SW-kl-UCB (SMPyBandits `SWklUCB`; spec ldp §5.2): the kl-UCB index on the window with the
//!   level `f(t ^ w)` of SW-KLUCB-CF ([`super::kl_ucb_cf::f_safe`], `c = 3` by default), so that
//!   SW-KLUCB-CF with `epsilon = inf` makes the same decisions (spec ldp §7.4.1). Its index is
//!   computed here directly from [`crate::math::kl::kl_upper`], independently of the CF code.
//!
//! Arms with no pull in the window get index `+inf` (lowest index first), which is also the
//! initial round-robin.
//!
//! # Privacy
//! None: non-private references (they read raw rewards, clipped to [0, 1], NaN -> 0).
//!
//! # Parameters
//! SW-UCB: `window >= 1`, `b > 0` (default 1), `xi > 0` (default 0.6). SW-kl-UCB: `window >= 1`,
//! `c >= 0` (default 3).

use super::kl_ucb_cf::f_safe;
use super::window::SlidingWindow;
use super::{Policy, PolicyConfig, Pull, argmax};
use crate::config::{AlgorithmInfo, Setting};
use crate::error::{Error, Result, check};
use crate::math::kl::kl_upper;
use crate::privacy::PrivacyGuarantee;
use crate::privacy::RewardBoundary;
use crate::protocol::Gate;
use serde::Deserialize;

/// Registry record of `sw_ucb`.
pub const SW_UCB: AlgorithmInfo = AlgorithmInfo {
    kind: "sw_ucb",
    name: "SW-UCB",
    setting: Setting::FiniteArmed,
    reference: "Garivier & Moulines 2011, Sec. 4 (sliding-window UCB)",
    privacy: "none",
    example: "window = 1000",
    source: file!(),
    doc: include_str!("sw_ucb.rs"),
    private: false,
    release_keys: crate::config::NO_RELEASE,
};

/// Registry record of `sw_kl_ucb`.
pub const SW_KL_UCB: AlgorithmInfo = AlgorithmInfo {
    kind: "sw_kl_ucb",
    name: "SW-kl-UCB",
    setting: Setting::FiniteArmed,
    reference: "sliding-window kl-UCB (SMPyBandits SWklUCB) with Gajane 2023's f(t ^ w)",
    privacy: "none",
    example: "window = 1000",
    source: file!(),
    doc: include_str!("sw_ucb.rs"),
    private: false,
    release_keys: crate::config::NO_RELEASE,
};

/// `kind = "sw_ucb"`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct SwUcbConfig {
    /// Window `tau`.
    pub window: u64,
    /// Reward bound `B` (default 1).
    #[serde(default = "one")]
    pub b: f64,
    /// Exploration constant `xi` (default 0.6).
    #[serde(default = "xi")]
    pub xi: f64,
}

fn one() -> f64 {
    1.0
}
fn xi() -> f64 {
    0.6
}
fn three() -> f64 {
    3.0
}

impl SwUcbConfig {
    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        check::at_least("window", self.window, 1)?;
        check::positive("b", self.b)?;
        check::positive("xi", self.xi)?;
        Ok(())
    }
}

impl PolicyConfig for SwUcbConfig {
    fn kind(&self) -> &'static str {
        SW_UCB.kind
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        let mut p = vec![("window", self.window as f64)];
        if self.b != 1.0 {
            p.push(("b", self.b));
        }
        if self.xi != 0.6 {
            p.push(("xi", self.xi));
        }
        p
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        PrivacyGuarantee::non_private()
    }
    fn build(&self, k: usize, _seed: u64) -> Result<Box<dyn Policy>> {
        check::arms("K", k)?;
        self.validate()?;
        Ok(Box::new(SwUcb {
            gate: Gate::new(RewardBoundary::numeric()),
            cfg: self.clone(),
            win: SlidingWindow::new(k, self.window)?,
            kl: false,
            c: 0.0,
        }))
    }
}

/// `kind = "sw_kl_ucb"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwKlUcbConfig {
    /// Window `w`.
    pub window: u64,
    /// Weight of `ln ln x` in `f` (default 3).
    #[serde(default = "three")]
    pub c: f64,
}

impl SwKlUcbConfig {
    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        check::at_least("window", self.window, 1)?;
        if !(self.c.is_finite() && self.c >= 0.0) {
            return Err(Error::param("c", self.c, "a finite number >= 0"));
        }
        Ok(())
    }
}

impl PolicyConfig for SwKlUcbConfig {
    fn kind(&self) -> &'static str {
        SW_KL_UCB.kind
    }
    fn params(&self) -> Vec<(&'static str, f64)> {
        let mut p = vec![("window", self.window as f64)];
        if self.c != 3.0 {
            p.push(("c", self.c));
        }
        p
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        PrivacyGuarantee::non_private()
    }
    fn build(&self, k: usize, _seed: u64) -> Result<Box<dyn Policy>> {
        check::arms("K", k)?;
        self.validate()?;
        Ok(Box::new(SwUcb {
            gate: Gate::new(RewardBoundary::numeric()),
            cfg: SwUcbConfig {
                window: self.window,
                b: 1.0,
                xi: 0.6,
            },
            win: SlidingWindow::new(k, self.window)?,
            kl: true,
            c: self.c,
        }))
    }
}

/// SW-UCB (`kl = false`) or SW-kl-UCB (`kl = true`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwUcb {
    gate: Gate,
    cfg: SwUcbConfig,
    win: SlidingWindow,
    kl: bool,
    c: f64,
}

impl Policy for SwUcb {
    fn snapshot(&self) -> Result<crate::snapshot::Snapshot> {
        crate::snapshot::Snapshot::new(
            Setting::FiniteArmed,
            if self.kl { SW_KL_UCB.kind } else { SW_UCB.kind },
            self,
        )
    }
    fn num_arms(&self) -> usize {
        self.win.counts().len()
    }
    fn guarantee(&self) -> PrivacyGuarantee {
        PrivacyGuarantee::non_private()
    }
    fn choose(&mut self, t: u64) -> Pull {
        super::gated_choose(self, |p| &mut p.gate, |p| p.decide(t))
    }
    fn observe(&mut self, arm: usize, reward: f64) -> Result<()> {
        let reward = self.gate.admit(arm, reward)?;
        let r = if reward.is_nan() {
            0.0
        } else {
            reward.clamp(0.0, 1.0)
        };
        self.win.push(arm, r);
        Ok(())
    }
    fn boundary(&self) -> RewardBoundary {
        self.gate.boundary()
    }
}
impl SwUcb {
    /// The algorithm's choice when no commitment is open.
    fn decide(&mut self, t: u64) -> Pull {
        if let Some(a) = self.win.counts().iter().position(|&n| n == 0) {
            return Pull { arm: a, steps: 1 };
        }
        let x = t.min(self.cfg.window).max(1) as f64;
        let arm = if self.kl {
            let level = f_safe(x, self.c);
            argmax(
                self.win
                    .counts()
                    .iter()
                    .zip(self.win.sums())
                    .map(|(&n, &s)| {
                        let n = n as f64;
                        kl_upper(s / n, level / n)
                    }),
            )
        } else {
            let lx = x.ln();
            let (b, xi) = (self.cfg.b, self.cfg.xi);
            argmax(
                self.win
                    .counts()
                    .iter()
                    .zip(self.win.sums())
                    .map(|(&n, &s)| {
                        let n = n as f64;
                        s / n + b * (xi * lx / n).sqrt()
                    }),
            )
        };
        Pull { arm, steps: 1 }
    }
}

impl crate::config::Config for SwUcbConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        SwUcbConfig::validate(self)
    }
}

impl crate::config::Config for SwKlUcbConfig {
    fn validate(&mut self) -> crate::error::Result<()> {
        SwKlUcbConfig::validate(self)
    }
}

//! The release keys of a private kind, as one value: `boundary` (what to do with a reward
//! outside `[0, 1]`), `noise` (the simulation or deployment path) and `grid_bits` (the deployment
//! grid `2^-grid_bits`).
//!
//! A configuration that declares a [`Release`] field (`#[serde(default)] pub release: Release`)
//! and is registered through the registry's `private` parsers never names these keys itself: the
//! registry takes them out of the parameter table, parses them into this value (errors name the
//! key as written, `noise`, not `release.noise`), hands it to the configuration and checks it
//! once ([`Release::check`]) after the configuration's own `validate`, against the configuration's
//! guarantee (deployment noise needs a private configuration). The label suffix of the deployment
//! path is [`Release::label`]; the setting traits' default `label()` applies it, through their
//! `release()` method. In a snapshot mirror the field is written `#[serde(flatten)] release:
//! Release`, so a snapshot keeps the three keys at the top level of the configuration, as before
//! the value existed.

use super::{BoundaryMode, DEFAULT_GRID_BITS, NoiseKind, RewardBoundary, check_noise, noise_label};
use crate::error::Result;
use serde::{Deserialize, Serialize};

/// `boundary`, `noise` and `grid_bits` of a private configuration (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Release {
    /// What to do with rewards outside `[0, 1]` (`clip`, default, or `reject`).
    #[serde(default)]
    pub boundary: BoundaryMode,
    /// Noise path: seeded `f64` (`simulation`, default) or exact discrete on an OS-seeded CSPRNG
    /// (`deployment`).
    #[serde(default)]
    pub noise: NoiseKind,
    /// Deployment grid: rewards are rounded to multiples of `2^-grid_bits` (1..=32, default 20).
    #[serde(default = "default_grid_bits")]
    pub grid_bits: u32,
}

fn default_grid_bits() -> u32 {
    DEFAULT_GRID_BITS
}

impl Default for Release {
    fn default() -> Self {
        Release {
            boundary: BoundaryMode::Clip,
            noise: NoiseKind::Simulation,
            grid_bits: DEFAULT_GRID_BITS,
        }
    }
}

impl Release {
    /// The parameter keys a [`Release`] is read from, in its field order.
    pub const KEYS: [&'static str; 3] = ["boundary", "noise", "grid_bits"];

    /// The one check: `grid_bits` in range, and deployment noise only for a `private`
    /// configuration (a finite budget). Errors name the key, the value and what is allowed.
    ///
    /// # Errors
    /// As said.
    pub fn check(&self, private: bool) -> Result<()> {
        check_noise(self.noise, self.grid_bits, private)
    }

    /// The label suffix of the noise path: `label` unchanged for simulation noise (published
    /// labels and the streams keyed by them do not move), `label[deployment]` (with the grid when
    /// it is not the default) for deployment noise.
    pub fn label(&self, label: String) -> String {
        noise_label(label, self.noise, self.grid_bits)
    }

    /// The reward boundary `[0, 1]` with this release's mode.
    pub fn unit_boundary(&self) -> RewardBoundary {
        RewardBoundary::unit(self.boundary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_check_and_label() {
        let r = Release::default();
        assert_eq!(r.grid_bits, DEFAULT_GRID_BITS);
        r.check(false).unwrap();
        assert_eq!(r.label("k(rho=1)".into()), "k(rho=1)");
        let d = Release {
            noise: NoiseKind::Deployment,
            ..r
        };
        assert_eq!(d.label("k".into()), "k[deployment]");
        let e = d.check(false).unwrap_err().to_string();
        assert!(e.contains("noise"), "{e}");
        let g = Release { grid_bits: 40, ..d };
        assert_eq!(g.label("k".into()), "k[deployment,grid_bits=40]");
        let e = g.check(true).unwrap_err().to_string();
        assert!(e.starts_with("grid_bits = 40"), "{e}");
    }
}

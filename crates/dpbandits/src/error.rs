//! One error type for the library.
//!
//! Every constructor validates its input and returns [`Result`]. `choose` never fails, except
//! [`crate::linear::LinearPolicy::choose`] when a phase's design fails numerically (see there);
//! `observe` fails only with [`Error::Boundary`] (a reward the boundary refuses), [`Error::Param`] (a
//! non-finite reward) or [`Error::Protocol`] (an observation the open commitment does not allow),
//! and then leaves the policy unchanged. Messages always name the field, the offending value and
//! what is allowed, so a user can fix a config file without reading the source
//! (e.g. `rho = -1: expected a number in [1e-9, 1e9], or inf for the non-private limit`).

use std::fmt::Display;

/// The library's error type.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A parameter is outside its allowed range.
    #[error("{field} = {value}: expected {expected}")]
    Param {
        /// Name of the parameter (config key or argument name).
        field: String,
        /// The value that was given, as written.
        value: String,
        /// What would have been accepted.
        expected: String,
    },
    /// An error located inside an experiment file; `path` says where (e.g. `policy[2] (adac_ucb)`).
    /// The inner error is part of the message (not a separate `source`), so printing the chain
    /// does not repeat it.
    #[error("{path}: {inner}")]
    At {
        /// Location of the offending entry.
        path: String,
        /// What is wrong there.
        inner: Box<Error>,
    },
    /// A malformed experiment file (syntax, unknown key, wrong type).
    #[error("{0}")]
    Config(String),
    /// A key the table's type does not have (displayed as serde's own message:
    /// ``unknown field `rh0`, expected one of `rho`, `boundary` ``).
    #[error("{}", unknown_field_message(field, allowed))]
    UnknownField {
        /// The key that was given.
        field: String,
        /// The keys the type takes (empty: none).
        allowed: Vec<String>,
    },
    /// A key of a shared configuration type that does not apply to this kind (e.g. `rho` of
    /// the non-private `oful`).
    #[error("{field} = {value}: expected nothing: this parameter does not apply to this kind")]
    NotApplicable {
        /// The key.
        field: String,
        /// Its value, as written.
        value: String,
    },
    /// A reward arrived outside the privacy boundary while the boundary is set to reject.
    #[error(
        "reward {value} is outside the privacy boundary [{lo}, {hi}] (boundary = \"reject\"; use \"clip\" to clip instead)"
    )]
    Boundary {
        /// The reward that was refused.
        value: f64,
        /// Lower end of the boundary.
        lo: f64,
        /// Upper end of the boundary.
        hi: f64,
    },
    /// A call out of order: an observation without an open commitment, of another arm than the
    /// committed one, or of more rounds than committed. The policy is unchanged.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// Reading or writing a file failed.
    #[error("{path}: {error}")]
    Io {
        /// The file or folder involved.
        path: String,
        /// The underlying error.
        error: std::io::Error,
    },
    /// A policy snapshot was refused (another format, version, setting or kind, corrupted, or a
    /// state this build cannot represent); the message names what differs.
    #[error("snapshot: {0}")]
    Snapshot(String),
    /// Drawing a plot failed.
    #[error("plot {path}: {message}")]
    Plot {
        /// The file being drawn.
        path: String,
        /// What went wrong.
        message: String,
    },
}

/// serde's message for an unknown field (`serde::de::Error::unknown_field`), word for word.
fn unknown_field_message(field: &str, allowed: &[String]) -> String {
    let q = |s: &String| format!("`{s}`");
    match allowed {
        [] => format!("unknown field `{field}`, there are no fields"),
        [a] => format!("unknown field `{field}`, expected {}", q(a)),
        [a, b] => format!("unknown field `{field}`, expected {} or {}", q(a), q(b)),
        all => format!(
            "unknown field `{field}`, expected one of {}",
            all.iter().map(q).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// Shorthand for `std::result::Result<T, Error>`.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// A parameter error.
    pub fn param(
        field: impl Into<String>,
        value: impl Display,
        expected: impl Into<String>,
    ) -> Self {
        Error::Param {
            field: field.into(),
            value: value.to_string(),
            expected: expected.into(),
        }
    }

    /// Wrap this error with the location where it happened.
    pub fn at(self, path: impl Into<String>) -> Self {
        Error::At {
            path: path.into(),
            inner: Box::new(self),
        }
    }
}

/// A number as an error message shows it: plain in the usual range, scientific beyond it (so
/// `1e308` is not printed with 309 digits).
pub fn num(v: f64) -> String {
    if v.is_finite() && v != 0.0 && !(1e-4..1e16).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// Extension to attach a location to any fallible result.
pub trait ResultExt<T> {
    /// Attach `path` (e.g. `policy[1] (adac_ucb)`) to the error, if any.
    fn at(self, path: impl FnOnce() -> String) -> Result<T>;
}

impl<T> ResultExt<T> for Result<T> {
    fn at(self, path: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| e.at(path()))
    }
}

/// Parameter checks shared by all constructors. Each returns the value on success so they chain.
pub mod check {
    use super::{Error, Result};

    /// The smallest privacy budget (rho or epsilon) a configuration accepts. Below it the noise scale
    /// of the calibrations here (`1/sqrt(rho)`, `1/epsilon`, or a randomized response's
    /// `1/tanh(epsilon/2)` debiasing) is no longer a meaningful finite number.
    pub const BUDGET_MIN: f64 = 1e-9;
    /// The largest finite privacy budget a configuration accepts (use `inf` for the non-private
    /// limit). Above it `2 rho` and the calibration loops leave the range where they are exact.
    pub const BUDGET_MAX: f64 = 1e9;
    /// The largest epsilon of a local randomizer (randomized response, Bernoulli response): its flip
    /// probability `1/(1 + e^eps)` must stay well above the 2^-53 resolution of a uniform double, or
    /// the simulated channel is deterministic and the realised loss infinite.
    pub const LOCAL_EPSILON_MAX: f64 = 20.0;

    /// A finite number.
    pub fn finite(field: &str, v: f64) -> Result<f64> {
        if v.is_finite() {
            Ok(v)
        } else {
            Err(Error::param(field, super::num(v), "a finite number"))
        }
    }

    /// A finite number > 0.
    pub fn positive(field: &str, v: f64) -> Result<f64> {
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(Error::param(field, super::num(v), "a finite number > 0"))
        }
    }

    /// A privacy parameter (rho or epsilon) in [`BUDGET_MIN`, `BUDGET_MAX`], or `inf` ("no privacy": the non-private limit). Outside that
    /// range a calibration is no longer finite and meaningful (the noise scale overflows or
    /// vanishes in floating point).
    pub fn budget(field: &str, v: f64) -> Result<f64> {
        if (BUDGET_MIN..=BUDGET_MAX).contains(&v) || v == f64::INFINITY {
            Ok(v)
        } else {
            Err(Error::param(
                field,
                super::num(v),
                format!(
                    "a number in [{BUDGET_MIN:e}, {BUDGET_MAX:e}], or inf for the non-private limit"
                ),
            ))
        }
    }

    /// A local randomizer's epsilon in [`crate::privacy::BUDGET_MIN`,
    /// `crate::privacy::LOCAL_EPSILON_MAX`] (`inf` only where `allow_inf`): beyond that, the flip
    /// probability `1/(1 + e^eps)` is below the resolution of the simulator's 53-bit uniforms
    /// and the realised loss would exceed the claim.
    pub fn local_epsilon(field: &str, v: f64, allow_inf: bool) -> Result<f64> {
        if (BUDGET_MIN..=LOCAL_EPSILON_MAX).contains(&v) || (allow_inf && v == f64::INFINITY) {
            Ok(v)
        } else {
            Err(Error::param(
                field,
                super::num(v),
                format!(
                    "a number in [{BUDGET_MIN:e}, {LOCAL_EPSILON_MAX}]{} (a local randomizer's flip \
                     probability must stay above the 2^-53 resolution of the simulator's uniforms)",
                    if allow_inf {
                        ", or inf for the identity channel"
                    } else {
                        ""
                    }
                ),
            ))
        }
    }

    /// A number of arms in `1..=MAX_ARMS` (memory per arm is allocated up front).
    pub fn arms(field: &str, k: usize) -> Result<usize> {
        if (1..=MAX_ARMS).contains(&k) {
            Ok(k)
        } else {
            Err(Error::param(
                field,
                k,
                format!("an integer in 1..={MAX_ARMS}"),
            ))
        }
    }

    /// The largest number of arms (or actions) a policy accepts.
    pub const MAX_ARMS: usize = 1 << 24;

    /// A reward given through the API: a finite number.
    pub fn reward(v: f64) -> Result<f64> {
        if v.is_finite() {
            Ok(v)
        } else {
            Err(Error::param("reward", super::num(v), "a finite number"))
        }
    }

    /// A probability strictly inside (0, 1).
    pub fn open_unit(field: &str, v: f64) -> Result<f64> {
        if v > 0.0 && v < 1.0 {
            Ok(v)
        } else {
            Err(Error::param(
                field,
                super::num(v),
                "a number in the open interval (0, 1)",
            ))
        }
    }

    /// A number in the closed interval [0, 1].
    pub fn unit(field: &str, v: f64) -> Result<f64> {
        if (0.0..=1.0).contains(&v) {
            Ok(v)
        } else {
            Err(Error::param(field, super::num(v), "a number in [0, 1]"))
        }
    }

    /// A list of means in [0, 1] with at least one entry; names the offending index.
    pub fn unit_means(field: &str, means: &[f64]) -> Result<()> {
        if means.is_empty() {
            return Err(Error::param(field, "[]", "at least one arm (K >= 1)"));
        }
        for (i, &m) in means.iter().enumerate() {
            unit(&format!("{field}[{i}]"), m)?;
        }
        Ok(())
    }

    /// An integer >= `min`.
    pub fn at_least(field: &str, v: u64, min: u64) -> Result<u64> {
        if v >= min {
            Ok(v)
        } else {
            Err(Error::param(field, v, format!("an integer >= {min}")))
        }
    }
}

//! The registry: every algorithm and environment kind, as data.
//!
//! Each entry points at the record its own file declares ([`AlgorithmInfo`] / [`EnvInfo`]: kind,
//! paper name, reference, privacy claim, source file) and at the function that turns a parameter
//! table into that file's configuration ([`Parse`]). `dpbandits list` prints it; the experiment
//! planner and the conformance suite read it. No algorithm file imports this module.
//!
//! Adding an algorithm = one file implementing it (with its `AlgorithmInfo` constant and a
//! [`Config`] impl) + one line in [`POLICIES`].

use crate::bai::{self, BaiAlgorithm, BaiConfig, BaiEnvConfig};
use crate::config::{AlgorithmInfo, Config, EnvInfo, Setting};
use crate::contextual::{self, ContextualEnvConfig, ContextualPolicyConfig, OfulConfig, OfulKind};
use crate::error::{Error, Result, ResultExt};
use crate::finite::{self, EnvConfig, PolicyConfig};
use crate::linear::{self, LinearEnvConfig, LinearPolicy, LinearPolicyConfig, NoisePlacement};
use crate::privacy::Release;
use crate::snapshot::Snapshot;
use contextual::ContextualPolicy;
use finite::Policy;

pub use crate::config::BySetting;

/// How one (sweep-expanded) `[[policy]]` table becomes a configuration of its setting.
pub type Parse = BySetting<
    fn(toml::Table) -> Result<Box<dyn PolicyConfig>>,
    fn(toml::Table) -> Result<Box<dyn LinearPolicyConfig>>,
    fn(toml::Table) -> Result<Box<dyn ContextualPolicyConfig>>,
    fn(toml::Table) -> Result<Box<dyn BaiConfig>>,
>;

/// A parsed algorithm configuration, of its setting.
pub type Built = BySetting<
    Box<dyn PolicyConfig>,
    Box<dyn LinearPolicyConfig>,
    Box<dyn ContextualPolicyConfig>,
    Box<dyn BaiConfig>,
>;

/// How a [`Snapshot`] of one kind becomes a running policy of its setting again: the concrete
/// type that kind's policies are (see [`restore`]).
pub type Restore = BySetting<
    fn(&Snapshot) -> Result<Box<dyn Policy>>,
    fn(&Snapshot) -> Result<Box<dyn LinearPolicy>>,
    fn(&Snapshot) -> Result<Box<dyn ContextualPolicy>>,
    fn(&Snapshot) -> Result<Box<dyn BaiAlgorithm>>,
>;

/// A restored policy, of its setting.
pub type Restored = BySetting<
    Box<dyn Policy>,
    Box<dyn LinearPolicy>,
    Box<dyn ContextualPolicy>,
    Box<dyn BaiAlgorithm>,
>;

/// How the `[env]` table becomes an environment configuration of its setting.
pub type EnvParse = BySetting<
    fn(toml::Table) -> Result<Box<dyn EnvConfig>>,
    fn(toml::Table) -> Result<Box<dyn LinearEnvConfig>>,
    fn(toml::Table) -> Result<Box<dyn ContextualEnvConfig>>,
    fn(toml::Table) -> Result<Box<dyn BaiEnvConfig>>,
>;

/// A parsed environment configuration, of its setting.
pub type EnvBuilt = BySetting<
    Box<dyn EnvConfig>,
    Box<dyn LinearEnvConfig>,
    Box<dyn ContextualEnvConfig>,
    Box<dyn BaiEnvConfig>,
>;

impl Restored {
    /// Snapshot the restored policy again.
    ///
    /// # Errors
    /// As the setting's `snapshot`.
    pub fn snapshot(&self) -> Result<Snapshot> {
        match self {
            Restored::Finite(p) => p.snapshot(),
            Restored::Linear(p) => p.snapshot(),
            Restored::Contextual(p) => p.snapshot(),
            Restored::Bai(p) => p.snapshot(),
        }
    }
}

/// One algorithm.
#[derive(Debug, Clone, Copy)]
pub struct PolicyEntry {
    /// The record its file declares.
    pub info: &'static AlgorithmInfo,
    /// Its parser.
    pub parse: Parse,
    /// How its snapshots are restored.
    pub restore: Restore,
}

impl PolicyEntry {
    /// Config `kind`.
    pub fn kind(&self) -> &'static str {
        self.info.kind
    }
    /// Setting.
    pub fn setting(&self) -> Setting {
        self.info.setting
    }
    /// Parse one table (without `kind`).
    ///
    /// # Errors
    /// Unknown keys, wrong types, missing required parameters, out-of-range values.
    pub fn build(&self, t: toml::Table) -> Result<Built> {
        Ok(match self.parse {
            Parse::Finite(parse) => Built::Finite(parse(t)?),
            Parse::Linear(parse) => Built::Linear(parse(t)?),
            Parse::Contextual(parse) => Built::Contextual(parse(t)?),
            Parse::Bai(parse) => Built::Bai(parse(t)?),
        })
    }
    /// The entry's example configuration, parsed.
    ///
    /// # Errors
    /// If the example does not parse (a registry bug; the conformance suite checks it).
    pub fn example(&self) -> Result<Built> {
        let t: toml::Table =
            toml::from_str(self.info.example).map_err(|e| Error::Config(e.to_string()))?;
        self.build(t)
    }
    /// The `# Parameters` section of the algorithm's module documentation.
    pub fn parameters(&self) -> String {
        crate::config::parameters_section(self.info.doc)
    }
}

/// One environment.
#[derive(Debug, Clone, Copy)]
pub struct EnvEntry {
    /// The record its file declares.
    pub info: &'static EnvInfo,
    /// Its parser.
    pub parse: EnvParse,
}

impl EnvEntry {
    /// Config `kind`.
    pub fn kind(&self) -> &'static str {
        self.info.kind
    }
    /// Setting.
    pub fn setting(&self) -> Setting {
        self.info.setting
    }
    /// Parse the `[env]` table (without `kind`).
    ///
    /// # Errors
    /// Unknown keys, wrong types, missing required parameters, out-of-range values.
    pub fn build(&self, t: toml::Table) -> Result<EnvBuilt> {
        Ok(match self.parse {
            EnvParse::Finite(parse) => EnvBuilt::Finite(parse(t)?),
            EnvParse::Linear(parse) => EnvBuilt::Linear(parse(t)?),
            EnvParse::Contextual(parse) => EnvBuilt::Contextual(parse(t)?),
            EnvParse::Bai(parse) => EnvBuilt::Bai(parse(t)?),
        })
    }
}

/// Counts may be written `1e6` in any table: a whole float (finite, `|x| < 2^53`) becomes an
/// integer before deserializing, which `f64` fields accept unchanged and `u64`/`usize` fields
/// now accept too. Recursive (arrays and sub-tables).
pub fn counts_as_integers(v: &mut toml::Value) {
    match v {
        toml::Value::Float(f)
            if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 =>
        {
            *v = toml::Value::Integer(*f as i64);
        }
        toml::Value::Array(a) => a.iter_mut().for_each(counts_as_integers),
        toml::Value::Table(t) => t.iter_mut().for_each(|(_, v)| counts_as_integers(v)),
        _ => {}
    }
}

/// The value at a serde path (`window`, `per_arm.epsilon[1]`) of a table, for error messages.
fn value_at(t: &toml::Table, path: &serde_path_to_error::Path) -> Option<String> {
    let mut cur: Option<&toml::Value> = None;
    for seg in path.iter() {
        cur = match seg {
            serde_path_to_error::Segment::Map { key } => match cur {
                None => t.get(key.as_str()),
                Some(v) => v.get(key.as_str()),
            },
            serde_path_to_error::Segment::Seq { index } => cur.and_then(|v| v.get(*index)),
            _ => return None,
        };
        cur?;
    }
    cur.map(|v| v.to_string())
}

/// Deserialize a table into `T` with a clear message: unknown keys named with the allowed ones,
/// missing required fields, and type errors naming the field (`window = [1, 2]: expected u64`).
/// Counts may be written `1e6` ([`counts_as_integers`]).
///
/// # Errors
/// As said.
pub fn from_table<T: serde::de::DeserializeOwned>(t: toml::Table) -> Result<T> {
    let mut v = toml::Value::Table(t);
    counts_as_integers(&mut v);
    let toml::Value::Table(t) = v else {
        unreachable!("a table stays a table")
    };
    // Unknown top-level keys: a typed error, from the type's own field list.
    if let Some(allowed) = field_names::<T>()
        && let Some(field) = t.keys().find(|k| !allowed.contains(&k.as_str()))
    {
        return Err(Error::UnknownField {
            field: field.clone(),
            allowed: allowed.iter().map(|s| s.to_string()).collect(),
        });
    }
    serde_path_to_error::deserialize(toml::Value::Table(t.clone())).map_err(
        |e: serde_path_to_error::Error<toml::de::Error>| {
            let msg = e.inner().message().trim().to_string();
            // serde's "missing field `rho`": name the field the way every other error does.
            if let Some(field) = msg
                .strip_prefix("missing field `")
                .and_then(|r| r.strip_suffix('`'))
            {
                let field = match e.path().to_string().as_str() {
                    "." | "" => field.to_string(),
                    p => format!("{p}.{field}"),
                };
                return Error::param(
                    field,
                    "(missing)",
                    "a value: this parameter is required (its range: `dpbandits list`)",
                );
            }
            if msg.starts_with("unknown field") {
                return Error::Config(msg);
            }
            let path = e.path().to_string();
            match (path.as_str(), value_at(&t, e.path())) {
                ("." | "", _) | (_, None) => Error::Config(msg),
                (p, Some(value)) => Error::param(
                    p,
                    value,
                    match msg
                        .split_once(", expected ")
                        .map_or(msg.as_str(), |(_, e)| e)
                    {
                        "u64" | "usize" | "u32" | "u16" | "u8" => {
                            "a whole number >= 0 (e.g. 1000, 1_000 or 1e3)".to_string()
                        }
                        "f64" | "f32" => "a number".to_string(),
                        other => other.to_string(),
                    },
                ),
            }
        },
    )
}

/// Deserialize and validate: the one way a configuration is made from a table.
///
/// # Errors
/// See [`from_table`] and the type's [`Config::validate`].
pub fn parse<T: Config>(t: toml::Table) -> Result<T> {
    let mut cfg: T = from_table(t)?;
    cfg.validate()?;
    Ok(cfg)
}

/// [`parse`] for a kind that shares its configuration type with other kinds: `refuse` lists keys
/// that do not apply to this kind, `defaults` are inserted when absent (e.g. `rho = inf` for the
/// non-private member of a family), and `set` marks the kind before validation.
fn parse_kind<T: Config>(
    mut t: toml::Table,
    refuse: &[&str],
    defaults: &[(&str, f64)],
    set: impl FnOnce(&mut T),
) -> Result<T> {
    for &k in refuse {
        if let Some(v) = t.get(k) {
            return Err(Error::NotApplicable {
                field: k.to_string(),
                value: v.to_string(),
            });
        }
    }
    for &(k, v) in defaults {
        t.entry(k).or_insert(toml::Value::Float(v));
    }
    let mut cfg: T = from_table(t)?;
    set(&mut cfg);
    cfg.validate()?;
    Ok(cfg)
}

/// The field of a configuration that holds its [`Release`].
const RELEASE_FIELD: &str = "release";

/// [`parse_kind`] for a configuration holding a [`Release`] (`#[serde(default)] pub release:
/// Release`): the release keys (`boundary`, `noise`, `grid_bits`) are taken out of the table and
/// parsed into that one field; errors name the keys as the table writes them (`noise`, not
/// `release.noise`; the allowed keys list the three, not `release`), and a `release` key in the
/// table is refused as unknown. The release is checked by the caller, once
/// ([`Release::check`], after the configuration's `validate`: see [`checked_finite`]).
fn parse_released<T: Config>(
    mut t: toml::Table,
    refuse: &[&str],
    defaults: &[(&str, f64)],
    set: impl FnOnce(&mut T),
) -> Result<T> {
    if t.contains_key(RELEASE_FIELD) {
        return Err(unnest_release(Error::UnknownField {
            field: RELEASE_FIELD.into(),
            allowed: field_names::<T>()
                .unwrap_or_default()
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }));
    }
    let mut release = toml::Table::new();
    for key in Release::KEYS {
        if let Some(v) = t.remove(key) {
            release.insert(key.into(), v);
        }
    }
    t.insert(RELEASE_FIELD.into(), toml::Value::Table(release));
    parse_kind(t, refuse, defaults, set).map_err(unnest_release)
}

/// An error of a configuration parsed with its release nested ([`parse_released`]), in the terms
/// of the table as written.
fn unnest_release(e: Error) -> Error {
    match e {
        Error::UnknownField { field, allowed } => Error::UnknownField {
            field,
            allowed: allowed
                .into_iter()
                .flat_map(|a| {
                    if a == RELEASE_FIELD {
                        Release::KEYS.map(String::from).to_vec()
                    } else {
                        vec![a]
                    }
                })
                .collect(),
        },
        Error::Param {
            field,
            value,
            expected,
        } => Error::Param {
            field: field
                .strip_prefix("release.")
                .map_or(field.clone(), str::to_string),
            value,
            expected,
        },
        other => other,
    }
}

/// The one check of a finite configuration's [`Release`] against its guarantee (deployment noise
/// needs a private configuration).
///
/// # Errors
/// [`Release::check`]'s; a kind registered as private without `release()` (a registry bug, which
/// the conformance suite would show) is an [`Error::Config`].
fn checked_finite<T: PolicyConfig>(cfg: T) -> Result<T> {
    let release = cfg.release().ok_or_else(|| no_release(cfg.kind()))?;
    release.check(cfg.guarantee().is_private())?;
    Ok(cfg)
}

fn checked_linear<T: LinearPolicyConfig>(cfg: T) -> Result<T> {
    let release = cfg.release().ok_or_else(|| no_release(cfg.kind()))?;
    release.check(cfg.guarantee().is_private())?;
    Ok(cfg)
}

fn checked_contextual<T: ContextualPolicyConfig>(cfg: T) -> Result<T> {
    let release = cfg.release().ok_or_else(|| no_release(cfg.kind()))?;
    release.check(cfg.guarantee().is_private())?;
    Ok(cfg)
}

fn no_release(kind: &str) -> Error {
    Error::Config(format!(
        "kind = \"{kind}\" is registered with a release (`private_*` parser) but its configuration's \
         `release()` returns None"
    ))
}

/// A finite kind whose configuration holds a [`Release`]: the registry line
/// `parse: Parse::Finite(private_finite::<TheConfig>)`.
fn private_finite<T: Config + PolicyConfig + 'static>(
    t: toml::Table,
) -> Result<Box<dyn PolicyConfig>> {
    Ok(Box::new(checked_finite(parse_released::<T>(
        t,
        &[],
        &[],
        |_| {},
    )?)?))
}

/// A linear kind whose configuration holds a [`Release`] (as [`private_finite`]).
#[allow(dead_code)]
fn private_linear<T: Config + LinearPolicyConfig + 'static>(
    t: toml::Table,
) -> Result<Box<dyn LinearPolicyConfig>> {
    Ok(Box::new(checked_linear(parse_released::<T>(
        t,
        &[],
        &[],
        |_| {},
    )?)?))
}

/// A contextual kind whose configuration holds a [`Release`] (as [`private_finite`]).
#[allow(dead_code)]
fn private_contextual<T: Config + ContextualPolicyConfig + 'static>(
    t: toml::Table,
) -> Result<Box<dyn ContextualPolicyConfig>> {
    Ok(Box::new(checked_contextual(parse_released::<T>(
        t,
        &[],
        &[],
        |_| {},
    )?)?))
}

// One parser and one restorer per setting: each entry below is `Parse::X(x::<ConfigType>)` and
// `Restore::X(state_x::<PolicyType>)`; a kind that shares its configuration type with other kinds
// has a named function (built on `parse_kind`) instead.

fn finite<T: Config + PolicyConfig + 'static>(t: toml::Table) -> Result<Box<dyn PolicyConfig>> {
    Ok(Box::new(parse::<T>(t)?))
}

fn linear<T: Config + LinearPolicyConfig + 'static>(
    t: toml::Table,
) -> Result<Box<dyn LinearPolicyConfig>> {
    Ok(Box::new(parse::<T>(t)?))
}

fn contextual<T: Config + ContextualPolicyConfig + 'static>(
    t: toml::Table,
) -> Result<Box<dyn ContextualPolicyConfig>> {
    Ok(Box::new(parse::<T>(t)?))
}

fn state_contextual<T: ContextualPolicy + serde::de::DeserializeOwned + 'static>(
    s: &Snapshot,
) -> Result<Box<dyn ContextualPolicy>> {
    Ok(Box::new(s.state::<T>()?))
}

fn bai<T: Config + BaiConfig + 'static>(t: toml::Table) -> Result<Box<dyn BaiConfig>> {
    Ok(Box::new(parse::<T>(t)?))
}

fn finite_env<T: Config + EnvConfig + 'static>(t: toml::Table) -> Result<Box<dyn EnvConfig>> {
    Ok(Box::new(parse::<T>(t)?))
}

fn linear_env<T: Config + LinearEnvConfig + 'static>(
    t: toml::Table,
) -> Result<Box<dyn LinearEnvConfig>> {
    Ok(Box::new(parse::<T>(t)?))
}

fn contextual_env<T: Config + ContextualEnvConfig + 'static>(
    t: toml::Table,
) -> Result<Box<dyn ContextualEnvConfig>> {
    Ok(Box::new(parse::<T>(t)?))
}

fn bai_env<T: Config + BaiEnvConfig + 'static>(t: toml::Table) -> Result<Box<dyn BaiEnvConfig>> {
    Ok(Box::new(parse::<T>(t)?))
}

fn state_finite<T: Policy + serde::de::DeserializeOwned + 'static>(
    s: &Snapshot,
) -> Result<Box<dyn Policy>> {
    Ok(Box::new(s.state::<T>()?))
}

fn state_linear<T: LinearPolicy + serde::de::DeserializeOwned + 'static>(
    s: &Snapshot,
) -> Result<Box<dyn LinearPolicy>> {
    Ok(Box::new(s.state::<T>()?))
}

fn state_bai<T: BaiAlgorithm + serde::de::DeserializeOwned + 'static>(
    s: &Snapshot,
) -> Result<Box<dyn BaiAlgorithm>> {
    Ok(Box::new(s.state::<T>()?))
}

const INF: f64 = f64::INFINITY;

/// `adaptive_ucb`: AdaC-UCB's non-private counterpart (`rho = inf` unless given).
fn adaptive_ucb(t: toml::Table) -> Result<Box<dyn PolicyConfig>> {
    let mark = |c: &mut finite::AdaCUcbConfig| c.non_private_kind = true;
    Ok(Box::new(checked_finite(parse_released(
        t,
        &[],
        &[("rho", INF)],
        mark,
    )?)?))
}

/// `adap_ucb` and `adap_klucb`: AdaP with its index.
fn adap(t: toml::Table, index: finite::AdaPIndex) -> Result<Box<dyn PolicyConfig>> {
    let mark = |c: &mut finite::AdaPConfig| c.index = index;
    Ok(Box::new(checked_finite(parse_released(
        t,
        &[],
        &[],
        mark,
    )?)?))
}

/// `dp_ucb`, `dp_ucb_bound` and `dp_ucb_hybrid`: the tree-based UCB family with its counter; the
/// hybrid kinds take no `horizon`.
fn dp_ucb(t: toml::Table, variant: finite::DpUcbVariant) -> Result<Box<dyn PolicyConfig>> {
    let refuse: &[&str] = match variant {
        finite::DpUcbVariant::Tree => &[],
        _ => &["horizon"],
    };
    let mark = |c: &mut finite::DpUcbConfig| c.variant = variant;
    Ok(Box::new(parse_kind(t, refuse, &[], mark)?))
}

/// `sw_klucb_cf`: kl-UCB-CF with a sliding window.
fn sw_klucb_cf(t: toml::Table) -> Result<Box<dyn PolicyConfig>> {
    let mark = |c: &mut finite::CfConfig| c.windowed = true;
    Ok(Box::new(parse_kind(t, &[], &[], mark)?))
}

/// `adap_tt` and `adap_tt_star`.
fn adap_tt(t: toml::Table, star: bool) -> Result<Box<dyn BaiConfig>> {
    let mark = |c: &mut bai::AdapTtConfig| c.star = star;
    Ok(Box::new(parse_kind(t, &[], &[], mark)?))
}

/// `corrupt_bernoulli`: the piecewise environment with corrupted feedback.
fn corrupt_bernoulli(t: toml::Table) -> Result<Box<dyn EnvConfig>> {
    let mark = |c: &mut finite::PiecewiseConfig| c.corrupt_kind = true;
    Ok(Box::new(parse_kind(t, &[], &[], mark)?))
}

/// `ldp`: the inner policy is any finite-armed kind of this registry, parsed with the rest of the
/// table; the wrapper takes `epsilon` or `per_arm`.
fn parse_ldp(mut t: toml::Table) -> Result<Box<dyn PolicyConfig>> {
    let inner = match t.remove("inner") {
        Some(toml::Value::String(s)) => s,
        other => {
            return Err(Error::param(
                "inner",
                other.map_or("(missing)".into(), |v| v.to_string()),
                "the kind of a non-private finite-armed policy, e.g. \"kl_ucb\"",
            ));
        }
    };
    let epsilon = match t.remove("epsilon") {
        None => None,
        Some(toml::Value::Float(f)) => Some(f),
        Some(toml::Value::Integer(i)) => Some(i as f64),
        Some(v) => return Err(Error::param("epsilon", v, "a number > 0 (inf allowed)")),
    };
    let per_arm = match t.remove("per_arm") {
        None => None,
        Some(v) => Some(
            v.try_into::<crate::privacy::PerArmChannel>()
                .map_err(|e| Error::Config(format!("per_arm: {}", e.message().trim())))?,
        ),
    };
    let noise = match t.remove("noise") {
        None => crate::privacy::NoiseKind::Simulation,
        Some(v) => v
            .try_into::<crate::privacy::NoiseKind>()
            .map_err(|e| Error::Config(e.message().trim().to_string()))?,
    };
    let grid_bits = match t.remove("grid_bits") {
        None => crate::privacy::DEFAULT_GRID_BITS,
        Some(toml::Value::Integer(i)) => u32::try_from(i).map_err(|_| {
            Error::param(
                "grid_bits",
                i,
                format!("an integer in 1..={}", crate::privacy::MAX_GRID_BITS),
            )
        })?,
        Some(v) => {
            return Err(Error::param(
                "grid_bits",
                v,
                format!("an integer in 1..={}", crate::privacy::MAX_GRID_BITS),
            ));
        }
    };
    let entry = policy(&inner).at(|| "inner".into())?;
    let Parse::Finite(parse_inner) = entry.parse else {
        return Err(Error::param(
            "inner",
            format!("\"{inner}\""),
            "a finite-armed policy",
        ));
    };
    let cfg = parse_inner(t).at(|| format!("inner ({inner})"))?;
    Ok(Box::new(
        finite::LdpConfig::new(cfg, epsilon, per_arm)?.with_noise(noise, grid_bits)?,
    ))
}

fn gope(
    t: toml::Table,
    placement: NoisePlacement,
    private: bool,
) -> Result<Box<dyn LinearPolicyConfig>> {
    let defaults: &[(&str, f64)] = if private { &[] } else { &[("rho", INF)] };
    Ok(Box::new(parse_kind(
        t,
        &[],
        defaults,
        |c: &mut linear::GopeConfig| c.placement = placement,
    )?))
}

fn oful(t: toml::Table, kind: OfulKind) -> Result<Box<dyn ContextualPolicyConfig>> {
    let (refuse, defaults): (&[&str], &[(&str, f64)]) = match kind {
        OfulKind::Oful => (&["rho", "c", "mode", "radius", "lambda0"], &[("rho", INF)]),
        OfulKind::RsOful => (&["rho", "mode", "radius", "lambda0"], &[("rho", INF)]),
        OfulKind::AdacOful => (&[], &[]),
    };
    Ok(Box::new(parse_kind(
        t,
        refuse,
        defaults,
        |c: &mut OfulConfig| c.kind = kind,
    )?))
}

/// `ldp`: the wrapper around any finite-armed policy of the registry.
fn restore_ldp(s: &Snapshot) -> Result<Box<dyn Policy>> {
    Ok(Box::new(finite::Ldp::restore_with(s, restore_finite)?))
}

/// kl-UCB-CF and SW-KLUCB-CF: the `ldp` wrapper around a bare [`finite::CfLearner`].
fn restore_cf(s: &Snapshot) -> Result<Box<dyn Policy>> {
    Ok(Box::new(finite::Ldp::restore_with(s, |inner| {
        inner.expect(Setting::FiniteArmed, finite::CF_LEARNER)?;
        Ok(Box::new(inner.state::<finite::CfLearner>()?))
    })?))
}

/// Restore a snapshot written by any policy of the registry: the header's kind picks the
/// registry entry, whose [`Restore`] rebuilds the concrete type; the restored policy must
/// snapshot as the same kind again. The result continues bit-identically to the policy that
/// was saved.
///
/// # Errors
/// [`Error::Snapshot`] naming what differs: another format, format version or crate version, a
/// corrupted snapshot (checksum), an unknown kind, a setting that does not match the kind, or a
/// state that does not match this build's policy.
pub fn restore(snap: &Snapshot) -> Result<Restored> {
    snap.verify()?;
    let entry = POLICIES
        .iter()
        .find(|e| e.kind() == snap.kind())
        .ok_or_else(|| {
            Error::Snapshot(format!(
                "kind = \"{}\": not a kind of this build's registry (`dpbandits list`)",
                snap.kind()
            ))
        })?;
    snap.expect(entry.setting(), entry.kind())?;
    let restored = match entry.restore {
        Restore::Finite(f) => Restored::Finite(f(snap)?),
        Restore::Linear(f) => Restored::Linear(f(snap)?),
        Restore::Contextual(f) => Restored::Contextual(f(snap)?),
        Restore::Bai(f) => Restored::Bai(f(snap)?),
    };
    let again = restored.snapshot()?;
    if again.kind() != snap.kind() {
        return Err(Error::Snapshot(format!(
            "kind = \"{}\": the state restores as a \"{}\" policy",
            snap.kind(),
            again.kind()
        )));
    }
    Ok(restored)
}

/// [`restore`] a snapshot that the caller expects to be of `kind`.
///
/// # Errors
/// A snapshot of another kind (naming both), or see [`restore`].
pub fn restore_kind(snap: &Snapshot, kind: &str) -> Result<Restored> {
    let entry = policy(kind)?;
    snap.expect(entry.setting(), kind)?;
    restore(snap)
}

fn wrong_setting(snap: &Snapshot, expected: Setting) -> Error {
    Error::Snapshot(format!(
        "setting = {} (kind \"{}\"): expected a snapshot of a {expected} policy",
        snap.setting(),
        snap.kind()
    ))
}

/// [`restore`] a finite-armed policy.
///
/// # Errors
/// A snapshot of another setting, or see [`restore`].
pub fn restore_finite(snap: &Snapshot) -> Result<Box<dyn Policy>> {
    match restore(snap)? {
        Restored::Finite(p) => Ok(p),
        _ => Err(wrong_setting(snap, Setting::FiniteArmed)),
    }
}

/// [`restore`] a linear-bandit policy.
///
/// # Errors
/// A snapshot of another setting, or see [`restore`].
pub fn restore_linear(snap: &Snapshot) -> Result<Box<dyn LinearPolicy>> {
    match restore(snap)? {
        Restored::Linear(p) => Ok(p),
        _ => Err(wrong_setting(snap, Setting::Linear)),
    }
}

/// [`restore`] a contextual policy.
///
/// # Errors
/// A snapshot of another setting, or see [`restore`].
pub fn restore_contextual(snap: &Snapshot) -> Result<Box<dyn ContextualPolicy>> {
    match restore(snap)? {
        Restored::Contextual(p) => Ok(p),
        _ => Err(wrong_setting(snap, Setting::Contextual)),
    }
}

/// [`restore`] a BAI run.
///
/// # Errors
/// A snapshot of another setting, or see [`restore`].
pub fn restore_bai(snap: &Snapshot) -> Result<Box<dyn BaiAlgorithm>> {
    match restore(snap)? {
        Restored::Bai(p) => Ok(p),
        _ => Err(wrong_setting(snap, Setting::Bai)),
    }
}

/// All algorithms.
pub static POLICIES: &[PolicyEntry] = &[
    PolicyEntry {
        info: &finite::UCB1,
        parse: Parse::Finite(finite::<finite::Ucb1Config>),
        restore: Restore::Finite(state_finite::<finite::Ucb1>),
    },
    PolicyEntry {
        info: &finite::KL_UCB,
        parse: Parse::Finite(finite::<finite::KlUcbConfig>),
        restore: Restore::Finite(state_finite::<finite::KlUcb>),
    },
    PolicyEntry {
        info: &finite::THOMPSON,
        parse: Parse::Finite(finite::<finite::ThompsonConfig>),
        restore: Restore::Finite(state_finite::<finite::ThompsonSampling>),
    },
    PolicyEntry {
        info: &finite::ADAPTIVE_UCB,
        parse: Parse::Finite(adaptive_ucb),
        restore: Restore::Finite(state_finite::<finite::AdaCUcb>),
    },
    PolicyEntry {
        info: &finite::ADAC_UCB,
        parse: Parse::Finite(private_finite::<finite::AdaCUcbConfig>),
        restore: Restore::Finite(state_finite::<finite::AdaCUcb>),
    },
    PolicyEntry {
        info: &finite::ADAP_UCB,
        parse: Parse::Finite(|t| adap(t, finite::AdaPIndex::Ucb)),
        restore: Restore::Finite(state_finite::<finite::AdaP>),
    },
    PolicyEntry {
        info: &finite::ADAP_KLUCB,
        parse: Parse::Finite(|t| adap(t, finite::AdaPIndex::KlUcb)),
        restore: Restore::Finite(state_finite::<finite::AdaP>),
    },
    PolicyEntry {
        info: &finite::DP_SE,
        parse: Parse::Finite(finite::<finite::DpSeConfig>),
        restore: Restore::Finite(state_finite::<finite::DpSe>),
    },
    #[cfg(feature = "exercise")]
    PolicyEntry {
        info: &finite::EXERCISE_UCB,
        parse: Parse::Finite(private_finite::<finite::ExerciseUcbConfig>),
        restore: Restore::Finite(state_finite::<finite::ExerciseUcb>),
    },
    PolicyEntry {
        info: &finite::DP_UCB,
        parse: Parse::Finite(|t| dp_ucb(t, finite::DpUcbVariant::Tree)),
        restore: Restore::Finite(state_finite::<finite::DpUcb>),
    },
    PolicyEntry {
        info: &finite::DP_UCB_BOUND,
        parse: Parse::Finite(|t| dp_ucb(t, finite::DpUcbVariant::HybridBound)),
        restore: Restore::Finite(state_finite::<finite::DpUcb>),
    },
    PolicyEntry {
        info: &finite::DP_UCB_HYBRID,
        parse: Parse::Finite(|t| dp_ucb(t, finite::DpUcbVariant::HybridMixture)),
        restore: Restore::Finite(state_finite::<finite::DpUcb>),
    },
    PolicyEntry {
        info: &finite::DP_TS,
        parse: Parse::Finite(finite::<finite::DpTsConfig>),
        restore: Restore::Finite(state_finite::<finite::DpTs>),
    },
    PolicyEntry {
        info: &finite::LDP_UCB,
        parse: Parse::Finite(finite::<finite::LdpUcbConfig>),
        restore: Restore::Finite(state_finite::<finite::LdpUcb>),
    },
    PolicyEntry {
        info: &finite::KL_UCB_CF,
        parse: Parse::Finite(finite::<finite::CfConfig>),
        restore: Restore::Finite(restore_cf),
    },
    PolicyEntry {
        info: &finite::SW_KLUCB_CF,
        parse: Parse::Finite(sw_klucb_cf),
        restore: Restore::Finite(restore_cf),
    },
    PolicyEntry {
        info: &finite::LDP,
        parse: Parse::Finite(parse_ldp),
        restore: Restore::Finite(restore_ldp),
    },
    PolicyEntry {
        info: &finite::SW_UCB,
        parse: Parse::Finite(finite::<finite::SwUcbConfig>),
        restore: Restore::Finite(state_finite::<finite::SwUcb>),
    },
    PolicyEntry {
        info: &finite::SW_KL_UCB,
        parse: Parse::Finite(finite::<finite::SwKlUcbConfig>),
        restore: Restore::Finite(state_finite::<finite::SwUcb>),
    },
    PolicyEntry {
        info: &finite::D_UCB,
        parse: Parse::Finite(finite::<finite::DUcbConfig>),
        restore: Restore::Finite(state_finite::<finite::DUcb>),
    },
    PolicyEntry {
        info: &bai::DP_TT,
        parse: Parse::Bai(bai::<bai::DpTtConfig>),
        restore: Restore::Bai(state_bai::<bai::TopTwoRun>),
    },
    PolicyEntry {
        info: &bai::ADAP_TT,
        parse: Parse::Bai(|t| adap_tt(t, false)),
        restore: Restore::Bai(state_bai::<bai::TopTwoRun>),
    },
    PolicyEntry {
        info: &bai::ADAP_TT_STAR,
        parse: Parse::Bai(|t| adap_tt(t, true)),
        restore: Restore::Bai(state_bai::<bai::TopTwoRun>),
    },
    PolicyEntry {
        info: &bai::DP_SE_BAI,
        parse: Parse::Bai(bai::<bai::DpSeBaiConfig>),
        restore: Restore::Bai(state_bai::<bai::DpSeRun>),
    },
    PolicyEntry {
        info: &bai::EB_TCI,
        parse: Parse::Bai(bai::<bai::EbTciConfig>),
        restore: Restore::Bai(state_bai::<bai::TopTwoRun>),
    },
    PolicyEntry {
        info: &linear::GOPE,
        parse: Parse::Linear(|t| gope(t, NoisePlacement::None, false)),
        restore: Restore::Linear(state_linear::<linear::PhasedElimination>),
    },
    PolicyEntry {
        info: &linear::ADAC_GOPE,
        parse: Parse::Linear(|t| gope(t, NoisePlacement::Intermediate, true)),
        restore: Restore::Linear(state_linear::<linear::PhasedElimination>),
    },
    PolicyEntry {
        info: &linear::ADAR_GOPE_VAR,
        parse: Parse::Linear(|t| gope(t, NoisePlacement::PerArmSums, true)),
        restore: Restore::Linear(state_linear::<linear::PhasedElimination>),
    },
    PolicyEntry {
        info: &linear::GOPE_OUTPUT_PERTURBATION,
        parse: Parse::Linear(|t| gope(t, NoisePlacement::Output, true)),
        restore: Restore::Linear(state_linear::<linear::PhasedElimination>),
    },
    PolicyEntry {
        info: &linear::LIN_UCB,
        parse: Parse::Linear(linear::<linear::LinUcbConfig>),
        restore: Restore::Linear(state_linear::<linear::LinUcb>),
    },
    PolicyEntry {
        info: &contextual::OFUL,
        parse: Parse::Contextual(|t| oful(t, OfulKind::Oful)),
        restore: Restore::Contextual(contextual::restore_oful),
    },
    PolicyEntry {
        info: &contextual::RS_OFUL,
        parse: Parse::Contextual(|t| oful(t, OfulKind::RsOful)),
        restore: Restore::Contextual(contextual::restore_oful),
    },
    PolicyEntry {
        info: &contextual::ADAC_OFUL,
        parse: Parse::Contextual(|t| oful(t, OfulKind::AdacOful)),
        restore: Restore::Contextual(contextual::restore_oful),
    },
    PolicyEntry {
        info: &contextual::LIN_PRIV,
        parse: Parse::Contextual(contextual::<contextual::LinPrivConfig>),
        restore: Restore::Contextual(state_contextual::<contextual::LinPriv>),
    },
    PolicyEntry {
        info: &contextual::SHARIFF_SHEFFET,
        parse: Parse::Contextual(contextual::<contextual::ShariffSheffetConfig>),
        restore: Restore::Contextual(state_contextual::<contextual::ShariffSheffet>),
    },
    PolicyEntry {
        info: &contextual::ADAC_OFUL_JOINT,
        parse: Parse::Contextual(contextual::<contextual::AdacOfulJointConfig>),
        restore: Restore::Contextual(state_contextual::<contextual::AdacOfulJoint>),
    },
];

/// All environments.
pub static ENVIRONMENTS: &[EnvEntry] = &[
    EnvEntry {
        info: &finite::BERNOULLI,
        parse: EnvParse::Finite(finite_env::<finite::BernoulliConfig>),
    },
    EnvEntry {
        info: &finite::GAUSSIAN,
        parse: EnvParse::Finite(finite_env::<finite::GaussianConfig>),
    },
    EnvEntry {
        info: &finite::BETA,
        parse: EnvParse::Finite(finite_env::<finite::BetaConfig>),
    },
    EnvEntry {
        info: &finite::PIECEWISE_BERNOULLI,
        parse: EnvParse::Finite(finite_env::<finite::PiecewiseConfig>),
    },
    EnvEntry {
        info: &finite::CORRUPT_BERNOULLI,
        parse: EnvParse::Finite(corrupt_bernoulli),
    },
    EnvEntry {
        info: &linear::LINEAR,
        parse: EnvParse::Linear(linear_env::<linear::LinearConfig>),
    },
    EnvEntry {
        info: &contextual::CONTEXTUAL_GAUSSIAN,
        parse: EnvParse::Contextual(contextual_env::<contextual::ContextualGaussianConfig>),
    },
    EnvEntry {
        info: &contextual::CONTEXTUAL_FILE,
        parse: EnvParse::Contextual(contextual_env::<contextual::ContextualFileConfig>),
    },
    EnvEntry {
        info: &contextual::CONTEXTUAL_CLASSIFICATION,
        parse: EnvParse::Contextual(contextual_env::<contextual::ContextualClassificationConfig>),
    },
    EnvEntry {
        info: &bai::BAI_BERNOULLI,
        parse: EnvParse::Bai(bai_env::<bai::BaiBernoulliConfig>),
    },
];

/// The value [`PolicyEntry::takes`] sets a key to: of no type any parameter accepts, so a key the
/// kind takes fails on its value (or not at all), never as an unknown field.
const TAKES_PROBE: &str = "\u{1}takes-probe";

impl PolicyEntry {
    /// Whether this kind takes the top-level key `key` (e.g. `boundary`, `noise`) in its
    /// parameter table, judged on its example configuration (for `ldp`, whose other keys go to
    /// its inner kind, on the example's inner kind: use [`PolicyEntry::takes_in`] with the
    /// actual table).
    pub fn takes(&self, key: &str) -> bool {
        let t: toml::Table = toml::from_str(self.info.example).unwrap_or_default();
        self.takes_in(key, &t)
    }

    /// Whether this kind takes `key` in a table like `table` (without `kind`). A release key
    /// (`boundary`, `noise`, `grid_bits`) is answered from the records, without parsing: the
    /// kind's [`AlgorithmInfo::release_keys`], and for `ldp` a key it does not take itself is its
    /// inner kind's (the table's `inner`, else the example's). Any other key: `table` with `key`
    /// set to a probe value is parsed, and the key is not taken when the parse refuses it as an
    /// unknown field ([`Error::UnknownField`]) or as a key of a shared configuration type that
    /// does not apply to this kind ([`Error::NotApplicable`]); a table broken otherwise answers
    /// `true` (the real parse then reports what is broken). The conformance suite checks the
    /// records against the parse.
    pub fn takes_in(&self, key: &str, table: &toml::Table) -> bool {
        if Release::KEYS.contains(&key) {
            if self.info.takes_release_key(key) {
                return true;
            }
            if self.kind() == finite::LDP.kind {
                let example: toml::Table = toml::from_str(self.info.example).unwrap_or_default();
                let inner = table
                    .get("inner")
                    .or_else(|| example.get("inner"))
                    .and_then(|v| v.as_str());
                return inner
                    .and_then(|k| policy(k).ok())
                    .is_some_and(|e| e.kind() != self.kind() && e.takes_in(key, table));
            }
            return false;
        }
        let mut t = table.clone();
        t.insert(key.to_string(), toml::Value::String(TAKES_PROBE.into()));
        match self.build(t) {
            Ok(_) => true,
            Err(e) => !refuses_key(&e, key),
        }
    }

    /// The top-level keys this kind's configuration type takes, when the type lists them (every
    /// registry kind's does; `ldp`: its own keys and its example's inner kind's).
    pub fn keys(&self) -> Vec<String> {
        let mut t: toml::Table = toml::from_str(self.info.example).unwrap_or_default();
        t.insert(
            "\u{1}no-such-key".into(),
            toml::Value::String(TAKES_PROBE.into()),
        );
        match self.build(t) {
            Err(e) => {
                let mut e = &e;
                while let Error::At { inner, .. } = e {
                    e = inner;
                }
                match e {
                    Error::UnknownField { allowed, .. } => {
                        let mut keys = allowed.clone();
                        if self.kind() == "ldp" {
                            keys.extend(["inner", "epsilon", "per_arm"].map(String::from));
                        }
                        keys
                    }
                    _ => vec![],
                }
            }
            Ok(_) => vec![],
        }
    }
}

/// Whether `e` (through its locations) refuses `key` as unknown or not applicable.
fn refuses_key(e: &Error, key: &str) -> bool {
    match e {
        Error::At { inner, .. } => refuses_key(inner, key),
        Error::UnknownField { allowed, .. } => !allowed.iter().any(|a| a == key),
        Error::NotApplicable { field, .. } => field == key,
        _ => false,
    }
}

/// The field names of `T` (a struct with `deny_unknown_fields`), from serde itself: `T` is
/// deserialized from a map holding one key no type has, and the error serde raises for it
/// ([`serde::de::Error::unknown_field`]) carries the struct's full field list. `None` for a type
/// that does not refuse unknown keys or is not a struct (then nothing is checked up front).
fn field_names<T: serde::de::DeserializeOwned>() -> Option<&'static [&'static str]> {
    #[derive(Debug)]
    struct Probe(Option<&'static [&'static str]>);
    impl std::fmt::Display for Probe {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("field-name probe")
        }
    }
    impl std::error::Error for Probe {}
    impl serde::de::Error for Probe {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Probe(None)
        }
        fn unknown_field(_: &str, expected: &'static [&'static str]) -> Self {
            Probe(Some(expected))
        }
    }
    let map = serde::de::value::MapDeserializer::<_, Probe>::new(std::iter::once((
        "\u{1}field-name-probe",
        (),
    )));
    match T::deserialize(map) {
        Err(Probe(found)) => found,
        Ok(_) => None,
    }
}

/// Look up an algorithm by kind.
///
/// # Errors
/// An unknown kind (the message lists the known ones).
pub fn policy(kind: &str) -> Result<&'static PolicyEntry> {
    POLICIES.iter().find(|e| e.kind() == kind).ok_or_else(|| {
        let known: Vec<&str> = POLICIES.iter().map(|e| e.kind()).collect();
        Error::param(
            "kind",
            format!("\"{kind}\""),
            format!("one of: {}", known.join(", ")),
        )
    })
}

/// Look up an environment by kind.
///
/// # Errors
/// An unknown kind (the message lists the known ones).
pub fn environment(kind: &str) -> Result<&'static EnvEntry> {
    ENVIRONMENTS
        .iter()
        .find(|e| e.info.kind == kind)
        .ok_or_else(|| {
            let known: Vec<&str> = ENVIRONMENTS.iter().map(|e| e.info.kind).collect();
            Error::param(
                "kind",
                format!("\"{kind}\""),
                format!("one of: {}", known.join(", ")),
            )
        })
}

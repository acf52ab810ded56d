//! Policy state snapshots: save a running policy (its statistics, its generators' exact state
//! and any episode, phase or sampling block in progress) and restore it later, in this process or
//! another, to continue **bit-identically**.
//!
//! # Sensitive data
//! **A snapshot is sensitive data.** It contains the raw (unnoised) reward sums of the episode or
//! phase in progress, per-arm statistics, and the exact state of the privacy-noise generators:
//! whoever holds it can predict every future noise draw and so undo the privacy of every future
//! release. Store, transmit and delete it like the raw reward data itself, never next to the
//! published outputs. The checksum below detects accidental corruption only; it is not a
//! signature, and a forged snapshot is out of scope (restore only snapshots you wrote).
//!
//! # Format
//! A snapshot is a header and a state:
//!
//! | field | meaning |
//! |---|---|
//! | `format` | always [`FORMAT`] (`"dpbandits-snapshot"`) |
//! | `format_version` | [`FORMAT_VERSION`] |
//! | `crate_version` | the `dpbandits` version that wrote it |
//! | `setting` | `finite_armed`, `linear`, `contextual` or `bai` |
//! | `kind` | the registry kind (e.g. `adac_ucb`) |
//! | `label` | optional: the caller's label of the run (e.g. `adac_ucb(rho=0.1)`) |
//! | `checksum` | FNV-1a 64 of the CBOR encoding of `(setting, kind, label, state)`, 16 hex digits |
//! | `state` | the policy's fields, as its own serde representation |
//!
//! The state is held as a self-describing value tree ([`ciborium::Value`]), so a snapshot can be
//! inspected, and nested (the `ldp` wrapper stores its inner policy's snapshot in its state),
//! without knowing the policy's type. Two encodings of the same tree:
//!
//! * **Binary: CBOR** (RFC 8949, [`Snapshot::to_cbor`]), starting with the self-describe tag
//!   55799 (`d9 d9 f7`) as a magic number. CBOR rather than MessagePack because it is an IETF
//!   standard with a registered file magic, [`ciborium`] (already in the dependency tree through
//!   `criterion`) gives a value tree that holds every `f64` bit-exactly (floats are written in the
//!   shortest width that is lossless, including `-0.0`, subnormals and infinities), and the same
//!   tree serves the JSON path.
//! * **JSON** ([`Snapshot::to_json`]): JSON has no infinities or NaN, and policies hold them
//!   (`rho = inf`, `1/N = inf` for unplayed arms), so a non-finite float is written as the tagged
//!   object `{"$f64": "inf"}` (`"-inf"`, `"nan"`; NaN payloads are not kept: no policy state
//!   depends on one). Finite floats are written in shortest round-trip form and read back with
//!   `serde_json`'s `float_roundtrip` parser, so every finite `f64` (including `-0.0` and
//!   subnormals) comes back with the same bits; object keys keep their order.
//!
//! [`Snapshot::decode`] reads either (JSON starts with `{`, CBOR with the tag).
//!
//! # Versioning
//! The state is the policies' own field layout, so a snapshot restores only in the code that
//! wrote it: [`Snapshot::decode`] refuses another [`FORMAT`], another [`FORMAT_VERSION`] or
//! another crate version, naming what differs (restoring across versions would not continue
//! bit-identically even where the fields happen to parse). [`FORMAT_VERSION`] changes when the
//! header or the encodings change. A state whose fields do not match the policy's (a renamed or
//! added field) is refused by serde naming the field.
//!
//! # Saving and restoring
//! Every policy trait has a `snapshot(&self) -> Result<Snapshot>` method (finite
//! [`crate::finite::Policy`], [`crate::linear::LinearPolicy`],
//! [`crate::contextual::ContextualPolicy`], [`crate::bai::BaiAlgorithm`]). Restoring needs the
//! concrete type: `crate::registry::restore` (feature `experiment`) reads the setting and kind from
//! the header and rebuilds the right one; without the registry, [`Snapshot::state`] deserializes a
//! known type. A policy whose state cannot be captured (say, a noise source drawing from the
//! operating system's entropy) returns [`Error::Snapshot`] from `snapshot()` instead of a snapshot
//! that would not continue identically; that is also the traits' default.
//!
//! BAI runs share an engine (thresholds, caches) with the other runs of their cell; a snapshot
//! stores the engine's parameters only and the restore rebuilds it (every cached value is a pure
//! function of those parameters).

use crate::config::Setting;
use crate::error::{Error, Result};
use ciborium::Value;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The `format` field of every snapshot.
pub const FORMAT: &str = "dpbandits-snapshot";
/// The version of the header and encodings (see the module docs, "Versioning").
pub const FORMAT_VERSION: u32 = 1;
/// The version of the crate that writes snapshots (restore requires the same).
pub const CRATE_VERSION: &str = env!("CARGO_PKG_VERSION");
/// The CBOR self-describe tag 55799 that starts a binary snapshot.
const CBOR_MAGIC: [u8; 3] = [0xd9, 0xd9, 0xf7];
/// The tag of a non-finite float in JSON.
const F64_TAG: &str = "$f64";

/// What a snapshot says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`FORMAT_VERSION`] of the writer.
    pub format_version: u32,
    /// Crate version of the writer.
    pub crate_version: String,
    /// The policy's setting.
    pub setting: Setting,
    /// The policy's registry kind.
    pub kind: String,
    /// The caller's label of the run, if it set one ([`Snapshot::with_label`]).
    pub label: Option<String>,
    /// FNV-1a 64 of the CBOR encoding of `(setting, kind, label, state)`, 16 lowercase hex digits.
    pub checksum: String,
}

/// A saved policy state (see the module docs). Sensitive data: it holds raw reward sums and
/// the noise generators' state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    header: Header,
    state: Value,
}

fn err(msg: impl Into<String>) -> Error {
    Error::Snapshot(msg.into())
}

/// FNV-1a 64 over bytes (corruption check, not a signature).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn cbor_bytes<T: Serialize + ?Sized>(v: &T) -> Result<Vec<u8>> {
    let mut out = vec![];
    ciborium::into_writer(v, &mut out).map_err(|e| err(format!("CBOR encoding failed: {e}")))?;
    Ok(out)
}

/// The checksum covers everything a restore acts on: setting, kind, label and state.
fn checksum(h: &Header, state: &Value) -> Result<String> {
    let covered = (h.setting, &h.kind, &h.label, state);
    Ok(format!("{:016x}", fnv1a(&cbor_bytes(&covered)?)))
}

impl Snapshot {
    /// The snapshot of `state`, a policy of `setting` and registry kind `kind`.
    ///
    /// # Errors
    /// If `state` cannot be represented (a serde error of its type).
    pub fn new<T: Serialize + ?Sized>(setting: Setting, kind: &str, state: &T) -> Result<Self> {
        let state = canonical_nan(
            Value::serialized(state)
                .map_err(|e| err(format!("cannot capture the state of `{kind}`: {e}")))?,
        );
        let mut header = Header {
            format: FORMAT.into(),
            format_version: FORMAT_VERSION,
            crate_version: CRATE_VERSION.into(),
            setting,
            kind: kind.into(),
            label: None,
            checksum: String::new(),
        };
        header.checksum = checksum(&header, &state)?;
        Ok(Snapshot { header, state })
    }

    /// The same snapshot with the caller's label of the run recorded in the header.
    ///
    /// # Errors
    /// Only if the checksum cannot be recomputed (in practice never).
    pub fn with_label(mut self, label: impl Into<String>) -> Result<Self> {
        self.header.label = Some(label.into());
        self.header.checksum = checksum(&self.header, &self.state)?;
        Ok(self)
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The registry kind of the saved policy.
    pub fn kind(&self) -> &str {
        &self.header.kind
    }

    /// The setting of the saved policy.
    pub fn setting(&self) -> Setting {
        self.header.setting
    }

    /// The state as a value tree (for inspection).
    pub fn state_value(&self) -> &Value {
        &self.state
    }

    /// Check format, versions and checksum.
    ///
    /// # Errors
    /// Names the field that differs and both values.
    pub fn verify(&self) -> Result<()> {
        let h = &self.header;
        if h.format != FORMAT {
            return Err(err(format!(
                "format = \"{}\": expected \"{FORMAT}\" (not a dpbandits snapshot)",
                h.format
            )));
        }
        if h.format_version != FORMAT_VERSION {
            return Err(err(format!(
                "format_version = {}: this build reads only format version {FORMAT_VERSION}",
                h.format_version
            )));
        }
        if h.crate_version != CRATE_VERSION {
            return Err(err(format!(
                "crate_version = \"{}\": this build is dpbandits {CRATE_VERSION}; a snapshot restores only in the version that wrote it",
                h.crate_version
            )));
        }
        let actual = checksum(h, &self.state)?;
        if h.checksum != actual {
            return Err(err(format!(
                "checksum = \"{}\": the state hashes to \"{actual}\" (the snapshot is corrupted)",
                h.checksum
            )));
        }
        Ok(())
    }

    /// Check that this is a snapshot of `setting` and `kind`.
    ///
    /// # Errors
    /// Names the expected and the saved setting or kind.
    pub fn expect(&self, setting: Setting, kind: &str) -> Result<()> {
        if self.header.setting != setting || self.header.kind != kind {
            return Err(err(format!(
                "kind = \"{}\" ({}): expected a snapshot of kind \"{kind}\" ({setting})",
                self.header.kind, self.header.setting
            )));
        }
        Ok(())
    }

    /// The state as the concrete type `T` (after [`Snapshot::verify`]).
    ///
    /// # Errors
    /// A failed verification, or a state that is not a `T` (serde's message names the field).
    pub fn state<T: DeserializeOwned>(&self) -> Result<T> {
        self.verify()?;
        self.state.deserialized().map_err(|e| {
            err(format!(
                "the state of this `{}` snapshot does not match this build's policy: {e}",
                self.header.kind
            ))
        })
    }

    /// The binary (CBOR) encoding, starting with the self-describe tag.
    ///
    /// # Errors
    /// Only if the encoder fails (it writes to memory, so in practice never).
    pub fn to_cbor(&self) -> Result<Vec<u8>> {
        let mut out = CBOR_MAGIC.to_vec();
        out.extend(cbor_bytes(self)?);
        Ok(out)
    }

    /// Read a binary snapshot ([`Snapshot::to_cbor`]) and [`Snapshot::verify`] it.
    ///
    /// # Errors
    /// Not a CBOR snapshot, malformed, or refused by `verify`.
    pub fn from_cbor(bytes: &[u8]) -> Result<Self> {
        let body = bytes.strip_prefix(&CBOR_MAGIC[..]).ok_or_else(|| {
            err("not a binary dpbandits snapshot (it does not start with the CBOR tag d9 d9 f7)")
        })?;
        let snap: Snapshot = ciborium::from_reader(body)
            .map_err(|e| err(format!("malformed binary snapshot: {e}")))?;
        snap.verify()?;
        Ok(snap)
    }

    /// The JSON encoding (pretty-printed; non-finite floats tagged, see the module docs).
    ///
    /// # Errors
    /// Only if the state holds something JSON cannot carry (a map with non-text keys, bytes or
    /// CBOR tags: no policy state does).
    pub fn to_json(&self) -> Result<String> {
        let tree = to_json_tree(Value::serialized(self).map_err(|e| err(e.to_string()))?)?;
        serde_json::to_string_pretty(&JsonTree(&tree))
            .map_err(|e| err(format!("JSON encoding failed: {e}")))
    }

    /// Read a JSON snapshot ([`Snapshot::to_json`]) and [`Snapshot::verify`] it.
    ///
    /// # Errors
    /// Malformed JSON, a bad float tag, or refused by `verify`.
    pub fn from_json(text: &str) -> Result<Self> {
        let tree: Value =
            serde_json::from_str(text).map_err(|e| err(format!("malformed JSON snapshot: {e}")))?;
        let snap: Snapshot = from_json_tree(tree)?
            .deserialized()
            .map_err(|e| err(format!("malformed JSON snapshot: {e}")))?;
        snap.verify()?;
        Ok(snap)
    }

    /// Read either encoding (JSON starts with `{` after optional whitespace).
    ///
    /// # Errors
    /// See [`Snapshot::from_json`] and [`Snapshot::from_cbor`].
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => {
                let text = std::str::from_utf8(bytes)
                    .map_err(|e| err(format!("malformed JSON snapshot: {e}")))?;
                Self::from_json(text)
            }
            _ => Self::from_cbor(bytes),
        }
    }
}

/// The refusal of a policy that cannot be captured (the traits' default `snapshot`); `what`
/// describes it (its `Debug` form, cut to its type name).
pub fn unsupported(what: &str) -> Error {
    let name: String = what
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '<' || *c == '>')
        .collect();
    err(format!(
        "`{name}` cannot save its state (it does not implement snapshots, or its noise source cannot be captured)"
    ))
}

/// Every NaN as the one quiet NaN `f64::NAN`: no policy decision depends on a NaN's payload
/// (only on `is_nan`), and the checksum and the byte-for-byte comparisons must not either.
fn canonical_nan(v: Value) -> Value {
    match v {
        Value::Float(x) if x.is_nan() => Value::Float(f64::NAN),
        Value::Array(xs) => Value::Array(xs.into_iter().map(canonical_nan).collect()),
        Value::Map(kv) => Value::Map(
            kv.into_iter()
                .map(|(k, v)| (canonical_nan(k), canonical_nan(v)))
                .collect(),
        ),
        Value::Tag(t, v) => Value::Tag(t, Box::new(canonical_nan(*v))),
        other => other,
    }
}

/// Replace non-finite floats by `{"$f64": ...}` and check that JSON can carry the tree.
fn to_json_tree(v: Value) -> Result<Value> {
    Ok(match v {
        Value::Float(x) if !x.is_finite() => {
            let s = if x.is_nan() {
                "nan"
            } else if x > 0.0 {
                "inf"
            } else {
                "-inf"
            };
            Value::Map(vec![(Value::Text(F64_TAG.into()), Value::Text(s.into()))])
        }
        Value::Array(xs) => Value::Array(xs.into_iter().map(to_json_tree).collect::<Result<_>>()?),
        Value::Map(kv) => Value::Map(
            kv.into_iter()
                .map(|(k, v)| match k {
                    Value::Text(_) => Ok((k, to_json_tree(v)?)),
                    other => Err(err(format!(
                        "a map key {other:?} cannot be written as JSON (use the binary encoding)"
                    ))),
                })
                .collect::<Result<_>>()?,
        ),
        Value::Bytes(_) | Value::Tag(..) => {
            return Err(err(
                "bytes and CBOR tags cannot be written as JSON (use the binary encoding)",
            ));
        }
        other => other,
    })
}

/// A value tree written as JSON with every float as an `f64` (the tree's own `Serialize` writes
/// floats that fit an `f32` as `f32`, whose shortest decimal form does not read back as the
/// same `f64`) and maps in their order.
struct JsonTree<'a>(&'a Value);

impl Serialize for JsonTree<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeMap, SerializeSeq};
        match self.0 {
            Value::Float(x) => s.serialize_f64(*x),
            Value::Integer(i) => {
                let i = i128::from(*i);
                if let Ok(u) = u64::try_from(i) {
                    s.serialize_u64(u)
                } else if let Ok(n) = i64::try_from(i) {
                    s.serialize_i64(n)
                } else {
                    Err(S::Error::custom(format!(
                        "integer {i} out of the 64-bit range"
                    )))
                }
            }
            Value::Text(t) => s.serialize_str(t),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Null => s.serialize_unit(),
            Value::Array(xs) => {
                let mut seq = s.serialize_seq(Some(xs.len()))?;
                for x in xs {
                    seq.serialize_element(&JsonTree(x))?;
                }
                seq.end()
            }
            Value::Map(kv) => {
                let mut map = s.serialize_map(Some(kv.len()))?;
                for (k, v) in kv {
                    map.serialize_entry(&JsonTree(k), &JsonTree(v))?;
                }
                map.end()
            }
            other => Err(S::Error::custom(format!(
                "{other:?} cannot be written as JSON"
            ))),
        }
    }
}

/// Undo [`to_json_tree`].
fn from_json_tree(v: Value) -> Result<Value> {
    Ok(match v {
        Value::Map(kv) => {
            if let [(Value::Text(k), tag)] = kv.as_slice()
                && k == F64_TAG
            {
                return match tag.as_text() {
                    Some("inf") => Ok(Value::Float(f64::INFINITY)),
                    Some("-inf") => Ok(Value::Float(f64::NEG_INFINITY)),
                    Some("nan") => Ok(Value::Float(f64::NAN)),
                    _ => Err(err(format!(
                        "{{\"{F64_TAG}\": {tag:?}}}: expected \"inf\", \"-inf\" or \"nan\""
                    ))),
                };
            }
            Value::Map(
                kv.into_iter()
                    .map(|(k, v)| Ok((k, from_json_tree(v)?)))
                    .collect::<Result<_>>()?,
            )
        }
        Value::Array(xs) => {
            Value::Array(xs.into_iter().map(from_json_tree).collect::<Result<_>>()?)
        }
        other => other,
    })
}

/// Serde helpers (`#[serde(with = ...)]`) for fields serde cannot derive: const-generic arrays.
pub mod with {
    /// `[f64; D]` as a sequence, its length checked on restore.
    pub mod array {
        use serde::{Deserialize, Deserializer, Serializer};

        /// Serialize.
        ///
        /// # Errors
        /// The serializer's.
        pub fn serialize<S: Serializer, const D: usize>(
            a: &[f64; D],
            s: S,
        ) -> Result<S::Ok, S::Error> {
            s.collect_seq(a.iter())
        }

        /// Deserialize.
        ///
        /// # Errors
        /// Not a sequence of `D` numbers.
        pub fn deserialize<'de, De: Deserializer<'de>, const D: usize>(
            d: De,
        ) -> Result<[f64; D], De::Error> {
            let v = Vec::<f64>::deserialize(d)?;
            let n = v.len();
            v.try_into().map_err(|_| {
                serde::de::Error::custom(format!("a vector of length {n}: expected length {D}"))
            })
        }
    }

    /// `[[f64; D]; D]` as a sequence of rows, its shape checked on restore.
    pub mod square {
        use serde::{Deserialize, Deserializer, Serializer};

        /// Serialize.
        ///
        /// # Errors
        /// The serializer's.
        pub fn serialize<S: Serializer, const D: usize>(
            a: &[[f64; D]; D],
            s: S,
        ) -> Result<S::Ok, S::Error> {
            s.collect_seq(a.iter().map(|row| row.as_slice()))
        }

        /// Deserialize.
        ///
        /// # Errors
        /// Not `D` rows of `D` numbers.
        pub fn deserialize<'de, De: Deserializer<'de>, const D: usize>(
            d: De,
        ) -> Result<[[f64; D]; D], De::Error> {
            let rows = Vec::<Vec<f64>>::deserialize(d)?;
            let mut out = [[0.0; D]; D];
            if rows.len() != D || rows.iter().any(|r| r.len() != D) {
                return Err(serde::de::Error::custom(format!(
                    "a matrix with {} rows: expected {D} rows of {D}",
                    rows.len()
                )));
            }
            for (o, r) in out.iter_mut().zip(rows) {
                o.copy_from_slice(&r);
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct S {
        xs: Vec<f64>,
        n: u64,
        o: Option<f64>,
        e: E,
    }
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum E {
        A,
        B { x: f64 },
    }

    fn bits(xs: &[f64]) -> Vec<u64> {
        xs.iter().map(|x| x.to_bits()).collect()
    }

    fn roundtrip(xs: Vec<f64>) -> (Vec<f64>, Vec<f64>) {
        let s = S {
            xs,
            n: u64::MAX,
            o: Some(f64::NEG_INFINITY),
            e: E::B { x: -0.0 },
        };
        let snap = Snapshot::new(Setting::FiniteArmed, "test", &s).unwrap();
        let j: S = Snapshot::decode(snap.to_json().unwrap().as_bytes())
            .unwrap()
            .state()
            .unwrap();
        let c: S = Snapshot::decode(&snap.to_cbor().unwrap())
            .unwrap()
            .state()
            .unwrap();
        assert_eq!((j.n, c.n), (u64::MAX, u64::MAX));
        assert_eq!(j.o, Some(f64::NEG_INFINITY));
        assert!(matches!(j.e, E::B { x } if x.to_bits() == (-0.0f64).to_bits()));
        (j.xs, c.xs)
    }

    #[test]
    fn special_floats_roundtrip_bit_exactly() {
        let xs = vec![
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
            f64::MIN_POSITIVE / 3.0,
            -5e-324,
            f64::MAX,
            f64::MIN,
            f64::EPSILON,
            0.1,
            1.0 / 3.0,
            1e300,
            123456789.0,
            2f64.powi(53) + 2.0,
        ];
        let (j, c) = roundtrip(xs.clone());
        assert_eq!(bits(&j), bits(&xs));
        assert_eq!(bits(&c), bits(&xs));
        let (j, c) = roundtrip(vec![f64::NAN]);
        assert!(j[0].is_nan() && c[0].is_nan());
    }

    proptest! {
        /// Every bit pattern that is not a NaN comes back with the same bits in both encodings.
        #[test]
        fn every_f64_roundtrips(raw in proptest::collection::vec(any::<u64>(), 1..20)) {
            let xs: Vec<f64> = raw.iter().map(|&b| f64::from_bits(b)).filter(|x| !x.is_nan()).collect();
            let (j, c) = roundtrip(xs.clone());
            prop_assert_eq!(bits(&j), bits(&xs));
            prop_assert_eq!(bits(&c), bits(&xs));
        }
    }

    #[test]
    fn refusals_name_what_differs() {
        let snap = Snapshot::new(Setting::Bai, "dp_tt", &vec![1.0, 2.0]).unwrap();
        let json = snap.to_json().unwrap();
        let e =
            Snapshot::from_json(&json.replace("\"format_version\": 1", "\"format_version\": 2"))
                .unwrap_err()
                .to_string();
        assert!(e.contains("format_version = 2"), "{e}");
        let e = Snapshot::from_json(&json.replace(CRATE_VERSION, "0.0.0-old"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("crate_version = \"0.0.0-old\""), "{e}");
        let e = Snapshot::from_json(&json.replace("2.0", "2.5"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("corrupted"), "{e}");
        let e = Snapshot::from_json(&json.replace("dpbandits-snapshot", "other"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a dpbandits snapshot"), "{e}");
        let e = snap
            .expect(Setting::Bai, "adap_tt")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("kind = \"dp_tt\"") && e.contains("adap_tt"),
            "{e}"
        );
        let e = snap
            .expect(Setting::FiniteArmed, "dp_tt")
            .unwrap_err()
            .to_string();
        assert!(e.contains("finite-armed"), "{e}");
        let e = snap.state::<String>().unwrap_err().to_string();
        assert!(e.contains("does not match"), "{e}");
        // Every truncation and every single-byte corruption of the binary form is an error or
        // (for bytes that do not matter to the tree) the same snapshot, never a panic.
        let bin = snap.to_cbor().unwrap();
        for cut in 0..bin.len() {
            assert!(Snapshot::from_cbor(&bin[..cut]).is_err());
        }
        for i in 0..bin.len() {
            let mut b = bin.clone();
            b[i] ^= 0x55;
            if let Ok(s) = Snapshot::decode(&b) {
                assert_eq!(s, snap);
            }
        }
        assert!(Snapshot::decode(b"{\"header\": 1}").is_err());
        assert!(Snapshot::decode(b"").is_err());
    }

    #[test]
    fn json_float_tag_is_checked() {
        let snap = Snapshot::new(Setting::Bai, "x", &f64::INFINITY).unwrap();
        let json = snap.to_json().unwrap();
        assert!(json.contains("\"$f64\": \"inf\""), "{json}");
        let e = Snapshot::from_json(&json.replace("\"inf\"", "\"huge\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected \"inf\""), "{e}");
    }
}

//! The request bodies, typed: each a serde struct refusing unknown keys ([`Fields`] says what
//! its refusals name). `api/openapi.json` describes the same shapes (the test
//! `openapi_request_schemas_refuse_what_the_server_refuses` checks it against these types).

use super::ctx::Fields;
use super::error::{ApiError, ApiResult, short};
use crate::service::CreateRequest;
use crate::service::{check_name, check_request_id, policy_table};
use serde::Deserialize;
use serde_json::Number;
use serde_json::Value;

impl Fields for CreateRequest {
    const FIELDS: &'static [&'static str] = CreateRequest::FIELDS;
    // `null` counts as given for the required keys, and is refused as a wrong type.
    const REQUIRED: &'static [(&'static str, &'static str)] = &[
        ("name", "name = (missing): expected a string"),
        (
            "policy",
            "policy = (missing): expected a TOML table as text or a JSON object",
        ),
    ];
    const NULL_IS_ABSENT: &'static [&'static str] = &[
        "seed",
        "request_id",
        "arms",
        "dim",
        "horizon",
        "delta",
        "dropout_reward",
        "reward_deadline",
        "while_pending",
    ];
    fn expected(key: &str) -> &'static str {
        match key {
            "name" => "a string",
            "arms" => "an integer >= 2 (linear: an array of arm vectors)",
            "dim" => "an integer >= 1",
            "horizon" => "an integer >= 1",
            "delta" => "a number in (0, 1)",
            "request_id" => "a string of 1 to 128 characters",
            "dropout_reward" => "a number the policy's boundary admits",
            "reward_deadline" => "seconds, a number > 0",
            "while_pending" => "\"wait\" (default) or \"pipeline\"",
            "policy" => "a TOML table as text or a JSON object",
            "allow_non_private" => "true or false",
            "seed" => "a non-negative integer",
            _ => "nothing (unknown field)",
        }
    }
    /// The name, the request id and the policy's type, as the service refuses them.
    fn check(&self) -> ApiResult<()> {
        check_name(&self.name)?;
        if let Some(rid) = &self.request_id {
            check_request_id(rid)?;
        }
        if !(self.policy.is_string() || self.policy.is_object()) {
            policy_table(&self.policy)?;
        }
        Ok(())
    }
}

/// `POST /v1/experiments/{name}/decisions`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecideBody {
    /// Idempotent decisions: a repeated id answers the decision it got.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Contextual: the round's action set (`k >= 1` arrays of `d` numbers).
    #[serde(default)]
    pub actions: Option<Value>,
}

impl Fields for DecideBody {
    const FIELDS: &'static [&'static str] = &["request_id", "actions"];
    const NULL_IS_ABSENT: &'static [&'static str] = &["request_id", "actions"];
    fn expected(key: &str) -> &'static str {
        match key {
            "request_id" => "a string of 1 to 128 characters",
            _ => "the round's action set, an array of k >= 1 arrays of d numbers",
        }
    }
    fn check(&self) -> ApiResult<()> {
        if let Some(rid) = &self.request_id {
            check_request_id(rid)?;
        }
        Ok(())
    }
}

/// `POST /v1/experiments/{name}/rewards`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RewardBody {
    /// The decision rewarded.
    pub decision_id: u64,
    /// The reward (a finite number).
    pub reward: f64,
}

impl Fields for RewardBody {
    const FIELDS: &'static [&'static str] = &["decision_id", "reward"];
    const REQUIRED: &'static [(&'static str, &'static str)] = &[
        (
            "decision_id",
            "decision_id = (missing): expected a decision_id this experiment issued",
        ),
        ("reward", "reward = (missing): expected a finite number"),
    ];
    const NULL_IS_ABSENT: &'static [&'static str] = &["decision_id"];
    fn expected(key: &str) -> &'static str {
        match key {
            "decision_id" => "a non-negative integer",
            _ => "a finite number",
        }
    }
}

/// A body without keys: `{}` or nothing (rotate a token, abandon one decision).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Empty {}

impl Fields for Empty {
    const FIELDS: &'static [&'static str] = &[];
    fn expected(_: &str) -> &'static str {
        "nothing (unknown field)"
    }
}

/// `POST /v1/experiments/{name}/close`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CloseBody {
    /// The report's confidence level in (0, 1) (default 0.95).
    #[serde(default)]
    pub level: Option<Number>,
    /// Abandon the decisions past their reward deadline first.
    #[serde(default)]
    pub abandon_overdue: Option<bool>,
}

impl CloseBody {
    /// The level, checked.
    pub(crate) fn level(&self) -> ApiResult<Option<f64>> {
        level_of(self.level.clone().map(Value::Number).as_ref())
    }
}

impl Fields for CloseBody {
    const FIELDS: &'static [&'static str] = &["level", "abandon_overdue"];
    fn expected(key: &str) -> &'static str {
        match key {
            "level" => "a confidence level in (0, 1), e.g. 0.95",
            _ => "true or false",
        }
    }
    fn check(&self) -> ApiResult<()> {
        self.level().map(|_| ())
    }
}

/// `POST /v1/experiments/{name}/abandon`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AbandonBody {
    /// Seconds: abandon the pending decisions older than this (0: all).
    pub older_than: Number,
}

/// What `older_than` takes.
const OLDER_THAN: &str = "seconds, a finite number >= 0 (0: every pending decision)";

impl AbandonBody {
    /// The age, checked.
    pub(crate) fn older_than(&self) -> ApiResult<f64> {
        self.older_than
            .as_f64()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| {
                ApiError::invalid(format!(
                    "older_than = {}: expected {OLDER_THAN}",
                    self.older_than
                ))
            })
    }
}

impl Fields for AbandonBody {
    const FIELDS: &'static [&'static str] = &["older_than"];
    const REQUIRED: &'static [(&'static str, &'static str)] = &[(
        "older_than",
        "older_than: missing; expected seconds, a finite number >= 0 (0: every pending decision)",
    )];
    fn expected(_: &str) -> &'static str {
        OLDER_THAN
    }
    fn check(&self) -> ApiResult<()> {
        self.older_than().map(|_| ())
    }
}

/// A confidence level from a body or query value: absent (the default), or a number in (0, 1).
pub(crate) fn level_of(v: Option<&Value>) -> ApiResult<Option<f64>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x > 0.0 && x < 1.0 => Ok(Some(x)),
            _ => Err(ApiError::invalid(format!(
                "level = {}: expected a confidence level in (0, 1), e.g. 0.95",
                short(v)
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::OPENAPI;
    use super::super::ctx::parse;
    use super::*;
    use axum::body::Bytes;
    use serde_json::json;

    /// Whether `v` is valid under `schema`, for the keywords `api/openapi.json`'s request
    /// schemas use (a refusal names the keyword, for the failure message).
    fn valid(schema: &Value, v: &Value) -> Result<(), String> {
        let Some(s) = schema.as_object() else {
            return Ok(());
        };
        let num = |k: &str| s.get(k).and_then(Value::as_f64);
        if let Some(t) = s.get("type") {
            let types: Vec<&str> = match t {
                Value::String(x) => vec![x.as_str()],
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            let ok = types.iter().any(|t| match *t {
                "null" => v.is_null(),
                "boolean" => v.is_boolean(),
                "string" => v.is_string(),
                "object" => v.is_object(),
                "array" => v.is_array(),
                "number" => v.is_number(),
                // JSON Schema: a number with a zero fractional part is an integer.
                "integer" => {
                    v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|x| x.fract() == 0.0)
                }
                _ => false,
            });
            if !ok {
                return Err(format!("type {t}"));
            }
        }
        if let Some(e) = s.get("enum").and_then(Value::as_array)
            && !e.contains(v)
        {
            return Err("enum".into());
        }
        if let Some(n) = s.get("not")
            && valid(n, v).is_ok()
        {
            return Err("not".into());
        }
        for key in ["oneOf", "anyOf"] {
            if let Some(alts) = s.get(key).and_then(Value::as_array) {
                let n = alts.iter().filter(|a| valid(a, v).is_ok()).count();
                if n == 0 || (key == "oneOf" && n > 1) {
                    return Err(format!("{key} ({n} match)"));
                }
            }
        }
        if let Some(x) = v.as_f64().filter(|_| v.is_number()) {
            // Integers compared exactly where f64 cannot (2^64 - 1 and beyond).
            let exact = |bound: &Value, above: bool| match (v.as_u64(), bound.as_u64()) {
                (Some(a), Some(b)) => {
                    if above {
                        a > b
                    } else {
                        a < b
                    }
                }
                _ => {
                    let b = bound.as_f64().unwrap();
                    if above { x > b } else { x < b }
                }
            };
            if s.get("minimum").is_some_and(|b| exact(b, false)) {
                return Err("minimum".into());
            }
            if s.get("maximum").is_some_and(|b| exact(b, true))
                || (v.as_u64().is_none()
                    && v.as_i64().is_none()
                    && num("maximum").is_some_and(|b| x >= b && b >= 1.8e19))
            {
                return Err("maximum".into());
            }
            if num("exclusiveMinimum").is_some_and(|b| x <= b) {
                return Err("exclusiveMinimum".into());
            }
            if num("exclusiveMaximum").is_some_and(|b| x >= b) {
                return Err("exclusiveMaximum".into());
            }
        }
        if let Some(t) = v.as_str() {
            let n = t.chars().count() as f64;
            if num("minLength").is_some_and(|b| n < b) || num("maxLength").is_some_and(|b| n > b) {
                return Err("length".into());
            }
            if let Some(p) = s.get("pattern").and_then(Value::as_str) {
                // The one pattern of the request schemas.
                assert_eq!(p, "^[A-Za-z0-9_.-]{1,64}$");
                let ok = (1..=64).contains(&t.len())
                    && t.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
                if !ok {
                    return Err("pattern".into());
                }
            }
        }
        if let Some(a) = v.as_array() {
            if num("minItems").is_some_and(|b| (a.len() as f64) < b) {
                return Err("minItems".into());
            }
            if let Some(items) = s.get("items") {
                for x in a {
                    valid(items, x).map_err(|e| format!("items: {e}"))?;
                }
            }
        }
        if let Some(o) = v.as_object() {
            let props = s.get("properties").and_then(Value::as_object);
            for r in s
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if !o.contains_key(r.as_str().unwrap()) {
                    return Err(format!("required {r}"));
                }
            }
            for (k, x) in o {
                match props.and_then(|p| p.get(k)) {
                    Some(ps) => valid(ps, x).map_err(|e| format!("{k}: {e}"))?,
                    None if s.get("additionalProperties") == Some(&Value::Bool(false)) => {
                        return Err(format!("additionalProperties ({k})"));
                    }
                    None => {}
                }
            }
        }
        Ok(())
    }

    /// The request schema of `method path` in `api/openapi.json`.
    fn schema(path: &str) -> Value {
        let doc: Value = serde_json::from_str(OPENAPI).unwrap();
        doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"].clone()
    }

    /// Every example is accepted by both the document and the server's body type, or refused
    /// by both (the server's refusals of a shape: its type, its keys, its ranges, its lengths).
    fn agree<T: Fields>(path: &str, examples: &[Value]) {
        let s = schema(path);
        assert!(s.is_object(), "{path}: no request schema");
        for ex in examples {
            let server = parse::<T>(&Bytes::from(ex.to_string()))
                .map(|_| ())
                .map_err(|e| e.message);
            let doc = valid(&s, ex);
            assert_eq!(
                server.is_ok(),
                doc.is_ok(),
                "{path}: {ex}: the server says {server:?}, the document says {doc:?}"
            );
        }
    }

    const BIG: &str = "18446744073709551616";

    fn big(key: &str, rest: &str) -> Value {
        serde_json::from_str(&format!("{{\"{key}\": {BIG}{rest}}}")).unwrap()
    }

    /// The request schemas of `api/openapi.json` are as strict as the server: what the document
    /// accepts the server takes, what it refuses the server refuses (a generated client
    /// relies on it), over the refusals a schema fuzzer found and their neighbours.
    #[test]
    fn openapi_request_schemas_refuse_what_the_server_refuses() {
        let policy = json!({"kind": "adac_ucb", "rho": 0.5});
        let mut creates = vec![
            json!({"name": "a", "policy": policy}),
            json!({"name": "a", "policy": "kind = \"adac_ucb\"", "arms": 3, "seed": 1}),
            json!({"name": "a", "policy": policy, "seed": u64::MAX, "request_id": "r"}),
            json!({"name": "a", "policy": policy, "seed": -1}),
            json!({"name": "a", "policy": policy, "seed": 1.5}),
            json!({"name": "a", "policy": policy, "request_id": ""}),
            json!({"name": "a", "policy": policy, "request_id": "x".repeat(129)}),
            json!({"name": "a", "policy": policy, "request_id": "é".repeat(128)}),
            json!({"name": "a", "policy": policy, "request_id": null, "seed": null}),
            json!({"name": "a", "policy": policy, "while_pending": "pipeline"}),
            json!({"name": "a", "policy": policy, "allow_non_private": 1}),
            json!({"name": "a", "policy": policy, "extra": 1}),
            json!({"name": "a", "policy": 3}),
            json!({"name": "a"}),
            json!({"policy": policy}),
            json!({"name": null, "policy": policy}),
            json!({"name": "", "policy": policy}),
            json!({"name": "..", "policy": policy}),
            json!({"name": "a/b", "policy": policy}),
            json!({"name": "x".repeat(65), "policy": policy}),
        ];
        let mut seed_big = json!({"name": "a", "policy": policy});
        seed_big["seed"] = serde_json::from_str(BIG).unwrap();
        creates.push(seed_big);
        agree::<CreateRequest>("/v1/experiments", &creates);
        agree::<DecideBody>(
            "/v1/experiments/{name}/decisions",
            &[
                json!({}),
                json!({"request_id": "r"}),
                json!({"request_id": ""}),
                json!({"request_id": "x".repeat(129)}),
                json!({"request_id": 3}),
                json!({"request_id": null, "actions": null}),
                json!({"actions": [[1.0, 2.0]]}),
                json!({"other": 1}),
            ],
        );
        agree::<RewardBody>(
            "/v1/experiments/{name}/rewards",
            &[
                json!({"decision_id": 1, "reward": 0.5}),
                json!({"decision_id": 0, "reward": 1}),
                json!({"decision_id": u64::MAX, "reward": -2.5}),
                json!({"decision_id": -1, "reward": 0.5}),
                json!({"decision_id": 1.5, "reward": 0.5}),
                json!({"decision_id": "1", "reward": 0.5}),
                json!({"decision_id": 1, "reward": "0.5"}),
                json!({"decision_id": 1, "reward": null}),
                json!({"decision_id": 1}),
                json!({"reward": 1}),
                json!({"decision_id": 1, "reward": 1, "extra": true}),
                big("decision_id", ", \"reward\": 1"),
            ],
        );
        agree::<CloseBody>(
            "/v1/experiments/{name}/close",
            &[
                json!({}),
                json!({"level": 0.9}),
                json!({"level": 0}),
                json!({"level": 1}),
                json!({"level": -0.5}),
                json!({"level": "0.9"}),
                json!({"level": null, "abandon_overdue": null}),
                json!({"abandon_overdue": true}),
                json!({"abandon_overdue": 1}),
                json!({"other": 1}),
            ],
        );
        agree::<AbandonBody>(
            "/v1/experiments/{name}/abandon",
            &[
                json!({"older_than": 0}),
                json!({"older_than": 3.5}),
                json!({"older_than": -1}),
                json!({"older_than": null}),
                json!({"older_than": "1"}),
                json!({}),
                json!({"older_than": 1, "x": 1}),
            ],
        );
        for path in [
            "/v1/experiments/{name}/token",
            "/v1/experiments/{name}/decisions/{id}/abandon",
        ] {
            agree::<Empty>(path, &[json!({}), json!({"x": 1}), json!({"x": null})]);
        }
    }
}

//! `dpbandits list` against the code: every parameter default and range that a kind's
//! `# Parameters` section states (the text `list` prints) is checked with the kind's own parser,
//! so the docs cannot drift from validation.

use crate::{bin, repo};
use dpbandits::registry::{self, PolicyEntry};

/// What the docs claim about one parameter.
#[derive(Debug, Clone, PartialEq)]
enum Claim {
    Default(toml::Value),
    Positive,
    NonNegative,
    AtLeastOne,
    OpenUnit,
}

/// The keys a kind accepts, read from its parser's unknown-key message.
fn keys(e: &PolicyEntry) -> Vec<String> {
    let mut t: toml::Table = toml::from_str(e.info.example).unwrap();
    t.insert("zz_not_a_key".into(), toml::Value::Integer(1));
    let msg = e.build(t).unwrap_err().to_string();
    assert!(
        msg.contains("unknown field `zz_not_a_key`"),
        "{}: an unknown key is named as unknown: {msg}",
        e.info.kind
    );
    msg.split("expected")
        .nth(1)
        .unwrap_or("")
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn literal(s: &str) -> Option<toml::Value> {
    let s = s.trim_matches(|c: char| "`,;:.)".contains(c));
    if let Some((a, b)) = s.split_once('/')
        && let (Ok(a), Ok(b)) = (a.parse::<f64>(), b.parse::<f64>())
    {
        return Some(toml::Value::Float(a / b));
    }
    if let Ok(v) = s.parse::<f64>() {
        return Some(toml::Value::Float(v));
    }
    match s {
        "true" => Some(toml::Value::Boolean(true)),
        "false" => Some(toml::Value::Boolean(false)),
        _ if !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c == '_') => {
            Some(toml::Value::String(s.into()))
        }
        _ => None,
    }
}

/// Claims of the `# Parameters` text: a parameter's description runs from its backticked name
/// to the next backticked key of the kind.
fn claims(text: &str, keys: &[String]) -> Vec<(String, Claim)> {
    // positions of backticked keys (`name` or `name > 0` style)
    let mut at = vec![];
    let mut i = 0;
    let b: Vec<(usize, char)> = text.char_indices().collect();
    while i < b.len() {
        if b[i].1 == '`' {
            let start = b[i].0 + 1;
            let end = text[start..].find('`').map(|e| start + e);
            let Some(end) = end else { break };
            let inner = &text[start..end];
            let name = inner.split_whitespace().next().unwrap_or("");
            if keys.iter().any(|k| k == name) {
                at.push((b[i].0, end + 1, name.to_string(), inner.to_string()));
            }
            i = b.iter().position(|&(p, _)| p == end).unwrap_or(b.len()) + 1;
        } else {
            i += 1;
        }
    }
    let mut out = vec![];
    for (j, (_, end, name, inner)) in at.iter().enumerate() {
        let next = at.get(j + 1).map_or(text.len(), |n| n.0);
        let desc = format!("{} {}", &inner[name.len()..], &text[*end..next]);
        let d = desc.replace("in (0,1)", "in (0, 1)");
        if d.contains("in (0, 1)") {
            out.push((name.clone(), Claim::OpenUnit));
        }
        let head: String = d.chars().take(24).collect();
        if head.contains(">= 1") {
            out.push((name.clone(), Claim::AtLeastOne));
        } else if head.contains(">= 0") {
            out.push((name.clone(), Claim::NonNegative));
        } else if head.contains("> 0") {
            out.push((name.clone(), Claim::Positive));
        }
        if let Some(k) = d.find("default ")
            && let Some(v) = d[k + 8..].split_whitespace().next().and_then(literal)
        {
            out.push((name.clone(), Claim::Default(v)));
        } else if let Some(k) = d.find("` default")
            && let Some(q) = d[..k].rfind('`')
            && let Some(v) = literal(&d[q + 1..k])
        {
            out.push((name.clone(), Claim::Default(v)));
        }
    }
    out
}

fn with(e: &PolicyEntry, key: &str, v: toml::Value) -> Result<String, String> {
    let mut t: toml::Table = toml::from_str(e.info.example).unwrap();
    t.insert(key.into(), v);
    e.build(t)
        .map(|b| format!("{b:?}"))
        .map_err(|e| e.to_string())
}

#[test]
fn list_parameters_match_the_code() {
    let mut checked = 0;
    let mut problems = vec![];
    for e in registry::POLICIES {
        let kind = e.info.kind;
        let keys = keys(e);
        let example: toml::Table = toml::from_str(e.info.example).unwrap();
        let base = format!("{:?}", e.example().unwrap());
        for (name, claim) in claims(&e.parameters(), &keys) {
            let refused_here = |m: &str| m.contains("does not apply to this kind");
            match &claim {
                Claim::Default(v) => {
                    if example.contains_key(&name) {
                        continue;
                    }
                    match with(e, &name, v.clone()) {
                        Ok(d) if d == base => checked += 1,
                        Ok(d) => problems.push(format!(
                            "{kind}: `{name}` documented default {v} differs from the code's:\n  {base}\n  {d}"
                        )),
                        Err(m) if refused_here(&m) => {}
                        Err(m) => problems.push(format!(
                            "{kind}: `{name}` = documented default {v} is refused: {m}"
                        )),
                    }
                }
                _ => {
                    let bad: &[f64] = match claim {
                        Claim::Positive => &[0.0, -1.0],
                        Claim::NonNegative => &[-1.0],
                        Claim::AtLeastOne => &[0.0],
                        Claim::OpenUnit => &[0.0, 1.0],
                        Claim::Default(_) => unreachable!(),
                    };
                    for &x in bad {
                        let v = if matches!(claim, Claim::AtLeastOne) {
                            toml::Value::Integer(x as i64)
                        } else {
                            toml::Value::Float(x)
                        };
                        match with(e, &name, v) {
                            Ok(_) => problems.push(format!(
                                "{kind}: `{name}` = {x} is accepted, but the docs say {claim:?}"
                            )),
                            Err(m) if m.contains(&name) => checked += 1,
                            Err(m) => problems.push(format!(
                                "{kind}: `{name}` = {x} refused without naming `{name}`: {m}"
                            )),
                        }
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked >= 60, "only {checked} documented claims checked");
}

/// The checker itself can fail: the claims of a known text, and a wrong default detected.
#[test]
fn the_checker_sees_claims_and_wrong_defaults() {
    let keys: Vec<String> = ["eta", "beta", "threshold", "window", "gamma"]
        .map(String::from)
        .to_vec();
    let c = claims(
        "`eta` (> 0, default 1), `beta` (in (0,1), default 1/2), `threshold` (`joint` default, `r`), `window >= 1`, `gamma` in (0, 1)",
        &keys,
    );
    use Claim::*;
    let f = |v: f64| Default(toml::Value::Float(v));
    assert_eq!(
        c,
        vec![
            ("eta".into(), Positive),
            ("eta".into(), f(1.0)),
            ("beta".into(), OpenUnit),
            ("beta".into(), f(0.5)),
            (
                "threshold".into(),
                Default(toml::Value::String("joint".into()))
            ),
            ("window".into(), AtLeastOne),
            ("gamma".into(), OpenUnit),
        ]
    );
    let ucb1 = registry::policy("ucb1").unwrap();
    let base = format!("{:?}", ucb1.example().unwrap());
    assert_eq!(with(ucb1, "alpha", toml::Value::Float(2.0)).unwrap(), base);
    assert_ne!(with(ucb1, "alpha", toml::Value::Float(3.0)).unwrap(), base);
}

/// `list` prints, for every kind, the parameter text that the test above checks, and DP-TT's
/// default threshold as Proposal J.
#[test]
fn list_prints_the_checked_text() {
    let o = bin().arg("list").current_dir(repo()).output().unwrap();
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    for e in registry::POLICIES {
        let p = e.parameters();
        if !p.is_empty() {
            assert!(
                out.contains(&p),
                "{}: parameters missing from list",
                e.info.kind
            );
        }
    }
    let dp_tt = out
        .split("\n  dp_tt ")
        .nth(1)
        .and_then(|s| s.split("\n  adap_tt ").next())
        .unwrap();
    assert!(dp_tt.contains("Proposal J (default"), "{dp_tt}");
    assert!(dp_tt.contains("`joint` default"), "{dp_tt}");
    let default = registry::policy("dp_tt").unwrap().example().unwrap();
    assert!(format!("{default:?}").contains("Joint"), "{default:?}");
    assert!(out.contains("code23"), "code23 is described");
    assert!(
        out.contains("not the authors' algorithm") || out.contains("our stopping rule"),
        "code23 says what it is"
    );
}

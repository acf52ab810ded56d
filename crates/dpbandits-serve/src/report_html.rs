//! The closing report as a self-contained HTML page (`GET .../report?format=html`): the same
//! numbers as the JSON report, nothing computed here.

use serde_json::Value;

/// `s` escaped for HTML text and attribute values (also the monitor page's).
pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn num(v: &Value) -> String {
    match v.as_f64() {
        Some(x) => format!("{x:.4}"),
        None => esc(&v.to_string()),
    }
}

/// Render a report (the JSON the service returns from `close`).
pub fn render(r: &Value) -> String {
    let name = esc(r["experiment"].as_str().unwrap_or(""));
    let mut rows = String::new();
    let pulls = r["pulls"].as_array().cloned().unwrap_or_default();
    let estimates = r["estimates"].as_array().cloned();
    for (arm, p) in pulls.iter().enumerate() {
        let est = estimates
            .as_ref()
            .and_then(|e| e.get(arm))
            .filter(|e| !e.is_null());
        let cells = match est {
            Some(e) => format!(
                "<td>{}</td><td>[{}, {}]</td><td>{}</td><td>{}</td>",
                num(&e["estimate"]),
                num(&e["low"]),
                num(&e["high"]),
                e["rewards"],
                num(&e["noise_sd"])
            ),
            None => "<td colspan=4>no release</td>".to_string(),
        };
        rows.push_str(&format!("<tr><td>{arm}</td><td>{p}</td>{cells}</tr>\n"));
    }
    let note = match r["why_no_estimates"].as_str() {
        Some(w) => format!("<p><b>No estimates:</b> {}</p>", esc(w)),
        None => format!(
            "<p><b>Method:</b> {}</p>",
            esc(r["method"].as_str().unwrap_or(""))
        ),
    };
    let extra = extra_sections(r);
    let g = &r["guarantee"];
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Report: {name}</title>\
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}table{{border-collapse:collapse}}\
td,th{{border:1px solid #999;padding:0.3em 0.6em;text-align:right}}</style></head><body>\n\
<h1>Closing report: {name}</h1>\n\
<p>Kind <code>{kind}</code>, {rounds} rewards observed, {decisions} decisions. \
Recommended arm: <b>{rec}</b> ({rule}).</p>\n\
<p>Guarantee: {notion}, budget <code>{budget}</code>, {noise} noise. {cost}.</p>\n\
<table><tr><th>arm</th><th>completed decisions</th><th>estimate</th><th>{level} interval</th>\
<th>rewards in the release</th><th>noise sd</th></tr>\n{rows}</table>\n{note}\n{extra}\
<p>Audit log entry {seq}, hash <code>{hash}</code>: anyone holding the published head can check \
this report against the log (<code>dpbandits audit-log verify</code>).</p>\n</body></html>\n",
        kind = esc(r["kind"].as_str().unwrap_or("")),
        rounds = r["rounds"],
        decisions = r["decisions"],
        rec = esc(&r["recommended_arm"].to_string()),
        rule = esc(r["recommendation_rule"].as_str().unwrap_or("")),
        notion = esc(g["notion"].as_str().unwrap_or("")),
        budget = esc(&g["budget"].to_string()),
        noise = esc(g["noise"].as_str().unwrap_or("")),
        cost = esc(r["cost"].as_str().unwrap_or("")),
        level = num(&r["level"]),
        seq = r["audit_seq"],
        hash = esc(r["audit_hash"].as_str().unwrap_or("")),
    )
}

/// The report's sections beyond the per-arm table: every recommendation rule, the outcome
/// counts, the linear and contextual estimate, the warnings.
fn extra_sections(r: &Value) -> String {
    let mut extra = String::new();
    let rec = &r["recommended"];
    if rec.is_object() {
        extra.push_str(&format!(
            "<p><b>Every rule:</b> stopping rule {} (delta {}), largest estimate {}, most pulled {}{}.</p>\n",
            esc(&rec["stopping_rule"].to_string()),
            esc(&rec["delta"].to_string()),
            esc(&rec["argmax_estimate"].to_string()),
            esc(&rec["most_pulled"].to_string()),
            if rec["rules_differ"] == true {
                " <b>(the largest estimate and the most-pulled arm differ)</b>"
            } else {
                ""
            }
        ));
    }
    let o = &r["outcomes"];
    if let (Some(obs), Some(imp), Some(late)) = (
        o["observed"].as_array(),
        o["imputed"].as_array(),
        o["late"].as_array(),
    ) {
        extra.push_str("<table><tr><th>arm</th><th>observed outcomes</th><th>imputed (dropouts)</th><th>late (stored, not used)</th></tr>\n");
        for (arm, ((a, b), c)) in obs.iter().zip(imp).zip(late).enumerate() {
            extra.push_str(&format!(
                "<tr><td>{arm}</td><td>{a}</td><td>{b}</td><td>{c}</td></tr>\n"
            ));
        }
        extra.push_str("</table>\n");
    }
    if let Some(values) = r["linear"]["values"].as_array() {
        extra.push_str(&format!(
            "<p><b>theta~</b> = {} ({} rewards; {})</p><table><tr><th>action</th><th>value estimate</th><th>interval</th></tr>\n",
            esc(&r["linear"]["theta"].to_string()),
            r["linear"]["rewards"],
            esc(r["linear"]["method"].as_str().unwrap_or(""))
        ));
        for v in values {
            extra.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>[{}, {}]</td></tr>\n",
                v["action"],
                num(&v["estimate"]),
                num(&v["low"]),
                num(&v["high"])
            ));
        }
        extra.push_str("</table>\n");
    }
    for w in r["warnings"].as_array().into_iter().flatten() {
        extra.push_str(&format!(
            "<p><b>Warning:</b> {}</p>\n",
            esc(w.as_str().unwrap_or(""))
        ));
    }
    extra
}

//! The trial monitor page (`GET /v1/experiments/{name}/monitor`, admin): plain server-rendered
//! HTML with inline SVG, no script library and no build step. Six panels, each from the
//! monitor's JSON (the same numbers `GET .../monitor?format=json` returns; nothing is computed
//! here but the drawing): enrolment over time, allocation per arm, interim estimates with their
//! anytime-valid intervals (released statistics only), the ledger's spend against the guarantee,
//! the audit head, and the verification state.
//!
//! Each panel is a `<section class="panel" data-panel=NAME>`; a small inline script marks the
//! body with `data-panels-total` and `data-panels-filled` (panels whose drawing laid out with a
//! non-empty box, or whose table has rows), which the headless-Chromium test reads.

use crate::report_html::esc;
use serde_json::Value;
use std::fmt::Write as _;

fn num(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x.abs() >= 1e4 || (x != 0.0 && x.abs() < 1e-3) => format!("{x:.3e}"),
        Some(x) => format!("{x:.4}"),
        None if v.is_null() => "-".to_string(),
        None => esc(v.as_str().map_or(&v.to_string(), |s| s)),
    }
}

const W: f64 = 520.0;
const H: f64 = 180.0;
const PAD: f64 = 36.0;

/// A line chart of `(x, y)` points (enrolment: unix seconds, decisions so far).
fn enrolment_svg(points: &[(f64, f64)]) -> String {
    let mut s = format!(
        "<svg viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"enrolment over time\">"
    );
    if points.is_empty() {
        s.push_str("<text x=\"20\" y=\"90\">no decision yet</text></svg>");
        return s;
    }
    let (x0, x1) = (points[0].0, points.last().map_or(0.0, |p| p.0));
    let ymax = points.iter().map(|p| p.1).fold(1.0_f64, f64::max);
    let sx = |x: f64| PAD + (x - x0) / (x1 - x0).max(1e-9) * (W - 2.0 * PAD);
    let sy = |y: f64| H - PAD - y / ymax * (H - 2.0 * PAD);
    let _ = write!(
        s,
        "<line x1=\"{PAD}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#444\"/><line x1=\"{PAD}\" y1=\"{PAD}\" x2=\"{PAD}\" y2=\"{b}\" stroke=\"#444\"/>",
        b = H - PAD,
        r = W - PAD
    );
    let path: Vec<String> = points
        .iter()
        .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
        .collect();
    let _ = write!(
        s,
        "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{}\"/>",
        path.join(" ")
    );
    let _ = write!(
        s,
        "<text x=\"4\" y=\"{PAD}\" font-size=\"11\">{}</text><text x=\"{PAD}\" y=\"{}\" font-size=\"11\">{:.0} s</text><text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{:.0} s</text></svg>",
        ymax,
        H - PAD + 14.0,
        0.0,
        W - PAD,
        H - PAD + 14.0,
        x1 - x0
    );
    s
}

/// Horizontal bars, one per row: `(label, value)`.
fn bars_svg(rows: &[(String, f64)], what: &str) -> String {
    let h = 24.0 * rows.len().max(1) as f64 + 12.0;
    let mut s = format!(
        "<svg viewBox=\"0 0 {W} {h}\" width=\"{W}\" height=\"{h}\" role=\"img\" aria-label=\"{what}\">"
    );
    let max = rows.iter().map(|r| r.1).fold(1.0_f64, f64::max);
    for (i, (label, v)) in rows.iter().enumerate() {
        let y = 6.0 + 24.0 * i as f64;
        let w = (v / max * (W - 160.0)).max(1.0);
        let _ = write!(
            s,
            "<text x=\"4\" y=\"{}\" font-size=\"12\">{}</text><rect x=\"90\" y=\"{y}\" width=\"{w:.1}\" height=\"18\" fill=\"#2ca02c\"/><text x=\"{:.1}\" y=\"{}\" font-size=\"12\">{v}</text>",
            y + 14.0,
            esc(label),
            96.0 + w,
            y + 14.0
        );
    }
    s.push_str("</svg>");
    s
}

/// Intervals with their point estimates on a common axis: `(label, estimate, low, high)`.
fn intervals_svg(rows: &[(String, f64, f64, f64)], range: (f64, f64)) -> String {
    let h = 24.0 * rows.len().max(1) as f64 + 30.0;
    let mut s = format!(
        "<svg viewBox=\"0 0 {W} {h}\" width=\"{W}\" height=\"{h}\" role=\"img\" aria-label=\"interim estimates\">"
    );
    let (lo, hi) = range;
    let sx = |x: f64| 90.0 + (x - lo) / (hi - lo).max(1e-12) * (W - 120.0);
    for (i, (label, est, l, u)) in rows.iter().enumerate() {
        let y = 14.0 + 24.0 * i as f64;
        let _ = write!(
            s,
            "<text x=\"4\" y=\"{}\" font-size=\"12\">{}</text><line x1=\"{:.1}\" y1=\"{y}\" x2=\"{:.1}\" y2=\"{y}\" stroke=\"#d62728\" stroke-width=\"3\"/><circle cx=\"{:.1}\" cy=\"{y}\" r=\"4\" fill=\"#111\"/>",
            y + 4.0,
            esc(label),
            sx(*l),
            sx(*u),
            sx(*est)
        );
    }
    let b = h - 12.0;
    let _ = write!(
        s,
        "<line x1=\"90\" y1=\"{b}\" x2=\"{}\" y2=\"{b}\" stroke=\"#444\"/><text x=\"90\" y=\"{}\" font-size=\"11\">{lo}</text><text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{hi}</text></svg>",
        W - 30.0,
        h - 1.0,
        W - 30.0,
        h - 1.0
    );
    s
}

/// A bar of the budget in force against the declared one (100%: as declared; more, in red: a
/// release was charged more than once).
fn budget_svg(spent: f64, budget: f64) -> String {
    let ratio = if budget > 0.0 && budget.is_finite() && spent.is_finite() {
        spent / budget
    } else {
        0.0
    };
    let frac = ratio.clamp(0.0, 1.0);
    let w = W - 20.0;
    format!(
        "<svg viewBox=\"0 0 {W} 40\" width=\"{W}\" height=\"40\" role=\"img\" aria-label=\"budget spent\"><rect x=\"10\" y=\"8\" width=\"{w}\" height=\"20\" fill=\"#eee\" stroke=\"#444\"/><rect x=\"10\" y=\"8\" width=\"{:.1}\" height=\"20\" fill=\"{}\"/><text x=\"14\" y=\"23\" font-size=\"12\">{:.1}%</text></svg>",
        (frac * w).max(1.0),
        if ratio > 1.0 { "#d62728" } else { "#2ca02c" },
        100.0 * ratio
    )
}

fn panel(name: &str, title: &str, body: &str) -> String {
    format!("<section class=\"panel\" data-panel=\"{name}\"><h2>{title}</h2>{body}</section>\n")
}

/// The enrolment panel: decisions over time.
fn enrolment_panel(m: &Value) -> String {
    let mut panels = String::new();
    let points: Vec<(f64, f64)> = m["enrolment"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| Some((p.get(0)?.as_f64()?, p.get(1)?.as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    panels.push_str(&panel(
        "enrolment",
        "Enrolment",
        &format!(
            "<p>{} decisions; {} pending.</p>{}",
            m["decisions"],
            m["pending"],
            enrolment_svg(&points)
        ),
    ));
    panels
}

/// The allocation panel: completed decisions per arm.
fn allocation_panel(m: &Value) -> String {
    let mut panels = String::new();
    let alloc: Vec<(String, f64)> = m["allocation"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    (
                        r["label"].as_str().unwrap_or("?").to_string(),
                        r["decisions"].as_f64().unwrap_or(0.0),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    panels.push_str(&panel(
        "allocation",
        "Allocation",
        &format!(
            "<p>Completed decisions per {}.</p>{}",
            esc(m["allocation_unit"].as_str().unwrap_or("arm")),
            bars_svg(&alloc, "allocation")
        ),
    ));
    panels
}

/// The interim panel: estimates with their anytime intervals, or why there are none.
fn interim_panel(m: &Value) -> String {
    let mut panels = String::new();
    let interim = &m["interim"];
    let rows: Vec<(String, f64, f64, f64)> = interim["estimates"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| {
                    Some((
                        e["label"].as_str().unwrap_or("?").to_string(),
                        e["estimate"].as_f64()?,
                        e["low"].as_f64()?,
                        e["high"].as_f64()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let range = (
        interim["range"][0].as_f64().unwrap_or(0.0),
        interim["range"][1].as_f64().unwrap_or(1.0),
    );
    let interim_body = if rows.is_empty() {
        format!(
            "<p>No interim estimate yet: {}</p>",
            esc(interim["why_none"].as_str().unwrap_or("no release yet"))
        )
    } else {
        let mut t = String::from(
            "<table><tr><th></th><th>estimate</th><th>interval</th><th>releases</th></tr>",
        );
        for e in interim["estimates"].as_array().into_iter().flatten() {
            let _ = write!(
                t,
                "<tr><td>{}</td><td>{}</td><td>[{}, {}]</td><td>{}</td></tr>",
                esc(e["label"].as_str().unwrap_or("?")),
                num(&e["estimate"]),
                num(&e["low"]),
                num(&e["high"]),
                num(&e["releases"])
            );
        }
        t.push_str("</table>");
        format!(
            "<p>{} intervals, valid under any number of looks ({}); from released statistics only (no budget spent).</p>{}{}",
            num(&interim["level"]),
            esc(interim["method"].as_str().unwrap_or("")),
            intervals_svg(&rows, range),
            t
        )
    };
    panels.push_str(&panel("interim", "Interim estimates", &interim_body));
    panels
}

/// The ledger panel: the budget in force against the declared one.
fn ledger_panel(m: &Value) -> String {
    let mut panels = String::new();
    let l = &m["ledger"];
    let declared = l["declared"].as_f64().unwrap_or(f64::NAN);
    let effective = l["effective"].as_f64().unwrap_or(f64::NAN);
    let ledger_body = if declared.is_finite() {
        format!(
            "<p>Guarantee: {} with {} = {} declared; in force: {} = {} (the declared budget times the most charges of one release, {}). \
             {} charges over {} releases, {} in total (each release charged its cost; a reward enters one release, so the releases compose in parallel).</p>{}",
            esc(l["guarantee"].as_str().unwrap_or("")),
            esc(l["measure"].as_str().unwrap_or("")),
            num(&l["declared"]),
            esc(l["measure"].as_str().unwrap_or("")),
            num(&l["effective"]),
            num(&l["max_charges_per_release"]),
            num(&l["charges"]),
            num(&l["releases"]),
            num(&l["charged_total"]),
            budget_svg(effective, declared)
        )
    } else {
        format!(
            "<table><tr><th>guarantee</th><td>{}</td></tr><tr><th>charges</th><td>{}</td></tr></table>",
            esc(l["guarantee"]
                .as_str()
                .unwrap_or("none (a non-private kind)")),
            num(&l["charges"])
        )
    };
    panels.push_str(&panel("ledger", "Privacy ledger", &ledger_body));
    panels
}

/// The audit head and verification panels.
fn audit_panels(m: &Value) -> String {
    let mut panels = String::new();
    let a = &m["audit"];
    panels.push_str(&panel(
        "audit",
        "Audit head",
        &format!(
            "<table><tr><th>entries</th><td>{}</td></tr><tr><th>head</th><td><code>{}</code></td></tr></table>",
            num(&a["entries"]),
            esc(a["head"].as_str().unwrap_or(""))
        ),
    ));

    let v = &m["verification"];
    panels.push_str(&panel(
        "verification",
        "Verification",
        &format!(
            "<table><tr><th>state</th><td>{}</td></tr><tr><th>checked</th><td>{}</td></tr><tr><th>entries</th><td>{}</td></tr></table>",
            esc(v["state"].as_str().unwrap_or("")),
            esc(v["at"].as_str().unwrap_or("")),
            num(&v["entries"])
        ),
    ));
    panels
}

/// Render the monitor page from the monitor JSON (`Service::monitor`'s shape, docs/service.md
/// "Trial monitor").
pub fn render(m: &Value) -> String {
    let name = esc(m["experiment"].as_str().unwrap_or(""));
    let mut panels = String::new();

    for part in [
        enrolment_panel,
        allocation_panel,
        interim_panel,
        ledger_panel,
        audit_panels,
    ] {
        panels.push_str(&part(m));
    }
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Monitor: {name}</title>\
<style>body{{font-family:sans-serif;max-width:72em;margin:1em auto}}\
.grid{{display:grid;grid-template-columns:repeat(auto-fit,minmax(34em,1fr));gap:1em}}\
.panel{{border:1px solid #bbb;border-radius:4px;padding:0.5em 1em}}\
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:0.2em 0.5em;text-align:right}}</style></head>\
<body>\n<h1>Trial monitor: {name}</h1>\n<p>Kind <code>{kind}</code> ({setting}), {status}; as of {now}.</p>\n\
<div class=\"grid\">\n{panels}</div>\n\
<script>addEventListener('load',function(){{var p=document.querySelectorAll('.panel'),n=0;\
p.forEach(function(s){{var g=s.querySelector('svg'),t=s.querySelectorAll('td');\
var ok=g?(g.getBoundingClientRect().width>0&&g.childElementCount>1):t.length>0;if(ok)n++;}});\
document.body.setAttribute('data-panels-total',p.length);document.body.setAttribute('data-panels-filled',n);}});</script>\
</body></html>\n",
        kind = esc(m["kind"].as_str().unwrap_or("")),
        setting = esc(m["setting"].as_str().unwrap_or("")),
        status = esc(m["status"].as_str().unwrap_or("")),
        now = esc(m["now"].as_str().unwrap_or("")),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// Every panel is drawn from its part of the JSON, values escaped; an experiment with no
    /// release yet says so instead of an empty drawing.
    #[test]
    fn every_panel_is_drawn_from_the_json() {
        let m = json!({
            "experiment": "t<1>", "kind": "adap_ucb", "setting": "finite", "status": "running",
            "now": "2026-11-28T00:00:00Z", "decisions": 30, "pending": 2,
            "enrolment": [[0.0, 0], [10.0, 12], [20.0, 30]],
            "allocation_unit": "arm",
            "allocation": [{"label": "arm 0", "decisions": 10}, {"label": "arm 1", "decisions": 18}],
            "interim": {"level": 0.9, "method": "risk spending", "range": [0.0, 1.0],
                        "estimates": [{"label": "arm 0", "estimate": 0.3, "low": 0.1, "high": 0.5, "releases": 2}]},
            "ledger": {"charged_total": 3.0, "declared": 1.0, "effective": 2.0, "measure": "rho", "charges": 3,
                       "releases": 2, "max_charges_per_release": 2, "guarantee": "rho-zCDP"},
            "audit": {"entries": 77, "head": "ab12"},
            "verification": {"state": "verified", "at": "2026-11-28T00:00:00Z", "entries": 70},
        });
        let html = super::render(&m);
        assert!(html.contains("t&lt;1&gt;") && !html.contains("t<1>"));
        assert_eq!(html.matches("class=\"panel\"").count(), 6);
        for p in [
            "enrolment",
            "allocation",
            "interim",
            "ledger",
            "audit",
            "verification",
        ] {
            assert!(html.contains(&format!("data-panel=\"{p}\"")), "{p}");
        }
        assert!(html.contains("<polyline"));
        assert!(
            html.contains("200.0%") && html.contains("#d62728"),
            "a release charged twice"
        );
        assert!(html.contains("<circle"), "an interval's estimate");
        for external in ["src=\"http", "href=\"http", "<link", "<img"] {
            assert!(!html.contains(external));
        }
        let mut empty = m.clone();
        empty["interim"] = json!({"estimates": null, "why_none": "no release yet"});
        let html = super::render(&empty);
        assert!(html.contains("No interim estimate yet: no release yet"));
    }
}

//! `report.html`: one self-contained page per results folder (no external file, script or
//! font): the experiment, the command that reproduces it, the manifest's privacy claims, every
//! figure inline as SVG with its notes, and the summary table (at the horizon for regret
//! experiments). A small inline script marks the page with `data-figures-loaded` /
//! `data-figures-total` once every figure has laid out (non-empty bounding box), which the
//! headless-browser test reads.

use super::Plan;
use crate::error::{Error, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// File name of the report.
pub const REPORT: &str = "report.html";
/// The resolved experiment written beside the report (`--runs`/`--horizon` applied): running it
/// reproduces the folder.
pub const EXPERIMENT: &str = "experiment.toml";

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A CSV line split into fields (RFC 4180 quotes).
fn csv_fields(line: &str) -> Vec<String> {
    let mut out = vec![];
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

fn read(p: &Path) -> Result<String> {
    std::fs::read_to_string(p).map_err(|e| Error::Io {
        path: p.display().to_string(),
        error: e,
    })
}

/// The command that reproduces the folder: the resolved experiment written beside the report.
pub fn command(plan: &Plan) -> String {
    format!("dpbandits run {EXPERIMENT} --out {}-again", plan.spec.name)
}

/// Write `report.html` into `dir` from the files already written there (`files`: the SVGs, in
/// figure order, their `.plot.json`, `manifest.json`, `summary.csv`).
pub fn write(plan: &Plan, dir: &Path, files: &[PathBuf]) -> Result<PathBuf> {
    let mut h = String::new();
    let name = esc(&plan.spec.name);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>dpbandits: {name}</title>\n<style>\
         body{{font-family:sans-serif;margin:2em;max-width:1400px;color:#111}}\
         table{{border-collapse:collapse;font-size:13px}}td,th{{border:1px solid #bbb;padding:2px 6px;text-align:left}}\
         figure{{margin:1.5em 0;border-top:1px solid #ddd;padding-top:1em}}figure svg{{max-width:100%;height:auto}}\
         .note{{color:#a01414}}pre{{background:#f4f4f4;padding:0.6em;overflow-x:auto}}code{{background:#f4f4f4}}\
         </style></head>\n<body>\n<h1>{name}</h1>\n"
    );
    if !plan.spec.description.is_empty() {
        let _ = writeln!(h, "<p>{}</p>", esc(&plan.spec.description));
    }
    if let Some(o) = &plan.spec.overrides {
        let _ = writeln!(h, "<p class=\"note\">{}</p>", esc(o));
    }
    let _ = writeln!(
        h,
        "<p>{} runs per configuration, horizon {}, master seed {}, dpbandits {}.</p>\n\
         <h2>Reproduce</h2>\n<pre id=\"command\">{}</pre>\n\
         <p>(run in this folder: <code>{EXPERIMENT}</code> is the resolved configuration that ran, \
         also shown below; from the repository's file of the same name: <code>dpbandits run \
         experiments/{}.toml --runs {} --horizon {}</code>. The same seed gives the same bytes \
         for any thread count.)</p>",
        plan.spec.runs,
        plan.spec.horizon,
        plan.spec.master_seed,
        env!("CARGO_PKG_VERSION"),
        esc(&command(plan)),
        name,
        plan.spec.runs,
        plan.spec.horizon,
    );

    // privacy claims, from the manifest as written
    let manifest: serde_json::Value = serde_json::from_str(&read(&dir.join("manifest.json"))?)
        .map_err(|e| Error::Config(format!("manifest.json: {e}")))?;
    let claims = manifest["policies"]
        .as_array()
        .or_else(|| manifest["cells"].as_array())
        .cloned()
        .unwrap_or_default();
    let _ = writeln!(
        h,
        "<h2>Privacy claims (manifest.json)</h2>\n<table id=\"privacy\"><tr><th>policy</th>\
         <th>kind</th><th>claim</th><th>reproducible noise</th></tr>"
    );
    for c in &claims {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(c["label"].as_str().unwrap_or("?")),
            esc(c["kind"].as_str().unwrap_or("?")),
            esc(c["privacy_summary"].as_str().unwrap_or("?")),
            c["reproducible"]
                .as_bool()
                .or_else(|| c["guarantee"]["noise"].as_str().map(|n| n == "simulation"))
                .map_or("?", |r| if r { "yes" } else { "no (OS-seeded)" })
        );
    }
    h.push_str("</table>\n");
    if let Some(errors) = manifest["errors"].as_array().filter(|e| !e.is_empty()) {
        let _ = writeln!(
            h,
            "<p class=\"note\">Failed configurations: {}</p>",
            esc(&serde_json::to_string(errors).unwrap_or_default())
        );
    }

    // figures
    h.push_str("<h2>Figures</h2>\n");
    let svgs: Vec<&PathBuf> = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "svg"))
        .collect();
    for svg in &svgs {
        let stem = svg
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default();
        let text = read(svg)?;
        let body = text
            .find("<svg")
            .map_or(text.as_str(), |i| &text[i..])
            .to_string();
        let data: serde_json::Value = std::fs::read_to_string(svg.with_extension("plot.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        let _ = write!(
            h,
            "<figure class=\"figure\" id=\"fig-{}\">\n{body}\n<figcaption><b>{}</b>: {}",
            esc(&stem),
            esc(&stem),
            esc(data["title"].as_str().unwrap_or(""))
        );
        for n in data["notes"].as_array().into_iter().flatten() {
            let _ = write!(
                h,
                "<br><span class=\"note\">Note: {}</span>",
                esc(n.as_str().unwrap_or(""))
            );
        }
        let _ = writeln!(
            h,
            " (files <code>{s}.svg</code>, <code>{s}.png</code>)</figcaption>\n</figure>",
            s = esc(&stem)
        );
    }

    // summary table
    if let Ok(text) = std::fs::read_to_string(dir.join("summary.csv")) {
        let mut lines = text.lines();
        let header = lines.next().map(csv_fields).unwrap_or_default();
        let rows: Vec<Vec<String>> = lines.map(csv_fields).collect();
        let t_col = header.iter().position(|c| c == "t");
        let last_t = t_col.and_then(|i| {
            rows.iter()
                .filter_map(|r| r.get(i)?.parse::<u64>().ok())
                .max()
        });
        let shown: Vec<&Vec<String>> = rows
            .iter()
            .filter(|r| match (t_col, last_t) {
                (Some(i), Some(t)) => r.get(i).and_then(|v| v.parse::<u64>().ok()) == Some(t),
                _ => true,
            })
            .take(500)
            .collect();
        let _ = writeln!(
            h,
            "<h2>Summary (summary.csv{})</h2>\n<table id=\"summary\"><tr>{}</tr>",
            last_t.map_or(String::new(), |t| format!(", rows at t = {t}")),
            header
                .iter()
                .map(|c| format!("<th>{}</th>", esc(c)))
                .collect::<String>()
        );
        for r in shown {
            let _ = writeln!(
                h,
                "<tr>{}</tr>",
                r.iter()
                    .map(|c| format!("<td>{}</td>", esc(c)))
                    .collect::<String>()
            );
        }
        h.push_str("</table>\n");
    }
    let spec = toml::to_string(&plan.spec).unwrap_or_default();
    let _ = writeln!(
        h,
        "<h2>Resolved configuration</h2>\n<pre>{}</pre>\n<script>\n\
         window.addEventListener('load', function () {{\n\
           var figs = document.querySelectorAll('figure.figure');\n\
           var ok = 0;\n\
           figs.forEach(function (f) {{\n\
             var s = f.querySelector('svg');\n\
             if (s && s.getBBox().width > 0 && s.querySelectorAll('polyline,path,line,rect,circle').length > 0) {{ ok += 1; f.dataset.loaded = 'yes'; }}\n\
           }});\n\
           document.body.dataset.figuresLoaded = ok;\n\
           document.body.dataset.figuresTotal = figs.length;\n\
         }});\n</script>\n</body></html>",
        esc(&spec)
    );
    let p = dir.join(REPORT);
    std::fs::write(&p, h).map_err(|e| Error::Io {
        path: p.display().to_string(),
        error: e,
    })?;
    Ok(p)
}

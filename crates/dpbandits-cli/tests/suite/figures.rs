//! Issue 17: every experiment file runs with the README's quick-look recipe (`--runs 10
//! --horizon 100000`), and its figures pass the style and label rules, read from the plot data
//! each figure writes beside its pictures (`<stem>.plot.json`): no two data curves share a
//! colour or a (line pattern, marker) pair, legends sit outside the axes, every band the title
//! promises is drawn, legend labels are the policies' labels with parameter values at the
//! fewest digits that keep them apart (issue 44; the full label is the curve's `full_name`,
//! and fig4a's labels and legend are checked for length and width); figure CSVs hold no NaN/inf
//! without a status column; `report.html` holds every figure and renders in headless Chromium.

use crate::{bin, repo};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Runs per experiment file of the quick look below: the README's quick look is `--runs 10
/// --horizon 100000`; the figures' rules and the CSVs' NaN checks need the same code paths (bands
/// included: at least two runs), not ten runs, and 3 runs cost CI a third of the time (about 40 s
/// on 2 cores instead of 120).
const QUICK_RUNS: &str = "3";

/// The results folders of every experiment file, run once for all tests of this module.
fn results() -> &'static Vec<(String, PathBuf)> {
    static DIRS: OnceLock<(tempfile::TempDir, Vec<(String, PathBuf)>)> = OnceLock::new();
    &DIRS
        .get_or_init(|| {
            let root = tempfile::tempdir().unwrap();
            let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("experiments"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "toml"))
                // A design file (`[design]`) runs with `dpbandits design` (its own test, in
                // bai.rs), not `run`.
                .filter(|p| !std::fs::read_to_string(p).unwrap().contains("\n[design]"))
                .collect();
            files.sort();
            assert!(files.len() >= 13, "{files:?}");
            let mut out = vec![];
            for f in files {
                let name = f.file_stem().unwrap().to_string_lossy().to_string();
                let dir = root.path().join(&name);
                let o = bin()
                    .args([
                        "run",
                        f.to_str().unwrap(),
                        "--runs",
                        QUICK_RUNS,
                        "--horizon",
                        "100000",
                    ])
                    .args(["--threads", "2", "--quiet", "--out", dir.to_str().unwrap()])
                    .current_dir(repo())
                    .output()
                    .unwrap();
                assert!(
                    o.status.success(),
                    "the README quick look fails on {name}: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
                out.push((name, dir));
            }
            (root, out)
        })
        .1
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn plots(dir: &Path) -> Vec<(String, serde_json::Value)> {
    let mut v: Vec<(String, serde_json::Value)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".plot.json"))
        .map(|p| {
            let stem = p
                .file_name()
                .unwrap()
                .to_string_lossy()
                .replace(".plot.json", "");
            (stem, json(&p))
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// The rules of one figure's plot data; returns the problems found.
fn check_plot(exp: &str, stem: &str, p: &serde_json::Value) -> Vec<String> {
    let mut bad = vec![];
    let series = p["series"].as_array().unwrap();
    let title = p["title"].as_str().unwrap();
    if p["legend"] != "right_of_axes" {
        bad.push(format!("{exp}/{stem}: legend not outside the axes"));
    }
    let style = |s: &serde_json::Value| s["style"].clone();
    let data: Vec<&serde_json::Value> = series.iter().filter(|s| s["role"] == "data").collect();
    if data.len() > 20 {
        bad.push(format!("{exp}/{stem}: {} data curves (> 20)", data.len()));
    }
    for (i, a) in data.iter().enumerate() {
        for b in &data[i + 1..] {
            let (sa, sb) = (style(a), style(b));
            if sa["color"] == sb["color"] {
                bad.push(format!(
                    "{exp}/{stem}: {} and {} share a colour",
                    a["name"], b["name"]
                ));
            }
            if sa["dash"] == sb["dash"] && sa["marker"] == sb["marker"] {
                bad.push(format!(
                    "{exp}/{stem}: {} and {} share pattern and marker (greyscale)",
                    a["name"], b["name"]
                ));
            }
        }
    }
    let special: Vec<&serde_json::Value> = series.iter().filter(|s| s["role"] != "data").collect();
    for (i, s) in special.iter().enumerate() {
        for d in &data {
            if style(s) == style(d) {
                bad.push(format!("{exp}/{stem}: {} is styled like data", s["name"]));
            }
        }
        for t in &special[i + 1..] {
            if style(s) == style(t) {
                bad.push(format!(
                    "{exp}/{stem}: {} and {} share a style",
                    s["name"], t["name"]
                ));
            }
        }
    }
    if series.iter().filter(|s| s["role"] == "baseline").count() > 1
        || series
            .iter()
            .filter(|s| s["style"]["color"] == "#000000")
            .count()
            > 1
    {
        bad.push(format!("{exp}/{stem}: more than one baseline style"));
    }
    let names: BTreeSet<&str> = series.iter().map(|s| s["name"].as_str().unwrap()).collect();
    if names.len() != series.len() {
        bad.push(format!("{exp}/{stem}: two curves share a legend label"));
    }
    if title.contains("band") {
        for s in series.iter().filter(|s| s["role"] != "theory") {
            if s["band"] != true {
                bad.push(format!(
                    "{exp}/{stem}: title promises a band, {} has none",
                    s["name"]
                ));
            }
        }
    }
    if series.iter().any(|s| s["band"] == true) && !title.contains("band") {
        bad.push(format!(
            "{exp}/{stem}: bands drawn but the title does not say what they are"
        ));
    }
    if !p["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("quick look"))
    {
        bad.push(format!(
            "{exp}/{stem}: the quick look is not noted on the figure"
        ));
    }
    bad
}

#[test]
fn every_experiment_figure_follows_the_style_rules() {
    let mut bad = vec![];
    let mut figures = 0;
    for (exp, dir) in results() {
        let manifest = json(&dir.join("manifest.json"));
        let labels: Vec<String> = manifest["policies"]
            .as_array()
            .or_else(|| manifest["cells"].as_array())
            .unwrap()
            .iter()
            .map(|c| c["label"].as_str().unwrap().to_string())
            .collect();
        let unique: BTreeSet<&String> = labels.iter().collect();
        assert_eq!(
            unique.len(),
            labels.len(),
            "{exp}: two configurations share a label"
        );
        let mut drawn: BTreeSet<String> = BTreeSet::new();
        for (stem, p) in plots(dir) {
            figures += 1;
            bad.extend(check_plot(exp, &stem, &p));
            let names: Vec<&str> = p["series"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["name"].as_str().unwrap())
                .collect();
            // regret-type figures: every curve's full name is a full label of the manifest (a
            // theory overlay, `bound: LABEL` or `bound (<tag>): LABEL`, a bound of such a label),
            // and its legend entry
            // that label with shorter numbers (never longer)
            let full: Vec<&str> = p["series"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["full_name"].as_str().unwrap())
                .collect();
            for (n, f) in names.iter().zip(&full) {
                if n.chars().count() > f.chars().count() {
                    bad.push(format!("{exp}/{stem}: legend '{n}' is longer than '{f}'"));
                }
            }
            if stem == "regret" || stem == "comparison" || stem.starts_with("fig5_") {
                for f in &full {
                    // `bound: LABEL`, or an alternative rate's `bound (<tag>): LABEL`
                    let f = f
                        .strip_prefix("bound")
                        .and_then(|r| r.split_once(": "))
                        .filter(|(tag, _)| tag.is_empty() || tag.starts_with(" ("))
                        .map_or(*f, |(_, l)| l);
                    if !labels.iter().any(|l| l == f) {
                        bad.push(format!("{exp}/{stem}: curve '{f}' is not a full label"));
                    }
                }
            }
            if stem == "regret" || stem.starts_with("regret_") && stem[7..].parse::<u32>().is_ok() {
                drawn.extend(names.iter().map(|n| n.to_string()));
            }
            if stem == "price_of_privacy" && p["log_x"] != false {
                bad.push(format!(
                    "{exp}/{stem}: PoP uses a log t axis (the paper's is linear)"
                ));
            }
            for n in &names {
                if n.starts_with("ldp(") && !n.contains("inner=") {
                    bad.push(format!("{exp}/{stem}: '{n}' omits the inner policy"));
                }
                if n.starts_with("ldp_ucb(") && !n.contains("mechanism=") {
                    bad.push(format!("{exp}/{stem}: '{n}' omits the mechanism"));
                }
            }
        }
        if manifest["policies"].is_array() && drawn.len() != labels.len() {
            bad.push(format!(
                "{exp}: the regret panels draw {} of {} configurations",
                drawn.len(),
                labels.len()
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(figures >= 25, "only {figures} figures");
}

/// Every CSV of every experiment (figure CSVs and the tidy `summary.csv`): no NaN anywhere, no
/// infinite value outside the parameter and name columns, unless the row has a `status` that is
/// not `ok`.
#[test]
fn figure_csvs_have_no_unexplained_nan() {
    let mut bad = vec![];
    for (exp, dir) in results() {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if !name.ends_with(".csv") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let mut lines = text.lines();
            let header: Vec<&str> = lines.next().unwrap().split(',').collect();
            let status = header.iter().position(|h| *h == "status");
            for line in lines {
                // split outside quotes
                let mut fields = vec![];
                let (mut cur, mut q) = (String::new(), false);
                for c in line.chars() {
                    match c {
                        '"' => q = !q,
                        ',' if !q => fields.push(std::mem::take(&mut cur)),
                        _ => cur.push(c),
                    }
                }
                fields.push(cur);
                let explained = status.is_some_and(|i| fields.get(i).is_some_and(|s| s != "ok"));
                for (h, v) in header.iter().zip(&fields) {
                    let param = ["epsilon", "rho", "T", "t", "policy", "label", "kind"].contains(h);
                    let lower = v.to_ascii_lowercase();
                    if (lower == "nan" || (!param && lower.contains("inf"))) && !explained {
                        bad.push(format!("{exp}/{name}: {h} = {v} without a status: {line}"));
                    }
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// `report.html`: self-contained, one inline SVG per figure, the privacy claims, the summary
/// table and the reproducing command; rendered in headless Chromium, every figure lays out.
#[test]
fn reports_render_in_chromium_with_every_figure() {
    let chromium = std::env::var("DPBANDITS_CHROMIUM").unwrap_or("/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).is_file(),
        "headless Chromium not found at {chromium}: run scripts/ensure-browser (installs Debian's \
         chromium as root) or set DPBANDITS_CHROMIUM"
    );
    for (exp, dir) in results() {
        let report = dir.join("report.html");
        let html = std::fs::read_to_string(&report).unwrap();
        let svgs = std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "svg")
            })
            .count();
        assert!(svgs >= 1, "{exp}");
        assert_eq!(
            html.matches("<figure class=\"figure\"").count(),
            svgs,
            "{exp}: a figure is missing"
        );
        assert_eq!(
            html.matches("<svg").count(),
            svgs,
            "{exp}: figures are inline SVG"
        );
        for external in ["src=\"http", "href=\"http", "<link", "<img"] {
            assert!(
                !html.contains(external),
                "{exp}: report is not self-contained ({external})"
            );
        }
        assert!(
            html.contains("id=\"privacy\"") && html.contains("Interactive")
                || exp.starts_with("bai")
                || html.contains("DP"),
            "{exp}: privacy claims"
        );
        assert!(html.contains("id=\"summary\""), "{exp}: summary table");
        assert!(
            html.contains("dpbandits run experiment.toml --out"),
            "{exp}: command"
        );
        assert!(
            dir.join("experiment.toml").is_file(),
            "{exp}: experiment.toml"
        );

        let profile = tempfile::tempdir().unwrap();
        let shot = profile.path().join("shot.png");
        let flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ];
        let user = format!("--user-data-dir={}", profile.path().join("p").display());
        let url = format!("file://{}", report.display());
        let dom = run_bounded(
            std::process::Command::new(&chromium)
                .args(flags)
                .arg(&user)
                .args(["--dump-dom", &url]),
        );
        let body = dom.find("<body").map(|i| &dom[i..]).unwrap_or("");
        let attr = |name: &str| -> Option<usize> {
            let k = body.find(&format!("{name}=\""))? + name.len() + 2;
            body[k..].split('"').next()?.parse().ok()
        };
        assert_eq!(
            attr("data-figures-total"),
            Some(svgs),
            "{exp}: DOM dump: {}",
            &body[..body.len().min(300)]
        );
        assert_eq!(
            attr("data-figures-loaded"),
            Some(svgs),
            "{exp}: a figure did not lay out"
        );
        // a screenshot of a regret report and a BAI report (each launch costs seconds)
        if exp != "fig4a" && exp != "bai_mu1" {
            continue;
        }
        run_bounded(
            std::process::Command::new(&chromium)
                .args(flags)
                .arg(&user)
                .arg(format!("--screenshot={}", shot.display()))
                .args(["--window-size=1400,2000", &url]),
        );
        let png = std::fs::read(&shot).unwrap_or_default();
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 20_000,
            "{exp}: screenshot ({} bytes)",
            png.len()
        );
    }
}

/// Run a browser command with a 60 s limit; its stdout (also the monitor page's test).
pub(super) fn run_bounded(cmd: &mut std::process::Command) -> String {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).ok();
        s
    });
    let start = std::time::Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    reader.join().unwrap()
}

/// The reproducing command of `report.html` reproduces the folder byte for byte.
#[test]
fn report_command_reproduces_the_folder() {
    let (exp, dir) = results()
        .iter()
        .find(|(e, _)| e == "ldp_e1_rotating")
        .unwrap();
    let again = tempfile::tempdir().unwrap();
    let o = bin()
        .args([
            "run",
            "experiment.toml",
            "--quiet",
            "--threads",
            "1",
            "--out",
        ])
        .arg(again.path().join("r"))
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name();
        if name == "journal.bin" || name == "run.lock" {
            continue;
        }
        n += 1;
        let a = std::fs::read(dir.join(&name)).unwrap();
        let b = std::fs::read(again.path().join("r").join(&name)).unwrap();
        assert!(
            a == b,
            "{exp}: {name:?} differs when rerun from experiment.toml"
        );
    }
    assert!(n >= 10);
}

/// Longest legend label of fig4a's figures (characters) and the largest share of the SVG width
/// the regret plot's legend panel may take (issue 44).
const FIG4A_MAX_LABEL: usize = 24;
const FIG4A_MAX_LEGEND_SHARE: f64 = 0.25;

/// Issue 44: fig4a's figures (a tiny quick look of `experiments/fig4a.toml`) have short legend
/// labels (`rho=0.0316`, not `rho=0.03162277660168379`) and a compact legend, read from what the
/// code writes: the labels from each `.plot.json`, the legend panel from the SVG (its frame is
/// the one unfilled rectangle of opacity 0.25; the panel starts 4 px left of it).
#[test]
fn fig4a_legend_labels_are_short_and_the_legend_compact() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("fig4a");
    let o = bin()
        .args([
            "run",
            "experiments/fig4a.toml",
            "--runs",
            "2",
            "--horizon",
            "10000",
        ])
        .args(["--threads", "2", "--quiet", "--out", dir.to_str().unwrap()])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let manifest = json(&dir.join("manifest.json"));
    let full: Vec<String> = manifest["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["label"].as_str().unwrap().to_string())
        .collect();
    let mut report = vec![];
    for stem in ["regret", "gap_vs_rho", "price_of_privacy"] {
        let p = json(&dir.join(format!("{stem}.plot.json")));
        let svg = std::fs::read_to_string(dir.join(format!("{stem}.svg"))).unwrap();
        let names: Vec<&str> = p["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        let unique: BTreeSet<&&str> = names.iter().collect();
        assert_eq!(
            unique.len(),
            names.len(),
            "{stem}: labels not distinct: {names:?}"
        );
        let longest = names.iter().map(|n| n.chars().count()).max().unwrap();
        for n in &names {
            assert!(
                svg.contains(&format!("\n{}\n", n.replace('\'', "&apos;"))),
                "{stem}: legend label {n} is not drawn in the SVG"
            );
        }
        // the SVG's width and its legend frame
        let attr = |tag: &str, name: &str| -> f64 {
            let k = tag.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
            tag[k..].split('"').next().unwrap().parse().unwrap()
        };
        let head = &svg[..svg.find('>').unwrap()];
        let width = attr(head, "width");
        let frames: Vec<&str> = svg
            .split('<')
            .filter(|t| {
                t.starts_with("rect ")
                    && t.contains("fill=\"none\"")
                    && t.contains("opacity=\"0.25\"")
            })
            .collect();
        assert_eq!(frames.len(), 1, "{stem}: one legend frame: {frames:?}");
        let legend = width - (attr(frames[0], "x") - 4.0);
        let share = legend / width;
        assert_eq!(p["width"].as_f64(), Some(width), "{stem}: plot.json width");
        assert_eq!(
            p["legend_width"].as_f64(),
            Some(legend),
            "{stem}: plot.json legend width"
        );
        report.push(format!(
            "{stem}: longest label {longest} chars, legend {legend} of {width} px ({:.1}%)",
            100.0 * share
        ));
        if stem == "regret" {
            assert_eq!(names.len(), full.len(), "regret draws every configuration");
        }
        if names.iter().any(|n| n.chars().count() > FIG4A_MAX_LABEL)
            || (stem == "regret" && share > FIG4A_MAX_LEGEND_SHARE)
        {
            panic!(
                "fig4a {stem}: labels longer than {FIG4A_MAX_LABEL} characters or a legend wider \
                 than {}% of the figure:\n{}\nlabels: {names:?}",
                100.0 * FIG4A_MAX_LEGEND_SHARE,
                report.join("\n")
            );
        }
    }
    eprintln!("{}", report.join("\n"));
}

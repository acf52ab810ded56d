//! Line plots written as SVG and PNG (plotters; text drawn with the embedded DejaVu Sans font, so
//! PNG rendering needs no system fonts), plus the plot data as `<stem>.plot.json`.
//!
//! Log axes are drawn by plotting `log10(x)` on a linear axis and labelling ticks as powers of
//! ten: one chart type for all four axis combinations.
//!
//! # Styles
//! Every data curve gets a colour, a line pattern and a marker ([`styles`]): 20 colours, 4 line
//! patterns and 5 markers, assigned so that for up to [`MAX_DISTINCT`] data curves any two differ
//! in colour **and** in the (pattern, marker) pair, so they stay apart in greyscale too. A single
//! non-private baseline ([`Role::Baseline`]) is drawn black and solid with no marker; theory and
//! lower-bound curves ([`Role::Theory`]) dark grey, thick, wide dashes, no marker: styles no data curve
//! uses. The legend is drawn in its own panel right of the axes, so it never covers data, as wide
//! as its longest label; its labels are the callers' labels with parameter values at the fewest
//! digits that keep them apart ([`legend_labels`]; the full label stays in the plot data's
//! `full_name`). Bands are drawn for every series that carries one (the caller's title may then
//! promise them); more than [`MANY_BANDS`] are lighter and outlined ([`band_look`]).

use crate::error::{Error, Result};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Once;

/// What a curve is: styles are assigned per role.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A measured curve (palette colour, pattern and marker).
    #[default]
    Data,
    /// The one non-private baseline of a figure (black, solid, no marker).
    Baseline,
    /// A theory, fitted-shape or lower-bound curve (dark grey, thick wide dashes, no marker).
    Theory,
}

/// One curve, with an optional shaded band (x, low, high).
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// Points (x, y).
    pub points: Vec<(f64, f64)>,
    /// Optional band (x, low, high), e.g. 5%-95% quantiles over runs; always drawn.
    pub band: Option<Vec<(f64, f64, f64)>>,
    /// Data, baseline or theory.
    pub role: Role,
}

/// What to draw.
#[derive(Debug, Clone, Default)]
pub struct PlotSpec {
    /// Title.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Log-scale x axis.
    pub log_x: bool,
    /// Log-scale y axis.
    pub log_y: bool,
    /// Curves.
    pub series: Vec<Series>,
    /// Optional horizontal reference line (e.g. y = 0).
    pub hline: Option<f64>,
    /// Vertical reference lines (e.g. the breakpoints of a piecewise environment), one legend
    /// entry `vline_label` for all.
    pub vlines: Vec<f64>,
    /// Legend entry of the vertical lines.
    pub vline_label: String,
    /// One-line notes printed under the title (e.g. why the figure does not show the paper's
    /// claim, or that the run was a quick look).
    pub notes: Vec<String>,
}

/// Line pattern of a curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dash {
    /// Continuous.
    Solid,
    /// 10 px dashes.
    Dashed,
    /// Dots.
    Dotted,
    /// 20 px dashes.
    LongDash,
    /// Wide dashes, 14 px on 14 px off (theory curves only).
    WideDash,
}

/// Marker of a curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Marker {
    /// No marker (baseline and theory curves).
    None,
    /// Filled circle.
    Circle,
    /// Filled square.
    Square,
    /// Filled triangle.
    Triangle,
    /// Cross.
    Cross,
    /// Open circle.
    Ring,
    /// Open square (theory curves only).
    OpenSquare,
    /// Open triangle (theory curves only).
    OpenTriangle,
}

/// How one curve is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Style {
    /// Colour `#rrggbb`.
    #[serde(serialize_with = "hex")]
    pub color: (u8, u8, u8),
    /// Line pattern.
    pub dash: Dash,
    /// Marker.
    pub marker: Marker,
    /// Line width in pixels.
    pub width: u32,
}

fn hex<S: serde::Serializer>(c: &(u8, u8, u8), s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2))
}

/// Data curves per figure with pairwise distinct colours and (pattern, marker) pairs.
pub const MAX_DISTINCT: usize = 20;

/// 20 colours readable on white: Tableau 10, then ten darker or more saturated hues.
const PALETTE: [(u8, u8, u8); MAX_DISTINCT] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
    (0, 0, 128),
    (128, 0, 0),
    (0, 110, 110),
    (110, 110, 0),
    (200, 0, 200),
    (0, 200, 120),
    (75, 0, 130),
    (255, 215, 0),
    (255, 0, 100),
    (70, 130, 255),
];
const DATA_DASHES: [Dash; 4] = [Dash::Solid, Dash::Dashed, Dash::Dotted, Dash::LongDash];
const DATA_MARKERS: [Marker; 5] = [
    Marker::Circle,
    Marker::Square,
    Marker::Triangle,
    Marker::Cross,
    Marker::Ring,
];
/// The baseline's style.
pub const BASELINE: Style = Style {
    color: (0, 0, 0),
    dash: Dash::Solid,
    marker: Marker::None,
    width: 3,
};
/// The style of the first theory or lower-bound curve of a figure.
pub const THEORY: Style = Style {
    color: (60, 60, 60),
    dash: Dash::WideDash,
    marker: Marker::None,
    width: 3,
};

/// The style of the `i`-th theory curve: grey, thick wide dashes, with open markers no data
/// curve uses (none, open square, open triangle), then a lighter grey for the next three.
pub fn theory_style(i: usize) -> Style {
    const M: [Marker; 3] = [Marker::None, Marker::OpenSquare, Marker::OpenTriangle];
    const C: [(u8, u8, u8); 2] = [(60, 60, 60), (140, 140, 140)];
    Style {
        color: C[(i / M.len()) % C.len()],
        marker: M[i % M.len()],
        ..THEORY
    }
}

/// The style of the `i`-th data curve: colour `i mod 20`, pattern `i mod 4`, marker `i mod 5`
/// (4 and 5 are coprime, so the (pattern, marker) pairs of the first 20 curves are distinct).
pub fn data_style(i: usize) -> Style {
    Style {
        color: PALETTE[i % PALETTE.len()],
        dash: DATA_DASHES[i % DATA_DASHES.len()],
        marker: DATA_MARKERS[i % DATA_MARKERS.len()],
        width: 2,
    }
}

/// The role each series is drawn with: as given, except that only the first
/// [`Role::Baseline`] keeps it (the others are drawn as data).
pub fn roles(spec: &PlotSpec) -> Vec<Role> {
    let mut baseline = false;
    spec.series
        .iter()
        .map(|s| match s.role {
            Role::Baseline if !baseline => {
                baseline = true;
                Role::Baseline
            }
            Role::Baseline => Role::Data,
            r => r,
        })
        .collect()
}

/// The style of every series of `spec`, in order (see [`roles`]).
pub fn styles(spec: &PlotSpec) -> Vec<Style> {
    let mut data = 0;
    let mut theory = 0;
    roles(spec)
        .into_iter()
        .map(|r| match r {
            Role::Theory => {
                theory += 1;
                theory_style(theory - 1)
            }
            Role::Baseline => BASELINE,
            Role::Data => {
                data += 1;
                data_style(data - 1)
            }
        })
        .collect()
}

static FONT: Once = Once::new();

fn register_font() {
    FONT.call_once(|| {
        // The font bytes are a valid TTF shipped by the `dejavu` crate; failure would only lose text.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

/// A number with `sig` significant digits and no trailing zeros, for axis notes and titles
/// (`0.31622776601683794` -> `0.316`, `1000` -> `1000`, `1e-5` -> `1e-5`). Legends go through
/// [`legend_labels`], which picks the digits so that no two values share a text.
pub fn short_number(v: f64, sig: usize) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let mag = v.abs().log10().floor() as i32;
    if !(-3..6).contains(&mag) {
        let s = format!("{:.*e}", sig.saturating_sub(1), v);
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let m = if m.contains('.') {
            m.trim_end_matches('0').trim_end_matches('.')
        } else {
            m
        };
        return format!("{m}e{e}");
    }
    let decimals = (sig as i32 - 1 - mag).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The fewest significant digits a parameter value is shown with in a legend.
pub const LABEL_DIGITS: usize = 3;

/// One piece of a label: text kept as is, or a parameter value written after `key=` (or
/// `key = `).
enum Piece<'a> {
    Text(&'a str),
    Value {
        key: &'a str,
        text: &'a str,
        value: f64,
    },
}

/// Split a label into text and the numbers that follow an `=` (the parameter values of
/// `kind(p1=v1,p2=v2)` and of `rho = 0.5`); a number must end the label or be followed by a
/// separator (`,`, `)`, `]`, `;`, a space), so `=1abc` stays text.
fn pieces(label: &str) -> Vec<Piece<'_>> {
    let b = label.as_bytes();
    let mut out = vec![];
    let (mut start, mut i) = (0, 0);
    while i < b.len() {
        if b[i] != b'=' {
            i += 1;
            continue;
        }
        // the key: the identifier before '=' (spaces skipped)
        let mut k_end = i;
        while k_end > 0 && b[k_end - 1] == b' ' {
            k_end -= 1;
        }
        let mut k_start = k_end;
        while k_start > 0 && (b[k_start - 1].is_ascii_alphanumeric() || b[k_start - 1] == b'_') {
            k_start -= 1;
        }
        let mut j = i + 1;
        while j < b.len() && b[j] == b' ' {
            j += 1;
        }
        let n_start = j;
        if j < b.len() && b[j] == b'-' {
            j += 1;
        }
        let digits = |j: &mut usize| {
            let s = *j;
            while *j < b.len() && b[*j].is_ascii_digit() {
                *j += 1;
            }
            *j > s
        };
        let mut ok = digits(&mut j);
        if j < b.len() && b[j] == b'.' {
            j += 1;
            ok |= digits(&mut j);
        }
        if ok && j < b.len() && (b[j] == b'e' || b[j] == b'E') {
            let mut e = j + 1;
            if e < b.len() && (b[e] == b'-' || b[e] == b'+') {
                e += 1;
            }
            if digits(&mut e) {
                j = e;
            }
        }
        let ends = j == b.len() || matches!(b[j], b',' | b')' | b']' | b';' | b' ');
        let value = label[n_start..j]
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite());
        match value {
            Some(value) if ok && ends && k_start < k_end => {
                out.push(Piece::Text(&label[start..n_start]));
                out.push(Piece::Value {
                    key: &label[k_start..k_end],
                    text: &label[n_start..j],
                    value,
                });
                start = j;
                i = j;
            }
            _ => i += 1,
        }
    }
    out.push(Piece::Text(&label[start..]));
    out
}

/// How a value is shown at `sig` digits: integers exactly (`1166`, `1e7`), other values with
/// [`short_number`]; never longer than the label's own text.
fn shown(text: &str, value: f64, sig: usize) -> String {
    let sig = if value.fract() == 0.0 && value.abs() < 1e15 {
        17
    } else {
        sig
    };
    let s = short_number(value, sig);
    if s.len() < text.len() {
        s
    } else {
        text.to_string()
    }
}

/// The legend labels of one figure: every parameter value of the labels (a number after `key=`)
/// at the fewest significant digits, at least [`LABEL_DIGITS`], at which the distinct values of
/// that parameter in this figure get distinct texts (`rho=0.03162277660168379` ->
/// `rho=0.0316`; `0.5` and `0.5001` -> `0.5` and `0.5001`). Integers are never rounded. Labels
/// that were distinct stay distinct (otherwise the labels are returned in full).
pub fn legend_labels(labels: &[&str]) -> Vec<String> {
    let parsed: Vec<Vec<Piece<'_>>> = labels.iter().map(|l| pieces(l)).collect();
    // distinct (text, value) pairs per key
    let mut keys: Vec<(&str, Vec<(&str, f64)>)> = vec![];
    for p in parsed.iter().flatten() {
        if let Piece::Value { key, text, value } = *p {
            let at = match keys.iter().position(|(k, _)| *k == key) {
                Some(at) => at,
                None => {
                    keys.push((key, vec![]));
                    keys.len() - 1
                }
            };
            if !keys[at].1.iter().any(|&(t, _)| t == text) {
                keys[at].1.push((text, value));
            }
        }
    }
    // per key, the fewest digits at which distinct values have distinct texts
    let digits: Vec<Option<usize>> = keys
        .iter()
        .map(|(_, vals)| {
            (LABEL_DIGITS..=17).find(|&sig| {
                vals.iter().enumerate().all(|(i, &(ta, va))| {
                    vals[i + 1..]
                        .iter()
                        .all(|&(tb, vb)| va == vb || shown(ta, va, sig) != shown(tb, vb, sig))
                })
            })
        })
        .collect();
    let out: Vec<String> = parsed
        .iter()
        .map(|p| {
            p.iter()
                .map(|piece| match *piece {
                    Piece::Text(t) => t.to_string(),
                    Piece::Value { key, text, value } => {
                        let at = keys.iter().position(|(k, _)| *k == key);
                        match at.and_then(|at| digits[at]) {
                            Some(sig) => shown(text, value, sig),
                            None => text.to_string(),
                        }
                    }
                })
                .collect()
        })
        .collect();
    let distinct = |v: &[&str]| {
        let mut s: Vec<&str> = v.to_vec();
        s.sort_unstable();
        s.windows(2).all(|w| w[0] != w[1])
    };
    let shortened: Vec<&str> = out.iter().map(String::as_str).collect();
    if distinct(labels) && !distinct(&shortened) {
        return labels.iter().map(|l| l.to_string()).collect();
    }
    out
}

/// A count for titles and legends: `100000` -> `1e5`, `1166` -> `1166`, exact (never rounded).
pub fn count(v: u64) -> String {
    if v >= 10_000 {
        let z = v.trailing_zeros_dec();
        if z >= 3 {
            let m = v / 10u64.pow(z);
            return format!("{m}e{z}");
        }
    }
    v.to_string()
}

trait TrailingZerosDec {
    fn trailing_zeros_dec(self) -> u32;
}
impl TrailingZerosDec for u64 {
    fn trailing_zeros_dec(mut self) -> u32 {
        let mut n = 0;
        while self != 0 && self.is_multiple_of(10) {
            self /= 10;
            n += 1;
        }
        n
    }
}

/// The plot data written beside the pictures (`<stem>.plot.json`): what a test or a reader can
/// check without looking at pixels.
#[derive(Debug, Serialize)]
pub struct PlotData<'a> {
    /// Title.
    pub title: &'a str,
    /// Notes under the title.
    pub notes: &'a [String],
    /// Axis labels.
    pub x_label: &'a str,
    /// Axis labels.
    pub y_label: &'a str,
    /// Log axes.
    pub log_x: bool,
    /// Log axes.
    pub log_y: bool,
    /// Where the legend is: always `right_of_axes` (its own panel, outside the data).
    pub legend: &'static str,
    /// Width of the picture in pixels.
    pub width: u32,
    /// Width of the legend panel in pixels (it follows the longest legend label).
    pub legend_width: u32,
    /// The curves.
    pub series: Vec<SeriesData<'a>>,
}

/// One curve of [`PlotData`].
#[derive(Debug, Serialize)]
pub struct SeriesData<'a> {
    /// Legend entry, as drawn ([`legend_labels`]: parameter values at the fewest digits that
    /// keep them apart).
    pub name: &'a str,
    /// The curve's full label (the configuration's label in summary.csv and the manifest).
    pub full_name: &'a str,
    /// Role.
    pub role: Role,
    /// Style.
    pub style: Style,
    /// Whether a band is drawn.
    pub band: bool,
    /// Number of points.
    pub points: usize,
}

/// Draw `spec` to `<stem>.svg` and `<stem>.png` and write `<stem>.plot.json`; returns the paths.
pub fn draw(stem: &Path, spec: &PlotSpec) -> Result<Vec<PathBuf>> {
    register_font();
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    let json = stem.with_extension("plot.json");
    let err = |p: &Path| {
        let p = p.display().to_string();
        move |e: String| Error::Plot {
            path: p.clone(),
            message: e,
        }
    };
    let full = spec;
    let names: Vec<&str> = full.series.iter().map(|s| s.name.as_str()).collect();
    let spec = &PlotSpec {
        series: full
            .series
            .iter()
            .zip(legend_labels(&names))
            .map(|(s, name)| Series { name, ..s.clone() })
            .collect(),
        ..full.clone()
    };
    let styles = styles(spec);
    let roles = roles(spec);
    let size = canvas(spec);
    draw_on(
        SVGBackend::new(&svg, size).into_drawing_area(),
        spec,
        &styles,
    )
    .map_err(err(&svg))?;
    draw_on(
        BitMapBackend::new(&png, size).into_drawing_area(),
        spec,
        &styles,
    )
    .map_err(err(&png))?;
    let data = PlotData {
        title: &spec.title,
        notes: &spec.notes,
        x_label: &spec.x_label,
        y_label: &spec.y_label,
        log_x: spec.log_x,
        log_y: spec.log_y,
        legend: "right_of_axes",
        width: size.0,
        legend_width: legend_width(spec),
        series: spec
            .series
            .iter()
            .zip(&full.series)
            .zip(&styles)
            .zip(&roles)
            .map(|(((s, f), st), &role)| SeriesData {
                name: &s.name,
                full_name: &f.name,
                role,
                style: *st,
                band: s.band.as_ref().is_some_and(|b| !b.is_empty()),
                points: s.points.len(),
            })
            .collect(),
    };
    let text = serde_json::to_string_pretty(&data).map_err(|e| Error::Config(e.to_string()))?;
    std::fs::write(&json, text + "\n").map_err(|e| Error::Io {
        path: json.display().to_string(),
        error: e,
    })?;
    Ok(vec![svg, png, json])
}

const WIDTH: u32 = 1280;
/// The widest legend panel (labels longer than [`LEGEND_CHARS`] wrap) and the narrowest.
const LEGEND_W: u32 = 400;
const LEGEND_MIN_W: u32 = 160;
/// Legend text: its font size and where it starts in the panel (after the line sample).
const LEGEND_FONT: u32 = 13;
const LEGEND_TEXT_X: u32 = 62;
const LEGEND_CHARS: usize = 46;
const TITLE_CHARS: usize = 100;
const NOTE_CHARS: usize = 130;

/// Split `text` into lines of at most `n` characters, at spaces or commas where possible.
fn wrap(text: &str, n: usize) -> Vec<String> {
    let mut lines = vec![];
    let mut cur = String::new();
    let flush = |cur: &mut String, lines: &mut Vec<String>| {
        if !cur.is_empty() {
            lines.push(std::mem::take(cur));
        }
    };
    // tokens keep their trailing separator
    let mut tokens = vec![];
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if c == ' ' || c == ',' {
            tokens.push(&text[start..i + 1]);
            start = i + 1;
        }
    }
    tokens.push(&text[start..]);
    for t in tokens {
        if cur.chars().count() + t.chars().count() > n {
            flush(&mut cur, &mut lines);
        }
        let mut t = t;
        while t.chars().count() > n {
            let cut = t.char_indices().nth(n).map_or(t.len(), |(i, _)| i);
            lines.push(t[..cut].to_string());
            t = &t[cut..];
        }
        cur.push_str(t);
    }
    flush(&mut cur, &mut lines);
    if lines.is_empty() {
        lines.push(String::new());
    }
    lines
}

fn header_lines(spec: &PlotSpec) -> (Vec<String>, Vec<String>) {
    let title = wrap(&spec.title, TITLE_CHARS);
    let notes = spec
        .notes
        .iter()
        .flat_map(|n| wrap(&format!("Note: {n}"), NOTE_CHARS))
        .collect();
    (title, notes)
}

fn legend_entries(spec: &PlotSpec) -> Vec<Vec<String>> {
    let mut v: Vec<Vec<String>> = spec
        .series
        .iter()
        .map(|s| wrap(&s.name, LEGEND_CHARS))
        .collect();
    if !spec.vlines.is_empty() {
        v.push(wrap(&spec.vline_label, LEGEND_CHARS));
    }
    v
}

/// Width of a legend line in pixels, measured with the embedded font (7.5 px a character if
/// the font cannot measure it).
fn legend_text_width(line: &str) -> u32 {
    register_font();
    ("sans-serif", LEGEND_FONT)
        .into_font()
        .box_size(line)
        .map(|(w, _)| w)
        .unwrap_or((line.chars().count() as f64 * 7.5).ceil() as u32)
}

/// Width of the legend panel: the longest legend line plus the line sample and margins, between
/// [`LEGEND_MIN_W`] and [`LEGEND_W`].
fn legend_width(spec: &PlotSpec) -> u32 {
    let text = legend_entries(spec)
        .iter()
        .flatten()
        .map(|l| legend_text_width(l))
        .max()
        .unwrap_or(0);
    (LEGEND_TEXT_X + text + 24).clamp(LEGEND_MIN_W, LEGEND_W)
}

fn header_height(spec: &PlotSpec) -> u32 {
    let (t, n) = header_lines(spec);
    12 + 26 * t.len() as u32 + 19 * n.len() as u32 + 6
}

fn canvas(spec: &PlotSpec) -> (u32, u32) {
    let legend: u32 = legend_entries(spec)
        .iter()
        .map(|l| 17 * l.len() as u32 + 7)
        .sum();
    (WIDTH, (header_height(spec) + 40 + legend).max(680))
}

fn tx(v: f64, log: bool) -> Option<f64> {
    let r = if log {
        if v > 0.0 { v.log10() } else { return None }
    } else {
        v
    };
    r.is_finite().then_some(r)
}

fn bounds(vals: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-12 {
        return (lo - 0.5, hi + 0.5);
    }
    let pad = (hi - lo) * 0.04;
    (lo - pad, hi + pad)
}

/// Tick label; `span` is the axis range (a tick within 1e-9 of the span from 0 is "0", not
/// `-5.6e-17`).
fn tick_label(v: f64, log: bool, span: f64) -> String {
    if log {
        let r = v.round();
        if (v - r).abs() < 1e-6 {
            match r as i64 {
                0 => "1".into(),
                1 => "10".into(),
                k => format!("1e{k}"),
            }
        } else if span < 2.5 {
            // less than ~2 decades: label intermediate ticks with their values
            short_number(10f64.powf(v), 2)
        } else {
            String::new()
        }
    } else if v.abs() <= span * 1e-9 {
        "0".into()
    } else if v.abs() >= 1e4 || v.abs() < 1e-2 {
        let s = format!("{v:.2e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let m = if m.contains('.') {
            m.trim_end_matches('0').trim_end_matches('.')
        } else {
            m
        };
        format!("{m}e{e}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Series with more bands than this get lighter fills and outlined bands.
pub const MANY_BANDS: usize = 6;

/// How bands are drawn: (fill opacity, whether each band's edges are outlined). Up to
/// [`MANY_BANDS`] bands: opacity 0.16, no outline. More: the opacities add up to at most 0.6
/// where every band overlaps (0.6 / bands, at least 0.03), and each band's lower and upper edges
/// are thin lines in its curve's colour, so that 12 overlapping bands do not merge into one grey
/// area and each band can still be followed.
pub fn band_look(spec: &PlotSpec) -> (f64, bool) {
    let bands = spec
        .series
        .iter()
        .filter(|s| s.band.as_ref().is_some_and(|b| b.len() >= 2))
        .count();
    if bands <= MANY_BANDS {
        (0.16, false)
    } else {
        ((0.6 / bands as f64).max(0.03), true)
    }
}

fn rgb(c: (u8, u8, u8)) -> RGBColor {
    RGBColor(c.0, c.1, c.2)
}

/// Draw a polyline with a style's pattern on any area (chart or legend coordinates).
fn draw_line<DB: DrawingBackend, CT: CoordTranslate>(
    area: &DrawingArea<DB, CT>,
    pts: Vec<CT::From>,
    st: Style,
) -> std::result::Result<(), String>
where
    CT::From: Clone,
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let style = ShapeStyle::from(rgb(st.color)).stroke_width(st.width);
    match st.dash {
        Dash::Solid => area.draw(&PathElement::new(pts, style)).map_err(e),
        Dash::Dashed => area
            .draw(&DashedPathElement::new(pts, 10, 6, style))
            .map_err(e),
        Dash::Dotted => area
            .draw(&DashedPathElement::new(pts, 2, 5, style))
            .map_err(e),
        Dash::LongDash => area
            .draw(&DashedPathElement::new(pts, 22, 6, style))
            .map_err(e),
        Dash::WideDash => area
            .draw(&DashedPathElement::new(pts, 14, 14, style))
            .map_err(e),
    }
}

fn draw_marker<DB: DrawingBackend, CT: CoordTranslate>(
    area: &DrawingArea<DB, CT>,
    at: CT::From,
    st: Style,
) -> std::result::Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let c = rgb(st.color);
    let p = EmptyElement::at(at);
    match st.marker {
        Marker::None => Ok(()),
        Marker::Circle => area
            .draw(&(p + Circle::new((0, 0), 4, c.filled())))
            .map_err(e),
        Marker::Ring => area
            .draw(&(p + Circle::new((0, 0), 5, c.stroke_width(2))))
            .map_err(e),
        Marker::Square => area
            .draw(&(p + Rectangle::new([(-4, -4), (4, 4)], c.filled())))
            .map_err(e),
        Marker::Triangle => area
            .draw(&(p + TriangleMarker::new((0, 0), 6, c.filled())))
            .map_err(e),
        Marker::Cross => area
            .draw(&(p + Cross::new((0, 0), 5, c.stroke_width(2))))
            .map_err(e),
        Marker::OpenSquare => area
            .draw(&(p + Rectangle::new([(-5, -5), (5, 5)], c.stroke_width(2))))
            .map_err(e),
        Marker::OpenTriangle => area
            .draw(&(p + TriangleMarker::new((0, 0), 7, c.stroke_width(2))))
            .map_err(e),
    }
}

fn draw_on<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    spec: &PlotSpec,
    styles: &[Style],
) -> std::result::Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    // header: title and notes
    let (title, notes) = header_lines(spec);
    let mut y = 12;
    for l in &title {
        root.draw(&Text::new(
            l.clone(),
            (16, y),
            ("sans-serif", 20).into_font().color(&BLACK),
        ))
        .map_err(e)?;
        y += 26;
    }
    for l in &notes {
        root.draw(&Text::new(
            l.clone(),
            (16, y),
            ("sans-serif", 14).into_font().color(&RGBColor(160, 20, 20)),
        ))
        .map_err(e)?;
        y += 19;
    }
    let (_, body) = root.split_vertically(header_height(spec));
    let (w, _) = body.dim_in_pixel();
    let legend_w = legend_width(spec);
    let (plot_area, legend_area) = body.split_horizontally(w - legend_w);

    let xs: Vec<f64> = spec
        .series
        .iter()
        .flat_map(|s| s.points.iter().filter_map(|p| tx(p.0, spec.log_x)))
        .chain(spec.vlines.iter().filter_map(|&v| tx(v, spec.log_x)))
        .collect();
    let mut ys: Vec<f64> = spec
        .series
        .iter()
        .flat_map(|s| s.points.iter().filter_map(|p| tx(p.1, spec.log_y)))
        .collect();
    for s in &spec.series {
        for &(_, lo, hi) in s.band.iter().flatten() {
            ys.extend(tx(lo, spec.log_y));
            ys.extend(tx(hi, spec.log_y));
        }
    }
    if let Some(h) = spec.hline {
        ys.extend(tx(h, spec.log_y));
    }
    let (x0, x1) = bounds(xs.into_iter());
    let (y0, y1) = bounds(ys.into_iter());
    let mut chart = ChartBuilder::on(&plot_area)
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(e)?;
    let (lx, ly) = (spec.log_x, spec.log_y);
    let (sx, sy) = (x1 - x0, y1 - y0);
    let xf = move |v: &f64| tick_label(*v, lx, sx);
    let yf = move |v: &f64| tick_label(*v, ly, sy);
    chart
        .configure_mesh()
        .x_desc(spec.x_label.as_str())
        .y_desc(spec.y_label.as_str())
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(e)?;
    let area = chart.plotting_area();
    let grey = ShapeStyle::from(BLACK.mix(0.45)).stroke_width(1);
    if let Some(h) = spec.hline.and_then(|h| tx(h, ly)) {
        area.draw(&PathElement::new(vec![(x0, h), (x1, h)], grey))
            .map_err(e)?;
    }
    for v in spec.vlines.iter().filter_map(|&v| tx(v, lx)) {
        area.draw(&DashedPathElement::new(vec![(v, y0), (v, y1)], 4, 4, grey))
            .map_err(e)?;
    }
    // bands first (all of them), then lines, then markers; see [`band_look`]
    let (alpha, edges) = band_look(spec);
    for (s, st) in spec.series.iter().zip(styles) {
        let Some(band) = &s.band else { continue };
        let lower: Vec<(f64, f64)> = band
            .iter()
            .filter_map(|&(x, lo, _)| Some((tx(x, lx)?, tx(lo, ly)?)))
            .collect();
        let upper: Vec<(f64, f64)> = band
            .iter()
            .filter_map(|&(x, _, hi)| Some((tx(x, lx)?, tx(hi, ly)?)))
            .collect();
        let mut poly = lower.clone();
        poly.extend(upper.iter().rev());
        if poly.len() >= 3 {
            area.draw(&Polygon::new(poly, rgb(st.color).mix(alpha)))
                .map_err(e)?;
            if edges {
                let edge = ShapeStyle::from(rgb(st.color).mix(0.45)).stroke_width(1);
                for side in [lower, upper] {
                    area.draw(&PathElement::new(side, edge)).map_err(e)?;
                }
            }
        } else if let [(x, lo, hi)] = band.as_slice()
            && let (Some(x), Some(lo), Some(hi)) = (tx(*x, lx), tx(*lo, ly), tx(*hi, ly))
        {
            // a one-point band: an error bar
            area.draw(&PathElement::new(
                vec![(x, lo), (x, hi)],
                rgb(st.color).stroke_width(2),
            ))
            .map_err(e)?;
        }
    }
    let n = spec.series.len().max(1);
    for (i, (s, st)) in spec.series.iter().zip(styles).enumerate() {
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter_map(|&(x, y)| Some((tx(x, lx)?, tx(y, ly)?)))
            .collect();
        if pts.len() >= 2 {
            draw_line(area, pts.clone(), *st)?;
        }
        // markers: every point of short curves; else 8 per curve, evenly spaced along the drawn x
        // axis and staggered between curves, so that coinciding curves still show each marker
        let idx: Vec<usize> = if pts.len() <= 12 {
            (0..pts.len()).collect()
        } else {
            let (a, b) = (pts[0].0, pts[pts.len() - 1].0);
            let mut v: Vec<usize> = (0..8)
                .filter_map(|k| {
                    let target = a + (k as f64 + (i as f64 + 0.5) / n as f64) / 8.0 * (b - a);
                    pts.iter().position(|p| p.0 >= target)
                })
                .collect();
            v.dedup();
            v
        };
        let mut st = *st;
        if st.marker == Marker::None && pts.len() == 1 {
            st.marker = Marker::Circle;
        }
        for j in idx {
            draw_marker(area, pts[j], st)?;
        }
    }
    // legend panel
    let mut y = 20;
    let entries = legend_entries(spec);
    legend_area
        .draw(&Rectangle::new(
            [(4, 8), (legend_w as i32 - 8, canvas(spec).1 as i32)],
            BLACK.mix(0.25).stroke_width(1),
        ))
        .map_err(e)?;
    for (k, lines) in entries.iter().enumerate() {
        let sample = vec![(14, y + 7), (54, y + 7)];
        if let Some(st) = styles.get(k) {
            draw_line(&legend_area, sample, *st)?;
            draw_marker(&legend_area, (34, y + 7), *st)?;
        } else {
            legend_area
                .draw(&DashedPathElement::new(sample, 4, 4, grey))
                .map_err(e)?;
        }
        for l in lines {
            legend_area
                .draw(&Text::new(
                    l.clone(),
                    (LEGEND_TEXT_X as i32, y),
                    ("sans-serif", LEGEND_FONT).into_font().color(&BLACK),
                ))
                .map_err(e)?;
            y += 17;
        }
        y += 7;
    }
    root.present().map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_numbers() {
        assert_eq!(short_number(0.31622776601683794, 3), "0.316");
        assert_eq!(short_number(1000.0, 3), "1000");
        assert_eq!(short_number(0.5, 3), "0.5");
        assert_eq!(short_number(31.622776601683793, 3), "31.6");
        assert_eq!(short_number(1e-5, 3), "1e-5");
        assert_eq!(short_number(1.25e7, 3), "1.25e7");
        assert_eq!(short_number(f64::INFINITY, 3), "inf");
        assert_eq!(count(100_000), "1e5");
        assert_eq!(count(1166), "1166");
        assert_eq!(count(10_000_001), "10000001");
        assert_eq!(count(25_000_000), "25e6");
    }

    /// Issue 44: legend labels at the fewest digits (at least 3) that keep the values apart.
    #[test]
    fn legend_labels_are_short_and_distinct() {
        let fig4a = [
            "adaptive_ucb",
            "adac_ucb(rho=0.01)",
            "adac_ucb(rho=0.03162277660168379)",
            "adac_ucb(rho=0.31622776601683794)",
            "adac_ucb(rho=1)",
            "adac_ucb(rho=3.1622776601683795)",
            "adac_ucb(rho=316.22776601683796)",
            "adac_ucb(rho=1000)",
        ];
        assert_eq!(
            legend_labels(&fig4a),
            [
                "adaptive_ucb",
                "adac_ucb(rho=0.01)",
                "adac_ucb(rho=0.0316)",
                "adac_ucb(rho=0.316)",
                "adac_ucb(rho=1)",
                "adac_ucb(rho=3.16)",
                "adac_ucb(rho=316)",
                "adac_ucb(rho=1000)",
            ]
        );
        // values that agree to 3 digits get as many as it takes; another key keeps its own
        assert_eq!(
            legend_labels(&[
                "p(rho=0.31622776601683794,eps=0.123456)",
                "p(rho=0.3164,eps=0.123456)"
            ]),
            ["p(rho=0.3162,eps=0.123)", "p(rho=0.3164,eps=0.123)"]
        );
        // integers are never rounded, short forms never lengthened, nested labels and `k = v`
        assert_eq!(
            legend_labels(&[
                "ldp(inner=sw_klucb_cf(window=1234567),epsilon=0.7071067811865476)",
                "T = 1e5",
                "rho = 0.5",
                "x=1abc",
                "y=-2.5e-7",
            ]),
            [
                "ldp(inner=sw_klucb_cf(window=1234567),epsilon=0.707)",
                "T = 1e5",
                "rho = 0.5",
                "x=1abc",
                "y=-2.5e-7",
            ]
        );
        assert_eq!(
            legend_labels(&["a=0.1", "a=0.1000001"]),
            ["a=0.1", "a=0.1000001"]
        );
        // labels the shortening would merge stay in full
        assert_eq!(
            legend_labels(&["a=0.10000001", "a=0.1"]),
            ["a=0.10000001", "a=0.1"]
        );
        assert_eq!(legend_labels(&["same", "same"]), ["same", "same"]);
    }

    /// Issue 44: the legend panel follows the longest label; many bands are lighter and outlined.
    #[test]
    fn legend_width_and_band_look() {
        let spec = |names: &[&str], band: bool| PlotSpec {
            series: names
                .iter()
                .map(|n| Series {
                    name: n.to_string(),
                    band: band.then(|| vec![(1.0, 0.0, 1.0), (2.0, 0.0, 2.0)]),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let short = legend_width(&spec(&["adac_ucb(rho=0.0316)"], false));
        let long = legend_width(&spec(&["adac_ucb(rho=0.03162277660168379,beta=1)"], false));
        assert!(short < long && long <= LEGEND_W, "{short} {long}");
        assert!(short <= WIDTH * 20 / 100, "{short}");
        assert_eq!(legend_width(&spec(&["a"], false)), LEGEND_MIN_W);
        let wrapped = legend_width(&spec(&[&"x".repeat(200)], false));
        assert!(
            (300..=LEGEND_W).contains(&wrapped),
            "long labels wrap: {wrapped}"
        );
        let names: Vec<String> = (0..12).map(|i| format!("c{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(band_look(&spec(&names[..6], true)), (0.16, false));
        assert_eq!(band_look(&spec(&names, false)), (0.16, false));
        let (alpha, edges) = band_look(&spec(&names, true));
        assert!(
            edges && alpha * 12.0 <= 0.6 + 1e-12 && alpha >= 0.03,
            "{alpha}"
        );
    }

    /// Up to 20 data curves: pairwise distinct colours and distinct (pattern, marker) pairs
    /// (greyscale); baseline and theory styles are used by no data curve.
    #[test]
    fn styles_are_distinct() {
        let all: Vec<Style> = (0..MAX_DISTINCT).map(data_style).collect();
        for (i, a) in all.iter().enumerate() {
            assert_ne!(*a, BASELINE);
            assert_ne!(*a, THEORY);
            assert_ne!(a.marker, Marker::None);
            for b in &all[i + 1..] {
                let d = |x: u8, y: u8| (x as f64 - y as f64).powi(2);
                let dist =
                    (d(a.color.0, b.color.0) + d(a.color.1, b.color.1) + d(a.color.2, b.color.2))
                        .sqrt();
                assert!(dist > 60.0, "{a:?} {b:?}: colours too close ({dist})");
                assert!((a.dash, a.marker) != (b.dash, b.marker), "{a:?} {b:?}");
            }
        }
        let spec = PlotSpec {
            series: vec![
                Series {
                    role: Role::Baseline,
                    ..Default::default()
                },
                Series::default(),
                Series {
                    role: Role::Theory,
                    ..Default::default()
                },
                Series {
                    role: Role::Baseline,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let s = styles(&spec);
        assert_eq!(s, vec![BASELINE, data_style(0), THEORY, data_style(1)]);
        let theory: Vec<Style> = (0..6).map(theory_style).collect();
        for (i, a) in theory.iter().enumerate() {
            assert!(!all.contains(a) && *a != BASELINE);
            for b in &theory[i + 1..] {
                assert_ne!(a, b);
                assert!(a.marker != b.marker || a.color != b.color);
            }
        }
    }

    #[test]
    fn ticks_and_wrapping() {
        assert_eq!(tick_label(-5.551115123125783e-17, false, 0.5), "0");
        assert_eq!(tick_label(0.25, false, 0.5), "0.25");
        assert_eq!(tick_label(2e6, false, 1e7), "2e6");
        assert_eq!(tick_label(3.0, true, 4.0), "1e3");
        assert_eq!(tick_label(0.0, true, 4.0), "1");
        assert_eq!(tick_label(-0.0, true, 4.0), "1");
        assert_eq!(tick_label(2f64.log10(), true, 1.5), "2");
        assert_eq!(tick_label(2f64.log10(), true, 4.0), "");
        let w = wrap("ldp(inner=sw_klucb_cf(window=1166),epsilon=1)", 20);
        assert!(w.iter().all(|l| l.chars().count() <= 20), "{w:?}");
        assert_eq!(w.concat(), "ldp(inner=sw_klucb_cf(window=1166),epsilon=1)");
    }
}

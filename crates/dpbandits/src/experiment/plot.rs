//! Line plots written as SVG and PNG (plotters; text drawn with the embedded DejaVu Sans font, so
//! PNG rendering needs no system fonts).
//!
//! Log axes are drawn by plotting `log10(x)` on a linear axis and labelling ticks as powers of
//! ten: one chart type for all four axis combinations.

use crate::error::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Once;

/// One curve, with an optional shaded band (x, low, high).
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// Points (x, y).
    pub points: Vec<(f64, f64)>,
    /// Optional band (x, low, high), e.g. 5%-95% quantiles over runs.
    pub band: Option<Vec<(f64, f64, f64)>>,
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
}

static FONT: Once = Once::new();

/// Tableau-10 colours (readable on white), cycled.
fn color(i: usize) -> RGBAColor {
    const C: [(u8, u8, u8); 10] = [
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
    ];
    let (r, g, b) = C[i % C.len()];
    RGBColor(r, g, b).to_rgba()
}

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

/// A number with `sig` significant digits and no trailing zeros, for legends and titles
/// (`0.31622776601683794` -> `0.316`, `1000` -> `1000`, `1e-5` -> `1e-5`).
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

/// A label `kind(p=v,...)` with short numbers, for legends.
pub fn short_label(kind: &str, params: &[(&str, f64)]) -> String {
    if params.is_empty() {
        return kind.to_string();
    }
    let inner: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", short_number(*v, 3)))
        .collect();
    format!("{kind}({})", inner.join(","))
}

/// Draw `spec` to `<stem>.svg` and `<stem>.png`; returns both paths.
pub fn draw(stem: &Path, spec: &PlotSpec) -> Result<Vec<PathBuf>> {
    register_font();
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    let err = |p: &Path| {
        let p = p.display().to_string();
        move |e: String| Error::Plot {
            path: p.clone(),
            message: e,
        }
    };
    draw_on(SVGBackend::new(&svg, (1000, 640)).into_drawing_area(), spec).map_err(err(&svg))?;
    draw_on(
        BitMapBackend::new(&png, (1000, 640)).into_drawing_area(),
        spec,
    )
    .map_err(err(&png))?;
    Ok(vec![svg, png])
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

fn tick_label(v: f64, log: bool) -> String {
    if log {
        let r = v.round();
        if (v - r).abs() < 1e-6 {
            format!("1e{r}")
        } else {
            String::new()
        }
    } else if v.abs() >= 1e4 || (v != 0.0 && v.abs() < 1e-2) {
        format!("{v:.1e}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn draw_on<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    spec: &PlotSpec,
) -> std::result::Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    root.fill(&WHITE).map_err(e)?;
    let xs: Vec<f64> = spec
        .series
        .iter()
        .flat_map(|s| s.points.iter().filter_map(|p| tx(p.0, spec.log_x)))
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
    let mut chart = ChartBuilder::on(&root)
        .caption(&spec.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(e)?;
    let (lx, ly) = (spec.log_x, spec.log_y);
    let xf = move |v: &f64| tick_label(*v, lx);
    let yf = move |v: &f64| tick_label(*v, ly);
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
    if let Some(h) = spec.hline.and_then(|h| tx(h, ly)) {
        chart
            .draw_series(LineSeries::new([(x0, h), (x1, h)], BLACK.mix(0.4)))
            .map_err(e)?;
    }
    // Bands of more than a few curves hide each other: draw them only for small plots.
    let bands = spec.series.len() <= 6;
    for (i, s) in spec.series.iter().enumerate() {
        let color = color(i);
        if let Some(band) = s.band.as_ref().filter(|_| bands) {
            let mut poly: Vec<(f64, f64)> = band
                .iter()
                .filter_map(|&(x, lo, _)| Some((tx(x, lx)?, tx(lo, ly)?)))
                .collect();
            poly.extend(
                band.iter()
                    .rev()
                    .filter_map(|&(x, _, hi)| Some((tx(x, lx)?, tx(hi, ly)?))),
            );
            if poly.len() >= 3 {
                chart
                    .draw_series(std::iter::once(Polygon::new(poly, color.mix(0.15))))
                    .map_err(e)?;
            }
        }
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter_map(|&(x, y)| Some((tx(x, lx)?, tx(y, ly)?)))
            .collect();
        let style = ShapeStyle::from(color).stroke_width(2);
        chart
            .draw_series(LineSeries::new(pts.clone(), style))
            .map_err(e)?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        if pts.len() <= 12 {
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(e)?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(e)?;
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
        assert_eq!(
            short_label("adac_ucb", &[("rho", 0.1)]),
            "adac_ucb(rho=0.1)"
        );
    }
}

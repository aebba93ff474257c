//! Chart drawing: plotters with its SVG backend, rendering into a `String` that the page inlines.
//!
//! Charts carry no legend of their own: the page puts one HTML legend beside each chart, with
//! the colours every chart shares (see `palette`).

use std::ops::Range;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::palette::Rgb;

/// Width and height of one chart in CSS pixels (it scales down with the page).
pub const SIZE: (u32, u32) = (640, 300);

const FONT: &str = "sans-serif";
const AXIS_GREY: RGBColor = RGBColor(0x55, 0x55, 0x55);
const GRID_GREY: RGBColor = RGBColor(0xe4, 0xe4, 0xe4);

/// How a chart's axes are labelled.
#[derive(Debug, Clone, Copy)]
pub struct Axes<'a> {
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    pub y_ticks: Ticks,
    /// Start the y axis at zero (rates, memory); off for figures that only move near a level
    /// (acceptance near 100%).
    pub y_from_zero: bool,
}

/// How tick values on an axis are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ticks {
    /// Plain numbers, large ones with SI prefixes (`1.5k`, `2G`).
    Plain,
    /// Bytes: the axis is drawn in the binary multiple that suits its largest value (KiB, MiB),
    /// named in its description, so that ticks fall on round numbers of that unit.
    Bytes,
    /// Bytes per second, likewise.
    BytesPerSec,
    /// A fraction 0..1 written as a percentage.
    Fraction,
}

/// One configuration's line: its colour and its points, split where data is missing.
#[derive(Debug, Clone)]
pub struct Line {
    pub colour: Rgb,
    pub segments: Vec<Vec<(f64, f64)>>,
}

/// A chart's drawing failed (plotters reports layout problems as errors).
#[derive(Debug, thiserror::Error)]
#[error("drawing the chart: {0}")]
pub struct ChartError(String);

/// A line chart of `lines`. The x axis spans the data; `x_max` clips it (points beyond are cut
/// and the line ends at the clip). The y axis starts at zero unless data goes below it.
pub fn lines(axes: &Axes<'_>, lines: &[Line], x_max: Option<f64>) -> Result<String, ChartError> {
    let clipped: Vec<Line> = match x_max {
        Some(m) => lines.iter().map(|l| clip(l, m)).collect(),
        None => lines.to_vec(),
    };
    let points = || clipped.iter().flat_map(|l| l.segments.iter().flatten());
    let y_axis = YAxis::new(axes, points().map(|p| p.1));
    let x = span(points().map(|p| p.0), true, false);
    let y = if axes.y_ticks == Ticks::Fraction {
        0.0..1.0
    } else {
        span(points().map(|p| p.1 / y_axis.scale), axes.y_from_zero, true)
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = frame(&root).build_cartesian_2d(x, y).map_err(err)?;
        let y_fmt = |v: &f64| tick(*v, y_axis.ticks);
        let x_fmt = |v: &f64| tick(*v, Ticks::Plain);
        chart
            .configure_mesh()
            .x_desc(axes.x_desc)
            .y_desc(&y_axis.desc)
            .x_labels(8)
            .y_labels(6)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .label_style((FONT, 14).into_font().color(&AXIS_GREY))
            .axis_desc_style((FONT, 15).into_font().color(&AXIS_GREY))
            .axis_style(AXIS_GREY)
            .bold_line_style(GRID_GREY)
            .light_line_style(TRANSPARENT)
            .draw()
            .map_err(err)?;
        for line in &clipped {
            let style = ShapeStyle::from(colour(line.colour)).stroke_width(2);
            for segment in &line.segments {
                let scaled = segment.iter().map(|&(x, y)| (x, y / y_axis.scale));
                if segment.len() == 1 {
                    chart
                        .draw_series(scaled.map(|p| Circle::new(p, 2, style.filled())))
                        .map_err(err)?;
                } else {
                    chart
                        .draw_series(LineSeries::new(scaled, style))
                        .map_err(err)?;
                }
            }
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Grouped bars: one group per category (`p50`, `p95`, ...), one bar per series in each group.
/// Missing values leave a gap.
pub fn bars(
    axes: &Axes<'_>,
    categories: &[&str],
    series: &[(Rgb, Vec<Option<f64>>)],
) -> Result<String, ChartError> {
    // x in thousandths of a group: plotters labels integer axes at chosen key points (its f64
    // axes have no formatter hook for them).
    const GROUP: i32 = 1000;
    let n = i32::try_from(categories.len().max(1)).unwrap_or(i32::MAX / GROUP) * GROUP;
    let centres: Vec<i32> = (0..n / GROUP).map(|i| i * GROUP + GROUP / 2).collect();
    let values = || series.iter().flat_map(|(_, v)| v.iter().flatten().copied());
    let y_axis = YAxis::new(axes, values());
    let y = span(values().map(|v| v / y_axis.scale), axes.y_from_zero, true);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = frame(&root)
            .build_cartesian_2d((0..n).with_key_points(centres), y)
            .map_err(err)?;
        let x_fmt = |v: &i32| {
            let i = usize::try_from(v / GROUP).unwrap_or(usize::MAX);
            categories
                .get(i)
                .map_or_else(String::new, |c| (*c).to_owned())
        };
        let y_fmt = |v: &f64| tick(*v, y_axis.ticks);
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc(axes.x_desc)
            .y_desc(&y_axis.desc)
            .y_labels(6)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .label_style((FONT, 14).into_font().color(&AXIS_GREY))
            .axis_desc_style((FONT, 15).into_font().color(&AXIS_GREY))
            .axis_style(AXIS_GREY)
            .bold_line_style(GRID_GREY)
            .light_line_style(TRANSPARENT)
            .draw()
            .map_err(err)?;
        // Each group leaves 15% of its width free on either side; bars share the rest.
        let bars = i32::try_from(series.len().max(1)).unwrap_or(1);
        let width = (GROUP * 7 / 10 / bars).max(1);
        for (j, (rgb, values)) in (0..).zip(series) {
            let style = ShapeStyle::from(colour(*rgb)).filled();
            let rects = (0..).zip(values).filter_map(|(i, v): (i32, _)| {
                let v = (*v)? / y_axis.scale;
                let left = i * GROUP + GROUP * 15 / 100 + j * width;
                Some(Rectangle::new([(left, v), (left + width, 0.0)], style))
            });
            chart.draw_series(rects).map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn colour(rgb: Rgb) -> RGBColor {
    RGBColor(rgb.0, rgb.1, rgb.2)
}

fn err(e: impl std::fmt::Display) -> ChartError {
    ChartError(e.to_string())
}

/// The chart area with room for the axes' labels.
fn frame<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(root);
    b.margin(12).x_label_area_size(44).y_label_area_size(76);
    b
}

/// The y axis as drawn: values divided by `scale`, its description naming the unit.
struct YAxis {
    scale: f64,
    desc: String,
    ticks: Ticks,
}

impl YAxis {
    fn new(axes: &Axes<'_>, values: impl Iterator<Item = f64>) -> YAxis {
        let unit = match axes.y_ticks {
            Ticks::Bytes => "B",
            Ticks::BytesPerSec => "B/s",
            other => {
                return YAxis {
                    scale: 1.0,
                    desc: axes.y_desc.to_owned(),
                    ticks: other,
                }
            }
        };
        let largest = values.fold(0.0f64, |m, v| m.max(v.abs()));
        let (scale, prefix) = [
            (1u64 << 40, "Ti"),
            (1 << 30, "Gi"),
            (1 << 20, "Mi"),
            (1 << 10, "Ki"),
        ]
        .into_iter()
        .map(|(s, p)| (s as f64, p))
        .find(|(s, _)| largest >= *s)
        .unwrap_or((1.0, ""));
        YAxis {
            scale,
            desc: format!("{} ({prefix}{unit})", axes.y_desc),
            ticks: Ticks::Plain,
        }
    }
}

/// The range covering `values`, widened to include zero when `with_zero`, and padded (a
/// little room above the highest line, and below the lowest when it is not zero) when `pad`.
fn span(values: impl Iterator<Item = f64>, with_zero: bool, pad: bool) -> Range<f64> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return 0.0..1.0;
    }
    if with_zero {
        lo = lo.min(0.0);
        hi = hi.max(0.0);
    }
    if hi - lo < f64::EPSILON * hi.abs().max(1.0) {
        // A flat line: give it a visible band around its value, never reaching below zero
        // for data that does not (no rejections drawn on an axis from -0.4).
        let band = 0.5 * lo.abs().max(1.0);
        let low = if lo >= 0.0 && with_zero {
            0.0
        } else {
            lo - band
        };
        return low..(hi + band).max(low + 1.0);
    }
    if pad {
        let room = (hi - lo) * 0.08;
        hi += room;
        if lo != 0.0 {
            lo -= room;
        }
    }
    lo..hi
}

/// The line cut at `x_max`, ending exactly there by interpolation.
fn clip(line: &Line, x_max: f64) -> Line {
    let mut segments = Vec::with_capacity(line.segments.len());
    for seg in &line.segments {
        let mut out = Vec::with_capacity(seg.len());
        for (i, &(x, y)) in seg.iter().enumerate() {
            if x <= x_max {
                out.push((x, y));
                continue;
            }
            if let Some(&(x0, y0)) = i.checked_sub(1).map(|p| &seg[p]) {
                if x0 < x_max {
                    out.push((x_max, y0 + (y - y0) * (x_max - x0) / (x - x0)));
                }
            }
            break;
        }
        if !out.is_empty() {
            segments.push(out);
        }
    }
    Line {
        colour: line.colour,
        segments,
    }
}

/// An axis tick label.
fn tick(v: f64, ticks: Ticks) -> String {
    match ticks {
        Ticks::Fraction => format!("{}%", short(v * 100.0)),
        // Byte axes are scaled to a binary multiple before they are drawn (`YAxis`).
        Ticks::Plain | Ticks::Bytes | Ticks::BytesPerSec => {
            let a = v.abs();
            for (scale, prefix) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e4, "k")] {
                if a >= scale {
                    return format!("{}{prefix}", short(v / scale));
                }
            }
            short(v)
        }
    }
}

/// At most three decimals, trailing zeros dropped.
fn short(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AXES: Axes<'static> = Axes {
        x_desc: "time (s)",
        y_desc: "shares/s",
        y_ticks: Ticks::Plain,
        y_from_zero: true,
    };

    #[test]
    fn a_line_chart_is_an_svg_with_one_path_per_segment() {
        let line = Line {
            colour: Rgb(0x00, 0x72, 0xb2),
            segments: vec![vec![(0.0, 1.0), (1.0, 2.0), (2.0, 1.5)], vec![(4.0, 3.0)]],
        };
        let svg = lines(&AXES, &[line], None).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        assert!(svg.trim_end().ends_with("</svg>"));
        // Axes and ticks are polylines too; the data's are in its colour.
        assert_eq!(svg.matches("stroke=\"#0072B2\"").count(), 1, "{svg}");
        assert_eq!(
            svg.matches("fill=\"#0072B2\"").count(),
            1,
            "the lone point: {svg}"
        );
        assert!(svg.contains("time (s)"));
    }

    #[test]
    fn empty_and_flat_data_still_draw() {
        assert!(lines(&AXES, &[], None).unwrap().contains("</svg>"));
        let flat = Line {
            colour: Rgb(1, 2, 3),
            segments: vec![vec![(0.0, 0.0), (10.0, 0.0)]],
        };
        assert!(lines(&AXES, &[flat], None)
            .unwrap()
            .contains("stroke=\"#010203\""));
    }

    #[test]
    fn bars_draw_one_rect_per_value() {
        let svg = bars(
            &AXES,
            &["p50", "p95"],
            &[
                (Rgb(1, 2, 3), vec![Some(1.0), Some(2.0)]),
                (Rgb(4, 5, 6), vec![None, Some(3.0)]),
            ],
        )
        .unwrap();
        assert_eq!(svg.matches("fill=\"#010203\"").count(), 2, "{svg}");
        assert_eq!(svg.matches("fill=\"#040506\"").count(), 1, "{svg}");
        assert!(svg.contains("\np95\n"), "{svg}");
    }

    #[test]
    fn clipping_interpolates_the_last_point() {
        let l = Line {
            colour: Rgb(0, 0, 0),
            segments: vec![
                vec![(0.0, 0.0), (10.0, 1.0), (20.0, 2.0)],
                vec![(30.0, 1.0)],
            ],
        };
        assert_eq!(
            clip(&l, 15.0).segments,
            [vec![(0.0, 0.0), (10.0, 1.0), (15.0, 1.5)]]
        );
    }

    #[test]
    fn byte_axes_are_drawn_in_a_binary_multiple() {
        let axes = Axes {
            y_ticks: Ticks::Bytes,
            y_desc: "memory",
            ..AXES
        };
        let y = YAxis::new(&axes, [1.0, 40.0 * 1024.0 * 1024.0].into_iter());
        assert_eq!((y.scale, y.desc.as_str()), (1048576.0, "memory (MiB)"));
        let axes = Axes {
            y_ticks: Ticks::BytesPerSec,
            y_desc: "sent",
            ..AXES
        };
        assert_eq!(YAxis::new(&axes, [900.0].into_iter()).desc, "sent (B/s)");
        let svg = lines(
            &axes,
            &[Line {
                colour: Rgb(1, 2, 3),
                segments: vec![vec![(0.0, 2048.0), (1.0, 4096.0)]],
            }],
            None,
        )
        .unwrap();
        assert!(svg.contains("sent (KiB/s)"), "{svg}");
    }

    #[test]
    fn spans_include_zero_or_hug_the_data() {
        assert_eq!(span([90.0, 100.0].into_iter(), false, true), 89.2..100.8);
        assert_eq!(span([90.0, 100.0].into_iter(), true, true), 0.0..108.0);
        assert_eq!(span([0.0, 10.0].into_iter(), true, false), 0.0..10.0);
        assert_eq!(span(std::iter::empty(), true, true), 0.0..1.0);
        // Flat lines: counts of zero on 0..1, not around zero; a flat level keeps a band.
        assert_eq!(span([0.0, 0.0].into_iter(), true, true), 0.0..1.0);
        assert_eq!(span([4.0, 4.0].into_iter(), true, true), 0.0..4.32);
        assert_eq!(span([90.0, 90.0].into_iter(), false, true), 45.0..135.0);
    }

    #[test]
    fn ticks_are_short() {
        assert_eq!(tick(2_500_000.0, Ticks::Plain), "2.5M");
        assert_eq!(tick(0.25, Ticks::Plain), "0.25");
        assert_eq!(tick(0.5, Ticks::Fraction), "50%");
        assert_eq!(tick(-0.0001, Ticks::Plain), "0");
    }
}

//! Chart drawing: plotters with its SVG backend, rendering into a `String` that the page inlines.
//!
//! Charts carry no legend of their own: the page puts one HTML legend beside each chart, with
//! the colours every chart shares (see `palette`).

use std::ops::Range;

use plotters::chart::MeshStyle;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::palette::Rgb;

/// Width and height of one chart in CSS pixels (it scales down with the page).
pub(crate) const SIZE: (u32, u32) = (640, 300);

const FONT: &str = "sans-serif";
const AXIS_GREY: RGBColor = RGBColor(0x55, 0x55, 0x55);
const GRID_GREY: RGBColor = RGBColor(0xe4, 0xe4, 0xe4);

/// How a chart's axes are labelled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Axes<'a> {
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    pub y_ticks: Ticks,
    /// Start the y axis at zero (rates, memory); off for figures that only move near a level
    /// (acceptance near 100%).
    pub y_from_zero: bool,
}

/// How tick values on an axis are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ticks {
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
pub(crate) struct Line {
    pub colour: Rgb,
    pub segments: Vec<Vec<(f64, f64)>>,
}

/// A chart's drawing failed (plotters reports layout problems as errors).
#[derive(Debug, thiserror::Error)]
#[error("drawing the chart: {0}")]
pub(crate) struct ChartError(String);

/// A line chart of `lines`. The x axis spans the data; the y axis starts at zero unless data
/// goes below it.
pub(crate) fn lines(axes: &Axes<'_>, lines: &[Line]) -> Result<String, ChartError> {
    let points = || lines.iter().flat_map(|l| l.segments.iter().flatten());
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
        draw_mesh(
            chart
                .configure_mesh()
                .x_desc(axes.x_desc)
                .y_desc(&y_axis.desc)
                .x_labels(8)
                .y_labels(6)
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt),
        )?;
        for line in lines {
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

/// How a CDF chart's value axis runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum XScale {
    /// From zero to `end`.
    Linear { end: f64 },
    /// Logarithmic from `start` to `end` (both positive), for values that differ by orders of
    /// magnitude.
    Log { start: f64, end: f64 },
}

impl XScale {
    pub(crate) fn start(self) -> f64 {
        match self {
            XScale::Linear { .. } => 0.0,
            XScale::Log { start, .. } => start,
        }
    }

    pub(crate) fn end(self) -> f64 {
        match self {
            XScale::Linear { end } | XScale::Log { end, .. } => end,
        }
    }
}

/// One configuration's cumulative distribution: (value, fraction) points within the axis.
#[derive(Debug, Clone)]
pub(crate) struct CdfLine {
    pub colour: Rgb,
    pub points: Vec<(f64, f64)>,
    /// The few points known of a curve that is not measured whole (stored percentiles), each
    /// drawn as a dot; the line through them is dashed, since it is only a straight join.
    pub dots: Vec<(f64, f64)>,
}

/// Where a CDF chart's fraction axis is labelled.
const FRACTION_TICKS: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 1.0];

/// Cumulative distributions: the fraction of values at or below each value, 0 to 100% up the
/// side, `x_desc` along the bottom on `scale`. Points are expected within the scale's range.
pub(crate) fn cdf(x_desc: &str, lines: &[CdfLine], scale: XScale) -> Result<String, ChartError> {
    // Both axes are integer units, as the bars' x axis is: plotters writes the labels of an
    // integer axis at chosen key points (its f64 axes have no formatter hook for them). A log
    // axis is a linear one over log10 of the values, ticks written as the values: they then fall
    // on round values (1, 2, 5, 10 ...) wherever the axis starts.
    const UNITS: f64 = 100_000.0;
    let (start, end, log) = match scale {
        XScale::Linear { end } => (0.0, if end > 0.0 { end } else { 1.0 }, false),
        XScale::Log { start, end } => (start.log10(), end.log10(), true),
    };
    let to_x = |v: f64| {
        let v = if log { v.log10() } else { v };
        ((v - start) / (end - start) * UNITS).round() as i32
    };
    let from_x = |x: i32| {
        let v = start + f64::from(x) / UNITS * (end - start);
        if log {
            10f64.powf(v)
        } else {
            v
        }
    };
    let to_y = |f: f64| (f * UNITS).round() as i32;
    // (position, value): labels are written from the value, not from the rounded position.
    let x_ticks: Vec<(i32, f64)> = match scale {
        XScale::Linear { .. } => linear_ticks(end),
        XScale::Log { start, end } => log_ticks(start, end),
    }
    .into_iter()
    .map(|v| (to_x(v), v))
    .collect();
    let y_ticks: Vec<i32> = FRACTION_TICKS.iter().map(|f| to_y(*f)).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        // A little room above 100%, so that a line that has reached it is not drawn on the
        // chart's top edge.
        let mut chart = frame(&root)
            .build_cartesian_2d(
                (0..UNITS as i32).with_key_points(x_ticks.iter().map(|t| t.0).collect()),
                (0..to_y(1.03)).with_key_points(y_ticks),
            )
            .map_err(err)?;
        let x_fmt = |v: &i32| {
            let value = x_ticks
                .iter()
                .find(|t| t.0 == *v)
                .map_or_else(|| from_x(*v), |t| t.1);
            tick(value, Ticks::Plain)
        };
        let y_fmt = |v: &i32| tick(f64::from(*v) / UNITS, Ticks::Fraction);
        draw_mesh(
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc("at or below")
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt),
        )?;
        for line in lines {
            let style = ShapeStyle::from(colour(line.colour)).stroke_width(2);
            let points = || line.points.iter().map(|&(x, y)| (to_x(x), to_y(y)));
            if !line.dots.is_empty() {
                chart
                    .draw_series(DashedLineSeries::new(points(), 6, 4, style))
                    .map_err(err)?;
                let dots = line.dots.iter().map(|&(x, y)| (to_x(x), to_y(y)));
                chart
                    .draw_series(dots.map(|p| Circle::new(p, 3, style.filled())))
                    .map_err(err)?;
            } else if line.points.len() == 1 {
                chart
                    .draw_series(points().map(|p| Circle::new(p, 2, style.filled())))
                    .map_err(err)?;
            } else {
                chart
                    .draw_series(LineSeries::new(points(), style))
                    .map_err(err)?;
            }
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// The distance between ticks on a linear axis from zero to `end`: the smallest of 1, 2 or 5
/// times a power of ten that puts at most eight ticks besides zero on it.
pub(crate) fn linear_step(end: f64) -> f64 {
    round_up_125(end / 8.0)
}

/// The smallest of 1, 2 or 5 times a power of ten at or above `v` (positive).
pub(crate) fn round_up_125(v: f64) -> f64 {
    let magnitude = 10f64.powi(v.log10().floor() as i32);
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|r| *r >= v * (1.0 - 1e-9))
        .unwrap_or(10.0 * magnitude)
}

/// Ticks for a linear axis from zero to `end`: multiples of 1, 2 or 5 times a power of ten,
/// at most eight of them besides zero.
fn linear_ticks(end: f64) -> Vec<f64> {
    let step = linear_step(end);
    // Whole multiples of the step, computed from their index so that no rounding error piles up.
    (0..)
        .map(|i| f64::from(i) * step)
        .take_while(|v| *v <= end * (1.0 + 1e-9))
        .collect()
}

/// Ticks for a log axis from `start` to `end`: every power of ten between them, and the 2 and 5
/// times each as well when the axis spans three decades or fewer (more would crowd the labels).
fn log_ticks(start: f64, end: f64) -> Vec<f64> {
    let (lo, hi) = (start.log10().floor() as i32, end.log10().ceil() as i32);
    let multiples: &[f64] = if hi - lo <= 3 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    let inside = |v: &f64| *v >= start * (1.0 - 1e-9) && *v <= end * (1.0 + 1e-9);
    (lo..=hi)
        .flat_map(|e| multiples.iter().map(move |m| m * 10f64.powi(e)))
        .filter(inside)
        .collect()
}

fn colour(rgb: Rgb) -> RGBColor {
    RGBColor(rgb.0, rgb.1, rgb.2)
}

/// Draws `mesh` in the charts' one style: grey labels and axes, grid lines at the labelled ticks
/// only.
fn draw_mesh<X, Y, DB>(mesh: &mut MeshStyle<'_, '_, X, Y, DB>) -> Result<(), ChartError>
where
    X: Ranged + ValueFormatter<X::ValueType>,
    Y: Ranged + ValueFormatter<Y::ValueType>,
    DB: DrawingBackend,
{
    mesh.label_style((FONT, 14).into_font().color(&AXIS_GREY))
        .axis_desc_style((FONT, 15).into_font().color(&AXIS_GREY))
        .axis_style(AXIS_GREY)
        .bold_line_style(GRID_GREY)
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(err)
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
        let svg = lines(&AXES, &[line]).unwrap();
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
        assert!(lines(&AXES, &[]).unwrap().contains("</svg>"));
        let flat = Line {
            colour: Rgb(1, 2, 3),
            segments: vec![vec![(0.0, 0.0), (10.0, 0.0)]],
        };
        assert!(lines(&AXES, &[flat])
            .unwrap()
            .contains("stroke=\"#010203\""));
    }

    /// The labels' texts of an SVG chart (plotters writes each on a line of its own).
    fn labels(svg: &str) -> Vec<&str> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim()))
            .collect()
    }

    #[test]
    fn a_cdf_chart_has_round_ticks_and_marks_stored_percentiles() {
        let measured = CdfLine {
            colour: Rgb(1, 2, 3),
            points: vec![(0.2, 0.0), (0.5, 0.5), (0.9, 1.0), (200.0, 1.0)],
            dots: Vec::new(),
        };
        let stored = vec![(50.0, 0.5), (80.0, 0.95), (90.0, 0.99), (120.0, 1.0)];
        let percentiles = CdfLine {
            colour: Rgb(4, 5, 6),
            points: [stored.clone(), vec![(200.0, 1.0)]].concat(),
            dots: stored,
        };
        let lines = [measured, percentiles];
        let svg = cdf(
            "ms (log scale)",
            &lines,
            XScale::Log {
                start: 0.1,
                end: 200.0,
            },
        )
        .unwrap();
        let text = labels(&svg);
        // Ticks on round values, written as values (not as their rounded positions: 49.999).
        for tick in ["0.1", "1", "10", "100", "0%", "50%", "100%"] {
            assert!(text.contains(&tick), "no tick {tick}: {text:?}");
        }
        assert!(!text.iter().any(|t| t.contains("99")), "{text:?}");
        // The measured curve is one solid line; the stored one dashes, and a dot per percentile
        // (none where it is carried on to the axis's end).
        assert_eq!(svg.matches("stroke=\"#010203\"").count(), 1, "{svg}");
        assert!(
            svg.matches("stroke=\"#040506\"").count() > 5,
            "dashes: {svg}"
        );
        assert_eq!(svg.matches("fill=\"#040506\"").count(), 4, "{svg}");

        let linear = cdf("ms", &lines, XScale::Linear { end: 200.0 }).unwrap();
        let text = labels(&linear);
        for tick in ["0", "50", "100", "150", "200"] {
            assert!(text.contains(&tick), "no tick {tick}: {text:?}");
        }
    }

    #[test]
    fn cdf_axis_ticks() {
        assert_eq!(linear_step(160.0), 20.0);
        assert_eq!(linear_step(995.0), 200.0);
        assert_eq!(linear_ticks(100.0), [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        assert_eq!(
            log_ticks(1.0, 200.0),
            [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0]
        );
        // Over more than three decades, powers of ten alone.
        assert_eq!(log_ticks(0.01, 200.0).len(), 5);
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

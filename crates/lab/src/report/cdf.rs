//! Distribution charts: per configuration, the share of values at or below each value (its
//! cumulative distribution), from the raw samples where the run wrote them and else from the
//! percentiles results.json stores, on a value axis chosen so that every configuration's curve
//! can be read.

use super::chart::{self, round_up_125, CdfLine, XScale};
use super::palette::Rgb;
use super::samples::{cdf, cdf_from_percentiles, quantile};

/// The axis ends at the largest of the configurations' 99.5th percentiles: a single slow outlier
/// would otherwise squeeze every curve against the left edge (the table keeps the maximum).
pub(crate) const CLIP_QUANTILE: f64 = 0.995;
/// On a log axis, the start is the decade below the smallest of the configurations' 0.5th
/// percentiles, for the same reason at the other end.
const LOW_QUANTILE: f64 = 0.005;
/// The axis is logarithmic when some configuration's median is below this fraction of the
/// axis's end: on a linear axis its whole curve would rise within that narrow strip at the left.
const LOG_WHEN_MEDIAN_BELOW: f64 = 0.1;
/// Times finer than a microsecond are not resolved by the events' timestamps: a log axis
/// never starts below this many milliseconds.
const LOG_FLOOR: f64 = 0.001;

/// Where one configuration's curve comes from.
#[derive(Debug, Clone)]
pub(crate) enum Source<'a> {
    /// Raw samples, sorted ascending.
    Samples(&'a [f64]),
    /// Stored percentiles as (fraction, value): `(0.5, p50)` ... `(1.0, max)`.
    Percentiles(Vec<(f64, f64)>),
}

/// The curves fitted to their axis, ready to draw.
#[derive(Debug, Clone)]
pub(crate) struct Plot {
    pub lines: Vec<CdfLine>,
    pub scale: XScale,
    /// The largest value, where the axis ends before it.
    pub cut_max: Option<f64>,
}

/// What the axis has to show of one curve.
struct Extent {
    /// The smallest positive value a log axis should still show.
    low: Option<f64>,
    median: f64,
    /// Where the axis may end without cutting the curve's body off.
    high: f64,
    max: f64,
}

/// The curves of `sources` (each in its colour) and the axis they are drawn on.
pub(crate) fn plot(sources: &[(Rgb, Source<'_>)]) -> Plot {
    let mut curves = Vec::with_capacity(sources.len());
    for (colour, source) in sources {
        let (points, extent, sparse) = match source {
            Source::Samples(sorted) => {
                let Some(&max) = sorted.last() else { continue };
                let q = |f| quantile(sorted, f).unwrap_or(max);
                let low = Some(q(LOW_QUANTILE))
                    .filter(|v| *v > 0.0)
                    .or_else(|| sorted.iter().copied().find(|v| *v > 0.0));
                let extent = Extent {
                    low,
                    median: q(0.5),
                    high: q(CLIP_QUANTILE),
                    max,
                };
                (cdf(sorted), extent, false)
            }
            Source::Percentiles(stored) => {
                let points = cdf_from_percentiles(stored);
                let (Some(first), Some(last)) = (points.first(), points.last()) else {
                    continue;
                };
                // Nothing below the lowest stored percentile is known: the axis has to show
                // from there on, and the whole of what is stored.
                let median = points.iter().find(|p| p.1 >= 0.5).unwrap_or(last).0;
                let extent = Extent {
                    low: Some(first.0).filter(|v| *v > 0.0),
                    median,
                    high: last.0,
                    max: last.0,
                };
                (points, extent, true)
            }
        };
        curves.push((*colour, points, extent, sparse));
    }
    let extents: Vec<&Extent> = curves.iter().map(|c| &c.2).collect();
    let scale = scale(&extents);
    let largest = extents
        .iter()
        .map(|e| e.max)
        .fold(f64::NEG_INFINITY, f64::max);
    let (start, end) = (scale.start(), scale.end());
    let lines = curves
        .into_iter()
        .map(|(colour, points, _, sparse)| CdfLine {
            colour,
            dots: if sparse {
                points
                    .iter()
                    .copied()
                    .filter(|p| (start..=end).contains(&p.0))
                    .collect()
            } else {
                Vec::new()
            },
            points: fit(&points, start, end),
        })
        .collect();
    Plot {
        lines,
        scale,
        cut_max: (largest > scale.end()).then_some(largest),
    }
}

/// Linear from zero unless a configuration's curve would be squeezed into the left edge; then
/// logarithmic from the decade below the smallest curve. Either way the end is a round value at
/// or past the largest [`CLIP_QUANTILE`].
fn scale(extents: &[&Extent]) -> XScale {
    let end = extents.iter().map(|e| e.high).fold(0.0, f64::max);
    if end <= 0.0 || !end.is_finite() {
        return XScale::Linear { end: 1.0 };
    }
    let smallest_median = extents
        .iter()
        .map(|e| e.median)
        .filter(|m| *m > 0.0)
        .fold(f64::INFINITY, f64::min);
    let low = extents
        .iter()
        .filter_map(|e| e.low)
        .fold(f64::INFINITY, f64::min);
    if smallest_median < end * LOG_WHEN_MEDIAN_BELOW && low.is_finite() {
        let start = 10f64.powi(low.max(LOG_FLOOR).log10().floor() as i32);
        return XScale::Log {
            start,
            end: round_up_125(end),
        };
    }
    let step = chart::linear_step(end);
    XScale::Linear {
        end: (end / step * (1.0 - 1e-9)).ceil() * step,
    }
}

/// A curve's (value, fraction) points within `start..=end`: cut where it crosses either end
/// (the crossing's fraction interpolated), and carried on level to the end once it has reached
/// 100%, as a distribution does past its largest value.
fn fit(points: &[(f64, f64)], start: f64, end: f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(points.len() + 2);
    let mut before: Option<(f64, f64)> = None;
    for &(x, y) in points {
        if x < start {
            before = Some((x, y));
            continue;
        }
        if out.is_empty() {
            if let Some((x0, y0)) = before.filter(|_| x > start) {
                out.push((start, between((x0, y0), (x, y), start)));
            }
        }
        if x > end {
            if let Some(last) = out.last().copied().filter(|l| l.0 < end) {
                out.push((end, between(last, (x, y), end)));
            }
            return out;
        }
        out.push((x, y));
    }
    if out.is_empty() {
        // The whole curve lies left of the axis: at the start it has reached its last fraction.
        if let Some(b) = before {
            out.push((start, b.1));
        }
    }
    if let Some(&(x, y)) = out.last() {
        if y >= 1.0 && x < end {
            out.push((end, y));
        }
    }
    out
}

/// The fraction at `x` on the straight line through `a` and `b`.
fn between(a: (f64, f64), b: (f64, f64), x: f64) -> f64 {
    if b.0 <= a.0 {
        return b.1;
    }
    a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: Rgb = Rgb(0, 0x72, 0xb2);

    #[test]
    fn close_distributions_share_a_linear_axis_from_zero_to_a_round_end() {
        let a: Vec<f64> = (0..1000).map(|i| 140.0 + f64::from(i) * 0.01).collect();
        let b: Vec<f64> = (0..1000).map(|i| 100.0 + f64::from(i) * 0.02).collect();
        let p = plot(&[(C, Source::Samples(&a)), (C, Source::Samples(&b))]);
        // The largest 99.5th percentile is 149.94: ticks every 20, the axis to 160.
        assert_eq!(p.scale, XScale::Linear { end: 160.0 });
        assert_eq!(p.cut_max, None, "both curves end within the axis");
        for line in &p.lines {
            assert!(line.points.iter().all(|&(x, _)| (0.0..=160.0).contains(&x)));
            assert_eq!(
                *line.points.last().unwrap(),
                (160.0, 1.0),
                "carried on at 100%"
            );
            assert!(line.dots.is_empty());
        }
    }

    #[test]
    fn orders_of_magnitude_apart_go_on_a_log_axis() {
        // Medians of about 0.15 ms and 145 ms, as share latency on and off the farm's LAN.
        let fast: Vec<f64> = (1..=1000).map(|i| 0.1 + f64::from(i) * 0.0001).collect();
        let slow: Vec<f64> = (1..=1000).map(|i| 140.0 + f64::from(i) * 0.01).collect();
        let p = plot(&[(C, Source::Samples(&fast)), (C, Source::Samples(&slow))]);
        assert_eq!(
            p.scale,
            XScale::Log {
                start: 0.1,
                end: 200.0
            }
        );
        // The fast curve's 0.5th percentile (0.1005) is on the axis: it starts at its first
        // sample, from 0%.
        assert_eq!(p.lines[0].points[0], (fast[0], 0.0));
        assert_eq!(*p.lines[1].points.last().unwrap(), (200.0, 1.0));
    }

    #[test]
    fn an_outlier_is_cut_off_and_reported() {
        let mut v: Vec<f64> = (1..=1000).map(f64::from).collect();
        v[999] = 50_000.0;
        let p = plot(&[(C, Source::Samples(&v))]);
        assert_eq!(p.scale, XScale::Linear { end: 1000.0 });
        assert_eq!(p.cut_max, Some(50_000.0));
        let last = *p.lines[0].points.last().unwrap();
        assert_eq!(last.0, 1000.0, "the curve ends at the axis's end");
        assert!(
            last.1 > 0.998 && last.1 < 1.0,
            "{last:?}: below 100%, as it is there"
        );
    }

    #[test]
    fn stored_percentiles_are_a_sparse_curve_from_the_median() {
        let stored = vec![(0.5, 3.973), (0.95, 10.623), (0.99, 15.127), (1.0, 15.39)];
        let slow = vec![(0.5, 252.8), (0.95, 714.2), (0.99, 716.3), (1.0, 717.8)];
        let p = plot(&[
            (C, Source::Percentiles(stored)),
            (C, Source::Percentiles(slow)),
        ]);
        // 3.97 ms against an axis to 717.8 ms: logarithmic, from the decade below the
        // smallest median (nothing below a median is known), to the largest maximum.
        assert_eq!(
            p.scale,
            XScale::Log {
                start: 1.0,
                end: 1000.0
            }
        );
        assert_eq!(p.cut_max, None);
        let line = &p.lines[0];
        assert_eq!(
            line.points,
            [
                (3.973, 0.5),
                (10.623, 0.95),
                (15.127, 0.99),
                (15.39, 1.0),
                (1000.0, 1.0)
            ]
        );
        // A dot on each stored point, none where the line is carried on to the axis's end.
        assert_eq!(line.dots, line.points[..4]);
    }

    #[test]
    fn nothing_is_drawn_outside_the_axis_or_below_zero() {
        // Negative samples (clocks a little apart) and a log axis cutting a curve's left end.
        let v = [-2.0, -1.0, 0.0, 1.0, 2.0, 3.0];
        let fitted = fit(&cdf(&v), 0.0, 10.0);
        assert_eq!(fitted[0].0, 0.0);
        assert!(fitted
            .iter()
            .all(|&(x, y)| (0.0..=10.0).contains(&x) && (0.0..=1.0).contains(&y)));
        assert_eq!(*fitted.last().unwrap(), (10.0, 1.0));
        let fitted = fit(&[(1.0, 0.0), (3.0, 0.5), (5.0, 1.0)], 2.0, 4.0);
        assert_eq!(fitted, [(2.0, 0.25), (3.0, 0.5), (4.0, 0.75)]);
        // A curve wholly left of a log axis's start has reached its last fraction there.
        assert_eq!(
            fit(&[(0.1, 0.0), (0.2, 1.0)], 1.0, 10.0),
            [(1.0, 1.0), (10.0, 1.0)]
        );
        // Wholly right of its end: nothing.
        assert!(fit(&[(20.0, 0.0), (30.0, 1.0)], 0.0, 10.0).is_empty());
    }

    #[test]
    fn degenerate_inputs_still_get_an_axis() {
        assert_eq!(plot(&[]).scale, XScale::Linear { end: 1.0 });
        let zeros = [0.0, 0.0];
        let p = plot(&[(C, Source::Samples(&zeros))]);
        assert_eq!(p.scale, XScale::Linear { end: 1.0 });
        assert_eq!(*p.lines[0].points.last().unwrap(), (1.0, 1.0));
        assert!(plot(&[(C, Source::Percentiles(Vec::new()))])
            .lines
            .is_empty());
        let one = [88.0];
        let p = plot(&[(C, Source::Samples(&one))]);
        assert_eq!(p.scale, XScale::Linear { end: 100.0 });
        assert_eq!(p.lines[0].points, [(88.0, 0.0), (88.0, 1.0), (100.0, 1.0)]);
    }

    #[test]
    fn round_values() {
        assert_eq!(round_up_125(150.0), 200.0);
        assert_eq!(round_up_125(200.0), 200.0);
        assert_eq!(round_up_125(826.9), 1000.0);
        assert_eq!(round_up_125(3.0), 5.0);
        assert_eq!(round_up_125(10.0), 10.0);
    }
}

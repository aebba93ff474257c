//! What a figure counts, and how it is written for a reader.
//!
//! The page shows rounded, grouped numbers; the exact value stays in the cell's `data-value`
//! attribute so that scripts and tests read figures without parsing prose.

/// The unit of a figure in the summary table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Shares, blocks, samples, events.
    Count,
    /// Percent (0 to 100).
    Percent,
    /// Milliseconds.
    Millis,
    /// Seconds.
    Seconds,
    /// Satoshis.
    Sats,
    /// Work in difficulty-1 units (sum of share difficulties).
    Work,
    /// Bytes per second.
    BytesPerSec,
    /// Bytes.
    Bytes,
    /// CPU use, 100 = one core busy.
    CpuPct,
    /// A number whose unit the results do not say.
    Plain,
}

impl Unit {
    /// The unit as written in the table's unit column.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Unit::Count => "",
            Unit::Percent => "%",
            Unit::Millis => "ms",
            Unit::Seconds => "s",
            Unit::Sats => "sat",
            Unit::Work => "diff-1",
            // Byte figures carry their own scaled unit (KiB, MiB/s).
            Unit::BytesPerSec | Unit::Bytes => "",
            Unit::CpuPct => "% core",
            Unit::Plain => "",
        }
    }

    /// `value` for a reader: grouped digits, precision by magnitude, bytes scaled to KiB/MiB/GiB.
    pub(crate) fn format(self, value: f64) -> String {
        match self {
            Unit::Count if value.fract() == 0.0 => group(value, 0),
            Unit::Bytes => binary(value, "B"),
            Unit::BytesPerSec => binary(value, "B/s"),
            _ => decimal(value),
        }
    }

    /// `value` as a sentence gives it: fewer digits than the table (`340 ms`, `4.5 ms`,
    /// `0.12 %`), bytes scaled as in [`Unit::format`].
    pub(crate) fn prose(self, value: f64) -> String {
        match self {
            Unit::Bytes | Unit::BytesPerSec => self.format(value),
            _ => {
                let a = value.abs();
                let decimals = if a >= 10.0 || a == 0.0 {
                    0
                } else if a >= 1.0 {
                    1
                } else {
                    // Two significant digits (0.12, 0.012).
                    (1 - a.log10().floor() as i32).clamp(2, 9) as usize
                };
                group(value, decimals)
            }
        }
    }

    /// [`Unit::prose`] of a difference, with its sign.
    pub(crate) fn prose_delta(self, delta: f64) -> String {
        let sign = sign(delta);
        format!("{sign}{}", self.prose(delta.abs()))
    }

    /// A difference between two figures of this unit, with its sign.
    pub(crate) fn format_delta(self, delta: f64) -> String {
        let sign = sign(delta);
        format!("{sign}{}", self.format(delta.abs()))
    }
}

/// What a missing figure shows.
pub(crate) const MISSING: &str = "—";

/// A relative change in percent, with its sign.
pub(crate) fn format_pct(pct: f64) -> String {
    let sign = sign(pct);
    format!("{sign}{}%", decimal(pct.abs()))
}

/// The sign a difference is written with: the typographic minus, and ± for none.
fn sign(x: f64) -> &'static str {
    if x > 0.0 {
        "+"
    } else if x < 0.0 {
        "−"
    } else {
        "±"
    }
}

/// A plain number from the results, shortest exact form (as JSON writes it).
pub(crate) fn exact(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value}")
    }
}

fn decimal(value: f64) -> String {
    if !value.is_finite() {
        return MISSING.to_owned();
    }
    let a = value.abs();
    let decimals = if a >= 1000.0 || a == 0.0 {
        0
    } else if a >= 100.0 {
        1
    } else if a >= 1.0 {
        2
    } else {
        // Three significant digits for small figures (0.0123).
        (2 - a.log10().floor() as i32).clamp(3, 9) as usize
    };
    group(value, decimals)
}

fn binary(value: f64, unit: &str) -> String {
    const STEPS: [&str; 4] = ["Ki", "Mi", "Gi", "Ti"];
    let mut v = value;
    let mut prefix = "";
    for step in STEPS {
        if v.abs() < 1024.0 {
            break;
        }
        v /= 1024.0;
        prefix = step;
    }
    if prefix.is_empty() {
        format!("{} {unit}", group(value, 0))
    } else {
        format!("{} {prefix}{unit}", decimal(v))
    }
}

/// `value` with `decimals` places and thousands separated by commas.
fn group(value: f64, decimals: usize) -> String {
    if !value.is_finite() {
        return MISSING.to_owned();
    }
    let text = format!("{:.*}", decimals, value.abs());
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let mut out = String::with_capacity(text.len() + int.len() / 3 + 1);
    if value < 0.0 && text.bytes().any(|b| b.is_ascii_digit() && b != b'0') {
        // The typographic minus, as in deltas; `data-value` keeps the ASCII form.
        out.push('−');
    }
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_grouped() {
        assert_eq!(Unit::Count.format(0.0), "0");
        assert_eq!(Unit::Count.format(1234567.0), "1,234,567");
        assert_eq!(Unit::Count.format(-1234.0), "−1,234");
        assert_eq!(Unit::Count.format(12.5), "12.50");
    }

    #[test]
    fn precision_follows_magnitude() {
        assert_eq!(Unit::Millis.format(145.25), "145.2");
        assert_eq!(Unit::Millis.format(12.345), "12.35");
        assert_eq!(Unit::Millis.format(0.01234), "0.0123");
        assert_eq!(Unit::Percent.format(99.5), "99.50");
        assert_eq!(Unit::Sats.format(312_512_345.6), "312,512,346");
        assert_eq!(Unit::Millis.format(f64::NAN), MISSING);
    }

    #[test]
    fn bytes_scale() {
        assert_eq!(Unit::Bytes.format(512.0), "512 B");
        assert_eq!(Unit::Bytes.format(3.0 * 1024.0 * 1024.0), "3.00 MiB");
        assert_eq!(Unit::BytesPerSec.format(1536.0), "1.50 KiB/s");
    }

    #[test]
    fn deltas_carry_signs() {
        assert_eq!(Unit::Count.format_delta(12.0), "+12");
        assert_eq!(Unit::Millis.format_delta(-2.5), "−2.50");
        assert_eq!(Unit::Count.format_delta(0.0), "±0");
        assert_eq!(format_pct(-12.5), "−12.50%");
        assert_eq!(format_pct(250.0), "+250.0%");
    }

    #[test]
    fn exact_values_round_trip() {
        assert_eq!(exact(12.0), "12");
        assert_eq!(exact(-0.125), "-0.125");
        assert_eq!(exact(1e20), "100000000000000000000");
    }
}

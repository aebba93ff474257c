//! One colour per configuration, the same in every chart, legend and table header.

use std::fmt;

/// An sRGB colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rgb(pub u8, pub u8, pub u8);

impl fmt::Display for Rgb {
    /// CSS hex notation (`#0072b2`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

/// Roles shared by every configuration (`simnet`) and anything not tied to one.
pub(crate) const SHARED: Rgb = Rgb(0x77, 0x77, 0x77);

/// The Okabe–Ito colours (told apart with the common colour-vision deficiencies), without the
/// yellow that vanishes on white.
const BASE: [Rgb; 7] = [
    Rgb(0x00, 0x72, 0xb2), // blue
    Rgb(0xd5, 0x5e, 0x00), // vermillion
    Rgb(0x00, 0x9e, 0x73), // bluish green
    Rgb(0xcc, 0x79, 0xa7), // reddish purple
    Rgb(0xe6, 0x9f, 0x00), // orange
    Rgb(0x56, 0xb4, 0xe9), // sky blue
    Rgb(0x00, 0x00, 0x00), // black
];

/// Colours by position in the report's configuration order.
#[derive(Debug, Clone)]
pub(crate) struct Palette {
    configs: Vec<String>,
}

impl Palette {
    pub(crate) fn new(configs: &[String]) -> Palette {
        Palette {
            configs: configs.to_vec(),
        }
    }

    pub(crate) fn colour(&self, config: &str) -> Rgb {
        match self.configs.iter().position(|c| c == config) {
            Some(i) => nth(i),
            None => SHARED,
        }
    }
}

/// The `i`th configuration's colour: the fixed set first, then hues a golden angle apart.
pub(crate) fn nth(i: usize) -> Rgb {
    if let Some(c) = BASE.get(i) {
        return *c;
    }
    let hue = ((i - BASE.len()) as f64 * 137.508 + 20.0) % 360.0;
    hsl(hue, 0.65, 0.42)
}

fn hsl(h: f64, s: f64, l: f64) -> Rgb {
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let x = c * (1.0 - ((h / 60.0) % 2.0 - 1.0).abs());
    let m = l - c / 2.0;
    let (r, g, b) = match (h / 60.0) as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let byte = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    Rgb(byte(r), byte(g), byte(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_follow_config_order_and_stay_distinct() {
        let p = Palette::new(&["sv1".into(), "A".into()]);
        assert_eq!(p.colour("sv1"), BASE[0]);
        assert_eq!(p.colour("A"), BASE[1]);
        assert_eq!(p.colour("simnet"), SHARED);
        let many: Vec<Rgb> = (0..40).map(nth).collect();
        for (i, a) in many.iter().enumerate() {
            assert!(!many[i + 1..].contains(a), "colour {i} repeats");
            assert_ne!(*a, SHARED);
        }
        assert_eq!(BASE[0].to_string(), "#0072b2");
    }
}

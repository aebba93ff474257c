//! Random draws and the distribution functions they follow.
//!
//! The draws are written here from uniform 64-bit words rather than taken from a distributions
//! crate, so that a seed keeps giving the same network across dependency upgrades: ChaCha's
//! output is value-stable, and so are these few formulas. The CDFs are what the histogram tests
//! compare generated data against.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha12Rng;

/// The generator behind every random stream of the network.
pub type Rng = ChaCha12Rng;

/// An independent stream for one purpose (`label`), derived from the network's seed, so that
/// draws for one purpose never shift the sequence of another.
pub fn stream(seed: u64, label: &str) -> Rng {
    let mut material = Vec::with_capacity(8 + label.len());
    material.extend_from_slice(&seed.to_le_bytes());
    material.extend_from_slice(label.as_bytes());
    Rng::from_seed(primitives::sha256d(&material).0)
}

/// Uniform on (0, 1]: never zero, so its logarithm is finite.
pub fn uniform_open0(rng: &mut impl RngCore) -> f64 {
    // 53 random bits, the f64 mantissa width, shifted up by one so 0 cannot occur.
    ((rng.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Exponential with the given mean (the gap between Poisson events).
pub fn exponential(rng: &mut impl RngCore, mean: f64) -> f64 {
    -uniform_open0(rng).ln() * mean
}

/// Standard normal by the Box-Muller transform (one of the pair is used; keeping no cached
/// second value makes every draw a function of exactly two words).
pub fn standard_normal(rng: &mut impl RngCore) -> f64 {
    let u1 = uniform_open0(rng);
    let u2 = uniform_open0(rng);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Log-normal with the given median (`e^mu`) and shape `sigma`.
pub fn log_normal(rng: &mut impl RngCore, median: f64, sigma: f64) -> f64 {
    median * (sigma * standard_normal(rng)).exp()
}

/// The standard normal CDF, from Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7,
/// far below what a histogram test of a few ten thousand draws can resolve).
pub fn normal_cdf(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-z * z).exp();
    if x >= 0.0 {
        1.0 - 0.5 * erfc
    } else {
        0.5 * erfc
    }
}

/// CDF of the log-normal with this median and sigma at `x`.
pub fn log_normal_cdf(x: f64, median: f64, sigma: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    normal_cdf((x / median).ln() / sigma)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_cdf_known_values() {
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_cdf(1.0) - 0.841_344_746).abs() < 2e-7);
        assert!((normal_cdf(-1.959_964) - 0.025).abs() < 2e-7);
        assert!((normal_cdf(3.0) - 0.998_650_102).abs() < 2e-7);
    }

    #[test]
    fn streams_are_reproducible_and_independent() {
        let a: Vec<u64> = (0..4).map(|_| stream(7, "tx").next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(stream(7, "tx").next_u64(), stream(7, "block").next_u64());
        assert_ne!(stream(7, "tx").next_u64(), stream(8, "tx").next_u64());
    }

    #[test]
    fn draws_have_the_right_moments() {
        let mut rng = stream(1, "moments");
        let n = 200_000;
        let mean_exp = (0..n).map(|_| exponential(&mut rng, 3.0)).sum::<f64>() / n as f64;
        assert!((mean_exp - 3.0).abs() < 0.05, "{mean_exp}");
        let xs: Vec<f64> = (0..n).map(|_| standard_normal(&mut rng)).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.01, "{mean}");
        assert!((var - 1.0).abs() < 0.02, "{var}");
    }
}

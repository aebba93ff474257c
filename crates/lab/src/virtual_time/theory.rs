//! The stale fraction the model predicts (derivation in the docs of [`super`]):
//! `f = E[min(X, W)] / B` for exponential tip gaps `X` of mean `B` and the stale window
//! `W = r + processing`.

use std::time::Duration;

/// `1 − e^(−W/B)`: the exact stale fraction of the model.
pub fn expected_stale_fraction(window: Duration, block_interval: Duration) -> f64 {
    // E[min(X, W)] = B(1 − e^(−W/B)); exp_m1 keeps the precision for W ≪ B.
    -(-window.as_secs_f64() / block_interval.as_secs_f64()).exp_m1()
}

/// `W/B = (r + processing)/B`: the first-order form the issue states.
pub fn linear_stale_fraction(window: Duration, block_interval: Duration) -> f64 {
    window.as_secs_f64() / block_interval.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Duration = Duration::from_secs(10);

    #[test]
    fn small_windows_match_the_first_order_form() {
        let w = Duration::from_millis(145);
        let f = expected_stale_fraction(w, B);
        assert!((f - (1.0 - (-0.0145f64).exp())).abs() < 1e-15);
        let lin = linear_stale_fraction(w, B);
        assert!((lin - 0.0145).abs() < 1e-15);
        // Second order: f ≈ x − x²/2.
        assert!((lin - f - 0.0145f64.powi(2) / 2.0).abs() < 1e-6, "{f}");
    }

    #[test]
    fn no_window_no_stale_shares() {
        assert_eq!(expected_stale_fraction(Duration::ZERO, B), 0.0);
        assert_eq!(linear_stale_fraction(Duration::ZERO, B), 0.0);
    }

    #[test]
    fn a_window_as_long_as_blocks_loses_most_but_not_all() {
        let f = expected_stale_fraction(B, B);
        assert!((f - (1.0 - (-1f64).exp())).abs() < 1e-15);
        assert!(expected_stale_fraction(B * 100, B) > 0.999_999);
        assert_eq!(
            linear_stale_fraction(B * 2, B),
            2.0,
            "the first order overshoots"
        );
    }
}

//! Statistics of repeated runs: the median, and how far the runs spread around it.

use serde::Serialize;

/// A point whose runs spread more than this fraction of their median, `(max − min) /
/// median`, is flagged as noisy in every table: its median is not worth comparing
/// closely with another.
pub const NOISY_SPREAD: f64 = 0.20;

/// The median of `values` (the mean of the middle two for an even count), sorting
/// them; NaN for none.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

/// The median, minimum and maximum of a point's runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Median run.
    pub median: f64,
    /// Lowest run.
    pub min: f64,
    /// Highest run.
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (all NaN for none).
    pub fn of(values: &[f64]) -> Self {
        let mut sorted = values.to_vec();
        let median = median(&mut sorted);
        Self {
            median,
            min: sorted.first().copied().unwrap_or(f64::NAN),
            max: sorted.last().copied().unwrap_or(f64::NAN),
        }
    }

    /// `(max − min) / median`: 0 when every run agreed; NaN when there is no median.
    pub fn relative(&self) -> f64 {
        if self.median == 0.0 { f64::NAN } else { (self.max - self.min) / self.median.abs() }
    }

    /// Whether the runs spread more than [`NOISY_SPREAD`] of the median.
    pub fn is_noisy(&self) -> bool {
        self.relative() > NOISY_SPREAD
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn spread_flags_runs_more_than_a_fifth_apart() {
        let tight = Spread::of(&[100.0, 90.0, 105.0]);
        assert_eq!((tight.min, tight.median, tight.max), (90.0, 100.0, 105.0));
        assert!((tight.relative() - 0.15).abs() < 1e-12);
        assert!(!tight.is_noisy());
        let wide = Spread::of(&[100.0, 70.0, 95.0]);
        assert!((wide.relative() - 30.0 / 95.0).abs() < 1e-12);
        assert!(wide.is_noisy());
        assert!(!Spread::of(&[5.0]).is_noisy());
        assert!(!Spread::of(&[]).is_noisy());
    }
}

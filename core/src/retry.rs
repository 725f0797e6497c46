//! Exponential backoff with jitter.

use rand::Rng;
use std::time::Duration;

use crate::config::RetryConfig;

/// The waits between retries of one batch.
#[derive(Debug, Clone)]
pub struct Backoff {
    cfg: RetryConfig,
    current: Duration,
}

impl Backoff {
    /// Start at `initial_interval`.
    pub fn new(cfg: RetryConfig) -> Self {
        Backoff {
            current: cfg.initial_interval.get(),
            cfg,
        }
    }

    /// The next wait: the current interval randomized by
    /// `randomization_factor`, then the interval grows by `multiplier` up to
    /// `max_interval`.
    pub fn next_wait(&mut self) -> Duration {
        let f = self.cfg.randomization_factor;
        let factor = if f > 0.0 {
            rand::rng().random_range((1.0 - f)..=(1.0 + f))
        } else {
            1.0
        };
        let wait = self.current.mul_f64(factor);
        self.current = self
            .current
            .mul_f64(self.cfg.multiplier)
            .min(self.cfg.max_interval.get());
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Duration as D;

    #[test]
    fn grows_to_max_with_jitter_bounds() {
        let cfg = RetryConfig {
            initial_interval: D::millis(100),
            max_interval: D::millis(400),
            multiplier: 2.0,
            randomization_factor: 0.5,
            ..RetryConfig::default()
        };
        let mut b = Backoff::new(cfg);
        let bounds = [(50, 150), (100, 300), (200, 600), (200, 600), (200, 600)];
        for (lo, hi) in bounds {
            let w = b.next_wait().as_millis() as u64;
            assert!((lo..=hi).contains(&w), "{w} not in {lo}..={hi}");
        }
    }
}

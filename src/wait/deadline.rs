//! Deadlines from timeouts a caller gives.

use std::time::{Duration, Instant};

/// The moment `timeout` from now; a timeout past what the clock can hold is
/// as good as a year (a caller's "forever" is never a panic).
pub(crate) fn after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 86_400))
}

#[cfg(test)]
mod tests {
    #[test]
    fn forever_is_a_year_not_a_panic() {
        let far = super::after(std::time::Duration::MAX);
        assert!(far > std::time::Instant::now() + std::time::Duration::from_secs(364 * 86_400));
    }
}

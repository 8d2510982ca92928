//! The time a read's waits are measured by: a [`Clock`], carried by the
//! read's [`Stop`](crate::wait::Stop). The process's is the system's; a test
//! gives a read a clock it moves itself ([`tests::Manual`]), so that the
//! pauses the read makes (a retry's backoff, a server's `Retry-After`) pass
//! at once, and are measured exactly.

use std::fmt::Debug;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Where waits read the time and pause.
pub(crate) trait Clock: Send + Sync + Debug {
    /// The time now.
    fn now(&self) -> Instant;

    /// Pauses until `until` (at once if it has passed).
    fn sleep_until(&self, until: Instant);
}

/// The system's clock.
#[derive(Debug)]
struct System;

impl Clock for System {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, until: Instant) {
        let now = Instant::now();
        if until > now {
            std::thread::sleep(until - now);
        }
    }
}

/// The system's clock, shared.
pub(crate) fn system() -> Arc<dyn Clock> {
    static SYSTEM: OnceLock<Arc<dyn Clock>> = OnceLock::new();
    Arc::clone(SYSTEM.get_or_init(|| Arc::new(System)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sync::Mutex;
    use std::time::Duration;

    /// A clock that moves only when a wait pauses on it: by exactly the
    /// pause. What the pauses added up to is [`slept`](Manual::slept).
    #[derive(Debug)]
    pub(crate) struct Manual {
        start: Instant,
        now: Mutex<Instant>,
    }

    impl Manual {
        pub(crate) fn new() -> Arc<Manual> {
            let start = Instant::now();
            Arc::new(Manual {
                start,
                now: Mutex::new(start),
            })
        }

        /// How far the clock moved.
        pub(crate) fn slept(&self) -> Duration {
            *self.now.lock() - self.start
        }
    }

    impl Clock for Manual {
        fn now(&self) -> Instant {
            *self.now.lock()
        }

        fn sleep_until(&self, until: Instant) {
            let mut now = self.now.lock();
            *now = (*now).max(until);
        }
    }

    #[test]
    fn a_manual_clock_moves_by_the_pauses_alone() {
        let clock = Manual::new();
        let at = clock.now();
        clock.sleep_until(at + Duration::from_secs(10));
        clock.sleep_until(at);
        assert_eq!(clock.now(), at + Duration::from_secs(10));
        assert_eq!(clock.slept(), Duration::from_secs(10));
        let system = system();
        let before = system.now();
        system.sleep_until(before);
        assert!(system.now() >= before);
    }
}

//! Time in the tests, in two forms only: a server (or a fake disk) that
//! answers late — a link's round trip, a stalled server — ([`late`]), and a
//! wait for what another thread or process does, bounded by a deadline
//! ([`eventually`], [`wait_for`]). No test orders its threads by sleeping:
//! each waits for the state it needs, and these are the one place a test's
//! thread sleeps.

use std::time::{Duration, Instant};

/// How often [`eventually`] and [`wait_for`] look.
const LOOK_EVERY: Duration = Duration::from_millis(1);

/// Answers `delay` late: the time a server's link or a slow disk takes.
pub fn late(delay: Duration) {
    std::thread::sleep(delay);
}

/// Waits until `done` holds, looking every millisecond; panics naming
/// `what` if it does not within `within`.
pub fn eventually(what: &str, within: Duration, done: impl FnMut() -> bool) {
    assert!(wait_for(within, done), "{what}: not within {within:?}");
}

/// Waits until `done` holds, looking every millisecond, for at most
/// `within`: whether it held.
pub fn wait_for(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now().checked_add(within);
    loop {
        if done() {
            return true;
        }
        if until.is_some_and(|u| Instant::now() >= u) {
            return false;
        }
        std::thread::sleep(LOOK_EVERY);
    }
}

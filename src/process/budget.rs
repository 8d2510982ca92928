//! Connection budgets: a counting semaphore with two lanes, one per file
//! (its `max_connections`) and one per origin for the whole process.
//!
//! A request holds a permit of each while it is in flight, and so while its
//! connection is busy. The reads users wait for go first: a background
//! fetch (read-ahead, the metadata crawl) takes a permit only when no read
//! is waiting for one, and holds at most its lane's share, so that a read
//! waits for at most one background request to end however many files are
//! crawling.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use crate::sync::{Condvar, Mutex, ProcessLocal, start_afresh};

use crate::wait::{Lane, Stop};

/// A counting semaphore whose background lane may hold only part of it.
#[derive(Debug)]
pub(crate) struct Permits {
    state: Mutex<State>,
    returned: Condvar,
    background_max: usize,
    /// Callers waiting for a permit now, for tests to wait on.
    #[cfg(test)]
    waiters: std::sync::atomic::AtomicUsize,
}

#[derive(Debug)]
struct State {
    free: usize,
    background_held: usize,
    reads_waiting: usize,
}

/// Held while a request is in flight; returns its permit on drop.
#[derive(Debug)]
pub(crate) struct Permit {
    permits: Arc<Permits>,
    lane: Lane,
}

impl Permits {
    /// `n` permits (at least 1), of which background work may hold at most
    /// `background_max` (at least 1).
    pub(crate) fn new(n: usize, background_max: usize) -> Permits {
        let n = n.max(1);
        Permits {
            state: Mutex::new(State {
                free: n,
                background_held: 0,
                reads_waiting: 0,
            }),
            returned: Condvar::new(),
            background_max: background_max.clamp(1, n),
            #[cfg(test)]
            waiters: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Waits for a permit of `lane` until `deadline`; `None` if none came,
    /// an error if the work on this thread was stopped meanwhile.
    #[cfg(test)]
    pub(crate) fn acquire(
        self: &Arc<Self>,
        lane: Lane,
        deadline: Instant,
    ) -> crate::error::Result<Option<Permit>> {
        self.acquire_for(&Stop::in_lane(lane), deadline)
    }

    /// Waits for a permit for the work `stop` stops, in its lane, until
    /// `deadline`; `None` if none came, an error if the work was stopped
    /// meanwhile. Background work that a reader comes to wait for (its
    /// stop's `wanted` flag set) waits as a read from then on.
    pub(crate) fn acquire_for(
        self: &Arc<Self>,
        stop: &Stop,
        deadline: Instant,
    ) -> crate::error::Result<Option<Permit>> {
        let (asked, wanted) = stop.lane();
        #[cfg(test)]
        let _waiting = crate::sync::Waiting::new(&self.waiters);
        let lane_now = || match wanted {
            Some(w) if w.load(Relaxed) => Lane::Read,
            _ => asked,
        };
        let mut lane = lane_now();
        let mut state = self.state.lock();
        if lane == Lane::Read {
            state.reads_waiting += 1;
        }
        loop {
            if lane == Lane::Background && lane_now() == Lane::Read {
                lane = Lane::Read;
                state.reads_waiting += 1;
            }
            let may = match lane {
                Lane::Read => state.free > 0,
                Lane::Background => {
                    state.free > 0
                        && state.reads_waiting == 0
                        && state.background_held < self.background_max
                }
            };
            if may {
                break;
            }
            if Instant::now() >= deadline {
                return Ok(self.give_up(state, lane));
            }
            state = self
                .returned
                .wait_until(state, crate::wait::slice_end(deadline))
                .0;
            // Asked with no lock held: asking may run a host's code (take
            // an interpreter's lock, run a signal handler that reads).
            drop(state);
            let stopped = stop.check();
            state = self.state.lock();
            if let Err(stopped) = stopped {
                self.give_up(state, lane);
                return Err(stopped);
            }
        }
        state.free -= 1;
        match lane {
            Lane::Read => state.reads_waiting -= 1,
            Lane::Background => state.background_held += 1,
        }
        if state.free > 0 && state.reads_waiting == 0 {
            // Background waiters held back for this read may go now.
            self.returned.notify_all();
        }
        Ok(Some(Permit {
            permits: Arc::clone(self),
            lane,
        }))
    }

    /// Leaves the wait of a waiter of `lane` that takes no permit.
    fn give_up(&self, mut state: crate::sync::MutexGuard<'_, State>, lane: Lane) -> Option<Permit> {
        if lane == Lane::Read {
            state.reads_waiting -= 1;
        }
        drop(state);
        // A permit this waiter was woken for goes to another.
        self.returned.notify_all();
        None
    }

    /// Permits not held now.
    #[cfg(test)]
    fn free(&self) -> usize {
        self.state.lock().free
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut state = self.permits.state.lock();
        state.free += 1;
        if self.lane == Lane::Background {
            state.background_held -= 1;
        }
        drop(state);
        // Readers and background waiters wait on one condition, for
        // different things: each looks again.
        self.permits.returned.notify_all();
    }
}

/// The budgets of the origins this process sent requests to, by the
/// process that made them: a forked child counts its own requests only.
static ORIGINS: ProcessLocal<BTreeMap<String, Arc<Permits>>> =
    ProcessLocal::new(BTreeMap::new(), start_afresh);

/// The process's budget of connections to `origin` (`scheme://host:port`).
pub(crate) fn of_origin(origin: &str) -> Arc<Permits> {
    let made = || {
        Arc::new(Permits::new(
            super::CONNECTIONS_PER_ORIGIN,
            super::BACKGROUND_CONNECTIONS_PER_ORIGIN,
        ))
    };
    let Some(mut budgets) = ORIGINS.lock() else {
        return made();
    };
    // Asked before every request: a look-up, with no copy of the origin.
    if let Some(budget) = budgets.get(origin) {
        return Arc::clone(budget);
    }
    Arc::clone(budgets.entry(origin.to_owned()).or_insert_with(made))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(30)
    }

    #[test]
    fn never_more_than_n_at_once() {
        let permits = Arc::new(Permits::new(3, 2));
        let (now, peak, background) = (
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        );
        let background_peak = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for i in 0..12 {
                let lane = if i % 2 == 0 {
                    Lane::Read
                } else {
                    Lane::Background
                };
                let (now, peak, background, background_peak) =
                    (&now, &peak, &background, &background_peak);
                let permits = &permits;
                s.spawn(move || {
                    for _ in 0..20 {
                        let _p = permits.acquire(lane, soon()).unwrap().unwrap();
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(n, Ordering::SeqCst);
                        if lane == Lane::Background {
                            let b = background.fetch_add(1, Ordering::SeqCst) + 1;
                            background_peak.fetch_max(b, Ordering::SeqCst);
                        }
                        std::thread::yield_now();
                        if lane == Lane::Background {
                            background.fetch_sub(1, Ordering::SeqCst);
                        }
                        now.fetch_sub(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert!(peak.load(Ordering::SeqCst) <= 3);
        assert!(background_peak.load(Ordering::SeqCst) <= 2);
        assert_eq!(permits.free(), 3);
    }

    #[test]
    fn background_work_a_reader_waits_for_takes_a_permit_as_a_read() {
        let permits = Arc::new(Permits::new(2, 1));
        let _guess = permits.acquire(Lane::Background, soon()).unwrap().unwrap();
        let wanted = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let now = Instant::now;
        // The background share is taken: another background request waits.
        let background = Stop::in_lane(Lane::Background).wanted_by(Some(Arc::clone(&wanted)));
        let held_back = permits.acquire_for(&background, now());
        assert!(held_back.unwrap().is_none());
        // Once a reader waits for what it brings, it goes as a read.
        wanted.store(true, Relaxed);
        let promoted = permits.acquire_for(&background, now());
        assert!(promoted.unwrap().is_some());
    }

    #[test]
    fn waiting_ends_at_the_deadline() {
        let permits = Arc::new(Permits::new(1, 1));
        let _held = permits
            .acquire(Lane::Read, Instant::now())
            .unwrap()
            .unwrap();
        let deadline = Instant::now() + Duration::from_millis(20);
        assert!(permits.acquire(Lane::Read, deadline).unwrap().is_none());
        assert!(
            permits
                .acquire(Lane::Background, deadline)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn background_work_never_holds_the_whole_budget() {
        let permits = Arc::new(Permits::new(3, 2));
        let _a = permits.acquire(Lane::Background, soon()).unwrap().unwrap();
        let _b = permits.acquire(Lane::Background, soon()).unwrap().unwrap();
        let third = Instant::now() + Duration::from_millis(20);
        assert!(permits.acquire(Lane::Background, third).unwrap().is_none());
        assert!(
            permits
                .acquire(Lane::Read, Instant::now())
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn a_waiting_read_goes_before_waiting_background_work() {
        let permits = Arc::new(Permits::new(1, 1));
        let held = permits.acquire(Lane::Background, soon()).unwrap().unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let background = {
            let (permits, order) = (permits.clone(), order.clone());
            std::thread::spawn(move || {
                let _p = permits.acquire(Lane::Background, soon()).unwrap().unwrap();
                order.lock().push("background");
            })
        };
        let waiters = || permits.waiters.load(Ordering::SeqCst);
        remfile_testkit::time::eventually("background waits", Duration::from_secs(30), || {
            waiters() == 1
        });
        let read = {
            let (permits, order) = (permits.clone(), order.clone());
            std::thread::spawn(move || {
                // Pushed with the permit held: the background work waits.
                let _p = permits.acquire(Lane::Read, soon()).unwrap().unwrap();
                order.lock().push("read");
            })
        };
        // Until the read waits, the background waiter might still win.
        remfile_testkit::time::eventually("the read waits", Duration::from_secs(30), || {
            permits.state.lock().reads_waiting == 1
        });
        drop(held);
        read.join().unwrap();
        background.join().unwrap();
        assert_eq!(*order.lock(), ["read", "background"]);
    }

    #[test]
    fn one_budget_per_origin() {
        let a = of_origin("http://one_budget_per_origin:1");
        let b = of_origin("http://one_budget_per_origin:1");
        let c = of_origin("http://one_budget_per_origin:2");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
    }
}

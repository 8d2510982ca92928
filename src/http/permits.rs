//! A counting semaphore that bounds the requests (and so the connections) one
//! file has open at a time.

use std::time::Instant;

use crate::sync::{Condvar, Mutex};

use crate::error::{Error, ErrorKind};

pub(crate) struct Permits {
    free: Mutex<usize>,
    returned: Condvar,
}

/// Held while a request is in flight; returns its permit on drop.
pub(crate) struct Permit<'a>(&'a Permits);

impl Permits {
    pub fn new(n: usize) -> Permits {
        Permits {
            free: Mutex::new(n.max(1)),
            returned: Condvar::new(),
        }
    }

    /// Waits for a permit until `deadline`.
    pub fn acquire(&self, deadline: Instant) -> Result<Permit<'_>, Error> {
        let mut free = self.free.lock();
        while *free == 0 {
            let (waited, timed_out) = self.returned.wait_until(free, deadline);
            free = waited;
            if timed_out && *free == 0 {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    "timed out waiting for a free connection (max_connections are all busy)",
                ));
            }
        }
        *free -= 1;
        Ok(Permit(self))
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.free.lock() += 1;
        self.0.returned.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn never_more_than_n_at_once() {
        let permits = Permits::new(3);
        let (now, peak) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|s| {
            for _ in 0..12 {
                s.spawn(|| {
                    for _ in 0..20 {
                        let _p = permits
                            .acquire(Instant::now() + Duration::from_secs(30))
                            .unwrap();
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(n, Ordering::SeqCst);
                        std::thread::yield_now();
                        now.fetch_sub(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert!(peak.load(Ordering::SeqCst) <= 3);
    }

    #[test]
    fn waiting_ends_at_the_deadline() {
        let permits = Permits::new(1);
        let _held = permits.acquire(Instant::now()).unwrap();
        let e = permits
            .acquire(Instant::now() + Duration::from_millis(20))
            .err()
            .unwrap();
        assert_eq!(e.kind(), ErrorKind::Timeout);
    }
}

//! The crate's one family of locks, and the state a process may not share
//! with a child it forks.
//!
//! Every lock of the crate is one of these, over `std::sync`, for one
//! reason: `fork`. A child gets a copy of the parent's memory and only the
//! forking thread. `std::sync` keeps a waiter's state in the lock itself (a
//! futex on Linux), so whatever the parent's threads were waiting on, the
//! child's own locks are sound. (`parking_lot`, by contrast, keeps one
//! table per process of the threads parked on its locks, each entry
//! pointing into the parked thread's memory: a child inherits the entries
//! of the parent's waiting threads, and its next wait or wake on a lock
//! sharing a slot of the table follows a dangling pointer.) They do not
//! poison: a panic while a guard is held leaves the data as it was.
//!
//! The same fork makes process-wide state the parent's: a child finds the
//! parent's tables, counts and queues, and none of the threads they were
//! for. [`ProcessLocal`] holds such state for one process at a time (the
//! first use in a child hands the inherited value to an `adopt` function),
//! [`MadeIn`] says which process made a value, and [`ProcessFlag`] is a
//! flag a child finds lowered: nothing else in the crate compares process
//! ids to decide whether state is its own.

use std::sync::PoisonError;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// One more in a count of threads inside a wait, for as long as it lives.
pub(crate) struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);

impl Waiting<'_> {
    pub(crate) fn new(count: &std::sync::atomic::AtomicUsize) -> Waiting<'_> {
        count.fetch_add(1, Relaxed);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// A mutual exclusion lock over `std::sync::Mutex`, without poisoning.
#[derive(Debug, Default)]
pub struct Mutex<T>(pub(crate) std::sync::Mutex<T>);

/// The guard of a [`Mutex`].
pub type MutexGuard<'a, T> = std::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    /// A lock over `value`.
    pub const fn new(value: T) -> Mutex<T> {
        Mutex(std::sync::Mutex::new(value))
    }

    /// The lock, however long that takes.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lock if it is free now.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.try_lock_until(Instant::now())
    }

    /// The lock if it can be had by `deadline`: for a caller that must not
    /// wait for ever on a lock a thread may hold for good (one that does not
    /// exist in a forked child, say). Polls, every millisecond.
    pub(crate) fn try_lock_until(&self, deadline: Instant) -> Option<MutexGuard<'_, T>> {
        loop {
            match self.0.try_lock() {
                Ok(guard) => return Some(guard),
                Err(std::sync::TryLockError::Poisoned(e)) => return Some(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(std::sync::TryLockError::WouldBlock) => return None,
            }
        }
    }
}

/// A flag raised in one process: a child forked afterwards finds it
/// lowered. Lock-free, for checks on every wait.
#[derive(Debug, Default)]
pub(crate) struct ProcessFlag(AtomicU32);

impl ProcessFlag {
    pub(crate) const fn new() -> ProcessFlag {
        ProcessFlag(AtomicU32::new(0))
    }

    /// Raises the flag in this process; whether it was lowered here.
    pub(crate) fn raise(&self) -> bool {
        let me = this_process();
        self.0.swap(me, Relaxed) != me
    }

    pub(crate) fn is_raised(&self) -> bool {
        self.0.load(Relaxed) == this_process()
    }
}

/// The flag of a process-wide table whose lock was found held for good in
/// this process (a child forked while another thread held it): there,
/// later callers only try it once rather than wait again each time.
pub(crate) type Wedged = ProcessFlag;

impl<T> Mutex<T> {
    /// The lock if it can be had within `wait`, unless this process found
    /// it held for good before (`wedged`): then only if it is free now.
    pub(crate) fn lock_unless_wedged(
        &self,
        wedged: &Wedged,
        wait: Duration,
    ) -> Option<MutexGuard<'_, T>> {
        if wedged.is_raised() {
            return self.try_lock_until(Instant::now());
        }
        let got = self.try_lock_until(Instant::now() + wait);
        if got.is_none() {
            wedged.raise();
        }
        got
    }
}

/// How long a caller waits for the lock of a process-wide table: a thread
/// of this process holds it for a look-up only, so one held longer was
/// held by a thread of the process this one was forked from, for good.
pub(crate) const TABLE_WAIT: Duration = Duration::from_secs(2);

/// This process's id: the one place the crate asks for it. A child of
/// `fork` has its own, which is how every value here tells a parent's
/// from its own.
pub(crate) fn this_process() -> u32 {
    std::process::id()
}

/// The process a value was made in. A child of `fork` inherits the value
/// but not the threads that worked for it nor the locks they held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadeIn(u32);

impl MadeIn {
    /// This process.
    pub fn here() -> MadeIn {
        MadeIn(this_process())
    }

    /// Whether this process only inherited the value (forked since).
    pub fn inherited(self) -> bool {
        self.0 != this_process()
    }

    /// Made in another process: as a forked child finds its parent's.
    #[cfg(test)]
    pub(crate) fn elsewhere() -> MadeIn {
        MadeIn(this_process().wrapping_add(1))
    }
}

/// Process-wide state that belongs to one process at a time: the first
/// use in a process (a forked child's included) hands the value found to
/// `adopt`, which empties, forgets or copies what a parent left. Its lock
/// is waited for at most [`TABLE_WAIT`], and where it was found held for
/// good, only tried: a caller that gets `None` goes without the table.
pub(crate) struct ProcessLocal<T> {
    slot: Mutex<Slot<T>>,
    wedged: Wedged,
    adopt: fn(&mut T),
}

/// The value of a [`ProcessLocal`], with the process it is for.
pub(crate) struct Slot<T> {
    made_in: u32,
    value: T,
}

impl<T> std::ops::Deref for Slot<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> std::ops::DerefMut for Slot<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T> ProcessLocal<T> {
    pub(crate) const fn new(value: T, adopt: fn(&mut T)) -> ProcessLocal<T> {
        ProcessLocal {
            slot: Mutex::new(Slot { made_in: 0, value }),
            wedged: Wedged::new(),
            adopt,
        }
    }

    /// This process's value, locked; `None` where the lock is held for good.
    pub(crate) fn lock(&self) -> Option<MutexGuard<'_, Slot<T>>> {
        self.lock_within(TABLE_WAIT)
    }

    /// As [`lock`](Self::lock), waiting at most `wait` (a caller with a
    /// deadline of its own).
    pub(crate) fn lock_within(&self, wait: Duration) -> Option<MutexGuard<'_, Slot<T>>> {
        let mut slot = self.slot.lock_unless_wedged(&self.wedged, wait)?;
        let me = this_process();
        if slot.made_in != me {
            (self.adopt)(&mut slot.value);
            slot.made_in = me;
        }
        Some(slot)
    }

    /// This process's value, locked however long that takes: for the
    /// process's own threads, which a fork never leaves holding it.
    pub(crate) fn lock_here(&self) -> MutexGuard<'_, Slot<T>> {
        let mut slot = self.slot.lock();
        let me = this_process();
        if slot.made_in != me {
            (self.adopt)(&mut slot.value);
            slot.made_in = me;
        }
        slot
    }

    /// Runs `f` on this process's value; `None` where the lock is held for
    /// good.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        self.lock().map(|mut slot| f(&mut slot))
    }
}

/// Adopts inherited state by dropping it: a table of what a parent made.
pub(crate) fn start_afresh<T: Default>(value: &mut T) {
    *value = T::default();
}

/// A reader-writer lock over `std::sync::RwLock`, without poisoning.
#[derive(Debug, Default)]
pub(crate) struct RwLock<T>(std::sync::RwLock<T>);

impl<T> RwLock<T> {
    pub(crate) const fn new(value: T) -> RwLock<T> {
        RwLock(std::sync::RwLock::new(value))
    }

    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, T> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn write(&self) -> std::sync::RwLockWriteGuard<'_, T> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A condition variable over `std::sync::Condvar`, for a [`Mutex`].
#[derive(Debug, Default)]
pub(crate) struct Condvar(std::sync::Condvar);

impl Condvar {
    pub(crate) const fn new() -> Condvar {
        Condvar(std::sync::Condvar::new())
    }

    /// Waits until notified (or woken spuriously) or `deadline`; with
    /// whether the deadline has passed.
    pub(crate) fn wait_until<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: Instant,
    ) -> (MutexGuard<'a, T>, bool) {
        let left = deadline.saturating_duration_since(Instant::now());
        let (guard, _) = self
            .0
            .wait_timeout(guard, left)
            .unwrap_or_else(PoisonError::into_inner);
        (guard, Instant::now() >= deadline)
    }

    pub(crate) fn notify_one(&self) {
        self.0.notify_one();
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_waiter_wakes_when_notified_and_times_out_otherwise() {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let (lock, ready) = &*pair;
        let (guard, timed_out) = ready.wait_until(lock.lock(), Instant::now());
        assert!(timed_out && !*guard);
        drop(guard);
        let other = pair.clone();
        let notifier = std::thread::spawn(move || {
            *other.0.lock() = true;
            other.1.notify_all();
        });
        let mut guard = lock.lock();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !*guard {
            let (g, timed_out) = ready.wait_until(guard, deadline);
            assert!(!timed_out, "never notified");
            guard = g;
        }
        drop(guard);
        notifier.join().unwrap();
    }

    #[test]
    fn a_lock_held_elsewhere_is_given_up_at_the_deadline() {
        let lock = Arc::new(Mutex::new(0));
        let held = lock.lock();
        let other = lock.clone();
        let tried = std::thread::spawn(move || {
            other
                .try_lock_until(Instant::now() + Duration::from_millis(20))
                .is_none()
        });
        assert!(tried.join().unwrap(), "the lock was had while held");
        drop(held);
        assert!(lock.try_lock_until(Instant::now()).is_some());
    }

    #[test]
    fn a_lock_found_held_for_good_is_not_waited_for_again() {
        let lock = Arc::new(Mutex::new(0));
        let wedged = Wedged::new();
        let held = lock.lock();
        let other = lock.clone();
        let tries = std::thread::spawn(move || {
            let wedged = Wedged::new();
            let first = other
                .lock_unless_wedged(&wedged, Duration::from_millis(20))
                .is_none();
            let started = Instant::now();
            let second = other
                .lock_unless_wedged(&wedged, Duration::from_secs(30))
                .is_none();
            (first, second, started.elapsed())
        });
        let (first, second, waited) = tries.join().unwrap();
        assert!(first && second);
        assert!(waited < Duration::from_secs(30), "waited again: {waited:?}");
        drop(held);
        assert!(lock.lock_unless_wedged(&wedged, Duration::ZERO).is_some());
    }

    #[test]
    fn a_process_local_value_is_adopted_once_per_process() {
        static ADOPTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        fn adopt(value: &mut Vec<u32>) {
            ADOPTED.fetch_add(1, Relaxed);
            value.clear();
        }
        let local = ProcessLocal::new(vec![7], adopt);
        assert_eq!(local.with(|v| v.clone()), Some(vec![]));
        local.with(|v| v.push(1));
        assert_eq!(local.with(|v| v.clone()), Some(vec![1]));
        assert_eq!(ADOPTED.load(Relaxed), 1);
        let flag = ProcessFlag::new();
        assert!(!flag.is_raised());
        assert!(flag.raise());
        assert!(!flag.raise() && flag.is_raised());
        assert!(!MadeIn::here().inherited());
    }

    #[test]
    fn a_panic_under_the_lock_does_not_poison_it() {
        let lock = Arc::new(Mutex::new(1));
        let other = lock.clone();
        let _ = std::thread::spawn(move || {
            let _guard = other.lock();
            panic!("while holding the lock");
        })
        .join();
        assert_eq!(*lock.lock(), 1);
    }
}

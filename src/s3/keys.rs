//! The keys of one source, shared by the files of the process that found
//! it, and renewed before they expire.
//!
//! A load is a network call (STS, the container service, IMDS: seconds,
//! tens of them for a slow service), so none runs under a lock that a
//! signing thread waits on: the thread that finds the keys due loads them,
//! with the lock let go; the others sign with the keys in hand while those
//! have not expired, and wait for the load — in slices of [`POLL`],
//! stoppable, to their deadline — only when there are none. Callers that
//! waited for a load that failed get its error rather than each loading
//! again in turn.
//!
//! A child forked from the process has only the thread that forked: the
//! table of shared keys is made anew there, keeping the keys its parent had
//! loaded (keys are not tied to a process) but none of its loads, locks or
//! waiters, so that the child never waits for a load that runs in another
//! process.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant, SystemTime};

use super::answers::due_for_renewal;
use super::chain::source::Source;
use super::credentials::Credentials;
use crate::error::{Error, ErrorKind, Result};
use crate::sync::{Condvar, MadeIn, Mutex, MutexGuard, ProcessLocal};
use crate::wait::{POLL, Stop};

/// How long after a failed renewal keys that are still valid are used
/// without trying again.
const RETRY_RENEWAL_AFTER: Duration = Duration::from_secs(10);

/// The shortest time between two loads: keys that arrive expired (a clock
/// behind the service's) are not loaded again before every request.
const MIN_RELOAD_GAP: Duration = Duration::from_secs(1);

/// Numbers the keys loaded, across every source of the process, so that a
/// number a thread signed with names one set of keys only.
static GENERATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The generation of the keys this thread last signed with: a request
    /// is signed, sent and answered on one thread, so a refusal knows
    /// whether another caller renewed the keys since.
    static SIGNED_WITH: Cell<u64> = const { Cell::new(0) };
}

/// How a source is asked for keys: a network call for all but keys given.
pub(crate) type Load = fn(&Source) -> Result<Credentials>;

/// The keys of one source, loaded once and renewed ahead of their expiry.
pub(crate) struct Keys {
    source: Source,
    /// Asks `source` for keys (the chain's; a test's own in tests).
    load: Load,
    /// In a child forked since these were made, the child's own copy is
    /// used (see the module's documentation).
    made_in: MadeIn,
    state: Mutex<State>,
    /// Notified when a load ends.
    load_ended: Condvar,
}

/// The keys last loaded and the load under way. Held only to look or
/// write, never across a load.
#[derive(Default)]
struct State {
    /// The keys, and when they were loaded.
    keys: Option<(Credentials, SystemTime)>,
    generation: u64,
    loaded_at: Option<Instant>,
    failed_at: Option<Instant>,
    /// The last load's error, while no load succeeded since: for the
    /// callers that waited for it.
    failure: Option<Error>,
    /// Whether a thread loads now. Only a thread of the process that made
    /// the keys loads them (see [`Keys::made_by`]).
    loading: bool,
    /// The loads that ended, so that a waiter knows its load ended.
    loads_ended: u64,
    /// The threads waiting for the load: what the tests order their
    /// threads by.
    waiting: usize,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("from", &self.source.name())
            .finish()
    }
}

impl State {
    /// The keys a caller may sign with now, if any: keys not due for
    /// renewal; keys just loaded (even expired: see [`MIN_RELOAD_GAP`]);
    /// keys due but still valid while a renewal runs or rests after
    /// failing.
    fn usable(&self) -> Option<Credentials> {
        let (keys, at) = self.keys.as_ref()?;
        let now = SystemTime::now();
        let valid = keys.expires.is_none_or(|e| now < e);
        let resting = self
            .failed_at
            .is_some_and(|t| t.elapsed() < RETRY_RENEWAL_AFTER);
        let fresh = self.loaded_at.is_some_and(|t| t.elapsed() < MIN_RELOAD_GAP);
        let usable = !due_for_renewal(*at, keys.expires, now)
            || fresh
            || (valid && (self.loading || resting));
        usable.then(|| keys.clone())
    }

    /// Takes a load's outcome: for the loader, the new keys, or the keys
    /// held if they have not expired, or the error.
    fn took(&mut self, outcome: Result<Credentials>, from: &str) -> Result<Credentials> {
        match outcome {
            Ok(keys) => {
                tracing::debug!(from, expires = ?keys.expires, "AWS credentials loaded");
                self.keys = Some((keys.clone(), SystemTime::now()));
                self.generation = GENERATIONS.fetch_add(1, Relaxed) + 1;
                self.loaded_at = Some(Instant::now());
                (self.failed_at, self.failure) = (None, None);
                SIGNED_WITH.set(self.generation);
                Ok(keys)
            }
            Err(e) => {
                self.failed_at = Some(Instant::now());
                self.failure = Some(e.clone());
                match &self.keys {
                    Some((keys, _)) if keys.expires.is_none_or(|t| SystemTime::now() < t) => {
                        tracing::warn!(error = %e, "renewing AWS credentials failed; the current ones are still valid");
                        SIGNED_WITH.set(self.generation);
                        Ok(keys.clone())
                    }
                    _ => Err(e),
                }
            }
        }
    }
}

/// Ends a load when dropped (a load that panics too): waiters look again.
struct LoadEnds<'a>(&'a Keys);

impl Drop for LoadEnds<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        if std::thread::panicking() {
            // The callers that waited for it get this, as they would the
            // load's own error, rather than each loading again in turn.
            state.failed_at = Some(Instant::now());
            state.failure = Some(Error::new(
                ErrorKind::Credentials,
                format!(
                    "loading AWS credentials from {} failed",
                    self.0.source.name()
                ),
            ));
        }
        state.loading = false;
        state.loads_ended += 1;
        drop(state);
        self.0.load_ended.notify_all();
    }
}

impl Keys {
    /// Keys of `source`, `loaded` already or to be loaded at first use.
    pub fn new(source: Source, loaded: Option<Credentials>, load: Load) -> Keys {
        let state = State {
            generation: GENERATIONS.fetch_add(1, Relaxed) + 1,
            loaded_at: loaded.as_ref().map(|_| Instant::now()),
            keys: loaded.map(|k| (k, SystemTime::now())),
            ..State::default()
        };
        Keys {
            source,
            load,
            made_in: MadeIn::here(),
            state: Mutex::new(state),
            load_ended: Condvar::new(),
        }
    }

    /// A copy for this process (a child forked since these were made): the
    /// keys these hold if they can be had at once, nothing of their loads.
    fn copy_for_here(&self) -> Keys {
        let keys = self
            .state
            .try_lock_until(Instant::now())
            .and_then(|state| state.keys.clone());
        let copy = Keys::new(self.source.clone(), None, self.load);
        copy.state.lock().keys = keys;
        copy
    }

    /// Whether the keys can be renewed (they come from a service).
    pub fn renewable(&self) -> bool {
        !matches!(self.source, Source::Given { .. })
    }

    /// The keys to sign with now: the current ones, renewed first if they
    /// are due and no other thread renews them. Waits for another thread's
    /// load only when no valid keys are in hand, within what `stop` allows.
    pub fn get(self: &Arc<Self>, stop: &Stop) -> Result<Credentials> {
        if let Source::Given { keys, .. } = &self.source {
            return Ok(keys.clone());
        }
        if self.made_in.inherited() {
            return for_this_process(self).get(stop);
        }
        let mut state = self.state.lock();
        let mut waited_for = None;
        loop {
            if let Some(keys) = state.usable() {
                SIGNED_WITH.set(state.generation);
                return Ok(keys);
            }
            if waited_for.is_some_and(|n| n != state.loads_ended) {
                if let Some(e) = &state.failure {
                    return Err(e.clone());
                }
            }
            if !state.loading {
                return self.load(state, stop);
            }
            waited_for.get_or_insert(state.loads_ended);
            state = self.wait(state, stop)?;
        }
    }

    /// Loads keys on a thread of its own, the lock let go meanwhile (see
    /// [`State::took`]), and waits for them in slices of [`POLL`]: a caller
    /// stopped (a cancel, a Ctrl-C) or past `deadline` returns at once
    /// with its own error, and the load goes on for the callers after it
    /// (a service that never answers ends it at the agent's timeout). A
    /// stop is never taken for the load's failure.
    fn load(
        self: &Arc<Self>,
        mut state: MutexGuard<'_, State>,
        stop: &Stop,
    ) -> Result<Credentials> {
        let deadline = stop.deadline();
        state.loading = true;
        drop(state);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let keys = Arc::clone(self);
        let load = move || {
            let _ends = LoadEnds(&keys);
            let outcome = (keys.load)(&keys.source);
            let mut state = keys.state.lock();
            let taken = state.took(outcome, &keys.source.name());
            let generation = state.generation;
            drop(state);
            let _ = tx.send((taken, generation));
        };
        if let Err(e) = std::thread::Builder::new()
            .name("remfile-credentials".into())
            .spawn(load)
        {
            drop(LoadEnds(self));
            return Err(Error::new(
                ErrorKind::Credentials,
                format!("no thread to load AWS credentials on: {e}"),
            ));
        }
        loop {
            match rx.recv_timeout(POLL.min(deadline.saturating_duration_since(Instant::now()))) {
                Ok((taken, generation)) => {
                    if taken.is_ok() {
                        SIGNED_WITH.set(generation);
                    }
                    return taken;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Error::new(
                        ErrorKind::Credentials,
                        format!("loading AWS credentials from {} failed", self.source.name()),
                    ));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    stop.check()?;
                    if Instant::now() >= deadline {
                        return Err(self.not_by_the_deadline());
                    }
                }
            }
        }
    }

    fn not_by_the_deadline(&self) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!(
                "no AWS credentials by the deadline: they are still being loaded from {}",
                self.source.name()
            ),
        )
    }

    /// Waits one slice (at most [`POLL`]) for the load under way to end.
    fn wait<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        stop: &Stop,
    ) -> Result<MutexGuard<'a, State>> {
        let deadline = stop.deadline();
        if Instant::now() >= deadline {
            return Err(self.not_by_the_deadline());
        }
        state.waiting += 1;
        let slice = deadline.min(Instant::now() + POLL);
        let (mut state, _) = self.load_ended.wait_until(state, slice);
        state.waiting -= 1;
        // Asked with no lock held: asking may run a host's code (take an
        // interpreter's lock, run a signal handler that reads).
        drop(state);
        stop.check()?;
        Ok(self.state.lock())
    }

    /// The keys held now, loading none: the values an error's text must
    /// not show. `None` where none are held, or the state stays busy past
    /// [`TABLE_WAIT`](crate::sync::TABLE_WAIT) (its lock is held only to look
    /// or write).
    pub fn held(&self) -> Option<Credentials> {
        if let Source::Given { keys, .. } = &self.source {
            return Some(keys.clone());
        }
        if self.made_in.inherited() {
            return for_this_process(self).held();
        }
        let state = self
            .state
            .try_lock_until(Instant::now() + crate::sync::TABLE_WAIT)?;
        state.keys.as_ref().map(|(keys, _)| keys.clone())
    }

    /// Loads new keys after S3 refused the current ones as expired.
    /// Whether new keys were got.
    /// Keys another caller loaded since this thread signed with the old
    /// ones count, and a load under way is waited for (to `deadline`):
    /// requests refused at once (a file's parallel reads) renew once.
    pub fn renew(self: &Arc<Self>, stop: &Stop) -> bool {
        if !self.renewable() {
            return false;
        }
        if self.made_in.inherited() {
            return for_this_process(self).renew(stop);
        }
        let mut state = self.state.lock();
        let before = state.loads_ended;
        loop {
            let renewed_since = state.keys.is_some() && state.generation != SIGNED_WITH.get();
            if renewed_since || state.loads_ended != before {
                return renewed_since;
            }
            if !state.loading {
                break;
            }
            match self.wait(state, stop) {
                Ok(s) => state = s,
                Err(_) => return false,
            }
        }
        let old = state.keys.as_ref().map(|(k, _)| k.clone());
        match self.load(state, stop) {
            Ok(keys) => old.is_none_or(|old| old != keys),
            Err(e) => {
                tracing::warn!(error = %e, "renewing AWS credentials failed");
                false
            }
        }
    }
}

/// Keys from services, shared by every file of the process that finds the
/// same source: a forked child makes its own copies.
static SHARED: ProcessLocal<Vec<Arc<Keys>>> = ProcessLocal::new(Vec::new(), copies_for_here);

fn copies_for_here(all: &mut Vec<Arc<Keys>>) {
    *all = all.iter().map(|k| Arc::new(k.copy_for_here())).collect();
}

/// Runs `f` on this process's table of shared keys; `None` where the table
/// is held for good (a child forked while another thread held it).
fn with_table<T>(f: impl FnOnce(&mut Vec<Arc<Keys>>) -> T) -> Option<T> {
    SHARED.with(f)
}

/// The shared keys of `source`, made with `loaded` if there are none.
pub(crate) fn shared(source: Source, loaded: Option<Credentials>, load: Load) -> Arc<Keys> {
    shared_or(Arc::new(Keys::new(source, loaded, load)))
}

/// The shared keys of `source`, if this process has them.
pub(crate) fn shared_found(source: &Source) -> Option<Arc<Keys>> {
    with_table(|all| all.iter().find(|k| k.source == *source).cloned()).flatten()
}

/// This process's keys for the source of `keys`, which a process this one
/// was forked from made (a file opened before the fork).
fn for_this_process(keys: &Keys) -> Arc<Keys> {
    shared_or(Arc::new(keys.copy_for_here()))
}

/// The table's keys of the source of `keys`; else `keys`, added.
fn shared_or(keys: Arc<Keys>) -> Arc<Keys> {
    with_table(|all| match all.iter().find(|k| k.source == keys.source) {
        Some(found) => found.clone(),
        None => {
            all.push(keys.clone());
            keys.clone()
        }
    })
    .unwrap_or(keys)
}

#[cfg(test)]
mod tests {
    use super::super::fake::{Gate, Service, in_an_hour, json_keys};
    use super::*;
    use std::sync::mpsc::{Receiver, channel};
    use url::Url;

    fn soon() -> Stop {
        Stop::here().until(Instant::now() + Duration::from_secs(60))
    }

    fn container(service: &Service) -> Source {
        Source::Container {
            url: Url::parse(&service.url("/creds")).unwrap(),
            authorization: None,
            authorization_file: None,
        }
    }

    /// A service that holds every request on `gate`, then gives keys
    /// `new1`, `new2`… or, if `fails`, HTTP 500.
    fn gated(gate: &Arc<Gate>, fails: bool) -> Service {
        let gate = gate.clone();
        Service::new(move |asked| {
            gate.hold();
            match fails {
                true => Some((500, String::new())),
                false => json_keys(&format!("new{}", asked.n), in_an_hour()),
            }
        })
    }

    /// `keys.get` on a thread of its own; its token or error, by channel.
    fn get_elsewhere(keys: &Arc<Keys>) -> Receiver<Result<Option<String>>> {
        let (done, got) = channel();
        let keys = keys.clone();
        std::thread::spawn(move || done.send(keys.get(&soon()).map(|k| k.token)));
        got
    }

    /// Keys with none loaded, and their load held at the gate of a service
    /// (see [`gated`]): the gate, the service, the keys, and the loader's
    /// outcome to come.
    struct HeldLoad {
        gate: Arc<Gate>,
        service: Service,
        keys: Arc<Keys>,
        loader: Receiver<Result<Option<String>>>,
    }

    fn held_load(fails: bool) -> HeldLoad {
        let gate = Gate::new();
        let service = gated(&gate, fails);
        let keys = Arc::new(Keys::new(
            container(&service),
            None,
            super::super::chain::load,
        ));
        let loader = get_elsewhere(&keys);
        gate.arrived();
        HeldLoad {
            gate,
            service,
            keys,
            loader,
        }
    }

    /// Waits until `n` threads wait for the load of `keys`.
    fn until_waiting(keys: &Keys, n: usize) {
        while keys.state.lock().waiting < n {
            std::thread::yield_now();
        }
    }

    #[test]
    fn valid_keys_are_used_while_another_thread_renews_them() {
        let gate = Gate::new();
        let service = gated(&gate, false);
        // Due for renewal (loaded an hour ago, expiring in two minutes),
        // still valid.
        let keys = Arc::new(Keys::new(
            container(&service),
            None,
            super::super::chain::load,
        ));
        let old = Credentials {
            key_id: "ASIAOLD".into(),
            secret: "s".into(),
            token: Some("old".into()),
            expires: Some(SystemTime::now() + Duration::from_secs(120)),
        };
        keys.state.lock().keys = Some((old, SystemTime::now() - Duration::from_secs(3600)));
        let renewer = get_elsewhere(&keys);
        gate.arrived();
        let other = get_elsewhere(&keys).recv_timeout(Duration::from_secs(60));
        gate.open();
        let other = other.expect("waited behind the renewal").unwrap();
        assert_eq!(other.as_deref(), Some("old"));
        assert_eq!(renewer.recv().unwrap().unwrap().as_deref(), Some("new1"));
        assert_eq!(keys.get(&soon()).unwrap().token.as_deref(), Some("new1"));
        assert_eq!(service.asked().len(), 1, "one renewal");
    }

    #[test]
    fn without_valid_keys_callers_wait_for_the_one_load_to_their_deadline() {
        let held = held_load(false);
        let waiter = get_elsewhere(&held.keys);
        until_waiting(&held.keys, 1);
        let e = held
            .keys
            .get(&Stop::here().until(Instant::now()))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
        held.gate.open();
        for got in [held.loader, waiter] {
            assert_eq!(got.recv().unwrap().unwrap().as_deref(), Some("new1"));
        }
        assert_eq!(held.service.asked().len(), 1, "one load");
    }

    #[test]
    fn a_loader_stopped_returns_at_once_and_its_load_goes_on_for_the_next() {
        let gate = Gate::new();
        let service = gated(&gate, false);
        let keys = Arc::new(Keys::new(
            container(&service),
            None,
            super::super::chain::load,
        ));
        let cancel = crate::wait::Cancel::new();
        let (done, got) = channel();
        {
            let (keys, cancel) = (keys.clone(), cancel.clone());
            std::thread::spawn(move || {
                let _ = done.send(cancel.run(|| keys.get(&soon())).map(|k| k.token));
            });
        }
        // The service has the request and never answers while the gate is
        // shut: only the stop ends the caller's wait.
        gate.arrived();
        cancel.cancel();
        let e = got
            .recv_timeout(Duration::from_secs(30))
            .expect("the stopped caller returned while the service kept silent")
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
        // The stop is not the load's failure: the next caller gets the
        // keys that load brings, with no second request.
        gate.open();
        assert_eq!(keys.get(&soon()).unwrap().token.as_deref(), Some("new1"));
        assert_eq!(service.asked().len(), 1);
    }

    #[test]
    fn callers_that_waited_for_a_failed_load_get_its_error() {
        let held = held_load(true);
        let waiters: Vec<_> = (0..3).map(|_| get_elsewhere(&held.keys)).collect();
        until_waiting(&held.keys, 3);
        held.gate.open();
        for got in std::iter::once(held.loader).chain(waiters) {
            let e = got.recv().unwrap().unwrap_err();
            assert!(e.to_string().contains("HTTP 500"), "{e}");
        }
        assert_eq!(held.service.asked().len(), 1, "no waiter loaded again");
    }

    #[test]
    fn keys_made_before_a_fork_are_loaded_by_the_child_itself() {
        let service = Service::new(|asked| json_keys(&format!("child{}", asked.n), in_an_hour()));
        // As a child finds a file's keys that its parent was loading: made
        // by another process, a load under way that no thread here runs.
        let parents = Keys::new(container(&service), None, super::super::chain::load);
        let parents = Arc::new(Keys {
            made_in: MadeIn::elsewhere(),
            ..parents
        });
        parents.state.lock().loading = true;
        let got = parents.get(&soon()).unwrap();
        assert_eq!(got.token.as_deref(), Some("child1"));
        assert!(
            parents.state.lock().keys.is_none(),
            "the parent's are untouched"
        );
        // The child's copy is shared by its files.
        let mine = shared_found(&container(&service)).unwrap();
        assert!(!mine.made_in.inherited());
        assert_eq!(mine.get(&soon()).unwrap().token.as_deref(), Some("child1"));
        assert_eq!(service.asked().len(), 1);
    }

    #[test]
    fn a_renewal_after_a_refusal_waits_for_one_under_way() {
        let held = held_load(false);
        let renewing = held.keys.clone();
        let renewer = std::thread::spawn(move || renewing.renew(&soon()));
        until_waiting(&held.keys, 1);
        held.gate.open();
        let loaded = held.loader.recv().unwrap().unwrap();
        assert_eq!(loaded.as_deref(), Some("new1"));
        assert!(renewer.join().unwrap(), "new keys came");
        assert_eq!(held.service.asked().len(), 1, "renewed once");
    }
}

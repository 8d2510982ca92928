//! Fetch locks: one process fetches a block while the others using the
//! directory wait for it on disk.
//!
//! A lock is a file beside the block, made with exclusive creation. It says
//! who holds it (host, PID namespace, process id), and its holder keeps it
//! fresh by renewing its modification time every [`RENEW_EVERY`] while the
//! fetch runs. A lock not renewed for [`FRESH_FOR`] is stale whoever it
//! names, and one whose time lies in the future is not trusted: a holder
//! that died, on this machine or another, in this PID namespace or
//! another, never makes others wait longer than that. A waiter for a block
//! gives up at three quarters of its read's deadline, then fetches the
//! block itself: a duplicate fetch costs bytes, never correctness.
//!
//! A holder that exited is seen at once where that can be known. Its holder
//! keeps an advisory lock (`flock`) on the file, which the kernel drops when
//! the process ends, however it ends, and says so in the file: a waiter on
//! the same host (in any PID namespace) that can take that lock itself
//! knows the holder is gone. A process id is consulted only when the holder
//! is on this host and in this namespace, where it means something: a
//! process that is gone or has exited (a zombie not yet reaped) holds
//! nothing. Both only let go sooner. A child forked while its parent held a
//! lock shares the parent's advisory lock until it takes a lock of its own
//! or ends: then only the renewal rule applies.
//!
//! On a network filesystem shared by several machines this needs exclusive
//! creation and rename to be atomic (NFSv3 and later, Lustre, GPFS) and the
//! machines' clocks to agree within a second or two. An advisory lock is
//! trusted only between processes of one host (another host's may not be
//! seen on a filesystem mounted without lock support).

use crate::wait::Stop;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use crate::sync::{MadeIn, Mutex, MutexGuard};

use super::private;

/// How often a holder renews its locks.
pub(crate) const RENEW_EVERY: Duration = Duration::from_secs(2);

/// A lock not renewed for this long is stale: three renewals missed.
pub(crate) const FRESH_FOR: Duration = Duration::from_secs(6);

/// A lock with no holder written in it this long after it was made was
/// left by a process killed between making it and writing it.
const GRACE: Duration = Duration::from_secs(2);

/// How far in the future a lock's time may lie (clocks of machines sharing
/// a directory differ a little) before it is not trusted.
const FUTURE_TOLERANCE: Duration = Duration::from_secs(2);

/// No lock file this crate writes is longer.
const MAX_LOCK_LEN: u64 = 4096;

/// Who holds a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    pub host: String,
    /// The PID namespace, where the system names it (Linux).
    pub pid_namespace: Option<String>,
    pub pid: u32,
    /// It holds an advisory lock on the lock file while it lives.
    pub advisory: bool,
}

/// The line of a lock file that says its holder holds an advisory lock on
/// it (files of earlier versions do not have it).
const ADVISORY_LINE: &str = "advisory lock held";

impl Holder {
    /// This process.
    pub(crate) fn me() -> Holder {
        static HOST: OnceLock<(String, Option<String>)> = OnceLock::new();
        let (host, pid_namespace) = HOST.get_or_init(|| {
            let namespace = fs::read_link("/proc/self/ns/pid")
                .ok()
                .map(|p| p.to_string_lossy().into_owned());
            (host_name(), namespace)
        });
        Holder {
            host: host.clone(),
            pid_namespace: pid_namespace.clone(),
            // Asked each time: a forked child is another process.
            pid: crate::sync::this_process(),
            advisory: false,
        }
    }

    fn to_text(&self) -> String {
        format!(
            "remfile fetch lock\nhost {}\npid namespace {}\npid {}\n{}",
            self.host,
            self.pid_namespace.as_deref().unwrap_or("-"),
            self.pid,
            if self.advisory {
                format!("{ADVISORY_LINE}\n")
            } else {
                String::new()
            }
        )
    }

    /// The holder a lock file names; a bare process id (as earlier versions
    /// wrote) names a process on this host, in this namespace.
    pub(crate) fn parse(text: &str) -> Option<Holder> {
        if let Ok(pid) = text.trim().parse() {
            return Some(Holder {
                pid,
                ..Holder::me()
            });
        }
        let mut lines = text.lines();
        if lines.next()? != "remfile fetch lock" {
            return None;
        }
        let host = lines.next()?.strip_prefix("host ")?.to_owned();
        let namespace = lines.next()?.strip_prefix("pid namespace ")?;
        let pid = lines.next()?.strip_prefix("pid ")?.parse().ok()?;
        Some(Holder {
            host,
            pid_namespace: (namespace != "-").then(|| namespace.to_owned()),
            pid,
            advisory: lines.next() == Some(ADVISORY_LINE),
        })
    }

    /// Whether `self` is a process this one can see by its id.
    fn is_visible_to(&self, me: &Holder) -> bool {
        self.host == me.host
            && self.pid_namespace.is_some()
            && self.pid_namespace == me.pid_namespace
    }
}

fn host_name() -> String {
    #[cfg(unix)]
    {
        let uname = rustix::system::uname();
        let name = uname.nodename().to_string_lossy().trim().to_owned();
        if !name.is_empty() && !name.contains('\n') {
            return name;
        }
    }
    "unknown".to_owned()
}

/// Whether a lock last renewed at `renewed`, naming `holder` (if it could be
/// read), is stale at `now` for `me`. `alive` says whether a process id is
/// alive where `me` runs (`None`: it cannot be known); `advisory_free`
/// whether `me` could take the advisory lock on the file (`None`: not
/// tried, or not supported there).
pub(crate) fn is_stale(
    renewed: SystemTime,
    now: SystemTime,
    holder: Option<&Holder>,
    me: &Holder,
    alive: impl Fn(u32) -> Option<bool>,
    advisory_free: Option<bool>,
) -> bool {
    let age = match now.duration_since(renewed) {
        Ok(age) => age,
        // In the future: a clock far off, or a forged time.
        Err(ahead) => return ahead.duration() > FUTURE_TOLERANCE,
    };
    if age > FRESH_FOR {
        return true;
    }
    match holder {
        None => age > GRACE,
        Some(h) if h.advisory && h.host == me.host && advisory_free == Some(true) => true,
        Some(h) if h.is_visible_to(me) => alive(h.pid) == Some(false),
        Some(_) => false,
    }
}

/// Whether process `pid` is alive here, where `/proc` says: a `/proc` of
/// this process's PID namespace (one mounted for another namespace names
/// this process otherwise). A process that has exited but is not yet
/// reaped (a zombie) is not.
fn alive_here(pid: u32) -> Option<bool> {
    let proc = Path::new("/proc");
    let own = fs::read_link(proc.join("self"))
        .is_ok_and(|me| me.as_os_str() == crate::sync::this_process().to_string().as_str());
    if !own {
        return None;
    }
    match fs::read_to_string(proc.join(pid.to_string()).join("stat")) {
        Ok(stat) => Some(!has_exited(&stat)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some(false),
        // There, but unreadable: alive as far as can be told.
        Err(_) => Some(true),
    }
}

/// Whether a process whose `/proc/PID/stat` reads `stat` has exited: its
/// state (the field after the command name, which is in parentheses and
/// may hold anything) is zombie or dead.
fn has_exited(stat: &str) -> bool {
    let state = stat
        .rfind(')')
        .and_then(|end| stat[end + 1..].split_whitespace().next());
    matches!(state, Some("Z" | "X" | "x"))
}

/// Takes the advisory lock on `file` without waiting: whether it did
/// (`None` where advisory locks are not supported).
fn try_advisory(file: &File, exclusive: bool) -> Option<bool> {
    #[cfg(unix)]
    {
        use rustix::fs::FlockOperation::{NonBlockingLockExclusive, NonBlockingLockShared};
        let operation = if exclusive {
            NonBlockingLockExclusive
        } else {
            NonBlockingLockShared
        };
        match rustix::fs::flock(file, operation) {
            Ok(()) => Some(true),
            Err(rustix::io::Errno::WOULDBLOCK) => Some(false),
            Err(_) => None,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (file, exclusive);
        None
    }
}

/// Whether the lock at `path` is held: there, fresh and its holder not
/// known dead.
pub(crate) fn is_held(path: &Path) -> bool {
    judge(path).is_none()
}

/// What is at `path` and not held, as its device and inode (`Some(None)`
/// where they cannot be known, or nothing regular is there); `None` if a
/// lock there is held.
fn judge(path: &Path) -> Option<Option<(u64, u64)>> {
    let Ok(file) = private::open_regular(path, MAX_LOCK_LEN) else {
        return Some(None);
    };
    let Ok(meta) = file.metadata() else {
        return Some(None);
    };
    #[cfg(unix)]
    let inode = {
        use std::os::unix::fs::MetadataExt;
        Some((meta.dev(), meta.ino()))
    };
    #[cfg(not(unix))]
    let inode = None;
    let Ok(renewed) = meta.modified() else {
        return Some(inode);
    };
    let mut text = String::new();
    let read = (&file).take(MAX_LOCK_LEN).read_to_string(&mut text);
    let holder = read.ok().and_then(|_| Holder::parse(&text));
    let me = Holder::me();
    // Asked only where it means something: of a holder on this host other
    // than this process (which lives). A shared lock taken here is let go
    // of when `file` closes.
    let advisory_free = holder
        .as_ref()
        .filter(|h| h.advisory && h.host == me.host)
        .filter(|h| !(h.pid == me.pid && h.pid_namespace == me.pid_namespace))
        .and_then(|_| try_advisory(&file, false));
    is_stale(
        renewed,
        SystemTime::now(),
        holder.as_ref(),
        &me,
        alive_here,
        advisory_free,
    )
    .then_some(inode)
}

/// Makes the lock file at `path` with `make`, which fails if anything is
/// there: whether it made it, false if someone holds the lock there.
/// Whatever is there and not held (a stale lock, a link, a FIFO) is
/// removed, never followed, and `make` tried once more.
fn make_unless_held(path: &Path, mut make: impl FnMut() -> io::Result<()>) -> io::Result<bool> {
    for _ in 0..2 {
        match make() {
            Ok(()) => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let Some(stale) = judge(path) else {
                    return Ok(false);
                };
                // Only the file judged: another process that took the
                // lock over meanwhile made a new one there, which is held
                // (removed, both would fetch the blocks it covers).
                if stale.is_none() || inode_of(path) == stale {
                    let _ = fs::remove_file(path);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// Waits until the lock at `path` is no longer held, or `deadline`: whether
/// it was let go of (false: still held at `deadline`). An error if the work
/// `stop` stops is stopped first (a cancel, a Ctrl-C, a close, the process
/// ending): within a poll, whoever holds the lock.
pub(crate) fn wait_while_held(
    path: &Path,
    deadline: Instant,
    stop: &Stop,
) -> crate::error::Result<bool> {
    let mut pause = Duration::from_millis(1);
    loop {
        if !is_held(path) {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        stop.sleep_until((Instant::now() + pause).min(deadline))?;
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// A held fetch lock, renewed while it lives and deleted when dropped (the
/// blocks written or given up), or when the process exits
/// ([`release_all`]).
///
/// One lock covers the blocks of a fetch: the lock file of the first is
/// made, and those of the others are hard links to it ([`extend`](Self::extend)),
/// which cost no new file (making files is what costs on a busy
/// filesystem), are made atomically or not at all, as exclusive creation
/// is (on NFS too), and share the first's holder, time and advisory lock:
/// renewing it renews them all.
pub(crate) struct FetchLock {
    /// The lock file made; the others link to it.
    path: PathBuf,
    /// Its entry in [`RENEWALS`].
    id: u64,
    /// A child forked with a copy deletes nothing.
    made_in: MadeIn,
}

impl FetchLock {
    /// Takes the lock at `path` if no one holds it (a stale one is taken
    /// over). `Ok(None)`: someone does.
    pub(crate) fn take(path: &Path) -> io::Result<Option<FetchLock>> {
        let mut made = None;
        let taken = make_unless_held(path, || {
            let mut file = private::create_new(path)?;
            // Taken before the holder is written: a file that says so has it.
            let advisory = try_advisory(&file, true) == Some(true);
            let holder = Holder {
                advisory,
                ..Holder::me()
            };
            file.write_all(holder.to_text().as_bytes())
                .inspect_err(|_| {
                    let _ = fs::remove_file(path);
                })?;
            made = Some(file);
            Ok(())
        })?;
        Ok(made.filter(|_| taken).map(|file| FetchLock {
            path: path.to_path_buf(),
            id: RENEWALS.add(path.to_path_buf(), file),
            made_in: MadeIn::here(),
        }))
    }

    /// Extends this lock to the lock file at `path`, if no one holds that
    /// (a stale one is taken over): whether it now covers it. An error if
    /// the filesystem cannot link (a lock of its own is then needed).
    pub(crate) fn extend(&mut self, path: &Path) -> io::Result<bool> {
        let linked = make_unless_held(path, || fs::hard_link(&self.path, path))?;
        if linked {
            RENEWALS.link(self.id, path.to_path_buf());
        }
        Ok(linked)
    }
}

impl Drop for FetchLock {
    fn drop(&mut self) {
        if self.made_in.inherited() {
            return;
        }
        if let Some(held) = RENEWALS.remove(self.id) {
            held.remove_files();
        }
    }
}

/// Deletes the lock files this process holds, for a process that ends
/// (the fetches they cover will not finish): other processes, on other
/// hosts too, fetch those blocks at once. Gives up at `deadline` if the
/// table of locks cannot be had (a thread holding it at a fork).
pub(crate) fn release_all(deadline: Instant) {
    let Some(mut state) = RENEWALS.state.try_lock_until(deadline) else {
        return;
    };
    let mine: Vec<u64> = state
        .held
        .iter()
        .filter(|(_, h)| !h.made_in.inherited())
        .map(|(&id, _)| id)
        .collect();
    let released: Vec<Held> = mine
        .into_iter()
        .filter_map(|id| state.held.remove(&id))
        .collect();
    drop(state);
    for held in released {
        held.remove_files();
    }
}

/// One lock as this process holds it.
struct Held {
    /// A forked child finds its parent's.
    made_in: MadeIn,
    /// The lock file, open: it carries the advisory lock, and renewing it
    /// through this never touches a file someone else made at its path.
    file: Arc<File>,
    /// Its path, and the links to it.
    paths: Vec<PathBuf>,
    /// Its device and inode, to tell it from a file made at its path by a
    /// process that took a stale lock over.
    inode: Option<(u64, u64)>,
}

impl Held {
    /// Deletes its files that are still this lock.
    fn remove_files(&self) {
        for path in &self.paths {
            if self.is_at(path) {
                let _ = fs::remove_file(path);
            }
        }
    }

    fn is_at(&self, path: &Path) -> bool {
        match (self.inode, inode_of(path)) {
            (Some(mine), Some(there)) => mine == there,
            // Not known: as earlier versions did, deleted.
            (None, _) => true,
            (_, None) => false,
        }
    }
}

/// The device and inode of the file at `path` (not followed).
fn inode_of(path: &Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// How long a fetch waits for the table of locks held: it is held only to
/// look up, insert or remove, so this is reached only in a child forked
/// while another thread held it (which never lets go there). A lock not in
/// the table is neither renewed nor deleted by its holder: others take it
/// over as stale, which costs a duplicate fetch, never correctness.
const TABLE_WAIT: Duration = Duration::from_millis(500);

/// The id of a lock left out of the table (see [`TABLE_WAIT`]); ids count
/// up from 0 and never reach it.
const NOT_HELD: u64 = u64::MAX;

/// The locks this process holds, renewed by one thread while there are any.
struct Renewals {
    state: Mutex<RenewalState>,
}

struct RenewalState {
    held: BTreeMap<u64, Held>,
    next_id: u64,
    /// The process whose thread renews: a child forked from it has none.
    thread_of: Option<MadeIn>,
}

static RENEWALS: Renewals = Renewals {
    state: Mutex::new(RenewalState {
        held: BTreeMap::new(),
        next_id: 0,
        thread_of: None,
    }),
};

impl Renewals {
    fn add(&'static self, path: PathBuf, file: File) -> u64 {
        #[cfg(unix)]
        let inode = {
            use std::os::unix::fs::MetadataExt;
            file.metadata().ok().map(|m| (m.dev(), m.ino()))
        };
        #[cfg(not(unix))]
        let inode = None;
        let held = Held {
            made_in: MadeIn::here(),
            file: Arc::new(file),
            paths: vec![path],
            inode,
        };
        let Some(mut state) = self.table() else {
            return NOT_HELD;
        };
        let id = state.next_id;
        state.next_id += 1;
        if state.thread_of.is_some_and(MadeIn::inherited) {
            // Forked since: the parent's locks are the parent's to renew
            // (and its advisory locks shared through them let go of here).
            state.held.clear();
        }
        state.held.insert(id, held);
        let start_thread = state.thread_of.is_none_or(MadeIn::inherited);
        if start_thread {
            state.thread_of = Some(MadeIn::here());
        }
        // The thread is started without the table's lock, which it takes.
        drop(state);
        if start_thread {
            let spawned = std::thread::Builder::new()
                .name("remfile-lock-renewal".into())
                .spawn(move || self.run());
            if spawned.is_err() {
                // Without the thread, a fetch longer than a lock stays fresh
                // may be done twice: bytes, never correctness.
                if let Some(mut state) = self.table() {
                    state.thread_of = None;
                }
            }
        }
        id
    }

    /// The table, if it can be had within [`TABLE_WAIT`].
    fn table(&self) -> Option<MutexGuard<'_, RenewalState>> {
        self.state.try_lock_until(Instant::now() + TABLE_WAIT)
    }

    fn link(&self, id: u64, path: PathBuf) {
        let Some(mut state) = self.table() else {
            return;
        };
        if let Some(held) = state.held.get_mut(&id) {
            held.paths.push(path);
        }
    }

    fn remove(&self, id: u64) -> Option<Held> {
        self.table()?.held.remove(&id)
    }

    fn run(&self) {
        loop {
            let started = Instant::now();
            std::thread::sleep(RENEW_EVERY);
            let held: Vec<Arc<File>> = {
                let Some(mut state) = self.table() else {
                    continue;
                };
                if state.held.is_empty() {
                    state.thread_of = None;
                    return;
                }
                state.held.values().map(|h| Arc::clone(&h.file)).collect()
            };
            for file in held {
                let _ = file.set_modified(SystemTime::now());
            }
            tracing::trace!(elapsed = ?started.elapsed(), "fetch locks renewed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(host: &str, ns: Option<&str>, pid: u32) -> Holder {
        Holder {
            host: host.into(),
            pid_namespace: ns.map(Into::into),
            pid,
            advisory: false,
        }
    }

    #[test]
    fn a_table_of_locks_held_for_good_leaves_a_lock_out_rather_than_wait() {
        // As in a child forked while a thread of the parent held the table.
        let table = RENEWALS.state.lock();
        let path = std::env::temp_dir().join(format!(
            "remfile-table-{}.lock",
            crate::sync::this_process()
        ));
        let file = File::create(&path).unwrap();
        let (done, added) = std::sync::mpsc::channel();
        let adding = path.clone();
        std::thread::spawn(move || done.send(RENEWALS.add(adding, file)));
        let id = added
            .recv_timeout(Duration::from_secs(20))
            .expect("waited for the table for ever");
        drop(table);
        assert_eq!(id, NOT_HELD);
        assert!(RENEWALS.remove(NOT_HELD).is_none());
        let _ = fs::remove_file(&path);
    }

    #[test]
    fn a_held_lock_is_renewed_until_dropped() {
        let dir =
            std::env::temp_dir().join(format!("remfile-lock-{}", crate::sync::this_process()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("0.lock");
        let lock = FetchLock::take(&path).unwrap().expect("no one holds it");
        assert!(is_held(&path));
        assert!(
            FetchLock::take(&path).unwrap().is_none(),
            "held, even by this process"
        );
        let long_ago = SystemTime::now() - FRESH_FOR * 2;
        fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        // Renewed by the thread within a renewal period (a busy machine
        // may take longer; the lock would be stale forever otherwise).
        remfile_testkit::time::wait_for(RENEW_EVERY * 5, || is_held(&path));
        assert!(is_held(&path), "renewed while held");
        drop(lock);
        assert!(!path.exists());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn one_lock_covers_many_blocks_through_links() {
        let dir = std::env::temp_dir().join(format!(
            "remfile-lock-links-{}",
            crate::sync::this_process()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let at = |i: u32| dir.join(format!("{i}.lock"));
        // Block 2 is another's.
        let theirs = FetchLock::take(&at(2)).unwrap().unwrap();
        let mut mine = FetchLock::take(&at(0)).unwrap().unwrap();
        assert!(mine.extend(&at(1)).unwrap());
        assert!(!mine.extend(&at(2)).unwrap(), "held by another");
        assert!(mine.extend(&at(3)).unwrap());
        for i in [1, 3] {
            assert!(is_held(&at(i)));
            assert!(FetchLock::take(&at(i)).unwrap().is_none());
        }
        // Renewing the first renews them all: they are one file.
        use std::os::unix::fs::MetadataExt;
        let inode = |i| fs::metadata(at(i)).unwrap().ino();
        assert_eq!(inode(0), inode(3));
        assert_ne!(inode(0), inode(2));
        drop(mine);
        assert!(![0, 1, 3].iter().any(|&i| at(i).exists()));
        assert!(at(2).exists(), "another's lock stays");
        drop(theirs);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_lock_says_who_holds_it() {
        let me = holder("node-1", Some("pid:[4026531836]"), 42);
        assert_eq!(Holder::parse(&me.to_text()), Some(me));
        let no_ns = holder("node-1", None, 7);
        assert_eq!(Holder::parse(&no_ns.to_text()), Some(no_ns));
        let advisory = Holder {
            advisory: true,
            ..holder("node-1", None, 8)
        };
        assert_eq!(Holder::parse(&advisory.to_text()), Some(advisory));
        assert_eq!(
            Holder::parse("12\n").unwrap().pid,
            12,
            "an earlier version's"
        );
        assert_eq!(Holder::parse(""), None);
        assert_eq!(Holder::parse("remfile fetch lock\nhost x\n"), None);
    }

    #[test]
    fn a_lock_is_stale_when_not_renewed_from_the_future_or_its_holder_dead() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let me = holder("a", Some("ns1"), 1);
        let s = |ago: i64, h: Option<&Holder>, alive: Option<bool>| {
            let renewed = if ago >= 0 {
                now - Duration::from_secs(ago as u64)
            } else {
                now + Duration::from_secs((-ago) as u64)
            };
            is_stale(renewed, now, h, &me, |_| alive, None)
        };
        let here = holder("a", Some("ns1"), 99);
        let elsewhere = holder("b", Some("ns1"), 99);
        let other_ns = holder("a", Some("ns2"), 99);
        // Fresh and alive, or unknowable: held.
        assert!(!s(1, Some(&here), Some(true)));
        assert!(
            !s(1, Some(&elsewhere), Some(false)),
            "its pid means nothing here"
        );
        assert!(
            !s(1, Some(&other_ns), Some(false)),
            "nor in another namespace"
        );
        assert!(!s(1, Some(&here), None));
        // Dead where that can be known: stale at once.
        assert!(s(1, Some(&here), Some(false)));
        // Not renewed: stale whoever it names.
        assert!(s(7, Some(&here), Some(true)));
        assert!(s(7, Some(&elsewhere), None));
        // From the future beyond the clocks' tolerance: not trusted.
        assert!(s(-3600, Some(&here), Some(true)));
        assert!(!s(-1, Some(&here), Some(true)));
        // No holder yet: a moment's grace.
        assert!(!s(1, None, None));
        assert!(s(3, None, None));
    }

    #[test]
    fn a_free_advisory_lock_means_its_holder_on_this_host_is_gone() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let me = holder("a", Some("ns1"), 1);
        let with = |h: Holder| Holder {
            advisory: true,
            ..h
        };
        let s = |h: &Holder, free| is_stale(now, now, Some(h), &me, |_| Some(true), free);
        // In another PID namespace of this host: its process id says
        // nothing, its advisory lock does.
        let other_ns = with(holder("a", Some("ns2"), 99));
        assert!(s(&other_ns, Some(true)));
        assert!(!s(&other_ns, Some(false)), "still held");
        assert!(!s(&other_ns, None), "not known");
        // Another host's advisory lock may not be seen from here.
        assert!(!s(&with(holder("b", Some("ns1"), 99)), Some(true)));
        // A holder that took none (an earlier version) is not judged by it.
        assert!(!s(&holder("a", Some("ns2"), 99), Some(true)));
    }

    #[test]
    fn a_process_that_exited_is_not_alive() {
        assert!(!has_exited("4242 (remfile) S 1 4242 4242 0 -1"));
        assert!(!has_exited("4242 (remfile) R 1"));
        assert!(has_exited("4242 (remfile) Z 1 4242"));
        assert!(
            has_exited("4242 (a) Z (b) R) X 1"),
            "a name with parentheses"
        );
        assert!(
            !has_exited("4242 (a) Z (b) S 1"),
            "the last parenthesis counts"
        );
        assert!(!has_exited(""));
        assert_eq!(alive_here(crate::sync::this_process()), Some(true));
    }

    /// The holder of [`a_lock_whose_holder_was_killed_is_not_held`], run as
    /// a child process: takes the lock at `path`, says so, waits to be
    /// killed.
    fn holding_child(path: &str) {
        let _lock = FetchLock::take(Path::new(path)).unwrap().unwrap();
        println!("held");
        // Until killed: a child that reads its standard input, which the
        // test never closes.
        let _ = std::io::Read::read(&mut std::io::stdin(), &mut [0]);
    }

    #[test]
    fn a_lock_whose_holder_was_killed_is_not_held() {
        if let Ok(path) = std::env::var("REMFILE_LOCK_HOLDER") {
            return holding_child(&path);
        }
        let dir = std::env::temp_dir().join(format!(
            "remfile-lock-killed-{}",
            crate::sync::this_process()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("0.lock");
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "disk::lock::tests::a_lock_whose_holder_was_killed_is_not_held",
                "--exact",
                "--nocapture",
            ])
            .env("REMFILE_LOCK_HOLDER", &path)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("held") {
            line.clear();
            assert!(
                std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0,
                "the child ended"
            );
        }
        assert!(is_held(&path), "its holder lives");
        // Killed, and not reaped yet: its process id is still in /proc.
        child.kill().unwrap();
        let stat = format!("/proc/{}/stat", child.id());
        remfile_testkit::time::eventually("the child exited", Duration::from_secs(30), || {
            fs::read_to_string(&stat).is_ok_and(|s| has_exited(&s))
        });
        // As fresh as a lock can be: only its holder's end can free it.
        fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(SystemTime::now())
            .unwrap();
        assert!(!is_held(&path), "its holder is gone");
        child.wait().unwrap();
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_lock_taken_by_another_namespace_is_held_while_its_advisory_lock_is() {
        let dir = std::env::temp_dir().join(format!(
            "remfile-lock-advisory-{}",
            crate::sync::this_process()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("0.lock");
        // As a process of another PID namespace of this host writes it.
        let other = Holder {
            pid_namespace: Some("pid:[1]".into()),
            pid: 1,
            advisory: true,
            ..Holder::me()
        };
        fs::write(&path, other.to_text()).unwrap();
        let file = File::open(&path).unwrap();
        assert_eq!(try_advisory(&file, true), Some(true));
        assert!(is_held(&path), "its advisory lock is held");
        drop(file);
        assert!(!is_held(&path), "let go of: its holder ended");
        // A lock of this process: held.
        let _ = fs::remove_file(&path);
        let mine = FetchLock::take(&path).unwrap().unwrap();
        assert!(fs::read_to_string(&path).unwrap().contains(ADVISORY_LINE));
        assert!(is_held(&path));
        drop(mine);
        let _ = fs::remove_dir_all(&dir);
    }
}

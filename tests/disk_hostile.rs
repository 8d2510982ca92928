//! The disk cache in a directory others touch: each test is an attack on it
//! (links planted where the cache will write, a block directory replaced by
//! a link, a FIFO at a block path, a directory anyone can write, a lock that
//! lies). Nothing outside the cache is written or deleted, no read hangs,
//! and every byte read is right.
#![cfg(unix)]

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use remfile::{DiskCache, RemoteFile};
use remfile_testkit::{RangeServer, TempDir, builder, test_data};

const BLOCK: u64 = 64 * 1024;

fn temp_dir(name: &str) -> TempDir {
    TempDir::new(&format!("hostile-{name}"))
}

fn open(server: &RangeServer, dir: &Path, capacity: u64) -> RemoteFile {
    builder()
        .block_size(BLOCK)
        .disk_cache(DiskCache::open(dir, capacity).unwrap())
        .open(server.url("/f"))
        .unwrap()
}

/// The whole file, read on a thread of its own: a read that hangs fails the
/// test instead of stalling it.
fn read_all_within(file: RemoteFile, limit: Duration) -> Vec<u8> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = vec![0; file.len() as usize];
        let read = file.read_exact_at(0, &mut buf).map(|()| buf);
        // Dropped first: its blocks are on disk when the read is answered.
        drop(file);
        let _ = tx.send(read);
    });
    rx.recv_timeout(limit)
        .expect("the read hung")
        .expect("the read failed")
}

/// Every path under `dir`, links and FIFOs included, never followed.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(e.path());
        if e.file_type().unwrap().is_dir() {
            out.extend(entries(&e.path()));
        }
    }
    out
}

/// Someone's files outside the cache, each with its own contents.
fn victims(dir: &Path, n: usize) -> Vec<(PathBuf, Vec<u8>)> {
    fs::create_dir_all(dir).unwrap();
    (0..n)
        .map(|i| {
            let p = dir.join(format!("precious-{i}"));
            let bytes = format!("someone's file {i}\n").into_bytes();
            fs::write(&p, &bytes).unwrap();
            (p, bytes)
        })
        .collect()
}

fn assert_untouched(victims: &[(PathBuf, Vec<u8>)]) {
    for (p, bytes) in victims {
        assert_eq!(
            &fs::read(p).expect("a file outside the cache was deleted"),
            bytes,
            "{p:?} was written"
        );
    }
}

/// A file of `blocks` blocks of test data (from `seed`), served, and read
/// once cold through a disk cache in a directory of its own.
struct Cached {
    data: Vec<u8>,
    server: RangeServer,
    dir: TempDir,
    /// The file's block directory.
    files: PathBuf,
}

fn cached(name: &str, blocks: usize, seed: u64) -> Cached {
    let data = test_data(blocks * BLOCK as usize, seed);
    let server = RangeServer::new(data.clone());
    let dir = temp_dir(name);
    let files = cache_once(&server, &dir, &data);
    Cached {
        data,
        server,
        dir,
        files,
    }
}

/// A cold read through `dir`, so that the block, lock and record names
/// exist to be attacked: the file's block directory.
fn cache_once(server: &RangeServer, dir: &Path, data: &[u8]) -> PathBuf {
    assert_eq!(
        read_all_within(open(server, dir, 64 << 20), Duration::from_secs(30)),
        data
    );
    let blocks: Vec<_> = entries(&dir.join("blocks"))
        .into_iter()
        .filter(|p| p.is_file())
        .collect();
    assert!(!blocks.is_empty());
    blocks[0].parent().unwrap().to_path_buf()
}

#[test]
fn what_the_cache_writes_is_private_to_the_user() {
    let Cached { dir, .. } = cached("private", 5, 81);
    let all = entries(&dir);
    assert!(all.len() > 8, "{all:?}");
    for p in std::iter::once(dir.to_path_buf()).chain(all) {
        let mode = fs::symlink_metadata(&p).unwrap().permissions().mode() & 0o777;
        let want = if p.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode, want, "{p:?} is {mode:o}");
    }
}

#[test]
fn a_directory_other_users_can_write_is_refused() {
    let dir = temp_dir("writable");
    for mode in [0o777, 0o1777, 0o770] {
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();
        let e = DiskCache::open(&dir, 1 << 20).unwrap_err();
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::PermissionDenied,
            "{mode:o}: {e}"
        );
        assert!(e.to_string().contains(&dir.display().to_string()), "{e}");
    }
    // A part of it others can write is refused too.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    DiskCache::open(&dir, 1 << 20).unwrap();
    fs::set_permissions(dir.join("blocks"), fs::Permissions::from_mode(0o777)).unwrap();
    let e = DiskCache::open(&dir, 1 << 20).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
}

#[test]
fn links_planted_where_the_cache_writes_are_replaced_never_followed() {
    let Cached {
        data,
        server,
        dir,
        files,
    } = cached("links", 6, 82);
    let outside = temp_dir("links-victims");
    let targets = victims(&outside, 64);
    let mut next = targets.iter().cycle();
    let mut plant = |at: PathBuf| {
        let _ = fs::remove_file(&at);
        symlink(&next.next().unwrap().0, &at).unwrap();
    };
    // Every block, its lock, the file's version record, and the names an
    // earlier version gave the next temporary files, each a link to
    // someone's file.
    for block in entries(&files) {
        plant(block.with_extension("lock"));
        plant(block);
    }
    for record in entries(&dir.join("files")) {
        plant(record);
    }
    // (Numbered by a count shared by the whole process: all of them.)
    for n in 0..4096 {
        plant(
            dir.join("tmp")
                .join(format!("{}-{n}.tmp", std::process::id())),
        );
    }
    // A warm open and a whole read: the bytes are right, every link is
    // replaced by the cache's own file, nothing outside is written.
    assert_eq!(
        read_all_within(open(&server, &dir, 64 << 20), Duration::from_secs(30)),
        data
    );
    assert_untouched(&targets);
    // And read once more, now from the blocks the cache wrote.
    let requests_before = server.requests();
    assert_eq!(
        read_all_within(open(&server, &dir, 64 << 20), Duration::from_secs(30)),
        data
    );
    assert!(server.requests() - requests_before <= 1, "read from disk");
    assert_untouched(&targets);
}

#[test]
fn a_block_directory_replaced_by_a_link_is_neither_scanned_nor_evicted_into() {
    let Cached {
        data,
        server,
        dir,
        files,
    } = cached("evict", 8, 83);
    let outside = temp_dir("evict-victims");
    // Someone's files, named and aged as the least recently used blocks
    // would be, behind a link that stands where a file's blocks would.
    let targets = victims(&outside, 16);
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    for (i, (p, _)) in targets.iter().enumerate() {
        let as_block = outside.join(format!("{BLOCK}-{i}"));
        fs::rename(p, &as_block).unwrap();
        fs::File::options()
            .write(true)
            .open(&as_block)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
    }
    let targets: Vec<_> = targets
        .into_iter()
        .enumerate()
        .map(|(i, (_, bytes))| (outside.join(format!("{BLOCK}-{i}")), bytes))
        .collect();
    symlink(&outside, dir.join("blocks").join("ffffffffffffffff")).unwrap();
    // And the read file's own block directory replaced by a link too.
    fs::remove_dir_all(&files).unwrap();
    symlink(&outside, &files).unwrap();
    // A cache too small for what is read evicts as it goes: through a
    // link, it would delete someone's files first.
    let small = 3 * BLOCK;
    assert_eq!(
        read_all_within(open(&server, &dir, small), Duration::from_secs(30)),
        data
    );
    let other = RangeServer::new(test_data(8 * BLOCK as usize, 84));
    let file = builder()
        .block_size(BLOCK)
        .disk_cache(DiskCache::open(&dir, small).unwrap())
        .open(other.url("/g"))
        .unwrap();
    read_all_within(file, Duration::from_secs(30));
    assert!(
        DiskCache::open(&dir, small).unwrap().size_on_disk() <= small + 2 * BLOCK,
        "evicted"
    );
    assert_untouched(&targets);
    assert_eq!(
        fs::read_dir(&outside).unwrap().count(),
        targets.len(),
        "nothing added outside"
    );
}

#[test]
fn a_fifo_at_a_block_path_or_a_lock_path_is_no_hang() {
    let Cached {
        data,
        server,
        dir,
        files,
    } = cached("fifo", 4, 85);
    for block in entries(&files) {
        fs::remove_file(&block).unwrap();
        for at in [block.clone(), block.with_extension("lock")] {
            let made = std::process::Command::new("mkfifo")
                .arg(&at)
                .status()
                .unwrap();
            assert!(made.success());
        }
    }
    let file = open(&server, &dir, 64 << 20);
    assert_eq!(read_all_within(file.clone(), Duration::from_secs(30)), data);
    // A FIFO is no one's lock: taken over, never waited for.
    assert_eq!(file.stats().disk_waits, 0);
}

/// A lock at block 2's lock path naming `pid` on this host, last renewed at
/// `renewed`.
fn forge_lock(files: &Path, pid: u32, renewed: SystemTime) -> PathBuf {
    let block = entries(files)
        .into_iter()
        .find(|p| p.file_name().unwrap().to_str().unwrap().ends_with("-2"))
        .unwrap();
    fs::remove_file(&block).unwrap();
    let lock = block.with_extension("lock");
    let host = fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let ns = fs::read_link("/proc/self/ns/pid")
        .map(|p| p.display().to_string())
        .unwrap_or("-".into());
    fs::write(
        &lock,
        format!(
            "remfile fetch lock\nhost {}\npid namespace {ns}\npid {pid}\n",
            host.trim()
        ),
    )
    .unwrap();
    fs::File::options()
        .write(true)
        .open(&lock)
        .unwrap()
        .set_modified(renewed)
        .unwrap();
    lock
}

#[test]
fn a_lock_from_the_future_is_not_trusted() {
    let Cached {
        data,
        server,
        dir,
        files,
    } = cached("future", 4, 86);
    // Process 1 is always alive; the time is an hour ahead.
    forge_lock(&files, 1, SystemTime::now() + Duration::from_secs(3600));
    let file = open(&server, &dir, 64 << 20);
    let mut buf = vec![0; 10];
    file.read_exact_at(2 * BLOCK, &mut buf).unwrap();
    assert_eq!(buf, data[2 * BLOCK as usize..][..10]);
    // Taken over at once, never waited for.
    assert_eq!(file.stats().disk_waits, 0);
}

#[test]
fn a_lock_no_one_renews_delays_a_read_a_few_seconds_at_most() {
    let Cached {
        data,
        server,
        dir,
        files,
    } = cached("unrenewed", 4, 87);
    // Alive, fresh, but never renewed (a holder stopped, or on a machine
    // whose process id means nothing here).
    forge_lock(&files, 1, SystemTime::now());
    let started = Instant::now();
    // A read timeout long enough that a lock trusted for good would be
    // waited for to three quarters of it (90 s): the watchdog fails that.
    let file = builder()
        .block_size(BLOCK)
        .read_timeout(Duration::from_secs(120))
        .disk_cache(DiskCache::open(&dir, 64 << 20).unwrap())
        .open(server.url("/f"))
        .unwrap();
    assert_eq!(read_all_within(file.clone(), Duration::from_secs(15)), data);
    assert_eq!(file.stats().disk_waits, 1, "it waited for a fresh lock");
    // Fresh for 6 s from its forging: no sooner taken over.
    assert!(started.elapsed() > Duration::from_secs(3));
}

#[test]
fn a_cache_below_a_directory_another_user_could_change_is_refused() {
    let dir = temp_dir("above");
    fs::create_dir_all(&dir).unwrap();
    // Another user's directory, and the user's own directory inside it:
    // that user can rename either and put a link in the cache's place.
    let theirs = dir.join("theirs");
    fs::create_dir(&theirs).unwrap();
    fs::set_permissions(&theirs, fs::Permissions::from_mode(0o755)).unwrap();
    if let Err(e) = std::os::unix::fs::chown(&theirs, Some(12345), Some(12345)) {
        eprintln!("SKIPPED: cannot give a directory to another user here: {e}");
        return;
    }
    for cache in [theirs.join("cache"), theirs.join("mine/deeper/cache")] {
        let e = DiskCache::open(&cache, 1 << 20).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        let says = e.to_string();
        assert!(says.contains("another user (uid 12345)"), "{says}");
        assert!(says.contains(&theirs.display().to_string()), "{says}");
    }
    // A directory its group can write, unless sticky.
    let group = dir.join("group");
    fs::create_dir(&group).unwrap();
    fs::set_permissions(&group, fs::Permissions::from_mode(0o770)).unwrap();
    let e = DiskCache::open(group.join("cache"), 1 << 20).unwrap_err();
    assert!(e.to_string().contains("its group"), "{e}");
    fs::set_permissions(&group, fs::Permissions::from_mode(0o1770)).unwrap();
    DiskCache::open(group.join("cache"), 1 << 20).unwrap();
}

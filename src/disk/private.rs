//! The filesystem as the disk cache uses it: everything it makes is the
//! user's alone (directories 0700, files 0600), it trusts no directory
//! another user could write, it never follows a link it finds, and it reads
//! only regular files of a bounded length, so that nothing planted in the
//! directory — a symlink, a FIFO, a huge file — can make it write, delete or
//! wait outside the cache.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// Makes directory `path` (not its parents) private to the user if it does
/// not exist, then checks that it is: see [`check_dir`]. A directory this
/// crate made earlier with wider permissions is narrowed to the user.
pub(crate) fn make_dir(path: &Path) -> io::Result<()> {
    if let Err(e) = dir_builder().create(path) {
        if e.kind() != io::ErrorKind::AlreadyExists {
            return Err(e);
        }
    }
    check_dir(path, Follow::No)?;
    narrow(path)
}

/// Makes the cache's top directory `path`, with its parents, if it does not
/// exist, then checks it: the user named it, so a link to it is followed.
/// A link to it must be the user's (or root's), and the directories above
/// it (as its path resolves) must be safe as ssh's `StrictModes` has it
/// (see [`check_parent`]): whoever could rename an entry of one of them
/// could put a directory of their own, or a link to the user's files, in
/// the cache's place, and eviction would then delete files there that look
/// like blocks.
pub(crate) fn make_top_dir(path: &Path) -> io::Result<()> {
    check_link(path)?;
    if !path.exists() {
        let mut builder = dir_builder();
        builder.recursive(true);
        builder.create(path)?;
    }
    check_dir(path, Follow::Yes)?;
    let real = fs::canonicalize(path)?;
    for parent in real.ancestors().skip(1) {
        check_parent(parent)?;
    }
    Ok(())
}

/// Checks a directory above the cache: it belongs to the user or to root,
/// and neither its group nor others can write it unless it is sticky (as
/// `/tmp` is: there no one but an entry's owner, the directory's owner and
/// root can rename or delete it). Anyone else who could write it could
/// replace the cache's directory.
#[cfg(unix)]
fn check_parent(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(path)?;
    match parent_verdict(meta.uid(), meta.mode(), current_user()) {
        None => Ok(()),
        Some(why) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "disk cache directory: the directory {} above it {why}: refused, as \
                 they could put a directory of their own, or a link, in the cache's place",
                path.display(),
            ),
        )),
    }
}

/// Why a directory above the cache, owned by `uid` with `mode`, is unsafe
/// for user `me` (`None`: it is safe).
#[cfg(unix)]
fn parent_verdict(uid: u32, mode: u32, me: u32) -> Option<String> {
    if uid != me && uid != 0 {
        return Some(format!("belongs to another user (uid {uid})"));
    }
    let sticky = mode & 0o1000 != 0;
    match (mode & 0o020 != 0, mode & 0o002 != 0) {
        _ if sticky => None,
        (_, true) => Some("can be written by anyone and is not sticky".into()),
        (true, false) => Some("can be written by its group and is not sticky".into()),
        (false, false) => None,
    }
}

#[cfg(not(unix))]
fn check_parent(_path: &Path) -> io::Result<()> {
    Ok(())
}

/// Refuses `path` if it is a link another user made (they could point it
/// elsewhere later; the cache keeps the path it resolved to at open).
#[cfg(unix)]
fn check_link(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            if meta.uid() != current_user() && meta.uid() != 0 {
                return Err(refused(path, "is a link another user made"));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(not(unix))]
fn check_link(_path: &Path) -> io::Result<()> {
    Ok(())
}

/// Whether the last component of a path may be a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Follow {
    Yes,
    No,
}

/// Checks that `path` is a directory no other user can write: owned by this
/// user (or by root, which is trusted anyway) and writable by neither its
/// group nor others. With [`Follow::No`] a link is refused.
pub(crate) fn check_dir(path: &Path, follow: Follow) -> io::Result<()> {
    let meta = match follow {
        Follow::Yes => fs::metadata(path)?,
        Follow::No => fs::symlink_metadata(path)?,
    };
    if meta.file_type().is_symlink() {
        return Err(refused(path, "is a symbolic link"));
    }
    if !meta.is_dir() {
        return Err(refused(path, "is not a directory"));
    }
    owned_by_user_alone(path, &meta)
}

#[cfg(unix)]
fn owned_by_user_alone(path: &Path, meta: &fs::Metadata) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let me = current_user();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(refused(path, "belongs to another user"));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(refused(
            path,
            "can be written by other users (group or world writable)",
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn owned_by_user_alone(_path: &Path, _meta: &fs::Metadata) -> io::Result<()> {
    Ok(())
}

/// The effective user id of this process.
#[cfg(unix)]
pub(crate) fn current_user() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn refused(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "disk cache directory {} {why}: refused, as another user could \
             plant or read blocks there",
            path.display()
        ),
    )
}

/// Narrows a directory this crate made (owned by the user) to the user.
fn narrow(path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let meta = fs::symlink_metadata(path)?;
        if meta.uid() == current_user() && meta.mode() & 0o077 != 0 {
            fs::set_permissions(path, fs::Permissions::from_mode(0o700))?;
        }
    }
    let _ = path;
    Ok(())
}

fn dir_builder() -> fs::DirBuilder {
    #[allow(unused_mut)]
    let mut builder = fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
}

/// Open options that never follow a link in the last component, never
/// block on a FIFO or a device, and make files private to the user.
fn options() -> fs::OpenOptions {
    #[allow(unused_mut)]
    let mut options = fs::OpenOptions::new();
    #[cfg(unix)]
    {
        use rustix::fs::OFlags;
        use std::os::unix::fs::OpenOptionsExt;
        let flags = (OFlags::NOFOLLOW | OFlags::NONBLOCK).bits();
        options.mode(0o600).custom_flags(flags as i32);
    }
    options
}

/// Opens `path` for reading if it is a regular file (not a link, a FIFO, a
/// device) of at most `max_len` bytes.
pub(crate) fn open_regular(path: &Path, max_len: u64) -> io::Result<File> {
    let file = options().read(true).open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if meta.uid() != current_user() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a file of another user",
            ));
        }
    }
    if meta.len() > max_len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "longer than any file the cache writes",
        ));
    }
    Ok(file)
}

/// The bytes of the regular file at `path`, at most `max_len` of them (see
/// [`open_regular`]).
pub(crate) fn read_regular(path: &Path, max_len: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path, max_len)?;
    let mut bytes = Vec::new();
    // Bounded even if the file grows while it is read.
    file.take(max_len.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "longer than any file the cache writes",
        ));
    }
    Ok(bytes)
}

/// Creates `path` for writing, failing if anything (a file, a link) is
/// there already.
pub(crate) fn create_new(path: &Path) -> io::Result<File> {
    options().write(true).create_new(true).open(path)
}

/// Creates a new file in `dir` under a name no one can foretell, failing
/// rather than opening anything already there: its path and the file.
pub(crate) fn create_temporary(dir: &Path) -> io::Result<(PathBuf, File)> {
    let mut last = None;
    for _ in 0..8 {
        let path = dir.join(format!("{:016x}.tmp", unpredictable()));
        match create_new(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free temporary name")))
}

/// 64 bits no other process can foretell: the standard library seeds each
/// `RandomState` from the system's randomness.
fn unpredictable() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    hasher.finish()
}

/// Sets the modification time of the regular file at `path` to now,
/// without following a link (a used block is the most recently used; a
/// renewed lock is fresh).
pub(crate) fn touch(path: &Path, max_len: u64) -> io::Result<()> {
    open_regular(path, max_len)?.set_modified(std::time::SystemTime::now())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A private directory of the test's own, removed with the handle.
    fn temp_dir(name: &str) -> (tempfile::TempDir, PathBuf) {
        let own = tempfile::Builder::new().prefix(name).tempdir().unwrap();
        let d = own.path().to_path_buf();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).unwrap();
        (own, d)
    }

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn what_it_makes_is_the_users_alone() {
        let (_d_own, d) = temp_dir("modes");
        make_dir(&d.join("sub")).unwrap();
        assert_eq!(mode(&d.join("sub")), 0o700);
        let (path, _) = create_temporary(&d).unwrap();
        assert_eq!(mode(&path), 0o600);
        // A directory made earlier with wider permissions is narrowed.
        fs::create_dir(d.join("old")).unwrap();
        fs::set_permissions(d.join("old"), fs::Permissions::from_mode(0o755)).unwrap();
        make_dir(&d.join("old")).unwrap();
        assert_eq!(mode(&d.join("old")), 0o700);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_directory_others_can_write_or_a_link_is_refused() {
        let (_d_own, d) = temp_dir("refuse");
        fs::create_dir(d.join("open")).unwrap();
        fs::set_permissions(d.join("open"), fs::Permissions::from_mode(0o777)).unwrap();
        let e = make_top_dir(&d.join("open")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        assert!(e.to_string().contains("written by other users"), "{e}");
        fs::set_permissions(d.join("open"), fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(make_top_dir(&d.join("open")).is_err(), "sticky too");
        fs::create_dir(d.join("real")).unwrap();
        std::os::unix::fs::symlink(d.join("real"), d.join("link")).unwrap();
        let e = make_dir(&d.join("link")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        // The user's own name for the top directory may be a link.
        make_top_dir(&d.join("link")).unwrap();
        // A parent others can write, unless sticky, is refused too.
        fs::create_dir(d.join("shared")).unwrap();
        fs::set_permissions(d.join("shared"), fs::Permissions::from_mode(0o777)).unwrap();
        let e = make_top_dir(&d.join("shared/cache")).unwrap_err();
        assert!(e.to_string().contains("above it"), "{e}");
        fs::set_permissions(d.join("shared"), fs::Permissions::from_mode(0o1777)).unwrap();
        make_top_dir(&d.join("shared/cache")).unwrap();
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_directory_above_the_cache_is_safe_as_ssh_would_have_it() {
        let me = 1000;
        assert_eq!(parent_verdict(me, 0o40755, me), None);
        assert_eq!(parent_verdict(0, 0o40755, me), None, "root's");
        assert_eq!(parent_verdict(0, 0o41777, me), None, "/tmp");
        assert_eq!(parent_verdict(0, 0o41775, me), None, "sticky, group");
        let other = parent_verdict(1001, 0o40755, me).unwrap();
        assert!(other.contains("another user (uid 1001)"), "{other}");
        assert!(
            parent_verdict(1001, 0o41777, me).is_some(),
            "its owner renames"
        );
        assert!(parent_verdict(0, 0o40777, me).unwrap().contains("anyone"));
        assert!(parent_verdict(me, 0o40775, me).unwrap().contains("group"));
        // Root's own cache: every other user is another.
        assert!(parent_verdict(me, 0o40755, 0).is_some());
        assert_eq!(parent_verdict(0, 0o40700, 0), None);
    }

    #[test]
    fn only_regular_files_of_bounded_length_are_read() {
        let (_d_own, d) = temp_dir("regular");
        fs::write(d.join("f"), b"12345").unwrap();
        assert_eq!(read_regular(&d.join("f"), 5).unwrap(), b"12345");
        assert_eq!(
            read_regular(&d.join("f"), 4).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        std::os::unix::fs::symlink(d.join("f"), d.join("link")).unwrap();
        assert!(read_regular(&d.join("link"), 5).is_err(), "a link");
        let made = std::process::Command::new("mkfifo")
            .arg(d.join("fifo"))
            .status()
            .unwrap();
        assert!(made.success());
        let started = std::time::Instant::now();
        assert!(read_regular(&d.join("fifo"), 5).is_err(), "a FIFO");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_new_file_never_opens_what_is_there() {
        let (_d_own, d) = temp_dir("create");
        fs::write(d.join("victim"), b"keep").unwrap();
        std::os::unix::fs::symlink(d.join("victim"), d.join("planted")).unwrap();
        assert_eq!(
            create_new(&d.join("planted")).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(fs::read(d.join("victim")).unwrap(), b"keep");
        let (a, _) = create_temporary(&d).unwrap();
        let (b, _) = create_temporary(&d).unwrap();
        assert_ne!(a, b);
        let _ = fs::remove_dir_all(&d);
    }
}

//! The walk the harness makes of a file, through either driver: every
//! object reachable by hard links, its attributes, and the first values of
//! each dataset and attribute, as lines of text to compare.

use remfile::hdf5::hdf5_metno::{self as h5lib, Group, LinkType, LocationToken, LocationType};
use remfile::hdf5::{self as remote_hdf5};

use super::describe::{Kind, describe, selection};

/// The most objects, links and attributes a walk visits: a step bound,
/// whatever loops or fan-out the file's structure has (the seeds have a few
/// hundred).
pub const MAX_STEPS: usize = 2000;

/// The walk's one line when the file does not open.
pub(super) const OPEN_FAILED: &str = "open: error";

/// The most bytes of one chunk of a dataset whose values are read: HDF5
/// allocates a whole chunk to read any of it, as long as the layout says
/// (up to 4 GiB), through either driver. The seeds' chunks are 1 MiB at
/// most.
const MAX_CHUNK: u64 = 16 << 20;

/// A walk under way: its lines, the objects seen, the groups left to
/// visit, the steps taken.
struct Walk {
    out: Vec<String>,
    seen: Vec<LocationToken>,
    stack: Vec<(usize, Group)>,
    steps: usize,
    next_id: usize,
    prefetch: bool,
}

/// Describes every object reachable by hard links from the root, depth
/// first, at most [`MAX_STEPS`] of them: kind, name, attributes, and for
/// datasets and attributes the type, shape and a hash of the values read.
/// With `prefetch`, each dataset's selection is prefetched first (the file
/// is the driver's).
pub(super) fn walk(file: &h5lib::File, prefetch: bool) -> Vec<String> {
    let root: Group = (**file).clone();
    let mut w = Walk {
        out: vec!["open: ok".to_owned()],
        seen: Vec::new(),
        stack: Vec::new(),
        steps: 0,
        next_id: 1,
        prefetch,
    };
    if let Ok(info) = root.loc_info() {
        w.seen.push(info.token);
    }
    w.stack.push((0, root));
    while let Some((id, group)) = w.stack.pop() {
        attributes(&group, id, &mut w.out, &mut w.steps);
        let mut links = Vec::new();
        let listed = group.iter_visit_default(|name, info| {
            if links.len() < MAX_STEPS {
                links.push((name.to_owned(), info.link_type));
            }
            Ok(())
        });
        if listed.is_err() {
            w.out.push(format!("{id}: links error"));
        }
        for (name, link_type) in links {
            w.steps += 1;
            if w.steps > MAX_STEPS {
                w.out.push("step bound".to_owned());
                return w.out;
            }
            w.link(&group, id, &name, link_type);
        }
    }
    w.out
}

impl Walk {
    /// Follows the link `name` of `group` (object `id`): a line for it, and
    /// the object it leads to described, or queued if a group.
    fn link(&mut self, group: &Group, id: usize, name: &str, link_type: LinkType) {
        let shown: String = name.chars().take(64).collect();
        if link_type != LinkType::Hard {
            self.out.push(format!("{id}/{shown:?}: {link_type:?} link"));
            return;
        }
        let Ok(info) = group.loc_info_by_name(name) else {
            self.out.push(format!("{id}/{shown:?}: info error"));
            return;
        };
        if self.seen.contains(&info.token) {
            self.out.push(format!("{id}/{shown:?}: seen"));
            return;
        }
        self.seen.push(info.token);
        let child = self.next_id;
        self.next_id += 1;
        self.out
            .push(format!("{id}/{shown:?} = {child}: {:?}", info.loc_type));
        match info.loc_type {
            LocationType::Group => match group.group(name) {
                Ok(g) => self.stack.push((child, g)),
                Err(_) => self.out.push(format!("{child}: open error")),
            },
            LocationType::Dataset => match group.dataset(name) {
                Ok(ds) => self.dataset(&ds, child),
                Err(_) => self.out.push(format!("{child}: open error")),
            },
            _ => {}
        }
    }

    /// Describes dataset `ds` (object `id`): its attributes, then its type,
    /// shape and values.
    fn dataset(&mut self, ds: &h5lib::Dataset, id: usize) {
        attributes(ds, id, &mut self.out, &mut self.steps);
        if self.prefetch {
            prefetch_selection(ds);
        }
        let read = chunk_bytes(ds).is_none_or(|b| b <= MAX_CHUNK);
        let described = describe(ds.id(), Kind::Dataset, read);
        self.out.push(format!("{id}: {described}"));
    }
}

/// The bytes of one chunk of `ds`, if it is chunked (`Some(u64::MAX)` past
/// that).
fn chunk_bytes(ds: &h5lib::Dataset) -> Option<u64> {
    let chunk = ds.chunk()?;
    let size = ds.dtype().map_or(1, |t| t.size() as u64);
    Some(
        chunk
            .iter()
            .try_fold(size, |acc, &n| acc.checked_mul(n as u64))
            .unwrap_or(u64::MAX),
    )
}

/// Describes the attributes of `loc` (object `id`).
fn attributes(loc: &h5lib::Location, id: usize, out: &mut Vec<String>, steps: &mut usize) {
    let Ok(names) = loc.attr_names() else {
        out.push(format!("{id}: attributes error"));
        return;
    };
    for name in names {
        *steps += 1;
        if *steps > MAX_STEPS {
            return;
        }
        let shown: String = name.chars().take(64).collect();
        let described = match loc.attr(&name) {
            Ok(a) => describe(a.id(), Kind::Attribute, true),
            Err(_) => "open error".to_owned(),
        };
        out.push(format!("{id}@{shown:?}: {described}"));
    }
}

/// Fetches the selection [`describe`] reads, as a user of
/// [`remfile::hdf5::prefetch_hyperslab`] would first; its outcome is not
/// part of the walk (HDF5's own driver has no such call), only that it
/// returns.
fn prefetch_selection(ds: &h5lib::Dataset) {
    let shape: Vec<u64> = ds.shape().iter().map(|&n| n as u64).collect();
    let Some(size) = ds.dtype().ok().map(|t| t.size() as u64) else {
        return;
    };
    let counts = selection(&shape, size.max(1));
    let ranges: Vec<std::ops::Range<u64>> = counts.iter().map(|&c| 0..c).collect();
    let _ = remote_hdf5::prefetch_hyperslab(ds, &ranges);
}

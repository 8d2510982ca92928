//! Whether the metadata crawl foresees the reads HDF5 makes, measured with
//! no network and no timing: the crawl run to its end over a file whose
//! bytes are all at hand ([`crawl`]), beside the metadata reads HDF5 makes
//! walking the same file through its logging driver ([`hdf5_reads`]). A
//! read no target of the crawl covers is one HDF5 waits a round trip for;
//! the wave that found a read's target is about the round it arrives in.
//!
//! `REMFILE_FORESIGHT=FILE[:FILE…] cargo test --features hdf5 --lib
//! foresight -- --ignored --nocapture` prints both for any files;
//! `REMFILE_FORESIGHT_LOG` names another reader's read log of one file
//! (HDF5's logging driver with `H5FD_LOG_LOC_READ`) to use instead.

use std::ops::Range;
use std::path::Path;

use super::prefetch::{MAX_PIECE, Prefetcher};
use super::spans;
use crate::hdf5::hdf5_metno as h5lib;
use crate::hdf5::meta::{MemType, Target, What};
use remfile_testkit::h5files;

/// A target the crawl found, in which wave (the superblock's is 0), and
/// which target pointed to it (by its place in the crawl's list).
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub target: Target,
    pub wave: usize,
    pub parent: Option<usize>,
}

/// Crawls `file` from its superblock to the end, as the driver's crawl
/// does (each target's guessed bytes, longer if the structure says so),
/// with every byte at hand.
pub(crate) fn crawl(file: &[u8]) -> Vec<Found> {
    let len = file.len() as u64;
    let mut prefetch = Prefetcher::default();
    prefetch.start();
    let mut found: Vec<Found> = prefetch
        .take_wave()
        .into_iter()
        .map(|target| Found {
            target,
            wave: 0,
            parent: None,
        })
        .collect();
    // Breadth-first, each target parsed alone so that what it points to
    // is known to come from it.
    let mut next = 0;
    while next < found.len() {
        let Found { target, wave, .. } = found[next].clone();
        if target.what.is_parsed() {
            let bytes = piece(file, &target, &prefetch);
            prefetch.on_crawled(&target, bytes, len);
            // The crawl fetches a structure longer than guessed whole.
            let end = target.bytes.start + bytes.len() as u64;
            let bytes = &mut found[next].target.bytes;
            bytes.end = bytes.end.max(end);
        }
        for child in prefetch.take_wave() {
            found.push(Found {
                target: child,
                wave: wave + 1,
                parent: Some(next),
            });
        }
        next += 1;
    }
    found
}

/// The bytes the crawl parses for `target`: as guessed, or as long as the
/// structure declares (at most [`MAX_PIECE`]).
fn piece<'a>(file: &'a [u8], target: &Target, prefetch: &Prefetcher) -> &'a [u8] {
    let start = usize::try_from(target.bytes.start).unwrap_or(usize::MAX);
    let at = |n: usize| &file[start.min(file.len())..start.saturating_add(n).min(file.len())];
    let guessed = at(((target.bytes.end - target.bytes.start) as usize).min(MAX_PIECE));
    match prefetch.declared_len(target, guessed) {
        Some(whole) if whole > guessed.len() => at(whole.min(MAX_PIECE)),
        _ => guessed,
    }
}

/// One read HDF5 made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Read {
    pub mem: MemType,
    pub bytes: Range<u64>,
}

/// The reads HDF5 makes opening the file at `path` and walking it as users
/// do (every object's info and attributes, every chunk index), through its
/// logging driver.
pub(crate) fn hdf5_reads(path: &Path) -> Vec<Read> {
    let log = h5files::temp_path!(&format!(
        "foresight-{}.log",
        path.file_name().unwrap().to_string_lossy()
    ));
    {
        let file = h5lib::File::with_options()
            .with_fapl(|fapl| {
                fapl.log_options(
                    Some(log.to_str().unwrap()),
                    h5lib::file::LogFlags::LOC_READ,
                    0,
                )
            })
            .open(path)
            .unwrap();
        h5files::walk_all_info(&file).unwrap();
    }
    let text = std::fs::read_to_string(&log).unwrap();
    if std::env::var_os("REMFILE_FORESIGHT_KEEP").is_none() {
        let _ = std::fs::remove_file(&log);
    }
    text.lines().filter_map(parse_log_line).collect()
}

/// A line of HDF5's read log: `FIRST-LAST (N bytes) (FLAVOR) Read…`.
fn parse_log_line(line: &str) -> Option<Read> {
    let (range, rest) = line.split_once('(')?;
    if !rest.contains("Read") {
        return None;
    }
    let (first, last) = range.split_once('-')?;
    let (first, last): (u64, u64) = (first.trim().parse().ok()?, last.trim().parse().ok()?);
    let flavor = rest.split(['(', ')']).find(|s| s.starts_with("H5FD_MEM"))?;
    let mem = match flavor {
        "H5FD_MEM_SUPER" => MemType::Superblock,
        "H5FD_MEM_BTREE" => MemType::BTree,
        "H5FD_MEM_DRAW" => MemType::RawData,
        "H5FD_MEM_GHEAP" => MemType::GlobalHeap,
        "H5FD_MEM_LHEAP" => MemType::LocalHeap,
        "H5FD_MEM_OHDR" => MemType::ObjectHeader,
        _ => MemType::Other,
    };
    Some(Read {
        mem,
        bytes: first..last.checked_add(1)?,
    })
}

/// How the crawl fared against HDF5's reads.
#[derive(Debug, Default)]
pub(crate) struct Foresight {
    /// Metadata reads (global heap collections among them) that start
    /// inside a target the crawl found.
    pub foreseen: usize,
    /// The others: HDF5's reads the crawl did not see coming.
    pub unforeseen: Vec<Read>,
    /// The last wave that found a target one of HDF5's reads starts in.
    pub waves: usize,
    /// Reads that start where a target starts but run past its end: a
    /// structure the crawl guessed too short.
    pub short: Vec<(Read, Target)>,
}

/// Which of `reads` (other than raw data) start inside a target of
/// `crawled`.
pub(crate) fn foresight(crawled: &[Found], reads: &[Read]) -> Foresight {
    let mut sorted: Vec<&Found> = crawled.iter().collect();
    sorted.sort_by_key(|f| f.target.bytes.start);
    // For each prefix, the target reaching furthest, and its wave.
    let mut reach: Vec<(u64, usize)> = Vec::with_capacity(sorted.len());
    for f in &sorted {
        let last = reach.last().copied().unwrap_or((0, 0));
        reach.push(if f.target.bytes.end > last.0 {
            (f.target.bytes.end, f.wave)
        } else {
            last
        });
    }
    let mut out = Foresight::default();
    let by_start: std::collections::HashMap<u64, &Target> = crawled
        .iter()
        .map(|f| (f.target.bytes.start, &f.target))
        .collect();
    for read in reads.iter().filter(|r| r.mem != MemType::RawData) {
        if let Some(t) = by_start.get(&read.bytes.start) {
            if t.bytes.end < read.bytes.end {
                out.short.push((read.clone(), (*t).clone()));
            }
        }
        let at = read.bytes.start;
        let n = sorted.partition_point(|f| f.target.bytes.start <= at);
        match n.checked_sub(1).map(|i| reach[i]) {
            Some((end, wave)) if end > at => {
                out.foreseen += 1;
                out.waves = out.waves.max(wave);
            }
            _ => out.unforeseen.push(read.clone()),
        }
    }
    out
}

/// The targets of `crawled` no read of `reads` starts in, by kind: the
/// crawl's guesses HDF5 did not need.
pub(crate) fn unread(crawled: &[Found], reads: &[Read]) -> Vec<(String, usize)> {
    let mut starts: Vec<u64> = reads.iter().map(|r| r.bytes.start).collect();
    starts.sort_unstable();
    let mut kinds = std::collections::BTreeMap::new();
    for f in crawled {
        let first = starts.partition_point(|&s| s < f.target.bytes.start);
        if starts.get(first).is_none_or(|&s| s >= f.target.bytes.end) {
            let kind = format!("{:?}", f.target.what);
            let kind = kind.split([' ', '{']).next().unwrap_or_default().to_owned();
            *kinds.entry(kind).or_insert(0) += 1;
        }
    }
    kinds.into_iter().collect()
}

/// The crawl against HDF5's walk of the file at `path`.
pub(crate) fn measure(path: &Path) -> (Foresight, Vec<Found>, Vec<Read>) {
    let crawled = crawl(&std::fs::read(path).unwrap());
    // Another reader's log of the same file (h5py's through its logging
    // driver, say) in place of the Rust walk's.
    let reads = match std::env::var_os("REMFILE_FORESIGHT_LOG") {
        Some(log) => {
            let text = std::fs::read_to_string(log).unwrap();
            text.lines().filter_map(parse_log_line).collect()
        }
        None => hdf5_reads(path),
    };
    (foresight(&crawled, &reads), crawled, reads)
}

#[test]
fn the_read_log_parses() {
    let read = parse_log_line("      2048-      2559 (       512 bytes) (H5FD_MEM_OHDR) Read");
    assert_eq!(
        read,
        Some(Read {
            mem: MemType::ObjectHeader,
            bytes: 2048..2560
        })
    );
    assert_eq!(parse_log_line("Dumping read I/O information:"), None);
}

/// Prints the crawl against HDF5's walk for each file `REMFILE_FORESIGHT`
/// names.
#[test]
#[ignore = "a tool: REMFILE_FORESIGHT names the files"]
fn report() {
    let Some(files) = std::env::var_os("REMFILE_FORESIGHT") else {
        return;
    };
    for path in std::env::split_paths(&files) {
        let (f, crawled, reads) = measure(&path);
        let waves = crawled.iter().map(|f| f.wave).max().unwrap_or(0);
        eprintln!(
            "{}: {} foreseen, {} unforeseen; HDF5's reads found by wave {}; the crawl: {} targets in {} waves",
            path.display(),
            f.foreseen,
            f.unforeseen.len(),
            f.waves,
            crawled.len(),
            waves + 1
        );
        eprintln!(
            "    guesses HDF5 did not read: {:?}",
            unread(&crawled, &reads)
        );
        for (read, target) in f.short.iter().take(20) {
            eprintln!("    short: {:?} read {:?}", target, read.bytes);
        }
        for read in f.unforeseen.iter().take(60) {
            eprintln!("    unforeseen {:?} {:?}", read.mem, read.bytes);
        }
        if std::env::var_os("REMFILE_FORESIGHT_TARGETS").is_some() {
            for (i, t) in crawled.iter().enumerate() {
                let parent = t.parent.map_or(0, |p| crawled[p].target.bytes.start);
                eprintln!(
                    "    #{i} wave {} {:?} {:?} from {parent} (#{:?})",
                    t.wave, t.target.what, t.target.bytes, t.parent
                );
            }
        }
    }
}

/// A file grown step by step in the latest format: every metadata read of
/// HDF5's walk starts in a target of the crawl (array blocks, B-tree
/// nodes, heap blocks among the data).
#[test]
fn the_crawl_foresees_every_read_of_a_file_grown_step_by_step() {
    let path = h5files::temp_path!("foresight-appended.h5");
    h5files::write_appended(&path, 600).unwrap();
    let (f, crawled, reads) = measure(&path);
    eprintln!(
        "{} foreseen, {:?} unforeseen, by wave {}; unread guesses {:?}; {} targets",
        f.foreseen,
        f.unforeseen,
        f.waves,
        unread(&crawled, &reads),
        crawled.len()
    );
    let _ = std::fs::remove_file(&path);
    assert!(f.unforeseen.is_empty(), "{:?}", f.unforeseen);
    assert!(f.short.is_empty(), "{:?}", f.short);
    // The file has every structure the test is for.
    let found = |what: fn(&What) -> bool| crawled.iter().filter(|t| what(&t.target.what)).count();
    assert!(found(|w| *w == What::ArrayIndex) >= 3);
    assert!(found(|w| *w == What::ArraySuper) >= 3);
    assert!(found(|w| *w == What::ArrayData) >= 20);
    assert!(found(|w| *w == What::ArrayPage) == 2);
    assert!(
        found(|w| matches!(
            w,
            What::BTree2Node {
                chunks: true,
                level: 1..,
                ..
            }
        )) >= 1
    );
    assert!(found(|w| matches!(w, What::HeapIndirect { .. })) >= 1);
}

/// What one wave of the crawl costs over a link, as [`rounds`] prices it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WaveCost {
    /// The targets it had not at hand.
    pub missing: usize,
    /// Its requests: each span of pieces, each run of missing blocks.
    pub requests: usize,
    /// The rounds those take on the crawl's connections.
    pub rounds: u64,
    /// The bytes they fetch.
    pub bytes: u64,
}

/// The crawl's waves over `file` as the driver fetches them on `link` with
/// `lanes` connections, blocks of `block_size` and a cache of
/// `cache_capacity` (its spans, blocks and pieces, [`spans::plan_wave`]),
/// HDF5 reading nothing meanwhile: the first wave is the open's (block 0
/// and the tail of `tail` bytes at once).
pub(crate) fn rounds(
    file: &[u8],
    link: crate::link::LinkEstimate,
    lanes: u64,
    block_size: u64,
    tail: u64,
    cache_capacity: u64,
) -> Vec<WaveCost> {
    let len = file.len() as u64;
    let mut have = Have::default();
    have.add(0..block_size.min(len));
    have.add(len.saturating_sub(tail)..len);
    let mut costs = vec![WaveCost {
        missing: 1,
        requests: 2,
        rounds: 1,
        bytes: have.total(),
    }];
    let mut prefetch = Prefetcher::default();
    prefetch.start();
    let gap = spans::gap_worth_filling(Some(link));
    let budget = spans::guess_budget(Some(link), lanes, cache_capacity, 1);
    loop {
        let mut missing = Vec::new();
        loop {
            let wave = prefetch.take_wave();
            if wave.is_empty() {
                break;
            }
            for target in wave {
                if !have.parse(file, &mut prefetch, &target) {
                    missing.push(target);
                }
            }
        }
        if missing.is_empty() {
            return costs;
        }
        let plan = spans::plan_wave(
            &missing,
            gap,
            lanes,
            prefetch.allowance(budget, 1),
            block_size,
            spans::bytes_are_dear(Some(link)),
        );
        let before = have.total();
        let requests = have.fetch(&plan, block_size, len);
        let bytes = have.total() - before;
        prefetch.fetched(bytes);
        costs.push(WaveCost {
            missing: missing.len(),
            requests,
            rounds: spans::rounds(requests, lanes),
            bytes,
        });
        for target in &missing {
            have.parse(file, &mut prefetch, target);
        }
        if costs.len() > 1000 {
            return costs;
        }
    }
}

impl Have {
    /// Adds what `plan` fetches (its spans as pieces, or the blocks they
    /// cover that are not here yet, a request per run): its requests.
    fn fetch(&mut self, plan: &spans::WavePlan, block_size: u64, len: u64) -> usize {
        if plan.as_pieces {
            for span in &plan.spans {
                self.add(span.start.min(len)..span.end.min(len));
            }
            return plan.spans.len();
        }
        let mut runs = 0;
        let mut last_missing = None;
        for span in &plan.spans {
            for block in span.start / block_size..span.end.min(len).div_ceil(block_size) {
                let bytes = block * block_size..((block + 1) * block_size).min(len);
                if self.covers(&bytes) {
                    continue;
                }
                if last_missing != Some(block.wrapping_sub(1)) {
                    runs += 1;
                }
                last_missing = Some(block);
                self.add(bytes);
            }
        }
        runs
    }
}

/// The bytes of a file fetched so far, as disjoint sorted ranges.
#[derive(Default)]
struct Have(Vec<Range<u64>>);

impl Have {
    fn add(&mut self, r: Range<u64>) {
        if r.is_empty() {
            return;
        }
        self.0.push(r);
        self.0.sort_unstable_by_key(|r| r.start);
        let mut out: Vec<Range<u64>> = Vec::with_capacity(self.0.len());
        for r in self.0.drain(..) {
            match out.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => out.push(r),
            }
        }
        self.0 = out;
    }

    /// The fetched bytes from `pos` on, at most `max`.
    fn from(&self, pos: u64, max: u64) -> Range<u64> {
        let i = self.0.partition_point(|r| r.start <= pos);
        match i.checked_sub(1).map(|i| &self.0[i]) {
            Some(r) if r.end > pos => pos..r.end.min(pos.saturating_add(max)),
            _ => pos..pos,
        }
    }

    fn covers(&self, r: &Range<u64>) -> bool {
        self.from(r.start, r.end - r.start).end >= r.end
    }

    fn total(&self) -> u64 {
        spans::total(&self.0)
    }

    /// Parses `target` as the crawl does, if its first bytes are here.
    fn parse(&self, file: &[u8], prefetch: &mut Prefetcher, target: &Target) -> bool {
        if !target.what.is_parsed() {
            return self.covers(&target.bytes);
        }
        let at = |r: Range<u64>| &file[r.start as usize..r.end as usize];
        let guessed = (target.bytes.end - target.bytes.start).min(MAX_PIECE as u64);
        let mut bytes = at(self.from(target.bytes.start, guessed));
        if bytes.is_empty() {
            return false;
        }
        if let Some(whole) = prefetch.declared_len(target, bytes) {
            if whole > bytes.len() {
                bytes = at(self.from(target.bytes.start, whole.min(MAX_PIECE) as u64));
            }
        }
        prefetch.on_crawled(target, bytes, file.len() as u64);
        true
    }
}

/// Prints what the crawl's waves cost over a link for each file
/// `REMFILE_FORESIGHT` names: `REMFILE_FORESIGHT_LINK=MS,MBPS` (30 ms and
/// 25 MB/s per connection unless it says otherwise).
#[test]
#[ignore = "a tool: REMFILE_FORESIGHT names the files"]
fn priced() {
    let Some(files) = std::env::var_os("REMFILE_FORESIGHT") else {
        return;
    };
    let (ms, mbps) = std::env::var("REMFILE_FORESIGHT_LINK")
        .ok()
        .and_then(|v| {
            let (a, b) = v.split_once(',')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .unwrap_or((30u64, 25f64));
    let link = crate::link::LinkEstimate {
        line_bytes_per_second: None,
        round_trip: std::time::Duration::from_millis(ms),
        bytes_per_second: (mbps * 1e6) as u64,
    };
    for path in std::env::split_paths(&files) {
        let file = std::fs::read(&path).unwrap();
        let lanes = super::config::CONNECTIONS - 4;
        let costs = rounds(
            &file,
            link,
            lanes,
            super::config::BLOCK_SIZE,
            super::config::OPEN_TAIL,
            256 << 20,
        );
        let sum = |f: fn(&WaveCost) -> u64| costs.iter().map(f).sum::<u64>();
        eprintln!(
            "{}: {} waves, {} requests, {} rounds, {:.2} MB",
            path.file_name().unwrap().to_string_lossy(),
            costs.len(),
            sum(|c| c.requests as u64),
            sum(|c| c.rounds),
            sum(|c| c.bytes) as f64 / 1e6
        );
        if std::env::var_os("REMFILE_FORESIGHT_WAVES").is_some() {
            for c in &costs {
                eprintln!("    {c:?}");
            }
        }
    }
}

/// The priced crawl of a file grown step by step fetches each byte at
/// most once, every target the crawl finds, in no more waves than the
/// crawl has.
#[test]
fn a_priced_crawl_fetches_each_byte_once_and_every_target() {
    let path = h5files::temp_path!("foresight-priced.h5");
    h5files::write_appended(&path, 200).unwrap();
    let file = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let link = crate::link::LinkEstimate {
        line_bytes_per_second: None,
        round_trip: std::time::Duration::from_millis(30),
        bytes_per_second: 25_000_000,
    };
    let costs = rounds(&file, link, 60, 128 << 10, 1 << 20, 256 << 20);
    let fetched: u64 = costs.iter().map(|c| c.bytes).sum();
    assert!(fetched <= file.len() as u64);
    let waves = crawl(&file).iter().map(|f| f.wave).max().unwrap() + 1;
    assert!(costs.len() <= waves + 1, "{costs:?}");
    assert!(costs.iter().all(|c| c.rounds >= 1 && c.requests >= 1));
}

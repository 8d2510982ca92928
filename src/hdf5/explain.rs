//! An account of an HDF5 file's reads, round trip by round trip: the
//! requests of each round, the bytes they brought, which of HDF5's
//! structures came in them, and what the file's author could change to
//! need fewer rounds. Pure: it takes a traced file's requests and HDF5's
//! reads of it (the driver's `trace` key), and prints or returns data.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::ops::Range;
use std::time::Duration;

use crate::trace::{TracedRequest, rounds};

/// The kind of structure one of HDF5's reads was, as far as the driver
/// tells: from HDF5's memory type, refined by what the metadata crawl knew
/// lay at that address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Structure {
    /// The superblock.
    Superblock,
    /// An object header (a group's, a dataset's, a named datatype's).
    ObjectHeader,
    /// The rest of an object header, in a block of its own (messages, most
    /// often attributes, added after the object was made).
    HeaderContinuation,
    /// A group's B-tree or symbol table node.
    GroupIndex,
    /// A local heap (a group's link names).
    LocalHeap,
    /// A fractal heap (new-style links or attributes, dense storage).
    FractalHeap,
    /// A global heap collection (variable-length values).
    GlobalHeap,
    /// A chunk index's node or block (B-tree, extensible or fixed array).
    ChunkIndex,
    /// Other metadata.
    OtherMetadata,
    /// Raw data: dataset values.
    RawData,
}

impl Structure {
    /// Its name for people.
    pub fn name(self) -> &'static str {
        match self {
            Structure::Superblock => "superblock",
            Structure::ObjectHeader => "object headers",
            Structure::HeaderContinuation => "header continuations",
            Structure::GroupIndex => "group B-tree/symbol nodes",
            Structure::LocalHeap => "local heaps",
            Structure::FractalHeap => "fractal heaps",
            Structure::GlobalHeap => "global heaps",
            Structure::ChunkIndex => "chunk indexes",
            Structure::OtherMetadata => "other metadata",
            Structure::RawData => "raw data",
        }
    }

    /// Whether it is metadata (not dataset values).
    pub fn is_metadata(self) -> bool {
        self != Structure::RawData
    }
}

/// One of HDF5's reads of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hdf5Read {
    /// What it read.
    pub structure: Structure,
    /// Where.
    pub addr: u64,
    /// How many bytes.
    pub len: u64,
    /// When, from the start of the file's open.
    pub at: Duration,
}

/// One round trip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Round {
    /// Its requests, in the order sent.
    pub requests: Vec<TracedRequest>,
    /// The bytes its answers carried (of those that brought the bytes asked
    /// for: a `200` to a range request other than the open's is cut short).
    pub bytes: u64,
    /// When its first request was sent and its last answer came.
    pub span: Range<Duration>,
    /// What of HDF5's reads its bytes brought first: for each kind, how
    /// many reads and bytes.
    pub brought: BTreeMap<Structure, (u64, u64)>,
}

/// A change to the file that would need fewer rounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advice {
    /// What to do (a command where there is one).
    pub change: String,
    /// Why, from what the trace shows.
    pub because: String,
    /// The rounds of metadata it would save, about.
    pub rounds_saved: usize,
}

/// The whole account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The file's size.
    pub size: u64,
    /// The round trips, in order.
    pub rounds: Vec<Round>,
    /// The rounds that brought metadata HDF5 read.
    pub metadata_rounds: usize,
    /// The bytes of metadata HDF5 read.
    pub metadata_read: u64,
    /// The bytes of raw data HDF5 read.
    pub raw_read: u64,
    /// How many separate 1 MiB stretches of the file the metadata HDF5
    /// read lies in.
    pub metadata_places: usize,
    /// Reads whose bytes no traced request brought (a disk cache, a batch
    /// that fetched them before the trace).
    pub not_fetched: BTreeMap<Structure, (u64, u64)>,
    /// What the file's author could change.
    pub advice: Vec<Advice>,
    /// Requests and reads past the trace's bound, left out of the account.
    pub untraced: u64,
}

/// The stretch of the file [`Explanation::metadata_places`] counts in, and
/// the buckets requests are found by.
const PLACE: u64 = 1 << 20;

/// The most places one request is filed under; a longer one is looked at
/// for every read.
const MOST_PLACES_PER_REQUEST: u64 = 64;

/// Accounts for `requests` (a traced file's, of `size` bytes) and HDF5's
/// `reads` of it; `untraced` is how many of either the trace left out.
pub fn explain(
    size: u64,
    requests: &[TracedRequest],
    reads: &[Hdf5Read],
    untraced: u64,
) -> Explanation {
    let round_of = rounds(requests);
    let count = round_of.iter().max().map_or(0, |&r| r + 1);
    let mut out: Vec<Round> = (0..count)
        .map(|_| Round {
            requests: Vec::new(),
            bytes: 0,
            span: Duration::MAX..Duration::ZERO,
            brought: BTreeMap::new(),
        })
        .collect();
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by_key(|&i| requests[i].sent);
    for &i in &order {
        let (r, round) = (&requests[i], &mut out[round_of[i]]);
        if brought_bytes(r) {
            // At most what was asked for: the length is the server's word.
            let asked = r.requested.within(size);
            let len = r.body_len.unwrap_or(0).min(asked.end - asked.start);
            round.bytes = round.bytes.saturating_add(len);
        }
        round.span = round.span.start.min(r.sent)..round.span.end.max(r.answered);
        round.requests.push(r.clone());
    }
    // Each read is credited to the last request sent before it whose
    // answer brought its start (the bytes it read came in that one, or in
    // one before it that the cache kept: the last is the one a re-fetch
    // after an eviction made). Requests are filed by the places they
    // cover, so that a read looks at a few.
    let mut filed: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut long = Vec::new();
    for (i, r) in requests
        .iter()
        .enumerate()
        .filter(|(_, r)| brought_bytes(r))
    {
        let bytes = r.requested.within(size);
        if bytes.is_empty() {
            continue;
        }
        let (first, last) = (bytes.start / PLACE, (bytes.end - 1) / PLACE);
        if last - first >= MOST_PLACES_PER_REQUEST {
            long.push(i);
        } else {
            for place in first..=last {
                filed.entry(place).or_default().push(i);
            }
        }
    }
    let mut not_fetched = BTreeMap::new();
    for read in reads {
        let nearby = filed
            .get(&(read.addr / PLACE))
            .map_or(&[][..], Vec::as_slice);
        let by = nearby
            .iter()
            .chain(&long)
            .copied()
            .filter(|&i| {
                requests[i].sent <= read.at
                    && requests[i].requested.within(size).contains(&read.addr)
            })
            .max_by_key(|&i| requests[i].sent);
        let tally = match by {
            Some(i) => out[round_of[i]]
                .brought
                .entry(read.structure)
                .or_insert((0, 0)),
            None => not_fetched.entry(read.structure).or_insert((0, 0)),
        };
        tally.0 += 1;
        tally.1 = tally.1.saturating_add(read.len);
    }
    let metadata = || reads.iter().filter(|r| r.structure.is_metadata());
    let metadata_rounds = out
        .iter()
        .filter(|r| r.brought.keys().any(|s| s.is_metadata()))
        .count();
    let places: BTreeSet<u64> = metadata().map(|r| r.addr / PLACE).collect();
    let mut explanation = Explanation {
        size,
        metadata_rounds,
        metadata_read: metadata().fold(0, |sum, r| sum.saturating_add(r.len)),
        raw_read: reads
            .iter()
            .filter(|r| !r.structure.is_metadata())
            .fold(0, |sum, r| sum.saturating_add(r.len)),
        metadata_places: places.len(),
        not_fetched,
        rounds: out,
        advice: Vec::new(),
        untraced,
    };
    explanation.advice = advise(&explanation);
    explanation
}

/// Whether `r`'s answer brought the bytes it asked for: a `206`, or a `200`
/// (the whole file) to the open's request from the file's start. A `200` to
/// another range is cut short and read no further.
fn brought_bytes(r: &TracedRequest) -> bool {
    match r.status {
        Some(206) => true,
        Some(200) => matches!(&r.requested, crate::trace::Requested::Bytes(b) if b.start == 0),
        _ => false,
    }
}

/// What the author could change, from what the account shows.
fn advise(e: &Explanation) -> Vec<Advice> {
    let mut advice = Vec::new();
    // Paged aggregation puts all metadata in pages of their own, together:
    // the open and one round for the pages a walk reads.
    if e.metadata_rounds > 2 && e.metadata_places > 2 {
        let page = e.metadata_read.next_power_of_two().clamp(64 << 10, 8 << 20);
        advice.push(Advice {
            change: format!("h5repack -S PAGE -G {page} in.h5 out.h5"),
            because: format!(
                "the metadata HDF5 read lies in {} places of the file; in pages of its own it \
                 would come in about 2 rounds (the open, then its pages), not {}",
                e.metadata_places, e.metadata_rounds
            ),
            rounds_saved: e.metadata_rounds - 2,
        });
    }
    // Small metadata blocks scatter a file's metadata among its data.
    if e.metadata_places > 8 {
        advice.push(Advice {
            change: "h5repack --metadata_block_size=1048576 in.h5 out.h5 (or \
                     H5Pset_meta_block_size when writing)"
                .to_owned(),
            because: format!(
                "{} separate places hold metadata: larger metadata blocks keep each group's \
                 together, so fewer requests bring it",
                e.metadata_places
            ),
            rounds_saved: 0,
        });
    }
    // A header continued elsewhere costs a dependent round.
    let continued: u64 = e
        .rounds
        .iter()
        .skip(1)
        .filter_map(|r| r.brought.get(&Structure::HeaderContinuation))
        .map(|t| t.0)
        .sum();
    let continued_rounds = e
        .rounds
        .iter()
        .skip(1)
        .filter(|r| {
            r.brought.contains_key(&Structure::HeaderContinuation)
                && r.brought.keys().filter(|s| s.is_metadata()).count() == 1
        })
        .count();
    if continued_rounds > 0 {
        advice.push(Advice {
            change: "write each object's attributes when the object is made (or fewer per \
                     object): its header then holds them"
                .to_owned(),
            because: format!(
                "{continued} object headers continue in blocks of their own, which HDF5 finds \
                 only once it has read the header, and {continued_rounds} rounds brought \
                 nothing else"
            ),
            rounds_saved: continued_rounds,
        });
    }
    advice
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        for (i, round) in self.rounds.iter().enumerate() {
            writeln!(
                f,
                "round {:>3}  {:>8.1}..{:<8.1} ms  {:>3} requests  {:>10} bytes",
                i + 1,
                ms(round.span.start),
                ms(round.span.end),
                round.requests.len(),
                round.bytes
            )?;
            let shown = 4;
            let ranges: Vec<String> = round
                .requests
                .iter()
                .take(shown)
                .map(|r| r.requested.to_string())
                .collect();
            let more = round.requests.len().saturating_sub(shown);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            writeln!(f, "           bytes {}{more}", ranges.join(", "))?;
            if !round.brought.is_empty() {
                writeln!(f, "           brought {}", tallies(&round.brought))?;
            }
        }
        let requests: usize = self.rounds.iter().map(|r| r.requests.len()).sum();
        let bytes = self
            .rounds
            .iter()
            .fold(0u64, |sum, r| sum.saturating_add(r.bytes));
        writeln!(
            f,
            "total      {} rounds ({} with metadata), {requests} requests, {bytes} bytes fetched; \
             HDF5 read {} bytes of metadata in {} places, {} of raw data",
            self.rounds.len(),
            self.metadata_rounds,
            self.metadata_read,
            self.metadata_places,
            self.raw_read
        )?;
        if self.untraced > 0 {
            writeln!(
                f,
                "left out  {} requests and reads past the trace's bound",
                self.untraced
            )?;
        }
        if !self.not_fetched.is_empty() {
            writeln!(
                f,
                "not fetched here (cached before): {}",
                tallies(&self.not_fetched)
            )?;
        }
        if self.advice.is_empty() {
            writeln!(
                f,
                "advice     none: nothing here calls for a change to the file"
            )?;
        }
        for a in &self.advice {
            writeln!(f, "advice     {}", a.change)?;
            match a.rounds_saved {
                0 => writeln!(
                    f,
                    "           {} (fewer requests, as many rounds)",
                    a.because
                )?,
                n => writeln!(f, "           {} (about {n} rounds fewer)", a.because)?,
            }
        }
        Ok(())
    }
}

fn tallies(t: &BTreeMap<Structure, (u64, u64)>) -> String {
    t.iter()
        .map(|(s, (n, bytes))| format!("{n} {} ({bytes} B)", s.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Requested;

    fn request(bytes: Range<u64>, sent: u64, answered: u64) -> TracedRequest {
        TracedRequest {
            body_len: Some(bytes.end - bytes.start),
            requested: Requested::Bytes(bytes),
            status: Some(206),
            sent: Duration::from_millis(sent),
            answered: Duration::from_millis(answered),
        }
    }

    fn read(structure: Structure, addr: u64, len: u64) -> Hdf5Read {
        Hdf5Read {
            structure,
            addr,
            len,
            // After every request of the tests.
            at: Duration::from_secs(3600),
        }
    }

    #[test]
    fn each_read_is_credited_to_the_round_that_first_brought_it() {
        let mb = 1 << 20;
        // The open (head and tail at once), then headers far apart, then
        // a continuation alone.
        let requests = [
            request(0..65536, 0, 30),
            request(99 * mb..100 * mb, 1, 31),
            request(10 * mb..10 * mb + 4096, 31, 61),
            request(50 * mb..50 * mb + 4096, 32, 62),
            request(70 * mb..70 * mb + 4096, 62, 92),
        ];
        let reads = [
            read(Structure::Superblock, 0, 96),
            read(Structure::ObjectHeader, 800, 512),
            read(Structure::ObjectHeader, 10 * mb + 10, 512),
            read(Structure::ObjectHeader, 50 * mb + 10, 512),
            read(Structure::HeaderContinuation, 70 * mb, 200),
            read(Structure::RawData, 99 * mb, 1000),
            read(Structure::LocalHeap, 200 * mb, 100),
        ];
        let e = explain(100 * mb, &requests, &reads, 0);
        assert_eq!(e.rounds.len(), 3);
        assert_eq!(e.rounds[0].requests.len(), 2);
        assert_eq!(e.rounds[0].brought[&Structure::ObjectHeader], (1, 512));
        assert_eq!(e.rounds[0].brought[&Structure::RawData], (1, 1000));
        assert_eq!(e.rounds[1].brought[&Structure::ObjectHeader], (2, 1024));
        assert_eq!(
            e.rounds[2].brought[&Structure::HeaderContinuation],
            (1, 200)
        );
        assert_eq!(e.not_fetched[&Structure::LocalHeap], (1, 100));
        assert_eq!((e.metadata_rounds, e.metadata_places), (3, 5));
        assert_eq!(e.raw_read, 1000);
        // Three rounds of metadata in five places: pages would take two;
        // the continuation alone in its round costs one.
        let changes: Vec<(&str, usize)> = e
            .advice
            .iter()
            .map(|a| (a.change.split_whitespace().next().unwrap(), a.rounds_saved))
            .collect();
        assert_eq!(changes, [("h5repack", 1), ("write", 1)]);
        // A range answered with the whole file (a server that ignores
        // ranges) counts none of its bytes: the read stops at once.
        let mut whole = request(100..200, 0, 30);
        whole.status = Some(200);
        whole.body_len = Some(1 << 30);
        let cut = explain(
            1 << 30,
            &[whole],
            &[read(Structure::ObjectHeader, 150, 10)],
            0,
        );
        assert_eq!(cut.rounds[0].bytes, 0);
        assert_eq!(cut.not_fetched[&Structure::ObjectHeader], (1, 10));
        let text = e.to_string();
        assert!(
            text.contains("round   3") && text.contains("1 header continuations (200 B)"),
            "{text}"
        );
        assert!(text.contains("h5repack -S PAGE -G"), "{text}");
    }

    #[test]
    fn a_file_read_in_one_round_needs_no_advice() {
        let requests = [request(0..4096, 0, 30)];
        let reads = [
            read(Structure::Superblock, 0, 96),
            read(Structure::ObjectHeader, 96, 300),
        ];
        let e = explain(4096, &requests, &reads, 0);
        assert_eq!(
            (e.rounds.len(), e.metadata_rounds, e.metadata_places),
            (1, 1, 1)
        );
        assert!(e.advice.is_empty());
        assert!(e.to_string().contains("advice     none"));
        // A read before any request that holds it came from elsewhere.
        let mut early = read(Structure::ObjectHeader, 100, 10);
        early.at = Duration::from_millis(1);
        let late = [request(0..4096, 5, 30)];
        let e = explain(4096, &late, &[early], 0);
        assert_eq!(e.not_fetched[&Structure::ObjectHeader], (1, 10));
        // A length no answer could have counts as what was asked for.
        let mut huge = request(0..4096, 0, 30);
        huge.body_len = Some(u64::MAX);
        let e = explain(4096, &[huge.clone(), huge], &[], 2);
        assert_eq!(e.rounds[0].bytes, 8192);
        assert!(e.to_string().contains("left out  2"));
        assert_eq!(explain(10, &[], &[], 0).rounds.len(), 0);
    }
}

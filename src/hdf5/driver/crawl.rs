//! The crawl: background work per open file that runs ahead of HDF5
//! through the metadata graph, one wave at a time on the process's
//! background workers ([`crate::process::workers`]).
//!
//! It takes the prefetch's frontier as a wave, parses at once the targets
//! whose bytes are cached, and fetches the rest in spans priced by the link
//! ([`super::spans`]), in as few rounds as its connections allow; what those point to is the next
//! wave. HDF5 never waits on it: a read of a block the crawl is fetching
//! waits for that block only, as for any other reader's fetch. Each wave is
//! a job of its own, queued behind the other files' waves, so that files
//! crawling at once take turns; closing the file stops it before its next
//! request.

use std::sync::Arc;

use super::prefetch::{MAX_PIECE, Prefetcher};
use super::spans;
use crate::engine::BackgroundWork;
use crate::file::RemoteFile;
use crate::hdf5::meta::Target;
use crate::hdf5::pieces;
use crate::process::workers::Closing;
use crate::sync::{MadeIn, Mutex};

/// The crawl of one file, stopped when dropped.
///
/// Each change to its signal is one assignment, so a panic elsewhere
/// while it was held leaves it whole (the lock does not poison).
pub(crate) struct Crawler {
    shared: Arc<Shared>,
    made_in: MadeIn,
}

struct Shared {
    prefetch: Arc<Mutex<Prefetcher>>,
    file: RemoteFile,
    /// Set when the file is closed: the wave under way sends no further
    /// request.
    closing: Closing,
    signal: Mutex<Signal>,
}

#[derive(Default)]
struct Signal {
    /// The frontier may have targets: background work under way from the
    /// wake that said so until the crawl has crawled them.
    work: Option<BackgroundWork>,
    stop: bool,
    /// A wave is queued or running.
    scheduled: bool,
}

impl Crawler {
    pub fn new(prefetch: Arc<Mutex<Prefetcher>>, file: RemoteFile, closing: Closing) -> Crawler {
        Crawler {
            shared: Arc::new(Shared {
                prefetch,
                file,
                closing,
                signal: Mutex::new(Signal::default()),
            }),
            made_in: MadeIn::here(),
        }
    }

    /// Whether this process only inherited the crawl (forked from the one
    /// that started it): its waves do not run here, and its signal's lock
    /// may be held for good by a worker of that process.
    fn inherited(&self) -> bool {
        self.made_in.inherited()
    }

    /// Tells the crawl the frontier has new targets; queues a wave unless
    /// one is queued or running (it takes them).
    pub fn wake(&self) {
        if self.inherited() {
            return;
        }
        let mut signal = self.shared.signal.lock();
        if signal.stop {
            return;
        }
        if signal.work.is_none() {
            signal.work = Some(self.shared.file.extension().background_work());
        }
        if !signal.scheduled {
            signal.scheduled = true;
            Shared::queue(&self.shared, &mut signal);
        }
    }

    /// Stops the crawl: it starts no further wave.
    pub fn stop(&self) {
        if self.inherited() {
            return;
        }
        let mut signal = self.shared.signal.lock();
        signal.stop = true;
        signal.work = None;
    }
}

impl Drop for Crawler {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    /// Queues the next wave (the caller holds `signal`, scheduled); if no
    /// worker can take it, the crawl ends.
    fn queue(shared: &Arc<Shared>, signal: &mut Signal) {
        let next = Arc::clone(shared);
        if crate::extension::submit_crawl(move || next.turn()).is_err() {
            signal.work = None;
            signal.stop = true;
            signal.scheduled = false;
            tracing::debug!("no worker for the metadata crawl");
        }
    }

    /// One wave, then the next queued if there is more to crawl.
    fn turn(self: Arc<Self>) {
        let working = {
            let mut signal = self.signal.lock();
            if signal.stop || signal.work.is_none() {
                signal.scheduled = false;
                return;
            }
            signal.work.take()
        };
        let wave = std::panic::AssertUnwindSafe(|| self.closing.run(|| self.wave()));
        let outcome = std::panic::catch_unwind(wave);
        let mut signal = self.signal.lock();
        // A wave that panicked ends the crawl (its file reads on without it).
        let more = outcome.unwrap_or_else(|_| {
            signal.stop = true;
            false
        });
        let mut working = working;
        if more && !signal.stop && signal.work.is_none() {
            // Held until the frontier is crawled.
            signal.work = working.take();
        }
        if signal.stop || signal.work.is_none() {
            signal.scheduled = false;
            drop(signal);
            // The crawl is idle: what it fetched as pieces goes to the disk
            // cache (if any) while its work still counts as under way, so a
            // program that ends now (even by `exit`) leaves it there.
            pieces::keep_while_open(self.file.extension());
            drop(working);
            return;
        }
        Shared::queue(&self, &mut signal);
    }

    fn wave(&self) -> bool {
        wave(&self.prefetch, &self.file, || self.signal.lock().stop)
    }
}

/// The most rounds of its lanes one wave takes.
const WAVE_ROUNDS: u64 = 2;

/// The bytes a wave of a file crawled ahead of its open may fetch, per byte
/// of its targets: room to merge the nearest into fewer requests.
const AHEAD_SLACK: u64 = 2;

/// Crawls one wave: parses the frontier's cached targets (and what they
/// point to that is cached, and so on), then fetches the others (in at
/// most [`WAVE_ROUNDS`] rounds of the connections) and parses them. Returns whether the frontier had targets.
pub(crate) fn wave(
    prefetch: &Mutex<Prefetcher>,
    file: &RemoteFile,
    stopped: impl Fn() -> bool,
) -> bool {
    let mut missing = Vec::new();
    let mut any = false;
    loop {
        let wave = prefetch.lock().take_wave();
        if wave.is_empty() {
            break;
        }
        any = true;
        missing.extend(wave.into_iter().filter(|t| !parse(prefetch, file, t)));
    }
    if missing.is_empty() {
        return any;
    }
    // What the disk cache holds is read from there and parsed: a wave plans
    // only what must come over the network (the gaps a plan fills between
    // targets on disk would be fetched for nothing).
    if file.extension().has_disk_cache() {
        file.extension()
            .take_from_disk(missing.iter().map(|t| t.bytes.clone()));
        missing.retain(|t| !parse(prefetch, file, t));
        if missing.is_empty() {
            return true;
        }
    }
    // Counted among the files guessing on this line while it plans and
    // fetches: they share what the line carries.
    let _at_work = file.extension().guessing_on_line();
    // A fast link whose bodies all come at once has no ordinary estimate,
    // but it carries guesses at least as fast as they came.
    let line = file.extension().guess_link_estimate();
    let budget = spans::guess_budget(
        line,
        file.extension().guess_concurrency(),
        file.cache().capacity(),
        file.extension().line_sharing(),
    );
    let dear = spans::bytes_are_dear(line);
    let (budget, per_read) = if dear {
        (budget, spans::DEAR_GUESSES_PER_READ)
    } else {
        (prefetch.lock().cheap_budget(budget), 1)
    };
    let mut allowed = prefetch.lock().allowance(budget, per_read);
    // Where bytes are dear, each target comes with the few KiB around it
    // (see `spans::DEAR_WINDOW`; the fetch stops at the file's end).
    let near = |t: &Target| Target {
        what: t.what,
        bytes: spans::widened(t.bytes.clone(), spans::DEAR_WINDOW),
    };
    let near_len = |t: &Target| {
        let bytes = near(t).bytes;
        bytes.end - bytes.start
    };
    let lone = prefetch.lock().batch_reach().is_none();
    if dear {
        let mut deeper = prefetch.lock().beyond_reach(&mut missing);
        // A file a batch crawls before its open comes is read as deep as
        // the batch's opens read: the reach bounds its guesses, not HDF5's
        // reads of it (none yet).
        if prefetch.lock().ahead_of_open() {
            let wanted: u64 = missing.iter().map(near_len).sum();
            let ahead = wanted.saturating_mul(AHEAD_SLACK).min(spans::MOST_BUDGET);
            allowed = allowed.max(ahead);
        }
        // The levels HDF5 has not reached come along, the shallowest first,
        // as far as the rounds they would cost later pay for their bytes;
        // the rest wait until HDF5 reaches them. Not for a batch's files:
        // a batch is a survey, whose opens settle how deep it reads.
        if !deeper.is_empty() {
            let room = if lone {
                spans::room_beyond_reach(
                    line,
                    file.extension().guess_concurrency(),
                    file.extension().line_sharing(),
                )
            } else {
                0
            };
            {
                let p = prefetch.lock();
                deeper.sort_by_key(|t| p.level_of(t));
            }
            let mut taken = 0u64;
            let along = deeper
                .iter()
                .take_while(|t| {
                    taken = taken.saturating_add(near_len(t));
                    taken <= room
                })
                .count();
            let later = deeper.split_off(along);
            missing.extend(deeper);
            if !later.is_empty() {
                prefetch.lock().put_back(later);
            }
        }
        // A chunk index's nodes are read by what reads a dataset's data
        // (or asks for its storage), not by what walks the groups: where
        // bytes are dear they wait behind the groups' structures.
        missing.sort_by_key(|t| t.what.lies_among_raw_data());
    }
    // The targets past the allowance wait on the frontier, in the order
    // found, until HDF5 has read more: the crawl stays that far ahead of it.
    let later = beyond_allowance(&mut missing, allowed);
    if !later.is_empty() {
        prefetch.lock().hold(later);
    }
    if missing.is_empty() {
        return false;
    }
    // Where bytes are dear, gaps are filled as far as the file's share of
    // a round pays for them; in a batch's survey, and among many files,
    // only a writer's clusters of metadata (the rest of a gap is most often
    // raw data).
    let gap = if dear && !lone {
        spans::DEAR_GAP
    } else if dear {
        spans::dear_gap(line, file.extension().line_sharing())
    } else if line.is_none() && file.link_estimate().is_none() {
        spans::unknown_line_gap(file.extension().line_sharing())
    } else {
        spans::gap_worth_filling(file.link_estimate())
    };
    let wanted: Vec<Target> = if dear {
        missing.iter().map(near).collect()
    } else {
        missing.clone()
    };
    let lanes = file.extension().guess_concurrency();
    let plan_of = |wanted: &[Target], allowed: u64| {
        spans::plan_wave(wanted, gap, lanes, allowed, file.block_size(), dear)
    };
    let mut plan = plan_of(&wanted, allowed);
    // A wave takes at most `WAVE_ROUNDS` rounds of its lanes: the targets
    // past those wait on the frontier for the next wave, so that a wave of
    // a thousand pieces never holds the file's connections for dozens of
    // rounds (an open that comes meanwhile takes the crawl over at the
    // next wave, and what this one finds joins the next).
    let most_spans =
        usize::try_from(lanes.max(1).saturating_mul(WAVE_ROUNDS)).unwrap_or(usize::MAX);
    if plan.spans.len() > most_spans {
        // The spans of the targets found first, as many as the rounds take.
        let keep = spans::first_found_spans(&plan.spans, &wanted, most_spans);
        let all = total_bytes(&wanted);
        let (mut kept_missing, mut kept_wanted, mut later) = (Vec::new(), Vec::new(), Vec::new());
        for ((target, near), keep) in missing.into_iter().zip(wanted).zip(keep) {
            if keep {
                kept_missing.push(target);
                kept_wanted.push(near);
            } else {
                later.push(target);
            }
        }
        prefetch.lock().put_back(later);
        missing = kept_missing;
        // The targets kept take their share of the allowance, no more: the
        // rest is the next waves'.
        let share = spans::share_of(allowed, total_bytes(&kept_wanted), all);
        plan = plan_of(&kept_wanted, share);
    }
    if stopped() {
        // The targets taken and not fetched go back to the frontier: the
        // crawl that goes on from here (the file's open's, after a batch's)
        // fetches them, or no one needs them.
        prefetch.lock().put_back(missing);
        return false;
    }
    let fetched = if plan.as_pieces {
        pieces::guess(file.extension(), plan.spans, plan.allowed)
    } else {
        file.extension().prefetch_here(plan.spans, plan.allowed)
    };
    prefetch.lock().fetched(fetched);
    // A target the fetch left out (past its allowance) waits for HDF5 to
    // read more, as one past the wave's allowance does: never dropped.
    let left: Vec<Target> = missing
        .into_iter()
        .filter(|t| !parse(prefetch, file, t))
        .collect();
    if !left.is_empty() {
        prefetch.lock().hold(left);
    }
    true
}

/// The bytes of `targets` together.
fn total_bytes(targets: &[Target]) -> u64 {
    targets.iter().map(|t| t.bytes.end - t.bytes.start).sum()
}

/// Splits off the targets of `wave` (in the order found) past the first
/// whose bytes add up to more than `allowed`, and returns them.
fn beyond_allowance(wave: &mut Vec<Target>, allowed: u64) -> Vec<Target> {
    let mut total = 0u64;
    let within = wave
        .iter()
        .take_while(|t| {
            total = total.saturating_add(t.bytes.end - t.bytes.start);
            total <= allowed
        })
        .count();
    wave.split_off(within)
}

/// Parses `target` if its bytes are cached (a target only fetched
/// counts as parsed once they are); false if they are not.
fn parse(prefetch: &Mutex<Prefetcher>, file: &RemoteFile, target: &Target) -> bool {
    if !target.what.is_parsed() {
        return file.extension().is_cached(target.bytes.clone());
    }
    let start = target.bytes.start;
    // Bounded whatever the bytes that pointed here said.
    let guessed = ((target.bytes.end - start) as usize).min(MAX_PIECE);
    let mut bytes = pieces::cached_from(file.extension(), start, guessed);
    if bytes.is_empty() {
        return false;
    }
    // A structure longer than guessed is parsed whole if the rest is
    // at hand (else the prefetch fetches it).
    let whole = prefetch.lock().declared_len(target, &bytes);
    if let Some(whole) = whole.filter(|&w| w > bytes.len()) {
        bytes = pieces::cached_from(file.extension(), start, whole.min(MAX_PIECE));
    }
    prefetch.lock().on_crawled(target, &bytes, file.len());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::memory_source::MemorySource;

    /// A wave stopped before it fetched (its file handed over, or closing)
    /// leaves what it took on the frontier, for the crawl that goes on.
    #[test]
    fn a_stopped_wave_puts_back_what_it_did_not_fetch() {
        let source = MemorySource::new(vec![0; 64 << 10]);
        let file =
            crate::open::open_over(&RemoteFile::builder().block_size(4096), Arc::clone(&source));
        let prefetch = Mutex::new(Prefetcher::default());
        assert!(prefetch.lock().start());
        assert!(!wave(&prefetch, &file, || true));
        assert!(source.asked().is_empty(), "{:?}", source.asked());
        let left = prefetch.lock().take_wave();
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0].bytes.start, 0);
    }
}

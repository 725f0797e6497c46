//! Following files: discovery by glob, identity by fingerprint (the first
//! bytes) and inode, rotation by rename and by copy-truncate, partial lines,
//! over-long lines, compressed backups, and crash-safe checkpoints.
//!
//! A file's content has one identity, its first bytes, whichever file
//! carries it: the log, its renamed backup, its copy, or its compressed
//! backup. At most one of them is read at a time, and the next one to carry
//! it continues at the offset the last one reached: a backup compressed
//! before the reader got to its end is read from there, decompressed as a
//! stream.
//!
//! All IO here is blocking; the receiver runs it on the blocking pool.

use super::packed::{self, Packing};

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Read at most this much of one file per poll, so one busy file cannot
/// starve the others or fill memory.
const READ_BUDGET: usize = 4 << 20;

/// One complete line (without its newline).
#[derive(Debug)]
pub struct Line {
    /// The file it came from.
    pub file: u64,
    /// Offset of the line's first byte.
    pub offset: u64,
    /// Offset just after the line's newline: where reading resumes once it is delivered.
    pub end: u64,
    /// The bytes (may be invalid UTF-8).
    pub bytes: Vec<u8>,
    /// Set when the line was longer than `max_line_bytes` and was cut.
    pub too_long: bool,
}

struct Tracked {
    id: u64,
    fp: Vec<u8>,
    file: File,
    dev_ino: (u64, u64),
    path: PathBuf,
    /// Bytes consumed, including a partial line in `partial`.
    read: u64,
    partial: Vec<u8>,
    partial_start: u64,
    /// Inside an over-long line: drop bytes until the next newline.
    skipping: bool,
    absent_polls: u32,
    /// Reported by `new_files` yet.
    reported: bool,
    /// Where reading started.
    start: u64,
    /// When it last grew (or was opened).
    grew: Instant,
    /// Delivered up to (every exporter took the lines before it). A file
    /// gone from the patterns stays open until it is delivered to its end,
    /// so that lines an exporter gave up on can be read again.
    delivered: u64,
    /// A compressed backup: offsets are in its decompressed stream.
    packed: Option<Packed>,
}

impl Tracked {
    /// A file followed from `start` (a line boundary: what came before it
    /// was delivered as lines), not reported yet.
    fn at(
        id: u64,
        fp: Vec<u8>,
        file: File,
        dev_ino: (u64, u64),
        path: PathBuf,
        start: u64,
        now: Instant,
    ) -> Self {
        Tracked {
            id,
            fp,
            file,
            dev_ino,
            path,
            read: start,
            partial: Vec::new(),
            partial_start: start,
            skipping: false,
            absent_polls: 0,
            reported: false,
            start,
            delivered: start,
            grew: now,
            packed: None,
        }
    }
}

/// The decompressing side of a followed compressed backup.
struct Packed {
    kind: Packing,
    /// The decoder, at `pos` of the decompressed stream; rebuilt from the
    /// start (and skipped forward) when it is not where reading resumes.
    /// Dropped when the file is not being read, so idle backups cost no
    /// decoder memory. (In a mutex only so that the tailer is `Sync`: it
    /// is reached through `&mut`, never locked.)
    decoder: Option<std::sync::Mutex<Box<dyn Read + Send>>>,
    pos: u64,
    /// The decompressed length, once the stream ended.
    end: Option<u64>,
    /// The stream stopped short (still being written, or cut): the
    /// compressed length then, since when, and the polls since.
    stalled: Option<(u64, Instant, u32)>,
}

impl Packed {
    fn new(kind: Packing) -> Self {
        Packed {
            kind,
            decoder: None,
            pos: 0,
            end: None,
            stalled: None,
        }
    }
}

/// What happened to compressed backups and unread files since the last
/// [`Tailer::take_events`].
#[derive(Debug, Default)]
pub struct Events {
    /// Lines read from compressed backups.
    pub packed_lines: u64,
    /// Compressed backups found, by outcome (`resumed`: it continues a file
    /// read before, from that file's offset; `new`: its content was never
    /// seen, read from its start; `skipped`: there at startup with
    /// `start_at: end` and no checkpoint; `corrupt`), with the
    /// path and the format.
    pub backups: Vec<(&'static str, String, &'static str)>,
    /// Content that was on disk and can no longer be read, by reason, with
    /// the path and what is known of how much.
    pub lost: Vec<(&'static str, String, String)>,
}

/// Where a file was delivered up to, as saved in the checkpoint.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Checkpoint {
    /// Hex of the file's first bytes.
    pub fingerprint: String,
    /// Offset delivered up to.
    pub offset: u64,
    /// Last known path (informational).
    pub path: String,
}

/// Tailer settings.
#[derive(Debug, Clone)]
pub struct TailConfig {
    /// Include globs.
    pub include: Vec<String>,
    /// Globs of where the rotated backups of the included files may be
    /// (`backups::patterns`): a backup found there only continues a content
    /// followed before (or one rotated between two looks); what it holds
    /// at startup is history, not read.
    pub backups: Vec<String>,
    /// Exclude globs.
    pub exclude: Vec<glob::Pattern>,
    /// Start files found at startup at their end.
    pub start_at_end: bool,
    /// Longest line kept.
    pub max_line: usize,
    /// A file read and delivered to its end that has not grown for this
    /// long is closed (its inode, fingerprint and offset remembered), so
    /// rotated backups do not hold file descriptors.
    pub close_idle: Duration,
    /// Fingerprint length.
    pub fp_size: usize,
    /// Files opened ahead of the tailer (by its [`Holder`]) and not read yet, at most.
    pub max_held: usize,
}

/// Follows a set of files.
pub struct Tailer {
    cfg: TailConfig,
    files: Vec<Tracked>,
    /// Identities of files that were copy-truncated: a new file with this
    /// fingerprint is the copy and continues at the offset (with the polls
    /// and time it has waited).
    ghosts: Vec<Ghost>,
    /// Offsets from the last checkpoint, by fingerprint, for files not yet found.
    restored: Vec<(Vec<u8>, u64)>,
    first_poll: bool,
    next_id: u64,
    /// New files that look like a copy of an open file (same first bytes),
    /// by inode, with the polls they were held back for and since when.
    deferred: std::collections::HashMap<(u64, u64), (u32, Instant)>,
    /// The last poll stopped at a file's read budget: poll again at once.
    more: bool,
    /// Files closed while idle (read and delivered to their end), by inode:
    /// they are opened again when they grow, where they were left.
    closed: std::collections::HashMap<(u64, u64), Closed>,
    closed_ids: std::collections::HashSet<u64>,
    closed_order: std::collections::VecDeque<(u64, u64)>,
    /// Called between the truncation check and the read of each file (tests
    /// put a rotation exactly there).
    pub before_read: Option<ReadHook>,
    /// Files found this poll by the backup patterns alone (not the include).
    backup_only: std::collections::HashSet<(u64, u64)>,
    /// Files the holder opened, not taken yet.
    held: std::sync::Arc<std::sync::Mutex<HeldSet>>,
    /// Files taken from the holder that could not be followed yet (empty, or
    /// a copy waiting for its original's truncation): kept open, looked at
    /// again at every poll, whether their path still exists or not.
    pending: std::collections::HashMap<(u64, u64), Held>,
    /// Contents read whose file is gone, oldest first.
    retired: std::collections::VecDeque<Retired>,
    /// Decompressed first bytes of compressed backups, by inode, with the
    /// length they had (each backup is decoded once to match it).
    heads: std::collections::HashMap<(u64, u64), (u64, Vec<u8>, u32)>,
    /// Compressed backups whose first bytes could not be decoded yet (being
    /// written): compressed length, since when, polls.
    unripe: std::collections::HashMap<(u64, u64), (u64, Instant, u32)>,
    /// Files the holder saw and could not hold (`max_held_files`), by inode:
    /// path, fingerprint, length, since when, polls. Each is found again (by
    /// its path or its compressed backup) or counted as lost.
    glimpsed: std::collections::HashMap<(u64, u64), Glimpse>,
    /// The first bytes of followed files rewritten (copy-truncated and
    /// refilled) since they were last read, as of this poll.
    rewritten: Vec<Vec<u8>>,
    events: Events,
}

/// A file seen and not held.
struct Glimpse {
    path: PathBuf,
    fp: Vec<u8>,
    len: u64,
    since: Instant,
    polls: u32,
}

/// A file closed while idle.
struct Closed {
    id: u64,
    fp: Vec<u8>,
    offset: u64,
    absent_polls: u32,
    /// For a compressed backup, its length on disk (offsets are decompressed ones).
    disk: Option<u64>,
}

/// A content that was read to `offset` and whose file is gone (drained,
/// or forgotten once closed): the next file found carrying it (most often
/// its compressed backup) continues there.
struct Retired {
    id: u64,
    fp: Vec<u8>,
    offset: u64,
    since: Instant,
    polls: u32,
}

/// The offset of a content taken as read whole, however long it is.
const ALL: u64 = u64::MAX;
/// Retired contents remembered at most (each holds a fingerprint).
const MAX_RETIRED: usize = 10_000;
/// How long a retired content waits for a file carrying it: a compressed
/// backup appears as soon as its compression starts, `delaycompress` a
/// rotation later, and the file it was is then still there (closed, not retired).
const RETIRE_TTL: Duration = Duration::from_secs(300);
/// Compressed backups decompressed at once, at most (each decoder holds its
/// window: 32 KiB for gzip, up to 64 MiB for zstd and xz); the others wait,
/// held open.
const MAX_DECODERS: usize = 2;
/// How long a compressed backup cut short may stay unchanged before it is
/// taken as broken (gzip writing it grows it well within this).
const STALL: Duration = Duration::from_secs(30);

/// Files closed while idle that are remembered at most (beyond, the oldest
/// are forgotten: read again from their checkpoint, which the receiver keeps).
const MAX_CLOSED: usize = 100_000;

/// A test hook: called with a file's path before it is read.
pub type ReadHook = Box<dyn FnMut(&Path) + Send + Sync>;

/// How long a new file that looks like a copy of an open one waits for the
/// open one's truncation (logrotate's copytruncate truncates right after copying).
const DEFER: Duration = Duration::from_secs(2);
/// How long a truncated file's identity waits for its copy to be found.
const GHOST_TTL: Duration = Duration::from_secs(30);

/// Paths matching the include globs and none of the excludes.
fn discover(include: &[String], exclude: &[glob::Pattern]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for pat in include {
        let Ok(paths) = glob::glob(pat) else { continue };
        for p in paths.flatten() {
            if p.is_file() && !exclude.iter().any(|e| e.matches_path(&p)) && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// A file opened by the [`Holder`] and not yet taken by the tailer.
struct Held {
    path: PathBuf,
    file: File,
}

/// A short name of a content's first bytes for debug logs (FNV-1a of up
/// to 64 of them: enough to follow one content across files, without
/// writing log lines into the daemon's log).
pub fn content_tag(fp: &[u8]) -> String {
    let h = fp[..fp.len().min(64)]
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
        });
    format!("{h:016x}")
}

/// Whether `a` and `b` are the first bytes of the same content (one may
/// have been taken while the file was shorter).
fn same(a: &[u8], b: &[u8]) -> bool {
    starts_with(a, b) || starts_with(b, a)
}

/// What the holder hands the tailer: files opened since the tailer last
/// looked, and what it has already opened (by device, inode and birth, with
/// the length it had, so a file that grows is handed over again).
#[derive(Default)]
struct HeldSet {
    files: std::collections::HashMap<(u64, u64), Held>,
    seen: std::collections::HashMap<(u64, u64, i128), u64>,
    /// Files the tailer has open itself (followed, or waiting), as of its last poll.
    followed: usize,
    /// Files not held (the limit was reached): path, first bytes, length.
    glimpsed: std::collections::HashMap<(u64, u64), (PathBuf, Vec<u8>, u64)>,
}

/// Opens matching files as soon as they appear, apart from reading them.
///
/// The tailer finds files only when it polls, and it polls again only once
/// the lines of its last poll are delivered. A rotation that renames a file
/// and compresses it away (`logrotate`'s `compress` without `delaycompress`,
/// or `delaycompress` one rotation later) inside one such wait took the file
/// out of the chain before it was ever opened: its lines were lost. An open
/// descriptor keeps an unlinked file readable, so the holder opens each new
/// file within one poll interval whatever the delivery is doing, and the
/// tailer reads it from that descriptor when it gets to it.
pub struct Holder {
    include: Vec<String>,
    exclude: Vec<glob::Pattern>,
    max_held: usize,
    fp_size: usize,
    shared: std::sync::Weak<std::sync::Mutex<HeldSet>>,
}

impl Holder {
    /// One look for new or grown files; `false` once the tailer is gone.
    pub fn scan(&self) -> bool {
        let Some(shared) = self.shared.upgrade() else {
            return false;
        };
        let paths = discover(&self.include, &self.exclude);
        let mut found = Vec::with_capacity(paths.len());
        for path in paths {
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            found.push((path, meta));
        }
        let Ok(mut set) = shared.lock() else {
            return false;
        };
        let mut present = std::collections::HashSet::new();
        for (path, meta) in found {
            let key = birth_key(&meta);
            present.insert(key);
            if set.seen.get(&key) == Some(&meta.len()) {
                continue;
            }
            let full = set.files.len() + set.followed >= self.max_held
                && !set.files.contains_key(&(key.0, key.1));
            // Opened after the stat: a file replaced in between is seen at the next scan.
            let Ok(mut file) = File::open(&path) else {
                continue;
            };
            match file.metadata() {
                Ok(m) if birth_key(&m) == key => {}
                _ => continue,
            }
            set.seen.insert(key, meta.len());
            let Ok(fp) = read_fp(&mut file, self.fp_size) else {
                continue;
            };
            if Packing::detect(&fp).is_some() || Packing::undecided(&fp) {
                // A compressed backup (or one whose first bytes are still
                // being written) stays until `rotate N` removes it.
                continue;
            }
            if full {
                // The tailer opens it by its path when it polls; if it is gone
                // by then, its compressed backup or its loss is accounted for.
                set.glimpsed.insert((key.0, key.1), (path, fp, meta.len()));
                continue;
            }
            set.files.insert((key.0, key.1), Held { path, file });
        }
        set.seen.retain(|k, _| present.contains(k));
        true
    }
}

/// A file not followed yet stays open for the next poll, unless it is gone
/// and empty (nothing of it is on disk to read).
fn keep(
    pending: &mut std::collections::HashMap<(u64, u64), Held>,
    dev_ino: (u64, u64),
    path: PathBuf,
    file: File,
    meta: &std::fs::Metadata,
) {
    if meta.nlink() > 0 || meta.len() > 0 {
        pending.insert(dev_ino, Held { path, file });
    }
}

/// A file's identity for the holder: device, inode and birth time (an inode
/// freed by a compressed-away backup is soon reused by the next new log).
fn birth_key(meta: &std::fs::Metadata) -> (u64, u64, i128) {
    let born = meta
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(i128::from(meta.ctime()), |d| d.as_nanos() as i128);
    (meta.dev(), meta.ino(), born)
}

/// Whether `new` begins with all of `known` (a file keeps its first bytes as it grows).
fn starts_with(new: &[u8], known: &[u8]) -> bool {
    !known.is_empty() && new.len() >= known.len() && new[..known.len()] == *known
}

fn read_fp(file: &mut File, size: usize) -> std::io::Result<Vec<u8>> {
    let mut fp = Vec::with_capacity(size);
    file.seek(SeekFrom::Start(0))?;
    Read::take(&mut *file, size as u64).read_to_end(&mut fp)?;
    Ok(fp)
}

impl Tailer {
    /// A tailer; `restored` comes from the checkpoint file.
    pub fn new(cfg: TailConfig, restored: Vec<Checkpoint>) -> Self {
        Tailer {
            cfg,
            files: Vec::new(),
            ghosts: Vec::new(),
            restored: restored
                .into_iter()
                .filter_map(|c| Some((hex::decode(&c.fingerprint).ok()?, c.offset)))
                .collect(),
            first_poll: true,
            backup_only: std::collections::HashSet::new(),
            next_id: 1,
            deferred: std::collections::HashMap::new(),
            more: false,
            closed: std::collections::HashMap::new(),
            closed_ids: std::collections::HashSet::new(),
            closed_order: std::collections::VecDeque::new(),
            before_read: None,
            held: std::sync::Arc::default(),
            pending: std::collections::HashMap::new(),
            retired: std::collections::VecDeque::new(),
            heads: std::collections::HashMap::new(),
            unripe: std::collections::HashMap::new(),
            glimpsed: std::collections::HashMap::new(),
            rewritten: Vec::new(),
            events: Events::default(),
        }
    }

    /// What happened to compressed backups and unread files since the last call.
    pub fn take_events(&mut self) -> Events {
        std::mem::take(&mut self.events)
    }

    /// Remember a content read to `offset` whose file is gone.
    fn retire(&mut self, id: u64, fp: Vec<u8>, offset: u64, now: Instant) {
        if fp.is_empty() {
            return;
        }
        self.retired.push_back(Retired {
            id,
            fp,
            offset,
            since: now,
            polls: 0,
        });
        while self.retired.len() > MAX_RETIRED {
            self.retired.pop_front();
        }
    }

    /// Where a content `fp` was read up to, by a file no longer followed
    /// (closed while idle, or gone): the offset, and whether it was taken
    /// (a retired content is continued by one file only).
    fn known_offset(&mut self, fp: &[u8]) -> Option<u64> {
        if let Some(c) = self.closed.values().find(|c| same(fp, &c.fp)) {
            return Some(c.offset);
        }
        let i = self.retired.iter().position(|r| same(fp, &r.fp))?;
        self.retired.remove(i).map(|r| r.offset)
    }

    /// Files opened since the last call, with where reading starts: their
    /// first checkpoint, so a restart before any line is delivered still
    /// resumes there.
    pub fn new_files(&mut self) -> Vec<(u64, Checkpoint)> {
        self.files
            .iter_mut()
            .filter(|t| !t.reported)
            .map(|t| {
                t.reported = true;
                (
                    t.id,
                    Checkpoint {
                        fingerprint: hex::encode(&t.fp),
                        offset: t.start,
                        path: t.path.display().to_string(),
                    },
                )
            })
            .collect()
    }

    /// Lines of file `id` before `offset` were delivered.
    pub fn set_delivered(&mut self, id: u64, offset: u64) {
        if let Some(t) = self.files.iter_mut().find(|t| t.id == id) {
            t.delivered = t.delivered.max(offset);
        }
    }

    /// Read file `id` again from `offset` (its last delivered line end),
    /// after an exporter gave up on lines after it. `false` when that is no
    /// longer possible: the file was closed, or truncated since (its copy
    /// was followed from where reading had got to).
    pub fn rewind(&mut self, id: u64, offset: u64) -> bool {
        let Some(t) = self.files.iter_mut().find(|t| t.id == id) else {
            return false;
        };
        if t.fp.is_empty() || offset > t.read {
            return false;
        }
        t.read = offset;
        t.partial.clear();
        t.partial_start = offset;
        t.skipping = false;
        t.delivered = offset;
        true
    }

    /// Whether file `id` is still open.
    pub fn is_open(&self, id: u64) -> bool {
        self.files.iter().any(|t| t.id == id)
    }

    /// Whether file `id` is open, closed while idle, or gone and remembered
    /// for its compressed backup (its checkpoint stays).
    pub fn is_known(&self, id: u64) -> bool {
        self.closed_ids.contains(&id) || self.is_open(id) || self.retired.iter().any(|r| r.id == id)
    }

    /// Whether the last poll left unread data (a file hit its read budget).
    pub fn has_more(&self) -> bool {
        self.more
    }

    /// Files currently open: followed, and held ahead of being followed.
    pub fn open_files(&self) -> usize {
        let held = self.held.lock().map(|s| s.files.len()).unwrap_or(0);
        self.files.len() + self.pending.len() + held
    }

    /// Fingerprint and path of an open file.
    pub fn identity(&self, id: u64) -> Option<(String, String)> {
        self.files
            .iter()
            .find(|t| t.id == id)
            .map(|t| (hex::encode(&t.fp), t.path.display().to_string()))
    }

    /// The holder of this tailer: run [`Holder::scan`] on a thread of its
    /// own, every poll interval, so that a file is held open from the moment
    /// it appears however long a poll's lines take to deliver. It stops
    /// (its `scan` returns `false`) once the tailer is dropped.
    pub fn holder(&self) -> Holder {
        Holder {
            include: self.cfg.include.clone(),
            exclude: self.cfg.exclude.clone(),
            max_held: self.cfg.max_held,
            fp_size: self.cfg.fp_size,
            shared: std::sync::Arc::downgrade(&self.held),
        }
    }

    /// One round: find files, read what is new. Returns complete lines, and
    /// errors worth logging (a file that could not be read).
    pub fn poll(&mut self) -> (Vec<Line>, Vec<String>) {
        let mut errors = Vec::new();
        let now = Instant::now();
        for t in &mut self.files {
            t.absent_polls += 1;
        }
        for c in self.closed.values_mut() {
            c.absent_polls += 1;
        }
        let candidates = self.candidates(now);
        self.refresh_identities();
        // Compressed backups are matched after every plain file of this
        // round is followed: a content still readable plain is read plain.
        let mut packed_found = Vec::new();
        for c in candidates {
            self.admit(c, now, &mut packed_found, &mut errors);
        }
        self.follow_all_packed(packed_found, now);
        self.glimpses(now);
        self.first_poll = false;
        if let Ok(mut set) = self.held.lock() {
            set.followed = self.files.len() + self.pending.len();
        }
        self.forget(now);
        let mut lines = Vec::new();
        self.read_all(now, &mut lines, &mut errors);
        self.close_drained(now, &mut lines);
        (lines, errors)
    }

    /// The files the patterns match now, and the files the holder opened
    /// since (which may be renamed away or deleted by now: their descriptor
    /// still reads them).
    fn candidates(&mut self, now: Instant) -> Vec<Candidate> {
        let mut held = match self.held.lock() {
            Ok(mut set) => {
                for (k, (path, fp, len)) in std::mem::take(&mut set.glimpsed) {
                    self.glimpsed.entry(k).or_insert(Glimpse {
                        path,
                        fp,
                        len,
                        since: now,
                        polls: 0,
                    });
                }
                std::mem::take(&mut set.files)
            }
            Err(_) => std::collections::HashMap::new(),
        };
        held.extend(self.pending.drain());
        let mut candidates: Vec<Candidate> = Vec::new();
        let found = discover(&self.cfg.include, &self.cfg.exclude);
        let backups: Vec<PathBuf> = discover(&self.cfg.backups, &self.cfg.exclude)
            .into_iter()
            .filter(|p| !found.contains(p))
            .collect();
        self.backup_only.clear();
        for (path, backup) in found
            .into_iter()
            .map(|p| (p, false))
            .chain(backups.into_iter().map(|p| (p, true)))
        {
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if backup {
                self.backup_only.insert((meta.dev(), meta.ino()));
            }
            let file = held.remove(&(meta.dev(), meta.ino())).map(|h| h.file);
            candidates.push((path, meta, file, true));
        }
        for (_, h) in held {
            if let Ok(meta) = h.file.metadata() {
                candidates.push((h.path, meta, Some(h.file), false));
            }
        }
        candidates
    }

    /// Follow a candidate, from where its content was read up to; or hold it
    /// (too short to tell, a copy in progress, a backup being read), or set
    /// it aside for the compressed backups (`packed_found`).
    fn admit(
        &mut self,
        (path, meta, held_file, matched): Candidate,
        now: Instant,
        packed_found: &mut Vec<(PathBuf, std::fs::Metadata, File, Packing)>,
        errors: &mut Vec<String>,
    ) {
        let dev_ino = (meta.dev(), meta.ino());
        if let Some(t) = self.files.iter_mut().find(|t| t.dev_ino == dev_ino) {
            if matched {
                t.absent_polls = 0;
                t.path = path;
            }
            return;
        }
        let mut resumed: Option<Closed> = None;
        if let Some(c) = self.closed.get_mut(&dev_ino) {
            if matched {
                c.absent_polls = 0;
            }
            if c.disk.unwrap_or(c.offset) == meta.len() {
                return; // closed and unchanged: nothing to open
            }
            resumed = self.closed.remove(&dev_ino);
            if let Some(c) = &resumed {
                self.closed_ids.remove(&c.id);
            }
        }
        let opened = match held_file {
            Some(f) => Ok(f),
            // The path may name another file by now (logrotate renames
            // every backup at each rotation): only the file whose
            // identity was read is taken; another is seen at the next poll.
            None => File::open(&path)
                .and_then(|f| {
                    let m = f.metadata()?;
                    Ok(((m.dev(), m.ino()) == dev_ino).then_some(f))
                })
                .and_then(|f| f.ok_or_else(|| std::io::ErrorKind::NotFound.into())),
        };
        let mut file = match opened {
            Ok(f) => f,
            Err(e) => {
                if let Some(c) = resumed {
                    // Looked at again next time, as it was.
                    self.closed_ids.insert(c.id);
                    self.closed.insert(dev_ino, c);
                }
                if e.kind() != std::io::ErrorKind::NotFound {
                    errors.push(format!("{}: {e}", path.display()));
                }
                return;
            }
        };
        let fp = match read_fp(&mut file, self.cfg.fp_size) {
            Ok(fp) => fp,
            Err(e) => {
                errors.push(format!("{}: {e}", path.display()));
                return;
            }
        };
        let len = meta.len();
        if let Some(kind) = Packing::detect(&fp) {
            if let Some(c) = resumed {
                // A compressed backup that changed: matched again by its content.
                self.retire(c.id, c.fp, c.offset, now);
            }
            packed_found.push((path, meta, file, kind));
            return;
        }
        if Packing::undecided(&fp) && fp.len() as u64 == len {
            // Too short to tell whether it is a compressed backup being written.
            keep(&mut self.pending, dev_ino, path, file, &meta);
            return;
        }
        if let Some(c) = resumed {
            if len > c.offset && starts_with(&fp, &c.fp) {
                // A closed file grew: continue where it was left, as the same file.
                self.files.push(Tracked {
                    reported: true,
                    ..Tracked::at(c.id, fp, file, dev_ino, path, c.offset, now)
                });
                return;
            }
            // Truncated (or rewritten) while closed: its copy continues it.
            self.ghosts.push((c.fp, c.offset, 0, now));
        }
        if self.waits(&fp, dev_ino, now) {
            keep(&mut self.pending, dev_ino, path, file, &meta);
            return;
        }
        self.deferred.remove(&dev_ino);
        let start = self.start_offset(&fp, len, self.backup_only.contains(&dev_ino));
        self.files.push(Tracked::at(
            self.next_id,
            fp,
            file,
            dev_ino,
            path,
            start,
            now,
        ));
        self.next_id += 1;
    }

    /// Whether a new content waits before it is followed: empty (identified
    /// once it has content), the original of a compressed backup being read,
    /// or most likely a copy-truncate in progress.
    fn waits(&mut self, fp: &[u8], dev_ino: (u64, u64), now: Instant) -> bool {
        if fp.is_empty() {
            // Identify it once it has content; keep it open till then.
            return true;
        }
        let is_ghost = self.ghosts.iter().any(|(g, _, _, _)| starts_with(fp, g));
        if self
            .files
            .iter()
            .any(|t| t.packed.is_some() && same(fp, &t.fp))
        {
            // Its compressed backup is being read (the original, held
            // open before it was compressed away): it waits for it, and
            // continues where it ends.
            return true;
        }
        if !is_ghost
            && (self.files.iter().any(|t| starts_with(fp, &t.fp))
                || self.rewritten.iter().any(|h| same(fp, h)))
        {
            // Same first bytes as an open file: most likely a copy-truncate in
            // progress (copied, not yet truncated). Wait for the truncation,
            // which turns it into a ghost match: a few polls and `DEFER`
            // at least (polls run back to back under load).
            let (polls, since) = self.deferred.entry(dev_ino).or_insert((0, now));
            *polls += 1;
            if *polls <= 3 || now.duration_since(*since) < DEFER {
                return true;
            }
        }
        false
    }

    /// Where a newly found content starts: where its copy-truncated
    /// original, its closed original, a file gone since or the checkpoint
    /// left it; else its start (its end on the first poll with `start_at: end`).
    fn start_offset(&mut self, fp: &[u8], len: u64, backup_only: bool) -> u64 {
        if let Some(i) = self
            .ghosts
            .iter()
            .position(|(g, _, _, _)| starts_with(fp, g))
        {
            // The copy of a file that was copy-truncated: continue where it was read up to.
            let (_, off, _, _) = self.ghosts.remove(i);
            off.min(len)
        } else if let Some(c) = self.closed.values().find(|c| starts_with(fp, &c.fp)) {
            // The copy of a file closed while idle (copy-truncate): all of it
            // up to where that file was left was delivered.
            c.offset.min(len)
        } else if let Some(i) = self.retired.iter().position(|r| same(fp, &r.fp)) {
            // A content read before, by a file gone since (its compressed
            // backup, most often): continue where it was left.
            self.retired.remove(i).map_or(0, |r| r.offset.min(len))
        } else if let Some(i) = self.restored.iter().position(|(r, _)| starts_with(fp, r)) {
            let (_, off) = self.restored.remove(i);
            if off <= len {
                off
            } else {
                0
            }
        } else if self.first_poll && (self.cfg.start_at_end || backup_only) {
            len
        } else {
            0
        }
    }

    /// Follow the compressed backups found this round.
    fn follow_all_packed(
        &mut self,
        packed_found: Vec<(PathBuf, std::fs::Metadata, File, Packing)>,
        now: Instant,
    ) {
        // Decoded heads and unripe streams of backups no longer there are
        // forgotten (their inode may be reused by another file).
        let present: std::collections::HashSet<(u64, u64)> = packed_found
            .iter()
            .map(|(_, m, _, _)| (m.dev(), m.ino()))
            .collect();
        // Kept through a few polls of absence: a directory listing taken
        // while logrotate renames every backup can miss one.
        for (k, (_, _, absent)) in self.heads.iter_mut() {
            *absent = if present.contains(k) { 0 } else { *absent + 1 };
        }
        self.heads.retain(|_, (_, _, absent)| *absent <= 5);
        self.unripe.retain(|k, _| present.contains(k));
        for (path, meta, file, kind) in packed_found {
            self.follow_packed(path, &meta, file, kind, now);
        }
    }

    /// Forget what is gone for good: closed files gone from every pattern,
    /// retired contents no backup carries, ghosts whose copy never came.
    fn forget(&mut self, now: Instant) {
        let gone: Vec<(u64, u64)> = self
            .closed
            .iter()
            .filter(|(_, c)| c.absent_polls >= 2)
            .map(|(k, _)| *k)
            .collect();
        for k in gone {
            if let Some(c) = self.closed.remove(&k) {
                self.closed_ids.remove(&c.id);
                self.heads.remove(&k);
                self.retire(c.id, c.fp, c.offset, now);
            }
        }
        for r in &mut self.retired {
            r.polls += 1;
        }
        let heads = &self.heads;
        let carried = |fp: &[u8]| heads.values().any(|(_, h, _)| same(fp, h));
        // Kept while a compressed backup on disk carries it, whether or not
        // it could be followed yet (`max_held_files`).
        self.retired.retain(|r| {
            r.polls <= 10 || now.duration_since(r.since) < RETIRE_TTL || carried(&r.fp)
        });
        // A ghost waits for its copy a few polls and `GHOST_TTL` at least.
        for (_, _, polls, _) in &mut self.ghosts {
            *polls += 1;
        }
        let events = &mut self.events;
        self.ghosts.retain(|(fp, off, polls, since)| {
            let wait = *polls <= 5 || now.duration_since(*since) < GHOST_TTL || carried(fp);
            if !wait {
                events.lost.push((
                    "copy_not_found",
                    String::from_utf8_lossy(&fp[..fp.len().min(80)]).into_owned(),
                    format!("a copy-truncated file's copy was not found; what followed offset {off} in it"),
                ));
            }
            wait
        });
        self.deferred
            .retain(|_, (_, since)| now.duration_since(*since) < DEFER * 10);
    }

    /// Read what is new in every followed file.
    fn read_all(&mut self, now: Instant, lines: &mut Vec<Line>, errors: &mut Vec<String>) {
        let max_line = self.cfg.max_line;
        let fp_size = self.cfg.fp_size;
        self.more = false;
        let mut decoders = 0;
        for t in &mut self.files {
            if t.packed.is_some() {
                let before = lines.len();
                self.more |= read_packed(t, max_line, lines, &mut decoders, now, &mut self.events);
                self.events.packed_lines += (lines.len() - before) as u64;
                continue;
            }
            let before = lines.len();
            let snapshot = (t.read, t.partial.clone(), t.partial_start, t.skipping);
            let read = truncated(t).and_then(|cut| {
                if cut {
                    return Ok(None);
                }
                if let Some(hook) = self.before_read.as_mut() {
                    hook(&t.path);
                }
                let was = t.read;
                let more = read_new(t, max_line, fp_size, lines)?;
                if t.read > was {
                    t.grew = now;
                }
                // Truncated (and maybe refilled) while it was read: what was
                // read may be the new content at the old offset. Undo the read;
                // the copy has all of it.
                Ok((!truncated(t)?).then_some(more))
            });
            match read {
                Ok(Some(more)) => self.more |= more,
                Ok(None) => {
                    lines.truncate(before);
                    (t.read, t.partial, t.partial_start, t.skipping) = snapshot;
                    copy_truncated(t, &mut self.ghosts, &mut self.next_id, fp_size, now);
                    self.more = true; // read the new content at once
                }
                Err(e) => errors.push(format!("{}: {e}", t.path.display())),
            }
        }
    }

    /// Close the files read and delivered to their end: gone from every
    /// pattern (a partial last line is a line then), or idle.
    fn close_drained(&mut self, now: Instant, lines: &mut Vec<Line>) {
        let mut i = 0;
        while i < self.files.len() {
            let t = &mut self.files[i];
            let len = match &t.packed {
                Some(p) => p.end.unwrap_or(u64::MAX),
                None => t.file.metadata().map(|m| m.len()).unwrap_or(0),
            };
            if t.absent_polls >= 2 && t.read >= len {
                if !t.partial.is_empty() && !t.skipping {
                    lines.push(Line {
                        file: t.id,
                        offset: t.partial_start,
                        end: t.read,
                        bytes: std::mem::take(&mut t.partial),
                        too_long: false,
                    });
                    t.partial_start = t.read;
                }
                if t.delivered >= t.read {
                    tracing::debug!(content = %content_tag(&t.fp), offset = t.read, id = t.id, packed = t.packed.is_some(), "Gone and read to its end: closed.");
                    // Retired, compressed or not: a backup missed by the
                    // listings (renamed meanwhile) is found again by its content.
                    let t = self.files.remove(i);
                    self.retire(t.id, t.fp, t.read, now);
                    continue;
                }
            } else if t.read >= len
                && t.partial.is_empty()
                && !t.skipping
                && !t.fp.is_empty()
                && t.delivered >= t.read
                && now.duration_since(t.grew) >= self.cfg.close_idle
            {
                // Idle, read and delivered to its end: close it, remember where it was.
                tracing::debug!(content = %content_tag(&t.fp), offset = t.read, id = t.id, packed = t.packed.is_some(), "Idle and read to its end: closed.");
                let t = self.files.remove(i);
                self.closed_ids.insert(t.id);
                let disk = match &t.packed {
                    Some(_) => Some(t.file.metadata().map(|m| m.len()).unwrap_or(0)),
                    None => None,
                };
                self.closed.insert(
                    t.dev_ino,
                    Closed {
                        id: t.id,
                        fp: t.fp,
                        offset: t.read,
                        absent_polls: 0,
                        disk,
                    },
                );
                self.closed_order.push_back(t.dev_ino);
                while self.closed_order.len() > MAX_CLOSED {
                    if let Some(k) = self.closed_order.pop_front() {
                        if let Some(c) = self.closed.remove(&k) {
                            self.closed_ids.remove(&c.id);
                        }
                    }
                }
                continue;
            }
            i += 1;
        }
    }
}

/// A copy-truncated file's content waiting for its copy: its first bytes,
/// the offset read up to, the polls waited and since when.
type Ghost = (Vec<u8>, u64, u32, Instant);

/// A file to look at: its path, metadata, the descriptor the holder kept
/// (if any), and whether the patterns match it now.
type Candidate = (PathBuf, std::fs::Metadata, Option<File>, bool);

/// A file copy-truncated while it was read: what was read may be the new
/// content at the old offset, so the read was undone; its copy continues it
/// after the last complete line (a partial line is read again from its
/// start there), and the new content is a new file.
fn copy_truncated(
    t: &mut Tracked,
    ghosts: &mut Vec<Ghost>,
    next_id: &mut u64,
    fp_size: usize,
    now: Instant,
) {
    // Continue in the copy after the last complete line: a partial
    // line read so far is read again from its start there.
    tracing::debug!(content = %content_tag(&t.fp), offset = t.partial_start, id = t.id, path = %t.path.display(), "Copy-truncated: its copy continues it.");
    ghosts.push((std::mem::take(&mut t.fp), t.partial_start, 0, now));
    // The new content's identity at once: a copy or a
    // compressed backup of it found before its next read
    // must wait for it, not be read as well.
    t.fp = read_fp(&mut t.file, fp_size).unwrap_or_default();
    t.read = 0;
    t.partial.clear();
    t.partial_start = 0;
    t.skipping = false;
    t.delivered = 0;
    // The new content is a new file to the receiver: offsets of the
    // old one (in flight, checkpointed) never apply to it.
    t.id = *next_id;
    *next_id += 1;
    t.reported = false;
    t.start = 0;
}

impl Tailer {
    /// Bring the identities of followed files up to date before new files
    /// are compared with them: a file's first bytes grow with it (it may
    /// have been empty or short when last read), and a file copy-truncated
    /// and refilled since it was last read (a starved reader) holds a new
    /// content already, whose copies and compressed backups must wait for
    /// it rather than be read as well. The truncation itself is handled
    /// when the file is read.
    fn refresh_identities(&mut self) {
        self.rewritten.clear();
        let fp_size = self.cfg.fp_size;
        for t in self.files.iter_mut().filter(|t| t.packed.is_none()) {
            let Ok(fp) = read_fp(&mut t.file, fp_size) else {
                continue;
            };
            if fp.starts_with(&t.fp) {
                if fp.len() > t.fp.len() {
                    t.fp = fp;
                }
            } else if !fp.is_empty() {
                self.rewritten.push(fp);
            }
        }
    }

    /// A compressed backup found: matched by its decompressed first bytes
    /// to the content it continues, and followed from that content's offset.
    fn follow_packed(
        &mut self,
        path: PathBuf,
        meta: &std::fs::Metadata,
        file: File,
        kind: Packing,
        now: Instant,
    ) {
        let dev_ino = (meta.dev(), meta.ino());
        let name = path.display().to_string();
        let head = match self.heads.get(&dev_ino) {
            Some((len, head, _)) if *len == meta.len() => head.clone(),
            _ => match packed::head(kind, &file, self.cfg.fp_size) {
                Ok(head) => {
                    self.unripe.remove(&dev_ino);
                    self.heads.insert(dev_ino, (meta.len(), head.clone(), 0));
                    head
                }
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    // Cut short: most often still being written. Held open, it
                    // is looked at again; unchanged for `STALL`, it is broken.
                    let (len, since, polls) =
                        self.unripe.entry(dev_ino).or_insert((meta.len(), now, 0));
                    if *len != meta.len() {
                        (*len, *since, *polls) = (meta.len(), now, 0);
                    }
                    *polls += 1;
                    if *polls > 5 && now.duration_since(*since) >= STALL {
                        self.unripe.remove(&dev_ino);
                        self.corrupt(dev_ino, meta.len(), name, kind, &e);
                    } else {
                        keep(&mut self.pending, dev_ino, path, file, meta);
                    }
                    return;
                }
                Err(e) => {
                    self.corrupt(dev_ino, meta.len(), name, kind, &e);
                    return;
                }
            },
        };
        if head.is_empty() {
            self.done(dev_ino, meta.len(), head, 0);
            return;
        }
        // One content, one reader: the file it was compressed from is still
        // followed (renamed, or held open after it was deleted), and reads
        // it all. The backup is looked at again once that file is gone.
        if let Some(t) = self.files.iter().find(|t| same(&head, &t.fp)) {
            if t.packed.is_some() {
                // A second compressed copy of what is being read.
                self.done(dev_ino, meta.len(), head, ALL);
            }
            return;
        }
        if self.rewritten.iter().any(|h| same(&head, h)) {
            // What a followed file holds now that it was rewritten
            // (copy-truncated) since it was last read: that file reads it.
            return;
        }
        if self.files.len() + self.pending.len() >= self.cfg.max_held {
            // As many files open as `max_held_files`: it stays on disk and
            // is matched when it is followed, at a later poll (what it
            // continues is kept for it meanwhile: see `carried`).
            return;
        }
        let (start, outcome) = if let Some(i) = self
            .ghosts
            .iter()
            .position(|(g, _, _, _)| starts_with(&head, g))
        {
            // The compressed copy of a copy-truncated file.
            (self.ghosts.remove(i).1, "resumed")
        } else if let Some(off) = self.known_offset(&head) {
            if off == ALL {
                // Taken as read before (skipped, or a second copy).
                self.done(dev_ino, meta.len(), head, ALL);
                return;
            }
            (off, "resumed")
        } else if let Some(i) = self
            .restored
            .iter()
            .position(|(r, _)| starts_with(&head, r))
        {
            (self.restored.remove(i).1, "resumed")
        } else if self.first_poll && (self.cfg.start_at_end || self.backup_only.contains(&dev_ino))
        {
            self.events.backups.push(("skipped", name, kind.name()));
            self.done(dev_ino, meta.len(), head, ALL);
            return;
        } else if self.glimpsed.values().any(|g| same(&head, &g.fp)) {
            // Seen by the holder, never held nor read.
            (0, "resumed")
        } else {
            // A content never seen (it was written, rotated and compressed
            // between two looks): read from its start, like any new file.
            (0, "new")
        };
        self.glimpsed.retain(|_, g| !same(&head, &g.fp));
        tracing::debug!(content = %content_tag(&head), offset = start, id = self.next_id, %outcome, file = %name, "Following a compressed backup.");
        self.events.backups.push((outcome, name, kind.name()));
        self.files.push(Tracked {
            packed: Some(Packed::new(kind)),
            ..Tracked::at(self.next_id, head, file, dev_ino, path, start, now)
        });
        self.next_id += 1;
    }

    /// A compressed backup that cannot be read (`error`): reported, counted
    /// as lost, and not looked at again unless it changes.
    fn corrupt(
        &mut self,
        dev_ino: (u64, u64),
        len: u64,
        name: String,
        kind: Packing,
        error: &std::io::Error,
    ) {
        self.events
            .backups
            .push(("corrupt", name.clone(), kind.name()));
        self.events
            .lost
            .push(("backup_corrupt", name, format!("{error}")));
        self.done(dev_ino, len, Vec::new(), 0);
    }

    /// A compressed backup with nothing to read: remembered by its inode
    /// and length, not looked at again unless it changes. [`ALL`] as
    /// `offset` when what it holds is taken as read (skipped, or read from
    /// another file), so that it is not read if found again by its content.
    fn done(&mut self, dev_ino: (u64, u64), disk: u64, fp: Vec<u8>, offset: u64) {
        let id = self.next_id;
        self.next_id += 1;
        self.closed.insert(
            dev_ino,
            Closed {
                id,
                fp,
                offset,
                absent_polls: 0,
                disk: Some(disk),
            },
        );
        self.closed_order.push_back(dev_ino);
    }

    /// Files the holder could not hold: found since (followed, or read from
    /// their compressed backup), or, after `GHOST_TTL`, lost.
    fn glimpses(&mut self, now: Instant) {
        let files = &self.files;
        let closed = &self.closed;
        let retired = &self.retired;
        let heads = &self.heads;
        let events = &mut self.events;
        self.glimpsed.retain(|_, g| {
            g.polls += 1;
            // Found: followed, read, or in a compressed backup on disk.
            let found = files.iter().any(|t| same(&g.fp, &t.fp))
                || closed.values().any(|c| same(&g.fp, &c.fp))
                || retired.iter().any(|r| same(&g.fp, &r.fp))
                || heads.values().any(|(_, h, _)| same(&g.fp, h));
            if found {
                return false;
            }
            if g.polls <= 5 || now.duration_since(g.since) < GHOST_TTL {
                return true;
            }
            events.lost.push((
                "deleted_before_read",
                g.path.display().to_string(),
                format!("{} bytes, never read: gone before the reader got to it, and no compressed backup of it found", g.len),
            ));
            false
        });
    }
}

/// Read what is new in a compressed backup, at most `READ_BUDGET` of it;
/// `true` when there is more to read at once. While `MAX_DECODERS` other
/// backups are being read, it waits its turn (held open).
fn read_packed(
    t: &mut Tracked,
    max_line: usize,
    lines: &mut Vec<Line>,
    decoders: &mut usize,
    now: Instant,
    events: &mut Events,
) -> bool {
    let Some(p) = t.packed.as_mut() else {
        return false;
    };
    if p.end.is_some_and(|e| t.read >= e) {
        return false;
    }
    if *decoders >= MAX_DECODERS {
        return true;
    }
    *decoders += 1;
    let disk = t.file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut decoder = match p.decoder.take().and_then(|d| d.into_inner().ok()) {
        Some(d) if p.pos == t.read => d,
        _ => {
            let skipped = p
                .kind
                .decoder(&t.file)
                .and_then(|mut d| packed::skip(&mut *d, t.read).map(|n| (d, n)));
            match skipped {
                Ok((d, n)) if n == t.read => d,
                Ok(_) => {
                    // It ends before where its content was read up to: the
                    // copy of a copy-truncated file whose original was read
                    // past the copy (lines written between the copy and the
                    // truncation). Nothing in it is unread.
                    p.end = Some(t.read);
                    return false;
                }
                Err(e) => return stalled(t, disk, now, e, events),
            }
        }
    };
    let was = t.read;
    let mut budget = READ_BUDGET;
    let mut buf = vec![0u8; 64 * 1024];
    let mut ended = false;
    let mut error = None;
    while budget > 0 {
        let want = buf.len().min(budget);
        match decoder.read(&mut buf[..want]) {
            Ok(0) => {
                ended = true;
                break;
            }
            Ok(n) => {
                budget -= n;
                feed(t, &buf[..n], max_line, lines);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    if t.read > was {
        t.grew = now;
    }
    if let Some(e) = error {
        return stalled(t, disk, now, e, events);
    }
    let Some(p) = t.packed.as_mut() else {
        return false;
    };
    p.stalled = None;
    p.pos = t.read;
    if ended {
        p.end = Some(t.read);
        false // the decoder is dropped: its memory goes with it
    } else {
        p.decoder = Some(std::sync::Mutex::new(decoder));
        true
    }
}

/// A compressed stream stopped short or failed at `t.read`: what was
/// decoded before stays read; it is tried again from there at the next
/// poll, and given up on (counted as lost, with its name) once it stayed so
/// and unchanged for `STALL`.
fn stalled(
    t: &mut Tracked,
    disk: u64,
    now: Instant,
    e: std::io::Error,
    events: &mut Events,
) -> bool {
    let name = t.path.display().to_string();
    let Some(p) = t.packed.as_mut() else {
        return false;
    };
    p.decoder = None;
    let cut = e.kind() == std::io::ErrorKind::UnexpectedEof;
    let (len, since, polls) = p.stalled.get_or_insert((disk, now, 0));
    if *len != disk {
        (*len, *since, *polls) = (disk, now, 0);
    }
    *polls += 1;
    if !cut || (*polls > 5 && now.duration_since(*since) >= STALL) {
        p.end = Some(t.read);
        events
            .backups
            .push(("corrupt", name.clone(), p.kind.name()));
        events.lost.push((
            "backup_corrupt",
            name,
            format!("read up to offset {}, then: {e}", t.read),
        ));
        // A line cut by the break is not a line.
        t.partial.clear();
        t.partial_start = t.read;
        t.skipping = false;
    }
    false
}

/// Whether the file was truncated (copy-truncate): shorter than what was
/// read, or its first bytes changed (truncated and already rewritten past
/// the old offset).
fn truncated(t: &mut Tracked) -> std::io::Result<bool> {
    let len = t.file.metadata()?.len();
    let rewritten =
        !t.fp.is_empty() && len >= t.fp.len() as u64 && read_fp(&mut t.file, t.fp.len())? != t.fp;
    Ok(len < t.read || rewritten)
}

/// Read what is new; `Ok(true)` when the read budget ran out before the end.
fn read_new(
    t: &mut Tracked,
    max_line: usize,
    fp_size: usize,
    lines: &mut Vec<Line>,
) -> std::io::Result<bool> {
    let len = t.file.metadata()?.len();
    if len <= t.read {
        return Ok(false);
    }
    if t.fp.len() < fp_size {
        // The fingerprint grows with a small file, as long as what it had
        // is still there (else the file was rewritten: `truncated` sees it).
        let fp = read_fp(&mut t.file, fp_size)?;
        if fp.len() > t.fp.len() && fp.starts_with(&t.fp) {
            t.fp = fp;
        }
    }
    t.file.seek(SeekFrom::Start(t.read))?;
    let mut budget = READ_BUDGET;
    let mut buf = vec![0u8; 64 * 1024];
    while budget > 0 {
        let want = buf.len().min(budget);
        let n = t.file.read(&mut buf[..want])?;
        if n == 0 {
            break;
        }
        budget = budget.saturating_sub(n);
        feed(t, &buf[..n], max_line, lines);
    }
    Ok(budget == 0 && t.read < len)
}

/// Split `chunk`, the next bytes of `t` after `t.read`, into lines
/// (holding a partial last line, cutting over-long ones), and advance `t.read`.
fn feed(t: &mut Tracked, chunk: &[u8], max_line: usize, lines: &mut Vec<Line>) {
    let mut start = 0;
    for (i, b) in chunk.iter().enumerate() {
        if *b != b'\n' {
            continue;
        }
        let end = t.read + i as u64 + 1;
        if t.skipping {
            t.skipping = false;
        } else {
            t.partial.extend_from_slice(&chunk[start..i]);
            let mut bytes = std::mem::take(&mut t.partial);
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
            lines.push(Line {
                file: t.id,
                offset: t.partial_start,
                end,
                bytes,
                too_long: false,
            });
        }
        t.partial_start = end;
        start = i + 1;
    }
    if !t.skipping {
        t.partial.extend_from_slice(&chunk[start..]);
        if t.partial.len() > max_line {
            // Cut: report the beginning, skip to the next newline.
            let mut head = std::mem::take(&mut t.partial);
            head.truncate(max_line);
            lines.push(Line {
                file: t.id,
                offset: t.partial_start,
                end: t.read + chunk.len() as u64,
                bytes: head,
                too_long: true,
            });
            t.skipping = true;
        }
    }
    t.read += chunk.len() as u64;
}

/// Load checkpoints (missing file: none; corrupt file: none, with the reason).
pub fn load_checkpoints(path: &Path) -> (Vec<Checkpoint>, Option<String>) {
    match std::fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Vec::new(), None),
        Err(e) => (Vec::new(), Some(format!("{}: {e}", path.display()))),
        Ok(b) => match serde_json::from_slice(&b) {
            Ok(c) => (c, None),
            Err(e) => (
                Vec::new(),
                Some(format!(
                    "{}: corrupt checkpoint ignored: {e}",
                    path.display()
                )),
            ),
        },
    }
}

/// Save checkpoints atomically: write a temporary file and rename it over
/// the old one, so a crash leaves either the old or the new checkpoint.
/// With `durable`, also fsync the file and the directory, so the checkpoint
/// survives a machine crash, not only a process crash.
pub fn save_checkpoints(path: &Path, cps: &[Checkpoint], durable: bool) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(&serde_json::to_vec(cps).map_err(std::io::Error::other)?)?;
        if durable {
            f.sync_all()?;
        }
    }
    std::fs::rename(&tmp, path)?;
    if durable {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_seen_before_the_truncation_is_not_read_twice() {
        let dir = tempfile::tempdir().expect("dir");
        let log = dir.path().join("x.log");
        std::fs::write(&log, "line-0\nline-1\n").expect("write");
        let mut t = Tailer::new(cfg(dir.path()), vec![]);
        let mut all = numbers(&t.poll().0);
        std::fs::copy(&log, dir.path().join("x.log.1")).expect("copy");
        all.extend(numbers(&t.poll().0)); // the copy is seen before the truncation
        std::fs::write(&log, "line-2\n").expect("truncate and write");
        for _ in 0..5 {
            all.extend(numbers(&t.poll().0));
        }
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2]);
    }

    fn text(range: std::ops::Range<u64>) -> String {
        range.map(|n| format!("line-{n}\n")).collect()
    }

    /// The race the rotation stress test found (and `tests/gateway_log_e2e.rs`
    /// ran into under load): a copy-truncate, refilled past the old offset,
    /// landing after the truncation check and before the read. The read then
    /// took the new content at the old offset as the old file's next lines;
    /// the copy was resumed at the wrong offset (lines lost) and the new
    /// content read again from its start (lines repeated).
    #[test]
    fn a_copy_truncate_refilled_between_the_check_and_the_read_loses_and_repeats_nothing() {
        let dir = tempfile::tempdir().expect("dir");
        let log = dir.path().join("x.log");
        std::fs::write(&log, text(0..100)).expect("write");
        let mut t = Tailer::new(cfg(dir.path()), vec![]);
        let mut all = numbers(&t.poll().0);
        assert_eq!(all.len(), 100);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(text(100..200).as_bytes()))
            .expect("append");
        let fired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (l, f) = (log.clone(), fired.clone());
        let copy = dir.path().join("x.log.1");
        t.before_read = Some(Box::new(move |p| {
            if p == l && !f.swap(true, std::sync::atomic::Ordering::SeqCst) {
                std::fs::copy(&l, &copy).expect("copy");
                // Truncate, and write more than was read before.
                std::fs::write(&l, text(200..400)).expect("truncate and refill");
            }
        }));
        for _ in 0..10 {
            all.extend(numbers(&t.poll().0));
        }
        assert!(fired.load(std::sync::atomic::Ordering::SeqCst));
        all.sort_unstable();
        assert_eq!(all, (0..400).collect::<Vec<u64>>());
    }

    #[test]
    fn a_thousand_rotated_backups_do_not_hold_a_thousand_files_and_one_that_grows_continues() {
        let dir = tempfile::tempdir().expect("dir");
        let log = dir.path().join("x.log");
        let append = |p: &Path, r: std::ops::Range<u64>| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .and_then(|mut f| f.write_all(text(r).as_bytes()))
                .expect("append");
        };
        let mut t = Tailer::new(cfg(dir.path()), vec![]);
        let mut all = Vec::new();
        let mut most_open = 0;
        let poll = |t: &mut Tailer, all: &mut Vec<u64>| {
            let (lines, errors) = t.poll();
            assert!(errors.is_empty(), "{errors:?}");
            for l in &lines {
                t.set_delivered(l.file, l.end);
            }
            let got = numbers(&lines);
            all.extend(got.iter().copied());
            got
        };
        let mut n = 0;
        for r in 0..1000 {
            append(&log, n..n + 5);
            n += 5;
            poll(&mut t, &mut all);
            most_open = most_open.max(t.open_files());
            // Rotation by rename; the backups keep matching `x.log*`.
            std::fs::rename(&log, dir.path().join(format!("x.log.{r}"))).expect("rename");
        }
        for _ in 0..3 {
            poll(&mut t, &mut all);
        }
        assert!(most_open <= 3, "{most_open} files open at once");
        assert!(t.open_files() <= 1, "{}", t.open_files());
        all.sort_unstable();
        assert_eq!(all, (0..n).collect::<Vec<u64>>());
        // A closed backup written to again continues where it was left, as the same file.
        let id_before = t.closed.values().find(|c| c.offset > 0).map(|c| c.id);
        append(&dir.path().join("x.log.5"), n..n + 3);
        let mut again = Vec::new();
        for _ in 0..3 {
            again.extend(poll(&mut t, &mut all));
        }
        assert_eq!(again, vec![n, n + 1, n + 2]);
        assert!(id_before.is_some());
    }

    #[test]
    fn a_file_closed_while_idle_then_copy_truncated_is_not_read_twice() {
        let dir = tempfile::tempdir().expect("dir");
        let log = dir.path().join("x.log");
        std::fs::write(&log, text(0..50)).expect("write");
        let mut t = Tailer::new(cfg(dir.path()), vec![]);
        let mut all = Vec::new();
        for _ in 0..3 {
            let (lines, _) = t.poll();
            for l in &lines {
                t.set_delivered(l.file, l.end);
            }
            all.extend(numbers(&lines));
        }
        assert_eq!(t.open_files(), 0, "idle, read and delivered: closed");
        // logrotate copytruncate of the idle file, then new lines.
        std::fs::copy(&log, dir.path().join("x.log.1")).expect("copy");
        // The copy is seen before the truncation.
        let (lines, _) = t.poll();
        all.extend(numbers(&lines));
        std::fs::write(&log, text(50..60)).expect("truncate and write");
        for _ in 0..3 {
            let (lines, _) = t.poll();
            for l in &lines {
                t.set_delivered(l.file, l.end);
            }
            all.extend(numbers(&lines));
        }
        all.sort_unstable();
        assert_eq!(all, (0..60).collect::<Vec<u64>>());
    }

    /// The loss the real-logrotate stress test found (issue #34): the tailer
    /// polls again only once the lines of its last poll are delivered, and a
    /// rotation with `compress` renamed a new log away and deleted it (gzip)
    /// inside that wait, before any poll had opened it. The holder opens it
    /// as it appears; the tailer reads it from that descriptor.
    #[test]
    fn a_log_rotated_and_compressed_away_between_two_polls_is_read_from_the_held_descriptor() {
        let dir = tempfile::tempdir().expect("dir");
        let log = dir.path().join("x.log");
        let backup = dir.path().join("x.log.1");
        std::fs::write(&log, text(0..100)).expect("write");
        let mut t = Tailer::new(cfg(dir.path()), vec![]);
        let holder = t.holder();
        let mut all = numbers(&t.poll().0);
        assert_eq!(all.len(), 100);
        // Rotation 1 (create + compress): the log becomes the backup, which
        // gzip reads and deletes; a new log is created and written.
        std::fs::rename(&log, &backup).expect("rename");
        std::fs::remove_file(&backup).expect("compressed away");
        std::fs::write(&log, text(100..200)).expect("new log");
        // The tailer is busy delivering; the holder looks.
        assert!(holder.scan());
        // Rotation 2 takes the new log away the same way, and a third log
        // appears empty: the holder opens it too, and the tailer finds it
        // empty (it waits, held)...
        std::fs::rename(&log, &backup).expect("rename");
        std::fs::remove_file(&backup).expect("compressed away");
        let mut third = std::fs::File::create(&log).expect("third log");
        assert!(holder.scan());
        all.extend(numbers(&t.poll().0));
        // ...then the gateway writes it and it is rotated away before the
        // next poll.
        third.write_all(text(200..300).as_bytes()).expect("write");
        std::fs::rename(&log, &backup).expect("rename");
        std::fs::remove_file(&backup).expect("compressed away");
        for _ in 0..3 {
            all.extend(numbers(&t.poll().0));
        }
        all.sort_unstable();
        assert_eq!(all, (0..300).collect::<Vec<u64>>());
        // Read to their end and gone: nothing stays open.
        for _ in 0..3 {
            let (lines, _) = t.poll();
            assert!(lines.is_empty());
            for id in 1..10 {
                t.set_delivered(id, u64::MAX);
            }
        }
        assert_eq!(t.open_files(), 0);
        drop(t);
        assert!(!holder.scan(), "the holder stops with its tailer");
    }

    #[test]
    fn the_holder_opens_no_more_than_max_held_files_counting_the_followed_ones() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("x.log"), text(0..10)).expect("write");
        let mut t = Tailer::new(
            TailConfig {
                max_held: 3,
                ..cfg(dir.path())
            },
            vec![],
        );
        let holder = t.holder();
        t.poll(); // x.log is followed: one of the three
        for i in 0..5 {
            std::fs::write(
                dir.path().join(format!("x.log.{i}")),
                text(100 * i..100 * i + 5),
            )
            .expect("backup");
        }
        assert!(holder.scan());
        assert_eq!(t.open_files(), 3, "one followed, two held ahead");
        // The tailer still finds the rest by their paths when it polls.
        let (lines, _) = t.poll();
        assert_eq!(lines.len(), 10 + 5 * 5 - 10, "every backup read");
    }

    /// Compress `src` into `dst` with `tool` (gzip, zstd, xz, bzip2: the
    /// commands logrotate's `compresscmd` runs) and delete `src`, as
    /// logrotate does.
    fn compress(tool: &str, src: &Path, dst: &Path) {
        let out = std::process::Command::new(tool)
            .arg("-c")
            .arg(src)
            .output()
            .unwrap_or_else(|e| panic!("{tool}: {e}"));
        assert!(out.status.success(), "{tool} failed");
        std::fs::write(dst, out.stdout).expect("write");
        std::fs::remove_file(src).expect("remove");
    }

    /// Poll until nothing more comes, delivering every line.
    /// A tailer on `x.log` (lines 0..100), drained: the directory, the
    /// log, the tailer and the lines it read.
    fn tailing_100() -> (tempfile::TempDir, PathBuf, Tailer, Vec<u64>) {
        let dir = tempfile::tempdir().expect("dir");
        let log = dir.path().join("x.log");
        std::fs::write(&log, text(0..100)).expect("write");
        let mut t = Tailer::new(cfg(dir.path()), vec![]);
        let mut all = Vec::new();
        drain(&mut t, &mut all);
        (dir, log, t, all)
    }

    fn drain(t: &mut Tailer, all: &mut Vec<u64>) -> Events {
        let mut events = Events::default();
        for _ in 0..8 {
            let (lines, errors) = t.poll();
            assert!(errors.is_empty(), "{errors:?}");
            for l in &lines {
                t.set_delivered(l.file, l.end);
            }
            all.extend(numbers(&lines));
            let e = t.take_events();
            events.packed_lines += e.packed_lines;
            events.backups.extend(e.backups);
            events.lost.extend(e.lost);
        }
        events
    }

    /// A log written, rotated and compressed between two polls (the reader
    /// was starved): never seen, it is read whole from its compressed
    /// backup, in each format `compresscmd` may choose.
    #[test]
    fn a_log_compressed_before_it_was_ever_read_is_read_from_its_backup_in_every_format() {
        for (tool, ext, name) in [
            ("gzip", "gz", "gzip"),
            ("zstd", "zst", "zstd"),
            ("xz", "xz", "xz"),
            ("bzip2", "bz2", "bzip2"),
        ] {
            let (dir, log, mut t, mut all) = tailing_100();
            // Rotation: the log renamed and compressed, a new one written,
            // renamed and compressed too, all before the next poll.
            for (i, range) in [(1, 100..200), (2, 200..300)] {
                std::fs::write(dir.path().join("x.log.tmp"), text(range)).expect("write");
                compress(
                    tool,
                    &dir.path().join("x.log.tmp"),
                    &dir.path().join(format!("x.log.{i}.{ext}")),
                );
            }
            std::fs::write(&log, text(300..310)).expect("rewrite");
            let events = drain(&mut t, &mut all);
            all.sort_unstable();
            assert_eq!(all, (0..310).collect::<Vec<u64>>(), "{tool}");
            assert_eq!(events.packed_lines, 200, "{tool}");
            assert_eq!(events.backups.len(), 2, "{tool}: {:?}", events.backups);
            assert!(
                events
                    .backups
                    .iter()
                    .all(|(o, _, f)| *o == "new" && *f == name),
                "{tool}: {:?}",
                events.backups
            );
            assert!(events.lost.is_empty(), "{:?}", events.lost);
        }
    }

    /// An include naming the live file alone: the backups found beside it
    /// and in logrotate's `olddir` continue what it followed (the end of a
    /// log compressed before it was read, a log rotated between two
    /// looks); backups there at startup are history, not read.
    #[test]
    fn the_live_file_alone_included_its_backups_are_found_in_its_directory_and_olddir() {
        let dir = tempfile::tempdir().expect("dir");
        let d = dir.path();
        std::fs::create_dir(d.join("old")).expect("olddir");
        let conf = d.join("logrotate.conf");
        let log = d.join("x.log");
        std::fs::write(
            &conf,
            format!("{} {{\n  compress\n  olddir old\n}}\n", log.display()),
        )
        .expect("conf");
        let include = vec![log.display().to_string()];
        let backups = super::super::backups::patterns(&include, &[conf.display().to_string()]);
        // History: a backup from before the start.
        std::fs::write(d.join("x.log.tmp"), text(900..950)).expect("write");
        compress("gzip", &d.join("x.log.tmp"), &d.join("old/x.log.9.gz"));
        std::fs::write(&log, text(0..100)).expect("write");
        let mut t = Tailer::new(
            TailConfig {
                include,
                backups,
                ..cfg(d)
            },
            vec![],
        );
        let mut all = Vec::new();
        let events = drain(&mut t, &mut all);
        assert_eq!(
            all,
            (0..100).collect::<Vec<u64>>(),
            "the live file, not the history"
        );
        assert!(events.lost.is_empty(), "{:?}", events.lost);
        // The log grows, is rotated to the olddir and compressed there
        // before the reader gets to its end (read to its end and idle, it
        // was closed: `close_idle`); a next log is written, rotated beside
        // it and compressed too, all between two looks.
        assert!(t.files.is_empty(), "closed while idle");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text(100..150).as_bytes()))
            .expect("append");
        compress("gzip", &log, &d.join("old/x.log.1.gz"));
        std::fs::write(d.join("x.log.tmp"), text(150..200)).expect("write");
        compress("zstd", &d.join("x.log.tmp"), &d.join("x.log-20261206.zst"));
        std::fs::write(&log, text(200..210)).expect("new log");
        let events = drain(&mut t, &mut all);
        all.sort_unstable();
        assert_eq!(all, (0..210).collect::<Vec<u64>>(), "{:?}", events.backups);
        assert_eq!(events.packed_lines, 100, "{:?}", events.backups);
        assert!(events.lost.is_empty(), "{:?}", events.lost);
        // Without the backup patterns (the include alone), the same
        // rotation loses what the backups hold.
        let dir2 = tempfile::tempdir().expect("dir");
        let log2 = dir2.path().join("x.log");
        std::fs::write(&log2, text(0..10)).expect("write");
        let mut t = Tailer::new(
            TailConfig {
                include: vec![log2.display().to_string()],
                ..cfg(dir2.path())
            },
            vec![],
        );
        let mut all = Vec::new();
        drain(&mut t, &mut all);
        std::fs::write(dir2.path().join("x.log.tmp"), text(10..20)).expect("write");
        compress(
            "gzip",
            &dir2.path().join("x.log.tmp"),
            &dir2.path().join("x.log.1.gz"),
        );
        std::fs::write(&log2, text(20..30)).expect("new log");
        drain(&mut t, &mut all);
        assert_eq!(all.len(), 20, "the backup is not seen: {all:?}");
    }

    /// After a restart, a log that was read to line 100 and compressed
    /// since (with more lines) continues in its backup at the checkpoint:
    /// nothing before it again, nothing after it lost.
    #[test]
    fn a_restart_resumes_a_log_compressed_since_at_its_checkpoint() {
        let (dir, log, t, all) = tailing_100();
        assert_eq!(all.len(), 100);
        drop(t);
        // The checkpoint it left: delivered to the end of line 99.
        let cp = Checkpoint {
            fingerprint: hex::encode(text(0..100)),
            offset: text(0..100).len() as u64,
            path: log.display().to_string(),
        };
        // While causeway was down: more lines, rotation, compression.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(text(100..150).as_bytes()))
            .expect("append");
        compress("gzip", &log, &dir.path().join("x.log.1.gz"));
        std::fs::write(&log, text(150..160)).expect("new log");
        let mut t = Tailer::new(
            TailConfig {
                start_at_end: true,
                ..cfg(dir.path())
            },
            vec![cp],
        );
        let mut again = Vec::new();
        let events = drain(&mut t, &mut again);
        again.sort_unstable();
        // x.log is new since (no checkpoint) and found at startup: start_at end.
        assert_eq!(again, (100..150).collect::<Vec<u64>>());
        assert_eq!(events.backups[0].0, "resumed");
    }

    /// A backup read and closed while idle, then written to and compressed
    /// before the next poll: the compressed backup continues it where it
    /// was left. A compressed copy of what a followed file still holds is
    /// not read (that file reads it).
    #[test]
    fn a_closed_file_compressed_with_new_lines_continues_and_a_followed_one_is_not_read_twice() {
        let dir = tempfile::tempdir().expect("dir");
        let log = dir.path().join("x.log");
        let backup = dir.path().join("x.log.1");
        std::fs::write(&log, text(0..50)).expect("write");
        let mut t = Tailer::new(cfg(dir.path()), vec![]);
        let mut all = Vec::new();
        drain(&mut t, &mut all);
        assert_eq!(t.open_files(), 0, "read, delivered, idle: closed");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(text(50..80).as_bytes()))
            .expect("append");
        compress("gzip", &log, &dir.path().join("x.log.1.gz"));
        // A second log, followed (open), renamed and compressed while its
        // descriptor is held: the backup waits for it and reads nothing.
        std::fs::write(&log, text(80..90)).expect("new log");
        let (lines, _) = t.poll();
        all.extend(numbers(&lines));
        for l in &lines {
            t.set_delivered(l.file, l.end);
        }
        std::fs::rename(&log, &backup).expect("rename");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&backup)
            .and_then(|mut f| f.write_all(text(90..95).as_bytes()))
            .expect("append");
        let gz = dir.path().join("x.log.2.gz");
        let out = std::process::Command::new("gzip")
            .arg("-c")
            .arg(&backup)
            .output()
            .expect("gzip");
        std::fs::write(&gz, out.stdout).expect("gz");
        let events = drain(&mut t, &mut all);
        std::fs::remove_file(&backup).expect("compressed away");
        let more = drain(&mut t, &mut all);
        all.sort_unstable();
        assert_eq!(all, (0..95).collect::<Vec<u64>>());
        assert_eq!(events.packed_lines + more.packed_lines, 30);
    }

    /// A directory listing taken while logrotate renames every backup can
    /// miss one, several polls in a row on a starved host (CI saw a backup
    /// read twice so). A compressed backup missed while it is read, once it
    /// was read and closed, or once it was skipped, is not read again when
    /// it is listed again.
    #[test]
    fn a_compressed_backup_missed_by_listings_is_not_read_again() {
        let dir = tempfile::tempdir().expect("dir");
        let log = dir.path().join("x.log");
        let hidden = dir.path().join("elsewhere");
        std::fs::write(&log, text(0..100)).expect("write");
        let mut t = Tailer::new(cfg(dir.path()), vec![]);
        let mut all = Vec::new();
        drain(&mut t, &mut all);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(text(100..120).as_bytes()))
            .expect("append");
        let gz = dir.path().join("x.log.1.gz");
        compress("gzip", &log, &gz);
        std::fs::write(&log, text(120..130)).expect("new log");
        // Missed while it is followed (read to its end in the first poll).
        let (lines, _) = t.poll();
        for l in &lines {
            t.set_delivered(l.file, l.end);
        }
        all.extend(numbers(&lines));
        std::fs::rename(&gz, &hidden).expect("hide");
        drain(&mut t, &mut all);
        std::fs::rename(&hidden, &gz).expect("list again");
        drain(&mut t, &mut all);
        // Missed once read and closed.
        std::fs::rename(&gz, &hidden).expect("hide");
        drain(&mut t, &mut all);
        let renamed = dir.path().join("x.log.2.gz");
        std::fs::rename(&hidden, &renamed).expect("list again, renamed");
        drain(&mut t, &mut all);
        all.sort_unstable();
        assert_eq!(all, (0..130).collect::<Vec<u64>>());
        // Skipped at startup (`start_at_end`), then missed.
        let mut t = Tailer::new(
            TailConfig {
                start_at_end: true,
                ..cfg(dir.path())
            },
            vec![],
        );
        let mut again = Vec::new();
        drain(&mut t, &mut again);
        std::fs::rename(&renamed, &hidden).expect("hide");
        drain(&mut t, &mut again);
        std::fs::rename(&hidden, &renamed).expect("list again");
        let events = drain(&mut t, &mut again);
        assert!(again.is_empty(), "{again:?}");
        assert_eq!(events.packed_lines, 0);
    }

    /// A compressed backup that is cut (a broken gzip) is reported with its
    /// name and counted as lost once it stayed so; what it held before the
    /// cut is read, and the other files flow.
    #[test]
    fn a_cut_backup_is_reported_and_counted_and_the_rest_flows() {
        let dir = tempfile::tempdir().expect("dir");
        let mut t = Tailer::new(cfg(dir.path()), vec![]);
        let mut all = Vec::new();
        drain(&mut t, &mut all);
        let src = dir.path().join("x.log.tmp");
        std::fs::write(&src, text(0..5000)).expect("write");
        let gz = dir.path().join("x.log.1.gz");
        compress("gzip", &src, &gz);
        let bytes = std::fs::read(&gz).expect("read");
        std::fs::write(&gz, &bytes[..bytes.len() / 2]).expect("cut");
        std::fs::write(dir.path().join("x.log"), text(10_000..10_010)).expect("log");
        let mut events = drain(&mut t, &mut all);
        assert!(all.iter().filter(|n| **n >= 10_000).count() == 10);
        let first = all.iter().filter(|n| **n < 5000).count();
        assert!(first > 0, "what came before the cut is read");
        assert!(
            events.lost.is_empty(),
            "a cut stream waits: it may be being written"
        );
        // Still cut after `STALL`: given up on, named and counted.
        for f in &mut t.files {
            if let Some(p) = &mut f.packed {
                if let Some((_, since, _)) = &mut p.stalled {
                    *since = since.checked_sub(STALL).expect("uptime");
                }
            }
        }
        let e = drain(&mut t, &mut all);
        events.lost.extend(e.lost);
        assert_eq!(events.lost.len(), 1, "{:?}", events.lost);
        assert_eq!(events.lost[0].0, "backup_corrupt");
        assert!(events.lost[0].1.ends_with("x.log.1.gz"));
        let mut sorted = all.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), all.len(), "nothing read twice");
    }

    fn cfg(dir: &Path) -> TailConfig {
        TailConfig {
            include: vec![format!("{}/x.log*", dir.display())],
            backups: vec![],
            exclude: vec![],
            start_at_end: false,
            max_line: 1 << 20,
            close_idle: Duration::ZERO,
            fp_size: 1024,
            max_held: 1024,
        }
    }

    fn numbers(lines: &[Line]) -> Vec<u64> {
        lines
            .iter()
            .map(|l| {
                String::from_utf8_lossy(&l.bytes)
                    .trim_start_matches("line-")
                    .parse()
                    .unwrap_or(u64::MAX)
            })
            .collect()
    }

    #[test]
    fn copy_truncate_while_a_read_stopped_mid_line_loses_nothing() {
        let dir = tempfile::tempdir().expect("dir");
        let log = dir.path().join("x.log");
        // More than one read budget, so the first poll stops inside a line.
        let mut text = String::new();
        let mut n = 0u64;
        while text.len() < READ_BUDGET + READ_BUDGET / 2 {
            text.push_str(&format!("line-{n}\n"));
            n += 1;
        }
        std::fs::write(&log, &text).expect("write");
        let mut t = Tailer::new(cfg(dir.path()), vec![]);
        let (first, _) = t.poll();
        assert!(t.has_more(), "the budget ran out");
        // logrotate copytruncate, then new lines in the truncated file.
        std::fs::copy(&log, dir.path().join("x.log.1")).expect("copy");
        std::fs::write(&log, format!("line-{n}\n")).expect("truncate and write");
        let mut all = numbers(&first);
        for _ in 0..5 {
            let (more, _) = t.poll();
            all.extend(numbers(&more));
        }
        all.sort_unstable();
        let got: std::collections::BTreeSet<u64> = all.iter().copied().collect();
        let missing: Vec<u64> = (0..=n).filter(|x| !got.contains(x)).take(5).collect();
        assert!(missing.is_empty(), "missing lines {missing:?}");
        assert!(!got.contains(&u64::MAX), "a line was cut");
        assert_eq!(all.len() as u64, n + 1, "each line once");
    }
}

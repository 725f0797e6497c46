//! A persistent sending queue on local disk: append-only, checksummed
//! segment files and a cursor of what was delivered.
//!
//! - Record: `len u32 | crc32 u32 | signal u8 | items u32 | payload`, the
//!   CRC covering signal, items and payload.
//! - Records are handed out in order and may be delivered out of order; the
//!   cursor advances over the delivered prefix and is rewritten atomically
//!   (temporary file + rename). After a crash, everything after the cursor is
//!   sent again: at least once.
//! - Fully delivered segments are deleted. The queue holds at most
//!   `max_size` bytes: when full, `block` makes writers wait (backpressure),
//!   `drop_oldest` deletes the oldest segment and counts its items.
//! - A corrupt or torn record is reported and the rest of its segment is
//!   skipped; the daemon never refuses to start because of it.

use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tokio::sync::Notify;

use crate::model::Signal;
use crate::telemetry::registry::Counter;

const HEADER: usize = 13;

/// What to do when the queue is full.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    serde::Deserialize,
    Default,
    serde::Serialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum WhenFull {
    /// Writers wait: backpressure to receivers and clients.
    #[default]
    Block,
    /// Delete the oldest segment (counted).
    DropOldest,
}

/// When to fsync.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    serde::Deserialize,
    Default,
    serde::Serialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Fsync {
    /// After every record and cursor write: nothing acknowledged is lost in a power cut.
    Always,
    /// Once a second, by a timer: the records and directory entries of the
    /// last second can be lost in a power cut, never more.
    #[default]
    Periodic,
    /// Leave it to the OS (a process crash still loses nothing).
    Never,
}

/// A record handed out for delivery.
#[derive(Debug)]
pub struct Record {
    /// Acknowledge with this.
    pub id: u64,
    /// The signal.
    pub signal: Signal,
    /// Item count.
    pub items: usize,
    /// The encoded request.
    pub payload: Bytes,
}

struct Pending {
    id: u64,
    end: (u64, u64),
    acked: bool,
}

struct State {
    write_seg: u64,
    write: File,
    write_off: u64,
    read: (u64, u64),
    committed: (u64, u64),
    pending: VecDeque<Pending>,
    next_id: u64,
    /// Bytes and items of each live segment.
    segments: BTreeMap<u64, (u64, u64)>,
    closed: bool,
    /// Records written since the last sync of the segment being written.
    dirty: bool,
    /// Directory entries (new segments, the cursor's rename) since the last directory sync.
    dir_dirty: bool,
}

/// The queue.
pub struct DiskQueue {
    dir: PathBuf,
    max_size: u64,
    segment_size: u64,
    when_full: WhenFull,
    fsync: Fsync,
    state: Mutex<State>,
    data: Notify,
    space: Notify,
    dropped: Counter,
    corrupt: Counter,
}

/// Make the entries of `dir` (files created, renamed, removed) durable:
/// POSIX requires an fsync of the directory itself for that.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

fn seg_path(dir: &Path, seg: u64) -> PathBuf {
    dir.join(format!("{seg:020}.seg"))
}

fn signal_byte(s: Signal) -> u8 {
    s as u8
}

fn byte_signal(b: u8) -> Option<Signal> {
    Signal::ALL.get(b as usize).copied()
}

/// A record read back: signal, items, payload and the offset after it.
type RawRecord = (Signal, usize, Vec<u8>, u64);

/// Read one record at `off`; `Ok(None)` at a clean end.
fn read_record(file: &mut File, off: u64) -> Result<Option<RawRecord>, String> {
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    if off >= len {
        return Ok(None);
    }
    if len - off < HEADER as u64 {
        return Err(format!("torn record header at byte {off}"));
    }
    file.seek(SeekFrom::Start(off)).map_err(|e| e.to_string())?;
    let mut h = [0u8; HEADER];
    file.read_exact(&mut h).map_err(|e| e.to_string())?;
    let plen = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as u64;
    let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    if len - off - (HEADER as u64) < plen {
        return Err(format!("torn record at byte {off}: {plen} bytes announced"));
    }
    let mut payload = vec![0u8; plen as usize];
    file.read_exact(&mut payload).map_err(|e| e.to_string())?;
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&h[8..]);
    hasher.update(&payload);
    if hasher.finalize() != crc {
        return Err(format!("checksum mismatch at byte {off}"));
    }
    let signal = byte_signal(h[8]).ok_or_else(|| format!("bad signal at byte {off}"))?;
    let items = u32::from_le_bytes([h[9], h[10], h[11], h[12]]) as usize;
    Ok(Some((signal, items, payload, off + HEADER as u64 + plen)))
}

impl DiskQueue {
    /// Open (or create) the queue in `dir`. Returns the problems found
    /// (corrupt data skipped), which the caller reports.
    pub fn open(
        dir: &Path,
        max_size: u64,
        when_full: WhenFull,
        fsync: Fsync,
        dropped: Counter,
        corrupt: Counter,
    ) -> std::io::Result<(DiskQueue, Vec<String>)> {
        std::fs::create_dir_all(dir)?;
        let mut problems = Vec::new();
        let mut segs: Vec<u64> = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".seg")?.parse().ok())
            .collect();
        segs.sort();
        let cursor = std::fs::read_to_string(dir.join("cursor"))
            .ok()
            .and_then(|s| {
                let mut it = s.split_whitespace().map(|x| x.parse::<u64>());
                Some((it.next()?.ok()?, it.next()?.ok()?))
            });
        let committed = cursor.unwrap_or((segs.first().copied().unwrap_or(0), 0));
        // Segments wholly before the cursor were delivered.
        for s in segs.iter().filter(|s| **s < committed.0) {
            std::fs::remove_file(seg_path(dir, *s)).ok();
        }
        segs.retain(|s| *s >= committed.0);
        let mut segments = BTreeMap::new();
        for s in &segs {
            // Count items, and cut a torn tail (a crash mid-append).
            let mut f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(seg_path(dir, *s))?;
            let mut off = 0;
            let mut items = 0u64;
            loop {
                match read_record(&mut f, off) {
                    Ok(Some((_, n, _, next))) => {
                        items += n as u64;
                        off = next;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        problems.push(format!(
                            "segment {s}: {e}; the rest of the segment is skipped"
                        ));
                        corrupt.add(1);
                        f.set_len(off)?;
                        break;
                    }
                }
            }
            segments.insert(*s, (off, items));
        }
        let write_seg = segs.last().copied().unwrap_or(committed.0);
        let write = OpenOptions::new()
            .create(true)
            .append(true)
            .open(seg_path(dir, write_seg))?;
        let write_off = write.metadata()?.len();
        segments.entry(write_seg).or_insert((write_off, 0));
        let segment_size = (max_size / 8).clamp(64 << 10, 64 << 20);
        if fsync != Fsync::Never {
            // The segment files (maybe created just now) and the cursor's
            // last rename are entries of the directory: durable once it is synced.
            sync_dir(dir)?;
        }
        Ok((
            DiskQueue {
                dir: dir.to_path_buf(),
                max_size,
                segment_size,
                when_full,
                fsync,
                state: Mutex::new(State {
                    write_seg,
                    write,
                    write_off,
                    read: committed,
                    committed,
                    pending: VecDeque::new(),
                    next_id: 1,
                    segments,
                    closed: false,
                    dirty: false,
                    dir_dirty: false,
                }),
                data: Notify::new(),
                space: Notify::new(),
                dropped,
                corrupt,
            },
            problems,
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Records waiting or in flight (bytes on disk).
    pub fn size_bytes(&self) -> u64 {
        self.lock().segments.values().map(|(b, _)| b).sum()
    }

    /// Append a record; waits for room (`block`) or drops the oldest segment (`drop_oldest`).
    pub async fn push(&self, signal: Signal, items: usize, payload: &[u8]) -> std::io::Result<()> {
        let need = (HEADER + payload.len()) as u64;
        loop {
            let space = self.space.notified();
            {
                let mut st = self.lock();
                let used: u64 = st.segments.values().map(|(b, _)| b).sum();
                if used + need <= self.max_size || used == 0 {
                    return self.append(&mut st, signal, items, payload);
                }
                if self.when_full == WhenFull::DropOldest {
                    let oldest = st.segments.keys().next().copied();
                    if let Some(seg) = oldest.filter(|s| *s != st.write_seg) {
                        self.drop_segment(&mut st, seg);
                        continue;
                    }
                    // Only the segment being written is left: roll so it can be dropped next.
                    self.roll(&mut st)?;
                    continue;
                }
            }
            space.await;
        }
    }

    fn drop_segment(&self, st: &mut State, seg: u64) {
        if let Some((_, items)) = st.segments.remove(&seg) {
            self.dropped.add(items);
            tracing::warn!(queue = %self.dir.display(), segment = seg, items, "Persistent queue full; oldest segment dropped.");
        }
        std::fs::remove_file(seg_path(&self.dir, seg)).ok();
        let next = (seg + 1, 0);
        if st.read.0 <= seg {
            st.read = next;
        }
        if st.committed.0 <= seg {
            st.committed = next;
            st.pending.retain(|p| p.end.0 > seg);
        }
    }

    fn roll(&self, st: &mut State) -> std::io::Result<()> {
        if st.dirty {
            // The segment left behind is synced before its handle goes.
            st.write.sync_data()?;
            st.dirty = false;
        }
        st.write_seg += 1;
        st.write = OpenOptions::new()
            .create(true)
            .append(true)
            .open(seg_path(&self.dir, st.write_seg))?;
        st.write_off = 0;
        st.segments.insert(st.write_seg, (0, 0));
        match self.fsync {
            Fsync::Always => sync_dir(&self.dir)?,
            Fsync::Periodic => st.dir_dirty = true,
            Fsync::Never => {}
        }
        Ok(())
    }

    /// The `periodic` timer's work: sync the records written and the
    /// directory entries made since the last call. Runs once a second.
    pub fn sync_periodic(&self) -> std::io::Result<()> {
        let mut st = self.lock();
        if st.dirty {
            st.write.sync_data()?;
            st.dirty = false;
        }
        if st.dir_dirty {
            sync_dir(&self.dir)?;
            st.dir_dirty = false;
        }
        Ok(())
    }

    /// Whether `sync_periodic` has work to do.
    pub fn needs_timer(&self) -> bool {
        self.fsync == Fsync::Periodic
    }

    fn append(
        &self,
        st: &mut State,
        signal: Signal,
        items: usize,
        payload: &[u8],
    ) -> std::io::Result<()> {
        if st.write_off >= self.segment_size {
            self.roll(st)?;
        }
        let mut rec = Vec::with_capacity(HEADER + payload.len());
        rec.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        let mut meta = vec![signal_byte(signal)];
        meta.extend_from_slice(&(items as u32).to_le_bytes());
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&meta);
        hasher.update(payload);
        rec.extend_from_slice(&hasher.finalize().to_le_bytes());
        rec.extend_from_slice(&meta);
        rec.extend_from_slice(payload);
        st.write.write_all(&rec)?;
        match self.fsync {
            Fsync::Always => st.write.sync_data()?,
            Fsync::Periodic => st.dirty = true,
            Fsync::Never => {}
        }
        st.write_off += rec.len() as u64;
        let seg = st.write_seg;
        let e = st.segments.entry(seg).or_insert((0, 0));
        e.0 += rec.len() as u64;
        e.1 += items as u64;
        drop(rec);
        self.data.notify_one();
        Ok(())
    }

    /// The next record, waiting for one; `None` once closed and drained of new data.
    pub async fn pop(&self) -> Option<Record> {
        loop {
            let data = self.data.notified();
            {
                let mut st = self.lock();
                loop {
                    let (seg, off) = st.read;
                    if seg > st.write_seg || (seg == st.write_seg && off >= st.write_off) {
                        break;
                    }
                    let path = seg_path(&self.dir, seg);
                    let read = File::open(&path)
                        .map_err(|e| e.to_string())
                        .and_then(|mut f| read_record(&mut f, off));
                    match read {
                        Ok(Some((signal, items, payload, next))) => {
                            let id = st.next_id;
                            st.next_id += 1;
                            st.read = (seg, next);
                            st.pending.push_back(Pending {
                                id,
                                end: (seg, next),
                                acked: false,
                            });
                            return Some(Record {
                                id,
                                signal,
                                items,
                                payload: Bytes::from(payload),
                            });
                        }
                        Ok(None) => {
                            if seg < st.write_seg {
                                st.read = (seg + 1, 0);
                            } else {
                                break;
                            }
                        }
                        Err(e) => {
                            self.corrupt.add(1);
                            tracing::error!(queue = %self.dir.display(), segment = seg, error = %e, "Corrupt persistent-queue record; skipping the rest of the segment.");
                            if seg < st.write_seg {
                                st.read = (seg + 1, 0);
                            } else {
                                break;
                            }
                        }
                    }
                }
                if st.closed {
                    return None;
                }
            }
            data.await;
        }
    }

    /// Mark a record delivered (or given up); the cursor advances over the delivered prefix.
    pub fn ack(&self, id: u64) {
        let mut st = self.lock();
        if let Some(p) = st.pending.iter_mut().find(|p| p.id == id) {
            p.acked = true;
        }
        let mut advanced = false;
        while st.pending.front().is_some_and(|p| p.acked) {
            if let Some(p) = st.pending.pop_front() {
                st.committed = p.end;
                advanced = true;
            }
        }
        if !advanced {
            return;
        }
        let (seg, off) = st.committed;
        let tmp = self.dir.join("cursor.tmp");
        let written = File::create(&tmp)
            .and_then(|mut f| {
                f.write_all(format!("{seg} {off}\n").as_bytes())?;
                if self.fsync == Fsync::Always {
                    f.sync_data()?;
                }
                Ok(())
            })
            .and_then(|_| std::fs::rename(&tmp, self.dir.join("cursor")))
            .and_then(|_| match self.fsync {
                Fsync::Always => sync_dir(&self.dir),
                Fsync::Periodic => {
                    st.dir_dirty = true;
                    Ok(())
                }
                Fsync::Never => Ok(()),
            });
        if let Err(error) = written {
            tracing::error!(queue = %self.dir.display(), %error, "Cannot write the persistent-queue cursor.");
        }
        let done: Vec<u64> = st.segments.keys().copied().filter(|s| *s < seg).collect();
        for s in done {
            st.segments.remove(&s);
            std::fs::remove_file(seg_path(&self.dir, s)).ok();
        }
        drop(st);
        self.space.notify_waiters();
    }

    /// No more pushes: `pop` returns `None` once what is written was handed out.
    pub fn close(&self) {
        self.lock().closed = true;
        self.data.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The queue's segment files in `dir`, in order.
    fn segments(dir: &std::path::Path) -> Vec<PathBuf> {
        let mut segs: Vec<PathBuf> = std::fs::read_dir(dir)
            .expect("dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "seg"))
            .collect();
        segs.sort();
        segs
    }

    fn open(
        dir: &Path,
        max: u64,
        when_full: WhenFull,
    ) -> (DiskQueue, Vec<String>, Counter, Counter) {
        let (d, c) = (Counter::default(), Counter::default());
        let (q, p) =
            DiskQueue::open(dir, max, when_full, Fsync::Never, d.clone(), c.clone()).expect("open");
        (q, p, d, c)
    }

    #[tokio::test]
    async fn delivered_records_are_not_replayed_undelivered_ones_are() {
        let dir = tempfile::tempdir().expect("dir");
        {
            let (q, _, _, _) = open(dir.path(), 1 << 30, WhenFull::Block);
            for i in 0..10u8 {
                q.push(Signal::Logs, 1, &[i; 100]).await.expect("push");
            }
            let a = q.pop().await.expect("a");
            let b = q.pop().await.expect("b");
            let c = q.pop().await.expect("c");
            q.ack(b.id); // out of order: the cursor cannot pass `a` yet
            q.ack(a.id);
            assert_eq!(c.payload[0], 2);
            // c is in flight, not acknowledged, when the "crash" happens.
        }
        let (q, problems, _, _) = open(dir.path(), 1 << 30, WhenFull::Block);
        assert!(problems.is_empty());
        q.close();
        let mut got = vec![];
        while let Some(r) = q.pop().await {
            got.push(r.payload[0]);
            q.ack(r.id);
        }
        assert_eq!(got, vec![2, 3, 4, 5, 6, 7, 8, 9]);
    }

    #[tokio::test]
    async fn a_corrupt_segment_is_reported_and_skipped() {
        let dir = tempfile::tempdir().expect("dir");
        {
            let (q, _, _, _) = open(dir.path(), 1 << 20, WhenFull::Block);
            // max 1 MiB -> 128 KiB segments: 3 records of 60 KB make 2 segments.
            for i in 0..4u8 {
                q.push(Signal::Traces, 7, &vec![i; 60_000])
                    .await
                    .expect("push");
            }
        }
        let segs = segments(dir.path());
        assert!(segs.len() >= 2, "{segs:?}");
        // Flip a byte inside the first record of the first segment.
        let mut bytes = std::fs::read(&segs[0]).expect("read");
        bytes[100] ^= 0xff;
        std::fs::write(&segs[0], bytes).expect("write");
        let (q, problems, _, corrupt) = open(dir.path(), 1 << 20, WhenFull::Block);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("checksum mismatch"));
        assert_eq!(corrupt.get(), 1);
        q.close();
        let mut got = vec![];
        while let Some(r) = q.pop().await {
            got.push(r.payload[0]);
            q.ack(r.id);
        }
        assert!(!got.contains(&0), "the corrupt record is not delivered");
        assert_eq!(*got.last().expect("rest delivered"), 3);
    }

    /// A crash mid-append leaves the last record cut short: inside its
    /// payload, or inside its 13-byte header. Each is reported once, cut
    /// off, and everything before it is delivered; records appended after
    /// the restart follow in order.
    #[tokio::test]
    async fn a_record_cut_in_its_payload_or_its_header_is_reported_and_the_rest_delivered() {
        for (what, keep_of_last) in [("payload", HEADER + 40), ("header", 5)] {
            let dir = tempfile::tempdir().expect("dir");
            {
                let (q, _, _, _) = open(dir.path(), 1 << 30, WhenFull::Block);
                for i in 0..5u8 {
                    q.push(Signal::Logs, 2, &[i; 100]).await.expect("push");
                }
            }
            let seg = segments(dir.path()).remove(0);
            let len = std::fs::metadata(&seg).expect("meta").len();
            let record = (HEADER + 100) as u64;
            assert_eq!(len, 5 * record);
            // The torn write: the last record only partly on disk.
            let f = OpenOptions::new().write(true).open(&seg).expect("open");
            f.set_len(4 * record + keep_of_last as u64)
                .expect("truncate");
            drop(f);
            let (q, problems, _, corrupt) = open(dir.path(), 1 << 30, WhenFull::Block);
            assert_eq!(problems.len(), 1, "{what}: {problems:?}");
            assert!(problems[0].contains("torn record"), "{what}: {problems:?}");
            assert_eq!(corrupt.get(), 1, "{what}");
            assert_eq!(
                std::fs::metadata(&seg).expect("meta").len(),
                4 * record,
                "{what}: the torn tail is cut"
            );
            q.push(Signal::Logs, 2, &[9; 100])
                .await
                .expect("push after");
            q.close();
            let mut got = vec![];
            while let Some(r) = q.pop().await {
                got.push(r.payload[0]);
                q.ack(r.id);
            }
            assert_eq!(got, vec![0, 1, 2, 3, 9], "{what}");
        }
    }

    #[tokio::test]
    async fn full_queue_blocks_or_drops_the_oldest() {
        let dir = tempfile::tempdir().expect("dir");
        let (q, _, dropped, _) = open(dir.path(), 256 << 10, WhenFull::DropOldest);
        for i in 0..40u8 {
            q.push(Signal::Metrics, 3, &vec![i; 20_000])
                .await
                .expect("push");
        }
        assert!(q.size_bytes() <= 256 << 10, "{}", q.size_bytes());
        assert!(
            dropped.get() > 0 && dropped.get() % 3 == 0,
            "{}",
            dropped.get()
        );

        let dir = tempfile::tempdir().expect("dir");
        let (q, _, _, _) = open(dir.path(), 128 << 10, WhenFull::Block);
        let q = std::sync::Arc::new(q);
        for i in 0..6u8 {
            q.push(Signal::Metrics, 1, &vec![i; 20_000])
                .await
                .expect("push");
        }
        let q2 = q.clone();
        let writer = tokio::spawn(async move { q2.push(Signal::Metrics, 1, &[9; 20_000]).await });
        tokio::task::yield_now().await;
        assert!(!writer.is_finished(), "a full queue makes the writer wait");
        // Deliver everything in the first segment: space frees up.
        while q.size_bytes() + 20_013 > 128 << 10 {
            let r = q.pop().await.expect("record");
            q.ack(r.id);
            tokio::task::yield_now().await;
        }
        tokio::time::timeout(std::time::Duration::from_secs(5), writer)
            .await
            .expect("writer resumed")
            .expect("join")
            .expect("push");
    }
}

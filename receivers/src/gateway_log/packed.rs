//! Compressed backups: a rotated log that logrotate (or its `compresscmd`)
//! compressed before the tailer read it to its end. The format is told by
//! the first bytes (magic numbers), never by the name, and the file is read
//! as a stream: what it holds is never decompressed into memory as a whole.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

/// Largest zstd window a backup may need (2^26 = 64 MiB, zstd's limit for
/// levels up to 19 without `--long` is 8 MiB): a stream asking more is
/// refused as corrupt rather than given that much memory.
const ZSTD_WINDOW_LOG_MAX: u32 = 26;
/// Memory an xz stream may use to decode (xz's preset 9 needs 65 MiB).
const XZ_MEMLIMIT: u64 = 80 << 20;

/// A compression format a backup can be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packing {
    /// gzip (logrotate's default `compresscmd`), one or more members.
    Gzip,
    /// Zstandard, one or more frames.
    Zstd,
    /// xz, one or more streams.
    Xz,
    /// bzip2, one or more streams.
    Bzip2,
}

/// Bytes needed to tell a format by its magic.
pub const MAGIC_LEN: usize = 10;

impl Packing {
    /// The format whose magic `head` (a file's first bytes) starts with.
    /// Log text never starts with these bytes: gzip, zstd and xz begin
    /// with bytes that are not printable; bzip2's `BZh` is checked with
    /// its block size digit and its first block's magic.
    pub fn detect(head: &[u8]) -> Option<Packing> {
        if head.starts_with(&[0x1f, 0x8b]) {
            Some(Packing::Gzip)
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Some(Packing::Zstd)
        } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
            Some(Packing::Xz)
        } else if head.len() >= MAGIC_LEN
            && head.starts_with(b"BZh")
            && (b'1'..=b'9').contains(&head[3])
            && (head[4..10] == [0x31, 0x41, 0x59, 0x26, 0x53, 0x59]
                || head[4..10] == [0x17, 0x72, 0x45, 0x38, 0x50, 0x90])
        {
            Some(Packing::Bzip2)
        } else {
            None
        }
    }

    /// Whether `head` is too short to tell: a file this short may still
    /// turn out to be compressed once more of it is written.
    pub fn undecided(head: &[u8]) -> bool {
        head.len() < MAGIC_LEN
            && ([
                &[0x1f, 0x8b][..],
                &[0x28, 0xb5, 0x2f, 0xfd],
                &[0xfd, b'7', b'z', b'X', b'Z', 0x00],
                b"BZh",
            ]
            .iter()
            .any(|m| m.starts_with(head) || head.starts_with(m)))
    }

    /// Its name in metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Packing::Gzip => "gzip",
            Packing::Zstd => "zstd",
            Packing::Xz => "xz",
            Packing::Bzip2 => "bzip2",
        }
    }

    /// A decoder reading the decompressed stream of `file` from its start.
    pub fn decoder(self, file: &File) -> std::io::Result<Box<dyn Read + Send>> {
        let mut f = file.try_clone()?;
        f.seek(SeekFrom::Start(0))?;
        let f = std::io::BufReader::with_capacity(64 * 1024, f);
        Ok(match self {
            Packing::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(f)),
            Packing::Zstd => {
                let mut d = zstd::stream::read::Decoder::with_buffer(f)?;
                d.window_log_max(ZSTD_WINDOW_LOG_MAX)?;
                Box::new(d)
            }
            Packing::Xz => {
                let stream = liblzma::stream::Stream::new_stream_decoder(
                    XZ_MEMLIMIT,
                    liblzma::stream::CONCATENATED,
                )
                .map_err(std::io::Error::other)?;
                Box::new(liblzma::bufread::XzDecoder::new_stream(f, stream))
            }
            Packing::Bzip2 => Box::new(bzip2::bufread::MultiBzDecoder::new(f)),
        })
    }
}

/// The first `size` decompressed bytes of `file`, or fewer if the stream
/// ends before. `Err` with `UnexpectedEof` when the compressed stream is
/// cut short: still being written (gzip runs while the tailer looks), or
/// broken.
pub fn head(packing: Packing, file: &File, size: usize) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(size);
    packing
        .decoder(file)?
        .take(size as u64)
        .read_to_end(&mut out)?;
    Ok(out)
}

/// Skip `n` decompressed bytes; `Ok(skipped)` is less than `n` when the
/// stream ended first.
pub fn skip(d: &mut dyn Read, n: u64) -> std::io::Result<u64> {
    std::io::copy(&mut d.take(n), &mut std::io::sink())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A stream cut at any byte (a backup still being written by its
    /// compressor) never reads as complete: the tailer would take the cut
    /// as the backup's end and miss what comes after.
    #[test]
    fn a_stream_cut_at_any_byte_is_never_complete() {
        let dir = tempfile::tempdir().expect("dir");
        let text: String = (0..400).map(|n| format!("{{\"n\":{n}}}\n")).collect();
        for (tool, args) in [
            ("gzip", &["-c"][..]),
            ("zstd", &["-q", "-c"]),
            ("xz", &["-c"]),
            ("bzip2", &["-c"]),
        ] {
            let mut child = std::process::Command::new(tool)
                .args(args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect(tool);
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(text.as_bytes())
                .expect("write");
            let out = child.wait_with_output().expect("run").stdout;
            let packing = Packing::detect(&out).expect("magic");
            let path = dir.path().join(tool);
            for cut in 1..out.len() {
                std::fs::write(&path, &out[..cut]).expect("write");
                let f = File::open(&path).expect("open");
                let Ok(mut d) = packing.decoder(&f) else {
                    continue;
                };
                let r = std::io::copy(&mut d, &mut std::io::sink());
                assert!(
                    r.is_err(),
                    "{tool}: cut at {cut} of {} read as complete ({r:?})",
                    out.len()
                );
            }
        }
    }

    /// Every format round-trips through `detect` and `decoder`, several
    /// members or frames included, as the real tools write them.
    #[test]
    fn each_format_is_told_by_its_magic_and_read_as_a_stream() {
        let dir = tempfile::tempdir().expect("dir");
        let text: String = (0..5000).map(|n| format!("{{\"n\":{n}}}\n")).collect();
        let (a, b) = text.split_at(text.len() / 2);
        let tools: &[(&str, &[&str], Packing)] = &[
            ("gzip", &["-c"], Packing::Gzip),
            ("zstd", &["-q", "-c"], Packing::Zstd),
            ("xz", &["-c"], Packing::Xz),
            ("bzip2", &["-c"], Packing::Bzip2),
        ];
        for (tool, args, packing) in tools {
            let path = dir.path().join(format!("x.{tool}"));
            let mut out = Vec::new();
            for part in [a, b] {
                // Two members / frames / streams, concatenated.
                let Ok(mut child) = std::process::Command::new(tool)
                    .args(*args)
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                else {
                    panic!("{tool} is needed (Debian's {tool}, installed by scripts/deps.sh)");
                };
                child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(part.as_bytes())
                    .expect("write");
                out.extend(child.wait_with_output().expect("run").stdout);
            }
            std::fs::write(&path, &out).expect("write");
            let f = File::open(&path).expect("open");
            assert_eq!(Packing::detect(&out[..MAGIC_LEN]), Some(*packing), "{tool}");
            let mut got = String::new();
            packing
                .decoder(&f)
                .expect("decoder")
                .read_to_string(&mut got)
                .expect("decode");
            assert_eq!(got, text, "{tool}");
            assert_eq!(head(*packing, &f, 8).expect("head"), b"{\"n\":0}\n");
            // Cut short: the stream says so, it does not end quietly.
            std::fs::write(&path, &out[..out.len() / 4]).expect("cut");
            let f = File::open(&path).expect("open");
            let mut d = packing.decoder(&f).expect("decoder");
            let r = std::io::copy(&mut d, &mut std::io::sink());
            assert!(r.is_err(), "{tool}: a cut stream read as complete");
        }
        for text in [&b"{\"n\":1}\n"[..], b"BZh9 is a log line", b"127.0.0.1 - -"] {
            assert_eq!(Packing::detect(text), None);
        }
    }
}

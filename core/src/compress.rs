//! Compression of OTLP payloads, both ways, for gRPC and HTTP.
//!
//! One place decides how each codec is written and read so that every
//! exporter compresses the same way (and a batch sent by several exporters
//! with the same codec is compressed once: [`crate::Batch::compressed`]) and
//! every receiver inflates the same way, with one limit on the inflated size
//! (zip bombs) and one copy: compressed bytes go straight into the buffer
//! that becomes the request.
//!
//! Levels were chosen by measurement (`cargo bench -p causeway-core --bench
//! hot_path -- compress`, BENCHMARKS.md): gzip at level 1 with the zlib-rs
//! backend, zstd at level 1, snappy (no levels).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

/// A payload codec, named as in `Content-Encoding` and `grpc-encoding`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    /// gzip (the Collector's default for its OTLP exporters).
    #[default]
    Gzip,
    /// Zstandard.
    Zstd,
    /// Snappy. Over HTTP the block format (as Prometheus remote write and the
    /// Collector's `confighttp.framedSnappy` gate write it); over gRPC the
    /// framed format (as the Collector's gRPC snappy codec writes it).
    /// Receivers accept either under either name.
    Snappy,
    /// No compression (`none`, or empty as the Collector allows).
    #[serde(alias = "")]
    None,
}

/// Where a payload travels: snappy is framed over gRPC, a block over HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// A gRPC message.
    Grpc,
    /// An HTTP body.
    Http,
}

/// gzip level: 1 (fastest). On OTLP batches it compresses within a few
/// percent of level 6 at several times the speed (BENCHMARKS.md).
pub const GZIP_LEVEL: u32 = 1;
/// zstd level: 1. It compresses better than gzip at level 6, faster than
/// gzip at level 1.
pub const ZSTD_LEVEL: i32 = 1;

/// The first bytes of a framed snappy stream (its stream identifier chunk).
const SNAPPY_FRAMED_MAGIC: &[u8] = b"\xff\x06\x00\x00sNaPpY";

/// Why a payload could not be compressed or inflated.
#[derive(Debug, thiserror::Error)]
pub enum CompressError {
    /// The inflated payload would exceed the limit.
    #[error("inflated {codec} payload exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The codec's name.
        codec: &'static str,
        /// The limit in bytes.
        limit: usize,
    },
    /// The payload is not valid for its codec.
    #[error("invalid {codec} payload: {message}")]
    Invalid {
        /// The codec's name.
        codec: &'static str,
        /// What the decoder said.
        message: String,
    },
    /// The encoding is not one this daemon speaks.
    #[error("unsupported encoding {0:?}: use gzip, zstd, snappy or identity")]
    Unsupported(String),
}

impl Codec {
    /// The name used in `Content-Encoding` / `grpc-encoding` (`None` for no
    /// compression).
    pub fn name(self) -> Option<&'static str> {
        match self {
            Codec::Gzip => Some("gzip"),
            Codec::Zstd => Some("zstd"),
            Codec::Snappy => Some("snappy"),
            Codec::None => None,
        }
    }

    /// The codec of a `Content-Encoding` or `grpc-encoding` value.
    pub fn from_encoding(value: &str) -> Result<Codec, CompressError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "identity" | "none" => Ok(Codec::None),
            "gzip" | "x-gzip" => Ok(Codec::Gzip),
            "zstd" => Ok(Codec::Zstd),
            "snappy" | "x-snappy-framed" => Ok(Codec::Snappy),
            other => Err(CompressError::Unsupported(other.to_string())),
        }
    }

    fn label(self) -> &'static str {
        self.name().unwrap_or("identity")
    }

    /// Compress the concatenation of `parts`, without first joining them.
    pub fn compress(self, transport: Transport, parts: &[Bytes]) -> Result<Bytes, CompressError> {
        let total: usize = parts.iter().map(Bytes::len).sum();
        let io = |e: std::io::Error| CompressError::Invalid {
            codec: self.label(),
            message: e.to_string(),
        };
        match self {
            Codec::None => Ok(match parts {
                [one] => one.clone(),
                _ => {
                    let mut v = Vec::with_capacity(total);
                    for p in parts {
                        v.extend_from_slice(p);
                    }
                    Bytes::from(v)
                }
            }),
            Codec::Gzip => {
                let mut enc = flate2::write::GzEncoder::new(
                    Vec::with_capacity(total / 6 + 64),
                    flate2::Compression::new(GZIP_LEVEL),
                );
                for p in parts {
                    enc.write_all(p).map_err(io)?;
                }
                enc.finish().map(Bytes::from).map_err(io)
            }
            Codec::Zstd => {
                let joined;
                let input: &[u8] = match parts {
                    [one] => one,
                    _ => {
                        joined = parts.concat();
                        &joined
                    }
                };
                zstd_ctx::compress(input).map_err(|message| CompressError::Invalid {
                    codec: "zstd",
                    message,
                })
            }
            Codec::Snappy => match transport {
                Transport::Http => {
                    let joined;
                    let input: &[u8] = match parts {
                        [one] => one,
                        _ => {
                            let mut v = Vec::with_capacity(total);
                            for p in parts {
                                v.extend_from_slice(p);
                            }
                            joined = v;
                            &joined
                        }
                    };
                    snap::raw::Encoder::new()
                        .compress_vec(input)
                        .map(Bytes::from)
                        .map_err(|e| CompressError::Invalid {
                            codec: "snappy",
                            message: e.to_string(),
                        })
                }
                Transport::Grpc => {
                    let mut enc =
                        snap::write::FrameEncoder::new(Vec::with_capacity(total / 4 + 64));
                    for p in parts {
                        enc.write_all(p).map_err(io)?;
                    }
                    enc.into_inner()
                        .map(Bytes::from)
                        .map_err(|e| io(e.into_error()))
                }
            },
        }
    }

    /// Inflate `input` into one buffer of at most `limit` bytes. gzip
    /// members, zstd frames and snappy blocks or frames are all accepted.
    pub fn decompress(self, input: &[u8], limit: usize) -> Result<Bytes, CompressError> {
        let too_large = CompressError::TooLarge {
            codec: self.label(),
            limit,
        };
        let invalid = |e: &dyn std::fmt::Display| CompressError::Invalid {
            codec: self.label(),
            message: e.to_string(),
        };
        // A first guess at the inflated size; the buffer grows from there.
        let guess = input.len().saturating_mul(4).min(limit);
        let read_all = |r: &mut dyn Read| -> Result<Bytes, CompressError> {
            let mut out = Vec::with_capacity(guess);
            let mut bounded = r.take(limit as u64 + 1);
            bounded.read_to_end(&mut out).map_err(|e| invalid(&e))?;
            if out.len() > limit {
                return Err(CompressError::TooLarge {
                    codec: self.label(),
                    limit,
                });
            }
            Ok(Bytes::from(out))
        };
        match self {
            Codec::None => {
                if input.len() > limit {
                    return Err(too_large);
                }
                Ok(Bytes::copy_from_slice(input))
            }
            Codec::Gzip => read_all(&mut flate2::read::MultiGzDecoder::new(input)),
            Codec::Zstd => zstd_ctx::decompress(input, limit, guess).map_err(|e| match e {
                None => too_large,
                Some(message) => CompressError::Invalid {
                    codec: "zstd",
                    message,
                },
            }),
            Codec::Snappy if input.starts_with(SNAPPY_FRAMED_MAGIC) => {
                read_all(&mut snap::read::FrameDecoder::new(input))
            }
            Codec::Snappy => {
                let n = snap::raw::decompress_len(input).map_err(|e| invalid(&e))?;
                if n > limit {
                    return Err(too_large);
                }
                let mut out = vec![0; n];
                snap::raw::Decoder::new()
                    .decompress(input, &mut out)
                    .map_err(|e| invalid(&e))?;
                Ok(Bytes::from(out))
            }
        }
    }
}

/// zstd with one context per thread each way, reused: making a context
/// allocates and clears its tables (about a megabyte at level 1), as much
/// work as compressing a small batch. The compressed bytes are written into
/// a reused scratch buffer and copied out at their size, so a batch held
/// compressed holds no slack.
mod zstd_ctx {
    use bytes::Bytes;
    use std::cell::RefCell;
    use zstd::zstd_safe::{self, CCtx, CParameter, DCtx, InBuffer, OutBuffer, ResetDirective};

    thread_local! {
        static COMPRESS: RefCell<Option<(CCtx<'static>, Vec<u8>)>> = const { RefCell::new(None) };
        static DECOMPRESS: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
    }

    fn code(e: zstd_safe::ErrorCode) -> String {
        zstd_safe::get_error_name(e).to_string()
    }

    /// One frame of `input` at [`super::ZSTD_LEVEL`], its size in the header.
    pub fn compress(input: &[u8]) -> Result<Bytes, String> {
        COMPRESS.with(|cell| {
            let mut cell = cell.borrow_mut();
            let (cctx, scratch) = match &mut *cell {
                Some(c) => c,
                none => {
                    let mut cctx = CCtx::create();
                    cctx.set_parameter(CParameter::CompressionLevel(super::ZSTD_LEVEL))
                        .map_err(code)?;
                    none.insert((cctx, Vec::new()))
                }
            };
            cctx.reset(ResetDirective::SessionOnly).map_err(code)?;
            scratch.clear();
            scratch.reserve(zstd_safe::compress_bound(input.len()));
            cctx.compress2(scratch, input).map_err(code)?;
            let out = Bytes::copy_from_slice(scratch);
            // A rare huge batch does not keep its buffer for the thread's life.
            if scratch.capacity() > 8 << 20 {
                *scratch = Vec::new();
            }
            Ok(out)
        })
    }

    /// Every frame of `input`, at most `limit` bytes (`Err(None)` past it).
    /// A frame that states its size is inflated into a buffer of that size.
    pub fn decompress(input: &[u8], limit: usize, guess: usize) -> Result<Bytes, Option<String>> {
        if input.is_empty() {
            return Ok(Bytes::new());
        }
        DECOMPRESS.with(|cell| {
            let mut cell = cell.borrow_mut();
            let dctx = cell.get_or_insert_with(DCtx::create);
            dctx.reset(ResetDirective::SessionOnly)
                .map_err(|e| Some(code(e)))?;
            let first = match zstd_safe::get_frame_content_size(input) {
                Ok(Some(n)) if n <= limit as u64 => n as usize,
                Ok(Some(_)) => return Err(None),
                _ => guess,
            };
            let mut out: Vec<u8> = Vec::with_capacity(first.max(64));
            let mut src = InBuffer::around(input);
            loop {
                if out.len() == out.capacity() {
                    if out.len() > limit {
                        return Err(None);
                    }
                    let more = out.len().clamp(64, 4 << 20).min(limit + 1 - out.len());
                    out.reserve_exact(more);
                }
                let len = out.len();
                let hint = {
                    let mut dst = OutBuffer::around_pos(&mut out, len);
                    dctx.decompress_stream(&mut dst, &mut src)
                        .map_err(|e| Some(code(e)))?
                };
                let consumed = src.pos() == input.len();
                if hint == 0 && consumed {
                    break;
                }
                if consumed && out.len() < out.capacity() {
                    return Err(Some("the input ends inside a frame".into()));
                }
            }
            if out.len() > limit {
                return Err(None);
            }
            Ok(Bytes::from(out))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload() -> Vec<u8> {
        (0..50_000u32)
            .flat_map(|i| format!("span-{} http.route=/x/{} ", i % 97, i % 13).into_bytes())
            .collect()
    }

    #[test]
    fn every_codec_round_trips_over_both_transports() {
        let p = payload();
        let parts = [
            Bytes::copy_from_slice(&p[..1000]),
            Bytes::copy_from_slice(&p[1000..]),
        ];
        for codec in [Codec::Gzip, Codec::Zstd, Codec::Snappy, Codec::None] {
            for t in [Transport::Grpc, Transport::Http] {
                let c = codec.compress(t, &parts).expect("compress");
                if codec != Codec::None {
                    assert!(c.len() < p.len() / 3, "{codec:?} {t:?} compresses");
                }
                let d = codec.decompress(&c, p.len()).expect("decompress");
                assert_eq!(&d[..], &p[..], "{codec:?} {t:?}");
            }
        }
    }

    #[test]
    fn inflation_stops_at_the_limit() {
        let bomb = vec![0u8; 10 << 20];
        for codec in [Codec::Gzip, Codec::Zstd, Codec::Snappy] {
            for t in [Transport::Grpc, Transport::Http] {
                let c = codec
                    .compress(t, &[Bytes::from(bomb.clone())])
                    .expect("compress");
                assert!(c.len() < 1 << 20);
                match codec.decompress(&c, 1 << 20) {
                    Err(CompressError::TooLarge { limit, .. }) => assert_eq!(limit, 1 << 20),
                    other => panic!("{codec:?} {t:?}: {other:?}"),
                }
                assert_eq!(
                    codec.decompress(&c, 10 << 20).expect("fits").len(),
                    10 << 20
                );
            }
        }
    }

    /// What other encoders send: frames that do not state their size (a
    /// streaming writer's, as Go's zstd writes), several frames one after
    /// another, and a frame cut short, which is an error, not a short payload.
    #[test]
    fn zstd_reads_unsized_and_concatenated_frames_and_refuses_a_cut_one() {
        let p = payload();
        let unsized_frame = |data: &[u8]| {
            let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3).expect("encoder");
            enc.include_contentsize(false).expect("flag");
            enc.write_all(data).expect("write");
            enc.finish().expect("finish")
        };
        let one = unsized_frame(&p);
        assert_eq!(
            zstd::zstd_safe::get_frame_content_size(&one).ok(),
            Some(None)
        );
        assert_eq!(
            &Codec::Zstd.decompress(&one, p.len()).expect("inflate")[..],
            &p[..]
        );
        let mut two = unsized_frame(&p[..7000]);
        two.extend_from_slice(
            &Codec::Zstd
                .compress(Transport::Grpc, &[Bytes::copy_from_slice(&p[7000..])])
                .expect("compress"),
        );
        assert_eq!(
            &Codec::Zstd.decompress(&two, p.len()).expect("inflate")[..],
            &p[..]
        );
        assert!(matches!(
            Codec::Zstd.decompress(&two, p.len() - 1),
            Err(CompressError::TooLarge { .. })
        ));
        let cut = &one[..one.len() - 3];
        assert!(matches!(
            Codec::Zstd.decompress(cut, p.len()),
            Err(CompressError::Invalid { codec: "zstd", .. })
        ));
        assert!(Codec::Zstd.decompress(&[], 10).expect("empty").is_empty());
    }

    #[test]
    fn garbage_is_an_error_naming_the_codec() {
        for codec in [Codec::Gzip, Codec::Zstd, Codec::Snappy] {
            let e = codec
                .decompress(b"\x01\x02not compressed at all", 1 << 20)
                .unwrap_err();
            assert!(e.to_string().contains(codec.name().unwrap_or("")), "{e}");
        }
        assert!(matches!(
            Codec::from_encoding("br"),
            Err(CompressError::Unsupported(_))
        ));
        assert_eq!(
            Codec::from_encoding("x-snappy-framed").ok(),
            Some(Codec::Snappy)
        );
        assert_eq!(Codec::from_encoding("IDENTITY").ok(), Some(Codec::None));
    }
}

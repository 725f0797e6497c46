//! Reading a request body within its limits (size, memory budget), and
//! draining one that is refused: shared by the gRPC and HTTP servers.

use bytes::Bytes;

use super::{Admission, Refused};

/// Why a body could not be read.
pub(crate) enum ReadError {
    /// Over `max_request_body_size`.
    TooLarge,
    /// Over the memory limiter's soft limit while reading.
    Memory(std::time::Duration),
    /// The connection broke.
    Broken(String),
}

/// Read a body of at most `max` bytes. What arrives is counted in
/// `reading` (the memory budget): from the reservation of its declared
/// length while it lasts, then admitted (and maybe refused) as it comes.
pub(crate) async fn read_body<B>(
    body: B,
    max: usize,
    reservation: &mut Option<causeway_core::memory::Reservation>,
    adm: &Admission,
    reading: &mut Vec<causeway_core::memory::Permit>,
) -> Result<Bytes, ReadError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<causeway_core::BoxError>,
{
    use http_body_util::BodyExt;
    let mut body = Box::pin(body);
    let declared = reservation.as_ref().map_or(0, |r| r.remaining() as usize);
    let mut buf = bytes::BytesMut::with_capacity(declared.min(max));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ReadError::Broken(e.into().to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if buf.len() + data.len() > max {
            return Err(ReadError::TooLarge);
        }
        buf.extend_from_slice(&data);
        let beyond = match reservation.as_mut() {
            Some(r) => {
                let (p, rest) = r.take(data.len() as u64);
                reading.push(p);
                rest as usize
            }
            None => data.len(),
        };
        if beyond > 0 {
            match adm.admit(beyond) {
                Ok(p) => reading.extend(p),
                Err(Refused::Memory(after)) => {
                    // The rest is thrown away as it comes, so the client reads the 429.
                    drop(buf);
                    reading.clear();
                    drain(body, max).await;
                    return Err(ReadError::Memory(after));
                }
                Err(_) => {}
            }
        }
    }
    Ok(buf.freeze())
}

/// Read and discard a body that will not be used (up to `max` bytes, 10 s
/// at most), so that the client, still sending, reads the refusal (413, or
/// 429 over the soft limit) instead of a broken pipe; nothing of it is kept.
/// Bodies drained at once at most: each holds a connection's read buffer
/// (up to a few hundred KiB); beyond this many, a refused request is
/// answered at once and its connection closed (the client may then see the
/// close before the answer; both are retried).
const MAX_DRAINING: usize = 32;
static DRAINING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_DRAINING);

pub(crate) async fn drain<B: http_body::Body<Data = Bytes>>(body: B, max: usize) {
    use http_body_util::BodyExt;
    let Ok(_slot) = DRAINING.try_acquire() else {
        return;
    };
    let mut body = Box::pin(body);
    let mut seen = 0usize;
    let drained = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(d) = frame.into_data() {
                seen += d.len();
                if seen > max {
                    break;
                }
            }
        }
    })
    .await;
    if drained.is_err() {
        tracing::debug!("An oversized request body was still arriving after 10 s; closing.");
    }
}

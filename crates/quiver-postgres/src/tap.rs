//! COPY data read straight off the socket, beside tokio-postgres rather than through it.
//!
//! Postgres sends a COPY's output as one `CopyData` message per row. Through tokio-postgres,
//! each row is parsed into a message, split off the read buffer as its own reference-counted
//! `Bytes`, and handed through the connection's channel and the copy stream's poll: in a
//! profile of `SELECT sum(l_orderkey) FROM lineitem` that per-row work was 60% of quiver's
//! CPU, on a machine where the client's CPU is the servers' CPU too.
//!
//! A [`TapStream`] sits under tokio-postgres, between it and the socket, and follows the
//! server's message framing (a tag byte and a length). While a COPY is *armed* (by the reader
//! that is about to start it), the payloads of `CopyData` messages go to the [`CopyTap`]
//! instead, concatenated into chunks of about 256 KiB — the binary COPY format is
//! self-delimiting, so the parser needs no message boundaries — and every other message
//! passes through untouched. A chunk ends where a `CopyData` message ends (unless the socket
//! closes mid-message): Postgres sends one row per message, so a chunk holds whole rows and
//! the reader decodes it where it lies, instead of copying a split row's two halves
//! together. tokio-postgres so sees an empty COPY (`CopyOutResponse`, `CopyDone`,
//! `CommandComplete`) and keeps doing everything else: the start, errors,
//! `ReadyForQuery`. A chunk is queued before the message that follows it is passed on, so when
//! the copy stream ends every byte is already in the tap. The tap holds at most about 8 MiB;
//! beyond that the stream stops reading the socket until the reader catches up.
//!
//! Framing starts once the connection is established (after authentication, when the server
//! is idle and the next byte it sends begins a message), and arming ends with the
//! `ReadyForQuery` that closes the COPY.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Chunks handed to the reader are about this large.
const CHUNK: usize = 256 * 1024;
/// The stream stops reading the socket while the tap holds this much.
const HIGH_WATER: usize = 8 * 1024 * 1024;
/// Bytes asked of the socket per read.
const READ: usize = 256 * 1024;
/// A message's header: its tag byte and its 4-byte length.
const HEADER: usize = 5;

#[derive(Default)]
struct TapState {
    framing: bool,
    armed: bool,
    /// The armed COPY has started (`CopyOutResponse`): its `ReadyForQuery` ends the arming.
    /// (tokio-postgres prepares the statement first, and that ends with a `ReadyForQuery` too.)
    copying: bool,
    chunks: VecDeque<Bytes>,
    buffered: usize,
    /// The socket ended or failed: no more chunks will come.
    closed: bool,
    /// The reader has gone (its COPY was abandoned): diverted data is dropped, so the
    /// connection can drain to the server's cancellation instead of waiting on a full tap.
    abandoned: bool,
    reader: Option<Waker>,
    stream: Option<Waker>,
}

impl TapState {
    /// Takes the oldest chunk, waking a stream that waits for room.
    fn pop(&mut self) -> Option<Bytes> {
        let chunk = self.chunks.pop_front()?;
        self.buffered -= chunk.len();
        if self.buffered < HIGH_WATER / 2 {
            if let Some(waker) = self.stream.take() {
                waker.wake();
            }
        }
        Some(chunk)
    }
}

/// Diverted `CopyData` payloads not yet queued for the reader.
#[derive(Default)]
struct Side {
    bytes: BytesMut,
    /// How many of `bytes` are whole messages (the rest is a message still arriving).
    whole: usize,
}

impl Side {
    /// Appends part of a `CopyData` payload, queueing the whole messages held for the reader
    /// once they make a chunk.
    fn extend(&mut self, payload: &[u8], message_ends: bool, state: &mut TapState) {
        if self.bytes.capacity() - self.bytes.len() < payload.len() {
            // Room for a chunk and the message that crosses its end, in one allocation
            // rather than a doubling series from empty (and doubling for a huge message).
            let room = (CHUNK + CHUNK / 4).max(self.bytes.len());
            self.bytes.reserve(payload.len().max(room));
        }
        self.bytes.extend_from_slice(payload);
        if message_ends {
            self.whole = self.bytes.len();
            if self.whole >= CHUNK {
                self.flush(state, false);
            }
        }
    }

    /// Queues the whole messages for the reader (drops them for an abandoned COPY); with
    /// `all`, also the start of a message the socket will not finish.
    fn flush(&mut self, state: &mut TapState, all: bool) {
        let take = if all { self.bytes.len() } else { self.whole };
        self.whole = 0;
        if take == 0 {
            return;
        }
        let chunk = self.bytes.split_to(take).freeze();
        if state.abandoned {
            return;
        }
        state.buffered += chunk.len();
        state.chunks.push_back(chunk);
        if let Some(waker) = state.reader.take() {
            waker.wake();
        }
    }
}

/// The reader's end: arms the next COPY and takes its data.
#[derive(Clone, Default)]
pub struct CopyTap {
    state: Arc<Mutex<TapState>>,
}

impl std::fmt::Debug for CopyTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CopyTap")
    }
}

impl CopyTap {
    fn lock(&self) -> MutexGuard<'_, TapState> {
        // A poisoned lock means a panic elsewhere already failed the query; the state itself
        // (queues and flags) stays consistent, so keep using it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts following the server's messages; call once the connection is up and idle.
    pub fn start_framing(&self) {
        self.lock().framing = true;
    }

    /// Diverts the data of the COPY about to be sent, until its `ReadyForQuery`. Returns
    /// false when the connection is not framed (its data then comes through tokio-postgres).
    pub fn arm(&self) -> bool {
        let mut state = self.lock();
        state.chunks.clear();
        state.buffered = 0;
        state.abandoned = false;
        state.copying = false;
        state.armed = state.framing;
        state.armed
    }

    /// The next chunk of COPY data; `None` once the socket has closed and nothing is queued.
    pub fn poll_chunk(&self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let mut state = self.lock();
        if let Some(chunk) = state.pop() {
            return Poll::Ready(Some(chunk));
        }
        if state.closed {
            return Poll::Ready(None);
        }
        state.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Gives up the armed COPY: what is queued or still arrives of it is dropped.
    pub fn abandon(&self) {
        let mut state = self.lock();
        state.abandoned = true;
        state.chunks.clear();
        state.buffered = 0;
        if let Some(waker) = state.stream.take() {
            waker.wake();
        }
    }

    /// A queued chunk, without waiting.
    pub fn try_chunk(&self) -> Option<Bytes> {
        self.lock().pop()
    }
}

/// When the reader of a long COPY should pause before it asks for the next chunk.
///
/// Postgres writes a COPY to its socket a few kilobytes at a time, and a reader that keeps up
/// sleeps in `epoll_wait` between writes: a `lineitem` scan woke each connection's thread
/// ~60,000 times (one wake-up per ~9 KB), and on this project's 2-core machine the context
/// switches were a third of the client's CPU — CPU the server's backends share. Once a COPY
/// is streaming (more than [`Pacer::AFTER`] read) and a chunk comes back small (the reader has
/// caught up with the socket), the reader sleeps [`Pacer::NAP`] before reading on: the server
/// keeps writing into the socket's buffer meanwhile (at ~170 MB/s per stream, 0.5 ms is ~85 KB,
/// well within a Unix socket's or a TCP window's buffer), and the next read takes it all at
/// once. Measured on a `lineitem` scan: context switches −75%, the client's CPU −10 to −20%.
///
/// The sleep blocks the thread, and that is the point: a connection's reader runs on the
/// connection's own thread ([`crate::connection::PgConnection::home`]), beside nothing but
/// that connection's I/O, and an async sleep would not help — the socket's readiness would
/// wake the thread for every write all the same. Small results never pause (they end before
/// [`Pacer::AFTER`]), and a reader slower than the server never does either (its chunks come
/// back full).
#[derive(Debug, Default)]
pub struct Pacer {
    read: usize,
}

impl Pacer {
    /// A COPY pauses only after this much of it has been read.
    pub const AFTER: usize = 1024 * 1024;
    /// A chunk smaller than this means the reader has caught up with the socket.
    pub const SMALL: usize = CHUNK / 4;
    /// How long the reader pauses.
    pub const NAP: std::time::Duration = std::time::Duration::from_micros(500);

    /// Counts a chunk of `len` bytes; whether to pause before reading the next one.
    pub fn after_chunk(&mut self, len: usize) -> bool {
        self.read += len;
        self.read > Self::AFTER && len < Self::SMALL
    }

    /// Pauses the current thread if [`Self::after_chunk`] says so.
    pub fn pace(&mut self, len: usize) {
        if self.after_chunk(len) {
            std::thread::sleep(Self::NAP);
        }
    }
}

/// Where the stream is in the server's message stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    /// At a message boundary: the next 5 bytes are a tag and a length.
    Header,
    /// Inside a message with `left` bytes to go: a `CopyData` payload for the tap
    /// (`divert`), or anything else, header included, for tokio-postgres.
    Body { left: usize, divert: bool },
}

/// A socket as tokio-postgres sees it, with COPY data taken off to a [`CopyTap`].
pub struct TapStream<S> {
    inner: S,
    tap: CopyTap,
    framing: bool,
    frame: Frame,
    /// An incomplete message header, kept for the next read.
    input: BytesMut,
    /// Sorted for tokio-postgres, not yet read by it.
    output: BytesMut,
    /// Diverted, not yet queued.
    side: Side,
    scratch: Vec<u8>,
}

impl<S> std::fmt::Debug for TapStream<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapStream")
            .field("frame", &self.frame)
            .field("input", &self.input.len())
            .field("output", &self.output.len())
            .field("side", &self.side.bytes.len())
            .finish()
    }
}

impl<S> TapStream<S> {
    pub fn new(inner: S, tap: CopyTap) -> Self {
        TapStream {
            inner,
            tap,
            framing: false,
            frame: Frame::Header,
            input: BytesMut::new(),
            output: BytesMut::new(),
            side: Side::default(),
            scratch: Vec::new(),
        }
    }

    /// The stream under the tap (the TLS session, for its certificates).
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The socket and the tap, apart again (to put TLS between them). Only before
    /// [`CopyTap::start_framing`]: until then nothing is buffered here.
    pub fn into_parts(self) -> (S, CopyTap) {
        (self.inner, self.tap)
    }

    /// Sorts `data` into `output` (for tokio-postgres) and `side` (for the tap), keeping an
    /// incomplete message header in `input` for the next read.
    fn sort(&mut self, data: &[u8]) {
        // A handle of its own, so the lock does not hold `self` borrowed (once per read).
        let tap = self.tap.clone();
        let mut state = tap.lock();
        let mut armed = state.armed;
        let mut pos = 0;
        while pos < data.len() {
            if armed && self.frame == Frame::Header {
                // The bulk of a COPY: whole `CopyData` messages, one after another.
                let after = self.divert_whole(data, pos, &mut state);
                if after > pos {
                    pos = after;
                    continue;
                }
            }
            // Anything else (another message, or one the read cut): a frame at a time.
            pos = self.sort_frame(data, pos, &mut state, &mut armed);
        }
    }

    /// Diverts the `CopyData` messages that lie whole in `data` from `pos` (a message
    /// boundary) on, without stepping through [`Frame`] for each; where the first other thing
    /// starts.
    fn divert_whole(&mut self, data: &[u8], mut pos: usize, state: &mut TapState) -> usize {
        while let Some(&[tag, a, b, c, d]) = data.get(pos..pos.wrapping_add(HEADER)) {
            let length = u32::from_be_bytes([a, b, c, d]) as usize;
            // A length below 4 ends before the payload starts, so `get` refuses it too: such
            // garbage is for the general path to pass on.
            let end = pos.wrapping_add(1).wrapping_add(length);
            let Some(payload) = data.get(pos.wrapping_add(HEADER)..end) else {
                break;
            };
            if tag != b'd' {
                break;
            }
            self.side.extend(payload, true, state);
            pos = end;
        }
        pos
    }

    /// Sorts a message header at `pos`, or as much of the message body under way as `data`
    /// holds; where the next frame starts.
    fn sort_frame(
        &mut self,
        data: &[u8],
        mut pos: usize,
        state: &mut TapState,
        armed: &mut bool,
    ) -> usize {
        match self.frame {
            Frame::Header => {
                let Some(header) = data.get(pos..pos + HEADER) else {
                    self.input.extend_from_slice(&data[pos..]);
                    return data.len();
                };
                let tag = header[0];
                let length =
                    u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
                if tag == b'd' && *armed && length >= 4 {
                    pos += HEADER;
                    self.frame = Frame::Body {
                        left: length - 4,
                        divert: true,
                    };
                } else {
                    // Whatever follows the data (CopyDone, an error) must find it queued.
                    self.side.flush(state, false);
                    if *armed && tag == b'H' {
                        state.copying = true;
                    }
                    if *armed && tag == b'Z' && state.copying {
                        *armed = false;
                        state.armed = false;
                        state.copying = false;
                    }
                    // A length below 4 is the server's garbage: pass the header on and let
                    // tokio-postgres report it.
                    self.frame = Frame::Body {
                        left: 1 + length.max(4),
                        divert: false,
                    };
                }
            }
            Frame::Body { left, divert } => {
                let take = left.min(data.len() - pos);
                let bytes = &data[pos..pos + take];
                pos += take;
                self.frame = if take == left {
                    Frame::Header
                } else {
                    Frame::Body {
                        left: left - take,
                        divert,
                    }
                };
                if !divert {
                    self.output.extend_from_slice(bytes);
                } else {
                    self.side.extend(bytes, take == left, state);
                }
            }
        }
        pos
    }

    fn close(&mut self) {
        let mut state = self.tap.lock();
        self.side.flush(&mut state, true);
        state.closed = true;
        if let Some(waker) = state.reader.take() {
            waker.wake();
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for TapStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.framing {
            this.framing = this.tap.lock().framing;
            if !this.framing {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
        }
        loop {
            if !this.output.is_empty() {
                let n = this.output.len().min(buf.remaining());
                buf.put_slice(&this.output[..n]);
                this.output.advance(n);
                return Poll::Ready(Ok(()));
            }
            {
                let mut state = this.tap.lock();
                if state.buffered >= HIGH_WATER {
                    state.stream = Some(cx.waker().clone());
                    return Poll::Pending;
                }
            }
            if this.scratch.len() < READ {
                this.scratch.resize(READ, 0);
            }
            let mut read = ReadBuf::new(&mut this.scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => {
                    // Let the reader work on the rows that have arrived while the socket is
                    // quiet.
                    this.side.flush(&mut this.tap.lock(), false);
                    return Poll::Pending;
                }
                Poll::Ready(Err(e)) => {
                    this.close();
                    return Poll::Ready(Err(e));
                }
                Poll::Ready(Ok(())) => {
                    let filled = read.filled().len();
                    if filled == 0 {
                        // End of stream: an incomplete header goes to tokio-postgres, which
                        // reports the truncation.
                        this.close();
                        if this.input.is_empty() {
                            return Poll::Ready(Ok(()));
                        }
                        let rest = this.input.split();
                        this.output.extend_from_slice(&rest);
                        continue;
                    }
                    let scratch = std::mem::take(&mut this.scratch);
                    let mut data = scratch.get(..filled).unwrap_or_default();
                    if !this.input.is_empty() {
                        // The header the last read cut, completed from this one's first bytes
                        // (the rest is sorted where it lies, not copied after it).
                        let need = HEADER.saturating_sub(this.input.len()).min(data.len());
                        let mut carried = this.input.split();
                        carried.extend_from_slice(data.get(..need).unwrap_or_default());
                        data = data.get(need..).unwrap_or_default();
                        this.sort(&carried);
                    }
                    this.sort(data);
                    this.scratch = scratch;
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for TapStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        out.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    /// What tokio-postgres reads and what the tap collects, for `server` bytes arriving in
    /// pieces of `piece` bytes.
    async fn run(server: Vec<u8>, piece: usize, arm: bool) -> (Vec<u8>, Vec<u8>) {
        let (passed, chunks) = run_chunks(server, piece, arm).await;
        (passed, chunks.concat())
    }

    /// [`run`], with the chunks the reader would take one by one.
    async fn run_chunks(server: Vec<u8>, piece: usize, arm: bool) -> (Vec<u8>, Vec<Bytes>) {
        let (mut client_end, server_end) = tokio::io::duplex(piece.max(1));
        let tap = CopyTap::default();
        tap.start_framing();
        if arm {
            assert!(tap.arm());
        }
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let mut server_end = server_end;
            for part in server.chunks(piece.max(1)) {
                server_end.write_all(part).await.unwrap();
            }
        });
        let mut stream = TapStream::new(&mut client_end, tap.clone());
        let mut passed = Vec::new();
        stream.read_to_end(&mut passed).await.unwrap();
        writer.await.unwrap();
        let mut chunks = Vec::new();
        while let Some(chunk) = tap.try_chunk() {
            chunks.push(chunk);
        }
        (passed, chunks)
    }

    fn copy_session(rows: &[&[u8]]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        // tokio-postgres prepares the COPY statement first: that ends with a ReadyForQuery.
        let mut server = message(b'1', &[]);
        server.extend(message(b'Z', b"I"));
        server.extend(message(b'H', &[1, 0, 0]));
        let mut expected_passed = server.clone();
        let mut expected_data = Vec::new();
        for row in rows {
            server.extend(message(b'd', row));
            expected_data.extend_from_slice(row);
        }
        for tail in [
            message(b'c', &[]),
            message(b'C', b"COPY 3\0"),
            message(b'Z', b"T"),
        ] {
            server.extend_from_slice(&tail);
            expected_passed.extend(tail);
        }
        (server, expected_passed, expected_data)
    }

    #[tokio::test]
    async fn copy_data_goes_to_the_tap_and_the_rest_passes_whatever_the_reads() {
        let big = vec![7u8; 300_000];
        let rows: Vec<&[u8]> = vec![b"PGCOPY\n", &[1, 2, 3], &[], &big, &[9]];
        let (server, passed, data) = copy_session(&rows);
        for piece in [1, 2, 3, 5, 7, 64, 4096, 1 << 20] {
            let (got_passed, got_data) = run(server.clone(), piece, true).await;
            assert_eq!(got_passed, passed, "piece {piece}");
            assert_eq!(got_data, data, "piece {piece}");
        }
    }

    #[test]
    fn a_copy_pauses_only_when_streaming_and_caught_up() {
        let mut pacer = Pacer::default();
        // A small result, read in small chunks: never.
        for _ in 0..100 {
            assert!(!pacer.after_chunk(8 * 1024));
        }
        // Full chunks: the reader is behind the server, never.
        let mut pacer = Pacer::default();
        for _ in 0..100 {
            assert!(!pacer.after_chunk(CHUNK));
        }
        // Once past the first MiB, a small chunk pauses and a full one does not.
        assert!(pacer.after_chunk(9 * 1024));
        assert!(!pacer.after_chunk(CHUNK));
        assert!(!pacer.after_chunk(Pacer::SMALL));
        assert!(pacer.after_chunk(Pacer::SMALL - 1));
    }

    #[tokio::test]
    async fn chunks_end_where_messages_end() {
        // Rows of many sizes, some larger than a read, enough for several chunks.
        let rows: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| {
                vec![i as u8; (i as usize * 37) % 700 + if i % 500 == 7 { 300_000 } else { 0 }]
            })
            .collect();
        let row_refs: Vec<&[u8]> = rows.iter().map(Vec::as_slice).collect();
        let (server, _, data) = copy_session(&row_refs);
        let mut ends = std::collections::HashSet::new();
        let mut at = 0;
        for row in &rows {
            at += row.len();
            ends.insert(at);
        }
        for piece in [1, 3, 7, 4096, 100_000, 1 << 20] {
            let (_, chunks) = run_chunks(server.clone(), piece, true).await;
            assert!(chunks.len() > 1, "piece {piece}");
            let mut at = 0;
            for chunk in &chunks {
                at += chunk.len();
                assert!(
                    ends.contains(&at),
                    "piece {piece}: a chunk ends mid-row at {at}"
                );
            }
            assert_eq!(chunks.concat(), data, "piece {piece}");
        }
    }

    #[tokio::test]
    async fn unarmed_copies_and_later_messages_pass_through() {
        let rows: Vec<&[u8]> = vec![&[1, 2, 3], &[4]];
        let (server, _, _) = copy_session(&rows);
        let (passed, data) = run(server.clone(), 3, false).await;
        assert_eq!(passed, server);
        assert!(data.is_empty());
        // After the ReadyForQuery that ends an armed COPY, CopyData passes through again.
        let (mut twice, mut expected, _) = copy_session(&rows);
        twice.extend_from_slice(&server);
        expected.extend_from_slice(&server);
        let (passed, data) = run(twice, 11, true).await;
        assert_eq!(passed, expected);
        assert_eq!(data, [1, 2, 3, 4]);
    }

    #[tokio::test]
    async fn an_error_after_data_finds_the_data_queued_and_a_cut_stream_passes_its_tail() {
        let mut server = message(b'H', &[1, 0, 0]);
        server.extend(message(b'd', &[5, 6]));
        server.extend(message(b'E', b"SFATAL\0"));
        // The connection dies half-way through a message.
        server.extend_from_slice(&message(b'd', &[1, 2, 3, 4])[..6]);
        let (passed, data) = run(server.clone(), 4, true).await;
        let mut expected = message(b'H', &[1, 0, 0]);
        expected.extend(message(b'E', b"SFATAL\0"));
        // The cut CopyData is diverted as far as it got: its header was complete.
        assert_eq!(passed, expected);
        assert_eq!(data, [5, 6, 1]);
    }
}

//! Scope: plain HTTP/1.1 POSTs whose body is in memory; never TLS, HTTP/2 or a proxy (reqwest's).
//!
//! The direct path: a lane writes plain-HTTP chat requests on its own sockets and reads the
//! answers itself, without reqwest. HTTPS and proxied requests keep going through reqwest.
//! Responses are read as hyper reads them, and what it refuses (h1.rs lists it) is an error in
//! the record, never a misread.
//!
//! Why, measured in docs/client-lanes.md:
//! - Arrival times come from the kernel (socket.rs): a lane delayed by a busy or preempted core
//!   still stamps each token when it arrived, not when the lane got to it; a lane behind reads
//!   one event at a time so each keeps its own stamp (catch_up.rs).
//! - One task reads the socket and hands the payload, in place, to the stream's parser. Through
//!   hyper each body chunk goes from the connection's task to the reader's through a channel, in
//!   its own allocation, which with the chunked decoding was most of a lane's CPU per token
//!   besides the kernel's.
//!
//! The rules are the reqwest path's: the window opens before the connection is taken or made, a
//! request is sent a second time only when its connection could not be made, and failures carry
//! the same kinds and messages (tests/it/faults.rs runs both paths).

use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use super::body::{self, Body};
use super::h1::{self, Head, Unframe, Wire};
use super::{
    Api, DROPPED_AFTER_SEND, Exchange, Limits, QUIET_BEFORE_REUSE, Window, catch_up, ms_since,
    no_response_headers, socket,
};
use ttft_model::record::ErrorKind;

/// Read buffer of a connection: the response head must fit in it.
const BUFFER_BYTES: usize = h1::MAX_HEAD_BYTES;

/// After the stream's end marker, how long the rest of the body (the last chunk's framing) may
/// take to come before the connection is given up instead of kept for the next request.
const END_WAIT: Duration = Duration::from_millis(100);

/// At most this much is read after the end marker to reach the body's end.
const END_BYTES: u64 = 64 << 10;

/// A lane's idle keep-alive connections.
pub(super) struct Pool {
    idle: Mutex<Vec<(Conn, Instant)>>,
    keep_alive_idle: Duration,
    _stamps_on: socket::StampsOn,
}

pub(super) struct Conn {
    stream: TcpStream,
    authority: String,
    buf: Box<[u8]>,
    reads: catch_up::EventReads,
}

impl Pool {
    pub fn new(keep_alive_idle: Duration) -> Pool {
        Pool { idle: Mutex::new(Vec::new()), keep_alive_idle, _stamps_on: socket::StampsOn::new() }
    }

    /// The most recently used connection to `authority` that is still fresh, open and quiet.
    /// A connection holding bytes nobody asked for is closed, and `ex` says so: those bytes
    /// would be read as this request's answer.
    fn take(&self, authority: &str, ex: &mut Exchange) -> Option<Conn> {
        let mut idle = self.idle.lock().ok()?;
        idle.retain(|(_, since)| since.elapsed() < self.keep_alive_idle);
        while let Some((conn, _)) = idle.pop() {
            if conn.authority != authority {
                continue;
            }
            match socket::idle_state(conn.stream.as_raw_fd()) {
                socket::Idle::Quiet => return Some(conn),
                socket::Idle::Unexpected => ex.unexpected_bytes_dropped = true,
                socket::Idle::Closed => {}
            }
        }
        None
    }

    fn put(&self, conn: Conn) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push((conn, Instant::now()));
        }
    }
}

/// Why no connection could be made. Its words follow "cannot connect to {authority}: " in
/// records: keep them.
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    /// The name lookup or the last address tried failed so.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the name has no address")]
    NoAddress,
}

impl Conn {
    async fn connect(authority: &str) -> Result<Conn, ConnectError> {
        let addrs = tokio::net::lookup_host(authority).await?;
        let mut last = ConnectError::NoAddress;
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(stream) => {
                    // Small writes go out at once; stamps where the kernel gives them.
                    let _ = stream.set_nodelay(true);
                    socket::enable_arrival_stamps(stream.as_raw_fd());
                    let buf = vec![0; BUFFER_BYTES].into_boxed_slice();
                    return Ok(Conn {
                        stream,
                        authority: authority.to_string(),
                        buf,
                        reads: Default::default(),
                    });
                }
                Err(e) => last = ConnectError::Io(e),
            }
        }
        Err(last)
    }

    /// Reads into the buffer from `at`: the byte count and when the last byte arrived (ms since
    /// `start`; the kernel's stamp, or the read's own when there is none). Behind, one event.
    async fn recv(&mut self, at: usize, start: Instant) -> std::io::Result<(usize, f64)> {
        let Conn { stream, buf, reads, .. } = self;
        loop {
            stream.readable().await?;
            let fd = stream.as_raw_fd();
            match stream.try_io(Interest::READABLE, || reads.read(fd, &mut buf[at..])) {
                Ok((n, age)) => {
                    let read_ms = ms_since(start);
                    return Ok((n, age.map_or(read_ms, |age| read_ms - age.as_secs_f64() * 1000.0)));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// One timed exchange on the direct path. Never fails: errors land in `Exchange::error`.
pub(super) async fn exchange(
    pool: &Pool,
    api: Api,
    limits: &Limits,
    timeout: Duration,
    wire: &Wire,
    stream: bool,
) -> Exchange {
    let mut ex = Exchange { started_at: ttft_model::clock::now_rfc3339(), ..Default::default() };
    let Some((mut conn, window)) = open(pool, wire, timeout, &mut ex).await else { return ex };
    let Some((head, used, filled)) = send(&mut conn, wire, window, &mut ex).await else { return ex };
    let first_ms = ex.first_byte_ms.unwrap_or(0.0);
    let mut body = Raw::new(&mut conn, &head, used..filled, first_ms, window.start);
    body::read_answer(api, limits, head.status, stream, &mut body, window, &mut ex).await;
    let reusable = head.keep_alive && !wire.close && ex.error.is_none() && body.read_to_end().await;
    if reusable {
        match stays_quiet(&conn).await {
            socket::Idle::Quiet => pool.put(conn),
            socket::Idle::Unexpected => ex.unexpected_bytes_dropped = true,
            socket::Idle::Closed => {}
        }
    }
    ex
}

/// Watches a connection whose response has ended for `QUIET_BEFORE_REUSE` (mod.rs): what it
/// held by then. The exchange's own measurements are already taken; only its return waits.
async fn stays_quiet(conn: &Conn) -> socket::Idle {
    let by = tokio::time::Instant::now() + QUIET_BEFORE_REUSE;
    let fd = conn.stream.as_raw_fd();
    loop {
        match conn.stream.try_io(Interest::READABLE, || socket::peek_idle(fd)) {
            Ok(idle) => return idle,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return socket::Idle::Closed,
        }
        if tokio::time::timeout_at(by, conn.stream.readable()).await.is_err() {
            return socket::Idle::Quiet;
        }
    }
}

/// A connection for the request, and its window: a pooled one, or a new one, made at most twice.
async fn open(pool: &Pool, wire: &Wire, timeout: Duration, ex: &mut Exchange) -> Option<(Conn, Window)> {
    loop {
        ex.attempts += 1;
        let window = Window::open(timeout);
        ex.start = Some(window.start);
        if let Some(conn) = pool.take(&wire.authority, ex) {
            return Some((conn, window));
        }
        match tokio::time::timeout_at(window.deadline, Conn::connect(&wire.authority)).await {
            Ok(Ok(conn)) => return Some((conn, window)),
            // Nothing reached the server: it may be sent again, once.
            Ok(Err(_)) if ex.attempts < 2 => {}
            Ok(Err(why)) => {
                ex.fail(ErrorKind::Connect, super::failure::cannot_connect(&wire.authority, &why.to_string()))
            }
            Err(_) => ex.fail(ErrorKind::Timeout, no_response_headers(timeout)),
        }
        if ex.error.is_some() {
            return None;
        }
    }
}

/// Writes the request and reads the response head (skipping interim 1xx heads): the head, its
/// length, and how many bytes the buffer holds. Sets `first_byte_ms` to the head's arrival.
async fn send(
    conn: &mut Conn,
    wire: &Wire,
    window: Window,
    ex: &mut Exchange,
) -> Option<(Head, usize, usize)> {
    let Window { start, deadline, timeout } = window;
    match tokio::time::timeout_at(deadline, conn.stream.write_all(&wire.bytes)).await {
        Err(_) => ex.fail(ErrorKind::Timeout, no_response_headers(timeout)),
        Ok(Err(e)) if body::ended(&e) => ex.fail(ErrorKind::Transport, DROPPED_AFTER_SEND),
        Ok(Err(e)) => ex.fail(ErrorKind::Transport, format!("sending the request failed: {e}")),
        Ok(Ok(())) => ex.request_written_ms = Some(ms_since(start)),
    }
    let mut filled = 0;
    while ex.error.is_none() {
        match h1::parse_head(&conn.buf[..filled]) {
            Err(why) => ex.fail(ErrorKind::Transport, why.to_string()),
            Ok(Some((head, used))) if head.is_interim() => {
                conn.buf.copy_within(used..filled, 0);
                filled -= used;
                continue;
            }
            Ok(Some((head, used))) => return Some((head, used, filled)),
            Ok(None) => match tokio::time::timeout_at(deadline, conn.recv(filled, start)).await {
                Err(_) => ex.fail(ErrorKind::Timeout, no_response_headers(timeout)),
                Ok(Err(e)) if body::ended(&e) => ex.fail(ErrorKind::Transport, DROPPED_AFTER_SEND),
                Ok(Err(e)) => ex.fail(ErrorKind::Transport, format!("reading the response failed: {e}")),
                Ok(Ok((0, _))) if filled == 0 => ex.fail(ErrorKind::Transport, DROPPED_AFTER_SEND),
                Ok(Ok((0, _))) => ex.fail(ErrorKind::Transport, super::failure::CLOSED_IN_HEAD),
                Ok(Ok((n, at_ms))) => {
                    filled += n;
                    ex.first_byte_ms = Some(at_ms.max(0.0));
                }
            },
        }
    }
    None
}

/// A body read off a direct connection, its framing taken off in place.
struct Raw<'c> {
    conn: &'c mut Conn,
    unframe: Unframe,
    content_type: Option<String>,
    location: Option<String>,
    coding: Option<String>,
    /// Bytes of the buffer not yet unframed.
    pos: usize,
    len: usize,
    /// When the buffer's bytes arrived; never earlier than an earlier read's.
    at_ms: f64,
    start: Instant,
    /// Payload bytes handed out.
    read: u64,
}

impl<'c> Raw<'c> {
    fn new(
        conn: &'c mut Conn,
        head: &Head,
        held: std::ops::Range<usize>,
        at_ms: f64,
        start: Instant,
    ) -> Raw<'c> {
        let (content_type, location) = (head.content_type.clone(), head.location.clone());
        let unframe = Unframe::new(head.framing);
        let coding = head.coding.clone();
        let (pos, len) = (held.start, held.end);
        Raw { conn, unframe, content_type, location, coding, pos, len, at_ms, start, read: 0 }
    }

    /// Reads on to the body's end, briefly and boundedly, after the stream's end marker: true when
    /// it ended cleanly with nothing after it, so the connection can carry the next request.
    async fn read_to_end(&mut self) -> bool {
        let by = tokio::time::Instant::now() + END_WAIT;
        let mut extra = 0;
        while !self.unframe.is_done() && extra <= END_BYTES {
            match tokio::time::timeout_at(by, self.next()).await {
                Ok(Some(Ok((piece, _)))) => extra += piece.len() as u64,
                Ok(None) => break,
                _ => return false,
            }
        }
        self.unframe.is_done() && self.pos == self.len
    }
}

impl Body for Raw<'_> {
    fn content_type(&self) -> Option<String> {
        self.content_type.clone()
    }

    fn location(&self) -> Option<String> {
        self.location.clone()
    }

    fn coding(&self) -> Option<String> {
        self.coding.clone()
    }

    async fn next(&mut self) -> Option<Result<(&[u8], f64), body::Broken>> {
        let piece = loop {
            if self.unframe.is_done() {
                return None;
            }
            if self.pos < self.len {
                let at = self.pos;
                let step = match self.unframe.step(&self.conn.buf[at..self.len]) {
                    Ok(step) => step,
                    Err(why) => {
                        return Some(Err(body::Broken::Framing { read: self.read, why: why.to_string() }));
                    }
                };
                self.pos += step.used;
                match step.data {
                    Some(data) => break at + data.start..at + data.end,
                    None => continue,
                }
            }
            match self.conn.recv(0, self.start).await {
                Ok((0, _)) if self.unframe.ends_at_close() => return None,
                Ok((0, _)) => return Some(Err(body::Broken::ClosedEarly { read: self.read })),
                Ok((n, at_ms)) => {
                    (self.pos, self.len) = (0, n);
                    self.at_ms = at_ms.max(self.at_ms);
                }
                Err(e) => return Some(Err(body::broken_io(&e, self.read))),
            }
        };
        self.read += piece.len() as u64;
        Some(Ok((&self.conn.buf[piece], self.at_ms)))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::sync::mpsc;

    fn chunk(data: &str) -> String {
        let event = format!("data: {data}\n\n");
        format!("{:x}\r\n{event}\r\n", event.len())
    }

    fn token(text: &str) -> String {
        chunk(&format!(r#"{{"choices":[{{"delta":{{"content":"{text}"}}}}]}}"#))
    }

    /// When each write of a token began and ended.
    type Spans = Vec<(Instant, Instant)>;

    /// Streams `phases` of (token, ms to wait after it) to one request. The first phase goes out
    /// at once; each later one only once the lane's own thread is blocked, which it stays for
    /// `hold` after the phase is written. Returns the exchange and each later phase's write spans.
    fn stream_to_a_blocked_lane(
        phases: Vec<Vec<(&'static str, u64)>>,
        hold: Duration,
    ) -> (Exchange, Vec<Spans>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let authority = listener.local_addr().unwrap().to_string();
        let (go_tx, go) = mpsc::channel::<()>();
        let (written_tx, written) = mpsc::channel::<Spans>();
        let later = phases.len() - 1;
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.set_nodelay(true).unwrap(); // one token, one packet, as servers send them
            let mut request = [0u8; 4096];
            let _ = s.read(&mut request).unwrap();
            s.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
            )
            .unwrap();
            for (i, phase) in phases.into_iter().enumerate() {
                if i > 0 {
                    go.recv().unwrap();
                }
                let mut spans = Spans::new();
                for (text, wait_ms) in phase {
                    let before = Instant::now();
                    s.write_all(token(text).as_bytes()).unwrap();
                    spans.push((before, Instant::now()));
                    std::thread::sleep(Duration::from_millis(wait_ms));
                }
                if i == later {
                    s.write_all(format!("{}0\r\n\r\n", chunk("[DONE]")).as_bytes()).unwrap();
                }
                if i > 0 {
                    written_tx.send(spans).unwrap();
                }
            }
            std::thread::sleep(Duration::from_secs(2));
        });
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let blocker = tokio::spawn(async move {
                let mut all = Vec::new();
                for _ in 0..later {
                    tokio::time::sleep(Duration::from_millis(100)).await; // what came is read
                    go_tx.send(()).unwrap();
                    all.push(written.recv().unwrap()); // blocks the lane's only thread
                    std::thread::sleep(hold);
                }
                all
            });
            let wire = Wire {
                authority,
                bytes: b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n".to_vec(),
                close: false,
            };
            let pool = Pool::new(Duration::from_secs(2));
            let ex =
                exchange(&pool, Api::Openai, &Limits::default(), Duration::from_secs(30), &wire, true).await;
            (ex, blocker.await.unwrap())
        })
    }

    /// Asserts token `index` of `ex` was stamped no earlier than its write began and before
    /// `latest` (give or take clock rounding). `latest` is where a wrong stamp would land (the
    /// lane's late read, the next token's write), not the write's end: on a loaded machine the
    /// kernel may take a loopback packet in (and stamp it) a while after the write returned.
    fn assert_arrived_between(ex: &Exchange, index: usize, before: Instant, latest: Instant) {
        let start = ex.start.unwrap();
        let ms = |t: Instant| t.duration_since(start).as_secs_f64() * 1000.0;
        let at = ex.token_offsets_ms[index];
        assert!(
            at >= ms(before) - 1.0 && at < ms(latest),
            "token {index} at {at} ms, written from {} ms, due before {} ms",
            ms(before),
            ms(latest)
        );
    }

    /// The lane's thread is blocked when the second token arrives and reads it 300 ms later: the
    /// token still carries the instant it arrived. (Stamped at the read, it was 300 ms late.)
    #[test]
    fn a_token_arriving_while_the_lane_is_blocked_keeps_its_arrival_time() {
        let (ex, spans) =
            stream_to_a_blocked_lane(vec![vec![("A", 0)], vec![("B", 0)]], Duration::from_millis(300));
        assert!(ex.error.is_none(), "{:?}", ex.error);
        assert_eq!(ex.content, "AB");
        // Stamped at the read it would be 300 ms after its write: half of that is the limit.
        let (before, after) = spans[0][0];
        assert_arrived_between(&ex, 1, before, after + Duration::from_millis(150));
    }

    /// Two tokens arrive 20 ms apart while a lane that is already behind is blocked: each keeps
    /// its own arrival, because a lane behind takes its sockets' events one at a time. (Read in
    /// one go, the first carried the second's stamp, 20 ms late.) The first phase's 20 tokens,
    /// read as they come, use up the connection's first quick acknowledgements, as any stream
    /// past its start has: while those last the kernel merges queued packets, stamps and all.
    #[test]
    fn tokens_queued_while_a_lane_is_behind_keep_their_own_arrival_times() {
        // C's stamp is its own, not D's (read in one go, C carried D's stamp): earlier than D's,
        // and no earlier than C's write; D's is not the late read's (60 ms on): half of that is
        // the limit. On a loaded machine the kernel itself may take C in only with D (its
        // receive work deferred past D's write) and merge the two, stamp and all: nothing a
        // client can tell apart. So up to three tries, one of which must show both stamps; the
        // lane's own bug (reading a behind socket in one go) merges them in every try.
        let mut tries = Vec::new();
        for _ in 0..3 {
            let start: Vec<_> = (0..20).map(|_| (".", 2)).collect();
            let phases = vec![start, vec![("B", 0)], vec![("C", 20), ("D", 0)]];
            let (ex, spans) = stream_to_a_blocked_lane(phases, Duration::from_millis(60));
            assert!(ex.error.is_none(), "{:?}", ex.error);
            assert_eq!(ex.content, format!("{}BCD", ".".repeat(20)));
            let ((c_before, _), (d_before, d_after)) = (spans[1][0], spans[1][1]);
            let (c_at, d_at) = (ex.token_offsets_ms[21], ex.token_offsets_ms[22]);
            if c_at < d_at {
                assert_arrived_between(&ex, 21, c_before, d_after + Duration::from_millis(30));
                assert_arrived_between(&ex, 22, d_before, d_after + Duration::from_millis(30));
                return;
            }
            tries.push((c_at, d_at));
        }
        panic!("C carried D's arrival in every try (C, D stamped at ms): {tries:?}");
    }
}

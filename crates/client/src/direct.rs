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
//! The rules are the reqwest path's: a request is sent a second time only when its connection
//! could not be made, and failures carry the same kinds and messages (tests/it/faults.rs runs
//! both paths). One differs, by design: a request goes out on a connection that has carried no
//! earlier response, opened before its window (`Spares`), where reqwest connects inside it.

use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use super::body::{self, Body};
use super::broken::{self, Broken};
use super::h1::{self, Head, Unframe, Wire};
use super::{
    Api, DROPPED_AFTER_SEND, Exchange, Limits, Window, catch_up, deadline_after, ms_since,
    no_response_headers, socket,
};
use ttft_model::record::{ConnectionUse, ErrorKind};

/// Read buffer of a connection: the response head must fit in it.
const BUFFER_BYTES: usize = h1::MAX_HEAD_BYTES;

/// A lane's spare connections: opened ahead of the requests that take them, each carrying one
/// request and its response, then closed. A connection that has carried a response may carry
/// more after it that no request asked for (a proxy or server answering twice, a copy of the
/// last reply any time later: 66-150 ms seen); a request written on it would read that as its
/// answer, faster than the server could have answered. A connection that has carried nothing has
/// nothing to be late with, whatever the delay, and opened ahead its connect is outside the
/// request's window, as a kept-alive one's was.
pub(super) struct Spares {
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

impl Spares {
    /// Spares are closed once idle for `keep_alive_idle`: a server may close an idle connection
    /// on its own timer, and a request written onto it then may be lost (options.rs).
    pub fn new(keep_alive_idle: Duration) -> Spares {
        Spares { idle: Mutex::new(Vec::new()), keep_alive_idle, _stamps_on: socket::StampsOn::new() }
    }

    /// A spare connection to `authority` that is still fresh, open and silent. One holding bytes
    /// before any request was written on it is closed, and `ex` says so.
    fn take(&self, authority: &str, ex: &mut Exchange) -> Option<Conn> {
        let mut idle = self.idle.lock().ok()?;
        idle.retain(|(_, since)| since.elapsed() < self.keep_alive_idle);
        while let Some(i) = idle.iter().rposition(|(conn, _)| conn.authority == authority) {
            let (conn, _) = idle.swap_remove(i);
            match socket::idle_state(conn.stream.as_raw_fd()) {
                socket::Idle::Quiet => return Some(conn),
                socket::Idle::Unexpected => ex.unexpected_bytes_dropped = true,
                socket::Idle::Closed => {}
            }
        }
        None
    }

    /// Spares to `authority` now.
    fn count(&self, authority: &str) -> usize {
        let Ok(mut idle) = self.idle.lock() else { return 0 };
        idle.retain(|(_, since)| since.elapsed() < self.keep_alive_idle);
        idle.iter().filter(|(conn, _)| conn.authority == authority).count()
    }

    /// Opens spares to `authority` until it has `n`, all at once; one that cannot be made is left
    /// out (the request that finds none makes its own and says why it could not). Each is closed
    /// once idle for `keep_alive_idle`, so none holds a server's connection slot for long.
    pub async fn fill(self: &Arc<Self>, authority: &str, n: usize) {
        let missing = n.saturating_sub(self.count(authority));
        let mut opening = tokio::task::JoinSet::new();
        for _ in 0..missing {
            let authority = authority.to_string();
            opening.spawn(async move { Conn::connect(&authority).await });
        }
        let mut added = false;
        while let Some(opened) = opening.join_next().await {
            if let (Ok(Ok(conn)), Ok(mut idle)) = (opened, self.idle.lock()) {
                idle.push((conn, Instant::now()));
                added = true;
            }
        }
        if added {
            let spares = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(spares.keep_alive_idle).await;
                if let Ok(mut idle) = spares.idle.lock() {
                    idle.retain(|(_, since)| since.elapsed() < spares.keep_alive_idle);
                }
            });
        }
    }

    /// After a request to `authority`: one spare for the lane's next request, opened now in the
    /// background unless one is there.
    fn replenish(self: &Arc<Self>, authority: &str) {
        if self.count(authority) == 0 {
            let (spares, authority) = (self.clone(), authority.to_string());
            tokio::spawn(async move { spares.fill(&authority, 1).await });
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

/// One timed exchange on the direct path. Never fails: errors land in `Exchange::error`. Its
/// connection is closed once the answer is read: nothing that comes on it after is read by
/// anyone.
pub(super) async fn exchange(
    spares: &Arc<Spares>,
    api: Api,
    limits: &Limits,
    timeout: Duration,
    wire: &Wire,
    stream: bool,
) -> Exchange {
    let mut ex = Exchange { started_at: ttft_model::clock::now_rfc3339(), ..Default::default() };
    let opened = open(spares, wire, timeout, &mut ex).await;
    // The lane's next request finds a spare (`fill` is spawned: this request waits for nothing).
    spares.replenish(&wire.authority);
    let Some((mut conn, window)) = opened else { return ex };
    let Some((head, used, filled)) = send(&mut conn, wire, window, &mut ex).await else { return ex };
    let first_ms = ex.first_byte_ms.unwrap_or(0.0);
    let mut body = Raw::new(&mut conn, &head, used..filled, first_ms, window.start);
    body::read_answer(api, limits, head.status, stream, &mut body, window, &mut ex).await;
    ex
}

/// A connection for the request, and its window, which opens once the connection is there: a
/// spare, or a new one, made at most twice, within the request's timeout.
async fn open(spares: &Spares, wire: &Wire, timeout: Duration, ex: &mut Exchange) -> Option<(Conn, Window)> {
    let deadline = deadline_after(Instant::now(), timeout);
    loop {
        ex.attempts += 1;
        ex.start = Some(Instant::now());
        let conn = match spares.take(&wire.authority, ex) {
            Some(conn) => Ok(conn),
            None => match tokio::time::timeout_at(deadline, Conn::connect(&wire.authority)).await {
                Ok(made) => made,
                Err(_) => {
                    ex.fail(ErrorKind::Timeout, no_response_headers(timeout));
                    return None;
                }
            },
        };
        match conn {
            Ok(conn) => {
                let window = Window::open_by(deadline, timeout);
                ex.start = Some(window.start);
                ex.connection = Some(ConnectionUse::NewBeforeWindow);
                return Some((conn, window));
            }
            // Nothing reached the server: it may be sent again, once.
            Err(_) if ex.attempts < 2 => {}
            Err(why) => {
                let message = super::failure::cannot_connect(&wire.authority, &why.to_string());
                ex.fail(ErrorKind::Connect, message);
                return None;
            }
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
        Ok(Err(e)) if broken::ended(&e) => ex.fail(ErrorKind::Transport, DROPPED_AFTER_SEND),
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
                Ok(Err(e)) if broken::ended(&e) => ex.fail(ErrorKind::Transport, DROPPED_AFTER_SEND),
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

    async fn next(&mut self) -> Option<Result<(&[u8], f64), Broken>> {
        let piece = loop {
            if self.unframe.is_done() {
                return None;
            }
            if self.pos < self.len {
                let at = self.pos;
                let step = match self.unframe.step(&self.conn.buf[at..self.len]) {
                    Ok(step) => step,
                    Err(why) => {
                        return Some(Err(Broken::Framing { read: self.read, why: why.to_string() }));
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
                Ok((0, _)) => return Some(Err(Broken::ClosedEarly { read: self.read })),
                Ok((n, at_ms)) => {
                    (self.pos, self.len) = (0, n);
                    self.at_ms = at_ms.max(self.at_ms);
                }
                Err(e) => return Some(Err(broken::broken_io(&e, self.read))),
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
            };
            let spares = Arc::new(Spares::new(Duration::from_secs(2)));
            let ex = exchange(&spares, Api::Openai, &Limits::default(), Duration::from_secs(30), &wire, true)
                .await;
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

//! What the direct path asks of the kernel about a connection: when the bytes of a read arrived,
//! and whether an idle connection is still open.
//!
//! Why the kernel's arrival time: a read happens when the client's thread gets to it, which on a
//! busy or preempted core can be milliseconds after the bytes came in (docs/client-lanes.md
//! measured 1-5 ms stalls of every core of a VM, about one a second). With `SO_TIMESTAMPNS` the
//! kernel stamps each packet as it takes it in, and a read returns the stamp of the last packet
//! it covers. A token read late still gets the instant it arrived, as long as the read stops at
//! its end: a lane that is behind reads queued events one at a time (`peek`, then exact reads;
//! catch_up.rs). Packets the kernel has merged in the queue keep only the later stamp, which is
//! never worse than stamping the read itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Reads of the process that carried the kernel's arrival stamp, reads that did not (stamped
/// when the read returned), peeks of a lane behind, and reads that found nothing: `just bench`
/// reports them, so a figure never rests on the fallback unawares, and the cost of catching up
/// and of empty reads is seen.
static COUNTS: [AtomicU64; 4] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// What the direct path's reads have been so far in this process.
pub fn read_counts() -> super::ReadCounts {
    let count = |i: usize| COUNTS[i].load(Ordering::Relaxed);
    super::ReadCounts {
        kernel_stamped: count(0),
        stamped_on_return: count(1),
        peeks_while_behind: count(2),
        found_empty: count(3),
    }
}

/// Keeps the kernel's packet stamping switched on while it lives. Linux turns stamping on for the
/// whole host only once a socket asks, through deferred work, and off again when the last such
/// socket closes: a connection opened just then would get its first reads unstamped. A client
/// holds one of these from start to end, so its connections never meet that gap.
pub struct StampsOn {
    _socket: Option<std::net::UdpSocket>,
}

impl StampsOn {
    pub fn new() -> StampsOn {
        use std::os::fd::AsRawFd;
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").ok();
        StampsOn { _socket: socket.filter(|s| enable_arrival_stamps(s.as_raw_fd())) }
    }
}

/// Asks the kernel to stamp arriving packets on `fd`. Without it (not Linux, or refused), reads
/// are stamped when they return, as on the reqwest path.
#[cfg(target_os = "linux")]
pub fn enable_arrival_stamps(fd: std::os::fd::RawFd) -> bool {
    let on: libc::c_int = 1;
    let size = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid socket, and a pointer to an int of the size given.
    unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, (&raw const on).cast(), size) == 0 }
}

#[cfg(not(target_os = "linux"))]
pub fn enable_arrival_stamps(_fd: std::os::fd::RawFd) -> bool {
    false
}

/// Reads into `buf`; with the read, how long ago its last byte arrived, when the kernel said.
#[cfg(target_os = "linux")]
pub fn recv(fd: std::os::fd::RawFd, buf: &mut [u8]) -> std::io::Result<(usize, Option<Duration>)> {
    // Room for one timespec control message (SCM_TIMESTAMPNS), aligned as cmsghdr needs.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: msg points at live buffers of the sizes it states.
    let n = unsafe { libc::recvmsg(fd, &raw mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(counted_error());
    }
    let age = arrival_age(&msg);
    COUNTS[usize::from(age.is_none())].fetch_add(1, Ordering::Relaxed);
    Ok((n as usize, age))
}

#[cfg(not(target_os = "linux"))]
pub fn recv(fd: std::os::fd::RawFd, buf: &mut [u8]) -> std::io::Result<(usize, Option<Duration>)> {
    // SAFETY: buf is live for its length.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(counted_error());
    }
    COUNTS[1].fetch_add(1, Ordering::Relaxed);
    Ok((n as usize, None))
}

/// The error of a failed read, a read that found nothing counted as such.
fn counted_error() -> std::io::Error {
    let e = std::io::Error::last_os_error();
    if e.kind() == std::io::ErrorKind::WouldBlock {
        COUNTS[3].fetch_add(1, Ordering::Relaxed);
    }
    e
}

/// How long before now the stamp in `msg` was taken. The stamp is wall-clock time (the kernel
/// has no other for this); only the difference with the wall clock read now is used, so a step
/// of the wall clock matters only when it falls between the packet and the read.
#[cfg(target_os = "linux")]
fn arrival_age(msg: &libc::msghdr) -> Option<Duration> {
    // SAFETY: walking the control messages the kernel wrote, with the macros made for it.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS {
                let stamp = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::timespec>());
                let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                libc::clock_gettime(libc::CLOCK_REALTIME, &raw mut now);
                let ns = |t: libc::timespec| i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
                let age = (ns(now) - ns(stamp)).max(0);
                return Some(Duration::from_nanos(u64::try_from(age).unwrap_or(u64::MAX)));
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    None
}

/// Copies what the connection holds into `buf` without taking it, to see where its events end.
pub fn peek(fd: std::os::fd::RawFd, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: buf is live for its length.
    let n =
        unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_PEEK | libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    COUNTS[2].fetch_add(1, Ordering::Relaxed);
    Ok(n as usize)
}

/// What an idle keep-alive connection holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Idle {
    /// Open, and nothing waits on it: it may carry the next request.
    Quiet,
    /// The server closed it (or it broke).
    Closed,
    /// Bytes no request asked for (a stray response): whatever is read next would be taken as
    /// the next request's answer.
    Unexpected,
}

/// Peeks at one byte: `Err(WouldBlock)` when nothing waits (so tokio's `try_io` clears the
/// readiness it reported), else what the connection holds.
pub fn peek_idle(fd: std::os::fd::RawFd) -> std::io::Result<Idle> {
    let mut byte = 0u8;
    // SAFETY: a one-byte buffer that lives across the call.
    let n = unsafe { libc::recv(fd, (&raw mut byte).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
    match n {
        0 => Ok(Idle::Closed),
        1.. => Ok(Idle::Unexpected),
        _ => {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock { Err(e) } else { Ok(Idle::Closed) }
        }
    }
}

/// What an idle keep-alive connection holds now.
pub fn idle_state(fd: std::os::fd::RawFd) -> Idle {
    peek_idle(fd).unwrap_or(Idle::Quiet)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_late_read_carries_the_arrival_of_its_last_byte_and_closed_connections_are_seen() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        assert!(enable_arrival_stamps(client.as_raw_fd()));
        assert_eq!(idle_state(client.as_raw_fd()), Idle::Quiet);
        server.write_all(b"ab").unwrap();
        // Read 150 ms after the bytes were seen to have come: the stamp still says when they came.
        // Waiting for them first (a loaded machine's kernel may take a loopback packet in a while
        // after the write returned) makes the sleep a lower bound on their age.
        until(|| idle_state(client.as_raw_fd()) == Idle::Unexpected, "unasked-for bytes are seen");
        std::thread::sleep(Duration::from_millis(150));
        let mut buf = [0u8; 16];
        let (n, age) = recv(client.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..n], b"ab");
        assert!(age.unwrap() >= Duration::from_millis(140), "{age:?}");
        drop(server);
        until(|| idle_state(client.as_raw_fd()) == Idle::Closed, "a closed connection is not reused");
    }

    /// Waits for `done` (bounded: a hang is a failure, a slow machine is not).
    fn until(done: impl Fn() -> bool, what: &str) {
        let start = std::time::Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(10), "{what}: not within 10 s");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

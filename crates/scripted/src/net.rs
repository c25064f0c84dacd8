//! The scripted server's sockets: plain TCP or TLS (a test CA generated with rcgen), and
//! connection-level faults a handler cannot produce through HTTP: dropping the connection after
//! reading a request, resetting it (RST) in the middle of a body, or reading nothing more after a
//! response and closing it a while later.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::{ScriptedError, lock};

/// One write of an unasked-for response (`Fault::StrayAfterReply`): its bytes, and how long
/// after the response's first write it goes. The connection writes it; the fault makes it.
pub type StrayPiece = (std::time::Duration, axum::body::Bytes);

/// What happens to a connection at its next write.
#[derive(Clone, Debug, PartialEq)]
pub enum Kill {
    /// Close it (FIN): the request was read, no answer follows.
    Drop,
    /// Reset it (RST, SO_LINGER 0).
    Reset,
    /// Read nothing more from it (a request written onto it stays unread) and close it at this
    /// instant; writes still go through, so the response under way ends normally.
    Deaf(tokio::time::Instant),
    /// From this instant, write these pieces of an unasked-for response onto the connection, each
    /// at its offset (`StrayPiece`), before reading on.
    Stray(tokio::time::Instant, Arc<Vec<StrayPiece>>),
}

/// Connections marked by a handler, by peer address.
pub type Kills = Arc<Mutex<HashMap<SocketAddr, Kill>>>;

/// The peer of a request (axum's `ConnectInfo` for our listener) and the connection's serial:
/// the same serial is the same connection, where an address may come back on a later one.
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr, pub u64);

/// Connections accepted so far, by every server of the process (each gets its own serial).
static CONNECTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, Listener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, Listener>) -> Self {
        let serial = CONNECTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        Peer(*stream.remote_addr(), serial)
    }
}

/// A test certificate authority and the server certificate it signed (for 127.0.0.1 and localhost).
pub struct TestCa {
    /// The CA certificate, PEM: what a client passes as `--ca-cert`.
    pub ca_pem: String,
    acceptor: TlsAcceptor,
}

impl TestCa {
    pub fn generate() -> Result<TestCa, ScriptedError> {
        use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "ttft-bench test CA");
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);
        let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
        leaf.extended_key_usages.push(ExtendedKeyUsagePurpose::ServerAuth);
        leaf.use_authority_key_identifier_extension = true;
        let leaf_key = KeyPair::generate()?;
        let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;
        Ok(TestCa { ca_pem: ca_cert.pem(), acceptor: acceptor(&leaf_cert, &leaf_key)? })
    }

    /// A self-signed server certificate for 127.0.0.1 (its one name) that says it is a CA, as
    /// `openssl req -x509 -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1` makes one;
    /// `ca_pem` is that certificate itself.
    pub fn self_signed() -> Result<TestCa, ScriptedError> {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()])?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, "localhost");
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(TestCa { ca_pem: cert.pem(), acceptor: acceptor(&cert, &key)? })
    }
}

/// A TLS acceptor that presents `cert` alone.
fn acceptor(cert: &rcgen::Certificate, key: &rcgen::KeyPair) -> Result<TlsAcceptor, ScriptedError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Accepts plain or TLS connections. A failed TLS handshake (a client that does not trust the
/// CA) is skipped, as a real server would.
pub struct Listener {
    pub tcp: TcpListener,
    pub tls: Option<TlsAcceptor>,
    pub kills: Kills,
}

impl Listener {
    pub fn new(tcp: TcpListener, ca: Option<&TestCa>, kills: Kills) -> Listener {
        Listener { tcp, tls: ca.map(|c| c.acceptor.clone()), kills }
    }
}

impl axum::serve::Listener for Listener {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        loop {
            let Ok((tcp, peer)) = self.tcp.accept().await else { continue };
            // A mark left by an earlier connection from the same port is not this one's.
            lock(&self.kills).remove(&peer);
            let _ = tcp.set_nodelay(true);
            let io = match &self.tls {
                None => Io::Plain(tcp),
                Some(acceptor) => match acceptor.accept(tcp).await {
                    Ok(tls) => Io::Tls(Box::new(tls)),
                    Err(_) => continue,
                },
            };
            return (Conn { io, peer, kills: self.kills.clone(), deaf: None, stray: None }, peer);
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

pub struct Conn {
    io: Io,
    peer: SocketAddr,
    kills: Kills,
    /// The close of a `Kill::Deaf` connection, or the next stray write of a `Kill::Stray` one.
    deaf: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The pieces of a `Kill::Stray` response not yet written, each with its instant.
    stray: Option<std::collections::VecDeque<(tokio::time::Instant, axum::body::Bytes)>>,
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match &self.io {
            Io::Plain(t) => t,
            Io::Tls(t) => t.get_ref().0,
        }
    }

    /// `Kill::Stray`: `Ready` once no stray piece is left to write (each written once its time
    /// has come), `Pending` until then, with the connection's task woken at the next piece's
    /// time. Polled by writes too: the mark is set as the response's last chunk is written, and
    /// the task may not read again before the next request arrives.
    fn stray_due(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.stray.is_none() {
            let mut kills = lock(&self.kills);
            let Some(Kill::Stray(at, pieces)) = kills.get(&self.peer).cloned() else {
                return Poll::Ready(());
            };
            kills.remove(&self.peer);
            self.stray = Some(pieces.iter().map(|(after, bytes)| (at + *after, bytes.clone())).collect());
        }
        while let Some((at, bytes)) = self.stray.as_mut().and_then(|s| s.front().cloned()) {
            let due = self.deaf.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
            if due.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.deaf = None;
            self.write_stray(cx, &bytes);
            if let Some(left) = self.stray.as_mut() {
                left.pop_front();
            }
        }
        self.stray = None;
        Poll::Ready(())
    }

    /// Writes one piece of a stray response, as far as the socket takes it at once (a reply's
    /// copy of a few KB, or one event of a stream: all of it).
    fn write_stray(&mut self, cx: &mut Context<'_>, stray: &[u8]) {
        let _ = match &mut self.io {
            Io::Plain(t) => Pin::new(t).poll_write(cx, stray),
            Io::Tls(t) => {
                let written = Pin::new(t.as_mut()).poll_write(cx, stray);
                let _ = Pin::new(t.as_mut()).poll_flush(cx);
                written
            }
        };
    }

    /// Carries out a kill marked for this connection: the write fails, hyper drops the socket.
    fn killed(&self) -> Option<io::Error> {
        let kill = lock(&self.kills).get(&self.peer).cloned()?;
        match kill {
            Kill::Deaf(_) | Kill::Stray(..) => None,
            Kill::Drop => Some(io::Error::new(io::ErrorKind::BrokenPipe, "scripted: drop after read")),
            Kill::Reset => {
                let _ = socket2::SockRef::from(self.tcp()).set_linger(Some(std::time::Duration::ZERO));
                Some(io::Error::new(io::ErrorKind::ConnectionReset, "scripted: reset"))
            }
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let deaf = lock(&this.kills).get(&this.peer).cloned();
        if let Some(Kill::Deaf(at)) = deaf {
            let close = this.deaf.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
            // Then end of input: hyper closes the connection, with the unread request in it.
            return close.as_mut().poll(cx).map(|()| Ok(()));
        }
        // Reading waits for the stray: a request already sent is read after it is written.
        if this.stray_due(cx).is_pending() {
            return Poll::Pending;
        }
        match &mut this.io {
            Io::Plain(t) => Pin::new(t).poll_read(cx, buf),
            Io::Tls(t) => Pin::new(t.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.killed() {
            return Poll::Ready(Err(e));
        }
        match &mut this.io {
            Io::Plain(t) => Pin::new(t).poll_write(cx, buf),
            Io::Tls(t) => Pin::new(t.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.killed() {
            return Poll::Ready(Err(e));
        }
        match &mut this.io {
            Io::Plain(t) => Pin::new(t).poll_write_vectored(cx, bufs),
            Io::Tls(t) => Pin::new(t.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(t) => t.is_write_vectored(),
            Io::Tls(t) => t.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let _ = this.stray_due(cx);
        match &mut this.io {
            Io::Plain(t) => Pin::new(t).poll_flush(cx),
            Io::Tls(t) => Pin::new(t.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(t) => Pin::new(t).poll_shutdown(cx),
            Io::Tls(t) => Pin::new(t.as_mut()).poll_shutdown(cx),
        }
    }
}

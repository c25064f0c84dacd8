//! A failed request in words, and whether it may be sent again. The words are the record's and
//! the user's only view of what went wrong, so each says what failed and, where there is one,
//! what to do about it; none may claim more than is known (a request written and then dropped
//! may have been processed). Advice that names one of bench's flags is added by the binary, which
//! owns the flags (its `server` module): this crate knows no flag.

use std::time::Duration;

use super::causes;

/// The request never left this machine: the connection itself could not be made.
pub(super) fn never_sent(e: &reqwest::Error) -> bool {
    e.is_connect() && tls_problem(e).is_none()
}

/// The TLS error inside `e`, when a handshake failed (unknown issuer, expired, wrong name, ...).
pub fn tls_problem(e: &reqwest::Error) -> Option<String> {
    causes(e).into_iter().find_map(|c| c.downcast_ref::<rustls::Error>()).map(|t| t.to_string())
}

/// A TLS handshake whose first bytes back were not a TLS record: the port speaks plain HTTP (no
/// certificate is involved).
pub fn answered_in_plain_http(e: &reqwest::Error) -> bool {
    causes(e).into_iter().find_map(|c| c.downcast_ref::<rustls::Error>()).is_some_and(|t| {
        matches!(t, rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType))
    })
}

/// A connect failure in words: what failed and, for TLS, what to do about it. The words of a
/// plain connect failure are the direct path's too (`cannot_connect`).
pub fn connect_failure(e: &reqwest::Error) -> String {
    if answered_in_plain_http(e) {
        // The first bytes back were not a TLS record: an HTTP server answering a handshake
        // with a plain "HTTP/1.1 400" does exactly this.
        let authority = e.url().map_or_else(String::new, |u| {
            format!("{}:{}", u.host_str().unwrap_or(""), u.port_or_known_default().unwrap_or(0))
        });
        return format!(
            "{authority} answered the TLS handshake with something that is not TLS: this port speaks plain \
             HTTP; use http:// instead of https://"
        );
    }
    match tls_problem(e) {
        Some(tls) => {
            format!("TLS handshake failed: {tls} (a private CA, or a self-signed server certificate?)")
        }
        None => {
            let authority = e.url().map_or_else(String::new, |u| {
                format!("{}:{}", u.host_str().unwrap_or(""), u.port_or_known_default().unwrap_or(0))
            });
            // The innermost I/O error says what the system said (refused, no route, no such name).
            let io = causes(e).into_iter().filter_map(|c| c.downcast_ref::<std::io::Error>()).last();
            match io {
                Some(io) => cannot_connect(&authority, &io.to_string()),
                None => cannot_connect(&authority, &error_chain(e)),
            }
        }
    }
}

/// A connection to `authority` (`host:port`) that could not be made, and why.
pub(super) fn cannot_connect(authority: &str, why: &str) -> String {
    format!("cannot connect to {authority}: {why}")
}

/// A response head that is not HTTP/1.1, as the parser said, with what came when known.
pub(super) fn bad_head(why: &str, came: &str) -> String {
    if came.is_empty() {
        format!("the response head is not valid HTTP/1.1: {why}")
    } else {
        format!("the response head is not valid HTTP/1.1: {why}: {came}")
    }
}

/// A response head the server cut short by closing the connection.
pub(super) const CLOSED_IN_HEAD: &str = "the server closed the connection inside the response head";

/// A request that got no response head before its deadline.
pub(super) fn no_response_headers(timeout: Duration) -> String {
    format!("no response headers within {}", humantime::format_duration(timeout))
}

/// A request written to a connection that the server then closed without answering.
pub(super) const DROPPED_AFTER_SEND: &str = "the server closed the connection after the request was sent, before answering \
     (not re-sent: the server may have read and processed it)";

/// A request that went out but got no response headers back.
pub fn send_failure(e: &reqwest::Error) -> String {
    let dropped = causes(e).into_iter().any(|c| {
        c.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_incomplete_message)
            || c.downcast_ref::<std::io::Error>().is_some_and(|io| {
                matches!(io.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof)
            })
    });
    let parse = causes(e).into_iter().find_map(|c| c.downcast_ref::<hyper::Error>().filter(|h| h.is_parse()));
    if dropped {
        DROPPED_AFTER_SEND.to_string()
    } else if let Some(parse) = parse {
        bad_head(&parse.to_string(), "")
    } else {
        format!("sending the request failed: {}", error_chain(e))
    }
}

/// reqwest's top-level message hides the cause ("error sending request"); keep the whole chain.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A redirect, said as such: `Some` for a 3xx status. bench never follows one (the client is built
/// with `redirect::Policy::none`): inside a measured request the second request would be timed
/// as the first one's TTFT, and 301/302/303 would turn the POST into a GET. The user is told
/// where it leads instead, so that --server can name it.
pub fn not_followed(status: u16, location: Option<&str>) -> Option<String> {
    if !(300..400).contains(&status) {
        return None;
    }
    let to = location.map_or("nowhere named (no Location header)".to_string(), |l| {
        ttft_model::secrets::redact(&ttft_model::secrets::redact_url(l))
    });
    Some(format!("a redirect to {to}, not followed (a second request would be timed as this one)"))
}

/// The Location header of a response, when it has one.
pub fn location_of(response: &reqwest::Response) -> Option<String> {
    let value = response.headers().get(reqwest::header::LOCATION)?;
    Some(String::from_utf8_lossy(value.as_bytes()).trim().to_string())
}

//! A server that redirects: bench never follows (a second request would be timed as the first
//! one's TTFT, and 301/302/303 turn a POST into a GET), on either transport, and says where the
//! redirect leads so that --server can name it.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use common::scripted::{Behaviour, Scripted};
use common::stderr;
use ttft_client::{ChatRequest, Client, ClientOptions, Message};
use ttft_model::record::ErrorKind;
use ttft_model::spec::Api;

/// Answers every request with `status` and a Location of `to` + the request's path.
fn redirecting(status: &'static str, to: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let (mut request_line, mut length) = (String::new(), 0usize);
            reader.read_line(&mut request_line).unwrap_or(0);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let path = request_line.split_whitespace().nth(1).unwrap_or("/");
            let answer = format!(
                "HTTP/1.1 {status}\r\nLocation: {to}{path}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = reader.get_mut().write_all(answer.as_bytes());
        }
    });
    url
}

fn chat() -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: vec![Message::new("user", "hello")],
        max_tokens: 8,
        stream: true,
        ..Default::default()
    }
}

#[test]
fn a_redirected_chat_request_fails_naming_where_it_leads_on_both_transports() {
    let target = Scripted::start(Behaviour::default());
    let url = redirecting("308 Permanent Redirect", target.url.clone());
    let rt = tokio::runtime::Runtime::new().unwrap();
    for direct in [true, false] {
        let options = ClientOptions { direct, ..Default::default() };
        let client = Client::new(&url, Api::Openai, None, Duration::from_secs(30), options).unwrap();
        let ex = rt.block_on(async { client.send(client.prepare(&chat()).unwrap()).await });
        let error = ex.error.expect("a redirect is not an answer");
        assert_eq!(error.kind, ErrorKind::HttpStatus, "direct {direct}: {}", error.message);
        assert_eq!(error.http_status, Some(308));
        let to = format!("{}/v1/chat/completions", target.url);
        assert!(error.message.contains(&format!("redirect to {to}")), "direct {direct}: {}", error.message);
        // The transport names no flag: bench's records and preflight add what to do (below).
        assert!(!error.message.contains("--"), "direct {direct}: {}", error.message);
    }
    assert!(target.log().is_empty(), "nothing followed the redirect: {:?}", target.log().len());
}

#[test]
fn a_sweep_against_a_redirect_stops_at_preflight_and_says_where_it_leads() {
    let target = Scripted::start(Behaviour::default());
    let url = redirecting("301 Moved Permanently", target.url.clone());
    let out = tempfile::tempdir().unwrap();
    let run = assert_cmd::Command::cargo_bin("bench")
        .unwrap()
        .args(["sweep", "--server", &url, "--out", out.path().to_str().unwrap(), "--contexts", "256"])
        .args(["--runs", "1", "--output-tokens", "8", "--thermal", "off"])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(3), "a server problem, before anything is measured: {err}");
    assert!(!err.contains("is it running?"), "it answered: {err}");
    assert!(err.contains(&format!("a redirect to {}/", target.url)), "{err}");
    assert!(err.contains("point --server at"), "{err}");
    assert!(target.log().is_empty(), "nothing followed the redirect");
}

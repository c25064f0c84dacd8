//! bench-scripted-server: the scripted streaming server of the tests as its own process, for the
//! benchmarks (`just bench`) and for anyone who wants to test a pipeline against a server whose
//! timings are known exactly. OpenAI chat and text completions in the wire format of llama.cpp,
//! vLLM, SGLang or the OpenAI API (`--dialect`), and Anthropic messages, whole or streamed, with
//! usage, /tokenize, llama.cpp slots, each server's cache evidence, and the faults of the tests.
//!
//! The first line on stdout is the URL (`--port 0` picks a free port). With `--log FILE` every
//! chat request's timing is appended as JSONL: the first line the clock origin (CLOCK_MONOTONIC
//! nanoseconds), then per request the nonce and the instants, in nanoseconds since that origin,
//! when the body was read, when it was admitted (`--max-concurrent`), when each content chunk
//! was handed to the connection, and when it ended. Stops on Ctrl-C or SIGTERM.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use ttft_bench::exit;
use ttft_scripted::dialect::UnknownDialect;
use ttft_scripted::{Behaviour, Dialect, EchoKey, Fault, Scripted, ServeOptions};

#[derive(Parser, Debug)]
#[command(
    name = "bench-scripted-server",
    version,
    about = "A streaming LLM server with scripted, exactly known timings"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Port to listen on; 0 picks a free one (the URL is the first line on stdout).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Delay before the first content token (prefill of an uncached prompt), milliseconds.
    #[arg(long, default_value_t = 50)]
    first_token_ms: u64,
    /// Delay between tokens, milliseconds; fractions pace faster than 1000 tokens/s a stream.
    #[arg(long, default_value_t = 2.0)]
    token_ms: f64,
    /// The server imitated on the wire: llama.cpp (timings, slots, llamacpp: metrics), vllm,
    /// sglang (their usage and prefix-cache metrics), openai (the hosted API: no metrics, cached
    /// tokens only for prompts of 1024+ tokens), or bare (choices-only chunks, this server's old
    /// format). Chat and text completions, /v1/models and /metrics follow it; /v1/messages always
    /// speaks Anthropic's format.
    #[arg(long, default_value = "llama.cpp", value_parser = parse_dialect)]
    dialect: Dialect,
    /// vllm/sglang: leave `prompt_tokens_details` out of usage, as those servers do unless started
    /// with --enable-prompt-tokens-details / --enable-cache-report (their metrics still count).
    #[arg(long)]
    no_cache_report: bool,
    /// Tokens per content chunk.
    #[arg(long, default_value_t = 1)]
    tokens_per_chunk: u32,
    /// At most N chat requests are served at once; the rest wait in arrival order, so TTFT
    /// grows with the queue like a saturated server's.
    #[arg(long, value_name = "N")]
    max_concurrent: Option<usize>,
    /// A fault on every measured-size request (max_tokens >= 20): none, status:CODE[:TEXT],
    /// error-in-stream, truncate, hang, keep-alive, huge-line:BYTES, endless-stream, endless-body,
    /// huge-error-body, html200, invalid-utf8, hang-after-headers, echo-headers,
    /// slow-drip:BYTES:MS, drop-after-read, reset-mid-body, close-after-stream:MS (llama-server's
    /// way: a finished stream's connection reads nothing more and closes MS later), burst (the
    /// stream held back and flushed at once, like a buffering proxy), stray-after-reply:MS (a copy
    /// of each reply on its kept-alive connection MS later, as from a proxy answering twice),
    /// lumps:BYTES (a buffering gateway: forwarded whenever BYTES are held), hold-first:EVENTS (the
    /// first EVENTS events held and flushed at once, the rest on time),
    /// echo-key:escaped|completion|at-cut|shapes (the request's key said back `\/`-escaped, in the
    /// completion, or across the 2000th character of a 401 body; shapes: every credential in
    /// /v1/models, /props and the completion, Gson-escaped and lowercase percent-encoded too).
    #[arg(long, default_value = "none", value_parser = parse_fault)]
    fault: Fault,
    /// Ignore max_tokens and always produce this many tokens.
    #[arg(long)]
    force_output_tokens: Option<u32>,
    /// Leave usage out of responses.
    #[arg(long)]
    no_usage: bool,
    /// Answer POST /tokenize with 404, like a hosted API.
    #[arg(long)]
    no_tokenizer: bool,
    /// No role-only chunk before the first content.
    #[arg(long)]
    no_role_chunk: bool,
    /// Serve https with a certificate for 127.0.0.1/localhost signed by a CA made at start.
    #[arg(long)]
    tls: bool,
    /// With --tls: write the CA certificate (PEM) here, for a client's --ca-cert.
    #[arg(long, value_name = "FILE", requires = "tls")]
    ca_out: Option<PathBuf>,
    /// Append every chat request's timing to FILE as JSONL (truncated at start).
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Save slots to files in DIR, as llama-server's `--slot-save-path` does (each padded to
    /// --slot-file-bytes); a restore reads its file back. Without it slots are saved in memory.
    #[arg(long, value_name = "DIR")]
    slot_save_path: Option<PathBuf>,
    /// With --slot-save-path: the size of each slot file.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20, requires = "slot_save_path")]
    slot_file_bytes: usize,
    /// Worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// After `--`: the arguments this server says it was started with. `--fault echo-key:shapes`
    /// says them back in /props (as SGLang's server info lists a server's arguments, keys
    /// included) and in its completions.
    #[arg(last = true, value_name = "ARGS")]
    server_args: Vec<String>,
}

fn parse_dialect(text: &str) -> Result<Dialect, UnknownDialect> {
    text.parse()
}

/// Parses `--fault`. A status text has to live as long as the server (`Fault::Status` holds a
/// `&'static str`, as the tests write it): it is leaked, once per process.
fn parse_fault(text: &str) -> Result<Fault, FaultError> {
    let mut parts = text.splitn(3, ':');
    let name = parts.next().unwrap_or("");
    let mut number = |what: &'static str| -> Result<u64, FaultError> {
        let raw = parts.next().ok_or(FaultError::Missing(what))?;
        raw.parse().map_err(|_| FaultError::Number(what, raw.to_string()))
    };
    Ok(match name {
        "none" => Fault::None,
        "status" => {
            let code = number("status code")?;
            let code = u16::try_from(code)
                .ok()
                .filter(|c| (100..600).contains(c))
                .ok_or(FaultError::Status(code))?;
            let text: &'static str =
                Box::leak(parts.next().unwrap_or("scripted error").to_string().into_boxed_str());
            Fault::Status(code, text)
        }
        "error-in-stream" => Fault::ErrorInStream,
        "truncate" => Fault::Truncate,
        "hang" => Fault::Hang,
        "keep-alive" => Fault::KeepAlive,
        "huge-line" => Fault::HugeLine(number("bytes")? as usize),
        "endless-stream" => Fault::EndlessStream,
        "endless-body" => Fault::EndlessBody,
        "huge-error-body" => Fault::HugeErrorBody,
        "html200" => Fault::Html200,
        "invalid-utf8" => Fault::InvalidUtf8,
        "hang-after-headers" => Fault::HangAfterHeaders,
        "stray-after-reply" => Fault::StrayAfterReply(number("ms")?),
        "echo-headers" => Fault::EchoHeaders,
        "burst" => Fault::Burst,
        "lumps" => Fault::Lumps(number("bytes")? as usize),
        "hold-first" => Fault::HoldFirst(number("events")? as usize),
        "slow-drip" => {
            Fault::SlowDrip { bytes: number("bytes")? as usize, every_ms: number("milliseconds")? }
        }
        "drop-after-read" => Fault::DropAfterRead,
        "reset-mid-body" => Fault::ResetMidBody,
        "close-after-stream" => Fault::CloseAfterStream(number("milliseconds")?),
        "echo-key" => Fault::EchoKey(match parts.next().unwrap_or("") {
            "escaped" => EchoKey::Escaped,
            "completion" => EchoKey::Completion,
            "at-cut" => EchoKey::AtCut,
            "shapes" => EchoKey::Shapes,
            other => return Err(FaultError::Unknown(format!("echo-key:{other}"))),
        }),
        other => return Err(FaultError::Unknown(other.to_string())),
    })
}

#[derive(Debug, thiserror::Error)]
enum FaultError {
    #[error("unknown fault '{0}' (see --help)")]
    Unknown(String),
    #[error("the fault needs its {0} after a ':'")]
    Missing(&'static str),
    #[error("the fault's {0} is not a number: '{1}'")]
    Number(&'static str, String),
    #[error("{0} is not an HTTP status (100-599)")]
    Status(u64),
}

fn behaviour(args: &Args) -> Result<Behaviour, exit::Failure> {
    if !(args.token_ms.is_finite() && args.token_ms >= 0.0) {
        return Err(exit::Failure::usage(format!(
            "--token-ms {}: a number of milliseconds >= 0",
            args.token_ms
        )));
    }
    if args.tokens_per_chunk == 0 {
        return Err(exit::Failure::usage("--tokens-per-chunk 0: at least 1"));
    }
    if args.max_concurrent == Some(0) {
        return Err(exit::Failure::usage("--max-concurrent 0: at least 1"));
    }
    Ok(Behaviour {
        first_token_ms: args.first_token_ms,
        token_ms: args.token_ms.round() as u64,
        token_interval_us: Some((args.token_ms * 1000.0).round() as u64),
        role_chunk: !args.no_role_chunk,
        tokens_per_chunk: args.tokens_per_chunk,
        usage: !args.no_usage,
        fault: args.fault.clone(),
        force_output_tokens: args.force_output_tokens,
        tokenizer: !args.no_tokenizer,
        max_concurrent: args.max_concurrent,
        dialect: args.dialect,
        cache_report: !args.no_cache_report,
        slot_save_path: args.slot_save_path.clone(),
        slot_file_bytes: args.slot_file_bytes,
        // The benchmarks' server holds its schedule (the offered token rate) through a stall.
        catch_up: true,
        server_args: args.server_args.clone(),
        ..Behaviour::default()
    })
}

fn run(args: &Args) -> Result<(), exit::Failure> {
    let options = ServeOptions {
        addr: SocketAddr::new(args.host, args.port),
        tls: args.tls,
        timing_log: args.log.clone(),
        keep_timings: false,
        keep_requests: false,
        worker_threads: args.threads,
    };
    let server =
        Scripted::try_start(behaviour(args)?, options).map_err(|e| exit::Failure::server(e.to_string()))?;
    if let (Some(path), Some(pem)) = (&args.ca_out, &server.ca_pem) {
        std::fs::write(path, pem)
            .map_err(|e| exit::Failure::io(format!("--ca-out {}: {e}", path.display())))?;
    }
    // A closed stdout (the reader only wanted the URL) is not a reason to stop serving.
    let _ = ttft_bench::output::println(&server.url);
    eprintln!(
        "bench-scripted-server: {} (clock origin CLOCK_MONOTONIC {} ns)",
        server.url, server.clock.origin_ns
    );
    server.serve_until_signal().map_err(|e| exit::Failure::internal(format!("waiting for a signal: {e}")))
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::from(exit::SUCCESS),
        Err(failure) => {
            eprintln!("error: {failure}");
            ExitCode::from(failure.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_from_their_flag_text() {
        assert_eq!(parse_fault("none").ok(), Some(Fault::None));
        assert_eq!(parse_fault("status:503:busy").ok(), Some(Fault::Status(503, "busy")));
        assert_eq!(parse_fault("slow-drip:7:3").ok(), Some(Fault::SlowDrip { bytes: 7, every_ms: 3 }));
        assert!(matches!(parse_fault("status:999"), Err(FaultError::Status(999))));
        assert!(matches!(parse_fault("huge-line"), Err(FaultError::Missing("bytes"))));
        assert_eq!(parse_fault("close-after-stream:40").ok(), Some(Fault::CloseAfterStream(40)));
        assert!(matches!(parse_fault("close-after-stream"), Err(FaultError::Missing("milliseconds"))));
        assert!(matches!(parse_fault("melt"), Err(FaultError::Unknown(_))));
    }

    #[test]
    fn a_fractional_token_interval_is_kept_in_microseconds() {
        let args = Args::parse_from(["bench-scripted-server", "--token-ms", "0.25"]);
        assert_eq!(behaviour(&args).ok().and_then(|b| b.token_interval_us), Some(250));
        let bad = Args::parse_from(["bench-scripted-server", "--max-concurrent", "0"]);
        assert!(behaviour(&bad).is_err());
    }
}

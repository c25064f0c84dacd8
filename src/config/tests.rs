use clap::Parser;

use super::*;
use crate::command::{Cli, Command};

fn args(flags: &[&str]) -> Result<SweepArgs, clap::Error> {
    let mut argv = vec!["bench", "sweep"];
    if !flags.contains(&"--server") {
        argv.extend(["--server", "http://127.0.0.1:1/"]);
    }
    argv.extend_from_slice(flags);
    match Cli::try_parse_from(argv)?.command {
        Command::Sweep(a) => Ok(*a),
        _ => unreachable!("parsed a sweep"),
    }
}

fn scenario(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    std::fs::write(&path, text).unwrap();
    let shown = path.display().to_string();
    (dir, shown)
}

#[test]
fn defaults_are_sane() {
    let c = resolve(&args(&[]).unwrap()).unwrap();
    assert_eq!(c.server, "http://127.0.0.1:1");
    assert_eq!(c.contexts, vec![1024, 2048, 4096]);
    assert_eq!(c.modes, vec![Mode::Streaming]);
    assert_eq!(c.cache_states, vec![CacheState::Cold]);
    assert_eq!(c.runs, 3);
    assert_eq!(c.output_tokens, 64);
    assert_eq!(c.request_timeout_s, 600.0);
    assert_eq!(c.out_dir, PathBuf::from("results"));
    assert!(matches!(c.thermal, ThermalPolicy::Probe { tolerance, .. } if tolerance == 0.20));
    assert_eq!(c.staggered, None);
}

#[test]
fn flags_override_the_scenario_file_key_by_key() {
    let (_dir, path) = scenario("contexts = [512, \"1k\"]\nruns = 5\nmodes = \"streaming,non-streaming\"\n");
    let c = resolve(&args(&["--scenario", &path, "--runs", "2"]).unwrap()).unwrap();
    assert_eq!(c.contexts, vec![512, 1024]);
    assert_eq!(c.runs, 2, "flag wins over file");
    assert_eq!(c.modes, vec![Mode::Streaming, Mode::NonStreaming], "file wins over default");
}

#[test]
fn the_staggered_pair_defaults_to_half_of_user_a() {
    let c = resolve(&args(&["--staggered"]).unwrap()).unwrap();
    let s = c.staggered.unwrap();
    assert_eq!((s.delay_ms, s.delay_share_of_a, s.context_tokens, s.runs), (None, Some(0.5), 4096, 3));
    let c = resolve(&args(&["--staggered", "--stagger-delay", "300ms"]).unwrap()).unwrap();
    assert_eq!(c.staggered.unwrap().delay_ms, Some(300.0));
    let (_dir, path) = scenario("staggered = true\nstagger_delay = \"25%\"\n");
    let c = resolve(&args(&["--scenario", &path]).unwrap()).unwrap();
    assert_eq!(c.staggered.unwrap().delay_share_of_a, Some(0.25));
}

#[test]
fn errors_name_the_file_key_or_flag() {
    let (_dir, path) = scenario("contexts = \"1k..3k\"\n");
    let err = resolve(&args(&["--scenario", &path]).unwrap()).unwrap_err().to_string();
    assert!(err.contains("s.toml") && err.contains("contexts") && err.contains("never lands"), "{err}");

    let (_dir, path) = scenario("contextz = 5\n");
    let err = resolve(&args(&["--scenario", &path]).unwrap()).unwrap_err().to_string();
    assert!(err.contains("s.toml") && err.contains("unknown key `contextz`"), "{err}");

    let (_dir, path) = scenario("runs = 0\n");
    let err = resolve(&args(&["--scenario", &path]).unwrap()).unwrap_err().to_string();
    assert!(err.contains("runs: ") && err.contains("at least 1"), "{err}");

    let (_dir, path) = scenario("min_cooldown = \"30s\"\nmax_cooldown = \"10s\"\n");
    let err = resolve(&args(&["--scenario", &path]).unwrap()).unwrap_err().to_string();
    assert!(err.starts_with(&format!("{path}: max_cooldown")), "{err}");
    let err = resolve(&args(&["--scenario", &path, "--max-cooldown", "5s"]).unwrap()).unwrap_err();
    assert!(err.to_string().starts_with("--max-cooldown"), "{err}");

    for (flag, value) in [("--modes", "streaming,fast"), ("--thermal", "cold"), ("--api", "grpc")] {
        let err = args(&[flag, value]).unwrap_err().to_string();
        assert!(err.contains(flag), "{flag}: {err}");
    }
    let err = resolve(&args(&["--server", "localhost:8080"]).unwrap()).unwrap_err().to_string();
    assert!(err.starts_with("--server"), "{err}");
}

#[test]
fn absurd_sizes_and_durations_are_refused_with_their_limit() {
    for (flag, value) in [
        ("--request-timeout", "1e30"),
        ("--request-timeout", "1e19"),
        ("--min-cooldown", "1e20"),
        ("--stagger-delay", "1e25"),
        ("--runs", "4e9"),
        ("--runs", "4000000000"),
        ("--contexts", "4e9"),
        ("--contexts", "4000000000"),
        ("--batch-sizes", "4000000000"),
        ("--output-tokens", "0"),
    ] {
        let err = args(&[flag, value]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{flag} {value}: {err}");
        assert!(err.to_string().contains(flag), "{flag} {value}: {err}");
    }
    let many = ["--runs", "10000", "--contexts", "1k,2k,3k,4k,5k,6k", "--modes", "streaming,non-streaming"];
    let err = resolve(&args(&many).unwrap()).unwrap_err();
    assert!(err.to_string().starts_with("--runs") && err.to_string().contains("100000"), "{err}");
}

#[test]
fn credentials_in_the_server_url_are_never_in_the_config_written_out() {
    let c = resolve(&args(&["--server", "http://bench:s3cret-pass@127.0.0.1:9/"]).unwrap()).unwrap();
    assert_eq!(c.server_url, "http://bench:s3cret-pass@127.0.0.1:9");
    let written = serde_json::to_string(&c).unwrap();
    assert!(!written.contains("s3cret-pass") && written.contains("[redacted]@127.0.0.1:9"), "{written}");
}

#[test]
fn every_scenario_key_is_a_flag_and_every_plan_flag_a_key() {
    let keys = scenario_file::known_keys();
    for key in ["contexts", "cache_states", "stagger_delay", "tolerance", "hardware", "server", "model_file"]
    {
        assert!(keys.contains(key), "{key}");
    }
    assert!(!keys.contains("resume") && !keys.contains("quiet"), "run flags are not scenario keys");
}

#[test]
fn shipped_scenarios_parse_and_give_their_expectation() {
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios")).unwrap() {
        let path = entry.unwrap().path();
        let shown = path.display().to_string();
        resolve(&args(&["--scenario", &shown]).unwrap()).unwrap_or_else(|e| panic!("{shown}: {e}"));
        expectation(&path).unwrap_or_else(|e| panic!("{shown}: {e}"));
    }
    let paper = expectation(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/paper.toml")));
    assert_eq!(paper.unwrap().matrix.cell_count(), 198 + 6);
}

#[test]
fn the_slot_dir_comes_from_the_flag_else_from_the_server_command() {
    let cmd = "llama-server -m m.gguf --slot-save-path /srv/slots/ --port {port}";
    assert_eq!(slot_save_path(cmd), Some(PathBuf::from("/srv/slots/")));
    assert_eq!(
        slot_save_path("llama-server --slot-save-path='/srv/s' -c 8192"),
        Some(PathBuf::from("/srv/s"))
    );
    assert_eq!(slot_save_path("llama-server -m m.gguf --port {port}"), None);
    assert_eq!(
        slot_save_path("llama-server --slot-save-path"),
        None,
        "a flag without its value names nothing"
    );
    let own = match Cli::try_parse_from(["bench", "sweep", "--server-cmd", cmd]).map(|c| c.command) {
        Ok(Command::Sweep(a)) => resolve(&a).unwrap_or_else(|e| panic!("{e}")),
        _ => panic!("a sweep with --server-cmd parses"),
    };
    assert_eq!(own.slot_dir, Some(PathBuf::from("/srv/slots/")));
    let flag = resolve(&args(&["--slot-dir", "/mnt/nvme/slots"]).unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(flag.unwrap_or_else(|e| panic!("{e}")).slot_dir, Some(PathBuf::from("/mnt/nvme/slots")));
    let plain = resolve(&args(&[]).unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plain.slot_dir, None);
}

#[test]
fn refused_shares_headers_and_body_keys_are_typed_with_their_messages() {
    let e = parse_share(" 150% ").unwrap_err();
    assert!(matches!(&e, ShareError::OutOfRange(t) if t == "150%"), "{e:?}");
    assert_eq!(e.to_string(), "\"150%\" must be above 0% and below 100% (e.g. 5%)");
    let e = parse_share("five").unwrap_err();
    assert!(matches!(e, ShareError::NotANumber(_)), "{e:?}");
    assert_eq!(e.to_string(), ttft_model::spec::finite("five").unwrap_err().to_string());
    assert_eq!(parse_share("5%").unwrap(), 0.05);

    let e = parse_header("X-Trace abc").unwrap_err();
    assert!(matches!(e, HeaderError::NotNameValue(_)), "{e:?}");
    assert_eq!(e.to_string(), "\"X-Trace abc\" is not 'Name: value'");
    let e = parse_header("Bad Name: 1").unwrap_err();
    assert!(matches!(e, HeaderError::BadName(_)), "{e:?}");
    assert_eq!(e.to_string(), "\"Bad Name\" is not an HTTP header name");
    let e = parse_header("X-Trace: a\u{7f}b").unwrap_err();
    assert!(matches!(e, HeaderError::BadValue(_)), "{e:?}");
    assert_eq!(e.to_string(), "the value of X-Trace is not a valid HTTP header value");
    let e = parse_header("Content-Type: text/plain").unwrap_err();
    assert!(matches!(e, HeaderError::Owned(_)), "{e:?}");
    assert_eq!(e.to_string(), "Content-Type is set by bench itself");

    let body: serde_json::Map<String, Value> =
        serde_json::from_str(r#"{"top_k": 1, "stream": false}"#).unwrap();
    let e = validate_extra_body(&body).unwrap_err();
    assert_eq!(e, OwnedBodyKey { key: "stream", flag: "--modes" });
    assert_eq!(e.to_string(), "\"stream\" is set by bench itself (use --modes), not by --extra-body");
}

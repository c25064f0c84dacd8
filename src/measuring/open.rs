//! Which run: a new one (config from flags and scenario), or a resumed one (config from its
//! run.json; only connection settings may change). Either way the run directory is locked against
//! a second sweep, and run.json exists before any record can be written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::Journal;
use crate::cli::SweepArgs;
use crate::config::{self, SweepConfig};
use crate::exit::Failure;
use crate::meta::{HostFacts, Resumption, RunMeta, RunStatus};
use crate::shard;
use ttft_results::store::{self, RunLock};

pub(crate) struct Opened {
    pub config: SweepConfig,
    pub journal: Journal,
    pub resumed: bool,
    pub lock: RunLock,
}

pub(crate) fn open(args: &SweepArgs) -> Result<Opened, Failure> {
    let (config, dir, meta, resumed) = match &args.resume {
        None => new_run(args)?,
        Some(dir) => resumed_run(args, dir)?,
    };
    // The preset is read before anything is created: a file that cannot be used is bad input,
    // refused with its name rather than found by every cell.
    // `auto` is resolved against the server at setup, and its choice written to run.json.
    if config.preset != config::AUTO_PRESET {
        crate::preset::Preset::load(&config.preset).and_then(|p| p.for_api(&config.api.to_string()))?;
    }
    // A new run's directory is bench's until its first write lands: if the lock, run.json or
    // the records file cannot be written (a full disk), it is removed, so a failed start leaves
    // nothing behind. A resumed run's directory holds records and is never removed.
    let created = !resumed && !dir.exists();
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure::io(format!("cannot create {}: {e}", dir.display())))?;
    match start(&dir, meta) {
        Ok((journal, lock)) => Ok(Opened { config, journal, resumed, lock }),
        Err(failure) => {
            if created {
                let _ = std::fs::remove_dir_all(&dir);
            }
            Err(failure)
        }
    }
}

/// Locks the run directory and writes its run.json and (empty) records file.
fn start(dir: &Path, meta: RunMeta) -> Result<(Journal, RunLock), Failure> {
    // Another process holding the run is a usage error (exit 2); a lock file that cannot be
    // written is a write failure like any other (exit 4).
    let lock = RunLock::acquire(dir)?;
    let journal = Journal { dir: dir.to_path_buf(), meta: Arc::new(Mutex::new(meta)) };
    // run.json first: a run killed at any later point can be resumed.
    journal.update(|_| {})?;
    store::RecordWriter::open(journal.dir())?;
    Ok((journal, lock))
}

fn new_run(args: &SweepArgs) -> Result<(SweepConfig, PathBuf, RunMeta, bool), Failure> {
    let mut config = config::resolve(args)?;
    let label: Vec<&str> = config.cache_states.iter().map(|c| c.as_str()).collect();
    let mut run_id =
        args.output.run_id.clone().unwrap_or_else(|| ttft_model::clock::new_run_id(&label.join("-")));
    let env = |var: &str| std::env::var(var).ok();
    if let Some(spec) = shard::resolve(args.shard.as_deref(), args.shard_count, &env)? {
        config.shard = Some(shard::plan(&config.matrix(), &spec)?);
        run_id = shard::run_id(&run_id, &spec);
    }
    if run_id.is_empty() || run_id.contains(['/', '\\']) || run_id.starts_with('.') {
        return Err(Failure::usage(format!("--run-id {run_id:?}: must be a plain directory name")));
    }
    let dir = config.out_dir.join(&run_id);
    if dir.join(store::RUN_FILE).exists() || dir.join(store::MEASUREMENTS_FILE).exists() {
        return Err(Failure::usage(format!(
            "{} is an existing run; finish it with --resume {0} or choose another --run-id",
            dir.display()
        )));
    }
    let meta =
        RunMeta::started(run_id, config.clone(), ttft_model::clock::now_rfc3339(), HostFacts::collect());
    Ok((config, dir, meta, false))
}

/// Settings a resume may not change: everything that says what is measured. The connection
/// settings (`cli::ConnectionArgs`) may change and are recorded.
fn refuse_plan_changes(args: &SweepArgs) -> Result<(), Failure> {
    let plan = serde_json::to_value(&args.measure).map_err(|e| Failure::internal(e.to_string()))?;
    let mut given: Vec<String> = plan
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, _)| format!("--{}", k.replace('_', "-")))
        .collect();
    // The shard is part of the plan: a resumed shard finishes the slice its run.json names.
    let fixed = [
        ("--scenario", args.scenario.is_some()),
        ("--run-id", args.output.run_id.is_some()),
        ("--shard", args.shard.is_some()),
        ("--shard-count", args.shard_count.is_some()),
        // Whether bodies are written is the run's own (run.json config.request_bodies).
        ("--request-bodies", args.request_bodies),
    ];
    for (flag, set) in fixed {
        if set {
            given.push(flag.to_string());
        }
    }
    if args.output.out.is_some() {
        given.push("--out".into());
    }
    match given.first() {
        None => Ok(()),
        Some(flag) => Err(Failure::usage(format!(
            "{flag} cannot be combined with --resume: what a run measures is fixed in its run.json \
             (only the connection settings --server, --server-cmd, --server-start-timeout, \
             --max-restarts, --api-key-env, --request-timeout and --header may change); start a new run instead"
        ))),
    }
}

fn resumed_run(args: &SweepArgs, dir: &Path) -> Result<(SweepConfig, PathBuf, RunMeta, bool), Failure> {
    refuse_plan_changes(args)?;
    let path = dir.join(store::RUN_FILE);
    let text =
        ttft_model::input_file::read_text(&path, ttft_model::input_file::Limit::RUN_JSON).map_err(|e| {
            let missing = match &e {
                ttft_model::input_file::ReadError::Unreadable { source } => never_started(dir, source),
                _ => None,
            };
            Failure::usage(match missing {
                Some(why) => format!("--resume {}: {why}", dir.display()),
                None => format!("--resume {}: cannot read {}: {e}", dir.display(), path.display()),
            })
        })?;
    let mut meta: RunMeta = serde_json::from_str(&text)
        .map_err(|e| Failure::usage(format!("{}:{}: not a bench run.json: {e}", path.display(), e.line())))?;
    // The extra body is part of the plan (it cannot be given again), and a secret in it was
    // written masked: a resume would send the mask in its place.
    if serde_json::Value::Object(meta.config.extra_body.clone())
        .to_string()
        .contains(ttft_model::secrets::MASK)
    {
        return Err(Failure::usage(format!(
            "{}: --extra-body held a secret, which is never written out, and a resumed run cannot \
             be given it again: start a new run instead",
            path.display()
        )));
    }
    if meta.status == RunStatus::Running && store::holder_gone(dir) {
        eprintln!("{}: {}; resuming it", dir.display(), store::KILLED);
    }
    let c = &args.connection;
    let mut changed = BTreeMap::new();
    meta.config.server_url = meta.config.server.clone();
    if let Some(server) = &c.server {
        let checked =
            config::validate_server(server).map_err(|m| Failure::usage(format!("--server: {m}")))?;
        if let Some(note) = &checked.note {
            eprintln!("{note}");
        }
        let url = checked.url;
        meta.config.server = ttft_model::secrets::redact_url(&url);
        meta.config.server_url = url;
        changed.insert("server".to_string(), meta.config.server.clone());
    } else if meta.config.server.contains(ttft_model::secrets::MASK) && c.server_cmd.is_none() {
        return Err(Failure::usage(format!(
            "{}: the server URL had credentials, which are never written out: pass --server again",
            path.display()
        )));
    }
    if let Some(cmd) = &c.server_cmd {
        meta.config.server_cmd = Some(cmd.clone());
        changed.insert("server_cmd".to_string(), ttft_model::secrets::redact_command(cmd));
    } else if c.server.is_some() {
        meta.config.server_cmd = None;
    } else if meta.config.server_cmd.as_deref().is_some_and(|cmd| cmd.contains(ttft_model::secrets::MASK)) {
        return Err(Failure::usage(format!(
            "{}: the server command had secrets, which are never written out: pass --server-cmd again",
            path.display()
        )));
    }
    if let Some(headers) = &c.header {
        for line in headers {
            ttft_model::secrets::redact_header(line);
            config::parse_header(line).map_err(|m| Failure::usage(format!("--header: {m}")))?;
        }
        meta.config.headers = headers.clone();
        let shown: Vec<String> = headers.iter().map(|h| ttft_model::secrets::redact_header(h)).collect();
        changed.insert("headers".to_string(), shown.join("; "));
    } else if meta.config.headers.iter().any(|h| h.contains(ttft_model::secrets::MASK)) {
        return Err(Failure::usage(format!(
            "{}: the request headers had credentials, which are never written out: pass --header again",
            path.display()
        )));
    }
    if let Some(n) = c.max_restarts {
        meta.config.max_restarts = n;
        changed.insert("max_restarts".to_string(), n.to_string());
    }
    if let Some(path) = &c.ca_cert {
        meta.config.ca_cert = Some(path.clone());
        changed.insert("ca_cert".to_string(), path.display().to_string());
    }
    // Verification is a choice of this session: a resume without --insecure verifies again.
    if c.insecure != meta.config.insecure {
        meta.config.insecure = c.insecure;
        changed.insert("insecure".to_string(), c.insecure.to_string());
    }
    if let Some(var) = &c.api_key_env {
        meta.config.api_key_env = Some(var.clone());
        changed.insert("api_key_env".to_string(), var.clone());
    }
    if let Some(timeout) = c.request_timeout {
        if timeout.secs() <= 0.0 {
            return Err(Failure::usage("--request-timeout: must be more than 0"));
        }
        meta.config.request_timeout_s = timeout.secs();
        changed.insert("request_timeout_s".to_string(), timeout.secs().to_string());
    }
    if let Some(timeout) = c.server_start_timeout {
        if timeout.secs() <= 0.0 {
            return Err(Failure::usage("--server-start-timeout: must be more than 0"));
        }
        meta.config.server_start_timeout_s = timeout.secs();
        changed.insert("server_start_timeout_s".to_string(), timeout.secs().to_string());
    }
    // A dataset's rows are read again from its file (run.json keeps which, never their text).
    if let Some(dataset) = &meta.config.dataset {
        meta.config.dataset = Some(dataset.reload()?);
    }
    meta.resumed_at.push(Resumption { at: ttft_model::clock::now_rfc3339(), changed });
    meta.status = RunStatus::Running;
    meta.ended_at = None;
    Ok((meta.config.clone(), dir.to_path_buf(), meta, true))
}

/// Why a run directory without run.json cannot be resumed, in words that say what to do, when
/// bench's own files show what happened: a sweep stopped (kill -9, a power cut) after it locked
/// the directory and before its run.json landed measured nothing, and its settings were never
/// written, so it can only be started again. None when the directory is not such a run.
fn never_started(dir: &Path, error: &std::io::Error) -> Option<String> {
    if error.kind() != std::io::ErrorKind::NotFound {
        return None;
    }
    if !dir.is_dir() {
        return Some("no such run directory".to_string());
    }
    let names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    let records = dir.join(store::MEASUREMENTS_FILE);
    let measured = std::fs::metadata(&records).is_ok_and(|m| m.len() > 0);
    let bench_left_it = names.iter().any(|n| n == store::LOCK_FILE || n.starts_with(".run.json.tmp-"));
    (bench_left_it && !measured).then(|| {
        let run_id = dir.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
        format!(
            "this run stopped before its run.json was written (killed while it started): nothing was \
             measured and its settings were never recorded, so there is nothing to resume; start it \
             again with the same flags (--run-id {run_id} reuses the directory)"
        )
    })
}

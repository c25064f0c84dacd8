//! The shipped deploy/ manifests, checked offline: the Kubernetes Indexed Job and the Slurm array
//! say what `bench sweep --shard auto` relies on (completion mode, shard count, the command, where
//! results land), and their shell logic names the run directory bench writes, so a retried shard
//! resumes instead of starting over.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::scripted::{Behaviour, Scripted};
use serde_json::Value;

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(path)
}

/// Every YAML document of a manifest file, as JSON values.
fn yaml(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(deploy(path)).unwrap();
    serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn one(path: &str) -> Value {
    let mut docs = yaml(path);
    assert_eq!(docs.len(), 1, "{path}: one document");
    docs.remove(0)
}

fn container<'a>(pod: &'a Value, list: &str, name: &str) -> &'a Value {
    pod[list]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {list} {name}"))
}

fn env_value<'a>(c: &'a Value, name: &str) -> Option<&'a Value> {
    c["env"].as_array()?.iter().find(|e| e["name"] == name)
}

/// The value after `flag` in a shell command text.
fn flag_value<'a>(script: &'a str, flag: &str) -> Option<&'a str> {
    let mut words = script.split_whitespace();
    words.find(|w| *w == flag)?;
    words.next().map(|w| w.trim_matches('"'))
}

#[test]
fn the_indexed_job_shards_by_completion_index_into_the_results_volume() {
    let job = one("kubernetes/job.yaml");
    assert_eq!((job["apiVersion"].as_str(), job["kind"].as_str()), (Some("batch/v1"), Some("Job")));
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed", "JOB_COMPLETION_INDEX exists only in Indexed Jobs");
    let completions = spec["completions"].as_u64().unwrap();
    assert_eq!(spec["parallelism"].as_u64(), Some(completions), "every shard runs at once");
    let pod = &spec["template"]["spec"];
    let bench = container(pod, "containers", "bench");
    let count = env_value(bench, "TTFT_BENCH_SHARD_COUNT").expect("TTFT_BENCH_SHARD_COUNT");
    assert_eq!(count["value"].as_str(), Some(completions.to_string().as_str()), "shard count == completions");
    let index = env_value(bench, "JOB_COMPLETION_INDEX").expect("JOB_COMPLETION_INDEX");
    assert_eq!(
        index["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    );
    let script: String = bench["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(script.contains("bench sweep --shard auto"), "{script}");
    assert!(!script.contains("--shard-count"), "the count comes from TTFT_BENCH_SHARD_COUNT alone: {script}");

    // --out is a mounted, shared volume; --scenario is the ConfigMap's key.
    let volume_at = |path: &str| -> &Value {
        let mount = bench["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| path.starts_with(m["mountPath"].as_str().unwrap()))
            .unwrap_or_else(|| panic!("{path} is not on a mounted volume"));
        pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == mount["name"]).unwrap()
    };
    let out = flag_value(&script, "--out").unwrap();
    let results = volume_at(out);
    let claim = results["persistentVolumeClaim"]["claimName"].as_str().expect("results on a claim");
    let claims = yaml("kubernetes/volumes.yaml");
    let pvc = claims.iter().find(|c| c["metadata"]["name"] == claim).expect("the results claim is shipped");
    assert_eq!(pvc["spec"]["accessModes"][0], "ReadWriteMany", "every pod writes to it");
    let scenario = flag_value(&script, "--scenario").unwrap();
    let config = volume_at(scenario);
    let configmap = one("kubernetes/configmap.yaml");
    assert_eq!(config["configMap"]["name"], configmap["metadata"]["name"]);
    let key = Path::new(scenario).file_name().unwrap().to_str().unwrap();
    let toml_text = configmap["data"][key].as_str().expect("the ConfigMap holds the scenario file");
    // The ConfigMap is the shipped scenario, so a merge against the repository's file expects the
    // matrix the shards measured.
    let shipped = std::fs::read_to_string(deploy("../scenarios/gpu-reference.toml")).unwrap();
    assert_eq!(toml_text, shipped, "configmap.yaml is out of step with scenarios/gpu-reference.toml");

    // The sidecar serves where bench looks.
    let server = container(pod, "initContainers", "llama-server");
    assert_eq!(server["restartPolicy"], "Always", "a native sidecar");
    let args: Vec<&str> = server["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let port = args[args.iter().position(|a| *a == "--port").unwrap() + 1];
    assert_eq!(flag_value(&script, "--server"), Some(format!("http://127.0.0.1:{port}").as_str()));
    assert!(args.contains(&"--slot-save-path") && args.contains(&"--metrics"), "{args:?}");

    // The shell names the directory bench writes, so a retried pod resumes it.
    let dir = tempfile::tempdir().unwrap();
    let local = script.replace("/results", dir.path().to_str().unwrap());
    let run = |vars: &[(&str, &str)]| -> String {
        let stub = dir.path().join("bin");
        std::fs::create_dir_all(&stub).unwrap();
        std::fs::write(stub.join("bench"), "#!/bin/sh\necho \"$@\"\n").unwrap();
        Command::new("chmod").arg("+x").arg(stub.join("bench")).status().unwrap();
        let out = Command::new("sh")
            .arg("-c")
            .arg(&local)
            .env("PATH", format!("{}:/usr/bin:/bin", stub.display()))
            .env("TTFT_BENCH_SHARD_COUNT", count["value"].as_str().unwrap())
            .envs(vars.iter().copied())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let vars = [("JOB_COMPLETION_INDEX", "1"), ("JOB_NAME", "ttft-bench"), ("HARDWARE", "h100-sxm")];
    assert!(run(&vars).starts_with("sweep --shard auto"), "{}", run(&vars));
    let spec = ttft_bench::shard::ShardSpec { index: 2, count: completions as u32, origin: String::new() };
    // The shard's run directory as its sweep left it (common::runs), before any record.
    let bench_dir = common::runs::write(dir.path(), &ttft_bench::shard::run_id("ttft-bench", &spec), &[]);
    assert!(run(&vars).starts_with(&format!("sweep --resume {}", bench_dir.display())), "{}", run(&vars));
}

#[test]
fn the_slurm_array_shards_by_task_id_and_resumes_its_own_directory() {
    let path = deploy("slurm/sweep.sbatch");
    let text = std::fs::read_to_string(&path).unwrap();
    let array =
        text.lines().find_map(|l| l.strip_prefix("#SBATCH --array=")).expect("an #SBATCH --array line");
    let (lo, hi) = array.split_once('-').unwrap();
    let (lo, hi): (u32, u32) = (lo.parse().unwrap(), hi.parse().unwrap());
    assert!(text.contains("shard=${SHARD:-auto}"), "the array tasks shard with --shard auto");
    assert!(!text.contains("--shard-count"), "the count is the array's (SLURM_ARRAY_TASK_COUNT)");
    assert!(Command::new("bash").arg("-n").arg(&path).status().unwrap().success());

    let dir = tempfile::tempdir().unwrap();
    let stub = dir.path().join("bench");
    std::fs::write(&stub, "#!/bin/sh\necho \"$@\"\n").unwrap();
    Command::new("chmod").arg("+x").arg(&stub).status().unwrap();
    let results = dir.path().join("results");
    let task_with = |id: u32, vars: &[(&str, &str)]| -> String {
        let out = Command::new("bash")
            .arg(&path)
            // Submitted from anywhere: nothing may depend on the submit directory.
            .current_dir(dir.path())
            .env("BENCH", &stub)
            .env("MODEL", "/m.gguf")
            .env("RESULTS", &results)
            .env("TMPDIR", dir.path())
            .env("SLURM_JOB_NAME", "ttft-bench")
            .env("SLURM_ARRAY_JOB_ID", "77")
            .env("SLURM_ARRAY_TASK_ID", id.to_string())
            .env("SLURM_ARRAY_TASK_MIN", lo.to_string())
            .env("SLURM_ARRAY_TASK_MAX", hi.to_string())
            .env("SLURM_ARRAY_TASK_COUNT", (hi - lo + 1).to_string())
            .envs(vars.iter().copied())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let task = |id: u32| -> String { task_with(id, &[]) };
    let first = task(lo);
    assert!(first.starts_with("sweep --shard auto"), "{first}");
    assert_eq!(flag_value(&first, "--out"), results.to_str());
    // The default and any relative SCENARIO are the repository's files, wherever sbatch ran.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).canonicalize().unwrap();
    let scenario = PathBuf::from(flag_value(&first, "--scenario").unwrap());
    assert_eq!(scenario, repo.join("scenarios/gpu-reference.toml"), "{first}");
    assert!(scenario.is_file());
    let quick = task_with(lo, &[("SCENARIO", "scenarios/quick.toml")]);
    assert_eq!(flag_value(&quick, "--scenario").map(PathBuf::from), Some(repo.join("scenarios/quick.toml")));
    let absolute = dir.path().join("mine.toml");
    let mine = task_with(lo, &[("SCENARIO", absolute.to_str().unwrap())]);
    assert_eq!(flag_value(&mine, "--scenario"), absolute.to_str());
    assert!(first.contains("--port {port}"), "bench fills the port: {first}");
    // The last task's directory, as bench names it, exists: that task resumes it.
    let n = hi - lo + 1;
    let spec = ttft_bench::shard::ShardSpec { index: n, count: n, origin: String::new() };
    let run = common::runs::write(&results, &ttft_bench::shard::run_id("ttft-bench-77", &spec), &[]);
    assert!(task(hi).starts_with(&format!("sweep --resume {}", run.display())), "{}", task(hi));
    assert!(task(lo).starts_with("sweep --shard auto"));
    // Re-submitted on its own (--array=5: a one-task array), the task is told its shard.
    let alone = |shard: &str| -> String {
        let out = Command::new("bash")
            .arg(&path)
            .current_dir(dir.path())
            .env("BENCH", &stub)
            .env("MODEL", "/m.gguf")
            .env("RESULTS", &results)
            .env("TMPDIR", dir.path())
            .env("SLURM_JOB_NAME", "ttft-bench")
            .env("SLURM_ARRAY_JOB_ID", "78")
            .env("SLURM_ARRAY_TASK_ID", "5")
            .env("SLURM_ARRAY_TASK_MIN", "5")
            .env("SLURM_ARRAY_TASK_MAX", "5")
            .env("SLURM_ARRAY_TASK_COUNT", "1")
            .env("RUN_ID", "ttft-bench-77")
            .env("SHARD", shard)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert!(alone(&format!("{n}/{n}")).starts_with(&format!("sweep --resume {}", run.display())));
    let other = alone(&format!("1/{n}"));
    assert!(other.starts_with(&format!("sweep --shard 1/{n} ")), "{other}");
}

/// A small matrix for the pods' real sweeps below (the ConfigMap's 78-cell GPU scenario would take
/// minutes against the scripted server): 2 contexts x cold/warm/hot x batch 1 and 2, 2 runs.
const SMALL: &str = r#"
preset = "llama.cpp"
contexts = "256,512"
cache_states = "cold,warm,hot"
batch_sizes = "1,2"
runs = 2
output_tokens = 16
thermal = "off"
"#;

#[test]
fn each_pod_of_the_job_sweeps_its_own_shard_with_the_env_the_manifest_gives_it() {
    let job = one("kubernetes/job.yaml");
    let completions = job["spec"]["completions"].as_u64().unwrap();
    let pod = &job["spec"]["template"]["spec"];
    assert!(job["spec"]["ttlSecondsAfterFinished"].as_u64().is_some(), "finished Jobs are cleaned up");
    let bench_container = container(pod, "containers", "bench");
    // Its timing depends on its cores: a fixed number, never throttled below what it asked for.
    let cpu = &bench_container["resources"];
    assert!(cpu["requests"]["cpu"].is_string(), "{cpu}");
    assert_eq!(cpu["requests"]["cpu"], cpu["limits"]["cpu"], "requests == limits");
    let script: String =
        bench_container["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();

    let server = Scripted::start(Behaviour::default());
    let dir = tempfile::tempdir().unwrap();
    let (results, config) = (dir.path().join("results"), dir.path().join("config"));
    std::fs::create_dir_all(&results).unwrap();
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("scenario.toml"), SMALL).unwrap();
    // The pod's paths and its sidecar's address, moved to this machine; the shell is the manifest's.
    let local = script
        .replace("/etc/ttft-bench", config.to_str().unwrap())
        .replace("/results", results.to_str().unwrap())
        .replace("http://127.0.0.1:8080", &server.url);
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(assert_cmd::cargo::cargo_bin("bench"), bin.join("bench")).unwrap();
    let name = job["metadata"]["name"].as_str().unwrap();
    for index in 0..completions {
        // The env the Job gives the container: its literal values, and the fields it reads from
        // the pod as the Job controller fills them in.
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(&local).env_clear().env("PATH", format!("{}:/usr/bin:/bin", bin.display()));
        for var in bench_container["env"].as_array().unwrap() {
            let key = var["name"].as_str().unwrap();
            let value = match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                None => var["value"].as_str().unwrap().to_string(),
                Some("metadata.annotations['batch.kubernetes.io/job-completion-index']") => index.to_string(),
                Some("metadata.labels['batch.kubernetes.io/job-name']") => name.to_string(),
                Some(other) => panic!("{key}: a field this test does not know: {other}"),
            };
            cmd.env(key, value);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "pod {index}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mut runs: Vec<PathBuf> = std::fs::read_dir(&results).unwrap().map(|e| e.unwrap().path()).collect();
    runs.sort();
    let names: Vec<String> = runs.iter().map(|r| r.file_name().unwrap().to_string_lossy().into()).collect();
    let expected: Vec<String> =
        (1..=completions).map(|k| format!("{name}-shard{k}of{completions}")).collect();
    assert_eq!(names, expected);
    for (index, run) in runs.iter().enumerate() {
        let meta: Value = serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
        assert_eq!(meta["config"]["shard"]["index"], index as u64 + 1);
        assert_eq!(
            meta["config"]["shard"]["origin"],
            format!("JOB_COMPLETION_INDEX={index}, TTFT_BENCH_SHARD_COUNT={completions}")
        );
    }
    let merged = dir.path().join("merged.json");
    let mut args = vec!["merge".to_string()];
    args.extend(runs.iter().map(|r| r.to_string_lossy().into_owned()));
    args.extend(["-o".into(), merged.to_string_lossy().into(), "--expect".into()]);
    args.push(config.join("scenario.toml").to_string_lossy().into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = common::bench(&args);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Complete"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

use super::*;

fn session() -> Session {
    Session::new("tb-42".into(), 1)
}

#[test]
fn builtins_parse_and_say_what_they_support() {
    for (name, _) in BUILTIN {
        let p = Preset::load(name).unwrap();
        assert_eq!(&p.name, name);
    }
    assert!(!Preset::load("openai").unwrap().supports_warm(), "openai must not fake warm");
    assert!(Preset::load("llama.cpp").unwrap().supports_warm());
    assert!(Preset::load("agent-memory").unwrap().supports_warm());
}

#[test]
fn scopes_are_inferred_from_placeholders() {
    let scope = |preset: &str, action: fn(&Preset) -> &Vec<ActionStep>| {
        let p = Preset::load(preset).unwrap();
        action(&p).iter().map(ActionStep::scope).collect::<Vec<_>>()
    };
    assert_eq!(scope("vllm", |p| &p.reset), [Scope::Global]);
    assert_eq!(scope("sglang", |p| &p.reset), [Scope::Global]);
    assert_eq!(scope("agent-memory", |p| &p.reset), [Scope::Global], "DELETE /admin/caches wipes all");
    assert_eq!(scope("agent-memory", |p| &p.evict), [Scope::Session]);
    assert_eq!(scope("llama.cpp", |p| &p.reset), [Scope::Session]);
    assert_eq!(scope("llama.cpp", |p| &p.evict), [Scope::Session, Scope::Session]);
}

#[test]
fn a_global_eviction_cannot_make_a_warm_batch() {
    assert_eq!(Preset::load("llama.cpp").unwrap().warm_batch_problem(), None);
    assert_eq!(Preset::load("agent-memory").unwrap().warm_batch_problem(), None);
    let p: Preset =
        toml::from_str("name = \"x\"\n[[evict]]\nmethod = \"POST\"\npath = \"/offload_all\"\n").unwrap();
    assert!(p.warm_batch_problem().unwrap().contains("evict /offload_all"));
}

#[test]
fn required_environment_is_listed_with_its_action() {
    let p = Preset::load("agent-memory").unwrap();
    let env = p.required_env(&[("reset", &p.reset), ("evict", &p.evict)]);
    assert_eq!(env, [("AGENT_MEMORY_ADMIN_KEY".to_string(), "reset")]);
    assert!(Preset::load("llama.cpp").unwrap().required_env(&[]).is_empty());
}

#[test]
fn methods_are_checked_when_the_preset_is_read() {
    let err =
        toml::from_str::<Preset>("name = \"x\"\n[[reset]]\nmethod = \"FETCH\"\npath = \"/a\"\n").unwrap_err();
    assert!(err.to_string().contains("unknown HTTP method \"FETCH\""), "{err}");
    let ok: Preset = toml::from_str("name = \"x\"\n[[reset]]\nmethod = \"delete\"\npath = \"/a\"\n").unwrap();
    assert_eq!(ok.reset[0].method, reqwest::Method::DELETE);
}

#[test]
fn placeholders_fill_and_slot_stays_a_number() {
    let p = Preset::load("llama.cpp").unwrap();
    let mut req = ChatRequest::default();
    p.bind(&mut req, &session()).unwrap();
    assert_eq!(req.extra_body["id_slot"], Value::from(1));
    assert_eq!(fill("/slots/{slot}?action=save", &session()).unwrap(), "/slots/1?action=save");
    assert_eq!(fill("/v1/agents/oai_{session}", &session()).unwrap(), "/v1/agents/oai_tb-42");
}

#[test]
fn env_values_are_secrets_once_used() {
    // SAFETY: tests in this binary do not read this variable concurrently.
    unsafe { std::env::set_var("TTFT_BENCH_TEST_PRESET_SECRET", "admin-key-5f3a9c") };
    assert_eq!(fill("{env:TTFT_BENCH_TEST_PRESET_SECRET}", &session()).unwrap(), "admin-key-5f3a9c");
    assert_eq!(ttft_model::secrets::redact("echo admin-key-5f3a9c"), "echo [redacted]");
}

#[test]
fn missing_env_and_unknown_placeholders_are_clear_errors() {
    let err = fill("{env:TTFT_BENCH_SURELY_UNSET_VAR}", &session()).unwrap_err().to_string();
    assert!(err.contains("TTFT_BENCH_SURELY_UNSET_VAR"));
    assert!(fill("{nope}", &session()).unwrap_err().to_string().contains("unknown placeholder"));
    assert!(Preset::load("tgi").unwrap_err().to_string().contains("built in: openai"));
}

#[test]
fn per_api_placeholders_name_the_session_as_the_api_does() {
    let openai = Preset::load("agent-memory").unwrap().for_api("openai").unwrap();
    let anthropic = Preset::load("agent-memory").unwrap().for_api("anthropic").unwrap();
    let s = session();
    assert_eq!(fill(&openai.evict[0].path, &s).unwrap(), "/v1/agents/oai_tb-42?evict_only=true");
    assert_eq!(fill(&anthropic.evict[0].path, &s).unwrap(), "/v1/agents/sess_tb-42?evict_only=true");
    assert_eq!(fill(&anthropic.cleanup[0].path, &s).unwrap(), "/v1/agents/sess_tb-42");
    assert_eq!(fill(&anthropic.session_state.as_ref().unwrap().id, &s).unwrap(), "sess_tb-42");
    assert_eq!(fill(anthropic.saved_file.as_deref().unwrap(), &s).unwrap(), "sess_tb-42.safetensors");
    // An API no table names: refused, naming the placeholder, the API and the tables there are.
    let err = Preset::load("agent-memory").unwrap().for_api("openai-completions").unwrap_err().to_string();
    assert!(err.contains("{agent}") && err.contains("--api openai-completions"), "{err}");
    assert!(err.contains("anthropic, openai"), "{err}");
    // A preset without per_api tables is the same preset under every API.
    assert_eq!(
        Preset::load("llama.cpp").unwrap().for_api("anthropic").unwrap(),
        Preset::load("llama.cpp").unwrap()
    );
}

#[test]
fn a_preset_file_may_use_its_per_api_placeholders_and_no_others() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    let text = "name = \"x\"\n[per_api.openai]\nagent = \"a_{session}\"\n[[evict]]\nmethod = \"DELETE\"\npath = \"/{agent}\"\n";
    std::fs::write(&path, text).unwrap();
    assert!(Preset::load(path.to_str().unwrap()).is_ok());
    std::fs::write(&path, text.replace("/{agent}", "/{agnet}")).unwrap();
    let err = Preset::load(path.to_str().unwrap()).unwrap_err().to_string();
    assert!(err.contains("unknown placeholder {agnet}") && err.contains("evict[0].path"), "{err}");
}

#[test]
fn the_session_listing_gives_the_sessions_tier_tokens_and_file() {
    let p = Preset::load("agent-memory").unwrap().for_api("openai").unwrap();
    let spec = p.session_state.as_ref().unwrap();
    let listing = serde_json::json!({"agents": [
        {"agent_id": "oai_other", "tier": "hot", "tokens": 9, "file_size_bytes": 1},
        {"agent_id": "oai_tb-42", "tier": "warm", "tokens": 0, "file_size_bytes": 4096},
    ]});
    let s = session();
    let on_disk = SessionCache { tier: SessionTier::OnDisk, tokens: Some(0), file_bytes: Some(4096) };
    assert_eq!(spec.session_cache(&listing, &s).unwrap(), on_disk);
    let gone = Session::new("tb-7".into(), 0);
    assert_eq!(spec.session_cache(&listing, &gone).unwrap().tier, SessionTier::Absent);
    let odd = serde_json::json!({"agents": [{"agent_id": "oai_tb-42", "tier": "cold"}]});
    assert!(spec.session_cache(&odd, &s).unwrap_err().contains("\"cold\""));
    assert!(
        spec.session_cache(&serde_json::json!({"ok": true}), &s)
            .unwrap_err()
            .contains("no array at \"/agents\"")
    );
}

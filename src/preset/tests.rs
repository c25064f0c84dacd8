use super::*;

fn session() -> Session {
    Session { id: "tb-42".into(), slot: 1 }
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
    assert_eq!(crate::secrets::redact("echo admin-key-5f3a9c"), "echo [redacted]");
}

#[test]
fn missing_env_and_unknown_placeholders_are_clear_errors() {
    let err = fill("{env:TTFT_BENCH_SURELY_UNSET_VAR}", &session()).unwrap_err().to_string();
    assert!(err.contains("TTFT_BENCH_SURELY_UNSET_VAR"));
    assert!(fill("{nope}", &session()).unwrap_err().to_string().contains("unknown placeholder"));
    assert!(Preset::load("tgi").unwrap_err().to_string().contains("built in: openai"));
}

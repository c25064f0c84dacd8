//! What the scripted server has cached, per kind of server it imitates:
//! - llama.cpp slots (`id_slot` in the body): a slot holds its last prompt; erase/save/restore;
//! - agent-memory sessions (`X-Session-ID` header): an agent holds its last prompt in memory or, once
//!   evicted (`?evict_only=true`), on disk, from where the next request of the session reloads it;
//!   `DELETE /admin/caches` wipes every agent, in memory and on disk;
//! - vLLM/SGLang automatic prefix caching (neither): every prompt is remembered in 16-token blocks,
//!   shared by all requests; `/reset_prefix_cache` and `/flush_cache` wipe it.

use std::collections::HashMap;

use axum::http::StatusCode;

/// vLLM's default KV block size: only whole blocks are shared between prompts.
pub const PREFIX_BLOCK: usize = 16;

#[derive(Default)]
pub(super) struct Slots {
    pub live: HashMap<u64, Vec<String>>,
    pub files: HashMap<String, Vec<String>>,
    agents: HashMap<String, Vec<String>>,
    agents_on_disk: HashMap<String, Vec<String>>,
    prefixes: Vec<Vec<String>>,
    /// llama.cpp's /metrics counters: prompt tokens computed, and served from the cache.
    pub computed_total: u64,
    pub cached_total: u64,
    /// Measured-size chat requests so far (for `Behaviour::diverge_after`).
    pub measured_requests: usize,
    /// Preset actions matching `Behaviour::refuse_after` so far.
    pub refusable_calls: usize,
}

fn common_prefix(a: &[String], b: &[String]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl Slots {
    /// Prompt tokens served from the cache for this request, and the cache updated with it.
    pub fn serve(&mut self, slot: Option<u64>, agent: Option<&str>, prompt: &[String]) -> u64 {
        let cached = self.lookup(slot, agent, prompt);
        self.cached_total += cached;
        self.computed_total += prompt.len() as u64 - cached;
        cached
    }

    fn lookup(&mut self, slot: Option<u64>, agent: Option<&str>, prompt: &[String]) -> u64 {
        let keep_last = |n: usize| n.min(prompt.len().saturating_sub(1)) as u64;
        if let Some(id) = slot {
            let held = self.live.insert(id, prompt.to_vec()).unwrap_or_default();
            return keep_last(common_prefix(&held, prompt));
        }
        if let Some(agent) = agent {
            let held = match self.agents.remove(agent) {
                Some(live) => live,
                None => self.agents_on_disk.remove(agent).unwrap_or_default(),
            };
            self.agents.insert(agent.to_string(), prompt.to_vec());
            return keep_last(common_prefix(&held, prompt));
        }
        let best = self.prefixes.iter().map(|p| common_prefix(p, prompt)).max().unwrap_or(0);
        self.prefixes.push(prompt.to_vec());
        keep_last(best / PREFIX_BLOCK * PREFIX_BLOCK)
    }

    /// The admin and agent endpoints of agent-memory and the cache resets of vLLM and SGLang.
    /// Returns None for a path this server does not know.
    pub fn admin(&mut self, method: &str, path: &str) -> Option<StatusCode> {
        let (route, query) = path.split_once('?').unwrap_or((path, ""));
        match (method, route) {
            ("DELETE", "/admin/caches") => {
                self.agents.clear();
                self.agents_on_disk.clear();
                self.prefixes.clear();
            }
            ("POST", "/reset_prefix_cache" | "/flush_cache") => self.prefixes.clear(),
            ("DELETE", r) if r.starts_with("/v1/agents/oai_") => {
                let agent = &r["/v1/agents/oai_".len()..];
                let live = self.agents.remove(agent);
                if query.contains("evict_only=true") {
                    self.agents_on_disk.insert(agent.to_string(), live?);
                } else if live.is_none() && self.agents_on_disk.remove(agent).is_none() {
                    return Some(StatusCode::NOT_FOUND);
                }
            }
            _ => return None,
        }
        Some(StatusCode::OK)
    }
}

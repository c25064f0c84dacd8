//! What the scripted server has cached, per kind of server it imitates:
//! - llama.cpp slots (`id_slot` in the body): a slot holds its last prompt; erase/save/restore;
//! - agent-memory sessions (`X-Session-ID` header): an agent holds its last prompt in memory or, once
//!   evicted (`?evict_only=true`), on disk, from where the next request of the session reloads it;
//!   `DELETE /admin/caches` wipes every agent, in memory and on disk;
//! - vLLM/SGLang automatic prefix caching (neither): every prompt is remembered in 16-token blocks,
//!   shared by all requests; `/reset_prefix_cache` and `/flush_cache` wipe it.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use axum::http::StatusCode;

/// vLLM's default KV block size: only whole blocks are shared between prompts.
pub const PREFIX_BLOCK: usize = 16;

/// Blocks the prefix cache holds before it is wiped (16M tokens; about 20 MB of hashes). A real
/// server's cache is bounded by its KV memory too; a soak against this server must not grow it
/// without end.
const PREFIX_CACHE_BLOCKS: usize = 1 << 20;

/// The automatic prefix cache, kept as vLLM keeps it: one hash per whole block, each covering the
/// block and every token before it, so a prompt's cached length is its run of leading blocks
/// already seen. A lookup costs one hash per block of the prompt however many prompts came before.
/// (Comparing each prompt with every earlier one, as this server first did, made the start of
/// 256 simultaneous requests slower with every round a benchmark sent: 58 ms for the first round,
/// 340 ms for the 32nd, under the one lock every request takes.)
#[derive(Default)]
struct PrefixBlocks {
    seen: HashSet<u64>,
}

impl PrefixBlocks {
    /// Tokens of `prompt`'s leading whole blocks that an earlier prompt began with too; the
    /// prompt's blocks are remembered.
    fn serve(&mut self, prompt: &[String]) -> usize {
        if self.seen.len() >= PREFIX_CACHE_BLOCKS {
            self.seen.clear();
        }
        let mut chain = DefaultHasher::new();
        let mut cached_blocks = 0;
        for (i, block) in prompt.chunks_exact(PREFIX_BLOCK).enumerate() {
            // finish() leaves the state as it is: the next block extends this block's hash.
            block.hash(&mut chain);
            let newly_seen = self.seen.insert(chain.finish());
            if !newly_seen && cached_blocks == i {
                cached_blocks = i + 1;
            }
        }
        cached_blocks * PREFIX_BLOCK
    }

    fn clear(&mut self) {
        self.seen.clear();
    }
}

/// One slot restore read from its file (`Behaviour::slot_save_path`).
#[derive(Clone, Debug, PartialEq)]
pub struct Restored {
    pub file: String,
    /// The share (0..=1) of the file's pages in the OS page cache when the restore began; None
    /// where the kernel would not say.
    pub resident_share: Option<f64>,
}

#[derive(Default)]
pub(super) struct Slots {
    pub live: HashMap<u64, Vec<String>>,
    pub files: HashMap<String, Vec<String>>,
    agents: HashMap<String, Vec<String>>,
    agents_on_disk: HashMap<String, Vec<String>>,
    prefixes: PrefixBlocks,
    /// llama.cpp's /metrics counters: prompt tokens computed, and served from the cache.
    pub computed_total: u64,
    pub cached_total: u64,
    /// The counters as they stood before the latest chat request (`Behaviour::metrics_late`).
    pub before_latest: (u64, u64),
    /// Slot restores read from files, in order.
    pub restores: Vec<Restored>,
    /// Measured-size chat requests so far (for `Behaviour::diverge_after`).
    pub measured_requests: usize,
    /// Preset actions matching `Behaviour::refuse_after` so far.
    pub refusable_calls: usize,
}

fn common_prefix(a: &[String], b: &[String]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl Slots {
    /// Prompt tokens served from the cache for this request, and the cache updated with it. With
    /// `reuse` false (llama.cpp's `cache_prompt: false`) nothing is served from the cache, which
    /// still keeps the prompt.
    pub fn serve(&mut self, slot: Option<u64>, agent: Option<&str>, prompt: &[String], reuse: bool) -> u64 {
        self.before_latest = (self.computed_total, self.cached_total);
        // The lookup also stores the prompt: done either way.
        let held = self.lookup(slot, agent, prompt);
        let cached = if reuse { held } else { 0 };
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
        keep_last(self.prefixes.serve(prompt))
    }

    /// agent-memory's `GET /v1/agents/list`: every agent in memory ("hot", its tokens) and on disk
    /// only ("warm", tokens 0 as the real server lists them), each with a file size (a file is
    /// written through for both).
    pub fn agents_list(&self) -> serde_json::Value {
        let entry = |agent: &String, prompt: &Vec<String>, tier: &str| {
            let tokens = if tier == "hot" { prompt.len() } else { 0 };
            serde_json::json!({
                "agent_id": format!("oai_{agent}"),
                "tier": tier,
                "tokens": tokens,
                "file_size_bytes": 64 * prompt.len().max(1),
            })
        };
        let mut agents: Vec<serde_json::Value> =
            self.agents.iter().map(|(a, p)| entry(a, p, "hot")).collect();
        agents.extend(self.agents_on_disk.iter().map(|(a, p)| entry(a, p, "warm")));
        serde_json::json!({"total": agents.len(), "agents": agents})
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

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split(' ').map(str::to_string).collect()
    }

    /// The block hashes give what comparing with every earlier prompt gives: the longest common
    /// prefix, in whole blocks.
    #[test]
    fn prefix_cache_serves_the_longest_shared_run_of_whole_blocks() {
        let base: Vec<String> = (0..100).map(|i| format!("w{i}")).collect();
        let variant = |at: usize, len: usize| {
            let mut p = base[..len].to_vec();
            if at < len {
                p[at] = "changed".into();
            }
            p
        };
        let prompts = [
            variant(100, 40), // 2 whole blocks + 8 words
            variant(100, 40), // the same prompt: its 2 whole blocks are cached
            variant(20, 60),  // differs in block 2: only block 1 is shared
            variant(100, 80), // shares 40 words with the first: 2 blocks
            variant(70, 90),  // shares 70 words with the fourth: 4 blocks
            variant(3, 50),   // differs in block 1: nothing
            variant(20, 64),  // the third prompt, longer: its 3 blocks and nothing after
            words("a b c"),   // shorter than a block
        ];
        let mut cache = PrefixBlocks::default();
        let served: Vec<usize> = prompts.iter().map(|p| cache.serve(p)).collect();
        assert_eq!(served, [0, 32, 16, 32, 64, 0, 48, 0]);
        let mut reference: Vec<&Vec<String>> = Vec::new();
        for (p, got) in prompts.iter().zip(&served) {
            let longest = reference.iter().map(|q| common_prefix(q, p)).max().unwrap_or(0);
            assert_eq!(*got, longest / PREFIX_BLOCK * PREFIX_BLOCK, "prompt of {} words", p.len());
            reference.push(p);
        }
        cache.clear();
        assert_eq!(cache.serve(&prompts[0]), 0, "a wiped cache holds nothing");
    }
}

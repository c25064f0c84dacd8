//! Prompt sizing against the scripted server's tokenizer: what it costs in calls, since with a
//! real model's tokenizer each count of a long prompt costs a good part of a second.

use crate::common;

use std::time::Duration;

use common::scripted::{Behaviour, Scripted};
use ttft_bench::prompt::{Nonces, Sizer};
use ttft_client::{Client, ClientOptions};
use ttft_model::spec::Api;

/// The /tokenize calls logged since `from`, by the length of the text they counted.
fn counted_lengths(server: &Scripted, from: usize) -> Vec<usize> {
    let log = server.log();
    let calls = log[from..].iter().filter(|l| l.path == "/tokenize");
    calls.map(|l| l.body["content"].as_str().map_or(0, str::len)).collect()
}

#[test]
fn a_prompt_sized_before_costs_one_count_of_its_whole_text() {
    let server = Scripted::start(Behaviour::default());
    tokio::runtime::Runtime::new().unwrap().block_on(build_twice(&server));
}

async fn build_twice(server: &Scripted) {
    let client =
        Client::new(&server.url, Api::Openai, None, Duration::from_secs(30), ClientOptions::default())
            .unwrap();
    let nonces = Nonces::new();
    let sizer = Sizer::calibrate(&client, "m", &nonces, 7).await.unwrap();
    let first = sizer.build(&client, 4096, 7, nonces.next()).await.unwrap();
    let from = server.log().len();
    let again = sizer.build(&client, 4096, 7, nonces.next()).await.unwrap();
    assert_eq!(again.words, first.words, "same seed and size, same word count");
    let long: Vec<usize> = counted_lengths(server, from).into_iter().filter(|&n| n > 1000).collect();
    // The search starts at the word count found before and hits the target at once; that count is
    // the prompt's. Counting the chosen text again (as before) made this 2.
    assert_eq!(long.len(), 1, "counts of the whole prompt: {long:?}");
    assert!(again.expected_input_tokens.abs_diff(4096) <= 40, "{}", again.expected_input_tokens);
}

//! The simulator through the real proxy: every format parses cleanly with
//! the token counts the simulator generated, queueing shows up where
//! tokenclock says it does, schedules are exact and faults are what they
//! claim to be.

use std::time::Duration;

use crate::common::{
    self, next_timeline, proxy_with_timelines,
    sim::{fast, payloads, post, post_form, start},
};
use tokenclock::{
    measure::dialect::{Dialect, ParseError},
    measure::timeline::{CountSource, Outcome, Phase, Timeline},
    tools::sim::SimConfig,
};

const CHAT: &str = "/v1/chat/completions";
const TOKENS: &str = "/inference/v1/generate";

/// A request body for `path` asking for `n` tokens of `model`.
fn request(path: &str, model: &str, n: u64, stream: bool, extra: &str) -> String {
    let prompt = "Explain queueing in model servers, briefly.";
    let body = match path {
        "/v1/completions" => format!(r#""prompt":"{prompt}","max_tokens":{n}"#),
        "/v1/responses" => format!(r#""input":"{prompt}","max_output_tokens":{n}"#),
        "/api/generate" => format!(r#""prompt":"{prompt}","options":{{"num_predict":{n}}}"#),
        "/generate" => format!(r#""text":"{prompt}","sampling_params":{{"max_new_tokens":{n}}}"#),
        // TGI's, as huggingface_hub's InferenceClient sends it with
        // `details=True`.
        "/generate_stream" | "/" => {
            format!(r#""inputs":"{prompt}","parameters":{{"max_new_tokens":{n},"details":true}}"#)
        }
        "/api/chat" => format!(
            r#""messages":[{{"role":"user","content":"{prompt}"}}],"options":{{"num_predict":{n}}}"#
        ),
        "/completion" | "/completions" => format!(r#""prompt":"{prompt}","n_predict":{n}"#),
        // llama.cpp's fill-in-the-middle, as llama.vim and llama.vscode
        // send it.
        "/infill" => format!(
            r#""input_prefix":"def add(a, b):\n    ","input_suffix":"\n","prompt":"","n_predict":{n}"#
        ),
        // vLLM's token-in/token-out route: the prompt as five token ids.
        TOKENS => {
            format!(r#""token_ids":[9906,11,1917,0,13],"sampling_params":{{"max_tokens":{n}}}"#)
        }
        _ => format!(r#""messages":[{{"role":"user","content":"{prompt}"}}],"max_tokens":{n}"#),
    };
    format!(r#"{{"model":"{model}","stream":{stream},{body}{extra}}}"#)
}

/// Streaming: every format, through the proxy, with the sim's own counts.
#[tokio::test]
async fn every_format_parses_through_the_proxy() {
    use CountSource::{Events, PerEvent, Usage};
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    let usage = r#","stream_options":{"include_usage":true}"#;
    let cases = [
        (CHAT, usage, Dialect::OpenAiChat, Usage),
        (CHAT, "", Dialect::OpenAiChat, Events),
        (CHAT, r#","logprobs":true"#, Dialect::OpenAiChat, PerEvent),
        (
            CHAT,
            r#","stream_options":{"continuous_usage_stats":true}"#,
            Dialect::OpenAiChat,
            Usage,
        ),
        ("/v1/completions", usage, Dialect::OpenAiCompletions, Usage),
        ("/v1/responses", "", Dialect::OpenAiResponses, Usage),
        ("/v1/messages", "", Dialect::Anthropic, Usage),
        ("/api/chat", "", Dialect::Ollama, Usage),
        ("/api/generate", "", Dialect::Ollama, Usage),
        // SGLang's native API: each event's text is all so far, its count
        // `completion_tokens` cumulative.
        ("/generate", "", Dialect::Sglang, Usage),
        // TGI's native stream, and its route for the Inference API's
        // clients: one token per event, the total in `details`.
        ("/generate_stream", "", Dialect::Tgi, Usage),
        ("/", "", Dialect::Tgi, Usage),
        // llama.cpp's native API: one token per event with the running
        // count, the total on the last.
        ("/completion", "", Dialect::LlamaCpp, Usage),
        ("/completions", "", Dialect::LlamaCpp, Usage),
        ("/infill", "", Dialect::LlamaCpp, Usage),
        // vLLM's token-in/token-out route: token ids and no text, each id
        // an answer token; usage only when asked for.
        (TOKENS, usage, Dialect::OpenAiCompletions, Usage),
        (TOKENS, "", Dialect::OpenAiCompletions, PerEvent),
    ];
    for (path, extra, dialect, source) in cases {
        let body = request(path, "sim-llama", 6, true, extra);
        let response = post(proxy.addr, path, &body, &[])
            .await
            .expect("whole body");
        assert_eq!(response.status, 200, "{path}{extra}");
        let t = next_timeline(&mut timelines).await;
        let case = format!("{path}{extra}");
        assert_eq!(t.dialect, dialect, "{case}");
        assert!(t.streamed, "{case}");
        assert_eq!(t.outcome, Outcome::Ok, "{case}");
        assert!(t.parse_errors.is_empty(), "{case}: {:?}", t.parse_errors);
        assert_eq!(t.tokens.generated, 6, "{case}");
        assert_eq!(t.tokens.generated_source, Some(source), "{case}");
        assert_eq!(t.tokens.token_events, 6, "{case}");
        assert_eq!(t.ttft(), t.ttfo(), "{case}: no reasoning");
        assert!(t.ttft().is_some(), "{case}");
        if path == TOKENS && source == Usage {
            assert_eq!(t.tokens.input, Some(5), "{case}: the prompt's ids");
        }
    }
}

/// Speech to text: the simulator's forms, in both answer shapes, through
/// the proxy: each request read as `openai_audio`, under the model its form
/// named, with the simulator's counts (the input the audio's 100 tokens
/// when a usage reports it, none otherwise).
#[tokio::test]
async fn speech_to_text_parses_through_the_proxy() {
    use CountSource::{Estimated, Events, Usage};
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    let (whisper, transcriptions) = ("openai/whisper-large-v3", "/v1/audio/transcriptions");
    let with_usage: &[(&str, &str)] = &[("stream_include_usage", "true")];
    let cases = [
        (transcriptions, whisper, true, with_usage, Usage),
        ("/v1/audio/translations", whisper, true, &[][..], Events),
        (transcriptions, "gpt-4o-mini-transcribe", true, &[], Usage),
        (transcriptions, "gpt-4o-transcribe", false, &[], Usage),
        // A usage in seconds of audio: the text's estimate.
        (transcriptions, whisper, false, &[], Estimated),
    ];
    for (path, model, stream, extra, source) in cases {
        let case = format!("{path} {model} stream={stream}");
        let stream_field = stream.to_string();
        let mut fields = vec![
            ("model", model),
            ("stream", stream_field.as_str()),
            ("max_completion_tokens", "6"),
        ];
        fields.extend_from_slice(extra);
        // 64,000 bytes of audio: 100 of the simulator's audio tokens.
        let response = post_form(proxy.addr, path, &fields, 64_000)
            .await
            .expect("whole body");
        assert_eq!(response.status, 200, "{case}");
        let t = next_timeline(&mut timelines).await;
        assert_eq!(t.dialect, Dialect::OpenAiAudio, "{case}");
        assert_eq!(t.model.as_deref(), Some(model), "{case}");
        assert_eq!(t.streamed, stream, "{case}");
        assert_eq!(t.outcome, Outcome::Ok, "{case}");
        assert!(t.parse_errors.is_empty(), "{case}: {:?}", t.parse_errors);
        assert_eq!(t.tokens.generated_source, Some(source), "{case}");
        if source != Estimated {
            assert_eq!(t.tokens.generated, 6, "{case}");
        }
        assert_eq!(t.ttft().is_some(), stream, "{case}");
        if stream {
            assert_eq!(t.tokens.token_events, 6, "{case}");
        }
        let input = (source == Usage).then_some(100);
        assert_eq!(t.tokens.input, input, "{case}");
    }
}

/// Reasoning models think first: TTFO after TTFT, in every format that
/// has a place for reasoning, and in the raw-text formats, which carry it
/// inline in the answer's text between `<think>` and `</think>`.
#[tokio::test]
async fn reasoning_comes_before_the_answer() {
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    for path in [
        CHAT,
        "/v1/responses",
        "/v1/messages",
        "/api/chat",
        "/api/generate",
        "/v1/completions",
        "/generate",
        "/generate_stream",
        "/",
        "/completion",
        "/infill",
    ] {
        let body = request(path, "sim-think", 8, true, "");
        post(proxy.addr, path, &body, &[])
            .await
            .expect("whole body");
        let t = next_timeline(&mut timelines).await;
        assert!(t.parse_errors.is_empty(), "{path}: {:?}", t.parse_errors);
        let (ttft, ttfo) = (t.ttft().expect("ttft"), t.ttfo().expect("ttfo"));
        // Half of 8 tokens are reasoning, in the 4 events before the answer.
        assert!(ttfo > ttft, "{path}: {ttft:?} {ttfo:?}");
        assert_eq!(t.tokens.reasoning, 4, "{path}");
        assert_eq!(t.tokens.generated, 8, "{path}");
        assert!(t.phases().get(Phase::Reasoning).is_some(), "{path}");
    }
}

/// The text a stream's events carried in `pointer`, joined.
fn streamed_text(body: &[u8], pointer: &str) -> String {
    payloads(body)
        .iter()
        .filter_map(|e| e.pointer(pointer)?.as_str().map(str::to_owned))
        .collect()
}

/// DeepSeek-R1 served without a reasoning parser: its chat template ends
/// the prompt with `<think>`, so the answer writes its reasoning in
/// `content` and shows only the close. Named in `template_opens_reasoning`
/// the text before the close is reasoning (TTFO after TTFT), streamed and
/// whole; unnamed it is answer, as it always was. A raw prompt that ends
/// in `<think>` (the template applied by the client) needs no naming.
#[tokio::test]
async fn a_prompt_that_opened_think_is_reasoning_until_the_close() {
    let sim = start(fast()).await;
    let (named, mut named_timelines) =
        proxy_with_timelines(sim.addr, "template_opens_reasoning = [\"*-r1*\"]\n").await;
    let (unnamed, mut unnamed_timelines) = proxy_with_timelines(sim.addr, "").await;
    let body = request(CHAT, "sim-r1", 8, true, "");
    // What the client gets: the answer's text with the close and no open.
    let got = post(named.addr, CHAT, &body, &[])
        .await
        .expect("whole body");
    let text = streamed_text(&got.body(), "/choices/0/delta/content");
    assert!(
        !text.contains("<think>") && text.contains("</think>"),
        "{text}"
    );
    let t = next_timeline(&mut named_timelines).await;
    assert!(t.parse_errors.is_empty(), "{:?}", t.parse_errors);
    let (ttft, ttfo) = (t.ttft().expect("ttft"), t.ttfo().expect("ttfo"));
    assert!(ttfo > ttft, "{ttft:?} {ttfo:?}");
    assert_eq!((t.tokens.reasoning, t.tokens.generated), (4, 8));
    assert_eq!(t.tokens.reasoning_source, Some(CountSource::Events));
    assert!(t.phases().get(Phase::Reasoning).is_some());

    post(unnamed.addr, CHAT, &body, &[])
        .await
        .expect("whole body");
    let t = next_timeline(&mut unnamed_timelines).await;
    assert_eq!(t.ttfo(), t.ttft());
    assert_eq!((t.tokens.reasoning, t.tokens.generated), (0, 8));
    // The measurement lost is counted: the close nothing opened.
    assert_eq!(t.parse_errors, [ParseError::ThinkUnopened]);

    // A whole answer: the text before the close is reasoning's share.
    let whole = request(CHAT, "sim-r1", 8, false, "");
    post(named.addr, CHAT, &whole, &[])
        .await
        .expect("whole body");
    let t = next_timeline(&mut named_timelines).await;
    assert!(
        t.tokens.reasoning > 0 && t.tokens.reasoning < 8,
        "{:?}",
        t.tokens
    );
    assert_eq!(t.tokens.reasoning_source, Some(CountSource::Estimated));

    // A raw prompt that ends in `<think>`, on every raw-text route, with
    // nothing named; the same prompt without the tag is answered alone.
    for path in [
        "/v1/completions",
        "/generate",
        "/generate_stream",
        "/completion",
    ] {
        let plain = request(path, "sim-llama", 8, true, "");
        let opening = plain.replace("briefly.", r"briefly.<｜Assistant｜><think>\n");
        assert_ne!(plain, opening, "{path}");
        let got = post(unnamed.addr, path, &opening, &[])
            .await
            .expect("whole body");
        assert!(
            !String::from_utf8_lossy(&got.body()).contains("<think>"),
            "{path}"
        );
        let t = next_timeline(&mut unnamed_timelines).await;
        assert!(t.parse_errors.is_empty(), "{path}: {:?}", t.parse_errors);
        let (ttft, ttfo) = (t.ttft().expect("ttft"), t.ttfo().expect("ttfo"));
        assert!(ttfo > ttft, "{path}: {ttft:?} {ttfo:?}");
        assert_eq!((t.tokens.reasoning, t.tokens.generated), (4, 8), "{path}");
        post(unnamed.addr, path, &plain, &[])
            .await
            .expect("whole body");
        let t = next_timeline(&mut unnamed_timelines).await;
        assert_eq!(t.ttfo(), t.ttft(), "{path}");
        assert_eq!(t.tokens.reasoning, 0, "{path}");
    }
}

/// Responses events name their item by its index in `output`: the answer
/// is item 0, or item 1 after a reasoning item.
#[tokio::test]
async fn responses_output_indexes_follow_the_items() {
    let sim = start(fast()).await;
    for (model, reasoning, answer) in [("sim-llama", None, 0), ("sim-think", Some(0), 1)] {
        let body = request("/v1/responses", model, 6, true, "");
        let response = post(sim.addr, "/v1/responses", &body, &[])
            .await
            .expect("whole body");
        let index_of = |kind: &str| -> Vec<u64> {
            payloads(&response.body())
                .iter()
                .filter(|e| e["type"] == kind)
                .map(|e| e["output_index"].as_u64().expect("output_index"))
                .collect()
        };
        let answers = index_of("response.output_text.delta");
        assert!(!answers.is_empty(), "{model}");
        assert!(answers.iter().all(|&i| i == answer), "{model}: {answers:?}");
        let thoughts = index_of("response.reasoning_summary_text.delta");
        assert_eq!(thoughts.first().copied(), reasoning, "{model}");
        let done = index_of("response.output_item.done");
        let expected: Vec<u64> = reasoning.into_iter().chain([answer]).collect();
        assert_eq!(done, expected, "{model}");
    }
}

/// The tool call's arguments in a stream of `path`'s format, joined.
fn streamed_arguments(path: &str, events: &[serde_json::Value]) -> String {
    let pointer = match path {
        "/v1/messages" => "/delta/partial_json",
        "/v1/responses" => "/delta",
        "/api/chat" => "/message/tool_calls/0/function/arguments",
        _ => "/choices/0/delta/tool_calls/0/function/arguments",
    };
    events
        .iter()
        .filter(|e| {
            path != "/v1/responses" || e["type"] == "response.function_call_arguments.delta"
        })
        .filter_map(|e| {
            let arguments = e.pointer(pointer)?;
            // Ollama's arguments are an object, the others' string fragments.
            Some(
                arguments
                    .as_str()
                    .map_or_else(|| arguments.to_string(), str::to_owned),
            )
        })
        .collect()
}

/// The tool call's arguments in a whole body of `path`'s format.
fn whole_arguments(path: &str, body: &serde_json::Value) -> String {
    match path {
        "/v1/messages" => body.pointer("/content/0/input").map(|i| i.to_string()),
        "/api/chat" => body
            .pointer("/message/tool_calls/0/function/arguments")
            .map(|a| a.to_string()),
        "/v1/responses" => body
            .pointer("/output/0/arguments")
            .and_then(|a| a.as_str().map(str::to_owned)),
        _ => body
            .pointer("/choices/0/message/tool_calls/0/function/arguments")
            .and_then(|a| a.as_str().map(str::to_owned)),
    }
    .unwrap_or_else(|| panic!("{path}: no tool call in {body}"))
}

/// A request with tools gets one function call in the format's own shape
/// (OpenAI `tool_calls`, Anthropic `tool_use` with `input_json_delta`,
/// Responses `function_call` with argument deltas, Ollama one
/// `message.tool_calls` line), streamed or not: the
/// arguments are valid JSON once joined, and tokenclock counts them as
/// output, so TTFO is TTFT.
#[tokio::test]
async fn tool_calls_count_as_output() {
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    let tools = r#","tools":[{"type":"function","name":"f","function":{"name":"f"}}]"#;
    for path in [CHAT, "/v1/messages", "/v1/responses", "/api/chat"] {
        for stream in [true, false] {
            let body = request(path, "sim-llama", 5, stream, tools);
            let response = post(proxy.addr, path, &body, &[])
                .await
                .expect("whole body");
            let arguments = if stream {
                streamed_arguments(path, &payloads(&response.body()))
            } else {
                let body = serde_json::from_slice(&response.body()).expect("JSON body");
                whole_arguments(path, &body)
            };
            let parsed: serde_json::Value = serde_json::from_str(&arguments)
                .unwrap_or_else(|e| panic!("{path} stream={stream}: {e}: {arguments:?}"));
            let words = parsed["text"].as_str().expect("text").split(' ').count();
            assert_eq!(words, 6, "{path} stream={stream}: {arguments:?}");
            let t = next_timeline(&mut timelines).await;
            assert!(t.parse_errors.is_empty(), "{path}: {:?}", t.parse_errors);
            assert_eq!(t.outcome, Outcome::Ok, "{path} stream={stream}");
            assert_eq!(t.tokens.generated, 5, "{path} stream={stream}");
            if stream {
                assert!(t.ttft().is_some(), "{path}");
                assert_eq!(t.ttfo(), t.ttft(), "{path}");
            }
        }
    }
}

/// Non-streamed bodies parse in every format, with usage.
#[tokio::test]
async fn non_streamed_bodies_parse() {
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    for path in [
        CHAT,
        "/v1/completions",
        "/v1/responses",
        "/v1/messages",
        "/api/chat",
        "/api/generate",
        "/generate",
        "/",
        "/completion",
        "/infill",
        TOKENS,
    ] {
        let body = request(path, "sim-think", 6, false, "");
        let response = post(proxy.addr, path, &body, &[])
            .await
            .expect("whole body");
        assert_eq!(response.status, 200, "{path}");
        assert_eq!(
            response.headers["content-type"], "application/json",
            "{path}"
        );
        let t = next_timeline(&mut timelines).await;
        assert!(!t.streamed, "{path}");
        if path == "/generate" {
            // The body told the server (SGLang's `meta_info`).
            assert_eq!(t.dialect, Dialect::Sglang);
        }
        if path == "/" {
            // The head told the server (TGI's `x-compute-type`); its answer
            // is an array of one.
            assert_eq!(t.dialect, Dialect::Tgi);
        }
        assert_eq!(t.outcome, Outcome::Ok, "{path}");
        assert!(t.parse_errors.is_empty(), "{path}: {:?}", t.parse_errors);
        assert_eq!(t.tokens.generated, 6, "{path}");
        assert_eq!(
            t.tokens.generated_source,
            Some(CountSource::Usage),
            "{path}"
        );
    }
}

#[tokio::test]
async fn models_lists_the_configured_model() {
    let sim = start(SimConfig {
        model: "sim-mistral".into(),
        ..fast()
    })
    .await;
    let response = common::client::get(sim.addr, "/v1/models").await;
    assert_eq!(response.status, 200);
    let list: serde_json::Value = serde_json::from_slice(&response.body()).expect("JSON");
    assert_eq!(list["object"], "list");
    assert_eq!(list["data"][0]["id"], "sim-mistral");
    assert_eq!(common::client::get(sim.addr, "/nope").await.status, 404);
}

/// The issue's scenario: two batch slots, six requests at once. The
/// third waits for a whole service time; tokenclock shows the wait in
/// `headers_to_first_token` while TPOT stays flat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queueing_shows_in_headers_to_first_token() {
    let sim = start(SimConfig {
        max_batch: 2,
        decode_ms_per_token: 10.0,
        batch_penalty_ms: 0.5,
        ..SimConfig::default()
    })
    .await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    // 20 tokens at ~10.5 ms: a service time of about 210 ms.
    let body = request(CHAT, "sim-llama", 20, true, "");
    let requests: Vec<_> = (0..6)
        .map(|_| {
            let body = body.clone();
            let addr = proxy.addr;
            tokio::spawn(async move { post(addr, CHAT, &body, &[]).await.map(|_| ()) })
        })
        .collect();
    for request in requests {
        request.await.expect("join").expect("whole body");
    }
    let mut all = Vec::new();
    for _ in 0..6 {
        all.push(next_timeline(&mut timelines).await);
    }
    all.sort_by_key(|t| t.ttft());
    let ttft = |i: usize| all[i].ttft().expect("ttft");
    let waited = |i: usize| {
        all[i]
            .phases()
            .get(Phase::HeadersToFirstToken)
            .expect("phase")
    };
    let service = Duration::from_millis(180);
    assert!(ttft(2) >= ttft(0) + service, "{:?} {:?}", ttft(0), ttft(2));
    assert!(ttft(4) >= ttft(2) + service, "{:?} {:?}", ttft(2), ttft(4));
    assert!(waited(2) >= waited(0) + service);
    assert!(waited(4) >= waited(2) + service);
    let tpots: Vec<_> = all.iter().map(|t| t.tpot().expect("tpot")).collect();
    for t in &all {
        // The head went out at once: the wait is after it.
        let head = t.phases().get(Phase::TimeToResponseHeaders).expect("head");
        assert!(head < Duration::from_millis(100), "{head:?}");
    }
    // Decode cadence stays about flat (10.5 ms a step) however long the wait.
    let (min, max) = (tpots.iter().min(), tpots.iter().max());
    let (min, max) = (*min.expect("tpot"), *max.expect("tpot"));
    assert!(min >= Duration::from_millis(7), "{tpots:?}");
    assert!(max <= Duration::from_millis(16), "{tpots:?}");
    assert!(max - min <= Duration::from_millis(5), "{tpots:?}");
    let metrics = common::client::get(sim.addr, "/metrics").await;
    let text = String::from_utf8(metrics.body()).expect("utf-8");
    assert!(text.contains("sim_queue_time_seconds_count 6"), "{text}");
    assert!(text.contains("sim_time_to_first_token_seconds_count 6"));
    assert!(text.contains("sim_generated_tokens_total 120"));
    assert!(text.contains("sim_requests_running 0"));
    assert!(text.contains("sim_requests_waiting 0"));
}

/// `x-sim-schedule` bypasses the queue: exact TTFT and event gaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_mode_is_exact() {
    let sim = start(SimConfig::default()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    let schedule = ("x-sim-schedule", "ttft_ms=200,gap_ms=20,tokens=10");
    let body = request(CHAT, "sim-llama", 500, true, "");
    post(proxy.addr, CHAT, &body, &[schedule])
        .await
        .expect("whole body");
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.tokens.generated, 10);
    let ttft = t.ttft().expect("ttft");
    assert!(
        ttft >= Duration::from_millis(199) && ttft <= Duration::from_millis(215),
        "{ttft:?}"
    );
    let gaps: Vec<_> = t.gaps.inter_event().collect();
    assert_eq!(gaps.len(), 9);
    let mean = gaps.iter().sum::<Duration>() / 9;
    assert!(
        mean >= Duration::from_millis(19) && mean <= Duration::from_millis(21),
        "{gaps:?}"
    );
    let last = t.to_last_token().expect("last");
    assert!(last >= Duration::from_millis(380) && last <= Duration::from_millis(400));
}

/// SGLang's and TGI's native APIs share `/generate`: each request is
/// counted under the server that answered it, in every family, and the
/// gauges a request moved through come back to zero under both endpoints
/// (a request is counted `tgi`, the path's, until its response tells).
#[tokio::test]
async fn generate_is_counted_under_the_server_that_answered() {
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    for stream in [true, false] {
        let body = request("/generate", "sim-llama", 5, stream, "");
        let response = post(proxy.addr, "/generate", &body, &[])
            .await
            .expect("whole body");
        assert_eq!(response.status, 200);
        // Counted (the sinks are told in order: the metrics first).
        let t = next_timeline(&mut timelines).await;
        assert_eq!(t.dialect, Dialect::Sglang);
    }
    let metrics = common::client::get(proxy.metrics_addr, "/metrics").await;
    let text = String::from_utf8(metrics.body()).expect("UTF-8 exposition");
    let value = |prefix: &str, labels: &[&str]| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(prefix) && labels.iter().all(|f| l.contains(f)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let sglang = "endpoint=\"sglang\"";
    assert_eq!(
        value("tokenclock_requests_total{", &[sglang, "outcome=\"ok\""]),
        2.0,
        "{text}"
    );
    assert_eq!(
        value("tokenclock_requests_total{", &["endpoint=\"tgi\""]),
        0.0
    );
    assert_eq!(
        value("tokenclock_output_tokens_total{", &[sglang]),
        10.0,
        "{text}"
    );
    // The streamed one's first token, under SGLang's endpoint.
    assert_eq!(
        value("tokenclock_time_to_first_token_seconds_count{", &[sglang]),
        1.0
    );
    for endpoint in ["sglang", "tgi"] {
        let label = format!("endpoint=\"{endpoint}\"");
        assert_eq!(
            value("tokenclock_requests_in_flight{", &[&label]),
            0.0,
            "{endpoint}"
        );
        assert_eq!(
            value("tokenclock_requests_in_phase{", &[&label]),
            0.0,
            "{endpoint}"
        );
    }
}

/// Embeddings: the simulator's answers in OpenAI's order (base64, and a
/// batch of floats of MiBs, past `max_event_bytes`) and vLLM's, on both
/// paths, through the proxy: a vector per input as asked, each request
/// read as `openai_embeddings` under its model, its input tokens the
/// simulator's usage (the prompt's bytes / 4), nothing generated, no
/// parse error, no TTFT.
#[tokio::test]
async fn embeddings_parse_through_the_proxy() {
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    let text = "a tide pool holds anemones".repeat(4);
    let batch = |n: usize| format!("[{}]", vec![format!("\"{text}\""); n].join(","));
    let cases = [
        (
            "/v1/embeddings",
            "text-embedding-3-small",
            batch(2),
            r#","encoding_format":"base64""#,
            2,
            1536,
        ),
        (
            "/v1/embeddings",
            "text-embedding-3-large",
            batch(128),
            "",
            128,
            1536,
        ),
        (
            "/embeddings",
            "BAAI/bge-m3",
            batch(3),
            r#","dimensions":1024"#,
            3,
            1024,
        ),
        (
            "/v1/embeddings",
            "BAAI/bge-m3",
            "[101,2023,102]".to_owned(),
            "",
            1,
            1536,
        ),
    ];
    for (path, model, input, extra, vectors, dimensions) in cases {
        let case = format!("{path} {model} {vectors}");
        let body = format!(r#"{{"model":"{model}","input":{input}{extra}}}"#);
        let response = post(proxy.addr, path, &body, &[])
            .await
            .expect("whole body");
        assert_eq!(response.status, 200, "{case}");
        let answer: serde_json::Value = serde_json::from_slice(&response.body()).expect("JSON");
        let data = answer["data"].as_array().expect("data");
        assert_eq!(data.len(), vectors, "{case}");
        let first = &data[0]["embedding"];
        let numbers = match first.as_str() {
            Some(base64) => base64.len() / 4 * 3 / 4,
            None => first.as_array().map_or(0, Vec::len),
        };
        assert_eq!(numbers, dimensions, "{case}");
        let t = next_timeline(&mut timelines).await;
        let usage = answer["usage"]["prompt_tokens"].as_u64();
        read_whole_as(&t, Dialect::OpenAiEmbeddings, model, usage, &case);
        if vectors == 128 {
            assert!(
                response.body().len() > 1 << 20,
                "{case}: {}",
                response.body().len()
            );
        }
    }
}

/// Reranks and pair scores: the simulator's answers in vLLM's shapes, on
/// Cohere's paths and vLLM's `/score`, through the proxy: a result per
/// document, each rerank result echoing its document (300 of them: past
/// `max_event_bytes`), each request read as `rerank` under its model, its
/// input tokens the simulator's usage (the prompt's bytes / 4), nothing
/// generated, no parse error, no TTFT.
#[tokio::test]
async fn reranks_parse_through_the_proxy() {
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    let passage = "hermit crabs shelter in shells ".repeat(128);
    let docs = |n: usize| format!("[{}]", vec![format!("\"{passage}\""); n].join(","));
    let cases = [
        ("/v1/rerank", "query", "documents", docs(300)),
        (
            "/v2/rerank",
            "query",
            "documents",
            r#"[{"text":"a"},{"text":"b"}]"#.to_owned(),
        ),
        ("/rerank", "query", "documents", docs(3)),
        ("/score", "text_1", "text_2", docs(4)),
        ("/v1/score", "text_1", "text_2", r#""one""#.to_owned()),
    ];
    for (path, first, second, documents) in cases {
        let body = format!(
            r#"{{"model":"BAAI/bge-reranker-v2-m3","{first}":"tide pools","{second}":{documents}}}"#
        );
        // A prefill of a moment, not of the 300,000 tokens' length.
        let schedule = [("x-sim-schedule", "ttft_ms=1,gap_ms=0,tokens=1")];
        let response = post(proxy.addr, path, &body, &schedule)
            .await
            .expect("whole body");
        assert_eq!(response.status, 200, "{path}");
        let answer: serde_json::Value = serde_json::from_slice(&response.body()).expect("JSON");
        let sent: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        let count = sent[second].as_array().map_or(1, Vec::len);
        let listed = answer["results"].as_array().or(answer["data"].as_array());
        assert_eq!(listed.map(Vec::len), Some(count), "{path}");
        let t = next_timeline(&mut timelines).await;
        let model = "BAAI/bge-reranker-v2-m3";
        let usage = answer["usage"]["prompt_tokens"].as_u64();
        read_whole_as(&t, Dialect::Rerank, model, usage, path);
        if count == 300 {
            let size = response.body().len();
            assert!(size > 1 << 20, "{path}: {size}");
        }
    }
}

/// `t` is a whole answer's that generates nothing (to `case`), read as
/// `dialect` under `model`: ok, no parse error, its input `usage` (what
/// the answer reports), nothing generated, no TTFT.
fn read_whole_as(t: &Timeline, dialect: Dialect, model: &str, usage: Option<u64>, case: &str) {
    assert_eq!(t.dialect, dialect, "{case}");
    assert_eq!(t.model.as_deref(), Some(model), "{case}");
    assert_eq!(t.outcome, Outcome::Ok, "{case}");
    assert!(t.parse_errors.is_empty(), "{case}: {:?}", t.parse_errors);
    assert_eq!(t.tokens.input, usage, "{case}");
    assert_eq!(t.tokens.input_source, Some(CountSource::Usage), "{case}");
    assert_eq!(t.tokens.generated, 0, "{case}");
    assert_eq!(t.ttft(), None, "{case}");
}

/// vLLM's `/classify` and `/pooling` through the proxy: an answer per
/// input (a batch of 300 pooling vectors, 2.4 MB, read by its ends), the
/// request read as `pooling` under its model, its input the usage's, no
/// parse error, nothing generated, no TTFT; a request without `input`,
/// which vLLM's validation refuses with a 400, counted `pooling` too.
#[tokio::test]
async fn poolings_parse_through_the_proxy() {
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    let texts = |n: usize| format!("[{}]", vec!["\"the tide is out\""; n].join(","));
    let cases = [
        ("/classify", texts(2), ""),
        ("/v1/classify", r#""one""#.to_owned(), ""),
        ("/pooling", texts(300), r#","dimensions":1024"#),
    ];
    // A prefill of a moment.
    let schedule = [("x-sim-schedule", "ttft_ms=1,gap_ms=0,tokens=1")];
    for (path, input, more) in cases {
        let body = format!(r#"{{"model":"jason9693/Qwen2.5-1.5B-apeach","input":{input}{more}}}"#);
        let response = post(proxy.addr, path, &body, &schedule)
            .await
            .expect("whole body");
        assert_eq!(response.status, 200, "{path}");
        let answer: serde_json::Value = serde_json::from_slice(&response.body()).expect("JSON");
        let sent: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        let count = sent["input"].as_array().map_or(1, Vec::len);
        assert_eq!(
            answer["data"].as_array().map(Vec::len),
            Some(count),
            "{path}"
        );
        let t = next_timeline(&mut timelines).await;
        let model = "jason9693/Qwen2.5-1.5B-apeach";
        let usage = answer["usage"]["prompt_tokens"].as_u64();
        read_whole_as(&t, Dialect::Pooling, model, usage, path);
        if count == 300 {
            let size = response.body().len();
            assert!(size > 2 << 20, "{path}: {size}");
        }
    }
    let response = post(proxy.addr, "/classify", r#"{"model":"m"}"#, &schedule)
        .await
        .expect("whole body");
    assert_eq!(response.status, 400);
    let t = next_timeline(&mut timelines).await;
    assert_eq!(
        (t.dialect, t.outcome),
        (Dialect::Pooling, Outcome::HttpError)
    );
}

/// Ollama's own `/api/embed` through the proxy: a vector per input (a
/// batch of 200, 2 MB, read by its ends), the request read as
/// `ollama_embed` under its model, its input the answer's
/// `prompt_eval_count`, no parse error, nothing generated, no TTFT.
#[tokio::test]
async fn ollamas_embed_parses_through_the_proxy() {
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    let schedule = [("x-sim-schedule", "ttft_ms=1,gap_ms=0,tokens=1")];
    for count in [1, 200] {
        let input = vec!["\"why is the sky blue\""; count].join(",");
        let body = format!(r#"{{"model":"nomic-embed-text","input":[{input}],"dimensions":768}}"#);
        let response = post(proxy.addr, "/api/embed", &body, &schedule)
            .await
            .expect("whole body");
        assert_eq!(response.status, 200);
        let answer: serde_json::Value = serde_json::from_slice(&response.body()).expect("JSON");
        let vectors = answer["embeddings"].as_array().map(Vec::len);
        assert_eq!(vectors, Some(count));
        let t = next_timeline(&mut timelines).await;
        let usage = answer["prompt_eval_count"].as_u64();
        read_whole_as(
            &t,
            Dialect::OllamaEmbed,
            "nomic-embed-text",
            usage,
            "/api/embed",
        );
        if count == 200 {
            let size = response.body().len();
            assert!(size > 1 << 20, "{size}");
        }
    }
}

/// TEI's `/embed`: the simulator's bare array of vectors with TEI's head,
/// through the proxy: a vector per input, the request read as `tei`, its
/// input tokens the head's `x-compute-tokens`, its queue and prefill the
/// head's times, nothing generated, no parse error, no TTFT. Then a 422
/// (TEI's validation refusing a body without `inputs`) is counted `tei`,
/// the server last seen answering there, with no tokens.
#[tokio::test]
async fn teis_embed_is_read_from_its_head_through_the_proxy() {
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    let body = r#"{"inputs":["a tide pool holds anemones","and hermit crabs"],"truncate":true}"#;
    let response = post(proxy.addr, "/embed", body, &[])
        .await
        .expect("whole body");
    assert_eq!(response.status, 200);
    let header = |name: &str| {
        let value = response.headers.get(name).and_then(|v| v.to_str().ok());
        value.and_then(|v| v.parse::<u64>().ok())
    };
    let answer: serde_json::Value = serde_json::from_slice(&response.body()).expect("JSON");
    assert_eq!(answer.as_array().map(Vec::len), Some(2));
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.dialect, Dialect::Tei);
    assert_eq!(t.outcome, Outcome::Ok);
    assert!(t.parse_errors.is_empty(), "{:?}", t.parse_errors);
    assert_eq!(t.tokens.input, header("x-compute-tokens"));
    assert_eq!(t.tokens.input_source, Some(CountSource::Usage));
    assert_eq!(t.tokens.generated, 0);
    assert_eq!(t.ttft(), None);
    let ms = |name: &str| header(name).map(Duration::from_millis);
    assert_eq!(t.server.queue, ms("x-queue-time"));
    assert_eq!(t.server.prefill, ms("x-inference-time"));
    assert!(t.server.queue.is_some() && t.server.prefill.is_some());
    let refused = post(proxy.addr, "/embed", r#"{"input":"x"}"#, &[])
        .await
        .expect("whole body");
    assert_eq!(refused.status, 422);
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.dialect, Dialect::Tei);
    assert_eq!(t.outcome, Outcome::HttpError);
    assert_eq!(t.tokens.input, None);
}

/// An embeddings answer is ready when its prefill is: at the schedule's
/// first instant, and later by a `stall` fault, as a first token would be.
#[tokio::test]
async fn an_embeddings_answer_follows_its_prefill_and_stall() {
    let sim = start(fast()).await;
    let (proxy, mut timelines) = proxy_with_timelines(sim.addr, "").await;
    let body = r#"{"model":"BAAI/bge-m3","input":["a","b"]}"#;
    let schedule = ("x-sim-schedule", "ttft_ms=150,gap_ms=0,tokens=1");
    for (headers, at_least) in [
        (vec![schedule], 150),
        (vec![schedule, ("x-sim-fault", "stall=100")], 250),
    ] {
        let response = post(proxy.addr, "/v1/embeddings", body, &headers)
            .await
            .expect("whole body");
        assert_eq!(response.status, 200);
        let t = next_timeline(&mut timelines).await;
        let e2e = t.e2e().expect("an end");
        assert!(
            e2e >= Duration::from_millis(at_least),
            "{headers:?}: {e2e:?}"
        );
    }
}

//! The README's definitions, per family: where a tool call's first token
//! is, what a reasoning summary is, what llama.cpp's prompt counts mean.

use crate::measure::dialect::{Dialect, Parsed, Usage};

fn named<'a>(d: Dialect, name: &str, data: &'a str) -> Parsed<'a> {
    d.parse_event(name.as_bytes(), data.as_bytes())
        .expect("parses")
}

/// The first event of a tool call carries its name and no arguments: in
/// every family it is a token-bearing tool-call event (it sets TTFO).
#[test]
fn a_tool_calls_name_is_its_first_token_in_every_family() {
    let cases = [
        (
            Dialect::OpenAiChat,
            "",
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}"#,
        ),
        (
            Dialect::OpenAiResponses,
            "response.output_item.added",
            r#"{"type":"response.output_item.added","output_index":1,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_1","name":"get_weather"}}"#,
        ),
        (
            Dialect::Anthropic,
            "content_block_start",
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}"#,
        ),
        (
            Dialect::Ollama,
            "",
            r#"{"model":"qwen3","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{}}}]},"done":false}"#,
        ),
    ];
    for (d, name, data) in cases {
        let p = named(d, name, data);
        // Ollama sends the whole call at once: name and `{}` arguments.
        let want = if d == Dialect::Ollama { 11 + 2 } else { 11 };
        assert_eq!(p.tool_bytes, want, "{d:?}: the name's bytes");
        assert!(p.has_token() && p.has_output(), "{d:?}");
    }
}

#[test]
fn blocks_and_items_that_open_empty_carry_nothing() {
    let anthropic = [
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
    ];
    for data in anthropic {
        assert_eq!(
            named(Dialect::Anthropic, "content_block_start", data),
            Parsed::default()
        );
    }
    let responses = [
        r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}"#,
        r#"{"type":"response.output_item.added","output_index":1,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}"#,
        // `.done` repeats the whole call: already counted as it streamed.
        r#"{"type":"response.output_item.done","output_index":1,"item":{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"city\":\"Paris\"}","call_id":"call_1","name":"get_weather"}}"#,
    ];
    for data in responses {
        assert_eq!(named(Dialect::OpenAiResponses, "", data), Parsed::default());
    }
}

#[test]
fn whole_bodies_count_tool_names_too() {
    let anthropic = r#"{"type":"message","model":"claude","content":[{"type":"tool_use","id":"t","name":"get_weather","input":{"city":"Paris"}}],"usage":{"input_tokens":1,"output_tokens":2}}"#;
    let p = Dialect::Anthropic
        .parse_body(anthropic.as_bytes())
        .expect("parses");
    assert_eq!(p.tool_bytes, 11 + 16);
    let responses = r#"{"model":"gpt","status":"completed","output":[{"type":"function_call","name":"get_weather","arguments":"{}"}]}"#;
    let p = Dialect::OpenAiResponses
        .parse_body(responses.as_bytes())
        .expect("parses");
    assert_eq!(p.tool_bytes, 11 + 2);
}

#[test]
fn a_reasoning_summary_is_marked() {
    let d = Dialect::OpenAiResponses;
    let summary = named(
        d,
        "",
        r#"{"type":"response.reasoning_summary_text.delta","delta":"Thinking"}"#,
    );
    assert_eq!((summary.reasoning_bytes, summary.summary), (8, true));
    let raw = named(
        d,
        "",
        r#"{"type":"response.reasoning_text.delta","delta":"Thinking"}"#,
    );
    assert_eq!((raw.reasoning_bytes, raw.summary), (8, false));
}

/// llama.cpp: `tokens_evaluated` is the whole prompt; `timings.prompt_n`
/// only the part processed now, smaller on a cache hit.
#[test]
fn llamacpp_input_is_the_whole_prompt_and_the_cache_hit_is_cached() {
    let usage = |data: &str| {
        Dialect::LlamaCpp
            .parse_event(b"", data.as_bytes())
            .expect("parses")
            .usage
            .expect("usage")
    };
    let with_cache_n = r#"{"content":"","stop":true,"tokens_predicted":5,"tokens_evaluated":120,"timings":{"cache_n":100,"prompt_n":20,"prompt_ms":3.1,"predicted_n":5,"predicted_ms":40.0}}"#;
    let want = Usage {
        input: Some(120),
        cached_input: Some(100),
        output: Some(5),
        reasoning: None,
    };
    assert_eq!(usage(with_cache_n), want);
    let older = r#"{"content":"","stop":true,"tokens_predicted":5,"tokens_evaluated":120,"timings":{"prompt_n":20,"prompt_ms":3.1}}"#;
    assert_eq!(usage(older), want, "cached derived: evaluated − prompt_n");
    let no_hit = r#"{"content":"","stop":true,"tokens_predicted":5,"tokens_evaluated":120,"timings":{"prompt_n":120}}"#;
    assert_eq!(usage(no_hit).cached_input, None);
    let no_evaluated = r#"{"content":"","stop":true,"tokens_predicted":5,"timings":{"cache_n":100,"prompt_n":20}}"#;
    assert_eq!(usage(no_evaluated).input, Some(120));
}

#[test]
fn llamacpp_chat_takes_the_cached_prompt_from_timings() {
    let data = r#"{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"usage":{"completion_tokens":7,"prompt_tokens":120,"total_tokens":127},"timings":{"cache_n":100,"prompt_n":20,"prompt_ms":3.0,"predicted_n":7,"predicted_ms":50.0}}"#;
    let u = Dialect::OpenAiChat
        .parse_event(b"", data.as_bytes())
        .expect("parses")
        .usage
        .expect("usage");
    assert_eq!((u.input, u.cached_input), (Some(120), Some(100)));
}

#[test]
fn groq_usage_and_times_come_from_x_groq() {
    let data = r#"{"id":"c","model":"llama3-8b-8192","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"x_groq":{"id":"req_1","usage":{"queue_time":0.25,"prompt_tokens":18,"prompt_time":0.002,"completion_tokens":73,"completion_time":0.06,"total_tokens":91,"total_time":0.063}}}"#;
    let p = Dialect::OpenAiChat
        .parse_event(b"", data.as_bytes())
        .expect("parses");
    let usage = p.usage.expect("usage from x_groq");
    assert_eq!((usage.input, usage.output), (Some(18), Some(73)));
    let server = p.server.expect("Groq's own times");
    assert_eq!(server.queue, Some(std::time::Duration::from_millis(250)));
    assert_eq!(server.decode, Some(std::time::Duration::from_millis(60)));
}

#[test]
fn a_custom_tool_call_counts_like_a_function_call() {
    let d = Dialect::OpenAiResponses;
    let added = r#"{"type":"response.output_item.added","output_index":1,"item":{"id":"ctc_1","type":"custom_tool_call","status":"in_progress","call_id":"call_1","input":"","name":"execute_sql"}}"#;
    assert_eq!(named(d, "", added).tool_bytes, 11);
    let delta = r#"{"type":"response.custom_tool_call_input.delta","output_index":1,"item_id":"ctc_1","delta":"SELECT"}"#;
    assert_eq!(named(d, "", delta).tool_bytes, 6);
}

#[test]
fn cerebras_reports_its_times_in_time_info() {
    let data = r#"{"id":"c","model":"llama-3.3-70b","choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":{"prompt_tokens":46,"completion_tokens":20,"total_tokens":66},"time_info":{"queue_time":0.002,"prompt_time":0.004,"completion_time":0.031,"total_time":0.036,"created":1741626612}}"#;
    let p = Dialect::OpenAiChat
        .parse_event(b"", data.as_bytes())
        .expect("parses");
    let server = p.server.expect("Cerebras' own times");
    let ms = std::time::Duration::from_millis;
    assert_eq!(
        (server.queue, server.prefill, server.decode),
        (Some(ms(2)), Some(ms(4)), Some(ms(31)))
    );
}

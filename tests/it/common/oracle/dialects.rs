//! What one payload of each API family says, read with `serde_json::Value`
//! straight from the README's definitions (tokenclock's dialect module is
//! not used: this is the independent reading the replay test checks against).

use serde_json::Value;

use super::{Family, Usage};

/// The facts one payload (a streamed event, or a whole body) carries.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// Bytes of reasoning text (raw reasoning and reasoning summaries).
    pub reasoning: u64,
    /// Some of `reasoning` is raw reasoning text, not a summary (E).
    pub raw_reasoning: bool,
    /// Bytes of answer text and refusals.
    pub output: u64,
    /// The answer's text, where reasoning may be written inline between
    /// `<think>` and `</think>` (content, text, response, a token's text).
    pub answer: String,
    /// Bytes of tool-call names and arguments.
    pub tool: u64,
    /// The payload carries a tool call's name (token-bearing even with no arguments, C).
    pub tool_start: bool,
    /// The exact tokens of this payload, when the stream says (logprobs, TGI tokens, token ids).
    pub exact: Option<u64>,
    /// Output tokens generated so far, when the payload carries a running total.
    pub cumulative: Option<u64>,
    /// The payload carries a token exactly when that running total grew,
    /// whatever its text, and every token is answer (SGLang's `/generate`).
    pub by_growth: bool,
    /// Usage totals reported here.
    pub usage: Usage,
    /// The model the payload names.
    pub model: Option<String>,
    /// The id the server gave its response: the top-level `id` of OpenAI
    /// chunks and bodies, Anthropic's `message.id`, the Responses `response.id`.
    pub response_id: Option<String>,
    /// A finish or stop reason, as sent.
    pub finish: Option<String>,
    /// A Responses output that holds a `function_call` item.
    pub function_call_item: bool,
    /// An in-band error.
    pub error: bool,
}

fn text(v: &Value) -> u64 {
    v.as_str().map_or(0, |s| s.len() as u64)
}

/// Tool arguments: a string fragment, or a whole object (compact JSON).
fn args(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.len() as u64,
        Value::Object(_) | Value::Array(_) => {
            serde_json::to_string(v).map_or(0, |s| s.len() as u64)
        }
        _ => 0,
    }
}

fn count(v: &Value) -> Option<u64> {
    v.as_array().map(|a| a.len() as u64)
}

fn string(v: &Value) -> Option<String> {
    v.as_str().map(str::to_owned)
}

/// Reads one streamed payload of `family`; `name` is the SSE `event:` field.
pub fn event(family: Family, name: &str, v: &Value) -> Facts {
    match family {
        Family::Chat | Family::Completions | Family::Embeddings => openai(v, true),
        Family::Responses => responses(name, v),
        Family::Anthropic => anthropic_event(name, v),
        Family::Tgi => tgi(v, true),
        Family::Ollama => ollama(v),
        Family::LlamaCpp => llamacpp(v, true),
        Family::Sglang => sglang(v, true),
        Family::Unknown => Facts::default(),
    }
}

/// Reads a whole non-streamed body of `family`.
pub fn body(family: Family, v: &Value) -> Facts {
    match family {
        // Embeddings: `model`, `id` and `usage.prompt_tokens` where chat
        // has them, and no choices.
        Family::Chat | Family::Completions | Family::Embeddings => openai(v, false),
        Family::Responses => response_object(v, false),
        Family::Anthropic => anthropic_message(v),
        Family::Tgi => tgi(v, false),
        Family::Ollama => ollama(v),
        Family::LlamaCpp => llamacpp(v, false),
        Family::Sglang => sglang(v, false),
        Family::Unknown => Facts::default(),
    }
}

/// OpenAI chat and completions chunks and bodies (also llama.cpp's, TGI's,
/// vLLM's and SGLang's OpenAI routes).
fn openai(v: &Value, streamed: bool) -> Facts {
    let mut f = Facts {
        model: string(&v["model"]),
        response_id: string(&v["id"]),
        error: !v["error"].is_null(),
        ..Facts::default()
    };
    let choices = v["choices"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for c in choices {
        choice(c, &mut f);
    }
    // Groq puts its usage under `x_groq`.
    let u = match &v["usage"] {
        Value::Null => &v["x_groq"]["usage"],
        usage => usage,
    };
    let input = u["prompt_tokens"].as_u64();
    let completion = u["completion_tokens"].as_u64();
    let reasoning = u["completion_tokens_details"]["reasoning_tokens"].as_u64();
    // xAI's completion leaves its reasoning out, and its total adds it.
    let xai = match (input, completion, reasoning, u["total_tokens"].as_u64()) {
        (Some(i), Some(c), Some(r), Some(t)) => r > 0 && t == i + c + r,
        _ => false,
    };
    f.usage = Usage {
        input,
        // H: llama.cpp's OpenAI routes report the cached prompt in `timings`.
        cached: u["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .or_else(|| v["timings"]["cache_n"].as_u64()),
        output: completion.map(|c| c + if xai { reasoning.unwrap_or(0) } else { 0 }),
        reasoning,
    };
    // vLLM `continuous_usage_stats`: usage on every chunk that has choices.
    if streamed && !choices.is_empty() {
        f.cumulative = f.usage.output;
    }
    f
}

fn choice(c: &Value, f: &mut Facts) {
    let d = if c["delta"].is_object() {
        &c["delta"]
    } else {
        &c["message"]
    };
    // Spoken output's transcript is answer text too.
    f.output += text(&d["content"])
        + text(&d["refusal"])
        + text(&c["text"])
        + text(&d["audio"]["transcript"]);
    for answer in [&d["content"], &c["text"]] {
        f.answer.push_str(answer.as_str().unwrap_or_default());
    }
    // Mistral's typed chunks: `text` ones answer, `thinking` ones reasoning.
    let (chunk_output, chunk_reasoning) = chunks(&d["content"]);
    f.output += chunk_output;
    // vLLM sends the same text under both names.
    let reasoning = text(&d["reasoning"]).max(text(&d["reasoning_content"])) + chunk_reasoning;
    f.reasoning += reasoning;
    f.raw_reasoning |= reasoning > 0;
    // The `functions` API's call is a tool call.
    let legacy = [&d["function_call"]];
    let calls = d["tool_calls"].as_array().into_iter().flatten();
    for function in calls.map(|call| &call["function"]).chain(legacy) {
        let name = text(&function["name"]);
        f.tool += name + args(&function["arguments"]);
        f.tool_start |= name > 0;
    }
    // vLLM's token ids (`/inference/v1/generate`, `return_token_ids`).
    let logprobs = &c["logprobs"];
    let ids = count(&c["token_ids"]);
    if let Some(n) =
        ids.or_else(|| count(&logprobs["content"]).or_else(|| count(&logprobs["tokens"])))
    {
        f.exact = Some(f.exact.unwrap_or(0) + n);
    }
    if let Some(reason) = string(&c["finish_reason"]) {
        f.finish = Some(reason);
    }
}

/// The answer and reasoning bytes of Mistral's content chunks (an array):
/// `{"type":"text","text":…}` is answer, `{"type":"thinking","thinking":…}`
/// reasoning, whose own chunks' text (or a string) is all reasoning.
fn chunks(content: &Value) -> (u64, u64) {
    let mut sum = (0, 0);
    for chunk in content.as_array().into_iter().flatten() {
        sum.0 += text(&chunk["text"]);
        let thinking = &chunk["thinking"];
        let (inner_output, inner_reasoning) = chunks(thinking);
        sum.1 += text(thinking) + inner_output + inner_reasoning;
    }
    sum
}

fn responses(name: &str, v: &Value) -> Facts {
    let kind = v["type"].as_str().unwrap_or(name);
    let delta = text(&v["delta"]);
    let mut f = match v.get("response") {
        Some(r) if r.is_object() => response_object(r, true),
        _ => Facts::default(),
    };
    let ended = matches!(
        kind,
        "response.completed" | "response.incomplete" | "response.failed"
    );
    if !ended {
        // Only the end events' status, reason and usage are final.
        f.finish = None;
        f.usage = Usage::default();
        f.function_call_item = false;
    }
    match kind {
        "response.output_text.delta" | "response.refusal.delta" => f.output = delta,
        "response.reasoning_text.delta" => {
            f.reasoning = delta;
            f.raw_reasoning = delta > 0;
        }
        "response.reasoning_summary_text.delta" => f.reasoning = delta,
        "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
            f.tool = delta
        }
        "response.output_item.added"
            if matches!(
                v["item"]["type"].as_str(),
                Some("function_call" | "custom_tool_call")
            ) =>
        {
            f.tool = text(&v["item"]["name"]);
            f.tool_start = true;
        }
        "response.failed" | "error" => f.error = true,
        _ => {}
    }
    f
}

/// The Responses `response` object: in events (model, and at the end
/// status and usage), and the whole body (`streamed` false: its output text too).
fn response_object(r: &Value, streamed: bool) -> Facts {
    let u = &r["usage"];
    let mut f = Facts {
        model: string(&r["model"]),
        response_id: string(&r["id"]),
        usage: Usage {
            input: u["input_tokens"].as_u64(),
            cached: u["input_tokens_details"]["cached_tokens"].as_u64(),
            output: u["output_tokens"].as_u64(),
            reasoning: u["output_tokens_details"]["reasoning_tokens"].as_u64(),
        },
        finish: string(&r["incomplete_details"]["reason"]).or_else(|| string(&r["status"])),
        error: !streamed && r["status"] == "failed",
        ..Facts::default()
    };
    for item in r["output"].as_array().into_iter().flatten() {
        let parts = |key: &str| -> u64 {
            let parts = item[key].as_array().into_iter().flatten();
            parts.map(|p| text(&p["text"]) + text(&p["refusal"])).sum()
        };
        match item["type"].as_str() {
            Some("function_call" | "custom_tool_call") => {
                f.function_call_item = true;
                if !streamed {
                    f.tool += text(&item["name"]) + text(&item["arguments"]) + text(&item["input"]);
                }
            }
            Some("message") if !streamed => f.output += parts("content"),
            Some("reasoning") if !streamed => {
                let raw = parts("content");
                f.reasoning += raw + parts("summary");
                f.raw_reasoning |= raw > 0;
            }
            _ => {}
        }
    }
    f
}

/// Anthropic usage: the prompt is `input_tokens` plus cache reads and writes.
fn anthropic_usage(u: &Value) -> Usage {
    let cache = u["cache_creation_input_tokens"].as_u64().unwrap_or(0)
        + u["cache_read_input_tokens"].as_u64().unwrap_or(0);
    Usage {
        input: u["input_tokens"].as_u64().map(|n| n + cache),
        cached: u["cache_read_input_tokens"].as_u64(),
        output: u["output_tokens"].as_u64(),
        reasoning: u["output_tokens_details"]["thinking_tokens"].as_u64(),
    }
}

fn anthropic_event(name: &str, v: &Value) -> Facts {
    let kind = v["type"].as_str().unwrap_or(name);
    let mut f = Facts::default();
    match kind {
        "message_start" => {
            f.model = string(&v["message"]["model"]);
            f.response_id = string(&v["message"]["id"]);
            // Its `output_tokens` is a placeholder, not a count.
            f.usage = Usage {
                output: None,
                reasoning: None,
                ..anthropic_usage(&v["message"]["usage"])
            };
        }
        "content_block_start" => {
            let block = &v["content_block"];
            if matches!(block["type"].as_str(), Some("tool_use" | "server_tool_use")) {
                f.tool = text(&block["name"]);
                f.tool_start = true;
            }
        }
        "content_block_delta" => {
            let d = &v["delta"];
            f.output = text(&d["text"]);
            f.reasoning = text(&d["thinking"]);
            f.raw_reasoning = f.reasoning > 0;
            f.tool = text(&d["partial_json"]);
        }
        "message_delta" => {
            f.usage = anthropic_usage(&v["usage"]);
            f.cumulative = f.usage.output;
            f.finish = string(&v["delta"]["stop_reason"]);
        }
        "error" => f.error = true,
        _ => {}
    }
    f
}

fn anthropic_message(v: &Value) -> Facts {
    let mut f = Facts {
        model: string(&v["model"]),
        response_id: string(&v["id"]),
        usage: anthropic_usage(&v["usage"]),
        finish: string(&v["stop_reason"]),
        error: v["type"] == "error",
        ..Facts::default()
    };
    for block in v["content"].as_array().into_iter().flatten() {
        f.output += text(&block["text"]);
        let thinking = text(&block["thinking"]);
        f.reasoning += thinking;
        f.raw_reasoning |= thinking > 0;
        if matches!(block["type"].as_str(), Some("tool_use" | "server_tool_use")) {
            f.tool += text(&block["name"]) + args(&block["input"]);
        }
    }
    f
}

/// TGI: one token per event unless `special`; counts in `details`.
fn tgi(v: &Value, streamed: bool) -> Facts {
    let details = &v["details"];
    let mut f = Facts {
        usage: Usage {
            input: details["input_length"].as_u64(),
            output: details["generated_tokens"].as_u64(),
            ..Usage::default()
        },
        finish: string(&details["finish_reason"]),
        error: !v["error"].is_null(),
        ..Facts::default()
    };
    let token = &v["token"];
    if streamed && token.is_object() && token["special"] != true {
        f.output = text(&token["text"]);
        f.answer = token["text"].as_str().unwrap_or_default().to_owned();
        f.exact = Some(1);
    }
    if !streamed {
        f.output = text(&v["generated_text"]);
        f.answer = v["generated_text"].as_str().unwrap_or_default().to_owned();
    }
    f
}

fn ollama(v: &Value) -> Facts {
    let m = &v["message"];
    let thinking = text(&m["thinking"]) + text(&v["thinking"]);
    let mut f = Facts {
        model: string(&v["model"]),
        output: text(&m["content"]) + text(&v["response"]),
        answer: [&m["content"], &v["response"]]
            .map(|t| t.as_str().unwrap_or_default())
            .concat(),
        reasoning: thinking,
        raw_reasoning: thinking > 0,
        usage: Usage {
            input: v["prompt_eval_count"].as_u64(),
            output: v["eval_count"].as_u64(),
            ..Usage::default()
        },
        finish: string(&v["done_reason"]),
        error: !v["error"].is_null(),
        ..Facts::default()
    };
    for call in m["tool_calls"].as_array().into_iter().flatten() {
        let function = &call["function"];
        let name = text(&function["name"]);
        f.tool += name + args(&function["arguments"]);
        f.tool_start |= name > 0;
    }
    f
}

/// llama.cpp `/completion`: input per H, running `tokens_predicted` on
/// partial events, the stop reason on the last.
fn llamacpp(v: &Value, streamed: bool) -> Facts {
    let timings = &v["timings"];
    let evaluated = v["tokens_evaluated"].as_u64();
    let (prompt_n, cache_n) = (timings["prompt_n"].as_u64(), timings["cache_n"].as_u64());
    let input = evaluated.or_else(|| Some(prompt_n? + cache_n?));
    let cached = cache_n.or_else(|| {
        let rest = evaluated?.checked_sub(prompt_n?)?;
        (rest > 0).then_some(rest)
    });
    let stopped = ["eos", "word", "limit"]
        .into_iter()
        .find(|k| v[format!("stopped_{k}")] == true)
        .map(str::to_owned);
    let mut f = Facts {
        model: string(&v["model"]),
        output: text(&v["content"]),
        answer: v["content"].as_str().unwrap_or_default().to_owned(),
        exact: count(&v["tokens"]).filter(|&n| n > 0),
        usage: Usage {
            input,
            cached,
            output: v["tokens_predicted"].as_u64(),
            reasoning: None,
        },
        finish: string(&v["stop_type"]).or(stopped),
        error: !v["error"].is_null(),
        ..Facts::default()
    };
    if streamed && v["stop"] != true {
        f.cumulative = f.usage.output;
    }
    f
}

/// SGLang native `/generate`: `text` (all so far by default, or only the
/// new part), `meta_info.completion_tokens` counting every token so far,
/// whose growth alone says whether an event carries tokens (an abort's
/// text is no token, its growth is); an abort (`finish_reason.type`) is an
/// in-band error; a batch (`index` on each event) carries no total. A
/// whole batch body is an array, summed.
fn sglang(v: &Value, streamed: bool) -> Facts {
    if let Some(items) = v.as_array().filter(|_| !streamed) {
        let mut f = Facts::default();
        for item in items {
            let one = sglang(item, false);
            f.output += one.output;
            let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
            };
            f.usage.input = add(f.usage.input, one.usage.input);
            f.usage.cached = add(f.usage.cached, one.usage.cached);
            f.usage.output = add(f.usage.output, one.usage.output);
            f.response_id = f.response_id.or(one.response_id);
            f.finish = f.finish.or(one.finish);
            f.error |= one.error;
        }
        return f;
    }
    let meta = &v["meta_info"];
    let finish = string(&meta["finish_reason"]["type"]);
    let aborted = finish.as_deref() == Some("abort");
    let batch = streamed && !v["index"].is_null();
    let mut f = Facts {
        output: if aborted { 0 } else { text(&v["text"]) },
        answer: match aborted {
            true => String::new(),
            false => v["text"].as_str().unwrap_or_default().to_owned(),
        },
        response_id: string(&meta["id"]),
        finish,
        error: !v["error"].is_null() || aborted,
        ..Facts::default()
    };
    if meta.is_object() && !batch {
        f.usage = Usage {
            input: meta["prompt_tokens"].as_u64(),
            cached: meta["cached_tokens"].as_u64(),
            output: meta["completion_tokens"].as_u64(),
            reasoning: None,
        };
        if streamed && f.usage.output.is_some() {
            f.cumulative = f.usage.output;
            f.by_growth = true;
        }
    }
    f
}

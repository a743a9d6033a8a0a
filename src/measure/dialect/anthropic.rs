//! Anthropic Messages: `message_start` usage, `content_block_delta` text / thinking / tool JSON, cumulative `message_delta` usage, `message_stop`.

use std::borrow::Cow;

use serde::Deserialize;

use super::{
    common::{cow, event_type, json, name, ArgLen, Counts, Summed, Tally, TextLen},
    lazy::{scan_struct, Reader},
    Finish, Name, ParseError, Parsed, Usage,
};

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(default, borrow, rename = "type", deserialize_with = "cow")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    message: Option<Message<'a>>,
    #[serde(default)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    content_block: Option<StartBlock<'a>>,
    #[serde(default)]
    usage: Option<AnthropicUsage>,
}

scan_struct!(Event<'a> {
    kind: "type",
    message: "message",
    delta: "delta",
    content_block: "content_block",
    usage: "usage",
});

/// The block a `content_block_start` opens. A tool call's name arrives
/// here, before any `input_json_delta`: it is the first generated token of
/// the call. Text and thinking blocks start empty.
#[derive(Deserialize)]
struct StartBlock<'a> {
    #[serde(default, borrow, rename = "type", deserialize_with = "cow")]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    name: TextLen,
}

scan_struct!(StartBlock<'a> { kind: "type", name: "name" });

impl StartBlock<'_> {
    /// Bytes of tool-call name this block opens with (0 for other blocks).
    fn tool_bytes(&self) -> u32 {
        match self.kind.as_deref() {
            Some("tool_use" | "server_tool_use" | "mcp_tool_use") => self.name.0,
            _ => 0,
        }
    }
}

/// The message object: in `message_start`, and the whole body.
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(default, borrow, deserialize_with = "name")]
    model: Option<Name<'a>>,
    /// `msg_…`.
    #[serde(default, borrow, deserialize_with = "name")]
    id: Option<Name<'a>>,
    #[serde(default)]
    usage: Option<AnthropicUsage>,
    #[serde(default)]
    content: Summed<Block>,
    #[serde(default, borrow, rename = "type", deserialize_with = "cow")]
    kind: Option<Cow<'a, str>>,
    /// The whole body's reason (null in `message_start`).
    #[serde(default, borrow, deserialize_with = "cow")]
    stop_reason: Option<Cow<'a, str>>,
}

scan_struct!(Message<'a> {
    model: "model",
    id: "id",
    usage: "usage",
    content: "content",
    kind: "type",
    stop_reason: "stop_reason",
});

/// A `content_block_delta` delta; `signature_delta` and `citations_delta`
/// carry none of these fields. A `message_delta` delta carries `stop_reason`.
#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default)]
    text: TextLen,
    #[serde(default)]
    thinking: TextLen,
    #[serde(default)]
    partial_json: TextLen,
    #[serde(default, borrow, deserialize_with = "cow")]
    stop_reason: Option<Cow<'a, str>>,
}

scan_struct!(Delta<'a> {
    text: "text",
    thinking: "thinking",
    partial_json: "partial_json",
    stop_reason: "stop_reason",
});

/// A whole content block: `text`, `thinking`, or `tool_use` with its
/// `name` and `input` object.
#[derive(Deserialize)]
struct Block {
    #[serde(default)]
    text: TextLen,
    #[serde(default)]
    thinking: TextLen,
    #[serde(default)]
    name: TextLen,
    #[serde(default)]
    input: ArgLen,
}

scan_struct!(Block {
    text: "text",
    thinking: "thinking",
    name: "name",
    input: "input",
});

impl Tally for Block {
    fn tally(self) -> Counts {
        Counts {
            reasoning: self.thinking.0,
            output: self.text.0,
            tool: self.name.0.saturating_add(self.input.0),
            ..Counts::default()
        }
    }
}

/// Anthropic's `input_tokens` excludes cache reads and writes; it is kept
/// as reported.
#[derive(Deserialize)]
struct AnthropicUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    /// Newer responses say how many of `output_tokens` were thinking.
    #[serde(default)]
    output_tokens_details: Option<OutputDetails>,
}

scan_struct!(AnthropicUsage {
    input_tokens: "input_tokens",
    cache_creation_input_tokens: "cache_creation_input_tokens",
    cache_read_input_tokens: "cache_read_input_tokens",
    output_tokens: "output_tokens",
    output_tokens_details: "output_tokens_details",
});

#[derive(Deserialize)]
struct OutputDetails {
    #[serde(default)]
    thinking_tokens: Option<u64>,
}

scan_struct!(OutputDetails {
    thinking_tokens: "thinking_tokens"
});

/// Anthropic's `input_tokens` leaves out cache reads and writes; the prompt
/// is all three, as OpenAI's `prompt_tokens` (which includes cached tokens).
impl From<AnthropicUsage> for Usage {
    fn from(u: AnthropicUsage) -> Self {
        let cache =
            u.cache_creation_input_tokens.unwrap_or(0) + u.cache_read_input_tokens.unwrap_or(0);
        let reasoning = u.output_tokens_details.and_then(|d| d.thinking_tokens);
        // `output_tokens` includes the thinking: thinking larger than it
        // says this server's does not (as xAI's OpenAI usage).
        let output = match (u.output_tokens, reasoning) {
            (Some(output), Some(thinking)) if thinking > output => output.checked_add(thinking),
            (output, _) => output,
        };
        Usage {
            input: u.input_tokens.map(|n| n + cache),
            cached_input: u.cache_read_input_tokens,
            output,
            reasoning,
        }
    }
}

pub(super) fn event<'a>(
    reader: Reader,
    name: &[u8],
    data: &'a [u8],
) -> Result<Parsed<'a>, ParseError> {
    let ev: Event<'a> = reader.read(data)?;
    let kind = event_type(ev.kind.as_deref(), name);
    Ok(match kind {
        "message_start" => {
            let (usage, model, id) = ev
                .message
                .map_or((None, None, None), |m| (m.usage, m.model, m.id));
            Parsed {
                // Its `output_tokens` is a placeholder (1, or a few), not a
                // count: the count comes in `message_delta`. Kept, it stood
                // for the total of a stream that ended before one (a user's
                // stop, an `error` event, a cut), whose tokens were then
                // undercounted and its TPOT and ITL lost; without it such
                // a stream is counted by its events, as other families are.
                usage: usage.map(|u| Usage {
                    output: None,
                    reasoning: None,
                    ..Usage::from(u)
                }),
                model,
                response_id: id,
                ..Parsed::default()
            }
        }
        "content_block_start" => Parsed {
            tool_bytes: ev.content_block.as_ref().map_or(0, StartBlock::tool_bytes),
            ..Parsed::default()
        },
        "content_block_delta" => ev.delta.map_or_else(Parsed::default, |d| Parsed {
            reasoning_bytes: d.thinking.0,
            output_bytes: d.text.0,
            tool_bytes: d.partial_json.0,
            ..Parsed::default()
        }),
        "message_delta" => Parsed {
            usage: ev.usage.map(Usage::from),
            finish: Finish::new(ev.delta.and_then(|d| d.stop_reason)),
            cumulative: true,
            ..Parsed::default()
        },
        "message_stop" => Parsed {
            end: true,
            ..Parsed::default()
        },
        "error" => Parsed {
            error: true,
            ..Parsed::default()
        },
        _ => Parsed::default(),
    })
}

pub(super) fn body(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    let m: Message<'_> = json(data)?;
    Ok(Parsed {
        usage: m.usage.map(Usage::from),
        model: m.model,
        response_id: m.id,
        finish: Finish::new(m.stop_reason),
        end: true,
        error: m.kind.as_deref() == Some("error"),
        ..m.content.0.parsed()
    })
}

//! OpenAI Responses API: typed delta events, and `response.completed` (or `incomplete` / `failed`) with usage.

use std::borrow::Cow;

use serde::Deserialize;

use super::{
    common::{
        cow, done, event_type, is_done, json, name, Count, Counts, Finishing, Summed, SummedFinish,
        Tally, TextLen,
    },
    lazy::{scan_struct, Reader},
    openai::OpenAiUsage,
    Finish, Name, ParseError, Parsed, Usage,
};

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(default, borrow, rename = "type", deserialize_with = "cow")]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    delta: TextLen,
    #[serde(default, borrow)]
    response: Option<Response<'a>>,
    /// The item of `response.output_item.added` / `.done`.
    #[serde(default, borrow)]
    item: Option<Item<'a>>,
    /// A text delta's tokens, one entry each, when the request asked for
    /// them (`include: ["message.output_text.logprobs"]`); an empty list
    /// otherwise, which says nothing.
    #[serde(default)]
    logprobs: Option<Count>,
}

scan_struct!(Event<'a> {
    kind: "type",
    delta: "delta",
    response: "response",
    item: "item",
    logprobs: "logprobs",
});

/// The response object: the payload of the end events, and the whole body.
#[derive(Deserialize)]
struct Response<'a> {
    /// `resp_…`: on `response.created` and every later `response.*`
    /// lifecycle event.
    #[serde(default, borrow, deserialize_with = "name")]
    id: Option<Name<'a>>,
    #[serde(default)]
    usage: Option<OpenAiUsage>,
    #[serde(default, borrow, deserialize_with = "name")]
    model: Option<Name<'a>>,
    #[serde(default, borrow)]
    output: SummedFinish<'a, Item<'a>>,
    #[serde(default, borrow, deserialize_with = "cow")]
    status: Option<Cow<'a, str>>,
    /// Why an incomplete response stopped (`max_output_tokens`, `content_filter`).
    #[serde(default, borrow)]
    incomplete_details: Option<Incomplete<'a>>,
}

scan_struct!(Response<'a> {
    id: "id",
    usage: "usage",
    model: "model",
    output: "output",
    status: "status",
    incomplete_details: "incomplete_details",
});

#[derive(Deserialize)]
struct Incomplete<'a> {
    #[serde(default, borrow, deserialize_with = "cow")]
    reason: Option<Cow<'a, str>>,
}

scan_struct!(Incomplete<'a> { reason: "reason" });

impl<'a> Response<'a> {
    /// The incomplete reason, else the status; a completed output that
    /// holds a `function_call` item stopped for a tool call.
    fn finish(&self) -> Option<Finish<'a>> {
        let reason = self
            .incomplete_details
            .as_ref()
            .and_then(|d| d.reason.clone());
        Finish::of_response(
            reason.or_else(|| self.status.clone()),
            self.output.1.is_some(),
        )
    }
}

/// An output item: `message` (output text, refusal), `reasoning` (summary
/// and reasoning text) or `function_call` (name and arguments).
#[derive(Deserialize)]
struct Item<'a> {
    #[serde(default, borrow, rename = "type", deserialize_with = "cow")]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    content: Summed<Part>,
    #[serde(default)]
    summary: Summed<Part>,
    #[serde(default)]
    name: TextLen,
    #[serde(default)]
    arguments: TextLen,
    /// A `custom_tool_call`'s free-form input.
    #[serde(default)]
    input: TextLen,
}

scan_struct!(Item<'a> {
    kind: "type",
    content: "content",
    summary: "summary",
    name: "name",
    arguments: "arguments",
    input: "input",
});

#[derive(Deserialize)]
struct Part {
    #[serde(default)]
    text: TextLen,
    #[serde(default)]
    refusal: TextLen,
}

scan_struct!(Part {
    text: "text",
    refusal: "refusal"
});

impl Tally for Part {
    fn tally(self) -> Counts {
        Counts {
            output: self.text.0.saturating_add(self.refusal.0),
            ..Counts::default()
        }
    }
}

impl Tally for Item<'_> {
    fn tally(self) -> Counts {
        let text = self.content.0.output;
        match self.kind.as_deref() {
            Some("message") => Counts {
                output: text,
                ..Counts::default()
            },
            Some("reasoning") => Counts {
                reasoning: text.saturating_add(self.summary.0.output),
                ..Counts::default()
            },
            Some("function_call" | "custom_tool_call") => Counts {
                tool: self
                    .name
                    .0
                    .saturating_add(self.arguments.0)
                    .saturating_add(self.input.0),
                ..Counts::default()
            },
            _ => Counts::default(),
        }
    }
}

/// An item says how a completed response ended only by being a call: a
/// `function_call` (or `custom_tool_call`) item means the model stopped to
/// call a tool.
impl<'a> Finishing<'a> for Item<'a> {
    fn finish(&mut self) -> Option<Cow<'a, str>> {
        let call = matches!(
            self.kind.as_deref(),
            Some("function_call" | "custom_tool_call")
        );
        call.then_some(Cow::Borrowed("function_call"))
    }
}

pub(super) fn event<'a>(
    reader: Reader,
    name: &[u8],
    data: &'a [u8],
) -> Result<Parsed<'a>, ParseError> {
    if is_done(data) {
        return Ok(done());
    }
    let mut ev: Event<'a> = reader.read(data)?;
    let response_id = ev.response.as_mut().and_then(|r| r.id.take());
    let kind = event_type(ev.kind.as_deref(), name);
    let delta = ev.delta.0;
    let parsed = match kind {
        "response.output_text.delta" | "response.refusal.delta" => Parsed {
            output_bytes: delta,
            tokens: ev.logprobs.map(|c| c.0).filter(|&n| n > 0),
            ..Parsed::default()
        },
        "response.reasoning_text.delta" => Parsed {
            reasoning_bytes: delta,
            ..Parsed::default()
        },
        "response.reasoning_summary_text.delta" => Parsed {
            reasoning_bytes: delta,
            summary: true,
            ..Parsed::default()
        },
        // A function call's name arrives with its item, before any
        // argument delta: the first generated token of the call. The
        // item's `.done` event repeats it and adds nothing.
        "response.output_item.added" => Parsed {
            tool_bytes: ev.item.map_or(0, |item| match item.kind.as_deref() {
                Some("function_call" | "custom_tool_call") => item.tally().tool,
                _ => 0,
            }),
            ..Parsed::default()
        },
        "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
            Parsed {
                tool_bytes: delta,
                ..Parsed::default()
            }
        }
        "response.completed" | "response.incomplete" | "response.failed" => Parsed {
            error: kind == "response.failed",
            ..ended(ev.response)
        },
        "error" => Parsed {
            error: true,
            ..Parsed::default()
        },
        _ => Parsed::default(),
    };
    Ok(Parsed {
        response_id,
        ..parsed
    })
}

/// An end event: its usage and model, not its output (already streamed).
fn ended(response: Option<Response<'_>>) -> Parsed<'_> {
    let finish = response.as_ref().and_then(Response::finish);
    let (usage, model) = response.map_or((None, None), |r| (r.usage, r.model));
    Parsed {
        usage: usage.map(Usage::from),
        model,
        finish,
        end: true,
        ..Parsed::default()
    }
}

pub(super) fn body(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    let r: Response<'_> = json(data)?;
    Ok(Parsed {
        finish: r.finish(),
        usage: r.usage.map(Usage::from),
        model: r.model,
        response_id: r.id,
        end: true,
        error: r.status.as_deref() == Some("failed"),
        ..r.output.0.parsed()
    })
}

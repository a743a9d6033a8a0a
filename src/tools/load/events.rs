//! The events of a streamed response, read on the client side the way the
//! proxy reads them: the shared SSE framer (or NDJSON framer, for Ollama's
//! streams), the dialect of the path sent to for whether an event carries
//! a token, and the simulator's `sim_sent_unix_ns`.

use http::HeaderMap;
use memchr::memmem;
use serde::Deserialize;

use crate::measure::{
    dialect::{Dialect, Framed, Shared},
    frame::{ndjson::NdjsonFramer, sse::SseFramer},
};

/// Largest event read, in bytes; a larger one is skipped (counted as no
/// event) so a broken stream cannot grow memory without bound.
const MAX_EVENT_BYTES: usize = 1 << 20;

/// What the load generator needs from one event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Event {
    /// The simulator's send time, ns since the Unix epoch, when present.
    pub sent_unix_ns: Option<u64>,
    /// The first event in which the dialect finds a generated token
    /// (answer, refusal, reasoning or tool call): where the proxy's first
    /// token is. Later events are not parsed for tokens.
    pub first_token: bool,
}

/// Reads one response's events as its body arrives.
pub(super) struct Events {
    framer: Framer,
    dialect: Dialect,
    /// A token-bearing event has been seen: the dialect is not asked again.
    token_seen: bool,
}

impl Events {
    /// A reader for a response to a request sent to `path`; a path of no
    /// known API family is read as chat completions, what the load
    /// generator sends. An event stream on a path two servers share is the
    /// one that streams SSE there: on `/generate` SGLang's (TGI streams on
    /// `/generate_stream`), on `/api/chat` llama.cpp's OpenAI chat (Ollama
    /// streams NDJSON).
    pub(super) fn for_path(path: &str) -> Self {
        let dialect = match (Dialect::from_path(path), Shared::of(true, path)) {
            (Dialect::Unknown, _) => Dialect::OpenAiChat,
            (_, Some(Shared::Generate)) => Dialect::Sglang,
            (_, Some(Shared::ApiChat)) => Dialect::OpenAiChat,
            (known, _) => known,
        };
        Self {
            framer: Framer::Sse(SseFramer::new(MAX_EVENT_BYTES)),
            dialect,
            token_seen: false,
        }
    }

    /// Reads the body as its response head says it comes: an NDJSON
    /// stream line by line, as Ollama's (the one family that streams
    /// NDJSON), else as [`Events::for_path`] chose. Called before any
    /// byte of the body is fed.
    pub(super) fn framed_by(&mut self, headers: &HeaderMap) {
        if Framed::of(headers) == Framed::Ndjson {
            self.framer = Framer::Ndjson(NdjsonFramer::new(MAX_EVENT_BYTES));
            self.dialect = Dialect::Ollama;
        }
    }

    /// Feeds one read; calls `on_event` for each complete event other than
    /// the OpenAI end marker `[DONE]`.
    pub(super) fn feed(&mut self, bytes: &[u8], on_event: &mut impl FnMut(Event)) {
        let Self {
            framer,
            dialect,
            token_seen,
        } = self;
        let mut take = |name: &[u8], data: &[u8]| take(*dialect, token_seen, name, data, on_event);
        match framer {
            Framer::Sse(framer) => framer.feed(bytes, &mut |event| take(event.event, event.data)),
            Framer::Ndjson(framer) => framer.feed(bytes, &mut |line| take(b"", line)),
        }
    }

    /// The body ended: an NDJSON stream's last line, if no newline ended
    /// it (an SSE event without its blank line is no event).
    pub(super) fn finish(&mut self, on_event: &mut impl FnMut(Event)) {
        let Self {
            framer,
            dialect,
            token_seen,
        } = self;
        if let Framer::Ndjson(framer) = framer {
            framer.finish(&mut |line| take(*dialect, token_seen, b"", line, on_event));
        }
    }
}

/// How a response body is framed.
enum Framer {
    Sse(SseFramer),
    /// Newline-delimited JSON (Ollama's streams).
    Ndjson(NdjsonFramer),
}

/// One event (an SSE event's name and data, or an NDJSON line), unless it
/// is the OpenAI end marker `[DONE]`.
fn take(
    dialect: Dialect,
    token_seen: &mut bool,
    name: &[u8],
    data: &[u8],
    on_event: &mut impl FnMut(Event),
) {
    if data == b"[DONE]" {
        return;
    }
    let first_token = !*token_seen
        && dialect
            .parse_event(name, data)
            .is_ok_and(|parsed| parsed.has_token());
    *token_seen |= first_token;
    on_event(Event {
        sent_unix_ns: sent_unix_ns(data),
        first_token,
    });
}

/// The simulator's send stamp, parsed only from events that name it.
fn sent_unix_ns(data: &[u8]) -> Option<u64> {
    #[derive(Deserialize)]
    struct Stamp {
        #[serde(default)]
        sim_sent_unix_ns: Option<u64>,
    }
    memmem::find(data, b"\"sim_sent_unix_ns\"")?;
    serde_json::from_slice::<Stamp>(data).ok()?.sim_sent_unix_ns
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `reads` to a reader for `path`; the events in order.
    fn events(path: &str, reads: &[&[u8]]) -> Vec<Event> {
        let mut events = Events::for_path(path);
        let mut out = Vec::new();
        for read in reads {
            events.feed(read, &mut |e| out.push(e));
        }
        out
    }

    fn chat(delta: &str) -> String {
        format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{delta}}}]}}\n\n")
    }

    #[test]
    fn events_split_across_reads_done_excluded() {
        let got = events(
            "/v1/chat/completions",
            &[
                b"data: {\"sim_sent_unix_ns\"",
                b":42}\r\n\r\n: comment\n\ndata: [DONE]\n\ndata:x\n\n",
            ],
        );
        let stamped = Event {
            sent_unix_ns: Some(42),
            first_token: false,
        };
        assert_eq!(got, vec![stamped, Event::default()]);
    }

    #[test]
    fn only_the_first_token_bearing_event_is_marked() {
        let role = chat(r#"{"role":"assistant","content":""}"#);
        let hi = chat(r#"{"content":"hi"}"#);
        let got: Vec<bool> = events(
            "/v1/chat/completions",
            &[role.as_bytes(), hi.as_bytes(), hi.as_bytes()],
        )
        .iter()
        .map(|e| e.first_token)
        .collect();
        assert_eq!(got, [false, true, false]);
    }

    #[test]
    fn tokens_are_what_the_dialect_counts() {
        let token = |path: &str, data: &str| events(path, &[data.as_bytes()])[0].first_token;
        let chat_path = "/v1/chat/completions";
        assert!(token(chat_path, &chat(r#"{"content":"hi"}"#)));
        assert!(!token(
            chat_path,
            &chat(r#"{"role":"assistant","content":""}"#)
        ));
        assert!(token(chat_path, &chat(r#"{"reasoning_content":"hmm"}"#)));
        assert!(token(chat_path, &chat(r#"{"refusal":"I can't"}"#)));
        let call = r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]}"#;
        assert!(token(chat_path, &chat(call)));
        let usage = "data: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\n";
        assert!(!token(chat_path, usage));
        assert!(!token(chat_path, "data: not json\n\n"));
        // Legacy completions, and an unknown path read as chat completions.
        let text = "data: {\"choices\":[{\"index\":0,\"text\":\"hi\"}]}\n\n";
        assert!(token("/v1/completions", text));
        assert!(token("/custom", &chat(r#"{"content":"hi"}"#)));
        let anthropic = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n";
        assert!(token("/v1/messages", anthropic));
        // An event stream on `/generate` is SGLang's; TGI's stream path
        // keeps its own.
        let sglang = "data: {\"text\":\" Paris\",\"meta_info\":{\"completion_tokens\":1}}\n\n";
        assert!(token("/generate", sglang));
        let tgi = "data:{\"token\":{\"id\":1,\"text\":\" Paris\",\"special\":false}}\n\n";
        assert!(token("/generate_stream", tgi));
        assert!(!token("/generate_stream", sglang));
        // An event stream on `/api/chat` is llama.cpp's OpenAI chat.
        assert!(token("/api/chat", &chat(r#"{"content":"hi"}"#)));
        // llama.cpp's native stream.
        let native =
            "data: {\"index\":0,\"content\":\"hi\",\"stop\":false,\"tokens_predicted\":1}\n\n";
        assert!(token("/infill", native));
        // vLLM's token-in/token-out route: token ids, no text.
        let ids =
            "data: {\"request_id\":\"r\",\"choices\":[{\"index\":0,\"token_ids\":[791]}]}\n\n";
        assert!(token("/inference/v1/generate", ids));
    }

    /// An NDJSON body (Ollama's) is read line by line, its last line even
    /// without a newline, once the head says so.
    #[test]
    fn an_ndjson_stream_is_read_line_by_line() {
        let mut events = Events::for_path("/api/chat");
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/x-ndjson"),
        );
        events.framed_by(&headers);
        let mut out = Vec::new();
        let first = b"{\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":false}\n{\"message\":{\"role\":\"assistant\",\"content\":\"hi\"},\"sim_sent_unix_ns\":7,\"done\":false}\n";
        events.feed(first, &mut |e| out.push(e));
        events.feed(b"{\"done\":true,\"eval_count\":1}", &mut |e| out.push(e));
        assert_eq!(out.len(), 2, "the last line waits for the end");
        events.finish(&mut |e| out.push(e));
        let firsts: Vec<bool> = out.iter().map(|e| e.first_token).collect();
        assert_eq!(firsts, [false, true, false]);
        assert_eq!(out[1].sent_unix_ns, Some(7));
    }
}

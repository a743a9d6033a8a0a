//! Reading a recorded body the way a client does: the API family from the
//! request path, the body cut into writes at event boundaries, and the SSE
//! event (if any) each write completes (WHATWG event-stream rules).

use std::ops::Range;

/// The API family, from the request path (the README's dialect table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Chat,
    Completions,
    Responses,
    Anthropic,
    Tgi,
    Ollama,
    LlamaCpp,
    /// SGLang's native `/generate`, which the path shares with TGI's: the
    /// response tells (see [`Family::answered`]).
    Sglang,
    /// OpenAI's embeddings: one whole body, nothing generated.
    Embeddings,
    Unknown,
}

impl Family {
    pub fn of_path(path: &str) -> Self {
        let path = path
            .split('?')
            .next()
            .unwrap_or_default()
            .trim_end_matches('/');
        let ends = |suffix: &str| path.ends_with(suffix);
        match path {
            _ if ends("/chat/completions") => Self::Chat,
            _ if ends("/v1/completions") => Self::Completions,
            "/inference/v1/generate" => Self::Completions,
            _ if path.starts_with("/openai/deployments/") && ends("/completions") => {
                Self::Completions
            }
            _ if ends("/v1/responses") || ends("/openai/responses") => Self::Responses,
            "/responses" => Self::Responses,
            _ if ends("/v1/messages") => Self::Anthropic,
            _ if ends("/v1/embeddings") || ends("/openai/embeddings") => Self::Embeddings,
            _ if path.starts_with("/openai/deployments/") && ends("/embeddings") => {
                Self::Embeddings
            }
            "/embeddings" => Self::Embeddings,
            "/generate_stream" | "/generate" => Self::Tgi,
            "/api/chat" | "/api/generate" => Self::Ollama,
            "/completion" | "/completions" | "/infill" => Self::LlamaCpp,
            _ => Self::Unknown,
        }
    }

    /// The family of a response to a request for `path`: on `/generate`,
    /// which TGI and SGLang both serve, SGLang's when it is an event stream
    /// (TGI streams on `/generate_stream` only) or a JSON body whose object
    /// (or first item) has `meta_info`, as SGLang's native API answers; on
    /// `/api/chat`, which Ollama and llama.cpp's server both serve, OpenAI
    /// chat (llama.cpp's) when it is an event stream or a JSON body with
    /// `choices`.
    pub fn answered(path: &str, framing: Framing, body: &[u8]) -> Self {
        let family = Self::of_path(path);
        let trimmed = path
            .split('?')
            .next()
            .unwrap_or_default()
            .trim_end_matches('/');
        if trimmed == "/completions" {
            // llama.cpp's native completion, or OpenAI's (a proxy serving
            // OpenAI's routes without `/v1`): OpenAI's when its first event
            // (or the body) has `choices`.
            let first = match framing {
                Framing::Sse => String::from_utf8_lossy(body)
                    .lines()
                    .find_map(|l| l.strip_prefix("data:").map(|d| d.trim().to_owned()))
                    .unwrap_or_default(),
                _ => String::from_utf8_lossy(body).into_owned(),
            };
            let openai = serde_json::from_str::<serde_json::Value>(&first)
                .map(|v| v.get("choices").is_some())
                .unwrap_or(false);
            return if openai { Self::Completions } else { family };
        }
        if trimmed == "/api/chat" {
            let openai = match framing {
                Framing::Sse => true,
                Framing::Json => serde_json::from_slice::<serde_json::Value>(body)
                    .map(|v| v.get("choices").is_some_and(|c| !c.is_null()))
                    .unwrap_or(false),
                _ => false,
            };
            return if openai { Self::Chat } else { family };
        }
        if family != Self::Tgi || trimmed != "/generate" {
            return family;
        }
        let sglang = match framing {
            Framing::Sse => true,
            Framing::Json => serde_json::from_slice::<serde_json::Value>(body)
                .map(|v| {
                    let first = v.as_array().and_then(|a| a.first()).unwrap_or(&v);
                    first.get("meta_info").is_some()
                })
                .unwrap_or(false),
            _ => false,
        };
        if sglang {
            Self::Sglang
        } else {
            family
        }
    }

    /// The `endpoint` label value.
    pub fn endpoint(self) -> &'static str {
        match self {
            Self::Chat => "openai_chat",
            Self::Completions => "openai_completions",
            Self::Responses => "openai_responses",
            Self::Anthropic => "anthropic",
            Self::Tgi => "tgi",
            Self::Ollama => "ollama",
            Self::LlamaCpp => "llamacpp",
            Self::Sglang => "sglang",
            Self::Embeddings => "openai_embeddings",
            Self::Unknown => "unknown",
        }
    }
}

/// How the body is cut into writes, by its content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    Sse,
    Ndjson,
    Json,
    Other,
}

impl Framing {
    pub fn of(content_type: &str) -> Self {
        let ct = content_type.trim().to_ascii_lowercase();
        match () {
            _ if ct.starts_with("text/event-stream") => Self::Sse,
            _ if ct.starts_with("application/x-ndjson") => Self::Ndjson,
            _ if ct.starts_with("application/json") => Self::Json,
            _ => Self::Other,
        }
    }

    pub fn streamed(self) -> bool {
        matches!(self, Self::Sse | Self::Ndjson)
    }
}

/// The body's write units: SSE cut after each blank line, NDJSON after each
/// `\n`, anything else in one piece.
pub fn units(body: &[u8], framing: Framing) -> Vec<Range<usize>> {
    let mut units = Vec::new();
    let mut start = 0;
    let mut line_start = 0;
    let mut i = 0;
    while i < body.len() {
        let end = match body[i] {
            b'\r' if body.get(i + 1) == Some(&b'\n') => i + 2,
            b'\r' | b'\n' => i + 1,
            _ => {
                i += 1;
                continue;
            }
        };
        let cut = match framing {
            Framing::Ndjson => body[i] == b'\n' || end == i + 2,
            Framing::Sse => i == line_start && line_start > start,
            _ => false,
        };
        if cut {
            units.push(start..end);
            start = end;
        }
        line_start = end;
        i = end;
    }
    if start < body.len() {
        units.push(start..body.len());
    }
    units
}

/// The SSE event a unit dispatches: its `event:` name and joined data
/// (WHATWG: no data, or no blank line before the end, dispatches nothing).
pub fn sse_event(unit: &[u8]) -> Option<(String, Vec<u8>)> {
    let unit = unit
        .strip_prefix(b"\xEF\xBB\xBF".as_slice())
        .unwrap_or(unit);
    let ends_blank = strip_eol(unit).is_some_and(|rest| strip_eol(rest).is_some());
    let (mut name, mut data) = (String::new(), None::<Vec<u8>>);
    let text = unit
        .split(|&b| b == b'\n')
        .flat_map(|l| l.split(|&b| b == b'\r'));
    for line in text.filter(|l| !l.is_empty() && l[0] != b':') {
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(p) => (
                &line[..p],
                line[p + 1..].strip_prefix(b" ").unwrap_or(&line[p + 1..]),
            ),
            None => (line, &[][..]),
        };
        match field {
            b"event" => name = String::from_utf8_lossy(value).into_owned(),
            b"data" => {
                let d = data.get_or_insert_with(Vec::new);
                d.extend_from_slice(value);
                d.push(b'\n');
            }
            _ => {}
        }
    }
    let mut data = data.filter(|_| ends_blank)?;
    data.pop();
    Some((name, data))
}

/// `line` without its final line ending; `None` when it has none.
fn strip_eol(line: &[u8]) -> Option<&[u8]> {
    line.strip_suffix(b"\r\n")
        .or_else(|| line.strip_suffix(b"\n"))
        .or_else(|| line.strip_suffix(b"\r"))
}

//! Minimal reading of an OpenAI-style SSE stream: `data:` lines, whether an event carries a token, and its `sim_sent_unix_ns`.

use serde::Deserialize;

/// Longest line kept while waiting for its end; a longer one is dropped
/// (counted as no event) so a broken stream cannot grow memory without bound.
const MAX_LINE: usize = 1 << 20;

/// Splits a byte stream into lines across reads and hands over each
/// `data:` payload other than `[DONE]`. One `data:` line is one event: the
/// OpenAI dialects never split an event's data over several lines.
#[derive(Default)]
pub struct DataLines {
    pending: Vec<u8>,
}

impl DataLines {
    /// Feeds one read; calls `on_data` with each complete `data:` payload.
    pub fn feed(&mut self, mut bytes: &[u8], on_data: &mut impl FnMut(&[u8])) {
        while let Some(i) = memchr::memchr(b'\n', bytes) {
            if self.pending.is_empty() {
                line(&bytes[..i], on_data);
            } else {
                self.pending.extend_from_slice(&bytes[..i]);
                line(&self.pending, on_data);
                self.pending.clear();
            }
            bytes = &bytes[i + 1..];
        }
        if self.pending.len() + bytes.len() > MAX_LINE {
            self.pending.clear();
        } else {
            self.pending.extend_from_slice(bytes);
        }
    }
}

fn line(line: &[u8], on_data: &mut impl FnMut(&[u8])) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if let Some(payload) = line.strip_prefix(b"data:") {
        let payload = payload.strip_prefix(b" ").unwrap_or(payload);
        if payload != b"[DONE]" {
            on_data(payload);
        }
    }
}

/// What the load generator needs from one event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// The simulator's send time, ns since the Unix epoch, when present.
    pub sent_unix_ns: Option<u64>,
    /// Non-empty content or reasoning: the event carries a token.
    pub has_token: bool,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    sim_sent_unix_ns: Option<u64>,
    #[serde(default)]
    choices: Option<Vec<Choice>>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    /// Legacy completions put the token here.
    #[serde(default)]
    text: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
}

/// Reads one `data:` payload; anything that is not such JSON is an event
/// without a token or timestamp.
pub fn parse(payload: &[u8]) -> Event {
    let Ok(chunk) = serde_json::from_slice::<Chunk>(payload) else {
        return Event::default();
    };
    let filled = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
    let has_token = chunk.choices.iter().flatten().any(|c| {
        filled(&c.text)
            || c.delta.as_ref().is_some_and(|d| {
                filled(&d.content) || filled(&d.reasoning_content) || filled(&d.reasoning)
            })
    });
    Event {
        sent_unix_ns: chunk.sim_sent_unix_ns,
        has_token,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payloads(reads: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut lines = DataLines::default();
        let mut out = Vec::new();
        for read in reads {
            lines.feed(read, &mut |p| out.push(p.to_vec()));
        }
        out
    }

    #[test]
    fn data_lines_split_across_reads() {
        let got = payloads(&[
            b"data: {\"a\"",
            b":1}\r\n\r\n: comment\ndata: [DONE]\n\ndata:x\n",
        ]);
        assert_eq!(got, vec![b"{\"a\":1}".to_vec(), b"x".to_vec()]);
    }

    #[test]
    fn tokens_and_timestamps() {
        let e = parse(br#"{"choices":[{"delta":{"content":"hi"}}],"sim_sent_unix_ns":42}"#);
        assert_eq!(
            e,
            Event {
                sent_unix_ns: Some(42),
                has_token: true
            }
        );
        let e = parse(br#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#);
        assert!(!e.has_token);
        let e = parse(br#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#);
        assert!(e.has_token);
        let e = parse(br#"{"choices":[],"usage":{"completion_tokens":3}}"#);
        assert!(!e.has_token);
        assert_eq!(parse(b"not json"), Event::default());
    }
}

//! Speech to text, `/v1/audio/transcriptions` and `/v1/audio/translations`,
//! in the two shapes servers answer in: vLLM's (Whisper, Voxtral) chat-shaped
//! `transcription.chunk` / `translation.chunk` objects, a usage chunk when
//! the form asks (`stream_include_usage`), `[DONE]`; and, for a model named
//! `gpt-4o…`, OpenAI's `transcript.text.delta` events and
//! `transcript.text.done` with the whole text and its token usage. A whole
//! answer is `{"text": …, "usage": …}`, the usage in tokens for OpenAI's
//! models and in seconds of audio for vLLM's, as they report it.

use serde_json::{json, Value};

use super::{created, Encoder, Step, Text, Totals};
use crate::tools::sim::{
    body::Event,
    request::{Format, SimRequest},
};

/// A transcription or translation in progress.
pub(crate) struct Audio {
    /// OpenAI's typed events, not vLLM's chunks.
    openai: bool,
    object: &'static str,
    id: String,
    model: String,
    created: u64,
    request: SimRequest,
    /// The text so far: OpenAI's last event repeats it whole.
    text: String,
}

impl Audio {
    pub(crate) fn new(request: &SimRequest, id: u64) -> Self {
        let object = match request.format {
            Format::Translations => "translation.chunk",
            _ => "transcription.chunk",
        };
        Self {
            openai: request.model.starts_with("gpt-4o"),
            object,
            id: format!("trsc-sim{id}"),
            model: request.model.clone(),
            created: created(),
            request: request.clone(),
            text: String::new(),
        }
    }

    /// OpenAI's token usage (its audio tokens are the whole input).
    fn tokens(totals: &Totals) -> Value {
        json!({"type": "tokens", "input_tokens": totals.input,
               "input_token_details": {"text_tokens": 0, "audio_tokens": totals.input},
               "output_tokens": totals.output, "total_tokens": totals.input + totals.output})
    }

    /// vLLM's usage: the prompt's tokens count the audio's.
    fn usage(totals: &Totals) -> Value {
        json!({"prompt_tokens": totals.input, "total_tokens": totals.input + totals.output,
               "completion_tokens": totals.output})
    }

    fn chunk(&self, choices: Value, usage: Option<Value>) -> Event {
        let mut chunk = json!({"id": self.id, "object": self.object, "created": self.created,
                               "model": self.model, "choices": choices});
        if let Some(usage) = usage {
            chunk["usage"] = usage;
        }
        Event::Json(None, chunk)
    }
}

impl Encoder for Audio {
    fn supports_reasoning(&self) -> bool {
        false
    }

    fn prologue(&mut self, _: &Totals) -> Vec<Event> {
        Vec::new()
    }

    fn step(&mut self, step: &Step<'_>, totals: &Totals) -> Vec<Event> {
        let text = step.text();
        if self.openai {
            self.text.push_str(&text);
            return vec![Event::Json(
                None,
                json!({"type": "transcript.text.delta", "delta": text}),
            )];
        }
        let mut choice = json!({"delta": {"content": text}});
        if step.last {
            choice["finish_reason"] = json!("stop");
            choice["stop_reason"] = Value::Null;
        }
        let running = self.request.continuous_usage.then(|| Self::usage(totals));
        vec![self.chunk(json!([choice]), running)]
    }

    fn epilogue(&mut self, totals: &Totals) -> Vec<Event> {
        if self.openai {
            let done = json!({"type": "transcript.text.done", "text": self.text,
                              "usage": Self::tokens(totals)});
            return vec![Event::Json(None, done)];
        }
        let mut events = Vec::new();
        if self.request.include_usage {
            events.push(self.chunk(json!([]), Some(Self::usage(totals))));
        }
        events.push(Event::Done);
        events
    }

    fn body(&self, text: &Text, totals: &Totals) -> Value {
        let usage = if self.openai {
            Self::tokens(totals)
        } else {
            // Seconds of audio: at the simulator's 50 audio tokens a second.
            json!({"type": "duration", "seconds": totals.input.div_ceil(50)})
        };
        json!({"text": text.output, "usage": usage})
    }
}

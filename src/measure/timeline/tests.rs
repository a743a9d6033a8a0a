use std::time::Duration;

use tokio::time::Instant;

use super::{counts::MAX_GAPS, *};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn output(bytes: u32) -> Parsed<'static> {
    Parsed {
        output_bytes: bytes,
        ..Parsed::default()
    }
}

fn reasoning(bytes: u32) -> Parsed<'static> {
    Parsed {
        reasoning_bytes: bytes,
        ..Parsed::default()
    }
}

/// An event of `bytes` of answer whose cumulative usage says `so_far`
/// tokens of `item` were generated.
fn counted(item: u32, bytes: u32, so_far: u64) -> Parsed<'static> {
    Parsed {
        output_bytes: bytes,
        usage: Some(Usage {
            output: Some(so_far),
            ..Usage::default()
        }),
        cumulative: true,
        item,
        ..Parsed::default()
    }
}

fn usage(output: u64) -> Parsed<'static> {
    Parsed {
        usage: Some(Usage {
            input: Some(12),
            output: Some(output),
            ..Usage::default()
        }),
        ..Parsed::default()
    }
}

#[test]
fn worked_example_ttft_tpot_e2e() {
    // TTFT 450 ms, 120 tokens, 25 ms each after the first → E2E 3.425 s.
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    t.record(&Parsed::default(), t0 + ms(400)); // role-only chunk: not a token
    for i in 0..120 {
        t.record(&output(4), t0 + ms(450 + 25 * i));
    }
    t.record(&usage(120), t0 + ms(3425));
    t.finish(Outcome::Ok, t0 + ms(3425));
    assert_eq!(t.ttft(), Some(ms(450)));
    assert_eq!(t.ttfo(), Some(ms(450)));
    assert_eq!(t.ttst(), Some(ms(475)));
    assert_eq!(t.tpot(), Some(ms(25)));
    assert_eq!(t.e2e(), Some(ms(3425)));
    assert_eq!(t.to_last_token(), Some(ms(3425)));
    assert_eq!(t.tokens.generated, 120);
    assert_eq!(t.tokens.generated_source, Some(CountSource::Usage));
    assert_eq!(t.tokens.input, Some(12));
    assert_eq!(t.events, 122);
    assert_eq!(t.gaps.len(), 119);
    let itl: Vec<_> = t.inter_token_latencies().collect();
    assert_eq!(itl.iter().map(|(_, n)| n).sum::<u64>(), 119);
    assert!(itl.iter().all(|(d, _)| *d == ms(25)));
}

#[test]
fn three_tokens_per_event_is_30ms_per_token() {
    // Three tokens per event every 90 ms: inter-event 90 ms, ITL 30 ms ×3.
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    for i in 0..10 {
        t.record(&output(12), t0 + ms(100 + 90 * i));
    }
    t.record(&usage(30), t0 + ms(1000));
    t.finish(Outcome::Ok, t0 + ms(1000));
    assert!(t.gaps.inter_event().all(|d| d == ms(90)));
    let itl: Vec<_> = t.inter_token_latencies().collect();
    assert_eq!(itl.len(), 9);
    assert!(itl.iter().all(|&(d, n)| d == ms(30) && n == 3), "{itl:?}");
    // TPOT uses the total: (810 ms) / 29.
    assert_eq!(t.tpot(), Some(ms(810) / 29));
    // Each event's tokens, the first's share too: they add up to the total.
    assert_eq!(t.tokens_per_event().collect::<Vec<_>>(), [3; 10]);
}

/// `event_tokens` observes every token-bearing event, and its tokens add
/// up to the tokens streamed, however a usage total falls on the events
/// (before 2026-12-07 the first event of a spread total was counted as one
/// token, and events whose share was none were left out).
#[test]
fn each_events_tokens_add_up_to_the_total() {
    for (events, total, want) in [
        (3u64, 30u64, vec![10, 10, 10]),
        (5, 3, vec![1, 0, 1, 0, 1]),
        (4, 10, vec![2, 2, 3, 3]),
    ] {
        let t0 = Instant::now();
        let mut t = Timeline::new(t0, Dialect::OpenAiChat);
        for i in 0..events {
            t.record(&output(4), t0 + ms(100 + 50 * i));
        }
        t.record(&usage(total), t0 + ms(1000));
        t.finish(Outcome::Ok, t0 + ms(1000));
        let per_event: Vec<u64> = t.tokens_per_event().collect();
        assert_eq!(per_event, want, "{events} events, {total} tokens");
        assert_eq!(per_event.iter().sum::<u64>(), t.tokens.streamed());
        let itl: u64 = t.inter_token_latencies().map(|(_, n)| n).sum();
        assert_eq!(itl + per_event[0], total, "{events} events, {total} tokens");
        // Their latencies add up to the time from the first event to the
        // last (before, an event whose share was none lost its gap: 5
        // events 50 ms apart and 3 tokens gave ITL 50 ms, TPOT 100).
        let time: Duration = t
            .inter_token_latencies()
            .map(|(d, n)| d * u32::try_from(n).expect("few"))
            .sum();
        let whole = ms(50 * (events - 1));
        assert!(
            time.abs_diff(whole) < Duration::from_micros(1),
            "{events} events, {total} tokens: {time:?}"
        );
    }
    // Exact counts are each event's own.
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::Tgi);
    for (i, n) in [2u32, 1, 4].into_iter().enumerate() {
        let counted = Parsed {
            output_bytes: 3,
            tokens: Some(n),
            ..Parsed::default()
        };
        t.record(&counted, t0 + ms(100 + 10 * i as u64));
    }
    assert_eq!(t.tokens_per_event().collect::<Vec<_>>(), [2, 1, 4]);
}

/// TGI's stream ends with its EOS, a special token without text that
/// `generated_tokens` counts: its event is the last token's instant, so
/// TPOT is the decode steps' time over their count (before 2026-12-07 the
/// EOS was in the count and not in the time: 33 ms here, not 50).
#[test]
fn tgis_eos_is_the_last_token() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::Tgi);
    let token = |text: &str, special: bool| {
        format!(
            r#"{{"token":{{"id":1,"text":"{text}","logprob":0.0,"special":{special}}},"generated_text":null,"details":null}}"#
        )
    };
    let events = [
        token("a", false),
        token("b", false),
        token("c", false),
        r#"{"token":{"id":2,"text":"</s>","logprob":0.0,"special":true},"generated_text":"abc","details":{"finish_reason":"eos_token","generated_tokens":4}}"#.to_owned(),
    ];
    for (i, data) in events.iter().enumerate() {
        let parsed = Dialect::Tgi
            .parse_event(b"", data.as_bytes())
            .expect("an event");
        t.record(&parsed, t0 + ms(100 + 50 * i as u64));
    }
    t.finish(Outcome::Ok, t0 + ms(260));
    assert_eq!(t.tokens.generated, 4);
    assert_eq!(t.tpot(), Some(ms(50)));
    assert_eq!(t.ttfo(), Some(ms(100)));
    assert_eq!(t.tokens.token_events, 4);
}

#[test]
fn exact_per_event_counts_weight_each_gap() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::Tgi);
    let counted = |n| Parsed {
        output_bytes: 3,
        tokens: Some(n),
        ..Parsed::default()
    };
    t.record(&counted(1), t0 + ms(100));
    t.record(&counted(2), t0 + ms(140));
    t.record(&counted(4), t0 + ms(220));
    t.finish(Outcome::Ok, t0 + ms(230));
    assert_eq!(t.tokens.generated_source, Some(CountSource::PerEvent));
    assert_eq!(t.tokens.generated, 7);
    let itl: Vec<_> = t.inter_token_latencies().collect();
    assert_eq!(itl, vec![(ms(20), 2), (ms(20), 4)]);
}

#[test]
fn cumulative_usage_gives_exact_counts() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    t.record(&counted(0, 0, 0), t0 + ms(10)); // role chunk with usage 0
    t.record(&counted(0, 5, 2), t0 + ms(100));
    t.record(&counted(0, 9, 5), t0 + ms(160));
    t.finish(Outcome::Ok, t0 + ms(170));
    let itl: Vec<_> = t.inter_token_latencies().collect();
    assert_eq!(itl, vec![(ms(20), 3)]);
    assert_eq!(t.tokens.generated, 5);
    assert_eq!(t.tokens.generated_source, Some(CountSource::Usage));
}

/// vLLM's continuous usage with `n` > 1: each chunk's `completion_tokens`
/// is its one choice's count, so each choice's growth is its own (read as
/// one count, choice 1's gaps were lost and choice 0's split: ITL 8 to
/// 17 ms where it is 25 and 50, and the event tokens summed past the total).
#[test]
fn continuous_usage_counts_each_choice_apart() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    // Choice 0 two tokens an event, choice 1 one, interleaved 50 ms apart.
    for i in 0..10u64 {
        let at = t0 + ms(100 + 50 * i);
        match i % 2 {
            0 => t.record(&counted(0, 3, 2 * (i / 2 + 1)), at),
            _ => t.record(&counted(1, 1, i / 2 + 1), at),
        }
    }
    t.record(&usage(15), t0 + ms(560));
    t.finish(Outcome::Ok, t0 + ms(570));
    assert_eq!(t.tokens.generated, 15);
    let itl: Vec<_> = t.inter_token_latencies().collect();
    let want: Vec<_> = (1..10)
        .map(|i| match i % 2 {
            0 => (ms(25), 2),
            _ => (ms(50), 1),
        })
        .collect();
    assert_eq!(itl, want);
    assert_eq!(t.tokens_per_event().sum::<u64>(), 15);
}

/// Tokens a cumulative count shows on an event that carries none of their
/// text (vLLM's empty chunk while a character or a stop string is held
/// back) are the next token-bearing event's, which carries their text
/// (they were lost: ITL 50 and 100 ms for one token each, not 50 for two).
#[test]
fn tokens_held_back_count_with_the_event_that_carries_them() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    t.record(&counted(0, 1, 1), t0 + ms(100));
    t.record(&counted(0, 0, 2), t0 + ms(150));
    t.record(&counted(0, 2, 3), t0 + ms(200));
    t.record(&counted(0, 1, 4), t0 + ms(250));
    t.finish(Outcome::Ok, t0 + ms(260));
    assert_eq!(t.tokens.token_events, 3);
    let itl: Vec<_> = t.inter_token_latencies().collect();
    assert_eq!(itl, vec![(ms(50), 2), (ms(50), 1)]);
    assert_eq!(t.tokens_per_event().sum::<u64>(), 4);
}

/// vLLM with `logprobs` (or `return_token_ids`) lists a token on an empty
/// chunk while it holds back the first bytes of its character: the token
/// is the next chunk's, which shows its text, as a cumulative count's
/// growth is (before, the empty chunk was the first token: TTFT 40 ms
/// early, TPOT doubled). One no chunk showed by the end (a stop string
/// held back, then cut) is in the total, as in vLLM's usage.
#[test]
fn tokens_listed_without_their_text_count_with_the_event_that_shows_it() {
    let read = |contents: &[(&str, u64)]| {
        let t0 = Instant::now();
        let mut t = Timeline::new(t0, Dialect::OpenAiChat);
        for &(content, at) in contents {
            let chunk = format!(
                r#"{{"id":"c","choices":[{{"index":0,"delta":{{"content":"{content}"}},"logprobs":{{"content":[{{"token":"x","logprob":-0.5}}]}},"finish_reason":null}}]}}"#
            );
            let parsed = Dialect::OpenAiChat
                .parse_event(b"", chunk.as_bytes())
                .expect("a chunk");
            t.record(&parsed, t0 + ms(at));
        }
        t.finish(Outcome::Ok, t0 + ms(230));
        t
    };
    let t = read(&[("", 100), ("\\u00e9", 140), ("b", 180)]);
    assert_eq!(
        t.ttft(),
        Some(ms(140)),
        "the first text, not the empty chunk"
    );
    assert_eq!(t.tokens.token_events, 2);
    assert_eq!(t.tokens_per_event().collect::<Vec<_>>(), [2, 1]);
    let itl: Vec<_> = t.inter_token_latencies().collect();
    assert_eq!(itl, vec![(ms(40), 1)]);
    assert_eq!(t.tpot(), Some(ms(20)));
    assert_eq!(
        (t.tokens.generated, t.tokens.generated_source),
        (3, Some(CountSource::PerEvent))
    );
    let t = read(&[("a", 100), ("b", 140), ("", 180)]);
    assert_eq!((t.tokens.token_events, t.tokens.generated), (2, 3));
}

/// llama.cpp lists a partial's tokens and counts all so far: a token held
/// on a text-less partial is in the next one's growth already, not added
/// to it again.
#[test]
fn a_held_token_in_a_counts_growth_is_counted_once() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::LlamaCpp);
    let partial = |text: u32, listed: Option<u32>, so_far: u64| Parsed {
        output_bytes: text,
        tokens: listed,
        usage: Some(Usage {
            output: Some(so_far),
            ..Usage::default()
        }),
        cumulative: true,
        ..Parsed::default()
    };
    t.record(&partial(0, Some(1), 1), t0 + ms(100));
    t.record(&partial(2, None, 2), t0 + ms(140));
    t.record(&partial(1, Some(1), 3), t0 + ms(180));
    t.finish(Outcome::Ok, t0 + ms(200));
    assert_eq!(t.tokens_per_event().collect::<Vec<_>>(), [2, 1]);
}

/// TGI's tokens are its events' own: its `</s>`, with no text, is
/// generated when it comes.
#[test]
fn a_tgi_token_without_text_is_its_events_own() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::Tgi);
    for (token, at) in [
        (r#"{"id":1,"text":"a","logprob":-0.1,"special":false}"#, 100),
        (
            r#"{"id":2,"text":"</s>","logprob":-0.1,"special":true}"#,
            130,
        ),
    ] {
        let event = format!(r#"{{"token":{token},"generated_text":null,"details":null}}"#);
        let parsed = Dialect::Tgi
            .parse_event(b"", event.as_bytes())
            .expect("an event");
        t.record(&parsed, t0 + ms(at));
    }
    t.finish(Outcome::Ok, t0 + ms(140));
    assert_eq!(t.tokens.token_events, 2);
    assert_eq!(t.tpot(), Some(ms(30)));
}

/// SGLang's `/generate`: whether an event carries a token is whether its
/// count grew, whatever its text (all the text so far, repeated by an event
/// that added nothing, or empty while a character's bytes are held back).
#[test]
fn tokens_by_growth_follow_the_count_not_the_text() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::Sglang);
    let event = |text, so_far| Parsed {
        output_bytes: text,
        usage: Some(Usage {
            output: Some(so_far),
            ..Usage::default()
        }),
        cumulative: true,
        answer_by_count: true,
        ..Parsed::default()
    };
    // The first token's character is held back: no text, one token.
    t.record(&event(0, 1), t0 + ms(100));
    t.record(&event(3, 2), t0 + ms(130));
    // The same text again, nothing new: no token.
    t.record(&event(3, 2), t0 + ms(150));
    t.record(&event(9, 5), t0 + ms(190));
    t.finish(Outcome::Ok, t0 + ms(200));
    assert_eq!(t.ttft(), Some(ms(100)));
    assert_eq!(t.ttfo(), Some(ms(100)), "every SGLang token is answer");
    assert_eq!(t.tokens.token_events, 3);
    assert_eq!(t.tokens.generated, 5);
    let itl: Vec<_> = t.inter_token_latencies().collect();
    assert_eq!(itl, vec![(ms(30), 1), (ms(20), 3)]);
    let gaps: Vec<_> = t.gaps.inter_event().collect();
    assert_eq!(gaps, vec![ms(30), ms(60)]);
}

/// vLLM's `/inference/v1/generate`: events of token ids and no text.
/// Each id is a token and each token is answer, so the first event is the
/// first output too, and the gaps are weighted by the ids they carried.
#[test]
fn token_ids_are_answer_by_their_count() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiCompletions);
    let ids = |n| Parsed {
        tokens: Some(n),
        answer_by_count: true,
        ..Parsed::default()
    };
    t.record(&ids(1), t0 + ms(100));
    t.record(&ids(2), t0 + ms(140));
    // The finishing chunk may carry no new id: no token.
    t.record(&ids(0), t0 + ms(150));
    t.record(&ids(3), t0 + ms(200));
    t.finish(Outcome::Ok, t0 + ms(210));
    assert_eq!(t.ttft(), Some(ms(100)));
    assert_eq!(t.ttfo(), Some(ms(100)), "a token id is an answer token");
    assert_eq!(t.tokens.token_events, 3);
    assert_eq!(t.tokens.generated, 6);
    assert_eq!(t.tokens.generated_source, Some(CountSource::PerEvent));
    let itl: Vec<_> = t.inter_token_latencies().collect();
    assert_eq!(itl, vec![(ms(20), 2), (ms(20), 3)]);
}

/// A whole body's token array (vLLM's `token_ids`, logprobs entries) is
/// its exact count when the server reports no usage; its reasoning is the
/// reasoning text's share of it, an estimate, as it is of a reported total.
#[test]
fn a_body_s_token_array_is_its_exact_count() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiCompletions);
    t.record_body(&Parsed {
        tokens: Some(5),
        answer_by_count: true,
        end: true,
        ..Parsed::default()
    });
    t.finish(Outcome::Ok, t0 + ms(50));
    assert_eq!(t.tokens.generated, 5);
    assert_eq!(t.tokens.generated_source, Some(CountSource::PerEvent));
    assert_eq!(t.tokens.reasoning_source, None);

    for (tokens, usage, source) in [
        (Some(40), None, CountSource::PerEvent),
        (None, Some(40), CountSource::Usage),
    ] {
        let mut t = Timeline::new(t0, Dialect::OpenAiChat);
        t.record_body(&Parsed {
            reasoning_bytes: 300,
            output_bytes: 100,
            tokens,
            usage: usage.map(|n| Usage {
                output: Some(n),
                ..Usage::default()
            }),
            end: true,
            ..Parsed::default()
        });
        t.finish(Outcome::Ok, t0 + ms(50));
        assert_eq!(t.tokens.generated, 40);
        assert_eq!(t.tokens.generated_source, Some(source));
        // Three quarters of the text is reasoning.
        assert_eq!(t.tokens.reasoning, 30, "{source:?}");
        assert_eq!(t.tokens.reasoning_source, Some(CountSource::Estimated));
    }
}

/// Qwen3 served without a reasoning parser: `<think>` is its first token,
/// the reasoning is the answer's text until `</think>`. TTFT is the open
/// tag's event, TTFO the first answer text after the close.
#[test]
fn inline_think_tags_split_ttft_and_ttfo() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    let texts = [
        "", "<think>", "\\nHmm", ", 4", "</think>", "\\n\\n", "4", ".",
    ];
    record_chunks(&mut t, t0, &texts);
    t.finish(Outcome::Ok, t0 + ms(200));
    assert_eq!(t.ttft(), Some(ms(110)), "the open tag is the first token");
    assert_eq!(t.ttfo(), Some(ms(150)), "the first answer after the close");
    assert_eq!(t.tokens.token_events, 7);
    assert_eq!(t.tokens.generated_source, Some(CountSource::Events));
    assert_eq!((t.tokens.generated, t.tokens.reasoning), (7, 4));
    assert_eq!(t.tokens.reasoning_source, Some(CountSource::Events));
    assert_eq!(t.phases().get(Phase::Reasoning), Some(ms(40)));
}

/// Records each text as an OpenAI chat chunk's content, 10 ms apart from
/// `t0 + 100 ms`, and says after each whether TTFO was reached.
fn record_chunks(t: &mut Timeline, t0: Instant, texts: &[&str]) -> Vec<bool> {
    let chunk =
        |text: &str| format!(r#"{{"choices":[{{"index":0,"delta":{{"content":"{text}"}}}}]}}"#);
    let mut reached = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let data = chunk(text);
        let parsed = Dialect::OpenAiChat
            .parse_event(b"", data.as_bytes())
            .expect("a chunk");
        t.record(&parsed, t0 + ms(100 + 10 * i as u64));
        reached.push(t.reached().contains(Milestone::FirstOutput));
    }
    reached
}

/// A model that writes whitespace before its `<think>`: the whitespace is
/// the reasoning's, so TTFO is the first answer after the close, and the
/// reasoning's tokens include it. Until the open came, the whitespace
/// could have been the answer's start: TTFO was not reached meanwhile.
#[test]
fn whitespace_before_think_is_reasoning() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    let texts = [" ", "\\n", "<think>", "Hmm", "</think>", "4"];
    let reached = record_chunks(&mut t, t0, &texts);
    assert_eq!(reached, [false, false, false, false, false, true]);
    t.finish(Outcome::Ok, t0 + ms(200));
    assert_eq!(t.ttft(), Some(ms(100)), "the whitespace is the first token");
    assert_eq!(t.ttfo(), Some(ms(150)), "the first answer after the close");
    assert_eq!((t.tokens.generated, t.tokens.reasoning), (6, 5));
    assert_eq!(t.phases().get(Phase::Reasoning), Some(ms(50)));
    assert!(t.parse_errors.is_empty(), "{:?}", t.parse_errors);
}

/// Whitespace and then words: the whitespace was the answer's start, and
/// TTFO stands at it, reached once the words came; a stream of whitespace
/// alone is answer at its end.
#[test]
fn whitespace_before_words_is_the_answers_start() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    let reached = record_chunks(&mut t, t0, &["\\n", " ", "Hi", "<think>"]);
    assert_eq!(reached, [false, false, true, true]);
    t.finish(Outcome::Ok, t0 + ms(200));
    assert_eq!(t.ttfo(), Some(ms(100)));
    assert_eq!((t.tokens.generated, t.tokens.reasoning), (4, 0));
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    assert_eq!(record_chunks(&mut t, t0, &["\\n", " "]), [false, false]);
    t.finish(Outcome::Ok, t0 + ms(200));
    assert_eq!(t.ttfo(), Some(ms(100)));
    assert_eq!(t.tokens.reasoning, 0);
}

/// A token counted as answer by its count, with no text yet (SGLang holds
/// back a partial character), began the answer, and its TTFO may be
/// observed: whitespace after it continues the answer, and TTFO is never
/// taken back.
#[test]
fn whitespace_after_an_answer_counted_by_growth_stays_answer() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::Sglang);
    let texts = ["", "\\n", "\\n<think>", "\\n<think>a</think>Hi"];
    for (i, (text, count)) in texts.iter().zip([1, 2, 3, 5]).enumerate() {
        let data = format!(r#"{{"text":"{text}","meta_info":{{"completion_tokens":{count}}}}}"#);
        let parsed = Dialect::Sglang
            .parse_event(b"", data.as_bytes())
            .expect("an event");
        t.record(&parsed, t0 + ms(100 + 10 * i as u64));
        assert!(t.reached().contains(Milestone::FirstOutput), "{i}");
    }
    t.finish(Outcome::Ok, t0 + ms(200));
    assert_eq!(t.ttfo(), Some(ms(100)));
}

/// A prompt that opened `<think>`, known only once the response named its
/// model (after whitespace came): the whitespace is reasoning's too.
#[test]
fn a_prompt_opened_after_whitespace_takes_the_whitespace() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    record_chunks(&mut t, t0, &["\\n"]);
    t.opened_by_prompt();
    let reached = record_chunks(&mut t, t0 + ms(10), &["Hmm", "</think>", "4"]);
    assert_eq!(reached, [false, false, true]);
    t.finish(Outcome::Ok, t0 + ms(200));
    assert_eq!(t.ttfo(), Some(ms(130)));
    assert_eq!((t.tokens.generated, t.tokens.reasoning), (4, 3));
}

/// SGLang's `/generate` sends all the text so far: the open tag is in
/// every event's text until the close; its tokens are counted by growth.
#[test]
fn inline_think_tags_in_a_running_text() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::Sglang);
    let texts = [
        "<think>",
        "<think>",
        "<think>Hm",
        "<think>Hm</think>",
        "<think>Hm</think>4",
    ];
    for (i, text) in texts.iter().enumerate() {
        let data = format!(
            r#"{{"text":"{text}","meta_info":{{"completion_tokens":{}}}}}"#,
            i + 1
        );
        let parsed = Dialect::Sglang
            .parse_event(b"", data.as_bytes())
            .expect("an event");
        t.record(&parsed, t0 + ms(100 + 10 * i as u64));
    }
    t.finish(Outcome::Ok, t0 + ms(200));
    assert_eq!(t.ttft(), Some(ms(100)));
    assert_eq!(t.ttfo(), Some(ms(140)));
    assert_eq!((t.tokens.generated, t.tokens.token_events), (5, 5));
}

/// A whole body read at once: DeepSeek-R1's template opened `<think>` in
/// the prompt, so the answer has only the close; the text before it is
/// reasoning, its share of the total an estimate.
#[test]
fn a_whole_body_s_close_tag_ends_its_reasoning() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    let body = br#"{"choices":[{"index":0,"message":{"content":"Hmm, hi.</think>Hello!"}}],"usage":{"prompt_tokens":3,"completion_tokens":10}}"#;
    let parsed = Dialect::OpenAiChat.parse_body(body).expect("a body");
    t.record_body(&parsed);
    t.finish(Outcome::Ok, t0 + ms(50));
    // 16 of 22 bytes are reasoning: 10 × 16 / 22 ≈ 7.
    assert_eq!(t.tokens.reasoning, 7);
    assert_eq!(t.tokens.reasoning_source, Some(CountSource::Estimated));
}

#[test]
fn reasoning_then_output_splits_ttft_and_ttfo() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    t.response_head = Some(t0 + ms(50));
    for i in 0..4 {
        t.record(&reasoning(5), t0 + ms(200 + 100 * i));
    }
    for i in 0..4 {
        t.record(&output(5), t0 + ms(500 + 100 * i));
    }
    t.finish(Outcome::Ok, t0 + ms(900));
    assert_eq!(t.ttft(), Some(ms(200)));
    assert_eq!(t.ttfo(), Some(ms(500)));
    assert_eq!(t.tokens.generated, 8);
    assert_eq!(t.tokens.generated_source, Some(CountSource::Events));
    assert_eq!(t.tokens.reasoning, 4);
    let phases = t.phases();
    assert_eq!(phases.get(Phase::HeadersToFirstToken), Some(ms(150)));
    assert_eq!(phases.get(Phase::Reasoning), Some(ms(300)));
    assert_eq!(phases.get(Phase::Decode), Some(ms(600)));
    assert_eq!(phases.get(Phase::Tail), Some(ms(100)));
    assert_eq!(phases.get(Phase::TimeToResponseHeaders), Some(ms(50)));
    assert_eq!(phases.get(Phase::RequestUpload), None, "not seen, not zero");
}

#[test]
fn without_usage_or_events_tokens_are_estimated_and_marked() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    t.request.prompt_bytes = 41;
    t.record_body(&output(10));
    t.finish(Outcome::Ok, t0 + ms(5));
    assert_eq!(t.tokens.generated, 3);
    assert_eq!(t.tokens.generated_source, Some(CountSource::Estimated));
    assert_eq!(t.tokens.input, Some(11));
    assert_eq!(t.tokens.input_source, Some(CountSource::Estimated));
    assert_eq!(
        t.ttft(),
        None,
        "a non-streamed body has no first token on the wire"
    );
}

#[test]
fn an_in_band_error_is_an_upstream_error() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::Anthropic);
    t.record(
        &Parsed {
            error: true,
            ..Parsed::default()
        },
        t0 + ms(1),
    );
    t.finish(Outcome::Ok, t0 + ms(2));
    assert_eq!(t.outcome, Outcome::UpstreamError);
}

/// A client that leaves after the stream's closing event had the whole
/// answer: `ok`; before it, `client_cancelled`; an in-band error stays an
/// upstream error; how the upstream failed after it stays a failure.
#[test]
fn a_client_gone_after_the_closing_event_is_ok() {
    let t0 = Instant::now();
    let done = Parsed {
        end: true,
        ..Parsed::default()
    };
    let error = Parsed {
        error: true,
        ..Parsed::default()
    };
    let cases: &[(&[&Parsed<'_>], Outcome, Outcome)] = &[
        (
            &[&output(5)],
            Outcome::ClientCancelled,
            Outcome::ClientCancelled,
        ),
        (&[&output(5), &done], Outcome::ClientCancelled, Outcome::Ok),
        (
            &[&error, &done],
            Outcome::ClientCancelled,
            Outcome::UpstreamError,
        ),
        (
            &[&output(5), &done],
            Outcome::UpstreamError,
            Outcome::UpstreamError,
        ),
        (&[&output(5), &done], Outcome::Timeout, Outcome::Timeout),
    ];
    for (events, ended, expected) in cases {
        let mut t = Timeline::new(t0, Dialect::OpenAiChat);
        for (i, event) in events.iter().enumerate() {
            t.record(event, t0 + ms(i as u64 + 1));
        }
        t.finish(*ended, t0 + ms(9));
        assert_eq!(
            t.outcome,
            *expected,
            "{ended:?} after {} events",
            events.len()
        );
    }
}

#[test]
fn gaps_are_bounded() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    for i in 0..(MAX_GAPS as u64 + 11) {
        t.record(&output(1), t0 + Duration::from_micros(i));
    }
    assert_eq!(t.gaps.len(), MAX_GAPS);
    assert_eq!(t.gaps.dropped, 10);
}

/// A usage total as large as a u64 (a server's bug) is spread without
/// overflow (it panicked in tests, and wrapped in a release build).
#[test]
fn a_usage_total_of_any_size_is_spread() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    for i in 0..4 {
        t.record(&output(4), t0 + ms(10 * i));
    }
    t.record(&usage(u64::MAX), t0 + ms(50));
    t.finish(Outcome::Ok, t0 + ms(50));
    let total: u128 = t.inter_token_latencies().map(|(_, n)| u128::from(n)).sum();
    assert!(total > u128::from(u64::MAX) / 2, "{total}");
}

/// A usage total spread over a stream longer than the gaps kept gives the
/// kept gaps their share only: each event one token here, as it was, not
/// the dropped events' tokens piled on the kept ones (before 2026-12-07,
/// ITL counted 17,000 tokens over 16,384 gaps, some halved).
#[test]
fn a_spread_total_past_the_kept_gaps_weighs_only_their_share() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    let events = MAX_GAPS as u64 + 1 + 615;
    for i in 0..events {
        t.record(&output(4), t0 + Duration::from_micros(10 * i));
    }
    t.record(&usage(events), t0 + Duration::from_micros(10 * events));
    t.finish(Outcome::Ok, t0 + Duration::from_micros(10 * events));
    assert_eq!(t.gaps.dropped, 615);
    let itl: Vec<_> = t.inter_token_latencies().collect();
    assert_eq!(itl.len(), MAX_GAPS);
    assert!(
        itl.iter()
            .all(|&(d, n)| n == 1 && d == Duration::from_micros(10)),
        "{:?}",
        &itl[..4]
    );
    let per_event: u64 = t.tokens_per_event().sum();
    assert_eq!(per_event, MAX_GAPS as u64 + 1);
}

fn reasoning_usage(output: u64, reasoning: u64) -> Parsed<'static> {
    Parsed {
        usage: Some(Usage {
            output: Some(output),
            reasoning: Some(reasoning),
            ..Usage::default()
        }),
        ..Parsed::default()
    }
}

#[test]
fn hidden_reasoning_is_not_in_tpot_or_itl() {
    // A Responses stream: 469 output tokens, 448 of them reasoning that was
    // never streamed; 21 answer events 10 ms apart.
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiResponses);
    for i in 0..21 {
        t.record(&output(4), t0 + ms(2000 + 10 * i));
    }
    t.record(&reasoning_usage(469, 448), t0 + ms(2210));
    t.finish(Outcome::Ok, t0 + ms(2210));
    assert_eq!(t.tokens.generated, 469);
    assert_eq!(t.tokens.reasoning, 448);
    assert_eq!(t.tokens.reasoning_source, Some(CountSource::Usage));
    assert_eq!(t.tokens.hidden_reasoning, 448);
    assert_eq!(t.tokens.streamed(), 21);
    assert_eq!(t.tpot(), Some(ms(10)), "200 ms over 20 streamed tokens");
    let itl: Vec<_> = t.inter_token_latencies().collect();
    assert_eq!(itl.iter().map(|(_, n)| n).sum::<u64>(), 20);
    assert!(itl.iter().all(|(d, _)| *d == ms(10)), "{itl:?}");
}

/// A usage whose reasoning is more than its total (a server's bug) gives
/// records whose reasoning and output add up to the total generated.
#[test]
fn reasoning_is_never_more_than_the_total() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    t.record(&output(4), t0 + ms(10));
    t.record(&reasoning_usage(50, 60), t0 + ms(20));
    t.finish(Outcome::Ok, t0 + ms(20));
    assert_eq!(t.tokens.generated, 50);
    assert_eq!(t.tokens.reasoning, 50);
    assert_eq!(t.tokens.hidden_reasoning, 50);
}

#[test]
fn a_reasoning_summary_does_not_unhide_the_reasoning() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiResponses);
    let summary = Parsed {
        reasoning_bytes: 20,
        summary: true,
        ..Parsed::default()
    };
    t.record(&summary, t0 + ms(900));
    t.record(&output(4), t0 + ms(1000));
    t.record(&output(4), t0 + ms(1010));
    t.record(&reasoning_usage(102, 100), t0 + ms(1010));
    t.finish(Outcome::Ok, t0 + ms(1010));
    assert_eq!(
        t.ttft(),
        Some(ms(900)),
        "a summary is a token-bearing event"
    );
    assert_eq!(t.tokens.hidden_reasoning, 100);
    assert_eq!(t.tokens.streamed(), 2);
}

#[test]
fn streamed_reasoning_is_not_hidden() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    t.record(&reasoning(8), t0 + ms(100));
    t.record(&output(8), t0 + ms(200));
    t.record(&reasoning_usage(10, 6), t0 + ms(200));
    t.finish(Outcome::Ok, t0 + ms(200));
    assert_eq!(t.tokens.hidden_reasoning, 0);
    assert_eq!(t.tpot(), Some(ms(100) / 9));
}

#[test]
fn one_token_bearing_event_has_no_tpot() {
    // One event, usage says 3: there is no second instant to divide by.
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    t.record(&output(12), t0 + ms(100));
    t.record(&usage(3), t0 + ms(110));
    t.finish(Outcome::Ok, t0 + ms(110));
    assert_eq!(t.tokens.generated, 3);
    assert_eq!(t.tpot(), None);
}

#[test]
fn a_reasoning_split_from_event_counts_is_marked_estimated() {
    // Anthropic reports one output total; the split comes from the events.
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::Anthropic);
    for i in 0..3 {
        t.record(&reasoning(10), t0 + ms(100 + 10 * i));
    }
    t.record(&output(10), t0 + ms(200));
    t.record(&usage(40), t0 + ms(210));
    t.finish(Outcome::Ok, t0 + ms(210));
    assert_eq!(t.tokens.generated_source, Some(CountSource::Usage));
    assert_eq!(t.tokens.reasoning, 30);
    assert_eq!(t.tokens.reasoning_source, Some(CountSource::Estimated));
}

#[test]
fn reasoning_sources_follow_the_count() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    t.record(&reasoning(10), t0 + ms(100));
    t.record(&output(10), t0 + ms(110));
    t.finish(Outcome::Ok, t0 + ms(120));
    assert_eq!(t.tokens.reasoning, 1);
    assert_eq!(t.tokens.reasoning_source, Some(CountSource::Events));

    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    t.record(&output(10), t0 + ms(110));
    t.record(&usage(5), t0 + ms(110));
    t.finish(Outcome::Ok, t0 + ms(120));
    assert_eq!(t.tokens.reasoning, 0);
    assert_eq!(
        t.tokens.reasoning_source, None,
        "no reasoning seen or reported"
    );
}

#[test]
fn a_read_response_without_tokens_counts_zero_from_events() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    t.record(&Parsed::default(), t0 + ms(10)); // role chunk, then [DONE]
    t.finish(Outcome::Ok, t0 + ms(20));
    assert_eq!(t.tokens.generated, 0);
    assert_eq!(t.tokens.generated_source, Some(CountSource::Events));

    let t = {
        let mut t = Timeline::new(t0, Dialect::OpenAiChat);
        t.finish(Outcome::HttpError, t0 + ms(20));
        t
    };
    assert_eq!(t.tokens.generated_source, None, "nothing read: no count");
}

#[test]
fn the_request_names_the_model() {
    let t0 = Instant::now();
    let answered = |request: Option<&str>, response: &'static str| {
        let mut t = Timeline::new(t0, Dialect::OpenAiChat);
        t.request.model = request.map(str::to_owned);
        let named = Parsed {
            model: Some(response.into()),
            ..Parsed::default()
        };
        t.record(&named, t0 + ms(10));
        t.record(
            &Parsed {
                model: Some("a-later-name".into()),
                ..Parsed::default()
            },
            t0 + ms(11),
        );
        t.finish(Outcome::Ok, t0 + ms(20));
        (t.model, t.response_model)
    };
    assert_eq!(
        answered(Some("gpt-4o-mini"), "gpt-4o-mini-2024-07-18"),
        (
            Some("gpt-4o-mini".to_owned()),
            Some("gpt-4o-mini-2024-07-18".to_owned())
        )
    );
    assert_eq!(
        answered(None, "/Users/me/.ollama/models/blobs/sha256-6a07"),
        (
            Some("sha256-6a07".to_owned()),
            Some("/Users/me/.ollama/models/blobs/sha256-6a07".to_owned())
        )
    );
    assert_eq!(
        answered(Some(""), "tgi-model").0,
        Some("tgi-model".to_owned()),
        "an empty request model names nothing"
    );
}

#[test]
fn the_last_finish_reason_is_kept_cut_to_64_bytes() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    let finish = |raw: &str| Parsed {
        finish: Finish::new(Some(raw.to_owned().into())),
        ..Parsed::default()
    };
    t.record(&output(4), t0 + ms(10));
    assert_eq!((t.finish_reason.as_deref(), t.finish_class), (None, None));
    t.record(&finish("length"), t0 + ms(20));
    let kept = t.finish_reason.as_ref().map(|s| s.as_ptr());
    t.record(&finish("length"), t0 + ms(30));
    assert_eq!(
        t.finish_reason.as_ref().map(|s| s.as_ptr()),
        kept,
        "the same value again is not copied"
    );
    t.record(&finish("tool_use"), t0 + ms(40));
    t.record(&output(4), t0 + ms(50)); // no finish: the last one stays
    let kept = (t.finish_reason.as_deref(), t.finish_class);
    assert_eq!(kept, (Some("tool_use"), Some(FinishReason::ToolCalls)));
    // 81 bytes; a cut at 64 would split an `é`: 63 are kept.
    let long = format!("x{}", "é".repeat(40));
    t.record_body(&finish(&long));
    assert_eq!(t.finish_reason.as_deref(), Some(&long[..63]));
    assert_eq!(t.finish_class, Some(FinishReason::Other));
}

/// The decimal of `nanos` in milliseconds, without trailing zeros: what a
/// reader of a record or a log line should see.
fn decimal_ms(nanos: u64) -> String {
    let (whole, frac) = (nanos / 1_000_000, nanos % 1_000_000);
    let frac = format!("{frac:06}");
    match frac.trim_end_matches('0') {
        "" => whole.to_string(),
        frac => format!("{whole}.{frac}"),
    }
}

proptest::proptest! {
    /// A duration in milliseconds prints as the decimal of its nanoseconds,
    /// to the digit, while that has at most 15 significant digits (below
    /// 10^15 ns, 11.5 days; past them two decimals may share a double).
    #[test]
    fn millis_print_as_the_decimal_of_the_nanoseconds(nanos in 0u64..1_000_000_000_000_000) {
        let d = Duration::from_nanos(nanos);
        proptest::prop_assert_eq!(millis(d).to_string(), decimal_ms(nanos));
    }
}

#[test]
fn millis_of_durations_that_multiplying_rounds_twice() {
    let d = Duration::from_nanos(123_456_789_012);
    assert_eq!((d.as_secs_f64() * 1e3).to_string(), "123456.78901200001");
    assert_eq!(millis(d).to_string(), "123456.789012");
    assert_eq!(
        millis(Duration::from_nanos(163_872_345)).to_string(),
        "163.872345"
    );
}

/// `delivery_stall` is measured while an upstream's answer is handed over:
/// a request that never had one (tokenclock's own `502`, a client gone
/// before the head) has no such phase, rather than a stall of 0.
#[test]
fn delivery_stall_is_a_phase_only_of_an_answer_handed_over() {
    let t0 = Instant::now();
    let mut unanswered = Timeline::new(t0, Dialect::OpenAiChat);
    unanswered.finish(Outcome::UpstreamError, t0 + ms(3));
    assert_eq!(unanswered.phases().get(Phase::DeliveryStall), None);
    let mut answered = Timeline::new(t0, Dialect::OpenAiChat);
    answered.response_head = Some(t0 + ms(1));
    answered.finish(Outcome::Ok, t0 + ms(3));
    let stall = answered.phases().get(Phase::DeliveryStall);
    assert_eq!(stall, Some(Duration::ZERO), "measured, and none");
}

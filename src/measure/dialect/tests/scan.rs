//! The scan against the reference (serde alone) on every event of every
//! fixture, and the scanner's own edges: unescaped lengths, and what it
//! leaves to serde.

use std::{fs, path::Path};

use super::{ndjson, sse, Frame};
use crate::measure::dialect::{lazy::Reader, Dialect, Events, ParseError, Parsed};

/// The scan's result (with serde for what it gives up on), the scanner's
/// alone (`Encoding` where it gave up), and the reference's.
pub(super) type Outcome<'a> = Result<Parsed<'a>, ParseError>;

pub(super) fn outcomes<'a>(
    d: Dialect,
    name: &[u8],
    data: &'a [u8],
) -> (Outcome<'a>, Outcome<'a>, Outcome<'a>) {
    (
        d.parse_event(name, data),
        d.read_event(Reader::ScanOnly, name, data),
        d.parse_event_reference(name, data),
    )
}

/// Every file of both fixture folders cut every way a test can: as SSE, as
/// NDJSON, raw lines, and whole.
fn fixture_frames() -> Vec<(String, Frame)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut frames = Vec::new();
    for dir in ["real", "dialects"] {
        let mut files: Vec<_> = fs::read_dir(root.join(dir))
            .expect("fixture folder")
            .map(|e| e.expect("fixture entry").path())
            .filter(|p| p.extension().is_some_and(|e| e != "py" && e != "toml"))
            .collect();
        files.sort();
        for path in files {
            let bytes = fs::read(&path).expect("fixture");
            let file = path.display().to_string();
            let mut cut: Vec<Frame> = match std::str::from_utf8(&bytes) {
                Ok(_) => sse(&bytes).into_iter().chain(ndjson(&bytes)).collect(),
                Err(_) => Vec::new(),
            };
            let lossy = String::from_utf8_lossy(&bytes).into_owned();
            cut.extend(lossy.lines().chain([lossy.as_str()]).map(|l| Frame {
                name: String::new(),
                data: l.to_owned(),
            }));
            frames.extend(cut.into_iter().map(|f| (file.clone(), f)));
        }
    }
    frames
}

#[test]
fn every_fixture_event_reads_as_the_reference_in_every_dialect() {
    let frames = fixture_frames();
    let (mut read, mut fast) = (0, 0);
    for (file, f) in &frames {
        for d in Dialect::ALL {
            let (scan, alone, reference) = outcomes(d, f.name.as_bytes(), f.data.as_bytes());
            assert_eq!(scan, reference, "{file} {d:?} {:?}", f.data);
            // Nothing in the fixtures needs serde: the fast path reads
            // every event serde can read.
            if reference.is_ok() {
                assert_eq!(alone, reference, "fast path: {file} {d:?} {:?}", f.data);
                fast += 1;
            }
            read += 1;
        }
    }
    assert!(
        read > 3000 && fast > 1000,
        "{read} read, {fast} on the fast path"
    );
}

/// Every fixture read as a stream, in order, by one `Events` per file and
/// dialect (as the proxy reads a response) reads event by event as each
/// event alone.
#[test]
fn every_fixture_read_in_order_reads_as_each_event_alone() {
    let frames = fixture_frames();
    for d in Dialect::ALL {
        let mut current = None;
        let mut events = Events::new(d);
        for (file, f) in &frames {
            if current != Some(file) {
                (current, events) = (Some(file), Events::new(d));
            }
            let (name, data) = (f.name.as_bytes(), f.data.as_bytes());
            let read = events.parse(name, data);
            assert_eq!(read, d.parse_event(name, data), "{file} {d:?} {:?}", f.data);
        }
    }
}

/// The unescaped UTF-8 length, as serde's `&str` has it: a short escape is
/// one byte, `\u` one to three, a surrogate pair four.
#[test]
fn text_lengths_are_unescaped_lengths() {
    let cases: &[(&str, u32)] = &[
        (r#""""#, 0),
        (r#""plain text""#, 10),
        (r#""a\nb\t\"\\\/\b\f\r""#, 10),
        (r#""\u0041\u00e9\u20AC""#, 1 + 2 + 3),
        (r#""\ud83d\ude00!""#, 5),
        (r#""é€😀""#, 2 + 3 + 4),
        (r#""\u0000""#, 1),
        (
            r#""long enough to take the eight-byte steps, with a \"quote\" inside""#,
            63,
        ),
        ("null", 0),
        ("17", 0),
        ("-0.5", 0),
        ("true", 0),
        (r#"{"a":["b",{"c":null}]}"#, 0),
        (r#"["x"]"#, 0),
        (r#"[{"type":"text","text":"a\nb"}]"#, 3),
        (r#"[{"text":"é"},{"text":null},{"thinking":"no"}]"#, 2),
    ];
    for (content, want) in cases {
        let data = format!(r#"{{"choices":[{{"delta":{{"content":{content}}}}}]}}"#);
        let (scan, alone, reference) = outcomes(Dialect::OpenAiChat, b"", data.as_bytes());
        let bytes = alone.as_ref().map(|p| p.output_bytes).ok();
        assert_eq!(bytes, Some(*want), "{content}");
        assert_eq!(scan, reference, "{content}");
    }
}

/// Payloads the scanner leaves to serde, whatever serde then makes of them
/// (an error, or a value the scanner does not compute).
#[test]
fn the_scanner_leaves_what_it_is_unsure_of_to_serde() {
    let cases = [
        // serde accepts these.
        r#"{"choices":[{"delta":{"con\u0074ent":"x"}}]}"#,
        r#"{"choices":[{"delta":{"content":1e400}}]}"#,
        r#"{"usage":[1,2]}"#,
        "[]",
        r#"{"choices":[],"x":{"k\u00e9":1}}"#,
        // serde refuses these.
        r#"{"model":"a\ud800"}"#,
        r#"{"model":"a","model":"b"}"#,
        r#"{"choices":[{"delta":{},"message":{}}]}"#,
        r#"{"usage":{"prompt_tokens":-1}}"#,
        r#"{"usage":{"prompt_tokens":1.0}}"#,
        r#"{"usage":{"prompt_tokens":18446744073709551616}}"#,
        r#"{"choices":[{"delta":null}]}"#,
        r#"{"choices":{}}"#,
        r#"{"id":5}"#,
        r#"{"error":nul}"#,
        r#"{"x":01}"#,
        r#"{"x":1.}"#,
        r#"{"x":"\x"}"#,
        "{\"x\":\"\u{1}\"}",
        r#"{"x":[1,]}"#,
        r#"{"x":1,}"#,
        r#"{"x":1} x"#,
        r#"{"x":"#,
        "",
    ];
    for data in cases {
        let (scan, alone, reference) = outcomes(Dialect::OpenAiChat, b"", data.as_bytes());
        assert_eq!(alone, Err(ParseError::Encoding), "{data}");
        assert_eq!(scan, reference, "{data}");
    }
    let deep = format!(r#"{{"x":{}1{}}}"#, "[".repeat(120), "]".repeat(120));
    let (scan, alone, reference) = outcomes(Dialect::Ollama, b"", deep.as_bytes());
    assert_eq!(alone, Err(ParseError::Encoding));
    assert_eq!(scan, reference);
    // Invalid UTF-8 in a string serde skips unchecked: serde reads it.
    let bytes = b"{\"object\":\"\xff\",\"choices\":[]}";
    let (scan, alone, reference) = outcomes(Dialect::OpenAiChat, b"", bytes);
    assert_eq!(alone, Err(ParseError::Encoding));
    assert_eq!(scan, reference);
    assert!(reference.is_ok());
}

/// Escaped strings the dialect keeps (model, id, finish) are unescaped as
/// serde would; plain ones stay borrowed from the payload.
#[test]
fn kept_strings_are_unescaped_or_borrowed() {
    let data = br#"{"id":"chatcmpl-1","model":"org\/m\u00e9","choices":[{"delta":{},"finish_reason":"stop"}]}"#;
    let (scan, alone, reference) = outcomes(Dialect::OpenAiChat, b"", data);
    let parsed = alone.expect("fast path");
    let model = parsed.model.expect("a model");
    assert_eq!(model.to_text(), Some("org/mé"));
    assert!(!model.is_borrowed());
    let id = parsed.response_id.expect("an id");
    assert!(id.is_borrowed() && id.to_text() == Some("chatcmpl-1"));
    assert_eq!(scan, reference);
}

/// A reasoning tag in the answer's text is found in every dialect that
/// has one, however the server escaped it (Go's encoder writes `<` as
/// `\u003c`; `/` may be `\/`; any letter may be a `\u` escape), at its
/// offset in the unescaped text; the fast path reads it as serde does,
/// and a reasoning field's tags are not looked for.
#[test]
fn think_tags_are_found_in_the_answer_however_escaped() {
    use crate::measure::dialect::{Cut, Think};
    let answers = [
        (
            Dialect::OpenAiChat,
            r#"{"choices":[{"index":0,"delta":{"content":"T"}}]}"#,
        ),
        (
            Dialect::OpenAiCompletions,
            r#"{"choices":[{"index":0,"text":"T"}]}"#,
        ),
        (
            Dialect::Ollama,
            r#"{"model":"m","response":"T","done":false}"#,
        ),
        (
            Dialect::Ollama,
            r#"{"message":{"role":"assistant","content":"T"},"done":false}"#,
        ),
        (Dialect::LlamaCpp, r#"{"content":"T","stop":false}"#),
        (
            Dialect::Tgi,
            r#"{"token":{"id":1,"text":"T","special":false}}"#,
        ),
        (
            Dialect::Sglang,
            r#"{"text":"T","meta_info":{"completion_tokens":3}}"#,
        ),
    ];
    let close = Think::new(None, Some(10));
    let begun = |open, close| {
        Think::NONE.with_cut(Cut {
            open,
            close,
            ..Cut::default()
        })
    };
    let ends = |head| {
        Think::NONE.with_cut(Cut {
            head,
            ..Cut::default()
        })
    };
    let texts = [
        (r"ab</think>c", close),
        (r"ab\u003c/think\u003ec", close),
        (r"ab<\/think>c", close),
        (r"ab</thin\u006B>c", close),
        (r#"\n\"</think>c"#, close),
        (r"\t<think>", Think::new(Some(1), None)),
        (
            r"\u003cthink\u003e\n\u003c/think\u003e",
            Think::new(Some(0), Some(16)),
        ),
        (r"a\nb<c", Think::NONE),
        (r"<thinking>", Think::NONE),
        (r"\u00e9\n", Think::NONE),
        // Blank: whitespace only, however written; not when empty or
        // holding anything else.
        (r"\n\n", Think::BLANK),
        (" ", Think::BLANK),
        (r"\u0020\t\u000A\r\f", Think::BLANK),
        (r"\u000c", Think::BLANK),
        ("", Think::NONE),
        (r" \/", Think::NONE),
        (r"\n\u00a0", Think::NONE),
        (r"\u0041\u0020", Think::NONE),
        (r"\b", Think::NONE),
        (" a", Think::NONE),
        // A tag cut between events, its pieces however escaped.
        ("</", begun(0, 2)),
        (r"\u003c/", begun(0, 2)),
        (r"\u003c", begun(1, 1)),
        (r"\n<th", begun(3, 0)),
        ("think>A", ends(2)),
        (r"think\u003e", ends(2)),
        (r"\/think>", ends(1)),
        (
            "thi",
            Think::NONE.with_cut(Cut {
                mid: 2,
                ..Cut::default()
            }),
        ),
    ];
    for (dialect, shape) in answers {
        for (text, want) in texts {
            let data = shape.replace('T', text);
            let (scan, alone, reference) = outcomes(dialect, b"", data.as_bytes());
            assert_eq!(scan, reference, "{dialect:?} {data}");
            assert_eq!(alone, reference, "fast path: {dialect:?} {data}");
            let think = reference.map(|p| p.think).expect("an event");
            assert_eq!(think, want, "{dialect:?} {data}");
        }
    }
    let field = r#"{"choices":[{"index":0,"delta":{"reasoning_content":"</think>"}}]}"#;
    let p = Dialect::OpenAiChat.parse_event(b"", field.as_bytes());
    assert_eq!(p.map(|p| p.think).ok(), Some(Think::NONE));
}

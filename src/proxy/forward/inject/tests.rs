use super::*;

const CHUNK: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
const USAGE: &str =
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n";
const DONE: &str = "data: [DONE]\n\n";

fn run(frames: &[&[u8]]) -> Vec<u8> {
    let mut cutter = Cutter::default();
    let mut out = Vec::new();
    for frame in frames {
        out.extend_from_slice(&cutter.cut(Bytes::copy_from_slice(frame)));
    }
    if let Some(rest) = cutter.flush() {
        out.extend_from_slice(&rest);
    }
    out
}

#[test]
fn the_usage_only_chunk_is_removed_and_nothing_else() {
    let stream = format!("{CHUNK}{CHUNK}{USAGE}{DONE}");
    let want = format!("{CHUNK}{CHUNK}{DONE}");
    assert_eq!(run(&[stream.as_bytes()]), want.as_bytes());
    // Any split of the stream gives the same bytes.
    let bytes = stream.as_bytes();
    for cut in 0..bytes.len() {
        assert_eq!(
            run(&[&bytes[..cut], &bytes[cut..]]),
            want.as_bytes(),
            "cut at {cut}"
        );
    }
}

#[test]
fn crlf_streams_and_null_choices_are_handled() {
    let crlf = |s: &str| s.replace('\n', "\r\n");
    let usage_null = "data: {\"choices\":null,\"usage\":{\"completion_tokens\":1}}\n\n";
    let stream = crlf(&format!("{CHUNK}{usage_null}{DONE}"));
    assert_eq!(
        run(&[stream.as_bytes()]),
        crlf(&format!("{CHUNK}{DONE}")).as_bytes()
    );
}

#[test]
fn continuous_usage_chunks_with_choices_are_kept() {
    let with_usage = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":{\"completion_tokens\":1}}\n\n";
    let stream = format!("{with_usage}{DONE}");
    assert_eq!(run(&[stream.as_bytes()]), stream.as_bytes());
}

#[test]
fn a_frame_of_whole_events_is_forwarded_without_a_copy() {
    let mut cutter = Cutter::default();
    let frame = Bytes::from_static(CHUNK.as_bytes());
    let out = cutter.cut(frame.clone());
    assert_eq!(out.as_ptr(), frame.as_ptr());
}

#[test]
fn include_usage_is_added_only_where_missing() {
    let rewritten = |body: &str| {
        with_include_usage(body.as_bytes()).map(|b| String::from_utf8_lossy(&b).into_owned())
    };
    assert_eq!(
        rewritten(r#"{"model":"m","stream":true,"messages":[]}"#).as_deref(),
        Some(
            r#"{"stream_options":{"include_usage":true},"model":"m","stream":true,"messages":[]}"#
        )
    );
    // vLLM's usage on every chunk, asked for alone, is off (it needs both):
    // left alone, or the client would get it on every chunk (until
    // 2026-12-07 it was written in). Asked not to, it is no matter.
    assert!(
        rewritten(r#"{"stream":true,"stream_options":{"continuous_usage_stats":true}}"#).is_none()
    );
    assert_eq!(
        rewritten(r#"{"stream":true,"stream_options":{"continuous_usage_stats":false}}"#)
            .as_deref(),
        Some(
            r#"{"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":false}}"#
        )
    );
    // Asked for in the words the server also takes (pydantic's lax
    // booleans): left alone, so the client's usage chunk is not cut out
    // (until 2026-12-07, `1` or `"true"` were written over and the usage
    // the client asked for was cut). Asked not to in those words: asked
    // for, as `false` is. vLLM's continuous usage the same way.
    for asked in ["1", r#""true""#, r#""Yes""#, r#""on""#, "1.0", r#""maybe""#] {
        let body = format!(r#"{{"stream":true,"stream_options":{{"include_usage":{asked}}}}}"#);
        assert!(rewritten(&body).is_none(), "{asked}");
        let body =
            format!(r#"{{"stream":true,"stream_options":{{"continuous_usage_stats":{asked}}}}}"#);
        assert!(rewritten(&body).is_none(), "{asked}");
    }
    for refused in ["0", r#""false""#, r#""No""#, r#""off""#, "0.0"] {
        let body = format!(r#"{{"stream":true,"stream_options":{{"include_usage":{refused}}}}}"#);
        assert_eq!(
            rewritten(&body).as_deref(),
            Some(r#"{"stream":true,"stream_options":{"include_usage":true}}"#),
            "{refused}"
        );
        let body =
            format!(r#"{{"stream":true,"stream_options":{{"continuous_usage_stats":{refused}}}}}"#);
        let want = format!(
            r#"{{"stream":true,"stream_options":{{"include_usage":true,"continuous_usage_stats":{refused}}}}}"#
        );
        assert_eq!(rewritten(&body), Some(want), "{refused}");
    }
    // Asked not to, or null: usage is asked for all the same (the client
    // still sees none).
    assert_eq!(
        rewritten(r#"{"stream":true,"stream_options":{"include_usage":false}}"#).as_deref(),
        Some(r#"{"stream":true,"stream_options":{"include_usage":true}}"#)
    );
    assert_eq!(
        rewritten(r#"{"stream":true,"stream_options":null}"#).as_deref(),
        Some(r#"{"stream":true,"stream_options":{"include_usage":true}}"#)
    );
    assert_eq!(
        rewritten(r#"{"stream":true,"stream_options": { } }"#).as_deref(),
        Some(r#"{"stream":true,"stream_options": {"include_usage":true } }"#)
    );
    assert!(rewritten(r#"{"stream":false}"#).is_none());
    assert!(rewritten(r#"{"stream":"true"}"#).is_none());
    assert!(rewritten(r#"{"stream":true,"stream_options":{"include_usage":true}}"#).is_none());
    assert!(rewritten(r#"{"stream":true,"stream_options":[]}"#).is_none());
    assert!(rewritten("not json").is_none());
    assert!(rewritten(r#"[{"stream":true}]"#).is_none());
    // Nested deeper than serde_json reads: left alone.
    let deep = format!(
        r#"{{"stream":true,"x":{}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    assert!(rewritten(&deep).is_none());
}

/// Only the member is written in: numbers past a float's precision,
/// spacing, escapes, key order and duplicate keys reach the server as the
/// client wrote them (before 2026-12-07 the body was parsed and written
/// again: `"seed":123456789012345678901234567890` went as
/// `1.2345678901234568e+29`, and a duplicate key was dropped).
#[test]
fn every_other_byte_of_the_body_is_kept() {
    let body = "{ \"seed\": 123456789012345678901234567890, \"temperature\": 1.0e0,\n \
                \"messages\": [{\"content\": \"caf\\u00e9 \\/ \\ud83d\\ude00\"}],\n \
                \"stream\": false, \"z\": 1, \"a\": 2, \"stream\" : true }\n";
    let got = with_include_usage(body.as_bytes()).unwrap_or_default();
    let want = format!(
        "{{\"stream_options\":{{\"include_usage\":true}},{}",
        &body[1..]
    );
    assert_eq!(String::from_utf8_lossy(&got), want);
    // The last `stream_options` is the one read, and the one written.
    let twice =
        r#"{"stream":true,"stream_options":{"include_usage":true},"stream_options":{"x":1}}"#;
    let got = with_include_usage(twice.as_bytes()).unwrap_or_default();
    let want = r#"{"stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":true,"x":1}}"#;
    assert_eq!(String::from_utf8_lossy(&got), want);
    // An escaped key is the key.
    let escaped = r#"{"stre\u0061m":true,"stream_options":{"include_\u0075sage":false}}"#;
    let got = with_include_usage(escaped.as_bytes()).unwrap_or_default();
    let want = r#"{"stre\u0061m":true,"stream_options":{"include_\u0075sage":true}}"#;
    assert_eq!(String::from_utf8_lossy(&got), want);
}

#[test]
fn whole_events_around_a_dropped_one_are_slices_of_the_frame() {
    let mut cutter = Cutter::default();
    let frame = Bytes::from(format!("{CHUNK}{CHUNK}{USAGE}{DONE}"));
    let out = cutter.cut(frame.slice(..2 * CHUNK.len()));
    assert_eq!(out.as_ptr(), frame.as_ptr(), "two whole events were copied");
    let out = cutter.cut(frame.slice(2 * CHUNK.len()..));
    assert_eq!(out, DONE.as_bytes());
    assert_eq!(out.as_ptr(), frame[frame.len() - DONE.len()..].as_ptr());
}

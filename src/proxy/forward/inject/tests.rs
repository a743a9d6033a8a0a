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
    let rewritten = with_include_usage(br#"{"model":"m","stream":true,"messages":[]}"#);
    let json: serde_json::Value =
        serde_json::from_slice(&rewritten.unwrap_or_default()).unwrap_or_default();
    assert_eq!(json["stream_options"]["include_usage"], true);
    assert_eq!(json["model"], "m");
    let kept = br#"{"stream":true,"stream_options":{"continuous_usage_stats":true}}"#;
    let json: serde_json::Value =
        serde_json::from_slice(&with_include_usage(kept).unwrap_or_default()).unwrap_or_default();
    assert_eq!(json["stream_options"]["continuous_usage_stats"], true);
    assert_eq!(json["stream_options"]["include_usage"], true);
    assert!(with_include_usage(br#"{"stream":false}"#).is_none());
    assert!(
        with_include_usage(br#"{"stream":true,"stream_options":{"include_usage":true}}"#).is_none()
    );
    assert!(with_include_usage(b"not json").is_none());
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

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::{body, ends};
use crate::measure::dialect::members::{closed_head, opened_tail};
use crate::measure::{
    dialect::{ParseError, Parsed, Usage},
    frame::ends::{BodyEnds, Ends},
};

/// What a reading of an answer said: usage, model, id, in-band error.
type Read = (Option<Usage>, Option<String>, Option<String>, bool);

fn read(parsed: &Parsed<'_>) -> Read {
    let text =
        |n: &Option<super::Name<'_>>| n.as_ref().and_then(|n| n.to_text()).map(str::to_owned);
    (
        parsed.usage,
        text(&parsed.model),
        text(&parsed.response_id),
        parsed.error,
    )
}

/// The answer as tokenclock reads it when it keeps `cap` bytes at each
/// end, the body arriving in `piece`-byte pieces.
fn through_ends(answer: &[u8], cap: usize, piece: usize) -> Result<Read, ParseError> {
    let mut kept = BodyEnds::new(cap);
    for piece in answer.chunks(piece.max(1)) {
        kept.feed(piece);
    }
    match kept.ends() {
        Ends::Whole(whole) => body(whole).map(|p| read(&p)),
        Ends::Cut { head, tail } => ends(head, tail).map(|p| read(&p)),
    }
}

fn usage(input: u64) -> Option<Usage> {
    Some(Usage {
        input: Some(input),
        ..Usage::default()
    })
}

/// `n` vectors of `dims` numbers, as OpenAI writes `data`.
fn vectors(n: usize, dims: usize, base64: bool) -> Value {
    let vector = |i: usize| match base64 {
        // 4 bytes a float, base64: no quote, no backslash.
        true => json!("AAAgPwAAID8AAIA/+/8vPw==".repeat(dims / 6 + 1)),
        false => Value::Array(
            (0..dims)
                .map(|d| json!(((i * 31 + d) as f64 * 0.001_7).sin() / 7.0))
                .collect(),
        ),
    };
    Value::Array(
        (0..n)
            .map(|i| json!({"object": "embedding", "index": i, "embedding": vector(i)}))
            .collect(),
    )
}

/// OpenAI's order: the vectors first, `model` and `usage` after them.
fn openai(n: usize, dims: usize, base64: bool) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "object": "list",
        "data": vectors(n, dims, base64),
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 812, "total_tokens": 812},
    }))
    .expect("json")
}

/// vLLM's order: `id`, `created` and `model` before the vectors.
fn vllm(n: usize, dims: usize) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "id": "embd-5c1f0e2a9b7d4c3e",
        "object": "list",
        "created": 1_764_979_200,
        "model": "BAAI/bge-m3",
        "data": vectors(n, dims, false),
        "usage": {"prompt_tokens": 93, "total_tokens": 93, "completion_tokens": 0, "prompt_tokens_details": null},
    }))
    .expect("json")
}

#[test]
fn a_whole_answer_reads_its_usage_model_and_id() {
    let small = vllm(2, 4);
    assert_eq!(
        read(&body(&small).expect("read")),
        (
            Some(Usage {
                input: Some(93),
                output: Some(0),
                ..Usage::default()
            }),
            Some("BAAI/bge-m3".into()),
            Some("embd-5c1f0e2a9b7d4c3e".into()),
            false
        )
    );
    let base64 = openai(3, 8, true);
    let parsed = body(&base64).expect("read");
    assert!(parsed.end && !parsed.has_token());
    assert_eq!(parsed.usage, usage(812));
    // llama.cpp's own `/embeddings`: vectors only.
    assert_eq!(
        read(&body(b" [[0.1,0.2],[0.3]]").expect("read")),
        (None, None, None, false)
    );
    assert_eq!(body(b"[[0.1,").err(), Some(ParseError::Json));
    assert_eq!(body(b"\"x\"").err(), Some(ParseError::Json));
    let error = body(br#"{"error":{"message":"too long","type":"invalid_request_error"}}"#);
    assert!(error.expect("read").error);
}

/// A batch's answer of MiBs is read from its ends as it reads whole: in
/// OpenAI's order (floats, and the SDK's base64) and in vLLM's, arriving
/// in any piece size, with 4 KiB kept at each end.
#[test]
fn a_large_answer_reads_from_its_ends_as_it_reads_whole() {
    for (name, answer) in [
        ("openai floats", openai(256, 1536, false)),
        ("openai base64", openai(256, 1536, true)),
        ("vllm", vllm(128, 1024)),
    ] {
        assert!(answer.len() > 1 << 20, "{name}: {} bytes", answer.len());
        let whole = read(&body(&answer).expect("read"));
        assert!(whole.0.is_some() && whole.1.is_some(), "{name}");
        for piece in [1 << 20, 16 * 1024, 4096, 1000, 7] {
            assert_eq!(
                through_ends(&answer, 4096, piece),
                Ok(whole.clone()),
                "{name} {piece}"
            );
        }
    }
}

/// Pretty-printed, with whitespace wherever JSON allows it, and strings
/// holding quotes, backslashes and braces around the members read.
#[test]
fn whitespace_and_escapes_around_the_ends_read_the_same() {
    let vectors = "[0.5, -1e-3, 2]".repeat(2000);
    let answer = format!(
        " {{ \"id\" : \"a\\\\\" ,\n\t\"note\":\"}}\\\",\\\"usage\\\":{{\" , \"model\"\r\n:\"m\\\"1\" ,\
         \"data\" : [ {vectors:?} ] ,\n  \"x\\\\\" : [\"]\", {{\"}}\":\"\\\\\"}}] , \"usage\" : \
         {{ \"prompt_tokens\" : 7 , \"total_tokens\" : 7 }} ,\"trailer\":true }} \n"
    );
    let whole = read(&body(answer.as_bytes()).expect("whole"));
    assert_eq!(whole.0, usage(7));
    assert_eq!(whole.1.as_deref(), Some("m\"1"));
    assert_eq!(whole.2.as_deref(), Some("a\\"));
    for cap in [120, 200, 1024] {
        assert_eq!(
            through_ends(answer.as_bytes(), cap, 333),
            Ok(whole.clone()),
            "{cap}"
        );
    }
}

/// Bytes that do not end an object (a body cut in its last number, or in
/// its vectors) are not read as one; a bare array's ends hold nothing.
#[test]
fn what_does_not_end_an_object_is_not_json() {
    let answer = openai(64, 256, false);
    // Cut in `"total_tokens":812`.
    let cut = &answer[..answer.len() - 3];
    assert_eq!(through_ends(cut, 1024, 4096), Err(ParseError::Json));
    let cut = &answer[..answer.len() - 3 - answer.len() / 2];
    assert_eq!(through_ends(cut, 1024, 4096), Err(ParseError::Json));
    let mut array = b"[".to_vec();
    array.extend(std::iter::repeat_n(&b"[0.25,0.5],"[..], 1000).flatten());
    array.extend(b"[1]]");
    assert_eq!(
        through_ends(&array, 1024, 4096),
        Ok((None, None, None, false))
    );
}

/// Random JSON values: strings with quotes, backslashes, brackets and
/// non-ASCII text, numbers of every shape, nesting.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        // Floats whose text reads back as the same value.
        prop_oneof![Just(0.5), Just(-1e-3), Just(2.5e300), Just(-0.0)].prop_map(Value::from),
        "[\"\\\\{}\\[\\],:a-z é0-9\\\\n]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec(("[a-z\"\\\\]{0,4}", inner), 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn members() -> impl Strategy<Value = Map<String, Value>> {
    proptest::collection::vec(("[a-z\"\\\\{}]{0,5}", value()), 1..7)
        .prop_map(|m| m.into_iter().collect())
}

/// Where each member of a compact object's bytes begins (its `{` or the
/// `,` before its key), and its `,` or the `}` after it.
fn openers(object: &Map<String, Value>) -> Vec<usize> {
    let mut at = 0;
    let mut openers = Vec::new();
    for (key, value) in object {
        openers.push(at);
        let member = serde_json::to_vec(&json!({ key: value })).expect("json");
        at += member.len() - 1;
    }
    openers.push(at);
    openers
}

/// The members in `members`, in order.
fn part(object: &Map<String, Value>, members: std::ops::Range<usize>) -> Value {
    Value::Object(
        object
            .iter()
            .skip(members.start)
            .take(members.len())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Whatever an object holds and wherever it is cut, the last bytes
    /// read as exactly the members whose opener (`{` or `,`) they hold,
    /// and the first bytes as exactly those whose closing `,` they hold.
    #[test]
    fn the_ends_read_exactly_the_members_they_hold(object in members(), cut in any::<proptest::sample::Index>()) {
        let bytes = serde_json::to_vec(&object).expect("json");
        let at = cut.index(bytes.len() + 1);
        let openers = openers(&object);
        let n = object.len();

        let mut tail = bytes[at..].to_vec();
        let read: Value = serde_json::from_slice(opened_tail(&mut tail)).expect("an object");
        let first = openers[..n].iter().position(|&o| o >= at).unwrap_or(n);
        prop_assert_eq!(read, part(&object, first..n));

        let mut head = bytes[..at].to_vec();
        let read: Value = serde_json::from_slice(closed_head(&mut head)).expect("an object");
        // A member whose `,` is in; the last has a `}`, never read as a
        // head's.
        let complete = (1..n).take_while(|&i| openers[i] < at).count();
        prop_assert_eq!(read, part(&object, 0..complete));
    }
}

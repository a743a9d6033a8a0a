use proptest::prelude::*;

use super::{FormFields, MAX_VALUE};
use crate::measure::frame::proptest_config;

const WANTED: &[&str] = &["model", "stream", "max_completion_tokens"];

/// What the reader kept of each wanted field, as text.
fn read(content_type: &str, pieces: &[&[u8]]) -> (Vec<Option<String>>, bool) {
    let mut form = FormFields::new(content_type.as_bytes(), WANTED).expect("a form");
    for piece in pieces {
        form.feed(piece);
    }
    let values = (0..WANTED.len())
        .map(|i| {
            form.value(i)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        })
        .collect();
    (values, form.is_done())
}

fn some(v: &str) -> Option<String> {
    Some(v.to_owned())
}

/// One part: its name, whether it is a file, its content.
fn part(boundary: &str, name: &str, file: bool, content: &[u8]) -> Vec<u8> {
    let filename = if file { "; filename=\"a.wav\"" } else { "" };
    let kind = if file {
        "Content-Type: audio/wav\r\n"
    } else {
        ""
    };
    [
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"{filename}\r\n{kind}\r\n"
        )
        .as_bytes(),
        content,
        b"\r\n",
    ]
    .concat()
}

fn close(boundary: &str) -> Vec<u8> {
    format!("--{boundary}--\r\n").into_bytes()
}

/// As httpx writes the OpenAI SDK's form: the fields, then the file.
#[test]
fn the_openai_sdks_form_is_read() {
    let b = "e3b8c2f9a1d04c7b9f0e6a5d4c3b2a19";
    let body = [
        part(b, "model", false, b"openai/whisper-large-v3"),
        part(b, "stream", false, b"true"),
        part(b, "file", true, &[0u8, 13, 10, 45, 45, 255].repeat(1000)),
        close(b),
    ]
    .concat();
    let (values, done) = read(&format!("multipart/form-data; boundary={b}"), &[&body]);
    assert_eq!(
        values,
        [some("openai/whisper-large-v3"), some("true"), None]
    );
    assert!(done);
}

/// As `curl -F file=@a.wav -F model=…` writes it: the file first, its
/// bytes holding what looks like the start of a delimiter, and a quoted
/// boundary; the fields after it are read.
#[test]
fn fields_after_the_file_are_read() {
    let b = "------------------------d74496d66958873e";
    let audio = format!("RIFF\r\n--{}x\r\n--\r\r\n-", &b[..20]).repeat(50);
    let body = [
        part(b, "file", true, audio.as_bytes()),
        part(b, "model", false, b"whisper-1"),
        part(b, "max_completion_tokens", false, b"448"),
        close(b),
    ]
    .concat();
    let ct = format!("Multipart/Form-Data; charset=utf-8; boundary=\"{b}\"");
    let (values, done) = read(&ct, &[&body]);
    assert_eq!(values, [some("whisper-1"), None, some("448")]);
    assert!(done);
}

/// A value longer than `MAX_VALUE` is not kept; a file part that names a
/// wanted field is not read as one; a field given twice is the last one
/// (as the server takes it), unknown when that one is not kept.
#[test]
fn what_is_not_kept() {
    let b = "xyz";
    let long = "m".repeat(MAX_VALUE + 1);
    let body = [
        part(b, "model", false, b"short"),
        part(b, "model", false, long.as_bytes()),
        part(b, "stream", false, b"true"),
        part(b, "stream", true, b"true"),
        part(b, "max_completion_tokens", false, b"1"),
        part(b, "max_completion_tokens", false, b"2"),
        close(b),
    ]
    .concat();
    let (values, _) = read("multipart/form-data; boundary=xyz", &[&body]);
    assert_eq!(values, [None, None, some("2")]);
    let exact = "m".repeat(MAX_VALUE);
    let body = [part(b, "model", false, exact.as_bytes()), close(b)].concat();
    let (values, _) = read("multipart/form-data; boundary=xyz", &[&body]);
    assert_eq!(values[0].as_deref(), Some(exact.as_str()));
}

/// A preamble, transport padding after a delimiter, headers in any case
/// and an epilogue are read past; a head with something after its
/// delimiter on the line stops the reading, keeping what was read.
#[test]
fn preamble_padding_and_broken_heads() {
    let body = b"This is a preamble.\r\n--b \t\r\ncontent-disposition: FORM-DATA; NAME=model\r\n\r\nm1\r\n--b--\r\nepilogue\r\n--b\r\n";
    let (values, done) = read("multipart/form-data; boundary=b", &[body]);
    assert_eq!(values, [some("m1"), None, None]);
    assert!(done);
    let body = b"--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm1\r\n--bx\r\nContent-Disposition: form-data; name=\"stream\"\r\n\r\ntrue\r\n--b--";
    let (values, done) = read("multipart/form-data; boundary=b", &[body]);
    assert_eq!(values, [some("m1"), None, None]);
    assert!(!done);
    let endless = [&b"--b\r\nX: "[..], &[b'a'; 5000]].concat();
    let (values, done) = read("multipart/form-data; boundary=b", &[&endless]);
    assert_eq!((values, done), (vec![None, None, None], false));
}

/// A `;` or an escaped quote inside a quoted file name is part of the
/// name: the part stays a file, whatever its name spells.
#[test]
fn quoted_parameters_hold_what_they_quote() {
    let body = b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x; name=stream; \\\"y.wav\"\r\n\r\ntrue\r\n--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b--\r\n";
    let (values, done) = read("multipart/form-data; boundary=b", &[body]);
    assert_eq!(values, [some("m"), None, None]);
    assert!(done);
}

#[test]
fn only_multipart_form_data_with_a_valid_boundary_is_read() {
    for ct in [
        "application/json",
        "multipart/form-data",
        "multipart/mixed; boundary=b",
        "multipart/form-data; boundary=",
        "multipart/form-data; boundary=\"\"",
    ] {
        assert!(FormFields::new(ct.as_bytes(), WANTED).is_none(), "{ct}");
    }
    let long = format!("multipart/form-data; boundary={}", "b".repeat(71));
    assert!(FormFields::new(long.as_bytes(), WANTED).is_none());
    let ok = format!("multipart/form-data; boundary={}", "b".repeat(70));
    assert!(FormFields::new(ok.as_bytes(), WANTED).is_some());
}

/// Content made of the bytes a delimiter is made of, so that partial
/// delimiters fall at every cut.
fn tricky() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop::sample::select(vec![b'\r', b'\n', b'-', b'b', b'q', 0u8]),
        0..200,
    )
}

proptest! {
    #![proptest_config(proptest_config(512))]

    /// However the body is cut, the fields read are those of the whole
    /// body, and those it holds.
    #[test]
    fn any_cut_reads_the_same_fields(
        order in Just([0usize, 1, 2, 3, 4]).prop_shuffle(),
        model in "[a-zA-Z0-9/._-]{1,40}",
        // Around `MAX_VALUE`: kept up to it, unknown past it.
        cap in "[0-9]{250,260}",
        audio in tricky(),
        cuts in prop::collection::vec(0usize..2000, 0..12),
    ) {
        let b = "bq";
        // A form's boundary is one its content does not hold.
        let framed = [&b"\r\n"[..], &audio].concat();
        prop_assume!(memchr::memmem::find(&framed, b"\r\n--bq").is_none());
        let parts = [
            part(b, "model", false, model.as_bytes()),
            part(b, "stream", false, b"false"),
            part(b, "file", true, &audio),
            part(b, "prompt", false, &audio),
            part(b, "max_completion_tokens", false, cap.as_bytes()),
        ];
        let body: Vec<u8> = order
            .iter()
            .flat_map(|&i| parts[i].clone())
            .chain(close(b))
            .collect();
        let ct = "multipart/form-data; boundary=bq";
        let whole = read(ct, &[&body]);
        let kept = (cap.len() <= MAX_VALUE).then(|| cap.clone());
        prop_assert_eq!(&whole.0, &vec![Some(model.clone()), some("false"), kept]);
        prop_assert!(whole.1);
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        at.sort_unstable();
        let mut pieces = Vec::new();
        let mut start = 0;
        for end in at.into_iter().chain([body.len()]) {
            pieces.push(&body[start..end]);
            start = end;
        }
        prop_assert_eq!(read(ct, &pieces), whole);
    }
}

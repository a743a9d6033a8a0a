//! The fuzz targets of `tests/fuzz/` on stable, as CI runs them: every
//! committed corpus and regression input, the dialect fixtures as seeds,
//! then a seeded mutation loop of a few seconds per target through the very
//! same target functions the libFuzzer binaries call (`cargo fuzz` needs
//! nightly; see the README's Development section for the long runs).

#[path = "../fuzz/src/targets.rs"]
mod targets;

use std::{
    fs,
    path::{Path, PathBuf},
    time::Duration,
};

use tokio::time::Instant;

use crate::common;

/// One target: its name (its corpus directory) and function.
type Target = (&'static str, fn(&[u8]));

const TARGETS: [Target; 6] = [
    ("sse", targets::sse),
    ("ndjson", targets::ndjson),
    ("dialect", targets::dialect),
    ("request", targets::request),
    ("h1", targets::h1),
    ("coding", targets::coding),
];

/// Mutations tried per target, at most; the loop also stops after
/// `BUDGET`, so a slow machine runs fewer and still ends in time.
const MUTATIONS: u64 = 200_000;
const BUDGET: Duration = Duration::from_secs(5);

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz")
}

/// The files of `dir`, sorted; none when it does not exist.
fn files(dir: &Path) -> Vec<Vec<u8>> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    paths
        .iter()
        .filter(|p| p.is_file())
        .map(|p| fs::read(p).expect("a readable corpus file"))
        .collect()
}

/// Seeds made from the dialect fixtures: the option byte that makes each
/// target read a fixture as what it is, then its bytes.
fn fixture_seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dialects");
    let mut seeds = Vec::new();
    let mut names: Vec<_> = fs::read_dir(&dir)
        .expect("tests/fixtures/dialects")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    names.sort();
    for path in names {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let bytes = fs::read(&path).expect("a readable fixture");
        let framing = match path.extension().and_then(|e| e.to_str()) {
            Some("sse") => 0,
            Some("ndjson") => 1,
            _ => 2,
        };
        let dialect = dialect_index(name.trim_start_matches("body_"));
        let (low, high) = (dialect & 7, dialect >> 3);
        // Largest limit (bits 5-6), complete body (bit 7 clear).
        let opt = match target {
            "sse" | "ndjson" => 3,
            "dialect" => {
                let opt = low | framing << 3 | 3 << 5;
                seeds.push([&[opt, high][..], &bytes].concat());
                continue;
            }
            // Each coding, SSE or whole JSON as the fixture is (NDJSON
            // fixtures as whole bodies).
            "coding" => {
                let whole = u8::from(framing != 0) << 5;
                for (c, coding) in targets::CODINGS.iter().enumerate() {
                    let opt = c as u8 | low << 2 | whole | high << 6;
                    seeds.push([&[opt][..], &compress(coding, &bytes)].concat());
                }
                continue;
            }
            _ => continue,
        };
        seeds.push([&[opt][..], &bytes].concat());
    }
    seeds
}

/// `bytes` compressed with `coding`, the compressor flushed every 100
/// bytes as a streaming server flushes per event.
fn compress(coding: &str, bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let flushed = |w: &mut dyn Write| {
        for piece in bytes.chunks(100) {
            w.write_all(piece)
                .and_then(|()| w.flush())
                .expect("compress");
        }
    };
    match coding {
        "gzip" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            flushed(&mut e);
            e.finish().expect("compress")
        }
        "deflate" => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
            flushed(&mut e);
            e.finish().expect("compress")
        }
        "br" => {
            let mut e = brotli::CompressorWriter::new(Vec::new(), 4096, 4, 18);
            flushed(&mut e);
            e.into_inner()
        }
        _ => {
            let mut out = Vec::with_capacity(zstd_safe::compress_bound(bytes.len()));
            zstd_safe::compress(&mut out, bytes, 3).expect("compress");
            out
        }
    }
}

/// The index in `Dialect::ALL` of a fixture named after its family.
fn dialect_index(name: &str) -> u8 {
    let families = [
        ("openai_chat", 0),
        ("vllm_chat", 0),
        ("sglang_chat", 0),
        ("openai_completions", 1),
        // vLLM's token-in/token-out `/inference/v1/generate`.
        ("vllm_tokens", 1),
        ("openai_responses", 2),
        ("anthropic", 3),
        ("tgi", 4),
        // Before `ollama`, which it starts with.
        ("ollama_embed", 10),
        ("ollama", 5),
        ("llamacpp", 6),
        // SGLang's native `/generate` (its OpenAI route is `sglang_chat`).
        ("sglang", 7),
        ("openai_audio", 8),
        ("vllm_audio", 8),
        ("openai_embeddings", 9),
        ("vllm_embeddings", 9),
        // vLLM's `/rerank` and `/score`.
        ("rerank", 11),
        // vLLM's `/classify` and `/pooling`.
        ("pooling", 12),
    ];
    families
        .iter()
        .find(|(prefix, _)| name.starts_with(prefix))
        .map(|&(_, i)| i)
        .unwrap_or_else(|| panic!("{name}: a fixture of no read dialect"))
}

/// Request bodies for the `request` target: what clients send, and what
/// the issue lists as hostile.
fn request_seeds() -> Vec<Vec<u8>> {
    let deep = format!(
        "{{\"model\":\"m\",\"x\":{}{}}}",
        "[".repeat(2000),
        "]".repeat(2000)
    );
    let bodies: [&[u8]; 7] = [
        b"{\"model\":\"m\",\"stream\":true,\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        b"{\"model\":42,\"stream\":\"yes\",\"stream_options\":{\"include_usage\":true}}",
        b"{\"model\":\"a\",\"model\":\"b\",\"stream\":true,\"stream\":false}",
        b"{\"model\":\"m\",\"options\":{\"num_predict\":5},\"prompt\":[\"a\",{\"text\":\"b\"}]}",
        b"{\"inputs\":\"x\",\"parameters\":{\"max_new_tokens\":3}}",
        b"not json at all \xff\xfe",
        deep.as_bytes(),
    ];
    // POST, largest cap (bits 4-5), chat dialect (bits 0-2).
    let mut seeds: Vec<Vec<u8>> = bodies.iter().map(|b| [&[0x30][..], b].concat()).collect();
    // Forms (bit 6), as the OpenAI SDK and curl send speech to text's, and
    // cut short, with the smallest cap, which a form does not heed.
    let audio = "RIFF\r\n--fuzz\r\r\n-".repeat(8);
    let sdk = common::form(
        "fuzzform",
        &[
            ("model", None, b"whisper-1"),
            ("stream", None, b"true"),
            ("file", Some("a.wav"), audio.as_bytes()),
        ],
    );
    let mut curl = common::form(
        "fuzzform",
        &[
            ("file", Some("a;b.wav"), audio.as_bytes()),
            ("max_completion_tokens", None, b"448"),
        ],
    );
    // Its closing delimiter without the line break after it.
    curl.truncate(curl.len() - 2);
    for form in [&sdk, &curl, &sdk[..sdk.len() / 2].to_vec()] {
        seeds.push([&[0x70][..], form].concat());
        seeds.push([&[0x40][..], form].concat());
    }
    seeds
}

/// A small xorshift: the loop is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes that matter to the framers and to JSON.
const INTERESTING: &[u8] = b"\n\r:{}[]\",\\ 0e-.\xef\xbb\xbf\x00\xff";

/// One input from `seeds`, changed in one to four ways.
fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut input = seeds[rng.below(seeds.len())].clone();
    for _ in 0..=rng.below(4) {
        let at = rng.below(input.len() + 1);
        match rng.below(6) {
            0 if at < input.len() => input[at] ^= 1 << rng.below(8),
            1 => input.insert(at, INTERESTING[rng.below(INTERESTING.len())]),
            2 => {
                let end = (at + rng.below(32)).min(input.len());
                input.drain(at..end);
            }
            3 => {
                let end = (at + rng.below(64)).min(input.len());
                let copy = input[at..end].to_vec();
                let to = rng.below(input.len() + 1);
                input.splice(to..to, copy);
            }
            4 => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len());
                let end = (from + rng.below(256)).min(other.len());
                input.splice(at..at, other[from..end].iter().copied());
            }
            _ if !input.is_empty() => input[0] = rng.next() as u8,
            _ => input.push(rng.next() as u8),
        }
    }
    input
}

/// Runs `target` on `input`; on a panic, writes the input where the README
/// says (to be minimized and added under `tests/fuzz/regressions/`) first.
fn run_or_keep(name: &str, target: fn(&[u8]), input: &[u8]) {
    let outcome = std::panic::catch_unwind(|| target(input));
    if let Err(panic) = outcome {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let kept = dir.join(format!("fuzz-smoke-crash-{name}"));
        let written = fs::write(&kept, input).is_ok();
        eprintln!(
            "{name}: crash input written to {} ({written})",
            kept.display()
        );
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn the_corpus_and_regressions_pass_every_target() {
    for (name, target) in TARGETS {
        let dir = fuzz_dir();
        let inputs = [
            files(&dir.join("corpus").join(name)),
            files(&dir.join("regressions").join(name)),
            fixture_seeds(name),
        ]
        .concat();
        for input in &inputs {
            target(input);
        }
        eprintln!("{name}: {} inputs replayed", inputs.len());
    }
}

#[test]
fn a_seeded_mutation_run_finds_nothing() {
    for (name, target) in TARGETS {
        let dir = fuzz_dir();
        let mut seeds = [files(&dir.join("corpus").join(name)), fixture_seeds(name)].concat();
        if name == "request" {
            seeds.extend(request_seeds());
        }
        seeds.push(vec![0]);
        let mut rng = Rng(0x5EED ^ name.len() as u64);
        let started = Instant::now();
        let mut runs = 0;
        while runs < MUTATIONS && started.elapsed() < BUDGET {
            let input = mutate(&mut rng, &seeds);
            run_or_keep(name, target, &input);
            runs += 1;
        }
        eprintln!("{name}: {runs} mutated inputs in {:?}", started.elapsed());
        assert!(runs > 0, "{name}: no input ran");
    }
}

//! zstd: its encoder for the tests, its frames, flushes and windows.

use super::*;

/// How a zstd test body is cut into frames or flushes.
#[derive(Clone, Copy, Debug)]
pub(super) enum Flush {
    /// One frame, flushed only at its end.
    Never,
    /// One frame, flushed every this many bytes (`ZSTD_e_flush`).
    Every(usize),
    /// A frame of its own for every this many bytes.
    Frames(usize),
}

/// A zstd compressor, as a server streams with it.
pub(crate) struct ZstdEncoder(zstd_safe::CCtx<'static>);

impl ZstdEncoder {
    /// At `level`, with a window of 2^`log` bytes.
    pub(crate) fn new(level: i32, log: u32) -> Self {
        use zstd_safe::CParameter;
        let mut cctx = zstd_safe::CCtx::create();
        cctx.set_parameter(CParameter::CompressionLevel(level))
            .expect("level");
        cctx.set_parameter(CParameter::WindowLog(log))
            .expect("window");
        Self(cctx)
    }

    /// Runs `op` until it has nothing left to write: what it wrote.
    fn each(
        &mut self,
        mut op: impl FnMut(&mut Self, &mut zstd_safe::OutBuffer<'_, Vec<u8>>) -> bool,
    ) -> Vec<u8> {
        let mut body = Vec::new();
        loop {
            let mut buffer = Vec::with_capacity(1 << 17);
            let mut out = zstd_safe::OutBuffer::around(&mut buffer);
            let more = op(self, &mut out);
            body.extend_from_slice(&buffer);
            if !more {
                return body;
            }
        }
    }

    /// `piece` compressed; what is ready to go out.
    pub(crate) fn write(&mut self, piece: &[u8]) -> Vec<u8> {
        let mut input = zstd_safe::InBuffer::around(piece);
        self.each(|e, out| {
            e.0.compress_stream(out, &mut input).expect("compress");
            input.pos() < piece.len()
        })
    }

    /// Flushes the frame (`ZSTD_e_flush`), or ends it (`ZSTD_e_end`).
    pub(crate) fn flush(&mut self, end: bool) -> Vec<u8> {
        self.each(|e, out| {
            let left = match end {
                true => e.0.end_stream(out),
                false => e.0.flush_stream(out),
            };
            left.expect("flush") > 0
        })
    }
}

/// `plain` in zstd at `level` with a window of 2^`log` bytes, flushed or
/// framed as `flush` says.
pub(super) fn zst(plain: &[u8], level: i32, log: u32, flush: Flush) -> Vec<u8> {
    let mut encoder = ZstdEncoder::new(level, log);
    let every = match flush {
        Flush::Never => plain.len().max(1),
        Flush::Every(n) | Flush::Frames(n) => n,
    };
    let mut body = Vec::new();
    for piece in plain.chunks(every) {
        body.extend(encoder.write(piece));
        match flush {
            Flush::Never => {}
            Flush::Every(_) => body.extend(encoder.flush(false)),
            Flush::Frames(_) => body.extend(encoder.flush(true)),
        }
    }
    if !matches!(flush, Flush::Frames(_)) || plain.is_empty() {
        body.extend(encoder.flush(true));
    }
    body
}

/// A server that flushes its zstd frame after each event, or sends each
/// event as a frame of its own: each event comes out with its own frame.
#[test]
fn a_flushed_or_framed_zstd_event_comes_out_with_its_own_frame() {
    let events: Vec<String> = (0..50)
        .map(|i| format!("data: {{\"i\":{i}}}\n\n"))
        .collect();
    for framed in [false, true] {
        let mut inflate = Inflate::new(Coding::Zstd).expect("a decoder");
        let mut encoder = ZstdEncoder::new(3, 20);
        for (i, event) in events.iter().enumerate() {
            let mut frame = encoder.write(event.as_bytes());
            frame.extend(encoder.flush(framed));
            let mut out = Vec::new();
            inflate
                .feed(&frame, &mut |b| out.extend_from_slice(b))
                .expect("decode");
            assert_eq!(out, event.as_bytes(), "framed {framed}, event {i}");
        }
        // A framed stream may end after any frame; a flushed one once its
        // frame is ended.
        if !framed {
            assert!(inflate.finish(&mut |_| {}).is_err(), "its frame is open");
            let end = encoder.flush(true);
            inflate.feed(&end, &mut |_| {}).expect("the frame's end");
        }
        assert!(
            inflate.finish(&mut |_| {}).is_ok(),
            "framed {framed}: ends well"
        );
    }
}

#[test]
fn corrupt_cut_trailing_or_too_wide_zstd_fails_without_panicking() {
    broken_variants_fail(Coding::Zstd, &zst(&text(200), 3, 20, Flush::Never));
    // A frame that declares a 16 MiB window (more than the 8 MiB HTTP
    // decoders need support) is refused, not decoded into it.
    let wide = zst(&text(400_000), 3, 24, Flush::Never);
    assert!(!inflate(Coding::Zstd, &wide, 4096).1, "a 16 MiB window");
}

/// A zstd decoder holds the window its frame declares (libzstd allocates
/// it whole at the frame's start): little for a small one, 8 MiB and its
/// buffers for the widest accepted; and no more as the stream goes on.
#[test]
fn a_zstd_decoder_holds_its_window_and_no_more() {
    let plain = text(100_000);
    for (log, least, most) in [
        (16, 1 << 16, 400 * 1024),
        (23, 8 << 20, (8 << 20) + 600 * 1024),
    ] {
        let body = zst(&plain, 3, log, Flush::Every(64 * 1024));
        let largest = most_held(Coding::Zstd, &body, plain.len());
        assert!(
            (least..=most).contains(&largest),
            "window 2^{log}: held {largest} bytes"
        );
    }
}

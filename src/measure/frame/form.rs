//! The small fields of a `multipart/form-data` request body (RFC 7578),
//! read as it streams upstream.
//!
//! A speech-to-text request is a form: an audio file (up to 25 MB at
//! OpenAI, and vLLM's `VLLM_MAX_AUDIO_CLIP_FILESIZE_MB`) and a few text
//! fields, `model` and `stream` among them, in any order (the OpenAI SDKs
//! send the fields first, `curl -F` in the order it is given). A capped
//! copy of the whole body, as JSON bodies are read, would copy the audio
//! only to find four short values, or find none past the cap. So the form
//! is read in place instead: each part's content is searched for the next
//! delimiter (a `memmem` search, across the pieces the body arrives in),
//! and only the values of the fields asked for are kept, each up to
//! [`MAX_VALUE`] bytes. A form it cannot read (a head over [`MAX_HEAD`]
//! bytes, bytes after a delimiter that end no line) stops the reading, and
//! what was read before stays.

use bytes::Bytes;
use memchr::memmem;

/// The longest value kept (a model name, a flag, a number); a longer one
/// is not read at all.
pub const MAX_VALUE: usize = 256;

/// The longest part head read (its `Content-Disposition` and
/// `Content-Type` lines).
pub const MAX_HEAD: usize = 4096;

/// Reads the fields named in `wanted` out of a form.
pub struct FormFields {
    wanted: &'static [&'static str],
    /// `\r\n--` and the boundary: what ends each part.
    delimiter: Box<[u8]>,
    finder: memmem::Finder<'static>,
    state: State,
    /// How many bytes of the delimiter the data read so far ends with.
    matched: usize,
    /// The part head being read.
    head: Vec<u8>,
    /// The current part, when it names a wanted field: its index, and its
    /// value while it is text and short enough (`None` once it is not: the
    /// field is then unknown, as the server will take this last part).
    value: Option<(usize, Option<Vec<u8>>)>,
    /// Each wanted field's value, by its index in `wanted`: the last part
    /// that named it (as Starlette's form, which vLLM reads, keeps it).
    values: Vec<Option<Bytes>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// In a part's content (or the preamble), looking for the delimiter.
    Content,
    /// After a delimiter: the rest of its line, then the part's head.
    Head,
    /// After the closing delimiter.
    Done,
    /// Not a form it can read.
    Broken,
}

// === impl FormFields ===

impl FormFields {
    /// A reader for a body of `content_type`, when it is
    /// `multipart/form-data` with a valid boundary (RFC 2046: 1 to 70
    /// characters, no CR or LF).
    pub fn new(content_type: &[u8], wanted: &'static [&'static str]) -> Option<Self> {
        let boundary = boundary(content_type)?;
        let delimiter: Box<[u8]> = [&b"\r\n--"[..], boundary].concat().into();
        let finder = memmem::Finder::new(&delimiter).into_owned();
        Some(Self {
            wanted,
            delimiter,
            finder,
            state: State::Content,
            // The body's first delimiter has no line break before it: the
            // body is read as if it followed one.
            matched: 2,
            head: Vec::new(),
            value: None,
            values: vec![None; wanted.len()],
        })
    }

    /// Reads the next piece of the body.
    pub fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let used = match self.state {
                State::Content => match self.content(data) {
                    Some(used) => {
                        self.end_part();
                        self.state = State::Head;
                        used
                    }
                    None => data.len(),
                },
                State::Head => self.part_head(data),
                State::Done | State::Broken => data.len(),
            };
            data = &data[used..];
        }
    }

    /// The value of `wanted[index]`, if a part held it.
    pub fn value(&self, index: usize) -> Option<&[u8]> {
        self.values.get(index)?.as_deref()
    }

    /// Whether the form ended (its closing delimiter was read).
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Reads content up to the next delimiter: how many bytes of `data`
    /// that took, through the delimiter, if it was found.
    fn content(&mut self, data: &[u8]) -> Option<usize> {
        let d = &self.delimiter;
        if self.matched > 0 {
            let need = d.len() - self.matched;
            let n = need.min(data.len());
            if data[..n] == d[self.matched..self.matched + n] {
                if n == need {
                    self.matched = 0;
                    return Some(n);
                }
                self.matched += n;
                return None;
            }
            // Content after all. Only the delimiter's first byte is a CR
            // (a boundary holds none), so no later part of what was held
            // can begin it again.
            push(&mut self.value, &d[..self.matched]);
            self.matched = 0;
        }
        if let Some(at) = self.finder.find(data) {
            push(&mut self.value, &data[..at]);
            return Some(at + d.len());
        }
        // A tail that may begin the delimiter starts at its last CR.
        let from = data.len().saturating_sub(d.len() - 1);
        let tail = data[from..].iter().rposition(|&b| b == b'\r');
        match tail.map(|i| from + i) {
            Some(t) if d.starts_with(&data[t..]) => {
                push(&mut self.value, &data[..t]);
                self.matched = data.len() - t;
            }
            _ => push(&mut self.value, data),
        }
        None
    }

    /// Reads the rest of a delimiter's line and the part's head: how many
    /// bytes of `data` that took.
    fn part_head(&mut self, data: &[u8]) -> usize {
        let old = self.head.len();
        let take = data.len().min(MAX_HEAD - old);
        self.head.extend_from_slice(&data[..take]);
        if self.head.starts_with(b"--") {
            self.state = State::Done;
            return data.len();
        }
        let from = old.saturating_sub(3);
        match memmem::find(&self.head[from..], b"\r\n\r\n") {
            Some(at) => {
                let end = from + at;
                self.start_part(end);
                end + 4 - old
            }
            None if self.head.len() >= MAX_HEAD => {
                self.state = State::Broken;
                data.len()
            }
            None => take,
        }
    }

    /// Starts the part whose head is `head[..end]`: the rest of the
    /// delimiter's line, then one header per line.
    fn start_part(&mut self, end: usize) {
        let head = std::mem::take(&mut self.head);
        let mut lines = head[..end].split(|&b| b == b'\n');
        // What follows the boundary on its line may only be blanks
        // (RFC 2046's transport padding).
        let padding = lines.next().unwrap_or_default();
        if !padding.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')) {
            self.state = State::Broken;
            return;
        }
        let field = lines
            .filter_map(|line| disposition(line.strip_suffix(b"\r").unwrap_or(line)))
            .next_back();
        self.value = field.and_then(|(name, file)| {
            let index = self.wanted.iter().position(|w| w.as_bytes() == name)?;
            Some((index, (!file).then(Vec::new)))
        });
        self.head = head;
        self.head.clear();
        self.state = State::Content;
    }

    /// Keeps the value of the part that ended, if it named a wanted field
    /// (a file, or a value too long to keep, leaves the field unknown).
    fn end_part(&mut self) {
        if let Some((index, value)) = self.value.take() {
            if let Some(slot) = self.values.get_mut(index) {
                *slot = value.map(Bytes::from);
            }
        }
    }
}

/// Adds content to the value being kept; a value over [`MAX_VALUE`] is not
/// kept at all.
fn push(value: &mut Option<(usize, Option<Vec<u8>>)>, bytes: &[u8]) {
    if let Some((_, kept)) = value {
        match kept {
            Some(v) if v.len() + bytes.len() <= MAX_VALUE => v.extend_from_slice(bytes),
            _ => *kept = None,
        }
    }
}

/// The boundary of a `multipart/form-data` content type.
fn boundary(content_type: &[u8]) -> Option<&[u8]> {
    let mut params = params(content_type);
    let media = params.next()?.trim_ascii();
    if !media.eq_ignore_ascii_case(b"multipart/form-data") {
        return None;
    }
    let boundary = params.find_map(|p| param(p, b"boundary"))?;
    let valid =
        (1..=70).contains(&boundary.len()) && !boundary.iter().any(|&b| b == b'\r' || b == b'\n');
    valid.then_some(boundary)
}

/// The field a `Content-Disposition: form-data` line names, and whether the
/// part is a file (it has a `filename`).
fn disposition(line: &[u8]) -> Option<(&[u8], bool)> {
    let colon = line.iter().position(|&b| b == b':')?;
    let (name, value) = (line[..colon].trim_ascii(), &line[colon + 1..]);
    if !name.eq_ignore_ascii_case(b"content-disposition") {
        return None;
    }
    let mut params = params(value);
    if !params
        .next()?
        .trim_ascii()
        .eq_ignore_ascii_case(b"form-data")
    {
        return None;
    }
    let (mut field, mut file) = (None, false);
    for p in params {
        if let Some(name) = param(p, b"name") {
            field = Some(name);
        } else if param(p, b"filename").is_some() || param(p, b"filename*").is_some() {
            file = true;
        }
    }
    Some((field?, file))
}

/// The `;`-separated parts of a header value, a `;` inside a quoted string
/// (a file named `take;2.wav`) not separating.
fn params(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    let (mut quoted, mut escaped) = (false, false);
    value.split(move |&b| {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            b';' if !quoted => return true,
            _ => {}
        }
        false
    })
}

/// The value of `p` when it is the parameter `key` (`key=value` or
/// `key="value"`; a quoted value ends at its first unescaped quote, and
/// is given as sent, escapes and all).
fn param<'a>(p: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let eq = p.iter().position(|&b| b == b'=')?;
    if !p[..eq].trim_ascii().eq_ignore_ascii_case(key) {
        return None;
    }
    let value = p[eq + 1..].trim_ascii();
    let Some(quoted) = value.strip_prefix(b"\"") else {
        return Some(value);
    };
    let mut escaped = false;
    let end = quoted.iter().position(|&b| {
        let end = b == b'"' && !escaped;
        escaped = b == b'\\' && !escaped;
        end
    })?;
    Some(&quoted[..end])
}

#[cfg(test)]
mod tests;

//! `tokenclock report`: offline summaries of record files, like AIPerf's console summary.
//!
//! Reads one or more JSONL record files (malformed lines are skipped and
//! reported), groups the records (all together, by model or by endpoint)
//! and prints, per group, avg/min/p50/p90/p99/max of TTFT, TTFO, ITL, TPOT,
//! E2E, input and output tokens; request and output-token throughput;
//! goodput per SLO; and the input × output token map. Percentiles are
//! exact nearest-rank (see [`crate::tools::stats`]).
//!
//! With a [`Select`] it prints instead the whole timeline of each record
//! of one request or trace (`--request-id`, `--trace-id`: [`request`]), or
//! one line per record that missed some objectives (`--missed`: [`missed`]).

mod figures;
mod missed;
pub(crate) mod render;
mod request;
mod slo;

use std::{
    collections::BTreeMap,
    fs::File,
    io::{self, BufRead, BufReader},
    path::{Path, PathBuf},
    str::FromStr,
};

pub use self::{
    figures::{Figures, Goodput, Grid, Metric, Tally},
    request::Select,
    slo::SloSpec,
};
use crate::export::records::Record;

/// `text` as a terminal may show it: a value a client or server chose (a
/// model name, a response id, a finish reason) with its control characters
/// escaped as Rust writes them (`\u{1b}`, `\r`, `\n`), as the access log
/// does, so that a record cannot move the cursor, retitle the terminal, or
/// forge a line of the report.
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    // Control characters, and those Rust does not print as themselves
    // (bidi overrides such as U+202E, zero-width ones, line separators):
    // quotes and backslashes, which it escapes too, are shown as they are.
    let hidden = |c: char| {
        c.is_control() || (!matches!(c, '"' | '\'' | '\\') && c.escape_debug().nth(1).is_some())
    };
    match text.chars().any(hidden) {
        false => text.into(),
        true => text
            .chars()
            .map(|c| match hidden(c) {
                true => c.escape_debug().to_string(),
                false => c.to_string(),
            })
            .collect::<String>()
            .into(),
    }
}

/// Malformed lines reported one by one per file; the rest are only counted.
const MALFORMED_SHOWN: usize = 5;

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A record file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A `--slo` objective could not be understood.
    #[error("--slo `{objective}`: {why}")]
    Slo {
        /// The objective as given.
        objective: String,
        /// Why it is wrong.
        why: String,
    },
    /// No record matched `--request-id` / `--trace-id`.
    #[error("no record with {what} in {records} records")]
    NoMatch {
        /// The field and value looked for.
        what: String,
        /// Records read.
        records: usize,
    },
    /// `--format csv` asked of one request's timeline.
    #[error(
        "--format csv does not apply to --request-id / --trace-id / --missed (use text or json)"
    )]
    SelectCsv,
}

/// How records are grouped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    /// One group per model (`unknown` when absent).
    Model,
    /// One group per endpoint (dialect).
    Endpoint,
}

impl FromStr for GroupBy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "model" => Ok(Self::Model),
            "endpoint" => Ok(Self::Endpoint),
            other => Err(format!("expected `model` or `endpoint`, got `{other}`")),
        }
    }
}

/// The output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// An aligned table per group, for people.
    #[default]
    Text,
    /// One JSON object.
    Json,
    /// One row per group × metric, with a header row.
    Csv,
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            "csv" => Ok(Self::Csv),
            other => Err(format!("expected `text`, `json` or `csv`, got `{other}`")),
        }
    }
}

/// What to report on.
#[derive(Clone, Debug, Default)]
pub struct ReportArgs {
    /// Record files (JSONL), read in order.
    pub files: Vec<PathBuf>,
    /// SLOs like `ttft:500ms tpot:50ms`; empty: the results in the records.
    pub slos: Vec<String>,
    /// Grouping; `None`: one group, `all`.
    pub by: Option<GroupBy>,
    /// Output format.
    pub format: Format,
    /// Only these records, each as its whole timeline; `None`: the summary.
    pub select: Option<Select>,
}

/// A finished report.
#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    /// The report, for stdout.
    pub stdout: String,
    /// Malformed lines and the like, one message per line, for stderr.
    pub warnings: Vec<String>,
}

/// Reads the files and renders the report.
pub fn run(args: &ReportArgs) -> Result<Output, ReportError> {
    let slos = args
        .slos
        .iter()
        .map(|s| SloSpec::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut warnings = Vec::new();
    let failed = |path: &PathBuf| {
        let path = path.clone();
        move |source| ReportError::Read { path, source }
    };
    if let Some(select) = &args.select {
        // Only the selected records are kept, each with its line as written:
        // a lookup in the retention's 600 MB holds one, not all.
        let (mut chosen, mut total) = (Vec::new(), 0);
        for path in &args.files {
            read_each(path, &mut warnings, |record, line| {
                total += 1;
                if select.matches(&record) {
                    chosen.push((record, String::from_utf8_lossy(line).into_owned()));
                }
            })
            .map_err(failed(path))?;
        }
        let stdout = selected(chosen, total, select, args.format)?;
        return Ok(Output { stdout, warnings });
    }
    let mut records = Vec::new();
    for path in &args.files {
        read(path, &mut records, &mut warnings).map_err(failed(path))?;
    }
    let figures = figures(&records, args.by, &slos);
    let stdout = match args.format {
        Format::Text => render::text(&figures, records.len()),
        Format::Json => render::json(&figures),
        Format::Csv => render::csv(&figures),
    };
    Ok(Output { stdout, warnings })
}

/// The selected records (each with its line, as written), of `total`
/// read: text timelines, or the records' lines themselves.
fn selected(
    kept: Vec<(Record, String)>,
    total: usize,
    select: &Select,
    format: Format,
) -> Result<String, ReportError> {
    if format == Format::Csv {
        return Err(ReportError::SelectCsv);
    }
    let mut chosen: Vec<&Record> = kept.iter().map(|(r, _)| r).collect();
    if let Select::Missed(spec) = select {
        chosen = missed::worst_first(spec, &chosen);
    }
    if chosen.is_empty() {
        return Err(ReportError::NoMatch {
            what: select.describe(),
            records: total,
        });
    }
    match format {
        Format::Text => Ok(match select {
            Select::Missed(spec) => missed::text(spec, &chosen),
            Select::RequestId(_) | Select::TraceId(_) => request::text(&chosen),
        }),
        // The lines as the proxy wrote them, byte for byte (a record read
        // and written again would round its floats its own way), in the
        // order chosen.
        Format::Json | Format::Csv => Ok(chosen
            .iter()
            .filter_map(|&r| kept.iter().find(|(k, _)| std::ptr::eq(k, r)))
            .map(|(_, line)| match line.ends_with('\n') {
                true => line.clone(),
                // The file's last line, without its newline.
                false => format!("{line}\n"),
            })
            .collect()),
    }
}

/// The figures of each group, groups in name order.
pub fn figures(records: &[Record], by: Option<GroupBy>, slos: &[SloSpec]) -> Vec<Figures> {
    let mut groups: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in records {
        let key = match by {
            None => "all",
            Some(GroupBy::Model) => r.model.as_deref().unwrap_or("unknown"),
            Some(GroupBy::Endpoint) => &r.endpoint,
        };
        groups.entry(key).or_default().push(r);
    }
    groups
        .iter()
        .map(|(name, records)| Figures::of(name, records, slos))
        .collect()
}

/// Appends the records of one file; malformed lines become warnings.
pub fn read(path: &Path, into: &mut Vec<Record>, warnings: &mut Vec<String>) -> io::Result<()> {
    read_each(path, warnings, |record, _| into.push(record))
}

/// The first bytes of a gzip stream (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Hands each record of one file to `each`, with its line as written;
/// malformed lines become warnings. A gzip-compressed file (a rotated log
/// `logrotate` compressed) is read decompressed.
fn read_each(
    path: &Path,
    warnings: &mut Vec<String>,
    mut each: impl FnMut(Record, &[u8]),
) -> io::Result<()> {
    let mut plain = BufReader::new(File::open(path)?);
    let mut reader: Box<dyn BufRead> = if plain.fill_buf()?.starts_with(&GZIP_MAGIC) {
        Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(plain)))
    } else {
        Box::new(plain)
    };
    let (mut line, mut number, mut malformed) = (Vec::new(), 0usize, 0usize);
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        number += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Record>(&line) {
            Ok(record) => each(record, &line),
            Err(e) => {
                malformed += 1;
                if malformed <= MALFORMED_SHOWN {
                    warnings.push(format!(
                        "{}:{number}: malformed record: {e}",
                        path.display()
                    ));
                }
            }
        }
    }
    if malformed > MALFORMED_SHOWN {
        warnings.push(format!(
            "{}: {malformed} malformed lines skipped",
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;

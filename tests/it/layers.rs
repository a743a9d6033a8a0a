//! The layering of `src/` (README, Design), checked on the sources: every
//! `crate::…` and `super::…` path, in `use` items and inline, is resolved to
//! the top-level folder it names, and an import against the allowed
//! direction fails the test with the file and the path. The measurement core
//! is also checked for I/O: it names no socket, file, process, thread, task
//! or runtime API, and no crate of the proxy or the exporters.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

/// A top-level part of the crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Layer {
    /// `lib.rs`: `run`, `termination` and the re-exports.
    Root,
    Config,
    Proxy,
    Measure,
    Export,
    Tools,
}

impl Layer {
    fn of_module(name: &str) -> Option<Self> {
        Some(match name {
            "config" => Self::Config,
            "proxy" => Self::Proxy,
            "measure" => Self::Measure,
            "export" => Self::Export,
            "tools" => Self::Tools,
            _ => return None,
        })
    }

    /// Whether code in `self` may name something in `to`.
    fn may_import(self, to: Layer) -> bool {
        use Layer::*;
        self == to
            || match self {
                Measure => false,
                Config => to == Measure,
                Proxy | Export => matches!(to, Root | Config | Measure | Proxy | Export),
                Root => matches!(to, Config | Proxy | Measure | Export),
                Tools => true,
            }
    }
}

/// Paths the measurement core must not name outside its tests: I/O, tasks,
/// threads, and the crates of the proxy and the exporters.
const CORE_FORBIDDEN: &[&str] = &[
    "std::fs",
    "std::net",
    "std::process",
    "std::thread",
    "std::env",
    "tokio::fs",
    "tokio::io",
    "tokio::net",
    "tokio::process",
    "tokio::signal",
    "tokio::spawn",
    "tokio::sync",
    "tokio::task",
    "hyper::",
    "hyper_util",
    "hyper_rustls",
    "rustls",
    "prometheus",
    "tracing_subscriber",
    "clap",
    "toml",
];

/// One import against the layering.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Violation {
    file: String,
    path: String,
}

/// The module path of a source file, from `src/`: `src/measure/frame/sse.rs`
/// is `measure::frame::sse`, a `mod.rs` is its folder.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        match last.as_str() {
            "mod.rs" | "lib.rs" => {}
            file => parts.push(file.trim_end_matches(".rs").to_owned()),
        }
    }
    parts
}

/// The top-level names a path after `crate::` starts with: one, or each
/// item of a `{…}` group.
fn heads(after: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let Some(group) = after.strip_prefix('{') else {
        return vec![ident(after)];
    };
    let (mut depth, mut items, mut start) = (0usize, Vec::new(), 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(ident(&group[start..i]));
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(ident(&group[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    items.retain(|i| !i.is_empty());
    items
}

/// The layers a source file names, with the paths that name them.
fn imports(module: &[String], text: &str) -> Vec<(Layer, String)> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("crate::") {
        if text[..at].ends_with('$') {
            continue;
        }
        for head in heads(&text[at + "crate::".len()..]) {
            let layer = Layer::of_module(&head).unwrap_or(Layer::Root);
            found.push((layer, format!("crate::{head}")));
        }
    }
    for (at, _) in text.match_indices("super::") {
        // Count the whole chain once, from its first `super`.
        if text[..at].ends_with("super::") {
            continue;
        }
        let mut rest = &text[at..];
        let mut depth = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            depth += 1;
            rest = r;
        }
        // Inline `mod tests` make this stricter than rustc, never looser.
        if depth < module.len() {
            continue;
        }
        for head in heads(rest) {
            let layer = Layer::of_module(&head).unwrap_or(Layer::Root);
            found.push((layer, format!("{}{head}", "super::".repeat(depth))));
        }
    }
    found
}

/// Everything before the file's `#[cfg(test)]` items: the core's tests may
/// run a runtime; its code may not.
fn code_part(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |i| &text[..i])
}

fn check_file(rel: &Path, text: &str) -> Vec<Violation> {
    let module = module_of(rel);
    let Some(from) = module
        .first()
        .and_then(|m| Layer::of_module(m))
        .or_else(|| (rel == Path::new("lib.rs")).then_some(Layer::Root))
    else {
        return Vec::new();
    };
    let mut bad: Vec<Violation> = imports(&module, text)
        .into_iter()
        .filter(|(to, _)| !from.may_import(*to))
        .map(|(_, path)| Violation {
            file: rel.display().to_string(),
            path,
        })
        .collect();
    let is_test_file = rel.iter().any(|p| p == "tests" || p == "tests.rs");
    if from == Layer::Measure && !is_test_file {
        let code = code_part(text);
        for path in CORE_FORBIDDEN {
            if mentions(code, path) {
                bad.push(Violation {
                    file: rel.display().to_string(),
                    path: (*path).to_owned(),
                });
            }
        }
    }
    bad
}

/// Whether `code` names `path`, written out (`std::fs::File`) or from a
/// group (`use std::{fs, …}`).
fn mentions(code: &str, path: &str) -> bool {
    if code.contains(path) {
        return true;
    }
    let Some((krate, item)) = path.split_once("::") else {
        return false;
    };
    let item = item.trim_end_matches(':');
    code.match_indices(&format!("{krate}::{{")).any(|(at, _)| {
        heads(&code[at + krate.len() + 2..])
            .iter()
            .any(|h| h == item)
    })
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn check_tree(src: &Path) -> (usize, BTreeSet<Violation>) {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut bad = BTreeSet::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let rel = file.strip_prefix(src).expect("a file under src");
        bad.extend(check_file(rel, &text));
    }
    (files.len(), bad)
}

#[test]
fn src_follows_the_layering() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (files, bad) = check_tree(&src);
    assert!(files > 100, "only {files} source files found under src/");
    assert!(
        bad.is_empty(),
        "imports against the layering (README, Design):\n{}",
        bad.iter()
            .map(|v| format!("  src/{}: {}", v.file, v.path))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The checker itself: each kind of violation is caught, each allowed import
/// passes.
#[test]
fn the_checker_catches_each_kind_of_violation() {
    let flagged = |file: &str, text: &str| !check_file(Path::new(file), text).is_empty();
    // The core reaching out, written every way a path can be.
    assert!(flagged("measure/timeline.rs", "use crate::config::Limits;"));
    assert!(flagged(
        "measure/timeline.rs",
        "use crate::{\n    measure::dialect::Dialect,\n    export::metrics::Metrics,\n};"
    ));
    assert!(flagged(
        "measure/exchange/mod.rs",
        "fn f() { crate::proxy::forward::Forward::new(); }"
    ));
    assert!(flagged("measure/slo.rs", "use super::super::tools::load;"));
    assert!(flagged("measure/slo.rs", "use crate::termination;"));
    // The core doing I/O.
    assert!(flagged("measure/observe.rs", "use std::{fs, io};"));
    assert!(flagged(
        "measure/observe.rs",
        "fn f() { tokio::spawn(async {}); }"
    ));
    assert!(flagged(
        "measure/dialect/mod.rs",
        "use hyper::body::Incoming;"
    ));
    // Tools imported from the product.
    assert!(flagged("proxy/forward.rs", "use crate::tools::sim::Sim;"));
    assert!(flagged(
        "export/metrics/mod.rs",
        "use crate::{tools::report};"
    ));
    assert!(flagged(
        "config/mod.rs",
        "use crate::proxy::health::READY_WINDOW;"
    ));
    // What is allowed.
    assert!(!flagged(
        "measure/timeline.rs",
        "use crate::measure::dialect::Dialect;"
    ));
    assert!(!flagged(
        "measure/frame/sse.rs",
        "use super::ndjson; use std::io::Write;"
    ));
    assert!(!flagged(
        "measure/observe.rs",
        "use tokio::time::Instant;\n#[cfg(test)]\nmod tests { fn f() { tokio::spawn(async {}); } }"
    ));
    assert!(!flagged(
        "config/mod.rs",
        "use crate::measure::read::ReadSettings;"
    ));
    assert!(!flagged(
        "export/admin.rs",
        "use crate::{proxy::health::Health, config::Config};"
    ));
    assert!(!flagged(
        "tools/demo/mod.rs",
        "use crate::{termination, proxy::server::Bound};"
    ));
}

//! The model a request is labelled with. The client's name wins: it is what
//! allowlists, SLO globs and dashboards are written against, and servers
//! answer with dated names (`gpt-4o-mini-2024-07-18`) or file paths
//! (llama.cpp: `/models/blobs/sha256-…`) that would split one model into
//! several series or put a host path into Prometheus.

/// The label of a model named only by the response: a path-like value is
/// reduced to its last path segment, anything else is kept.
///
/// Path-like: it holds a `/` or `\` and starts with one or with a drive
/// letter (`C:`), or it ends in `.gguf` or `.bin`. `meta-llama/Llama-3-8B`
/// is a model name, not a path.
pub(super) fn label_of_response(model: &str) -> String {
    if !is_path(model) {
        return model.to_owned();
    }
    let last = model
        .rsplit(['/', '\\'])
        .find(|segment| !segment.is_empty())
        .unwrap_or(model);
    last.to_owned()
}

fn is_path(model: &str) -> bool {
    let bytes = model.as_bytes();
    let separated = model.contains(['/', '\\']);
    let rooted = matches!(bytes.first(), Some(b'/' | b'\\'))
        || matches!(bytes, [letter, b':', ..] if letter.is_ascii_alphabetic());
    let lower_ends = |suffix: &str| {
        model.len() >= suffix.len()
            && model.as_bytes()[model.len() - suffix.len()..]
                .eq_ignore_ascii_case(suffix.as_bytes())
    };
    (separated && rooted) || lower_ends(".gguf") || lower_ends(".bin")
}

#[cfg(test)]
mod tests {
    use super::label_of_response;

    #[test]
    fn paths_become_their_file_name() {
        for (sent, label) in [
            (
                "/Users/me/.ollama/models/blobs/sha256-6a0746a1ec1a",
                "sha256-6a0746a1ec1a",
            ),
            (
                "/models/qwen2.5-7b-instruct-q4_k_m.gguf",
                "qwen2.5-7b-instruct-q4_k_m.gguf",
            ),
            ("models/7B/ggml-model-q4_0.GGUF", "ggml-model-q4_0.GGUF"),
            (
                r"C:\models\llama-3-8b.Q4_K_M.gguf",
                "llama-3-8b.Q4_K_M.gguf",
            ),
            ("D:/weights/pytorch_model.bin", "pytorch_model.bin"),
            ("/srv/models/llama/", "llama"),
            ("tinyllama.gguf", "tinyllama.gguf"),
        ] {
            assert_eq!(label_of_response(sent), label, "{sent}");
        }
    }

    #[test]
    fn model_names_are_kept() {
        for name in [
            "gpt-4o-mini-2024-07-18",
            "meta-llama/Llama-3.1-8B-Instruct",
            "Qwen/Qwen3-0.6B",
            "claude-sonnet-4-5",
            "llama3.2:1b",
            "",
        ] {
            assert_eq!(label_of_response(name), name);
        }
    }
}

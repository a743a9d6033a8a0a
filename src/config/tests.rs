use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    File::parse(text, "test.toml")?.validate()
}

fn error(text: &str) -> String {
    match parse(text) {
        Ok(_) => panic!("expected an error for {text:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_shipped_example_is_complete_and_valid() {
    let text = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/tokenclock.toml"
    ));
    let file = File::parse(text, "tokenclock.toml").expect("example parses");
    let config = file.clone().validate().expect("example validates");
    assert_eq!(config.upstream.url(), "http://127.0.0.1:8000");
    // Every key the example sets equals the built-in default, so the
    // example documents the defaults; `upstream` is the only required key.
    let defaults = File {
        upstream: file.upstream.clone(),
        ..File::default()
    };
    assert_eq!(file.to_toml(), defaults.to_toml());
    // Every key of the config appears in the example.
    let rendered = toml::to_string(&File::default()).unwrap_or_default();
    for line in rendered.lines().filter(|l| l.contains(" = ")) {
        let key = line.split('=').next().unwrap_or_default().trim();
        if key.is_empty() || key.starts_with('[') {
            continue; // blank lines and table headers
        }
        assert!(
            text.contains(&format!("\n{key} = ")),
            "example lacks `{key}`"
        );
    }
}

#[test]
fn defaults_are_the_documented_ones() {
    let c = parse("upstream = \"http://127.0.0.1:8000\"").expect("valid");
    assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(c.metrics_listen.to_string(), "127.0.0.1:9464");
    assert_eq!(c.timeouts.connect, Duration::from_secs(5));
    // No limit on the upstream's answer: the client's own timeout says how
    // long it waits for a long generation or a deep queue.
    assert_eq!(c.timeouts.response_header, None);
    assert_eq!(c.timeouts.idle, None);
    assert_eq!(c.timeouts.header_read, Duration::from_secs(30));
    assert_eq!(c.pool.idle_timeout, Duration::from_secs(4));
    assert_eq!(c.shutdown_grace, Duration::from_secs(30));
    assert!((1..=4).contains(&c.worker_threads));
    assert!(!c.preserve_host);
}

#[test]
fn upstream_health_path_is_a_path_and_its_timeout_fits_the_window() {
    let c = parse("upstream = \"http://127.0.0.1:8000\"").expect("valid");
    assert!(c.upstream_health.path.is_none(), "default: the TCP probe");
    assert_eq!(c.upstream_health.timeout, Duration::from_secs(1));
    let c = parse("upstream = \"http://a:1\"\nupstream_health_path = \"/health?full=1\"\n")
        .expect("valid");
    let path = c.upstream_health.path.expect("set");
    assert_eq!(path.as_str(), "/health?full=1");
    for bad in ["health", "http://elsewhere/health", "", "/he alth"] {
        let e = error(&format!(
            "upstream = \"http://a:1\"\nupstream_health_path = \"{bad}\"\n"
        ));
        assert!(e.starts_with("upstream_health_path: "), "{bad}: {e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
    for bad in ["0s", "11s"] {
        let e = error(&format!(
            "upstream = \"http://a:1\"\nupstream_health_timeout = \"{bad}\"\n"
        ));
        assert!(e.starts_with("upstream_health_timeout: "), "{bad}: {e}");
    }
}

#[test]
fn template_opens_reasoning_takes_model_globs_and_names_an_empty_one() {
    let c = parse("upstream = \"http://a:1\"\ntemplate_opens_reasoning = [\"*R1*\", \"qwq\"]\n")
        .expect("valid");
    assert_eq!(&*c.reading.template_opens_reasoning, ["*R1*", "qwq"]);
    let defaults = parse("upstream = \"http://a:1\"").expect("valid");
    assert!(defaults.reading.template_opens_reasoning.is_empty());
    let e = error("upstream = \"http://a:1\"\ntemplate_opens_reasoning = [\"a\", \" \"]\n");
    assert!(e.starts_with("template_opens_reasoning[1]: "), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
}

#[test]
fn the_capture_budget_holds_at_least_one_whole_copy() {
    let c = parse("upstream = \"http://a:1\"").expect("valid");
    assert_eq!(c.reading.capture_budget.limit(), 64 << 20);
    let large = parse("upstream = \"http://a:1\"\nrequest_capture_bytes = 100000000\n")
        .expect("a config written before the key still starts");
    assert_eq!(large.reading.capture_budget.limit(), 100_000_000);
    let e = error("upstream = \"http://a:1\"\nrequest_capture_bytes = 2000\nrequest_capture_total_bytes = 1999\n");
    assert!(
        e.starts_with("request_capture_total_bytes: must be at least request_capture_bytes (2000)"),
        "{e}"
    );
    parse(
        "upstream = \"http://a:1\"\nrequest_capture_bytes = 0\nrequest_capture_total_bytes = 0\n",
    )
    .expect("reading nothing needs no budget");
}

#[test]
fn unknown_key_is_named() {
    let e = error("upstream = \"http://a:1\"\nconect_timeout = \"1s\"\n");
    assert!(e.contains("conect_timeout"), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
}

#[test]
fn bad_duration_is_named() {
    let e = error("upstream = \"http://a:1\"\nidle_timeout = \"5 parsecs\"\n");
    assert!(e.starts_with("idle_timeout: invalid duration"), "{e}");
    let e = error("upstream = \"http://a:1\"\nconnect_timeout = \"0s\"\n");
    assert!(
        e.starts_with("connect_timeout: must be greater than zero"),
        "{e}"
    );
    // "0s" is not how to ask for no limit: leaving the key out is.
    let e = error("upstream = \"http://a:1\"\nidle_timeout = \"0s\"\n");
    assert!(
        e.starts_with(
            "idle_timeout: must be greater than zero and at most 365d (leave it out for no limit)"
        ),
        "{e}"
    );
    let c = parse("upstream = \"http://a:1\"\nresponse_header_timeout = \"10m\"\n").expect("valid");
    assert_eq!(c.timeouts.response_header, Some(Duration::from_secs(600)));
}

#[test]
fn bad_upstream_is_named() {
    for bad in [
        "ftp://a:1",
        "127.0.0.1:8000",
        "http://a:1/v1",
        "http://u:p@a:1",
        "http://",
    ] {
        let e = error(&format!("upstream = \"{bad}\""));
        assert!(e.starts_with("upstream: "), "{bad}: {e}");
    }
    assert!(error("listen = \"127.0.0.1:1\"").starts_with("upstream: required"));
}

#[test]
fn bad_address_and_syntax_are_reported_on_one_line() {
    let e = error("upstream = \"http://a:1\"\nlisten = \"localhost\"\n");
    assert!(e.starts_with("listen: "), "{e}");
    let e = error("upstream = \"http://a:1\"\nlisten = \n");
    assert!(e.starts_with("test.toml:2:"), "{e}");
    assert!(!e.contains('\n'), "{e}");
}

/// A key given twice is named, as every other bad key is, and its value
/// is not shown (it may be a secret).
#[test]
fn a_duplicate_key_is_named_without_its_value() {
    for (text, key) in [
        (
            "upstream = \"http://a:1\"\nlisten = \"127.0.0.1:1\"\nlisten = \"127.0.0.1:2\"\n",
            "listen",
        ),
        (
            "upstream = \"http://a:1\"\n[records]\npath = \"a\"\n[records]\npath = \"b\"\n",
            "records",
        ),
        (
            "upstream = \"http://a:1\"\n[otel]\nendpoint = \"http://c:4318\"\n\
             headers = { authorization = \"Bearer s3cret\", authorization = \"Bearer s3cret2\" }\n",
            "authorization",
        ),
        (
            "upstream = \"http://a:1\"\n\"listen\" = \"127.0.0.1:1\"\nlisten = \"127.0.0.1:2\"\n",
            "listen",
        ),
    ] {
        let e = error(text);
        assert!(e.contains(&format!("duplicate key `{key}`")), "{e}");
        assert!(!e.contains("s3cret") && !e.contains('\n'), "{e}");
    }
}

#[test]
fn overrides_win_and_name_their_origin() {
    let mut file =
        File::parse("upstream = \"http://a:1\"\nlisten = \"127.0.0.1:1\"", "t").expect("ok");
    let overrides = Overrides {
        listen: Some(Override {
            value: "127.0.0.1:2".into(),
            origin: Origin::Flag("--listen"),
        }),
        upstream: Some(Override {
            value: "https://api.example.com".into(),
            origin: Origin::Env("TOKENCLOCK_UPSTREAM"),
        }),
        ..Overrides::default()
    };
    file.apply(&overrides).expect("valid overrides");
    let config = file.validate().expect("valid");
    assert_eq!(config.listen.to_string(), "127.0.0.1:2");
    assert_eq!(config.upstream.port(), 443);

    let mut file = File::default();
    let bad = Overrides {
        metrics_listen: Some(Override {
            value: "nope".into(),
            origin: Origin::Env("TOKENCLOCK_METRICS_LISTEN"),
        }),
        ..Overrides::default()
    };
    let e = file.apply(&bad).map(|_| ()).map_err(|e| e.to_string());
    let e = e.err().unwrap_or_default();
    assert!(e.starts_with("metrics_listen: "), "{e}");
    assert!(e.ends_with("(from TOKENCLOCK_METRICS_LISTEN)"), "{e}");
}

#[test]
fn connection_limits_and_deadlines_have_defaults_and_are_checked() {
    let c = parse("upstream = \"http://127.0.0.1:8000\"").expect("valid");
    assert_eq!(c.timeouts.client_idle, Duration::from_secs(90));
    assert_eq!(c.timeouts.client_send, Duration::from_secs(60));
    assert_eq!(c.timeouts.keep_alive_interval, Duration::from_secs(30));
    assert_eq!(c.timeouts.keep_alive_timeout, Duration::from_secs(20));
    assert_eq!(c.connections.max, 4096);
    assert_eq!(c.connections.metrics_max, 64);
    for (line, key) in [
        ("max_connections = 0", "max_connections: must be at least 1"),
        (
            "metrics_max_connections = 0",
            "metrics_max_connections: must be at least 1",
        ),
        (
            "client_idle_timeout = \"0s\"",
            "client_idle_timeout: must be greater than zero",
        ),
        (
            "http2_keep_alive_interval = \"0s\"",
            "http2_keep_alive_interval: must be greater than zero",
        ),
        (
            "client_send_timeout = \"0s\"",
            "client_send_timeout: must be greater than zero",
        ),
        (
            "client_send_timeout = \"18446744073709551615s\"",
            "client_send_timeout: must be at most 365d",
        ),
        (
            "client_idle_timeout = \"366d\"",
            "client_idle_timeout: must be at most 365d",
        ),
        (
            "idle_timeout = \"400d\"",
            "idle_timeout: must be greater than zero and at most 365d",
        ),
    ] {
        let e = error(&format!("upstream = \"http://a:1\"\n{line}\n"));
        assert!(e.starts_with(key), "{e}");
    }
}

#[test]
fn worker_threads_zero_is_one_per_usable_core_up_to_four() {
    use super::file::default_worker_threads;
    assert_eq!(default_worker_threads(1), 1, "a pod limited to one CPU");
    assert_eq!(default_worker_threads(2), 2);
    assert_eq!(
        default_worker_threads(64),
        4,
        "a 64-core node without a CPU limit"
    );
    assert_eq!(default_worker_threads(0), 1);
    let explicit = parse("upstream = \"http://a:1\"\nworker_threads = 16").expect("valid");
    assert_eq!(explicit.worker_threads, 16, "an explicit count is kept");
    // 100,000 passed, then starting them took the machine's PIDs before
    // any listener or signal handler, without a word.
    let e = error("upstream = \"http://a:1\"\nworker_threads = 100000");
    assert!(e.starts_with("worker_threads: must be at most 1024"), "{e}");
    let most = parse("upstream = \"http://a:1\"\nworker_threads = 1024").expect("valid");
    assert_eq!(most.worker_threads, 1024);
}

/// An SLO's name must be a name, and its limits ones a request can meet.
#[test]
fn an_slo_needs_a_name_and_limits_above_zero() {
    let text = |slo: &str| format!("upstream = \"http://a:1\"\n[[slo]]\n{slo}\n");
    for (slo, want) in [
        // Was "the start of another SLO's name", with no other SLO.
        (
            "name = \"\"\nttft = \"1s\"",
            "slo[0].name: `` must be non-empty",
        ),
        (
            "name = \"a\"\nttft = \"0s\"",
            "slo[0].ttft: must be greater than zero",
        ),
        (
            "name = \"a\"\nttft = \"1s\"\ne2e = \"0ms\"",
            "slo[0].e2e: must be greater than zero",
        ),
    ] {
        let e = error(&text(slo));
        assert!(e.starts_with(want), "{slo}: {e}");
    }
}

/// Two SLOs of one name: the error names the second, the one to rename.
#[test]
fn a_duplicate_slo_name_is_named_where_it_repeats() {
    let slo = |name: &str| format!("[[slo]]\nname = \"{name}\"\nttft = \"1s\"\n");
    let text = format!(
        "upstream = \"http://a:1\"\n{}{}{}",
        slo("a"),
        slo("b"),
        slo("a")
    );
    let e = error(&text);
    assert!(
        e.starts_with("slo[2].name: `a` is slo[0]'s name already"),
        "{e}"
    );
}

//! The deployment examples stay valid: their tokenclock configuration
//! passes `check-config`, their commands use flags the binary has, the
//! Kubernetes example's shutdown order holds, and the container image's
//! command and the README's build and run commands are the binary's.

use std::{path::Path, process::Command};

use crate::common::{self, process::BIN};

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The indented block under `tokenclock.toml: |` in a ConfigMap.
fn config_map_block(yaml: &str) -> String {
    let mut lines = yaml
        .lines()
        .skip_while(|l| !l.trim_end().ends_with("tokenclock.toml: |"));
    lines.next();
    lines
        .take_while(|l| l.starts_with("    ") || l.is_empty())
        .map(|l| l.get(4..).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

fn check(name: &str, text: &str) -> std::process::Output {
    let file = format!("tokenclock-deploy-{}-{name}.toml", std::process::id());
    let path = std::env::temp_dir().join(file);
    std::fs::write(&path, text).expect("write");
    Command::new(BIN)
        .arg("check-config")
        .arg(&path)
        .output()
        .expect("run")
}

#[test]
fn kubernetes_sidecar_config_is_valid() {
    let yaml = read("deploy/kubernetes/vllm-sidecar.yaml");
    let block = config_map_block(&yaml);
    assert!(
        block.contains("upstream = "),
        "found the ConfigMap block:\n{block}"
    );
    let out = check("kubernetes", &block);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let effective = String::from_utf8_lossy(&out.stdout);
    let grace = effective
        .lines()
        .find_map(|l| l.strip_prefix("shutdown_grace = \""))
        .and_then(|v| v.strip_suffix("s\""))
        .and_then(|v| v.parse::<u64>().ok())
        .expect("shutdown_grace in whole seconds");
    // Shutdown order (README, Operations: Kubernetes): tokenclock drains
    // while vLLM's preStop sleep keeps it serving, and both end before
    // Kubernetes sends SIGKILL.
    let sleep = after(&yaml, "exec: { command: [\"sleep\", \"")
        .split('"')
        .next()
        .and_then(|v| v.parse::<u64>().ok())
        .expect("vLLM's preStop sleep");
    let term = yaml
        .lines()
        .find_map(|l| {
            l.trim_start()
                .strip_prefix("terminationGracePeriodSeconds: ")
        })
        .and_then(|v| v.trim().parse::<u64>().ok())
        .expect("terminationGracePeriodSeconds");
    assert!(
        grace < sleep && sleep < term,
        "need shutdown_grace ({grace} s) < vLLM's preStop sleep ({sleep} s) < terminationGracePeriodSeconds ({term} s)"
    );
    let vllm = yaml.split("- name: tokenclock").next().expect("containers");
    assert!(vllm.contains("- name: vllm") && vllm.contains("preStop:"));
}

/// The text after the first `needle` in `text`.
fn after<'a>(text: &'a str, needle: &str) -> &'a str {
    let (_, rest) = text
        .split_once(needle)
        .unwrap_or_else(|| panic!("{needle:?} not found"));
    rest
}

/// The exec-form (JSON array) arguments of the last `instruction` of the
/// Dockerfile (the runtime stage's).
fn dockerfile_exec(dockerfile: &str, instruction: &str) -> Vec<String> {
    let prefix = format!("{instruction} ");
    let line = dockerfile
        .lines()
        .rfind(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {instruction} in deploy/Dockerfile"));
    serde_json::from_str(&line[prefix.len()..])
        .unwrap_or_else(|e| panic!("{instruction} is not a JSON array: {e}"))
}

/// The value after `flag` in `args`.
fn flag<'a>(args: &'a [String], flag: &str) -> &'a str {
    let at = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("no {flag} in {args:?}"));
    args.get(at + 1).expect("flag value")
}

/// The image's ENTRYPOINT and CMD, run as the container runs them, serve
/// the Kubernetes example's config from the path the manifest mounts it at.
#[tokio::test]
async fn dockerfile_command_serves_the_manifest_config() {
    let dockerfile = read("deploy/Dockerfile");
    let yaml = read("deploy/kubernetes/vllm-sidecar.yaml");
    assert_eq!(dockerfile_exec(&dockerfile, "ENTRYPOINT"), ["tokenclock"]);
    let cmd = dockerfile_exec(&dockerfile, "CMD");
    assert_eq!(cmd.first().map(String::as_str), Some("serve"));
    // The manifest's args are the CMD, and its ConfigMap lands at --config.
    let args = serde_json::to_string(&cmd)
        .expect("json")
        .replace(',', ", ");
    assert!(
        yaml.contains(&format!("args: {args}")),
        "manifest args are not {args}"
    );
    let config = std::path::Path::new(flag(&cmd, "--config"));
    let mount = format!(
        "mountPath: {}, readOnly: true",
        config.parent().expect("dir").display()
    );
    assert!(yaml.contains(&mount), "no ConfigMap volume with {mount}");
    let key = config.file_name().expect("name").to_string_lossy();
    assert!(
        yaml.contains(&format!("  {key}: |")),
        "no ConfigMap key {key}"
    );
    for port in ["8080", "9464"] {
        assert!(yaml.contains(&format!("containerPort: {port} ")));
    }

    let file =
        std::env::temp_dir().join(format!("tokenclock-deploy-{}-cmd.toml", std::process::id()));
    std::fs::write(&file, config_map_block(&yaml)).expect("write");
    let mut command = std::process::Command::new(BIN);
    command.args(cmd.iter().map(|a| {
        if a.as_str() == config.to_str().expect("utf-8") {
            file.to_str().expect("utf-8")
        } else {
            a.as_str()
        }
    }));
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("TOKENCLOCK_")) {
        command.env_remove(key);
    }
    // Only the addresses differ from the container: the environment wins
    // over the file, and 0.0.0.0:8080 may be taken on a test machine.
    command
        .env("TOKENCLOCK_LISTEN", "127.0.0.1:0")
        .env("TOKENCLOCK_METRICS_LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "info");
    let started = common::process::launch(command);
    let log = started.log.join("\n");
    assert!(
        log.contains("127.0.0.1:8000"),
        "not in front of vLLM's port:\n{log}"
    );
    let mut served = started.drain();
    served.sigterm();
    let status = served.child.exit().await;
    std::fs::remove_file(&file).expect("remove");
    assert!(status.success(), "{status}");
}

/// The shell command of the README line that starts with `start` in its
/// "Container image" section, continuation lines joined.
fn readme_command(readme: &str, start: &str) -> Vec<String> {
    let section = after(readme, "### Container image");
    let mut text = String::new();
    for line in section.lines().skip_while(|l| !l.starts_with(start)) {
        match line.strip_suffix('\\') {
            Some(head) => text.push_str(head),
            None => {
                text.push_str(line);
                break;
            }
        }
    }
    assert!(!text.is_empty(), "no {start:?} command in the README");
    text.split_whitespace()
        .map(|w| w.trim_matches('"').to_owned())
        .collect()
}

/// The README's build and run commands use deploy/Dockerfile, tag the crate's
/// version (the manifest's image), publish the exposed ports, mount the
/// config where CMD reads it, and give a config that check-config accepts
/// with both listeners on 0.0.0.0 (or the published ports reach nothing).
#[test]
fn readme_container_commands_match_the_image() {
    let readme = read("README.md");
    let dockerfile = read("deploy/Dockerfile");
    let image = format!("tokenclock:{}", env!("CARGO_PKG_VERSION"));

    let build = readme_command(&readme, "podman build ");
    assert_eq!(
        build,
        [
            "podman",
            "build",
            "-f",
            "deploy/Dockerfile",
            "-t",
            image.as_str(),
            "."
        ]
    );
    let yaml = read("deploy/kubernetes/vllm-sidecar.yaml");
    for (name, text) in [("deploy/Dockerfile", &dockerfile), ("the manifest", &yaml)] {
        assert!(
            text.contains(&build.join(" ")),
            "{name} does not document `{}`",
            build.join(" ")
        );
    }
    assert!(
        yaml.contains(&format!("image: {image}\n")),
        "the manifest's image is not {image}"
    );

    let run = readme_command(&readme, "podman run ");
    let at = run
        .iter()
        .position(|a| *a == image)
        .expect("the image in podman run");
    assert!(
        run[at + 1..].is_empty(),
        "arguments after the image replace CMD: {run:?}"
    );
    let options = &run[2..at];
    assert!(options.iter().any(|o| o == "--read-only"));
    let values = |name: &str| -> Vec<&str> {
        options
            .windows(2)
            .filter(|w| w[0] == name)
            .map(|w| w[1].as_str())
            .collect()
    };
    let exposed: Vec<&str> = dockerfile
        .lines()
        .rfind(|l| l.starts_with("EXPOSE "))
        .expect("EXPOSE")["EXPOSE ".len()..]
        .split_whitespace()
        .collect();
    let published: Vec<&str> = values("-p")
        .iter()
        .map(|p| p.rsplit(':').next().expect("port"))
        .collect();
    assert_eq!(published, exposed);

    let cmd = dockerfile_exec(&dockerfile, "CMD");
    let volume = values("-v");
    let [volume] = volume.as_slice() else {
        panic!("one -v: {volume:?}")
    };
    let parts: Vec<&str> = volume.split(':').collect();
    assert_eq!(parts.get(1).copied(), Some(flag(&cmd, "--config")));
    assert_eq!(parts.get(2).copied(), Some("ro"));
    let source = parts[0]
        .strip_prefix("$PWD/")
        .expect("a file of the repository");
    let mut check = Command::new(BIN);
    check
        .arg("check-config")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(source));
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("TOKENCLOCK_")) {
        check.env_remove(key);
    }
    for env in values("-e") {
        let (key, value) = env.split_once('=').expect("KEY=VALUE");
        check.env(key, value);
    }
    let out = check.output().expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let effective = String::from_utf8_lossy(&out.stdout);
    for port in exposed {
        assert!(
            effective.contains(&format!("listen = \"0.0.0.0:{port}\"")),
            "no listener on 0.0.0.0:{port}:\n{effective}"
        );
    }
}

#[test]
fn systemd_unit_runs_a_real_command() {
    let unit = read("deploy/systemd/tokenclock.service");
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let args: Vec<&str> = exec.split_whitespace().skip(1).collect();
    assert_eq!(args, ["serve", "--config", "/etc/tokenclock.toml"]);
    // RUST_LOG would win over log_filter, which `systemctl reload` (its
    // ExecReload) then could not change.
    let rust_log = unit
        .lines()
        .any(|l| l.starts_with("Environment") && l.contains("RUST_LOG"));
    assert!(!rust_log, "the unit sets RUST_LOG");
    // The config it points at is the shipped example, which is valid.
    let out = check("systemd", &read("config/tokenclock.toml"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

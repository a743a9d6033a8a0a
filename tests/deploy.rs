//! The deployment examples stay valid: their tokenclock configuration
//! passes `check-config`, and their commands use flags the binary has.

use std::{path::Path, process::Command};

const BIN: &str = env!("CARGO_BIN_EXE_tokenclock");

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
    assert!(effective.contains("shutdown_grace = \"50s\""));
    // The drain must finish before Kubernetes sends SIGKILL.
    assert!(yaml.contains("terminationGracePeriodSeconds: 60"));
    assert!(yaml.contains("args: [\"serve\", \"--config\", \"/etc/tokenclock/tokenclock.toml\"]"));
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
    // The config it points at is the shipped example, which is valid.
    let out = check("systemd", &read("config/tokenclock.toml"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

"""Checks the wiring of deploy/compose.yaml without a container engine.

Usage: compose_check.py DEPLOY_DIR [TOKENCLOCK_BINARY]

Fails (exit 1, one line per problem) unless: the five services are there;
every bind mount's source exists; the build context and Dockerfile exist;
every image is pinned to a tag other than latest (the local build excepted);
Prometheus scrapes the tokenclock service on the port its metrics listener
binds and loads the rule files mounted beside its config; Grafana's data
source points at the Prometheus service's port and its dashboard provider at
the folder the dashboard is mounted in; the load generator targets the
tokenclock service's listener; and, given the binary, `tokenclock
check-config` accepts tokenclock's settings from the service's environment.
"""

import os
import subprocess
import sys
import tempfile

import yaml

SERVICES = {"sim", "tokenclock", "load", "prometheus", "grafana"}


def port_of(addr):
    return addr.rsplit(":", 1)[1]


def mounts(service, deploy):
    """(source path on the host, target path in the container) of each bind mount."""
    out = []
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        out.append((os.path.normpath(os.path.join(deploy, source)), target))
    return out


def check(deploy, binary):
    problems = []
    with open(os.path.join(deploy, "compose.yaml")) as f:
        compose = yaml.safe_load(f)
    services = compose.get("services", {})
    if set(services) != SERVICES:
        problems.append(f"services {sorted(services)}, not {sorted(SERVICES)}")
        return problems
    for name, service in services.items():
        image = service.get("image", "")
        local = image == "tokenclock:local"
        if not local and (":" not in image or image.endswith(":latest")):
            problems.append(f"{name}: image {image!r} is not pinned to a tag")
        if local and "build" not in service and not any(
            "build" in s and s.get("image") == image for s in services.values()
        ):
            problems.append(f"{name}: {image} is built by no service")
        for source, _ in mounts(service, deploy):
            if not os.path.exists(source):
                problems.append(f"{name}: mount source {source} does not exist")
        build = service.get("build")
        if build:
            context = os.path.normpath(os.path.join(deploy, build["context"]))
            if not os.path.isfile(os.path.join(context, build["dockerfile"])):
                problems.append(f"{name}: no {build['dockerfile']} in {context}")

    env = services["tokenclock"].get("environment", {})
    listen, metrics = env.get("TOKENCLOCK_LISTEN", ""), env.get("TOKENCLOCK_METRICS_LISTEN", "")
    if not listen.startswith("0.0.0.0:") or not metrics.startswith("0.0.0.0:"):
        problems.append("tokenclock: the listeners must bind 0.0.0.0 to be reached from other services")
    upstream = env.get("TOKENCLOCK_UPSTREAM", "")
    sim_listen = services["sim"]["command"][services["sim"]["command"].index("--listen") + 1]
    if upstream != f"http://sim:{port_of(sim_listen)}":
        problems.append(f"tokenclock: upstream {upstream!r} is not the sim service's listener {sim_listen}")
    load = services["load"]["command"]
    target = load[load.index("--target") + 1] if "--target" in load else ""
    if target != f"http://tokenclock:{port_of(listen)}":
        problems.append(f"load: target {target!r} is not tokenclock's listener {listen}")

    prom = services["prometheus"]
    prom_mounts = dict((t, s) for s, t in mounts(prom, deploy))
    config_arg = [a for a in prom.get("command", []) if a.startswith("--config.file=")]
    config_path = config_arg[0].split("=", 1)[1] if config_arg else ""
    if config_path not in prom_mounts:
        problems.append(f"prometheus: its config {config_path!r} is not mounted")
        return problems
    with open(prom_mounts[config_path]) as f:
        prom_config = yaml.safe_load(f)
    targets = [t for job in prom_config.get("scrape_configs", []) for sc in job.get("static_configs", []) for t in sc.get("targets", [])]
    if f"tokenclock:{port_of(metrics)}" not in targets:
        problems.append(f"prometheus: scrapes {targets}, not tokenclock:{port_of(metrics)}")
    if not any("tokenclock" in job.get("job_name", "") for job in prom_config.get("scrape_configs", [])):
        problems.append("prometheus: no job name contains tokenclock (TokenclockDown selects on it)")
    config_dir = os.path.dirname(config_path)
    for rule in prom_config.get("rule_files", []):
        if os.path.join(config_dir, rule) not in prom_mounts:
            problems.append(f"prometheus: rule file {rule} is not mounted beside {config_path}")
    # promtool on the container's layout: the config and its rules in one folder.
    with tempfile.TemporaryDirectory() as tmp:
        for target_path, source in prom_mounts.items():
            if target_path.startswith(config_dir + "/") and os.path.isfile(source):
                with open(source) as src, open(os.path.join(tmp, os.path.basename(target_path)), "w") as dst:
                    dst.write(src.read())
        run = subprocess.run(["promtool", "check", "config", os.path.join(tmp, os.path.basename(config_path))],
                             capture_output=True, text=True)
        if run.returncode != 0:
            problems.append("prometheus: promtool check config failed: " + (run.stdout + run.stderr).strip().replace("\n", " | "))

    graf = services["grafana"]
    graf_mounts = dict((t, s) for s, t in mounts(graf, deploy))
    prom_port = next((p.split(":")[-1] for p in prom.get("ports", [])), "9090")
    dashboards_dirs = []
    for target_path, source in graf_mounts.items():
        if "/provisioning/datasources/" in target_path:
            with open(source) as f:
                urls = [d.get("url") for d in yaml.safe_load(f).get("datasources", [])]
            if f"http://prometheus:{prom_port}" not in urls:
                problems.append(f"grafana: data sources {urls}, not http://prometheus:{prom_port}")
        if "/provisioning/dashboards/" in target_path:
            with open(source) as f:
                dashboards_dirs += [p["options"]["path"] for p in yaml.safe_load(f).get("providers", [])]
    dashboards = [t for t in graf_mounts if t.endswith(".json")]
    if not dashboards:
        problems.append("grafana: no dashboard is mounted")
    for d in dashboards:
        if os.path.dirname(d) not in dashboards_dirs:
            problems.append(f"grafana: dashboard {d} is in no provider's path {dashboards_dirs}")

    if binary:
        run_env = {k: v for k, v in os.environ.items() if not k.startswith("TOKENCLOCK_")}
        run_env.update({k: str(v) for k, v in env.items()})
        with tempfile.NamedTemporaryFile("w", suffix=".toml") as empty:
            run = subprocess.run([binary, "check-config", empty.name], env=run_env, capture_output=True, text=True)
        if run.returncode != 0:
            problems.append("tokenclock: check-config refused its settings: " + run.stderr.strip())
    return problems


if __name__ == "__main__":
    problems = check(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)

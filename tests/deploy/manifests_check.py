"""Validates Kubernetes manifests (README: Operations, "Kubernetes").
Usage: python3 manifests_check.py KUBERNETES_VERSION FILE...
Run with the venv of tests/deploy/venv.sh (kubernetes-validate, jsonschema).
Prints one line per problem and exits 1 if there is any.

- every document of a built-in kind is validated strictly (unknown fields
  are errors) against kubernetes-validate's bundled schemas for the pinned
  Kubernetes version; a kind it has no schema for is an error, except
- PodMonitor, a CRD of the Prometheus Operator whose schema is not bundled:
  it is checked against POD_MONITOR below, the fields this repository uses
  with the types the CRD gives them (monitoring.coreos.com/v1), and its
  selector must select the Deployment's pods and name a port of them;
- the tokenclock container runs with the security context the README
  documents and has CPU and memory requests;
- a NetworkPolicy selects the Deployment's pods, names only their ports,
  lets anyone reach tokenclock's `http` port (the clients) and only chosen
  peers its `metrics` port (Prometheus; the kubelet comes from the node).
"""
import sys

import jsonschema
import kubernetes_validate
import yaml

LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
POD_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PodMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "pattern": "tokenclock"}},
        },
        "spec": {
            "type": "object",
            "required": ["selector", "podMetricsEndpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": LABELS, "matchExpressions": {"type": "array"}},
                },
                "namespaceSelector": {"type": "object"},
                "jobLabel": {"type": "string"},
                "podMetricsEndpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["port"],
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "interval": {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"},
                            "scrapeTimeout": {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"},
                            "scheme": {"enum": ["http", "https"]},
                        },
                    },
                },
            },
        },
    },
}
SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def check_tokenclock(deployment):
    found = []
    pod = deployment["spec"]["template"]["spec"]
    containers = [c for c in pod.get("containers", []) if c.get("name") == "tokenclock"]
    if len(containers) != 1:
        return ["Deployment %s: no container named tokenclock" % deployment["metadata"]["name"]]
    c = containers[0]
    for key, want in SECURITY.items():
        got = c.get("securityContext", {}).get(key)
        if got != want:
            found.append("tokenclock securityContext.%s is %r, not %r" % (key, got, want))
    requests = c.get("resources", {}).get("requests", {})
    for key in ("cpu", "memory"):
        if key not in requests:
            found.append("tokenclock has no %s request" % key)
    return found


def check_pod_monitor(monitor, deployments):
    found = ["PodMonitor: %s at %s" % (e.message, "/".join(map(str, e.absolute_path)))
             for e in jsonschema.Draft7Validator(POD_MONITOR).iter_errors(monitor)]
    if found:
        return found
    wanted = monitor["spec"]["selector"].get("matchLabels", {})
    ports = {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]}
    for d in deployments:
        template = d["spec"]["template"]
        labels = template["metadata"].get("labels", {})
        if wanted and all(labels.get(k) == v for k, v in wanted.items()):
            named = {p.get("name") for c in template["spec"]["containers"] for p in c.get("ports", [])}
            return ["PodMonitor: port %r is not a named port of %s's pods" % (p, d["metadata"]["name"])
                    for p in sorted(ports - named)]
    return ["PodMonitor: selector %r selects no Deployment's pods" % (wanted,)]


def is_everyone(peer):
    """Whether a `from` peer admits any address: an ipBlock of a whole
    address family, or every pod of every namespace."""
    block = peer.get("ipBlock")
    if block is not None:
        return block.get("cidr") in ("0.0.0.0/0", "::/0") and not block.get("except")
    namespaces, pods = peer.get("namespaceSelector"), peer.get("podSelector")
    return namespaces == {} and not pods


def check_network_policy(policy, deployments):
    spec = policy["spec"]
    wanted = spec["podSelector"].get("matchLabels", {})
    pods = [d["spec"]["template"] for d in deployments
            if wanted and all(d["spec"]["template"]["metadata"].get("labels", {}).get(k) == v
                              for k, v in wanted.items())]
    if not pods:
        return ["selector %r selects no Deployment's pods" % (wanted,)]
    named = {p.get("name") for c in pods[0]["spec"]["containers"] for p in c.get("ports", [])}
    found = []
    open_ports, peered_ports = set(), set()
    for rule in spec.get("ingress", []):
        ports = {p.get("port") for p in rule.get("ports", [])}
        found += ["port %r is not a named port of the pods" % p
                  for p in sorted(ports - named, key=str)]
        peers = rule.get("from") or []
        everyone = not peers or any(is_everyone(peer) for peer in peers)
        (open_ports if everyone else peered_ports).update(ports)
        if not rule.get("ports"):
            found.append("a rule without ports opens every port")
    if "http" not in open_ports:
        found.append("clients cannot reach the http port from everywhere")
    if "metrics" in open_ports:
        found.append("the metrics port is open to every peer")
    if "metrics" not in peered_ports:
        found.append("no peer (Prometheus) may reach the metrics port")
    return found


def main():
    version, files = sys.argv[1], sys.argv[2:]
    docs = []
    for f in files:
        with open(f) as fh:
            docs += [(f, d) for d in yaml.safe_load_all(fh) if d is not None]
    deployments = [d for _, d in docs if d.get("kind") == "Deployment"]
    found = []
    for f, d in docs:
        kind, name = d.get("kind"), d.get("metadata", {}).get("name")
        if kind == "PodMonitor":
            problems = check_pod_monitor(d, deployments)
        else:
            try:
                kubernetes_validate.validate(d, version, strict=True)
                problems = (check_tokenclock(d) if kind == "Deployment"
                            else check_network_policy(d, deployments) if kind == "NetworkPolicy"
                            else [])
            except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as e:
                problems = [str(e).split("\n")[0]]
        found += ["%s: %s/%s: %s" % (f, kind, name, p) for p in problems]
        if not problems:
            against = "POD_MONITOR" if kind == "PodMonitor" else "Kubernetes " + version
            print("%s: %s/%s valid against %s" % (f, kind, name, against))
    for p in found:
        print(p)
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()

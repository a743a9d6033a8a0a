#!/usr/bin/env python3
"""Checks deploy/grafana/tokenclock.json (README: Operations, "Grafana
dashboard"); run by tests/deploy/grafana.sh.

    dashboard_check.py [--generated FILE] DASHBOARD README RECORDING_RULES

- with --generated, DASHBOARD must equal FILE byte for byte (FILE being what
  deploy/grafana/dashboard.py writes now);
- the variables: `datasource` (type datasource, prometheus), and `model` and
  `endpoint`, label_values queries on that datasource, multi, include all;
- every panel has a title, a description, and the `${datasource}`
  datasource, on the panel and on each of its targets, and an expr in each;
- gridPos rectangles lie within 24 columns and no two overlap;
- panel ids are distinct;
- every metric name in an expr is a family of README's metric table (with
  _bucket, _sum or _count only on a histogram) or a record of the recording
  rules;
- every selector of a family that has a model or endpoint label (README's
  table) filters it by model=~"$model" and endpoint=~"$endpoint";
- an expr that reads a family that `[metrics] disable` can leave out
  (histograms, workload_requests_total) reads no other family, so the
  family's absence empties that query only;
- every expr is valid PromQL: each becomes a recording rule in a temporary
  file (Grafana's variables replaced by values) for `promtool check rules`.
Prints one line per problem and exits 1 if there is any.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
COLUMNS = 24
# Grafana's variables, replaced by a value of the same kind for promtool.
SUBSTITUTIONS = (
    ("$__rate_interval", "1m"),
    ("$__interval", "15s"),
    ("$__range", "1h"),
    ("$model", ".*"),
    ("$endpoint", ".*"),
)
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Records of the rules: level:metric:operations.
RECORD = re.compile(r"\b[a-z_]+:tokenclock_[a-z0-9_]+:[a-z0-9_]+\b")
METRIC = re.compile(r"\btokenclock_[a-z0-9_]+\b")


def metric_table(readme):
    """{family: (type, {labels})} from README's
    `| `tokenclock_...` | type | labels |` rows."""
    rows = re.findall(r"^\| `(tokenclock_[a-z0-9_]+)` \| ([a-z]+) \|([^|]*)\|", readme, re.M)
    return {name: (kind, {l.strip() for l in labels.split(",") if l.strip()}) for name, kind, labels in rows}


def base_family(name, table):
    if name in table:
        return name
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in table:
            return name[: -len(suffix)]
    return None


def check_filters(expr, table, problems, where, extra=()):
    """Each selector of a family with a model or endpoint label filters it
    by the dashboard's variable, so the variables apply to every panel that
    can honour them."""
    rest = RECORD.sub(" ", expr)
    for m in re.finditer(r"\b(tokenclock_[a-z0-9_]+)\b(\{[^}]*\})?", rest):
        family = base_family(m.group(1), table)
        if family is None:
            continue
        matchers = m.group(2) or ""
        for label in ("model", "endpoint", *extra):
            # Extra labels ride on exactly the families that carry model.
            carries = label in table[family][1] or (label in extra and "model" in table[family][1])
            if carries and f'{label}=~"${label}"' not in matchers:
                problems.append(f'{where}: {m.group(1)} is not filtered by {label}=~"${label}"')


def records(rules):
    return set(re.findall(r"^\s*- record: (\S+)\s*$", rules, re.M))


def families_of(expr, table, known_records, problems, where):
    """The families an expr reads; unknown names go to problems."""
    used = set()
    for name in RECORD.findall(expr):
        if name not in known_records:
            problems.append(f"{where}: {name} is no record of the recording rules")
        used.add(name)
    rest = RECORD.sub(" ", expr)
    for name in METRIC.findall(rest):
        if name in table:
            used.add(name)
            continue
        base = next((name[: -len(s)] for s in HISTOGRAM_SUFFIXES if name.endswith(s)), None)
        if base is not None and base in table and table[base][0] == "histogram":
            used.add(base)
        elif base is not None and base in table:
            problems.append(f"{where}: {name}: {base} is a {table[base][0]}, not a histogram")
        else:
            problems.append(f"{where}: {name} is not in README's metric table")
    return used


def overlaps(a, b):
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def extra_labels(board):
    """The variables of extra `[[labels]]` labels (`dashboard.py --label`)."""
    names = [v.get("name") for v in board.get("templating", {}).get("list", [])]
    return [n for n in names if n not in ("datasource", "model", "endpoint")]


def check_variables(board, table, problems):
    variables = {v.get("name"): v for v in board.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problems.append("variables: no `datasource` variable of type datasource, query prometheus")
    for name in ("model", "endpoint", *extra_labels(board)):
        v = variables.get(name)
        if not v:
            problems.append(f"variables: no `{name}` variable")
            continue
        if v.get("type") != "query" or not re.fullmatch(
            rf"label_values\(tokenclock_[a-z0-9_]+, {name}\)", str(v.get("query"))
        ):
            problems.append(f"variables: `{name}` is not a label_values query of its label")
        else:
            family = str(v.get("query"))[len("label_values(") :].split(",")[0]
            if family not in table:
                problems.append(f"variables: `{name}` queries {family}, not in README's metric table")
        if v.get("datasource") != DATASOURCE:
            problems.append(f"variables: `{name}` does not query ${{datasource}}")
        if not (v.get("multi") and v.get("includeAll")):
            problems.append(f"variables: `{name}` is not multi-value with All")


def promtool_check(exprs, problems):
    """Each expr, variables replaced, as a recording rule for promtool."""
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, (where, expr) in enumerate(exprs):
        for var, value in SUBSTITUTIONS:
            expr = expr.replace(var, value)
        # Extra labels' variables.
        expr = re.sub(r"\$[A-Za-z_][A-Za-z0-9_]*", ".*", expr)
        lines.append(f"      - record: dashboard:expr:{i}")
        lines.append(f"        expr: {json.dumps(expr)}")
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        path = f.name
    try:
        run = subprocess.run(["promtool", "check", "rules", path], capture_output=True, text=True)
    finally:
        os.unlink(path)
    if run.returncode != 0:
        out = (run.stdout + run.stderr).strip()
        # promtool names the failing rule by its position: name the target.
        failing = sorted({int(i) for i in re.findall(r"dashboard:expr:(\d+)", out)})
        named = "".join(f"\n  dashboard:expr:{i} is {exprs[i][0]}" for i in failing)
        problems.append(f"promtool check rules on the panels' expressions failed:\n{out}{named}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--generated")
    parser.add_argument("dashboard")
    parser.add_argument("readme")
    parser.add_argument("rules")
    args = parser.parse_args()
    problems = []

    raw = open(args.dashboard, "rb").read()
    if args.generated is not None and open(args.generated, "rb").read() != raw:
        problems.append(
            f"{args.dashboard} differs from what deploy/grafana/dashboard.py generates:"
            " edit the generator and run it, never the JSON"
        )
    board = json.loads(raw)
    table = metric_table(open(args.readme).read())
    if len(table) < 20:
        sys.exit(f"README's metric table not found ({len(table)} rows read)")
    disableable = {name for name, (kind, _) in table.items() if kind == "histogram"}
    disableable.add("tokenclock_workload_requests_total")
    known_records = records(open(args.rules).read())
    if not known_records:
        sys.exit("no record found in the recording rules")

    check_variables(board, table, problems)
    panels = board.get("panels", [])
    if not panels:
        problems.append("no panel")
    ids = [panel.get("id") for panel in panels]
    if not all(isinstance(i, int) for i in ids) or len(set(ids)) != len(ids):
        problems.append(f"panel ids are not distinct integers: {ids}")
    exprs = []
    for n, panel in enumerate(panels):
        title = panel.get("title") or ""
        where = f"panel {n} ({title or 'untitled'})"
        if not title.strip():
            problems.append(f"{where}: no title")
        if not (panel.get("description") or "").strip():
            problems.append(f"{where}: no description")
        if panel.get("datasource") != DATASOURCE:
            problems.append(f"{where}: datasource is not ${{datasource}}")
        targets = panel.get("targets") or []
        if not targets:
            problems.append(f"{where}: no target")
        for target in targets:
            at = f"{where} target {target.get('refId')}"
            if target.get("datasource") != DATASOURCE:
                problems.append(f"{at}: datasource is not ${{datasource}}")
            expr = target.get("expr") or ""
            if not expr.strip():
                problems.append(f"{at}: no expr")
                continue
            exprs.append((at, expr))
            used = families_of(expr, table, known_records, problems, at)
            check_filters(expr, table, problems, at, extra_labels(board))
            off = used & disableable
            if off and len(used) > 1:
                problems.append(
                    f"{at}: reads {', '.join(sorted(used))} in one query, and [metrics] disable"
                    f" can leave out {', '.join(sorted(off))}: one family per query"
                )
        pos = panel.get("gridPos") or {}
        if not all(isinstance(pos.get(k), int) for k in "xywh"):
            problems.append(f"{where}: gridPos is not x, y, w, h")
            continue
        if pos["x"] < 0 or pos["y"] < 0 or pos["w"] < 1 or pos["h"] < 1 or pos["x"] + pos["w"] > COLUMNS:
            problems.append(f"{where}: gridPos {pos} is not within {COLUMNS} columns")
    for i, a in enumerate(panels):
        for j in range(i + 1, len(panels)):
            pa, pb = a.get("gridPos") or {}, panels[j].get("gridPos") or {}
            if all(isinstance(p.get(k), int) for p in (pa, pb) for k in "xywh") and overlaps(pa, pb):
                problems.append(
                    f"panels {i} ({a.get('title')}) and {j} ({panels[j].get('title')}) overlap: {pa} {pb}"
                )
    if exprs:
        promtool_check(exprs, problems)

    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print(f"{len(panels)} panels, {len(exprs)} expressions checked")


if __name__ == "__main__":
    main()

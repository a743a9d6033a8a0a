#!/usr/bin/env bash
# Checks deploy/grafana/ (README: Operations, "Grafana dashboard");
# tests/run.sh runs it after the cargo tests and counts it as one test.
#
# 1. deploy/grafana/dashboard.py (grafana-foundation-sdk, pinned, in
#    target/venv-deploy) regenerates the dashboard, which must equal the
#    committed tokenclock.json byte for byte;
# 2. tests/deploy/dashboard_check.py: the datasource, model and endpoint
#    variables; every panel's title, description and ${datasource} (panel
#    and targets); distinct panel ids; the grid (24 columns, no overlap);
#    every metric name in README's metric table or the recording rules;
#    the model and endpoint filters on every family that has those labels;
#    one disableable family per query; every expression through
#    `promtool check rules`;
# 3. the check can fail: each mutation below breaks one thing in a copy of
#    the JSON, and the check must then fail with the message it names.
# Not done here: running the expressions against a live Prometheus (README).
set -euo pipefail
cd "$(dirname "$0")/../.."

# shellcheck source=tests/deploy/venv.sh
. tests/deploy/venv.sh
type -P promtool >/dev/null || fail "promtool is required (apt-get install prometheus)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tokenclock-grafana.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
board=deploy/grafana/tokenclock.json
check() { python3 tests/deploy/dashboard_check.py "$@" README.md deploy/prometheus/recording.rules.yml; }

# The pin is written in three places: here (venv.sh), the generator's
# message when the SDK is missing, and the README.
sdk=$(printf '%s\n' "${deploy_tools[@]}" | grep '^grafana-foundation-sdk==')
for f in deploy/grafana/dashboard.py README.md; do
  grep -qF "${sdk#grafana-foundation-sdk==}" "$f" || fail "$f does not name $sdk, the version tests/deploy/venv.sh pins"
done

log "deploy/grafana/dashboard.py --output $tmp/generated.json ($("$deploy_venv/bin/pip" show grafana-foundation-sdk | sed -n 's/^Version: /grafana-foundation-sdk /p'))"
"$deploy_venv/bin/python" deploy/grafana/dashboard.py --output "$tmp/generated.json"
log "tests/deploy/dashboard_check.py --generated $tmp/generated.json $board"
check --generated "$tmp/generated.json" "$board"

# Each mutation: a name, a fragment of the message that must report it, and
# a Python statement applied to the parsed JSON (`d`; `panel(title)` finds a
# panel by its title). The last one is checked against the generator.
mutations=(
  "panel without description|no description|del panel('Outcomes')['description']"
  "blank title|no title|panel('Finish reasons')['title'] = ' '"
  "panel datasource not the variable|datasource is not \${datasource}|panel('Goodput')['datasource'] = {'type': 'prometheus', 'uid': 'prometheus'}"
  "target without datasource|target B: datasource is not \${datasource}|del panel('ITL p50 / p90 / p99')['targets'][1]['datasource']"
  "target without expr|no expr|panel('Parse errors')['targets'][0]['expr'] = ''"
  "overlapping gridPos|overlap|panel('Generated tokens per second')['gridPos']['x'] = 3"
  "wider than 24 columns|within 24 columns|panel('SLO attainment')['gridPos']['w'] = 7"
  "duplicate panel id|panel ids are not distinct|panel('Outcomes')['id'] = panel('Request rate')['id']"
  "selector without the model filter|is not filtered by model=~\"\$model\"|t = panel('TPOT p50 / p90 / p99')['targets'][1]; t['expr'] = t['expr'].replace('model=~\"\$model\",', '')"
  "misspelled metric name|tokenclock_time_to_first_tokens_seconds_bucket is not in README|t = panel('TTFT p50 / p90 / p99')['targets'][0]; t['expr'] = t['expr'].replace('first_token_seconds', 'first_tokens_seconds')"
  "_bucket on a counter|tokenclock_requests_total is a counter, not a histogram|t = panel('Outcomes')['targets'][0]; t['expr'] = t['expr'].replace('requests_total{', 'requests_total_bucket{')"
  "misspelled record|model:tokenclock_request:rate5m is no record|panel('Request rate')['targets'][0]['expr'] = 'model:tokenclock_request:rate5m'"
  "two families in one query|one family per query|t = panel('Phases seen by the proxy (mean per request)')['targets'][0]; t['expr'] = t['expr'].replace('phase_seconds_count', 'request_duration_seconds_count')"
  "invalid PromQL|could not parse expression|t = panel('E2E p50 / p90 / p99')['targets'][2]; t['expr'] = t['expr'][:-1]"
  "no model variable|no \`model\` variable|d['templating']['list'] = [v for v in d['templating']['list'] if v['name'] != 'model']"
  "endpoint variable single-valued|\`endpoint\` is not multi-value|[v for v in d['templating']['list'] if v['name'] == 'endpoint'][0]['multi'] = False"
  "variable on an unknown family|queries tokenclock_request_total|[v for v in d['templating']['list'] if v['name'] == 'model'][0]['query'] = 'label_values(tokenclock_request_total, model)'"
  "hand-edited JSON|differs from what deploy/grafana/dashboard.py generates|panel('Outcomes')['title'] = 'Request outcomes'"
)
for m in "${mutations[@]}"; do
  IFS='|' read -r name expect statement <<<"$m"
  python3 - "$board" "$tmp/mutated.json" "$statement" <<'PY'
import json, sys
src, dst, statement = sys.argv[1:4]
d = json.load(open(src))
def panel(title):
    return next(p for p in d["panels"] if p.get("title") == title)
exec(statement)
open(dst, "w").write(json.dumps(d, indent=2, sort_keys=True) + "\n")
PY
  cmp -s "$board" "$tmp/mutated.json" && fail "mutation '$name' changed nothing"
  args=("$tmp/mutated.json")
  [ "$name" != "hand-edited JSON" ] || args=(--generated "$tmp/generated.json" "$tmp/mutated.json")
  if check "${args[@]}" >"$tmp/out" 2>&1; then
    fail "mutation '$name': dashboard_check.py passed"
  fi
  grep -qF -- "$expect" "$tmp/out" || fail "mutation '$name' failed the check, but not with '$expect': $(cat "$tmp/out")"
  log "mutation '$name' caught: $(grep -m1 -F -- "$expect" "$tmp/out" | sed 's/^ *//')"
done
log "${#mutations[@]} mutations, each caught"

# Extra [[labels]]: --label adds a variable per label and its filter on every
# family that carries model; the same checks hold, and dropping one filter
# is caught.
log "deploy/grafana/dashboard.py --label team --label tenant"
"$deploy_venv/bin/python" deploy/grafana/dashboard.py --label team --label tenant --output "$tmp/labels.json"
check "$tmp/labels.json"
python3 - "$tmp/labels.json" <<'PY' || fail "--label: the variables or filters are not there"
import json, sys
d = json.load(open(sys.argv[1]))
names = [v["name"] for v in d["templating"]["list"]]
assert names[-2:] == ["team", "tenant"], names
exprs = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
assert sum('team=~"$team",tenant=~"$tenant"' in e for e in exprs) >= 30, exprs
PY
python3 - "$tmp/labels.json" "$tmp/labels-dropped.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t = d["panels"][0]["targets"][0]
t["expr"] = t["expr"].replace(',team=~"$team"', "")
open(sys.argv[2], "w").write(json.dumps(d, indent=2, sort_keys=True) + "\n")
PY
cmp -s "$tmp/labels.json" "$tmp/labels-dropped.json" && fail "the --label mutation changed nothing"
if check "$tmp/labels-dropped.json" >"$tmp/out" 2>&1; then
  fail "mutation 'extra label filter dropped': dashboard_check.py passed"
fi
grep -qF 'is not filtered by team=~"$team"' "$tmp/out" || fail "mutation 'extra label filter dropped' failed the check otherwise: $(cat "$tmp/out")"
log "mutation 'extra label filter dropped' caught"
if "$deploy_venv/bin/python" deploy/grafana/dashboard.py --label model --output - >/dev/null 2>&1; then
  fail "--label model (a label tokenclock sets itself) was accepted"
fi
log "--label model refused"
echo "deploy/grafana: OK"

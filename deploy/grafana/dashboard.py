#!/usr/bin/env python3
"""Generates deploy/grafana/tokenclock.json, the tokenclock dashboard.

Built with Grafana's grafana-foundation-sdk (PyPI, pinned in
tests/deploy/venv.sh); the JSON is committed, and tests/deploy/grafana.sh
fails unless running this again gives the same bytes, so edit this file,
never the JSON:

    python3 deploy/grafana/dashboard.py            # writes tokenclock.json beside it
    python3 deploy/grafana/dashboard.py --output -  # prints it
    python3 deploy/grafana/dashboard.py --label team --output mine.json
                                                    # with a variable per extra label

Every query reads one metric family (README: Metrics), so a family left out
with `[metrics] disable` empties only the panels or series built on it,
which then show "No data"; none turns into an error or hides another
family's data.
"""

import argparse
import json
import os
import re
import sys

try:
    from grafana_foundation_sdk.builders import common as common_builder
    from grafana_foundation_sdk.builders import dashboard as dash
    from grafana_foundation_sdk.builders import heatmap
    from grafana_foundation_sdk.builders import prometheus
    from grafana_foundation_sdk.builders import statetimeline
    from grafana_foundation_sdk.builders import table
    from grafana_foundation_sdk.builders import timeseries
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import common
    from grafana_foundation_sdk.models import dashboard as model
    from grafana_foundation_sdk.models import heatmap as heatmap_model
    from grafana_foundation_sdk.models.prometheus import PromQueryFormat
except ImportError as e:
    sys.exit(
        f"{e}: install the version tests/deploy/venv.sh pins"
        " (pip install 'grafana-foundation-sdk==1769699379!11.6.0'), or run"
        " target/venv-deploy/bin/python deploy/grafana/dashboard.py after tests/deploy/grafana.sh"
    )

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
# Both label filters, for families that carry model and endpoint.
BOTH = 'model=~"$model",endpoint=~"$endpoint"'
QUANTILES = (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99"))


def query(expr, legend, ref_id, fmt=None, instant=False):
    q = (
        prometheus.Dataquery()
        .expr(expr)
        .legend_format(legend)
        .ref_id(ref_id)
        .datasource(DATASOURCE)
    )
    if fmt is not None:
        q = q.format(fmt)
    return q.instant() if instant else q.range()


def place(panel, x, y, w, h, title, description):
    return (
        panel.title(title)
        .description(description)
        .datasource(DATASOURCE)
        .grid_pos(model.GridPos(x=x, y=y, w=w, h=h))
    )


def legend_table():
    return (
        common_builder.VizLegendOptions()
        .display_mode(common.LegendDisplayMode.TABLE)
        .placement(common.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["mean", "max"])
    )


def tooltip_all():
    return (
        common_builder.VizTooltipOptions()
        .mode(common.TooltipDisplayMode.MULTI)
        .sort(common.SortOrder.DESCENDING)
    )


def series(unit, stacked=False):
    panel = (
        timeseries.Panel()
        .unit(unit)
        .legend(legend_table())
        .tooltip(tooltip_all())
        .fill_opacity(30 if stacked else 10)
    )
    if stacked:
        panel = panel.stacking(common_builder.StackingConfig().mode(common.StackingMode.NORMAL))
    return panel


def quantiles(family, selector, unit):
    """p50, p90, p99 over time of one histogram family, all selected series
    pooled (sum by (le))."""
    panel = series(unit)
    for ref, (q, name) in zip("ABC", QUANTILES):
        expr = (
            f"histogram_quantile({q}, sum by (le) "
            f"(rate({family}_bucket{{{selector}}}[$__rate_interval])))"
        )
        panel = panel.with_target(query(expr, name, ref))
    return panel


def mean_by_phase(family, phases=None):
    """Mean time per phase: rate of the sum over rate of the count."""
    selector = BOTH if phases is None else f'{BOTH},phase=~"{"|".join(phases)}"'
    return (
        f"sum by (phase) (rate({family}_sum{{{selector}}}[$__rate_interval]))"
        f" / sum by (phase) (rate({family}_count{{{selector}}}[$__rate_interval]))"
    )


# The proxy's phases that follow one another through a request (their means
# add up to the mean request time), and those that lie within them.
SEQUENTIAL_PHASES = ("time_to_response_headers", "headers_to_first_token", "decode", "tail")
NESTED_PHASES = ("upstream_connect", "request_upload", "reasoning", "delivery_stall")


def panels():
    out = []

    def add(panel, *where):
        out.append(place(panel, *where))

    # Row 1: throughput and goodput.
    add(
        series("reqps").with_target(
            query(
                f"sum by (model, outcome) (rate(tokenclock_requests_total{{{BOTH}}}[$__rate_interval]))",
                "{{model}} {{outcome}}",
                "A",
            )
        ),
        0, 0, 6, 8, "Request rate",
        "Finished requests per second by model and outcome; a request is counted once, when its response ends.",
    )
    add(
        series("short").with_target(
            query(
                f"sum by (model, kind) (rate(tokenclock_output_tokens_total{{{BOTH}}}[$__rate_interval]))",
                "{{model}} {{kind}}",
                "A",
            )
        ),
        6, 0, 6, 8, "Generated tokens per second",
        "Generated tokens per second by model and kind (output or reasoning), counted for every request whatever its outcome.",
    )
    add(
        series("reqps").with_target(
            query(
                f'sum by (slo, model) (rate(tokenclock_slo_requests_total{{{BOTH},result="met"}}[$__rate_interval]))',
                "{{slo}} {{model}}",
                "A",
            )
        ),
        12, 0, 6, 8, "Goodput",
        "Requests per second that met each SLO: ended ok with every objective (TTFT, TTFO, TPOT, E2E) of the SLO within its limit.",
    )
    attainment = (
        f'(sum by (slo, model) (rate(tokenclock_slo_requests_total{{{BOTH},result="met"}}[$__rate_interval]))'
        f" or 0 * sum by (slo, model) (rate(tokenclock_slo_requests_total{{{BOTH}}}[$__rate_interval])))"
        f" / sum by (slo, model) (rate(tokenclock_slo_requests_total{{{BOTH}}}[$__rate_interval]))"
    )
    add(
        series("percentunit").min(0).max(1).with_target(query(attainment, "{{slo}} {{model}}", "A")),
        18, 0, 6, 8, "SLO attainment",
        "Share of the requests judged against each SLO that met it (met / judged); 0 when every request missed, no data when none was judged.",
    )

    # Row 2: TTFT, its percentiles and its heatmap.
    add(
        quantiles("tokenclock_time_to_first_token_seconds", BOTH, "s"),
        0, 8, 12, 8, "TTFT p50 / p90 / p99",
        "Time to first token: from the request head received (t0) to the first event carrying a generated token, reasoning included.",
    )
    add(
        heatmap.Panel()
        .calculate(False)
        .with_target(
            query(
                f"sum by (le) (increase(tokenclock_time_to_first_token_seconds_bucket{{{BOTH}}}[$__rate_interval]))",
                "{{le}}",
                "A",
                fmt=PromQueryFormat.HEATMAP,
            )
        )
        .y_axis(heatmap.YAxisConfig().unit("s"))
        .cell_values(heatmap.CellValues().unit("short"))
        .color(
            heatmap.HeatmapColorOptions()
            .mode(heatmap_model.HeatmapColorMode.SCHEME)
            .scheme("Oranges")
            .fill("dark-orange")
            .scale(heatmap_model.HeatmapColorScale.EXPONENTIAL)
            .exponent(0.5)
            .steps(64)
        ),
        12, 8, 12, 8, "TTFT heatmap",
        "Requests per TTFT bucket over time, TTFT being t0 to the first token-bearing event, so a second mode (a queue, a cold cache) shows as a second band.",
    )

    # Row 3: TTFO, ITL, TPOT.
    add(
        quantiles("tokenclock_time_to_first_output_token_seconds", BOTH, "s"),
        0, 16, 8, 8, "TTFO p50 / p90 / p99",
        "Time to first output token: t0 to the first event carrying a non-reasoning token (answer text, refusal or tool call); equal to TTFT for models that do not reason.",
    )
    add(
        quantiles("tokenclock_inter_token_latency_seconds", BOTH, "s"),
        8, 16, 8, 8, "ITL p50 / p90 / p99",
        "Inter-token latency: each gap between token-bearing events divided by the tokens in the later event, observed once per token.",
    )
    add(
        quantiles("tokenclock_time_per_output_token_seconds", BOTH, "s"),
        16, 16, 8, 8, "TPOT p50 / p90 / p99",
        "Time per output token, once per request: (last token - first token) / (streamed tokens - 1), for requests with at least two token-bearing events.",
    )

    # Row 4: E2E, in-flight requests, upstream health.
    add(
        quantiles("tokenclock_request_duration_seconds", BOTH, "s"),
        0, 24, 8, 8, "E2E p50 / p90 / p99",
        "End to end: t0 to the last byte of the response forwarded to the client, over every outcome.",
    )
    add(
        series("short").with_target(
            query(
                'sum by (endpoint) (tokenclock_requests_in_flight{endpoint=~"$endpoint"})',
                "{{endpoint}}",
                "A",
            )
        ),
        8, 24, 5, 8, "Requests in flight",
        "Requests whose response has not ended yet, by endpoint (this gauge has no model label).",
    )
    add(
        series("short", stacked=True).with_target(
            query(
                'sum by (phase) (tokenclock_requests_in_phase{endpoint=~"$endpoint"})',
                "{{phase}}",
                "A",
            )
        ),
        13, 24, 6, 8, "Requests in flight by stage",
        "Where in-flight requests are now, stacked: upload, waiting_headers, waiting_first_token (queueing or prefill at the server), reasoning, streaming; a growing waiting_first_token is a queue or a stuck prefill, visible before any request finishes. Sums to requests in flight (no model label).",
    )
    add(
        statetimeline.Panel()
        .min(0)
        .max(1)
        .mappings(
            [
                model.ValueMap(
                    options={
                        "0": model.ValueMappingResult(text="unhealthy", color="red", index=0),
                        "1": model.ValueMappingResult(text="healthy", color="green", index=1),
                    }
                )
            ]
        )
        .with_target(query("tokenclock_upstream_healthy", "{{instance}}", "A")),
        19, 24, 5, 8, "Upstream health",
        "Per sidecar, 1 while its last upstream probe passed (a 2xx from upstream_health_path, or else a TCP connect), 0 otherwise.",
    )

    # Row 5: where the time goes, the proxy's phases beside the server's.
    proxy_phases = (
        series("s", stacked=True)
        .with_target(query(mean_by_phase("tokenclock_phase_seconds", SEQUENTIAL_PHASES), "{{phase}}", "A"))
        .with_target(query(mean_by_phase("tokenclock_phase_seconds", NESTED_PHASES), "{{phase}} (within)", "B"))
        .override_by_query(
            "B",
            [
                model.DynamicConfigValue(id_val="custom.stacking", value={"group": "B", "mode": "none"}),
                model.DynamicConfigValue(id_val="custom.fillOpacity", value=0),
                model.DynamicConfigValue(id_val="custom.lineStyle", value={"dash": [10, 10], "fill": "dash"}),
            ],
        )
    )
    add(
        proxy_phases,
        0, 32, 12, 9, "Phases seen by the proxy (mean per request)",
        "Mean seconds per phase, stacked: response headers, headers to first token (queueing, prefill, first decode step), decode and tail add up to a request's time; connect, upload, reasoning and delivery stall are drawn dashed, unstacked, as parts of those.",
    )
    add(
        series("s", stacked=True).with_target(
            query(mean_by_phase("tokenclock_server_phase_seconds"), "{{phase}}", "A")
        ),
        12, 32, 12, 9, "Phases reported by the server (mean per request)",
        "Mean seconds per phase as the model server reported them (queue, prefill, decode), stacked; no data from servers that report no timings.",
    )

    # Row 6: token sizes.
    add(
        quantiles("tokenclock_event_tokens", BOTH, "short"),
        0, 41, 8, 8, "Tokens per event p50 / p90 / p99",
        "Tokens carried by each token-bearing event: 1 for token-by-token streaming, more when the server batches tokens into one event.",
    )
    add(
        quantiles("tokenclock_request_input_tokens", BOTH, "short"),
        8, 41, 8, 8, "Input tokens per request p50 / p90 / p99",
        "Prompt tokens per request (the server's usage, else estimated from the body), for requests that ended ok.",
    )
    add(
        quantiles("tokenclock_request_output_tokens", BOTH, "short"),
        16, 41, 8, 8, "Output tokens per request p50 / p90 / p99",
        "Generated tokens per request, reasoning included, for requests that ended ok.",
    )

    # Row 7: workload map and outcomes.
    add(
        table.Panel()
        .unit("short")
        .with_target(
            query(
                'sum by (input_tokens_range, output_tokens_range) (increase(tokenclock_workload_requests_total{model=~"$model"}[$__range]))',
                "",
                "A",
                fmt=PromQueryFormat.TABLE,
                instant=True,
            )
        )
        .with_transformation(
            model.DataTransformerConfig(
                id_val="groupingToMatrix",
                options={
                    "columnField": "output_tokens_range",
                    "rowField": "input_tokens_range",
                    "valueField": "Value",
                },
            )
        ),
        0, 49, 12, 9, "Workload map (input x output tokens)",
        "Requests over the dashboard's time range by input token range (rows) and output token range (columns), requests that ended ok; this counter has no endpoint label.",
    )
    add(
        series("reqps", stacked=True).with_target(
            query(
                f"sum by (outcome) (rate(tokenclock_requests_total{{{BOTH}}}[$__rate_interval]))",
                "{{outcome}}",
                "A",
            )
        ),
        12, 49, 12, 9, "Outcomes",
        "Finished requests per second by outcome: ok, http_error, upstream_error, client_cancelled, timeout (the upstream's), client_timeout or shutdown (cut when the shutdown grace ran out).",
    )

    # Row 8: finish reasons and parse errors.
    add(
        series("reqps", stacked=True).with_target(
            query(
                f"sum by (finish_reason) (rate(tokenclock_requests_total{{{BOTH}}}[$__rate_interval]))",
                "{{finish_reason}}",
                "A",
            )
        ),
        0, 58, 12, 8, "Finish reasons",
        "Finished requests per second by why the server said generation stopped: stop, length, tool_calls, content_filter, other or none.",
    )
    add(
        series("short").with_target(
            query(
                'sum by (endpoint, reason) (tokenclock_parse_errors_total{endpoint=~"$endpoint"})',
                "{{endpoint}} {{reason}}",
                "A",
            )
        ),
        12, 58, 12, 8, "Parse errors",
        "Unreadable payloads since each sidecar started, by endpoint and reason; the traffic was forwarded unchanged, only its measurement is missing.",
    )

    # Row 9: capacity (no model or endpoint label: connections and the cap
    # on requests in flight are the sidecar's, not a model's).
    add(
        series("short")
        .with_target(
            query("sum(rate(tokenclock_requests_refused_total[$__rate_interval]))", "requests refused", "A")
        )
        .with_target(
            query(
                'sum(rate(tokenclock_connections_refused_total{listener="proxy"}[$__rate_interval]))',
                "connections refused",
                "B",
            )
        ),
        0, 66, 12, 8, "Turned away at max_connections",
        "Per second: requests answered 503 (overloaded) because max_connections requests were in flight, which only HTTP/2 clients reach, and client connections closed at accept because max_connections were open, each with a request in flight. TokenclockAtCapacity alerts on either.",
    )
    add(
        series("short").with_target(
            query('sum by (instance) (tokenclock_connections_open{listener="proxy"})', "{{instance}}", "A")
        ),
        12, 66, 12, 8, "Client connections open",
        "Client connections open on each sidecar's proxy listener, to set against its max_connections.",
    )

    # Row 10: memory held on the side.
    add(
        series("bytes")
        .with_target(query("sum by (instance) (tokenclock_request_capture_bytes)", "{{instance}}", "A"))
        .with_target(query("max(tokenclock_request_capture_limit_bytes)", "limit", "B"))
        .with_target(query("sum by (instance) (tokenclock_upstream_replay_copy_bytes)", "kept to resend {{instance}}", "C")),
        0, 74, 12, 8, "Request bodies copied on the side",
        "Bytes the copies of the request bodies in flight hold on each sidecar, read to learn model, stream and max_tokens, against the limit they share (request_capture_total_bytes). At the limit a body is forwarded unread, and counted in the Parse errors panel as request_over_budget: raise the limit if the pod has the memory, or look for clients uploading slowly. Kept to resend: the copies an HTTP/2 upstream's requests keep until their answer's head, to send one again if the upstream did not process its stream (at most 32 MiB a sidecar; past it a body stops being copied, and a stream that fails after sending some of it is not sent again).",
    )
    add(
        series("bytes").with_target(
            query(
                "process_resident_memory_bytes and on (job, instance) tokenclock_build_info",
                "{{instance}}",
                "A",
            )
        ),
        12, 74, 12, 8, "Sidecar memory",
        "Each sidecar's resident memory, to set against its container's memory limit: held streams, connections, the request-body copies (left) and the decoders of compressed responses.",
    )

    # Row 11: the upstream's connections.
    add(
        series("short")
        .with_target(
            query("sum by (instance) (increase(tokenclock_upstream_idle_closed_total[$__rate_interval]))", "closed while idle {{instance}}", "A")
        )
        .with_target(
            query("sum by (instance) (increase(tokenclock_upstream_resends_total[$__rate_interval]))", "resent {{instance}}", "B")
        ),
        0, 82, 12, 8, "Upstream connections closed under the pool",
        "Per interval, on each sidecar: pooled connections the model server closed while idle, before pool_idle_timeout, and requests sent again: after it closed a kept-alive HTTP/1.1 connection, or on an HTTP/2 stream it did not process (REFUSED_STREAM, or past its GOAWAY's last stream: connections rotated). A steady count of the first means its keep-alive timeout is under pool_idle_timeout, and POSTs that race its closes get 502 (TokenclockUpstreamKeepAliveShort); a burst is a restart.",
    )
    add(
        series("short").with_target(
            query("sum by (instance) (tokenclock_upstream_connections_open)", "{{instance}}", "A")
        ),
        12, 82, 12, 8, "Upstream connections open",
        "Connections each sidecar's pool holds open to the model server. Over HTTP/1.1, one per request in flight or WebSocket session plus those idle (up to pool_max_idle_per_host, for pool_idle_timeout); a count that follows the requests with no idle ones left means new connects on requests' paths (the upstream_connect phase). Over HTTP/2, each carries up to the upstream's SETTINGS_MAX_CONCURRENT_STREAMS: more than one means that limit was reached, or a connection the upstream rotated (GOAWAY) is finishing its streams.",
    )
    return out


def variables():
    def label_values(name, label):
        return (
            dash.QueryVariable(name)
            .label(label)
            .datasource(DATASOURCE)
            .query(f"label_values(tokenclock_requests_total, {name})")
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .current(model.VariableOption(selected=True, text=["All"], value=["$__all"]))
        )

    return [
        dash.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        label_values("model", "Model"),
        label_values("endpoint", "Endpoint"),
    ]


def build():
    board = (
        dash.Dashboard("tokenclock")
        .uid("tokenclock")
        .description(
            "LLM serving latency as the tokenclock proxy measures it on the wire: "
            "throughput, goodput, TTFT, TTFO, ITL, TPOT, E2E, phases and token sizes."
        )
        .tags(["tokenclock", "llm"])
        .editable()
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
    )
    for variable in variables():
        board = board.with_variable(variable)
    for number, panel in enumerate(panels(), start=1):
        board = board.with_panel(panel.id(number))
    return board.build()


# Names a `--label` may not take: the dashboard's own variables and the labels
# tokenclock sets itself (README: Configuration, `[[labels]]`).
RESERVED = {"datasource", "model", "endpoint", "outcome", "code", "phase", "kind", "slo",
            "result", "objective", "reason", "source", "finish_reason", "le", "instance", "job"}


def with_labels(text, labels):
    """Adds a variable per extra `[[labels]]` label, and its filter to every
    selector that filters on `model`: tokenclock puts extra labels on exactly
    the families that carry `model`."""
    board = json.loads(text)
    variables = board["templating"]["list"]
    model_variable = next(v for v in variables if v["name"] == "model")
    for name in labels:
        variable = json.loads(json.dumps(model_variable))
        variable.update(name=name, label=name, query=f"label_values(tokenclock_requests_total, {name})")
        variables.append(variable)
    filters = "".join(f',{name}=~"${name}"' for name in labels)
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            target["expr"] = target["expr"].replace('model=~"$model"', 'model=~"$model"' + filters)
    return json.dumps(board, indent=2, sort_keys=True) + "\n"


def label_name(text):
    if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", text) or text in RESERVED or text.startswith("__"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a label name of your own (reserved: {', '.join(sorted(RESERVED))})")
    return text


def render(labels=()):
    text = json.dumps(build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"
    return with_labels(text, labels) if labels else text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument(
        "--output",
        default=os.path.join(here, "tokenclock.json"),
        help="where to write the dashboard ('-' for stdout; default: tokenclock.json beside this file)",
    )
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        type=label_name,
        metavar="NAME",
        help="an extra label of your [[labels]] config: adds a variable and its filter (repeatable;"
        " the committed JSON has none)",
    )
    args = parser.parse_args()
    if len(set(args.label)) != len(args.label):
        parser.error("a --label is given twice")
    text = render(args.label)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()

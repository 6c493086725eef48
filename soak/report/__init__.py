"""Reports people read: `report.html` (self-contained), PNG plots and `junit.xml` in the run dir.

`build_report(run_dir)` rebuilds all of them from a stored run; `soak report RUN_DIR` is its
command. Every string that came from a store or an error message is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import os
from pathlib import Path
from typing import Any

from soak.clauses import clause_title
from soak.report.data import RunData, Section, load_run_data
from soak.report.junit import junit_xml

__all__ = ["build_report", "configure_parser", "coverage_html", "coverage_lines", "run_cli"]

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px;color:#222}
h1{margin-bottom:.2em} .pass{color:#176d2c} .fail{color:#b00020} .inconclusive{color:#a66300}
table{border-collapse:collapse;margin:.5em 0 1.5em} td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}
th{background:#f3f3f3;text-align:left} code{background:#f6f6f6;padding:1px 3px}
.violation{border-left:4px solid #b00020;padding:.3em .8em;margin:.6em 0;background:#fff5f6}
img{max-width:100%;border:1px solid #eee;margin:.4em 0}
"""


def _rates_html(storm: dict[str, Any]) -> str:
    """The takeover rate row (`storm.json`'s `takeovers_per_s_over_R_T`), when the storm recorded one."""
    if storm.get("takeovers_per_s_over_R_T") is None:
        return ""
    return (f"<tr><th>takeovers</th><td>{_esc(storm.get('takeovers_per_s'))}/s over {_esc(storm.get('running_s'))} s"
            f"</td><th>takeovers/s over R/T</th><td>{_esc(storm['takeovers_per_s_over_R_T'])}</td></tr>\n")


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{_esc(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    head = "".join(f"<th>{_esc(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(
            f"<td>{_esc(f'{r[c]:.1f}' if isinstance(r.get(c), float) else r.get(c, ''))}</td>" for c in columns
        ) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _violations_html(verdict: dict[str, Any]) -> str:
    parts = []
    for i, v in enumerate(verdict.get("violations", [])[:200]):
        clause = v.get("clause", "?")
        evidence = v.get("evidence", [])
        ev_rows = [{k: e.get(k) for k in ("process", "index", "f", "run", "epoch", "counter", "outcome", "tag")}
                   for e in evidence[:20]]
        parts.append(
            f'<div class="violation" id="v{i}"><b>{_esc(clause)}</b> — {_esc(clause_title(clause))}<br>'
            f"{_esc(v.get('statement', ''))}"
            + (_table(ev_rows, ["process", "index", "f", "run", "epoch", "counter", "outcome", "tag"]) if ev_rows else "")
            + "</div>"
        )
    more = len(verdict.get("violations", [])) - 200
    if more > 0:
        parts.append(f"<p>… and {more} more in verdict.json</p>")
    return "".join(parts)


def _sections_html(sections: tuple[Section, ...]) -> str:
    parts = []
    for sec in sections:
        note = f"<p>{_esc(sec.note)}</p>" if sec.note else ""
        rows = list(sec.rows[:500])
        more = f"<p>… and {len(sec.rows) - 500} more</p>" if len(sec.rows) > 500 else ""
        body = _table(rows, list(sec.columns)) if rows else "<p>None.</p>"
        parts.append(f"<h3>{_esc(sec.title)}</h3>{note}{body}{more}")
    return "".join(parts)


def coverage_html(rows: list[dict[str, Any]] | None) -> str:
    """The probe coverage table of `storm.json` as HTML (a workload without one shows nothing)."""
    if not rows:
        return ""
    shown = [{**r, "exercised": "unreachable" if r.get("exercised") is None else r["exercised"],
              "why": r.get("why", "")} for r in rows]
    missed = [r["cell"] for r in rows if r.get("exercised") == 0]
    note = (f"<p>Not exercised: {_esc(', '.join(missed))}.</p>" if missed else
            "<p>Every reachable cell was exercised; each unreachable one says why.</p>")
    return ("<h2>Probe coverage</h2><p>Each fenced surface under each relation of the lease presented to the "
            "store's state, the clause it tests and the answer it expects (docs/coverage.md).</p>" + note
            + _table(shown, ["cell", "clause", "expected", "exercised", "why"]))


def coverage_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The coverage table as text, one line per surface (`relation count`, `!` marking a cell never exercised),
    then one line per unreachable cell with why."""
    by_surface: dict[str, list[str]] = {}
    unreachable = []
    for r in rows:
        surface, _, relation = str(r["cell"]).partition(".")
        if r.get("exercised") is None:
            unreachable.append(f"unreachable {r['cell']} ({r['clause']}): {r.get('why', '')}")
            continue
        mark = "!" if not r["exercised"] else ""
        by_surface.setdefault(surface, []).append(f"{relation} {r['exercised']}{mark}")
    missed = sum(1 for r in rows if r.get("exercised") == 0)
    reached = sum(1 for r in rows if r.get("exercised") is not None)
    head = f"probe coverage: {reached - missed} of {reached} cells exercised" + (
        f" ({missed} never, marked !)" if missed else "")
    width = max((len(s) for s in by_surface), default=0)
    return [head, *(f"  {s.ljust(width)}  {', '.join(cells)}" for s, cells in by_surface.items()),
            *(f"  {u}" for u in unreachable)]


def _hosts_html(data: RunData, images: dict[str, bytes]) -> str:
    """A storm across hosts: the host lanes and, per host, throughput and clock offset bound."""
    from soak.report.hosts import host_rows

    rows = host_rows(data)
    if not rows or "hosts" not in images:
        return ""
    return ("<h2>Hosts</h2>\n" + _img(images["hosts"], "host lanes: faults and throughput per host") + "\n"
            + _table(rows, ["host", "slots", "operations", "ops_per_s", "offset_ms", "bound_ms", "partitions",
                             "lost"])
            + "<p>offset: the host's clock minus the orchestrator's, as estimated (Cristian's algorithm); bound: how "
              "far the estimate can be off (clocks.json). The checker's real-time rules take twice the largest bound "
              "as slack.</p>\n")


#: events that are the storm's bookkeeping, not faults it inflicted (a `resume` ends a `pause`, `net-arm` precedes its
#: `net-cut`)
_NOT_FAULTS = frozenset({"spawn", "exit", "boot", "start", "stop", "resume", "net-arm", "net-proxy", "cluster"})


def fault_rows(data: RunData) -> list[dict[str, Any]]:
    """One row per kind of fault the storm inflicted (a network cut per kind of cut): how many, on how many
    processes, and when the first and the last came (seconds since the first operation)."""
    rows: dict[str, dict[str, Any]] = {}
    for e in data.events:
        if e.kind in _NOT_FAULTS:
            continue
        kind = e.kind + (f" ({e.value['fault']})" if e.kind == "net-cut" and e.value.get("fault") else "")
        row = rows.setdefault(kind, {"fault": kind, "count": 0, "targets": set(), "first_s": None, "last_s": None})
        row["count"] += 1
        row["targets"].add(e.value.get("target") or e.process)
        at = round(data.seconds(e.time), 2)
        row["first_s"] = at if row["first_s"] is None else min(row["first_s"], at)
        row["last_s"] = at if row["last_s"] is None else max(row["last_s"], at)
    return [{**r, "targets": len(r["targets"])} for _, r in sorted(rows.items())]


def render_html(data: RunData, images: dict[str, bytes]) -> str:
    from soak.report.plots import latency_table  # matplotlib: imported only when a report is built

    info = data.info
    verdict = data.verdict or {"result": "inconclusive", "violations": [], "reasons": ["no verdict.json in the run"]}
    result = verdict.get("result", "inconclusive")
    n_viol = len(verdict.get("violations", []))
    if result == "pass":
        summary = "No violations observed: every clause the storm exercised held and the quorum was met."
    elif result == "fail":
        summary = f"{n_viol} violation(s) of the contract were observed; each names the clause and the operations."
    else:
        summary = "Inconclusive: " + "; ".join(str(r) for r in verdict.get("reasons", [])) or "no reason recorded"
    quorum_rows = [
        {"item": k, "target": info.quorum_target[k], "reached": info.quorum_reached.get(k, 0)}
        for k in sorted(info.quorum_target)
    ]
    counts = data.surface_counts()
    surface_rows = [{"surface": s, "ok": c["ok"], "refused": c["fail"], "unknown": c["info"]}
                    for s, c in sorted(counts.items())]
    duration = max(info.ended_ns - info.started_ns, 0) / 1e9
    faults = fault_rows(data)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>soak report: {_esc(result)}</title>
<style>{_CSS}</style></head><body>
<h1>Verdict: <span class="{_esc(result)}">{_esc(result.upper())}</span></h1>
<p>{_esc(summary)}</p>
<table>
<tr><th>store</th><td><code>{_esc(info.store)}</code></td><th>workload</th><td>{_esc(info.workload)}</td></tr>
<tr><th>seed</th><td>{_esc(info.seed)}</td><th>lease ttl</th><td>{_esc(info.lease_ttl_ms)} ms</td></tr>
<tr><th>workers</th><td>{_esc(info.workers)}</td><th>storm ended</th><td>{_esc(info.status)} after {duration:.1f} s</td></tr>
<tr><th>soak</th><td>{_esc(info.soak_version)}</td><th>run directory</th><td><code>{_esc(data.run_dir.name)}</code></td></tr>
{_rates_html(data.storm)}</table>
<h2>Violations</h2>
{_violations_html(verdict) or "<p>None.</p>"}
<h2>Timeline</h2>
{_img(images["timeline"], "timeline of tenures per worker" if data.timeline is None else "timeline of tenures")}\
{_sections_html(data.timeline.sections) if data.timeline is not None else ""}
{_hosts_html(data, images)}<h2>Activity</h2>
{_img(images["activity"], "activity rate per surface")}
{_table(surface_rows, ["surface", "ok", "refused", "unknown"])}
<h2>Latency</h2>
{_img(images["latency"], "latency percentiles per surface")}
{_table(latency_table(data), ["surface", "n", "p50", "p90", "p99", "max"])}
<h2>Quorum</h2>
{_table(quorum_rows, ["item", "target", "reached"]) if quorum_rows else "<p>No quorum recorded.</p>"}
{coverage_html(data.storm.get("coverage"))}
<h2>Faults</h2>
{_table(faults, ["fault", "count", "targets", "first_s", "last_s"]) if faults else "<p>The nemesis inflicted none.</p>"}
<h2>Workers</h2>
{_img(images["workers"], "per-worker progress")}
{_table(data.per_worker(), ["process", "ok", "fail", "info", "worst_ms"])}
<h2>Environment</h2>
{_table([{"key": k, "value": v} for k, v in sorted(info.environment.items())], ["key", "value"])}
</body></html>
"""


def build_report(run_dir: str | os.PathLike[str]) -> Path:
    """Write report.html, the PNG plots and junit.xml into `run_dir`; return the HTML path."""
    from soak.report.plots import activity_png, latency_png, timeline_png, workers_png  # matplotlib, only here

    data = load_run_data(run_dir)
    images = {
        "timeline": timeline_png(data),
        "activity": activity_png(data),
        "latency": latency_png(data),
        "workers": workers_png(data),
    }
    from soak.report.hosts import hosts_png  # a storm across hosts only

    lanes = hosts_png(data)
    if lanes is not None:
        images["hosts"] = lanes
    run_dir = Path(run_dir)
    for name, png in images.items():
        (run_dir / f"{name}.png").write_bytes(png)
    (run_dir / "junit.xml").write_bytes(junit_xml(data.info, data.verdict))
    out = run_dir / "report.html"
    out.write_text(render_html(data, images), encoding="utf-8")
    return out


def configure_parser(parser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by `soak storm`")


def run_cli(args) -> int:
    path = build_report(args.run_dir)
    print(path)
    return 0

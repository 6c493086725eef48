"""The certificate for people: `render_html` (one self-contained page), `render_table` (the clause x
suite table) and `render_summary` (what `soak certify` prints)."""

from __future__ import annotations

import html
import json
from typing import Any

from soak.certify._plan import FAIL, SUITES
from soak.certify._sources import one_line
from soak.report import coverage_html, coverage_lines

__all__ = ["render_html", "render_summary", "render_table"]

_HEADLINE = {"pass": "PASS: no violations observed", "fail": "FAIL", "inconclusive": "INCONCLUSIVE: not a pass"}


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _shown(c: dict[str, Any]) -> str:
    """A clause's result as shown: a choice clause shows the choice."""
    if c["result"] == "choice":
        return f"choice: {c.get('choice')}"
    if c.get("choice") and c["result"] in ("pass", "fail"):
        return f"{c['result']} (choice: {c['choice']})"
    return c["result"]


def _columns(cert: dict[str, Any]) -> list[str]:
    """The certificate's suites, in table order: its clauses' (every clause lists every suite)."""
    first = next(iter(cert["clauses"].values()), None)
    return list(first["suites"]) if first and first.get("suites") else list(SUITES)


def render_table(cert: dict[str, Any]) -> str:
    """Which suite exercised which clause: one row per clause, one column per suite (`-`: the suite
    has nothing to say of it)."""
    suites = _columns(cert)
    header = ["clause", "requirement", "result", *suites]
    rows = [[clause, c["requirement"], _shown(c), *(c["suites"].get(s, "-") for s in suites)]
            for clause, c in cert["clauses"].items()]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*r).rstrip() for r in [header, *rows])


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px;color:#222}
.pass{color:#176d2c} .fail{color:#b00020} .na{color:#777} .ne{color:#9a6700} .choice{color:#1f4e99}
table{border-collapse:collapse;margin:.5em 0 1.5em} td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;vertical-align:top}
th{background:#f3f3f3;text-align:left} code{background:#f6f6f6;padding:1px 3px}
.note{color:#555;font-size:13px}
"""


def _css(result: str) -> str:
    word = result.split(":")[0].split(" ")[0]
    return {"pass": "pass", "fail": "fail", "error": "fail", "choice": "choice", "not-exercised": "ne",
            "inconclusive": "ne", "incomplete": "ne"}.get(word, "na")


def _component_line(name: str, comp: dict[str, Any]) -> str:
    """One readable line per suite for the HTML (the JSON keeps every field)."""
    took = f" in {comp['elapsed_s']} s" if "elapsed_s" in comp else ""
    busy = f"; busy: {comp['busy']}" if comp.get("busy") else ""
    if comp.get("crash"):
        return f"{comp['crash']}{took}"
    if name == "conformance":
        return (f"{comp['checks']} checks, {comp['failed']} failed, {comp.get('undecided', 0)} not decided "
                f"({comp['timing']}, ttl {comp['lease_ttl_ms']} ms){took}{busy}")
    if name == "model":
        line = (f"{comp['max_examples']} programs of up to {comp['stateful_step_count']} steps, "
                f"{comp.get('clock_reason', '')}{took}{busy}")
        if comp.get("error") or comp.get("reason"):
            line += f"; stopped at {comp.get('clause') or 'an error'}: {comp.get('error') or comp.get('reason')}"
        return line
    if name == "boot":
        return (f"{comp['processes']} processes x {comp['rounds']} rounds: {comp['failures']} of "
                f"{comp['attempts']} boots failed {comp['by_type'] or ''}; worst boot "
                f"{comp['worst_boot_s'] * 1000:.0f} ms{took}{busy}")
    if name == "storm" and "status" in comp:
        short = [f"{k} {comp['quorum_reached'].get(k, 0)}/{v}" for k, v in comp["quorum_target"].items()
                 if comp["quorum_reached"].get(k, 0) < v]
        line = (f"{comp['scenario']} preset, {comp['workers']} workers, ttl {comp['lease_ttl_ms']} ms: ended "
                f"{comp['status']}, {comp['violations']} violation(s)")
        if comp["violated_clauses"]:
            line += f" of {', '.join(comp['violated_clauses'])}"
        if short:
            line += f"; short of quorum: {', '.join(short[:6])}"
        return line + took + (f"; {comp['report_error']}" if comp.get("report_error") else "")
    return str(comp.get("detail", ""))


def _seen_by(sources: list[dict[str, str]]) -> str:
    lines = [f"<b>{_esc(s['source'])}</b> {_esc(s['choice'])}: {_esc(s['detail'])}" for s in sources]
    return "<br>".join(lines) or "no suite observed it"


def render_html(cert: dict[str, Any]) -> str:
    """The certificate as one self-contained page; every string from a store or error is escaped."""
    result = cert["result"]
    suites = _columns(cert)
    matrix, details = [], []
    for clause, c in cert["clauses"].items():
        shown = _shown(c)
        cells = "".join(f"<td class='{_css(v)}'>{_esc(v)}</td>" for v in (c["suites"].get(s, "-") for s in suites))
        matrix.append(f"<tr><td><code>{_esc(clause)}</code><br><span class='note'>{_esc(c['title'])}</span></td>"
                      f"<td>{_esc(c['requirement'])}</td><td class='{_css(shown)}'><b>{_esc(shown)}</b></td>{cells}</tr>")
        srcs = "<br>".join(f"<b>{_esc(s['source'])}</b> {_esc(s['result'])}: {_esc(s['detail'])}" for s in c["sources"])
        reason = f"<br><i>{_esc(c['reason'])}</i>" if c.get("reason") else ""
        details.append(f"<tr><td><code>{_esc(clause)}</code></td><td class='{_css(shown)}'>{_esc(shown)}</td>"
                       f"<td>{srcs}{reason}</td></tr>")
    suite_heads = "".join(f"<th>{_esc(s)}</th>" for s in suites)
    choice_rows = "".join(
        f"<tr><th>{_esc(name)}</th><td class='choice'><b>{_esc(ch['choice'])}</b></td>"
        f"<td><code>{_esc(ch['clause'])}</code></td><td>{_seen_by(ch['sources'])}</td></tr>"
        for name, ch in cert.get("choices", {}).items()
    )
    comp_rows = "".join(
        f"<tr><th>{_esc(name)}</th><td class='{_css(str(comp.get('result')))}'>{_esc(comp.get('result'))}</td>"
        f"<td>{_esc(_component_line(name, comp))}</td></tr>"
        for name, comp in cert["components"].items()
    )
    env = cert["environment"]
    env_rows = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in env.items() if k != "packages")
    env_rows += "".join(f"<tr><th>package {_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in env.get("packages", {}).items())
    report = cert["components"].get("storm", {}).get("report")
    report_link = f'<p>Storm report: <a href="{_esc(report)}">{_esc(report)}</a></p>' if report else ""
    description = cert.get("store_description", "")
    description = "" if description in (cert["store"], cert["store"].split("?")[0]) else description
    headline = _HEADLINE.get(result, result.upper())
    if result == "fail":
        headline += ": " + ", ".join(cert["violated"])
    profile = cert.get("profile_clauses", {})
    required = ", ".join(profile.get("required", []))
    optional = ", ".join(profile.get("optional", {}))
    clock = cert.get("injectable_clock", {})
    workload = f" of the {_esc(cert['workload'])} workload" if cert.get("workload", "runs") != "runs" else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>soak certificate: {_esc(result)}</title>
<style>{_CSS}</style></head><body>
<h1>Certificate: <span class="{_css(result)}">{_esc(headline)}</span></h1>
<p>{_esc(cert['statement'])}.</p>
<p class="note">This certificate records what these runs observed. Passing means no violations were observed in
them and every clause the profile requires was exercised by at least one suite; it does not establish that no
violations exist.</p>
<table>
<tr><th>store</th><td><code>{_esc(cert['store'])}</code> {_esc(description)}</td></tr>
<tr><th>profile</th><td>{_esc(cert['profile'])}{workload} ({_esc(cert['mode'])} run): requires exercised {_esc(required)}
{('; judged where exercised: ' + _esc(optional)) if optional else ''}</td></tr>
<tr><th>injectable clock</th><td>{_esc(clock.get('detail', ''))}</td></tr>
<tr><th>soak</th><td>{_esc(cert['soak_version'])}, suite sha256 <code>{_esc(cert['suite_sha256'])}</code> ({_esc(cert['suite_files'])} files)</td></tr>
<tr><th>created</th><td>{_esc(cert['created'])}, {_esc(cert['elapsed_s'])} s</td></tr>
<tr><th>seeds</th><td><code>{_esc(json.dumps(cert['seeds']))}</code></td></tr>
<tr><th>files digested</th><td>{len(cert['digests'])} under <code>{_esc(cert.get('run_dir'))}</code>; re-check with
<code>soak certify --verify certificate.json</code></td></tr>
</table>
{report_link}
<h2>Clauses, and which suite exercised each</h2>
<p class="note">pass: exercised and held; fail: seen broken; choice: the contract leaves it to the store, and this
is what the store chose; not-exercised: no suite exercised it (why below); -: the suite has nothing to say of it.</p>
<table><tr><th>clause</th><th>requirement</th><th>result</th>{suite_heads}</tr>{''.join(matrix)}</table>
<h2>The store's choices</h2>
<table><tr><th>choice</th><th>the store</th><th>clause</th><th>seen by</th></tr>{choice_rows}</table>
<h2>What each suite observed</h2>
<table><tr><th>clause</th><th>result</th><th>sources</th></tr>{''.join(details)}</table>
<h2>Suites</h2>
<table><tr><th>suite</th><th>result</th><th>details</th></tr>{comp_rows}</table>
{coverage_html(cert["components"].get("storm", {}).get("coverage"))}
<h2>Environment</h2>
<table>{env_rows}</table>
</body></html>
"""


def render_summary(cert: dict[str, Any]) -> str:
    """What `soak certify` prints: the result, the store's choices, the clause x suite table, why any
    clause did not pass, and the busy answers each suite retried."""
    workload = f"{cert['workload']} workload, " if cert.get("workload", "runs") != "runs" else ""
    lines = [f"certify: {cert['result'].upper()} ({cert['store']}, {workload}profile {cert['profile']}, {cert['mode']} run): "
             f"{cert['statement']}"]
    lines.append(f"injectable clock: {cert['injectable_clock']['detail']}")
    for name, ch in cert["choices"].items():
        seen = ", ".join(f"{s['source']} {s['choice']}" for s in ch["sources"]) or "no suite observed it"
        lines.append(f"choice {name}: {ch['choice']} ({seen})")
    lines.append("which suite exercised which clause:")
    lines += ["  " + row for row in render_table(cert).splitlines()]
    for clause in cert["violated"]:
        bad = [s for s in cert["clauses"][clause]["sources"] if s["result"] in (FAIL, "error")]
        for s in bad[:2]:
            lines.append(f"  FAIL {clause}: {s['source']} {s['result']}: {one_line(s['detail'], 300)}")
    for clause in cert["not_exercised"]:
        lines.append(f"  NOT EXERCISED {clause} (required): {one_line(cert['clauses'][clause].get('reason', ''), 300)}")
    for clause in cert.get("optional_not_exercised", []):
        lines.append(f"  not exercised {clause} (not required): "
                     f"{one_line(cert['clauses'][clause].get('reason', ''), 300)}")
    coverage = cert["components"].get("storm", {}).get("coverage")
    if coverage:
        lines += ["storm " + line if i == 0 else line for i, line in enumerate(coverage_lines(coverage))]
    busy = [f"{name} {comp['busy']}" for name, comp in cert["components"].items() if comp.get("busy")]
    busy.append(f"certify's own probe {cert['injectable_clock']['busy']}")
    lines.append("busy: " + "; ".join(busy))
    return "\n".join(lines)

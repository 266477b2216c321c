#!/usr/bin/env python3
"""The guide's pictures, drawn as inline SVG: the sequence diagrams from the specs below,
and the plots from the bench's own JSON (`BENCHMARKS.json`, written by
`cargo run --release -p lockwise-bench --bin bench -- --json BENCHMARKS.json`).

    python3 scripts/diagrams.py          # rewrite the pictures in docs/guide/*.md
    python3 scripts/diagrams.py --check  # fail if a page's picture differs from its source

A page holds a picture between `<!-- diagram: NAME -->` and `<!-- /diagram -->`; rustdoc
renders the SVG in place (docs.rs). The SVG has no blank line, so markdown leaves it whole.
"""
import html
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
COL = 230  # px between lifelines
ROW = 36  # px per step
TOP = 46  # px above the first step

# A spec: title, participants, steps. A step is (from, to, label) for a message, with
# "-->" in `to` for a reply (dashed), or ("note", over, text) for a note on a lifeline.
SPECS = {
    "handoff": (
        "A contended handoff: the release wakes the waiter through pub/sub",
        ["task B (waiter)", "client B's listener", "Redis", "task A (holder)"],
        [
            ("task B (waiter)", "Redis", "EVALSHA lock.lua"),
            ("Redis", "-->task B (waiter)", "{0, pttl}: held by A"),
            ("task B (waiter)", "client B's listener", "wait on the lock's channel"),
            ("client B's listener", "Redis", "SUBSCRIBE (once per lock and client)"),
            ("task B (waiter)", "Redis", "EVALSHA lock.lua (look again)"),
            ("Redis", "-->task B (waiter)", "{0, pttl}: still held"),
            ("task A (holder)", "Redis", "EVALSHA unlock.lua: DEL, PUBLISH"),
            ("Redis", "-->client B's listener", "message on the channel"),
            ("client B's listener", "task B (waiter)", "notify one waiter (per client)"),
            ("task B (waiter)", "Redis", "EVALSHA lock.lua"),
            ("Redis", "-->task B (waiter)", "{1, 1}: acquired"),
            ("note", "task B (waiter)", "release to acquire: p50 1.8 PING round trips"),
        ],
    ),
    "watchdog": (
        "The watchdog: one task renews every held lock of a client, in batches",
        ["guard (task)", "watchdog task", "Redis"],
        [
            ("guard (task)", "watchdog task", "register the hold (timer wheel)"),
            ("note", "watchdog task", "due every watchdog_timeout / 3"),
            ("watchdog task", "Redis", "EVALSHA renew.lua, up to 100 keys"),
            ("Redis", "-->watchdog task", "per key: renewed or gone"),
            ("watchdog task", "-->guard (task)", "renewed: loss deadline moves on"),
            ("watchdog task", "Redis", "next period: EVALSHA renew.lua"),
            ("Redis", "-->watchdog task", "gone (force-unlocked, expired)"),
            ("watchdog task", "guard (task)", "cancel lost()"),
            ("note", "guard (task)", "no reply by the deadline: lost() too"),
        ],
    ),
    "settlement": (
        "A lost reply: the settlement makes Redis hold what the guards hold",
        ["task", "hold registry", "Redis"],
        [
            ("task", "hold registry", "count the call in flight"),
            ("task", "Redis", "EVALSHA lock.lua (re-entry: count 1 to 2)"),
            ("note", "Redis", "it runs; the reply is lost (connection killed)"),
            ("Redis", "-->task", "error: outcome unknown, no new guard"),
            ("task", "hold registry", "owner in doubt: its acquires wait"),
            ("hold registry", "Redis", "settle: read the owner's count"),
            ("Redis", "-->hold registry", "2, but 1 live guard"),
            ("hold registry", "Redis", "release one, only if still 2"),
            ("Redis", "-->hold registry", "1: what the guards hold"),
        ],
    ),
}


def draw(name):
    title, people, steps = SPECS[name]
    x = {p: 90 + i * COL for i, p in enumerate(people)}
    width = 180 + COL * (len(people) - 1)
    height = TOP + ROW * (len(steps) + 1)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12" '
        f'role="img" aria-label="{html.escape(title)}">',
        f"<title>{html.escape(title)}</title>",
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    for p in people:
        out.append(
            f'<text x="{x[p]}" y="20" text-anchor="middle" font-weight="bold">{html.escape(p)}</text>'
        )
        out.append(
            f'<line x1="{x[p]}" y1="28" x2="{x[p]}" y2="{height - 8}" stroke="#999" stroke-dasharray="2,3"/>'
        )
    for i, (a, b, label) in enumerate(steps):
        y = TOP + ROW * i + 14
        if a == "note":
            w = 7 * len(label) + 16
            left = min(max(x[b] - w // 2, 4), width - w - 4)
            out.append(
                f'<rect x="{left}" y="{y - 13}" width="{w}" height="20" fill="#fff8d0" stroke="#c9b458"/>'
            )
            out.append(
                f'<text x="{left + w // 2}" y="{y + 1}" text-anchor="middle">{html.escape(label)}</text>'
            )
            continue
        reply = b.startswith("-->")
        b = b.removeprefix("-->")
        x1, x2 = x[a], x[b]
        dash = ' stroke-dasharray="5,4"' if reply else ""
        out.append(f'<line x1="{x1}" y1="{y}" x2="{x2}" y2="{y}" stroke="#333"{dash}/>')
        d = 8 if x2 > x1 else -8
        out.append(
            f'<polygon points="{x2},{y} {x2 - d},{y - 4} {x2 - d},{y + 4}" fill="#333"/>'
        )
        out.append(
            f'<text x="{(x1 + x2) // 2}" y="{y - 5}" text-anchor="middle">{html.escape(label)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)


def svg_open(width, height, title):
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12" '
        f'role="img" aria-label="{html.escape(title)}">',
        f"<title>{html.escape(title)}</title>",
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="10" y="18" font-weight="bold">{html.escape(title)}</text>',
    ]


def bench():
    return json.loads((ROOT / "BENCHMARKS.json").read_text())


def plot_handoff():
    """Release-to-acquire gap of a contended handoff against a PING round trip (µs)."""
    b = bench()
    bars = [
        ("PING round trip", b["ping_rtt_us"]["p50"], b["ping_rtt_us"]["p99"]),
        ("RLock handoff", b["contended"]["gap_p50_us"], b["contended"]["gap_p99_us"]),
        ("FairLock handoff", b["fair"]["gap_p50_us"], b["fair"]["gap_p99_us"]),
    ]
    top = max(p99 for _, _, p99 in bars)
    width, left = 620, 130
    scale = (width - left - 150) / top
    out = svg_open(width, 44 + 46 * len(bars) + 20,
                   "Handoff gap against a PING round trip (µs, same run)")
    for i, (label, p50, p99) in enumerate(bars):
        y = 36 + 46 * i
        out.append(f'<text x="{left - 8}" y="{y + 22}" text-anchor="end">{label}</text>')
        out.append(f'<rect x="{left}" y="{y + 6}" width="{p99 * scale:.1f}" height="16" fill="#c6d9f0"/>')
        out.append(f'<rect x="{left}" y="{y + 10}" width="{p50 * scale:.1f}" height="8" fill="#2f6db5"/>')
        out.append(f'<text x="{left + p99 * scale + 6:.1f}" y="{y + 19}">p50 {p50:.0f}, p99 {p99:.0f}</text>')
    y = 44 + 46 * len(bars)
    out.append(f'<rect x="{left}" y="{y}" width="10" height="8" fill="#2f6db5"/>')
    out.append(f'<text x="{left + 14}" y="{y + 8}">p50</text>')
    out.append(f'<rect x="{left + 50}" y="{y}" width="10" height="8" fill="#c6d9f0"/>')
    out.append(f'<text x="{left + 64}" y="{y + 8}">p99</text>')
    out.append("</svg>")
    return "\n".join(out)


def plot_throughput():
    """Uncontended lock + unlock pairs per second against the number of tasks."""
    rows = bench()["throughput"]["rows"]
    series = [
        ("raw lock + unlock scripts", "ceiling", "#999999"),
        ("SET NX PX lock", "set_nx_px", "#d08a2c"),
        ("lockwise", "lockwise", "#2f6db5"),
    ]
    top = max(r[key]["pairs_per_s"] for r in rows for _, key, _ in series)
    top = -(-top // 20_000) * 20_000  # ticks on round numbers
    width, height, left, bottom = 620, 300, 70, 250
    step = (width - left - 40) / max(1, len(rows) - 1)
    y_of = lambda v: bottom - v / top * (bottom - 40)
    out = svg_open(width, height, "Uncontended pairs per second against concurrency (same run)")
    out.append(f'<line x1="{left}" y1="{bottom}" x2="{width - 30}" y2="{bottom}" stroke="#333"/>')
    out.append(f'<line x1="{left}" y1="40" x2="{left}" y2="{bottom}" stroke="#333"/>')
    for k in range(5):
        v = top * k / 4
        out.append(f'<text x="{left - 6}" y="{y_of(v) + 4:.1f}" text-anchor="end">{v / 1000:.0f}k</text>')
    for i, r in enumerate(rows):
        x = left + step * i
        out.append(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{r["tasks"]}</text>')
    out.append(f'<text x="{(left + width - 30) / 2:.0f}" y="{bottom + 34}" text-anchor="middle">tasks</text>')
    for n, (label, key, color) in enumerate(series):
        pts = " ".join(
            f"{left + step * i:.1f},{y_of(r[key]['pairs_per_s']):.1f}" for i, r in enumerate(rows)
        )
        out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>')
        out.append(f'<rect x="{left + 10 + 190 * n}" y="28" width="12" height="4" fill="{color}"/>')
        out.append(f'<text x="{left + 26 + 190 * n}" y="33">{label}</text>')
    out.append("</svg>")
    return "\n".join(out)


def plot_peers():
    """The time a contended lock sits free between holds (p50, µs): lockwise and its peers."""
    p = bench()["peers"]
    bars = [("PING round trip", p["ping_p50_us"], None)] + [
        (r["peer"], r["handoff_gap_p50_us"], r["wait_p99_ms"]) for r in p["rows"]
    ]
    top = max(v for _, v, _ in bars)
    width, left = 620, 130
    scale = (width - left - 190) / top
    tasks = p["handles"] * p["tasks_per_handle"]
    out = svg_open(width, 44 + 34 * len(bars) + 10,
                   f"Contended lock ({tasks} tasks): free between holds, p50 (µs, same run)")
    for i, (label, p50, wait_p99) in enumerate(bars):
        y = 36 + 34 * i
        color = "#999999" if wait_p99 is None else ("#2f6db5" if label == "lockwise" else "#d08a2c")
        note = f"{p50:.0f}" + ("" if wait_p99 is None else f" (waiters' p99 {wait_p99:.0f} ms)")
        out.append(f'<text x="{left - 8}" y="{y + 18}" text-anchor="end">{html.escape(label)}</text>')
        out.append(f'<rect x="{left}" y="{y + 6}" width="{max(p50 * scale, 1):.1f}" height="16" fill="{color}"/>')
        out.append(f'<text x="{left + p50 * scale + 6:.1f}" y="{y + 18}">{note}</text>')
    out.append("</svg>")
    return "\n".join(out)


PLOTS = {"handoff-latency": plot_handoff, "throughput": plot_throughput, "peers": plot_peers}


BLOCK = re.compile(r"(<!-- diagram: ([\w-]+) -->\n)(.*?)(<!-- /diagram -->)", re.S)


def main():
    check = "--check" in sys.argv[1:]
    stale, seen = [], set()
    for page in sorted((ROOT / "docs/guide").glob("*.md")):
        text = page.read_text()

        def fill(m):
            seen.add(m.group(2))
            name = m.group(2)
            picture = PLOTS[name]() if name in PLOTS else draw(name)
            return m.group(1) + picture + "\n" + m.group(4)

        new = BLOCK.sub(fill, text)
        if new != text:
            stale.append(page.name)
            if not check:
                page.write_text(new)
    missing = sorted((set(SPECS) | set(PLOTS)) - seen)
    if missing:
        print(f"diagrams with no place in the guide: {missing}")
        return 1
    if check and stale:
        print(f"diagrams out of date in {stale}: run python3 scripts/diagrams.py")
        return 1
    print("diagrams OK" if check else f"diagrams written ({len(seen)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The guide's sequence diagrams, drawn as inline SVG from the specs below.

    python3 scripts/diagrams.py          # rewrite the diagrams in docs/guide/*.md
    python3 scripts/diagrams.py --check  # fail if a page's diagram differs from its spec

A page holds a diagram between `<!-- diagram: NAME -->` and `<!-- /diagram -->`; rustdoc
renders the SVG in place (docs.rs). The SVG has no blank line, so markdown leaves it whole.
"""
import html
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


BLOCK = re.compile(r"(<!-- diagram: (\w+) -->\n)(.*?)(<!-- /diagram -->)", re.S)


def main():
    check = "--check" in sys.argv[1:]
    stale, seen = [], set()
    for page in sorted((ROOT / "docs/guide").glob("*.md")):
        text = page.read_text()

        def fill(m):
            seen.add(m.group(2))
            return m.group(1) + draw(m.group(2)) + "\n" + m.group(4)

        new = BLOCK.sub(fill, text)
        if new != text:
            stale.append(page.name)
            if not check:
                page.write_text(new)
    missing = sorted(set(SPECS) - seen)
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

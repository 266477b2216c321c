#!/usr/bin/env python3
"""Every public type of the `lockwise` crate, and every public method users call on one (its
inherent methods and its traits' own methods), has a code example in its docs.

Usage: python3 scripts/check-examples.py

Reads the crate's rustdoc JSON, built here with nightly's
`cargo +nightly rustdoc -p lockwise --lib --all-features -- -Z unstable-options --output-format json`
(all features, as docs.rs builds it), into a scratch target dir. Without a nightly toolchain it
says so and exits 0 (skipped, like scripts/check-minimal-versions.sh). Exits 1, listing them,
when an item has no fenced code block; 2 when the JSON is in a format it does not know.
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
# rustdoc JSON format versions whose layout this script reads (`index`, `paths`, `inner`).
KNOWN_FORMATS = {57}
TYPES = ("struct", "enum", "trait", "type_alias", "union")


def build(target):
    if subprocess.run(["cargo", "+nightly", "--version"], capture_output=True).returncode:
        print("check-examples: no nightly toolchain; skipped", file=sys.stderr)
        sys.exit(0)
    cmd = ["cargo", "+nightly", "rustdoc", "-p", "lockwise", "--lib", "--all-features", "--",
           "-Z", "unstable-options", "--output-format", "json"]
    env = dict(os.environ, CARGO_TARGET_DIR=target)
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"check-examples: rustdoc failed:\n{done.stderr}")
    return json.loads((pathlib.Path(target) / "doc" / "lockwise.json").read_text())


def has_example(item):
    return "```" in (item.get("docs") or "")


def main():
    target = os.environ.get("CHECK_EXAMPLES_TARGET_DIR") or tempfile.mkdtemp(prefix="lockwise-doc-")
    doc = build(target)
    if doc.get("format_version") not in KNOWN_FORMATS:
        sys.exit(f"check-examples: rustdoc JSON format {doc.get('format_version')} is not one of "
                 f"{sorted(KNOWN_FORMATS)}: check the layout this script reads, then add it")
    index = doc["index"]
    item = lambda i: index.get(str(i))
    missing, types, methods = [], 0, 0
    for iid, path in doc["paths"].items():
        if path.get("crate_id") != 0 or path["kind"] not in TYPES or item(iid) is None:
            continue
        ty = item(iid)
        name = "::".join(path["path"])
        types += 1
        if not has_example(ty):
            missing.append(f"type   {name}")
        (kind, inner), = ty["inner"].items()
        members = []
        if kind == "trait":
            members = inner["items"]
        for impl_id in inner.get("impls", []) if isinstance(inner, dict) else []:
            imp = (item(impl_id) or {}).get("inner", {}).get("impl")
            if imp and imp.get("trait") is None and not imp.get("synthetic") and not imp.get("blanket_impl"):
                members += [m for m in imp["items"] if (item(m) or {}).get("visibility") == "public"]
        for m in map(item, members):
            if m and "function" in m["inner"]:
                methods += 1
                if not has_example(m):
                    missing.append(f"method {name}::{m['name']}")
    if missing:
        print(f"check-examples: {len(missing)} public items without a code example:")
        print("\n".join(f"  {m}" for m in sorted(missing)))
        sys.exit(1)
    print(f"examples OK ({types} public types, {methods} methods)")


if __name__ == "__main__":
    main()

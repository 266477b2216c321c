#!/usr/bin/env python3
"""Fails on a broken link in the README, the guide and CONTRIBUTING.md.

The README is also the crate's front page on docs.rs and the guide pages are rustdoc
modules there, so neither may link a file of the repository by a relative path (it breaks
on docs.rs, and most such files are not in the package). Checked:
- `](#anchor)`: a heading of the same page has that anchor;
- `](crate::guide::page#anchor)` and docs.rs guide URLs: the page exists and has the anchor;
- docs.rs item URLs (`struct.X.html`, `#method.m`): `X` is exported by `src/lib.rs` and
  has a public method `m`;
- in CONTRIBUTING.md (read in the repository only): relative links name existing files.
Item links in the Rust sources are rustdoc's to check (`cargo doc` with `-D warnings`).
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = "https://docs.rs/lockwise/latest/lockwise/"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchor(heading):
    text = heading.lstrip("#").strip().lower()
    text = re.sub(r"[^a-z0-9 _-]", "", text)
    return re.sub(r"\s", "-", text)


def anchors(path):
    out, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"^#{1,6} ", line):
            out.add(anchor(line))
    return out


def links(path):
    fenced = False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            for m in LINK.finditer(line):
                yield n, m.group(1)


EXPORTS = (ROOT / "src/lib.rs").read_text()
SOURCES = "\n".join(p.read_text() for p in (ROOT / "src").rglob("*.rs"))


def check_docs_rs(target):
    rest = target[len(DOCS):]
    path, _, frag = rest.partition("#")
    m = re.fullmatch(r"guide/([a-z_]+)/index\.html", path)
    if m:
        page = ROOT / "docs/guide" / f"{m.group(1)}.md"
        if not page.exists():
            return f"no guide page {page.name}"
        if frag and frag not in anchors(page):
            return f"no heading #{frag} in {page.name}"
        return None
    m = re.fullmatch(r"(struct|enum|trait|fn|constant)\.([A-Za-z_0-9]+)\.html", path)
    if m:
        name = m.group(2)
        if not re.search(rf"\b{name}\b", EXPORTS):
            return f"{name} is not exported by src/lib.rs"
        mm = re.fullmatch(r"method\.([a-z_0-9]+)", frag)
        if mm and not re.search(rf"pub (async )?fn {mm.group(1)}\b", SOURCES):
            return f"no public method {mm.group(1)}"
        return None
    if path in ("", "index.html"):
        return None
    return f"unchecked docs.rs path {path}"


def check(path, published):
    problems = []
    own = anchors(path)
    for n, target in links(path):
        where = f"{path.relative_to(ROOT)}:{n}: {target}"
        if target.startswith("#"):
            if target[1:] not in own:
                problems.append(f"{where}: no such heading on this page")
        elif target.startswith("crate::guide::"):
            page, _, frag = target[len("crate::guide::"):].partition("#")
            file = ROOT / "docs/guide" / f"{page}.md"
            if not file.exists():
                problems.append(f"{where}: no guide page {page}")
            elif frag and frag not in anchors(file):
                problems.append(f"{where}: no heading #{frag} in {file.name}")
        elif target.startswith(DOCS):
            why = check_docs_rs(target)
            if why:
                problems.append(f"{where}: {why}")
        elif target.startswith(("https://", "http://", "crate::", "super::", "self::")):
            continue
        elif published:
            problems.append(f"{where}: a relative link breaks on docs.rs (name the file in code)")
        elif not (path.parent / target.split("#")[0]).exists():
            problems.append(f"{where}: no such file")
    return problems


def main():
    problems = check(ROOT / "README.md", True)
    for page in sorted((ROOT / "docs/guide").glob("*.md")):
        problems += check(page, True)
    problems += check(ROOT / "CONTRIBUTING.md", False)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} broken link(s)")
        return 1
    print("links OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

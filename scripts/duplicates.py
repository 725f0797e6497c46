#!/usr/bin/env python3
"""Counts the identical duplicate blocks of the repository's code.

A block is a run of at least MIN_LINES code lines that stands, the same to
the letter, in two places (two files, or two places of one file). Blank
lines, comments, lines of punctuation alone, `..Default::default()`,
`use`/`import` lines and the lines inside Rust raw strings (a test's YAML,
a rule's SQL: data, not code) are passed over and white space is folded,
so a block differs from its copy only by those. Two files (or a file
with itself) that share blocks are one pair, however many blocks they
share: the count is of the places where code is copied; the list names
each block.

    scripts/duplicates.py             # the count and the pairs
    scripts/duplicates.py --max 30    # exit 1 when there are more than 30

`.ci/run` runs it with the house's budget (20): a change that copies a
block instead of sharing it fails CI until the copy is made one.
"""
import argparse
import collections
import re
import subprocess
import sys

MIN_LINES = 6
SOURCES = (".rs", ".go", ".py", ".js", ".sh", ".java")
SKIP = ("node_modules/", "vendor/", "third_party/")
PUNCT = re.compile(r"^[\s{}()\[\];,.:<>|&*=-]*$")
IMPORT = re.compile(r"^(use |import |from \S+ import |pub use |mod \w+;$|pub mod \w+;$)")
COMMENT = ("//", "#", "/*", "*", "*/")
# Struct literals' "the rest by default": in every literal, no code to share.
FILLERS = ("..Default::default()", "..Default::default(),", "..Default::default()})")


def code_lines(text, raw_strings=False):
    """(line number, folded text) of the lines that count. With
    `raw_strings` (Rust), the lines inside a raw string literal (`r#"`
    to `"#`: a test's YAML configuration, a rule's SQL) are data and do
    not count."""
    out = []
    in_raw = False
    for n, raw in enumerate(text.split("\n"), 1):
        if raw_strings:
            opens, closes = raw.count('r#"'), raw.count('"#')
            if in_raw:
                in_raw = closes == 0
                continue
            if opens > closes:
                in_raw = True
        line = " ".join(raw.split())
        if not line or PUNCT.match(line) or IMPORT.match(line) or line in FILLERS:
            continue
        if line.startswith(COMMENT) and not line.startswith("#["):
            continue
        out.append((n, line))
    return out


def files():
    names = subprocess.run(
        ["git", "ls-files"], capture_output=True, text=True, check=True
    ).stdout.split()
    return [f for f in names if f.endswith(SOURCES) and not any(s in f for s in SKIP)]


def pairs(paths):
    """Pairs of places ((file, first line), (file, first line)) that share a run."""
    lines = {}
    windows = collections.defaultdict(list)
    for f in paths:
        try:
            with open(f, encoding="utf-8") as h:
                ls = code_lines(h.read(), raw_strings=f.endswith(".rs"))
        except (UnicodeDecodeError, OSError):
            continue
        lines[f] = ls
        for i in range(len(ls) - MIN_LINES + 1):
            key = "\n".join(t for _, t in ls[i : i + MIN_LINES])
            windows[key].append((f, i))
    found = set()
    for places in windows.values():
        # A run standing in many places is boilerplate, not a copy to share.
        if len(places) < 2 or len(places) > 8:
            continue
        for a in range(len(places)):
            for b in range(a + 1, len(places)):
                (fa, ia), (fb, ib) = places[a], places[b]
                if fa == fb and abs(ia - ib) < MIN_LINES:
                    continue  # a run that overlaps itself
                # Walk back to the run's start, so a long run counts once.
                while ia > 0 and ib > 0 and lines[fa][ia - 1][1] == lines[fb][ib - 1][1]:
                    ia, ib = ia - 1, ib - 1
                    if fa == fb and abs(ia - ib) < MIN_LINES:
                        break
                found.add(tuple(sorted([(fa, lines[fa][ia][0]), (fb, lines[fb][ib][0])])))
    # Runs of one pair of places that start at different lines of the same
    # two files and overlap are one duplicate: keep the first of each.
    by_files = collections.defaultdict(list)
    for pa, pb in sorted(found):
        by_files[(pa[0], pb[0])].append((pa[1], pb[1]))
    out = []
    for (fa, fb), starts in by_files.items():
        last = None
        for la, lb in starts:
            if last and la - last[0] < MIN_LINES and lb - last[1] < MIN_LINES:
                continue
            out.append(((fa, la), (fb, lb)))
            last = (la, lb)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max", type=int, help="fail when there are more pairs than this")
    args = ap.parse_args()
    blocks = pairs(files())
    for (fa, la), (fb, lb) in blocks:
        print(f"{fa}:{la} ~ {fb}:{lb}")
    found = {(fa, fb) for (fa, _), (fb, _) in blocks}
    print(
        f"{len(found)} pairs of files share identical blocks of {MIN_LINES}+ code lines"
        f" ({len(blocks)} blocks)"
    )
    if args.max is not None and len(found) > args.max:
        print(f"over the budget of {args.max}: share the code instead of copying it", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Rewrite every component README's key table from the config structs.

Each README holds one block per component type it documents:

    <!-- keys: receivers/otlp -->
    | key | type | default | meaning |
    ...
    <!-- /keys -->

and this script replaces what is between the markers by
`causeway schema --keys receivers/otlp`. Keys, types, defaults and
meanings come from the config structs and their doc comments only; edit
those, then run this script. `tests/docs.rs` fails when a block is stale.

    scripts/readme-keys.py [--causeway PATH]
"""
import argparse
import pathlib
import re
import subprocess
import sys

BLOCK = re.compile(r"(<!-- keys: (\S+) -->\n)(.*?)(<!-- /keys -->)", re.S)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--causeway", default="target/debug/causeway",
                    help="the causeway binary (default target/debug/causeway)")
    args = ap.parse_args()
    root = pathlib.Path(__file__).resolve().parent.parent
    changed = 0
    for readme in sorted(root.glob("*/src/*/README.md")):
        text = readme.read_text()

        def table(m: re.Match) -> str:
            out = subprocess.run([args.causeway, "schema", "--keys", m.group(2)],
                                 check=True, capture_output=True, text=True).stdout
            return m.group(1) + out + m.group(4)

        new = BLOCK.sub(table, text)
        if new != text:
            readme.write_text(new)
            changed += 1
            print(f"rewrote {readme.relative_to(root)}")
    print(f"{changed} README(s) rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())

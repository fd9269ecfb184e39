"""Compares two `pip freeze` snapshots and fails, naming each package, if one changed version or left.

    python .ci/freeze_diff.py BEFORE AFTER [WHAT]

BEFORE and AFTER are files written by `pip freeze`; WHAT names the install in between for the
message. Packages added by that install are fine; a package of BEFORE at another version in AFTER,
or missing from it, is what an install into Google Colab must never do (the runtime holds the old one
in memory, and Colab's own tools were built against it).
"""

import re
import sys


def versions(path):
    """{normalized name: version or direct reference} of a `pip freeze` file."""
    found = {}
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        name, sep, version = re.split(r"(==| @ )", line, maxsplit=1) if re.search(r"==| @ ", line) else (line, "", "")
        found[re.sub(r"[-_.]+", "-", name).lower()] = version
    return found


def changes(before, after):
    """`[(name, old, new)]` for each package of `before` whose version differs in `after` (None: gone)."""
    return [(name, old, after.get(name)) for name, old in sorted(before.items()) if after.get(name) != old]


def main(argv):
    if len(argv) not in (3, 4):
        sys.exit(__doc__)
    what = argv[3] if len(argv) == 4 else "the install"
    changed = changes(versions(argv[1]), versions(argv[2]))
    if not changed:
        print(f"{what} kept every preinstalled package ({len(versions(argv[1]))} checked).")
        return 0
    print(f"{what} replaced {len(changed)} preinstalled package(s), which an install into Colab must not do:",
          file=sys.stderr)
    for name, old, new in changed:
        print(f"  {name}: {old} -> {new if new is not None else '(uninstalled)'}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

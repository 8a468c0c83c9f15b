#!/usr/bin/env python3
"""Fails when a ctest run skipped a test that tests/skips.txt does not list with a reason.

Usage: scripts/check-skips.py JUNIT_XML [SKIPS_FILE]

JUNIT_XML is ctest's --output-junit file. SKIPS_FILE (default tests/skips.txt) has one line per
test that may be skipped: `<test name> | <why>`; `#` starts a comment line. A name may end in `*`
to cover every test that starts with the rest. A skip that is not listed fails the check with the
test's own skip message, so the set of skipped tests can only grow with a reason in the repo.
"""
import re
import sys
import xml.etree.ElementTree as ET


def load_allowed(path):
    allowed = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, sep, why = line.partition("|")
            if not sep or not why.strip():
                sys.exit(f"{path}:{n}: expected '<test name> | <why>', got: {line}")
            allowed.append(name.strip())
    return allowed


def covered(name, allowed):
    return any(name == a or (a.endswith("*") and name.startswith(a[:-1])) for a in allowed)


def skip_message(case):
    out = case.findtext("system-out") or ""
    # gtest prints "<file>:<line>: Skipped" then the message; a script says why on its own.
    m = re.search(r": Skipped\n(.*)", out)
    if m:
        return m.group(1).strip()
    lines = [l for l in out.strip().splitlines() if l.strip()]
    return lines[-1].strip() if lines else "(no output)"


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    allowed = load_allowed(sys.argv[2] if len(sys.argv) == 3 else "tests/skips.txt")
    root = ET.parse(sys.argv[1]).getroot()
    skipped = [c for c in root.iter("testcase") if c.find("skipped") is not None]
    unlisted = [c for c in skipped if not covered(c.get("name", ""), allowed)]
    print(f"check-skips: {len(skipped)} skipped, {len(skipped) - len(unlisted)} listed in the skip list")
    for c in unlisted:
        print(f"check-skips: NOT LISTED: {c.get('name')}: {skip_message(c)}")
    if unlisted:
        print("check-skips: a test skipped without a reason in tests/skips.txt; fix what it needs, "
              "or list it there with why")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Code structure (ctest: "code structure: lizard"): no function in lib/ or apps/ is longer than
100 lines or has a cyclomatic complexity (CCN) of 40 or more, as lizard measures them, but the
functions listed in ALLOWED below; and no function has a CCN over 20 (the tail of branchy
functions) but the named tables and dispatchers listed in BRANCHY, at most MAX_BRANCHY of them. A function's length is lizard's "length": its lines from the
signature to the closing brace, comments and blank lines included (NLOC, which leaves those out,
is never larger). The list only shrinks: a listed function that has come within the limits (or
is gone) fails the test too, until it is taken off the list.

    python3 test/structure_test.py SOURCE_DIR

lizard comes from PyPI; scripts/setup's ptune_install_test_tools installs it into the venv.
"""
import csv
import io
import os
import subprocess
import sys

MAX_LENGTH = 100  # lines
MAX_CCN = 39      # a CCN of 40 or more fails
TAIL_CCN = 20     # a CCN over this is allowed only to the functions in BRANCHY
MAX_BRANCHY = 10

# (file, function as lizard names it): why it is allowed. "to be split": a long function with
# parts that have names, waiting for its turn; a table of data may be listed with its reason.
ALLOWED = {
    ("lib/config/config.cpp", "ptune::config::fields"):
        "a table of data: one entry per config key (path, member, type, help, range)",
    ("lib/report/results_json.cpp", "ptune::report::fields"):
        "a table of data: one entry per key of a results row (key, kind, writer, reader)",
    ("lib/models/pickle.cpp", "ptune::models::pickle::Unpickler::run"):
        "a table of data: one case per pickle opcode, each a few lines",
}

# (file, function as lizard names it): why its branches are one table or dispatcher, in one line.
# The list only shrinks, as ALLOWED does.
BRANCHY = {
    ("lib/report/results_json.cpp", "ptune::report::fields"):
        "a table of data: one entry per key of a results row",
    ("lib/models/pickle.cpp", "ptune::models::pickle::Unpickler::run"):
        "a dispatcher: one case per pickle opcode",
}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: structure_test.py SOURCE_DIR")
    src = os.path.abspath(sys.argv[1])
    try:
        import lizard  # noqa: F401
    except ImportError:
        sys.exit("structure_test: FAILED: lizard is not installed for %s (scripts/setup's "
                 "ptune_install_test_tools installs it: pip install lizard)" % sys.executable)
    out = subprocess.run([sys.executable, "-m", "lizard", "--csv", "lib", "apps"], cwd=src,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if out.returncode not in (0, 1) or not out.stdout.strip():
        sys.exit("structure_test: FAILED: lizard exited with %d: %s" % (out.returncode, out.stderr[-2000:]))
    functions = 0
    over = {}
    branchy = {}
    for row in csv.reader(io.StringIO(out.stdout)):
        # NLOC, CCN, tokens, parameters, length, location, file, function, long name, start, end
        nloc, ccn, length = int(row[0]), int(row[1]), int(row[4])
        path, name, start = os.path.normpath(row[6]), row[7], row[9]
        functions += 1
        if length > MAX_LENGTH or ccn > MAX_CCN:
            over[(path, name)] = "%s:%s: %s: %d lines (%d NLOC), CCN %d" % (path, start, name, length, nloc, ccn)
        if ccn > TAIL_CCN:
            branchy[(path, name)] = "%s:%s: %s: CCN %d" % (path, start, name, ccn)
    if functions < 500:
        sys.exit("structure_test: FAILED: lizard measured only %d functions in lib/ and apps/" % functions)
    failures = []
    for key, text in sorted(over.items()):
        if key not in ALLOWED:
            failures.append("%s: over the limits (at most %d lines and a CCN under %d): split it into "
                            "functions with names" % (text, MAX_LENGTH, MAX_CCN + 1))
    for key in sorted(ALLOWED):
        if key not in over:
            failures.append("%s: %s is within the limits now (or gone): take it off ALLOWED in "
                            "test/structure_test.py" % key)
    if len(BRANCHY) > MAX_BRANCHY:
        failures.append("BRANCHY lists %d functions, at most %d may be" % (len(BRANCHY), MAX_BRANCHY))
    for key, text in sorted(branchy.items()):
        if key not in BRANCHY:
            failures.append("%s: a CCN over %d: split it into functions with names, or make it a table "
                            "(a named table or dispatcher goes in BRANCHY with its reason)" % (text, TAIL_CCN))
    for key in sorted(BRANCHY):
        if key not in branchy:
            failures.append("%s: %s has a CCN of %d or less now (or is gone): take it off BRANCHY in "
                            "test/structure_test.py" % (key, key[1], TAIL_CCN))
    for key in sorted(set(branchy) & set(BRANCHY)):
        print("branchy (%s): %s" % (BRANCHY[key], branchy[key]))
    for key in sorted(set(over) & set(ALLOWED)):
        print("allowed (%s): %s" % (ALLOWED[key], over[key]))
    print("structure_test: %d functions measured, %d over the limits and allowed, %d with a CCN over %d "
          "(tables and dispatchers)" % (functions, len(set(over) & set(ALLOWED)), len(set(branchy) & set(BRANCHY)),
                                        TAIL_CCN))
    if failures:
        print("\n".join("structure_test: FAILED: " + f for f in failures))
        sys.exit(1)
    print("structure_test: passed")


if __name__ == "__main__":
    main()

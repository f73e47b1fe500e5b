#!/usr/bin/env python3
"""Counts a ctest run from its JUnit file (ctest --output-junit) as passed, failed and skipped.

ctest's own summary ("100% tests passed, 0 tests failed out of N") counts skipped tests as
passed; this prints them apart, ending with one line `P passed, F failed, S skipped`, and exits 1
when anything failed (or the file lists no test). Skipped: a GoogleTest GTEST_SKIP (ctest's
SKIP_REGULAR_EXPRESSION, which gtest_discover_tests sets), a SKIP_RETURN_CODE (the Python interop
tests without their packages) and DISABLED_ tests. A test ctest could not start counts as failed.
Each failed test's output is printed again at the end, from GoogleTest's first "Failure" (at most
FAILURE_LINES lines; the last lines when there is none), so that the tail of a long log, which is
often all a CI system shows, says why it failed.
Usage: test_summary.py JUNIT_XML
"""
import collections
import sys
import xml.etree.ElementTree as ET

# ctest's <skipped message=...> for the two ways a test says it skipped; any other "notrun"
# (e.g. "Unable to find executable") is a failure.
SKIP_MESSAGES = {"SKIP_REGULAR_EXPRESSION_MATCHED": "GTEST_SKIP", "SKIP_RETURN_CODE": "skip exit code"}


FAILURE_LINES = 60


def failure_excerpt(case):
    """The lines of a failed test's output that say why: from the first 'Failure' on."""
    out = case.find("system-out")
    lines = (out.text or "").splitlines() if out is not None else []
    first = next((i for i, line in enumerate(lines) if ": Failure" in line), None)
    shown = lines[first:first + FAILURE_LINES] if first is not None else lines[-FAILURE_LINES // 2:]
    return [f"  | {line}" for line in shown]


def classify(case):
    status = case.get("status")
    if status == "run":
        return "passed", None
    if status == "disabled":
        return "skipped", "disabled"
    if status == "notrun":
        skipped = case.find("skipped")
        message = skipped.get("message", "") if skipped is not None else ""
        reason = SKIP_MESSAGES.get(message.split("=")[0])
        if reason:
            return "skipped", reason
        return "failed", message or "not run"
    return "failed", status


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    try:
        root = ET.parse(sys.argv[1]).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"test_summary: cannot read ctest's JUnit file {sys.argv[1]}: {e}")
        sys.exit(1)
    counts = collections.Counter()
    reasons = collections.Counter()
    failed = []
    for case in root.iter("testcase"):
        kind, why = classify(case)
        counts[kind] += 1
        if kind == "skipped":
            reasons[why] += 1
        elif kind == "failed":
            failed.append((f"{case.get('name')} ({why})", failure_excerpt(case)))
    for name, excerpt in failed:
        print(f"FAILED: {name}")
        print("\n".join(excerpt))
    if reasons:
        print("skipped by reason: " + ", ".join(f"{n} {why}" for why, n in sorted(reasons.items())))
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    sys.exit(1 if counts["failed"] or not sum(counts.values()) else 0)


if __name__ == "__main__":
    main()

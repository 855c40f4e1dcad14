#!/usr/bin/env python3
"""docs/design.md names, for each invariant, the tests that pin it. This check fails when one of
those tests no longer exists.

A pin is a line of the form (one per test, in the invariant's list):

    - Pinned by: `ledger_test` — "exact Catch2 TEST_CASE name"

The executable's source files come from tests/CMakeLists.txt (`runledger_module_test(NAME MODULE m
SOURCES files...)`),
and the test names from the TEST_CASE(...) macros in those files (adjacent string literals
concatenated, escapes decoded, comments skipped). The check fails, naming each problem, when a
pin names an unknown executable or a test case its files do not define, when a line mentions
"Pinned by" in another shape, or when one of the invariants 1..10 has no pin.

    python3 checks/design_tests.py              check docs/design.md of this repository
    python3 checks/design_tests.py --self-test  prove the check fails on a missing test
Options: --root DIR (the repository), --doc FILE (the design page).
Standard library only.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

INVARIANTS = range(1, 11)
PIN = re.compile(r"^\s*[-*]\s*Pinned by:\s*`([A-Za-z0-9_]+)`\s*[—–-]\s*\"(.*)\"\s*$")
INVARIANT_ITEM = re.compile(r"^(\d+)\.\s+\*\*")


def strip_cmake_comments(text):
    # CMake comments run from '#' to the end of the line (bracket comments are not used here).
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def test_executables(root):
    """{executable: [source paths]} from tests/CMakeLists.txt's runledger_module_test() calls
    (cmake/modules.cmake: NAME MODULE module SOURCES files... [LIBS ...] [TIMEOUT s])."""
    cmake_file = os.path.join(root, "tests", "CMakeLists.txt")
    with open(cmake_file, encoding="utf-8") as f:
        text = strip_cmake_comments(f.read())
    executables = {}
    for match in re.finditer(r"\brunledger_module_test\s*\(([^)]*)\)", text):
        words = match.group(1).split()
        if not words:
            continue
        name, sources, keyword = words[0], [], None
        for word in words[1:]:
            if word in ("MODULE", "SOURCES", "LIBS", "TIMEOUT"):
                keyword = word
            elif keyword == "SOURCES":
                sources.append(os.path.join(root, "tests", word))
        executables[name] = sources
    return executables


def _string_literal(text, i):
    """Decodes the C++ string literal starting at text[i] == '"'; returns (value, end)."""
    escapes = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'",
               "?": "?", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
    out, i = [], i + 1
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(escapes.get(text[i + 1], text[i + 1]))
            i += 2
        elif c == '"':
            return "".join(out), i + 1
        else:
            out.append(c)
            i += 1
    raise ValueError("unterminated string literal")


def _skip_space_and_comments(text, i):
    while i < len(text):
        if text[i].isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
        else:
            return i
    return i


def test_case_names(source):
    """The names of the TEST_CASEs defined in C++ source text."""
    names, i = [], 0
    while i < len(source):
        c = source[i]
        if source.startswith("//", i) or source.startswith("/*", i):
            i = _skip_space_and_comments(source, i)
        elif c == '"':
            i = _string_literal(source, i)[1]
        elif c == "'" and 0 < i < len(source) - 1 and source[i - 1].isdigit() and \
                source[i + 1].isdigit():
            i += 1  # a digit separator (20'000), not a character literal
        elif c == "'":
            end = i + 1
            while end < len(source) and source[end] != "'":
                end += 2 if source[end] == "\\" else 1
            i = end + 1
        elif source.startswith("TEST_CASE", i) and not (i > 0 and (source[i - 1].isalnum() or
                                                                   source[i - 1] == "_")):
            j = _skip_space_and_comments(source, i + len("TEST_CASE"))
            if j < len(source) and source[j] == "(":
                j = _skip_space_and_comments(source, j + 1)
                parts = []
                while j < len(source) and source[j] == '"':
                    value, j = _string_literal(source, j)
                    parts.append(value)
                    j = _skip_space_and_comments(source, j)
                if parts:
                    names.append("".join(parts))
            i = j if j > i else i + 1
        else:
            i += 1
    return names


def pins_of(doc_text):
    """[(invariant or None, executable, test name, line number)], and the malformed lines."""
    pins, malformed, invariant, in_invariants = [], [], None, False
    for number, line in enumerate(doc_text.splitlines(), start=1):
        if line.startswith("## "):
            in_invariants = line.strip() == "## Invariants"
            invariant = None
            continue
        item = INVARIANT_ITEM.match(line)
        if in_invariants and item:
            invariant = int(item.group(1))
        if "Pinned by" not in line:
            continue
        pin = PIN.match(line)
        if pin:
            pins.append((invariant if in_invariants else None, pin.group(1), pin.group(2), number))
        else:
            malformed.append(number)
    return pins, malformed


def problems(root, doc_path):
    with open(doc_path, encoding="utf-8") as f:
        doc = f.read()
    executables = test_executables(root)
    names = {}
    out = []
    for exe, sources in executables.items():
        names[exe] = set()
        for path in sources:
            try:
                with open(path, encoding="utf-8") as f:
                    names[exe].update(test_case_names(f.read()))
            except OSError as e:
                out.append(f"tests/CMakeLists.txt: {exe} lists {path}, which cannot be read: {e}")
    pins, malformed = pins_of(doc)
    for number in malformed:
        out.append(f"{doc_path}:{number}: a 'Pinned by' line not of the form "
                   f"- Pinned by: `EXECUTABLE` — \"TEST CASE NAME\"")
    pinned = set()
    for invariant, exe, name, number in pins:
        if exe not in names:
            out.append(f"{doc_path}:{number}: no test executable `{exe}` in tests/CMakeLists.txt "
                       f"(pinned test \"{name}\")")
        elif name not in names[exe]:
            out.append(f"{doc_path}:{number}: `{exe}` has no TEST_CASE \"{name}\"")
        if invariant is not None:
            pinned.add(invariant)
    for invariant in INVARIANTS:
        if invariant not in pinned:
            out.append(f"{doc_path}: invariant {invariant} names no test that pins it")
    return out, len(pins)


def check(root, doc_path):
    found, count = problems(root, doc_path)
    for problem in found:
        print(f"design_tests: {problem}", file=sys.stderr)
    if found:
        print(f"design_tests: FAILED: {len(found)} problem(s) in {doc_path}", file=sys.stderr)
        return 1
    print(f"design_tests: {count} pinned tests named in {doc_path} exist")
    return 0


# ---------------------------------------------------------------------------------------------
# --self-test: the check must fail on a missing test and pass on real ones.

FAKE_CMAKE = """\
# runledger_module_test(NAME MODULE m SOURCES... LIBS libs...): a comment, not a call
runledger_module_test(alpha_test MODULE alpha SOURCES alpha/one_test.cc
  alpha/two_test.cc LIBS alpha TIMEOUT 60)
runledger_module_test(beta_test MODULE beta SOURCES beta/beta_test.cc LIBS beta)
"""

FAKE_ONE = r'''
// TEST_CASE("a test named only in a comment") {
/* TEST_CASE("nor in a block comment") */
const char* s = "TEST_CASE(\"nor in a string\")";
TEST_CASE("a plain name") {}
TEST_CASE(
    "a name split across lines, "
    "with a \"quoted\" word") {}
TEST_CASE("a name with tags", "[tag]") {}
'''

FAKE_TWO = 'TEST_CASE("in the second file") {}\nMY_TEST_CASE("not a test case") {}\n'
FAKE_BETA = 'TEST_CASE("beta\'s test: a colon, an apostrophe") {}\n'


def fake_doc(pin_for_every_invariant, extra_in_invariant_10="", extra_after=""):
    lines = ["# design", "", "## Invariants", ""]
    for n in INVARIANTS:
        lines.append(f"{n}. **Invariant {n}.** Words.")
        lines.append(f"   - Pinned by: {pin_for_every_invariant}")
    lines += [extra_in_invariant_10, "", "## Next", "", extra_after, ""]
    return "\n".join(lines)


def run_check(root, doc_text):
    doc = os.path.join(root, "design.md")
    with open(doc, "w", encoding="utf-8") as f:
        f.write(doc_text)
    result = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", root,
                             "--doc", doc], capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


def self_test():
    failures = []

    def expect(label, root, doc_text, should_pass, must_mention=()):
        code, output = run_check(root, doc_text)
        passed = code == 0
        if passed != should_pass or any(m not in output for m in must_mention):
            failures.append(f"{label}: expected {'success' if should_pass else 'failure'}"
                            f"{' naming ' + repr(must_mention) if must_mention else ''}, got exit "
                            f"{code}:\n{output}")

    with tempfile.TemporaryDirectory() as root:
        for path, text in [("tests/CMakeLists.txt", FAKE_CMAKE), ("tests/alpha/one_test.cc", FAKE_ONE),
                           ("tests/alpha/two_test.cc", FAKE_TWO),
                           ("tests/beta/beta_test.cc", FAKE_BETA)]:
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)

        real = ['`alpha_test` — "a plain name"',
                '`alpha_test` — "a name split across lines, with a "quoted" word"',
                '`alpha_test` — "a name with tags"',
                '`alpha_test` — "in the second file"',
                '`beta_test` — "beta\'s test: a colon, an apostrophe"']
        for pin in real:
            expect(f"a real test ({pin})", root, fake_doc(pin), True)
        plain = '`alpha_test` — "a plain name"'
        bogus = '   - Pinned by: `alpha_test` — "no such test"'
        expect("a bogus test", root, fake_doc(plain, extra_in_invariant_10=bogus), False,
               ['"no such test"'])
        expect("a bogus test outside the invariants", root,
               fake_doc(plain, extra_after=bogus.strip()), False, ['"no such test"'])
        expect("a test named only in a comment", root,
               fake_doc('`alpha_test` — "a test named only in a comment"'), False,
               ['"a test named only in a comment"'])
        expect("a test inside a string", root, fake_doc('`alpha_test` — "nor in a string"'), False)
        expect("a look-alike macro", root, fake_doc('`alpha_test` — "not a test case"'), False)
        expect("a test of another executable", root, fake_doc('`beta_test` — "a plain name"'),
               False, ["beta_test"])
        expect("an unknown executable", root, fake_doc('`gamma_test` — "a plain name"'), False,
               ["gamma_test"])
        expect("a malformed pin", root, fake_doc('alpha_test: a plain name'), False,
               ["not of the form"])
        no_pin_for_4 = fake_doc(plain).replace(
            "4. **Invariant 4.** Words.\n   - Pinned by: `alpha_test` — \"a plain name\"",
            "4. **Invariant 4.** Words.")
        expect("an invariant without a pin", root, no_pin_for_4, False, ["invariant 4"])

    # Against this repository: its own design page with one bogus test added must fail.
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(repo, "docs", "design.md"), encoding="utf-8") as f:
        design = f.read()
    marker = "\n## Modules"
    if marker not in design:
        failures.append("docs/design.md has no '## Modules' section to insert a bogus pin before")
    else:
        bogus = design.replace(marker, '\n   - Pinned by: `ledger_test` — "a test that was '
                               'renamed away"\n' + marker, 1)
        with tempfile.TemporaryDirectory() as tmp:
            doc = os.path.join(tmp, "design.md")
            with open(doc, "w", encoding="utf-8") as f:
                f.write(bogus)
            result = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", repo,
                                     "--doc", doc], capture_output=True, text=True)
            if result.returncode == 0 or "a test that was renamed away" not in result.stderr:
                failures.append("this repository's design page with a bogus pin passed:\n" +
                                result.stdout + result.stderr)

    if failures:
        for failure in failures:
            print(f"design_tests --self-test: {failure}", file=sys.stderr)
        return 1
    print("design_tests --self-test: the check fails on missing tests and passes on real ones")
    return 0


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=repo, help="the repository (default: this one)")
    parser.add_argument("--doc", help="the design page (default: ROOT/docs/design.md)")
    parser.add_argument("--self-test", action="store_true", help="prove the check can fail")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    return check(args.root, args.doc or os.path.join(args.root, "docs", "design.md"))


if __name__ == "__main__":
    sys.exit(main())

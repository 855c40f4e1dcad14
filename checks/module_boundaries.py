#!/usr/bin/env python3
"""Module boundaries: which file may include which header (cmake/modules.cmake states the rules).

  module_boundaries.py MANIFEST SOURCE_ROOT   check the tree; prints each violation, exits 1 if any
  module_boundaries.py --self-test            proves the check fails on each kind of violation

MANIFEST is <build>/modules.json, written by cmake/modules.cmake: every module, application,
module test and module benchmark, with its folder, sources and declared dependencies. The rules:
  - A module's files include its own headers, and the public header (<folder>/<leaf>.h) of a
    module it depends on, directly or through its dependencies. An application's files likewise;
    an application has no public header.
  - tests/, bench/ and fuzz/ include public headers of any module, and their own files. A
    module's own tests (tests/<its folder>/, or the sources of a test declared with MODULE it)
    and benchmark (declared with MODULE it) may include its private headers, saying why on the
    include line with a `// private: ...` comment.
  - Every .cc/.h belongs to a module, or to tests/, bench/ or fuzz/; headers are included by
    their path from the source root.
"""
import json
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"(.*)$')
SUPPORT_TREES = ("tests", "bench", "fuzz")


def source_files(root):
    for directory, subdirs, files in os.walk(root):
        # Skip build trees (anything CMake configured), VCS data and package folders.
        subdirs[:] = [
            d for d in subdirs
            if not d.startswith(".") and not d.startswith("build") and d != "node_modules"
            and not os.path.exists(os.path.join(directory, d, "CMakeCache.txt"))
        ]
        for name in files:
            if name.endswith((".cc", ".h")):
                yield os.path.relpath(os.path.join(directory, name), root)


def check(targets, root):
    modules = {t["name"]: t for t in targets if t["kind"] in ("module", "application")}
    by_dir = {t["dir"]: t for t in modules.values()}
    errors = []

    def owner(path):
        """The module whose folder is the deepest one holding `path`, or None."""
        directory = os.path.dirname(path)
        while directory:
            if directory in by_dir:
                return by_dir[directory]
            directory = os.path.dirname(directory)
        return None

    def public_header(module):
        if module["kind"] != "module":
            return None
        return module["dir"] + "/" + os.path.basename(module["dir"]) + ".h"

    def closure(name):
        seen, stack = set(), [name]
        while stack:
            for dep in modules.get(stack.pop(), {"deps": []})["deps"]:
                if dep in modules and dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
        return seen

    # Which module's private headers a test or bench source may include.
    privileged = {}
    for t in targets:
        if t["kind"] in ("test", "bench"):
            if t["module"] not in modules:
                errors.append(f'{t["kind"]} {t["name"]}: MODULE {t["module"]} is not a module')
            for source in t["sources"]:
                privileged.setdefault(source, set()).add(t["module"])
    for module in modules.values():
        header = public_header(module)
        if header and not os.path.exists(os.path.join(root, header)):
            errors.append(f'module {module["name"]}: no public header {header}')

    for path in sorted(source_files(root)):
        top = path.split("/")[0]
        mine = owner(path)
        if mine is None and top not in SUPPORT_TREES:
            errors.append(f"{path}: belongs to no module (cmake/modules.cmake)")
            continue
        with open(os.path.join(root, path), encoding="utf-8") as f:
            lines = f.readlines()
        for number, line in enumerate(lines, 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            included, rest = match.group(1), match.group(2)
            where = f"{path}:{number}"
            if not os.path.exists(os.path.join(root, included)):
                errors.append(f'{where}: "{included}" is not a path from the source root')
                continue
            theirs = owner(included)
            if theirs is None:
                if included.split("/")[0] != top:
                    errors.append(f'{where}: includes "{included}" from outside {top}/')
                continue
            if mine is theirs:
                continue
            if included == public_header(theirs):
                if mine is not None and theirs["name"] not in closure(mine["name"]):
                    errors.append(f'{where}: {mine["name"]} includes "{included}" but does not '
                                  f'depend on {theirs["name"]} (DEPS in {mine["dir"]}/CMakeLists.txt)')
                continue
            own_test = (top == "tests" and path.startswith(f'tests/{theirs["dir"]}/')) or \
                theirs["name"] in privileged.get(path, ())
            if not own_test:
                errors.append(f'{where}: "{included}" is private to {theirs["name"]}; include '
                              f'{public_header(theirs) or "nothing of it"} instead')
            elif "// private:" not in rest:
                errors.append(f'{where}: a private include of {theirs["name"]} says why with '
                              f'"// private: ..." on its line')
    return errors


def self_test():
    files = {
        "a/a.h": "",
        "a/impl.h": "",
        "a/a.cc": '#include "a/impl.h"\n#include "a/a.h"\n',
        "b/b.h": "",
        "b/b.cc": '#include "a/a.h"\n',                                   # undeclared dependency
        "c/c.h": "",
        "c/c.cc": '#include "a/a.h"\n#include "a/impl.h"\n',              # private of another
        "tests/a/a_test.cc": '#include "a/impl.h"  // private: the unit under test\n',
        "tests/a/silent_test.cc": '#include "a/impl.h"\n',                # no reason given
        "tests/c/c_test.cc": '#include "a/impl.h"  // private: not c\'s\n',  # not its own
        "bench/a_bench.cc": '#include "a/impl.h"  // private: its SQL\n',
        "bench/c_bench.cc": '#include "a/impl.h"  // private: its SQL\n',  # c's bench
        "fuzz/a_fuzz.cc": '#include "a/a.h"\n',
        "fuzz/impl_fuzz.cc": '#include "a/impl.h"\n',                  # private from fuzz/
        "loose.cc": "",                                                   # in no module
        "d/d.cc": '#include "tests/a/a_test.cc"\n',                      # tests from a module
    }
    targets = [
        {"kind": "module", "name": "a", "module": "a", "dir": "a", "sources": [], "deps": []},
        {"kind": "module", "name": "b", "module": "b", "dir": "b", "sources": [], "deps": []},
        {"kind": "module", "name": "c", "module": "c", "dir": "c", "sources": [], "deps": ["a"]},
        {"kind": "application", "name": "d", "module": "d", "dir": "d", "sources": [], "deps": []},
        {"kind": "bench", "name": "a_bench", "module": "a", "dir": "bench",
         "sources": ["bench/a_bench.cc"], "deps": []},
        {"kind": "bench", "name": "c_bench", "module": "c", "dir": "bench",
         "sources": ["bench/c_bench.cc"], "deps": []},
    ]
    with tempfile.TemporaryDirectory() as root:
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
        errors = check(targets, root)
    expected = ["b/b.cc:1", "c/c.cc:2", "tests/a/silent_test.cc:1", "tests/c/c_test.cc:1",
                "bench/c_bench.cc:1", "fuzz/impl_fuzz.cc:1", "loose.cc", "d/d.cc:1"]
    found = [e.split(":")[0] + (":" + e.split(":")[1] if e.split(":")[1].isdigit() else "")
             for e in errors]
    if sorted(found) != sorted(expected):
        print("self-test: expected violations at", sorted(expected))
        print("self-test: found", *errors, sep="\n  ")
        return 1
    print(f"self-test: all {len(expected)} kinds of violation caught, nothing else")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 3:
        print(__doc__)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        targets = json.load(f)
    errors = check(targets, argv[2])
    for error in errors:
        print(error)
    if errors:
        print(f"{len(errors)} module boundary violation(s); the rules: cmake/modules.cmake")
        return 1
    print(f"module boundaries hold: {len(targets)} targets")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

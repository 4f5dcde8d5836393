#!/usr/bin/env python3
"""The floors of xgrad/ (docs/design.md, "Floors"), checked three ways:

  includes  every #include of a file under xgrad/ names a file on its own floor or below, and
            a folder's private header (FOLDER_PRIVATE) only from that folder;
  symbols   (--objects BUILD_DIR) every symbol an object file of xgrad/ calls or reads, when an
            object of another folder defines it (strongly: not an inline function or template
            instance, which its header brings), is defined on the caller's floor or below: this
            sees calls the includes do not show (a function declared by hand, a registry that
            names every file);
  links     (--links FILE, written by tests/CMakeLists.txt at configure time) no library target
            links a target holding code of a floor above one of its own.

The table is a DAG: each floor names the floors it uses directly; the floors below it are those it
reaches. A folder missing from the table fails the check: a new folder takes its place there and
in docs/design.md. ALLOWED lists the known violations, each with the change that removes it.

  check_layers.py [--root DIR] [--objects BUILD_DIR] [--links FILE]
  check_layers.py --self-test DIR    (DIR: tests/layers, a tree with planted violations)
"""
import argparse
import os
import re
import subprocess
import sys

# Each floor and the floors it uses directly (docs/design.md draws the same table).
FLOORS = {
    "base": [],  # Shape, XGRAD_CHECK, warnings, the generators; xgrad/arg.hpp
    "backend": ["base"],  # arrays, the thread pool, gemm, SIMD: no Tensor
    "core": ["backend"],  # Tensor, the graph, the engine, gradcheck, the profiler
    "ops": ["core"],  # differentiable ops
    "nn": ["ops"],  # modules
    "optim": ["core"],  # optimizers, schedules
    "data": ["ops"],  # datasets, samplers, the DataLoader
    "serialize": ["nn", "optim"],  # archives, checkpoints, safetensors, Hugging Face folders
    "models": ["nn", "serialize"],  # GPT, Hugging Face GPT-2 folders, the Llama-family config
    "text": ["data"],  # tokenizers
    "distributed": ["nn", "data"],  # process group, collectives, DDP (xgrad::distributed)
    "onnx": ["nn", "serialize"],  # ONNX export (xgrad::onnx)
    "train": ["models", "data", "serialize", "distributed"],  # the Trainer (xgrad::train, xgrad::train_mpi)
    "umbrella": ["train", "models", "text"],  # xgrad/xgrad.hpp: for programs, never for the library
    "tests": ["umbrella", "onnx"],  # code outside xgrad/ (a testing library): above every floor
}

# Files whose floor is not their folder's: what they include is checked against that floor.
FILE_FLOORS = {
    "xgrad/arg.hpp": "base",
    "xgrad/xgrad.hpp": "umbrella",
    # File writing and the loaders' error type: they know nothing of tensors (std only), so the
    # floors below serialize (data, text) may use them.
    "xgrad/serialize/atomic_file.hpp": "base",
    "xgrad/serialize/atomic_file.cpp": "base",
    "xgrad/serialize/format_error.hpp": "base",
}

# Headers private to their folder: the engine's access to Node's private fields
# (detail::Engine) and its modes are included by the engine's files in core/ alone, so that no op
# or module reaches past Node's public part.
FOLDER_PRIVATE = {
    "xgrad/core/engine_access.hpp": "xgrad/core/",
    "xgrad/core/backward_modes.hpp": "xgrad/core/",
}

# Namespaces that name a floor: a qualified name such as nn::Linear or xgrad::train::World in a
# lower floor's code is a use of that floor even without an include.
NAMESPACE_FLOORS = ["nn", "optim", "data", "models", "text", "distributed", "onnx", "train"]

# Known violations, (file, floor it may use although above its own), each naming the change that
# removes it. None today.
ALLOWED = set()


def below(floor):
    """The floors `floor` may use: itself and every floor it reaches."""
    seen, todo = {floor}, [floor]
    while todo:
        for f in FLOORS[todo.pop()]:
            if f not in seen:
                seen.add(f)
                todo.append(f)
    return seen


def floor_of(rel):
    """The floor of a path relative to the root (xgrad/nn/linear.cpp -> nn), or None."""
    rel = rel.replace(os.sep, "/")
    if rel in FILE_FLOORS:
        return FILE_FLOORS[rel]
    parts = rel.split("/")
    if parts[0] != "xgrad":
        return "tests"
    if len(parts) < 3:
        return None  # a file at xgrad/'s top not in FILE_FLOORS
    return parts[1]


class Report:
    def __init__(self):
        self.errors = []

    def add(self, rel, floor, used, what):
        if (rel, used) in ALLOWED:
            return
        self.errors.append(f"{rel}: {what} ({used} is not below {floor}; {floor} may use: "
                           f"{', '.join(sorted(below(floor) - {floor})) or 'nothing'})")


def check_floor_known(rel, floor, report):
    if floor is None or floor not in FLOORS:
        report.errors.append(f"{rel}: folder '{floor}' is not in the floors table "
                             "(scripts/check_layers.py FLOORS, docs/design.md)")
        return False
    return True


INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
COMMENT = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)


def check_includes(root, report):
    files = []
    for d, _, names in os.walk(os.path.join(root, "xgrad")):
        files += [os.path.join(d, n) for n in names if n.endswith((".hpp", ".cpp", ".h"))]
    for path in sorted(files):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        floor = floor_of(rel)
        if not check_floor_known(rel, floor, report):
            continue
        allowed = below(floor)
        text = open(path, encoding="utf-8").read()
        for m in INCLUDE.finditer(text):
            target = m.group(2)
            if m.group(1) == '"':  # relative to the file
                target = os.path.relpath(os.path.normpath(os.path.join(os.path.dirname(rel), target)))
            if not target.startswith("xgrad/"):
                continue
            used = floor_of(target)
            if target in FOLDER_PRIVATE and not rel.startswith(FOLDER_PRIVATE[target]):
                report.errors.append(f"{rel}: includes {target}, private to {FOLDER_PRIVATE[target]}")
            if used not in FLOORS:
                report.errors.append(f"{rel}: includes {target}, of no floor")
            elif used not in allowed:
                report.add(rel, floor, used, f"includes {target}")
        code = COMMENT.sub(lambda c: '""' if c.group(0).startswith('"') else " ", text)
        for ns in NAMESPACE_FLOORS:
            if ns in allowed or ns not in FLOORS:
                continue
            m = re.search(r"(?<![\w:])(?:xgrad::)?" + ns + r"::\w", code)
            if m:
                line = code.count("\n", 0, m.start()) + 1
                report.add(rel, floor, ns, f"line {line} names {ns}::")


def check_symbols(root, build, report):
    """Strong definitions and undefined references of every object file of xgrad/ in the tree."""
    objects = []  # (rel source path, object path)
    for d, _, names in os.walk(build):
        for n in names:
            if n.endswith(".o"):
                path = os.path.join(d, n)
                m = re.search(r"CMakeFiles/[^/]+\.dir/(xgrad/.+)\.o$", path.replace(os.sep, "/"))
                # An object whose source is gone (a file moved or deleted since the tree was
                # built) is stale: the libraries no longer link it.
                if m and os.path.exists(os.path.join(root, m.group(1))):
                    objects.append((m.group(1), path))
    if not objects:
        report.errors.append(f"no object file of xgrad/ under {build}: build the libraries first")
        return 0
    defined, needs = {}, {}
    for rel, path in objects:
        out = subprocess.run(["nm", "--format=posix", path], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            fields = line.split()
            if len(fields) < 2:
                continue
            symbol, kind = fields[0], fields[1]
            if kind in "TDBR":  # strong, global: this object's own function or variable
                defined.setdefault(symbol, set()).add(rel)
            elif kind == "U":
                needs.setdefault(rel, set()).add(symbol)
    for rel in sorted(needs):
        floor = floor_of(rel)
        if not check_floor_known(rel, floor, report):
            continue
        allowed = below(floor)
        seen = set()
        for symbol in sorted(needs[rel]):
            for where in defined.get(symbol, ()):
                used = floor_of(where)
                if used in FLOORS and used not in allowed and (used, where) not in seen:
                    seen.add((used, where))
                    report.add(rel, floor, used, f"calls {symbol} of {where}")
    return len(objects)


def check_links(links_file, report):
    """Lines `target|source;source|linked target;...` (paths relative to the source tree)."""
    targets = {}
    for line in open(links_file, encoding="utf-8"):
        if not line.strip():
            continue
        name, sources, links = (line.rstrip("\n").split("|") + ["", ""])[:3]
        floors = {floor_of(s) for s in sources.split(";") if s and not s.endswith((".hpp", ".h"))}
        targets[name] = (floors, [l for l in links.split(";") if l])
    for name, (floors, links) in sorted(targets.items()):
        for f in floors:
            check_floor_known(f"target {name}", f, report)
        floors = {f for f in floors if f in FLOORS}
        for link in links:
            if link not in targets:
                continue
            for used in targets[link][0] & set(FLOORS):
                for own in floors:
                    if own in below(used) and own != used:  # the linked code stands above ours
                        report.errors.append(f"target {name} links {link}, which holds {used}, above its own "
                                             f"{own}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--objects", help="a build tree: check the symbols of its object files")
    parser.add_argument("--links", help="the targets' links file (tests/CMakeLists.txt writes it)")
    parser.add_argument("--self-test", help="tests/layers: planted violations must all be found")
    args = parser.parse_args()

    if args.self_test:
        report = Report()
        check_includes(os.path.join(args.self_test, "tree"), report)
        check_links(os.path.join(args.self_test, "links.txt"), report)
        expected = [l.strip() for l in open(os.path.join(args.self_test, "expected.txt")) if l.strip()]
        missing = [e for e in expected if not any(e in got for got in report.errors)]
        for e in report.errors:
            print("found:", e)
        if missing or len(report.errors) != len(expected):
            print("self-test FAILED: expected", len(expected), "violations, found", len(report.errors))
            for e in missing:
                print("  not found:", e)
            return 1
        print(f"self-test: the {len(expected)} planted violations were found")
        return 0

    report = Report()
    check_includes(args.root, report)
    checked = ["includes"]
    if args.objects:
        n = check_symbols(args.root, args.objects, report)
        checked.append(f"symbols of {n} object files")
    if args.links:
        check_links(args.links, report)
        checked.append("target links")
    for e in report.errors:
        print("LAYER VIOLATION:", e)
    if report.errors:
        print(f"{len(report.errors)} violations of the floors (docs/design.md, \"Floors\")")
        return 1
    print("floors hold:", ", ".join(checked), f"({len(ALLOWED)} known violations allowed, see ALLOWED)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

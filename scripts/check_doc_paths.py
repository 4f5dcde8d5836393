#!/usr/bin/python3
"""Every path README.md and docs/*.md name exists, every link's #anchor is a heading, no list is stale.

A moved or deleted file leaves the docs pointing at nothing; this check fails until they follow.
It reads, in each page:
  - the targets of Markdown links, [text](target): relative to the page (docs/x.md's
    ../cmake/y.cmake is cmake/y.cmake), with an optional #anchor that must be one of the target
    page's headings (GitHub's slugs: lower case, punctuation dropped, spaces to dashes);
  - the paths in `code spans` and fenced blocks that start with a folder of the repository
    (xgrad/, tests/, examples/, scripts/, ...) or name a file at its root (CMakeLists.txt):
    relative to the root.
Patterns stand for several files and are matched, not opened: `*` and `?` (globs), `{a,b}`
(each alternative), `<name>` (any one path component). A program is named by its source without
.cpp (examples/train_gpt). A path with a build/ folder in it is made by a build, and `rev:path`
is a file of git's history (`git show 86bc908:benchmarks/x.cpp`), so neither is looked for.
CHANGELOG.md is history, which names files as they were then, so it is not read.
And two lists: README.md links every page of docs/, and docs/building.md's table of dependencies
names every package scripts/setup.sh installs (with why it is needed).

    /usr/bin/python3 scripts/check_doc_paths.py [--root DIR]     (ctest doc_paths)
    /usr/bin/python3 scripts/check_doc_paths.py --self-test        (ctest doc_paths_self_test:
                                                the check finds what is planted in a small tree)
"""

import argparse
import glob
import os
import re
import sys
import tempfile

# Folders of the repository a path in a code span may start with.
TOP = ("xgrad", "tests", "examples", "scripts", "benchmarks", "fuzz", "cmake", "docs", ".ci")
ROOT_FILES = ("CMakeLists.txt", "README.md", "CHANGELOG.md", ".clang-format", ".gitignore",
              ".git-blame-ignore-revs")
PATH = re.compile(r"(?<![\w./:-])((?:%s)/(?:[\w.*?{},/+-]|<\w+>)*|(?:%s)(?![\w.]))" %
                  ("|".join(re.escape(t) for t in TOP), "|".join(re.escape(f) for f in ROOT_FILES)))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")


def slug(heading):
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"^```.*?^```", "", f.read(), flags=re.M | re.S)  # a # in a code block is no heading
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*$", text, re.M)}


def expand(pattern):
    """{a,b} alternatives of a pattern, expanded; <name> becomes *."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if m:
        return [p for alt in m.group(1).split(",")
                for p in expand(pattern[:m.start()] + alt + pattern[m.end():])]
    return [re.sub(r"<[^<>/]*>", "*", pattern)]


def exists(root, path):
    """path names files there, or a program built from path.cpp (examples/train_gpt)."""
    path = path.rstrip("/.,:;")
    if re.search(r"(^|/)build/", path):
        return True
    return all(glob.glob(os.path.join(root, p)) or glob.glob(os.path.join(root, p + ".cpp")) for p in expand(path))


def check_page(root, page, errors):
    full = os.path.join(root, page)
    with open(full, encoding="utf-8") as f:
        lines = f.read().split("\n")
    base = os.path.dirname(page)
    in_fence = False
    for number, line in enumerate(lines, 1):
        where = f"{page}:{number}"
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        if not in_fence:
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                rel = os.path.normpath(os.path.join(base, path)) if path else page
                if not os.path.exists(os.path.join(root, rel)):
                    errors.append(f"{where}: the link {target} points at {rel}, which does not exist")
                elif anchor and rel.endswith(".md") and anchor not in anchors(os.path.join(root, rel)):
                    errors.append(f"{where}: the link {target}: {rel} has no heading #{anchor}")
        spans = [line] if in_fence else CODE.findall(line)
        for span in spans:
            for path in PATH.findall(span):
                if not exists(root, path):
                    errors.append(f"{where}: {path} does not exist")


def setup_packages(root):
    """The Debian packages scripts/setup.sh installs: its packages=( ... ) list and packages+=(...)."""
    with open(os.path.join(root, "scripts", "setup.sh"), encoding="utf-8") as f:
        text = re.sub(r"#.*", "", f.read())
    lists = re.findall(r"^\s*packages=\((.*?)^\)", text, re.M | re.S) + re.findall(r"packages\+=\(([^)]*)\)", text)
    return {name for part in lists for name in part.split()}


def check_lists(root, pages, errors):
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        linked = {os.path.normpath(t.partition("#")[0]) for t in LINK.findall(f.read())}
    for page in pages:
        if page.startswith("docs/") and page not in linked:
            errors.append(f"README.md: no link to {page} (its list of pages is stale)")
    with open(os.path.join(root, "docs", "building.md"), encoding="utf-8") as f:
        table = {name.strip() for row in re.findall(r"^\| ([^|]+) \|", f.read(), re.M) for name in row.split(",")}
    for package in sorted(setup_packages(root) - table):
        errors.append(f"docs/building.md: scripts/setup.sh installs {package}, which the table of dependencies "
                      "does not name (a row says why it is needed)")


def check(root):
    pages = ["README.md"] + sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    errors = []
    for page in pages:
        check_page(root, page, errors)
    check_lists(root, pages, errors)
    return pages, errors


# A tree with one of each kind of reference, good and stale: the check must name exactly the stale.
SELF_TEST_TREE = {
    "README.md": "# T\n\n[a](docs/a.md#one-two-x), [bad](docs/a.md#three), [gone](docs/gone.md)\n"
                 "`xgrad/x.hpp`, `xgrad/y.hpp`, `examples/p` (a program), `xgrad/{x,z}.hpp`, `xgrad/*.hpp`,\n"
                 "`tests/<folder>/t.cpp`, `build/release/examples/p`, `git show abc:xgrad/old.hpp`\n"
                 "```bash\nexamples/q --flag\n```\n",
    "docs/a.md": "# A\n\n## One, two `x`\n\n[up](../xgrad/x.hpp) [up](../xgrad/w.hpp) [here](#a)\n",
    "docs/b.md": "# B\n",
    "docs/building.md": "| package | why |\n| --- | --- |\n| cmake, gcc | building |\n",
    "scripts/setup.sh": "packages=(\n  cmake gcc  # the build\n  wamerican\n)\npackages+=(npm)\n",
    "xgrad/x.hpp": "", "examples/p.cpp": "", "tests/core/t.cpp": "",
}
SELF_TEST_EXPECTED = [
    "README.md:3: the link docs/a.md#three: docs/a.md has no heading #three",
    "README.md:3: the link docs/gone.md points at docs/gone.md, which does not exist",
    "README.md:4: xgrad/y.hpp does not exist",
    "README.md:4: xgrad/{x,z}.hpp does not exist",
    "README.md:7: examples/q does not exist",
    "docs/a.md:5: the link ../xgrad/w.hpp points at xgrad/w.hpp, which does not exist",
    "README.md: no link to docs/b.md (its list of pages is stale)",
    "README.md: no link to docs/building.md (its list of pages is stale)",
    "docs/building.md: scripts/setup.sh installs npm, which the table of dependencies does not name (a row says why "
    "it is needed)",
    "docs/building.md: scripts/setup.sh installs wamerican, which the table of dependencies does not name (a row "
    "says why it is needed)",
]


def self_test():
    with tempfile.TemporaryDirectory() as root:
        for path, text in SELF_TEST_TREE.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
        _, errors = check(root)
    if errors != SELF_TEST_EXPECTED:
        print("doc paths self-test: expected\n  " + "\n  ".join(SELF_TEST_EXPECTED) + "\ngot\n  " +
              "\n  ".join(errors), file=sys.stderr)
        return 1
    print(f"doc paths self-test: the {len(errors)} planted stale references found, nothing else")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    pages, errors = check(args.root)
    if errors:
        print("\n".join(errors), file=sys.stderr)
        print(f"doc paths: {len(errors)} stale paths, anchors or lists in the docs", file=sys.stderr)
        return 1
    print(f"doc paths: every path and anchor of {len(pages)} pages exists; the lists are complete")
    return 0


if __name__ == "__main__":
    sys.exit(main())

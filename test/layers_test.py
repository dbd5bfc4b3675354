#!/usr/bin/env python3
"""The folders are the layers (stdlib only): every `#include "folder/file"` in lib/ must point to
a folder of a lower layer than its own, or of the same layer without closing a cycle between
folders. The layers are read from docs/architecture.md ("From the bottom up, ..."): each
numbered item names its folders in backticks (`config/`, `data/`, ...), so that the page and the
code cannot drift apart.

The seam between the two libraries (lib/CMakeLists.txt) is checked too: no file of a folder of
ptune_base includes a folder of ptune_torch or a LibTorch header, and neither do the `ptune`
executable's sources (apps/ptune/CMakeLists.txt's add_executable(ptune ...): all but the
engine), through any chain of headers.

    python3 test/layers_test.py

KNOWN lists the edges that still break the rule, each with what would remove it; the test also
fails when one of them no longer occurs, so that the list only shrinks. Prints every violation
and exits 1 when there is one.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "lib")
APP = os.path.join(ROOT, "apps", "ptune")

# An #include "..." (a file of ptune's), and an #include <...> of LibTorch's.
QUOTED = re.compile(r'\s*#\s*include\s+"([^"]+)"')
LIBTORCH = re.compile(r"\s*#\s*include\s+<((?:torch|c10|ATen)/[^>]+)>")

# (from folder, to folder): why it is still there.
KNOWN = {}

# Folders whose sources are not all in one library, each with what would remove it (the test also
# fails once one of them is whole, so that the list only shrinks).
KNOWN_MIXED = {}


def layers():
    """folder -> layer number, from docs/architecture.md's numbered list."""
    text = open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8").read()
    start = text.index("From the bottom up")
    end = text.index("\n## ", start)
    out = {}
    for m in re.finditer(r"^(\d+)\. (.*?)(?=^\d+\. |\Z)", text[start:end], re.S | re.M):
        for folder in re.findall(r"\*\*`([a-z_]+)/`\*\*", m.group(2)):
            out[folder] = int(m.group(1))
    return out


def includes():
    """(from folder, to folder, 'file: line') for every include of another folder in lib/."""
    for root, _, files in os.walk(LIB):
        rel = os.path.relpath(root, LIB)
        if rel == ".":
            continue
        src = rel.split(os.sep)[0]
        for f in sorted(files):
            if not f.endswith((".cpp", ".hpp")):
                continue
            path = os.path.join(root, f)
            for n, line in enumerate(open(path, encoding="utf-8"), 1):
                m = re.match(r'\s*#\s*include\s+"([a-z_]+)/[^"]+"', line)
                if m and m.group(1) != src:
                    yield src, m.group(1), f"lib/{rel}/{f}:{n}: {line.strip()}"


def libraries():
    """folder -> the set of libraries (ptune_base, ptune_torch) its sources are in, from
    lib/CMakeLists.txt's PTUNE_BASE_SOURCES and PTUNE_CORE_SOURCES (and the lists appended to them)."""
    text = open(os.path.join(LIB, "CMakeLists.txt"), encoding="utf-8").read()
    out = {}
    for m in re.finditer(r"(?:set|list)\((?:APPEND )?(PTUNE_BASE_SOURCES|PTUNE_CORE_SOURCES)\b([^)]*)\)", text):
        lib = "ptune_base" if m.group(1) == "PTUNE_BASE_SOURCES" else "ptune_torch"
        for src in re.findall(r"([a-z_]+)/[a-z_0-9]+\.cpp", m.group(2)):
            out.setdefault(src, set()).add(lib)
    return out


def executable_sources():
    """The `ptune` executable's sources, from add_executable(ptune ...) in apps/ptune/CMakeLists.txt."""
    text = open(os.path.join(APP, "CMakeLists.txt"), encoding="utf-8").read()
    m = re.search(r"add_executable\(ptune\s+([^)]*)\)", text)
    if not m:
        raise SystemExit("FAIL: apps/ptune/CMakeLists.txt has no add_executable(ptune ...)")
    return [os.path.join(APP, f) for f in m.group(1).split()]


def resolve(name, including):
    """The file `#include "name"` in `including` reads: beside it, else under lib/; None for one
    the build generates (ptune_build_id.hpp)."""
    for path in (os.path.join(os.path.dirname(including), name), os.path.join(LIB, name)):
        if os.path.isfile(path):
            return os.path.normpath(path)
    return None


def torch_side(path, torch_folders):
    """The ptune_torch folder `path` is in, or None."""
    rel = os.path.relpath(path, LIB).split(os.sep)
    return rel[0] if len(rel) > 1 and rel[0] in torch_folders else None


def seam_leaks(start, torch_folders):
    """What `start` reaches across the seam through its includes, followed transitively: one
    line per torch-side file or LibTorch header, with the chain of includes that reaches it."""
    out, seen = [], {start}
    todo = [(start, [])]
    while todo:
        path, chain = todo.pop(0)
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            here = chain + [f"{os.path.relpath(path, ROOT)}:{n}"]
            m = LIBTORCH.match(line)
            if m:
                out.append(" -> ".join(here) + f": includes <{m.group(1)}>, a LibTorch header")
                continue
            m = QUOTED.match(line)
            target = resolve(m.group(1), path) if m else None
            if target is None or target in seen:
                continue
            seen.add(target)
            folder = torch_side(target, torch_folders)
            if folder:
                out.append(" -> ".join(here) + f": includes {m.group(1)}, of {folder}/ (ptune_torch)")
            else:
                todo.append((target, here))
    return out


def seam(libs):
    """The seam's failures: a file of a ptune_base folder that includes a ptune_torch folder or a
    LibTorch header (directly: each file of those folders is read), and the executable's sources
    that reach one through any chain of headers."""
    torch_folders = {f for f, where in libs.items() if "ptune_torch" in where}
    base_folders = sorted(f for f, where in libs.items() if where == {"ptune_base"})
    failures = []
    for folder in base_folders:
        for root, _, files in os.walk(os.path.join(LIB, folder)):
            for f in sorted(files):
                if not f.endswith((".cpp", ".hpp")):
                    continue
                path = os.path.join(root, f)
                for n, line in enumerate(open(path, encoding="utf-8"), 1):
                    where = f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}"
                    m = QUOTED.match(line)
                    to = m and re.match(r"([a-z_]+)/", m.group(1))
                    if to and to.group(1) in torch_folders:
                        failures.append(f"{where}: {folder}/ (ptune_base) includes {to.group(1)}/ (ptune_torch)")
                    elif LIBTORCH.match(line):
                        failures.append(f"{where}: {folder}/ (ptune_base) includes a LibTorch header")
    for src in executable_sources():
        for leak in seam_leaks(src, torch_folders):
            failures.append(f"{leak}: the ptune executable links only ptune_base")
    return failures


def cycles(edges):
    """The cycles of the folder graph, each as a list of folders (one per strongly connected
    component of two or more)."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    layer = layers()
    folders = sorted(d for d in os.listdir(LIB) if os.path.isdir(os.path.join(LIB, d)))
    failures = [f"lib/{d}/ is in no layer of docs/architecture.md" for d in folders if d not in layer]
    failures += [f"docs/architecture.md names `{d}/`, which lib/ does not have" for d in layer if d not in folders]
    used, edges = set(), set()
    for src, dst, where in includes():
        if (src, dst) in KNOWN:
            used.add((src, dst))
            continue
        edges.add((src, dst))
        if src in layer and dst in layer and layer[dst] > layer[src]:
            failures.append(f"{where}: {src}/ (layer {layer[src]}) includes {dst}/ (layer {layer[dst]}), "
                            "a layer above it")
    for comp in cycles(edges):
        failures.append("the folders " + ", ".join(f"{c}/" for c in comp) + " include each other (a cycle)")
    for edge in sorted(set(KNOWN) - used):
        failures.append(f"KNOWN lists {edge[0]}/ -> {edge[1]}/, which no longer occurs: remove it")
    libs = libraries()
    for folder in folders:
        both = len(libs.get(folder, ())) > 1
        if both and folder not in KNOWN_MIXED:
            failures.append(f"lib/{folder}/ has sources in both ptune_base and ptune_torch: a folder is one "
                            "library (lib/CMakeLists.txt)")
        if not both and folder in KNOWN_MIXED:
            failures.append(f"KNOWN_MIXED lists {folder}/, which is now in one library: remove it")
    failures += seam(libs)
    print(f"{len(folders)} folders in {len(set(layer.values()))} layers; {len(KNOWN)} known exceptions, "
          f"{len(KNOWN_MIXED)} folder in two libraries")
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

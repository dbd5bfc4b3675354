#!/usr/bin/env python3
"""The folders are the layers (stdlib only): every `#include "folder/file"` in lib/ must point to
a folder of a lower layer than its own, or of the same layer without closing a cycle between
folders. The layers are read from docs/architecture.md ("From the bottom up, ..."): each
numbered item names its folders in backticks (`config/`, `data/`, ...), so that the page and the
code cannot drift apart.

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
    print(f"{len(folders)} folders in {len(set(layer.values()))} layers; {len(KNOWN)} known exceptions, "
          f"{len(KNOWN_MIXED)} folder in two libraries")
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

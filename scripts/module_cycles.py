#!/usr/bin/env python3
"""Fails when two modules of one crate import each other, directly or through others.

Each `.rs` file under a crate's `src/` is a module; an edge A -> B is a `crate::...`,
`super::...`, `self::...` or `child::...` path (a child module of A by its relative name) in A
(in `use` items or inline) that names an item defined in B. Paths are
resolved through re-exports (`pub use x::Item;` in lib.rs or a mod.rs), so `crate::Item`
counts as an edge to the module that defines `Item`. A module's `pub use` of its own
children is a declaration, not an edge.

Usage: scripts/module_cycles.py [CRATE_DIR ...]   (default: every workspace crate)
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = [".", "distlock-core", "distlock-redis", "distlock-sql", "distlock-zk", "distlock-etcd", "distlock-chaos", "distlock-cli", "benches"]


def modules(src):
    """Map of module path (tuple) -> file, for every .rs file under src."""
    out = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                rel = []
            out[tuple(rel)] = os.path.join(dirpath, f)
    return out


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def reexports(mods):
    """module -> {name: module path it comes from}, from `pub use a::b::{X, Y};` items."""
    out = {}
    for m, f in mods.items():
        with open(f, encoding="utf-8") as fh:
            text = strip_comments(fh.read())
        names = {}
        for prefix, group in re.findall(r"pub use ((?:\w+::)+)(\{[^}]*\}|\w+)\s*;", text):
            parts = [p for p in prefix.split("::") if p]
            if parts and parts[0] == "crate":
                base = parts[1:]
            elif parts and parts[0] == "super":
                base = list(m[:-1]) + parts[1:]
            else:
                base = list(m) + parts
            items = group[1:-1].split(",") if group.startswith("{") else [group]
            for item in items:
                item = item.strip().split(" as ")
                if not item[0]:
                    continue
                sub = [p for p in item[0].split("::") if p]
                alias = item[-1].strip().split("::")[-1]
                names[alias] = tuple(base + sub[:-1])
        out[m] = names
    return out


def resolve(path, mods, exports, depth=0):
    """The module defining the item a path names (longest module prefix, then re-exports)."""
    for n in range(len(path), -1, -1):
        prefix = tuple(path[:n])
        if prefix in mods:
            rest = path[n:]
            if rest and depth < 8 and rest[0] in exports.get(prefix, {}):
                via = exports[prefix][rest[0]]
                if via in mods and via != prefix:
                    return resolve(list(via) + rest, mods, exports, depth + 1)
            return prefix
    return None


def uses(text, m, children):
    """Every `crate::a::b::...` / `super::...` / `self::...` path, and every path that starts
    with one of `m`'s child modules (`child::Item`, the 2018 edition's relative form), expanding
    `{a, b::c}` groups one level."""
    paths = []
    roots = ["crate", "super", "self"] + sorted(children)
    pattern = r"(?<![\w:])(" + "|".join(map(re.escape, roots)) + r")::((?:\w+::)*)(\{[^}]*\}|\w+)"
    for m_ in re.finditer(pattern, text):
        head = m_.group(1)
        if head == "crate":
            root = []
        elif head == "super":
            root = list(m[:-1])
        elif head == "self":
            root = list(m)
        else:
            root = list(m) + [head]
        prefix = root + [p for p in m_.group(2).split("::") if p]
        last = m_.group(3)
        if last.startswith("{"):
            for item in last[1:-1].split(","):
                item = item.strip().split(" as ")[0]
                if item and item != "self":
                    paths.append(prefix + [p for p in item.split("::") if p])
                elif item == "self":
                    paths.append(prefix)
        else:
            paths.append(prefix + [last])
    return paths


def edges(mods):
    exports = reexports(mods)
    g = {m: set() for m in mods}
    for m, f in mods.items():
        with open(f, encoding="utf-8") as fh:
            text = strip_comments(fh.read())
        # A unit-test module inside the file (`#[cfg(test)] mod tests { … }`, last by
        # convention) has its own `super`: its paths are not this module's.
        text = re.split(r"#\[cfg\(test\)\]\s*mod \w+\s*\{", text)[0]
        # `pub use` lines are declarations of what a module offers, not imports.
        text = re.sub(r"pub use [^;]*;", "", text)
        children = {c[-1] for c in mods if len(c) == len(m) + 1 and c[: len(m)] == m}
        # `mod child;` lines declare children; they are not uses.
        text = re.sub(r"\b(pub(\([^)]*\))? )?mod \w+\s*;", "", text)
        for path in uses(text, m, children):
            target = resolve(path, mods, exports)
            if target is None or target == m:
                continue
            g[m].add(target)
    return g


def cycles(g):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
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
                out.append(comp)

    for v in g:
        if v not in index:
            visit(v)
    return out


def main():
    crates = sys.argv[1:] or CRATES
    bad = 0
    for c in crates:
        src = os.path.join(ROOT, c, "src")
        if not os.path.isdir(src):
            continue
        mods = modules(src)
        # Binaries (src/main.rs, src/bin) are their own crate roots; treat main's tree apart
        # from lib's by name only (both are the empty path; lib wins).
        for comp in cycles(edges(mods)):
            names = sorted("::".join(m) or "(root)" for m in comp)
            print(f"{c}: modules import each other: {', '.join(names)}")
            bad += 1
    if bad:
        sys.exit(1)
    print(f"no import cycles between modules in {len(crates)} crates")


if __name__ == "__main__":
    main()

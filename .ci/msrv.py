#!/usr/bin/env python3
"""What Rust the dependency tree needs, as its packages declare it.

1. The locked tree (Cargo.lock, which CI builds): no package may need a
   newer Rust than the crate's own `rust-version`. A failure names them.
2. A fresh resolve, as a project of the same `rust-version` that depends on
   remfile gets it with Cargo's rust-version-aware resolver (resolver 3,
   the default from edition 2024): no package may need more either.
3. A fresh resolve without regard to `rust-version` (resolver 2, the
   default before edition 2024): printed, never failed on (it moves with
   every release of a dependency).
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def version(text):
    return tuple(int(part) for part in text.split("."))


def needs(metadata, roots):
    """The packages reachable from `roots` in the resolve, with what each needs."""
    packages = {p["id"]: p for p in metadata["packages"]}
    nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
    seen, todo = set(), list(roots)
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        todo.extend(d["pkg"] for d in nodes[node]["deps"])
    return [
        (packages[i]["name"], packages[i]["version"], packages[i].get("rust_version"))
        for i in seen
    ]


def metadata(cwd, env=None):
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--all-features"]
        + (["--locked"] if env is None else []),
        cwd=cwd,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def main():
    locked = metadata(ROOT)
    members = set(locked["workspace_members"])
    ours = {p["name"]: p["rust_version"] for p in locked["packages"] if p["id"] in members}
    msrv = version(ours["remfile"])
    too_new = [
        (name, ver, rv)
        for name, ver, rv in needs(locked, members)
        if rv and version(rv) > msrv
    ]
    for name, ver, rv in sorted(too_new):
        print(f"{name} {ver} needs Rust {rv}, above rust-version {ours['remfile']}")
    if too_new:
        sys.exit(1)
    print(f"locked tree: every package needs at most Rust {ours['remfile']}")

    aware = fresh_resolve(ours["remfile"], "fallback")
    if aware is not None:
        top, names = aware
        if top > msrv:
            print(f"a fresh rust-version-aware resolve needs Rust {top}: {names}")
            sys.exit(1)
        print(f"fresh rust-version-aware resolve: at most Rust {ours['remfile']}")
    blind = fresh_resolve(None, "allow")
    if blind is not None:
        top, names = blind
        shown = ".".join(map(str, top))
        print(f"fresh resolve ignoring rust-version needs Rust {shown} ({names})")


def fresh_resolve(rust_version, incompatible):
    """What a fresh resolve of a project depending on remfile needs: the
    highest Rust version, and the packages that need it (`None` if the
    registry cannot be reached)."""
    with tempfile.TemporaryDirectory() as tmp:
        user = pathlib.Path(tmp)
        (user / "src").mkdir()
        (user / "src" / "lib.rs").write_text("")
        declared = f'rust-version = "{rust_version}"\n' if rust_version else ""
        (user / "Cargo.toml").write_text(
            '[package]\nname = "a-user"\nversion = "0.0.0"\nedition = "2021"\n'
            + declared
            + f'\n[dependencies]\nremfile = {{ path = {json.dumps(str(ROOT))}, features = ["hdf5"] }}\n'
        )
        env = dict(os.environ, CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=incompatible)
        try:
            subprocess.run(
                ["cargo", "generate-lockfile"], cwd=user, env=env, check=True,
                capture_output=True, text=True,
            )
            fresh = metadata(user, env)
        except subprocess.CalledProcessError as e:
            print(f"fresh resolve not checked: {e.stderr.strip()[-300:]}")
            return None
        root = [p["id"] for p in fresh["packages"] if p["name"] == "a-user"]
        tree = [t for t in needs(fresh, root) if t[2]]
        top = max(version(rv) for _, _, rv in tree)
        names = ", ".join(sorted(f"{n} {v}" for n, v, rv in tree if version(rv) == top))
        return top, names


if __name__ == "__main__":
    main()

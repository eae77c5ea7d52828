"""Every metric the alert rules and the Grafana dashboards query is one the binaries export.

    python3 deploy/prometheus/check_metrics.py ROOT

Exported names are the `"usher_…"` string constants in the crates' sources (each binary names
its series once, in its `metrics` module, and usher-core names the Redis ones); a histogram's
`_bucket`, `_sum` and `_count` series count as its name. Run by scripts/validate-deploy.sh.
"""

import json
import pathlib
import re
import sys

import yaml

NAME = re.compile(r"\busher_[a-z0-9_]+\b")
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
# Prometheus' own series, not ours.
BUILTIN = {"up"}


def exported(root):
    names = set()
    for f in (root / "crates").glob("*/src/**/*.rs"):
        names.update(re.findall(r'"(usher_[a-z0-9_]+)"', f.read_text()))
    return names


def known(name, names):
    if name in names:
        return True
    return any(name.endswith(s) and name[: -len(s)] in names for s in HISTOGRAM_SERIES)


def exprs_of_rules(path):
    doc = yaml.safe_load(path.read_text())
    for g in doc["groups"]:
        for r in g["rules"]:
            yield f"{path.name}: {r.get('alert') or r.get('record')}", r["expr"]


def exprs_of_dashboard(path):
    doc = json.loads(path.read_text())
    panels = list(doc.get("panels", []))
    while panels:
        p = panels.pop()
        panels.extend(p.get("panels", []))
        for t in p.get("targets", []):
            yield f"{path.name}: {p.get('title')}", t["expr"]
    for v in doc.get("templating", {}).get("list", []):
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if isinstance(q, str):
            yield f"{path.name}: variable {v['name']}", q


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    names = exported(root)
    errs, used, queries = [], set(), 0
    sources = [exprs_of_rules(root / "deploy/prometheus/alerts.yml")]
    sources += [exprs_of_dashboard(p) for p in sorted((root / "deploy/grafana/dashboards").glob("*.json"))]
    for src in sources:
        for where, expr in src:
            queries += 1
            found = set(NAME.findall(expr))
            if not found and not any(re.search(rf"\b{b}\b", expr) for b in BUILTIN):
                errs.append(f"{where}: queries no usher metric: {expr}")
            for n in sorted(found):
                used.add(n)
                if not known(n, names):
                    errs.append(f"{where}: {n} is not exported by any binary")
    if errs:
        print("\n".join(errs))
        return 1
    print(f"{queries} queries use {len(used)} metrics, all exported")
    return 0


if __name__ == "__main__":
    sys.exit(main())

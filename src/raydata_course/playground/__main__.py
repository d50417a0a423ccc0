"""``make playground``: build the JupyterLite playground into ``build/playground/``.

    python -m raydata_course.playground --jupyter build/playground-tools/bin/jupyter [--out build/playground]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raydata_course.playground", description=__doc__.splitlines()[0])
    parser.add_argument("--jupyter", type=Path, required=True, help="the jupyter command of the build tools' venv")
    parser.add_argument("--out", type=Path, default=Path("build/playground"))
    parser.add_argument("--cache", type=Path, default=Path("build/playground-cache"))
    parser.add_argument("--source", type=Path, default=Path("playground"),
                        help="the playground's notebooks and its lab results (lab/results.json)")
    args = parser.parse_args(argv)

    from raydata_course.lab.model_check import compare
    from raydata_course.lab.playground_data import validation_for_site
    from raydata_course.playground.site import DownloadError, build_site

    results = args.source / "lab" / "results.json"
    if not results.is_file():
        print(f"{results} is missing: the playground shows the model against a lab run; run `make lab` and copy "
              "build/lab/playground/ there.", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        summary = build_site(args.out, jupyter=args.jupyter, notebooks_dir=args.source,
                             validation=validation_for_site(compare(results), results), cache_dir=args.cache)
    except DownloadError as exc:
        print(f"make playground: {exc}", file=sys.stderr)
        return 2
    summary["build_s"] = round(time.perf_counter() - t0, 1)
    (args.cache / "build-summary.json").write_text(json.dumps(summary, indent=1))
    print(f"[playground] built {args.out}: {summary['site_bytes'] / 1e6:.1f} MB in {summary['site_files']} files, "
          f"{len(summary['wheels'])} wheels, Pyodide {summary['pyodide_version']}, {summary['build_s']} s")
    print(f"[playground] open it: python -m http.server -d {args.out} 8000 --bind 127.0.0.1, then "
          "http://127.0.0.1:8000/lab/index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fetch the two JavaScript packages that show embedded ipywidgets, so the book needs no CDN.

Jupyter Book (MyST-NB) embeds a widget's state in the page and, by default, loads require.js and
``@jupyter-widgets/html-manager`` from CDNs to display it: offline, the widget would not show.
``make`` runs this module once to put pinned copies of both packages, checked against their
SHA-256, under ``_vendor/widgets/``, with a three-line ``config.js`` that tells require.js where
html-manager lives (html-manager finds its chunks and fonts next to its own module).
``_config.yml`` copies ``_vendor`` into the book's ``_static`` (``html_static_path``) and has
MyST-NB load the three scripts, in order, on the pages that have widgets (``nb_ipywidgets_js``).
(Not a ``_static`` folder of the book's own: Jupyter Book would add every script in it to every
page.) The packages come from the npm registry, as the Python packages come from PyPI.
Licenses: require.js MIT, html-manager BSD-3-Clause (its license file is extracted too).

    python -m addnorm_lib.authoring.widgets [--dest _vendor/widgets]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import tarfile
import urllib.request
from pathlib import Path

REGISTRY = "https://registry.npmjs.org"
# package folder -> (tarball path on the registry, sha256 of the tarball, files to keep)
PACKAGES = {
    "requirejs": (
        "requirejs/-/requirejs-2.3.4.tgz",
        "583693b373f6ab0528ea6644fab5cdb5822011c9b5b1ff1615590d5f2f473dcd",
        ("package/require.js",),
    ),
    "html-manager": (
        "@jupyter-widgets/html-manager/-/html-manager-1.0.6.tgz",
        "6c198ceb99ba7e7526990a1de16e8147ad7d3a714e3fb06741183623c04b5f6e",
        ("package/dist/", "package/LICENSE"),
    ),
}
# The other two bundles of html-manager (plain script and library builds) are never loaded.
UNUSED = ("package/dist/embed.js", "package/dist/libembed-amd.js")
CONFIG_JS = """\
// html-manager finds its chunks and fonts next to its own AMD module: map the module here.
(function () {
  var here = document.currentScript.src.replace(/[^/]*$/, "");
  require.config({paths: {"@jupyter-widgets/html-manager/dist": here + "html-manager"}});
})();
// html-manager typesets widget labels with MathJax 2's MathJax.Hub.Queue; the book has MathJax 3.
// Give whatever object window.MathJax becomes a Hub whose Queue calls MathJax 3's typesetPromise.
(function () {
  var current;
  function withHub(value) {
    if (value && typeof value === "object" && value.version && !value.Hub) {
      value.Hub = {Queue: function () {
        if (value.typesetPromise) value.typesetPromise();
      }};
    }
    return value;
  }
  current = window.MathJax;
  Object.defineProperty(window, "MathJax", {
    configurable: true,
    get: function () { return withHub(current); },
    set: function (value) { current = value; },
  });
})();
"""
STAMP = ".complete"


def _wanted(name: str, keep: tuple[str, ...]) -> bool:
    return (
        not name.endswith(".map")
        and name not in UNUSED
        and any(name == k or (k.endswith("/") and name.startswith(k)) for k in keep)
    )


def _download(url: str, sha256: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read()
    except OSError as err:
        raise SystemExit(f"_widget_js: could not download {url}: {err}") from err
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise SystemExit(f"_widget_js: {url} has SHA-256 {digest}, expected {sha256}")
    return data


def fetch(dest: Path) -> list[Path]:
    """Download, verify and extract every package into ``dest``; return the files written."""
    written = []
    for folder, (path, sha256, keep) in PACKAGES.items():
        data = _download(f"{REGISTRY}/{path}", sha256)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            for member in archive.getmembers():
                if not member.isfile() or not _wanted(member.name, keep):
                    continue
                relative = Path(member.name).relative_to("package")
                if relative.parts[0] == "dist":
                    relative = relative.relative_to("dist")
                target = dest / folder / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.extractfile(member).read())
                written.append(target)
    (dest / "config.js").write_text(CONFIG_JS, encoding="utf-8")
    (dest / STAMP).write_text("".join(f"{k}: {v[0]}\n" for k, v in PACKAGES.items()))
    return [*written, dest / "config.js"]


def main(argv: list[str] | None = None) -> int:
    """Fetch the widget bundles into ``--dest`` unless its stamp file is there; exit status 0."""
    parser = argparse.ArgumentParser(description="Fetch require.js and html-manager for the book.")
    parser.add_argument("--dest", type=Path, default=Path("_vendor") / "widgets")
    args = parser.parse_args(argv)
    if (args.dest / STAMP).is_file():
        return 0
    files = fetch(args.dest)
    print(f"_widget_js: {len(files)} files in {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

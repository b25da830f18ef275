"""What overflows on each page of a built book, at desktop and phone width, and each page's weight.

    python benchmarks/book_layout.py [--book _build/html] [--json FILE] [--details]

For every page: code blocks, printed outputs, tables and display equations that need sideways
scrolling or are cut off at 1280 px, the same at 390 px, figures shown smaller than drawn at
1280 px, figures squashed (another aspect ratio than drawn) and text running past its box at
390 px, whether the page scrolls sideways at 390 px, and the page's weight (its HTML, and its
HTML with the images it shows). Needs chromium (see tests/book/browser.py).
"""

import argparse
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.book.browser import Chromium, StaticServer  # noqa: E402
from tests.book.layout import DESKTOP, PHONE, measure, shrunk, squashed  # noqa: E402

NOT_PAGES = {"_static", "_sources", "_images", "_downloads"}
IMAGE = re.compile(r'<img[^>]+src="([^"]+)"')


def page_weight(book: Path, page: str) -> tuple[int, int]:
    """Bytes of the page's HTML, and of its HTML plus the image files it shows."""
    path = book / page
    html = path.read_text(encoding="utf-8")
    images = {(path.parent / src).resolve() for src in IMAGE.findall(html) if "://" not in src}
    images = {image for image in images if image.is_file()}
    size = path.stat().st_size
    return size, size + sum(image.stat().st_size for image in images)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--book", type=Path, default=ROOT / "_build" / "html")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--details", action="store_true", help="list each overflowing element")
    args = parser.parse_args()
    book = args.book.resolve()
    pages = sorted(
        p.relative_to(book).as_posix()
        for p in book.rglob("*.html")
        if not NOT_PAGES & set(p.relative_to(book).parts)
        and 'http-equiv="Refresh"' not in p.read_text()
    )
    server = StaticServer(book)
    folder = Path(tempfile.mkdtemp())
    browser = Chromium(shutil.which("chromium"), folder)
    rows = {}
    try:
        for page in pages:
            desktop = measure(browser, server.url + page, DESKTOP)
            phone = measure(browser, server.url + page, PHONE)
            html, total = page_weight(book, page)
            rows[page] = {"desktop": desktop, "phone": phone, "html_bytes": html, "bytes": total}
    finally:
        browser.close()
        server.close()
        shutil.rmtree(folder, ignore_errors=True)

    columns = ["code", "outputs", "tables", "equations"]
    print(f"{'page':32} " + " ".join(f"{c[:6]:>9}" for c in columns), end="")
    print(f" {'eq@390':>7} {'shrunk':>7} {'sq@390':>7} {'txt@390':>7} {'page@390':>8}", end="")
    print(f" {'html KB':>8} {'all KB':>7}")
    counted = ["code", "outputs", "tables", "equations", "eq390", "shrunk", "wide", "squashed"]
    totals = dict.fromkeys([*counted, "text"], 0)
    totals |= {f"{c}_total": 0 for c in columns} | {"figures": 0}
    for page, row in rows.items():
        d, p = row["desktop"], row["phone"]
        cells = [f"{len(d[c]['over'])}/{d[c]['total']}" for c in columns]
        wide = p["pageWidth"] > p["windowWidth"]
        print(f"{page:32} " + " ".join(f"{c:>9}" for c in cells), end="")
        print(
            f" {len(p['equations']['over']):>3}/{p['equations']['total']:<3}"
            f" {len(shrunk(d)):>3}/{len(d['figures']):<3}"
            f" {len(squashed(p)):>3}/{len(p['figures']):<3} {len(p.get('text', [])):>7}"
            f" {p['pageWidth'] if wide else 'ok':>8} {row['html_bytes'] / 1e3:8.0f}"
            f" {row['bytes'] / 1e3:7.0f}"
        )
        for c in columns:
            totals[c] += len(d[c]["over"])
            totals[f"{c}_total"] += d[c]["total"]
        totals["eq390"] += len(p["equations"]["over"])
        totals["shrunk"] += len(shrunk(d))
        totals["figures"] += len(d["figures"])
        totals["wide"] += wide
        totals["squashed"] += len(squashed(p))
        totals["text"] += len(p.get("text", []))
        if args.details:
            for c in columns:
                for text in d[c]["over"]:
                    print(f"    1280 {c}: {text}")
            for text in p["equations"]["over"]:
                print(f"    390 equation: {text}")
            for text in shrunk(d):
                print(f"    1280 shrunk figure: {text}")
            for text in squashed(p):
                print(f"    390 squashed figure: {text}")
            for text in p.get("text", []):
                print(f"    390 text past its box: {text}")
    print(
        f"\nat {DESKTOP} px: {totals['code']}/{totals['code_total']} code blocks, "
        f"{totals['outputs']}/{totals['outputs_total']} outputs, "
        f"{totals['tables']}/{totals['tables_total']} tables, "
        f"{totals['equations']}/{totals['equations_total']} display equations overflow; "
        f"{totals['shrunk']}/{totals['figures']} figures shrunk. At {PHONE} px: "
        f"{totals['eq390']} equations overflow, {totals['squashed']} figures squashed, "
        f"{totals['text']} texts run past their box, {totals['wide']} pages scroll sideways."
    )
    if args.json:
        args.json.write_text(json.dumps({"pages": rows, "totals": totals}, indent=1))


if __name__ == "__main__":
    main()

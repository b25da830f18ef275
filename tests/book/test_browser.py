"""The built book works in a real browser, offline: Debian's chromium, headless, over DevTools.

The book that the suite builds (the session fixture `built_book`) is served from a static file
server on 127.0.0.1, and one headless chromium visits every page once; chromium cannot reach any
host but localhost (tests/browser.py). The tests then check, page by page: no console errors and no
failed or outside requests, typeset math, loaded images, internal links and their #fragments,
the exercises' notebook downloads; and screenshots of three key pages are written to
_build/screenshots/ for review.

Chromium is required: without it these tests fail, saying how to install it (`apt-get install -y
chromium`; `make test` does this as root). On a machine that cannot install it, set
ADDNORM_SKIP_BROWSER=1 to skip them explicitly.
"""

import base64
import os
import re
import shutil
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.book.browser import LOCAL_HOSTS, Chromium, StaticServer
from tests.conftest import BOOK_GROUP, EXERCISES, ROOT

pytestmark = [pytest.mark.slow, BOOK_GROUP]

SCREENSHOTS = ROOT / "_build" / "screenshots"
KEY_PAGES = ["book/intro.html", "book/layernorm.html", "book/placement.html"]
NOT_PAGES = {"_static", "_sources", "_images", "_downloads"}
SCREENSHOT_MAX_HEIGHT = 12000  # CSS pixels: enough for a chapter's first screens and figures
# Console errors that the toolchain, not the book, emits; matched exactly, nothing else is forgiven.
# pydata-sphinx-theme logs an invalid "" theme mode on a reader's first visit, before its
# localStorage holds one. (sphinx-thebe's doubled inline script is dropped by
# addnorm_lib.authoring.page_cleanup.)
TOOLCHAIN_NOISE = {
    "console.error: Got invalid theme mode: . Resetting to auto.",
}
# Where a launch button would send a reader: no page may link there (the course has no public
# repository that Binder or Colab could open).
LAUNCHERS = ("mybinder.org", "colab.research.google.com", "github.com/addnorm-course")
REDIRECT = re.compile(r'<meta http-equiv="Refresh" content="0; url=([^"]+)"', re.IGNORECASE)
EMPTY_REPORT = {"hasMath": False, "untypeset": [], "text": "", "images": [], "links": [], "ids": []}
EMPTY_REPORT |= {"headerDownloads": [], "errors": [], "outside": []}
RAW_TEX = ("$$", "\\(", "\\)", "\\[", "\\]", "\\begin{")

# Runs in the page once it has loaded: waits for MathJax and the images, then reports what the
# tests check. Text inside code, scripts and typeset math is left out of `text`.
INSPECT = r"""
(async () => {
  const wait = ms => new Promise(done => setTimeout(done, ms));
  const hasMath = document.querySelector('.math') !== null;
  for (let i = 0; hasMath && !(window.MathJax && MathJax.startup && MathJax.startup.promise)
       && i < 100; i++) await wait(100);
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  const images = [...document.images];
  images.forEach(img => { img.loading = 'eager'; });
  await Promise.all(images.map(img => img.complete ? null : new Promise(done => {
    img.addEventListener('load', done); img.addEventListener('error', done);
    setTimeout(done, 10000);
  })));
  const views = document.querySelectorAll(
    'script[type="application/vnd.jupyter.widget-view+json"]').length;
  for (let i = 0; views && document.querySelectorAll('.widget-interact img').length < views
       && i < 150; i++) await wait(100);
  const widgets = {views, rendered: document.querySelectorAll('.widget-interact').length,
    images: [...document.querySelectorAll('.widget-interact img')].map(img => img.naturalWidth)};
  const skip = 'pre, code, script, style, textarea, noscript, mjx-container';
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const text = [];
  while (walker.nextNode()) {
    if (!walker.currentNode.parentElement.closest(skip)) text.push(walker.currentNode.data);
  }
  return {
    hasMath,
    typeset: document.querySelectorAll('mjx-container').length,
    untypeset: [...document.querySelectorAll('.math')]
      .filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 80)),
    text: text.join(' '),
    images: images.map(img => ({src: img.currentSrc || img.src, width: img.naturalWidth})),
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    ids: [...document.querySelectorAll('[id], a[name]')].map(e => e.id || e.name),
    headerDownloads: [...document.querySelectorAll('.article-header-buttons a[href]')]
      .map(a => a.href).filter(href => href.split('#')[0].endsWith('.ipynb')),
    widgets,
    height: Math.ceil(document.documentElement.scrollHeight),
  };
})()
"""


def screenshot_name(page: str) -> str:
    return page.removesuffix(".html").replace("/", "-") + ".png"


def problems_in(events: list[dict]) -> tuple[list[str], list[str]]:
    """Console errors and failed requests; and every request to a host other than localhost."""
    errors, outside, urls = [], [], {}
    for event in events:
        method, params = event["method"], event["params"]
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            described = details.get("exception", {}).get("description", details["text"])
            errors.append(f"JS exception: {described}")
        elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            words = [str(arg.get("value", arg.get("description", ""))) for arg in params["args"]]
            errors.append(f"console.{params['type']}: {' '.join(words)}")
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            errors.append(f"{entry['source']} error: {entry['text']} {entry.get('url', '')}")
        elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
            errors.append(f"HTTP {params['response']['status']}: {params['response']['url']}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            url = urls.get(params["requestId"], params["requestId"])
            errors.append(f"request failed ({params['errorText']}): {url}")
        elif method == "Network.requestWillBeSent":
            urls[params["requestId"]] = params["request"]["url"]
            url = urllib.parse.urlsplit(params["request"]["url"])
            if url.scheme not in ("data", "blob", "about") and url.hostname not in LOCAL_HOSTS:
                outside.append(params["request"]["url"])
    return [error for error in errors if error not in TOOLCHAIN_NOISE], outside


@pytest.fixture(scope="module")
def site(request, tmp_path_factory):
    """Visit every page of the built book once in one chromium; what each page showed, by path."""
    if os.environ.get("ADDNORM_SKIP_BROWSER") == "1":
        pytest.skip("ADDNORM_SKIP_BROWSER=1: browser tests skipped on request")
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail(
            "chromium is not installed, so the book cannot be checked in a browser: install it "
            "with `apt-get update && apt-get install -y chromium` (`make test` does as root), or "
            "set ADDNORM_SKIP_BROWSER=1 to skip these tests on a machine that cannot install it",
            pytrace=False,
        )
    book: Path = request.getfixturevalue("built_book")
    pages = sorted(
        path.relative_to(book).as_posix()
        for path in book.rglob("*.html")
        if not NOT_PAGES & set(path.relative_to(book).parts)
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for page in KEY_PAGES:  # no stale screenshot from an earlier run passes for a new one
        (SCREENSHOTS / screenshot_name(page)).unlink(missing_ok=True)
    server = StaticServer(book)
    try:
        browser = Chromium(executable, tmp_path_factory.mktemp("chromium"))
        try:
            visited = {page: visit(browser, server.url, book, page) for page in pages}
            found = search(browser, server.url, "residual")
        finally:
            browser.close()
        yield {"url": server.url, "book": book, "pages": visited, "search": found}
    finally:
        server.close()


# Sphinx's search page lists results one by one, then writes a summary: wait for it (10 s at most).
SEARCH_RESULTS = """new Promise(resolve => {
  const started = Date.now();
  const poll = () => {
    const summary = document.querySelector('#search-results .search-summary');
    const done = summary && /found|did not match/.test(summary.textContent);
    if (done || Date.now() - started > 10000) {
      resolve([...document.querySelectorAll('#search-results li a')].map(a => a.href));
    } else setTimeout(poll, 100);
  };
  poll();
})"""


def search(browser: Chromium, base: str, query: str) -> list[str]:
    """The result links the book's own search page lists for ``query``, served offline."""
    browser.navigate(f"{base}search.html?q={urllib.parse.quote(query)}")
    return browser.evaluate(SEARCH_RESULTS)


def visit(browser: Chromium, base: str, book: Path, page: str) -> dict:
    """What one page showed (see INSPECT), with its console errors and outside requests."""
    redirect = REDIRECT.search((book / page).read_text(encoding="utf-8"))
    if redirect:  # Jupyter Book's index.html: not a page; its target must resolve
        return {**EMPTY_REPORT, "links": [urllib.parse.urljoin(base + page, redirect.group(1))]}
    browser.navigate(base + page)
    report = browser.evaluate(INSPECT)
    if page in KEY_PAGES:
        height = min(report["height"], SCREENSHOT_MAX_HEIGHT)
        clip = {"x": 0, "y": 0, "width": 1280, "height": height, "scale": 1}
        shot = browser.call("Page.captureScreenshot", clip=clip, captureBeyondViewport=True)
        (SCREENSHOTS / screenshot_name(page)).write_bytes(base64.b64decode(shot["data"]))
    report["errors"], report["outside"] = problems_in(browser.events)
    return report


def fail_on(site, check, title: str):
    """Fail listing, page by page, what `check(report)` yields; pass if it yields nothing."""
    lines = [f"{path}: {line}" for path, report in site["pages"].items() for line in check(report)]
    if lines:
        pytest.fail(f"{title}:\n" + "\n".join(lines), pytrace=False)


def test_the_book_has_pages(site):
    assert "book/intro.html" in site["pages"], sorted(site["pages"])
    assert len(site["pages"]) >= len(EXERCISES) + 10


def test_no_page_reaches_outside_localhost(site):
    """The book reads offline: no script, style, font or image comes from another host."""
    title = "requests outside localhost"
    fail_on(site, lambda report: sorted(set(report["outside"])), title)


WIDGET_PAGES = ("book/depth.html", "book/layernorm.html")


def test_widgets_render_offline_with_their_figure(site):
    """Embedded widget state renders from the book's own copy of html-manager, no network."""
    for page in WIDGET_PAGES:
        assert site["pages"][page]["widgets"]["views"] > 0, f"{page} has no embedded widget"

    def check(report):
        widgets = report.get("widgets") or {"views": 0}
        if widgets["views"] and (
            widgets["rendered"] < widgets["views"]
            or not widgets["images"]
            or min(widgets["images"]) == 0
        ):
            yield (
                f"{widgets['views']} widget(s) embedded, {widgets['rendered']} rendered, "
                f"figure widths {widgets['images']}"
            )

    fail_on(site, check, "widgets that do not render offline")


def test_search_finds_the_chapters_offline(site):
    pages = {urllib.parse.urlparse(link).path.lstrip("/") for link in site["search"]}
    assert "book/residuals.html" in pages, f"searching 'residual' found {sorted(pages)}"


def test_no_console_errors_or_failed_loads(site):
    fail_on(site, lambda report: report["errors"], "console errors or failed loads")


def test_no_page_offers_a_launcher_that_cannot_work(site):
    def check(report):
        links = report["links"]
        return [f"links to {href}" for href in links if any(site_ in href for site_ in LAUNCHERS)]

    fail_on(site, check, "links to launchers")


def test_math_is_typeset(site):
    def check(report):
        if report["hasMath"] and not report["typeset"]:
            yield "has math but MathJax typeset none of it"
        if report["untypeset"]:
            examples = ", ".join(repr(source) for source in report["untypeset"][:3])
            yield f"{len(report['untypeset'])} formulas left untypeset, such as {examples}"
        for tex in RAW_TEX:
            if tex in report["text"]:
                at = report["text"].index(tex)
                yield f"raw TeX {tex!r} in the text: ...{report['text'][at - 40 : at + 40]!r}..."

    pages_with_math = [path for path, report in site["pages"].items() if report["hasMath"]]
    assert "book/layernorm.html" in pages_with_math
    fail_on(site, check, "math not typeset")


def test_every_image_loads(site):
    def check(report):
        for image in report["images"]:
            if image["width"] == 0:
                yield f"image does not load: {image['src']}"

    assert site["pages"]["book/layernorm.html"]["images"], "the chapter shows no figure"
    fail_on(site, check, "broken images")


def test_every_internal_link_resolves(site):
    """Every same-origin link is fetched once; its #fragment must exist on the target page."""
    base = site["url"]
    targets: dict[str, set[tuple[str, str]]] = {}  # url: {(linking page, fragment or "")}
    for path, report in site["pages"].items():
        for href in report["links"]:
            if href.startswith(base):
                url, _, fragment = href.partition("#")
                targets.setdefault(url, set()).add((path, urllib.parse.unquote(fragment)))
    assert len(targets) > len(site["pages"]) / 2, "too few internal links found"
    broken = []
    for url, sources in sorted(targets.items()):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10):
                pass
        except urllib.error.URLError as error:
            pages = sorted({path for path, _ in sources})
            broken.append(f"{url[len(base) :]} ({error}), linked from {', '.join(pages)}")
            continue
        target = urllib.parse.unquote(urllib.parse.urlsplit(url).path).lstrip("/")
        if target == "" or target.endswith("/"):
            target += "index.html"
        ids = site["pages"].get(target, {}).get("ids")
        if ids is None and target.endswith(".html"):
            html = (site["book"] / target).read_text(encoding="utf-8")
            ids = re.findall(r'\b(?:id|name)="([^"]+)"', html)
        for path, fragment in sorted(sources):
            if fragment and ids is not None and fragment not in ids:
                broken.append(f"{target}#{fragment}: no such anchor, linked from {path}")
    if broken:
        pytest.fail("broken internal links:\n" + "\n".join(broken), pytrace=False)


def test_exercise_pages_offer_their_notebook(site):
    base = site["url"]
    missing = []
    for notebook in EXERCISES:
        page = f"exercises/{notebook.stem}.html"
        downloads = site["pages"].get(page, {}).get("headerDownloads", [])
        if not any(href.split("#")[0].endswith(f"/{notebook.name}") for href in downloads):
            missing.append(f"{page}: no .ipynb download in the page header ({downloads})")
    listed = site["pages"]["book/exercises.html"]["links"]
    for notebook in EXERCISES:
        links = [h for h in listed if h.startswith(base) and h.endswith(f"/{notebook.name}")]
        if not links:
            missing.append(f"book/exercises.html: no link to {notebook.name}")
        for link in links:
            with urllib.request.urlopen(link, timeout=10) as reply:
                if b'"cells"' not in reply.read():
                    missing.append(f"book/exercises.html: {link} is not a notebook")
    if missing:
        pytest.fail("\n".join(missing), pytrace=False)


def test_screenshots_of_key_pages_are_written(site):
    for page in KEY_PAGES:
        shot = SCREENSHOTS / screenshot_name(page)
        assert shot.is_file(), f"no screenshot of {page}"
        assert shot.read_bytes().startswith(b"\x89PNG"), f"{shot} is not a PNG"

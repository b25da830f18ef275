"""The built book works in a real browser, offline: Debian's chromium, headless, over DevTools.

The book that the suite builds (the session fixture `built_book`) is served from a static file
server on 127.0.0.1, and one headless chromium visits every page once; chromium cannot reach any
host but localhost (tests/browser.py). The tests then check, page by page: no console errors and no
failed or outside requests, typeset math, loaded images, internal links and their #fragments,
the exercises' notebook downloads; nothing overflowing its box at 1280 px and no sideways
scrolling at 390 px (tests/book/layout.py); figures shown at their size, drawn at 2x, numbered
and described; every explorer's every control switching to its own precomputed figure. A
screenshot of the top of every page at both widths is written to _build/screenshots/ for review;
with ADDNORM_FULL_SCREENSHOTS=1, of each whole page (in parts), which takes about a minute more.

Chromium is required: without it these tests fail, saying how to install it (`apt-get install -y
chromium`; `make test` does this as root). On a machine that cannot install it, set
ADDNORM_SKIP_BROWSER=1 to skip them explicitly.
"""

import base64
import math
import os
import re
import shutil
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.book.browser import LOCAL_HOSTS, Chromium, StaticServer
from tests.book.layout import (
    DESKTOP,
    LAYOUT,
    PHONE,
    READY,
    overflowing,
    set_width,
    shrunk,
    squashed,
)
from tests.conftest import BROWSER_GROUP, EXERCISES, ROOT

pytestmark = [pytest.mark.slow, BROWSER_GROUP]

SCREENSHOTS = ROOT / "_build" / "screenshots"
NOT_PAGES = {"_static", "_sources", "_images", "_downloads"}
SCREENSHOT_MAX_HEIGHT = 16000  # CSS pixels: chromium's limit for one capture is about 16k
SCREENSHOT_TOP_HEIGHT = 2400  # what is captured of each page unless ADDNORM_FULL_SCREENSHOTS=1
# Where a launch button would send a reader: no page may link there (the course has no public
# repository that Binder or Colab could open).
LAUNCHERS = ("mybinder.org", "colab.research.google.com", "github.com/addnorm-course")
REDIRECT = re.compile(r'<meta http-equiv="Refresh" content="0; url=([^"]+)"', re.IGNORECASE)
EMPTY_REPORT = {"hasMath": False, "untypeset": [], "text": "", "images": [], "links": [], "ids": []}
EMPTY_REPORT |= {"headerDownloads": [], "errors": [], "outside": []}
RAW_TEX = ("$$", "\\(", "\\)", "\\[", "\\]", "\\begin{")

# Runs in the page once it has loaded: waits for MathJax and the images, then reports what the
# tests check. Text inside code, scripts and typeset math is left out of `text`.
INSPECT = (
    "(async () => {"
    + READY
    + r"""
  const hasMath = document.querySelector('.math') !== null;
  const images = [...document.images];
  const views = document.querySelectorAll(
    'script[type="application/vnd.jupyter.widget-view+json"]').length;
  const shownFrames = () => [...document.querySelectorAll('.addnorm-explorer img.addnorm-frame')]
    .filter(img => img.offsetParent && img.complete);
  for (let i = 0; views && shownFrames().length < views && i < 150; i++) await wait(100);
  const widgets = {views, rendered: document.querySelectorAll('.addnorm-explorer').length,
    images: shownFrames().map(img => img.naturalWidth)};
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
  };
})()
"""
)


# Runs after INSPECT on a page with explorers: moves every control of every explorer through
# all its options (the others where they are) and records, after each move, the key the
# controls now show ("name=option|..."), the key of every figure shown, and the shown image.
EXPLORE = r"""
(async () => {
  const wait = ms => new Promise(done => setTimeout(done, ms));
  const report = [];
  for (const explorer of document.querySelectorAll('.addnorm-explorer')) {
    const controls = [...explorer.querySelectorAll('.widget-dropdown')].map(box => ({
      name: box.querySelector('.widget-label').textContent.replace(/\s+/g, ' ').trim(),
      select: box.querySelector('select')}));
    const text = element => element.textContent.replace(/\s+/g, ' ').trim();
    const expected = () => controls.map(c =>
      `${c.name}=${text(c.select.options[c.select.selectedIndex])}`).join('|');
    const shown = () => [...explorer.querySelectorAll('img.addnorm-frame')]
      .filter(img => img.offsetParent);
    const key = img => img.dataset.frame.replace(/\s+/g, ' ').trim();
    const steps = [];
    const set = async (control, index) => {
      if (control.select.selectedIndex === index) return;
      control.select.selectedIndex = index;
      control.select.dispatchEvent(new Event('change', {bubbles: true}));
    };
    // Every combination, in odometer order (the last control turns fastest): each stack of
    // each level is reached, not only those on the path of the start values.
    const sizes = controls.map(c => c.select.options.length);
    const starts = controls.map(c => c.select.selectedIndex);
    const total = sizes.reduce((a, b) => a * b, 1);
    for (let n = 0; n <= total; n++) {
      let rest = n, moved = [];
      const indices = n === total ? starts : sizes.map(() => 0);
      if (n < total) {
        for (let k = sizes.length - 1; k >= 0; k--) {
          indices[k] = rest % sizes[k];
          rest = Math.floor(rest / sizes[k]);
        }
      }
      for (let k = 0; k < controls.length; k++) {
        if (controls[k].select.selectedIndex !== indices[k]) moved.push(controls[k].name);
        await set(controls[k], indices[k]);
      }
      for (let i = 0; i < 30 && !(shown().length === 1
           && key(shown()[0]) === expected()); i++) await wait(100);
      steps.push({control: moved.join('+') || '-', index: indices.join(','),
        expected: expected(), shown: shown().map(key),
        image: shown().map(img => img.src.length + ':' + img.src.slice(-40))});
    }
    report.push({controls: controls.map(c => [c.name, c.select.options.length]), steps});
  }
  return report;
})()
"""


# Runs on a chapter page: clicks every visible button of the page's header and records whether
# the page changed (a dialog, a menu, the colour mode, a sidebar, fullscreen or print requested).
# Print and fullscreen are recorded, not carried out (a headless browser has neither).
BUTTONS = r"""
(async () => {
  const wait = ms => new Promise(done => setTimeout(done, ms));
  let printed = 0, fullscreen = 0;
  window.print = () => { printed += 1; };
  Element.prototype.requestFullscreen = function () {
    fullscreen += 1; return Promise.resolve(); };
  const state = () => JSON.stringify({
    mode: document.documentElement.dataset.mode,
    dialogs: [...document.querySelectorAll('dialog')].map(d => d.open),
    expanded: [...document.querySelectorAll('[aria-expanded]')]
      .map(e => e.getAttribute('aria-expanded')),
    menus: [...document.querySelectorAll('.dropdown-menu')].map(m => m.classList.contains('show')),
    sidebars: [...document.querySelectorAll('.bd-sidebar-primary, .bd-sidebar-secondary')]
      .map(e => e.offsetWidth),
    printed, fullscreen});
  const buttons = [...document.querySelectorAll('.bd-header-article button, .bd-header button')]
    .filter(button => button.offsetParent);
  const results = [];
  for (const button of buttons) {
    const before = state();
    button.click();
    await wait(300);
    results.push({name: (button.getAttribute('title') || button.getAttribute('aria-label')
      || button.textContent).trim(), changed: state() !== before});
    for (const dialog of document.querySelectorAll('dialog[open]')) dialog.close();
    document.body.click();  // closes an open menu
    await wait(100);
  }
  for (const item of document.querySelectorAll('.dropdown-menu .dropdown-item')) {
    const before = state();
    item.click();
    await wait(100);
    results.push({name: item.textContent.trim(), changed: state() !== before || !!item.href});
  }
  return results;
})()
"""
BUTTON_PAGES = ("book/layernorm.html", "exercises/layernorm.html")


def screenshot_name(page: str, width: int, part: int = 1) -> str:
    suffix = "" if part == 1 else f"-{part}"
    return page.removesuffix(".html").replace("/", "-") + f"-{width}{suffix}.png"


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
    return errors, outside


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
    shutil.rmtree(SCREENSHOTS, ignore_errors=True)  # no stale screenshot passes for a new one
    SCREENSHOTS.mkdir(parents=True)
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
    report = {"layout": {}, "buttons": {}, "errors": [], "outside": []}
    for width in (DESKTOP, PHONE):  # each width: look, screenshot, then drive the controls
        set_width(browser, width)
        browser.navigate(base + page)
        if width == DESKTOP:
            report |= browser.evaluate(INSPECT)
        report["layout"][width] = browser.evaluate(LAYOUT)
        screenshot(browser, page, width)
        if width == DESKTOP and report["widgets"]["views"]:
            report["explorers"] = browser.evaluate(EXPLORE)
        report["buttons"][width] = browser.evaluate(BUTTONS) if page in BUTTON_PAGES else []
        errors, outside = problems_in(browser.events)
        report["errors"] += [f"at {width} px: {error}" for error in errors]
        report["outside"] += outside
    return report


def screenshot(browser: Chromium, page: str, width: int) -> None:
    """Write the page's top SCREENSHOT_TOP_HEIGHT pixels as shown at `width` (the whole page
    with ADDNORM_FULL_SCREENSHOTS=1, in parts of at most SCREENSHOT_MAX_HEIGHT pixels:
    `page-1280.png`, `page-1280-2.png`, ...). The window is made as tall as a part
    (a capture beyond the window lays the page out anew, with sidebars cut), then restored."""
    height = browser.evaluate("Math.ceil(document.documentElement.scrollHeight)")
    if os.environ.get("ADDNORM_FULL_SCREENSHOTS") != "1":
        height = min(height, SCREENSHOT_TOP_HEIGHT)
    tall = min(height, SCREENSHOT_MAX_HEIGHT)
    browser.call(
        "Emulation.setDeviceMetricsOverride",
        width=width,
        height=tall,
        deviceScaleFactor=1,
        mobile=width <= PHONE,
    )
    try:
        for part, top in enumerate(range(0, height, SCREENSHOT_MAX_HEIGHT), start=1):
            browser.evaluate(
                f"new Promise(done => {{ window.scrollTo(0, {top}); "
                "requestAnimationFrame(() => requestAnimationFrame(done)); })"
            )
            shown = browser.evaluate("window.scrollY")
            clip = {"x": 0, "y": shown, "width": width, "height": min(tall, height - shown)}
            shot = browser.call("Page.captureScreenshot", clip={**clip, "scale": 1})
            name = screenshot_name(page, width, part)
            (SCREENSHOTS / name).write_bytes(base64.b64decode(shot["data"]))
            if shown + tall >= height:
                break
    finally:
        set_width(browser, width)
        browser.evaluate("window.scrollTo(0, 0)")


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
        assert site["pages"][page]["widgets"]["rendered"] > 0, f"{page} shows no explorer"

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


def test_every_control_of_every_explorer_shows_its_own_figure(site):
    """With no kernel, every combination of the controls' options (then back to the start)
    shows the figure precomputed for the settings the controls show, and that figure differs
    from the one before."""
    for page in WIDGET_PAGES:
        assert site["pages"][page]["explorers"], f"{page}: no explorer was driven"

    def check(report):
        for number, explorer in enumerate(report.get("explorers", []), start=1):
            moves = math.prod(count for _, count in explorer["controls"]) + 1  # and back
            if not explorer["controls"] or len(explorer["steps"]) != moves:
                yield f"explorer {number}: {len(explorer['steps'])} moves of {moves}"
            previous = None
            for step in explorer["steps"]:
                where = f"explorer {number}, options {step['index']} (moved: {step['control']})"
                if step["shown"] != [step["expected"]]:
                    yield f"{where}: controls show {step['expected']!r}, figures {step['shown']}"
                elif (
                    previous is not None
                    and step["image"] == previous["image"]
                    and (step["expected"] != previous["expected"])
                ):
                    yield f"{where}: the figure did not change"
                previous = step

    fail_on(site, check, "explorers whose controls do not switch figures")


def test_nothing_overflows_its_box_at_desktop_width(site):
    """At 1280 px no code block, printed output, table or display equation needs sideways
    scrolling or is cut off, and the page does not scroll sideways."""
    fail_on(
        site,
        lambda report: overflowing(report["layout"][DESKTOP]) if "layout" in report else [],
        f"overflowing at {DESKTOP} px",
    )


def test_no_page_scrolls_sideways_on_a_phone(site):
    """Neither the page nor any text in it (a long inline code span, say) is wider than a
    phone's window; folded cells are measured open."""

    def check(report):
        layout = report.get("layout", {}).get(PHONE)
        if layout and layout["pageWidth"] > layout["windowWidth"]:
            yield f"the page is {layout['pageWidth']} px wide in a {PHONE} px window"
        if layout:
            yield from (f"text past its box: {text}" for text in layout["text"])

    fail_on(site, check, f"pages wider than a {PHONE} px phone")


def figures_of(report: dict) -> list[dict]:
    """The figures a page shows at desktop width (none for a redirect)."""
    return report["layout"][DESKTOP]["figures"] if "layout" in report else []


def test_figures_are_shown_at_their_size_and_drawn_at_twice_it(site):
    def check(report):
        if "layout" in report:
            yield from (f"shrunk: {line}" for line in shrunk(report["layout"][DESKTOP]))
        for figure in figures_of(report):
            if figure["natural"] < 2 * figure["css"] - 2:
                yield f"{figure['src']}: {figure['natural']} pixels for {figure['css']} px (not 2x)"

    assert any(figures_of(report) for report in site["pages"].values()), "no figure found"
    fail_on(site, check, "figures shrunk or drawn at less than 2x")


def test_figures_keep_their_aspect_ratio_at_both_widths(site):
    """A figure shown narrower than drawn (on a phone) is scaled, not squashed."""

    def check(report):
        for width in (DESKTOP, PHONE):
            if "layout" in report:
                yield from (f"at {width} px: {line}" for line in squashed(report["layout"][width]))

    fail_on(site, check, "figures shown with another aspect ratio than drawn")


def test_every_figure_is_numbered_captioned_and_described(site):
    """A chapter's figures have a number and a caption; every figure (explorer frames too) has
    alt text that describes it (not empty, not a file name)."""

    def check(report):
        for figure in figures_of(report):
            alt = (figure["alt"] or "").strip()
            if len(alt.split()) < 4 or re.search(r"\.(png|svg|jpe?g)$|^(\.\./)?_images/", alt):
                yield f"{figure['src']}: alt text {alt!r} does not describe the figure"
            if not figure["frame"] and not (
                figure["number"] and figure["number"].startswith("Fig.") and figure["caption"]
            ):
                yield f"{figure['src']}: no numbered caption ({figure['number']!r})"

    fail_on(site, check, "figures without a number, caption or description")


def test_every_button_of_the_page_header_does_something(site):
    """No dead control: each header button (sidebars, search, download menu and its items, print,
    fullscreen, colour mode) changes the page or starts what it names, at both widths, and
    clicking them logs no error."""
    for page in BUTTON_PAGES:
        for width in (DESKTOP, PHONE):
            buttons = site["pages"][page]["buttons"][width]
            names = {button["name"] for button in buttons}
            assert {"Search", "Color mode", "Download this page"} <= names, (page, width, names)
            dead = [button["name"] for button in buttons if not button["changed"]]
            assert not dead, f"{page} at {width} px: buttons that do nothing: {dead}"
        assert any("sidebar" in name.lower() for name in names), (page, names)
        assert not site["pages"][page]["errors"], site["pages"][page]["errors"]


def test_each_page_shows_one_search_control_at_both_widths(site):
    def check(report):
        for width in (DESKTOP, PHONE):
            layout = report.get("layout", {}).get(width)
            if layout and layout["searches"] != 1:
                yield f"at {width} px: {layout['searches']} search controls"

    fail_on(site, check, "pages with other than one search control")


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


def test_screenshots_of_every_page_at_both_widths_are_written(site):
    for page, report in site["pages"].items():
        if "layout" not in report:  # a redirect, not a page
            continue
        for width in (DESKTOP, PHONE):
            shot = SCREENSHOTS / screenshot_name(page, width)
            assert shot.is_file(), f"no screenshot of {page} at {width} px"
            data = shot.read_bytes()
            assert data.startswith(b"\x89PNG"), f"{shot} is not a PNG"
            assert int.from_bytes(data[16:20], "big") == width, f"{shot} is not {width} px wide"

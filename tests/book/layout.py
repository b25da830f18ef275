"""What a reader sees of a page's layout at one window width, measured in chromium.

`measure(browser, url, width)` opens `url` in a window `width` CSS pixels wide (390 is a phone,
emulated as one: touch, viewport meta honoured) and returns what overflows: code blocks, printed
outputs, tables and display equations wider than their box (a reader must scroll sideways inside
them, or they are cut off), every figure with its sizes, alt text and caption (`shrunk` lists
those drawn larger than they are shown), and whether the page itself scrolls sideways. The
browser tests assert on it; `benchmarks/book_layout.py` prints it for every page.
"""

from tests.book.browser import Chromium

DESKTOP, PHONE = 1280, 390

# Statements that wait until a page has settled: MathJax has typeset, every image has loaded (or
# failed), and 200 ms more. Both scripts the browser tests run first (LAYOUT here, INSPECT in
# test_browser.py) start with them.
READY = r"""
  const wait = ms => new Promise(done => setTimeout(done, ms));
  if (document.querySelector('.math')) {
    for (let i = 0; !(window.MathJax && MathJax.startup && MathJax.startup.promise) && i < 100; i++)
      await wait(100);
    if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
  }
  await Promise.all([...document.images].map(img => img.complete ? null : new Promise(done => {
    img.loading = 'eager';
    img.addEventListener('load', done); img.addEventListener('error', done);
    setTimeout(done, 10000);
  })));
  await wait(200);
"""

# Lists what overflows, and every figure. An element overflows when its content is wider than its
# box (scrollWidth > clientWidth) or its box reaches past the article's right edge. A figure's CSS
# width is its width attribute or style (MyST-NB sets it from IPython's retina format: half the
# PNG's pixels), else its natural width; it is shrunk when shown narrower than that.
LAYOUT = (
    "(async () => {"
    + READY
    + r"""
  // Folded cells (hide-input, hide-output) are opened: a reader who opens one must not meet a
  // block wider than the column.
  for (const fold of document.querySelectorAll('article details')) fold.open = true;
  await wait(100);
  const article = document.querySelector('article.bd-article') || document.body;
  const right = article.getBoundingClientRect().right;
  const wide = el => el.scrollWidth > el.clientWidth + 1
    || el.getBoundingClientRect().right > right + 1;
  const text = el => el.textContent.replace(/\s+/g, ' ').trim().slice(0, 70);
  const listed = (selector, filter = () => true) => {
    const all = [...article.querySelectorAll(selector)].filter(e => e.offsetParent && filter(e));
    return {total: all.length, over: all.filter(wide).map(text)};
  };
  const isInput = e => e.closest('.cell_input, .highlight') && !e.closest('.cell_output');
  // Figures: chapter outputs and explorer frames, with what a reader gets of each.
  const figures = [...article.querySelectorAll('.cell_output img, figure img')]
    .filter(img => img.offsetParent).map(img => {
      const figure = img.closest('figure');
      const number = figure && figure.querySelector('figcaption .caption-number');
      const caption = figure && figure.querySelector('figcaption .caption-text');
      return {src: (img.getAttribute('src') || '').slice(0, 60), alt: img.getAttribute('alt'),
        frame: img.classList.contains('addnorm-frame'),
        number: number ? number.textContent.trim() : null,
        caption: caption ? caption.textContent.trim() : null,
        natural: img.naturalWidth, shown: img.clientWidth,
        naturalHeight: img.naturalHeight, shownHeight: img.clientHeight,
        css: Number(img.getAttribute('width')) || parseFloat(img.style.width)
          || img.naturalWidth};
    });
  return {
    code: listed('pre', isInput),
    outputs: listed('.cell_output pre, .output pre'),
    tables: listed('table'),
    equations: listed('mjx-container[display="true"]'),
    // Text that runs past its own box or the window (a long inline code span, a URL): the
    // reader must scroll the page sideways or loses the end of it.
    text: [...article.querySelectorAll(
      'p, li, dt, dd, figcaption, caption, h1, h2, h3, h4, summary, th, td')]
      .filter(e => e.offsetParent && !e.closest('pre, table')
        && (e.scrollWidth > e.clientWidth + 1 || e.getBoundingClientRect().right > innerWidth + 1))
      .map(text),
    figures,
    // Search controls a reader can see (fields and buttons): one is enough.
    searches: [...document.querySelectorAll('.search-button-field, .search-button')]
      .filter(e => e.offsetParent).length,
    pageWidth: document.documentElement.scrollWidth,
    windowWidth: window.innerWidth,
  };
})()
"""
)


def shrunk(report: dict) -> list[str]:
    """The figures of a LAYOUT report shown narrower than their CSS width."""
    return [
        f"{figure['src']}: {figure['css']} px shown at {figure['shown']}"
        for figure in report["figures"]
        if figure["shown"] + 1 < figure["css"]
    ]


def squashed(report: dict) -> list[str]:
    """The figures of a LAYOUT report shown with another aspect ratio than they were drawn."""
    lines = []
    for figure in report["figures"]:
        if not (figure["natural"] and figure["shown"] and figure["naturalHeight"]):
            continue
        drawn = figure["naturalHeight"] / figure["natural"]
        shown = figure["shownHeight"] / figure["shown"]
        # A squashed figure is off by tens of percent (a fixed height at a phone's width halves
        # the ratio); 5% leaves room for rounding and for a frame measured mid-layout.
        if abs(shown - drawn) > 0.05 * drawn:
            lines.append(
                f"{figure['src']}: drawn {figure['natural']}x{figure['naturalHeight']}, "
                f"shown {figure['shown']}x{figure['shownHeight']}"
            )
    return lines


def set_width(browser: Chromium, width: int) -> None:
    """Make the tab a window `width` CSS pixels wide (a phone at PHONE and below)."""
    phone = width <= PHONE
    browser.call(
        "Emulation.setDeviceMetricsOverride",
        width=width,
        height=844 if phone else 900,
        deviceScaleFactor=1,
        mobile=phone,
    )
    browser.call("Emulation.setTouchEmulationEnabled", enabled=phone)


def measure(browser: Chromium, url: str, width: int) -> dict:
    """The layout report (see LAYOUT) of the page at `url` in a window `width` pixels wide."""
    set_width(browser, width)
    browser.navigate(url)
    return browser.evaluate(LAYOUT)


def overflowing(report: dict) -> list[str]:
    """One line per element of `report` that a reader would have to scroll sideways, or that is
    cut off; and the page itself, if it is wider than the window."""
    lines = []
    for kind, name in (("code", "code"), ("outputs", "output"), ("tables", "table")):
        lines += [f"{name}: {text}" for text in report[kind]["over"]]
    lines += [f"equation: {text}" for text in report["equations"]["over"]]
    lines += [f"text: {text}" for text in report.get("text", [])]
    if report["pageWidth"] > report["windowWidth"]:
        lines.append(f"the page is {report['pageWidth']} px wide in {report['windowWidth']} px")
    return lines

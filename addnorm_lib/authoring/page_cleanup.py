"""A Sphinx extension for the book's pages: each script once, a theme mode from the start, and
sidebar buttons that work.

sphinx-thebe (which Jupyter Book 1 always loads, though the book does not use Thebe) registers
its inline configuration script, ``const THEBE_JS_URL = ...``, twice per page (once with no file
name, once with an empty one); the second copy throws a SyntaxError in every reader's console.
This drops each script that repeats an earlier one's file, priority and attributes.

pydata-sphinx-theme reads the reader's colour mode from localStorage or, on a first visit, from
``default_mode`` in ``html_context``, which Jupyter Book leaves empty: every first visit then
logs "Got invalid theme mode" as a console error. The extension sets ``default_mode`` to
``"auto"`` (follow the system), what the theme falls back to anyway, unless the book sets one.

pydata-sphinx-theme 0.17 gives its sidebar dialogs to the *first* ``.primary-toggle`` and
``.secondary-toggle`` of a page only, the ones in its own header, which sphinx-book-theme hides;
the book theme's buttons in the article header ("Toggle primary sidebar", the only way to the
table of contents on a phone) did nothing. :data:`FORWARD_SIDEBAR_TOGGLES` makes every other
toggle click the first. On a wide screen the book theme's primary toggle marks the sidebar
``pst-sidebar-hidden``, which pydata-sphinx-theme 0.17 no longer styles; ``static/addnorm.css``
hides it.

Sphinx numbers the figures of a book without numbered chapters in one sequence across all pages
("Fig. 37" in the eighth chapter). :func:`number_figures_per_page` makes each page's figures
(and tables, code listings) start again at 1, in the order Sphinx found them, so that a chapter's
first figure is Fig. 1; ``{numref}`` links read the same numbers.
"""

from pathlib import Path

STATIC = Path(__file__).parent / "static"

#: Every sidebar toggle after the first clicks the first (the one the theme wired to its dialog).
FORWARD_SIDEBAR_TOGGLES = """
document.addEventListener("DOMContentLoaded", () => {
  for (const kind of ["primary", "secondary"]) {
    const [wired, ...others] = document.querySelectorAll(`.${kind}-toggle`);
    for (const button of others) {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        wired.click();
      });
    }
  }
});
"""


def script_key(script) -> tuple:
    """What makes two scripts the same: file (None and "" alike), priority and attributes."""
    attributes = tuple(sorted(getattr(script, "attributes", {}).items()))
    return (getattr(script, "filename", script) or "", getattr(script, "priority", 0), attributes)


def unique_scripts(scripts: list) -> list:
    """``scripts`` in order, each repeat of an earlier one (:func:`script_key`) dropped."""
    seen, kept = set(), []
    for script in scripts:
        key = script_key(script)
        if key not in seen:
            seen.add(key)
            kept.append(script)
    return kept


def drop_duplicate_scripts(app, pagename, templatename, context, doctree) -> None:
    """Sphinx's html-page-context handler: the page's scripts, each once."""
    if context.get("script_files"):
        context["script_files"][:] = unique_scripts(context["script_files"])


def default_theme_mode(app, config) -> None:
    """Sphinx's config-inited handler: ``default_mode`` "auto" unless the book chose one."""
    context = dict(config.html_context or {})
    if not context.get("default_mode"):
        context["default_mode"] = "auto"
    config.html_context = context


def add_static_files(app) -> None:
    """Sphinx's builder-inited handler: serve ``static/`` (the course's CSS) with the book."""
    app.config.html_static_path = [*app.config.html_static_path, str(STATIC)]


def per_page(fignumbers: dict) -> dict:
    """``{docname: {figtype: {id: (n,)}}}`` renumbered from 1 within each page and type, in the
    order of the numbers given (Sphinx's order of appearance)."""
    return {
        docname: {
            figtype: {
                figure_id: (position,)
                for position, (figure_id, _) in enumerate(
                    sorted(numbers.items(), key=lambda item: item[1]), start=1
                )
            }
            for figtype, numbers in types.items()
        }
        for docname, types in fignumbers.items()
    }


def number_figures_per_page(app, env) -> list[str]:
    """Sphinx's env-get-updated handler, after the toctree collector numbered the figures of
    the whole book in one sequence: each page's numbers start at 1. Returns the pages whose
    numbers this changed (they are written again)."""
    renumbered = per_page(env.toc_fignumbers)
    changed = [doc for doc, types in renumbered.items() if types != env.toc_fignumbers[doc]]
    env.toc_fignumbers = renumbered
    return changed


def setup(app):
    """Register the handlers."""
    app.connect("config-inited", default_theme_mode)
    app.connect("builder-inited", add_static_files)
    app.add_js_file(None, body=FORWARD_SIDEBAR_TOGGLES)
    app.add_css_file("addnorm.css")
    app.connect("html-page-context", drop_duplicate_scripts)
    # after the toctree collector's handler (priority 500), which numbers the figures
    app.connect("env-get-updated", number_figures_per_page, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

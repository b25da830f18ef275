"""A Sphinx extension for the book's pages: each script once, and a theme mode from the start.

sphinx-thebe (which Jupyter Book 1 always loads, though the book does not use Thebe) registers
its inline configuration script, ``const THEBE_JS_URL = ...``, twice per page (once with no file
name, once with an empty one); the second copy throws a SyntaxError in every reader's console.
This drops each script that repeats an earlier one's file, priority and attributes.

pydata-sphinx-theme reads the reader's colour mode from localStorage or, on a first visit, from
``default_mode`` in ``html_context``, which Jupyter Book leaves empty: every first visit then
logs "Got invalid theme mode" as a console error. The extension sets ``default_mode`` to
``"auto"`` (follow the system), what the theme falls back to anyway, unless the book sets one.
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


def setup(app):
    """Register the handlers."""
    app.connect("config-inited", default_theme_mode)
    app.connect("html-page-context", drop_duplicate_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

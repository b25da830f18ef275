"""A Sphinx extension for the book's pages: each script once.

sphinx-thebe (which Jupyter Book 1 always loads, though the book does not use Thebe) registers
its inline configuration script, ``const THEBE_JS_URL = ...``, twice per page (once with no file
name, once with an empty one); the second copy throws a SyntaxError in every reader's console.
This drops each script that repeats an earlier one's file, priority and attributes.
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


def setup(app):
    """Register the handler."""
    app.connect("html-page-context", drop_duplicate_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

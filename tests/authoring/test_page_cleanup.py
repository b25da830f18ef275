"""The page-cleanup extension's pure parts: figure numbers per page."""

from addnorm_lib.authoring.page_cleanup import per_page


def test_figures_are_numbered_from_one_on_each_page_in_their_order():
    book_wide = {
        "book/depth": {"figure": {"a": (1,), "b": (2,)}},
        "book/residuals": {"figure": {"late": (5,), "early": (3,)}, "table": {"t": (1,)}},
        "book/empty": {},
    }
    assert per_page(book_wide) == {
        "book/depth": {"figure": {"a": (1,), "b": (2,)}},
        "book/residuals": {"figure": {"early": (1,), "late": (2,)}, "table": {"t": (1,)}},
        "book/empty": {},
    }


def test_numbers_already_per_page_are_left_as_they_are():
    per_page_numbers = {"book/x": {"figure": {"a": (1,), "b": (2,)}}}
    assert per_page(per_page_numbers) == per_page_numbers

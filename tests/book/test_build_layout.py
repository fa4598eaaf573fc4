"""Nothing in the built book is cut off: equations and code fit the text column.

Headless Chromium opens every built page at a desktop width (1400 px) and at
a phone width (390 px), waits for MathJax to typeset, unfolds every folded
cell, and measures ``scrollWidth > clientWidth`` of each display equation and
each code block. A wider element hides its right part behind a horizontal
scroll bar (with the equation number drawn over it).

At 1400 px every equation, code block, printed output and table must fit. On a
phone (390 px) every display equation must fit too: a long one is split over
lines (``aligned``/``gathered``), never left to scroll sideways, and its number
must not be drawn over it; so must every inline formula, which the browser cannot
break (a long one is written as pieces, ``$a$ ${} = b$``, that can). Code may scroll on
a phone (88 characters cannot fit 390 px). No equation may be a TeX error, which MathJax
would draw in red.

Chromium comes from Debian's ``chromium`` package, which ``make install``
installs; the test fails (it does not skip) when Chromium is missing. Set
``KERNELREF_BOOK_HTML`` to a built ``_build/html`` directory to measure that
build instead of building the book again.
"""

import pytest
from chromium import Chromium, find_chromium

pytestmark = pytest.mark.slow

DESKTOP = 1400
PHONE = 390
# Sub-pixel rounding of text widths is not an overflow.
SLACK_PX = 1

# Waits for MathJax and the fonts, unfolds every <details>, and returns one
# record per display equation and code block of the page's main text.
MEASURE = r"""
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  await document.fonts.ready;
  document.querySelectorAll('details').forEach((d) => { d.open = true; });
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const main = document.querySelector('main') || document.body;
  const section = (el) => {
    let node = el;
    while (node && node !== main) {
      if (node.tagName === 'SECTION' && node.id) return node.id;
      node = node.parentElement;
    }
    return '';
  };
  const overlap = (a, b) => {
    const r = a.getBoundingClientRect();
    const q = b.getBoundingClientRect();
    return r.left < q.right && q.left < r.right && r.top < q.bottom && q.top < r.bottom;
  };
  const records = [];
  main.querySelectorAll('div.math').forEach((math, i) => {
    // MathJax's container scrolls; the equation number sits beside it
    const el = math.querySelector('mjx-container') || math;
    const eqno = math.querySelector('.eqno');
    records.push({
      kind: 'equation',
      name: eqno ? eqno.textContent.replace('#', '').trim() : `unnumbered #${i + 1}`,
      id: math.id,
      error: math.querySelector('mjx-merror') !== null,
      section: section(math),
      scroll: el.scrollWidth,
      client: el.clientWidth,
      scrolls: ['auto', 'scroll'].includes(getComputedStyle(el).overflowX),
      covered: eqno !== null && el !== math && overlap(eqno, el),
    });
  });
  // inline formulas cannot be split by the browser: each must fit its paragraph
  const doc = window.MathJax && MathJax.startup && MathJax.startup.document;
  main.querySelectorAll('mjx-container:not([display="true"])').forEach((m, i) => {
    if (m.closest('table')) return;
    const block = m.parentElement.closest('p, li, dd, dt, div, caption, figcaption');
    const items = doc ? doc.getMathItemsWithin(m) : [];
    records.push({
      kind: 'inline math',
      name: items.length
        ? items[0].math.replace(/\s+/g, ' ').slice(0, 70) : `#${i + 1}`,
      section: section(m),
      scroll: Math.ceil(m.getBoundingClientRect().width),
      client: block ? block.clientWidth : 0,
    });
  });
  main.querySelectorAll('div.highlight pre').forEach((el) => {
    const kind = el.closest('.cell_output') ? 'output'
      : el.closest('.cell_input') ? 'code cell' : 'code block';
    const lines = el.textContent.split('\n');
    const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), '');
    records.push({
      kind,
      name: longest.trim().slice(0, 70),
      section: section(el),
      scroll: el.scrollWidth,
      client: el.clientWidth,
      chars: longest.length,
    });
  });
  main.querySelectorAll('table').forEach((table, i) => {
    // the theme wraps a table in a box that scrolls sideways
    const box = table.closest('.pst-scrollable-table-container') || table.parentElement;
    const caption = table.querySelector('caption');
    records.push({
      kind: 'table',
      name: caption ? caption.textContent.trim().slice(0, 70) : `table #${i + 1}`,
      section: section(table),
      scroll: box.scrollWidth,
      client: box.clientWidth,
    });
  });
  return records;
})()
"""


def overflows(records, kinds):
    return [
        r
        for r in records
        if r["kind"] in kinds
        and r["client"] > 0
        and r["scroll"] > r["client"] + SLACK_PX
    ]


def describe(page, record):
    where = f"{page}#{record['section']}" if record["section"] else page
    extra = f", {record['chars']} characters" if "chars" in record else ""
    return (
        f"{where}: {record['kind']} {record['name']!r} is "
        f"{record['scroll'] - record['client']} px wider than its "
        f"{record['client']} px column{extra}"
    )


@pytest.fixture(scope="session")
def measured(book_html):
    """{width: {page: records}} for every chapter page at both widths."""
    executable = find_chromium()
    if executable is None:
        pytest.fail(
            "Chromium is needed to measure the built pages: run `make install` "
            "(as root it installs Debian's package) or `apt-get install chromium`."
        )
    pages = sorted((book_html / "book").glob("*.html"))
    assert pages, f"no chapter pages in {book_html / 'book'}"
    browser = Chromium(executable)
    try:
        # one load per page: MathJax's output does not depend on the width, so the
        # page is measured at one width, narrowed and measured again
        results = {DESKTOP: {}, PHONE: {}}
        for page in pages:
            browser.set_width(DESKTOP)
            browser.open(page.as_uri())
            for width in (DESKTOP, PHONE):
                browser.set_width(width)
                results[width][page.name] = browser.evaluate(MEASURE)
    finally:
        browser.close()
    return results


def test_the_measurement_sees_equations_and_code(measured):
    records = [r for page in measured[DESKTOP].values() for r in page]
    kinds = {r["kind"] for r in records}
    assert {"equation", "inline math", "code cell", "code block"} <= kinds, kinds
    numbered = [r for r in records if r["kind"] == "equation" and r["name"][0] == "("]
    assert len(numbered) > 100, "fewer numbered equations than the book has"
    assert all(r["client"] > 0 for r in records if r["kind"] == "equation")


def test_a_wide_element_is_reported(tmp_path):
    """The measurement itself: a page with one over-wide equation and code line."""
    executable = find_chromium()
    if executable is None:
        pytest.fail("Chromium is missing: run `make install`.")
    page = tmp_path / "wide.html"
    page.write_text(
        "<main><section id='s'><div class='math' style='overflow-x:auto;width:300px'>"
        "<span style='display:inline-block;width:500px'>x</span></div>"
        "<div class='highlight'><pre style='overflow-x:auto;width:300px'>"
        + "a"
        * 200
        + "</pre></div><div class='math'><mjx-merror>\\frac{</mjx-merror></div>"
        "<p style='width:300px'>a <mjx-container style='display:inline-block;"
        "width:400px'>x</mjx-container></p></section></main>"
    )
    browser = Chromium(executable)
    try:
        browser.set_width(DESKTOP)
        browser.open(page.as_uri())
        records = browser.evaluate(MEASURE)
    finally:
        browser.close()
    wide = overflows(records, {"equation", "code block"})
    assert [r["kind"] for r in wide] == ["equation", "code block"]
    assert wide[0]["scroll"] - wide[0]["client"] == 200
    assert "wide.html#s: equation" in describe("wide.html", wide[0])
    # on a phone an equation that scrolls inside its own box is still too wide
    assert unreadable_on_a_phone(records) == [wide[0]]
    assert wide[0]["scrolls"]
    errors = [r["error"] for r in records if r["kind"] == "equation"]
    assert errors == [False, True]
    inline = overflows(records, {"inline math"})
    assert [(r["scroll"], r["client"]) for r in inline] == [(400, 300)]
    covered = dict(records[0], scroll=0, covered=True)
    assert unreadable_on_a_phone([covered]) == [covered]


def test_equations_and_code_fit_the_column_at_1400_px(measured):
    problems = [
        describe(page, r)
        for page, records in measured[DESKTOP].items()
        for r in overflows(
            records,
            {"equation", "inline math", "code cell", "code block", "output", "table"},
        )
    ]
    assert not problems, f"{len(problems)} elements overflow:\n" + "\n".join(problems)


def unreadable_on_a_phone(records):
    """Equations wider than the phone's column (they would scroll sideways or be
    clipped) or with their number drawn over them."""
    return [
        r
        for r in records
        if r["kind"] == "equation" and (r["covered"] or overflows([r], {"equation"}))
    ]


def test_equations_fit_a_phone_and_keep_their_number_clear(measured):
    """At 390 px every display equation fits its column: a long one is split
    over lines, not scrolled, and its number is not drawn over it."""
    problems = [
        describe(page, r) + (", with its number over it" if r["covered"] else "")
        for page, records in measured[PHONE].items()
        for r in unreadable_on_a_phone(records)
    ]
    assert not problems, f"{len(problems)} equations:\n" + "\n".join(problems)


def test_inline_formulas_fit_a_phone(measured):
    """An inline formula wider than its paragraph at 390 px would run off the page."""
    problems = [
        describe(page, r)
        for page, records in measured[PHONE].items()
        for r in overflows(records, {"inline math"})
    ]
    assert not problems, f"{len(problems)} inline formulas:\n" + "\n".join(problems)


def test_no_equation_is_a_tex_error(measured):
    problems = [
        f"{page}: equation {r['name']!r} ({r['id']}) does not typeset"
        for page, records in measured[DESKTOP].items()
        for r in records
        if r["kind"] == "equation" and r["error"]
    ]
    assert not problems, "\n".join(problems)

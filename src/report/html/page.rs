//! The page around the sections: the inline style and script, the document skeleton.
//!
//! Self-contained by construction: the style and the script are inline, fonts are the system's,
//! plots are inline SVG, and the only links are to anchors in the page.

use maud::{DOCTYPE, Markup, PreEscaped, html};

/// A table head: one `<th>` per label.
pub(crate) fn thead(labels: &[&str]) -> Markup {
    html! { thead { tr { @for label in labels { th { (label) } } } } }
}

const STYLE: &str = r#"
:root { --fg:#1d2329; --muted:#5b6570; --line:#d8dde3; --head:#f3f5f7;
  --err:#b3261e; --err-bg:#fdecea; --warn:#8a5a00; --warn-bg:#fff4d6; --info:#1f5f99; --info-bg:#e8f1fb; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1200px; padding: 1.5rem; color: var(--fg);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
h1 { font-size: 1.5rem; margin: 0 0 .25rem; }
h2 { font-size: 1.2rem; margin: 2rem 0 .5rem; border-bottom: 1px solid var(--line); padding-bottom: .25rem; }
h3 { font-size: 1rem; margin: 1.25rem 0 .5rem; }
h4 { font-size: .9rem; margin: .75rem 0 .25rem; }
p.sub, .muted { color: var(--muted); }
nav a { margin-right: 1rem; }
code, pre, td.num { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
table { border-collapse: collapse; margin: .5rem 0 1rem; }
th, td { border: 1px solid var(--line); padding: .25rem .5rem; vertical-align: top; }
thead th { background: var(--head); text-align: left; position: sticky; top: 0; }
table.sortable thead th { cursor: pointer; user-select: none; }
th[aria-sort=ascending]::after { content: " \25B2"; }
th[aria-sort=descending]::after { content: " \25BC"; }
td.num { text-align: right; white-space: nowrap; }
tbody.cell.error > tr.cell-row > td:first-child { box-shadow: inset 4px 0 var(--err); }
tbody.cell.warning > tr.cell-row > td:first-child { box-shadow: inset 4px 0 #e0a000; }
tr.finding td { border-top: none; }
tr.finding.error td { background: var(--err-bg); }
tr.finding.warning td { background: var(--warn-bg); }
tr.finding.info td { background: var(--info-bg); }
.sev { display: inline-block; min-width: 4.5em; font-weight: 600; font-size: 11px; }
.error .sev, .count.error { color: var(--err); }
.warning .sev, .count.warning { color: var(--warn); }
.info .sev, .count.info { color: var(--info); }
.count { font-weight: 600; }
ul.findings { list-style: none; padding: 0; }
ul.findings li { padding: .25rem .5rem; margin: .25rem 0; border-radius: 3px; }
li.error { background: var(--err-bg); } li.warning { background: var(--warn-bg); } li.info { background: var(--info-bg); }
.plots { display: flex; flex-wrap: wrap; gap: 1rem; }
figure { margin: 0; border: 1px solid var(--line); padding: .5rem; max-width: 100%; }
figure svg { display: block; max-width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: 12px; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; margin: .5rem 0; }
dl.meta dt { color: var(--muted); }
dl.meta dd { margin: 0; word-break: break-word; }
details pre { max-height: 30rem; overflow: auto; background: var(--head); padding: .5rem; }
footer { margin-top: 2rem; color: var(--muted); font-size: 12px; white-space: pre-line; }
"#;

/// Sorting by a column helps a reader of a 200-cell matrix find its slowest cells; each cell is a
/// `<tbody>` (its row and its findings), so findings move with their cell. Without script the
/// table reads the same, in the report's order.
const SCRIPT: &str = r#"
document.querySelectorAll("table.sortable").forEach(function (t) {
  var heads = t.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads, function (th, i) {
    th.addEventListener("click", function () {
      var asc = th.getAttribute("aria-sort") !== "ascending";
      Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      var key = function (body) {
        var c = body.rows[0].cells[i], v = c.getAttribute("data-sort");
        if (v === null) return c.textContent;
        var n = parseFloat(v);
        return isNaN(n) ? Infinity : n;
      };
      Array.prototype.slice.call(t.tBodies).sort(function (a, b) {
        var x = key(a), y = key(b);
        var r = typeof x === "number" && typeof y === "number" ? (x === y ? 0 : x < y ? -1 : 1)
          : String(x).localeCompare(String(y));
        return asc ? r : -r;
      }).forEach(function (b) { t.appendChild(b); });
    });
  });
});
"#;

/// The whole document: `title` (text, escaped by the template), `body` (markup built by the template).
pub(crate) fn document(title: &str, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                // PreEscaped: the page's own fixed style, a constant of this file; escaping would
                // turn its quotes and `>` selectors into entities the browser does not read as CSS.
                style { (PreEscaped(STYLE)) }
            }
            body {
                (body)
                // PreEscaped: the page's own fixed script, a constant of this file (escaping would
                // break its string literals and comparisons).
                script { (PreEscaped(SCRIPT)) }
            }
        }
    }
    .into_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_title_and_table_heads_are_text() {
        let page = document("<b>&\"", html! { (thead(&["<i>"])) });
        assert!(page.contains("<title>&lt;b&gt;&amp;&quot;</title>"), "{page}");
        assert!(page.contains("<th>&lt;i&gt;</th>"), "{page}");
        assert!(!page.contains("<b>") && !page.contains("<i>"), "{page}");
    }

    #[test]
    fn the_style_and_script_reach_nothing_outside_the_page() {
        for text in [STYLE, SCRIPT] {
            for banned in ["http:", "https:", "@import", "url(", "//cdn", "fetch(", "XMLHttpRequest"] {
                assert!(!text.contains(banned), "{banned} in {text}");
            }
        }
    }
}

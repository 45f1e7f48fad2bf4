"""What a notebook shows of a recording (tests/notebook_html.rs): record the MLP example with
memtrack.record from the source tree, and write the page a notebook cell would be, the
Recording's _repr_html_() in a body, with a script that reports where the picture and its legend
landed (every text of the picture, the legend's among them).

    python tests/py/notebook_html.py OUT_DIR EXAMPLES_DIR
"""

import os
import sys

out_dir, examples = sys.argv[1], sys.argv[2]
sys.path.insert(0, examples)

import memtrack  # noqa: E402
import mlp_batchnorm  # noqa: E402

model, opt, loss_fn, x, y = mlp_batchnorm.build(width=64, blocks=2, batch=16)
with memtrack.record(os.path.join(out_dir, "cell.pkl")) as rec:
    for _ in range(2):
        mlp_batchnorm.step(model, opt, loss_fn, x, y)
assert rec.ok, rec.message

# the report: the viewport, the picture, each label's box, what comes first, the details
probe = """
<script>
addEventListener("load", () => {
  const svg = document.querySelector("svg"), box = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const out = {
    viewport: [document.documentElement.clientWidth, innerHeight],
    scroll_width: document.documentElement.scrollWidth,
    svg: box(svg),
    // every label the picture draws (plotters gives the legend's no class: the test finds it
    // by its words)
    texts: [...svg.querySelectorAll("text")].map((t) => ({ text: t.textContent.trim(), box: box(t) })),
    order: [...document.body.children].map((e) => e.tagName.toLowerCase()),
    details_open: document.querySelector("details") ? document.querySelector("details").open : null,
    summary_has_peak: document.querySelector("details pre") ? /peak/i.test(document.querySelector("details pre").textContent) : false,
  };
  const pre = document.createElement("pre"); pre.id = "report"; pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>
"""
page = "<!DOCTYPE html><html><head><meta charset='utf-8'></head><body style='margin:0'>"
page += rec._repr_html_() + probe + "</body></html>"
with open(os.path.join(out_dir, "cell.html"), "w") as f:
    f.write(page)
print(os.path.join(out_dir, "cell.html"))

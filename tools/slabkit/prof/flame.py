"""flame.py — folded stacks ("outer;inner;leaf value", Brendan Gregg's
format, which flamegraph.pl, speedscope and inferno read) and a flame graph
drawn as SVG here, with no other tool: one box per frame, as wide as its
share of the total, callers below callees; a box's tooltip gives its figure.
The cache or size class that served a site is its top box, in blue."""
import html
import zlib

ROW = 17
WIDTH = 1200
FONT = 11
CHAR_W = 6.6
MIN_W = 1.0            # pixels: narrower boxes (and what is above them) are left out


def folded_lines(stacks):
    """stacks: [(frames outermost first, value)] -> the folded text lines."""
    merged = {}
    for frames, v in stacks:
        if v > 0:
            key = ";".join(f.replace(";", ":") for f in frames)
            merged[key] = merged.get(key, 0) + v
    return [f"{k} {int(round(v))}" for k, v in sorted(merged.items())]


class _Node:
    __slots__ = ("name", "value", "kids")

    def __init__(self, name):
        self.name, self.value, self.kids = name, 0.0, {}


def _tree(stacks):
    root = _Node("all")
    for frames, v in stacks:
        if v <= 0:
            continue
        root.value += v
        n = root
        for f in frames:
            n = n.kids.setdefault(f, _Node(f))
            n.value += v
    return root


def _colour(name, leaf_label):
    if leaf_label:
        return "rgb(120,160,230)"
    h = zlib.crc32(name.encode())
    return f"rgb({205 + h % 50},{(h >> 8) % 150 + 60},{(h >> 16) % 50 + 20})"


def svg(stacks, title, unit="bytes", fmt=None):
    """The flame graph of stacks ([(frames outermost first, value)]) as SVG text."""
    fmt = fmt or (lambda v: f"{v:,.0f} {unit}")
    root = _tree(stacks)
    total = root.value or 1
    depth = 0

    def measure(n, d):                 # the depth of the boxes wide enough to draw
        nonlocal depth
        depth = max(depth, d)
        for k in n.kids.values():
            if k.value / total * (WIDTH - 20) >= MIN_W:
                measure(k, d + 1)

    measure(root, 0)
    height = (depth + 1) * ROW + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="monospace" font-size="{FONT}">',
           f'<rect width="100%" height="100%" fill="#fdfdf6"/>',
           f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="15">{html.escape(title)}</text>']

    def draw(n, x, d, leaf_label):
        w = n.value / total * (WIDTH - 20)
        if w < MIN_W:
            return
        y = height - (d + 1) * ROW - 4
        share = 100 * n.value / total
        tip = html.escape(f"{n.name}: {fmt(n.value)} ({share:.1f}%)")
        out.append(f'<g><title>{tip}</title><rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{ROW - 1}" '
                   f'fill="{_colour(n.name, leaf_label)}" rx="2"/>')
        chars = int((w - 4) / CHAR_W)
        if chars >= 3:
            label = n.name if len(n.name) <= chars else n.name[:chars - 2] + ".."
            out.append(f'<text x="{x + 3:.1f}" y="{y + ROW - 5}">{html.escape(label)}</text>')
        out.append("</g>")
        cx = x
        for k in sorted(n.kids.values(), key=lambda k: k.name):
            draw(k, cx, d + 1, k.name.startswith("[") and not k.kids)
            cx += k.value / total * (WIDTH - 20)

    draw(root, 10, 0, False)
    out.append("</svg>")
    return "\n".join(out)

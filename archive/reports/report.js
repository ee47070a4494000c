/* kernelevo run report: draws every section from the JSON embedded in the page.
   Plain DOM and SVG, no libraries: the file must work offline, from file://, in any browser.
   Each section is drawn inside its own try/catch so that one broken section cannot blank the others;
   body[data-rendered] and body[data-errors] let a headless browser check the outcome.
   The script sits in <head> so that its listeners see every error and refused request of the page,
   and draws once the document is parsed. */
(function () {
  "use strict";
  const errors = [];
  function noteError(message) {
    errors.push(message);
    if (document.body) document.body.dataset.errors = errors.join(" | ");
  }
  window.addEventListener("error", (e) => noteError(String(e.message || "script error")));
  // the page's CSP forbids every request: a violation means something tried to leave the file
  document.addEventListener("securitypolicyviolation", (e) => noteError("blocked request: " + e.blockedURI));

  /* ---------- small helpers ---------- */
  const SVGNS = "http://www.w3.org/2000/svg";
  const DASH = "\u2013";
  const el = (tag, attrs, ...kids) => fill(document.createElement(tag), attrs, kids);
  const sv = (tag, attrs, ...kids) => fill(document.createElementNS(SVGNS, tag), attrs, kids);
  function fill(node, attrs, kids) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v);
    }
    for (const kid of kids.flat(2)) {
      if (kid !== null && kid !== undefined && kid !== false) node.append(kid instanceof Node ? kid : String(kid));
    }
    return node;
  }
  const isNum = (x) => typeof x === "number" && isFinite(x);
  const fx = (x) => (isNum(x) ? (x >= 10 ? x.toFixed(1) : x.toFixed(2)) + "\u00d7" : DASH);
  // a speedup with its 95 % interval [low, high] where that is wider than 2 % of it, as the terminal prints it
  const wide = (x, ci) => isNum(x) && x > 0 && Array.isArray(ci) && isNum(ci[0]) && isNum(ci[1]) && (ci[1] - ci[0]) / x > 0.02;
  const fxci = (x, ci) => fx(x) + (wide(x, ci) ? ` (${ci[0].toFixed(2)}-${ci[1].toFixed(2)})` : "");
  const fusd = (x) => (isNum(x) ? "$" + (x === 0 ? "0" : x >= 0.1 ? x.toFixed(2) : String(+x.toPrecision(3))) : DASH);
  const fint = (x) => (isNum(x) ? Math.round(x).toLocaleString("en-US") : DASH);
  const fpct = (x) => (isNum(x) ? (100 * x).toFixed(0) + "%" : DASH);
  const fnum = (x) => (isNum(x) ? String(+x.toPrecision(3)) : DASH);
  const fms = (x) => (isNum(x) ? (x < 1 ? x.toPrecision(3) : x.toFixed(2)) + " ms" : DASH);
  const txt = (x) => (x === null || x === undefined || x === "" ? DASH : String(x));
  const empty = (message) => el("p", { class: "empty" }, message);
  const kernelLink = (id, tops) => (tops.has(id) ? el("a", { href: "#kernel-" + id }, "kernel " + id) : "kernel " + id);
  const lerp = (a, b, t) => a + (b - a) * t;
  const r1 = (v) => Math.round(v * 10) / 10;  // SVG coordinates: a tenth of a pixel is plenty
  const round = (v) => String(+v.toPrecision(6));  // a tick label: 0.5, not 0.50000000001

  // a scale maps a domain [d0, d1] onto pixels [r0, r1]; log scales for speedups spanning decades
  function scale(d0, d1, r0, r1, log) {
    const f = log ? Math.log : (v) => v;
    const a = f(d0), b = f(d1);
    return (v) => lerp(r0, r1, b === a ? 0.5 : (f(v) - a) / (b - a));
  }
  function niceStep(span, count) {
    const raw = span / count, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    return p * (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10);
  }
  function linearTicks(lo, hi, count, integer) {
    let step = niceStep(hi - lo || 1, count);
    if (integer) step = Math.max(1, Math.round(step));
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
    return out;
  }
  function logTicks(lo, hi) {
    const out = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
      for (const m of [1, 2, 5]) { const v = m * Math.pow(10, e); if (v >= lo * 0.999 && v <= hi * 1.001) out.push(v); }
    }
    return out;
  }

  // the host-inclusive twin of the device-time figures: calls back to back, as a user's loop makes them
  function loopText(l) {
    if (!l) return DASH;
    const compiled = isNum(l.compiled_ms) ? `, torch.compile ${fms(l.compiled_ms)}` : "";
    const against = isNum(l.speedup_compile) ? `, ${fxci(l.speedup_compile, l.speedup_compile_ci)} vs torch.compile` : "";
    return `${fms(l.candidate_ms)} per call back to back, host work included (eager ${fms(l.eager_ms)}${compiled}): ` +
      `${fxci(l.speedup_eager, l.speedup_eager_ci)} vs eager${against}`;
  }

  /* ---------- summary ---------- */
  function summary(box, d) {
    const r = d.run || {}, tops = new Set((d.top || []).map((k) => k.id));
    const unknown = r.unknown_cost_calls > 0 ? ` (+ ${r.unknown_cost_calls} calls of unknown price)` : "";
    const card = (label, value, note) => el("div", { class: "card" },
      el("div", { class: "label" }, label), el("div", { class: "value" }, value), el("div", { class: "note" }, note));
    box.append(el("div", { class: "cards" },
      card("Best vs eager", fxci(r.best_speedup, r.best_speedup_ci), r.best_kernel == null ? "no candidate passed yet" : kernelLink(r.best_kernel, tops)),
      card("Best vs torch.compile", fxci(r.best_speedup_compile, r.best_speedup_compile_ci), figuresNote(r.best_figures, r.best_search_speedup, r.best_search_speedup_ci)),
      card("LLM spend", fusd(r.cost_usd), `${fint(r.calls)} calls` + unknown),
      card("Kernels", fint((d.lineage || []).length), `${(d.progress || []).length} judged`)));
    const status = txt(r.status) + (r.stop_reason ? ` (${r.stop_reason})` : "");
    const facts = [
      ["Task", r.task + (r.task_hash ? `  [${String(r.task_hash).slice(0, 12)}]` : "")], ["Run", r.id],
      ["Status", status], ["GPU", r.gpu], ["torch", r.torch], ["Model", r.model], ["Format", r.format],
      ["Policy", r.policy], ["Ranked against", r.baseline], ["Started", r.started], ["Finished", r.finished],
      ["LLM calls", `${fint(r.calls)} (${fint(r.failed_calls)} failed)`], ["Spend", fusd(r.cost_usd) + unknown],
      ["Best speedup", `${fxci(r.best_speedup, r.best_speedup_ci)} vs eager, ${fxci(r.best_speedup_compile, r.best_speedup_compile_ci)} vs torch.compile` +
        (r.best_figures === "final" ? ` (final re-judgement; in the search ${fxci(r.best_search_speedup, r.best_search_speedup_ci)}, ${fx(r.best_search_speedup_compile)})`
          : r.best_figures === "search" ? " (search, not re-judged)" : "")],
      ["In a loop", loopText(r.best_loop)],
      ["Best kernel", r.best_kernel == null ? DASH : kernelLink(r.best_kernel, tops)],
    ];
    if (r.model_for) facts.splice(6, 0, ["Pinned", r.model_for]);
    if ((r.dropped || []).length) facts.splice(6, 0, ["Dropped out", r.dropped.join("; ")]);
    box.append(el("dl", { class: "facts" }, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v instanceof Node ? v : txt(v))])));
    return true;
  }

  /* ---------- progress ---------- */
  function progress(box, d) {
    const pts = d.progress || [];
    if (!pts.length) { box.append(empty("No candidate judged yet: there is no progress to chart.")); return false; }
    const speeds = pts.filter((p) => isNum(p.speedup)).map((p) => p.speedup).concat([1]);
    const lo = Math.min(...speeds), hi = Math.max(...speeds), log = hi / lo > 30;
    // linear from 0 unless the speedups span decades; the top is a round number above the best
    const step = niceStep(hi * 1.05, 5);
    const y = log ? { lo: lo / 1.3, hi: hi * 1.3, log } : { lo: 0, hi: Math.ceil((hi * 1.05) / step) * step, log };
    const spend = Math.max(...pts.map((p) => p.spent_usd || 0));
    box.append(el("div", { class: "charts" },
      lineChart(pts, (p) => p.n, { lo: 0, hi: pts.length, integer: true, fmt: round }, y, "candidates judged"),
      lineChart(pts, (p) => p.spent_usd || 0, { lo: 0, hi: spend || 1, fmt: (v) => "$" + round(v) }, y,
        spend ? "LLM spend (USD)" : "LLM spend (USD): none recorded")));
    box.append(el("div", { class: "legend" }, legendItem(swatchLine("best"), "best so far"),
      legendItem(swatchDot("ok"), "passed candidate"), legendItem(swatchDot("new"), "new best"),
      legendItem(swatchCross(), "failed candidate (any verdict but ok)"), legendItem(swatchLine("eager"), "eager (1.0\u00d7)")));
    return true;
  }

  function lineChart(pts, xOf, xs, ys, xLabel) {
    const W = 620, H = 300, L = 58, R = 18, T = 14, PH = 200;
    const x = scale(xs.lo, xs.hi, L, W - R), y = scale(ys.lo, ys.hi, T + PH, T, ys.log);
    const svg = sv("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img" });
    const yt = ys.log ? logTicks(ys.lo, ys.hi) : linearTicks(ys.lo, ys.hi, 5);
    for (const v of yt) {
      svg.append(sv("line", { class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v) }),
        sv("text", { class: "tick", x: L - 6, y: y(v) + 4, "text-anchor": "end" }, round(v) + "\u00d7"));
    }
    for (const v of linearTicks(xs.lo, xs.hi, 6, xs.integer)) {
      svg.append(sv("line", { class: "axis", x1: x(v), x2: x(v), y1: T + PH, y2: T + PH + 4 }),
        sv("text", { class: "tick", x: x(v), y: T + PH + 40, "text-anchor": "middle" }, xs.fmt(v)));
    }
    svg.append(sv("line", { class: "axis", x1: L, x2: W - R, y1: T + PH, y2: T + PH }),
      sv("line", { class: "axis", x1: L, x2: L, y1: T, y2: T + PH }),
      sv("line", { class: "eager", x1: L, x2: W - R, y1: y(1), y2: y(1) }),
      sv("text", { class: "tick", x: L - 6, y: T + PH + 22, "text-anchor": "end" }, "failed"),
      sv("text", { class: "axis-label", x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle" }, xLabel),
      sv("text", { class: "axis-label", transform: `translate(14 ${T + PH / 2}) rotate(-90)`, "text-anchor": "middle" }, "speedup vs eager"));
    svg.append(bestLine(pts, (p) => x(xOf(p)), y, W - R));
    for (const p of pts) {
      const cx = x(xOf(p)), tip = sv("title", {}, `#${p.n}: kernel ${p.kernel}, ${p.verdict}` + (isNum(p.speedup) ? `, ${fxci(p.speedup, p.speedup_ci)}` : "") + `, ${fusd(p.spent_usd)} spent`);
      if (isNum(p.speedup)) svg.append(sv("circle", { class: p.improved ? "dot new" : "dot", cx, cy: y(p.speedup), r: p.improved ? 5 : 3.5 }, tip));
      else svg.append(sv("path", { class: "fail", d: `M${cx - 3.5},${T + PH + 14.5}l7,7m0,-7l-7,7` }, tip));
    }
    return el("figure", {}, svg);
  }

  function bestLine(pts, xAt, y, right) {
    // best so far only rises, and holds until the next improvement: a step line
    let path = "", last = null;
    for (const p of pts) {
      if (!isNum(p.best) || p.best === last) continue;
      const px = r1(xAt(p)), py = r1(y(p.best));
      path += last === null ? `M${px},${py}` : `H${px}V${py}`;
      last = p.best;
    }
    if (last !== null) path += `H${r1(xAt(pts[pts.length - 1]))}`;
    return sv("path", { class: "best-line", d: path || "M0,0" });
  }

  const legendItem = (swatch, label) => el("span", { class: "item" }, swatch, label);
  const tiny = (...kids) => sv("svg", { width: 22, height: 14, viewBox: "0 0 22 14", class: "swatch" }, kids);
  const swatchLine = (cls) => tiny(sv("line", { class: cls === "best" ? "best-line" : "eager", x1: 1, x2: 21, y1: 7, y2: 7 }));
  const swatchDot = (cls) => tiny(sv("circle", { class: cls === "new" ? "dot new" : "dot", cx: 11, cy: 7, r: cls === "new" ? 5 : 3.5 }));
  const swatchCross = () => tiny(sv("path", { class: "fail", d: "M7.5,3.5l7,7m0,-7l-7,7" }));

  /* ---------- lineage ---------- */
  const OPERATOR_LETTERS = { translate: "T", repair: "R", mutate: "M", crossover: "X", reflect: "F", tune: "U" };
  const letterOf = (op) => OPERATOR_LETTERS[op] || String(op || "?").charAt(0).toLowerCase();
  const GAP = 34, ROW = 70, RADIUS = 11, LEFT = 78, TOP = 30;

  function lineage(box, d) {
    const nodes = d.lineage || [];
    if (!nodes.length) { box.append(empty("No kernel written yet: the lineage is empty.")); return false; }
    const pos = layout(nodes), colour = speedupColours(nodes), tops = new Set((d.top || []).map((k) => k.id));
    const rows = Math.max(...[...pos.values()].map((p) => p.row)) + 1;
    const width = Math.max(...[...pos.values()].map((p) => p.x)) + GAP + 10, height = TOP + (rows - 1) * ROW + 40;
    const svg = sv("svg", { class: "tree", width, height, viewBox: `0 0 ${width} ${height}` });
    const labels = sv("g", { class: "row-labels" });
    for (let r = 0; r < rows; r++) {
      svg.append(sv("line", { class: "row-rule", x1: 0, x2: width, y1: TOP + r * ROW, y2: TOP + r * ROW }));
      labels.append(sv("rect", { x: 2, y: TOP + r * ROW - 9, width: 58, height: 16, rx: 3 }),
        sv("text", { class: "row-label", x: 8, y: TOP + r * ROW + 4 }, "depth " + r));
    }
    const onPath = new Set((d.best_path || []).slice(1).map((id, i) => d.best_path[i] + ">" + id));
    const edges = sv("g", { class: "edges" }), best = sv("g", { class: "edges" });
    for (const n of nodes) drawEdges(n, pos, onPath, edges, best);
    const info = el("div", { class: "node-info" }, "Click a kernel to see its details here; hover for a tooltip.");
    const drawn = sv("g", { class: "nodes" }, nodes.map((n) => drawNode(n, pos.get(n.id), colour, info, tops, d.run && d.run.best_kernel)));
    svg.append(edges, best, drawn, labels);
    const scroller = el("div", { class: "scroll" }, svg);
    box.append(lineageLegend(nodes, colour), scroller, info);
    // the row labels follow a horizontal scroll, and a wide tree opens on the path to the best kernel
    scroller.addEventListener("scroll", () => labels.setAttribute("transform", `translate(${scroller.scrollLeft} 0)`));
    const focus = (d.best_path || []).filter((id) => pos.has(id)).map((id) => pos.get(id).x);
    if (focus.length) scroller.scrollLeft = focus.reduce((a, b) => a + b, 0) / focus.length - scroller.clientWidth / 2;
    return true;
  }

  function layout(nodes) {
    // layered by depth (1 + the deepest parent in this run), so that every edge points down even
    // when a parent and its child share a generation
    const byId = new Map(nodes.map((n) => [n.id, n])), depth = new Map();
    const depthOf = (n, seen) => {
      if (depth.has(n.id)) return depth.get(n.id);
      if (seen.has(n.id)) return 0;  // a cycle is a data error; do not recurse forever on it
      seen.add(n.id);
      const ps = (n.parents || []).filter((p) => byId.has(p) && p !== n.id);
      const v = ps.length ? 1 + Math.max(...ps.map((p) => depthOf(byId.get(p), seen))) : 0;
      depth.set(n.id, v);
      return v;
    };
    const layers = [];
    for (const n of nodes) (layers[depthOf(n, new Set())] ||= []).push(n);
    const pos = new Map();
    layers.forEach((layer, row) => placeLayer(layer || [], row, pos));
    const minX = Math.min(...[...pos.values()].map((p) => p.x));
    for (const p of pos.values()) p.x = r1(p.x + LEFT + GAP / 2 - minX);
    return pos;
  }

  function placeLayer(layer, row, pos) {
    // each kernel wants to sit under the mean of its parents; neighbours then move apart as little
    // as possible (least squares under a minimum gap), so wide layers do not drift to one side
    const want = (n) => {
      const xs = (n.parents || []).filter((p) => pos.has(p)).map((p) => pos.get(p).x);
      return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null;
    };
    const items = layer.map((n, i) => ({ n, w: want(n) ?? i * GAP })).sort((a, b) => a.w - b.w || a.n.id - b.n.id);
    spread(items.map((it) => it.w)).forEach((x, i) => pos.set(items[i].n.id, { x, y: TOP + row * ROW, row }));
  }

  function spread(wants) {
    // pool adjacent violators on w[i] - i*GAP: blocks of crowded kernels sit at their mean want
    const blocks = [];
    wants.forEach((w, i) => {
      let b = { sum: w - i * GAP, n: 1 };
      while (blocks.length && blocks[blocks.length - 1].sum / blocks[blocks.length - 1].n >= b.sum / b.n) {
        const a = blocks.pop();
        b = { sum: a.sum + b.sum, n: a.n + b.n };
      }
      blocks.push(b);
    });
    const out = [];
    for (const b of blocks) for (let k = 0; k < b.n; k++) out.push(b.sum / b.n + out.length * GAP);
    return out;
  }

  function drawEdges(n, pos, onPath, edges, best) {
    const c = pos.get(n.id);
    (n.parents || []).forEach((p, i) => {
      const q = pos.get(p);
      if (!q) {  // a parent from another run (a seed): a dangling stub says so
        edges.append(sv("path", { class: "edge outside", d: `M${c.x},${c.y - RADIUS}l-9,-20` },
          sv("title", {}, `parent kernel ${p} is outside this run`)));
        return;
      }
      const isBest = onPath.has(p + ">" + n.id), mid = r1((q.y + c.y) / 2);
      const cls = "edge" + (isBest ? " best" : "") + (i > 0 ? " second" : "");
      (isBest ? best : edges).append(sv("path", { class: cls, "data-from": p, "data-to": n.id,
        d: `M${q.x},${q.y + RADIUS}C${q.x},${mid} ${c.x},${mid} ${c.x},${c.y - RADIUS}` }));
    });
  }

  function describe(n) {
    const lines = [`kernel ${n.id}: ${n.operator} (generation ${n.generation}, island ${txt(n.island)})`,
      `verdict: ${n.verdict}` + (isNum(n.speedup) ? `, ${fxci(n.speedup, n.speedup_ci)} vs eager` : "")];
    if (n.reason) lines.push("reason: " + n.reason);
    if (n.model) lines.push("model: " + n.model);
    if ((n.parents || []).length) lines.push("parents: " + n.parents.join(", "));
    if (n.on_best_path) lines.push("on the path to the best kernel");
    if (n.stepping_stone) lines.push("stepping stone (kept for diversity)");
    return lines;
  }

  function drawNode(n, p, colour, info, tops, best) {
    const kind = n.verdict === "ok" ? "ok" : n.verdict === "not judged" || n.verdict === "no kernel" ? "unjudged" : "failed";
    const cls = ["node", "v-" + kind, n.on_best_path ? "best-path" : "", n.stepping_stone ? "stone" : ""].join(" ").trim();
    const fillColour = kind === "ok" ? colour(n.speedup) : null;
    const g = sv("g", { class: cls, "data-kernel": n.id, transform: `translate(${p.x},${p.y})`, tabindex: 0 },
      sv("title", {}, describe(n).join("\n")),
      n.stepping_stone ? sv("circle", { class: "stone-ring", r: RADIUS + 4.5 }) : null,
      sv("circle", { class: "disc", r: RADIUS, style: fillColour ? `fill:${fillColour.css}` : null }),
      sv("text", { class: "letter" + (fillColour && fillColour.dark ? " on-dark" : ""), y: 4, "text-anchor": "middle" }, letterOf(n.operator)),
      sv("text", { class: "node-id", y: RADIUS + 12, "text-anchor": "middle" }, n.id),
      n.id === best ? sv("text", { class: "star", x: 7, y: -RADIUS - 3 }, "\u2605") : null);
    const show = () => {
      info.replaceChildren(el("strong", {}, describe(n)[0]), ...describe(n).slice(1).flatMap((l) => [el("br"), l]));
      if (tops.has(n.id)) info.append(el("br"), el("a", { href: "#kernel-" + n.id }, "source and diff below"));
    };
    g.addEventListener("click", show);
    g.addEventListener("keydown", (e) => { if (e.key === "Enter") show(); });
    return g;
  }

  function speedupColours(nodes) {
    // diverging around 1.0x on a log scale: red slower than eager, green faster; at least 0.5x..2x
    // wide so that a 1.05x kernel is not painted as a triumph, at most 1/8x..8x
    const logs = nodes.filter((n) => n.verdict === "ok" && isNum(n.speedup) && n.speedup > 0).map((n) => Math.abs(Math.log2(n.speedup)));
    const span = Math.min(3, Math.max(1, ...logs));
    const stops = [[178, 24, 43], [239, 138, 98], [247, 247, 247], [127, 191, 123], [27, 120, 55]];
    const at = (t) => {  // t in [-1, 1]
      const u = (Math.max(-1, Math.min(1, t)) + 1) * 2, i = Math.min(3, Math.floor(u)), f = u - i;
      const rgb = stops[i].map((c, k) => Math.round(lerp(c, stops[i + 1][k], f)));
      return { css: `rgb(${rgb.join(",")})`, dark: Math.abs(t) > 0.55 };
    };
    const colour = (s) => (isNum(s) && s > 0 ? at(Math.log2(s) / span) : at(0));
    colour.span = span;
    colour.at = at;
    return colour;
  }

  function lineageLegend(nodes, colour) {
    const lo = Math.pow(2, -colour.span), hi = Math.pow(2, colour.span);
    const gradient = el("span", { class: "gradient" });
    gradient.style.background = `linear-gradient(to right, ${[-1, -0.5, 0, 0.5, 1].map((t) => colour.at(t).css).join(", ")})`;
    const disc = (cls, extra) => tiny(extra || null, sv("circle", { class: "disc " + cls, cx: 11, cy: 7, r: 5.5 }));
    const ops = [...new Set(nodes.map((n) => n.operator))].sort();
    return el("div", { class: "legend" },
      el("span", { class: "item" }, "speedup vs eager ", fx(lo), gradient, fx(hi)),
      legendItem(tiny(sv("circle", { class: "disc", cx: 11, cy: 7, r: 5.5, style: "fill:#f7f7f7" })), "1.0\u00d7 / no speedup recorded"),
      legendItem(el("span", { class: "v-failed" }, disc("")), "failed"),
      legendItem(el("span", { class: "v-unjudged" }, disc("")), "not judged / no kernel"),
      legendItem(el("span", { class: "best-path" }, disc("")), "path to the best kernel (\u2605)"),
      legendItem(tiny(sv("circle", { class: "stone-ring", cx: 11, cy: 7, r: 5.5 })), "stepping stone"),
      el("span", { class: "item ops" }, ops.map((op) => el("span", { class: "op" }, el("b", {}, letterOf(op)), " " + op))));
  }

  /* ---------- top kernels ---------- */
  // A specialized kernel refuses input shapes the reference handles: not a drop-in there.
  function shapesChip(s) {
    if (!s) return el("span", { class: "chip" }, "shapes not checked");
    if (s.specialized) return el("span", { class: "chip warn" }, "specialized");
    return el("span", { class: "chip" }, s.mode === "exact" ? "task shapes only" : "general");
  }

  function shapesList(s) {
    if (!s) return el("span");
    const items = (s.supported || []).map((x) => el("li", {}, "correct on " + x))
      .concat((s.refused || []).map((x) => el("li", { class: "refused" }, "refuses " + x)));
    return el("details", { class: "shapes" }, el("summary", {}, `Input shapes checked (${items.length})`), el("ul", {}, items));
  }

  function top(box, d) {
    const list = d.top || [];
    if (!list.length) { box.append(empty("No candidate passed yet: there is no kernel to show.")); return false; }
    list.forEach((k, i) => box.append(kernelCard(k, i + 1)));
    return true;
  }

  // Which measurement a figure is: the final re-judgement in a fresh process, or the search's.
  function figuresNote(which, search, ci) {
    if (which === "final") return `final re-judgement (search: ${fxci(search, ci)} vs eager)`;
    return which === "search" ? "search figure, not re-judged" : "same kernel";
  }

  function kernelCard(k, rank) {
    const from = k.parent == null ? "written from scratch" : `from kernel ${k.parent} (${fxci(k.parent_speedup, k.parent_speedup_ci)})`;
    const card = el("article", { class: "kernel", id: "kernel-" + k.id },
      el("h3", {}, `#${rank}  kernel ${k.id}`),
      el("div", { class: "chips" }, el("span", { class: "chip big" }, fxci(k.speedup, k.speedup_ci) + " vs eager"),
        el("span", { class: "chip" }, fxci(k.speedup_compile, k.speedup_compile_ci) + " vs torch.compile"),
        el("span", { class: "chip" }, k.figures === "final" ? `final re-judgement (search ${fxci(k.search_speedup, k.search_speedup_ci)})` : "search figure"),
        el("span", { class: "chip" }, fms(k.candidate_ms)),
        el("span", { class: "chip" }, txt(k.operator)), el("span", { class: "chip" }, txt(k.format)), el("span", { class: "chip" }, from),
        shapesChip(k.shapes)),
      profileList(k.profile), shapesList(k.shapes));
    const lines = (k.source || "").split("\n").length;
    card.append(el("details", { class: "source" }, el("summary", {}, `Source (${lines} lines)`), highlight(k.source || "")));
    if (k.parent != null) {
      card.append(el("details", { class: "diff", open: "" }, el("summary", {}, `Diff against kernel ${k.parent}`),
        k.diff ? diffBlock(k.diff) : empty("Same source as its parent.")));
    }
    if (k.account) card.append(el("details", { open: "" }, el("summary", {}, "The model's account of this kernel"), el("pre", { class: "prose" }, k.account)));
    if (k.thinking) card.append(el("details", {}, el("summary", {}, "The model's reasoning"), el("pre", { class: "prose" }, k.thinking)));
    return card;
  }

  function profileList(profile) {
    const entries = Object.entries(profile || {}).filter(([, v]) => v !== null && v !== undefined && v !== "");
    if (!entries.length) return el("p", { class: "muted" }, "No profile recorded for this kernel.");
    const value = (k, v) => (!isNum(v) ? String(v) : /_pct$/.test(k) ? v.toFixed(1) + "%"
      : /share$/.test(k) ? fpct(v) : Number.isInteger(v) ? fint(v) : v.toPrecision(3));
    return el("dl", { class: "profile" }, entries.map(([k, v]) => [el("dt", {}, k.replace(/_/g, " ")), el("dd", {}, value(k, v))]));
  }

  function diffBlock(text) {
    const kind = (l) => (l.startsWith("+++") || l.startsWith("---") ? "meta" : l.startsWith("@@") ? "hunk"
      : l[0] === "+" ? "add" : l[0] === "-" ? "del" : l.startsWith("... ") ? "meta" : "ctx");
    return el("pre", { class: "diff" }, text.split("\n").map((l) => el("span", { class: "d-" + kind(l) }, l || " ")));
  }

  // A small tokenizer: Python outside, CUDA C++ inside the triple-quoted strings that hold kernels.
  const PY_KW = new Set(("and as assert async await break class continue def del elif else except False finally for from " +
    "global if import in is lambda None nonlocal not or pass raise return True try while with yield self").split(" "));
  const C_KW = new Set(("auto bool break case char const constexpr continue default do double else enum extern false float " +
    "for if inline int long return short signed sizeof static struct switch template true typedef typename unsigned void " +
    "volatile while half half2 float2 float4 int2 int4 size_t __global__ __device__ __host__ __shared__ __constant__ " +
    "__restrict__ __forceinline__ __launch_bounds__ __syncthreads __syncwarp threadIdx blockIdx blockDim gridDim").split(" "));
  const PY_RE = /(#[^\n]*)|([rRbBuUfF]{0,2}(?:"""[\s\S]*?(?:"""|$(?![\s\S]))|'''[\s\S]*?(?:'''|$(?![\s\S]))))|([rRbBuUfF]{0,2}(?:"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'))|(\b(?:0[xX][\da-fA-F]+|\d[\d_]*\.?\d*(?:[eE][+-]?\d+)?)\b)|([A-Za-z_]\w*)|([\s\S])/g;
  const C_RE = /(\/\/[^\n]*|\/\*[\s\S]*?(?:\*\/|$(?![\s\S])))|(^[ \t]*#[ \t]*\w+)|("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')|(\b(?:0[xX][\da-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?)[fFuUlL]*)|([A-Za-z_]\w*)|([\s\S])/gm;
  const looksLikeCuda = (s) => /__global__|__device__|#include|extern\s+"C"/.test(s);

  function highlight(source) {
    const pre = el("pre", { class: "code" });
    tokens(source, "py", pre);
    return pre;
  }

  function tokens(text, lang, out) {
    let plain = "";
    const flush = () => { if (plain) out.append(plain); plain = ""; };
    const span = (cls, s) => { flush(); out.append(el("span", { class: cls }, s)); };
    for (const m of text.matchAll(lang === "py" ? PY_RE : C_RE)) {
      const [all, comment, g2, g3, number, word] = m;
      if (comment) span("tok-c", all);
      else if (lang === "py" && g2) {
        const q = g2.search(/"""|'''/), body = g2.slice(q + 3), closed = /("""|''')$/.test(body) && body.length >= 3;
        if (!looksLikeCuda(body)) { span("tok-s", all); continue; }
        span("tok-s", g2.slice(0, q + 3));
        tokens(closed ? body.slice(0, -3) : body, "c", out);
        if (closed) span("tok-s", body.slice(-3));
      } else if (lang === "c" && g2) span("tok-p", all);
      else if (g3) span("tok-s", all);
      else if (number) span("tok-n", all);
      else if (word && (lang === "py" ? PY_KW : C_KW).has(word)) span("tok-k", all);
      else plain += all;
    }
    flush();
  }

  /* ---------- verdicts ---------- */
  const VERDICT_COLOURS = { ok: "#1b7837", incorrect: "#d6604d", compile_error: "#b2182b", timeout: "#e08214",
    crashed: "#762a83", rejected: "#8c6d31" };

  function verdicts(box, d) {
    const entries = Object.entries(d.verdicts || {}).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
    const total = entries.reduce((a, [, n]) => a + n, 0);
    box.append(entries.length ? verdictBars(entries, total) : empty("No candidate judged yet."));
    const problems = Object.entries(d.problems || {}).sort((a, b) => b[1] - a[1]);
    box.append(el("h3", {}, "Kernels with no source"), problems.length
      ? el("ul", { class: "problems" }, problems.map(([p, n]) => el("li", {}, el("b", {}, fint(n)), " \u00d7 ", p)))
      : empty("None: every reply yielded a kernel source."));
    return entries.length > 0;
  }

  function verdictBars(entries, total) {
    const LABEL = 150, BAR = 420, ROWH = 26, max = Math.max(...entries.map(([, n]) => n));
    const svg = sv("svg", { class: "bars", width: LABEL + BAR + 110, height: entries.length * ROWH + 6 });
    entries.forEach(([v, n], i) => {
      const y = 4 + i * ROWH, w = Math.max(2, (BAR * n) / max);
      svg.append(sv("text", { class: "bar-label", x: LABEL - 8, y: y + 15, "text-anchor": "end" }, v),
        sv("rect", { class: "bar", x: LABEL, y, width: w, height: ROWH - 8, rx: 2, style: `fill:${VERDICT_COLOURS[v] || "#888"}` },
          sv("title", {}, `${v}: ${n}`)),
        sv("text", { class: "bar-count", x: LABEL + w + 6, y: y + 14 }, `${n} (${fpct(n / total)})`));
    });
    return el("figure", {}, svg, el("figcaption", {}, `${total} candidates judged`));
  }

  /* ---------- operators and models ---------- */
  // yield: replies judged / replies received (the live panel's); ok rate: ok / judged
  const COLUMNS = [["kernels", "kernels", fint], ["replies", "replies", fint], ["yield", "yield", null],
    ["judged", "judged", fint], ["ok", "ok", fint], ["ok_rate", "ok rate", fpct],
    ["copies", "replies that were copies", fint], ["repeats", "prompts not sent again", fint],
    ["new_bests", "new bests", fint], ["improvements", "improvements", fint], ["best_speedup", "best speedup", fx],
    ["calls", "LLM calls", fint], ["failed_calls", "failed", fint], ["cost_usd", "spent", fusd],
    ["improvements_per_usd", "improvements per $", fnum], ["usd_per_ok", "$ per ok kernel", fusd], ["tokens", "tokens", fint]];

  function groupTable(box, rows, key, what) {
    if (!rows.length) { box.append(empty(`No ${what} recorded yet.`)); return false; }
    const yieldCell = (r) => {
      const bar = el("span", { class: "ybar" }, el("span", {}));
      bar.firstChild.style.width = isNum(r.yield) ? `${Math.round(100 * r.yield)}%` : "0";
      return el("td", { class: "yield" }, bar, fpct(r.yield));
    };
    const head = el("tr", {}, el("th", {}, key), COLUMNS.map(([k, label]) => el("th", { class: k === "yield" ? "" : "num" }, label)));
    const body = rows.map((r) => el("tr", {}, el("td", {}, txt(r[key])),
      COLUMNS.map(([k, , f]) => (f ? el("td", { class: "num" }, f(r[k])) : yieldCell(r)))));
    box.append(el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, head), el("tbody", {}, body))));
    return true;
  }
  const operators = (box, d) => groupTable(box, d.operators || [], "operator", "operator");
  const models = (box, d) => groupTable(box, d.models || [], "model", "model");
  // with --format auto, what each format's calls earned (a run in one format has nothing to compare)
  const formats = (box, d) => {
    const rows = (d.formats || []).filter((r) => r.format !== "(none)");
    if (rows.length < 2) { box.append(empty(`One format in this run${rows.length ? ": " + rows[0].format : ""}.`)); return false; }
    return groupTable(box, rows, "format", "format");
  };

  /* ---------- reflections ---------- */
  function reflections(box, d) {
    const list = d.reflections || [], tops = new Set((d.top || []).map((k) => k.id));
    if (!list.length) { box.append(empty("No reflection was written in this run.")); return false; }
    for (const r of list) {
      const variants = (r.variants || []).length ? `Variants written from it: ${r.variants.join(", ")}` : "No variant written from it yet.";
      box.append(el("article", { class: "reflection" }, el("h3", {}, "On ", kernelLink(r.kernel, tops)),
        el("p", { class: "prose" }, txt(r.analysis)), el("p", { class: "muted" }, variants)));
    }
    return true;
  }

  /* ---------- main ---------- */
  const SECTIONS = { summary, progress, lineage, top, verdicts, operators, models, formats, reflections };

  function main() {
    let data = null;
    try {
      data = JSON.parse(document.getElementById("report-data").textContent);
    } catch (err) {
      noteError("report data: " + err.message);
    }
    const rendered = [];
    for (const [id, draw] of Object.entries(SECTIONS)) {
      const box = document.querySelector(`#${id} .content`);
      if (!box || !data) continue;
      try {
        if (draw(box, data)) rendered.push(id);
      } catch (err) {
        noteError(`${id}: ${err && err.message}`);
        box.append(el("p", { class: "error" }, `This section failed to draw: ${err && err.message}`));
      }
    }
    document.body.dataset.rendered = rendered.join(" ");
    document.body.dataset.errors = errors.join(" | ");
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", main);
  else main();
})();

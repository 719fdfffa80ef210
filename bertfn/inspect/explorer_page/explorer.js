/* bertfn explorer: draws what bertfn/inspect/explorer.py stored in this page. No network, no libraries.
 *
 * Data: #bertfn-meta (JSON: tokens, sizes, predictions, where each array sits) and #bertfn-data
 * (base64 of one zlib block of little-endian arrays, unpacked with the browser's DecompressionStream):
 *   attention (L, nh, S, S) uint8 = round(m sqrt(p)), read back as (c / m)^2, m = meta.levels (127);  q, k (L, nh, S, hd) int8 with q_scale, k_scale (L, nh, S);
 *   entropy (L, nh, S);  norms (L+1, S);  lens_ids, lens_probs (L+1, S, k) when the model has an MLM head.
 * With a decision panel (meta.decision, a checkpoint with a task head or ESM-2's contact head): decision_tokens (T, S)
 * and decision_heads (T, L, nh) float32 for the T targets, decision_contacts (r, r) uint8 = round(255 p).
 * meta.windows: each layer's attention window (ModernBERT's local layers: a query sees the keys at most
 * floor(W / 2) positions away), null where the layer attends to every token; the keys out of a local layer's
 * reach are drawn hatched grey (OUT), not white, and the neuron view masks them as the model does.
 *
 * Every view draws through a "painter" (rect, line, text, image), so the same code draws the screen
 * (CanvasPainter) and the saved SVG (SvgPainter); the PNG is the screen's canvas.
 * window.bertfnExplorer exposes the state and what was last drawn, for tests and the console.
 */
"use strict";

const FONT = 'system-ui, "Segoe UI", "Liberation Sans", "DejaVu Sans", sans-serif';
const ACCENT = "#1f5fbf";
const INK = "#1d2430";
const MUTED = "#5b6675";

// ---- colours -------------------------------------------------------------------------------------

function ramp(stops) {  // [[t, [r, g, b]], ...] -> 256 css colours
  const out = [];
  for (let n = 0; n < 256; n++) {
    const t = n / 255;
    let k = 0;
    while (k < stops.length - 2 && t > stops[k + 1][0]) k++;
    const [t0, c0] = stops[k], [t1, c1] = stops[k + 1];
    const f = (t - t0) / (t1 - t0);
    out.push(c0.map((c, m) => Math.round(c + f * (c1[m] - c))));
  }
  return out;
}
const BLUES = ramp([[0, [255, 255, 255]], [0.25, [198, 219, 239]], [0.5, [107, 174, 214]], [0.75, [33, 113, 181]], [1, [8, 48, 107]]]);
const PURPLES = ramp([[0, [255, 255, 255]], [0.5, [158, 154, 200]], [1, [63, 0, 125]]]);
const DIVERGING = ramp([[0, [33, 102, 172]], [0.5, [247, 247, 247]], [1, [178, 24, 43]]]);  // -1 blue, 0 white, +1 red
const OUT = [224, 224, 224];  // a cell out of a local layer's reach: neutral grey, no colour of BLUES (whose blue exceeds its red)
const HATCH = "#8a8f98";  // the hatch drawn over those cells in the large map and the key
const rgb = (c) => `rgb(${c[0]},${c[1]},${c[2]})`;
const blue = (p) => rgb(BLUES[Math.max(0, Math.min(255, Math.round(p * 255)))]);
const purple = (t) => rgb(PURPLES[Math.max(0, Math.min(255, Math.round(t * 255)))]);
const diverging = (v, vmax) => rgb(DIVERGING[Math.max(0, Math.min(255, Math.round((v / (vmax || 1) + 1) * 127.5)))]);

/* What the model view's maps colour (state.curve): a cell is BLUES at f(t), t = p / top in [0, 1], top being
 * the probability drawn darkest (state.scale says which). ticks: the colour key's marks, [place on the key,
 * the share of top coloured there]. All three are monotone, so a max-pooled small map keeps each block's darkest. */
const CURVES = {
  log: { f: (t) => (t > 0 ? Math.max(0, Math.log10(t) / 3 + 1) : 0), ticks: [[0, 1e-3], [1 / 3, 1e-2], [2 / 3, 1e-1], [1, 1]],
         name: "log p", white: "white at 1/1000 of that and below", key: "log scale, ×10 a tick" },
  sqrt: { f: Math.sqrt, ticks: [[0, 0], [0.5, 0.25], [1, 1]], name: "√p, the square root of the attention probability p",
          white: "white 0", key: "√p scale (mid-key: ¼ of the top)" },
  linear: { f: (t) => t, ticks: [[0, 0], [0.5, 0.5], [1, 1]], name: "the attention probability p", white: "white 0", key: "linear scale" },
};
const SHARES = { 0.001: "1/1000", 0.01: "1/100", 0.1: "1/10", 0.25: "¼", 0.5: "½" };

// ---- painters: one drawing API, two targets ---------------------------------------------------------

const measurer = document.createElement("canvas").getContext("2d");
function textWidth(s, size = 12, weight = "normal") {
  measurer.font = `${weight} ${size}px ${FONT}`;
  return measurer.measureText(s).width;
}
function clip(s, width, size = 12) {  // shorten s with an ellipsis until it fits width
  if (textWidth(s, size) <= width) return s;
  let n = s.length;
  while (n > 1 && textWidth(s.slice(0, n) + "…", size) > width) n--;
  return s.slice(0, n) + "…";
}

class CanvasPainter {
  constructor(ctx) { this.ctx = ctx; }
  rect(x, y, w, h, fill) { this.ctx.fillStyle = fill; this.ctx.fillRect(x, y, w, h); }
  frame(x, y, w, h, stroke, width = 1) {
    const c = this.ctx; c.strokeStyle = stroke; c.lineWidth = width; c.strokeRect(x, y, w, h);
  }
  line(x1, y1, x2, y2, stroke, width = 1, alpha = 1) {
    const c = this.ctx;
    c.globalAlpha = alpha; c.strokeStyle = stroke; c.lineWidth = width;
    c.beginPath(); c.moveTo(x1, y1); c.lineTo(x2, y2); c.stroke();
    c.globalAlpha = 1;
  }
  text(s, x, y, { size = 12, color = INK, align = "left", weight = "normal", rotate = 0 } = {}) {
    const c = this.ctx;
    c.save();
    c.font = `${weight} ${size}px ${FONT}`; c.fillStyle = color; c.textAlign = align; c.textBaseline = "middle";
    c.translate(x, y); if (rotate) c.rotate(rotate * Math.PI / 180);
    c.fillText(s, 0, 0);
    c.restore();
  }
  image(source, x, y, w, h) { this.ctx.imageSmoothingEnabled = false; this.ctx.drawImage(source, x, y, w, h); }
}

/** A probability as a percentage: one decimal, and two significant figures below 0.1% (a random model's
 *  predictions, a classifier's unlikely labels), which one decimal would show as 0.0%, not what bertfn gives. */
const percent = (p) => `${p >= 0.001 || p === 0 ? (100 * p).toFixed(1) : (100 * p).toPrecision(2)}%`;
const escapeXml = (s) => String(s).replace(/[&<>"]/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[ch]);
const num = (v) => (Math.round(v * 100) / 100).toString();

class SvgPainter {
  constructor(width, height) { this.width = width; this.height = height; this.parts = []; }
  rect(x, y, w, h, fill) { this.parts.push(`<rect x="${num(x)}" y="${num(y)}" width="${num(w)}" height="${num(h)}" fill="${fill}"/>`); }
  frame(x, y, w, h, stroke, width = 1) {
    this.parts.push(`<rect x="${num(x)}" y="${num(y)}" width="${num(w)}" height="${num(h)}" fill="none" stroke="${stroke}" stroke-width="${width}"/>`);
  }
  line(x1, y1, x2, y2, stroke, width = 1, alpha = 1) {
    this.parts.push(`<line x1="${num(x1)}" y1="${num(y1)}" x2="${num(x2)}" y2="${num(y2)}" stroke="${stroke}" stroke-width="${width}" stroke-opacity="${num(alpha)}"/>`);
  }
  text(s, x, y, { size = 12, color = INK, align = "left", weight = "normal", rotate = 0 } = {}) {
    const anchor = { left: "start", center: "middle", right: "end" }[align];
    const turn = rotate ? ` transform="rotate(${rotate} ${num(x)} ${num(y)})"` : "";
    this.parts.push(`<text x="${num(x)}" y="${num(y)}" font-size="${size}" font-weight="${weight}" fill="${color}" ` +
      `text-anchor="${anchor}" dominant-baseline="central"${turn}>${escapeXml(s)}</text>`);
  }
  image(source, x, y, w, h) {
    this.parts.push(`<image x="${num(x)}" y="${num(y)}" width="${num(w)}" height="${num(h)}" preserveAspectRatio="none" ` +
      `style="image-rendering:pixelated" href="${source.toDataURL("image/png")}"/>`);
  }
  toString() {
    return `<?xml version="1.0" encoding="UTF-8"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="${this.width}" height="${this.height}" ` +
      `viewBox="0 0 ${this.width} ${this.height}" font-family='${FONT}'>\n${this.parts.join("\n")}\n</svg>\n`;
  }
}

// ---- the data -------------------------------------------------------------------------------------

const TYPES = { uint8: Uint8Array, int8: Int8Array, int32: Int32Array, float32: Float32Array };

async function unpack(meta) {
  if (typeof DecompressionStream === "undefined") {
    throw new Error("this browser cannot unpack the data (no DecompressionStream; Chrome 80+, Firefox 113+ and Safari 16.4+ have it)");
  }
  const text = atob(document.getElementById("bertfn-data").textContent.trim());
  const bytes = new Uint8Array(text.length);
  for (let n = 0; n < text.length; n++) bytes[n] = text.charCodeAt(n);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  const buffer = await new Response(stream).arrayBuffer();
  const out = {};
  for (const [name, a] of Object.entries(meta.arrays)) {
    const size = a.shape.reduce((x, y) => x * y, 1);
    out[name] = new TYPES[a.dtype](buffer, a.offset, size);
  }
  return out;
}

function explorer(meta, data) {
  const { S, L, nh, hd, tokens, levels } = meta;
  const SQUARES = Float32Array.from({ length: 256 }, (_, c) => (c / levels) ** 2);  // attention code -> probability
  const att = data.attention;
  const hasLens = !!data.lens_ids;
  const maskSet = new Set(meta.masks);
  const maskToken = meta.mask_token || "[MASK]";
  const windows = meta.windows || Array(L).fill(null);  // each layer's window, null: it attends to every token
  const anyLocal = windows.some((w) => w !== null);
  const reach = (l) => (windows[l] === null ? Infinity : Math.floor(windows[l] / 2));  // the farthest key a query sees
  /** Whether query i sees key j in layer l: within a local layer's window, and not after i in a decoder. */
  const visible = (l, i, j) => Math.abs(i - j) <= reach(l) && !(meta.causal && j > i);
  /** What kind of layer l is, where the model has both kinds ("" where every layer is global, as in BERT). */
  const layerKind = (l) => (!anyLocal ? "" : windows[l] === null ? "global" : `local (window ${windows[l]})`);
  const layerName = (l) => `Layer ${l}${anyLocal ? `, ${layerKind(l)}` : ""}`;

  /** Probabilities of query i over all keys in layer l, head h (h = -1: the mean of the heads): Float32Array(S). */
  function probRow(l, h, i) {
    const row = new Float32Array(S);
    const heads = h < 0 ? [...Array(nh).keys()] : [h];
    for (const hh of heads) {
      const base = ((l * nh + hh) * S + i) * S;
      for (let j = 0; j < S; j++) row[j] += SQUARES[att[base + j]];
    }
    for (let j = 0; j < S; j++) row[j] /= heads.length;
    return row;
  }
  /** Probabilities with which every query attends to key j: Float32Array(S). */
  function probCol(l, h, j) {
    const col = new Float32Array(S);
    const heads = h < 0 ? [...Array(nh).keys()] : [h];
    for (const hh of heads) {
      const base = (l * nh + hh) * S * S;
      for (let i = 0; i < S; i++) col[i] += SQUARES[att[base + i * S + j]];
    }
    for (let i = 0; i < S; i++) col[i] /= heads.length;
    return col;
  }
  /** A query or key vector of token i, from its int8 codes and scale: Float32Array(hd). */
  function vector(name, l, h, i) {
    const codes = data[name], scale = data[name + "_scale"][(l * nh + h) * S + i];
    const base = ((l * nh + h) * S + i) * hd, v = new Float32Array(hd);
    for (let d = 0; d < hd; d++) v[d] = codes[base + d] * scale;
    return v;
  }
  const headName = (h) => (h < 0 ? "mean of the heads" : `head ${h}`);
  const tokenName = (i) => `"${tokens[i]}" (${i})`;

  // ---- state and DOM ----
  const state = { view: "head", layer: 0, head: 0, token: meta.masks.length ? meta.masks[0] : Math.min(1, S - 1), hover: null,
                  pinned: null, scale: "map", curve: "log" };
  // pinned: the clicked token whose lines stay isolated; the model view's colours: scale (what the darkest blue
  // stands for) map | row | shared | fixed, curve (how p is coloured, CURVES) log | sqrt | linear
  const scroller = document.getElementById("scroller");
  const canvas = document.getElementById("canvas");
  const spacer = document.getElementById("spacer");
  const readout = document.getElementById("readout");
  const api = { meta, state, lastDraw: null };
  const scrollTops = { head: 0, model: 0, neuron: 0 };

  // ---- head view: queries left, keys right, a line per pair as strong as the attention ----
  const head = {
    rowH: 20, top: 50, bottom: 18,  // header band above the rows, a band below for what lies off screen
    layout(W) {
      const widest = Math.min(150, Math.max(...tokens.map((t) => textWidth(t))) + 6);
      const mapW = 14, xL = 12 + widest;
      const xR = xL + Math.max(120, Math.min(340, W - 2 * widest - mapW - 60));  // lines span at most 340 px
      return { widest, xL, xR, mapX: xR + widest + 24, mapW };
    },
    contentHeight() { return this.top + S * this.rowH + this.bottom; },
    rows(H, sc) {  // the tokens whose rows are wholly on screen
      const first = Math.max(0, Math.ceil(sc / this.rowH));
      const last = Math.min(S - 1, Math.floor((sc + H - this.top - this.bottom) / this.rowH) - 1);
      return [first, last];
    },
    y(i, sc) { return this.top + i * this.rowH + this.rowH / 2 - sc; },
    mapHeight(H) { return Math.min(H - this.top - this.bottom, S * this.rowH); },  // beside the rows when all fit
    draw(g, W, H, sc) {
      const { widest, xL, xR, mapX, mapW } = this.layout(W);
      const l = state.layer, h = state.head;
      const hov = state.hover && state.hover.view === "head" && state.hover.i !== undefined ? state.hover : state.pinned;
      const [first, last] = this.rows(H, sc);
      const lines = [];
      const focusRow = hov && hov.side === "q" ? probRow(l, h, hov.i) : null;
      const focusCol = hov && hov.side === "k" ? probCol(l, h, hov.i) : null;
      for (let i = first; i <= last; i++) {
        if (hov && hov.side === "q" && i !== hov.i) continue;
        const row = focusRow || (focusCol ? null : probRow(l, h, i));
        for (let j = first; j <= last; j++) {
          if (hov && hov.side === "k" && j !== hov.i) continue;
          const p = row ? row[j] : focusCol[i];
          if (p <= 0) continue;
          g.line(xL + 6, this.y(i, sc), xR - 6, this.y(j, sc), ACCENT, hov ? 2 : 1.5, Math.sqrt(p));
          lines.push([i, j, p]);
        }
      }
      for (let i = first; i <= last; i++) {
        const y = this.y(i, sc);
        const weight = i === state.token || (hov && hov.i === i) ? "bold" : "normal";
        const color = maskSet.has(i) ? ACCENT : INK;
        if (focusCol) g.rect(xL - widest * focusCol[i], y - 8, widest * focusCol[i], 16, "rgba(31,95,191,0.35)");
        if (focusRow) g.rect(xR + 2, y - 8, widest * focusRow[i], 16, "rgba(31,95,191,0.35)");
        if (hov && hov.i === i) g.rect(hov.side === "q" ? xL - widest - 2 : xR, y - 9, widest + 4, 18, "rgba(31,95,191,0.12)");
        g.text(clip(tokens[i], widest - 4), xL - 2, y, { align: "right", weight, color });
        g.text(clip(tokens[i], widest - 4), xR + 4, y, { weight, color });
      }
      // off-screen attention of the hovered token, above and below the rows shown
      const focus = focusRow || focusCol;
      let above = 0, below = 0;
      if (focus) {
        for (let j = 0; j < first; j++) above += focus[j];
        for (let j = last + 1; j < S; j++) below += focus[j];
        const x = focusRow ? xR + 4 : xL - 2, align = focusRow ? "left" : "right";
      }
      // the whole sequence at a glance: the focus token's attention over all S tokens, the rows shown framed
      const mapTop = this.top, mapH = this.mapHeight(H);
      const overview = focus || probRow(l, h, state.token), top = Math.max(...overview) || 1;
      const focusI = hov ? hov.i : state.token;
      for (let j = 0; j < S; j++) {  // darkest = the row's largest probability; grey: out of a local layer's reach
        const y0 = mapTop + (j * mapH) / S, y1 = mapTop + ((j + 1) * mapH) / S;
        g.rect(mapX, y0, mapW, Math.max(1, y1 - y0), Math.abs(focusI - j) > reach(l) ? rgb(OUT) : blue(overview[j] / top));
      }
      g.frame(mapX - 1, mapTop + (first * mapH) / S, mapW + 2, ((last - first + 1) * mapH) / S, INK, 1);
      const stripLabel = `${hov && hov.side === "k" ? "attention to" : "attention of"} ${clip(tokens[focusI], 80, 11)} (${focusI}) over all ${S} tokens (darkest: its largest)`;
      // turned to run down beside the strip, from its top when the strip is shorter (a short text): centred on a short
      // strip, the label's start ran up under the header band and was cut off
      const labelW = textWidth(stripLabel, 11), labelY = mapTop + Math.max(mapH, labelW) / 2;
      const labelSpan = [labelY - labelW / 2, labelY + labelW / 2];  // where it runs, top to bottom
      g.text(stripLabel, mapX + mapW + 10, labelY, { size: 11, color: MUTED, align: "center", rotate: 90 });
      // header and footer bands, drawn last so the rows scroll under them
      g.rect(0, 0, W, this.top - 4, "#ffffff");
      g.rect(0, H - this.bottom, mapX - 4, this.bottom, "#ffffff");
      if (focus) {
        const x = focusRow ? xR + 4 : xL - 2, align = focusRow ? "left" : "right";
        if (above >= 0.005) g.text(`▲ ${above.toFixed(2)} above`, x, this.top - 9, { size: 11, color: MUTED, align });
        if (below >= 0.005) g.text(`▼ ${below.toFixed(2)} below`, x, H - this.bottom / 2, { size: 11, color: MUTED, align });
      }
      g.text(`${layerName(l)}, ${headName(h)}: each query (left) attends to the keys (right)`, 12, 12, { weight: "bold" });
      g.text(`tokens ${first}–${last} of ${S} · line opacity √p · hover a token for its lines, click to keep them ` +
        `(click it again to let go) · the strip at the right: all tokens${windows[l] === null ? "" : ", grey out of reach"}`,
      12, 27, { size: 11, color: MUTED });
      api.lastDraw = { view: "head", layer: l, head: h, hover: hov && { side: hov.side, i: hov.i }, pinned: state.pinned && { ...state.pinned },
                       first, last, lines, above, below, stripLabel, labelSpan };
    },
    pick(x, y, W, H, sc) {
      const { widest, xL, xR, mapX, mapW } = this.layout(W);
      if (x >= mapX - 2 && x <= mapX + mapW + 2 && y >= this.top && y < this.top + this.mapHeight(H)) {
        return { map: Math.min(S - 1, Math.floor(((y - this.top) / this.mapHeight(H)) * S)) };
      }
      if (y < this.top || y > H - this.bottom) return null;
      const i = Math.floor((y - this.top + sc) / this.rowH);
      if (i < 0 || i >= S) return null;
      if (x >= xL - widest - 4 && x <= xL + 6) return { side: "q", i };
      if (x >= xR - 6 && x <= xR + widest + 4) return { side: "k", i };
      return null;
    },
    point(side, i, W, sc) {
      const { widest, xL, xR } = this.layout(W);
      return { x: side === "q" ? xL - Math.min(widest, textWidth(tokens[i])) / 2 : xR + 4 + Math.min(widest, textWidth(tokens[i])) / 2, y: this.y(i, sc) };
    },
    describe(hov) {
      const l = state.layer, h = state.head;
      const v = hov.side === "q" ? probRow(l, h, hov.i) : probCol(l, h, hov.i);
      let best = 0;
      for (let j = 1; j < S; j++) if (v[j] > v[best]) best = j;
      return hov.side === "q"
        ? `query ${tokenName(hov.i)} attends most to ${tokenName(best)}: p = ${v[best].toFixed(3)}`
        : `key ${tokenName(hov.i)} gets the most attention from ${tokenName(best)}: p = ${v[best].toFixed(3)}`;
    },
  };

  // ---- model view: every layer x head as a small map, one opened large ----
  const thumbs = new Map();
  const large = new Map();  // a few full-size maps, newest last
  let sharedTop = 0;  // the largest probability in any head of any layer (the "shared" scale)
  for (let m = 0; m < att.length; m++) if (att[m] > sharedTop) sharedTop = att[m];
  sharedTop = SQUARES[sharedTop];
  const pooledMaps = new Map();  // the numbers behind the maps, whatever their colours: a change of colours only recolours
  /** Layer l, head h's probabilities max-pooled to n x n blocks (on the per-row scale, each divided by its row's
   *  largest first): { pooled: Float32Array(n * n), max: the largest, rowTops: each row's largest or null }. */
  function pooledMap(l, h, n, perRow) {
    const key = `${perRow},${l},${h},${n}`;
    if (pooledMaps.has(key)) return pooledMaps.get(key);
    const rowTops = perRow ? new Float32Array(S) : null;
    const pooled = new Float32Array(n * n);
    for (let i = 0; i < S; i++) {
      const row = probRow(l, h, i), r = Math.floor((i * n) / S) * n;
      let div = 1;
      if (perRow) {
        for (let j = 0; j < S; j++) if (row[j] > rowTops[i]) rowTops[i] = row[j];
        div = rowTops[i] || 1;
      }
      for (let j = 0; j < S; j++) {
        const at = r + Math.floor((j * n) / S), v = row[j] / div;
        if (v > pooled[at]) pooled[at] = v;
      }
    }
    let max = 0;
    for (let m = 0; m < n * n; m++) if (pooled[m] > max) max = pooled[m];
    const out = { pooled, max, rowTops };
    pooledMaps.set(key, out);
    if (n === S) {  // keep a few full-size ones, newest last
      const big = [...pooledMaps.keys()].filter((k) => k.endsWith(`,${S}`));
      if (big.length > 4) pooledMaps.delete(big[0]);
    }
    return out;
  }
  /** Which of the n x n blocks of layer l's max-pooled map hold no (query, key) pair within the layer's window:
   *  Uint8Array(n * n), 1 out of reach; null for a layer that attends to every token. */
  function outOfReach(l, n) {
    if (windows[l] === null) return null;
    const first = new Int32Array(n).fill(S), last = new Int32Array(n).fill(-1);  // the tokens of each block
    for (let i = 0; i < S; i++) {
      const b = Math.floor((i * n) / S);
      first[b] = Math.min(first[b], i); last[b] = Math.max(last[b], i);
    }
    const out = new Uint8Array(n * n);  // the nearest pair of blocks r (queries) and c (keys) is that far apart
    for (let r = 0; r < n; r++) for (let c = 0; c < n; c++) out[r * n + c] = Math.max(first[c] - last[r], first[r] - last[c]) > reach(l) ? 1 : 0;
    return out;
  }
  /** The (S x S) probabilities of layer l, head h (-1: the mean) max-pooled to n x n pixels and coloured as
   *  state.scale and state.curve say: a cell's colour is BLUES at CURVES[curve].f(p / top), top being the
   *  probability drawn darkest: 1, the largest anywhere, the map's largest, or (scale "row") the largest of the
   *  cell's row; OUT where a local layer cannot reach. Its .top is that probability (null on the per-row scale,
   *  whose .rowTops holds each row's). */
  function mapCanvas(l, h, n) {
    const key = `${state.scale},${state.curve},${l},${h},${n}`;
    const cache = n === S ? large : thumbs;
    if (cache.has(key)) return cache.get(key);
    const perRow = state.scale === "row", { pooled, max, rowTops } = pooledMap(l, h, n, perRow), out = outOfReach(l, n);
    const top = { fixed: 1, shared: sharedTop, row: 1, map: max }[state.scale] || 1;
    const c = document.createElement("canvas");
    c.width = c.height = n;
    c.top = perRow ? null : top;
    c.rowTops = rowTops;
    const img = c.getContext("2d").createImageData(n, n), px = img.data, f = CURVES[state.curve].f;
    for (let m = 0; m < n * n; m++) {
      const col = out && out[m] ? OUT : BLUES[Math.min(255, Math.round(f(pooled[m] / top) * 255))];
      px[4 * m] = col[0]; px[4 * m + 1] = col[1]; px[4 * m + 2] = col[2]; px[4 * m + 3] = 255;
    }
    c.getContext("2d").putImageData(img, 0, 0);
    cache.set(key, c);
    if (cache === large && large.size > 4) large.delete(large.keys().next().value);
    return c;
  }
  /** Hatch (lines rising to the right, every 6 px) the parts of an M-pixel map of layer l out of its reach:
   *  the keys more than reach(l) after the query (above the band along the diagonal) and before it (below). */
  function hatch(g, l, x, y, M) {
    const d = (reach(l) + 1) * (M / S) + 1;  // the region is |col - row| >= d, in pixels
    for (let s = 3; s < 2 * M; s += 6) {  // the line col + row = s, from col - row = d to the map's edge
      const t = Math.min(s, 2 * M - s);
      if (t <= d) continue;
      g.line(x + (s + d) / 2, y + (s - d) / 2, x + (s + t) / 2, y + (s - t) / 2, HATCH, 1);  // above: keys after the query
      g.line(x + (s - d) / 2, y + (s + d) / 2, x + (s - t) / 2, y + (s + t) / 2, HATCH, 1);  // below: keys before it
    }
  }
  const model = {
    layout(W, H) {
      const labelW = 34, gap = 4, x0 = labelW + 8, y0 = 60;
      const wide = W >= 760;
      const gridW = wide ? Math.floor(W * 0.5) : W - 16;
      const t = Math.max(14, Math.min(80, Math.floor((gridW - x0 - nh * gap) / nh)));
      const gridBottom = y0 + L * (t + gap);
      const labels = S <= 48;
      const margin = labels ? Math.min(110, Math.max(...tokens.map((s) => textWidth(s, 11))) + 10) : 64;
      const mx = (wide ? x0 + nh * (t + gap) + 30 : x0) + margin;
      const top = wide ? y0 - 16 : gridBottom + 24;  // the large map's title line
      const my = top + 10 + (labels ? margin : 16);
      const M = Math.max(160, Math.min(620, W - mx - 16, H - my - (anyLocal ? 106 : 78)));  // room for the key below
      return { gap, x0, y0, t, gridBottom, labels, margin, mx, my, M, top };
    },
    contentHeight(W, H) { const o = this.layout(W, H); return Math.max(o.gridBottom, o.my + o.M + (anyLocal ? 108 : 80)) + 10; },
    draw(g, W, H, sc) {
      const o = this.layout(W, H);
      const hov = state.hover && state.hover.view === "model" ? state.hover : null;
      const dy = -sc;
      g.text("Every layer × head (rows: layers, columns: heads); click a map to open it large", 12, 12 + dy, { weight: "bold" });
      const curve = CURVES[state.curve];
      const scaleNote = { map: "each map's largest", row: "each row's largest (each query's)",
        shared: `${sharedTop.toFixed(3)}, the largest anywhere`, fixed: "1" }[state.scale];
      g.text(`colour: ${curve.name}; dark blue at ${scaleNote}, ${curve.white}; small maps keep each block's largest value` +
        (anyLocal ? "; grey: out of a local layer's window" : ""), 12, 27 + dy, { size: 11, color: MUTED });
      const n = Math.min(S, Math.max(8, Math.round(o.t * (window.devicePixelRatio || 1))));
      for (let h = 0; h < nh; h++) g.text(`h${h}`, o.x0 + h * (o.t + o.gap) + o.t / 2, o.y0 - 8 + dy, { size: 11, color: MUTED, align: "center" });
      for (let l = 0; l < L; l++) {
        const y = o.y0 + l * (o.t + o.gap) + dy;
        if (y > H || y + o.t < 0) continue;
        g.text(`L${l}`, o.x0 - 6, y + o.t / 2, { size: 11, color: MUTED, align: "right" });
        for (let h = 0; h < nh; h++) {
          const x = o.x0 + h * (o.t + o.gap);
          g.image(mapCanvas(l, h, n), x, y, o.t, o.t);
          g.frame(x, y, o.t, o.t, "#c9d3e0", 1);
        }
      }
      const sel = state.head;
      if (sel >= 0) g.frame(o.x0 + sel * (o.t + o.gap) - 2, o.y0 + state.layer * (o.t + o.gap) - 2 + dy, o.t + 4, o.t + 4, ACCENT, 2.5);
      if (hov && hov.thumb) g.frame(o.x0 + hov.thumb[1] * (o.t + o.gap) - 1, o.y0 + hov.thumb[0] * (o.t + o.gap) - 1 + dy, o.t + 2, o.t + 2, INK, 1.5);
      // the large map of the chosen layer and head
      const l = state.layer, mx = o.mx, my = o.my + dy, M = o.M, cell = M / S;
      g.text(`${layerName(l)}, ${headName(sel)}: rows are queries, columns keys`, mx - o.margin, o.top + dy, { weight: "bold" });
      g.image(mapCanvas(l, sel, S), mx, my, M, M);
      if (windows[l] !== null) hatch(g, l, mx, my, M);
      g.frame(mx, my, M, M, "#c9d3e0", 1);
      if (o.labels) {
        const every = Math.ceil(12 / cell);  // labels 12 px apart at least
        for (let i = 0; i < S; i++) {
          if (i % every && i !== state.token) continue;
          const c = i === state.token ? ACCENT : INK;
          g.text(clip(tokens[i], o.margin - 8, 11), mx - 4, my + (i + 0.5) * cell, { size: 11, align: "right", color: c });
          g.text(clip(tokens[i], o.margin - 8, 11), mx + (i + 0.5) * cell, my - 4, { size: 11, rotate: -90, color: c });
        }
      } else {
        g.text(`keys 0 … ${S - 1} →`, mx, my - 8, { size: 11, color: MUTED });
        g.text("queries ↓", mx - 6, my + 8, { size: 11, color: MUTED, align: "right" });
      }
      const big = mapCanvas(l, sel, S), top = big.top;
      let detail = "";
      if (hov && hov.cell) {
        const [i, j] = hov.cell;
        g.frame(mx, my + i * cell, M, Math.max(1, cell), INK, 1);
        g.frame(mx + j * cell, my, Math.max(1, cell), M, INK, 1);
        const v = probRow(l, sel, i)[j];  // small probabilities to two figures: the log scale shows them
        detail = Math.abs(i - j) > reach(l)
          ? `query ${tokenName(i)} → key ${tokenName(j)}: out of reach, ${Math.abs(i - j)} apart (this layer: ±${reach(l)})`
          : `query ${tokenName(i)} → key ${tokenName(j)}: p = ${v >= 0.001 || v === 0 ? v.toFixed(3) : v.toPrecision(2)}` +
            (top === null ? ` (row max ${big.rowTops[i].toFixed(3)})` : "");
      }
      // the colour key under the map: the probabilities at its marks (on the per-row scale, shares of the row's
      // largest), and what it is
      const kx = mx, ky = my + M + 12, kw = 240;
      for (let k = 0; k < 150; k++) g.rect(kx + k * 1.6, ky, 1.7, 8, blue(k / 149));
      const label = (share) => (share === 0 ? "0" : top === null ? (share === 1 ? "row max" : SHARES[share])
        : String(Number((top * share).toPrecision(share === 1 ? 3 : 2))));
      const keyLabels = curve.ticks.map(([at, share], k) => {  // the log key's first mark: white there and below
        const text = (k === 0 && share > 0 ? "≤" : "") + label(share);
        const align = k === 0 ? "left" : k === curve.ticks.length - 1 ? "right" : "center";
        g.rect(kx + at * kw - 0.5, ky + 8, 1, 3, MUTED);
        g.text(text, kx + at * kw, ky + 18, { size: 11, color: MUTED, align });
        return text;
      });
      const what = { map: "this map's largest p", row: "each row's largest p", shared: "the largest p of any map", fixed: "p = 1" }[state.scale];
      g.text(`${curve.key} · darkest: ${what}`, kx, ky + 33, { size: 11, color: MUTED });
      let windowKey = null;
      if (windows[l] !== null) {  // the hatched grey, explained
        g.rect(kx, ky + 43, 24, 10, rgb(OUT));
        for (let s = 4; s < 34; s += 6) g.line(kx + Math.max(0, s - 10), ky + 43 + Math.min(10, s), kx + Math.min(24, s), ky + 43 + Math.max(0, s - 24), HATCH, 1);
        windowKey = ["hatched grey: out of reach, never scored", `layer ${l} is local: a query sees the keys within ` +
          `${reach(l)} positions of it (window ${windows[l]})`];
        g.text(windowKey[0], kx + 30, ky + 48, { size: 11, color: MUTED });
        g.text(windowKey[1], kx + 30, ky + 62, { size: 11, color: MUTED });
      }
      g.text(detail, kx, ky + (windowKey ? 80 : 50), { size: 12 });
      api.lastDraw = { view: "model", layer: l, head: sel, n, hover: hov && (hov.cell || hov.thumb), scale: state.scale,
                       curve: state.curve, top, key: keyLabels, map: { x: mx, y: my, size: M }, kind: layerKind(l), windowKey };
    },
    pick(x, y, W, H, sc) {
      const o = this.layout(W, H);
      const yc = y + sc;
      const h = Math.floor((x - o.x0) / (o.t + o.gap)), l = Math.floor((yc - o.y0) / (o.t + o.gap));
      if (h >= 0 && h < nh && l >= 0 && l < L && x - o.x0 - h * (o.t + o.gap) <= o.t && yc - o.y0 - l * (o.t + o.gap) <= o.t) {
        return { thumb: [l, h] };
      }
      const i = Math.floor(((yc - o.my) / o.M) * S), j = Math.floor(((x - o.mx) / o.M) * S);
      if (i >= 0 && i < S && j >= 0 && j < S) return { cell: [i, j] };
      return null;
    },
    thumbPoint(l, h, W, H, sc) {
      const o = this.layout(W, H);
      return { x: o.x0 + h * (o.t + o.gap) + o.t / 2, y: o.y0 + l * (o.t + o.gap) + o.t / 2 - sc };
    },
  };

  // ---- neuron view: one query's q, each key's k, q*k elementwise, q.k, / sqrt(hd), softmax ----
  function neuronNumbers(l, h, i) {
    const q = vector("q", l, h, i), keys = [], dots = new Float64Array(S), scaled = new Float64Array(S);
    let vmax = 0, pmax = 0, best = -Infinity;
    for (let d = 0; d < hd; d++) vmax = Math.max(vmax, Math.abs(q[d]));
    for (let j = 0; j < S; j++) {
      const k = vector("k", l, h, j);
      keys.push(k);
      let dot = 0;
      for (let d = 0; d < hd; d++) {
        dot += q[d] * k[d];
        vmax = Math.max(vmax, Math.abs(k[d]));
        pmax = Math.max(pmax, Math.abs(q[d] * k[d]));
      }
      dots[j] = dot;
      scaled[j] = dot / Math.sqrt(hd);
      if (visible(l, i, j)) best = Math.max(best, scaled[j]);
    }
    const probs = new Float64Array(S);
    let total = 0;
    for (let j = 0; j < S; j++) { probs[j] = visible(l, i, j) ? Math.exp(scaled[j] - best) : 0; total += probs[j]; }
    for (let j = 0; j < S; j++) probs[j] /= total;
    const stored = probRow(l, h, i);
    return { q, keys, dots, scaled, probs, stored, vmax, pmax };
  }
  const neuron = {
    rowH: 16, top: 92,
    layout(W) {
      const labelW = Math.min(120, Math.max(...tokens.map((t) => textWidth(t, 11))) + 8);
      const cw = Math.max(2, Math.min(7, Math.floor((W - labelW - 430) / (2 * hd))));
      const kx = labelW + 14, px = kx + hd * cw + 18, nx = px + hd * cw + 18;
      return { labelW, cw, kx, px, nx };
    },
    contentHeight() { return this.top + S * this.rowH + 8; },
    draw(g, W, H, sc) {
      const o = this.layout(W);
      const l = state.layer, h = Math.max(0, state.head), i = state.token;
      const nb = neuronNumbers(l, h, i);
      const hov = state.hover && state.hover.view === "neuron" ? state.hover : null;
      const first = Math.max(0, Math.floor(sc / this.rowH)), last = Math.min(S - 1, Math.floor((sc + H - this.top) / this.rowH));
      const ch = this.rowH - 3, cols = { dot: o.nx, scaled: o.nx + 62, bar: o.nx + 130, stored: o.nx + 250 };
      let argmax = 0;
      for (let j = 1; j < S; j++) if (nb.probs[j] > nb.probs[argmax]) argmax = j;
      for (let j = first; j <= last; j++) {
        const y = this.top + j * this.rowH - sc;
        if (hov && hov.i === j) g.rect(0, y - 1, W, this.rowH, "rgba(31,95,191,0.10)");
        const masked = !visible(l, i, j);
        g.text(clip(tokens[j], o.labelW - 4, 11), o.labelW, y + ch / 2, { size: 11, align: "right", weight: j === argmax ? "bold" : "normal", color: maskSet.has(j) ? ACCENT : INK });
        const k = nb.keys[j];
        for (let d = 0; d < hd; d++) {
          g.rect(o.kx + d * o.cw, y, o.cw, ch, diverging(k[d], nb.vmax));
          g.rect(o.px + d * o.cw, y, o.cw, ch, diverging(nb.q[d] * k[d], nb.pmax));
        }
        g.text(nb.dots[j].toFixed(2), cols.dot + 54, y + ch / 2, { size: 11, align: "right" });
        g.text(masked ? "masked" : nb.scaled[j].toFixed(2), cols.scaled + 54, y + ch / 2, { size: 11, align: "right", color: masked ? MUTED : INK });
        g.rect(cols.bar, y + 2, 76 * nb.probs[j], ch - 4, ACCENT);
        g.text(nb.probs[j].toFixed(3), cols.bar + 84, y + ch / 2, { size: 11 });
        g.text(nb.stored[j].toFixed(3), cols.stored + 54, y + ch / 2, { size: 11, align: "right", color: MUTED });
      }
      // fixed header: the query vector above the key column, and the column names
      g.rect(0, 0, W, this.top - 2, "#ffffff");
      g.text(`${layerName(l)}, head ${h}: query ${tokenName(i)} against every key`, 12, 12, { weight: "bold" });
      const extra = (meta.rotary ? "; q and k turned by their positions (rotary)" : "") +
        (meta.relative ? "; this model also adds relative-position scores, not shown here" : "") +
        (meta.causal ? "; keys after the query are masked (decoder)" : "") +
        (windows[l] === null ? "" : `; keys more than ${reach(l)} away are masked (local layer)`);
      g.text(`score = q·k / √${hd}, probability = softmax over the keys; colours: blue < 0 < red${extra}`, 12, 27, { size: 11, color: MUTED });
      g.text("q", o.labelW, 50, { align: "right", weight: "bold" });
      for (let d = 0; d < hd; d++) g.rect(o.kx + d * o.cw, 43, o.cw, ch, diverging(nb.q[d], nb.vmax));
      g.text(`query vector of ${clip(tokens[i], 90)} (${hd} numbers)`, o.px, 50, { size: 11, color: MUTED });
      const hy = this.top - 12;
      g.text("key", o.labelW, hy, { size: 11, color: MUTED, align: "right" });
      g.text("k (key vector)", o.kx, hy, { size: 11, color: MUTED });
      g.text("q × k, elementwise", o.px, hy, { size: 11, color: MUTED });
      g.text("q·k", cols.dot + 54, hy, { size: 11, color: MUTED, align: "right" });
      g.text(`÷ √${hd}`, cols.scaled + 54, hy, { size: 11, color: MUTED, align: "right" });
      g.text("softmax", cols.bar, hy, { size: 11, color: MUTED });
      g.text("stored p", cols.stored + 54, hy, { size: 11, color: MUTED, align: "right" });
      g.line(0, this.top - 3, W, this.top - 3, "#d8dde4", 1);
      api.lastDraw = {
        view: "neuron", layer: l, head: h, query: i, first, last,
        dots: Array.from(nb.dots), scaled: Array.from(nb.scaled), probs: Array.from(nb.probs), stored: Array.from(nb.stored),
      };
    },
    pick(x, y, W, H, sc) {
      if (y < this.top) return null;
      const j = Math.floor((y - this.top + sc) / this.rowH);
      return j >= 0 && j < S ? { i: j } : null;
    },
    point(side, j, W, sc) { return { x: this.layout(W).kx + 10, y: this.top + j * this.rowH + this.rowH / 2 - sc }; },
    describe(hov) {
      const l = state.layer, h = Math.max(0, state.head), nb = neuronNumbers(l, h, state.token), j = hov.i;
      return `${tokenName(state.token)} · ${tokenName(j)}: q·k = ${nb.dots[j].toFixed(3)}, ÷ √${hd} = ${nb.scaled[j].toFixed(3)}, ` +
        `softmax = ${nb.probs[j].toFixed(3)} (the model's: ${nb.stored[j].toFixed(3)})`;
    },
  };

  const views = { head, model, neuron };

  // ---- drawing the screen ----
  let pending = false;
  function render() {
    pending = false;
    const view = views[state.view];
    const W = scroller.clientWidth, H = scroller.clientHeight, ratio = window.devicePixelRatio || 1;
    spacer.style.height = `${Math.max(0, view.contentHeight(W, H) - H)}px`;
    if (canvas.width !== Math.round(W * ratio) || canvas.height !== Math.round(H * ratio)) {
      canvas.width = Math.round(W * ratio); canvas.height = Math.round(H * ratio);
      canvas.style.width = `${W}px`; canvas.style.height = `${H}px`;
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    const g = new CanvasPainter(ctx);
    g.rect(0, 0, W, H, "#ffffff");
    view.draw(g, W, H, scroller.scrollTop);
  }
  const redraw = () => { if (!pending) { pending = true; requestAnimationFrame(render); } };

  // ---- controls ----
  const layerSel = document.getElementById("layer"), headSel = document.getElementById("head"), tokenSel = document.getElementById("token");
  const scaleSel = document.getElementById("scale"), curveSel = document.getElementById("curve");
  for (let l = 0; l < L; l++) {
    layerSel.add(new Option(anyLocal ? `${l} · ${windows[l] === null ? "global" : "local"}` : String(l), String(l)));
    layerSel.options[l].title = layerKind(l);
  }
  headSel.add(new Option("mean", "-1"));
  for (let h = 0; h < nh; h++) headSel.add(new Option(String(h), String(h)));
  tokens.forEach((t, i) => tokenSel.add(new Option(`${i}: ${t}`, String(i))));
  function syncControls() {
    layerSel.value = String(state.layer); headSel.value = String(state.head); tokenSel.value = String(state.token); scaleSel.value = state.scale;
    curveSel.value = state.curve;
    headSel.options[0].disabled = state.view === "neuron";
    for (const b of document.querySelectorAll("#tabs button")) b.setAttribute("aria-selected", String(b.dataset.view === state.view));
    document.body.dataset.view = state.view;
    strip();
    if (decisionView) decisionView.mark();
  }
  function set(change) {
    Object.assign(state, change);
    if (state.view === "neuron" && state.head < 0) state.head = 0;  // the arithmetic is per head
    syncControls();
    redraw();
  }
  function showToken(i) {  // scroll the head and neuron views so row i is on screen
    const view = views[state.view];
    if (!view.rowH) return;
    const y = view.top + i * view.rowH - scroller.scrollTop, H = scroller.clientHeight;
    if (y < view.top || y + view.rowH > H - (view.bottom || 0)) scroller.scrollTop = Math.max(0, i * view.rowH - (H - view.top) / 2);
  }
  layerSel.addEventListener("change", () => set({ layer: Number(layerSel.value) }));
  headSel.addEventListener("change", () => set({ head: Number(headSel.value) }));
  tokenSel.addEventListener("change", () => { set({ token: Number(tokenSel.value), pinned: null }); showToken(state.token); });
  scaleSel.addEventListener("change", () => set({ scale: scaleSel.value }));
  curveSel.addEventListener("change", () => set({ curve: curveSel.value }));
  for (const b of document.querySelectorAll("#tabs button")) {
    b.addEventListener("click", () => {
      scrollTops[state.view] = scroller.scrollTop;
      set({ view: b.dataset.view, hover: null });
      scroller.scrollTop = scrollTops[state.view];
      readout.textContent = "\u00a0";
    });
  }
  scroller.addEventListener("scroll", redraw);
  window.addEventListener("resize", redraw);

  function pointer(event) {
    const r = canvas.getBoundingClientRect();
    return views[state.view].pick(event.clientX - r.left, event.clientY - r.top, scroller.clientWidth, scroller.clientHeight, scroller.scrollTop);
  }
  canvas.addEventListener("mousemove", (event) => {
    const hit = pointer(event), view = views[state.view];
    const hover = hit && !hit.map ? { view: state.view, ...hit } : null;
    const same = JSON.stringify(hover) === JSON.stringify(state.hover);
    state.hover = hover;
    if (hover && view.describe && hover.i !== undefined) readout.textContent = view.describe(hover);
    else if (hover && hover.thumb) readout.textContent = `${layerName(hover.thumb[0]).toLowerCase()}, head ${hover.thumb[1]}: click to open`;
    else if (!hover) readout.textContent = "\u00a0";
    if (!same) redraw();
  });
  canvas.addEventListener("mouseleave", () => { state.hover = null; redraw(); });
  canvas.addEventListener("click", (event) => {
    const hit = pointer(event);
    if (!hit) { if (state.pinned) set({ pinned: null }); return; }
    if (hit.map !== undefined) { scroller.scrollTop = Math.max(0, head.top + hit.map * head.rowH - scroller.clientHeight / 2); return; }
    if (hit.thumb) set({ layer: hit.thumb[0], head: hit.thumb[1] });
    else if (hit.cell) set({ token: hit.cell[0] });
    else if (state.view === "head") {  // a click keeps the token's lines isolated until it is clicked again
      const again = state.pinned && state.pinned.side === hit.side && state.pinned.i === hit.i;
      set({ token: hit.i, pinned: again ? null : { view: "head", side: hit.side, i: hit.i } });
    }
    else if (state.view === "neuron") set({ token: hit.i });
  });

  // ---- saving the view on screen ----
  function download(blob, name) {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = name;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  }
  const fileName = (ext) => `bertfn-${state.view}-layer${state.layer}-${state.head < 0 ? "mean" : "head" + state.head}.${ext}`;
  document.getElementById("save-svg").addEventListener("click", () => {
    const W = scroller.clientWidth, H = scroller.clientHeight, g = new SvgPainter(W, H);
    g.rect(0, 0, W, H, "#ffffff");
    const last = api.lastDraw;
    views[state.view].draw(g, W, H, scroller.scrollTop);
    api.lastDraw = last;
    download(new Blob([g.toString()], { type: "image/svg+xml" }), fileName("svg"));
  });
  document.getElementById("save-png").addEventListener("click", () => {
    render();
    canvas.toBlob((blob) => download(blob, fileName("png")), "image/png");
  });

  // ---- the side panels: predictions at [MASK] and the per-layer strip ----
  const predictions = document.getElementById("prediction-list");
  document.querySelector("#predictions h2").textContent = `Predictions at ${maskToken}`;
  if (!meta.predictions && meta.decision) {  // a fine-tuned head without an MLM head: its decision panel says it all
    document.getElementById("predictions").hidden = true;
  } else if (!meta.predictions) {
    predictions.innerHTML = `<p class="note">${escapeXml(meta.no_predictions || "")}</p>`;
  } else if (!meta.predictions.length) {
    predictions.innerHTML = `<p class="note">no ${escapeXml(maskToken)} in the text: ${escapeXml(meta.no_predictions || "")}put one in to see what the model predicts there</p>`;
  } else {
    for (const m of meta.predictions) {
      const box = document.createElement("div");
      box.className = "mask";
      box.innerHTML = `<h3 title="choose this token">${escapeXml(maskToken)} at ${m.position}</h3>` + m.top.map(([w, p]) =>
        `<div class="pred"><span class="word" title="${escapeXml(w)}">${escapeXml(w)}</span>` +
        `<span><div class="bar" style="width:${(100 * p).toFixed(1)}%"></div></span><span class="pct">${percent(p)}</span></div>`).join("");
      box.querySelector("h3").addEventListener("click", () => { set({ token: m.position }); showToken(m.position); });
      predictions.appendChild(box);
    }
  }
  const stripBox = document.getElementById("layer-strip");
  const maxNorm = Math.max(...data.norms);
  function strip() {
    const i = state.token, k = meta.top_k, lnS = Math.log(S);
    document.getElementById("layers-title").textContent = `Layer by layer at ${tokenName(i)}`;
    let rows = '<table><tr><th>layer</th><th>entropy per head</th><th>‖h‖</th><th>MLM head says</th></tr>';
    for (let r = 0; r <= L; r++) {
      const l = r - 1;  // row 0 is the embeddings' output
      let cells = "";
      if (l >= 0) {
        for (let h = 0; h < nh; h++) {
          const e = data.entropy[(l * nh + h) * S + i];
          cells += `<span style="background:${purple(e / lnS)}" title="head ${h}: ${e.toFixed(2)} nats (uniform: ${lnS.toFixed(2)})"></span>`;
        }
      }
      const norm = data.norms[r * S + i];
      let lens = "";
      if (hasLens) {
        const words = [];
        for (let t = 0; t < k; t++) {
          const at = (r * S + i) * k + t;
          words.push(`${meta.vocab[data.lens_ids[at]]} ${data.lens_probs[at].toFixed(2)}`);
        }
        lens = `<td class="lens" title="${escapeXml(words.join("\n"))}">${escapeXml(words.slice(0, 3).join(" · "))}</td>`;
      } else {
        lens = r === 0 ? `<td class="lens top" rowspan="${L + 1}" title="${escapeXml(meta.no_predictions || "")}">no MLM head</td>` : "";
      }
      const kind = l >= 0 && windows[l] !== null ? ` <span class="kind" title="${layerKind(l)}">local</span>` : "";
      rows += `<tr class="row${l === state.layer ? " current" : ""}" data-layer="${l}"><td>${l < 0 ? "emb" : l}${kind}</td>` +
        `<td><div class="cells">${cells}</div></td><td><span class="normbar" style="width:${(30 * norm / maxNorm).toFixed(1)}px"></span>${norm.toFixed(1)}</td>${lens}</tr>`;
    }
    stripBox.innerHTML = rows + "</table>";
    for (const tr of stripBox.querySelectorAll("tr.row")) {
      const l = Number(tr.dataset.layer);
      if (l >= 0) tr.addEventListener("click", () => set({ layer: l }));
    }
  }

  // ---- header and notes ----
  document.getElementById("summary").textContent =
    `${meta.model ? meta.model + " · " : ""}${S} tokens · ${L} layers × ${nh} heads of width ${hd}`;
  document.getElementById("text").textContent = meta.text;
  document.getElementById("notes").innerHTML =
    `<p>Stored in this file: attention probabilities as the square root rounded to multiples of 1/${levels} (a probability ` +
    `p is off by at most √p/${levels} + 1/${2 * levels}², ${(1 / levels).toFixed(3)} at p = 1 and ` +
    `${(0.1 / levels).toFixed(4)} at p = 0.01; only values below 1/${2 * levels}² = ${(1 / (2 * levels) ** 2).toExponential(1)} ` +
    `show as 0, at most ${percent(S / (2 * levels) ** 2)} of a row at these ${S} tokens); queries and keys as ` +
    "8-bit integers with one scale per vector (off by at most 1/254 of the " +
    `vector's largest entry${meta.rotary ? ", as turned by their positions (rotary)" : ""}), from which the neuron view ` +
    `recomputes q·k; ` + (hasLens ? `entropies, norms and the predictions at ${escapeXml(maskToken)} ` +
    "computed in full precision by bertfn before saving, the per-layer predictions by the MLM head in bf16 (within 0.03 " +
    "of full precision).</p>" : "entropies and norms computed in full precision by bertfn before saving (no MLM head: " +
    "no predictions).</p>") + (anyLocal
    ? `<p>Local layers (${windows.flatMap((w, l) => (w === null ? [] : [l])).join(", ")}): each query attends only to ` +
      "the keys within half the layer's window of it; the maps draw the keys out of reach hatched grey, where the " +
      "model computes no score at all, and white stays what it is elsewhere: attention the model gave almost none.</p>"
    : "") + "<p>Made by bertfn: the numbers come from bertfn.trace; nothing is fetched.</p>";
  if (meta.final_norm) {
    document.getElementById("layers-note").insertAdjacentText("beforeend", " This model normalizes its hidden " +
      "states only after the last layer (pre-LN), so each layer's output goes through that final LayerNorm before the MLM head, as the last one does.");
  }

  // ---- the decision panel (a checkpoint with a task head, or ESM-2's contact head): meta.decision ----
  /* meta.decision: the prediction (classes | entities | span), targets [{name, label, position, logit, value,
   * baseline_value, delta}], steps; data.decision_tokens (T, S) integrated gradients, data.decision_heads (T, L, nh)
   * each head's direct part of the target's logit, data.decision_contacts (r, r) uint8 round(255 p). */
  function decisionPanel(dec) {
    document.getElementById("decision").hidden = false;
    const T = dec.targets.length;
    const pred = document.getElementById("decision-prediction");
    const title = document.getElementById("decision-title");
    const spanSet = new Set();
    if (dec.classes) {
      title.textContent = "The decision: labels";
      pred.innerHTML = dec.classes.scores.map(([w, p]) =>
        `<div class="pred"><span class="word" title="${escapeXml(w)}">${escapeXml(w)}</span>` +
        `<span><div class="bar" style="width:${(100 * Math.max(0, Math.min(1, p))).toFixed(1)}%"></div></span><span class="pct">` +
        `${dec.classes.function === "none" ? p.toFixed(3) : percent(p)}</span></div>`).join("") +
        `<p class="note">${escapeXml(dec.classes.function)} of the classifier's logits, as bertfn.classify gives them</p>`;
    } else if (dec.entities) {
      title.textContent = "The decision: a label per token";
      const shown = dec.entities.filter((e) => e.entity !== "O");
      pred.innerHTML = (shown.length ? shown.map((e) =>
        `<div class="entity"><span>${e.index}</span><span class="word">${escapeXml(e.word)}</span><span>${escapeXml(e.entity)}</span>` +
        `<span class="pct">${percent(e.score)}</span></div>`).join("") : '<p class="note">no entity: every token is labelled O</p>') +
        `<p class="note">${shown.length} of ${dec.entities.length} tokens in an entity (bertfn.tag, every token's label)</p>`;
    } else if (dec.span) {
      title.textContent = "The decision: the answer";
      const [a, b] = dec.span.tokens;
      for (let i = a; i <= b; i++) spanSet.add(i);
      pred.innerHTML = `<p class="answer">answer: <b>${escapeXml(dec.span.answer)}</b> (${percent(dec.span.score)}), tokens ${a}–${b}, ` +
        `characters ${dec.span.start}–${dec.span.end} of the context</p><p class="note">framed among the tokens below (bertfn.answer)</p>`;
    } else {
      title.textContent = "The decision: contacts";
    }
    const why = document.getElementById("decision-why"), sel = document.getElementById("decision-target");
    const boxes = [], cells = [];
    const view = { target: 0, shades: null, parts: null, mark() {} };
    if (!T) {
      why.hidden = true;
    } else {
      dec.targets.forEach((t, k) => sel.add(new Option(t.name, String(k))));
      const tokBox = document.getElementById("decision-tokens");
      tokens.forEach((t, i) => {
        const span = document.createElement("span");
        span.textContent = t;
        if (spanSet.has(i)) span.className = "span";
        span.addEventListener("click", () => { set({ token: i }); showToken(i); });
        tokBox.appendChild(span);
        boxes.push(span);
      });
      let rows = "<table><tr><td></td>" + [...Array(nh).keys()].map((h) => `<td>h${h}</td>`).join("") + "</tr>";
      for (let l = 0; l < L; l++) {
        rows += `<tr><td>L${l}</td>` + [...Array(nh).keys()].map((h) => `<td class="part" data-layer="${l}" data-head="${h}"></td>`).join("") + "</tr>";
      }
      const grid = document.getElementById("decision-heads");
      grid.innerHTML = rows + "</table>";
      for (const td of grid.querySelectorAll("td.part")) {
        cells.push(td);
        td.addEventListener("click", () => set({ layer: Number(td.dataset.layer), head: Number(td.dataset.head) }));
      }
      const key = document.getElementById("decision-key");
      const draw = () => {
        const k = view.target, t = dec.targets[k];
        const row = data.decision_tokens.subarray(k * S, (k + 1) * S), parts = data.decision_heads.subarray(k * L * nh, (k + 1) * L * nh);
        let vmax = 0, hmax = 0;
        for (const v of row) vmax = Math.max(vmax, Math.abs(v));
        for (const v of parts) hmax = Math.max(hmax, Math.abs(v));
        view.shades = boxes.map((b, i) => {
          const colour = diverging(row[i], vmax);
          b.style.background = colour;
          b.style.color = Math.abs(row[i]) > 0.6 * (vmax || 1) ? "#ffffff" : INK;
          b.title = `${tokenName(i)}: attribution ${row[i] >= 0 ? "+" : ""}${row[i].toPrecision(3)} to ${t.name}`;
          return colour;
        });
        view.parts = cells.map((td, n) => {
          const colour = diverging(parts[n], hmax);
          td.style.background = colour;
          td.title = `layer ${td.dataset.layer}, head ${td.dataset.head}: ${parts[n] >= 0 ? "+" : ""}${parts[n].toPrecision(3)} ` +
            `of the logit of ${t.name} (click: show this head's attention)`;
          return colour;
        });
        key.innerHTML = `<span>−${vmax.toPrecision(2)}</span><canvas class="ramp" width="21" height="1"></canvas><span>+${vmax.toPrecision(2)}</span>` +
          "<span>blue: against, red: for</span>";
        const c = key.querySelector("canvas").getContext("2d");
        for (let n = 0; n <= 20; n++) { c.fillStyle = diverging(n / 10 - 1, 1); c.fillRect(n, 0, 1, 1); }
        let sum = 0;
        for (const v of row) sum += v;
        document.getElementById("decision-value").textContent =
          `logit ${t.logit.toFixed(3)}; f(text) − f(baseline) = ${(t.value - t.baseline_value).toFixed(3)}, the attributions sum to ` +
          `${sum.toFixed(3)} (delta ${t.delta.toExponential(1)}); heads' parts: dark at ±${hmax.toPrecision(2)}`;
        api.decision = { target: k, name: t.name, shades: view.shades, parts: view.parts, vmax, hmax };
      };
      view.mark = () => {
        for (const td of cells) td.classList.toggle("current", Number(td.dataset.layer) === state.layer && Number(td.dataset.head) === state.head);
      };
      sel.addEventListener("change", () => { view.target = Number(sel.value); draw(); });
      draw();
    }
    const contactBox = document.getElementById("decision-contacts");
    if (dec.contacts && data.decision_contacts) {
      const r = dec.contacts.residues, codes = data.decision_contacts, cv = document.getElementById("contact-map");
      cv.width = cv.height = r;
      cv.style.width = cv.style.height = "340px";
      const img = cv.getContext("2d").createImageData(r, r);
      for (let m = 0; m < r * r; m++) {
        const col = BLUES[codes[m]];
        img.data[4 * m] = col[0]; img.data[4 * m + 1] = col[1]; img.data[4 * m + 2] = col[2]; img.data[4 * m + 3] = 255;
      }
      cv.getContext("2d").putImageData(img, 0, 0);
      cv.title = "residue i (row) and j (column): the probability that they touch; white 0, dark blue 1";
      document.getElementById("contact-note").textContent = `${r} residues (token i + 1 is residue i); the probability ` +
        `that two residues touch, white 0 to dark blue 1 (largest here ${dec.contacts.max.toFixed(3)}), by ESM-2's contact ` +
        "head from these attention maps (bertfn.contacts)";
      api.decisionContacts = { residues: r, width: cv.width };
    } else {
      contactBox.hidden = true;
    }
    document.getElementById("decision-note").textContent = T ? `Tokens: integrated gradients to the word embeddings ` +
      `with ${dec.steps} steps (fewer than the usual 50, so that the page builds fast; delta says how far their sum is ` +
      `from complete), from a baseline of ${dec.baseline} in place of every token but the special ones. Heads: each ` +
      "head's direct part of the logit (direct logit attribution, the head's nonlinearities frozen at this run); " +
      "click one to see its attention." : "";
    return view;
  }
  const decisionView = meta.decision ? decisionPanel(meta.decision) : null;

  // ---- for tests and the console ----
  api.set = set;
  api.render = render;
  api.tokenPoint = (side, i) => {  // page coordinates of token i (side "q" or "k") in the head or neuron view, scrolled into view
    showToken(i); render();
    const r = canvas.getBoundingClientRect(), p = views[state.view].point(side, i, scroller.clientWidth, scroller.scrollTop);
    return { x: r.left + p.x, y: r.top + p.y };
  };
  api.mapCanvas = (l, h, n = S) => mapCanvas(l, h, n);  // the map of layer l, head h as the chosen colours draw it
  api.thumbPoint = (l, h) => {  // page coordinates of the small map of layer l, head h in the model view
    const r = canvas.getBoundingClientRect(), p = model.thumbPoint(l, h, scroller.clientWidth, scroller.clientHeight, scroller.scrollTop);
    return { x: r.left + p.x, y: r.top + p.y };
  };
  syncControls();
  render();
  showToken(state.token);  // open on the chosen token (the first [MASK]), not on token 0
  render();
  return api;
}

(async function main() {
  const readout = document.getElementById("readout");
  try {
    const meta = JSON.parse(document.getElementById("bertfn-meta").textContent);
    readout.textContent = "unpacking…";
    const data = await unpack(meta);
    readout.textContent = "\u00a0";
    window.bertfnExplorer = explorer(meta, data);
    document.body.dataset.ready = "1";
  } catch (error) {
    readout.className = "error";
    readout.textContent = `The explorer could not start: ${error.message}`;
    throw error;
  }
})();

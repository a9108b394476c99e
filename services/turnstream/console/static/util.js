// Small helpers shared by the views: escaping, formatting, element building.

const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** Text made safe to put in HTML (every value from the API goes through this). */
export function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ESC[c]);
}

/** `html\`...\`` with every interpolated value escaped, except `raw(...)` ones. */
export function html(strings, ...values) {
  let out = strings[0];
  values.forEach((v, i) => {
    out += (Array.isArray(v) ? v.map(toHtml).join("") : toHtml(v)) + strings[i + 1];
  });
  return new Raw(out);
}

class Raw {
  constructor(text) {
    this.text = text;
  }
  toString() {
    return this.text;
  }
}

export function raw(text) {
  return new Raw(text);
}

function toHtml(v) {
  return v instanceof Raw ? v.text : esc(v);
}

export function $(selector, root = document) {
  return root.querySelector(selector);
}

export function ms(value) {
  if (value == null || Number.isNaN(value)) return "—";
  if (value < 1000) return `${Math.round(value)} ms`;
  if (value < 60_000) return `${(value / 1000).toFixed(value < 10_000 ? 2 : 1)} s`;
  return `${Math.floor(value / 60_000)} min ${Math.round((value % 60_000) / 1000)} s`;
}

export function ago(iso, now = Date.now()) {
  if (!iso) return "—";
  const s = Math.max(0, (now - Date.parse(iso)) / 1000);
  if (s < 5) return "just now";
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
}

export function short(id, n = 8) {
  if (!id) return "—";
  return id.length > n + 2 ? `…${id.slice(-n)}` : id;
}

export function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

/** A value shown whole when short, folded in a <details> when long. */
export function folded(label, value, limit = 240, key = "") {
  const compact = typeof value === "string" ? value : JSON.stringify(value);
  if (compact.length <= limit && !compact.includes("\n")) {
    return html`<code class="inline">${compact}</code>`;
  }
  const text = pretty(value);
  const head = text.slice(0, 80).replace(/\s+/g, " ");
  return html`<details class="fold" data-key="${key}"><summary>${label} · ${text.length.toLocaleString()} chars · <span class="muted">${head}…</span></summary><pre>${text}</pre></details>`;
}

export function debounce(fn, wait) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), wait);
  };
}

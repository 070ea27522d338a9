// Shared page state and how numbers and times are shown.

export const page = {
  normalized: false,     // prices per H100-equivalent GPU-hour (price / the market's perf factor)
  markets: new Map(),    // id -> market from GET /v1/markets
};

// A price string of the API in the chosen unit, 4 decimals.
export function px(price, market) {
  if (price === null || price === undefined) return '—';
  const value = Number(price);
  if (!page.normalized) return value.toFixed(4);
  const m = page.markets.get(market);
  const perf = m ? Number(m.perf_factor) : 1;
  return (value / perf).toFixed(4);
}

// The same as a number, for charts.
export function pxNumber(price, market) {
  return price === null || price === undefined ? null : Number(px(price, market));
}

export const unitLabel = () => (page.normalized ? 'USD per H100-eq. hour' : 'USD per GPU-hour');

export function time(iso) {
  return iso ? iso.replace('T', ' ').replace(/(:\d\d)Z$/, '$1') : '—';
}
export function clock(iso) {
  return iso ? iso.slice(11, 19) : '—';
}
export function window_(start, end) {
  if (!start) return '—';
  return `${time(start).slice(0, 16)} → ${end ? time(end).slice(0, 16) : '…'}`;
}
export const unixSeconds = (iso) => Math.floor(Date.parse(iso) / 1000);

// "2026-12" months: the book buckets of the coming months (monthly tenors).
export function comingTenors(count, from = new Date()) {
  const out = [];
  for (let i = 0; i < count; ++i) {
    const d = new Date(Date.UTC(from.getUTCFullYear(), from.getUTCMonth() + i, 1));
    out.push(d.toISOString().slice(0, 7));
  }
  return out;
}

// A table body from rows of cells (strings or nodes); `empty` when there are none.
export function fillTable(tbody, rows, empty) {
  tbody.replaceChildren();
  if (!rows.length) {
    const tr = tbody.insertRow();
    const td = tr.insertCell();
    td.colSpan = tbody.parentElement.tHead ? tbody.parentElement.tHead.rows[0].cells.length : 1;
    td.className = 'empty';
    td.textContent = empty;
    return;
  }
  for (const row of rows) tbody.append(makeRow(row));
}

export function makeRow(cells, className) {
  const tr = document.createElement('tr');
  if (className) tr.className = className;
  for (const cell of cells) {
    const td = tr.insertCell();
    if (cell instanceof Node) td.append(cell);
    else td.textContent = cell;
  }
  return tr;
}

export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  e.append(...children);
  return e;
}

// Shared page state and how numbers and times are shown.

export const page = {
  normalized: false,     // prices per H100-equivalent GPU-hour (price / the market's perf factor)
  markets: new Map(),    // id -> market from GET /v1/markets
};

// ---- money: decimal strings of the API as exact integers (BigInt), never floats (STYLE.md) --------

// A decimal string as an integer count of 10^-scale units plus its scale: "2.05" -> {units: 205n, scale: 2}.
function decimal(s) {
  const m = /^\s*(-?)(\d+)(?:\.(\d*))?\s*$/.exec(String(s));
  if (!m) return null;
  const frac = m[3] || '';
  const units = BigInt(m[2] + frac);
  return { units: m[1] ? -units : units, scale: frac.length };
}
const TEN = 10n;
const pow10 = (n) => TEN ** BigInt(n);
// a / b rounded half to even (b > 0), as gpuexd rounds money (matching/money.hpp div_half_even).
function divRound(a, b) {
  const q = a / b;  // truncated toward zero
  const r = a % b;
  const twice = 2n * (r < 0n ? -r : r);
  if (twice > b || (twice === b && q % 2n !== 0n)) return a < 0n ? q - 1n : q + 1n;
  return q;
}
// An integer count of 10^-decimals units as a string with exactly `decimals` decimals.
function units(n, decimals) {
  const neg = n < 0n;
  const digits = (neg ? -n : n).toString().padStart(decimals + 1, '0');
  const whole = digits.slice(0, digits.length - decimals);
  const frac = decimals ? '.' + digits.slice(digits.length - decimals) : '';
  return (neg && /[1-9]/.test(digits) ? '-' : '') + whole + frac;
}

// Micro-dollars (BigInt) of a money string of the API ("2.0500"), null when there is none.
export function micros(s) {
  if (s === null || s === undefined) return null;
  const d = decimal(s);
  if (!d) return null;
  return d.scale <= 6 ? d.units * pow10(6 - d.scale) : divRound(d.units, pow10(d.scale - 6));
}

// A money string shown with `decimals` decimals, rounded half to even: money("0.01015", 4) = "0.0102".
export function money(s, decimals = 4) {
  const m = micros(s);
  return m === null ? '—' : units(divRound(m * pow10(decimals), 10n ** 6n), decimals);
}

// A money string without the zeros that end it: plainMoney("0.0100") = "0.01".
export function plainMoney(s) {
  const m = micros(s);
  return m === null ? '—' : units(m, 6).replace(/\.?0+$/, '');
}

// The quantity-weighted average of money strings, `decimals` decimals: [[quantity, "2.52"], ...].
export function averageMoney(weighted, decimals = 4) {
  let total = 0n;
  let count = 0n;
  for (const [quantity, price] of weighted) {
    total += BigInt(quantity) * micros(price);
    count += BigInt(quantity);
  }
  return count ? units(divRound(total * pow10(decimals), count * 10n ** 6n), decimals) : '—';
}

// Orders money strings, for sorting: compareMoney("2.5", "10") < 0.
export function compareMoney(a, b) {
  const d = micros(a) - micros(b);
  return d < 0n ? -1 : d > 0n ? 1 : 0;
}

// A price string of the API in the chosen unit, 4 decimals: per GPU-hour, or per H100-equivalent
// GPU-hour (price ÷ the market's performance factor, computed exactly).
export function px(price, market) {
  if (price === null || price === undefined) return '—';
  if (!page.normalized) return money(price, 4);
  const m = page.markets.get(market);
  const perf = decimal(m ? m.perf_factor : '1');
  const p = micros(price);
  if (p === null || !perf || perf.units <= 0n) return '—';
  // price / (perf.units / 10^perf.scale) in 10^-4 units = p * 10^perf.scale / (perf.units * 100).
  return units(divRound(p * pow10(perf.scale), perf.units * 100n), 4);
}

// The same as a number, for the charts: the chart library takes only numbers, so the exact string
// above becomes one at the very end, for drawing (no arithmetic is done on it).
export function pxNumber(price, market) {
  const text = price === null || price === undefined ? '—' : px(price, market);
  return text === '—' ? null : Number(text);
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

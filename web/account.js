// The account view: after an API key is pasted (kept in this tab's sessionStorage only), providers
// register pools and post asks, buyers place bids with an all-in preview, and everyone sees their
// open orders, fills and leases move live on the private channels.
import { call, get, setKey } from './api.js';
import { page, time, window_, fillTable, makeRow, el, money, plainMoney, averageMoney } from './format.js';

const $ = (id) => document.getElementById(id);
const KEY_STORAGE = 'gpuex.api_key';
const LIST_LIMIT = 100;
const usd = (p) => money(p, 4);  // exact, from the decimal string: no floats for money (STYLE.md)
// Orders that still rest in the book (and can be cancelled): a partly filled one too.
const RESTING = new Set(['open', 'partially_filled']);

// ---- forms: bodies from inputs, API errors next to the field at fault -------------------------

function clearErrors(form) {
  form.querySelectorAll('.field-error').forEach((e) => e.remove());
  form.querySelectorAll('[aria-invalid]').forEach((e) => e.removeAttribute('aria-invalid'));
  form.querySelectorAll('.form-error, .form-result').forEach((e) => { e.textContent = ''; });
}

// The API names the field at fault (`field`, e.g. "price" or "regions"); our inputs carry those names.
function showError(form, error) {
  const text = error.code ? `${error.message} (${error.code})` : error.message;
  const name = error.field ? error.field.split(/[.[]/)[0] : null;
  const input = name ? form.querySelector(`[name="${CSS.escape(name)}"]`) : null;
  if (!input) {
    form.querySelector('.form-error').textContent = text;
    return;
  }
  const label = input.closest('label') || input.parentElement;
  label.append(el('small', { class: 'field-error', 'data-field': name, role: 'alert' }, text));
  input.setAttribute('aria-invalid', 'true');
}

function result(form, text) {
  form.querySelector('.form-result').textContent = text;
}

// Whole numbers go as JSON integers, hours as seconds; anything else goes as typed, for the API to judge.
const integer = (s) => (/^-?\d+$/.test(s) ? Number(s) : s);
const seconds = (hours) => (/^\d+(\.\d+)?$/.test(hours) ? Math.round(Number(hours) * 3600) : hours);
const utc = (local) => (local ? `${local}:00Z` : local);   // a datetime-local read as UTC
const localInput = (date) => date.toISOString().slice(0, 16);

function reader(form) {
  const data = new FormData(form);
  const text = (name) => String(data.get(name) ?? '').trim();
  return {
    text,
    all: (name) => data.getAll(name).map(String),
    on: (name) => data.get(name) !== null,
    // Adds body[name] = convert(value) when the input is not empty.
    opt(body, name, convert = (s) => s) {
      const v = text(name);
      if (v !== '') body[name] = convert(v);
    },
  };
}

function bidBody(form) {
  const r = reader(form);
  const body = { side: 'buy', market: r.text('market'), price: r.text('price'), quantity: integer(r.text('quantity')) };
  if (r.text('mode') === 'spot') {
    body.duration = seconds(r.text('duration'));
  } else {
    body.start = utc(r.text('start'));
    body.end = utc(r.text('end'));
  }
  body.time_in_force = r.text('time_in_force');
  if (body.time_in_force === 'gtd') body.expire_at = utc(r.text('expire_at'));
  if (r.on('post_only')) body.post_only = true;
  const tiers = r.all('tiers');
  if (tiers.length) body.tiers = tiers;
  r.opt(body, 'regions', (s) => s.split(/[\s,]+/).filter(Boolean).map((x) => x.toUpperCase()));
  for (const flag of ['nvlink', 'single_pool', 'interruptible', 'green_only']) if (r.on(flag)) body[flag] = true;
  r.opt(body, 'min_fabric');
  r.opt(body, 'min_fabric_gbps', integer);
  r.opt(body, 'min_chunk', integer);
  for (const measure of ['min_sla_pct', 'max_pue', 'min_renewable_pct', 'max_carbon_g_per_kwh']) r.opt(body, measure);
  return body;
}

function askBody(form) {
  const r = reader(form);
  const body = { side: 'sell', pool_id: r.text('pool_id'), price: r.text('price'), quantity: integer(r.text('quantity')),
                 start: utc(r.text('start')), end: utc(r.text('end')) };
  r.opt(body, 'min_chunk', integer);
  r.opt(body, 'min_duration', seconds);
  return body;
}

function poolBody(form) {
  const r = reader(form);
  const body = { market: r.text('market'), region: r.text('region').toUpperCase(), tier: r.text('tier'),
                 nvlink: r.on('nvlink'), fabric: r.text('fabric') };
  for (const n of ['gpus_per_node', 'nodes', 'fabric_gbps']) r.opt(body, n, integer);
  for (const n of ['sla_pct', 'pue', 'renewable_pct', 'carbon_g_per_kwh', 'egress_usd_per_gb',
                   'storage_usd_per_gb_month', 'ip_usd_per_month']) r.opt(body, n);
  return body;
}

// ---- the view -------------------------------------------------------------------------------

export class AccountView {
  constructor(stream) {
    this.stream = stream;
    this.scopes = [];
    this.orders = new Map();
    this.fills = [];
    this.leases = new Map();
    this.pools = [];
    this.quoteTimer = null;
    this.poolTimer = null;

    $('key-form').addEventListener('submit', (e) => {
      e.preventDefault();
      this.useKey($('key-form').elements.key.value.trim());
    });
    $('forget-key').addEventListener('click', () => this.forget());
    // A key refused when the stream reconnects (revoked meanwhile): back to the key form, saying why.
    this.stream.onAuthLost = (error) => {
      this.forget();
      showError($('key-form'), error);
    };
    this.handle($('bid-form'), bidBody, (body) => call('POST', '/v1/orders', body), (res) => this.placed(res));
    this.handle($('ask-form'), askBody, (body) => call('POST', '/v1/orders', body), (res) => this.placed(res));
    this.handle($('pool-form'), poolBody, (body) => call('POST', '/v1/pools', body), (pool) => {
      this.loadPools();
      return `pool ${pool.id} registered (green tier: ${pool.green_tier}${pool.verified ? '' : ', until verified: none'})`;
    });

    const bid = $('bid-form');
    const shape = () => {
      const r = reader(bid);
      bid.dataset.mode = r.text('mode');
      bid.dataset.tif = r.text('time_in_force');
    };
    // One preview per pause in editing (a text field fires input while typing and change on leaving).
    const previewSoon = () => {
      clearTimeout(this.quoteTimer);
      this.quoteTimer = setTimeout(() => this.preview(), 400);
    };
    bid.addEventListener('change', shape);
    bid.addEventListener('input', previewSoon);
    bid.addEventListener('change', previewSoon);
    shape();
  }

  start() {
    for (const form of [$('bid-form'), $('pool-form')]) {
      form.elements.market.replaceChildren(...[...page.markets.values()].map((m) => el('option', { value: m.id }, m.name)));
    }
    // Defaults: a forward week from the first of next month; asks for 30 days from now.
    const now = new Date();
    const month = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));
    const bid = $('bid-form').elements;
    bid.start.value = localInput(month);
    bid.end.value = localInput(new Date(month.getTime() + 7 * 86400e3));
    bid.expire_at.value = localInput(new Date(now.getTime() + 86400e3));
    $('ask-form').elements.start.value = localInput(now);  // a start that passed is clipped to now
    $('ask-form').elements.end.value = localInput(new Date(now.getTime() + 30 * 86400e3));
    const key = sessionStorage.getItem(KEY_STORAGE);
    if (key) this.useKey(key);
  }

  // The market view's market becomes the default of the forms.
  follow(market) {
    $('bid-form').elements.market.value = market;
    $('pool-form').elements.market.value = market;
  }

  handle(form, body, send, done) {
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      clearErrors(form);
      const button = form.querySelector('button[type=submit]');
      button.disabled = true;
      try {
        result(form, done(await send(body(form))));
      } catch (error) {
        showError(form, error);
      } finally {
        button.disabled = false;
      }
    });
  }

  async useKey(key) {
    const form = $('key-form');
    clearErrors(form);
    if (!key) return showError(form, { message: 'paste an API key first', field: 'key' });
    let who;
    try {
      who = await this.stream.auth(key);
    } catch (error) {
      sessionStorage.removeItem(KEY_STORAGE);
      return showError(form, error);
    }
    sessionStorage.setItem(KEY_STORAGE, key);
    setKey(key);
    form.elements.key.value = '';
    this.scopes = who.scopes;
    $('whoami').textContent = `account ${who.account_id} · scopes: ${who.scopes.join(', ')}`;
    const can = (s) => this.scopes.includes(s);
    $('account-panels').hidden = false;
    $('buy-panel').hidden = !can('trade');
    $('provide-panel').hidden = !can('provide');
    for (const id of ['orders-panel', 'fills-panel', 'leases-panel']) $(id).hidden = !can('read');
    if (can('read')) {
      this.stream.subscribe('orders', (m) => this.onOrder(m.order), () => this.loadOrders());
      this.stream.subscribe('fills', (m) => this.onFill(m.fill), () => this.loadFills());
      this.stream.subscribe('leases', (m) => this.onLease(m), () => this.loadLeases());
      this.loadOrders();
      this.loadFills();
      this.loadLeases();
    }
    if (can('provide')) this.loadPools();
    this.preview();
  }

  forget() {
    sessionStorage.removeItem(KEY_STORAGE);
    setKey(null);
    this.stream.auth(null);
    this.scopes = [];
    $('whoami').textContent = '';
    $('account-panels').hidden = true;
    this.orders.clear();
    this.fills = [];
    this.leases.clear();
  }

  placed({ order, fills }) {
    this.onOrder(order);
    for (const f of fills) this.onFill(f);
    const filled = order.side === 'buy' ? `${order.filled_quantity} of ${order.quantity} GPUs filled`
                                        : `${order.filled_gpu_hours} GPU-hours sold`;
    const why = order.reject_reason ? ` (${order.reject_reason})` : '';
    return `order ${order.id}: ${order.status}${why}, ${filled}`;
  }

  // ---- lists ----

  async loadOrders() {
    const res = await get(`/v1/orders?status=open&limit=${LIST_LIMIT}`).catch(() => null);
    if (!res) return;
    this.orders = new Map(res.orders.map((o) => [o.id, o]));
    this.renderOrders();
  }

  async loadFills() {
    const res = await get(`/v1/fills?limit=${LIST_LIMIT}`).catch(() => null);
    if (!res) return;
    this.fills = res.fills;
    this.renderFills();
  }

  async loadLeases() {
    const res = await get(`/v1/leases?limit=${LIST_LIMIT}`).catch(() => null);
    if (!res) return;
    this.leases = new Map(res.leases.map((l) => [l.id, l]));
    this.renderLeases();
  }

  async loadPools() {
    const res = await get('/v1/pools?limit=1000').catch(() => null);
    if (!res) return;
    this.pools = res.pools;
    const select = $('ask-form').elements.pool_id;
    const chosen = select.value;
    select.replaceChildren(...this.pools.map((p) =>
      el('option', { value: p.id }, `pool ${p.id} · ${p.market} · ${p.region} · ${p.gpus} GPUs`)));
    if (chosen) select.value = chosen;
    fillTable($('pools').tBodies[0], this.pools.map((p) => [
      p.id, p.market, `${p.tier.replace('_', ' ')} · ${p.region}`, String(p.gpus), String(p.offered_gpus),
      String(p.leased_gpus), p.verified ? p.green_tier : `${p.green_tier} (unverified)`,
    ]), 'no pools yet: register one below');
  }

  onOrder(order) {
    if (RESTING.has(order.status)) this.orders.set(order.id, order);
    else this.orders.delete(order.id);
    this.renderOrders();
    this.poolsChanged();
  }

  onFill(fill) {
    if (this.fills.some((f) => f.trade_id === fill.trade_id && f.order_id === fill.order_id)) return;
    this.fills.unshift(fill);
    this.fills.length = Math.min(this.fills.length, LIST_LIMIT);
    this.renderFills();
  }

  onLease(msg) {
    if (msg.type === 'preempted') {
      const notice = `lease ${msg.lease_id}: ${msg.quantity} GPUs preempted at ${time(msg.preempted_at)}, ending ${time(msg.ends_at)} (by trade ${msg.by_trade})`;
      $('notices').prepend(el('li', { class: 'preempted' }, notice));
      get(`/v1/leases/${msg.lease_id}`).then((l) => this.onLease({ lease: l })).catch(() => {});
      return;
    }
    this.leases.set(msg.lease.id, msg.lease);
    this.renderLeases();
    this.poolsChanged();
  }

  poolsChanged() {
    if (!this.scopes.includes('provide')) return;
    clearTimeout(this.poolTimer);
    this.poolTimer = setTimeout(() => this.loadPools(), 1000);
  }

  renderOrders() {
    const rows = [...this.orders.values()].sort((a, b) => Number(b.id) - Number(a.id)).map((o) => {
      const cancel = el('button', { type: 'button', class: 'small', 'data-order': o.id }, 'Cancel');
      cancel.addEventListener('click', () => this.cancel(o.id, cancel));
      const qty = o.side === 'buy' ? String(o.quantity) : `${o.quantity}/slot`;
      const filled = o.side === 'buy' ? String(o.filled_quantity) : `${o.filled_gpu_hours} GPU-h`;
      const span = o.duration ? `${o.duration / 3600} h from match` : window_(o.start, o.end);
      return [o.id, o.side, o.market, usd(o.price), qty, filled, span, o.status, cancel];
    });
    fillTable($('orders').tBodies[0], rows, 'no open orders');
  }

  async cancel(id, button) {
    $('orders-error').textContent = '';
    button.disabled = true;
    try {
      this.onOrder(await call('DELETE', `/v1/orders/${id}`));
    } catch (error) {
      $('orders-error').textContent = `order ${id}: ${error.message} (${error.code})`;
      button.disabled = false;
    }
  }

  renderFills() {
    fillTable($('fills').tBodies[0], this.fills.map((f) => [
      time(f.time), f.order_id, usd(f.price) + (f.green_discount_bps ? ` (−${f.green_discount_bps / 100} %)` : ''),
      String(f.quantity), window_(f.start, f.end), f.liquidity,
    ]), 'no fills yet');
  }

  renderLeases() {
    const rows = [...this.leases.values()].sort((a, b) => Number(b.id) - Number(a.id)).map((l) => {
      const preempted = l.preempted_at && l.status !== 'preempted' ? `, preempted: ends ${time(l.ends_at)}` : '';
      const status = el('span', { class: `status ${l.preempted_at ? 'preempted' : l.status}` }, l.status + preempted);
      return [l.id, l.role, l.market, String(l.quantity), window_(l.start, l.ends_at || l.end), usd(l.price), status,
              `$${money(l.owed_usd, 2)}`];
    });
    fillTable($('leases').tBodies[0], rows, 'no leases yet');
  }

  // ---- the all-in preview: POST /v1/quote with the bid as it stands --------------------------

  async preview() {
    if (!this.scopes.includes('trade')) return;
    const form = $('bid-form');
    const body = bidBody(form);
    const summary = $('quote-summary');
    if (!body.price || !body.quantity) {
      fillTable($('quote').tBodies[0], [], 'enter a price and a quantity');
      summary.textContent = '';
      return;
    }
    const r = reader(form);
    r.opt(body, 'egress_gb_per_gpu_hour');
    r.opt(body, 'storage_gb');
    // The order's own body, time in force and post_only included (API.md: the quote takes the same body
    // as POST /v1/orders): a single_pool bid must be ioc or fok, and a post_only bid never takes.
    let quote;
    try {
      quote = await call('POST', '/v1/quote', body);
    } catch (error) {
      fillTable($('quote').tBodies[0], [], 'no preview');
      summary.textContent = `${error.field ? error.field + ': ' : ''}${error.message}`;
      return;
    }
    fillTable($('quote').tBodies[0], quote.fills.map((f) => {
      const p = f.pool;
      const green = f.green_discount_bps ? ` (list ${usd(f.list_price)}, green −${f.green_discount_bps / 100} %)` : '';
      const pool = `pool ${p.id} · ${p.tier.replace('_', ' ')} · ${p.region}${p.nvlink ? ' · NVLink' : ''} · ` +
                   `${p.fabric} ${p.fabric_gbps} Gbps${p.sla_pct ? ` · SLA ${p.sla_pct} %` : ''}`;
      const fees = `egress $${plainMoney(p.egress_usd_per_gb)}/GB · storage $${plainMoney(p.storage_usd_per_gb_month)}/GB-mo · ` +
                   `IP $${plainMoney(p.ip_usd_per_month)}/mo (not included)`;
      return [String(f.quantity), usd(f.price) + green, usd(f.all_in_usd_per_gpu_hour), pool, fees];
    }), 'no ask this bid would meet now: it would rest in the book');
    const gpus = quote.fills.reduce((n, f) => n + f.quantity, 0);
    const average = averageMoney(quote.fills.map((f) => [f.quantity, f.all_in_usd_per_gpu_hour]), 4);
    summary.textContent = `${quote.filled_quantity} of ${quote.quantity} GPUs available now` +
      (gpus ? ` · average all-in ${average} USD per GPU-hour` : '');
  }
}

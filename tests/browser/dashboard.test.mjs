// Browser tests of the dashboard: Debian's Chromium, headless, driven by playwright-core, against a
// real gpuexd on a fresh database of the test PostgreSQL (GPUEX_TEST_DSN, set by scripts/test).
//   node dashboard.test.mjs GPUEXD SOURCE_DIR SCREENSHOT_DIR SCENARIO
// Scenarios: market, account, preemption, provider, errors, orders, keys. Each starts its own gpuexd and browser.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const [gpuexd, sourceDir, shotDir, scenario] = process.argv.slice(2);
const CHROMIUM = process.env.GPUEX_CHROMIUM || '/usr/bin/chromium';
const WAIT_MS = 15000;

function fail(message) {
  throw new Error(message);
}
function check(condition, message) {
  if (!condition) fail(message);
}

// ---- a fresh database and a real gpuexd -------------------------------------------------------

const dsn = process.env.GPUEX_TEST_DSN || fail('GPUEX_TEST_DSN is not set: run through scripts/test');
const base = dsn.slice(0, dsn.lastIndexOf('/'));
const dbName = `gpuex_t_browser_${scenario}_${process.pid}`;
const scratch = mkdtempSync(join(tmpdir(), 'gpuex-browser-'));
let server = null;
let browser = null;

function psql(sql) {
  execFileSync('psql', [`${base}/postgres`, '-qc', sql], { stdio: ['ignore', 'ignore', 'inherit'] });
}

function account(dbDsn, name, scopes) {
  const out = execFileSync(gpuexd, ['admin', 'create-account', '--dsn', dbDsn, '--name', name, '--scopes', scopes]);
  return JSON.parse(out);
}

async function startExchange() {
  psql(`CREATE DATABASE ${dbName}`);
  const dbDsn = `${base}/${dbName}`;
  execFileSync(gpuexd, ['migrate', '--dsn', dbDsn], { stdio: 'ignore' });
  const accounts = {
    admin: account(dbDsn, 'ops', 'admin'),
    provider: account(dbDsn, 'provider', 'provide,read'),
    buyer: account(dbDsn, 'buyer', 'trade,read'),
  };
  const portFile = join(scratch, 'port');
  const log = join(scratch, 'gpuexd.log');
  const logFd = openSync(log, 'w');
  server = spawn(gpuexd, ['serve', '--dsn', dbDsn, '--listen', '127.0.0.1:0', '--port-file', portFile,
    '--test-clock', '--tick-ms', '100', '--web-root', join(sourceDir, 'web'), '--web-vendor', join(sourceDir, 'node_modules')],
  { stdio: ['ignore', logFd, logFd] });
  for (let i = 0; i < 300 && !(existsSync(portFile) && readFileSync(portFile, 'utf8').trim()); ++i) {
    check(server.exitCode === null, `gpuexd exited at start:\n${readFileSync(log, 'utf8')}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const port = Number(readFileSync(portFile, 'utf8').trim());
  check(port > 0, 'gpuexd did not write its port');
  return { url: `http://127.0.0.1:${port}`, accounts, log };
}

async function stopExchange() {
  if (browser) await browser.close().catch(() => {});
  if (server && server.exitCode === null) {
    server.kill('SIGTERM');
    await new Promise((r) => server.once('exit', r));
  }
  try { psql(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`); } catch { /* reported by the next run's cleanup */ }
  rmSync(scratch, { recursive: true, force: true });
}

// ---- the API, as another client would use it --------------------------------------------------

let exchange;
async function api(method, path, key, body) {
  const res = await fetch(exchange.url + path, {
    method,
    headers: { ...(key ? { Authorization: `Bearer ${key}` } : {}), ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const json = await res.json();
  return { status: res.status, json };
}
const key = (who) => exchange.accounts[who].api_key;

// A pool with fees the all-in check below computes by hand.
const POOL = {
  market: 'H100-SXM-80G', region: 'US', tier: 'bare_metal', gpus_per_node: 8, nodes: 2, nvlink: true,
  fabric: 'infiniband', fabric_gbps: 400, sla_pct: '99.9', pue: '1.40', renewable_pct: 20, carbon_g_per_kwh: 400,
  egress_usd_per_gb: '0.01', storage_usd_per_gb_month: '0.073', ip_usd_per_month: '5',
};

async function registerPool(spec = POOL) {
  const r = await api('POST', '/v1/pools', key('provider'), spec);
  check(r.status === 201, `pool registration: ${r.status} ${JSON.stringify(r.json)}`);
  return r.json;
}

function window30d() {
  const start = new Date(Date.now() - 60e3);  // already open: the ask sells spot capacity now
  return { start: start.toISOString().slice(0, 19) + 'Z',
           end: new Date(start.getTime() + 30 * 86400e3).toISOString().slice(0, 19) + 'Z' };
}

async function placeAsk(poolId, price, quantity) {
  const r = await api('POST', '/v1/orders', key('provider'),
                      { side: 'sell', pool_id: poolId, price, quantity, ...window30d() });
  check(r.status === 201 && ['open', 'partially_filled'].includes(r.json.order.status), `ask: ${r.status} ${JSON.stringify(r.json)}`);
  return r.json.order;
}

// ---- the browser ------------------------------------------------------------------------------

const foreignRequests = [];
const pageErrors = [];

// `setup(page)` runs before the page loads (e.g. to route its WebSocket).
async function openPage(hash = '', setup = null) {
  browser = browser || await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  if (setup) await setup(page);
  page.on('request', (r) => { if (!r.url().startsWith(exchange.url) && !r.url().startsWith('ws://127.0.0.1')) foreignRequests.push(r.url()); });
  page.on('pageerror', (e) => pageErrors.push(e.message));
  // Chromium logs every 4xx answer as a console error; the answers the test provokes are expected.
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) pageErrors.push(m.text());
  });
  await page.goto(exchange.url + '/' + hash);
  await page.waitForSelector('body[data-ready=true]', { timeout: WAIT_MS });
  return page;
}

// Waits until the text of `selector` satisfies `test` (a string it must contain, or a RegExp).
async function waitText(page, selector, test, what) {
  const deadline = Date.now() + WAIT_MS;
  let text = '';
  for (;;) {
    text = await page.locator(selector).innerText().catch(() => '');
    if (typeof test === 'string' ? text.includes(test) : test.test(text)) return text;
    if (Date.now() > deadline) fail(`${what}: "${selector}" never showed ${test}; it shows:\n${text}`);
    await page.waitForTimeout(100);
  }
}

// The rows of a table as arrays of cell texts.
async function rows(page, table) {
  return page.locator(`${table} tbody tr`).evaluateAll((trs) => trs.map((tr) => [...tr.cells].map((td) => td.innerText.trim())));
}

async function waitRow(page, table, match, what) {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const found = (await rows(page, table)).find(match);
    if (found) return found;
    if (Date.now() > deadline) fail(`${what}: no matching row in ${table}:\n${JSON.stringify(await rows(page, table))}`);
    await page.waitForTimeout(100);
  }
}

async function screenshot(page, name) {
  mkdirSync(shotDir, { recursive: true });
  const path = join(shotDir, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  console.log(`screenshot: ${path}`);
}

async function useKey(page, who) {
  await page.click('nav button[data-view=account]');
  await page.fill('#key-form input[name=key]', key(who));
  await page.click('#key-form button[type=submit]');
  await waitText(page, '#whoami', `account ${exchange.accounts[who].account_id}`, 'the key is accepted');
}

// ---- scenarios --------------------------------------------------------------------------------

const scenarios = {
  // The book and the tape follow orders placed through the API; the unit toggle divides by the
  // market's performance factor; the charts library is served by gpuexd itself.
  async market() {
    const pool = await registerPool();
    const page = await openPage();
    check(await page.evaluate(() => typeof window.LightweightCharts === 'object'), 'lightweight-charts did not load');
    check(await page.locator('#candles canvas').count() > 0, 'the candle chart has no canvas');
    await waitText(page, '#book', 'no orders in this book', 'the empty book arrives');

    await placeAsk(pool.id, '2.5000', 8);
    await waitRow(page, '#book', (r) => r[2] === '2.5000' && r[3] === '8', 'the ask appears in the book');

    const bid = await api('POST', '/v1/orders', key('buyer'),
                          { side: 'buy', market: 'H100-SXM-80G', price: '2.6000', quantity: 2, duration: 3600, time_in_force: 'ioc' });
    check(bid.status === 201 && bid.json.order.filled_quantity === 2, `crossing bid: ${JSON.stringify(bid.json)}`);
    await waitRow(page, '#tape', (r) => r[1] === '2.5000' && r[2] === '2' && r[3] === 'spot', 'the trade prints on the tape');
    await waitRow(page, '#book', (r) => r[2] === '2.5000' && r[3] === '6', 'the book shows what is left of the ask');
    await waitText(page, '#stats', /Trades\s+1\b/, 'the 24 h stats count the trade');

    // Another market: A100 SXM, performance factor 0.315470 (data/gpu-models.csv).
    const a100 = await registerPool({ ...POOL, market: 'A100-SXM-80G' });
    await placeAsk(a100.id, '1.0000', 8);
    await page.selectOption('#market', 'A100-SXM-80G');
    await waitRow(page, '#book', (r) => r[2] === '1.0000', 'the A100 book');
    const perf = Number((await api('GET', '/v1/markets')).json.markets.find((m) => m.id === 'A100-SXM-80G').perf_factor);
    await page.check('#normalized');
    const normalized = (1 / perf).toFixed(4);
    await waitRow(page, '#book', (r) => r[2] === normalized, `the normalized ask (1.0000 / ${perf})`);
    await page.uncheck('#normalized');
    await page.selectOption('#market', 'H100-SXM-80G');
    await waitRow(page, '#tape', (r) => r[1] === '2.5000', 'back on the H100 tape');
    await screenshot(page, 'market-view');
  },

  // A bid from the form: all-in preview, then it rests in open orders, is matched by a provider's
  // ask, and shows in fills and leases; another one is cancelled from the table.
  async account() {
    const pool = await registerPool();
    await placeAsk(pool.id, '2.5000', 8);
    const page = await openPage();
    await useKey(page, 'buyer');
    const form = '#bid-form';
    await page.selectOption(`${form} select[name=market]`, 'H100-SXM-80G');
    await page.fill(`${form} input[name=quantity]`, '4');
    await page.fill(`${form} input[name=egress_gb_per_gpu_hour]`, '1');
    await page.fill(`${form} input[name=storage_gb]`, '100');
    await page.fill(`${form} input[name=price]`, '2.6000');
    // All-in = price + 1 GB x 0.01 + 100 GB x 0.073 / 730 = 2.5 + 0.01 + 0.01.
    await waitRow(page, '#quote', (r) => r[0] === '4' && r[1].startsWith('2.5000') && r[2] === '2.5200',
                  'the all-in preview of the ask the bid would meet');

    await page.fill(`${form} input[name=price]`, '2.4000');
    await waitText(page, '#quote-summary', '0 of 4 GPUs available now', 'the preview at a price under the ask');
    await page.click(`${form} button[type=submit]`);
    const placed = await waitText(page, `${form} .form-result`, /order \d+: open/, 'the bid is placed');
    const orderId = placed.match(/order (\d+)/)[1];
    await waitRow(page, '#orders', (r) => r[0] === orderId && r[3] === '2.4000' && r[4] === '4', 'the bid in open orders');
    const stored = await api('GET', `/v1/orders/${orderId}`, key('buyer'));
    check(stored.json.status === 'open' && stored.json.duration === 3600, `the stored bid: ${JSON.stringify(stored.json)}`);

    // A provider's ask under the bid: the trade is at the resting bid's price.
    await placeAsk(pool.id, '2.3000', 4);
    await waitRow(page, '#fills', (r) => r[1] === orderId && r[2] === '2.4000' && r[3] === '4', 'the fill');
    const lease = await waitRow(page, '#leases', (r) => r[1] === 'buyer' && r[3] === '4' && r[5] === '2.4000', 'the lease');
    check(['reserved', 'active'].includes(lease[6].split(' ')[0]), `lease state ${lease[6]}`);
    await page.waitForFunction((id) => ![...document.querySelectorAll('#orders tbody tr')].some((tr) => tr.cells[0].innerText === id),
                               orderId, { timeout: WAIT_MS });

    // Cancel from the table.
    await page.fill(`${form} input[name=price]`, '1.0000');
    await page.click(`${form} button[type=submit]`);
    const second = (await waitText(page, `${form} .form-result`, /order \d+: open/, 'the second bid')).match(/order (\d+)/)[1];
    check(second !== orderId, 'a second order');
    await waitRow(page, '#orders', (r) => r[0] === second, 'the second bid in open orders');
    await screenshot(page, 'account-view');
    await page.click(`#orders button[data-order="${second}"]`);
    await page.waitForFunction((id) => ![...document.querySelectorAll('#orders tbody tr')].some((tr) => tr.cells[0].innerText === id),
                               second, { timeout: WAIT_MS });
    const cancelled = await api('GET', `/v1/orders/${second}`, key('buyer'));
    check(cancelled.json.status === 'cancelled', `after Cancel the order is ${cancelled.json.status}`);

    // A forward bid: the window typed in UTC is the window stored, with its constraints.
    await page.check(`${form} input[name=mode][value=forward]`);
    const start = new Date(Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth() + 2, 3, 9, 30));
    const end = new Date(start.getTime() + 5 * 86400e3);
    await page.fill(`${form} input[name=start]`, start.toISOString().slice(0, 16));
    await page.fill(`${form} input[name=end]`, end.toISOString().slice(0, 16));
    await page.click(`${form} details summary`);
    await page.fill(`${form} input[name=regions]`, 'us, de');
    await page.check(`${form} input[name=nvlink]`);
    await page.click(`${form} button[type=submit]`);
    const forwardId = (await waitText(page, `${form} .form-result`, new RegExp(`order (?!${second}\\b)\\d+: open`),
                                      'the forward bid')).match(/order (\d+)/)[1];
    const forward = (await api('GET', `/v1/orders/${forwardId}`, key('buyer'))).json;
    check(forward.start === start.toISOString().slice(0, 19) + 'Z' && forward.end === end.toISOString().slice(0, 19) + 'Z',
          `the stored window: ${forward.start} → ${forward.end}`);
    check(JSON.stringify(forward.regions) === '["US","DE"]' && forward.nvlink === true, `constraints: ${JSON.stringify(forward)}`);
    await waitRow(page, '#orders', (r) => r[0] === forwardId && r[6].startsWith(start.toISOString().slice(0, 10)),
                  'the forward bid in open orders');
  },

  // An interruptible bid from the form lands on a spot-tier pool; a higher interruptible bid of
  // another buyer preempts it, and the page says so at once (DESIGN.md "Interruptible capacity").
  async preemption() {
    const pool = await registerPool({ ...POOL, tier: 'spot', gpus_per_node: 8, nodes: 1 });
    await placeAsk(pool.id, '1.0000', 8);
    const page = await openPage();
    await useKey(page, 'buyer');
    const form = '#bid-form';
    await page.fill(`${form} input[name=price]`, '1.5000');
    await page.fill(`${form} input[name=quantity]`, '8');
    await page.fill(`${form} input[name=duration]`, '4');  // the preempting hour must fit in what it frees
    await page.click(`${form} details summary`);
    await page.check(`${form} input[name=interruptible]`);
    await page.click(`${form} button[type=submit]`);
    await waitText(page, `${form} .form-result`, /order \d+: filled, 8 of 8 GPUs filled/, 'the interruptible bid fills');
    const [leaseId] = await waitRow(page, '#leases', (r) => r[3] === '8' && r[5] === '1.0000', 'the interruptible lease');

    const other = await api('POST', '/v1/accounts', key('admin'), { name: 'second buyer', scopes: ['trade'] });
    check(other.status === 201, `second buyer: ${JSON.stringify(other.json)}`);
    const bid = await api('POST', '/v1/orders', other.json.api_key, { side: 'buy', market: 'H100-SXM-80G',
      price: '2.0000', quantity: 8, duration: 3600, interruptible: true, time_in_force: 'ioc' });
    check(bid.status === 201 && bid.json.order.filled_quantity === 8, `the preempting bid: ${JSON.stringify(bid.json)}`);
    check(bid.json.fills[0].price === '1.0001', `the preempting trade is at the lease's price + 1 tick: ${JSON.stringify(bid.json.fills)}`);
    await waitText(page, '#notices', new RegExp(`lease ${leaseId}: 8 GPUs preempted at .*by trade ${bid.json.fills[0].trade_id}`),
                   'the preemption notice');
    await waitRow(page, '#leases', (r) => r[0] === leaseId && r[6].includes('preempted'), 'the lease marked preempted');
    await screenshot(page, 'preemption');
  },

  // A provider registers a pool and posts an ask from the forms.
  async provider() {
    const page = await openPage();
    await useKey(page, 'provider');
    check(await page.locator('#buy-panel').isHidden(), 'a key without trade scope sees no bid form');
    await page.click('#provide-panel details summary');
    const pf = '#pool-form';
    await page.selectOption(`${pf} select[name=market]`, 'L40S-48G');
    await page.fill(`${pf} input[name=region]`, 'de');
    await page.fill(`${pf} input[name=nodes]`, '3');
    await page.click(`${pf} button[type=submit]`);
    const registered = await waitText(page, `${pf} .form-result`, /pool \d+ registered/, 'the pool is registered');
    const poolId = registered.match(/pool (\d+)/)[1];
    const pool = (await api('GET', `/v1/pools/${poolId}`, key('provider'))).json;
    check(pool.market === 'L40S-48G' && pool.region === 'DE' && pool.gpus === 24, `the stored pool: ${JSON.stringify(pool)}`);
    await waitRow(page, '#pools', (r) => r[0] === poolId && r[3] === '24', 'the pool in the table');

    const af = '#ask-form';
    await page.selectOption(`${af} select[name=pool_id]`, poolId);
    await page.fill(`${af} input[name=price]`, '0.9000');
    await page.fill(`${af} input[name=quantity]`, '16');
    await page.click(`${af} button[type=submit]`);
    const posted = await waitText(page, `${af} .form-result`, /order \d+: open/, 'the ask is posted');
    const askId = posted.match(/order (\d+)/)[1];
    await waitRow(page, '#orders', (r) => r[0] === askId && r[1] === 'sell' && r[3] === '0.9000', 'the ask in open orders');
    const book = (await api('GET', '/v1/markets/L40S-48G/book')).json;
    check(book.asks.some(([p, q]) => p === '0.9000' && q === 16), `the ask in the public book: ${JSON.stringify(book)}`);
    await screenshot(page, 'provider-view');
  },

  // API errors appear next to the field at fault, with the API's own message.
  async errors() {
    const page = await openPage('#account');
    await page.fill('#key-form input[name=key]', 'gpx_k_0000000000000000_not-a-key');
    await page.click('#key-form button[type=submit]');
    await waitText(page, '#key-form .field-error[data-field=key]', 'unknown or revoked API key', 'a bad key');
    await useKey(page, 'buyer');

    const form = '#bid-form';
    const cases = [
      { price: '-1', quantity: '1', field: 'price' },
      { price: '2.00001', quantity: '1', field: 'price' },       // off the 0.0001 tick: a 422
      { price: '2.0000', quantity: 'four', field: 'quantity' },
    ];
    for (const c of cases) {
      await page.fill(`${form} input[name=price]`, c.price);
      await page.fill(`${form} input[name=quantity]`, c.quantity);
      await page.click(`${form} button[type=submit]`);
      // What the API itself says about the same body.
      const direct = await api('POST', '/v1/orders', key('buyer'), {
        side: 'buy', market: 'H100-SXM-80G', price: c.price, quantity: /^\d+$/.test(c.quantity) ? Number(c.quantity) : c.quantity,
        duration: 3600, time_in_force: 'gtc' });
      check(direct.status >= 400 && direct.json.error.field === c.field, `the API on ${JSON.stringify(c)}: ${JSON.stringify(direct.json)}`);
      const shown = await waitText(page, `${form} .field-error[data-field=${c.field}]`, direct.json.error.message,
                                   `the error next to ${c.field} for ${JSON.stringify(c)}`);
      check(shown.includes(direct.json.error.code), `the code ${direct.json.error.code} is shown: ${shown}`);
      check(await page.locator(`${form} .field-error`).count() === 1, 'one error, next to one field');
    }
    await screenshot(page, 'form-errors');
    const open = await api('GET', '/v1/orders?status=open', key('buyer'));
    check(open.json.orders.length === 0, `no order was placed: ${JSON.stringify(open.json)}`);
  },

  // A bid that fills in part stays in open orders with its Cancel button; the preview sends the bid's
  // own terms (a single_pool bid must be ioc or fok; a post_only bid never takes) and averages exactly.
  async orders() {
    const pool = await registerPool();
    await placeAsk(pool.id, '2.5000', 2);
    await placeAsk(pool.id, '2.5100', 1);
    const page = await openPage();
    await useKey(page, 'buyer');
    const form = '#bid-form';
    await page.selectOption(`${form} select[name=market]`, 'H100-SXM-80G');
    await page.fill(`${form} input[name=egress_gb_per_gpu_hour]`, '1');
    await page.fill(`${form} input[name=storage_gb]`, '100');
    await page.fill(`${form} input[name=quantity]`, '5');
    await page.fill(`${form} input[name=price]`, '2.6000');
    // All-in = price + 1 GB x 0.01 + 100 GB x 0.073 / 730 = price + 0.02: 2.5200 for 2 GPUs and 2.5300
    // for 1, on average (2 x 2.52 + 2.53) / 3 = 2.52333... USD.
    await waitText(page, '#quote-summary', '3 of 5 GPUs available now · average all-in 2.5233 USD per GPU-hour',
                   'the preview of both asks');
    const first = await waitRow(page, '#quote', (r) => r[0] === '2' && r[2] === '2.5200', 'the cheaper ask in the preview');
    check(first[4].startsWith('egress $0.01/GB · storage $0.073/GB-mo · IP $5/mo'), `the fees shown: ${first[4]}`);

    await page.check(`${form} input[name=post_only]`);
    await waitText(page, '#quote-summary', /^0 of 5 GPUs available now$/, 'a post_only bid would take nothing');
    await page.uncheck(`${form} input[name=post_only]`);
    await waitText(page, '#quote-summary', '3 of 5 GPUs available now', 'without post_only it takes again');

    // One pool, all or none: 3 GPUs are there in one pool, 5 are not.
    await page.click(`${form} details summary`);
    await page.check(`${form} input[name=single_pool]`);
    await page.selectOption(`${form} select[name=time_in_force]`, 'ioc');
    await waitText(page, '#quote-summary', /^0 of 5 GPUs available now$/, 'a single_pool ioc bid of 5 GPUs');
    await page.fill(`${form} input[name=quantity]`, '3');
    await waitText(page, '#quote-summary', '3 of 3 GPUs available now · average all-in 2.5233 USD per GPU-hour',
                   'a single_pool ioc bid of 3 GPUs');
    await page.uncheck(`${form} input[name=single_pool]`);
    await page.selectOption(`${form} select[name=time_in_force]`, 'gtc');
    await page.fill(`${form} input[name=quantity]`, '5');

    await page.click(`${form} button[type=submit]`);
    const placed = await waitText(page, `${form} .form-result`, /order \d+: partially_filled, 3 of 5 GPUs filled/,
                                  'the bid fills in part');
    const orderId = placed.match(/order (\d+)/)[1];
    await waitRow(page, '#orders', (r) => r[0] === orderId && r[5] === '3' && r[7] === 'partially_filled',
                  'the partly filled bid in open orders');
    await page.reload();
    await page.waitForSelector('body[data-ready=true]', { timeout: WAIT_MS });
    await page.click('nav button[data-view=account]');
    await waitRow(page, '#orders', (r) => r[0] === orderId && r[7] === 'partially_filled', 'the bid after a reload');
    await screenshot(page, 'partly-filled');
    await page.click(`#orders button[data-order="${orderId}"]`);
    await page.waitForFunction((id) => ![...document.querySelectorAll('#orders tbody tr')].some((tr) => tr.cells[0].innerText === id),
                               orderId, { timeout: WAIT_MS });
    const cancelled = (await api('GET', `/v1/orders/${orderId}`, key('buyer'))).json;
    check(cancelled.status === 'cancelled' && cancelled.filled_quantity === 3, `after Cancel: ${JSON.stringify(cancelled)}`);

    // Money is computed exactly: all-ins of 2.5204 and 2.5205 average to 2.52045, a tie, shown rounded
    // half to even as gpuexd rounds money (the float average of before showed 2.5205).
    await placeAsk(pool.id, '2.5004', 1);
    await placeAsk(pool.id, '2.5005', 1);
    await page.fill(`${form} input[name=egress_gb_per_gpu_hour]`, '1');
    await page.fill(`${form} input[name=storage_gb]`, '100');
    await page.fill(`${form} input[name=quantity]`, '2');
    await page.fill(`${form} input[name=price]`, '2.6000');
    await waitText(page, '#quote-summary', '2 of 2 GPUs available now · average all-in 2.5204 USD per GPU-hour',
                   'the exact average of a tie');
  },

  // A key the store cannot check settles the key form with the error; a key revoked while the page is
  // open sends it back to the key form, saying why, once the stream reconnects.
  async keys() {
    let failAuth = true;
    const page = await openPage('#account', (p) => p.routeWebSocket(/\/v1\/ws$/, (ws) => {
      const server = ws.connectToServer();
      ws.onMessage((message) => {
        if (failAuth && JSON.parse(message).op === 'auth') {
          failAuth = false;
          // gpuexd's answer when PostgreSQL cannot check a key (server/ws_session.cpp): no `field`.
          ws.send(JSON.stringify({ type: 'error', code: 'store_unavailable',
                                   message: 'the key cannot be checked: PostgreSQL does not answer' }));
        } else {
          server.send(message);
        }
      });
    }));
    await page.fill('#key-form input[name=key]', key('buyer'));
    await page.click('#key-form button[type=submit]');
    await waitText(page, '#key-form .form-error', 'the key cannot be checked: PostgreSQL does not answer (store_unavailable)',
                   'an auth answered without a field');
    check(await page.locator('#account-panels').isHidden(), 'no panels without an accepted key');
    await useKey(page, 'buyer');
    await waitText(page, '#orders', 'no open orders', 'the panels are up');

    const revoked = await api('DELETE', `/v1/keys/${exchange.accounts.buyer.key_id}`, key('admin'));
    check(revoked.status === 200, `revoking the key: ${revoked.status} ${JSON.stringify(revoked.json)}`);
    await waitText(page, '#key-form .field-error[data-field=key]', 'unknown or revoked API key (unauthenticated)',
                   'the revoked key is refused on the reconnect');
    check(await page.locator('#account-panels').isHidden(), 'the panels are gone with the key');
    check(await page.locator('#whoami').innerText() === '', 'no account is shown');
    check(await page.evaluate(() => sessionStorage.getItem('gpuex.api_key')) === null, 'the key is forgotten');
    await screenshot(page, 'revoked-key');
  },
};

// ---- run --------------------------------------------------------------------------------------

const run = scenarios[scenario] || fail(`unknown scenario "${scenario}": ${Object.keys(scenarios).join(', ')}`);
let failed = false;
try {
  exchange = await startExchange();
  await run();
  check(foreignRequests.length === 0, `requests to other hosts: ${foreignRequests.join(', ')}`);
  check(pageErrors.length === 0, `errors in the page: ${pageErrors.join(' | ')}`);
  console.log(`browser ${scenario}: ok`);
} catch (e) {
  failed = true;
  console.error(`browser ${scenario}: FAILED: ${e.stack || e.message}`);
  if (exchange) console.error(`gpuexd log (last lines):\n${readFileSync(exchange.log, 'utf8').split('\n').slice(-20).join('\n')}`);
} finally {
  await stopExchange();
}
process.exit(failed ? 1 : 0);

// The market view: book and tape from the WebSocket, candles (live), forward curve, daily index and
// 24 h stats from the REST API, in raw or normalized prices.
import { get } from './api.js';
import { page, px, pxNumber, money, compareMoney, clock, unixSeconds, comingTenors, fillTable, makeRow, unitLabel, el } from './format.js';

const $ = (id) => document.getElementById(id);
const BOOK_DEPTH = 15;
const TAPE_LENGTH = 40;
const SLOW_REFRESH_MS = 15000;

export class MarketView {
  constructor(stream) {
    this.stream = stream;
    this.market = null;
    this.bucket = 'spot';
    this.interval = $('interval').value;
    this.channels = [];
    this.book = { bids: new Map(), asks: new Map(), constrained: null, live: false };
    this.trades = [];
    this.data = { candles: [], curve: null, index: null, stats: null };
    this.charts = makeCharts();
    this.renderQueued = false;
    this.refreshTimer = null;
    $('market').addEventListener('change', () => this.select($('market').value, 'spot'));
    $('bucket').addEventListener('change', () => this.select(this.market, $('bucket').value));
    $('interval').addEventListener('change', () => {
      this.interval = $('interval').value;
      this.select(this.market, this.bucket);
    });
  }

  async start() {
    const { markets } = await get('/v1/markets');
    const select = $('market');
    for (const m of markets) {
      page.markets.set(m.id, m);
      select.append(el('option', { value: m.id }, `${m.name} — ${Number(m.perf_factor).toFixed(2)}× H100`));
    }
    const wanted = new URLSearchParams(location.search).get('market');
    const first = page.markets.has(wanted) ? wanted : page.markets.has('H100-SXM-80G') ? 'H100-SXM-80G' : markets[0].id;
    this.select(first, 'spot');
    setInterval(() => this.refreshSlow(), SLOW_REFRESH_MS);
  }

  select(market, bucket) {
    for (const c of this.channels) this.stream.unsubscribe(c);
    this.market = market;
    this.bucket = bucket;
    const m = page.markets.get(market);
    $('market').value = market;
    $('market-info').textContent =
      `${m.vendor} · ${m.memory_gb} GB · performance factor ${Number(m.perf_factor).toFixed(3)} · tick ${m.tick_size}` +
      (m.halted ? ' · HALTED' : '');
    this.fillBuckets([]);
    this.book = { bids: new Map(), asks: new Map(), constrained: null, live: false };
    this.trades = [];
    this.render();

    const book = `book:${market}:${bucket}`;
    const trades = `trades:${market}`;
    const candles = `candles:${market}:${bucket}:${this.interval}`;
    this.channels = [book, trades, candles];
    this.stream.subscribe(book, (msg) => this.onBook(msg), () => { this.book.live = false; });
    this.stream.subscribe(trades, (msg) => this.onTrade(msg), () => this.loadTrades());
    this.stream.subscribe(candles, (msg) => this.onCandle(msg), () => this.loadCandles());
    this.loadTrades();
    this.loadCandles();
    this.refreshSlow();
  }

  fillBuckets(tenors) {
    const names = ['spot', ...new Set([...comingTenors(7), ...tenors])].sort((a, b) =>
      a === 'spot' ? -1 : b === 'spot' ? 1 : a.localeCompare(b));
    const select = $('bucket');
    select.replaceChildren(...names.map((b) => el('option', { value: b }, b === 'spot' ? 'spot (now)' : b)));
    select.value = this.bucket;
  }

  onBook(msg) {
    const b = this.book;
    if (msg.type === 'snapshot') {
      b.bids = new Map(msg.bids);
      b.asks = new Map(msg.asks);
    } else {
      for (const [side, price, qty] of msg.changes) {
        const levels = side === 'buy' ? b.bids : b.asks;
        if (qty === 0) levels.delete(price);
        else levels.set(price, qty);
      }
    }
    b.constrained = msg.constrained_bids;
    b.live = true;
    this.queueRender();
  }

  onTrade(msg) {
    if (this.trades.some((t) => t.trade_id === msg.trade.trade_id)) return;  // already loaded over REST
    this.trades.unshift(msg.trade);
    this.trades.length = Math.min(this.trades.length, TAPE_LENGTH);
    this.queueRender();
    // Stats and the curve move with trades; reload them soon, once.
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => this.refreshSlow(), 1500);
  }

  onCandle(msg) {
    if (!msg.candle) return;
    const rows = this.data.candles;
    const i = rows.findIndex((c) => c.start === msg.candle.start);
    if (i >= 0) rows[i] = msg.candle;
    else rows.push(msg.candle);
    if (this.charts) {
      const [bar, volume] = candleBar(msg.candle, this.market);
      const last = rows.length > 1 ? unixSeconds(rows[rows.length - 2].start) : 0;
      if (bar.time >= last) {
        this.charts.candles.update(bar);
        this.charts.volume.update(volume);
      } else {
        this.drawCandles();
      }
    }
  }

  async loadTrades() {
    const market = this.market;
    const res = await get(`/v1/markets/${market}/trades?limit=${TAPE_LENGTH}`).catch(() => null);
    if (!res || market !== this.market) return;
    // Trades the stream brought while the list was read stay in front of it.
    const newest = res.trades.length ? BigInt(res.trades[0].trade_id) : -1n;
    const newer = this.trades.filter((t) => BigInt(t.trade_id) > newest);
    this.trades = newer.concat(res.trades).slice(0, TAPE_LENGTH);
    this.queueRender();
  }

  async loadCandles() {
    const key = [this.market, this.bucket, this.interval];
    const res = await get(`/v1/markets/${key[0]}/candles?interval=${key[2]}&bucket=${key[1]}`).catch(() => null);
    if (!res || key.join() !== [this.market, this.bucket, this.interval].join()) return;
    this.data.candles = res.candles;
    this.drawCandles();
  }

  async refreshSlow() {
    const market = this.market;
    const [curve, index, stats] = await Promise.all([
      get(`/v1/markets/${market}/forward-curve`).catch(() => null),
      get(`/v1/index/${market}`).catch(() => null),
      get(`/v1/markets/${market}/stats`).catch(() => null),
    ]);
    if (market !== this.market) return;
    Object.assign(this.data, { curve, index, stats });
    if (curve) this.fillBuckets(curve.tenors.map((t) => t.tenor));
    this.drawSlow();
  }

  queueRender() {
    if (this.renderQueued) return;
    this.renderQueued = true;
    requestAnimationFrame(() => {
      this.renderQueued = false;
      this.render();
    });
  }

  // Everything again (the unit toggle changes every price).
  redraw() {
    this.render();
    this.drawCandles();
    this.drawSlow();
  }

  render() {
    const m = this.market;
    document.querySelectorAll('.unit').forEach((e) => { e.textContent = unitLabel(); });
    $('book-title').textContent = `Order book · ${this.bucket}`;
    const bids = [...this.book.bids].sort((a, b) => compareMoney(b[0], a[0])).slice(0, BOOK_DEPTH);
    const asks = [...this.book.asks].sort((a, b) => compareMoney(a[0], b[0])).slice(0, BOOK_DEPTH);
    const rows = [];
    for (let i = 0; i < Math.max(bids.length, asks.length); ++i) {
      const [bp, bq] = bids[i] || ['', ''];
      const [ap, aq] = asks[i] || ['', ''];
      rows.push([String(bq), bp && px(bp, m), ap && px(ap, m), String(aq)]);
    }
    fillTable($('book').tBodies[0], rows, this.book.live ? 'no orders in this book' : 'loading…');
    const c = this.book.constrained;
    $('constrained').textContent = c && c.orders
      ? `+ ${c.orders} bids with constraints (${c.gpus} GPUs), not in the levels`
      : '';

    const tape = $('tape').tBodies[0];
    tape.replaceChildren();
    for (const t of this.trades) {
      const where = `${t.tier.replace('_', ' ')} · ${t.region}`;
      const green = t.green_tier !== 'none' ? el('span', { class: 'badge green' }, t.green_tier.replace('_', ' ')) : '';
      tape.append(makeRow([clock(t.time), px(t.price, m), String(t.quantity), t.bucket, where, green],
                          t.preemption ? 'preemption' : ''));
    }
    if (!this.trades.length) fillTable(tape, [], 'no trades yet');
  }

  drawCandles() {
    if (!this.charts) return;
    const bars = [...this.data.candles].sort((a, b) => a.start.localeCompare(b.start)).map((c) => candleBar(c, this.market));
    this.charts.candles.setData(bars.map((b) => b[0]));
    this.charts.volume.setData(bars.map((b) => b[1]));
    this.charts.price.timeScale().fitContent();
  }

  drawSlow() {
    const m = this.market;
    const { curve, index, stats } = this.data;
    if (curve) {
      const rows = curve.tenors.map((t) => [t.tenor, px(t.last, m), px(t.vwap_7d, m), px(t.best_bid, m),
                                            px(t.best_ask, m), t.open_interest_gpu_hours]);
      fillTable($('curve-table').tBodies[0], rows, 'no forward trades or orders yet');
      if (this.charts) {
        const line = (field) => curve.tenors.filter((t) => t[field] !== null)
          .map((t) => ({ time: `${t.tenor}-01`, value: pxNumber(t[field], m) }));
        this.charts.curveVwap.setData(line('vwap_7d'));
        this.charts.curveBid.setData(line('best_bid'));
        this.charts.curveAsk.setData(line('best_ask'));
        this.charts.curve.timeScale().fitContent();
      }
    }
    if (index && this.charts) {
      this.charts.index.setData(index.index.map((d) => ({ time: d.day, value: pxNumber(d.value, m) })));
      this.charts.indexChart.timeScale().fitContent();
    }
    if (stats) {
      const pct = (s) => (s === null ? '—' : `${(Number(s) * 100).toFixed(1)} %`);
      const items = [
        ['Trades', String(stats.trades)],
        ['Volume', `${Number(stats.volume_gpu_hours).toLocaleString()} GPU-h`],
        ['VWAP', px(stats.vwap, m)],
        ['High / low', `${px(stats.high, m)} / ${px(stats.low, m)}`],
        ['Green share', pct(stats.green_share)],
        ['Green discount given', `$${money(stats.green_discount_usd, 2)}`],
      ];
      $('stats').replaceChildren(...items.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
    }
  }
}

function candleBar(c, market) {
  const t = unixSeconds(c.start);
  const bar = { time: t, open: pxNumber(c.open, market), high: pxNumber(c.high, market),
                low: pxNumber(c.low, market), close: pxNumber(c.close, market) };
  const up = Number(c.close) >= Number(c.open);
  return [bar, { time: t, value: Number(c.volume_gpu_hours), color: up ? '#2e7d5b88' : '#b2474788' }];
}

// Charts need the library (node_modules, served by gpuexd); without it the tables still work.
function makeCharts() {
  const lib = window.LightweightCharts;
  if (!lib) {
    document.querySelectorAll('.chart').forEach((e) => {
      e.textContent = 'charts need the lightweight-charts package: run scripts/setup';
    });
    return null;
  }
  const options = {
    autoSize: true,
    layout: { background: { color: 'transparent' }, textColor: '#9aa7b4', attributionLogo: false },
    grid: { vertLines: { color: '#1f2a35' }, horzLines: { color: '#1f2a35' } },
    rightPriceScale: { borderColor: '#2b3845' },
    timeScale: { borderColor: '#2b3845', timeVisible: true },
  };
  const price = lib.createChart($('candles'), options);
  const candles = price.addSeries(lib.CandlestickSeries, {
    upColor: '#3fb68b', downColor: '#e05260', borderVisible: false, wickUpColor: '#3fb68b', wickDownColor: '#e05260',
    priceFormat: { type: 'price', precision: 4, minMove: 0.0001 },
  });
  const volume = price.addSeries(lib.HistogramSeries, { priceScaleId: '', priceFormat: { type: 'volume' } });
  volume.priceScale().applyOptions({ scaleMargins: { top: 0.8, bottom: 0 } });

  const dayOptions = { ...options, timeScale: { ...options.timeScale, timeVisible: false } };
  const priceFormat = { type: 'price', precision: 4, minMove: 0.0001 };
  const curve = lib.createChart($('curve'), dayOptions);
  const curveVwap = curve.addSeries(lib.LineSeries, { color: '#e0b252', title: 'VWAP 7d', priceFormat });
  const curveBid = curve.addSeries(lib.LineSeries, { color: '#3fb68b', title: 'bid', lineStyle: 2, priceFormat });
  const curveAsk = curve.addSeries(lib.LineSeries, { color: '#e05260', title: 'ask', lineStyle: 2, priceFormat });
  const indexChart = lib.createChart($('index'), dayOptions);
  const index = indexChart.addSeries(lib.LineSeries, { color: '#5aa9e6', title: 'index', priceFormat });
  return { price, candles, volume, curve, curveVwap, curveBid, curveAsk, indexChart, index };
}

// Talking to gpuexd: REST calls with the API's error shape, and one WebSocket for every channel.

// An error answer of the API (API.md "Errors"): `code` to branch on, `field` when one field is at fault.
export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

let apiKey = null;
export function setKey(key) { apiKey = key; }

export async function call(method, path, body) {
  const headers = {};
  if (apiKey) headers.Authorization = `Bearer ${apiKey}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, 'network_error', 'gpuexd cannot be reached');
  }
  const text = await res.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { /* not JSON: reported below */ }
  if (!res.ok) {
    const e = json && json.error;
    if (e) throw new ApiError(res.status, e.code, e.message, e.field);
    throw new ApiError(res.status, 'http_' + res.status, text || res.statusText);
  }
  return json;
}
export const get = (path) => call('GET', path);

// One WebSocket for the page. Channels are (re)subscribed on every connect; a gap in a channel's
// `seq` (or a reconnect) calls its `resync` so the view reloads what it may have missed.
export class Stream {
  constructor(onStatus) {
    this.onStatus = onStatus;
    this.channels = new Map();  // name -> {onMessage, resync, seq, renewing}
    this.key = null;
    this.pendingAuth = null;
    this.authing = false;     // an auth message is out and not answered yet
    this.onAuthLost = null;   // (ApiError) => void: the key was refused on a reconnect (e.g. revoked)
    this.retryMs = 500;
    this.connect();
    // The server closes a connection that sends nothing for a while (API.md): ping well within it.
    setInterval(() => this.send({ op: 'ping' }), 20000);
  }

  connect() {
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    const ws = new WebSocket(`${scheme}://${location.host}/v1/ws`);
    this.ws = ws;
    this.onStatus('connecting');
    ws.onopen = () => {
      this.retryMs = 500;
      this.onStatus('live');
      for (const c of this.channels.values()) c.seq = null;
      // Private channels follow the auth reply (the key is checked asynchronously).
      this.authing = false;
      if (this.key) this.sendAuth(this.key);
      this.subscribeAll((name) => !isPrivate(name));
    };
    ws.onmessage = (ev) => this.receive(JSON.parse(ev.data));
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      this.onStatus(`reconnecting (closed ${ev.code}${ev.reason ? ': ' + ev.reason : ''})`);
      setTimeout(() => this.connect(), this.retryMs);
      this.retryMs = Math.min(this.retryMs * 2, 10000);
      for (const c of this.channels.values()) c.resync && c.resync();
    };
  }

  send(msg) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(msg));
  }

  subscribeAll(which) {
    const names = [...this.channels.keys()].filter(which);
    if (names.length) this.send({ op: 'subscribe', channels: names });
  }

  subscribe(name, onMessage, resync) {
    this.channels.set(name, { onMessage, resync, seq: null, renewing: false });
    this.send({ op: 'subscribe', channels: [name] });
  }

  unsubscribe(name) {
    if (!this.channels.delete(name)) return;
    this.send({ op: 'unsubscribe', channels: [name] });
  }

  // Authenticates the connection; resolves with {account_id, scopes}. A key cannot be taken back
  // on a connection, so forgetting it (key null) reconnects.
  auth(key) {
    const authenticated = this.key !== null;
    this.key = key;
    for (const name of [...this.channels.keys()]) if (isPrivate(name)) this.channels.delete(name);
    if (!key) {
      if (authenticated) this.ws.close();
      return Promise.resolve(null);
    }
    return new Promise((resolve, reject) => {
      this.pendingAuth = { resolve, reject };
      // A connection keeps its first key: another key needs a new connection, which sends it on open.
      if (authenticated) this.ws.close();
      else this.sendAuth(key);
    });
  }

  sendAuth(key) {
    this.authing = true;
    this.send({ op: 'auth', key });
  }

  receive(msg) {
    if (msg.type === 'auth') {
      this.authing = false;
      this.subscribeAll(isPrivate);
      if (this.pendingAuth) this.pendingAuth.resolve(msg);
      this.pendingAuth = null;
      return;
    }
    // The answer to an auth: a refused key names the field `key`; others (store_unavailable, ...) name none.
    if (msg.type === 'error' && (msg.field === 'key' || (this.authing && AUTH_ERRORS.has(msg.code)))) {
      this.key = null;
      this.authing = false;
      const error = new ApiError(msg.field === 'key' ? 401 : 503, msg.code, msg.message, msg.field);
      if (this.pendingAuth) this.pendingAuth.reject(error);
      else if (this.onAuthLost) this.onAuthLost(error);  // the key sent again on a reconnect was refused
      this.pendingAuth = null;
      return;
    }
    if (msg.type === 'error') return console.warn('gpuex stream:', msg.code, msg.message);
    if (msg.type === 'subscribed') {
      for (const name of msg.channels) {
        const c = this.channels.get(name);
        if (c) c.renewing = false;
      }
      return;
    }
    const c = msg.channel && this.channels.get(msg.channel);
    // While a channel is subscribed anew after a gap, what the old subscription still had in flight
    // is dropped: the first message taken is the new subscription's (it follows `subscribed`).
    if (!c || msg.seq === undefined || c.renewing) return;
    const first = c.seq === null || msg.type === 'snapshot';
    const expected = msg.type === 'heartbeat' ? c.seq : c.seq + 1;
    if (!first && msg.seq !== expected) {
      // Missed messages: a book resubscribes for a new snapshot; others reload.
      c.seq = null;
      c.renewing = true;
      this.send({ op: 'unsubscribe', channels: [msg.channel] });
      this.send({ op: 'subscribe', channels: [msg.channel] });
      if (c.resync) c.resync();
      return;
    }
    c.seq = msg.seq;
    if (msg.type !== 'heartbeat') c.onMessage(msg);
  }
}

// Error codes an auth is answered with when the key itself is not at fault (API.md, README "WebSocket").
const AUTH_ERRORS = new Set(['store_unavailable', 'already_authenticated', 'unauthenticated']);

function isPrivate(channel) { return channel === 'orders' || channel === 'fills' || channel === 'leases'; }

// The dashboard's WebSocket client (web/api.js Stream) against a scripted socket: what it does with
// sequence numbers, gaps and resubscriptions. Runs in node (no browser): node --test stream.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';

// The browser globals Stream touches, replaced by a socket whose traffic the test writes.
class FakeSocket {
  static OPEN = 1;
  static last = null;
  constructor(url) {
    this.url = url;
    this.readyState = FakeSocket.OPEN;
    this.sent = [];
    FakeSocket.last = this;
  }
  send(text) { this.sent.push(JSON.parse(text)); }
  close() {}
  // The server speaks.
  deliver(msg) { this.onmessage({ data: JSON.stringify(msg) }); }
}
globalThis.WebSocket = FakeSocket;
globalThis.location = { protocol: 'http:', host: '127.0.0.1:1' };
globalThis.setInterval = () => 0;

const { Stream } = await import('../../web/api.js');

function open() {
  const stream = new Stream(() => {});
  const ws = FakeSocket.last;
  ws.onopen();
  return { stream, ws };
}
// A stream subscribed to trades:M (confirmed); `got` records each message's seq and each resync.
function subscribedToTrades() {
  const { stream, ws } = open();
  const got = [];
  stream.subscribe('trades:M', (m) => got.push(m.seq), () => got.push('resync'));
  ws.deliver({ type: 'subscribed', channels: ['trades:M'] });
  return { ws, got };
}
const trade = (seq, id) => ({ type: 'trade', channel: 'trades:M', seq, trade: { trade_id: String(id) } });

test('messages in order are passed on; heartbeats repeat the seq and are not', () => {
  const { ws, got } = subscribedToTrades();
  ws.deliver(trade(5, 1));
  ws.deliver({ type: 'heartbeat', channel: 'trades:M', seq: 5 });
  ws.deliver(trade(6, 2));
  assert.deepEqual(got, [5, 6]);
});

test('after a gap, the old subscription\'s messages still in flight are dropped until the new one is confirmed', () => {
  const { ws, got } = subscribedToTrades();
  ws.deliver(trade(1, 10));
  ws.deliver(trade(3, 12));  // 2 was missed
  assert.deepEqual(got, [1, 'resync']);
  assert.deepEqual(ws.sent.slice(-2), [{ op: 'unsubscribe', channels: ['trades:M'] },
                                       { op: 'subscribe', channels: ['trades:M'] }]);
  // Sent by the server before it read the unsubscribe: they belong to the old subscription (the
  // resync's reload has them), so taking the first as a new start would print it twice.
  ws.deliver(trade(4, 13));
  ws.deliver({ type: 'unsubscribed', channels: ['trades:M'] });
  ws.deliver({ type: 'subscribed', channels: ['trades:M'] });
  ws.deliver({ type: 'heartbeat', channel: 'trades:M', seq: 4 });
  ws.deliver(trade(5, 14));
  assert.deepEqual(got, [1, 'resync', 5]);
});

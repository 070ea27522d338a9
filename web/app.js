// The dashboard's entry: one WebSocket for the page, the market view and the account view.
import { Stream } from './api.js';
import { page } from './format.js';
import { MarketView } from './market.js';
import { AccountView } from './account.js';

const $ = (id) => document.getElementById(id);

const stream = new Stream((status) => {
  $('conn').textContent = status;
  $('conn').className = `conn ${status === 'live' ? 'live' : 'down'}`;
});
const market = new MarketView(stream);
const account = new AccountView(stream);

function show(view) {
  for (const b of document.querySelectorAll('nav button')) b.classList.toggle('active', b.dataset.view === view);
  $('view-market').hidden = view !== 'market';
  $('view-account').hidden = view !== 'account';
  if (view === 'account') account.follow(market.market);
  history.replaceState(null, '', view === 'account' ? '#account' : '#');
}
for (const b of document.querySelectorAll('nav button')) b.addEventListener('click', () => show(b.dataset.view));

$('normalized').addEventListener('change', () => {
  page.normalized = $('normalized').checked;
  market.redraw();
});

market.start().then(() => {
  account.start();
  show(location.hash === '#account' ? 'account' : 'market');
  document.body.dataset.ready = 'true';  // for the browser tests
}).catch((e) => {
  $('conn').textContent = `cannot load markets: ${e.message}`;
});

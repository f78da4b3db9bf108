// Drives pagellm's web page in Debian's chromium with puppeteer-core (run by
// test_webui_browser.sh, which starts the server with a per-step delay so that an answer lasts
// long enough to be stopped and watched).
//   node webui_browser.mjs BASE_URL API_KEY OUT_DIR CHROMIUM [window]
// Without "window": the chat playground and the KV view of a model without a window pool (the
// server wants API_KEY). With it: the KV view of a model with a window pool (layer kinds: a
// gemma3), no key ("" for API_KEY).
// Prints one line per check and "N passed, M failed" last; screenshots go to OUT_DIR.
import puppeteer from 'puppeteer-core';

const [base, key, outDir, chromium, mode] = process.argv.slice(2);
let passed = 0, failed = 0;
function check(what, ok, detail) {
  if (ok) { passed++; console.log('ok   ' + what); }
  else { failed++; console.log('FAIL ' + what + (detail !== undefined ? ': ' + detail : '')); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, f, timeoutMs = 20000) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try { last = await f(); if (last) { check(what, true); return last; } } catch (e) { last = e.message; }
    await sleep(100);
  }
  check(what, false, 'timed out (last: ' + JSON.stringify(last) + ')');
  return null;
}
async function metric(name) {
  const t = await (await fetch(base + '/metrics')).text();
  const line = t.split('\n').find((l) => l.startsWith(name + '{'));
  return line ? Number(line.split(' ').pop()) : NaN;
}
async function kvBlocks() {
  const r = await fetch(base + '/v1/kv/blocks', { headers: key ? { Authorization: 'Bearer ' + key } : {} });
  return r.json();
}

// The chat playground and the KV view of stories260K (no window pool).
async function playground(page) {
  const resp = await page.goto(base + '/', { waitUntil: 'load' });
  check('GET / is 200 text/html', resp.status() === 200 && /text\/html/.test(resp.headers()['content-type']),
        resp.status());

  // The server wants a key: the page asks once.
  await until('the page asks for the API key', () => page.$eval('#key-dialog', (d) => !d.classList.contains('hidden')));
  await page.type('#key-input', 'wrong');
  await page.click('#key-save');
  await until('a wrong key is refused', () => page.$eval('#key-error', (e) => e.textContent.includes('refused')));
  await page.$eval('#key-input', (e) => { e.value = ''; });
  await page.type('#key-input', key);
  await page.click('#key-save');
  await until('the key is accepted and the model shown',
    () => page.$eval('#model-name', (e) => e.textContent.includes('stories')));

  // A short answer with log-probabilities: streamed, timed, tokens on hover.
  const setField = (sel, v) => page.$eval(sel, (e, v) => { e.value = v; }, String(v));
  await setField('#max_tokens', 24);
  await setField('#temperature', 0);
  await page.click('#logprobs');
  await page.click('#input');
  await page.keyboard.type('Once upon a time');
  await page.keyboard.down('Shift'); await page.keyboard.press('Enter'); await page.keyboard.up('Shift');
  await page.keyboard.type('there was');
  check('Shift+Enter adds a line', (await page.$eval('#input', (e) => e.value)) === 'Once upon a time\nthere was');
  await page.keyboard.press('Enter');
  await until('Enter sends: the first answer finishes',
    () => page.$eval('.msg.assistant:last-of-type', (m) => m.dataset.done === 'finished'));
  const meta1 = await page.$eval('.msg.assistant .meta', (e) => e.textContent);
  check('time to first token and tokens/s shown', /time to first token \d+ ms/.test(meta1) && /tokens\/s/.test(meta1), meta1);
  const nTok = await page.$$eval('.msg.assistant .tok', (s) => s.length);
  check('log-probabilities attached to the streamed tokens', nTok > 0, nTok);
  if (nTok > 0) {
    await page.hover('.msg.assistant .tok');
    await until('hovering a token shows its log-probability',
      () => page.$eval('#lp-tip', (t) => !t.classList.contains('hidden') && /p=0\.\d+/.test(t.textContent)));
  }
  await page.click('#show-prompt');
  await until('the rendered prompt (chat template output) is shown',
    () => page.$eval('#rendered', (e) => e.textContent.includes('<|im_start|>user') && e.textContent.includes('tokens')));
  await page.click('#logprobs');

  // A long answer, stopped mid-way: the server's running count returns to 0.
  await setField('#max_tokens', 400);
  await setField('#temperature', 0.8);
  await page.click('#ignore_eos');
  await page.type('#input', 'Tell me a long story');
  await page.keyboard.press('Enter');
  const streamed = await until('streamed text appears', () => page.$$eval('.msg.assistant', (ms) => {
    const m = ms[ms.length - 1];
    return !m.dataset.done && m.querySelector('.choice') && m.querySelector('.choice').textContent.length > 40;
  }));
  check('the server runs the request', (await metric('vllm:num_requests_running')) === 1);
  await page.click('#stop');
  await until('stop ends the answer in the page',
    () => page.$$eval('.msg.assistant', (ms) => ms[ms.length - 1].dataset.done === 'stopped'));
  await until('after stop the server runs nothing and holds no block', async () =>
    (await metric('vllm:num_requests_running')) === 0 && (await metric('pagellm_kv_blocks_used')) === 0, 5000);
  const stoppedLen = await page.$$eval('.msg.assistant .choice', (cs) => cs[cs.length - 1].textContent.length);
  check('the stopped answer is partial', streamed && stoppedLen < 1500, stoppedLen);
  await page.screenshot({ path: outDir + '/webui-chat.png' });

  // n = 2 while the KV view is open: used and shared blocks, then everything free again.
  await setField('#n', 2);
  await setField('#max_tokens', 120);
  await page.type('#input', 'Two stories, please');
  await page.keyboard.press('Enter');
  await until('two choices stream', () => page.$$eval('.msg.assistant', (ms) =>
    ms[ms.length - 1].querySelectorAll('.choice').length === 2));
  await page.click('#tab-kv');
  await until('KV view: used blocks > 0 and shared blocks > 0 while n = 2 runs', () => page.evaluate(() =>
    Number(document.getElementById('kv-used').textContent) > 0 &&
    Number(document.getElementById('kv-shared').textContent) > 0 &&
    document.querySelectorAll('#seq-list li[data-key]').length === 2));
  const grid = await page.evaluate(() => {
    const k = window.pagellm.kv;
    return { n: k.blocks.length, total: k.num_blocks, shared: k.blocks.filter((s) => s === 3).length };
  });
  check('the grid covers every block of the pool', grid.n === grid.total && grid.total > 0, JSON.stringify(grid));
  // The list is redrawn with every KV picture (a few a second): an item found a moment ago may
  // be gone when the mouse reaches it, so hover again on a fresh one.
  for (let i = 0; ; i++) {
    try { await page.hover('#seq-list li[data-key]'); break; } catch (e) {
      if (i >= 10 || !/detached|not attached|No node/i.test(String(e))) throw e;
      await sleep(50);
    }
  }
  check('hovering a sequence highlights it', await page.evaluate(() => window.pagellm.hotSeq !== null));
  await sleep(600); // let the chart and grid catch a few pictures
  await page.screenshot({ path: outDir + '/webui-kv.png' });
  await page.mouse.move(5, 5);
  await until('after the answer ends every block is free (page)', () => page.evaluate(() =>
    Number(document.getElementById('kv-used').textContent) === 0 &&
    Number(document.getElementById('kv-shared').textContent) === 0 &&
    Number(document.getElementById('kv-running').textContent) === 0), 30000);
  const k = await kvBlocks();
  check('after the answer ends every block is free (/v1/kv/blocks)',
    k.counts.used === 0 && k.counts.shared === 0 && k.stats.running === 0, JSON.stringify(k.counts));
  check('the n = 2 answer finished', await page.$$eval('.msg.assistant', (ms) => ms[ms.length - 1].dataset.done === 'finished'));
  check('no window pool shown for a model without one', k.num_window_blocks === 0 &&
    await page.evaluate(() => document.getElementById('window-part').classList.contains('hidden') &&
                              document.getElementById('kv-full-title').classList.contains('hidden')));
}

// What the page shows of the window pool and what it drew, read in one go (the picture and the
// canvas change together, 4 times a second): its counters, the picture they come from, the
// grid's layout and the colour drawn for the first used window block (null: none used).
const windowView = (page) => page.evaluate(() => {
  const $ = (id) => document.getElementById(id);
  const k = window.pagellm.kv;
  if (!k) return null;
  const num = (id) => Number($(id).textContent);
  const g = $('window-grid'), L = g.layout;
  const used = (k.window_blocks || []).indexOf(2);
  let color = null;
  if (L && used >= 0) {
    const dpr = window.devicePixelRatio || 1;
    const x = ((used % L.cols) * L.cell + 1) * dpr, y = (Math.floor(used / L.cols) * L.cell + 1) * dpr;
    color = Array.from(g.getContext('2d').getImageData(x, y, 1, 1).data.slice(0, 3)).join(',');
  }
  return { shown: !$('window-part').classList.contains('hidden') && g.clientHeight > 0,
           titled: !$('kv-full-title').classList.contains('hidden'),
           n: k.num_window_blocks, total: num('kvw-total'), used: num('kvw-used'),
           shared: num('kvw-shared'), cached: num('kvw-cached'), free: num('kvw-free'),
           released: num('kvw-released'), counts: k.window_counts, freed: k.stats.window_freed_blocks,
           grid: L && L.pool === 'w' ? L.n : 0, color: color, seqs: $('seq-list').textContent,
           nSwap: k.num_window_swap_blocks, swapped: $('kvw-swapped').textContent,
           swapShown: !$('window-swap-part').classList.contains('hidden') &&
             $('window-swap-grid').clientHeight > 0,
           swapGrid: $('window-swap-grid').layout ? $('window-swap-grid').layout.n : 0 };
});
// The page's window counters say what its picture says ("free": the pool's own, where the
// picture's counts include its free swap blocks; its swap pool: "swapped / blocks", drawn).
const countersMatch = (v) => v.total === v.n && v.used === v.counts.used + v.counts.shared &&
  v.shared === v.counts.shared && v.cached === v.counts.cached &&
  v.free === v.n - v.counts.used - v.counts.shared - v.counts.cached && v.released === v.freed &&
  v.swapped === v.counts.swapped + ' / ' + v.nSwap && v.nSwap > 0 && v.swapShown && v.swapGrid === v.nSwap;

// The KV view of a model with a window pool (a gemma3: 5 window layers to 1 global, window 16):
// the pool is shown beside the full one, its grid covers its blocks, its counters follow
// /v1/kv/blocks while a request slides through the window, and every block is free after.
async function windowPoolView(page) {
  await page.goto(base + '/#kv', { waitUntil: 'load' });
  const k0 = await kvBlocks();
  check('/v1/kv/blocks: the gemma3 has a window pool', k0.num_window_blocks > 0 &&
        k0.num_window_blocks === k0.stats.window_blocks_total &&
        k0.window_blocks.length === k0.num_window_blocks, JSON.stringify(k0.stats));
  await until('the KV view shows the window pool, every block of it free', async () => {
    const v = await windowView(page);
    return v && v.shown && v.titled && v.n === k0.num_window_blocks && v.grid === v.n &&
      countersMatch(v) && v.free === v.n;
  });
  // ~35 prompt tokens and up to 400 more (10 s at 25 ms a step; stopped once seen): blocks
  // leave the 16-token window as the request runs.
  const prompt = 'Once upon a time, there was a little girl named Lily. She liked to play in the park ' +
                 'with her friends every day after school.';
  const stop = new AbortController();
  const answer = fetch(base + '/v1/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: stop.signal,
    body: JSON.stringify({ prompt: prompt, max_tokens: 400, ignore_eos: true, stream: true }),
  }).then((r) => r.body.getReader().read()).then(() => 'streaming', (e) => e.name);
  await until('while it runs: window blocks in use and released, counters = picture, used blocks drawn blue',
    async () => {
      const v = await windowView(page);
      return v && v.shown && v.used > 0 && v.released > 0 && countersMatch(v) &&
        v.color === '74,143,231' && / \+ \d+ window/.test(v.seqs) && v;
    });
  // Hover a used window block: the tip names it and its holder.
  await until('hovering a used window block names it and its request', async () => {
    const at = await page.evaluate(() => {
      const g = document.getElementById('window-grid'), L = g.layout;
      const i = window.pagellm.kv.window_blocks.indexOf(2);
      if (i < 0 || !L) return null;
      g.scrollIntoView({ block: 'center' });
      const r = g.getBoundingClientRect();
      return { i: i, x: r.left + (i % L.cols) * L.cell + L.cell / 2, y: r.top + Math.floor(i / L.cols) * L.cell + L.cell / 2 };
    });
    if (!at) return false;
    await page.mouse.move(at.x, at.y);
    const tip = await page.$eval('#grid-tip', (t) => t.classList.contains('hidden') ? '' : t.textContent);
    return tip.startsWith('window block ' + at.i + ': used by one sequence') && /request \d+ seq 0/.test(tip) && tip;
  });
  await page.screenshot({ path: outDir + '/webui-kv-window.png' });
  await page.mouse.move(5, 5);
  check('the gemma3 answer was still streaming', (await answer) === 'streaming');
  stop.abort();
  const v = await until('after it is stopped every window block is free or cached, counters = picture', async () => {
    const v = await windowView(page);
    return v && v.used === 0 && v.free + v.cached === v.n && countersMatch(v) && v.released > 0 && v;
  });
  const k = await kvBlocks();
  const c = k.window_counts; // over the pool and its swap pool: the page's free is the pool's
  check('the page shows what /v1/kv/blocks says after the run', v &&
        v.free === k.num_window_blocks - c.used - c.shared - c.cached && c.cached === v.cached &&
        c.swapped === 0 && k.stats.window_freed_blocks === v.released,
        JSON.stringify({ page: v, api: k.window_counts }));
}

const browser = await puppeteer.launch({
  executablePath: chromium, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
});
const errors = [];
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 860 });
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error' && !/401/.test(m.text())) errors.push(m.text()); });
  const requests = [];
  page.on('request', (r) => requests.push(r.url()));

  if (mode === 'window') await windowPoolView(page);
  else await playground(page);

  const foreign = requests.filter((u) => !u.startsWith(base));
  check('the page loads nothing from elsewhere', foreign.length === 0, foreign.join(' '));
  check('no JavaScript errors', errors.length === 0, errors.join(' | '));
} catch (e) {
  check('browser session', false, e.stack);
} finally {
  await browser.close();
}
console.log(passed + ' passed, ' + failed + ' failed');
process.exit(failed ? 1 : 0);

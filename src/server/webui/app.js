// pagellm's web page: chat playground and live KV cache view. Plain JS, no dependencies; it
// speaks only the server's public API: /v1/models, /v1/chat/completions (streamed),
// /v1/chat/render, /v1/kv/blocks. The API key (if the server wants one) is asked once, kept in
// localStorage and sent as a bearer token.
'use strict';

const $ = (id) => document.getElementById(id);
// Block states of GET /v1/kv/blocks (pl_kv_block_state); colours as in style.css.
const STATE_NAMES = ['free', 'free, cached prefix', 'used by one sequence', 'shared', 'swapped out'];
const STATE_COLORS = ['#e4e7ec', '#9fd8c4', '#4a8fe7', '#e8833a', '#8e5bd8'];
// The block grids: canvas, pool letter (holders' keys, hover), field of /v1/kv/blocks, height.
const GRIDS = [['grid', 'p', 'blocks', 420], ['swap-grid', 's', 'swap_blocks', 160],
               ['window-grid', 'w', 'window_blocks', 200],
               ['window-swap-grid', 'v', 'window_swap_blocks', 120]];
const KV_POLL_MS = 250;          // a few pictures a second while the KV view is open
const CHART_SECONDS = 300;       // the chart shows the last five minutes

const state = {
  apiKey: localStorage.getItem('pagellm.apiKey') || '',
  model: null,
  history: [],                   // [{role, content}] of the conversation (choice 0 of answers)
  controller: null,              // AbortController of the running answer
  kv: null,                      // last /v1/kv/blocks body
  kvTimer: null,
  hotSeq: null,                  // "req:index" hovered in the sequence list
  samples: [],                   // [{t, running, waiting, usage}] for the chart, one per second
};
window.pagellm = state;          // for the browser test and for the curious

// ---- API key and requests ----

function authHeaders(extra) {
  const h = Object.assign({}, extra || {});
  if (state.apiKey) h.Authorization = 'Bearer ' + state.apiKey;
  return h;
}

let keyWaiters = [];
function askKey(message) {
  $('key-error').textContent = message || '';
  $('key-dialog').classList.remove('hidden');
  $('key-input').focus();
  return new Promise((resolve) => keyWaiters.push(resolve));
}

$('key-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  state.apiKey = $('key-input').value.trim();
  const r = await fetch('/v1/models', { headers: authHeaders() });
  if (r.status === 401) {
    $('key-error').textContent = 'The server refused this key.';
    return;
  }
  localStorage.setItem('pagellm.apiKey', state.apiKey);
  $('key-dialog').classList.add('hidden');
  await loadModel(r);
  keyWaiters.forEach((w) => w());
  keyWaiters = [];
});
$('key-button').addEventListener('click', () => askKey(''));

// fetch with the key; on 401 ask for a key once and retry.
async function api(path, opts) {
  opts = opts || {};
  for (let attempt = 0; ; attempt++) {
    const r = await fetch(path, Object.assign({}, opts, { headers: authHeaders(opts.headers) }));
    if (r.status !== 401 || attempt > 0) return r;
    await askKey(state.apiKey ? 'The server refused the saved key.' : '');
  }
}

async function errorText(r) {
  try {
    const j = await r.json();
    return (j.error && j.error.message) || JSON.stringify(j);
  } catch (e) {
    return 'HTTP ' + r.status;
  }
}

async function loadModel(r) {
  r = r || await api('/v1/models');
  if (!r.ok) return;
  const j = await r.json();
  state.model = j.data && j.data[0] ? j.data[0].id : null;
  $('model-name').textContent = state.model ? state.model + ' · max ' + j.data[0].max_model_len + ' tokens' : '';
}

// ---- tabs ----

function showView(name) {
  document.querySelectorAll('.tab').forEach((t) => t.classList.toggle('active', t.dataset.view === name));
  $('view-chat').classList.toggle('hidden', name !== 'chat');
  $('view-kv').classList.toggle('hidden', name !== 'kv');
  if (name === 'kv') startKV(); else stopKV();
}
document.querySelectorAll('.tab').forEach((t) => t.addEventListener('click', () => showView(t.dataset.view)));

// ---- chat ----

function numberField(id) {
  const v = $(id).value.trim();
  return v === '' ? null : Number(v);
}

function requestMessages(extraUser) {
  const msgs = [];
  const sys = $('system').value.trim();
  if (sys) msgs.push({ role: 'system', content: sys });
  for (const m of state.history) msgs.push(m);
  if (extraUser) msgs.push({ role: 'user', content: extraUser });
  return msgs;
}

function addMessage(role, text) {
  const div = document.createElement('div');
  div.className = 'msg ' + role;
  const r = document.createElement('div');
  r.className = 'role';
  r.textContent = role;
  div.appendChild(r);
  if (text !== undefined) {
    const c = document.createElement('div');
    c.className = 'choice';
    c.textContent = text;
    div.appendChild(c);
  }
  $('messages').appendChild(div);
  $('messages').scrollTop = $('messages').scrollHeight;
  return div;
}

function fmtLogprob(lp) {
  return (lp === null || lp === undefined) ? 'n/a' : lp.toFixed(3) + ' (p=' + Math.exp(lp).toFixed(3) + ')';
}

// One span per streamed piece; with log-probabilities its tokens show on hover.
function appendPiece(choiceDiv, text, lps) {
  const span = document.createElement('span');
  span.textContent = text;
  if (lps && lps.length) {
    span.className = 'tok';
    span.dataset.tip = lps.map((t) => {
      let s = JSON.stringify(t.token) + '  ' + fmtLogprob(t.logprob);
      for (const a of t.top_logprobs || []) s += '\n   ' + JSON.stringify(a.token) + '  ' + fmtLogprob(a.logprob);
      return s;
    }).join('\n');
  }
  choiceDiv.appendChild(span);
}

document.addEventListener('mouseover', (ev) => {
  const t = ev.target;
  const tip = $('lp-tip');
  if (t.classList && t.classList.contains('tok') && t.dataset.tip) {
    tip.textContent = t.dataset.tip;
    const r = t.getBoundingClientRect();
    tip.style.left = Math.min(r.left, window.innerWidth - 330) + 'px';
    tip.style.top = (r.bottom + 6) + 'px';
    tip.classList.remove('hidden');
  } else {
    tip.classList.add('hidden');
  }
});

async function showRendered(messages, pre) {
  const r = await api('/v1/chat/render', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: messages, add_generation_prompt: true }),
  });
  pre.textContent = r.ok ? await r.json().then((j) => j.prompt + '\n\n(' + j.count + ' tokens, template ' + j.template + ')')
                         : 'error: ' + await errorText(r);
  pre.classList.remove('hidden');
}

$('show-prompt').addEventListener('click', () => {
  const pre = $('rendered');
  if (!pre.classList.contains('hidden')) { pre.classList.add('hidden'); return; }
  showRendered(requestMessages($('input').value.trim() || undefined), pre);
});

$('clear').addEventListener('click', () => {
  if (state.controller) return;
  state.history = [];
  $('messages').textContent = '';
});

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
}

async function send() {
  const text = $('input').value.trim();
  if (!text || state.controller) return;
  const messages = requestMessages(text);
  $('input').value = '';
  state.history.push({ role: 'user', content: text });
  addMessage('user', text);
  const msg = addMessage('assistant');
  const meta = document.createElement('div');
  meta.className = 'meta';
  meta.textContent = 'waiting…';

  const body = {
    messages: messages, stream: true, stream_options: { include_usage: true },
    temperature: numberField('temperature'), top_p: numberField('top_p'), top_k: numberField('top_k'),
    max_tokens: numberField('max_tokens'), n: numberField('n') || 1,
  };
  if (state.model) body.model = state.model;
  const seed = numberField('seed');
  if (seed !== null) body.seed = seed;
  if ($('logprobs').checked) { body.logprobs = true; body.top_logprobs = 5; }
  if ($('ignore_eos').checked) body.ignore_eos = true;
  for (const k of Object.keys(body)) if (body[k] === null) delete body[k];

  const choices = [];             // index -> {div, text, tokens, finish}
  const choice = (i) => {
    if (!choices[i]) {
      const d = document.createElement('div');
      d.className = 'choice';
      d.dataset.index = i;
      if (body.n > 1) {
        const l = document.createElement('span');
        l.className = 'idx';
        l.textContent = 'choice ' + i;
        d.appendChild(l);
      }
      // keep choices in index order
      const after = choices.slice(0, i).filter(Boolean).pop();
      if (after) after.div.after(d); else msg.insertBefore(d, msg.children[1] || null);
      choices[i] = { div: d, text: '', tokens: 0, finish: null };
    }
    return choices[i];
  };
  msg.appendChild(meta);

  state.controller = new AbortController();
  setBusy(true);
  const t0 = performance.now();
  let tFirst = null, tLast = null, usage = null, stopped = false, error = null;
  try {
    const r = await api('/v1/chat/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body), signal: state.controller.signal,
    });
    if (!r.ok) throw new Error(await errorText(r));
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of event.split('\n')) {
          if (!line.startsWith('data: ')) continue;
          const data = line.slice(6);
          if (data === '[DONE]') continue;
          const j = JSON.parse(data);
          if (j.error) throw new Error(j.error.message);
          if (j.usage) usage = j.usage;
          for (const c of j.choices || []) {
            const ch = choice(c.index);
            const piece = c.delta && c.delta.content;
            const lps = c.logprobs && c.logprobs.content;
            if (piece) {
              if (tFirst === null) tFirst = performance.now();
              tLast = performance.now();
              ch.text += piece;
              appendPiece(ch.div, piece, lps);
            }
            ch.tokens += lps ? lps.length : (piece ? 1 : 0);
            if (c.finish_reason) ch.finish = c.finish_reason;
          }
          meta.textContent = 'streaming…';
          $('messages').scrollTop = $('messages').scrollHeight;
        }
      }
    }
  } catch (e) {
    if (e.name === 'AbortError') stopped = true; else error = e.message;
  }
  state.controller = null;
  setBusy(false);
  const tEnd = performance.now();
  if (error) {
    msg.classList.add('err');
    const d = document.createElement('div');
    d.textContent = error;
    msg.insertBefore(d, meta);
  }
  const answer = choices[0] ? choices[0].text : '';
  if (answer) state.history.push({ role: 'assistant', content: answer });
  else if (!error) state.history.pop();  // nothing came back: forget the question too
  const tokens = usage ? usage.completion_tokens : choices.reduce((s, c) => s + (c ? c.tokens : 0), 0);
  const parts = [];
  if (tFirst !== null) parts.push('time to first token ' + (tFirst - t0).toFixed(0) + ' ms');
  if (tFirst !== null && tLast > tFirst && tokens > 1)
    parts.push((tokens / ((tEnd - tFirst) / 1000)).toFixed(1) + ' tokens/s');
  parts.push(tokens + ' tokens');
  if (stopped) parts.push('stopped');
  else {
    const fins = choices.filter(Boolean).map((c) => c.finish).filter(Boolean);
    if (fins.length) parts.push('finish: ' + Array.from(new Set(fins)).join(', '));
  }
  meta.textContent = parts.join(' · ') + ' · ';
  msg.dataset.done = stopped ? 'stopped' : error ? 'error' : 'finished';
  const link = document.createElement('button');
  link.className = 'small';
  link.textContent = 'prompt';
  link.title = 'what the chat template produced for this answer';
  const pre = document.createElement('pre');
  pre.className = 'hidden';
  pre.id = '';
  link.addEventListener('click', () => {
    if (!pre.classList.contains('hidden')) pre.classList.add('hidden'); else showRendered(messages, pre);
  });
  meta.appendChild(link);
  msg.appendChild(pre);
}

$('composer').addEventListener('submit', (ev) => { ev.preventDefault(); send(); });
$('input').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    send();
  }
});
$('stop').addEventListener('click', () => { if (state.controller) state.controller.abort(); });

// ---- KV cache view ----

function startKV() {
  if (state.kvTimer === null) { state.kvTimer = 0; pollKV(); }
}
function stopKV() {
  if (state.kvTimer) clearTimeout(state.kvTimer);
  state.kvTimer = null;
}

async function pollKV() {
  if (state.kvTimer === null) return;
  try {
    const r = await api('/v1/kv/blocks?tables=1');
    if (r.ok) {
      state.kv = await r.json();
      renderKV();
      $('kv-status').textContent = 'picture ' + state.kv.version + ', step ' + state.kv.steps;
    } else {
      $('kv-status').textContent = 'error: ' + await errorText(r);
    }
  } catch (e) {
    $('kv-status').textContent = 'error: ' + e.message;
  }
  if (state.kvTimer !== null) state.kvTimer = setTimeout(pollKV, KV_POLL_MS);
}

function pct(x) { return (100 * x).toFixed(1) + ' %'; }

function renderKV() {
  const k = state.kv;
  const c = k.counts, s = k.stats;
  $('kv-total').textContent = k.num_blocks;
  $('kv-used').textContent = c.used + c.shared;
  $('kv-shared').textContent = c.shared;
  $('kv-cached').textContent = c.cached;
  $('kv-free').textContent = k.num_blocks - c.used - c.shared - c.cached;
  $('kv-swapped').textContent = c.swapped + ' / ' + k.num_swap_blocks;
  $('kv-usage').textContent = pct(s.kv_usage);
  $('kv-hit').textContent = s.prefix_queries ? pct(s.prefix_hit_rate) : '-';
  $('kv-preempt').textContent = s.preemptions;
  $('kv-swaps').textContent = s.swaps_out;
  $('kv-running').textContent = s.running;
  $('kv-waiting').textContent = s.waiting;
  // Layer kinds (Gemma 3 / 4): the window layers' pool beside the full one.
  const nw = k.num_window_blocks || 0;
  $('window-part').classList.toggle('hidden', nw === 0);
  $('kv-full-title').classList.toggle('hidden', nw === 0);
  if (nw) {
    const w = k.window_counts;
    $('kvw-total').textContent = nw;
    $('kvw-used').textContent = w.used + w.shared;
    $('kvw-shared').textContent = w.shared;
    $('kvw-cached').textContent = w.cached;
    $('kvw-free').textContent = nw - w.used - w.shared - w.cached;
    $('kvw-released').textContent = s.window_freed_blocks;
    $('kvw-swapped').textContent = w.swapped + ' / ' + (k.num_window_swap_blocks || 0);
  }
  $('window-swap-part').classList.toggle('hidden', !(k.num_window_swap_blocks > 0));
  // who holds each block, for hover
  state.holders = new Map();
  for (const t of k.tables || []) {
    for (const [, pool] of GRIDS) {
      for (const b of tableBlocks(t, pool) || []) {
        if (b < 0) continue; // released by the sliding window: nothing held there
        if (!state.holders.has(pool + b)) state.holders.set(pool + b, []);
        state.holders.get(pool + b).push(t);
      }
    }
  }
  renderSeqList();
  $('swap-part').classList.toggle('hidden', k.num_swap_blocks === 0);
  redrawGrids();
  addSample(s.running, s.waiting, s.kv_usage);
}

// The block ids table t holds in pool 'p' (primary), 's' (swap), 'w' (window pool) or 'v' (the
// window pool's swap, where a swapped sequence's window blocks are), or null.
function tableBlocks(t, pool) {
  if (pool === 'w' || pool === 'v') {
    return (t.swapped ? 'v' : 'w') === pool ? t.window_blocks || [] : null;
  }
  return (t.swapped ? 's' : 'p') === pool ? t.blocks : null;
}

// The chart keeps one sample a second, from the KV pictures while the view is open and from
// /metrics otherwise (the engine's stats snapshot: no KV picture is asked for in the background).
function addSample(running, waiting, usage) {
  const now = performance.now() / 1000;
  const last = state.samples[state.samples.length - 1];
  if (!last || now - last.t >= 0.95) {
    state.samples.push({ t: now, running: running, waiting: waiting, usage: usage });
    while (state.samples.length && now - state.samples[0].t > CHART_SECONDS) state.samples.shift();
  }
  if (!$('view-kv').classList.contains('hidden')) drawChart();
}

async function sampleMetrics() {
  if (state.kvTimer === null) {
    try {
      const t = await (await fetch('/metrics')).text();
      const get = (name) => {
        const line = t.split('\n').find((l) => l.startsWith(name + '{'));
        return line ? Number(line.split(' ').pop()) : 0;
      };
      addSample(get('vllm:num_requests_running'), get('vllm:num_requests_waiting'),
                get('pagellm_kv_cache_usage_perc'));
    } catch (e) { /* the server may be restarting: try again in a second */ }
  }
  setTimeout(sampleMetrics, 1000);
}

function seqKey(t) { return t.request_id + ':' + t.index; }

function renderSeqList() {
  const ul = $('seq-list');
  const tables = state.kv.tables || [];
  ul.textContent = '';
  if (!tables.length) {
    const li = document.createElement('li');
    li.className = 'muted';
    li.textContent = 'none: no sequence holds blocks';
    ul.appendChild(li);
  }
  for (const t of tables) {
    const li = document.createElement('li');
    const shared = t.blocks.filter((b) => !t.swapped && state.kv.blocks[b] === 3).length;
    const window = (t.window_blocks || []).filter((b) => b >= 0).length;
    li.textContent = 'request ' + t.request_id + ' · seq ' + t.index + ' · ' + t.tokens + ' tokens · ' +
      t.blocks.filter((b) => b >= 0).length + ' blocks' + (shared ? ' (' + shared + ' shared)' : '') +
      (state.kv.num_window_blocks ? ' + ' + window + ' window' : '') + (t.swapped ? ' · swapped' : '');
    li.dataset.key = seqKey(t);
    if (state.hotSeq === li.dataset.key) li.classList.add('hot');
    li.addEventListener('mouseenter', () => { state.hotSeq = li.dataset.key; redrawGrids(); });
    li.addEventListener('mouseleave', () => { state.hotSeq = null; redrawGrids(); });
    ul.appendChild(li);
  }
}

function redrawGrids() {
  if (!state.kv) return;
  for (const [id, pool, field, maxH] of GRIDS) drawGrid($(id), state.kv[field] || [], pool, maxH);
}

// Blocks as squares, row-major, sized so the whole pool fits in about maxH pixels.
function drawGrid(canvas, blocks, pool, maxH) {
  const n = blocks.length;
  if (!n) return;
  const dpr = window.devicePixelRatio || 1;
  const W = canvas.clientWidth || 800;
  let cell = Math.floor(Math.sqrt((W * maxH) / n));
  cell = Math.max(3, Math.min(18, cell));
  const cols = Math.max(1, Math.floor(W / cell));
  const rows = Math.ceil(n / cols);
  canvas.width = W * dpr;
  canvas.height = rows * cell * dpr;
  canvas.style.height = rows * cell + 'px';
  canvas.layout = { cell: cell, cols: cols, n: n, pool: pool };
  const g = canvas.getContext('2d');
  g.scale(dpr, dpr);
  let hot = null;
  if (state.hotSeq) {
    const t = (state.kv.tables || []).find((x) => seqKey(x) === state.hotSeq);
    const ids = t && tableBlocks(t, pool);
    if (ids) hot = new Set(ids.filter((b) => b >= 0));
  }
  const gap = cell > 5 ? 1 : 0;
  for (let i = 0; i < n; i++) {
    const x = (i % cols) * cell, y = Math.floor(i / cols) * cell;
    g.globalAlpha = hot && !hot.has(i) ? 0.25 : 1;
    g.fillStyle = STATE_COLORS[blocks[i]] || '#000';
    g.fillRect(x, y, cell - gap, cell - gap);
  }
  g.globalAlpha = 1;
  if (hot) {
    g.strokeStyle = '#111';
    g.lineWidth = Math.max(1, cell / 6);
    for (const i of hot) {
      const x = (i % cols) * cell, y = Math.floor(i / cols) * cell;
      g.strokeRect(x + 0.5, y + 0.5, cell - gap - 1, cell - gap - 1);
    }
  }
}

function gridHover(canvas, ev) {
  const tip = $('grid-tip');
  const L = canvas.layout;
  if (!L || !state.kv) return;
  const r = canvas.getBoundingClientRect();
  const col = Math.floor((ev.clientX - r.left) / L.cell), row = Math.floor((ev.clientY - r.top) / L.cell);
  const i = row * L.cols + col;
  if (col >= L.cols || i < 0 || i >= L.n) { tip.classList.add('hidden'); return; }
  const st = state.kv[GRIDS.find((g) => g[1] === L.pool)[2]][i];
  const who = (state.holders && state.holders.get(L.pool + i)) || [];
  tip.textContent = { p: 'block ', s: 'swap block ', w: 'window block ' }[L.pool] + i + ': ' + STATE_NAMES[st] +
    who.map((t) => '\n  request ' + t.request_id + ' seq ' + t.index).join('');
  tip.style.left = (ev.clientX + 12) + 'px';
  tip.style.top = (ev.clientY + 12) + 'px';
  tip.classList.remove('hidden');
}
for (const [id] of GRIDS) {
  $(id).addEventListener('mousemove', (ev) => gridHover($(id), ev));
  $(id).addEventListener('mouseleave', () => $('grid-tip').classList.add('hidden'));
}

function drawChart() {
  const canvas = $('chart');
  const dpr = window.devicePixelRatio || 1;
  const W = canvas.clientWidth || 800, H = 140;
  canvas.width = W * dpr;
  canvas.height = H * dpr;
  const g = canvas.getContext('2d');
  g.scale(dpr, dpr);
  const pad = { l: 36, r: 44, t: 10, b: 20 };
  const w = W - pad.l - pad.r, h = H - pad.t - pad.b;
  const now = performance.now() / 1000;
  const S = state.samples;
  const maxReq = Math.max(1, ...S.map((s) => Math.max(s.running, s.waiting)));
  g.font = '11px system-ui, sans-serif';
  g.fillStyle = '#6b7385';
  g.strokeStyle = '#dde1e8';
  g.beginPath();
  for (let k = 0; k <= 4; k++) {
    const y = pad.t + (h * k) / 4;
    g.moveTo(pad.l, y); g.lineTo(pad.l + w, y);
  }
  g.stroke();
  g.fillText(String(maxReq), 4, pad.t + 8);
  g.fillText('0', 4, pad.t + h);
  g.fillText('100 %', pad.l + w + 4, pad.t + 8);
  g.fillText('0 %', pad.l + w + 4, pad.t + h);
  g.fillText('-' + CHART_SECONDS / 60 + ' min', pad.l, H - 4);
  g.fillText('now', pad.l + w - 20, H - 4);
  const X = (t) => pad.l + w - ((now - t) / CHART_SECONDS) * w;
  const line = (color, f) => {
    g.strokeStyle = color;
    g.fillStyle = color;
    g.lineWidth = 2;
    g.beginPath();
    S.forEach((s, i) => { const x = X(s.t), y = pad.t + h - f(s) * h; if (i) g.lineTo(x, y); else g.moveTo(x, y); });
    g.stroke();
    if (S.length) { const s = S[S.length - 1]; g.fillRect(X(s.t) - 2, pad.t + h - f(s) * h - 2, 4, 4); }
  };
  line('#4a8fe7', (s) => s.running / maxReq);
  line('#c62828', (s) => s.waiting / maxReq);
  line('#e8833a', (s) => s.usage);
  const legend = [['running', '#4a8fe7'], ['waiting', '#c62828'], ['KV usage', '#e8833a']];
  legend.forEach(([name, color], i) => {
    g.fillStyle = color;
    g.fillRect(pad.l + 8 + i * 90, pad.t + 2, 10, 10);
    g.fillStyle = '#1d2330';
    g.fillText(name, pad.l + 22 + i * 90, pad.t + 11);
  });
}

// ---- start ----

loadModel().catch(() => {});
sampleMetrics();
if (location.hash === '#kv') showView('kv');

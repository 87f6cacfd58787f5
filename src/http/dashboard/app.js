// @ts-check
// The dashboard page: follows /v1/dashboard/events and keeps the tables in step with
// each snapshot. Rows are patched in place, keyed by name, so an update never takes
// the keyboard focus or an open timeline away from the reader. Text only ever goes
// in through textContent and attributes (the CSP forbids HTML string sinks anyway).
/* global document, window, EventSource, URL, CSS, HTMLElement, Element */

// What the server sends: the view model of src/http/dashboard-view.ts. `npm run check`
// type-checks this script against it (src/http/dashboard/tsconfig.json), so the page
// and the server cannot drift apart.
/**
 * @typedef {import('../dashboard-view.ts').DashboardView} DashboardView
 * @typedef {import('../dashboard-view.ts').CheckRow} CheckRow
 * @typedef {import('../dashboard-view.ts').PolicyRow} PolicyRow
 * @typedef {import('../dashboard-view.ts').ActionRow} ActionRow
 * @typedef {import('../dashboard-view.ts').HookRunRow} HookRunRow
 * @typedef {import('../dashboard-view.ts').NodeRow} NodeRow
 */

/** @type {Record<CheckRow['state'], string>} */
const STATE_SYMBOLS = { Healthy: '✓', Unhealthy: '✗', Unknown: '?' };
/** @type {Record<import('../dashboard-view.ts').StepState, [string, string]>} */
const STEP_WORDS = {
  done: ['✓', 'done'],
  current: ['▶', 'in progress'],
  skipped: ['–', 'skipped'],
  upcoming: ['○', 'not yet'],
  notReached: ['○', 'not reached'],
  ended: ['✗', 'ended'],
};
/** @type {Partial<Record<ActionRow['phase'], string>>} */
const PHASE_SYMBOLS = { Succeeded: '✓', Failed: '✗', Denied: '✗', Cancelled: '✗' };
/** @type {Record<HookRunRow['phase'], string>} */
const HOOK_SYMBOLS = { Succeeded: '✓', Failed: '✗', Running: '▶', Pending: '○', Bypassed: '–' };
const RECONNECT_MS = 5000;
const CHANGES_KEPT = 20;

/** Timelines the reader opened, by action name: kept open across updates. */
/** @type {Set<string>} */
const expanded = new Set();
/**
 * Rendered rows by section and key, with the data they were rendered from.
 * @type {Map<string, Map<string, { element: HTMLElement, data: string, notice: string }>>}
 */
const rendered = new Map();
/** @type {DashboardView | undefined} */
let previous;

/**
 * An element the page must have (index.html): its absence is a bug worth an error.
 * @param {string} id
 */
function byId(id) {
  const element = document.getElementById(id);
  if (!element) throw new Error(`the dashboard page has no element #${id}`);
  return element;
}

// ---------------------------------------------------------------------------------
// Building DOM without HTML strings.

/**
 * @typedef {Node | string | null | undefined | false} Child
 * @param {string} tag
 * @param {Record<string, string | number | boolean | null | undefined> | null} [attributes]
 * @param {...(Child | Child[])} children
 * @returns {HTMLElement}
 */
function h(tag, attributes, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'text') element.textContent = String(value);
    else element.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    element.append(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return element;
}

/** @param {string} iso */
function formatTime(iso) {
  const date = new Date(iso);
  const sameDay = date.toDateString() === new Date().toDateString();
  return sameDay
    ? date.toLocaleTimeString(undefined, { hour12: false })
    : date.toLocaleString(undefined, { hour12: false });
}

/** @param {string | null | undefined} iso */
function time(iso, fallback = '—') {
  if (!iso) return h('span', { class: 'muted', text: fallback });
  return h('time', { datetime: iso, title: iso, text: formatTime(iso) });
}

/**
 * A state as a symbol (decoration, hidden from screen readers) and a word (always shown).
 * @param {string} kind
 * @param {string} state
 * @param {string} symbol
 */
function badge(kind, state, symbol, word = state) {
  return h(
    'span',
    { class: `badge ${kind}`, 'data-state': state },
    h('span', { class: 'symbol', 'aria-hidden': 'true', text: symbol }),
    ` ${word}`,
  );
}

/**
 * @param {string[]} list
 * @param {number} total
 * @param {string} noun
 */
function names(list, total, noun) {
  if (total === 0) return `no ${noun}s`;
  const more = total > list.length ? ` and ${String(total - list.length)} more` : '';
  return `${String(total)} ${noun}${total === 1 ? '' : 's'} (${list.join(', ')}${more})`;
}

// ---------------------------------------------------------------------------------
// Rows.

/** @param {CheckRow} check */
function checkRow(check) {
  const gates = check.gates;
  const actions = gates.allActions ? 'every action' : gates.actions.join(', ');
  const nodes = gates.nodeSelector
    ? `${names(gates.nodes, gates.nodeCount, 'node')} matching ${gates.nodeSelector}`
    : `every node (${String(gates.nodeCount)})`;
  return h(
    'tr',
    {},
    h('th', { scope: 'row', text: check.name }),
    h('td', {}, badge('check-state', check.state, STATE_SYMBOLS[check.state] ?? '?')),
    h('td', {}, time(check.lastProbeTime, 'not probed yet')),
    h(
      'td',
      {},
      h('div', { text: `${actions} on ${nodes}` }),
      check.gatedActions.length > 0 &&
        h('div', { class: 'muted', text: `now gating: ${check.gatedActions.join(', ')}` }),
    ),
    h(
      'td',
      { class: 'message' },
      check.nodeResults ? nodeResults(check.name, check.nodeResults) : check.message,
    ),
  );
}

/**
 * A Node-scoped check's results, one line per unsafe node: "worker-2: ok-to-stop: …".
 * @param {string} name
 * @param {NonNullable<CheckRow['nodeResults']>} results
 */
function nodeResults(name, results) {
  const more = results.unsafe - results.unsafeNodes.length;
  return h(
    'div',
    {},
    h('div', { text: `${String(results.safe)} of ${String(results.evaluated)} evaluated nodes safe` }),
    ...results.unsafeNodes.map((n) =>
      h('div', { class: 'unsafe-node', text: `${n.name}: ${name}: ${n.message}` }),
    ),
    more > 0 && h('div', { class: 'muted', text: `and ${String(more)} more unsafe nodes` }),
  );
}

/** @param {PolicyRow} policy */
function policyRow(policy) {
  const w = policy.window;
  let windowText;
  if (w.always) windowText = 'no windows: always open';
  else if (w.open) windowText = w.closesAt ? 'closes at ' : '';
  else windowText = w.nextStart ? 'next opens ' : 'no window will open';
  const windowState = w.open ? 'Open' : 'Closed';
  const full = policy.inUse >= policy.allowed;
  return h(
    'tr',
    {},
    h('th', { scope: 'row', text: policy.name }),
    h(
      'td',
      {},
      badge(
        'budget',
        full ? 'Full' : 'Free',
        full ? '■' : '□',
        `${String(policy.inUse)} of ${String(policy.allowed)} in use`,
      ),
      h('div', {
        class: 'muted',
        text: `maxConcurrent ${policy.maxConcurrent} over ${String(policy.governedNodes)} governed node${policy.governedNodes === 1 ? '' : 's'}`,
      }),
      policy.holders.length > 0 && h('div', { class: 'muted', text: `held by ${policy.holders.join(', ')}` }),
    ),
    h(
      'td',
      {},
      badge('window', windowState, w.open ? '◉' : '◌'),
      h(
        'div',
        { class: 'muted' },
        windowText,
        !w.always && w.open && w.closesAt ? time(w.closesAt) : null,
        !w.always && !w.open && w.nextStart ? time(w.nextStart) : null,
      ),
      w.windows.length > 0 && h('div', { class: 'muted', text: w.windows.join('; ') }),
      w.problems.map((p) => h('div', { class: 'problem', text: `problem: ${p}` })),
    ),
    h(
      'td',
      {},
      `${policy.allActions ? 'every action' : policy.actions.join(', ')} on ${
        policy.nodeSelector ? `nodes matching ${policy.nodeSelector}` : 'every node'
      }`,
    ),
  );
}

/**
 * One hook attempt. An undo run is recorded with failurePolicy Ignore (its failure
 * stops nothing: the action has ended), but it is reported as a Warning and a
 * condition, so "failures ignored" is said of hook runs only.
 * @param {HookRunRow} run
 * @param {boolean} [undo]
 */
function hookRunItem(run, undo = false) {
  const what = `${run.kind} ${run.namespace}/${run.name}, attempt ${String(run.attempt)}`;
  return h(
    'li',
    { class: 'hook-run' },
    badge('hook', run.phase, HOOK_SYMBOLS[run.phase] ?? '•'),
    ` ${what}`,
    run.failurePolicy === 'Ignore' && !undo ? ' (failures ignored)' : '',
    run.job ? h('span', { class: 'muted', text: ` — Job ${run.job}` }) : '',
    h(
      'div',
      { class: 'muted' },
      'started ',
      time(run.startTime, 'not yet'),
      ', finished ',
      time(run.completionTime, 'not yet'),
    ),
    run.message ? h('div', { class: 'message', text: run.message }) : '',
  );
}

/** @param {ActionRow} action */
function timeline(action) {
  return h(
    'ol',
    { class: 'timeline', 'aria-label': `Phases of ${action.name}` },
    action.timeline.map((step) => {
      const [symbol, word] = STEP_WORDS[step.state] ?? ['•', step.state];
      return h(
        'li',
        { class: 'step', 'data-state': step.state, 'aria-current': step.state === 'current' ? 'step' : null },
        h('span', { class: 'step-symbol', 'aria-hidden': 'true', text: symbol }),
        h('strong', { class: 'step-phase', text: step.phase }),
        h('span', { class: 'step-word', text: ` ${word}` }),
        step.time ? [' ', time(step.time)] : '',
        step.note ? h('div', { class: 'message', text: step.note }) : '',
        step.hooks.length > 0 &&
          h(
            'ul',
            { class: 'hook-runs', 'aria-label': `Hook runs in ${step.phase}` },
            step.hooks.map((run) => hookRunItem(run)),
          ),
      );
    }),
  );
}

/**
 * What holds the drain, or held it when the action ended: each pod refused and the
 * PodDisruptionBudget that refuses it, longest first.
 * @param {ActionRow} action
 * @param {NonNullable<ActionRow['drain']>} drain
 */
function drainHold(action, drain) {
  return [
    h(
      'h4',
      {},
      action.finished ? 'What held the drain' : 'What holds the drain',
      h('span', { class: 'muted' }, ' — evictions refused since ', time(drain.since)),
    ),
    h(
      'ul',
      { class: 'drain-blockers', 'aria-label': `Evictions refused for ${action.name}` },
      drain.blockers.map((b) =>
        h(
          'li',
          { class: 'drain-blocker' },
          badge('blocker', 'Refused', '✗'),
          ` ${b.text}`,
          h('span', { class: 'muted' }, ' — since ', time(b.since)),
        ),
      ),
      drain.more > 0 ? h('li', { class: 'muted', text: `and ${String(drain.more)} more` }) : '',
    ),
  ];
}

/**
 * The undo of the pre-action hooks: why (not), and each run like a hook's.
 * @param {ActionRow} action
 * @param {NonNullable<ActionRow['undo']>} undo
 */
function undoPart(action, undo) {
  const parts = [
    h('h4', { text: 'Undo of the pre-action hooks' }),
    h('div', { class: 'message', text: undo.reason }),
  ];
  if (undo.runs.length > 0)
    parts.push(
      h(
        'ul',
        { class: 'hook-runs', 'aria-label': `Undo runs of ${action.name}` },
        undo.runs.map((run) => hookRunItem(run, true)),
      ),
    );
  return parts;
}

/** @param {ActionRow} action */
function actionDetails(action) {
  const parts = [h('h3', { text: `Timeline of ${action.name}` }), timeline(action)];
  if (action.drain) parts.push(...drainHold(action, action.drain));
  if (action.undo) parts.push(...undoPart(action, action.undo));
  if (action.checks.length > 0) {
    parts.push(
      h('h4', { text: 'Checks it was judged on' }),
      h(
        'ul',
        { class: 'judged' },
        action.checks.map((c) => {
          const state = c.bypassed
            ? 'Bypassed'
            : c.notChecked
              ? 'NotChecked'
              : c.healthy
                ? 'Healthy'
                : 'Unhealthy';
          const symbol = c.bypassed || c.notChecked ? '–' : c.healthy ? '✓' : '✗';
          return h(
            'li',
            {},
            badge('check-state', state, symbol),
            ` ${c.name}`,
            c.probeTime ? [' at ', time(c.probeTime)] : '',
            c.message ? h('div', { class: 'message', text: c.message }) : '',
          );
        }),
      ),
    );
  }
  if (action.conditions.length > 0) {
    parts.push(
      h('h4', { text: 'Conditions' }),
      h(
        'ul',
        { class: 'conditions' },
        action.conditions.map((c) =>
          h(
            'li',
            {},
            h('strong', { text: c.type }),
            ` ${c.status} (${c.reason}) since `,
            time(c.time),
            c.message ? h('div', { class: 'message', text: c.message }) : '',
          ),
        ),
      ),
    );
  }
  const boots = [
    action.bootIDBefore && `boot ID before: ${action.bootIDBefore}`,
    action.bootIDAfter && `after: ${action.bootIDAfter}`,
  ].filter(Boolean);
  if (boots.length > 0) parts.push(h('p', { class: 'muted', text: boots.join(', ') }));
  return parts;
}

/** @param {ActionRow} action */
function actionBody(action) {
  const detailsId = `timeline-${action.name}`;
  const open = expanded.has(action.name);
  const bypass = action.bypass
    ? `${[action.bypass.healthChecks && 'health checks', action.bypass.hooks && 'hooks'].filter(Boolean).join(' and ')}: ${action.bypass.reason}`
    : 'none';
  const phaseWord = action.cancelling ? `${action.phase} (cancelling)` : action.phase;
  return h(
    'tbody',
    { class: 'action', 'data-finished': action.finished },
    h(
      'tr',
      {},
      h(
        'th',
        { scope: 'row' },
        h('div', { text: action.name }),
        h('div', {
          class: 'muted',
          text: [action.action, action.target, action.execution].filter(Boolean).join(' · '),
        }),
      ),
      h('td', { text: action.node }),
      h(
        'td',
        {},
        badge('phase', action.phase, PHASE_SYMBOLS[action.phase] ?? (action.finished ? '•' : '▶'), phaseWord),
        h(
          'div',
          { class: 'muted' },
          'since ',
          time(action.completionTime ?? action.phaseTime ?? action.requestedAt),
        ),
        h('div', { class: 'message', text: action.message }),
      ),
      h('td', { text: action.requestedBy }),
      h(
        'td',
        { class: action.bypass ? 'bypass' : 'muted' },
        action.bypass ? badge('bypass', 'Bypass', '!', bypass) : bypass,
      ),
      h(
        'td',
        {},
        h(
          'button',
          {
            type: 'button',
            class: 'disclosure',
            'aria-expanded': open ? 'true' : 'false',
            'aria-controls': detailsId,
            'data-toggle': action.name,
            'data-focus-key': `toggle:${action.name}`,
          },
          h('span', { class: 'disclosure-symbol', 'aria-hidden': 'true', text: open ? '▾' : '▸' }),
          ' Timeline',
          h('span', { class: 'visually-hidden', text: ` of ${action.name}` }),
        ),
      ),
    ),
    h(
      'tr',
      { class: 'details', id: detailsId, hidden: !open },
      h('td', { colspan: '6' }, actionDetails(action)),
    ),
  );
}

/** @param {NodeRow} node */
function nodeRow(node) {
  const ready = node.exists ? node.ready : 'Gone';
  const readyWord = { True: 'Ready', False: 'Not ready', Unknown: 'Unknown', Gone: 'Deleted' }[ready];
  return h(
    'tr',
    {},
    h('th', { scope: 'row', text: node.name }),
    h(
      'td',
      {},
      badge('node-ready', ready, ready === 'True' ? '✓' : ready === 'False' ? '✗' : '?', readyWord),
      node.unschedulable ? h('div', { class: 'muted', text: 'cordoned' }) : '',
    ),
    h('td', {}, node.preready ? badge('preready', 'Held', '⏸', 'yes: preready taint') : 'no'),
    h('td', { text: node.actions.length > 0 ? node.actions.join(', ') : '—' }),
  );
}

// ---------------------------------------------------------------------------------
// Patching: replace only the rows whose data changed, keep their order, keep focus.

/**
 * `noticeOf` says what about an item is worth drawing the eye to (a check's state, not
 * its probe time): only a change of that highlights the row.
 * @template T
 * @param {string} section
 * @param {HTMLElement} container
 * @param {T[]} items
 * @param {(item: T) => string} keyOf
 * @param {(item: T) => HTMLElement} render
 * @param {(item: T) => string} noticeOf
 */
function patch(section, container, items, keyOf, render, noticeOf) {
  let rows = rendered.get(section);
  if (!rows) {
    rows = new Map();
    rendered.set(section, rows);
  }
  const wanted = new Set();
  const first =
    [...container.children].find((el) => el instanceof HTMLElement && el.dataset.key !== undefined) ?? null;
  let cursor = first;
  for (const item of items) {
    const key = keyOf(item);
    wanted.add(key);
    const data = JSON.stringify(item);
    let row = rows.get(key);
    const notice = noticeOf(item);
    if (!row || row.data !== data) {
      const element = render(item);
      element.dataset.key = key;
      if (row) {
        row.element.replaceWith(element);
        if (row.notice !== notice) element.classList.add('changed');
        if (cursor === row.element) cursor = element;
      }
      row = { element, data, notice };
      rows.set(key, row);
    }
    // Moving an element that holds the focus would drop it: move only what is out of place.
    if (row.element !== cursor) container.insertBefore(row.element, cursor);
    else cursor = cursor.nextElementSibling;
  }
  for (const [key, row] of rows) {
    if (!wanted.has(key)) {
      row.element.remove();
      rows.delete(key);
    }
  }
}

/** @param {DashboardView} view */
function render(view) {
  const focusKey = focusKeyOf(document.activeElement);
  const s = view.summary;
  const summary = [
    `${String(s.checks.total)} check${s.checks.total === 1 ? '' : 's'}: ${String(s.checks.healthy)} healthy, ${String(s.checks.unhealthy)} unhealthy, ${String(s.checks.unknown)} unknown`,
    `${String(s.actionsInProgress)} action${s.actionsInProgress === 1 ? '' : 's'} in progress, ${String(s.actionsFinished)} finished`,
  ];
  byId('summary').textContent = `${summary.join('. ')}.`;
  const instance = byId('instance');
  instance.hidden = !view.instance;
  instance.textContent = view.instance ? `controller instance ${view.instance}` : '';

  section(
    'checks',
    view.checks,
    (c) => c.name,
    checkRow,
    (c) => c.state,
  );
  const policies = view.policies ?? [];
  section(
    'policies',
    policies,
    (p) => p.name,
    policyRow,
    (p) => `${p.inUse} ${p.window.open}`,
  );
  byId('policies-empty').textContent =
    view.policies === null
      ? 'This controller does not watch ActionPolicies (it runs without the gate).'
      : 'No ActionPolicies: one action at a time cluster-wide, never two control-plane nodes at once.';
  section(
    'actions',
    view.actions,
    (a) => a.name,
    actionBody,
    (a) => a.phase,
  );
  for (const name of expanded) if (!view.actions.some((a) => a.name === name)) expanded.delete(name);
  const omitted = byId('actions-omitted');
  omitted.hidden = view.actionsOmitted === 0 && !view.actionsHidden;
  omitted.textContent = view.actionsHidden
    ? 'Actions are shown only to readers allowed to list NodeActions (a bearer token, as for GET /v1/actions), unless the operator lets anonymous readers see them (chart value dashboard.anonymousActions).'
    : `${String(view.actionsOmitted)} older finished actions are not shown (kubectl get nodeactions lists them).`;
  section(
    'nodes',
    view.nodes,
    (n) => n.name,
    nodeRow,
    (n) => `${n.ready} ${n.preready}`,
  );

  if (focusKey && focusKeyOf(document.activeElement) !== focusKey) {
    const target = document.querySelector(`[data-focus-key="${CSS.escape(focusKey)}"]`);
    if (target instanceof HTMLElement) target.focus({ preventScroll: true });
  }
}

/** @param {Element | null} element */
function focusKeyOf(element) {
  return element instanceof HTMLElement ? element.dataset.focusKey : undefined;
}

/**
 * @template T
 * @param {string} name
 * @param {T[]} items
 * @param {(item: T) => string} keyOf
 * @param {(item: T) => HTMLElement} renderRow
 * @param {(item: T) => string} noticeOf
 */
function section(name, items, keyOf, renderRow, noticeOf) {
  const container = name === 'actions' ? byId('actions-table') : byId(`${name}-body`);
  patch(name, container, items, keyOf, renderRow, noticeOf);
  byId(`${name}-empty`).hidden = items.length > 0;
  // The scrolling wrapper is a keyboard stop: hide it with its table, not only the table.
  const wrapper = byId(`${name}-table`).parentElement;
  if (wrapper) wrapper.hidden = items.length === 0;
}

// ---------------------------------------------------------------------------------
// What changed, in words, for the polite live region.

/**
 * @template {{ name: string }} T
 * @param {T[]} list
 * @returns {Map<string, T>}
 */
function byName(list) {
  return new Map(list.map((x) => [x.name, x]));
}

/**
 * @param {DashboardView | undefined} before
 * @param {DashboardView} after
 */
function changes(before, after) {
  if (!before) return [];
  const out = [];
  const checks = byName(before.checks);
  for (const c of after.checks) {
    const was = checks.get(c.name);
    if (!was) out.push(`Check ${c.name} added: ${c.state}.`);
    else if (was.state !== c.state) out.push(`Check ${c.name} is now ${c.state}: ${c.message}`);
  }
  for (const name of checks.keys()) {
    if (!after.checks.some((c) => c.name === name)) out.push(`Check ${name} removed.`);
  }
  const actions = byName(before.actions);
  for (const a of after.actions) {
    const was = actions.get(a.name);
    if (!was)
      out.push(`Action ${a.name}: ${a.action} of ${a.node}, requested by ${a.requestedBy}, is ${a.phase}.`);
    else if (was.phase !== a.phase)
      out.push(`Action ${a.name} (${a.action} of ${a.node}) is now ${a.phase}.`);
  }
  const policies = byName(before.policies ?? []);
  for (const p of after.policies ?? []) {
    const was = policies.get(p.name);
    if (was && was.window.open !== p.window.open)
      out.push(`Policy ${p.name}: maintenance window ${p.window.open ? 'opened' : 'closed'}.`);
  }
  return out;
}

/** @param {string[]} messages */
function announce(messages) {
  const log = byId('changes-log');
  const now = new Date().toISOString();
  for (const message of messages) log.prepend(h('li', {}, time(now), ` ${message}`));
  while (log.children.length > CHANGES_KEPT) log.lastElementChild?.remove();
}

// ---------------------------------------------------------------------------------
// The connection.

/**
 * @param {'live' | 'reconnecting' | 'offline'} state
 * @param {string} text
 */
function connection(state, text) {
  const element = byId('connection');
  const words = byId('connection-text');
  // Rewriting the same words would have some screen readers announce them again.
  if (element.dataset.state === state && words.textContent === text) return;
  element.dataset.state = state;
  const symbol = element.querySelector('.connection-symbol');
  if (symbol) symbol.textContent = state === 'live' ? '●' : '○';
  words.textContent = text;
}

function connect() {
  const source = new EventSource(new URL('v1/dashboard/events', document.baseURI));
  source.addEventListener('open', () => connection('live', 'live'));
  source.addEventListener('snapshot', (event) => {
    /** @type {DashboardView} */
    const view = JSON.parse(event.data);
    connection('live', 'live');
    announce(changes(previous, view));
    render(view);
    previous = view;
    const updated = byId('updated');
    updated.replaceChildren('updated ', time(new Date().toISOString()));
  });
  source.addEventListener('error', () => {
    if (source.readyState === EventSource.CLOSED) {
      // The browser gives up on an HTTP error (a 503 at the stream limit): try again later.
      connection('offline', `disconnected — retrying in ${String(RECONNECT_MS / 1000)} s`);
      window.setTimeout(connect, RECONNECT_MS);
    } else {
      connection('reconnecting', 'reconnecting…');
    }
  });
}

byId('actions-table').addEventListener('click', (event) => {
  const button = event.target instanceof Element ? event.target.closest('button[data-toggle]') : null;
  const name = button instanceof HTMLElement ? button.dataset.toggle : undefined;
  if (!button || name === undefined) return;
  const open = button.getAttribute('aria-expanded') !== 'true';
  if (open) expanded.add(name);
  else expanded.delete(name);
  button.setAttribute('aria-expanded', String(open));
  const symbol = button.querySelector('.disclosure-symbol');
  if (symbol) symbol.textContent = open ? '▾' : '▸';
  const details = document.getElementById(button.getAttribute('aria-controls') ?? '');
  if (details) details.hidden = !open;
});

connect();
